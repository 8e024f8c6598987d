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

use serde::{Deserialize, Deserializer, Serialize};

use crate::analyzer::{MetricResult, Outcome, ScoredWindow, WindowEvent};
use crate::combine::{combine, evidence, Combined, MetricVerdict, Verdict};
use crate::distance::Distance;
use crate::family::{Metric, Windows};
use crate::missing::Finding;
use crate::model::PeerIdx;
use crate::persistence::Persistence;
use crate::policy::{Policy, Unsupervised};
use crate::resource::{self, Levels, Resource};
use crate::score::{median_in_place, ScoreKind};
use crate::time::rfc3339;

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
    /// First window start (RFC 3339), if any window was analysed.
    #[serde(deserialize_with = "Option::deserialize")]
    pub from: Option<String>,
    /// Last window end.
    #[serde(deserialize_with = "Option::deserialize")]
    pub to: Option<String>,
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

/// Settings as reported.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ReportedSettings {
    /// WinSize, seconds.
    pub win_size_s: f64,
    /// WinShift, seconds.
    pub win_shift_s: f64,
    /// k (faulty when anomalous in k of the last 2k − 1 windows).
    pub k: usize,
    /// Score.
    pub score: ScoreKind,
    /// Distance.
    pub distance: Distance,
    /// Pairwise peers: `all`, `rotating domains of N`, `n/a`.
    pub peers: String,
    /// Components keyed by program.
    pub by_program: bool,
    /// The unsupervised rule, for metrics without trained thresholds.
    #[serde(deserialize_with = "Option::deserialize")]
    pub unsupervised: Option<Unsupervised>,
    /// The OS metrics' WinSize, seconds.
    pub os_win_size_s: f64,
    /// The OS metrics' WinShift, seconds.
    pub os_win_shift_s: f64,
    /// Moving-average width over per-second values before distributions are compared.
    pub smoothing: usize,
}

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
    /// Unit of values.
    pub unit: String,
    /// Unit of scores and thresholds.
    pub score_unit: String,
    /// Unit of root-cause distances (added within version 1; the same as `score_unit` but for
    /// the suspect score, whose scores compare profiles).
    #[serde(default)]
    pub distance_unit: String,
    /// Thresholds trained or not.
    pub thresholds: Thresholds,
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
    /// Compared, never faulty.
    Ok,
    /// No data for this metric.
    NoData,
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
    /// Windows with incomplete data for this node.
    pub windows_incomplete: u64,
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

/// A faulty stretch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EpisodeReport {
    /// Start of the window whose close made the node faulty.
    pub from: String,
    /// End of the last window in which it was faulty.
    pub to: String,
}

/// An anomalous window.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnomalousWindow {
    /// Start (RFC 3339).
    pub start: String,
    /// End.
    pub end: String,
    /// Start, ns since the epoch.
    pub start_ns: u64,
    /// Score.
    pub score: f64,
    /// Threshold exceeded.
    pub threshold: f64,
}

