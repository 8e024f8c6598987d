//! Metric families: what is compared across nodes, one trait for all of them.
//!
//! A family turns its records into per-node, per-interval values of components (functions,
//! kernel events, OS metrics…), says in which unit, which components are worth comparing (the
//! keep rule of seed 000 §"Feature-Vector Dimensionality") and how values are compared: as
//! window sums under the analysis' distance (every family today), or as distributions of their
//! per-second values under the CDF distance of seed 001 §5 ([`Comparison::Cdf`]). A family may
//! also bring its own WinSize and WinShift.
//!
//! Built in: [`sampler::Samples`] and [`sampler::Events`] (from `culprit sample`),
//! [`tracer::Count`] and [`tracer::Time`] (from the tracing runtime), [`tracer::Latency`], and
//! [`layers::Layers`] (layer-boundary I/O events). A new family implements
//! [`MetricFamily`]: what it is, declared once in an [`About`] (its [`Metric`] name, unit,
//! words, comparison…), its keep rule and a [`FamilyReader`] for its records; and is listed in
//! [`builtin::all`] and [`Metric::BUILTIN`].

use culprit_format::interval_flags;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::data::{Dataset, EventInterval, NodeData, OsInterval, SampleInterval, TraceInterval};
use crate::distance::Distance;
use crate::error::Result;
use crate::model::{CompIdx, CompLabel, CompValue, Interval, IntervalData};

pub mod builtin;
pub mod distributions;
pub mod layers;
pub mod os;
pub mod sampler;
pub mod tracer;

/// A metric's identity: its family's name, as users type and read it (`--metrics`, reports,
/// JSON, thresholds files).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Metric(&'static str);

impl Metric {
    /// Instruction-pointer samples per (program,) image and function, from the sampler.
    pub const SAMPLES: Metric = Metric("samples");
    /// Calls per function, from the tracer.
    pub const COUNT: Metric = Metric("count");
    /// Exclusive wall-clock time per function (blocked time included), from the tracer, ms.
    pub const TIME: Metric = Metric("time");
    /// Kernel event counts (tracepoints) per node, from the sampler.
    pub const EVENTS: Metric = Metric("events");
    /// Call-duration distributions per function, from the tracer's histograms
    /// (`CULPRIT_HIST=1`), compared with the CDF distance.
    pub const LATENCY: Metric = Metric("latency");
    /// Time per I/O layer and stage of the requests completed, per second (seed 003), ms.
    pub const LAYERS: Metric = Metric("layers");

    /// The built-in metrics, in report order.
    pub const BUILTIN: [Metric; 6] = [
        Metric::SAMPLES,
        Metric::COUNT,
        Metric::TIME,
        Metric::EVENTS,
        Metric::LATENCY,
        Metric::LAYERS,
    ];
    /// The black-box OS metrics as one family (seed 001): each OS metric (`disk.await`,
    /// `net.rxbyt`, … named as in `culprit_format::os_metrics`) is analysed on its own, and
    /// all of them count as this one metric when metrics corroborate each other.
    pub const OS: Metric = Metric("os");

    /// A metric called `name` (a family's identity; names are unique).
    pub const fn new(name: &'static str) -> Metric {
        Metric(name)
    }

    /// The name users type and read.
    pub fn name(self) -> &'static str {
        self.0
    }

    /// Parses a metric's name: a built-in metric, an OS metric of the catalogue
    /// (`culprit_format::os_metrics`), or `os`, their family.
    pub fn from_name(s: &str) -> Option<Metric> {
        Metric::BUILTIN
            .into_iter()
            .chain([Metric::OS])
            .find(|m| m.0 == s)
            .or_else(|| culprit_format::os_metrics::def(s).map(|d| Metric(d.name)))
    }

    /// True for an OS metric of the catalogue.
    pub fn is_os(self) -> bool {
        culprit_format::os_metrics::def(self.0).is_some()
    }

    /// Position in report order (built-in metrics first, in [`Metric::BUILTIN`] order).
    fn rank(self) -> usize {
        Metric::BUILTIN
            .iter()
            .position(|m| *m == self)
            .unwrap_or(usize::MAX)
    }
}

impl Ord for Metric {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.rank(), self.0).cmp(&(other.rank(), other.0))
    }
}

impl PartialOrd for Metric {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Metric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl Serialize for Metric {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

impl<'de> Deserialize<'de> for Metric {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Metric::from_name(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown metric {s:?} (this culprit knows samples, count, time, events, latency, \
                 layers and the OS metrics of its catalogue)"
            ))
        })
    }
}

/// What the tracer's `count` and `time` compare: functions, or caller → callee edges
/// (`--features edges`; seed 002 §3 compares call paths as its functions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Features {
    /// Functions.
    #[default]
    Functions,
    /// Caller → callee edges (traces recorded with `CULPRIT_GRAPH=1`); root cause names the
    /// edge, `caller → callee`.
    Edges,
}

