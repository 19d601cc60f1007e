//! The nodes of a Slurm partition, as `sinfo` lists them, grouped into
//! node types (same features, same gres), and the map of which node is of
//! which host class that steers a mixed partition's jobs.
//!
//! A node type is only a guess at a host class: tunectl probes one node of
//! each type, and every task probes its node again, so a node whose
//! hardware differs from its type's is found out by the first task that
//! lands on it ([`NodeClasses`]).

use std::collections::{BTreeMap, BTreeSet};

use crate::shell_quote::quote_word;

/// Nodes of a partition with the same features and generic resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeType {
    /// Sorted; empty when the nodes have none.
    pub features: Vec<String>,
    /// `%G` without its socket bindings (`gpu:h100:1`); empty for none.
    pub gres: String,
    /// Sorted node names.
    pub nodes: Vec<String>,
    /// Those that can take a job now (not down, drained or failing).
    pub up: Vec<String>,
}

impl NodeType {
    /// A short name for the type, for host names (`<entry>.<tag>`): its
    /// features, else its GPU type, else its first node; only characters
    /// that host names may hold.
    pub fn tag(&self) -> String {
        let gpu_type = self
            .gres
            .split(',')
            .find_map(|g| {
                let mut f = g.split(':');
                (f.next() == Some("gpu"))
                    .then(|| f.next())
                    .flatten()
                    .filter(|t| t.parse::<u64>().is_err())
            })
            .map(str::to_string);
        let raw = if !self.features.is_empty() {
            self.features.join("_")
        } else if let Some(t) = gpu_type {
            t
        } else {
            self.nodes.first().cloned().unwrap_or_default()
        };
        let tag: String = raw
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        if tag.is_empty() {
            "nodes".to_string()
        } else {
            tag
        }
    }

    /// The GPUs one node of the type has, from its gres (`gpu:h100:8` and
    /// `gpu:8` are 8; several `gpu` entries add up); `None` when it lists
    /// none.
    pub fn gpus_per_node(&self) -> Option<u64> {
        gpu_count(&self.gres)
    }

    /// How many tasks asking for `per_task` (the entry's `gres`) one node of
    /// the type runs at once: its GPUs over the GPUs a task asks for (at
    /// least 1); 1 when either is not known in GPUs.
    pub fn tasks_per_node(&self, per_task: Option<&str>) -> u64 {
        match (self.gpus_per_node(), per_task.and_then(gpu_count)) {
            (Some(node), Some(task)) if task > 0 => (node / task).max(1),
            _ => 1,
        }
    }

    /// How the type reads in messages: `gpu-a, gpu-c (features h100, gres
    /// gpu:h100:1)`.
    pub fn describe(&self) -> String {
        let mut what = Vec::new();
        if !self.features.is_empty() {
            what.push(format!("features {}", self.features.join(",")));
        }
        if !self.gres.is_empty() {
            what.push(format!("gres {}", self.gres));
        }
        if what.is_empty() {
            self.nodes.join(", ")
        } else {
            format!("{} ({})", self.nodes.join(", "), what.join(", "))
        }
    }
}

/// The GPUs a gres string names (`gpu:h100:8`, `gpu:2,tmp:10G`,
/// `gpu:a:1,gpu:b:1`); `None` without a `gpu` entry with a count.
fn gpu_count(gres: &str) -> Option<u64> {
    let counts: Vec<u64> = gres
        .split(',')
        .filter_map(|g| {
            let f: Vec<&str> = g.trim().split(':').collect();
            match f.as_slice() {
                ["gpu" | "gres/gpu", n] | ["gpu" | "gres/gpu", _, n] => n.parse::<u64>().ok(),
                _ => None,
            }
        })
        .collect();
    (!counts.is_empty()).then(|| counts.iter().sum())
}

/// How many tasks of an entry that asks `per_task` (its `gres`) `nodes`
/// run at once, each node's type from `types` (a node of no listed type
/// counts one).
pub fn task_capacity(types: &[NodeType], nodes: &[String], per_task: Option<&str>) -> u64 {
    nodes
        .iter()
        .map(|n| {
            types
                .iter()
                .find(|t| t.nodes.contains(n))
                .map_or(1, |t| t.tasks_per_node(per_task))
        })
        .sum()
}

