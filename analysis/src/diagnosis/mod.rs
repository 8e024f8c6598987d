//! The typed result of a diagnosis: combined verdicts, culprits, per-metric verdicts with their
//! root-cause tables, missing-data findings, and every node's score in every window. The
//! combination rule ([`crate::combine`]) is applied here, once; outputs (human, JSON, HTML,
//! exports) only render a [`Diagnosis`].
//!
//! It serialises to the stable JSON report documented in docs/diagnose-json.md (schema
//! [`SCHEMA`], version [`SCHEMA_VERSION`]; fields are only ever added within a version).
//! Deserialising checks the schema and the version and requires every field the version
//! started with (no defaults), so a renamed or missing field is an error, never "nothing
//! flagged"; a field added later within the version (the ranking, a root-cause row's
//! persistence) reads as empty from a report of an older culprit. Every node's per-window
//! scores ([`NodeReport::scores`]) are not part of the JSON report.
//!
//! The types are here; [`Diagnosis::build`] (the combination rule applied, nodes ranked,
//! root-cause tables) is in `build.rs`; the windows `--follow` reports as they close are in
//! `window.rs`.

mod build;
mod window;

pub use window::{ClosedWindow, NodeScore, WindowLine};

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::analyzer::ScoredWindow;
use crate::combine::{Combined, Verdict};
use crate::family::{Metric, Windows, Words};
use crate::missing::Finding;
use crate::resource::{Levels, Resource};
use crate::time::Timestamp;

/// Version of the JSON report schema.
pub const SCHEMA_VERSION: u32 = 1;
/// Value of the report's `schema` field.
pub const SCHEMA: &str = "culprit-diagnosis";

/// The report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    /// Always [`SCHEMA`].
    #[serde(deserialize_with = "schema")]
    pub schema: String,
    /// [`SCHEMA_VERSION`].
    #[serde(deserialize_with = "version")]
    pub version: u32,
    /// The data directories.
    pub data: Vec<String>,
    /// True when every metric reported used trained thresholds.
    pub trained: bool,
    /// The thresholds file, if any.
    #[serde(deserialize_with = "Option::deserialize")]
    pub thresholds_file: Option<String>,
    /// Analysis settings.
    pub settings: ReportedSettings,
    /// First window start, if any window was analysed.
    #[serde(deserialize_with = "Option::deserialize")]
    pub from: Option<Timestamp>,
    /// Last window end.
    #[serde(deserialize_with = "Option::deserialize")]
    pub to: Option<Timestamp>,
    /// All nodes, sorted by name.
    pub nodes: Vec<String>,
    /// Nodes whose combined verdict is faulty or stopped (the exit status is 1 when not empty).
    pub culprits: Vec<String>,
    /// Combined verdict per node, sorted by name.
    pub verdicts: Vec<NodeVerdict>,
    /// Every node, most suspicious first (added within version 1: empty when read from a
    /// report of an older culprit).
    #[serde(default)]
    pub ranking: Vec<RankedNode>,
    /// Per metric.
    pub metrics: Vec<MetricReport>,
    /// Missing-data findings.
    pub findings: Vec<Finding>,
    /// Things the reader should know (fewer than 4 nodes, untrained metrics, fallbacks…).
    pub notes: Vec<String>,
    /// Problems reading the data.
    pub warnings: Vec<String>,
    /// I/O layers compared bottom-up across peers (seed 003): per node with an anomalous
    /// layer, the lowest one (absent when no node marked layer events or none is anomalous).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layers: Vec<crate::layers::LayerFinding>,
    /// Layers that serialise their requests (seed 003 §4.2, one process's adjacent layers
    /// compared, no peers needed): absent when none does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub serialised: Vec<crate::layers::serial::Serialisation>,
    /// The tracing runtime's share of the traced programs' CPU samples, per node with samples
    /// in it: its cost, shown apart and never compared (absent without samples in it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tracing_cost: Vec<crate::family::sampler::TracingCost>,
    /// Nodes of another role: each differed from its peers the same way through the baseline
    /// or the training data, and was judged against its own baseline ([`crate::roles`]).
    /// Absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<crate::roles::RoleReport>,
    /// The baseline learnt from the diagnosed data itself (`--baseline`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<crate::baseline::BaselineReport>,
}

