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
//!   could be analysed at all; a family of several metrics (the OS metrics) is decisive, or the
//!   only one analysed, only when two of its metrics find the node faulty
//!   (`FamilyVerdict::has_two_views`);
//! * a node that one metric finds faulty without decisive evidence is a **suspect**: reported,
//!   with its root-cause table, but not counted as a culprit in the exit status;
//! * a node that stopped producing data while its peers went on is **stopped** (a culprit);
//! * a node with a thread stuck in one call (`crate::stacks`) is **stuck**, and one whose
//!   process was stopped by a signal is **paused** (`crate::paused`): both culprits, and they
//!   take precedence (paused first), since they say what the metrics' deviations are about.
//!
//! Metrics corroborate each other by *family* ([`crate::family::About::group`]): the OS
//! metrics are many views of a few resources (`disk.rd_sec`, `disk.tps` and `proc.rd_bytes` all
//! count the same reads), so all of them together are one family, `os`, and one OS metric
//! cannot corroborate another. Every family's part in the verdict is reported
//! ([`Contribution`]).
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
    /// A thread inside one call far longer than its peers ever stayed in that function.
    Stuck,
    /// Stopped by a signal or a tracer (SIGSTOP), not slow code.
    Paused,
    /// It has data but no metric could compare it in any window (its data had gaps
    /// throughout): never "ok" (added within version 1 of the report).
    NotCompared,
}

impl Verdict {
    /// True for verdicts that make `diagnose` exit with status 1.
    pub fn is_culprit(self) -> bool {
        matches!(
            self,
            Verdict::Faulty | Verdict::Stopped | Verdict::Stuck | Verdict::Paused
        )
    }

    /// The word in reports.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Suspect => "suspect",
            Verdict::Faulty => "FAULTY",
            Verdict::Stopped => "STOPPED",
            Verdict::Damaged => "damaged",
            Verdict::Stuck => "STUCK",
            Verdict::Paused => "PAUSED",
            Verdict::NotCompared => "not compared",
        }
    }
}

/// Strength of a metric's evidence against a node: the median of score / threshold over its
/// anomalous windows (1 = at the threshold); a window a rare function made anomalous counts
/// its rare function's ratio over the node's bar when that is larger ([`crate::rare`]).
pub fn evidence(nm: &NodeResult) -> Option<f64> {
    let mut r: Vec<f64> = nm
        .anomalous
        .iter()
        .filter(|a| a.threshold > 0.0 && a.threshold.is_finite() || a.rare.is_some())
        .map(|a| {
            let s = if a.threshold > 0.0 && a.threshold.is_finite() {
                a.score / a.threshold
            } else {
                0.0
            };
            s.max(a.rare.unwrap_or(0.0))
        })
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
    /// Its family for corroboration (itself, or [`Metric::OS`]).
    pub family: Metric,
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
            family: m.config.family.group(),
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
    /// Each family's part: whether it finds the node faulty, has anomalous windows, or neither.
    pub families: Vec<Contribution>,
}

/// What one family contributes to a node's combined verdict.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Contribution {
    /// The family (`samples`, `count`, `time`, `events`, `os`).
    pub family: Metric,
    /// What it says.
    pub role: Role,
    /// Its metrics that find the node faulty.
    pub faulty: Vec<Metric>,
    /// Its metrics with anomalous windows but no faulty stretch.
    pub anomalous: Vec<Metric>,
    /// Strength of its evidence: the largest [`evidence`] of its faulty metrics.
    #[serde(deserialize_with = "Option::deserialize")]
    pub evidence: Option<f64>,
}

/// A family's part in a verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// One of its metrics finds the node faulty.
    Faulty,
    /// None does, but one has anomalous windows near the faulty stretch of another family
    /// (it corroborates it).
    Corroborates,
    /// Anomalous windows, away from any faulty stretch.
    Anomalous,
    /// Nothing.
    Ok,
}

/// The verdicts of one family's metrics, merged.
#[derive(Clone, Debug)]
struct FamilyVerdict {
    family: Metric,
    faulty: Vec<Metric>,
    anomalous: Vec<Metric>,
    merged: MetricVerdict,
}

impl FamilyVerdict {
    /// False for a family of several metrics — views of a few resources: the OS metrics — in
    /// which only one metric finds the node faulty. Such a family alone makes a node faulty
    /// only when two of its views agree: one view of a resource moves by chance far more often
    /// than two (a node's run-queue wait on a shared host is the scheduler's luck from second
    /// to second, and its CPU use and runnable threads do not follow it), and the family's
    /// evidence is the largest of its many metrics', so a single one's excursion is the
    /// largest of many draws. A real fault of a resource moves each of its views: a slow disk
    /// shows in I/O delay and blocked threads, a hog in the bytes of its cgroup and processes.
    fn has_two_views(&self) -> bool {
        self.faulty.len() >= 2 || self.faulty.first() == Some(&self.family)
    }
}