/// An entry's `max_jobs_in_flight` (`total`) shared between its parts in
/// proportion to the tasks each part's nodes run at once (`capacity`),
/// at least one each: a part of one node of 8 GPUs gets 8 times the share
/// of a part of one node of 1.
pub fn shares(total: u32, capacity: &[u64]) -> Vec<u32> {
    let all: u64 = capacity.iter().sum::<u64>().max(1);
    capacity
        .iter()
        .map(|c| {
            let share = (u64::from(total) * c / all).max(1);
            u32::try_from(share).unwrap_or(total)
        })
        .collect()
}

/// The `sinfo` call that lists a partition's nodes (the default partition
/// when `partition` is `None`): one line per node and partition.
pub fn sinfo_command(partition: Option<&str>) -> String {
    let p = partition
        .map(|p| format!(" -p {}", quote_word(p)))
        .unwrap_or_default();
    format!("sinfo -h -N{p} -o '%P|%N|%f|%G|%T'")
}

/// Node types of `sinfo_command`'s output, in order of their first node.
/// Without a partition, the rows of the default one (`debug*`); a line
/// that is not five fields is skipped.
pub fn parse_sinfo(text: &str, partition: Option<&str>) -> Vec<NodeType> {
    let mut by_type: BTreeMap<(Vec<String>, String), NodeType> = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for line in text.lines() {
        let f: Vec<&str> = line.trim().splitn(5, '|').collect();
        let [part, node, features, gres, state] = f[..] else {
            continue;
        };
        let wanted = match partition {
            Some(p) => part.trim_end_matches('*') == p,
            None => part.ends_with('*'),
        };
        let node = node.trim();
        if !wanted || !node_name_ok(node) || !seen.insert(node.to_string()) {
            continue;
        }
        let mut features: Vec<String> = none_if_null(features)
            .split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        features.sort();
        features.dedup();
        let gres = strip_sockets(none_if_null(gres));
        let t = by_type
            .entry((features.clone(), gres.clone()))
            .or_insert_with(|| NodeType {
                features,
                gres,
                nodes: Vec::new(),
                up: Vec::new(),
            });
        t.nodes.push(node.to_string());
        if state_is_up(state.trim()) {
            t.up.push(node.to_string());
        }
    }
    let mut types: Vec<NodeType> = by_type.into_values().collect();
    for t in &mut types {
        t.nodes.sort();
        t.up.sort();
    }
    types.sort_by(|a, b| a.nodes.first().cmp(&b.nodes.first()));
    types
}

