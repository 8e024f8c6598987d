//! The typed content of `culprit report` (serialised as its JSON, schema [`SCHEMA`]) and the
//! options that select it.

use serde::Serialize;

use crate::time::TimeSpec;

/// JSON schema identifier of `culprit report --json`.
pub const SCHEMA: &str = "culprit-report/1";

/// Sort order of function tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum SortKey {
    /// Exclusive time.
    #[cfg_attr(feature = "clap", value(name = "self"))]
    Self_,
    /// Inclusive time.
    Total,
    /// Calls.
    Calls,
    /// Exclusive time per call.
    Avg,
    /// Function name.
    Name,
}

/// Which part of the data to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Only {
    /// Function-call traces.
    Traces,
    /// IP samples.
    Samples,
    /// Kernel event counts.
    Events,
    /// OS metrics (disk, network, TCP, CPU, cgroup, processes).
    Os,
}

/// What a report shows.
#[derive(Clone, Debug)]
pub struct ReportOptions {
    /// Only these programs (traced processes by program name, samples by the program they ran
    /// in); all when empty.
    pub programs: Vec<String>,
    /// Only these process ids; all when empty.
    pub pids: Vec<u32>,
    /// Intervals starting at or after this time.
    pub from: Option<TimeSpec>,
    /// Intervals starting before this time.
    pub to: Option<TimeSpec>,
    /// Order of function tables.
    pub sort: SortKey,
    /// Rows per table (0 = all).
    pub limit: usize,
    /// Merge the processes of each node (per program).
    pub merge: bool,
    /// Only this part of the data.
    pub only: Option<Only>,
    /// List every OS metric's per-interval values.
    pub os_series: bool,
}

/// The whole report (also the JSON document).
#[derive(Debug, Serialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Start of the range shown (wall-clock ns), inclusive.
    pub from_ns: u64,
    /// End of the range shown (wall-clock ns), exclusive.
    pub to_ns: u64,
    /// Nodes.
    pub nodes: Vec<NodeReport>,
    /// What each sampler run lost that the kernel could not attribute to a node, once per run
    /// (not on every node); [`SamplesReport::machine_loss`] points here.
    pub machine_losses: Vec<MachineLoss>,
    /// Problems found while loading.
    pub warnings: Vec<String>,
}

/// What one sampler run lost in the range that belongs to no node in particular: its rings are
/// per CPU, shared by every node, and the kernel says how many records a ring dropped, not
/// whose they were.
#[derive(Debug, Default, Serialize)]
pub struct MachineLoss {
    /// Host the sampler ran on.
    pub host: String,
    /// The sampler's process id.
    pub sampler_pid: Option<u32>,
    /// The nodes it wrote for.
    pub nodes: Vec<String>,
    /// Samples dropped.
    pub samples: u64,
    /// Kernel-event (tracepoint) records dropped.
    pub events: u64,
    /// Process-tracking records dropped (COMM, MMAP2, FORK, EXIT, NAMESPACES).
    pub tracking: u64,
    /// Records of files older than format version 7, whose kinds were not told apart (the
    /// samples' field counted kernel-event and process-tracking records too).
    pub unsorted: u64,
}

/// One node.
#[derive(Debug, Serialize)]
pub struct NodeReport {
    /// Node name.
    pub node: String,
    /// Traced processes (or per-program merges with --merge).
    pub processes: Vec<ProcessReport>,
    /// Sampler runs.
    pub samples: Vec<SamplesReport>,
    /// Kernel event totals in the range.
    pub events: Vec<EventRow>,
    /// OS metrics in the range (absent when the node has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<OsReport>,
}

/// A node's OS metrics over the range.
#[derive(Debug, Serialize)]
pub struct OsReport {
    /// Interval length, ns.
    pub interval_ns: u64,
    /// Intervals in the range.
    pub intervals: usize,
    /// Intervals the collector could not observe (no values: missing, not zero).
    pub missed_intervals: usize,
    /// One row per (metric, instance), by name.
    pub metrics: Vec<OsMetricRow>,
}

/// One OS metric's statistics over the intervals where it is present.
#[derive(Debug, Serialize)]
pub struct OsMetricRow {
    /// Name (`disk.await`; catalogue in culprit_format::os_metrics).
    pub metric: String,
    /// Device or interface, for per-instance metrics.
    pub instance: Option<String>,
    /// Unit.
    pub unit: String,
    /// Intervals with a value.
    pub present: usize,
    /// Observed intervals without a value (the node could not provide it then).
    pub absent: usize,
    /// Mean of the values present.
    pub mean: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// With --os-series: `[start_ns, value or null]` per observed interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series: Option<Vec<(u64, Option<f64>)>>,
}

