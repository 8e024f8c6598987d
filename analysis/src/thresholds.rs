//! The thresholds file: thresholds trained from fault-free runs (seed 000 §"Threshold
//! selection") with everything needed to apply them safely — the analysis settings, how the data
//! was recorded, the kept functions, variance weighting's scales.
//!
//! docs/thresholds.md describes the rules and the file format.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::family::{Metric, Sampling};
use crate::model::CompLabel;
use crate::policy::{Spread, Weights};
use crate::roles::RoleEntry;
use crate::score::{median_in_place, NormalProfiles};

/// The analysis settings a thresholds file records, declared with the options
/// ([`crate::options`]).
pub use crate::options::{Settings, Weighting};

/// Version of the thresholds file format this build writes (without roles) and reads.
pub const THRESHOLDS_VERSION: u32 = 1;
/// The version of a file with nodes of another role ([`MetricThresholds::roles`]): a reader
/// of version 1 would judge those nodes against thresholds learnt with them brought to their
/// peers' level, so it must refuse the file, not ignore the field. This build reads both.
pub const THRESHOLDS_VERSION_ROLES: u32 = 2;
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
    pub metrics: BTreeMap<Metric, MetricThresholds>,
}

/// Which training score a trained threshold doubles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum ThresholdRule {
    /// The least threshold under which no training window is anomalous at all (the node's
    /// largest score), doubled — seed 000 §"Threshold selection" read as "no anomalous window".
    /// Stricter than `flagged`; it grows with every window of training data.
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(help = "least threshold that leaves no training window anomalous, doubled")
    )]
    Window,
    /// The least threshold under which training would never have flagged the node (k of 2k − 1
    /// windows anomalous), doubled — the seed's words read as "no faulty node". Finds more
    /// faults, but from two training runs it flagged 5 of 36 fault-free runs in
    /// cross-validation (docs/thresholds.md); use it with many training runs.
    #[cfg_attr(
        feature = "clap",
        value(help = "least threshold that never flags the node in training (k of 2k-1), doubled")
    )]
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

/// A component's scale never falls below this fraction of its typical value: a function whose
/// peers agreed exactly in training (the same number of writes on every server) must not turn a
/// one-call difference into a landslide.
pub const LEVEL_FLOOR: f64 = 0.01;

/// The weighting scales of one metric, as stored in a thresholds file.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct WeightsFile {
    /// Scale of a component training did not keep.
    pub default: f64,
    /// With [`UnseenScale::Level`]: the upper quartile of the trained components' scale ÷
    /// typical value; a component training did not keep is then scaled by its size
    /// ([`crate::policy::UNSEEN_QUANTILE`]). Files written before it existed: `default` only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unseen_ratio: Option<f64>,
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

/// How `culprit diagnose` scales a function training never kept (docs/thresholds.md,
/// "Functions training never saw").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum UnseenScale {
    /// The median of the trained scales.
    #[cfg_attr(feature = "clap", value(help = "the median of the trained scales"))]
    Median,
    /// By its size: the upper quartile of the trained scales relative to their functions'
    /// typical values, times its value in the window's median node (at least the median scale).
    #[default]
    #[cfg_attr(
        feature = "clap",
        value(help = "by its size, as jittery as the jitterier quarter of trained functions")
    )]
    Level,
}

impl UnseenScale {
    /// The name users type and read.
    pub fn name(self) -> &'static str {
        match self {
            UnseenScale::Median => "median",
            UnseenScale::Level => "level",
        }
    }
}