impl Features {
    /// The name users type.
    pub fn name(self) -> &'static str {
        match self {
            Features::Functions => "functions",
            Features::Edges => "edges",
        }
    }
}

/// Unit of weighted scores: each component counts in typical fault-free deviations.
pub const WEIGHTED_UNIT: &str = "deviations";
pub use crate::distance::CDF_UNIT;
/// Unit of distances between profiles (seed 002's suspect score): shares of a node's total
/// (or of the window's median node's), Σ|pᵢ − qᵢ| of two profiles.
pub const PROFILE_UNIT: &str = "share";

/// How samples were taken: the event and its period (events per sample) or frequency.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sampling {
    /// Event sampled (`cpu-clock`, `cycles`).
    pub event: String,
    /// Period, or frequency in Hz when `freq`.
    pub period: u64,
    /// True when `period` is a frequency.
    pub freq: bool,
}

impl fmt::Display for Sampling {
    /// `cpu-clock, 1000 Hz` / `cycles, period 100000`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.freq {
            write!(f, "{}, {} Hz", self.event, self.period)
        } else {
            write!(f, "{}, period {}", self.event, self.period)
        }
    }
}

/// Which components a metric keeps (seed 000 §"Feature-Vector Dimensionality"). The kept set
/// only grows, so offline and live analyses of the same data agree.
#[derive(Clone, Debug, PartialEq)]
pub enum KeepRule {
    /// Components reaching this window sum on some complete node in some window.
    AtLeast(f64),
    /// The components another metric keeps (count uses the time rule).
    SameAs(Metric),
    /// Every component (kernel events: few, all meaningful).
    All,
}

impl KeepRule {
    /// The metric whose kept set this one follows, if any.
    pub fn follows(&self) -> Option<Metric> {
        match self {
            KeepRule::SameAs(m) => Some(*m),
            _ => None,
        }
    }
}

/// How a family's values are compared across nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    /// The window sum of each component, under the analysis' distance (seed 000).
    Sums,
    /// The distribution of each component's per-slot values over the window, as a cumulative
    /// histogram on bins shared by all nodes, under the CDF distance Σ|P(i) − Q(i)| (seed 001
    /// §5, "CDF Distances"). Values are rates: an interval longer than a slot gives each of its
    /// slots its value.
    Cdf {
        /// Most bins per component and window (seed 001 caps them at 1000).
        max_bins: usize,
    },
    /// Each component is a histogram its family already counts: the components whose label
    /// has a [`CompLabel::bucket`] are its parts (calls per bucket), the one without stands for
    /// the whole (and is what the keep rule and root cause see). Each window's part sums become
    /// the cumulative fractions of the component's calls per bucket, compared with the CDF
    /// distance Σ|P(k) − Q(k)| (seed 001 §5) — the latency family's call durations.
    ///
    /// [`CompLabel::bucket`]: crate::model::CompLabel::bucket
    Histograms,
}

/// A window size and shift, ns (the shift divides the size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    /// WinSize, ns.
    pub size_ns: u64,
    /// WinShift, ns; windows start at multiples of it since the epoch.
    pub shift_ns: u64,
}

/// Words for a deviation above / below the median node ("more calls", "fewer calls").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Words {
    /// Above the median node.
    pub more: &'static str,
    /// Below it.
    pub less: &'static str,
}

/// The analysis' dimensionality settings, as the data's families apply them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KeepSettings {
    /// Samples per window, at this data's sampling rate.
    pub min_samples: f64,
    /// Exclusive time per window, ms.
    pub min_time_ms: f64,
}

/// Which of the [`KeepSettings`] a keep rule reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepBy {
    /// [`KeepSettings::min_samples`].
    Samples,
    /// [`KeepSettings::min_time_ms`].
    Time,
}

/// The minimum a family's keep rule asks for and the option that sets it, for the note that
/// says nothing reached it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeepHint {
    /// `100 samples`, `1 s of self time`.
    pub minimum: String,
    /// The setting that lowers it.
    pub by: KeepBy,
}

