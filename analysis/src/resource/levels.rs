//! The levels behind a direction: each node's per-second means of an OS metric over a stretch
//! ([`Levels`], read from a loaded [`Dataset`] by [`DatasetLevels`]), and where a node's level
//! stands against its peers' ([`MARGIN`]).

use std::collections::HashMap;

use culprit_format::interval_flags;

use crate::data::Dataset;

use super::signs::Direction::{self, Down, Up};

/// A level differs from the peers' when it is at least this factor above (or below) the median
/// of theirs: above the ordinary imbalance of fault-free peers (on the testbed their CPU seconds
/// differ by up to 24 % over a run, their disk bytes by under 7 %: docs/accuracy.md, "Balance of
/// the fault-free runs"), so a direction is never read from a difference healthy peers also
/// show.
pub const MARGIN: f64 = 1.25;

/// A node's mean level of one instance of an OS metric.
#[derive(Clone, Debug, PartialEq)]
pub struct InstanceMean {
    /// The instance (a device, an interface; `None`: the metric has none).
    pub instance: Option<String>,
    /// Mean of its present per-second values.
    pub mean: f64,
}

/// A node's calls and self time of one traced function over a stretch, per second of its
/// data there (the white-box side of the checklist: [`super::Slowdown`]).
#[derive(Clone, Debug, PartialEq)]
pub struct FunctionLevel {
    /// `function [image]`.
    pub function: String,
    /// Calls per second.
    pub calls: f64,
    /// Self (exclusive) wall-clock time, ns per second.
    pub self_ns: f64,
}

/// Per-second levels of OS metrics, for the directions, and of the traced functions.
pub trait Levels: std::fmt::Debug {
    /// The node's mean of each instance's present values of `metric` over `[from, to)`.
    fn means(&self, node: &str, metric: &str, from_ns: u64, to_ns: u64) -> Vec<InstanceMean>;

    /// The node's traced functions over `[from, to)`, per second of its whole (not missed,
    /// not partial) trace intervals there; empty without traces.
    fn functions(&self, _node: &str, _from_ns: u64, _to_ns: u64) -> Vec<FunctionLevel> {
        Vec::new()
    }
}

/// Levels read from a loaded dataset.
#[derive(Debug)]
pub struct DatasetLevels<'a> {
    ds: &'a Dataset,
    by_name: HashMap<&'a str, Vec<(u32, Option<String>)>>,
}

impl<'a> DatasetLevels<'a> {
    /// The levels of `ds`.
    pub fn new(ds: &'a Dataset) -> Self {
        let names = &ds.names.os_metrics;
        let mut by_name: HashMap<&str, Vec<(u32, Option<String>)>> = HashMap::new();
        for id in 0..names.len() as u32 {
            let k = names.get(id);
            by_name
                .entry(&*k.name)
                .or_default()
                .push((id, k.instance.as_ref().map(|s| s.to_string())));
        }
        DatasetLevels { ds, by_name }
    }
}

impl Levels for DatasetLevels<'_> {
    fn means(&self, node: &str, metric: &str, from_ns: u64, to_ns: u64) -> Vec<InstanceMean> {
        let Some(ids) = self.by_name.get(metric) else {
            return Vec::new();
        };
        let Some(n) = self.ds.nodes.iter().find(|n| n.name == node) else {
            return Vec::new();
        };
        let mut acc = vec![(0.0f64, 0u64); ids.len()];
        for f in &n.samples {
            for iv in f.os.iter().filter(|iv| {
                !iv.missed() && iv.start_ns >= from_ns && iv.start_ns + iv.dur_ns <= to_ns
            }) {
                for (i, (id, _)) in ids.iter().enumerate() {
                    if let Some(v) = iv.get(*id).filter(|v| v.is_finite() && *v >= 0.0) {
                        acc[i].0 += v;
                        acc[i].1 += 1;
                    }
                }
            }
        }
        ids.iter()
            .zip(acc)
            .filter(|(_, (_, n))| *n > 0)
            .map(|((_, inst), (s, n))| InstanceMean {
                instance: inst.clone(),
                mean: s / n as f64,
            })
            .collect()
    }

    fn functions(&self, node: &str, from_ns: u64, to_ns: u64) -> Vec<FunctionLevel> {
        self.node(node)
            .map(|n| dataset_functions(self.ds, n, from_ns, to_ns))
            .unwrap_or_default()
    }
}

impl DatasetLevels<'_> {
    fn node(&self, node: &str) -> Option<&crate::data::NodeData> {
        self.ds.nodes.iter().find(|n| n.name == node)
    }
}

/// [`Levels::functions`] of a loaded dataset.
fn dataset_functions(
    ds: &Dataset,
    n: &crate::data::NodeData,
    from: u64,
    to: u64,
) -> Vec<FunctionLevel> {
    let mut sums: HashMap<crate::data::FuncId, (u64, u64)> = HashMap::new();
    let mut seconds: HashMap<u64, u64> = HashMap::new();
    for t in &n.traces {
        for iv in t.intervals.iter().filter(|iv| {
            iv.flags & (interval_flags::MISSED | interval_flags::PARTIAL) == 0
                && iv.start_ns >= from
                && iv.start_ns + iv.dur_ns <= to
        }) {
            // Processes of one node share its seconds.
            seconds.insert(iv.start_ns, iv.dur_ns);
            for e in &iv.entries {
                let s = sums.entry(e.func).or_default();
                s.0 += e.calls;
                s.1 += e.excl_ns;
            }
        }
    }
    let secs = seconds.values().sum::<u64>() as f64 / 1e9;
    if secs <= 0.0 {
        return Vec::new();
    }
    let mut out: Vec<FunctionLevel> = sums
        .into_iter()
        .map(|(f, (calls, self_ns))| {
            let key = ds.names.funcs.get(f);
            FunctionLevel {
                function: format!("{} [{}]", key.function, key.image),
                calls: calls as f64 / secs,
                self_ns: self_ns as f64 / secs,
            }
        })
        .collect();
    out.sort_by(|a, b| a.function.cmp(&b.function));
    out
}

/// Where the node's level is, given its ratio to its peers' (`None`: peers at 0).
pub(super) fn direction(node: f64, peers: f64) -> (Direction, Option<f64>) {
    if peers <= 0.0 {
        return (if node > 0.0 { Up } else { Direction::Level }, None);
    }
    let r = node / peers;
    let d = if r >= MARGIN {
        Up
    } else if r <= 1.0 / MARGIN {
        Down
    } else {
        Direction::Level
    };
    (d, Some(r))
}