impl WeightsFile {
    /// Scales from training spreads: per component, its mean absolute deviation from the median
    /// node, at least `resolution` (the metric's smallest meaningful difference) and
    /// [`LEVEL_FLOOR`] of its mean value; a component never kept gets the median scale, or is
    /// scaled by its size ([`UnseenScale`]).
    pub fn from_spreads(
        spreads: &[(CompLabel, Spread)],
        resolution: f64,
        unseen: UnseenScale,
    ) -> Self {
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
        let mut ratios: Vec<f64> = spreads
            .iter()
            .filter(|(_, s)| s.n > 0 && s.mean_level() > 0.0)
            .map(|(_, s)| {
                s.mean_dev()
                    .max(resolution)
                    .max(LEVEL_FLOOR * s.mean_level())
                    / s.mean_level()
            })
            .collect();
        ratios.sort_by(f64::total_cmp);
        let unseen_ratio = match unseen {
            UnseenScale::Level if !ratios.is_empty() => {
                let at = ((ratios.len() - 1) as f64 * crate::policy::UNSEEN_QUANTILE).round();
                Some(ratios[at as usize])
            }
            _ => None,
        };
        WeightsFile {
            default,
            unseen_ratio,
            scales,
        }
    }

    /// The analyzer's form.
    pub fn weights(&self) -> Weights {
        Weights {
            scales: self
                .scales
                .iter()
                .map(|e| (e.label.clone(), e.scale))
                .collect(),
            default: self.default,
            unseen_ratio: self.unseen_ratio,
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

impl Recording {
    /// `cpu-clock, 1000 Hz`, `cycles, period 100000`, or `unknown`.
    pub fn describe(&self) -> String {
        match (&self.event, self.period) {
            (Some(e), Some(p)) => Sampling {
                event: e.clone(),
                period: p,
                freq: self.freq,
            }
            .to_string(),
            _ => "unknown".to_string(),
        }
    }
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
    /// The largest median score of a training window: diagnosis scales the thresholds of a
    /// window whose median score exceeds it ([`crate::policy::shared_threshold`]). Files
    /// written before it existed do without.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_median: Option<f64>,
    /// Variance weighting scales, when trained with `--weighting variance`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights: Option<WeightsFile>,
    /// With the suspect score: each training node's mean window profile (weighted like the
    /// scores), the known-normal traces of seed 002's supervised variant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub normal_profiles: Vec<NormalProfileEntry>,
    /// Nodes of another role: each differed from its peers the same way through the training
    /// data, and diagnosis compares it against its own baseline ([`crate::roles`]). A file with
    /// roles is [`THRESHOLDS_VERSION_ROLES`]: a reader that would ignore them refuses it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub roles: Vec<RoleEntry>,
    /// Rare functions ([`crate::rare`], count): per node name, the ratio over its noise floor
    /// its count of a function the keep rule left out must reach — the largest ratio it showed
    /// in training, doubled, at least [`crate::rare::RARE_RATIO`]. Files written before it
    /// existed do without (the untrained bar).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub rare: BTreeMap<String, f64>,
}

/// One node's normal profile from one training run.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct NormalProfileEntry {
    /// The training run.
    pub run: String,
    /// The node.
    pub node: String,
    /// Its share of each component (of its total, all components).
    pub shares: Vec<ShareEntry>,
}

/// A component's share of a profile.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ShareEntry {
    /// The component.
    #[serde(flatten)]
    pub label: CompLabel,
    /// Its share.
    pub share: f64,
}

impl MetricThresholds {
    /// The known-normal profiles, for the analyzer (`None` when there are none).
    pub fn normal(&self) -> Option<std::sync::Arc<NormalProfiles>> {
        (!self.normal_profiles.is_empty()).then(|| {
            std::sync::Arc::new(NormalProfiles {
                profiles: self
                    .normal_profiles
                    .iter()
                    .map(|p| {
                        let shares = p.shares.iter().map(|e| (e.label.clone(), e.share));
                        (p.node.clone(), shares.collect())
                    })
                    .collect(),
            })
        })
    }
}

impl MetricThresholds {
    /// The largest threshold (given to nodes without their own).
    pub fn largest(&self) -> f64 {
        self.thresholds.values().copied().fold(0.0, f64::max)
    }
}

/// Largest thresholds file read (a trained file of 1,000 nodes and 10,000 kept functions is
/// a few MiB).
pub const MAX_THRESHOLDS_FILE: u64 = 64 << 20;

/// The text of `path` when it is a regular file of at most `limit` bytes: a FIFO would block the
/// read, a device (`/dev/zero`) would never end.
fn read_regular(path: &Path, limit: u64) -> std::io::Result<String> {
    use std::io::Read as _;
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {} MiB", limit >> 20),
        ));
    }
    Ok(text)
}

