//! The compacted index: `<study>/index/compact.json`, what a scan needs of
//! every readable attempt record plus what the index covers, so that
//! report, status and resume over 100,000 attempts read one object and
//! list only what was written since (see `log.rs` and `scan.rs`).
//!
//! Compact: records are rows of a JSON array, the strings and JSON values
//! that repeat between records (spec hash, labels, host, host class,
//! configs, cells, outputs, failures) are stored once in tables and named
//! by position, and what no scan reads (the rendered command, the output
//! tails, the lost reason, start and finish times) is left out. The index is derived data:
//! anything wrong with it (unreadable, another schema or study, a position
//! outside its tables) makes a scan ignore it, say so, and read the ledger
//! instead.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use object_store::path::Path as ObjPath;
use object_store::{ObjectStoreExt, PutPayload};
use serde::{Deserialize, Serialize};

use super::log::Mark;
use super::records::{
    AttemptRecord, AttemptStatus, ExitInfo, Failure, MetricSamples, SharedStr, Text,
};
use super::{CorruptObject, Ledger, LedgerError};
use crate::trial::RoleKind;

/// The index's own schema (its records are attempt records of schema 1).
pub const INDEX_SCHEMA: u32 = 2;

/// Rewrite the index once a scan has read this many attempt objects that
/// it does not hold (and, in a process that wrote it already, see
/// `REBUILD_SHARE` and `REBUILD_EVERY`).
pub const REBUILD_AFTER: usize = 256;

/// In a process that wrote the index already: rewrite it when the records
/// it does not hold are this share of all...
pub const REBUILD_SHARE: f64 = 0.25;

/// ... or when it wrote it this long ago.
pub const REBUILD_EVERY: std::time::Duration = std::time::Duration::from_secs(300);

/// Below this many attempt records no index is written: listing and
/// reading everything is as cheap. `TUNECTL_LEDGER_INDEX_MIN` overrides it
/// (tests use 1).
pub const INDEX_MIN: usize = 256;

pub fn index_min() -> usize {
    std::env::var("TUNECTL_LEDGER_INDEX_MIN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(INDEX_MIN)
}

pub fn key(study: &str) -> ObjPath {
    ObjPath::from(format!("{study}/index/compact.json"))
}

/// The index of earlier versions (schema 1, whole records): removed when
/// the compact one is written.
pub fn old_key(study: &str) -> ObjPath {
    ObjPath::from(format!("{study}/index/attempts.json"))
}

/// What an index holds, decoded.
#[derive(Debug, Default)]
pub struct Contents {
    pub streams: BTreeMap<String, Mark>,
    pub unresolved: BTreeSet<String>,
    pub voids: Vec<(String, String)>,
    pub corrupt: Vec<CorruptObject>,
    /// Every readable attempt record, voided ones included, slimmed
    /// (see [`slim`]).
    pub records: Vec<std::sync::Arc<AttemptRecord>>,
}

/// One attempt record as a row: positions refer to `strings` (s) and
/// `values` (v).
#[derive(Debug, Serialize, Deserialize)]
struct Row(
    String,               // trial_key
    String,               // attempt_id
    u32,                  // s tunectl_version
    u32,                  // s spec_hash
    u32,                  // v config
    u32,                  // s config_label
    u64,                  // config_index
    bool,                 // is_baseline
    u32,                  // v cell
    u32,                  // s cell_label
    u32,                  // cell_index
    u32,                  // repeat
    u32,                  // s role
    Option<f64>,          // fidelity
    u32,                  // s host
    u32,                  // s host_class
    u32,                  // s fingerprint
    u32,                  // slot
    f64,                  // duration_s
    Option<f64>,          // run_s
    u32,                  // warmup_runs
    u8,                   // status: 0 ok, 1 failed, 2 lost
    Option<u32>,          // v failure
    Option<u32>,          // v exit
    Vec<(u32, Vec<f64>)>, // metrics: (s name, samples)
    Option<u32>,          // s digest
    u32,                  // v outputs
    Option<u32>,          // v output_values (NaN and infinities as strings)
    // readings (budget, value) of a `kind: tpe` rung; absent in an index
    // written before rungs had readings (it holds none).
    #[serde(default)] Vec<(f64, f64)>,
);

/// An index file, decoded (see [`decode`]): its attempts are turned into
/// records row by row as the JSON is parsed, never held as rows.
struct File {
    schema: u32,
    study_id: String,
    /// Per log stream: entries listed through, closed.
    streams: BTreeMap<String, Mark>,
    /// Objects named by log entries that were not there when last looked
    /// for.
    unresolved: Vec<String>,
    /// `.void` markers: (trial key, attempt id).
    voids: Vec<(String, String)>,
    /// Unreadable attempt objects: (key, reason).
    corrupt: Vec<(String, String)>,
    records: Vec<std::sync::Arc<AttemptRecord>>,
}

/// Reads an index file's JSON object; `study` is the study it must be.
struct FileVisitor<'a> {
    study: &'a str,
    /// The file's size: no more rows than bytes can follow.
    bytes: usize,
}

