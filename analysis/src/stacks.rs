//! Where each thread is: the tracer's stack snapshots, named, and seed 002's last-function
//! rule — a thread inside one call far longer than any peer ever stayed in that function is
//! *stuck* there, and a node whose data stopped is reported with the call it was in.
//!
//! Seed 002 (Mirgorodskiy et al., "Finding Cause of Anomalies", 1: last trace entry)
//! pinpoints the last function a failed host executed. Here the runtime's snapshot gives more
//! than the last entry: every thread's open calls with their entry times, so a call that has
//! not returned is seen while the process still runs, with how long it has been running.
//!
//! **The stuck rule.** A thread's open call of `f` that has been running for `d` is stuck
//! when `d` ≥ [`STUCK_MIN_NS`] and `d` ≥ [`STUCK_FACTOR`] × the longest time any peer node
//! spent in one call of `f`. A peer's longest call is bounded from above, never guessed from
//! below, so a slow-but-normal function is not flagged: it is the largest of (a) the largest
//! inclusive time of `f` in one of the peer's intervals (the calls that returned in that
//! interval took at most their sum), tightened by the duration histograms when the peer
//! recorded them (`CULPRIT_HIST=1`: the upper edge of the highest non-empty bucket), and (b)
//! how long the peer's own open calls of `f` had been running at its last snapshot (a
//! dispatcher loop that never returns is open on every node). Of a stuck thread's open calls
//! the innermost that meets the rule is reported: the most specific place.
//!
//! **Stuck means no progress.** A call that has been open that long is *stuck* only when the
//! thread made no progress in it for that time: no traced call of the thread returned (every
//! call that returns while `f` stays open is one of `f`'s callees) and the thread did not run on
//! a CPU. The runtime watches both for each thread at every snapshot (`still_ms`, the time since
//! the thread last made progress; format `thread_flags::PROGRESS`). A thread whose callees keep
//! returning, or that keeps running, inside a long call is *busy* in it ([`Stuck::busy`]): a
//! finding of its own, not a verdict — a server's child writing its log to a slow disk is busy
//! in its writer for as long as the disk makes it. The time a stuck call is reported stuck for
//! is the shorter of the call's and the thread's time without progress. Files of runtimes that
//! did not watch progress are judged by the call's time alone, as before.
//!
//! **A forked child is a process.** A process forked from another traced process of the node
//! (its file says `forked_from`) is named "child process PID", not as a thread of its parent
//! ([`OpenCall::who`]).
//!
//! **The snapshot is a view, the records are the evidence.** A snapshot says where threads
//! were; only the file's own intervals say that time passed. So a call is stuck only when
//! (a) its file is intact — not damaged anywhere, its stacks region included (the loader
//! drops a snapshot that is torn, cut short, beyond the intact records or inconsistent with
//! them, and counts it in the damage finding); (b) its function is named by the process's
//! own load map (an address in no recorded object cannot be compared with the peers'); and
//! (c) the process's intervals, observed and not missed, cover the call's whole time but for
//! an interval at either end ([`recorded_through`]): the process was seen running, interval
//! after interval, while the call did not return. Damage that cuts the records short, or a
//! snapshot left from before the damage, therefore never makes a node stuck.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::data::{
    process_state, Dataset, FileStatus, FuncId, NodeData, StackSnapshot, TraceFile, UNMAPPED_IMAGE,
};
use culprit_format::stacks::thread_flags;
use culprit_format::{hist_bucket_low_ns, HIST_BUCKETS};

/// Shortest call reported as stuck.
pub const STUCK_MIN_NS: u64 = 10_000_000_000;
/// How many times longer than the peers' longest call of the function a stuck call is.
pub const STUCK_FACTOR: f64 = 3.0;

/// What is known of the process that wrote a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProcessState {
    /// Runs on this host.
    Running,
    /// Runs on this host, stopped by a signal (SIGSTOP, `T`) or a tracer (`t`).
    Stopped,
    /// Exited cleanly: the snapshot is its last.
    Exited,
    /// Gone without an end marker (crashed, killed): the snapshot is its last.
    Died,
    /// Not on this host (or not known): its file is still open.
    Unknown,
}

impl ProcessState {
    /// Of trace file `t`.
    pub fn of(t: &TraceFile) -> Self {
        match t.status {
            FileStatus::Ended => return ProcessState::Exited,
            FileStatus::Damaged(_) => return ProcessState::Unknown,
            FileStatus::Open => {}
        }
        if t.writer_alive() {
            match process_state(t.pid) {
                Some('T' | 't') => ProcessState::Stopped,
                Some('Z' | 'X') => ProcessState::Died,
                Some(_) => ProcessState::Running,
                None => ProcessState::Died,
            }
        } else if same_host(t) {
            ProcessState::Died
        } else {
            ProcessState::Unknown
        }
    }

