//! Thresholds: trained from fault-free runs (seed 000 §"Threshold selection"), or the robust
//! unsupervised rule used when there are none; and the thresholds file.
//!
//! docs/thresholds.md describes both and the file format.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};

use super::distance::Distance;
use super::engine::{Spread, Weights};
use super::model::{CompLabel, MetricKind};
use super::score::{median_in_place, ScoreKind};

/// How a metric's per-window scores become anomalies.
#[derive(Clone, Debug)]
pub enum Policy {
    /// Training: nothing is anomalous; the engine records each node's largest score.
    Training,
    /// Trained thresholds by node name; a node without its own gets `fallback`, the largest.
    Trained {
        /// Thresholds by node name.
        by_node: HashMap<String, f64>,
        /// The largest trained threshold of the metric.
        fallback: f64,
    },
    /// No training: [`Unsupervised`] cut-off computed from each window's scores.
    Untrained(Unsupervised),
}

/// The unsupervised rule. In each window, a node is anomalous when its score exceeds both
///
/// * the *peer* cut-off `max(median + κ·1.4826·MAD, γ·median, ρ·size)` over the scores of the
///   window's nodes, where `size` is the distance between the median node and an empty node
///   (for Manhattan: the median node's total activity). The first term is a robust z-score
///   (MAD: median absolute deviation of the scores); the second keeps the noisiest of
///   near-identical peers from being flagged (MAD ≈ 0); the third ignores deviations too small to
///   matter compared with the work done;
/// * its *own* cut-off `λ · min(baseline)`: λ times the least of its own scores in its first
///   `baseline_windows` windows (the least, so that one noisy early window does not raise it). Peer comparison alone cannot tell a faulty node from a
///   healthy one that is persistently different (it holds the metadata, it has another disk);
///   a fault is a *change*. A node that stands out from its peers without having changed is
///   reported as persistently different, not faulty. Training removes the need for this.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Unsupervised {
    /// κ, robust z-score cut-off.
    pub kappa: f64,
    /// γ, multiple of the median score.
    pub gamma: f64,
    /// ρ, fraction of the median node's size.
    pub rho: f64,
    /// λ, multiple of the node's own baseline.
    pub lambda: f64,
    /// Windows forming the node's own baseline.
    pub baseline_windows: usize,
}

impl Default for Unsupervised {
    fn default() -> Self {
        Unsupervised {
            kappa: 4.0,
            gamma: 3.0,
            rho: 0.05,
            lambda: 2.0,
            baseline_windows: 10,
        }
    }
}

impl Unsupervised {
    /// The node's own cut-off from its baseline scores (0 while it has none).
    pub fn baseline_cutoff(&self, baseline: &[f64]) -> f64 {
        let least = baseline.iter().copied().fold(f64::INFINITY, f64::min);
        if least.is_finite() {
            self.lambda * least
        } else {
            0.0
        }
    }

    /// The cut-off for a window with these scores and this median-node size.
    pub fn cutoff(&self, scores: &[f64], size: f64) -> f64 {
        let mut s = scores.to_vec();
        let med = median_in_place(&mut s);
        for v in s.iter_mut() {
            *v = (*v - med).abs();
        }
        let mad = median_in_place(&mut s);
        (med + self.kappa * 1.4826 * mad)
            .max(self.gamma * med)
            .max(self.rho * size)
    }
}

/// Seed 000: "the minimum integer threshold … that eliminates all anomalies on a particular
/// server … is doubled". A node is anomalous when its score *exceeds* the threshold, so the
/// least threshold on the distance's grid that is ≥ the largest fault-free score, at least one
/// grid step, times two.
pub fn trained_threshold(max_score: f64, quantum: f64) -> f64 {
    let steps = (max_score / quantum).ceil().max(1.0);
    2.0 * steps * quantum
}

/// Version of the thresholds file format this build writes and reads.
pub const THRESHOLDS_VERSION: u32 = 1;
/// Value of the file's `format` field.
pub const THRESHOLDS_FORMAT: &str = "culprit-thresholds";

/// A thresholds file: everything needed to apply trained thresholds safely.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ThresholdsFile {
    /// Always [`THRESHOLDS_FORMAT`].
    pub format: String,
    /// [`THRESHOLDS_VERSION`].
    pub version: u32,
    /// The training runs (as given on the command line).
    pub runs: Vec<String>,
    /// Analysis settings the thresholds are valid for.
    pub settings: Settings,
    /// Per metric.
    pub metrics: BTreeMap<MetricKind, MetricThresholds>,
}

/// Analysis settings recorded with thresholds; diagnose must use the same.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Settings {
    /// WinSize, ns.
    pub win_size_ns: u64,
    /// WinShift, ns.
    pub win_shift_ns: u64,
    /// k of the k-of-(2k − 1) filter.
    pub k: usize,
    /// Score.
    pub score: ScoreKind,
    /// Distance.
    pub distance: Distance,
    /// Components keyed per program.
    pub by_program: bool,
    /// Samples dimensionality rule, in samples at the reference rate.
    pub min_samples: f64,
    /// Time dimensionality rule, ms.
    pub min_time_ms: f64,
    /// Variance weighting of components (files written before it existed: none).
    #[serde(default)]
    pub weighting: Weighting,
}