impl<'de> serde::de::Visitor<'de> for FileVisitor<'_> {
    type Value = File;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a ledger index object")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<File, A::Error> {
        use serde::de::Error;
        let mut schema = None;
        let mut study_id: Option<String> = None;
        let mut streams = None;
        let mut unresolved = None;
        let mut voids = None;
        let mut corrupt = None;
        let mut strings: Option<Vec<String>> = None;
        let mut values: Option<Vec<serde_json::Value>> = None;
        let mut records = None;
        let bytes_hint = self.bytes / 16;
        let mut early: Option<Vec<Row>> = None;
        let mut rows: Option<usize> = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "schema" => {
                    let v: u32 = map.next_value()?;
                    // Another schema's rows may not be rows of this one:
                    // stop before reading them.
                    if v != INDEX_SCHEMA {
                        return Err(A::Error::custom(format!(
                            "index schema {v} (this tunectl reads {INDEX_SCHEMA})"
                        )));
                    }
                    schema = Some(v);
                }
                "study_id" => {
                    let v: String = map.next_value()?;
                    if v != self.study {
                        return Err(A::Error::custom(format!("the index is study `{v}`'s")));
                    }
                    study_id = Some(v);
                }
                "streams" => streams = Some(map.next_value()?),
                "unresolved" => unresolved = Some(map.next_value()?),
                "voids" => voids = Some(map.next_value()?),
                "corrupt" => corrupt = Some(map.next_value()?),
                "strings" => strings = Some(map.next_value()?),
                "values" => values = Some(map.next_value()?),
                "rows" => rows = map.next_value()?,
                // The tables come first in every index tunectl writes, so
                // rows become records as they are parsed; in any other
                // order (a JSON tool rewrote the file) they wait as rows.
                "attempts" => match (strings.take(), values.take()) {
                    (Some(strings), Some(values)) => {
                        records = Some(map.next_value_seed(Rows {
                            lookup: Lookup::new(strings, values),
                            study_id: SharedStr::from(self.study),
                            // Bounded: a damaged count costs no memory.
                            expected: rows.unwrap_or(0).min(bytes_hint),
                        })?);
                    }
                    (s, v) => {
                        (strings, values) = (s, v);
                        early = Some(map.next_value::<Vec<Row>>()?);
                    }
                },
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        let missing = |f: &'static str| A::Error::missing_field(f);
        if let Some(rows) = early {
            let mut lookup = Lookup::new(
                strings.ok_or_else(|| missing("strings"))?,
                values.ok_or_else(|| missing("values"))?,
            );
            let study_id = SharedStr::from(self.study);
            let mut out = Vec::with_capacity(rows.len());
            for (i, row) in rows.into_iter().enumerate() {
                out.push(std::sync::Arc::new(
                    convert(&mut lookup, &study_id, i, row).map_err(A::Error::custom)?,
                ));
            }
            records = Some(out);
        }
        Ok(File {
            schema: schema.ok_or_else(|| missing("schema"))?,
            study_id: study_id.ok_or_else(|| missing("study_id"))?,
            streams: streams.ok_or_else(|| missing("streams"))?,
            unresolved: unresolved.ok_or_else(|| missing("unresolved"))?,
            voids: voids.ok_or_else(|| missing("voids"))?,
            corrupt: corrupt.ok_or_else(|| missing("corrupt"))?,
            records: records.ok_or_else(|| missing("attempts"))?,
        })
    }
}

