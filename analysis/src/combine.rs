//! The combined verdict: one answer per node from the per-metric verdicts.
//!
//! Seed 000's "combined" column (flagged by samples, or by count or time) is an evaluation bound,
//! not a rule: OR-ing detectors adds their false positives up. But requiring agreement would
//! lose the faults that show in one metric only (a network hog shows in samples, a disk hog in
//! time). The rule here, "corroborated or decisive":
//!
//! * a node is **faulty** when one metric finds it faulty (k of 2k − 1 windows) and the finding
//!   is *corroborated* — another metric finds it faulty too, or has at least one anomalous
//!   window within 2k − 1 windows of the faulty stretch — or *decisive* — its anomalous windows
//!   exceed the threshold by a median factor of at least [`DECISIVE`] — or only one metric
//!   could be analysed at all;
//! * a node that one metric finds faulty without decisive evidence is a **suspect**: reported,
//!   with its root-cause table, but not counted as a culprit in the exit status;
//! * a node that stopped producing data while its peers went on is **stopped** (a culprit).
//!
//! docs/thresholds.md gives the measured false-positive rates of OR-ing and of this rule.

use serde::{Deserialize, Serialize};

use crate::analyzer::{Episode, MetricResult, NodeResult};
use crate::family::Metric;
use crate::model::PeerIdx;
use crate::score::median_in_place;

/// Median factor by which a single metric's anomalous windows must exceed their threshold for
/// that metric alone to make a node faulty. With trained thresholds (twice the largest
/// fault-free score) this is three times anything seen in training.
pub const DECISIVE: f64 = 1.5;

/// The combined verdict on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// No metric finds the node faulty.
    Ok,
    /// One metric finds it faulty, without decisive evidence.
    Suspect,
    /// Faulty: corroborated or decisive.
    Faulty,
    /// Stopped producing data while its peers went on.
    Stopped,
    /// Its data is damaged and no metric finds it faulty on the intact part: a finding about
    /// the data, not about the node (not a culprit).
    Damaged,
}

impl Verdict {
    /// True for verdicts that make `diagnose` exit with status 1.
    pub fn is_culprit(self) -> bool {
        matches!(self, Verdict::Faulty | Verdict::Stopped)
    }

    /// The word in reports.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Suspect => "suspect",
            Verdict::Faulty => "FAULTY",
            Verdict::Stopped => "STOPPED",
            Verdict::Damaged => "damaged",
        }
    }
}

/// Strength of a metric's evidence against a node: the median of score / threshold over its
/// anomalous windows (1 = at the threshold).
pub fn evidence(nm: &NodeResult) -> Option<f64> {
    let mut r: Vec<f64> = nm
        .anomalous
        .iter()
        .filter(|a| a.threshold > 0.0 && a.threshold.is_finite())
        .map(|a| a.score / a.threshold)
        .collect();
    if r.is_empty() {
        return None;
    }
    Some(median_in_place(&mut r))
}

/// A metric's verdict on a node, as the combination rule sees it.
#[derive(Clone, Debug)]
pub struct MetricVerdict {
    /// The metric.
    pub metric: Metric,
    /// Faulty by the k-of-(2k − 1) filter.
    pub faulty: bool,
    /// [`evidence`].
    pub evidence: Option<f64>,
    /// Faulty stretches.
    pub episodes: Vec<Episode>,
    /// Starts of anomalous windows, ns.
    pub anomalous: Vec<u64>,
}

impl MetricVerdict {
    /// The verdict of a metric's results on node `n`.
    pub fn of(m: &MetricResult, n: PeerIdx) -> Self {
        let nm = &m.nodes[n];
        MetricVerdict {
            metric: m.metric(),
            faulty: nm.faulty(),
            evidence: evidence(nm),
            episodes: nm.episodes.clone(),
            anomalous: nm.anomalous.iter().map(|a| a.start_ns).collect(),
        }
    }

    /// True when this metric has an anomalous window within `slack_ns` of a stretch of `other`.
    fn supports(&self, other: &MetricVerdict, slack_ns: u64) -> bool {
        other.episodes.iter().any(|e| {
            self.anomalous
                .iter()
                .any(|&w| w + slack_ns >= e.first_window_ns && w <= e.last_window_ns + slack_ns)
        })
    }
}

/// Why the combined verdict is what it is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Combined {
    /// The verdict.
    pub verdict: Verdict,
    /// Metrics finding the node faulty.
    pub metrics: Vec<Metric>,
    /// One line: "corroborated by count and time", "decisive on samples: 6.1× its threshold"…
    pub reason: String,
}

