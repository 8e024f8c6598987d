//! The windows of an analysis as they close (`--follow`, progress displays), with node names,
//! and their JSON lines.

use serde::{Deserialize, Deserializer, Serialize};

use crate::analyzer::WindowEvent;
use crate::family::Metric;
use crate::model::PeerIdx;
use crate::time::Timestamp;

/// A window closed, with node names (for `--follow` and progress displays).
#[derive(Clone, Debug, PartialEq)]
pub struct ClosedWindow {
    /// Metric.
    pub metric: Metric,
    /// Window start, ns.
    pub start_ns: u64,
    /// Window end, ns.
    pub end_ns: u64,
    /// Nodes scored.
    pub scored: usize,
    /// Anomalous nodes, with their scores and thresholds.
    pub anomalous: Vec<NodeScore>,
    /// Nodes that became faulty in this window.
    pub newly_faulty: Vec<String>,
    /// Nodes left out: less than half of the window's seconds present.
    pub incomplete: Vec<String>,
    /// Nodes compared on the seconds present, with the share present.
    pub partial: Vec<(String, f64)>,
}

/// A node's score in a window and the threshold it exceeded.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeScore {
    /// Node.
    pub node: String,
    /// Score.
    pub score: f64,
    /// Threshold.
    pub threshold: f64,
    /// A rare function made the node anomalous (`crate::rare`), whatever its score.
    pub rare: bool,
}

impl ClosedWindow {
    /// The window `ev` of an analysis with these node names.
    pub fn new(ev: &WindowEvent, names: &[String]) -> Self {
        let name = |n: PeerIdx| names[n].clone();
        ClosedWindow {
            metric: ev.metric,
            start_ns: ev.start_ns,
            end_ns: ev.end_ns,
            scored: ev.scored,
            anomalous: ev
                .anomalous
                .iter()
                .map(|a| NodeScore {
                    node: name(a.node),
                    score: a.score,
                    threshold: a.threshold,
                    rare: a.rare,
                })
                .collect(),
            newly_faulty: ev.newly_faulty.iter().map(|&n| name(n)).collect(),
            incomplete: ev.incomplete.iter().map(|&n| name(n)).collect(),
            partial: ev.partial.iter().map(|&(n, p)| (name(n), p)).collect(),
        }
    }

    /// Its JSON line (`--follow --json`).
    pub fn line(&self) -> WindowLine {
        WindowLine {
            event: "window".to_string(),
            metric: self.metric,
            start: Timestamp::from_ns(self.start_ns),
            end: Timestamp::from_ns(self.end_ns),
            scored: self.scored,
            anomalous: self.anomalous.iter().map(|a| a.node.clone()).collect(),
            newly_faulty: self.newly_faulty.clone(),
            incomplete: self.incomplete.clone(),
            partial: self.partial.iter().map(|(n, _)| n.clone()).collect(),
        }
    }
}

/// A window event as one JSON object (`--follow --json` prints one per line).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowLine {
    /// Always `window`.
    #[serde(deserialize_with = "window_tag")]
    pub event: String,
    /// Metric.
    pub metric: Metric,
    /// Window start.
    pub start: Timestamp,
    /// Window end.
    pub end: Timestamp,
    /// Nodes scored.
    pub scored: usize,
    /// Anomalous nodes.
    pub anomalous: Vec<String>,
    /// Nodes that became faulty.
    pub newly_faulty: Vec<String>,
    /// Nodes left out: less than half of the window's seconds present.
    pub incomplete: Vec<String>,
    /// Nodes compared on the seconds present (some missing; added within version 1).
    #[serde(default)]
    pub partial: Vec<String>,
}

fn window_tag<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s != "window" {
        return Err(serde::de::Error::custom(format!(
            "event {s:?} is not \"window\""
        )));
    }
    Ok(s)
}