/// The attempts array: each row made a record as soon as it is parsed.
struct Rows {
    lookup: Lookup,
    study_id: SharedStr,
    /// How many rows the index says follow.
    expected: usize,
}

impl<'de> serde::de::DeserializeSeed<'de> for Rows {
    type Value = Vec<std::sync::Arc<AttemptRecord>>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Rows {
    type Value = Vec<std::sync::Arc<AttemptRecord>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of attempt rows")
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(
        mut self,
        mut seq: A,
    ) -> Result<Vec<std::sync::Arc<AttemptRecord>>, A::Error> {
        // Each record in an allocation of its own as it is read, as a scan
        // holds them: no second copy of them all at once.
        let mut out = Vec::with_capacity(self.expected);
        while let Some(row) = seq.next_element::<Row>()? {
            let i = out.len();
            out.push(std::sync::Arc::new(
                convert(&mut self.lookup, &self.study_id, i, row)
                    .map_err(serde::de::Error::custom)?,
            ));
        }
        Ok(out)
    }
}

/// Output values with NaN and infinities, as attempt records store them.
#[derive(Serialize, Deserialize)]
struct OutputValues(#[serde(with = "super::records::values_serde")] BTreeMap<String, Vec<f64>>);

/// Drop what no scan reads: the rendered command, the output tails, the
/// lost reason, where a rung resumed from and where it was pruned, the
/// start and finish times (read the attempt object for those). A rung's
/// readings stay: a relaunch replays its search from them.
pub fn slim(mut r: AttemptRecord) -> AttemptRecord {
    r.command = Text::default();
    r.stdout_tail = Text::default();
    r.stderr_tail = Text::default();
    r.stderr_head = Text::default();
    r.lost_reason = None;
    r.resumed_from = None;
    r.pruned = None;
    r.started_at = Text::default();
    r.finished_at = Text::default();
    r
}

#[derive(Default)]
struct Tables {
    strings: Vec<String>,
    string_pos: HashMap<String, u32>,
    values: Vec<serde_json::Value>,
    value_pos: HashMap<String, u32>,
    /// Positions of values records share (by address: the records are
    /// borrowed for the whole encoding), so a shared config is written
    /// out once, not once per attempt.
    shared_pos: HashMap<usize, u32>,
}

impl Tables {
    fn s(&mut self, text: &str) -> u32 {
        if let Some(p) = self.string_pos.get(text) {
            return *p;
        }
        let p = self.strings.len() as u32;
        self.strings.push(text.to_string());
        self.string_pos.insert(text.to_string(), p);
        p
    }

    fn shared<T: Serialize>(&mut self, value: &Arc<T>) -> Result<u32, String> {
        let at = Arc::as_ptr(value) as *const () as usize;
        if let Some(p) = self.shared_pos.get(&at) {
            return Ok(*p);
        }
        let p = self.v(serde_json::to_value(&**value).map_err(|e| e.to_string())?);
        self.shared_pos.insert(at, p);
        Ok(p)
    }

    fn v(&mut self, value: serde_json::Value) -> u32 {
        let text = value.to_string();
        if let Some(p) = self.value_pos.get(&text) {
            return *p;
        }
        let p = self.values.len() as u32;
        self.values.push(value);
        self.value_pos.insert(text, p);
        p
    }
}

/// What an index is written from (borrowed from a scan's state).
pub struct View<'a> {
    pub streams: &'a BTreeMap<String, Mark>,
    pub unresolved: &'a BTreeSet<String>,
    pub voids: Vec<(&'a str, &'a str)>,
    pub corrupt: &'a [CorruptObject],
    /// Every readable record, voided ones included.
    pub records: Vec<&'a AttemptRecord>,
}

#[derive(Serialize)]
struct FileOut<'a> {
    schema: u32,
    study_id: &'a str,
    written_at: String,
    streams: &'a BTreeMap<String, Mark>,
    unresolved: &'a BTreeSet<String>,
    voids: &'a [(&'a str, &'a str)],
    corrupt: Vec<(&'a str, &'a str)>,
    strings: Vec<String>,
    values: Vec<serde_json::Value>,
    /// How many attempts follow: a reader sizes its records once (a hint;
    /// indexes without it read as well).
    rows: usize,
    attempts: Vec<Row>,
}

