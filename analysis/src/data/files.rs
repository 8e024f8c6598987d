//! What the loader keeps of each writer's stream: a traced process's intervals of per-function
//! counters, a sampler run's intervals of sample and kernel-event counts, and the state of the
//! stream (ended, open, damaged).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use culprit_format::names::NodeInfo;
use culprit_format::procfs::process_alive;
use culprit_format::{info_keys, interval_flags, IntervalHead, DATA_OFFSET};

use super::names::{EventId, FuncId, OsMetricId, ProgramId};
use super::symbols::Object;

/// One interval of a node's OS metrics. A metric without a value is absent in this interval
/// (the node cannot provide it, or a counter went backwards): never read it as zero.
#[derive(Clone, Debug, PartialEq)]
pub struct OsInterval {
    /// Start, wall-clock ns since the epoch.
    pub start_ns: u64,
    /// Length, ns.
    pub dur_ns: u64,
    /// Time between the two reads the rates come from, ns.
    pub span_ns: u64,
    /// `interval_flags` bits (MISSED: not observed, no values).
    pub flags: u32,
    /// Values present, sorted by metric id.
    pub values: Vec<OsValue>,
}

/// One OS metric's value in one interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OsValue {
    /// The metric.
    pub metric: OsMetricId,
    /// Its value, in the metric's unit.
    pub value: f64,
}

impl OsInterval {
    /// True when the collector could not observe this interval.
    pub fn missed(&self) -> bool {
        interval_flags::is_missed(self.flags)
    }

    /// The value of `metric`, if present.
    pub fn get(&self, metric: OsMetricId) -> Option<f64> {
        self.values
            .binary_search_by_key(&metric, |v| v.metric)
            .ok()
            .map(|i| self.values[i].value)
    }
}

/// What state a file is in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileStatus {
    /// The writer wrote an end marker: the data is complete.
    Ended,
    /// No end marker (yet): the writer is running, or it died (crash, `kill -9`).
    Open,
    /// A record failed validation or the file was cut short; records before it are kept.
    Damaged(String),
}

/// One function's counters in one interval of one traced process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    /// The function.
    pub func: FuncId,
    /// Calls that returned in the interval.
    pub calls: u64,
    /// Exclusive (self) wall-clock ns.
    pub excl_ns: u64,
    /// Inclusive (total) wall-clock ns.
    pub incl_ns: u64,
    /// Calls among `calls` that did not return (left by `longjmp`, an exception through code
    /// without cleanups, thread cancellation or exit): the runtime ended them when it noticed.
    pub unwound: u64,
}

/// Calls from one function to another in one interval (`CULPRIT_GRAPH=1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEdge {
    /// The caller; `None` when the callee had no traced caller (a thread's first function).
    pub caller: Option<FuncId>,
    /// The callee.
    pub callee: FuncId,
    /// Calls.
    pub calls: u64,
    /// The callee's exclusive ns in those calls.
    pub excl_ns: u64,
    /// Elapsed ns of those calls (each call, recursion included).
    pub incl_ns: u64,
}

/// One function's call durations in one interval (`CULPRIT_HIST=1`): calls per log2 bucket of
/// ns (bucket `k` ≥ 1 holds `2^k ..= 2^(k+1) − 1` ns; see `culprit_format::HIST_BUCKETS`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceHist {
    /// The function.
    pub func: FuncId,
    /// Calls per bucket.
    pub counts: [u64; culprit_format::HIST_BUCKETS],
}

/// One interval of a traced process: the record's fixed fields (read through `Deref`:
/// `iv.start_ns`, `iv.flags`, …) and what the reader made of its entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceInterval {
    /// Start, length, flags, threads and what was not accounted, as the record has them.
    pub head: IntervalHead,
    /// Per-function counters (functions with the same name are merged).
    pub entries: Vec<TraceEntry>,
    /// Caller → callee edges, when the process was traced with `CULPRIT_GRAPH=1` (`None`
    /// otherwise).
    pub edges: Option<Vec<TraceEdge>>,
    /// Calls whose edge the runtime could not record (its edge table was full).
    pub edge_drops: u32,
    /// Call-duration histograms, when traced with `CULPRIT_HIST=1` (`None` otherwise).
    pub hists: Option<Vec<TraceHist>>,
    /// The process's CPU time and the runtime's estimate of its own share (format version 7;
    /// `None` in older files).
    pub cost: Option<culprit_format::CostRec>,
}