/// What a family is, declared once by each family ([`MetricFamily::about`]): its identity, its
/// unit and words, how it is recorded and how its values are compared. Callers read it through
/// the readers of `dyn MetricFamily` (`family.unit()`).
#[derive(Clone, Copy, Debug)]
pub struct About {
    /// Its identity.
    pub metric: Metric,
    /// The family this metric belongs to when metrics corroborate each other, when not itself:
    /// [`Metric::OS`] for every OS metric (so `disk.rd_sec` cannot corroborate `disk.tps`).
    pub group: Option<Metric>,
    /// Unit of its values, of its Manhattan distances and of its thresholds.
    pub unit: &'static str,
    /// Words for a deviation above / below the median node.
    pub words: Words,
    /// How a user gets this family's data (`run \`culprit sample\``).
    pub how_to_record: &'static str,
    /// How values are compared across nodes.
    pub comparison: Comparison,
    /// The smallest difference worth counting, in the unit: variance weighting never divides
    /// by less (1 for counts).
    pub resolution: f64,
    /// Its own WinSize and WinShift, when the analysis' do not suit it.
    pub windows: Option<Windows>,
    /// Distribution families: width of the moving average applied to each node's per-slot
    /// values before their distribution is taken (seed 001 §3.3; 1: none).
    pub smoothing: usize,
    /// True when a component without a value in an interval had none (0 calls, 0 samples);
    /// false when it is *absent* — the node could not observe it (an OS metric's `await`
    /// without requests) — and must never be read as zero.
    pub absent_is_zero: bool,
    /// True when the functions the keep rule leaves out are still compared for a node that
    /// runs one orders of magnitude more often than its peers ([`crate::rare`]; count).
    pub rare: bool,
    /// True when values are counts of samples, which compare only between nodes sampled alike
    /// (a thresholds file records the sampling: [`MetricFamily::sampling`]).
    pub sampled: bool,
    /// How its components are compared once a tracer demoted functions on some node
    /// ([`crate::demoted`]): unaffected unless it reads the tracer's function calls.
    pub demoted: crate::demoted::Rule,
}

/// A metric family: what it is ([`About`]), which components it keeps, and its records. See the
/// module documentation.
pub trait MetricFamily: fmt::Debug + Send + Sync {
    /// What it is.
    fn about(&self) -> &About;

    /// The keep rule under these settings.
    fn keep_rule(&self, keep: &KeepSettings) -> KeepRule;

    /// What the keep rule asks for, when it can keep nothing.
    fn keep_hint(&self, _keep: &KeepSettings) -> Option<KeepHint> {
        None
    }

    /// Unit of its scores and thresholds under `distance` (`weighted`: variance weighting;
    /// `profiles`: the scorer compares profiles, seed 002).
    fn score_unit(&self, distance: Distance, weighted: bool, profiles: bool) -> &'static str {
        if profiles && self.about().comparison == Comparison::Sums && distance != Distance::SymKl {
            return PROFILE_UNIT;
        }
        self.cause_unit(distance, weighted)
    }

    /// Unit of its root-cause distances (components compared as they are, never as profiles).
    fn cause_unit(&self, distance: Distance, weighted: bool) -> &'static str {
        let about = self.about();
        match (about.comparison, distance) {
            (Comparison::Cdf { .. } | Comparison::Histograms, _) => CDF_UNIT,
            (_, Distance::Manhattan | Distance::Scaled) if weighted => WEIGHTED_UNIT,
            (_, d) => d.unit(about.unit),
        }
    }

    /// Calls `see` with how each of `node`'s records of this family was sampled, for a
    /// [`About::sampled`] family.
    fn sampling(&self, _node: &NodeData, _see: &mut dyn FnMut(Sampling)) {}

    /// True when `node` has records of this family.
    fn has_data(&self, node: &NodeData) -> bool;

    /// Calls `see` with the length (ns) of each of `node`'s records of this family.
    fn interval_lengths(&self, node: &NodeData, see: &mut dyn FnMut(u64));

    /// A reader of this family's records; `by_program` keys function components by program too.
    fn reader(&self, by_program: bool) -> Box<dyn FamilyReader>;
}

/// Readers of [`About`], on the trait object so that no family can answer apart from its
/// declaration.
impl dyn MetricFamily + '_ {
    /// [`About::metric`].
    pub fn metric(&self) -> Metric {
        self.about().metric
    }

    /// [`About::group`], or the metric itself.
    pub fn group(&self) -> Metric {
        let about = self.about();
        about.group.unwrap_or(about.metric)
    }

    /// [`About::unit`].
    pub fn unit(&self) -> &'static str {
        self.about().unit
    }

    /// [`About::words`].
    pub fn words(&self) -> Words {
        self.about().words
    }

    /// [`About::how_to_record`].
    pub fn how_to_record(&self) -> &'static str {
        self.about().how_to_record
    }

    /// [`About::comparison`].
    pub fn comparison(&self) -> Comparison {
        self.about().comparison
    }

    /// [`About::resolution`].
    pub fn resolution(&self) -> f64 {
        self.about().resolution
    }

    /// [`About::windows`].
    pub fn windows(&self) -> Option<Windows> {
        self.about().windows
    }

    /// [`About::smoothing`].
    pub fn smoothing(&self) -> usize {
        self.about().smoothing
    }

    /// [`About::absent_is_zero`].
    pub fn absent_is_zero(&self) -> bool {
        self.about().absent_is_zero
    }

    /// [`About::rare`].
    pub fn rare(&self) -> bool {
        self.about().rare
    }

    /// [`About::sampled`].
    pub fn sampled(&self) -> bool {
        self.about().sampled
    }

    /// [`About::demoted`].
    pub fn demoted(&self) -> crate::demoted::Rule {
        self.about().demoted
    }
}