/// Which training score a trained threshold doubles.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum ThresholdRule {
    /// The least threshold under which no training window is anomalous at all (the node's
    /// largest score), doubled — seed 000 §"Threshold selection" read as "no anomalous window".
    /// Stricter than `flagged`; it grows with every window of training data.
    #[default]
    #[value(help = "least threshold that leaves no training window anomalous, doubled")]
    Window,
    /// The least threshold under which training would never have flagged the node (k of 2k − 1
    /// windows anomalous), doubled — the seed's words read as "no faulty node". Finds more
    /// faults, but from two training runs it flagged 5 of 36 fault-free runs in
    /// cross-validation (docs/thresholds.md); use it with many training runs.
    #[value(help = "least threshold that never flags the node in training (k of 2k-1), doubled")]
    Flagged,
}

impl ThresholdRule {
    /// The name users type and read.
    pub fn name(self) -> &'static str {
        match self {
            ThresholdRule::Window => "window",
            ThresholdRule::Flagged => "flagged",
        }
    }
}

/// Whether components are weighted by their fault-free variability.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Weighting {
    /// Raw values (seed 000).
    #[default]
    #[value(help = "compare raw values (seed 000)")]
    None,
    /// Each component divided by its typical fault-free deviation from the median node, learned
    /// in training (seed 000 §"Future work"); untrained metrics compare raw values.
    #[value(
        help = "divide each function by its fault-free deviation from the median node,                     learned in training"
    )]
    Variance,
}

impl Weighting {
    /// The name users type and read.
    pub fn name(self) -> &'static str {
        match self {
            Weighting::None => "none",
            Weighting::Variance => "variance",
        }
    }
}

/// Unit of weighted scores: each component counts in typical fault-free deviations.
pub const WEIGHTED_UNIT: &str = "deviations";

/// A component's scale never falls below this fraction of its typical value: a function whose
/// peers agreed exactly in training (the same number of writes on every server) must not turn a
/// one-call difference into a landslide.
pub const LEVEL_FLOOR: f64 = 0.01;

/// The weighting scales of one metric, as stored in a thresholds file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WeightsFile {
    /// Scale of a component training did not keep.
    pub default: f64,
    /// Scale per kept component.
    pub scales: Vec<ScaleEntry>,
}

/// One component's scale.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ScaleEntry {
    /// The component.
    #[serde(flatten)]
    pub label: CompLabel,
    /// Its typical fault-free deviation from the median node (metric unit).
    pub scale: f64,
}

impl WeightsFile {
    /// Scales from training spreads: per component, its mean absolute deviation from the median
    /// node, at least `resolution` (the metric's smallest meaningful difference) and
    /// [`LEVEL_FLOOR`] of its mean value; a component never kept gets the median scale.
    pub fn from_spreads(spreads: &[(CompLabel, Spread)], resolution: f64) -> Self {
        let mut scales: Vec<ScaleEntry> = spreads
            .iter()
            .filter(|(_, s)| s.n > 0)
            .map(|(l, s)| ScaleEntry {
                label: l.clone(),
                scale: s
                    .mean_dev()
                    .max(resolution)
                    .max(LEVEL_FLOOR * s.mean_level()),
            })
            .collect();
        scales.sort_by(|a, b| a.label.cmp(&b.label));
        let mut v: Vec<f64> = scales.iter().map(|e| e.scale).collect();
        let default = if v.is_empty() {
            resolution
        } else {
            median_in_place(&mut v)
        };
        WeightsFile { default, scales }
    }

    /// The engine's form.
    pub fn weights(&self) -> Weights {
        Weights {
            scales: self
                .scales
                .iter()
                .map(|e| (e.label.clone(), e.scale))
                .collect(),
            default: self.default,
        }
    }
}

/// How a metric's data was recorded; diagnose refuses data recorded differently.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Recording {
    /// Sampler event (`cycles`, `cpu-clock`), samples and events metrics only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Sampling period (events per sample), or frequency in Hz when `freq`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<u64>,
    /// `period` is a frequency.
    #[serde(default)]
    pub freq: bool,
    /// Record interval, ns (informational: window sums do not depend on it).
    pub interval_ns: u64,
}

/// Trained thresholds of one metric.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MetricThresholds {
    /// Unit of the thresholds (the distance's unit for the metric).
    pub unit: String,
    /// How the data was recorded.
    pub recording: Recording,
    /// The functions (components) kept by the dimensionality rule in training.
    pub kept: Vec<CompLabel>,
    /// Threshold per node name.
    pub thresholds: BTreeMap<String, f64>,
    /// Largest fault-free score per node name (for reference).
    pub max_scores: BTreeMap<String, f64>,
    /// Per node name, the least threshold under which training would never have flagged it
    /// (k of 2k − 1 windows); files written before it existed do not have it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub flag_scores: BTreeMap<String, f64>,
    /// Windows scored in training, all nodes together.
    pub windows: u64,
    /// Variance weighting scales, when trained with `--weighting variance`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<WeightsFile>,
}