impl std::ops::Deref for TraceInterval {
    type Target = IntervalHead;

    fn deref(&self) -> &IntervalHead {
        &self.head
    }
}

impl std::ops::DerefMut for TraceInterval {
    fn deref_mut(&mut self) -> &mut IntervalHead {
        &mut self.head
    }
}

impl TraceInterval {
    /// True when the writer could not observe this interval (missing data, not zeros).
    pub fn missed(&self) -> bool {
        interval_flags::is_missed(self.flags)
    }
}

/// One traced process's file.
#[derive(Clone, Debug)]
pub struct TraceFile {
    /// The file.
    pub path: PathBuf,
    /// Process id.
    pub pid: u32,
    /// Program name (interned).
    pub program: ProgramId,
    /// Info pairs as recorded.
    pub info: Vec<(String, String)>,
    /// Interval length, ns.
    pub interval_ns: u64,
    /// When the file was created (wall-clock ns).
    pub created_ns: u64,
    /// Wall-clock ns of the end marker, if any.
    pub end_ns: Option<u64>,
    /// State of the file.
    pub status: FileStatus,
    /// The file of the program this process image `exec`ed, when there is one: the image
    /// ended by exec (which runs no exit handler, so there is no end marker).
    pub exec_successor: Option<PathBuf>,
    /// Intervals in file order. When the writer is gone without an end marker (a crash,
    /// `abort`, `kill -9`, `exec`), the last one may be its checkpoint of the interval in
    /// progress (flagged partial; it is re-read at every refresh).
    pub intervals: Vec<TraceInterval>,
    /// The checkpoint found at the last read, not yet known to be usable.
    pub(super) checkpoint: Option<TraceInterval>,
    /// Layer-boundary I/O events, in file order (`analysis::layers` reads them).
    pub layers: Vec<LayerStretch>,
    /// Sampled requests' events, in file order (`analysis::requests` reads them).
    pub requests: Vec<super::requests::RequestStretch>,
    /// The last of `intervals` is the checkpoint.
    pub(super) provisional: bool,
    pub(super) consumed: u64,
    pub(super) objects: Vec<Object>,
    pub(super) addr_cache: HashMap<u64, FuncId>,
    /// Where each thread was at the writer's last stack snapshot (format version 4; `None`
    /// for older files or before the first snapshot). Re-read at every refresh.
    pub stacks: Option<StackSnapshot>,
    /// Why the file's stacks region is damage, when it is (a slot torn or corrupt in a file
    /// that is done, the region cut short, a snapshot beyond the intact records or
    /// inconsistent with them): counted in the damage finding; nothing in the region is then
    /// read as where the threads are.
    pub stacks_damage: Option<String>,
    /// The flusher's wake-ups and their lateness, per interval (format version 4).
    pub wakeups: Vec<culprit_format::WakeupsRec>,
    /// Functions the runtime stopped tracing (its cost budget; format version 7), in file
    /// order.
    pub demotions: Vec<TraceDemotions>,
    /// Later pieces of a rotated process joined into this one, oldest first (`path` is the
    /// first piece, the identity); reading goes on in the last ([`TraceFile::current_path`]).
    pub pieces: Vec<PathBuf>,
    /// The piece read now ended by rotation at this time; its successor is not joined yet.
    pub(super) rotated_end: Option<u64>,
}

/// Whether the writer of a file still runs on this machine (same boot, same start time) and is
/// not a zombie: from the file's info pairs.
fn info_writer_alive(info: impl Fn(&str) -> Option<String>) -> bool {
    let Some(pid) = info(info_keys::PID).and_then(|v| v.parse::<u32>().ok()) else {
        return false;
    };
    process_alive(
        pid,
        info(info_keys::BOOT_ID).as_deref(),
        info(info_keys::PROC_START_NS).and_then(|v| v.parse().ok()),
    ) && super::stacks::process_state(pid).is_some_and(|s| s != 'Z' && s != 'X')
}