/// Encode an index. Fails only when a record cannot be put in JSON.
pub fn encode(study: &str, c: &View) -> Result<Vec<u8>, String> {
    let mut t = Tables::default();
    let mut rows = Vec::with_capacity(c.records.len());
    for r in &c.records {
        let failure = match &r.failure {
            Some(f) => Some(t.v(serde_json::to_value(f).map_err(|e| e.to_string())?)),
            None => None,
        };
        let exit = match &r.exit {
            Some(x) => Some(t.v(serde_json::to_value(x).map_err(|e| e.to_string())?)),
            None => None,
        };
        let output_values = if r.output_values.is_empty() {
            None
        } else {
            Some(
                t.v(serde_json::to_value(OutputValues(r.output_values.clone()))
                    .map_err(|e| e.to_string())?),
            )
        };
        let outputs = t.shared(&r.outputs)?;
        let metrics = r.metrics.iter().map(|(k, v)| (t.s(k), v.clone())).collect();
        rows.push(Row(
            r.trial_key.clone(),
            r.attempt_id.clone(),
            t.s(&r.tunectl_version),
            t.s(&r.spec_hash),
            t.shared(&r.config)?,
            t.s(&r.config_label),
            r.config_index,
            r.is_baseline,
            t.shared(&r.cell)?,
            t.s(&r.cell_label),
            r.cell_index,
            r.repeat,
            t.s(r.role.as_str()),
            r.fidelity,
            t.s(&r.host),
            t.s(&r.host_class),
            t.s(&r.fingerprint),
            r.slot,
            r.duration_s,
            r.run_s,
            r.warmup_runs,
            match r.status {
                AttemptStatus::Ok => 0,
                AttemptStatus::Failed => 1,
                AttemptStatus::Lost => 2,
                AttemptStatus::Pruned => 3,
            },
            failure,
            exit,
            metrics,
            r.digest.as_deref().map(|d| t.s(d)),
            outputs,
            output_values,
            r.readings.clone(),
        ));
    }
    let file = FileOut {
        schema: INDEX_SCHEMA,
        study_id: study,
        written_at: chrono::Utc::now().to_rfc3339(),
        streams: c.streams,
        unresolved: c.unresolved,
        voids: &c.voids,
        corrupt: c
            .corrupt
            .iter()
            .map(|o| (o.key.as_str(), o.reason.as_str()))
            .collect(),
        strings: t.strings,
        values: t.values,
        rows: rows.len(),
        attempts: rows,
    };
    serde_json::to_vec(&file).map_err(|e| e.to_string())
}

/// The index's tables, made shareable once: every record built from a
/// row shares its strings, configs, cells and outputs with the others
/// (a clone of a position is a reference count, not a copy), and typed
/// values are decoded once per position.
struct Lookup {
    strings: Vec<SharedStr>,
    values: Vec<Arc<serde_json::Value>>,
    failures: Vec<Option<Failure>>,
    exits: Vec<Option<ExitInfo>>,
    outputs: Vec<Option<Arc<BTreeMap<String, String>>>>,
    output_values: Vec<Option<BTreeMap<String, Vec<f64>>>>,
}

impl Lookup {
    fn new(strings: Vec<String>, values: Vec<serde_json::Value>) -> Lookup {
        let n = values.len();
        Lookup {
            strings: strings.into_iter().map(SharedStr::from).collect(),
            values: values.into_iter().map(Arc::new).collect(),
            failures: vec![None; n],
            exits: vec![None; n],
            outputs: vec![None; n],
            output_values: vec![None; n],
        }
    }

    fn s(&self, p: u32, row: usize) -> Result<SharedStr, String> {
        self.strings.get(p as usize).cloned().ok_or_else(|| {
            format!("attempt {row} refers to string {p}, which the index does not hold")
        })
    }