impl MetricThresholds {
    /// The largest threshold (given to nodes without their own).
    pub fn largest(&self) -> f64 {
        self.thresholds.values().copied().fold(0.0, f64::max)
    }
}

impl ThresholdsFile {
    /// Reads and validates a thresholds file.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("{}: cannot read thresholds file", path.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text).with_context(|| {
            format!(
                "{}: not a thresholds file (invalid JSON); make one with `culprit train`",
                path.display()
            )
        })?;
        if v.get("format").and_then(|f| f.as_str()) != Some(THRESHOLDS_FORMAT) {
            bail!(
                "{}: not a thresholds file (no \"format\": \"{THRESHOLDS_FORMAT}\"); make one \
                 with `culprit train`",
                path.display()
            );
        }
        let version = v.get("version").and_then(|x| x.as_u64()).unwrap_or(0);
        if version != u64::from(THRESHOLDS_VERSION) {
            bail!(
                "{}: thresholds file version {version}, this culprit reads version \
                 {THRESHOLDS_VERSION}; retrain with `culprit train`",
                path.display()
            );
        }
        let f: ThresholdsFile = serde_json::from_value(v)
            .with_context(|| format!("{}: malformed thresholds file", path.display()))?;
        for (m, t) in &f.metrics {
            if let Some((n, v)) = t
                .thresholds
                .iter()
                .find(|(_, v)| !v.is_finite() || **v < 0.0)
            {
                bail!(
                    "{}: threshold of node {n} for {m} is {v}, not a non-negative number",
                    path.display()
                );
            }
            if let Some(w) = &t.weights {
                let bad = std::iter::once((None, w.default))
                    .chain(w.scales.iter().map(|e| (Some(&e.label), e.scale)))
                    .find(|(_, s)| !(s.is_finite() && *s > 0.0));
                if let Some((label, s)) = bad {
                    let what = label.map_or("the default".to_string(), |l| l.to_string());
                    bail!(
                        "{}: {m} weighting scale of {what} is {s}, not a positive number",
                        path.display()
                    );
                }
            }
            if f.settings.weighting == Weighting::Variance && t.weights.is_none() {
                bail!(
                    "{}: trained with variance weighting but {m} has no scales; train again",
                    path.display()
                );
            }
        }
        Ok(f)
    }

    /// Writes the file (pretty JSON), replacing it atomically.
    pub fn save(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self)? + "\n";
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text)
            .with_context(|| format!("{}: cannot write thresholds", tmp.display()))?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("{}: cannot write thresholds", path.display()))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn least_integer_threshold_doubled() {
        assert_eq!(trained_threshold(41.2, 1.0), 84.0);
        assert_eq!(trained_threshold(42.0, 1.0), 84.0);
        assert_eq!(trained_threshold(0.0, 1.0), 2.0);
        assert!((trained_threshold(0.0123, 1e-3) - 0.026).abs() < 1e-12);
    }

    proptest! {
        /// The trained threshold leaves no training window anomalous, is at most two grid steps
        /// above twice the largest score, and is on the grid.
        #[test]
        fn trained_threshold_properties(scores in prop::collection::vec(0.0f64..1e7, 1..50)) {
            let max = scores.iter().copied().fold(0.0, f64::max);
            let t = trained_threshold(max, 1.0);
            prop_assert!(scores.iter().all(|&s| s <= t / 2.0));
            prop_assert!(t <= 2.0 * (max + 1.0));
            prop_assert_eq!(t.fract(), 0.0);
            // "Least": one step lower would leave an anomaly (unless at the one-step floor).
            if t > 2.0 {
                prop_assert!(max > t / 2.0 - 1.0);
            }
        }

        #[test]
        fn unsupervised_cutoff_is_above_the_median(scores in prop::collection::vec(0.0f64..1e6, 1..30)) {
            let r = Unsupervised::default();
            let c = r.cutoff(&scores, 0.0);
            let mut s = scores.clone();
            let med = median_in_place(&mut s);
            prop_assert!(c >= med);
            // Fewer than half of the nodes can ever be anomalous.
            let above = scores.iter().filter(|&&x| x > c).count();
            prop_assert!(above * 2 < scores.len().max(1) || above == 0);
        }
    }

    #[test]
    fn own_baseline_is_the_least_early_score() {
        let r = Unsupervised::default();
        assert_eq!(r.baseline_cutoff(&[]), 0.0);
        assert_eq!(r.baseline_cutoff(&[30.0, 5.0, 80.0]), 10.0);
    }

    #[test]
    fn unsupervised_flags_one_outlier_not_the_noisiest_peer() {
        let r = Unsupervised::default();
        let c = r.cutoff(&[10.0, 11.0, 12.0, 100.0], 1000.0);
        assert!(c > 12.0 && c < 100.0, "{c}");
        let c = r.cutoff(&[10.0, 10.5, 11.0, 14.0], 1000.0);
        assert!(
            c > 14.0,
            "{c}: the noisiest of near-identical peers is not an outlier"
        );
    }
}