impl TraceFile {
    /// The file being read now: the last piece of a rotated process, else [`TraceFile::path`].
    pub fn current_path(&self) -> &std::path::Path {
        self.pieces.last().unwrap_or(&self.path)
    }

    /// How far the file has been read: the pieces joined and the bytes read of the last. It
    /// grows when the writer wrote records, late or not.
    pub fn read_position(&self) -> (usize, u64) {
        (self.pieces.len(), self.consumed)
    }

    /// True when the writing process runs and is not a zombie (a writer behind but alive:
    /// `--follow` waits for it).
    pub fn writer_running(&self) -> bool {
        self.writer_alive()
            && super::stacks::process_state(self.pid).is_some_and(|s| s != 'Z' && s != 'X')
    }

    /// True when the process that writes this file still runs (on this machine, same boot,
    /// same start time).
    pub fn writer_alive(&self) -> bool {
        process_alive(
            self.pid,
            self.info(info_keys::BOOT_ID),
            self.info(info_keys::PROC_START_NS)
                .and_then(|v| v.parse().ok()),
        )
    }

    /// The value of an info key.
    pub fn info(&self, key: &str) -> Option<&str> {
        self.info
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// One Demotions record (record kind 17): functions the runtime stopped tracing at `at_ns`,
/// their callers resolved like the intervals' functions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceDemotions {
    /// The record's fixed fields (`at_ns`: from when the functions were untraced).
    pub head: culprit_format::DemotionsHead,
    /// The demoted functions (a caller `None`: calls with no traced frame below).
    pub entries: Vec<culprit_format::Demotion<FuncId>>,
}

/// One Layers record (record kind 14): a stretch of layer-boundary I/O events as a writer
/// collected them, with the layers its events name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerStretch {
    /// Wall-clock span the events were collected over.
    pub span: (u64, u64),
    /// Events the writer lost in the stretch.
    pub dropped: u32,
    /// (id, name, level) of the layers the events name.
    pub layers: Vec<(u16, Arc<str>, i32)>,
    /// The events (not sorted across threads).
    pub events: Vec<culprit_format::LayerEvent>,
}

impl LayerStretch {
    /// Decodes a Layers record.
    pub fn of(rec: &culprit_format::LayersRec<'_>) -> LayerStretch {
        LayerStretch {
            span: (rec.span_start_ns, rec.span_end_ns),
            dropped: rec.dropped,
            layers: rec
                .layers()
                .map(|d| (d.id, Arc::from(d.name.as_ref()), d.level))
                .collect(),
            events: rec.events().collect(),
        }
    }
}

/// One open call of a thread in a stack snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenFrame {
    /// The function.
    pub func: FuncId,
    /// When it was entered, wall-clock ns.
    pub entry_ns: u64,
}

/// A thread's open calls in a stack snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadCalls {
    /// Kernel thread id.
    pub tid: u32,
    /// 1 for the process's first traced thread, 2 for the next…
    pub serial: u32,
    /// Open calls in all (`frames` holds the innermost ones).
    pub depth: u32,
    /// `culprit_format::stacks::thread_flags`.
    pub flags: u32,
    /// With `thread_flags::PROGRESS`: ms since the thread last made progress (a traced call
    /// returned, or it ran on a CPU).
    pub still_ms: u32,
    /// The innermost open calls, outermost first.
    pub frames: Vec<OpenFrame>,
}

/// Where each thread of a process was at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackSnapshot {
    /// When the snapshot was taken, wall-clock ns.
    pub taken_ns: u64,
    /// Threads left out for lack of room.
    pub omitted: u32,
    /// The threads, by serial number.
    pub threads: Vec<ThreadCalls>,
}

/// One (program, function) sample count in a sampler interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleCount {
    /// Program the samples ran in.
    pub program: ProgramId,
    /// Function (image + symbol).
    pub func: FuncId,
    /// Samples.
    pub count: u64,
}