/// One row of a root-cause table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CauseRow {
    /// 1-based rank.
    pub rank: usize,
    /// Function (or event) name.
    pub function: String,
    /// Image, if a function.
    #[serde(deserialize_with = "Option::deserialize")]
    pub image: Option<String>,
    /// Program, with `--by-program`.
    #[serde(deserialize_with = "Option::deserialize")]
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
    #[serde(deserialize_with = "Option::deserialize")]
    pub relative: Option<f64>,
    /// "more time", "fewer calls"…
    pub direction: String,
    /// Peak of the function's persistence accumulator (seed 001 §3.4): windows in which it
    /// alone deviated more than the window's typical node did in all functions, net of the
    /// node's other windows; the table's first sort key (added within version 1).
    #[serde(default)]
    pub persistence: u32,
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

    /// Builds the report of an analysis: applies the combination rule, ranks root causes.
    pub fn build(outcome: &Outcome, input: ReportInput<'_>) -> Diagnosis {
        let names = &outcome.names;
        let cfg = &outcome.config;
        let mut order: Vec<usize> = (0..names.len()).collect();
        order.sort_by(|&a, &b| names[a].cmp(&names[b]));
        let metrics: Vec<&MetricResult> = outcome
            .metrics
            .iter()
            .filter(|m| input.reported.contains(&m.metric()))
            .collect();
        // Families analysed (all OS metrics are one).
        let mut analysed_families: Vec<Metric> = metrics
            .iter()
            .filter(|m| m.windows > m.unscored)
            .map(|m| m.config.family.group())
            .collect();
        analysed_families.sort();
        analysed_families.dedup();
        let analysed = analysed_families.len();
        let mut unsupervised = None;
        let mut trained = !metrics.is_empty();
        for m in &metrics {
            match &m.config.policy {
                Policy::Untrained(u) => {
                    unsupervised = Some(*u);
                    trained = false;
                }
                Policy::Training => trained = false,
                Policy::Trained { .. } => {}
            }
        }
        let mut verdicts = Vec::new();
        let mut culprits = Vec::new();
        let mut since_start: Vec<(usize, Metric)> = Vec::new();
        for &n in &order {
            let per: Vec<MetricVerdict> = metrics.iter().map(|m| MetricVerdict::of(m, n)).collect();
            let stopped = input
                .findings
                .iter()
                .any(|f| f.is_stop() && f.node() == names[n]);
            let slack = (2 * cfg.k as u64 - 1) * cfg.windows.shift_ns;
            let mut combined = combine(&per, analysed, stopped, slack);
            // Stuck and paused say what the deviations are about: they take precedence
            // (paused over stuck: a stopped process's calls all look stuck).
            if let Some((v, why)) = input
                .findings
                .iter()
                .filter(|f| f.node() == names[n])
                .filter_map(|f| f.verdict())
                .max_by_key(|(v, _)| *v)
            {
                combined.verdict = v;
                combined.reason = why;
            }
            // A stopped node's last call (seed 002's last function) belongs in its reason.
            let last_call = input.findings.iter().find_map(|f| match f {
                Finding::Stopped {
                    node, last_call, ..
                } if *node == names[n] => last_call.as_ref(),
                _ => None,
            });
            if let (Verdict::Stopped, Some(c)) = (combined.verdict, last_call) {
                combined.reason = format!("{}; last seen: {}", combined.reason, c.describe());
            }
            let from_start: Vec<Metric> = metrics
                .iter()
                .filter(|m| faulty_from_start(m, n, cfg.k))
                .map(|m| m.metric())
                .collect();
            if combined.verdict.is_culprit() || combined.verdict == Verdict::Suspect {
                if let Some(&m) = from_start.first() {
                    if !stopped {
                        combined.reason.push_str("; different since its data began");
                        since_start.push((n, m));
                    }
                }
            }
            let examined = matches!(combined.verdict, Verdict::Faulty | Verdict::Suspect)
                .then(|| resource::examine(outcome, &metrics, n, input.levels));
            if let Some((r, moved)) = &examined {
                resource::demote_shapeless(&mut combined, r, *moved);
            }
            let resource = examined.map(|(r, _)| r);
            let damage: Vec<String> = input
                .findings
                .iter()
                .filter_map(|f| match f {
                    Finding::Damaged { node, file, reason } if *node == names[n] => {
                        Some(format!("{file}: {reason}"))
                    }
                    _ => None,
                })
                .collect();
            if !damage.is_empty() && combined.verdict == Verdict::Ok {
                combined.verdict = Verdict::Damaged;
                combined.reason = format!(
                    "its data is damaged ({}); the intact part was compared",
                    damage.join("; ")
                );
            }
            if combined.verdict.is_culprit() {
                culprits.push(names[n].clone());
            }
            verdicts.push(NodeVerdict {
                node: names[n].clone(),
                combined,
                resource,
            });
        }
        let suspects: Vec<&str> = verdicts
            .iter()
            .filter(|v| !matches!(v.combined.verdict, Verdict::Ok | Verdict::Damaged))
            .map(|v| v.node.as_str())
            .collect();
        let metrics_out = metrics
            .iter()
            .map(|m| metric_report(outcome, m, &order, &suspects, input.top))
            .collect();
        let mut notes = input.notes;
        for &(n, m) in &since_start {
            let trained_here = metrics
                .iter()
                .any(|r| r.metric() == m && matches!(r.config.policy, Policy::Trained { .. }));
            let how = if trained_here {
                "leave a node with another role out with --exclude-node, or train with it"
            } else {
                "without training, culprit cannot tell these apart: leave a node with another \
                 role out with --exclude-node, or train on fault-free runs"
            };
            notes.push(format!(
                "{} has differed from its peers on {m} since its data began: a fault older than \
                 the data, or a node with another role or hardware; {how}",
                names[n]
            ));
        }
        let ranking = rank_nodes(cfg.k, &metrics, names, &order, &verdicts);
        let (mut from, mut to) = (None::<u64>, None::<u64>);
        for m in &metrics {
            if let Some(r) = m.window_range {
                from = Some(from.map_or(r.first_ns, |f| f.min(r.first_ns)));
                let e = r.last_ns + m.windows_ns.size_ns;
                to = Some(to.map_or(e, |t| t.max(e)));
            }
        }
        Diagnosis {
            schema: SCHEMA.to_string(),
            version: SCHEMA_VERSION,
            data: input.data,
            trained,
            thresholds_file: input.thresholds_file,
            settings: ReportedSettings {
                win_size_s: cfg.windows.size_ns as f64 / 1e9,
                win_shift_s: cfg.windows.shift_ns as f64 / 1e9,
                k: cfg.k,
                score: cfg.score,
                distance: cfg.distance,
                peers: input.peers,
                by_program: input.by_program,
                unsupervised,
                os_win_size_s: input.os.windows.size_ns as f64 / 1e9,
                os_win_shift_s: input.os.windows.shift_ns as f64 / 1e9,
                smoothing: input.os.smoothing,
            },
            from: from.map(rfc3339),
            to: to.map(rfc3339),
            nodes: order.iter().map(|&n| names[n].clone()).collect(),
            culprits,
            verdicts,
            ranking,
            metrics: metrics_out,
            findings: input.findings,
            notes,
            warnings: input.warnings,
            layers: Vec::new(),
            serialised: Vec::new(),
        }
    }
}