/// Groups metric verdicts by family, in order of first appearance.
fn families(per_metric: &[MetricVerdict]) -> Vec<FamilyVerdict> {
    let mut out: Vec<FamilyVerdict> = Vec::new();
    for v in per_metric {
        let at = match out.iter().position(|f| f.family == v.family) {
            Some(i) => i,
            None => {
                out.push(FamilyVerdict {
                    family: v.family,
                    faulty: Vec::new(),
                    anomalous: Vec::new(),
                    merged: MetricVerdict {
                        metric: v.family,
                        family: v.family,
                        faulty: false,
                        evidence: None,
                        episodes: Vec::new(),
                        anomalous: Vec::new(),
                    },
                });
                out.len() - 1
            }
        };
        let f = &mut out[at];
        if v.faulty {
            f.faulty.push(v.metric);
            f.merged.faulty = true;
            f.merged.episodes.extend(v.episodes.iter().cloned());
            f.merged.evidence = match (f.merged.evidence, v.evidence) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        } else if !v.anomalous.is_empty() {
            f.anomalous.push(v.metric);
        }
        f.merged.anomalous.extend(v.anomalous.iter().copied());
    }
    // A family of one metric is named after the metric (`samples`); a family of several after
    // itself, with its faulty metrics in the reasons.
    out
}

/// `os (disk.await, proc.blkio_delay)` for a family of several metrics, `time` for one.
fn family_text(f: &FamilyVerdict) -> String {
    if f.faulty.len() == 1 && f.faulty[0] == f.family || f.faulty.is_empty() {
        return f.family.to_string();
    }
    let names: Vec<&str> = f.faulty.iter().map(|m| m.name()).collect();
    format!("{} ({})", f.family, names.join(", "))
}

