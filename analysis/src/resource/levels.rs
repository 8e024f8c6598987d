//! The levels behind a direction: each node's per-second means of an OS metric over a stretch
//! ([`Levels`], read from a loaded [`Dataset`] by [`DatasetLevels`]), and where a node's level
//! stands against its peers' ([`MARGIN`]).

use std::collections::HashMap;

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

/// Per-second levels of OS metrics, for the directions.
pub trait Levels: std::fmt::Debug {
    /// The node's mean of each instance's present values of `metric` over `[from, to)`.
    fn means(&self, node: &str, metric: &str, from_ns: u64, to_ns: u64) -> Vec<InstanceMean>;
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
