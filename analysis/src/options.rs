//! The analysis options, each declared once: its setting name (the CLI's flag is `--` and the
//! name), its unit, its field in [`Overrides`], and its help text (the doc comment, which is
//! also the `--help` text of `culprit train` and `culprit diagnose` when the `clap` feature
//! derives the command-line arguments from [`Overrides`]).
//!
//! Messages about settings ([`crate::error::SettingsMessage`]) name them by [`Setting::name`];
//! a front end shows a setting in its own spelling (the CLI as its flag, `--` and the name).
//!
//! Where each option goes after it is given: [`crate::setup::Setup::resolve`] picks it against
//! the value a thresholds file was trained with ([`crate::thresholds::Settings`]) and the
//! defaults in [`crate::setup`].

use std::fmt;
use std::path::PathBuf;

use crate::distance::Distance;
use crate::error::SettingsMessage;
use crate::family::Features;
use crate::score::ScoreKind;
use crate::thresholds::Weighting;
#[cfg(feature = "clap")]
use crate::time::parse_duration_ns;

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

/// Declares the options: [`Overrides`] (with the `clap` feature, the command-line arguments),
/// [`Setting`], and each setting's name and unit.
macro_rules! options {
    ($(
        $(#[doc = $doc:literal])*
        $setting:ident $name:literal $unit:ident,
        $field:ident: $ty:ty $(, arg($($arg:tt)*))?;
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
            /// Every setting, in the order of `--help`.
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
    };
}

options! {
    /// Window size, WinSize (e.g. 60s, 2m, 500ms) [default: 60s]
    WinSize "win-size" Duration,
    win_size_ns: Option<u64>, arg(value_name = "DUR", value_parser = parse_duration_ns);
    /// Window shift, WinShift; windows start at multiples of it since the epoch [default: 30s]
    WinShift "win-shift" Duration,
    win_shift_ns: Option<u64>, arg(value_name = "DUR", value_parser = parse_duration_ns);
    /// Faulty when anomalous in k of the last 2k−1 windows [default: 3]
    K "k" Number,
    k: Option<usize>, arg(value_name = "K");
    /// Distance between feature vectors [default: manhattan]
    Distance "distance" Name,
    distance: Option<Distance>, arg(value_enum);
    /// Node score [default: median-node with trained thresholds and in training, suspect
    /// without]
    Score "score" Name,
    score: Option<ScoreKind>, arg(value_enum);
    /// Pairwise score: compare each node with a rotating analysis domain of N nodes (0: all
    /// nodes) [default: all up to 1000 nodes, else 10]
    Domain "domain" Number,
    domain: Option<usize>, arg(value_name = "N");
    /// Keep a function if it has this many samples in a window on a node, counted at the
    /// reference rate of one sample per 50 µs of CPU (seed 000's 100,000 cycles at 2 GHz) and
    /// scaled to the recorded event and period [default: 100]
    MinSamples "min-samples" Number,
    min_samples: Option<f64>, arg(value_name = "N");
    /// Keep a function if it has this much exclusive time in a window on a node (count uses the
    /// same rule; a function left out is still compared by its calls when one node makes 10×
    /// more than its peers' noise floor: docs/thresholds.md, "Rare functions") [default: 1s]
    MinTime "min-time" Ms,
    min_time_ns: Option<u64>, arg(value_name = "DUR", value_parser = parse_duration_ns);
    /// Key functions by program too (compare per program instead of per node aggregate)
    ByProgram "by-program" Switch,
    by_program: bool;
    /// Weight each function by its fault-free variability, learned in training
    /// [default: variance when training]
    Weighting "weighting" Name,
    weighting: Option<Weighting>, arg(value_enum);
    /// The OS metrics' window size (per-second values: a histogram needs enough of them)
    /// [default: WinSize or 30s, whichever is longer]
    OsWinSize "os-win-size" Duration,
    os_win_size_ns: Option<u64>, arg(value_name = "DUR", value_parser = parse_duration_ns);
    /// The OS metrics' window shift [default: WinShift]
    OsWinShift "os-win-shift" Duration,
    os_win_shift_ns: Option<u64>, arg(value_name = "DUR", value_parser = parse_duration_ns);
    /// Moving average over this many per-second values before distributions are compared (OS
    /// metrics, --distance cdf; 1: none) [default: 5]
    Smoothing "smoothing" Number,
    smoothing: Option<usize>, arg(value_name = "N");
    /// What the tracer's count and time compare: functions, or caller → callee edges (traces
    /// recorded with CULPRIT_GRAPH=1; root cause then names the edge) [default: functions]
    Features "features" Name,
    features: Option<Features>, arg(value_enum);
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