    fn value(&self, p: u32, row: usize) -> Result<Arc<serde_json::Value>, String> {
        self.values.get(p as usize).cloned().ok_or_else(|| {
            format!("attempt {row} refers to value {p}, which the index does not hold")
        })
    }
}

/// `memo[p]`, decoded from `values[p]` the first time.
fn typed<T: Clone>(
    values: &[Arc<serde_json::Value>],
    memo: &mut [Option<T>],
    p: u32,
    row: usize,
    decode: impl Fn(&serde_json::Value) -> Result<T, serde_json::Error>,
) -> Result<T, String> {
    let missing = || format!("attempt {row} refers to value {p}, which the index does not hold");
    let slot = memo.get_mut(p as usize).ok_or_else(missing)?;
    if let Some(v) = slot {
        return Ok(v.clone());
    }
    let raw = values.get(p as usize).ok_or_else(missing)?;
    let v = decode(raw).map_err(|e| format!("attempt {row}: value {p}: {e}"))?;
    *slot = Some(v.clone());
    Ok(v)
}

/// Row `i` into a record.
fn convert(
    t: &mut Lookup,
    study_id: &SharedStr,
    i: usize,
    row: Row,
) -> Result<AttemptRecord, String> {
    let name_ok = |x: &str| !x.is_empty() && !x.contains('/');
    {
        let Row(
            trial_key,
            attempt_id,
            version,
            spec_hash,
            config,
            config_label,
            config_index,
            is_baseline,
            cell,
            cell_label,
            cell_index,
            repeat,
            role,
            fidelity,
            host,
            host_class,
            fingerprint,
            slot,
            duration_s,
            run_s,
            warmup_runs,
            status,
            failure,
            exit,
            metrics,
            digest,
            outputs,
            output_values,
            readings,
        ) = row;
        if !name_ok(&trial_key) || !name_ok(&attempt_id) {
            return Err(format!("attempt {i} has no usable trial key or attempt id"));
        }
        let status = match status {
            0 => AttemptStatus::Ok,
            1 => AttemptStatus::Failed,
            2 => AttemptStatus::Lost,
            3 => AttemptStatus::Pruned,
            other => return Err(format!("attempt {i} has status {other}")),
        };
        let mut m = MetricSamples::new();
        for (name, samples) in metrics {
            m.insert(t.s(name, i)?, samples);
        }
        let failure = match failure {
            Some(p) => Some(typed(&t.values, &mut t.failures, p, i, |v| {
                Failure::deserialize(v)
            })?),
            None => None,
        };
        let exit = match exit {
            Some(p) => Some(typed(&t.values, &mut t.exits, p, i, |v| {
                ExitInfo::deserialize(v)
            })?),
            None => None,
        };
        let outputs = typed(&t.values, &mut t.outputs, outputs, i, |v| {
            BTreeMap::<String, String>::deserialize(v).map(Arc::new)
        })?;
        let output_values = match output_values {
            Some(p) => typed(&t.values, &mut t.output_values, p, i, |v| {
                OutputValues::deserialize(v).map(|o| o.0)
            })?,
            None => BTreeMap::new(),
        };
        Ok(AttemptRecord {
            schema: super::records::SCHEMA,
            tunectl_version: t.s(version, i)?,
            study_id: study_id.clone(),
            spec_hash: t.s(spec_hash, i)?,
            trial_key,
            attempt_id,
            config: t.value(config, i)?,
            config_label: t.s(config_label, i)?,
            config_index,
            is_baseline,
            cell: t.value(cell, i)?,
            cell_label: t.s(cell_label, i)?,
            cell_index,
            repeat,
            role: RoleKind::from(t.s(role, i)?.as_str()),
            fidelity,
            host: t.s(host, i)?,
            host_class: t.s(host_class, i)?,
            fingerprint: t.s(fingerprint, i)?,
            slot,
            started_at: Text::default(),
            finished_at: Text::default(),
            duration_s,
            run_s,
            warmup_runs,
            status,
            failure,
            exit,
            metrics: m,
            digest: match digest {
                Some(p) => Some(t.s(p, i)?),
                None => None,
            },
            outputs,
            output_values,
            command: Text::default(),
            stdout_tail: Text::default(),
            stderr_tail: Text::default(),
            stderr_head: Text::default(),
            lost_reason: None,
            resumed_from: None,
            pruned: None,
            readings,
        })
    }
}