impl ThresholdsFile {
    /// Reads and validates a thresholds file (a regular file of at most
    /// [`MAX_THRESHOLDS_FILE`] bytes).
    pub fn load(path: &Path) -> Result<Self> {
        let text = read_regular(path, MAX_THRESHOLDS_FILE).map_err(|e| {
            Error::io(
                format!("{}: cannot read thresholds file", path.display()),
                e,
            )
        })?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|source| Error::Json {
            what: format!(
                "{}: not a thresholds file (invalid JSON); make one with `culprit train`",
                path.display()
            ),
            source,
        })?;
        let bail = |msg: String| Err(Error::Thresholds(msg));
        if v.get("format").and_then(|f| f.as_str()) != Some(THRESHOLDS_FORMAT) {
            return bail(format!(
                "{}: not a thresholds file (no \"format\": \"{THRESHOLDS_FORMAT}\"); make one \
                 with `culprit train`",
                path.display()
            ));
        }
        let version = v.get("version").and_then(|x| x.as_u64()).unwrap_or(0);
        if !(u64::from(THRESHOLDS_VERSION)..=u64::from(THRESHOLDS_VERSION_ROLES)).contains(&version)
        {
            return bail(format!(
                "{}: thresholds file version {version}, this culprit reads versions \
                 {THRESHOLDS_VERSION} to {THRESHOLDS_VERSION_ROLES}; retrain with `culprit train`",
                path.display()
            ));
        }
        let f: ThresholdsFile = serde_json::from_value(v).map_err(|source| Error::Json {
            what: format!("{}: malformed thresholds file", path.display()),
            source,
        })?;
        if f.metrics.is_empty() {
            return bail(format!(
                "{}: no metric has thresholds; retrain with `culprit train`",
                path.display()
            ));
        }
        for (m, t) in &f.metrics {
            if t.thresholds.is_empty() {
                return bail(format!(
                    "{}: no node has a threshold for {m}; retrain with `culprit train`",
                    path.display()
                ));
            }
            // A threshold of zero or less flags every node; training's least is two grid steps.
            if let Some((n, v)) = t
                .thresholds
                .iter()
                .find(|(_, v)| !(v.is_finite() && **v > 0.0))
            {
                return bail(format!(
                    "{}: threshold of node {n} for {m} is {v}, not a positive number (training \
                     never writes one); retrain with `culprit train`",
                    path.display()
                ));
            }
            if let Some(w) = &t.weights {
                let bad = std::iter::once((None, w.default))
                    .chain(w.unseen_ratio.map(|r| (None, r)))
                    .chain(w.scales.iter().map(|e| (Some(&e.label), e.scale)))
                    .find(|(_, s)| !(s.is_finite() && *s > 0.0));
                if let Some((label, s)) = bad {
                    let what = label.map_or("the default".to_string(), |l| l.to_string());
                    return bail(format!(
                        "{}: {m} weighting scale of {what} is {s}, not a positive number",
                        path.display()
                    ));
                }
            }
            if let Some(p) = t.normal_profiles.iter().find(|p| {
                p.shares
                    .iter()
                    .any(|e| !(e.share.is_finite() && e.share >= 0.0))
            }) {
                return bail(format!(
                    "{}: {m} normal profile of node {} (run {}) has a share that is not a \
                     non-negative number",
                    path.display(),
                    p.node,
                    p.run
                ));
            }
            if let Some(r) = t.roles.iter().find(|r| {
                r.components.iter().any(|c| {
                    !(c.node.is_finite() && c.peers.is_finite() && c.node >= 0.0 && c.peers >= 0.0)
                })
            }) {
                return bail(format!(
                    "{}: {m} role of node {} has a level that is not a non-negative number",
                    path.display(),
                    r.node
                ));
            }
            if f.settings.weighting == Weighting::Variance && t.weights.is_none() {
                return bail(format!(
                    "{}: trained with variance weighting but {m} has no scales; train again",
                    path.display()
                ));
            }
        }
        Ok(f)
    }

    /// The version this file must be written as: [`THRESHOLDS_VERSION_ROLES`] when a metric
    /// has nodes of another role, [`THRESHOLDS_VERSION`] otherwise (readable by older
    /// followers).
    pub fn needed_version(&self) -> u32 {
        if self.metrics.values().any(|t| !t.roles.is_empty()) {
            THRESHOLDS_VERSION_ROLES
        } else {
            THRESHOLDS_VERSION
        }
    }

    /// Writes the file (pretty JSON), replacing it atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(|source| Error::Json {
            what: "cannot encode thresholds".to_string(),
            source,
        })? + "\n";
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text)
            .map_err(|e| Error::io(format!("{}: cannot write thresholds", tmp.display()), e))?;
        std::fs::rename(&tmp, path)
            .map_err(|e| Error::io(format!("{}: cannot write thresholds", path.display()), e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::roles::{RoleComponent, RoleEntry};
    use crate::setup::{Overrides, Setup};

    fn metric(roles: Vec<RoleEntry>) -> MetricThresholds {
        MetricThresholds {
            unit: "ms".into(),
            recording: Recording {
                event: None,
                period: None,
                freq: false,
                interval_ns: 1_000_000_000,
            },
            kept: vec![CompLabel::func("srv", "f")],
            thresholds: [("n1".to_string(), 4.0)].into_iter().collect(),
            max_scores: BTreeMap::new(),
            flag_scores: BTreeMap::new(),
            windows: 10,
            shared_median: None,
            weights: None,
            normal_profiles: Vec::new(),
            roles,
            rare: BTreeMap::new(),
        }
    }

    /// A file with a node of another role is version 2, which this build reads and a reader
    /// of version 1 refuses (it would ignore the role); a file without roles stays version 1;
    /// a later version is refused in one line.
    #[test]
    fn roles_make_version_2() {
        let mut settings = Setup::resolve(&Overrides::default(), None)
            .unwrap()
            .settings;
        settings.weighting = Weighting::None;
        let role = RoleEntry {
            node: "n1".into(),
            windows: 10,
            outstanding: 10,
            components: vec![RoleComponent {
                label: CompLabel::func("srv", "f"),
                node: 2.0,
                peers: 1.0,
            }],
        };
        let mut f = ThresholdsFile {
            format: THRESHOLDS_FORMAT.into(),
            version: THRESHOLDS_VERSION,
            runs: vec!["baseline".into()],
            settings,
            metrics: [(Metric::TIME, metric(Vec::new()))].into_iter().collect(),
        };
        assert_eq!(f.needed_version(), 1);
        f.metrics.insert(Metric::TIME, metric(vec![role]));
        assert_eq!(f.needed_version(), THRESHOLDS_VERSION_ROLES);
        f.version = f.needed_version();
        let dir = std::env::temp_dir().join(format!("culprit-thr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.json");
        f.save(&path).unwrap();
        assert_eq!(ThresholdsFile::load(&path).unwrap(), f);
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replacen("\"version\": 2", "\"version\": 3", 1)).unwrap();
        let e = ThresholdsFile::load(&path).unwrap_err().to_string();
        assert!(
            e.contains("version 3") && e.contains("versions 1 to 2"),
            "{e}"
        );
        assert!(!e.contains('\n'), "{e}");
        let bad = text.replacen("\"peers\": 1.0", "\"peers\": -1.0", 1);
        std::fs::write(&path, bad).unwrap();
        let e = ThresholdsFile::load(&path).unwrap_err().to_string();
        assert!(e.contains("role of node n1"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
