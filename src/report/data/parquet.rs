//! A [`Table`] as a Parquet file: one optional column per table column
//! (strings UTF-8, integers INT64, numbers DOUBLE, booleans, lists of
//! numbers as Parquet's three-level LIST), uncompressed, written with the
//! `parquet` crate's column writers.

use std::sync::Arc;

use parquet::basic::{LogicalType, Repetition, Type as Physical};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::errors::ParquetError;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type;

use super::{Table, Values};

/// Rows per row group: readers can skip whole groups by their statistics.
const ROWS_PER_GROUP: usize = 131_072;

fn field(name: &str, v: &Values) -> Result<Type, ParquetError> {
    let prim = |physical, logical| {
        Type::primitive_type_builder(name, physical)
            .with_repetition(Repetition::OPTIONAL)
            .with_logical_type(logical)
            .build()
    };
    match v {
        Values::Str(_) => prim(Physical::BYTE_ARRAY, Some(LogicalType::String)),
        Values::I64(_) => prim(Physical::INT64, None),
        Values::F64(_) => prim(Physical::DOUBLE, None),
        Values::Bool(_) => prim(Physical::BOOLEAN, None),
        Values::F64List(_) => {
            let element = Type::primitive_type_builder("element", Physical::DOUBLE)
                .with_repetition(Repetition::REQUIRED)
                .build()?;
            let list = Type::group_type_builder("list")
                .with_repetition(Repetition::REPEATED)
                .with_fields(vec![Arc::new(element)])
                .build()?;
            Type::group_type_builder(name)
                .with_repetition(Repetition::OPTIONAL)
                .with_logical_type(Some(LogicalType::List))
                .with_fields(vec![Arc::new(list)])
                .build()
        }
    }
}

/// The present values of `rows` and their definition levels (1 present,
/// 0 null).
fn flat<T: Clone>(rows: &[Option<T>]) -> (Vec<T>, Vec<i16>) {
    let values = rows.iter().flatten().cloned().collect();
    let def = rows.iter().map(|r| i16::from(r.is_some())).collect();
    (values, def)
}