fn schema<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let s = String::deserialize(d)?;
    if s != SCHEMA {
        return Err(serde::de::Error::custom(format!(
            "schema {s:?} is not {SCHEMA:?}: not a culprit diagnosis"
        )));
    }
    Ok(s)
}

fn version<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let v = u32::deserialize(d)?;
    if v != SCHEMA_VERSION {
        return Err(serde::de::Error::custom(format!(
            "{SCHEMA} version {v}: this culprit reads version {SCHEMA_VERSION}"
        )));
    }
    Ok(v)
}

/// The settings a report echoes, declared with the options ([`crate::options`]).
pub use crate::options::ReportedSettings;

/// Combined verdict on a node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeVerdict {
    /// Node.
    pub node: String,
    /// Verdict.
    #[serde(flatten)]
    pub combined: Combined,
    /// The resource at fault, for faulty and suspect nodes (seed 001's checklist).
    #[serde(deserialize_with = "Option::deserialize")]
    pub resource: Option<Resource>,
}

/// A node's place in the ranking of suspects: by verdict (stopped, faulty, suspect, ok), then
/// by how persistently it was anomalous (seed 001 §3.4's accumulator, the same counter that
/// orders root-cause tables), then by score.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RankedNode {
    /// 1-based rank.
    pub rank: usize,
    /// Node.
    pub node: String,
    /// Its combined verdict.
    pub verdict: Verdict,
    /// The peak of its persistence accumulator on `metric`: anomalous windows net of the normal
    /// windows among them, over its most persistent stretch.
    pub persistence: u32,
    /// The metric of `persistence` and `score` (the one where it is most suspicious), if any
    /// metric scored it.
    #[serde(deserialize_with = "Option::deserialize")]
    pub metric: Option<Metric>,
    /// Score ÷ threshold on `metric`: the median over its anomalous windows, or over all its
    /// windows when none was anomalous (below 1: it stayed under its threshold).
    #[serde(deserialize_with = "Option::deserialize")]
    pub score: Option<f64>,
    /// One line: why it is where it is.
    pub reason: String,
}

/// Whether a metric's thresholds were trained.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Thresholds {
    /// From a thresholds file.
    Trained,
    /// The unsupervised rule.
    Untrained,
}

/// One metric.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MetricReport {
    /// Metric.
    pub metric: Metric,
    /// Its family for corroboration: itself, or `os` for every OS metric.
    pub family: Metric,
    /// Unit of values: the family's ([`crate::family::About::unit`]), an open set —
    /// families can be defined outside this crate and an OS metric's unit is its catalogue
    /// entry's — so it stays a string, as do the units of scores and distances made from it.
    pub unit: String,
    /// Unit of scores and thresholds.
    pub score_unit: String,
    /// Unit of root-cause distances (added within version 1; the same as `score_unit` but for
    /// the suspect score, whose scores compare profiles).
    #[serde(default)]
    pub distance_unit: String,
    /// Thresholds trained or not.
    pub thresholds: Thresholds,
    /// Why a metric is untrained, in words: "untrained: not in thresholds.json" (a thresholds
    /// file was given but holds nothing for it) or "untrained: no thresholds file"; `None`
    /// when trained (added within version 1).
    #[serde(default)]
    pub untrained: Option<String>,
    /// Windows closed.
    pub windows: u64,
    /// Windows with fewer than 3 nodes with complete data (not scored).
    pub unscored_windows: u64,
    /// Functions (components) kept by the dimensionality rule.
    pub kept: usize,
    /// Per node, sorted by name.
    pub nodes: Vec<NodeReport>,
    /// The metric's windows when they are the family's own (not in the JSON report).
    #[serde(skip)]
    pub windows_ns: Option<Windows>,
}