/// One traced process.
#[derive(Debug, Serialize)]
pub struct ProcessReport {
    /// Process id (0 for merged rows).
    pub pid: u32,
    /// Program name.
    pub program: String,
    /// Executable path.
    pub exe: String,
    /// Data file(s): a rotated process's pieces, oldest first.
    pub files: Vec<String>,
    /// `ended`, `running`, `stopped` (no end marker: killed or crashed), `exec` (the image
    /// was replaced by `exec`; its successor has its own file), or `damaged`.
    pub status: String,
    /// Why the file is damaged, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damage: Option<String>,
    /// First interval start in the range (ns), if any.
    pub first_ns: Option<u64>,
    /// End of the last interval in the range (ns), if any.
    pub last_ns: Option<u64>,
    /// Interval length (ns).
    pub interval_ns: u64,
    /// Intervals in the range.
    pub intervals: usize,
    /// Intervals the runtime could not observe (missing data, not zeros).
    pub missed_intervals: usize,
    /// Most threads seen in one interval.
    pub max_threads: u32,
    /// Frames dropped recovering from mismatched exits (longjmp, exceptions, cancellation).
    pub lost_frames: u64,
    /// Calls not accounted for lack of room.
    pub overflows: u64,
    /// Where the counts come from: `instrumentation` (the runtime's hooks) or `uprobes`
    /// (perf_event uprobes on an unmodified binary: calls entered, no time unless measured
    /// with uretprobes).
    pub source: String,
    /// Calls not traced for other reasons: a signal handler's calls made while a hook ran,
    /// calls in a thread the runtime could not give a table, calls it could not place in an
    /// interval (it was stopped).
    pub dropped_calls: u64,
    /// Trouble the runtime met and recorded (`<wall-clock ns>: <what>`): failed writes, a
    /// file that was removed or replaced and continued in a new one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trouble: Vec<String>,
    /// Functions, sorted as asked.
    pub functions: Vec<FunctionRow>,
    /// Caller → callee edges, when traced with `CULPRIT_GRAPH=1`: calls, the callee's self
    /// and total time in those calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edges: Option<Vec<EdgeRow>>,
    /// Calls whose edge the runtime could not record (its edge table was full).
    #[serde(skip_serializing_if = "is_zero")]
    pub edge_drops: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One function's totals in the range.
#[derive(Debug, Serialize, Clone)]
pub struct FunctionRow {
    /// Demangled name.
    pub function: String,
    /// Image base name.
    pub image: String,
    /// Calls.
    pub calls: u64,
    /// Exclusive time, ns.
    pub self_ns: u64,
    /// Inclusive time, ns.
    pub total_ns: u64,
    /// Calls among `calls` that did not return (left by `longjmp`, an exception through code
    /// without cleanups, thread cancellation): ended by the runtime when it noticed.
    pub unwound: u64,
    /// Call durations, when traced with `CULPRIT_HIST=1`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<Latency>,
}

/// Quantiles of a function's call durations (from log2 histograms: good to a factor of 2).
#[derive(Debug, Serialize, Clone, PartialEq, Eq)]
pub struct Latency {
    /// Calls in the histograms.
    pub calls: u64,
    /// Median, ns.
    pub p50_ns: u64,
    /// 90th percentile, ns.
    pub p90_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
    /// Upper bound of the longest call, ns.
    pub max_ns: u64,
    /// The histogram: `[k, calls]` for each non-empty bucket `k` (calls of `2^k` to
    /// `2^(k+1) − 1` ns; bucket 0: 0–1 ns).
    pub buckets: Vec<[u64; 2]>,
}

/// Calls of one function from another in the range.
#[derive(Debug, Serialize, Clone, PartialEq, Eq)]
pub struct EdgeRow {
    /// The caller (`null`: no traced caller, a thread's first function).
    pub caller: Option<String>,
    /// The caller's image.
    pub caller_image: Option<String>,
    /// The callee.
    pub callee: String,
    /// The callee's image.
    pub callee_image: String,
    /// Calls.
    pub calls: u64,
    /// The callee's exclusive time in those calls, ns.
    pub self_ns: u64,
    /// Elapsed time of those calls, ns (each call, recursion included).
    pub total_ns: u64,
}

/// One sampler run's totals in the range.
#[derive(Debug, Serialize)]
pub struct SamplesReport {
    /// Data file.
    pub file: String,
    /// `ended`, `running`/`stopped`, or `damaged`.
    pub status: String,
    /// Event sampled.
    pub event: String,
    /// Period (events per sample), when fixed.
    pub period: Option<u64>,
    /// Frequency in Hz, when in frequency mode.
    pub freq_hz: Option<u64>,
    /// Intervals in the range.
    pub intervals: usize,
    /// Intervals the sampler could not observe.
    pub missed_intervals: usize,
    /// Samples taken.
    pub total: u64,
    /// Samples lost that were this node's own: known when it is the only node of a sampler of
    /// the whole machine; otherwise the kernel cannot say whose (see `machine_loss`) and this
    /// is 0.
    pub lost: u64,
    /// Kernel-event (tracepoint) records lost that were this node's own.
    pub lost_events: u64,
    /// Process-tracking records lost that were this node's own.
    pub lost_tracking: u64,
    /// Index in [`Report::machine_losses`] of what this file's sampler run lost without the
    /// kernel saying whose, when it lost anything.
    pub machine_loss: Option<usize>,
    /// Counts per (program, image, function), most first.
    pub entries: Vec<SampleRow>,
}

/// One (program, image, function) sample count.
#[derive(Debug, Serialize)]
pub struct SampleRow {
    /// Program.
    pub program: String,
    /// Image base name.
    pub image: String,
    /// Function.
    pub function: String,
    /// Samples.
    pub samples: u64,
}

/// One kernel event's total.
#[derive(Debug, Serialize)]
pub struct EventRow {
    /// Event name (e.g. `tcp:tcp_retransmit_skb`).
    pub event: String,
    /// Occurrences.
    pub count: u64,
}