/// Turns a dataset's records into one family's intervals, remembering what it pushed: offline
/// it is called once per chunk of time, in `--follow` after each refresh of the dataset — the
/// same code (live and offline share one path).
pub trait FamilyReader: fmt::Debug + Send {
    /// Pushes every interval of `node` that starts before `until_ns` and was not pushed yet.
    fn feed(
        &mut self,
        ds: &Dataset,
        node: &NodeData,
        until_ns: u64,
        sink: &mut dyn IntervalSink,
    ) -> Result<()>;

    /// Start of `node`'s earliest interval not pushed yet.
    fn next_start(&self, node: &NodeData) -> Option<u64>;
}

/// Where a family reader puts one node's intervals (the analyzer, or a label collector).
pub trait IntervalSink {
    /// The component `label`, registered if new.
    fn component(&mut self, label: CompLabel) -> CompIdx;

    /// One interval from the writer of file `writer` (a traced process, a sampler run).
    fn push(&mut self, writer: &Path, iv: &Interval<'_>) -> Result<()>;

    /// The writer of `writer` will send nothing more (it wrote its end marker).
    fn end(&mut self, writer: &Path);
}

/// An interval record as family readers see it.
pub trait Record {
    /// Start, wall-clock ns.
    fn start_ns(&self) -> u64;
    /// Length, ns.
    fn dur_ns(&self) -> u64;
    /// `interval_flags` bits.
    fn flags(&self) -> u32;
}

macro_rules! record {
    ($t:ty) => {
        impl Record for $t {
            fn start_ns(&self) -> u64 {
                self.start_ns
            }
            fn dur_ns(&self) -> u64 {
                self.dur_ns
            }
            fn flags(&self) -> u32 {
                self.flags
            }
        }
    };
}
record!(TraceInterval);
record!(SampleInterval);
record!(EventInterval);
record!(OsInterval);

/// How far a reader has pushed each writer's records.
#[derive(Debug, Default)]
pub struct Cursors {
    by_file: HashMap<PathBuf, Cursor>,
    values: Vec<CompValue>,
}

#[derive(Clone, Copy, Debug, Default)]
struct Cursor {
    next: usize,
    ended: bool,
}

impl Cursors {
    /// Start of the first record of `file` not pushed yet.
    pub fn next_start<R: Record>(&self, file: &Path, records: &[R]) -> Option<u64> {
        let next = self.by_file.get(file).map_or(0, |c| c.next);
        records.get(next).map(Record::start_ns)
    }

    /// Pushes the records of `file` not pushed yet that start before `until_ns`, `values`
    /// giving each one's values (missed records have none); then, when every record is in and
    /// the writer has ended (`open` false), says so.
    pub fn feed<R: Record>(
        &mut self,
        file: &Path,
        records: &[R],
        open: bool,
        until_ns: u64,
        sink: &mut dyn IntervalSink,
        mut values: impl FnMut(&R, &mut dyn IntervalSink, &mut Vec<CompValue>),
    ) -> Result<()> {
        let mut c = self.by_file.get(file).copied().unwrap_or_default();
        while let Some(r) = records.get(c.next) {
            if r.start_ns() >= until_ns {
                break;
            }
            c.next += 1;
            self.values.clear();
            let missed = interval_flags::is_missed(r.flags());
            if !missed {
                values(r, sink, &mut self.values);
            }
            let iv = Interval {
                start_ns: r.start_ns(),
                dur_ns: r.dur_ns(),
                partial: r.flags() & interval_flags::PARTIAL != 0,
                data: if missed {
                    IntervalData::Missed
                } else {
                    IntervalData::Sparse(&self.values)
                },
            };
            sink.push(file, &iv)?;
        }
        if c.next == records.len() && !open && !c.ended {
            c.ended = true;
            sink.end(file);
        }
        self.by_file.insert(file.to_path_buf(), c);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_families_are_in_report_order() {
        let names: Vec<Metric> = builtin::all().iter().map(|f| f.metric()).collect();
        assert_eq!(names, Metric::BUILTIN);
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, names, "metrics order as reported");
        assert!(Metric::new("os") > Metric::EVENTS);
    }

    #[test]
    fn metric_names_round_trip() {
        for m in Metric::BUILTIN {
            assert_eq!(Metric::from_name(m.name()), Some(m));
            let json = serde_json::to_string(&m).unwrap();
            assert_eq!(serde_json::from_str::<Metric>(&json).unwrap(), m);
        }
        assert!(serde_json::from_str::<Metric>("\"bogus\"").is_err());
    }
}
