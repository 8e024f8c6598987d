//! The settings of an analysis: options as given ([`Overrides`]) resolved against a thresholds
//! file into a validated [`Setup`], with the defaults of seed 000.

use std::sync::Arc;

use crate::analyzer::MIN_NODES;
use crate::data::Dataset;
use crate::data::LoadOptions;
use crate::distance::Distance;
use crate::error::{Error, Result};
use crate::family::distributions::Distributions;
use crate::family::{self, Comparison, Metric, MetricFamily, Windows};
pub use crate::options::Overrides;
use crate::options::{settings_message, Picker, Setting};
use crate::score::{Peers, ScoreKind, DEFAULT_DOMAIN, PAIRWISE_EXACT_MAX};
use crate::thresholds::{Settings, ThresholdsFile, Weighting};
use crate::time::{fmt_dur, NS_PER_S};

pub use crate::options::{
    DEFAULT_K, DEFAULT_MIN_SAMPLES, DEFAULT_MIN_TIME_MS, DEFAULT_SCORE, DEFAULT_SMOOTHING,
    DEFAULT_WEIGHTING, DEFAULT_WIN_SHIFT, DEFAULT_WIN_SIZE,
};
/// Largest k: 2k − 1 windows of history per node (a day of 30 s windows is under 3,000).
pub const MAX_K: usize = 10_000;
/// Default score without trained thresholds: seed 002's suspect score over profiles
/// (docs/thresholds.md, "Without training").
pub const UNTRAINED_SCORE: ScoreKind = ScoreKind::Suspect;
/// Shortest default window of the OS metrics: a histogram of per-second values needs enough of
/// them (seed 001 §4.7.2: all WinSizes of 48 samples and more compared alike; it used 60 and
/// 64). The OS metrics' WinSize is the analysis' WinSize or this, whichever is longer (rounded
/// up to a multiple of WinShift); docs/accuracy.md has the measurements behind the value.
pub const DEFAULT_OS_MIN_WIN_SIZE: u64 = 30 * NS_PER_S;

impl Overrides {
    /// How the data are loaded: these nodes, the binaries under `symfs`.
    pub fn load_options(&self) -> LoadOptions {
        LoadOptions {
            include_unassigned: false,
            symfs: self.symfs.clone(),
            nodes: self.nodes.clone(),
            exclude: self.exclude_nodes.clone(),
        }
    }
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
    /// Metrics asked for (`None`: all with data; [`Metric::OS`] stands for every OS metric).
    pub metrics: Option<Vec<Metric>>,
    /// What to load.
    pub load: LoadOptions,
    /// The metric families.
    pub families: Vec<Arc<dyn MetricFamily>>,
    /// Things the user should know about the settings.
    pub notes: Vec<String>,
    /// The windows were given (flags) or fixed by trained thresholds; false: the defaults,
    /// which [`Setup::fit_windows`] shortens for a run too short for them.
    pub windows_fixed: bool,
}

impl Setup {
    /// Settings of a diagnosis: options resolved against the thresholds file (unset ones taken
    /// from it, contradicting ones refused); without one, the score defaults to
    /// [`UNTRAINED_SCORE`].
    pub fn resolve(o: &Overrides, trained: Option<&TrainedThresholds>) -> Result<Setup> {
        let score = if trained.is_some() {
            DEFAULT_SCORE
        } else {
            UNTRAINED_SCORE
        };
        Setup::resolve_with(o, trained, score)
    }

    /// Settings of `culprit train` (the score defaults to [`DEFAULT_SCORE`]).
    pub fn for_training(o: &Overrides) -> Result<Setup> {
        Setup::resolve_with(o, None, DEFAULT_SCORE)
    }