/// A node's verdict on one metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MetricStatus {
    /// The k-of-(2k − 1) filter fired at least once.
    Faulty,
    /// Compared, never faulty, and the windows it could not be compared in could not have
    /// hidden a fault.
    Ok,
    /// No data for this metric.
    NoData,
    /// It has data, but no window could compare it (its data had gaps in every window, or
    /// too few nodes could be compared): never "ok" (added within version 1).
    NotCompared,
    /// Not faulty in the windows compared, but too few of them: with the windows it could not
    /// be compared in anomalous, the k-of-(2k − 1) filter would have fired ("not enough
    /// comparable windows"; added within version 1).
    Undecided,
}

impl MetricStatus {
    /// The words in a verdict table.
    pub fn word(self) -> &'static str {
        match self {
            MetricStatus::Faulty => "FAULTY",
            MetricStatus::Ok => "ok",
            MetricStatus::NoData => "-",
            MetricStatus::NotCompared => "not compared",
            MetricStatus::Undecided => "undecided",
        }
    }
}

/// Where the threshold applied to a node came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ThresholdSource {
    /// The node's own trained threshold (`--per-node-thresholds`).
    Own,
    /// The largest trained threshold of the metric.
    Largest,
    /// The unsupervised rule.
    Unsupervised,
}

/// One node for one metric.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    /// Node.
    pub node: String,
    /// Verdict on this metric.
    pub verdict: MetricStatus,
    /// Trained threshold applied, if any.
    #[serde(deserialize_with = "Option::deserialize")]
    pub threshold: Option<f64>,
    /// Where the threshold came from.
    #[serde(deserialize_with = "Option::deserialize")]
    pub threshold_source: Option<ThresholdSource>,
    /// Windows scored.
    pub windows_scored: u64,
    /// Windows left out for this node: less than half of their seconds present (or too few
    /// nodes to compare).
    pub windows_incomplete: u64,
    /// Windows in which it was compared on the seconds present, its sums scaled to the window
    /// (added within version 1).
    #[serde(default)]
    pub windows_partial: u64,
    /// Its intervals that arrived after their window had closed (`--follow`), left out (added
    /// within version 1).
    #[serde(default)]
    pub late_intervals: u64,
    /// Untrained: windows in which the node stood out from its peers without having changed
    /// from its own baseline (persistently different, not counted as anomalous).
    pub windows_different: u64,
    /// Largest score.
    pub max_score: f64,
    /// Median of score / threshold over anomalous windows.
    #[serde(deserialize_with = "Option::deserialize")]
    pub evidence: Option<f64>,
    /// Faulty stretches.
    pub episodes: Vec<EpisodeReport>,
    /// Anomalous windows.
    pub anomalous_windows: Vec<AnomalousWindow>,
    /// Root cause: the top functions (faulty and suspect nodes only).
    pub top: Vec<CauseRow>,
    /// The node's score in every window it was scored in (not in the JSON report).
    #[serde(skip)]
    pub scores: Vec<ScoredWindow>,
}

impl NodeReport {
    /// The anomalous windows, each `size_ns` long, as runs of overlapping windows, in order.
    pub fn anomalous_runs(&self, size_ns: u64) -> Vec<WindowRun> {
        let mut runs: Vec<WindowRun> = Vec::new();
        for a in &self.anomalous_windows {
            match runs.last_mut() {
                Some(r) if a.start_ns <= r.end_ns => {
                    r.end_ns = a.start_ns + size_ns;
                    r.windows += 1;
                }
                _ => runs.push(WindowRun {
                    start_ns: a.start_ns,
                    end_ns: a.start_ns + size_ns,
                    windows: 1,
                }),
            }
        }
        runs
    }
}

/// Overlapping anomalous windows merged ([`NodeReport::anomalous_runs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowRun {
    /// Start of the first window, wall-clock ns.
    pub start_ns: u64,
    /// End of the last window.
    pub end_ns: u64,
    /// Windows in the run.
    pub windows: usize,
}

/// A faulty stretch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpisodeReport {
    /// Start of the window whose close made the node faulty.
    pub from: Timestamp,
    /// End of the last window in which it was faulty.
    pub to: Timestamp,
}