/// One sampled call chain's count in a sampler interval (`culprit sample --call-graph`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleStack {
    /// Program the samples ran in.
    pub program: ProgramId,
    /// Frames (image + symbol), outermost first, the sampled function last; kernel frames
    /// follow the user frames they interrupted.
    pub frames: Vec<FuncId>,
    /// Samples with this chain.
    pub count: u64,
}

/// One interval of a sampler file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleInterval {
    /// Start, wall-clock ns since the epoch.
    pub start_ns: u64,
    /// Length, ns.
    pub dur_ns: u64,
    /// `interval_flags` bits.
    pub flags: u32,
    /// Event sampled.
    pub event: Arc<str>,
    /// Period, or frequency in Hz when `freq`.
    pub period: u64,
    /// True when `period` is a frequency.
    pub freq: bool,
    /// Samples taken.
    pub total: u64,
    /// Samples the kernel dropped: the machine's (every node of a sampler run carries the
    /// same count), in files of every version.
    pub lost: u64,
    /// What the kernel dropped in the interval by kind, and whose it was (the sampler's Lost
    /// record, format version 7): `None` when nothing was lost, or the file is older.
    pub losses: Option<culprit_format::LostRec>,
    /// Counts per (program, function).
    pub entries: Vec<SampleCount>,
    /// The samples' call chains, when sampled with `--call-graph` (record kind 12; `None`
    /// otherwise).
    pub stacks: Option<Vec<SampleStack>>,
}

impl SampleInterval {
    /// True when the sampler could not observe this interval.
    pub fn missed(&self) -> bool {
        interval_flags::is_missed(self.flags)
    }
}

/// One interval of kernel event counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventInterval {
    /// Start, wall-clock ns since the epoch.
    pub start_ns: u64,
    /// Length, ns.
    pub dur_ns: u64,
    /// `interval_flags` bits.
    pub flags: u32,
    /// Counts per event.
    pub counts: Vec<EventCount>,
}

/// One kernel event's count in an interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventCount {
    /// The event.
    pub event: EventId,
    /// Occurrences in the interval.
    pub count: u64,
}

impl EventInterval {
    /// True when the sampler could not observe this interval.
    pub fn missed(&self) -> bool {
        interval_flags::is_missed(self.flags)
    }
}

/// One sampler run's file for a node.
#[derive(Clone, Debug)]
pub struct SampleFile {
    /// The file.
    pub path: PathBuf,
    /// Format version the writer used (its header's): before 7, `lost` counted every record
    /// the kernel dropped, of any kind, and there were no Lost records.
    pub version: u16,
    /// Info pairs as recorded.
    pub info: Vec<(String, String)>,
    /// When the file was created (wall-clock ns).
    pub created_ns: u64,
    /// Wall-clock ns of the end marker, if any.
    pub end_ns: Option<u64>,
    /// State of the file.
    pub status: FileStatus,
    /// Sample intervals in file order.
    pub intervals: Vec<SampleInterval>,
    /// Kernel event intervals in file order.
    pub events: Vec<EventInterval>,
    /// OS metric intervals in file order (their interval is independent of the samples').
    pub os: Vec<OsInterval>,
    /// Layer-boundary I/O events (system calls, block layer), in file order.
    pub layers: Vec<LayerStretch>,
    /// Later pieces of a rotated sampler run joined into this one, oldest first (as
    /// [`TraceFile::pieces`]).
    pub pieces: Vec<PathBuf>,
    pub(super) rotated_end: Option<u64>,
    pub(super) consumed: u64,
    pub(super) strings: HashMap<u32, Arc<str>>,
}

impl SampleFile {
    /// The file being read now: the last piece of a rotated run, else [`SampleFile::path`].
    pub fn current_path(&self) -> &std::path::Path {
        self.pieces.last().unwrap_or(&self.path)
    }

    /// How far the file has been read (as [`TraceFile::read_position`]).
    pub fn read_position(&self) -> (usize, u64) {
        (self.pieces.len(), self.consumed)
    }