    /// Words for people.
    pub fn word(self) -> &'static str {
        match self {
            ProcessState::Running => "running",
            ProcessState::Stopped => "stopped (SIGSTOP or a tracer)",
            ProcessState::Exited => "exited",
            ProcessState::Died => "gone without an end marker",
            ProcessState::Unknown => "on another host (state not known here)",
        }
    }
}

/// True when `t` was written on this host and boot (so a missing process is really gone).
fn same_host(t: &TraceFile) -> bool {
    let here = culprit_format::procfs::boot_id();
    match t.info(culprit_format::info_keys::BOOT_ID) {
        Some(b) => !here.is_empty() && here == b,
        None => false,
    }
}

/// One open call, named.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallNow {
    /// Function.
    pub function: String,
    /// Image (executable or library base name).
    pub image: String,
    /// Entry, wall-clock ns.
    pub entry_ns: u64,
    /// How long it had been running at the snapshot, ns.
    pub running_ns: u64,
}

/// One thread's open calls at a snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadNow {
    /// 1 for the process's first traced thread, 2 for the next…
    pub thread: u32,
    /// Kernel thread id.
    pub tid: u32,
    /// Open calls in all.
    pub depth: u32,
    /// The innermost open calls (up to 16), outermost first.
    pub calls: Vec<CallNow>,
    /// Seconds since the thread last made progress (a traced call returned, or it ran on a
    /// CPU), when its runtime watched (see the module docs).
    #[serde(default)]
    pub still_s: Option<f64>,
    /// The stack changed while copied (a busy thread: its innermost call may be off by one).
    pub unstable: bool,
    /// `culprit_pause()` in effect.
    pub paused: bool,
    /// Deeper than traced: the innermost calls are missing.
    pub overflow: bool,
}

impl ThreadNow {
    /// The innermost open call.
    pub fn innermost(&self) -> Option<&CallNow> {
        self.calls.last()
    }
}

/// One process's last snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProcessNow {
    /// Node.
    pub node: String,
    /// Process id.
    pub pid: u32,
    /// Program.
    pub program: String,
    /// When the snapshot was taken, wall-clock ns.
    pub taken_ns: u64,
    /// The process now.
    pub state: ProcessState,
    /// Threads left out of the snapshot for lack of room.
    pub omitted: u32,
    /// Threads, by serial number.
    pub threads: Vec<ThreadNow>,
}

fn named(ds: &Dataset, f: FuncId) -> (String, String) {
    let k = ds.names.funcs.get(f);
    (k.function.to_string(), k.image.to_string())
}

fn process_now(ds: &Dataset, node: &NodeData, t: &TraceFile, s: &StackSnapshot) -> ProcessNow {
    let threads = s
        .threads
        .iter()
        .map(|th| ThreadNow {
            thread: th.serial,
            tid: th.tid,
            depth: th.depth,
            calls: th
                .frames
                .iter()
                .map(|fr| {
                    let (function, image) = named(ds, fr.func);
                    CallNow {
                        function,
                        image,
                        entry_ns: fr.entry_ns,
                        running_ns: s.taken_ns.saturating_sub(fr.entry_ns),
                    }
                })
                .collect(),
            still_s: still_ns(th).map(|ns| ns as f64 / 1e9),
            unstable: th.flags & thread_flags::UNSTABLE != 0,
            paused: th.flags & thread_flags::PAUSED != 0,
            overflow: th.flags & thread_flags::OVERFLOW != 0,
        })
        .collect();
    ProcessNow {
        node: node.name.clone(),
        pid: t.pid,
        program: ds.names.programs.get(t.program).to_string(),
        taken_ns: s.taken_ns,
        state: ProcessState::of(t),
        omitted: s.omitted,
        threads,
    }
}

/// Every process's last stack snapshot, by node, then process start. Processes whose files
/// have no snapshot (older runtimes, a process that ended before its first interval) are
/// left out.
pub fn snapshots(ds: &Dataset) -> Vec<ProcessNow> {
    let mut out = Vec::new();
    for node in &ds.nodes {
        for t in &node.traces {
            if let Some(s) = &t.stacks {
                out.push(process_now(ds, node, t, s));
            }
        }
    }
    out
}

/// How long thread `th` had made no progress at its snapshot, ns, when its runtime watched.
fn still_ns(th: &crate::data::ThreadCalls) -> Option<u64> {
    (th.flags & thread_flags::PROGRESS != 0).then(|| u64::from(th.still_ms) * 1_000_000)
}