/// An anomalous window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnomalousWindow {
    /// Start.
    pub start: Timestamp,
    /// End.
    pub end: Timestamp,
    /// Start, ns since the epoch (to the nanosecond).
    pub start_ns: u64,
    /// Score.
    pub score: f64,
    /// Threshold exceeded.
    pub threshold: f64,
    /// When a rare function made the window anomalous (`crate::rare`): the largest ratio of
    /// the node's count of one to its noise floor, over the node's bar (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rare: Option<f64>,
}

/// One row of a root-cause table (read through `CauseRowJson`, which says which fields are
/// required).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(from = "CauseRowJson")]
pub struct CauseRow {
    /// 1-based rank.
    pub rank: usize,
    /// Function (or event) name.
    pub function: String,
    /// Image, if a function.
    pub image: Option<String>,
    /// Program, with `--by-program`.
    pub program: Option<String>,
    /// Σ component distance to the reference over the anomalous windows (the metric's
    /// `distance_unit`).
    pub distance: f64,
    /// Σ the node's value over those windows (metric unit).
    pub node_total: f64,
    /// Σ the reference's (median node's) value (metric unit).
    pub median_total: f64,
    /// `node_total − median_total`.
    pub deviation: f64,
    /// `deviation / median_total`, when the median is not zero.
    pub relative: Option<f64>,
    /// Above or below the median node, in the family's words ("more time", "fewer calls"…).
    pub direction: CauseDirection,
    /// Peak of the function's persistence accumulator (seed 001 §3.4): windows in which it
    /// alone deviated more than the window's typical node did in all functions, net of the
    /// node's other windows; the table's first sort key (added within version 1).
    pub persistence: u32,
    /// A rare function (`crate::rare`): below the keep rule, counted orders of magnitude above
    /// its peers' noise floor on this node.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub rare: bool,
}

/// A [`CauseRow`] as the JSON carries it: its direction in words only. Read back, the side
/// is the sign of `deviation`, as [`Diagnosis::build`] chose it.
#[derive(Deserialize)]
struct CauseRowJson {
    rank: usize,
    function: String,
    #[serde(deserialize_with = "Option::deserialize")]
    image: Option<String>,
    #[serde(deserialize_with = "Option::deserialize")]
    program: Option<String>,
    distance: f64,
    node_total: f64,
    median_total: f64,
    deviation: f64,
    #[serde(deserialize_with = "Option::deserialize")]
    relative: Option<f64>,
    direction: String,
    #[serde(default)]
    persistence: u32,
    #[serde(default)]
    rare: bool,
}

impl From<CauseRowJson> for CauseRow {
    fn from(j: CauseRowJson) -> Self {
        CauseRow {
            rank: j.rank,
            function: j.function,
            image: j.image,
            program: j.program,
            distance: j.distance,
            node_total: j.node_total,
            median_total: j.median_total,
            deviation: j.deviation,
            relative: j.relative,
            direction: CauseDirection {
                side: Side::of(j.deviation),
                word: Cow::Owned(j.direction),
            },
            persistence: j.persistence,
            rare: j.rare,
        }
    }
}

/// Which side of the median node (the reference) a node's value lies on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// Above it, or equal.
    Above,
    /// Below it.
    Below,
}

impl Side {
    /// The side of a deviation from the median node (`node − median`).
    pub fn of(deviation: f64) -> Side {
        if deviation >= 0.0 {
            Side::Above
        } else {
            Side::Below
        }
    }
}

/// A root-cause row's direction: its [`Side`], with the words its metric family gives it
/// ([`Words`]: "more time", "fewer calls", "higher"). Families can be defined outside this
/// crate, so the words are the family's, not a closed set; they are what the JSON and people
/// read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CauseDirection {
    side: Side,
    word: Cow<'static, str>,
}

impl CauseDirection {
    /// `side` in a family's `words`.
    pub fn new(side: Side, words: Words) -> Self {
        let word = match side {
            Side::Above => words.more,
            Side::Below => words.less,
        };
        CauseDirection {
            side,
            word: Cow::Borrowed(word),
        }
    }

    /// Above or below the median node.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The family's words for it: "more time", "fewer calls"…
    pub fn word(&self) -> &str {
        &self.word
    }
}