    fn resolve_with(
        o: &Overrides,
        trained: Option<&TrainedThresholds>,
        default_score: ScoreKind,
    ) -> Result<Setup> {
        use Setting as S;
        let t = trained.map(|t| &t.file.settings);
        let p = Picker {
            file: trained.map(|t| t.name.as_str()),
        };
        let mut settings = Settings::resolve(o, t, &p)?;
        // The score's declared default is that of trained analyses and training.
        if trained.is_none() && o.score.is_none() {
            settings.score = default_score;
        }
        // The OS metrics' windows: one field of the file holds both, and their defaults follow
        // the analysis' windows.
        let trained_os = t.and_then(|t| t.os_windows_ns);
        let os_shift = p.pick(
            S::OsWinShift,
            o.os_win_shift_ns,
            trained_os.map(|w| w.1),
            settings.win_shift_ns,
        )?;
        let os_default_size = if os_shift == 0 {
            0
        } else {
            settings
                .win_size_ns
                .max(DEFAULT_OS_MIN_WIN_SIZE)
                .div_ceil(os_shift)
                * os_shift
        };
        let os_size = p.pick(
            S::OsWinSize,
            o.os_win_size_ns,
            trained_os.map(|w| w.0),
            os_default_size,
        )?;
        settings.os_windows_ns = Some((os_size, os_shift));
        let s = &settings;
        let bad = |m| Err(Error::Settings(m));
        if s.win_shift_ns == 0 || s.win_size_ns == 0 {
            return bad(settings_message!(
                "{} and {} must be longer than zero",
                @WinSize,
                @WinShift
            ));
        }
        if s.win_size_ns % s.win_shift_ns != 0 {
            return bad(settings_message!(
                "{} ({}) must be a multiple of {} ({})",
                @WinSize,
                fmt_dur(s.win_size_ns),
                @WinShift,
                fmt_dur(s.win_shift_ns)
            ));
        }
        if !(1..=MAX_K).contains(&s.k) {
            return bad(settings_message!(
                "{} {}: give 1 to {MAX_K} (faulty when anomalous in k of the last 2k − 1 \
                 windows)",
                @K,
                s.k
            ));
        }
        if os_shift == 0 || os_size == 0 || os_size % os_shift != 0 {
            return bad(settings_message!(
                "{} ({}) must be a multiple of {} ({}), both longer than zero",
                @OsWinSize,
                fmt_dur(os_size),
                @OsWinShift,
                fmt_dur(os_shift)
            ));
        }
        if s.smoothing == Some(0) {
            return bad(settings_message!(
                "{} must be at least 1 (1: no smoothing)",
                @Smoothing
            ));
        }
        if !(s.min_samples >= 0.0 && s.min_samples.is_finite()) {
            return bad(settings_message!(
                "{} must be a non-negative number",
                @MinSamples
            ));
        }
        let peers = match o.domain {
            None => Peers::Auto,
            Some(0) => Peers::All,
            Some(n) if n < MIN_NODES => {
                return bad(settings_message!(
                    "{} {n}: an analysis domain needs at least {MIN_NODES} nodes (0: all)",
                    @Domain
                ))
            }
            Some(n) => Peers::Domain(n),
        };
        let mut families = family::builtin::for_features(s.features);
        if s.distance == Distance::Cdf {
            // Window sums become distributions; families that already compare distributions
            // (latency histograms) stay as they are.
            let smoothing = s.smoothing.unwrap_or(DEFAULT_SMOOTHING);
            families = families
                .into_iter()
                .map(|inner| {
                    if inner.comparison() == Comparison::Sums {
                        Arc::new(Distributions::new(inner, smoothing)) as Arc<dyn MetricFamily>
                    } else {
                        inner
                    }
                })
                .collect();
        }
        let metrics = if o.metrics.is_empty() {
            None
        } else {
            let mut v = Vec::new();
            for m in &o.metrics {
                let m = m.trim();
                match Metric::from_name(m) {
                    Some(x) => v.push(x),
                    None => {
                        return bad(settings_message!(
                            "{}: unknown metric `{m}` (use samples, count, time, events, \
                             latency, os, or an OS metric such as disk.await)",
                            @Metrics
                        ))
                    }
                }
            }
            Some(v)
        };
        let mut notes = Vec::new();
        if trained.is_none() && o.weighting == Some(Weighting::Variance) {
            notes.push(format!(
                "{} variance needs trained thresholds (the scales are learned by `culprit \
                 train`); without them functions are compared unweighted",
                Setting::Weighting.flag()
            ));
        }
        let windows_fixed = trained.is_some()
            || o.win_size_ns.is_some()
            || o.win_shift_ns.is_some()
            || o.os_win_size_ns.is_some()
            || o.os_win_shift_ns.is_some();
        Ok(Setup {
            settings,
            peers,
            metrics,
            load: o.load_options(),
            families,
            notes,
            windows_fixed,
        })
    }

