//! What one metric showed on a culprit: the evidence the checklist reads and the report shows.

use serde::{Deserialize, Serialize};

use super::signs::{Class, Direction};

/// What one metric showed on a culprit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// OS metric, or `events: <event>`.
    pub metric: String,
    /// Device or interface.
    #[serde(deserialize_with = "Option::deserialize")]
    pub instance: Option<String>,
    /// Its class.
    pub class: Class,
    /// Where the node's level is against its peers'.
    pub direction: Direction,
    /// Node's mean ÷ the median of its peers' means over the faulty stretch (`None`: the peers'
    /// is 0).
    #[serde(deserialize_with = "Option::deserialize")]
    pub ratio: Option<f64>,
    /// The node's mean over the stretch (metric unit; for events, the sum over the metric's
    /// anomalous windows).
    pub node: f64,
    /// The median of its peers' means (for events, the median node's sum).
    pub peers: f64,
    /// Unit.
    pub unit: String,
    /// The node is faulty on the metric.
    pub faulty: bool,
    /// Its anomalous windows on the metric.
    pub anomalous_windows: u64,
    /// Retransmits: their share of the node's segments (sent, or sent and received for the
    /// retransmit events, which count its peers' retransmits to it too), when known.
    #[serde(deserialize_with = "Option::deserialize")]
    pub share: Option<f64>,
    /// The level moved the way that points at the node, on a metric the node is faulty on, but
    /// by less than the metric's floor ([`Sign::floor`](super::Sign::floor)): too small to name
    /// a resource (added within version 1).
    #[serde(default)]
    pub small: bool,
    /// The direction points at the node, by at least the metric's floor, and the node is
    /// faulty on the metric (retransmits: and they are at least
    /// [`LOSS_SHARE`](super::LOSS_SHARE) of its segments; a kernel event: and it persisted
    /// itself, its root-cause persistence at least k).
    pub diverges: bool,
}