/// True when node `n` became faulty on `m` within its first 2k − 1 scored windows: it differed
/// from its peers from the start of its data, as far as the k-of-(2k − 1) filter can tell (a
/// change inside its first 2k − 1 windows cannot be told from none). Its first window need not
/// be anomalous: on a loaded machine the first window of every node is noisy (measured: beside
/// `stress-ng --cpu 2` a node doing 15× work from its first second lost that label in 4 of 20
/// runs).
fn faulty_from_start(m: &MetricResult, n: PeerIdx, k: usize) -> bool {
    let nm = &m.nodes[n];
    match (nm.episodes.first(), nm.first_scored_ns) {
        (Some(e), Some(first)) => {
            e.first_window_ns <= first + (2 * k as u64 - 2) * m.windows_ns.shift_ns
        }
        _ => false,
    }
}

/// Median score ÷ threshold of node `n` on `m`: over its anomalous windows, or over all its
/// windows when none was anomalous.
fn score_ratio(m: &MetricResult, n: PeerIdx) -> Option<f64> {
    let nm = &m.nodes[n];
    if let Some(e) = evidence(nm) {
        return Some(e);
    }
    let mut r: Vec<f64> = nm
        .scores
        .iter()
        .filter(|w| w.threshold > 0.0 && w.threshold.is_finite())
        .map(|w| w.score / w.threshold)
        .collect();
    (!r.is_empty()).then(|| median_in_place(&mut r))
}