/// A node name as tunectl passes it to `--nodelist`/`--exclude`.
fn node_name_ok(n: &str) -> bool {
    !n.is_empty()
        && n.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn none_if_null(s: &str) -> &str {
    let s = s.trim();
    if s == "(null)" { "" } else { s }
}

/// `gpu:h100:1(S:0-1),tmp:2` → `gpu:h100:1,tmp:2`.
fn strip_sockets(gres: &str) -> String {
    let mut out = String::new();
    let mut depth = 0u32;
    for c in gres.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// Whether a node in this `%T` state may take a job now or soon: every
/// state but those that keep new jobs off it (down, drained or draining,
/// failing, not responding: a `*` suffix). A busy, reserved, planned or
/// powered-down node (resumed on demand) counts as up: taking a class for
/// down when it is only busy would lose its waiting tasks for nothing.
pub fn state_is_up(state: &str) -> bool {
    if state.ends_with('*') {
        return false;
    }
    let s = state.trim_end_matches(['~', '#', '!', '%', '$', '@', '^', '-']);
    !matches!(
        s,
        "down"
            | "drained"
            | "draining"
            | "drain"
            | "fail"
            | "failing"
            | "future"
            | "inval"
            | "unknown"
            | "not_responding"
    )
}

/// Which host class each node of a mixed entry is of, as far as known
/// (from the discovery probes and from every task's own probe), shared by
/// the entry's parts: a part's jobs exclude the nodes of every other
/// class.
#[derive(Debug, Default)]
pub struct NodeClasses {
    /// Node → host class id.
    class_of: BTreeMap<String, String>,
    /// Node → how many tasks it runs at once ([`NodeType::tasks_per_node`]),
    /// where its type was listed; 1 for the others.
    slots: BTreeMap<String, u64>,
}

impl NodeClasses {
    /// Record that `node` is of `class`; whether that is news (a node
    /// never seen, or one whose class changed).
    pub fn learn(&mut self, node: &str, class: &str) -> bool {
        if !node_name_ok(node) {
            return false;
        }
        self.class_of.insert(node.to_string(), class.to_string()) != Some(class.to_string())
    }

    /// Nodes known to be of another class than `class`, sorted.
    pub fn others(&self, class: &str) -> Vec<String> {
        self.class_of
            .iter()
            .filter(|(_, c)| c.as_str() != class)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Nodes known to be of `class`, sorted.
    pub fn of(&self, class: &str) -> Vec<String> {
        self.class_of
            .iter()
            .filter(|(_, c)| c.as_str() == class)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Record that `node` runs `slots` tasks at once.
    pub fn set_slots(&mut self, node: &str, slots: u64) {
        self.slots.insert(node.to_string(), slots.max(1));
    }

    /// How many tasks `node` runs at once (1 when not known).
    pub fn slots(&self, node: &str) -> u64 {
        self.slots.get(node).copied().unwrap_or(1)
    }
}

/// The nodes `n` new tasks are pinned to (`--nodelist`), one each, among
/// `nodes` (name, tasks it runs at once) that already hold `load` tasks
/// (running or waiting for them): each goes to the node whose load per
/// slot would be lowest with it, the first in `nodes` on a tie. So every
/// free slot is filled before any node gets a task to wait for, and what
/// waits is spread over the nodes in proportion to their slots.
pub fn pin_tasks(n: usize, nodes: &[(String, u64)], load: &BTreeMap<String, u64>) -> Vec<String> {
    let mut held: Vec<(u64, u64)> = nodes
        .iter()
        .map(|(name, slots)| (load.get(name).copied().unwrap_or(0), (*slots).max(1)))
        .collect();
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        // (load + 1) / slots, compared without division.
        let Some(best) = (0..held.len()).min_by(|&a, &b| {
            let (la, sa) = held[a];
            let (lb, sb) = held[b];
            ((la + 1) * sb).cmp(&((lb + 1) * sa))
        }) else {
            break;
        };
        held[best].0 += 1;
        out.push(nodes[best].0.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jobs_in_flight_are_shared_by_the_gpus_of_each_parts_nodes() {
        let text = "debug*|big|h100|gpu:h100:8(S:0-1)|idle\n\
                    debug*|small-1|a100|gpu:a100:1|idle\n\
                    debug*|small-2|a100|gpu:a100:1|idle\n\
                    debug*|cpu|(null)|(null)|idle\n";
        let types = parse_sinfo(text, None);
        let nodes = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(types[0].gpus_per_node(), Some(8));
        assert_eq!(types[0].tasks_per_node(Some("gpu:1")), 8);
        assert_eq!(types[0].tasks_per_node(Some("gpu:h100:2")), 4);
        // A task that asks for more than a node has still runs, alone.
        assert_eq!(types[0].tasks_per_node(Some("gpu:16")), 1);
        // Not in GPUs: one task a node, as before.
        assert_eq!(types[0].tasks_per_node(None), 1);
        assert_eq!(gpu_count("gpu:a:1,gpu:b:2,tmp:10G"), Some(3));
        assert_eq!(gpu_count("tmp:10G"), None);
        let big = task_capacity(&types, &nodes(&["big"]), Some("gpu:1"));
        let small = task_capacity(&types, &nodes(&["small-1", "small-2"]), Some("gpu:1"));
        let cpu = task_capacity(&types, &nodes(&["cpu", "unlisted"]), Some("gpu:1"));
        assert_eq!((big, small, cpu), (8, 2, 2));
        // One 8-GPU node against two 1-GPU nodes: 8 to 2, never 1 to 2.
        assert_eq!(shares(20, &[big, small]), vec![16, 4]);
        assert_eq!(shares(4, &[big, small]), vec![3, 1]);
        assert_eq!(shares(1, &[big, small]), vec![1, 1], "at least one each");
        assert_eq!(shares(10, &[0, 0]), vec![1, 1]);
    }

    #[test]
    fn a_mixed_partition_has_one_type_per_feature_and_gres() {
        let text = "debug*|gpu-a|h100|gpu:h100:1(S:0)|idle\n\
                    debug*|gpu-b|a100|gpu:a100:1|mixed\n\
                    debug*|gpu-c|h100|gpu:h100:1(S:0)|down*\n\
                    other|gpu-d|(null)|(null)|idle\n\
                    garbage line\n";
        let types = parse_sinfo(text, None);
        assert_eq!(types.len(), 2, "{types:?}");
        assert_eq!(types[0].nodes, vec!["gpu-a", "gpu-c"]);
        assert_eq!(types[0].up, vec!["gpu-a"]);
        assert_eq!(types[0].gres, "gpu:h100:1");
        assert_eq!(types[0].tag(), "h100");
        assert_eq!(types[1].nodes, vec!["gpu-b"]);
        assert_eq!(types[1].up, vec!["gpu-b"]);
        // A named partition: its rows only, default or not.
        let other = parse_sinfo(text, Some("other"));
        assert_eq!(other.len(), 1);
        assert_eq!(other[0].tag(), "gpu-d");
        assert!(parse_sinfo(text, Some("nope")).is_empty());
    }

    #[test]
    fn only_states_that_keep_jobs_off_a_node_are_down() {
        for up in [
            "idle",
            "mixed",
            "allocated",
            "planned",
            "reserved",
            "idle~",
            "completing",
            "maint",
        ] {
            assert!(state_is_up(up), "{up}");
        }
        for down in [
            "down",
            "down*",
            "idle*",
            "drained",
            "draining",
            "fail",
            "inval",
            "allocated*",
        ] {
            assert!(!state_is_up(down), "{down}");
        }
    }

    #[test]
    fn tags_fall_back_to_the_gpu_type_and_stay_host_name_safe() {
        let t = NodeType {
            features: Vec::new(),
            gres: "gpu:a100:4".into(),
            nodes: vec!["n1".into()],
            up: Vec::new(),
        };
        assert_eq!(t.tag(), "a100");
        let t = NodeType {
            features: vec!["ib".into(), "x86/64".into()],
            gres: String::new(),
            nodes: vec!["n1".into()],
            up: Vec::new(),
        };
        assert_eq!(t.tag(), "ib_x86_64");
        let t = NodeType {
            features: Vec::new(),
            gres: "gpu:2".into(),
            nodes: vec!["n7".into()],
            up: Vec::new(),
        };
        assert_eq!(t.tag(), "n7");
    }

    #[test]
    fn tasks_fill_free_slots_first_then_wait_in_proportion_to_slots() {
        let nodes = vec![("big".to_string(), 8), ("small".to_string(), 1)];
        let count = |pins: &[String], n: &str| pins.iter().filter(|p| *p == n).count();
        // Nine free slots: eight on the big node, one on the small one.
        let pins = pin_tasks(9, &nodes, &BTreeMap::new());
        assert_eq!((count(&pins, "big"), count(&pins, "small")), (8, 1));
        // Eighteen: every slot full, then one waiting per slot.
        let pins = pin_tasks(18, &nodes, &BTreeMap::new());
        assert_eq!((count(&pins, "big"), count(&pins, "small")), (16, 2));
        // What the nodes hold counts: the small node's slot is taken, the
        // big node has two free.
        let load = BTreeMap::from([("big".to_string(), 6), ("small".to_string(), 1)]);
        assert_eq!(pin_tasks(2, &nodes, &load), vec!["big", "big"]);
        // A tie goes to the first listed; no node, no pin.
        let even = vec![("b".to_string(), 1), ("a".to_string(), 1)];
        assert_eq!(pin_tasks(3, &even, &BTreeMap::new()), vec!["b", "a", "b"]);
        assert!(pin_tasks(3, &[], &BTreeMap::new()).is_empty());
    }

    #[test]
    fn node_classes_steer_away_from_other_classes() {
        let mut m = NodeClasses::default();
        assert!(m.learn("gpu-a", "H"));
        assert!(m.learn("gpu-b", "A"));
        assert!(!m.learn("gpu-a", "H"));
        assert_eq!(m.others("H"), vec!["gpu-b"]);
        assert_eq!(m.of("H"), vec!["gpu-a"]);
        // A node that turns out to be of another class moves.
        assert!(m.learn("gpu-a", "A"));
        assert_eq!(m.others("H"), vec!["gpu-a", "gpu-b"]);
        // Never a name that could be an option or two words.
        assert!(!m.learn("-x y", "A"));
    }
}
