//! The analysis options, each declared once: its setting name (the CLI's flag is `--` and the
//! name), its unit, its field in [`Overrides`], its help text (the doc comment, which is also
//! the `--help` text of `culprit train` and `culprit diagnose` when the `clap` feature derives
//! the command-line arguments from [`Overrides`]), and, for an option a thresholds file records,
//! its field there ([`Settings`]: its JSON name, type and unit, how a given value converts to
//! it, the fallback of files written before it) and its default, and, for an option a report
//! echoes, its field in [`ReportedSettings`].
//!
//! Messages about settings ([`crate::error::SettingsMessage`]) name them by [`Setting::name`];
//! a front end shows a setting in its own spelling (the CLI as its flag, `--` and the name).
//!
//! Where each option goes after it is given: [`crate::setup::Setup::resolve`] resolves the
//! recorded ones with `Settings::resolve` (the value given, else the one the thresholds file
//! was trained with — a given one that differs is refused — else the default), then checks the
//! whole; `culprit train` writes the result as the file's `settings`; a report echoes the
//! values the analysis ran with in its `settings` ([`ReportedSettings`], filled by
//! [`crate::Diagnosis::build`]).
//!
//! # Adding an option
//!
//! One entry in the `options!` invocation below, plus the code that uses its value. An option
//! a thresholds file records and reports echo (`file(…)`: the file's field, its default, and
//! its fallback for files written before it; `report(…)`: the report's field):
//!
//! ```text
//! /// Fewest nodes an analysis domain may hold (--domain) [default: 4]
//! MinPeers "min-peers" Number,
//! min_peers: Option<usize>, arg(value_name = "N"),
//! file(
//!     /// Fewest nodes of an analysis domain (files written before it existed: 4).
//!     #[serde(default = "min_nodes", skip_serializing_if = "is_min_nodes")]
//!     min_peers: usize = MIN_NODES
//! ),
//! report(
//!     /// Fewest nodes of an analysis domain (reports before it existed: 4).
//!     #[serde(default = "min_nodes", skip_serializing_if = "is_min_nodes")]
//!     min_peers: usize
//! );
//! ```
//!
//! (with `fn min_nodes() -> usize` and `fn is_min_nodes(n: &usize) -> bool` beside
//! `is_functions` below), and its uses: `setup.settings.min_peers` where the analysis needs it,
//! and `min_peers` filled where [`crate::Diagnosis::build`] makes the [`ReportedSettings`] (from
//! its `ReportInput`).
//!
//! - Leave out `file(…)` when thresholds do not depend on it (a diagnosis may then differ from
//!   training in it; read it from the [`Overrides`]), `report(…)` when reports need not echo
//!   it.
//! - A new field must let the files and reports written before it load, and leave those
//!   written at its default byte for byte as they were (tests/golden/ checks both): a serde
//!   `default` and a `skip_serializing_if` at the default, as above. Its JSON name is the
//!   field's name (or `#[serde(rename)]`). Fields follow the entries' order, which is the
//!   JSON's: add entries at the end of those with `file` or `report`, never reorder them.
//! - `, given |v| …` after the default converts a given value to the file's unit (`--min-time`
//!   is given in ns, recorded in ms).
//! - The default is the declaration's; its bounds, if any, are checked in
//!   [`crate::setup::Setup::resolve`]; a value type new to options needs `Shown` (how messages
//!   show it).

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::distance::Distance;
use crate::error::{Error, Result, SettingsMessage};
use crate::family::Features;
use crate::policy::Unsupervised;
use crate::score::ScoreKind;
#[cfg(feature = "clap")]
use crate::time::parse_duration_ns;
use crate::time::NS_PER_S;

/// How a setting's value reads in messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    /// A duration in ns, shown as `60 s`.
    Duration,
    /// Milliseconds, shown as `1000 ms`.
    Ms,
    /// A plain number (`3`, `100`).
    Number,
    /// A name (`manhattan`), a list of names or a path.
    Name,
    /// A switch: given or not.
    Switch,
}