/// True when trace file `t` is a process forked from another traced process of its node.
pub fn forked(t: &TraceFile) -> bool {
    t.info(culprit_format::info_keys::FORKED_FROM).is_some()
}

/// A call that has not returned, as a finding reports it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpenCall {
    /// Process id.
    pub pid: u32,
    /// Program.
    pub program: String,
    /// Thread serial number (1 = the process's first traced thread).
    pub thread: u32,
    /// Kernel thread id.
    pub tid: u32,
    /// Function.
    pub function: String,
    /// Entered at.
    pub since: crate::time::Timestamp,
    /// How long it had been running at the snapshot, seconds.
    pub running_s: f64,
    /// The process was forked from another traced process of its node: it is named as a
    /// process, not as a thread (added within version 1).
    #[serde(default)]
    pub forked: bool,
}

impl OpenCall {
    /// "thread 3 in dbpf_pwrite for 41 s", "child process 27964 in rewriteLog for 26 s".
    pub fn describe(&self) -> String {
        format!(
            "{} in {} for {}",
            self.who(),
            self.function,
            crate::time::duration((self.running_s * 1e9) as u64)
        )
    }

    /// "thread 3", "child process 27964", "thread 2 of child process 27964".
    pub fn who(&self) -> String {
        match (self.forked, self.thread) {
            (false, t) => format!("thread {t}"),
            (true, 1) => format!("child process {}", self.pid),
            (true, t) => format!("thread {t} of child process {}", self.pid),
        }
    }
}

/// Upper bound of one call's length for each function, per node (see the module docs).
fn longest_calls(node: &NodeData) -> HashMap<FuncId, u64> {
    let mut out: HashMap<FuncId, u64> = HashMap::new();
    let mut see = |f: FuncId, ns: u64| {
        let e = out.entry(f).or_insert(0);
        *e = (*e).max(ns);
    };
    for t in &node.traces {
        for iv in &t.intervals {
            let hist: HashMap<FuncId, u64> = iv
                .hists
                .iter()
                .flatten()
                .filter_map(|h| {
                    let top = (0..HIST_BUCKETS).rev().find(|&k| h.counts[k] > 0)?;
                    let upper = if top + 1 < HIST_BUCKETS {
                        hist_bucket_low_ns(top + 1)
                    } else {
                        u64::MAX
                    };
                    Some((h.func, upper))
                })
                .collect();
            for e in &iv.entries {
                if e.calls == 0 {
                    continue;
                }
                let bound = hist
                    .get(&e.func)
                    .map_or(e.incl_ns, |&h| h.min(e.incl_ns.max(1)));
                see(e.func, bound);
            }
        }
        if let Some(s) = &t.stacks {
            for th in &s.threads {
                for fr in &th.frames {
                    see(fr.func, s.taken_ns.saturating_sub(fr.entry_ns));
                }
            }
        }
    }
    out
}

/// True when the intervals of `t` — observed, not missed — cover `[from_ns, to_ns)` but for
/// at most one interval at either end: the process was seen running all that time (module
/// docs, c).
pub fn recorded_through(t: &TraceFile, from_ns: u64, to_ns: u64) -> bool {
    let interval = t.interval_ns.max(1);
    let covered: u64 = t
        .intervals
        .iter()
        .filter(|iv| !iv.missed())
        .map(|iv| {
            let (a, b) = (
                iv.start_ns.max(from_ns),
                (iv.start_ns + iv.dur_ns).min(to_ns),
            );
            b.saturating_sub(a)
        })
        .sum();
    covered.saturating_add(2 * interval) >= to_ns.saturating_sub(from_ns)
}

/// A stuck call: the node, and the call.
#[derive(Clone, Debug, PartialEq)]
pub struct Stuck {
    /// Node.
    pub node: String,
    /// The call.
    pub call: OpenCall,
    /// The peers' longest call of the function, seconds (an upper bound).
    pub peers_longest_s: f64,
    /// Seconds the thread had made no progress (a traced call returned, or it ran), when its
    /// runtime watched.
    pub still_s: Option<f64>,
    /// The thread made progress inside the call (module docs): busy in it, not stuck.
    pub busy: Option<Busy>,
}

/// The progress a thread made inside a long call: busy, not stuck.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Busy {
    /// Traced calls of the thread returned since the previous snapshot: its callees.
    pub returned: bool,
    /// The thread ran on a CPU since the previous snapshot.
    pub ran: bool,
}