/// Decode an index of `study`; `Err` says why it cannot be used.
pub fn decode(study: &str, bytes: &[u8]) -> Result<Contents, String> {
    use serde::de::Deserializer as _;
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let file = de
        .deserialize_map(FileVisitor {
            study,
            bytes: bytes.len(),
        })
        .and_then(|f| de.end().map(|()| f))
        .map_err(|e| format!("not a valid index: {e}"))?;
    // Checked as they were read; kept as they stand for what they are.
    debug_assert!(file.schema == INDEX_SCHEMA && file.study_id == study);
    let trials = format!("{study}/trials/");
    for u in &file.unresolved {
        if !u.starts_with(&trials) {
            return Err(format!("unresolved object {u} is not under {trials}"));
        }
    }
    let File {
        streams,
        unresolved,
        voids,
        corrupt,
        records,
        ..
    } = file;
    Ok(Contents {
        streams,
        unresolved: unresolved.into_iter().collect(),
        voids,
        corrupt: corrupt
            .into_iter()
            .map(|(key, reason)| CorruptObject { key, reason })
            .collect(),
        records,
    })
}

/// Why an index was not used.
#[derive(Debug)]
pub enum Unusable {
    Missing,
    Invalid(String),
}

impl Ledger {
    /// The index, decoded; `Unusable` says why not.
    pub async fn read_index(&self, study: &str) -> Result<Contents, Unusable> {
        let k = key(study);
        let bytes = match self.get_bytes(&k).await {
            Ok(Some(b)) => b,
            Ok(None) => return Err(Unusable::Missing),
            Err(e) => {
                return Err(Unusable::Invalid(format!(
                    "cannot read it: {}",
                    super::redact_error(&e.to_string())
                )));
            }
        };
        decode(study, &bytes).map_err(Unusable::Invalid)
    }

    /// Write the index (derived data: a plain overwrite), and remove an
    /// index of the old format.
    pub async fn write_index(&self, study: &str, contents: &View<'_>) -> Result<(), LedgerError> {
        let k = key(study);
        let bytes = encode(study, contents).map_err(|e| self.io_err("encode", &k, e))?;
        self.store
            .put(&k, PutPayload::from(bytes))
            .await
            .map_err(|e| self.io_err("write", &k, e))?;
        let _ = self.store.delete(&old_key(study)).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: u32) -> AttemptRecord {
        let mut r: AttemptRecord = serde_json::from_value(serde_json::json!({
            "schema": 1, "tunectl_version": "0.1.0", "study_id": "s", "spec_hash": "h",
            "trial_key": format!("{i:064x}"), "attempt_id": format!("2026-{i}"),
            "config": {"a": i % 3, "b": "x"}, "config_label": format!("a={}", i % 3),
            "config_index": i % 3, "is_baseline": i.is_multiple_of(3), "cell": {"n": 1},
            "cell_label": "n=1", "cell_index": 0, "repeat": i, "role": "sweep",
            "fidelity": null, "host": "h1", "host_class": "hc-1", "fingerprint": "fp-1",
            "slot": 0, "started_at": "t0", "finished_at": "t1", "duration_s": 1.25,
            "run_s": 0.5, "warmup_runs": 1, "status": if i == 2 { "failed" } else { "ok" },
            "failure": if i == 2 { serde_json::json!({"class": "oom", "detail": "d", "phase": "measure"}) } else { serde_json::Value::Null },
            "exit": {"code": 0, "signal": null},
            "metrics": {"t": [1.0 + f64::from(i), 2.0]}, "digest": "dd",
            "outputs": {"out.txt": "aa"}, "command": "cmd", "stdout_tail": "o",
            "stderr_tail": "e"
        }))
        .expect("record");
        if i == 1 {
            r.output_values
                .insert("v.json".into(), vec![1.5, f64::NAN, f64::INFINITY]);
        }
        if i == 3 {
            r.readings = vec![(81.0, 0.5), (243.0, 0.25)];
        }
        r
    }