    /// True when the sampler writing the file runs on this machine (its pid, boot and start
    /// time recorded) and is not a zombie.
    pub fn writer_running(&self) -> bool {
        info_writer_alive(|k| self.info(k).map(str::to_string))
    }

    /// The value of an info key.
    pub fn info(&self, key: &str) -> Option<&str> {
        self.info
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Everything recorded for one node.
#[derive(Clone, Debug)]
pub struct NodeData {
    /// Node name (its directory's name).
    pub name: String,
    /// The node's directory.
    pub dir: PathBuf,
    /// Contents of `node.info`, if present and valid.
    pub info: Option<NodeInfo>,
    /// Traced processes, ordered by file creation time.
    pub traces: Vec<TraceFile>,
    /// Sampler runs, ordered by file creation time.
    pub samples: Vec<SampleFile>,
}

pub(super) fn empty_trace() -> TraceFile {
    TraceFile {
        path: PathBuf::new(),
        pid: 0,
        program: 0,
        info: Vec::new(),
        interval_ns: 0,
        created_ns: 0,
        end_ns: None,
        status: FileStatus::Open,
        exec_successor: None,
        intervals: Vec::new(),
        checkpoint: None,
        layers: Vec::new(),
        requests: Vec::new(),
        provisional: false,
        consumed: DATA_OFFSET,
        objects: Vec::new(),
        addr_cache: HashMap::new(),
        stacks: None,
        stacks_damage: None,
        wakeups: Vec::new(),
        demotions: Vec::new(),
        pieces: Vec::new(),
        rotated_end: None,
    }
}

pub(super) fn empty_samples() -> SampleFile {
    SampleFile {
        path: PathBuf::new(),
        version: culprit_format::FORMAT_VERSION,
        info: Vec::new(),
        created_ns: 0,
        end_ns: None,
        status: FileStatus::Open,
        intervals: Vec::new(),
        events: Vec::new(),
        os: Vec::new(),
        layers: Vec::new(),
        pieces: Vec::new(),
        rotated_end: None,
        consumed: DATA_OFFSET,
        strings: HashMap::new(),
    }
}

/// Two addresses can resolve to one name (aliases, identical static functions in two files of a
/// program): merge their counters.
pub(super) fn merge_trace_entries(entries: &mut Vec<TraceEntry>) {
    if entries.len() < 2 {
        return;
    }
    entries.sort_by_key(|e| e.func);
    let mut out: Vec<TraceEntry> = Vec::with_capacity(entries.len());
    for e in entries.drain(..) {
        match out.last_mut() {
            Some(last) if last.func == e.func => {
                last.calls += e.calls;
                last.excl_ns += e.excl_ns;
                last.incl_ns += e.incl_ns;
                last.unwound += e.unwound;
            }
            _ => out.push(e),
        }
    }
    *entries = out;
}

/// Merges edges with the same (caller, callee) names.
pub(super) fn merge_edges(edges: &mut Vec<TraceEdge>) {
    edges.sort_by_key(|e| (e.callee, e.caller));
    let mut out: Vec<TraceEdge> = Vec::with_capacity(edges.len());
    for e in edges.drain(..) {
        match out.last_mut() {
            Some(last) if (last.callee, last.caller) == (e.callee, e.caller) => {
                last.calls += e.calls;
                last.excl_ns += e.excl_ns;
                last.incl_ns += e.incl_ns;
            }
            _ => out.push(e),
        }
    }
    *edges = out;
}

/// Merges histograms of the same function name.
pub(super) fn merge_hists(hists: &mut Vec<TraceHist>) {
    hists.sort_by_key(|h| h.func);
    let mut out: Vec<TraceHist> = Vec::with_capacity(hists.len());
    for h in hists.drain(..) {
        match out.last_mut() {
            Some(last) if last.func == h.func => {
                for (a, b) in last.counts.iter_mut().zip(&h.counts) {
                    *a += b;
                }
            }
            _ => out.push(h),
        }
    }
    *hists = out;
}
