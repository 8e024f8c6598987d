//! The typed result of a diagnosis: combined verdicts, culprits, per-metric verdicts with their
//! root-cause tables, missing-data findings, and every node's score in every window. The
//! combination rule ([`crate::combine`]) is applied here, once; outputs (human, JSON, HTML,
//! exports) only render a [`Diagnosis`].
//!
//! It serialises to the stable JSON report documented in docs/diagnose-json.md (schema
//! [`SCHEMA`], version [`SCHEMA_VERSION`]; fields are only ever added within a version).
//! Deserialising checks the schema and the version and requires every field of the version
//! (no defaults), so a renamed or missing field is an error, never "nothing flagged". Every
//! node's per-window scores ([`NodeReport::scores`]) are not part of the JSON report.

use serde::{Deserialize, Deserializer, Serialize};

use crate::analyzer::{MetricResult, Outcome, ScoredWindow, WindowEvent};
use crate::combine::{combine, evidence, Combined, MetricVerdict, Verdict};
use crate::distance::Distance;
use crate::family::{Metric, Windows};
use crate::missing::Finding;
use crate::model::PeerIdx;
use crate::policy::{Policy, Unsupervised};
use crate::score::ScoreKind;
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
}

/// Combined verdict on a node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeVerdict {
    /// Node.
    pub node: String,
    /// Verdict.
    #[serde(flatten)]
    pub combined: Combined,
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
    /// Unit of values.
    pub unit: String,
    /// Unit of scores and thresholds.
    pub score_unit: String,
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
    /// Σ component distance to the reference over the anomalous windows (score unit).
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
        let analysed = metrics.iter().filter(|m| m.windows > m.unscored).count();
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
        for &n in &order {
            let per: Vec<MetricVerdict> = metrics.iter().map(|m| MetricVerdict::of(m, n)).collect();
            let stopped = input
                .findings
                .iter()
                .any(|f| f.is_stop() && f.node() == names[n]);
            let slack = (2 * cfg.k as u64 - 1) * cfg.windows.shift_ns;
            let mut combined = combine(&per, analysed, stopped, slack);
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
        for m in &metrics {
            for &n in &order {
                let nm = &m.nodes[n];
                if nm.scored > 0 && nm.different * 2 >= nm.scored && !nm.faulty() {
                    notes.push(format!(
                        "{} stands out from its peers in {} in {} of {} windows, but has not \
                         changed since its data began: a different role or hardware, or a fault \
                         older than the data. Not flagged; training on fault-free runs tells \
                         them apart",
                        names[n],
                        m.metric(),
                        nm.different,
                        nm.scored
                    ));
                }
            }
        }
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
            },
            from: from.map(rfc3339),
            to: to.map(rfc3339),
            nodes: order.iter().map(|&n| names[n].clone()).collect(),
            culprits,
            verdicts,
            metrics: metrics_out,
            findings: input.findings,
            notes,
            warnings: input.warnings,
            layers: Vec::new(),
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
        unit: family.unit().to_string(),
        score_unit: family
            .score_unit(outcome.config.distance, weighted)
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