/// Combines the verdicts of the metrics analysed; `analysed` families had enough data.
/// `slack_ns` is how close another family's anomaly must be to corroborate a faulty stretch:
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
    let fams = families(per_metric);
    let faulty: Vec<&FamilyVerdict> = fams.iter().filter(|f| f.merged.faulty).collect();
    let metrics: Vec<Metric> = per_metric
        .iter()
        .filter(|v| v.faulty)
        .map(|v| v.metric)
        .collect();
    let mut support: Vec<Metric> = Vec::new();
    let (verdict, reason) = if stopped {
        (
            Verdict::Stopped,
            "stopped producing data while its peers went on".to_string(),
        )
    } else if faulty.len() >= 2 {
        let names: Vec<String> = faulty.iter().map(|f| family_text(f)).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        (
            Verdict::Faulty,
            format!("corroborated by {}", join_and(&names)),
        )
    } else if let Some(f) = faulty.first() {
        let v = &f.merged;
        let e = v.evidence.unwrap_or(0.0);
        support = fams
            .iter()
            .filter(|o| o.family != f.family && o.merged.supports(v, slack_ns))
            .map(|o| o.family)
            .collect();
        let what = family_text(f);
        if !support.is_empty() {
            let names: Vec<&str> = support.iter().map(|m| m.name()).collect();
            (
                Verdict::Faulty,
                format!(
                    "faulty on {what}, corroborated by anomalies in {} at the same time",
                    join_and(&names)
                ),
            )
        } else if !f.has_two_views() {
            (
                Verdict::Suspect,
                format!(
                    "{what} only, {e:.2}× its threshold: one view of its resource \
                     (needs a second {} metric or another family)",
                    f.family
                ),
            )
        } else if e >= decisive {
            (
                Verdict::Faulty,
                format!("decisive on {what}: {e:.1}× its threshold"),
            )
        } else if analysed <= 1 {
            (
                Verdict::Faulty,
                format!("{what} is the only metric analysed"),
            )
        } else {
            (
                Verdict::Suspect,
                format!(
                    // Two decimals: 1.47× must not read as the 1.5× it falls short of.
                    "{what} only, {e:.2}× its threshold (needs a second metric or {decisive}×)"
                ),
            )
        }
    } else {
        (Verdict::Ok, String::new())
    };
    let families = fams
        .iter()
        .map(|f| Contribution {
            family: f.family,
            role: if f.merged.faulty {
                Role::Faulty
            } else if support.contains(&f.family) {
                Role::Corroborates
            } else if !f.merged.anomalous.is_empty() {
                Role::Anomalous
            } else {
                Role::Ok
            },
            faulty: f.faulty.clone(),
            anomalous: f.anomalous.clone(),
            evidence: f.merged.evidence,
        })
        .collect();
    Combined {
        verdict,
        metrics,
        reason,
        families,
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
            family: if metric.is_os() { Metric::OS } else { metric },
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

    /// All OS metrics are one family: two of them never corroborate each other, and the
    /// families analysed are counted, not the metrics.
    #[test]
    fn os_metrics_corroborate_as_one_family() {
        let tps = Metric::from_name("disk.tps").unwrap();
        let rd = Metric::from_name("disk.rd_sec").unwrap();
        let c = combine(
            &[
                mv(tps, true, 1.2),
                mv(rd, true, 1.3),
                mv(Metric::TIME, false, 0.0),
            ],
            2,
            false,
            50,
        );
        assert_eq!(c.verdict, Verdict::Suspect, "{}", c.reason);
        assert_eq!(
            c.reason,
            "os (disk.tps, disk.rd_sec) only, 1.30× its threshold (needs a second metric or 1.5×)"
        );
        assert_eq!(c.metrics, [tps, rd]);
        let os = &c.families[0];
        assert_eq!((os.family, os.role), (Metric::OS, Role::Faulty));
        assert_eq!(os.evidence, Some(1.3));
        assert_eq!(c.families[1].role, Role::Ok);
        // With time faulty too: two families.
        let c = combine(
            &[mv(tps, true, 1.2), mv(Metric::TIME, true, 1.1)],
            2,
            false,
            50,
        );
        assert_eq!(c.verdict, Verdict::Faulty);
        assert_eq!(c.reason, "corroborated by os (disk.tps) and time");
        // An anomalous window of time near the OS stretch corroborates it.
        let mut time = mv(Metric::TIME, false, 0.0);
        time.anomalous = vec![150];
        let c = combine(&[mv(rd, true, 1.1), time], 2, false, 50);
        assert_eq!(c.verdict, Verdict::Faulty, "{}", c.reason);
        assert_eq!(c.families[1].role, Role::Corroborates);
        // Only the OS family analysed: two of its views must agree.
        let c = combine(&[mv(rd, true, 1.1), mv(tps, false, 0.0)], 1, false, 50);
        assert_eq!(c.verdict, Verdict::Suspect, "{}", c.reason);
        let c = combine(&[mv(rd, true, 1.1), mv(tps, true, 1.2)], 1, false, 50);
        assert_eq!(c.verdict, Verdict::Faulty, "{}", c.reason);
        assert_eq!(
            c.reason,
            "os (disk.rd_sec, disk.tps) is the only metric analysed"
        );
    }

    /// One OS metric alone is never decisive, however far above its threshold: a node's
    /// run-queue wait 2× its threshold, with CPU use and every other family like its peers',
    /// was flagged "CPU starvation" in a CI run of a slow-disk fault on another node. Two
    /// views of a resource are.
    #[test]
    fn one_os_view_alone_is_a_suspect() {
        let runq = Metric::from_name("proc.runq_delay").unwrap();
        let runnable = Metric::from_name("proc.runnable").unwrap();
        let others = [
            mv(Metric::SAMPLES, false, 0.0),
            mv(Metric::TIME, false, 0.0),
        ];
        let mut v = vec![mv(runq, true, 2.0), mv(runnable, false, 0.0)];
        v.extend(others.iter().cloned());
        let c = combine(&v, 3, false, 50);
        assert_eq!(c.verdict, Verdict::Suspect, "{}", c.reason);
        assert_eq!(
            c.reason,
            "os (proc.runq_delay) only, 2.00× its threshold: one view of its resource \
             (needs a second os metric or another family)"
        );
        assert_eq!(c.families[0].role, Role::Faulty);
        v[1] = mv(runnable, true, 1.2);
        let c = combine(&v, 3, false, 50);
        assert_eq!(c.verdict, Verdict::Faulty, "{}", c.reason);
        assert_eq!(
            c.reason,
            "decisive on os (proc.runq_delay, proc.runnable): 2.0× its threshold"
        );
        // A single-metric family needs no second view: samples alone at 2× is decisive.
        let c = combine(
            &[mv(Metric::SAMPLES, true, 2.0), v[3].clone()],
            3,
            false,
            50,
        );
        assert_eq!(c.verdict, Verdict::Faulty, "{}", c.reason);
    }
}