/// Declares the options and everything spelled after them: [`Overrides`] (with the `clap`
/// feature, the command-line arguments), [`Setting`] with each setting's name and unit, the
/// settings a thresholds file records ([`Settings`]) and how each is resolved
/// ([`Settings::resolve`]), and the settings a report echoes ([`ReportedSettings`]).
///
/// An entry is an option (`Setting "name" Unit, field: Type, arg(…)`) with, if a thresholds
/// file records it, `file(field: Type = default, given conversion)` and, if a report shows it,
/// `report(field: Type)`. `@file field: Type;` and `@report field: Type;` before an option are
/// a field of the file or of the report that is no single option's (set by hand), placed before
/// that option's. Fields follow the entries' order, which is therefore the order of the JSON:
/// do not reorder entries with a `file` or `report`.
macro_rules! options {
    ($(
        $(@file $(#[$xfattr:meta])* $xffield:ident: $xfty:ty;)?
        $(@report $(#[$xrattr:meta])* $xrfield:ident: $xrty:ty;)?
        $(#[doc = $doc:literal])*
        $setting:ident $name:literal $unit:ident,
        $field:ident: $ty:ty $(, arg($($arg:tt)*))?
        $(, file(
            $(#[$fattr:meta])*
            $ffield:ident: $fty:ty = $default:expr $(, given $conv:expr)?
        ))?
        $(, report($(#[$rattr:meta])* $rfield:ident: $rty:ty))?
        ;
    )*
    @also: $($(#[doc = $odoc:literal])* $other:ident $oname:literal $ounit:ident;)*) => {
        /// Analysis options shared by `train` and `diagnose`. Options left unset take the value
        /// the thresholds file was trained with, or the default.
        #[derive(Debug, Clone, Default)]
        #[cfg_attr(feature = "clap", derive(clap::Args))]
        pub struct Overrides {
            $(
                $(#[doc = $doc])*
                #[cfg_attr(feature = "clap", arg(long = $name $(, $($arg)*)?))]
                pub $field: $ty,
            )*
        }

        /// A setting of an analysis, as messages name it.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Setting {
            $(
                #[doc = concat!("`", $name, "`: [`Overrides::", stringify!($field), "`].")]
                $setting,
            )*
            $($(#[doc = $odoc])* $other,)*
        }

        impl Setting {
            /// Every setting: the options in the order of `--help`, then the others.
            pub const ALL: &'static [Setting] = &[$(Setting::$setting,)* $(Setting::$other,)*];

            /// Its name (`win-size`); the CLI's flag is `--` and the name.
            pub fn name(self) -> &'static str {
                match self {
                    $(Setting::$setting => $name,)*
                    $(Setting::$other => $oname,)*
                }
            }

            /// How its values read in messages.
            pub fn unit(self) -> Unit {
                match self {
                    $(Setting::$setting => Unit::$unit,)*
                    $(Setting::$other => Unit::$ounit,)*
                }
            }
        }

        /// Analysis settings recorded with thresholds; diagnose must use the same. Also the
        /// resolved settings of an analysis ([`crate::setup::Setup::settings`]).
        #[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
        pub struct Settings {
            $(
                $($(#[$xfattr])* pub $xffield: $xfty,)?
                $($(#[$fattr])* pub $ffield: $fty,)?
            )*
        }

        impl Settings {
            /// Each recorded option as `given`, else as `trained`, else its default (a given
            /// value other than the trained one is refused); the fields that are no single
            /// option's are left to the caller (`None`).
            pub(crate) fn resolve(
                given: &Overrides,
                trained: Option<&Settings>,
                picker: &Picker<'_>,
            ) -> Result<Settings> {
                Ok(Settings {
                    $(
                        $($xffield: Default::default(),)?
                        $(
                            $ffield: Recorded::record(picker.pick(
                                Setting::$setting,
                                Given::given(&given.$field)$(.map($conv))?,
                                trained.and_then(|t| Recorded::recorded(&t.$ffield)),
                                $default,
                            )?),
                        )?
                    )*
                })
            }
        }

        /// Settings as reported.
        #[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
        pub struct ReportedSettings {
            $(
                $($(#[$xrattr])* pub $xrfield: $xrty,)?
                $($(#[$rattr])* pub $rfield: $rty,)?
            )*
        }
    };
}

/// Default WinSize (seed 000).
pub const DEFAULT_WIN_SIZE: u64 = 60 * NS_PER_S;
/// Default WinShift (seed 000).
pub const DEFAULT_WIN_SHIFT: u64 = 30 * NS_PER_S;
/// Default k of the k-of-(2k − 1) filter (seed 000).
pub const DEFAULT_K: usize = 3;
/// Default samples dimensionality rule, samples per window at the reference rate (seed 000).
pub const DEFAULT_MIN_SAMPLES: f64 = 100.0;
/// Default time dimensionality rule, ms of exclusive time per window (seed 000).
pub const DEFAULT_MIN_TIME_MS: f64 = 1000.0;
/// Default score of trained analyses and of training (docs/thresholds.md, "Which score");
/// without trained thresholds, [`crate::setup::UNTRAINED_SCORE`].
pub const DEFAULT_SCORE: ScoreKind = ScoreKind::MedianNode;
/// Default weighting (docs/thresholds.md says why).
pub const DEFAULT_WEIGHTING: Weighting = Weighting::Variance;
/// Default width of the moving average over per-second values before distributions are
/// compared: seed 001 §4.7.2's choice for the lab (5 points: least false positives; 9 lost
/// true positives, none let noise through). docs/accuracy.md has our measurement.
pub const DEFAULT_SMOOTHING: usize = 5;

options! {
    /// Window size, WinSize (e.g. 60s, 2m, 500ms) [default: 60s]
    WinSize "win-size" Duration,
    win_size_ns: Option<u64>, arg(value_name = "DUR", value_parser = parse_duration_ns),
    file(
        /// WinSize, ns.
        win_size_ns: u64 = DEFAULT_WIN_SIZE
    ),
    report(
        /// WinSize, seconds.
        win_size_s: f64
    );
    /// Window shift, WinShift; windows start at multiples of it since the epoch [default: 30s]
    WinShift "win-shift" Duration,
    win_shift_ns: Option<u64>, arg(value_name = "DUR", value_parser = parse_duration_ns),
    file(
        /// WinShift, ns.
        win_shift_ns: u64 = DEFAULT_WIN_SHIFT
    ),
    report(
        /// WinShift, seconds.
        win_shift_s: f64
    );
    /// Faulty when anomalous in k of the last 2k−1 windows [default: 3]
    K "k" Number,
    k: Option<usize>, arg(value_name = "K"),
    file(
        /// k of the k-of-(2k − 1) filter.
        k: usize = DEFAULT_K
    ),
    report(
        /// k (faulty when anomalous in k of the last 2k − 1 windows).
        k: usize
    );
    /// Node score [default: median-node with trained thresholds and in training, suspect
    /// without]
    Score "score" Name,
    score: Option<ScoreKind>, arg(value_enum),
    file(
        /// Score.
        score: ScoreKind = DEFAULT_SCORE
    ),
    report(
        /// Score.
        score: ScoreKind
    );
    /// Distance between feature vectors [default: manhattan]
    Distance "distance" Name,
    distance: Option<Distance>, arg(value_enum),
    file(
        /// Distance.
        distance: Distance = Distance::Manhattan
    ),
    report(
        /// Distance.
        distance: Distance
    );
    /// Pairwise score: compare each node with a rotating analysis domain of N nodes (0: all
    /// nodes) [default: all up to 1000 nodes, else 10]
    Domain "domain" Number,
    domain: Option<usize>, arg(value_name = "N"),
    report(
        /// Pairwise peers: `all`, `rotating domains of N`, `n/a`.
        peers: String
    );
    /// Key functions by program too (compare per program instead of per node aggregate)
    ByProgram "by-program" Switch,
    by_program: bool,
    file(
        /// Components keyed per program.
        by_program: bool = false
    ),
    report(
        /// Components keyed by program.
        by_program: bool
    );
    @report
        /// The unsupervised rule, for metrics without trained thresholds.
        #[serde(deserialize_with = "Option::deserialize")]
        unsupervised: Option<Unsupervised>;
    /// Keep a function if it has this many samples in a window on a node, counted at the
    /// reference rate of one sample per 50 µs of CPU (seed 000's 100,000 cycles at 2 GHz) and
    /// scaled to the recorded event and period [default: 100]
    MinSamples "min-samples" Number,
    min_samples: Option<f64>, arg(value_name = "N"),
    file(
        /// Samples dimensionality rule, in samples at the reference rate.
        min_samples: f64 = DEFAULT_MIN_SAMPLES
    );
    /// Keep a function if it has this much exclusive time in a window on a node (count uses the
    /// same rule; a function left out is still compared by its calls when one node makes 10×
    /// more than its peers' noise floor: docs/thresholds.md, "Rare functions") [default: 1s]
    MinTime "min-time" Ms,
    min_time_ns: Option<u64>, arg(value_name = "DUR", value_parser = parse_duration_ns),
    file(
        /// Time dimensionality rule, ms.
        min_time_ms: f64 = DEFAULT_MIN_TIME_MS, given |ns| ns as f64 / 1e6
    );
    /// Weight each function by its fault-free variability, learned in training
    /// [default: variance when training]
    Weighting "weighting" Name,
    weighting: Option<Weighting>, arg(value_enum),
    file(
        /// Variance weighting of components (files written before it existed: none).
        #[serde(default)]
        weighting: Weighting = DEFAULT_WEIGHTING
    );
    @file
        /// The OS metrics' own WinSize and WinShift, ns (files written before OS metrics were
        /// analysed: none): one field for two options, whose defaults follow the analysis'
        /// windows ([`crate::setup::Setup::resolve`] resolves them).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        os_windows_ns: Option<(u64, u64)>;
    /// The OS metrics' window size (per-second values: a histogram needs enough of them)
    /// [default: WinSize or 30s, whichever is longer]
    OsWinSize "os-win-size" Duration,
    os_win_size_ns: Option<u64>, arg(value_name = "DUR", value_parser = parse_duration_ns),
    report(
        /// The OS metrics' WinSize, seconds.
        os_win_size_s: f64
    );
    /// The OS metrics' window shift [default: WinShift]
    OsWinShift "os-win-shift" Duration,
    os_win_shift_ns: Option<u64>, arg(value_name = "DUR", value_parser = parse_duration_ns),
    report(
        /// The OS metrics' WinShift, seconds.
        os_win_shift_s: f64
    );
    /// Moving average over this many per-second values before distributions are compared (OS
    /// metrics, --distance cdf; 1: none) [default: 5]
    Smoothing "smoothing" Number,
    smoothing: Option<usize>, arg(value_name = "N"),
    file(
        /// Width of the moving average over per-second values before distributions are
        /// compared (OS metrics, `--distance cdf`); files written before: none (always set
        /// once resolved).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        smoothing: Option<usize> = DEFAULT_SMOOTHING
    ),
    report(
        /// Moving-average width over per-second values before distributions are compared.
        smoothing: usize
    );
    /// What the tracer's count and time compare: functions, or caller → callee edges (traces
    /// recorded with CULPRIT_GRAPH=1; root cause then names the edge) [default: functions]
    Features "features" Name,
    features: Option<Features>, arg(value_enum),
    file(
        /// What the tracer's metrics compare (files written before it existed: functions).
        #[serde(default, skip_serializing_if = "is_functions")]
        features: Features = Features::Functions
    );
    /// Metrics to analyse, comma-separated: samples, count, time, events, latency, layers, os
    /// (every OS metric) or one OS metric such as disk.await [default: all with data]
    Metrics "metrics" Name,
    metrics: Vec<String>, arg(value_delimiter = ',', value_name = "LIST");
    /// Only these nodes, comma-separated
    Nodes "nodes" Name,
    nodes: Vec<String>, arg(value_delimiter = ',', value_name = "LIST");
    /// Leave these nodes out, comma-separated: a node with another role than its peers (a
    /// metadata server among data servers) differs from them whatever its health
    ExcludeNode "exclude-node" Name,
    exclude_nodes: Vec<String>, arg(value_delimiter = ',', value_name = "LIST");
    /// Read binaries under this directory instead of / (like perf report --symfs)
    Symfs "symfs" Name,
    symfs: Option<PathBuf>, arg(value_name = "DIR");

    @also:
    /// `baseline`: the stretch of the data a diagnosis learns normal from.
    Baseline "baseline" Name;
    /// `follow`: diagnose a run in progress.
    Follow "follow" Switch;
    /// `for`: how long a diagnosis follows a run in progress.
    For "for" Duration;
    /// `from`: where a report's time range begins.
    From "from" Name;
    /// `to`: where a report's time range ends.
    To "to" Name;
}

impl Setting {
    /// The name of the setting named `name`, as a `'static` string.
    pub(crate) fn named(name: &str) -> Option<&'static str> {
        Setting::ALL.iter().map(|s| s.name()).find(|n| *n == name)
    }

    /// The command-line flag that sets it (`--win-size`).
    pub fn flag(self) -> String {
        format!("--{}", self.name())
    }

    /// `value` as messages show it in this setting's unit.
    pub(crate) fn show(self, value: &impl Shown) -> String {
        value.shown(self.unit())
    }
}

impl fmt::Display for Setting {
    /// The setting's name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A value as messages show it.
pub(crate) trait Shown {
    /// In `unit`.
    fn shown(&self, unit: Unit) -> String;
}

impl Shown for u64 {
    fn shown(&self, unit: Unit) -> String {
        match unit {
            Unit::Duration => crate::time::fmt_dur(*self),
            _ => self.to_string(),
        }
    }
}

impl Shown for f64 {
    fn shown(&self, unit: Unit) -> String {
        match unit {
            Unit::Ms => format!("{self} ms"),
            _ => self.to_string(),
        }
    }
}

impl Shown for usize {
    fn shown(&self, _: Unit) -> String {
        self.to_string()
    }
}

impl Shown for bool {
    fn shown(&self, _: Unit) -> String {
        self.to_string()
    }
}

/// Shown by their names.
macro_rules! shown_by_name {
    ($($t:ty),*) => {$(
        impl Shown for $t {
            fn shown(&self, _: Unit) -> String {
                self.name().to_string()
            }
        }
    )*};
}
shown_by_name!(Distance, ScoreKind, Weighting, Features);

/// A setting in the `format!` text of [`settings_message!`].
pub(crate) struct Mark(pub Setting);

impl fmt::Display for Mark {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&SettingsMessage::mark(self.0.name()))
    }
}

/// A [`SettingsMessage`] from `format!` arguments in which `@Name` stands for
/// `Setting::Name` and `@(expr)` for a [`Setting`] value:
/// `settings_message!("{} must be longer than zero", @WinSize)`.
macro_rules! settings_message {
    ($fmt:literal $(, $($args:tt)*)?) => {
        $crate::error::SettingsMessage::from_marked(
            &$crate::options::settings_message!(@args [$fmt] [] $($($args)*)?),
            $crate::options::Setting::named,
        )
    };
    (@args [$fmt:literal] [$($done:expr,)*] @($s:expr) $(, $($rest:tt)*)?) => {
        $crate::options::settings_message!(
            @args [$fmt] [$($done,)* $crate::options::Mark($s),] $($($rest)*)?
        )
    };
    (@args [$fmt:literal] [$($done:expr,)*] @$s:ident $(, $($rest:tt)*)?) => {
        $crate::options::settings_message!(
            @args [$fmt] [$($done,)* $crate::options::Mark($crate::options::Setting::$s),]
            $($($rest)*)?
        )
    };
    (@args [$fmt:literal] [$($done:expr,)*] $e:expr $(, $($rest:tt)*)?) => {
        $crate::options::settings_message!(@args [$fmt] [$($done,)* $e,] $($($rest)*)?)
    };
    (@args [$fmt:literal] [$($done:expr,)*]) => {
        format!($fmt, $($done),*)
    };
}
pub(crate) use settings_message;

fn is_functions(f: &Features) -> bool {
    *f == Features::Functions
}

/// An option's value as given: `None` when not given.
pub(crate) trait Given {
    /// The value.
    type Value;
    /// `None` when not given.
    fn given(&self) -> Option<Self::Value>;
}

impl<T: Clone> Given for Option<T> {
    type Value = T;
    fn given(&self) -> Option<T> {
        self.clone()
    }
}

/// A switch is given when on: off is its default, never a choice that could contradict a
/// thresholds file.
impl Given for bool {
    type Value = bool;
    fn given(&self) -> Option<bool> {
        self.then_some(true)
    }
}

/// A value `T` as a thresholds file's field holds it: as it is, or optional (a field files
/// written before it existed lack).
pub(crate) trait Recorded<T> {
    /// The value recorded, if any.
    fn recorded(&self) -> Option<T>;
    /// The field that records `value`.
    fn record(value: T) -> Self;
}

impl<T: Clone> Recorded<T> for T {
    fn recorded(&self) -> Option<T> {
        Some(self.clone())
    }
    fn record(value: T) -> Self {
        value
    }
}

impl<T: Clone> Recorded<T> for Option<T> {
    fn recorded(&self) -> Option<T> {
        self.clone()
    }
    fn record(value: T) -> Self {
        Some(value)
    }
}

/// Picks each option: the one given, else the value trained (a given one that differs is
/// refused), else the default.
#[derive(Debug)]
pub(crate) struct Picker<'a> {
    /// The thresholds file's name.
    pub file: Option<&'a str>,
}

impl Picker<'_> {
    pub(crate) fn pick<T: PartialEq + Clone + Shown>(
        &self,
        setting: Setting,
        given: Option<T>,
        trained: Option<T>,
        default: T,
    ) -> Result<T> {
        match (given, trained) {
            (Some(g), Some(t)) if g != t => Err(Error::Settings(settings_message!(
                "{}: thresholds were trained with {} {}, not {}; diagnose with the same \
                 settings or train again",
                self.file.unwrap_or("thresholds"),
                @(setting),
                setting.show(&t),
                setting.show(&g)
            ))),
            (Some(g), _) => Ok(g),
            (None, Some(t)) => Ok(t),
            (None, None) => Ok(default),
        }
    }
}

/// Whether components are weighted by their fault-free variability.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Weighting {
    /// Raw values (seed 000).
    #[default]
    #[cfg_attr(feature = "clap", value(help = "compare raw values (seed 000)"))]
    None,
    /// Each component divided by its typical fault-free deviation from the median node, learned
    /// in training (seed 000 §"Future work"); untrained metrics compare raw values.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "divide each function by its fault-free deviation from the median node,                     learned in training"
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_names_its_settings_and_a_front_end_spells_them() {
        let m = settings_message!(
            "{} ({}) must be a multiple of {} ({})",
            @WinSize,
            "45 s",
            @WinShift,
            30
        );
        assert_eq!(
            m.to_string(),
            "win-size (45 s) must be a multiple of win-shift (30)"
        );
        assert_eq!(
            m.render(|s| format!("--{s}")),
            "--win-size (45 s) must be a multiple of --win-shift (30)"
        );
        assert_eq!(m.settings().collect::<Vec<_>>(), ["win-size", "win-shift"]);
        let plain = settings_message!("no setting at all");
        assert_eq!(plain.render(|s| format!("--{s}")), "no setting at all");
    }

    #[test]
    fn settings_have_distinct_names() {
        let mut names: Vec<_> = Setting::ALL.iter().map(|s| s.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Setting::ALL.len());
        assert_eq!(Setting::ExcludeNode.flag(), "--exclude-node");
    }
}
