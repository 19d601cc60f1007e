//! An attempt's samples per metric: a small sorted list, not a map.
//!
//! A record has one to a few metrics. A `BTreeMap` allocates a whole leaf
//! node (about 0.5 KiB) for its first entry, which was the second largest
//! part of a scan's memory at 100,000 attempts; this keeps the entries in
//! one vector sorted by name, with names shared between records (the
//! index's decoder hands out one copy of each). Written and read as a JSON
//! object, as the map was: the ledger's format does not change.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::SharedStr;

/// Samples per metric, sorted by metric name, each name once.
#[derive(Clone, Default, PartialEq)]
pub struct MetricSamples(Vec<(SharedStr, Vec<f64>)>);

impl MetricSamples {
    pub fn new() -> MetricSamples {
        MetricSamples(Vec::new())
    }

    fn find(&self, name: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_str().cmp(name))
    }

    pub fn get(&self, name: &str) -> Option<&Vec<f64>> {
        self.find(name).ok().map(|i| &self.0[i].1)
    }

    /// Sets a metric's samples; returns the ones it replaces.
    pub fn insert(&mut self, name: impl Into<SharedStr>, samples: Vec<f64>) -> Option<Vec<f64>> {
        let name = name.into();
        match self.find(&name) {
            Ok(i) => Some(std::mem::replace(&mut self.0[i].1, samples)),
            Err(i) => {
                self.0.insert(i, (name, samples));
                None
            }
        }
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Metric names, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> + '_ {
        self.0.iter().map(|(k, _)| k.as_str())
    }

    /// (name, samples), in the order of names.
    pub fn iter(&self) -> impl Iterator<Item = (&SharedStr, &Vec<f64>)> + '_ {
        self.0.iter().map(|(k, v)| (k, v))
    }
}

impl fmt::Debug for MetricSamples {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.debug_map().entries(self.iter()).finish()
    }
}

impl<K: Into<SharedStr>> FromIterator<(K, Vec<f64>)> for MetricSamples {
    /// A name given twice keeps its last samples (as a map's collect does).
    fn from_iter<I: IntoIterator<Item = (K, Vec<f64>)>>(it: I) -> MetricSamples {
        let mut m = MetricSamples::new();
        for (k, v) in it {
            m.insert(k, v);
        }
        m
    }
}

impl From<std::collections::BTreeMap<String, Vec<f64>>> for MetricSamples {
    fn from(m: std::collections::BTreeMap<String, Vec<f64>>) -> MetricSamples {
        // Already sorted and unique.
        MetricSamples(m.into_iter().map(|(k, v)| (k.into(), v)).collect())
    }
}

impl Serialize for MetricSamples {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            m.serialize_entry(k.as_str(), v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for MetricSamples {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<MetricSamples, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MetricSamples;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object of sample lists by metric")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<MetricSamples, A::Error> {
                let mut m = MetricSamples(Vec::with_capacity(a.size_hint().unwrap_or(1).min(16)));
                while let Some((k, v)) = a.next_entry::<SharedStr, Vec<f64>>()? {
                    m.insert(k, v);
                }
                Ok(m)
            }
        }
        d.deserialize_map(V)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn reads_and_writes_the_json_object_a_map_did() {
        let text = r#"{"tp":[1.0,2.5],"ms":[3.0],"tp":[9.0]}"#;
        let ours: MetricSamples = serde_json::from_str(text).expect("reads");
        let map: BTreeMap<String, Vec<f64>> = serde_json::from_str(text).expect("reads");
        // The same entries (a repeated name keeps its last value), in the
        // same order, written the same way.
        assert_eq!(ours, MetricSamples::from(map.clone()));
        assert_eq!(
            serde_json::to_string(&ours).expect("writes"),
            serde_json::to_string(&map).expect("writes")
        );
        assert_eq!(ours.keys().collect::<Vec<_>>(), ["ms", "tp"]);
        assert_eq!(ours.get("tp"), Some(&vec![9.0]));
        assert_eq!(ours.get("none"), None);
        assert!(serde_json::from_str::<MetricSamples>("[1]").is_err());
    }

    #[test]
    fn insert_keeps_names_sorted_and_once() {
        let mut m = MetricSamples::new();
        assert_eq!(m.insert("b", vec![1.0]), None);
        assert_eq!(m.insert("a", vec![2.0]), None);
        assert_eq!(m.insert("c", vec![3.0]), None);
        assert_eq!(m.insert("b", vec![4.0]), Some(vec![1.0]));
        let got: Vec<(String, Vec<f64>)> =
            m.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        assert_eq!(
            got,
            [
                ("a".to_string(), vec![2.0]),
                ("b".to_string(), vec![4.0]),
                ("c".to_string(), vec![3.0])
            ]
        );
        assert!(m.get("c").is_some() && m.get("d").is_none());
    }
}