impl fmt::Display for CauseDirection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.word)
    }
}

impl Serialize for CauseDirection {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.word)
    }
}

/// What the report says besides the analysis' outcome.
#[derive(Debug)]
pub struct ReportInput<'a> {
    /// Data directories.
    pub data: Vec<String>,
    /// Thresholds file.
    pub thresholds_file: Option<String>,
    /// Metrics to report (others may have run as helpers, e.g. time for count's rule).
    pub reported: &'a [Metric],
    /// Findings.
    pub findings: Vec<Finding>,
    /// Notes.
    pub notes: Vec<String>,
    /// Loader warnings.
    pub warnings: Vec<String>,
    /// Rows per root-cause table.
    pub top: usize,
    /// Peers description.
    pub peers: String,
    /// Components keyed by program.
    pub by_program: bool,
    /// The OS metrics' windows and moving-average width.
    pub os: OsSettings,
    /// Per-second levels of the OS metrics (directions for the resource checklist).
    pub levels: Option<&'a dyn Levels>,
    /// The windows diagnosed follow a baseline learnt from the same data (`--baseline`): a
    /// node faulty in the first of them changed from that baseline, which would have learnt a
    /// standing difference as a role — it is not "different since its data began".
    pub after_baseline: bool,
}

/// The OS metrics' settings as reported.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OsSettings {
    /// WinSize and WinShift.
    pub windows: Windows,
    /// Moving-average width.
    pub smoothing: usize,
}

impl Diagnosis {
    /// The exit status of `culprit diagnose` for this report: 1 when a culprit was found.
    pub fn exit_status(&self) -> i32 {
        i32::from(!self.culprits.is_empty())
    }

    /// The report of metric `metric`, if analysed.
    pub fn metric(&self, metric: Metric) -> Option<&MetricReport> {
        self.metrics.iter().find(|m| m.metric == metric)
    }