/// Combines the verdicts of the metrics analysed (`analysed` of them had enough data).
/// `slack_ns` is how close another metric's anomaly must be to corroborate a faulty stretch:
/// 2k − 1 window shifts.
pub fn combine(
    per_metric: &[MetricVerdict],
    analysed: usize,
    stopped: bool,
    slack_ns: u64,
) -> Combined {
    combine_with(per_metric, analysed, stopped, slack_ns, DECISIVE)
}

/// [`combine`] with another decisive factor (for evaluations).
pub fn combine_with(
    per_metric: &[MetricVerdict],
    analysed: usize,
    stopped: bool,
    slack_ns: u64,
    decisive: f64,
) -> Combined {
    let faulty: Vec<&MetricVerdict> = per_metric.iter().filter(|v| v.faulty).collect();
    let metrics: Vec<Metric> = faulty.iter().map(|v| v.metric).collect();
    let names: Vec<&str> = metrics.iter().map(|m| m.name()).collect();
    let (verdict, reason) = if stopped {
        (
            Verdict::Stopped,
            "stopped producing data while its peers went on".to_string(),
        )
    } else if faulty.len() >= 2 {
        (
            Verdict::Faulty,
            format!("corroborated by {}", join_and(&names)),
        )
    } else if let Some(v) = faulty.first() {
        let e = v.evidence.unwrap_or(0.0);
        let support: Vec<&str> = per_metric
            .iter()
            .filter(|o| o.metric != v.metric && o.supports(v, slack_ns))
            .map(|o| o.metric.name())
            .collect();
        if !support.is_empty() {
            (
                Verdict::Faulty,
                format!(
                    "faulty on {}, corroborated by anomalies in {} at the same time",
                    v.metric,
                    join_and(&support)
                ),
            )
        } else if e >= decisive {
            (
                Verdict::Faulty,
                format!("decisive on {}: {e:.1}× its threshold", v.metric),
            )
        } else if analysed <= 1 {
            (
                Verdict::Faulty,
                format!("{} is the only metric analysed", v.metric),
            )
        } else {
            (
                Verdict::Suspect,
                format!(
                    "{} only, {e:.1}× its threshold (needs a second metric or {decisive}×)",
                    v.metric
                ),
            )
        }
    } else {
        (Verdict::Ok, String::new())
    };
    Combined {
        verdict,
        metrics,
        reason,
    }
}

fn join_and(v: &[&str]) -> String {
    match v {
        [] => String::new(),
        [a] => a.to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mv(metric: Metric, faulty: bool, evidence: f64) -> MetricVerdict {
        let episode = Episode {
            first_window_ns: 100,
            last_window_ns: 200,
        };
        MetricVerdict {
            metric,
            faulty,
            evidence: faulty.then_some(evidence),
            episodes: if faulty { vec![episode] } else { vec![] },
            anomalous: if faulty {
                vec![40, 100, 150, 200]
            } else {
                vec![]
            },
        }
    }

    #[test]
    fn corroborated_or_decisive() {
        const COUNT: Metric = Metric::COUNT;
        const TIME: Metric = Metric::TIME;
        const SAMPLES: Metric = Metric::SAMPLES;
        let c = combine(&[mv(COUNT, true, 1.1), mv(TIME, true, 1.2)], 2, false, 50);
        assert_eq!(c.verdict, Verdict::Faulty);
        assert_eq!(c.reason, "corroborated by count and time");
        let c = combine(
            &[mv(SAMPLES, true, 5.0), mv(TIME, false, 0.0)],
            3,
            false,
            50,
        );
        assert_eq!(c.verdict, Verdict::Faulty);
        let c = combine(
            &[mv(SAMPLES, true, 1.3), mv(TIME, false, 0.0)],
            3,
            false,
            50,
        );
        assert_eq!(c.verdict, Verdict::Suspect);
        // One anomalous window of another metric near the faulty stretch corroborates it; one
        // far away does not.
        let mut time = mv(TIME, false, 0.0);
        time.anomalous = vec![280];
        let c = combine(&[mv(SAMPLES, true, 1.3), time.clone()], 3, false, 50);
        assert_eq!(c.verdict, Verdict::Suspect);
        let c = combine(&[mv(SAMPLES, true, 1.3), time], 3, false, 100);
        assert_eq!(c.verdict, Verdict::Faulty, "{}", c.reason);
        let c = combine(&[mv(SAMPLES, true, 1.3)], 1, false, 50);
        assert_eq!(c.verdict, Verdict::Faulty);
        let c = combine(&[mv(SAMPLES, false, 0.0)], 1, true, 50);
        assert_eq!(c.verdict, Verdict::Stopped);
        assert!(!combine(&[], 3, false, 50).verdict.is_culprit());
    }
}