/// Write `t` to `out` as one Parquet file with `metadata` as its
/// key-value metadata.
pub fn write_parquet<W: std::io::Write + Send>(
    t: &Table,
    metadata: Vec<(String, String)>,
    out: W,
) -> Result<(), ParquetError> {
    let fields = t
        .columns
        .iter()
        .map(|c| field(&c.name, &c.values).map(Arc::new))
        .collect::<Result<Vec<_>, _>>()?;
    let schema = Arc::new(
        Type::group_type_builder("tunectl")
            .with_fields(fields)
            .build()?,
    );
    let props = WriterProperties::builder()
        .set_created_by(format!("tunectl {}", env!("CARGO_PKG_VERSION")))
        .set_key_value_metadata(Some(
            metadata
                .into_iter()
                .map(|(k, v)| KeyValue::new(k, v))
                .collect(),
        ))
        .build();
    let mut writer = SerializedFileWriter::new(out, schema, Arc::new(props))?;
    let mut start = 0;
    // An empty table is a file with its schema and no row group.
    while start < t.rows {
        let end = (start + ROWS_PER_GROUP).min(t.rows);
        let mut group = writer.next_row_group()?;
        for c in &t.columns {
            let Some(mut col) = group.next_column()? else {
                return Err(ParquetError::General(format!(
                    "column {} has no writer",
                    c.name
                )));
            };
            match &c.values {
                Values::Str(v) => {
                    // One buffer per distinct value, shared by its rows.
                    let dict: Vec<ByteArray> =
                        v.dict.iter().map(|s| ByteArray::from(s.as_str())).collect();
                    let rows = &v.keys[start..end];
                    let vals: Vec<ByteArray> = rows
                        .iter()
                        .flatten()
                        .map(|k| dict[*k as usize].clone())
                        .collect();
                    let def: Vec<i16> = rows.iter().map(|r| i16::from(r.is_some())).collect();
                    col.typed::<ByteArrayType>()
                        .write_batch(&vals, Some(&def), None)?;
                }
                Values::I64(v) => {
                    let (vals, def) = flat(&v[start..end]);
                    col.typed::<Int64Type>()
                        .write_batch(&vals, Some(&def), None)?;
                }
                Values::F64(v) => {
                    let (vals, def) = flat(&v[start..end]);
                    col.typed::<DoubleType>()
                        .write_batch(&vals, Some(&def), None)?;
                }
                Values::Bool(v) => {
                    let (vals, def) = flat(&v[start..end]);
                    col.typed::<BoolType>()
                        .write_batch(&vals, Some(&def), None)?;
                }
                Values::F64List(v) => {
                    // Levels of an optional list of required numbers: a
                    // null list is (def 0), an empty one (def 1), each
                    // element (def 2), repetition 0 at a row's first
                    // element and 1 after it.
                    let mut vals = Vec::new();
                    let mut def = Vec::new();
                    let mut rep = Vec::new();
                    for row in &v[start..end] {
                        match row {
                            None => {
                                def.push(0);
                                rep.push(0);
                            }
                            Some(xs) if xs.is_empty() => {
                                def.push(1);
                                rep.push(0);
                            }
                            Some(xs) => {
                                for (i, x) in xs.iter().enumerate() {
                                    vals.push(*x);
                                    def.push(2);
                                    rep.push(i16::from(i > 0));
                                }
                            }
                        }
                    }
                    col.typed::<DoubleType>()
                        .write_batch(&vals, Some(&def), Some(&rep))?;
                }
            }
            col.close()?;
        }
        group.close()?;
        start = end;
    }
    writer.close()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    use parquet::record::Field;

    use super::super::{Column, Table, Values};
    use super::write_parquet;

    /// Every kind of column, nulls and empty lists included, reads back
    /// with the crate's own reader as written.
    #[test]
    fn a_table_reads_back_as_written() {
        let t = Table {
            rows: 3,
            columns: vec![
                Column {
                    name: "s".into(),
                    values: Values::Str([Some("a"), None, Some("é")].into_iter().collect()),
                },
                Column {
                    name: "knob.batch".into(),
                    values: Values::I64(vec![Some(1), Some(-2), None]),
                },
                Column {
                    name: "x".into(),
                    values: Values::F64(vec![None, Some(0.5), Some(f64::NAN)]),
                },
                Column {
                    name: "b".into(),
                    values: Values::Bool(vec![Some(true), Some(false), None]),
                },
                Column {
                    name: "metric.t".into(),
                    values: Values::F64List(vec![Some(vec![1.0, 2.0]), None, Some(vec![])]),
                },
            ],
        };
        let mut buf = Vec::new();
        write_parquet(&t, vec![("k".into(), "v".into())], &mut buf).expect("written");
        let reader = SerializedFileReader::new(bytes::Bytes::from(buf)).expect("readable");
        let meta = reader.metadata().file_metadata();
        assert_eq!(meta.num_rows(), 3);
        let kv = meta.key_value_metadata().expect("metadata");
        assert_eq!(kv[0].key, "k");
        let rows: Vec<Vec<(String, Field)>> = reader
            .get_row_iter(None)
            .expect("rows")
            .map(|r| {
                r.expect("row")
                    .get_column_iter()
                    .map(|(n, f)| (n.clone(), f.clone()))
                    .collect()
            })
            .collect();
        assert_eq!(rows[0][0], ("s".into(), Field::Str("a".into())));
        assert_eq!(rows[1][0].1, Field::Null);
        assert_eq!(rows[2][0].1, Field::Str("é".into()));
        assert_eq!(rows[1][1], ("knob.batch".into(), Field::Long(-2)));
        assert_eq!(rows[2][1].1, Field::Null);
        assert_eq!(rows[1][2].1, Field::Double(0.5));
        assert!(matches!(rows[2][2].1, Field::Double(x) if x.is_nan()));
        assert_eq!(rows[0][3].1, Field::Bool(true));
        assert_eq!(rows[2][3].1, Field::Null);
        let list = |i: usize| format!("{}", rows[i][4].1);
        assert_eq!(list(0), "[1.0, 2.0]");
        assert_eq!(rows[1][4].1, Field::Null);
        assert_eq!(list(2), "[]");
    }

    #[test]
    fn an_empty_table_is_a_file_with_its_columns() {
        let t = Table {
            rows: 0,
            columns: vec![Column {
                name: "s".into(),
                values: Values::Str(Default::default()),
            }],
        };
        let mut buf = Vec::new();
        write_parquet(&t, vec![], &mut buf).expect("written");
        let reader = SerializedFileReader::new(bytes::Bytes::from(buf)).expect("readable");
        assert_eq!(reader.metadata().file_metadata().num_rows(), 0);
        assert_eq!(
            reader
                .metadata()
                .file_metadata()
                .schema_descr()
                .num_columns(),
            1
        );
    }
}