    #[test]
    fn round_trip_keeps_every_field_a_scan_reads() {
        let records: Vec<AttemptRecord> = (0..4).map(record).collect();
        let streams = BTreeMap::from([(
            "x".to_string(),
            Mark {
                through: 3,
                closed: false,
            },
        )]);
        let unresolved = BTreeSet::from(["s/trials/k/a.json".to_string()]);
        let corrupt = vec![CorruptObject {
            key: "s/trials/k/b.json".into(),
            reason: "bad".into(),
        }];
        let c = View {
            streams: &streams,
            unresolved: &unresolved,
            voids: vec![("k", "a")],
            corrupt: &corrupt,
            records: records.iter().collect(),
        };
        let bytes = encode("s", &c).expect("encode");
        let back = decode("s", &bytes).expect("decode");
        assert_eq!(back.streams, streams);
        assert_eq!(back.unresolved, unresolved);
        assert_eq!(back.voids, vec![("k".to_string(), "a".to_string())]);
        assert_eq!(back.corrupt[0].key, "s/trials/k/b.json");
        assert_eq!(back.records.len(), 4);
        for (a, b) in records.into_iter().zip(back.records) {
            // NaN is not equal to itself; compare the JSON (strings).
            let a = serde_json::to_value(slim(a)).expect("a");
            let b = serde_json::to_value(b).expect("b");
            assert_eq!(a, b);
        }
        // An index written before rows had readings: rows one shorter.
        let mut v: serde_json::Value = serde_json::from_slice(&bytes).expect("json");
        for row in v["attempts"].as_array_mut().expect("rows") {
            row.as_array_mut().expect("row").pop();
        }
        let old = decode("s", v.to_string().as_bytes()).expect("an older index");
        assert_eq!(old.records.len(), 4);
        assert!(old.records.iter().all(|r| r.readings.is_empty()));
    }

    #[test]
    fn damage_is_refused_not_trusted() {
        let records: Vec<AttemptRecord> = (0..3).map(record).collect();
        let (streams, unresolved) = (BTreeMap::new(), BTreeSet::new());
        let c = View {
            streams: &streams,
            unresolved: &unresolved,
            voids: Vec::new(),
            corrupt: &[],
            records: records.iter().collect(),
        };
        let bytes = encode("s", &c).expect("encode");
        assert!(decode("other", &bytes).unwrap_err().contains("study `s`"));
        // Rows that refer outside the tables are refused whether they come
        // after the tables (as tunectl writes them, converted while
        // parsed) or before them (as a JSON tool sorting keys writes them).
        let text = String::from_utf8(bytes.clone()).expect("utf8");
        assert!(text.find("\"strings\"") < text.find("\"attempts\""));
        assert_eq!(decode("s", &bytes).map(|c| c.records.len()), Ok(3));
        let mut rows: serde_json::Value = serde_json::from_str(&text).expect("json");
        rows["attempts"][2][4] = serde_json::json!(9999);
        let streamed = format!(
            "{{\"schema\":{INDEX_SCHEMA},\"study_id\":\"s\",\"streams\":{{}},\"unresolved\":[],\"voids\":[],\"corrupt\":[],\"strings\":{},\"values\":{},\"attempts\":{}}}",
            rows["strings"], rows["values"], rows["attempts"]
        );
        let e = decode("s", streamed.as_bytes()).unwrap_err();
        assert!(e.contains("attempt 2 refers to value 9999"), "{e}");
        assert!(decode("s", &bytes[..bytes.len() / 2]).is_err());
        let text = String::from_utf8(bytes).expect("utf8");
        // A position outside the tables.
        let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
        v["attempts"][1][2] = serde_json::json!(999);
        let e = decode("s", v.to_string().as_bytes()).unwrap_err();
        assert!(e.contains("string 999"), "{e}");
        let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
        v["schema"] = serde_json::json!(1);
        assert!(decode("s", v.to_string().as_bytes()).is_err());
        let mut v: serde_json::Value = serde_json::from_str(&text).expect("json");
        v["attempts"][0][0] = serde_json::json!("../x");
        assert!(decode("s", v.to_string().as_bytes()).is_err());
    }
}
