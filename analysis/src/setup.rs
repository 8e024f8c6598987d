//! The settings of an analysis: options as given ([`Overrides`]) resolved against a thresholds
//! file into a validated [`Setup`], with the defaults of seed 000.

use std::path::PathBuf;
use std::sync::Arc;

use crate::analyzer::MIN_NODES;
use crate::data::LoadOptions;
use crate::distance::Distance;
use crate::error::{Error, Result};
use crate::family::{self, Features, Metric, MetricFamily};
use crate::score::{Peers, ScoreKind, DEFAULT_DOMAIN, PAIRWISE_EXACT_MAX};
use crate::thresholds::{Settings, ThresholdsFile, Weighting};
use crate::time::{fmt_dur, NS_PER_S};

/// Default WinSize (seed 000).
pub const DEFAULT_WIN_SIZE: u64 = 60 * NS_PER_S;
/// Default WinShift (seed 000).
pub const DEFAULT_WIN_SHIFT: u64 = 30 * NS_PER_S;
/// Default k of the k-of-(2k − 1) filter (seed 000).
pub const DEFAULT_K: usize = 3;
/// Largest k: 2k − 1 windows of history per node (a day of 30 s windows is under 3,000).
pub const MAX_K: usize = 10_000;
/// Default samples dimensionality rule, samples per window at the reference rate (seed 000).
pub const DEFAULT_MIN_SAMPLES: f64 = 100.0;
/// Default time dimensionality rule, ms of exclusive time per window (seed 000).
pub const DEFAULT_MIN_TIME_MS: f64 = 1000.0;
/// Default weighting (docs/thresholds.md says why).
pub const DEFAULT_WEIGHTING: Weighting = Weighting::Variance;

/// Analysis options as given; unset ones take the value a thresholds file was trained with,
/// or the default.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// WinSize, ns.
    pub win_size_ns: Option<u64>,
    /// WinShift, ns.
    pub win_shift_ns: Option<u64>,
    /// k.
    pub k: Option<usize>,
    /// Distance.
    pub distance: Option<Distance>,
    /// Score.
    pub score: Option<ScoreKind>,
    /// Pairwise analysis domain size (0: all nodes).
    pub domain: Option<usize>,
    /// Samples dimensionality rule, at the reference rate.
    pub min_samples: Option<f64>,
    /// Time dimensionality rule, ns.
    pub min_time_ns: Option<u64>,
    /// Key functions by program.
    pub by_program: bool,
    /// Variance weighting.
    pub weighting: Option<Weighting>,
    /// What the tracer's metrics compare: functions or caller → callee edges.
    pub features: Option<Features>,
    /// Metrics to analyse, by name (empty: all with data).
    pub metrics: Vec<String>,
    /// Only these nodes (empty: all).
    pub nodes: Vec<String>,
    /// Read binaries under this directory instead of `/`.
    pub symfs: Option<PathBuf>,
}

/// A thresholds file and the name it is known by in messages (its path).
#[derive(Clone, Debug)]
pub struct TrainedThresholds {
    /// The file.
    pub file: ThresholdsFile,
    /// Its name.
    pub name: String,
}

impl TrainedThresholds {
    /// Reads and validates the thresholds file at `path`.
    pub fn load(path: &std::path::Path) -> Result<Self> {
        Ok(TrainedThresholds {
            file: ThresholdsFile::load(path)?,
            name: path.display().to_string(),
        })
    }
}

/// Validated analysis settings.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Settings (recorded with trained thresholds).
    pub settings: Settings,
    /// Peers of the pairwise score.
    pub peers: Peers,
    /// Metrics asked for (`None`: all with data).
    pub metrics: Option<Vec<Metric>>,
    /// What to load.
    pub load: LoadOptions,
    /// The metric families.
    pub families: Vec<Arc<dyn MetricFamily>>,
    /// Things the user should know about the settings.
    pub notes: Vec<String>,
}

/// An option given and the value trained: the given one unless they differ.
fn pick<T: PartialEq + Clone>(
    given: Option<T>,
    trained: Option<T>,
    default: T,
    what: &str,
    show: impl Fn(&T) -> String,
    file: Option<&str>,
) -> Result<T> {
    match (given, trained) {
        (Some(g), Some(t)) if g != t => Err(Error::Settings(format!(
            "{}: thresholds were trained with {what} {}, not {}; diagnose with the same \
             settings or train again",
            file.unwrap_or("thresholds"),
            show(&t),
            show(&g)
        ))),
        (Some(g), _) => Ok(g),
        (None, Some(t)) => Ok(t),
        (None, None) => Ok(default),
    }
}