    /// Windows that fit a run of `span_ns` too short for the defaults (60 s every 30 s need
    /// 3 minutes for the 2k − 1 = 5 complete windows a verdict reads): WinShift the run's length
    /// ÷ 6k in whole seconds (at least 2 s where 2k − 1 windows still fit, else 1 s), WinSize
    /// twice it as the defaults, and the OS metrics' windows as long as their default allows
    /// while 2k − 1 of them still fit.
    ///
    /// Why 6k: a node anomalous within its first 2k − 1 windows is "different since its data
    /// began" (the k-of-(2k − 1) filter cannot tell a change there from none), and those
    /// windows reach (2k − 2) shifts + one size = 2k shifts into the run. With the shift at
    /// the run ÷ 6k they end at its first third, so a fault that begins after the first third
    /// is a change, not a difference since the start — whatever the load does to the window
    /// in which it first shows. (÷ (2 (2k − 1) + 1), used before, ended them at half the run:
    /// a fault at 50 s of 150 s was "since its data began" whenever its first 2 s tipped the
    /// window that held them.) Nothing changes when the user
    /// gave windows or trained thresholds fixed them, or when the defaults fit. Returns the
    /// note that says what was chosen.
    pub fn fit_windows(&mut self, span_ns: u64) -> Option<String> {
        if self.windows_fixed {
            return None;
        }
        let s = &mut self.settings;
        let need = 2 * s.k as u64 - 1;
        let complete = |size: u64, shift: u64| {
            if span_ns < size || shift == 0 {
                0
            } else {
                (span_ns - size) / shift + 1
            }
        };
        let (size, shift) = (s.win_size_ns, s.win_shift_ns);
        let (os_size, os_shift) = s.os_windows_ns.unwrap_or((size, shift));
        let had = complete(size, shift);
        if had >= need && complete(os_size, os_shift) >= need {
            return None;
        }
        // Whole seconds; at least 2 s (a window of 4 s holds a few thousand calls or samples
        // of a busy server) while 2k − 1 windows still fit, else 1 s.
        let secs = span_ns / NS_PER_S;
        let floor_s = if secs / (need + 1) >= 2 { 2 } else { 1 };
        let new_shift = (secs / (6 * s.k as u64)).max(floor_s) * NS_PER_S;
        let new_size = 2 * new_shift;
        // The OS metrics' histograms want many per-second values: as long as 2k − 1 windows
        // allow, up to their default.
        let os_room = span_ns.saturating_sub((need - 1) * new_shift);
        let new_os = (os_size.min(os_room) / new_shift * new_shift).max(new_size);
        s.win_size_ns = new_size;
        s.win_shift_ns = new_shift;
        s.os_windows_ns = Some((new_os, new_shift));
        Some(format!(
            "the data spans {}: too short for the default windows ({} every {} give {had} \
             complete, a verdict reads {need}); windows of {} every {} chosen (OS metrics: {} \
             every {}); {} and {} choose others",
            fmt_dur(span_ns / NS_PER_S * NS_PER_S),
            fmt_dur(size),
            fmt_dur(shift),
            fmt_dur(new_size),
            fmt_dur(new_shift),
            fmt_dur(new_os),
            fmt_dur(new_shift),
            Setting::WinSize.flag(),
            Setting::WinShift.flag()
        ))
    }

    /// The OS metrics' own windows.
    pub fn os_windows(&self) -> Windows {
        let (size_ns, shift_ns) = self
            .settings
            .os_windows_ns
            .unwrap_or((self.settings.win_size_ns, self.settings.win_shift_ns));
        Windows { size_ns, shift_ns }
    }

    /// These settings for `ds`: the families of the OS metrics it holds added (which exist
    /// depends on the data, [`family::os`]), with a note for OS metrics this culprit does not
    /// know.
    pub fn for_data(&self, ds: &Dataset) -> Setup {
        let mut s = self.clone();
        let named = |m: &str| {
            self.metrics
                .as_ref()
                .is_some_and(|v| v.iter().any(|x| x.name() == m))
        };
        let (os, unknown) = family::os::families(
            ds,
            Some(self.os_windows()),
            self.settings.smoothing.unwrap_or(DEFAULT_SMOOTHING),
            named,
        );
        s.families.extend(os);
        if !unknown.is_empty() {
            s.notes.push(format!(
                "OS metrics this culprit does not know were left out: {} (recorded by a newer \
                 sampler?)",
                unknown.join(", ")
            ));
        }
        s
    }

    /// True when `metric` was asked for (or no metric was named).
    pub(crate) fn wants(&self, metric: Metric) -> bool {
        match &self.metrics {
            None => true,
            Some(v) => v.contains(&metric) || (metric.is_os() && v.contains(&Metric::OS)),
        }
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
        if !matches!(
            self.settings.score,
            ScoreKind::PairwiseMedian | ScoreKind::Suspect | ScoreKind::SuspectShares
        ) {
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