    /// The combined verdict on `node`.
    pub fn verdict(&self, node: &str) -> Option<&NodeVerdict> {
        self.verdicts.iter().find(|v| v.node == node)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::analyzer::{Analyzer, AnalyzerConfig, MetricConfig};
    use crate::distance::Distance;
    use crate::family::tracer::Time;
    use crate::family::{KeepRule, Windows};
    use crate::policy::{Policy, Unsupervised};
    use crate::score::{Peers, ScoreKind};
    use crate::synth::{Fault, Scenario};
    use crate::time::NS_PER_S;

    fn diagnose(sc: &Scenario) -> Diagnosis {
        let mut a = Analyzer::new(
            AnalyzerConfig {
                windows: Windows {
                    size_ns: 60 * NS_PER_S,
                    shift_ns: 30 * NS_PER_S,
                },
                k: 3,
                distance: Distance::Manhattan,
                score: ScoreKind::Suspect,
                peers: Peers::Auto,
                keep_scores: true,
            },
            vec![MetricConfig {
                family: Arc::new(Time),
                slot_ns: 10 * NS_PER_S,
                lag_ns: 20 * NS_PER_S,
                keep: KeepRule::AtLeast(0.0),
                policy: Policy::Untrained(Unsupervised::default()),
                weights: None,
                normal: None,
                roles: None,
                rare: None,
            }],
        );
        sc.feed(&mut a, 0);
        let outcome = a.into_outcome();
        Diagnosis::build(
            &outcome,
            ReportInput {
                data: vec!["synthetic".into()],
                thresholds_file: None,
                reported: &[Metric::TIME],
                findings: Vec::new(),
                notes: Vec::new(),
                warnings: Vec::new(),
                top: 5,
                peers: "all".into(),
                by_program: false,
                os: OsSettings {
                    windows: Windows {
                        size_ns: 60 * NS_PER_S,
                        shift_ns: 30 * NS_PER_S,
                    },
                    smoothing: 1,
                },
                levels: None,
                after_baseline: false,
            },
        )
    }

    fn scenario(fault: Option<Fault>) -> Scenario {
        Scenario {
            nodes: 5,
            secs: 1200,
            interval_s: 10,
            noise: 0.1,
            seed: 3,
            faults: fault.into_iter().collect(),
            ..Scenario::default()
        }
    }

    /// Every node ranked once: the culprit first, by verdict then persistence; its root cause
    /// led by the function that deviated window after window.
    #[test]
    fn ranking_puts_the_persistent_culprit_first() {
        let d = diagnose(&scenario(Some(Fault {
            node: 2,
            func: 3,
            factor: 6.0,
            from_s: 300,
            to_s: 900,
        })));
        assert_eq!(d.culprits, ["n02"], "{:#?}", d.verdicts);
        let names: Vec<&str> = d.ranking.iter().map(|r| r.node.as_str()).collect();
        assert_eq!(names.len(), 5);
        assert_eq!(names[0], "n02");
        let mut sorted = names.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), 5, "each node once: {names:?}");
        let first = &d.ranking[0];
        assert_eq!(first.verdict, Verdict::Faulty);
        assert_eq!(first.metric, Some(Metric::TIME));
        // Anomalous for the 10 minutes of the fault (19 windows touch it): a long stretch.
        assert!(first.persistence >= 10, "{first:#?}");
        assert!(first.score.unwrap() > 1.0);
        assert!(first.reason.contains("f003"), "{}", first.reason);
        assert!(
            !first.reason.contains("since its data began"),
            "{}",
            first.reason
        );
        for (i, r) in d.ranking.iter().enumerate() {
            assert_eq!(r.rank, i + 1);
            if i > 0 {
                assert_eq!(r.verdict, Verdict::Ok, "{r:#?}");
                assert!(r.persistence < first.persistence);
            }
        }
        let top = &d.metrics[0].nodes[2].top;
        assert_eq!(top[0].function, "f003", "{top:#?}");
        assert!(top[0].persistence >= 10, "{top:#?}");
        assert!(top.windows(2).all(|w| w[0].persistence >= w[1].persistence));
    }

    /// A node different from its first window is a culprit "different since its data began",
    /// with a note on --exclude-node; fault-free, nobody is flagged and everyone is ranked.
    #[test]
    fn different_from_the_start_and_fault_free() {
        let d = diagnose(&scenario(Some(Fault {
            node: 4,
            func: 2,
            factor: 5.0,
            from_s: 0,
            to_s: 1200,
        })));
        assert_eq!(d.culprits, ["n04"], "{:#?}", d.verdicts);
        let v = d.verdict("n04").unwrap();
        assert!(v
            .combined
            .reason
            .ends_with("different since its data began"));
        assert!(
            d.notes.iter().any(|n| n.contains("--exclude-node")),
            "{:?}",
            d.notes
        );
        // A fault from the second window (the first is normal) is within the filter's first
        // 2k − 1 windows: no normal stretch shows a change, so it reads the same.
        let d = diagnose(&scenario(Some(Fault {
            node: 4,
            func: 2,
            factor: 5.0,
            from_s: 60,
            to_s: 1200,
        })));
        assert_eq!(d.culprits, ["n04"], "{:#?}", d.verdicts);
        let v = d.verdict("n04").unwrap();
        assert!(v
            .combined
            .reason
            .ends_with("different since its data began"));
        // From 5 minutes on, after ten normal windows: a change, not "since its data began".
        let d = diagnose(&scenario(Some(Fault {
            node: 4,
            func: 2,
            factor: 5.0,
            from_s: 300,
            to_s: 1200,
        })));
        assert_eq!(d.culprits, ["n04"], "{:#?}", d.verdicts);
        let v = d.verdict("n04").unwrap();
        assert!(
            !v.combined.reason.contains("since its data began"),
            "{v:#?}"
        );
        let d = diagnose(&scenario(None));
        assert!(d.culprits.is_empty(), "{:#?}", d.verdicts);
        assert_eq!(d.ranking.len(), 5);
        assert!(
            d.ranking
                .iter()
                .all(|r| r.reason.starts_with("like its peers") || r.reason.contains("transient")),
            "{:#?}",
            d.ranking
        );
    }
}