/// The ranking of suspects: every node, most suspicious first.
fn rank_nodes(
    k: usize,
    metrics: &[&MetricResult],
    names: &[String],
    order: &[usize],
    verdicts: &[NodeVerdict],
) -> Vec<RankedNode> {
    struct Row<'a> {
        n: usize,
        verdict: &'a NodeVerdict,
        persistence: Persistence,
        metric: Option<&'a MetricResult>,
        score: Option<f64>,
    }
    let mut rows: Vec<Row<'_>> = order
        .iter()
        .zip(verdicts)
        .map(|(&n, v)| {
            // The metric on which the node is most persistently anomalous (then: highest score).
            let best = metrics
                .iter()
                .filter(|m| m.nodes[n].scored > 0)
                .map(|m| (*m, m.nodes[n].persistence, score_ratio(m, n)))
                .min_by(|a, b| {
                    a.1.order(&b.1)
                        .then_with(|| b.2.unwrap_or(0.0).total_cmp(&a.2.unwrap_or(0.0)))
                });
            Row {
                n,
                verdict: v,
                persistence: best.map(|b| b.1).unwrap_or_default(),
                metric: best.map(|b| b.0),
                score: best.and_then(|b| b.2),
            }
        })
        .collect();
    // Damage is a finding, not a verdict: a damaged node ranks by its evidence, like an ok one.
    let suspicion = |v: Verdict| match v {
        Verdict::Ok | Verdict::Damaged => 0,
        Verdict::Suspect => 1,
        Verdict::Faulty => 2,
        Verdict::Stuck | Verdict::Paused => 3,
        Verdict::Stopped => 4,
    };
    rows.sort_by(|a, b| {
        suspicion(b.verdict.combined.verdict)
            .cmp(&suspicion(a.verdict.combined.verdict))
            .then_with(|| a.persistence.order(&b.persistence))
            .then_with(|| b.score.unwrap_or(0.0).total_cmp(&a.score.unwrap_or(0.0)))
            .then_with(|| names[a.n].cmp(&names[b.n]))
    });
    rows.iter()
        .enumerate()
        .map(|(i, r)| RankedNode {
            rank: i + 1,
            node: names[r.n].clone(),
            verdict: r.verdict.combined.verdict,
            persistence: r.persistence.peak,
            metric: r.metric.map(|m| m.metric()),
            score: r.score,
            reason: rank_reason(k, r.verdict, r.metric, r.n, r.persistence, r.score),
        })
        .collect()
}

/// One line on why a node is where it is in the ranking.
fn rank_reason(
    k: usize,
    v: &NodeVerdict,
    m: Option<&MetricResult>,
    n: PeerIdx,
    p: Persistence,
    score: Option<f64>,
) -> String {
    let Some(m) = m else {
        return if v.combined.verdict == Verdict::Ok {
            "not compared (no window with enough complete data)".to_string()
        } else {
            v.combined.reason.clone()
        };
    };
    let metric = m.metric();
    let words = m.config.family.words();
    let lead = m
        .top(n, 1)
        .into_iter()
        .next()
        .filter(|r| r.persistence.peak > 0)
        .map(|r| {
            let dir = if r.cause.node >= r.cause.reference {
                words.more
            } else {
                words.less
            };
            format!("{dir} in {}", m.comps[r.comp as usize].name)
        });
    let anomalous = format!(
        "anomalous in {} of {} {metric} windows",
        p.anomalous, p.windows
    );
    match v.combined.verdict {
        Verdict::Ok if p.anomalous == 0 => format!(
            "like its peers: typically {}× its {metric} threshold",
            score.map_or("?".to_string(), |s| format!("{s:.2}"))
        ),
        Verdict::Ok => format!(
            "{anomalous}, never {k} of {} in a row: transient",
            2 * k - 1
        ),
        _ => {
            let mut s = v.combined.reason.clone();
            if p.anomalous > 0 {
                s.push_str(&format!("; {anomalous}"));
            }
            if let Some(l) = lead {
                s.push_str(&format!("; {l}"));
            }
            s
        }
    }
}