impl Busy {
    /// "its calls keep returning", "it keeps running on a CPU".
    pub fn words(self) -> &'static str {
        match (self.returned, self.ran) {
            (true, true) => "its calls keep returning and it keeps running",
            (true, false) => "its calls keep returning",
            (false, true) => "it keeps running on a CPU",
            (false, false) => "it made progress in the call lately",
        }
    }
}

/// Stuck calls of every node (one per node: the longest stuck, or when none is stuck, the
/// longest busy one), by the rules in the module docs. Needs at least two nodes.
pub fn stuck(ds: &Dataset) -> Vec<Stuck> {
    if ds.nodes.len() < 2 {
        return Vec::new();
    }
    let longest: Vec<HashMap<FuncId, u64>> = ds.nodes.iter().map(longest_calls).collect();
    let mut out = Vec::new();
    for (n, node) in ds.nodes.iter().enumerate() {
        let mut best: Option<Stuck> = None;
        for t in &node.traces {
            // Damage is never a verdict (module docs, a).
            if matches!(t.status, FileStatus::Damaged(_)) || t.stacks_damage.is_some() {
                continue;
            }
            let Some(s) = &t.stacks else { continue };
            for th in &s.threads {
                let still = still_ns(th);
                // Innermost first: the most specific call that meets the rule.
                for fr in th.frames.iter().rev() {
                    let d = s.taken_ns.saturating_sub(fr.entry_ns);
                    if d < STUCK_MIN_NS
                        || &*ds.names.funcs.get(fr.func).image == UNMAPPED_IMAGE
                        || !recorded_through(t, fr.entry_ns, s.taken_ns)
                    {
                        continue;
                    }
                    let peers = longest
                        .iter()
                        .enumerate()
                        .filter(|&(p, _)| p != n)
                        .filter_map(|(_, m)| m.get(&fr.func).copied())
                        .max()
                        .unwrap_or(0);
                    if (d as f64) < STUCK_FACTOR * peers as f64 {
                        continue;
                    }
                    // Stuck for as long as the thread made no progress in the call.
                    let claim = still.map_or(d, |st| st.min(d));
                    let busy = (claim < STUCK_MIN_NS
                        || (claim as f64) < STUCK_FACTOR * peers as f64)
                        .then_some(Busy {
                            returned: th.flags & thread_flags::RETURNED != 0,
                            ran: th.flags & thread_flags::RAN != 0,
                        });
                    // A stuck call before a busy one; then the longer.
                    let rank = |b: &Option<Busy>, secs: f64| (b.is_none(), secs);
                    let better = best.as_ref().is_none_or(|b| {
                        rank(&busy, d as f64 / 1e9) > rank(&b.busy, b.call.running_s)
                    });
                    if better {
                        let (function, _) = named(ds, fr.func);
                        best = Some(Stuck {
                            node: node.name.clone(),
                            call: OpenCall {
                                pid: t.pid,
                                program: ds.names.programs.get(t.program).to_string(),
                                thread: th.serial,
                                tid: th.tid,
                                function,
                                since: crate::time::Timestamp::from_ns(fr.entry_ns),
                                running_s: d as f64 / 1e9,
                                forked: forked(t),
                            },
                            peers_longest_s: peers as f64 / 1e9,
                            still_s: still.map(|st| st as f64 / 1e9),
                            busy,
                        });
                    }
                    break;
                }
            }
        }
        out.extend(best);
    }
    out
}

/// The call a node was in when its data stopped: of its processes' last snapshots, the
/// newest one's longest-running innermost call (seed 002's last function). Threads inside
/// a call below their outermost come first: a thread whose only open call is its start
/// function (`main` waiting in `sleep`, a worker's loop) says least about where work stopped.
pub fn last_call(ds: &Dataset, node: &str) -> Option<OpenCall> {
    let n = ds.nodes.iter().find(|n| n.name == node)?;
    let (t, s) = n
        .traces
        .iter()
        .filter_map(|t| Some((t, t.stacks.as_ref()?)))
        .max_by_key(|(_, s)| s.taken_ns)?;
    let (th, fr) = s
        .threads
        .iter()
        .filter_map(|th| Some((th, th.frames.last()?)))
        .min_by_key(|(th, fr)| (th.depth < 2, fr.entry_ns))?;
    let (function, _) = named(ds, fr.func);
    Some(OpenCall {
        pid: t.pid,
        program: ds.names.programs.get(t.program).to_string(),
        thread: th.serial,
        tid: th.tid,
        function,
        since: crate::time::Timestamp::from_ns(fr.entry_ns),
        running_s: s.taken_ns.saturating_sub(fr.entry_ns) as f64 / 1e9,
        forked: forked(t),
    })
}