impl Setup {
    /// Turns options into settings, taking unset ones from the thresholds file and refusing
    /// ones that contradict it.
    pub fn resolve(o: &Overrides, trained: Option<&TrainedThresholds>) -> Result<Setup> {
        let t = trained.map(|t| &t.file.settings);
        let f = trained.map(|t| t.name.as_str());
        let dur = |v: &u64| fmt_dur(*v);
        let num = |v: &f64| v.to_string();
        let settings = Settings {
            win_size_ns: pick(
                o.win_size_ns,
                t.map(|t| t.win_size_ns),
                DEFAULT_WIN_SIZE,
                "--win-size",
                dur,
                f,
            )?,
            win_shift_ns: pick(
                o.win_shift_ns,
                t.map(|t| t.win_shift_ns),
                DEFAULT_WIN_SHIFT,
                "--win-shift",
                dur,
                f,
            )?,
            k: pick(o.k, t.map(|t| t.k), DEFAULT_K, "--k", |v| v.to_string(), f)?,
            score: pick(
                o.score,
                t.map(|t| t.score),
                ScoreKind::MedianNode,
                "--score",
                |v| v.name().to_string(),
                f,
            )?,
            distance: pick(
                o.distance,
                t.map(|t| t.distance),
                Distance::Manhattan,
                "--distance",
                |v| v.name().to_string(),
                f,
            )?,
            by_program: pick(
                o.by_program.then_some(true),
                t.map(|t| t.by_program),
                false,
                "--by-program",
                |v| v.to_string(),
                f,
            )?,
            min_samples: pick(
                o.min_samples,
                t.map(|t| t.min_samples),
                DEFAULT_MIN_SAMPLES,
                "--min-samples",
                num,
                f,
            )?,
            min_time_ms: pick(
                o.min_time_ns.map(|ns| ns as f64 / 1e6),
                t.map(|t| t.min_time_ms),
                DEFAULT_MIN_TIME_MS,
                "--min-time",
                |v| format!("{v} ms"),
                f,
            )?,
            weighting: pick(
                o.weighting,
                t.map(|t| t.weighting),
                DEFAULT_WEIGHTING,
                "--weighting",
                |v| v.name().to_string(),
                f,
            )?,
            features: pick(
                o.features,
                t.map(|t| t.features),
                Features::Functions,
                "--features",
                |v| v.name().to_string(),
                f,
            )?,
        };
        let s = &settings;
        let bad = |m: String| Err(Error::Settings(m));
        if s.win_shift_ns == 0 || s.win_size_ns == 0 {
            return bad("--win-size and --win-shift must be longer than zero".into());
        }
        if s.win_size_ns % s.win_shift_ns != 0 {
            return bad(format!(
                "--win-size ({}) must be a multiple of --win-shift ({})",
                fmt_dur(s.win_size_ns),
                fmt_dur(s.win_shift_ns)
            ));
        }
        if !(1..=MAX_K).contains(&s.k) {
            return bad(format!(
                "--k {}: give 1 to {MAX_K} (faulty when anomalous in k of the last 2k − 1 windows)",
                s.k
            ));
        }
        if !(s.min_samples >= 0.0 && s.min_samples.is_finite()) {
            return bad("--min-samples must be a non-negative number".into());
        }
        let peers = match o.domain {
            None => Peers::Auto,
            Some(0) => Peers::All,
            Some(n) if n < MIN_NODES => {
                return bad(format!(
                    "--domain {n}: an analysis domain needs at least {MIN_NODES} nodes (0: all)"
                ))
            }
            Some(n) => Peers::Domain(n),
        };
        let families = family::builtin::for_features(s.features);
        let metrics = if o.metrics.is_empty() {
            None
        } else {
            let mut v = Vec::new();
            for m in &o.metrics {
                match families.iter().find(|f| f.metric().name() == m.trim()) {
                    Some(f) => v.push(f.metric()),
                    None => {
                        return bad(format!(
                            "--metrics: unknown metric `{m}` (use samples, count, time, events, \
                             latency)"
                        ))
                    }
                }
            }
            Some(v)
        };
        let mut notes = Vec::new();
        if trained.is_none() && o.weighting == Some(Weighting::Variance) {
            notes.push(
                "--weighting variance needs trained thresholds (the scales are learned by \
                 `culprit train`); without them functions are compared unweighted"
                    .to_string(),
            );
        }
        Ok(Setup {
            settings,
            peers,
            metrics,
            load: LoadOptions {
                include_unassigned: false,
                symfs: o.symfs.clone(),
                nodes: o.nodes.clone(),
            },
            families,
            notes,
        })
    }

    /// The family of `metric`.
    pub(crate) fn family(&self, metric: Metric) -> &Arc<dyn MetricFamily> {
        self.families
            .iter()
            .find(|f| f.metric() == metric)
            .expect("planned metrics have families")
    }

    /// `all`, `rotating domains of N` or `n/a`: whom the pairwise score compares a node with.
    pub fn peers_text(&self, nodes: usize) -> String {
        if self.settings.score != ScoreKind::PairwiseMedian {
            return "n/a".to_string();
        }
        match self.peers {
            Peers::All => "all".to_string(),
            Peers::Auto if nodes <= PAIRWISE_EXACT_MAX => "all".to_string(),
            Peers::Auto => format!("rotating domains of {DEFAULT_DOMAIN}"),
            Peers::Domain(n) if n >= nodes => "all".to_string(),
            Peers::Domain(n) => format!("rotating domains of {n}"),
        }
    }

    /// Offline feeding chunk: bounds the buckets held at once.
    pub(crate) fn chunk_ns(&self) -> u64 {
        16 * self.settings.win_shift_ns
    }
}