fn metric_report(
    outcome: &Outcome,
    m: &MetricResult,
    order: &[usize],
    suspects: &[&str],
    top: usize,
) -> MetricReport {
    let names = &outcome.names;
    let size = m.windows_ns.size_ns;
    let family = &m.config.family;
    let words = family.words();
    let nodes = order
        .iter()
        .map(|&n| {
            let nm = &m.nodes[n];
            let verdict = if nm.first_ns.is_none() {
                MetricStatus::NoData
            } else if nm.faulty() {
                MetricStatus::Faulty
            } else {
                MetricStatus::Ok
            };
            let (threshold, threshold_source) = match (&m.config.policy, nm.threshold) {
                (Policy::Trained { .. }, Some(t)) => (
                    Some(t.value),
                    Some(if t.own {
                        ThresholdSource::Own
                    } else {
                        ThresholdSource::Largest
                    }),
                ),
                (Policy::Untrained(_), _) => (None, Some(ThresholdSource::Unsupervised)),
                _ => (None, None),
            };
            let show_top = nm.faulty() || suspects.contains(&names[n].as_str());
            let top = if show_top && !nm.anomalous.is_empty() {
                cause_rows(m, n, top, words.more, words.less)
            } else {
                Vec::new()
            };
            NodeReport {
                node: names[n].clone(),
                verdict,
                threshold,
                threshold_source,
                windows_scored: nm.scored,
                windows_incomplete: nm.incomplete,
                windows_different: nm.different,
                max_score: nm.max_score,
                evidence: evidence(nm),
                episodes: nm
                    .episodes
                    .iter()
                    .map(|e| EpisodeReport {
                        from: rfc3339(e.first_window_ns),
                        to: rfc3339(e.last_window_ns + size),
                    })
                    .collect(),
                anomalous_windows: nm
                    .anomalous
                    .iter()
                    .map(|a| AnomalousWindow {
                        start: rfc3339(a.start_ns),
                        end: rfc3339(a.start_ns + size),
                        start_ns: a.start_ns,
                        score: a.score,
                        threshold: a.threshold,
                    })
                    .collect(),
                top,
                scores: nm.scores.clone(),
            }
        })
        .collect();
    let weighted = m.config.weights.is_some();
    MetricReport {
        metric: m.metric(),
        family: family.group(),
        unit: family.unit().to_string(),
        score_unit: family
            .score_unit(
                outcome.config.distance,
                weighted,
                outcome.config.score.profiles(),
            )
            .to_string(),
        distance_unit: family
            .cause_unit(outcome.config.distance, weighted)
            .to_string(),
        thresholds: match m.config.policy {
            Policy::Trained { .. } => Thresholds::Trained,
            _ => Thresholds::Untrained,
        },
        windows: m.windows,
        unscored_windows: m.unscored,
        kept: m.kept_list.len(),
        nodes,
        windows_ns: (m.windows_ns != outcome.config.windows).then_some(m.windows_ns),
    }
}

/// The root-cause table of node `n`.
fn cause_rows(m: &MetricResult, n: PeerIdx, top: usize, more: &str, less: &str) -> Vec<CauseRow> {
    m.top(n, top)
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let label = &m.comps[r.comp as usize];
            let rc = r.cause;
            let deviation = rc.node - rc.reference;
            CauseRow {
                rank: i + 1,
                function: label.name.to_string(),
                image: label.image.as_ref().map(|s| s.to_string()),
                program: label.program.as_ref().map(|s| s.to_string()),
                distance: rc.distance,
                node_total: rc.node,
                median_total: rc.reference,
                deviation,
                relative: (rc.reference > 0.0).then(|| deviation / rc.reference),
                direction: if deviation >= 0.0 { more } else { less }.to_string(),
                persistence: r.persistence.peak,
            }
        })
        .collect()
}

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
    /// Nodes whose data does not cover the window.
    pub incomplete: Vec<String>,
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
                })
                .collect(),
            newly_faulty: ev.newly_faulty.iter().map(|&n| name(n)).collect(),
            incomplete: ev.incomplete.iter().map(|&n| name(n)).collect(),
        }
    }

    /// Its JSON line (`--follow --json`).
    pub fn line(&self) -> WindowLine {
        WindowLine {
            event: "window".to_string(),
            metric: self.metric,
            start: rfc3339(self.start_ns),
            end: rfc3339(self.end_ns),
            scored: self.scored,
            anomalous: self.anomalous.iter().map(|a| a.node.clone()).collect(),
            newly_faulty: self.newly_faulty.clone(),
            incomplete: self.incomplete.clone(),
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
    pub start: String,
    /// Window end.
    pub end: String,
    /// Nodes scored.
    pub scored: usize,
    /// Anomalous nodes.
    pub anomalous: Vec<String>,
    /// Nodes that became faulty.
    pub newly_faulty: Vec<String>,
    /// Nodes with incomplete data.
    pub incomplete: Vec<String>,
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::analyzer::{Analyzer, AnalyzerConfig, MetricConfig};
    use crate::family::tracer::Time;
    use crate::family::{KeepRule, Windows};
    use crate::score::Peers;
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
