//! The flusher thread: once an interval has ended (on wall-clock boundaries), it writes that
//! interval's counts, which the hooks placed in the ring of intervals (`intervals`), as one
//! `Interval` record of the process's file.
//!
//! # Intervals
//!
//! Intervals are aligned to multiples of `CULPRIT_INTERVAL_MS` since the Unix epoch
//! (`CLOCK_REALTIME`), and every interval gets a record, even an empty one:
//!
//! * the first interval (the runtime started inside it) and the last (the process exited inside
//!   it) are flagged `PARTIAL`; so are both parts of an interval split by `culprit_flush()` or
//!   `culprit_set_node()` — records with the same start add up;
//! * the flusher wakes at each boundary with an absolute `CLOCK_REALTIME` timeout and writes
//!   every interval that has ended, oldest first (`Flusher::finalize`): the threads placed
//!   their calls in each interval themselves as they crossed its end, and the flusher moves
//!   those of threads that did not cross. However late it wakes (a CPU quota, a loaded host,
//!   the process stopped with SIGSTOP), each interval is written late, exactly; its `Wakeups`
//!   record says how late. Only an interval whose entry the ring could not keep (the flusher
//!   was more than `intervals::RING_LEN` intervals behind) is written `MISSED` (no entries,
//!   its calls counted as dropped). A gap is never read as zeros.
//!
//! # Files
//!
//! The file is `$CULPRIT_DIR/<node>/trace-<pid>-<start_ns>.cul`, written with `pwrite`
//! ([`TraceOut`]). It starts with an `Info` record and one `Object` record per loaded object;
//! objects loaded later (`dlopen`) get an `Object` record before the first interval that can
//! hold their addresses, and unloaded ones an `UNLOADED` record after it. A clean exit (and
//! `_exit`) writes the last partial interval, an `End` record, and marks the file ended.
//!
//! With `CULPRIT_ROTATE` (a period, on wall-clock multiples) or `CULPRIT_ROTATE_SIZE`, the
//! flusher moves to a new piece (`trace-<pid>-<start_ns>.r<n>.cul`) at an interval boundary
//! once one is due, never in the hooks: see `Flusher::maybe_rotate` and
//! `culprit_format::rotation`. Deleting old pieces is `culprit prune`'s job, never the
//! runtime's.
//!
//! # Checkpoints: what a crash can lose
//!
//! Every [`CHECKPOINT_NS`] (100 ms) the flusher takes the threads' counts and writes the
//! interval in progress as the file's checkpoint (see [`crate::output`]); readers add it when
//! the process died (`abort`, a crash, `kill -9`). A crash thus loses the calls of the last
//! 100 ms at most (plus the flusher's scheduling delay on a loaded machine). Nothing is
//! written when nothing was counted since the last checkpoint.
//!
//! # Where each thread is now
//!
//! At every interval boundary, on `culprit_flush()` and as the process exits, the flusher
//! copies every live thread's innermost open calls ([`STACK_FRAMES`], with their entry times
//! converted to wall-clock ns) into the file's stacks region ([`Flusher::write_stacks`]): a
//! thread stuck in one call, or the last calls of a process that stopped, are visible within
//! one interval, and the hooks do nothing more for it (the copy reads the shadow stacks they
//! keep anyway).
//!
//! # Late wake-ups
//!
//! Once in every [`CHECKPOINT_NS`] slot, at a random point of it, the flusher wakes for a
//! probe and checks it for lateness; probes later than [`LATE_SLACK_NS`] are counted with
//! their lateness in each interval's `Wakeups` record. A process stopped by SIGSTOP for tens
//! of milliseconds misses no interval, but the probes that fall into its stops come late by
//! the rest of them; a long stop shows as one probe late by nearly all of it (and missed
//! intervals). The probe's time is random, not the checkpoint's grid: stops that recur with
//! the grid's period (a controller stopping a server every 200 ms) would otherwise fall
//! between wake-ups every time, or on every one; at a random point, the share of late probes
//! is the share of time stopped, whatever the stops' rhythm. A probe late because the CPU was
//! busy is not stopped: the time the flusher waited on a run queue since it went to sleep
//! (`/proc/thread-self/schedstat`, the kernel's run delay) is taken off its lateness, so
//! `stress-ng --cpu 2` beside a healthy server makes no late probes.
//!
//! # Trouble
//!
//! After start-up the runtime prints nothing (the program's descriptor 2 may be one of its
//! own files by then). Trouble goes into the data, as `trouble` keys of an `Info` record that
//! `culprit report` shows: a write that failed (full disk) is retried with the records kept
//! (up to [`MAX_QUEUE`] bytes); a file that was removed, replaced or cut short is continued in
//! a new file (Info `continues`). A data directory that is no longer safe (see
//! `culprit-datadir`) stops the writing, silently.

use std::collections::HashMap;

use culprit_format::procfs::Proc;
use culprit_format::stacks::{
    encode_slot, thread_flags, StackFrame, StacksSnapshot, ThreadStack, STACK_FRAMES,
};
use culprit_format::{
    demotion_reason, end_reason, info_keys, interval_flags, names, object_flags, procfs,
    records_at, rotation, CostRec, Demotion, DemotionsHead, EdgeEntry, Histogram, IntervalEntry,
    IntervalHead, IntervalRef, LayersHead, ObjectDesc, Record, RecordBuf, UnwoundEntry, WakeupsRec,
    HIST_BUCKETS,
};

use crate::block::{self, mode, state, Delta, EdgeDelta, OpenCall, Taken, Unaccounted};
use crate::bodies::Bodies;
use crate::budget::{self, FuncCost};
use crate::calibrate::{self, CallCost};
use crate::clock::{self, Calibration};
use crate::config::Config;
use crate::control::{
    self, req, CURRENT_FILE, CURRENT_NODE, DONE, FLUSHER_TID, NODE_REQUEST, PENDING, REQ,
};
use crate::demote::{self, Decided};
use crate::intervals::{self, RING_LEN};
use crate::objects::{Obj, Tracker};
use crate::output::{TraceOut, WriteError};
use crate::{decide, io, pool, procinfo, sys};

use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};

/// Most `MISSED` records written one per interval for one gap; a longer gap gets one more
/// record covering the rest (its `dur_ns` is longer than an interval).
const MAX_MISSED_RECORDS: u64 = 100_000;
/// How long the flusher waits for a thread's crossing in flight before it writes an interval
/// without it (its counts then go into a later interval, counted as moved): a crossing takes
/// microseconds, unless its thread is preempted in it.
pub const HOOKS_WAIT_NS: u64 = 1_000_000_000;
/// Period of checkpoints: the most a crash can lose.
pub const CHECKPOINT_NS: u64 = 100_000_000;
/// Most bytes of records kept while writes fail; beyond, they are dropped (and that is noted).
pub const MAX_QUEUE: usize = 8 << 20;
/// Info key of trouble notes (`<wall-clock ns>: <what happened>`).
pub const TROUBLE_KEY: &str = "trouble";
/// A timed wake-up later than this counts as late (`Wakeups` records). Scheduling delays of a
/// sleeping thread that wakes stay well below it even beside `stress-ng --cpu 2` here.
pub const LATE_SLACK_NS: u64 = 2_000_000;

/// Where this process image's tracing comes from (for the `Info` record).
#[derive(Clone, Debug)]
pub enum Origin {
    /// Started with the process.
    Start,
    /// A forked child; the parent's file name.
    Forked(String),
    /// Replaced an image by `exec`; that image's file name.
    Exec(String),
    /// Continues, under a new node name, the file named here (`culprit_set_node`).
    Renamed(String),
    /// Continues the file named here, which was removed, replaced or cut short.
    Replaced(String),
}

/// What the last stack snapshot saw of a thread's progress (see [`Flusher::progress`]).
#[derive(Clone, Copy, Debug)]
struct Watch {
    /// Its traced calls that had returned, in all.
    returned_calls: u64,
    /// Its CPU time when it last ran ≥ [`RAN_MIN_NS`] since the one before (ns).
    cpu_ns: u64,
    /// When it last made progress (wall-clock ns).
    since_ns: u64,
}

/// CPU time a thread must have used since it was last seen running for a snapshot to say it
/// ran (a thread blocked in a call still wakes now and then for a few µs).
const RAN_MIN_NS: u64 = 1_000_000;

/// The flusher's state; owned by the flusher thread (no lock anywhere).
#[derive(Debug)]
pub struct Flusher {
    cfg: &'static Config,
    node: String,
    cal: Calibration,
    start_ns: u64,
    origin: Origin,
    out: Option<TraceOut>,
    /// Writing stopped for good (the directory is not safe any more, or none can be made).
    failed: bool,
    objects: Tracker,
    /// Start of the interval being accumulated.
    open_start: u64,
    /// Time since which that interval is observed (after its start: partial).
    observed_from: u64,
    /// Caller → callee edges (`CULPRIT_GRAPH`); caller 0: none traced.
    edges: HashMap<(usize, usize), EdgeDelta>,
    /// Calls whose edge found no room.
    edge_drops: u64,
    /// Call-duration histograms (`CULPRIT_HIST`).
    hists: HashMap<usize, [u64; HIST_BUCKETS]>,
    /// Edges or histograms were taken since the last checkpoint.
    dirty: bool,
    /// What the last checkpoint held ([`Tally::signature`]): an unchanged interval is not
    /// written again.
    last_checkpoint: Option<[u64; 3]>,
    /// Per entry of the ring of intervals, when it was labelled with its interval (wall-clock
    /// ns; 0: before the flusher started): an interval whose entry was labelled after it
    /// began may have lost counts (see [`Flusher::finalize`]).
    labelled_at: Vec<u64>,
    /// A wait for the hooks ran out (noted once in the file).
    waits_ran_out: bool,
    /// Tests only ([`crate::config::STALL_VAR`]): when (wall-clock ns) to stop working, and
    /// for how long (ns).
    stall: Option<(u64, u64)>,
    /// Encoded records not yet committed (kept while writes fail).
    queue: Vec<u8>,
    /// Since when, and why, writes fail.
    failing: Option<(u64, String)>,
    idle: Vec<pool::Idle>,
    buf: RecordBuf,
    /// Where the last Layers record's span ended (see `io`).
    io_span: u64,
    /// Timed wake-ups since the last interval written, and their lateness.
    wakeups: WakeupsRec,
    /// Stack snapshots written.
    stack_seq: u64,
    /// Each live thread's progress as the last snapshot saw it, by tid.
    watch: HashMap<u32, Watch>,
    /// Rotation (`CULPRIT_ROTATE`): the number of the piece being written (0: the first).
    piece: u32,
    /// When the piece being written began (wall-clock ns).
    piece_start_ns: u64,
    /// The name of the first piece and of the previous one, once rotated.
    rotated: Option<(String, String)>,
    /// After a rotation that failed, no new try before this interval boundary.
    rotate_retry_ns: u64,
    /// The process's CPU time when the last interval was written (ns).
    cpu_at: u64,
    /// What a call costs the hooks (`crate::calibrate`).
    call: CallCost,
    /// Function bodies, for the call-site patcher (`sys::patch`).
    bodies: Bodies,
    /// Call sites patched, as the file last said.
    patched: u32,
    /// The demotions decided (their time) and the runtime's cost share then (ppm), until
    /// they are written.
    decisions: Vec<(u64, u32)>,
}

impl Flusher {
    /// A flusher for a process (or forked child) whose tracing started at `start_ns`.
    pub fn new(
        cfg: &'static Config,
        node: String,
        cal: Calibration,
        start_ns: u64,
        origin: Origin,
    ) -> Self {
        let i = cfg.interval_ns;
        Flusher {
            cfg,
            node,
            cal,
            start_ns,
            origin,
            out: None,
            failed: false,
            objects: Tracker::default(),
            open_start: start_ns / i * i,
            observed_from: start_ns,
            edges: HashMap::new(),
            edge_drops: 0,
            hists: HashMap::new(),
            dirty: false,
            last_checkpoint: None,
            labelled_at: vec![0; RING_LEN as usize],
            waits_ran_out: false,
            stall: cfg
                .test_stall_ms
                .map(|(after, dur)| (start_ns + after * 1_000_000, dur * 1_000_000)),
            queue: Vec::new(),
            failing: None,
            idle: Vec::new(),
            buf: RecordBuf::new(),
            io_span: start_ns,
            wakeups: WakeupsRec::default(),
            stack_seq: 0,
            watch: HashMap::new(),
            piece: 0,
            piece_start_ns: start_ns,
            rotated: None,
            rotate_retry_ns: 0,
            cpu_at: sys::process_cpu_ns(),
            call: calibrate::cost(),
            bodies: Bodies::default(),
            patched: 0,
            decisions: Vec::new(),
        }
    }

    /// A probe `late_ns` after its time.
    fn woke(&mut self, late_ns: u64) {
        let w = &mut self.wakeups;
        w.wakeups = w.wakeups.saturating_add(1);
        if late_ns > LATE_SLACK_NS {
            w.late = w.late.saturating_add(1);
            w.late_ns = w.late_ns.saturating_add(late_ns);
            w.max_late_ns = w.max_late_ns.max(late_ns);
        }
    }

    /// Writes every live thread's innermost open calls into the file's stacks region (see
    /// the module docs). Nothing is written when there is no file.
    pub fn write_stacks(&mut self) {
        if self.failed || self.out.is_none() {
            return;
        }
        // Ticks to wall-clock ns through one (ticks, wall) pair taken now.
        let (t0, wall0) = (block::now(), sys::realtime_ns());
        let cal = self.cal;
        let wall = |t: u64| {
            if t >= t0 {
                wall0.saturating_add(cal.to_ns(t - t0))
            } else {
                wall0.saturating_sub(cal.to_ns(t0 - t))
            }
        };
        let mut calls = [OpenCall::default(); STACK_FRAMES];
        let mut threads = Vec::new();
        let mut seen = Vec::new();
        for b in pool::blocks() {
            if b.state.load(Acquire) != state::LIVE {
                continue;
            }
            let oc = b.open_calls(&mut calls);
            let (tid, serial) = b.owner();
            let (returned, ran, still_ms) =
                self.progress(tid, b.returned_calls(), wall0, &mut seen);
            let mut flags = thread_flags::PROGRESS;
            for (on, bit) in [
                (oc.paused, thread_flags::PAUSED),
                (oc.overflow, thread_flags::OVERFLOW),
                (oc.unstable, thread_flags::UNSTABLE),
                (returned, thread_flags::RETURNED),
                (ran, thread_flags::RAN),
            ] {
                if on {
                    flags |= bit;
                }
            }
            threads.push(ThreadStack {
                tid,
                serial,
                depth: oc.depth as u32,
                flags,
                still_ms,
                frames: calls[..oc.n]
                    .iter()
                    .map(|c| StackFrame {
                        addr: c.addr as u64,
                        entry_ns: wall(c.t),
                    })
                    .collect(),
            });
        }
        threads.sort_by_key(|t| t.serial);
        self.watch.retain(|tid, _| seen.contains(tid));
        self.stack_seq += 1;
        let slot = encode_slot(&StacksSnapshot {
            seq: self.stack_seq,
            taken_ns: wall0,
            omitted: 0,
            threads,
        });
        let seq = self.stack_seq;
        if let Some(out) = self.out.as_mut() {
            // A failed write leaves the previous snapshot readable; the next interval tries
            // again (a file that is gone is noticed by the next commit).
            let _ = out.stacks(seq, &slot);
        }
    }

    /// Whether thread `tid` made progress since the previous snapshot — a traced call of it
    /// returned (`returned_calls` moved), or it ran ≥ [`RAN_MIN_NS`] on a CPU — and how long
    /// ago it last did, in ms, at `now` (wall-clock ns). A thread seen for the first time
    /// counts as having made progress now.
    fn progress(
        &mut self,
        tid: u32,
        returned_calls: u64,
        now: u64,
        seen: &mut Vec<u32>,
    ) -> (bool, bool, u32) {
        seen.push(tid);
        let cpu = sys::thread_cpu_ns_of(tid);
        let w = self.watch.entry(tid).or_insert(Watch {
            returned_calls,
            cpu_ns: cpu.unwrap_or(0),
            since_ns: now,
        });
        let returned = w.returned_calls != returned_calls;
        let ran = cpu.is_some_and(|c| c.saturating_sub(w.cpu_ns) >= RAN_MIN_NS);
        if returned || ran {
            w.since_ns = now;
        }
        w.returned_calls = returned_calls;
        if ran {
            w.cpu_ns = cpu.unwrap_or(0);
        }
        let still = now.saturating_sub(w.since_ns) / 1_000_000;
        (returned, ran, still.min(u64::from(u32::MAX)) as u32)
    }

    /// Name of the file being written, once it exists.
    pub fn file_name(&self) -> Option<String> {
        self.out.as_ref().map(|o| o.name().to_string())
    }

    /// Creates the file with its `Info` and `Object` records, and refreshes `node.info`.
    pub fn open_file(&mut self) -> Result<(), WriteError> {
        control::progress();
        let pid = std::process::id();
        let start_ns = self.start_ns;
        let piece = self.piece;
        let first = self.rotated.as_ref().map(|(first, _)| first.as_str());
        let (mut out, dir) = TraceOut::create(
            &self.cfg.root,
            &self.node,
            |seq| match first {
                // A later piece keeps the writer's identity in its name (`rotation`); a name
                // taken (never, short of a clash of pid and start) moves on to the next number.
                Some(first) if piece > 0 => rotation::piece_name(first, piece + seq),
                _ => names::trace_file_name(pid, start_ns, seq),
            },
            self.piece_start_ns,
            pid,
        )?;
        let mut buf = RecordBuf::new();
        self.info_record(&mut buf, pid);
        self.objects.reset();
        let ch = self.objects.refresh();
        for o in &ch.added {
            object_record(&mut buf, o, 0);
        }
        out.commit(buf.as_bytes())?;
        CURRENT_FILE.set(out.name().to_string());
        CURRENT_NODE.set(self.node.clone());
        self.out = Some(out);
        if matches!(self.origin, Origin::Forked(_)) && self.piece == 0 {
            // The parent described the node already (a child starts in its node): thousands
            // of children would otherwise each rewrite node.info at once.
            return Ok(());
        }
        let cfg = self.cfg;
        let _ = dir.update_node_info(|info| {
            let mut set = |k: &str, v: String| {
                info.pairs.retain(|(key, _)| key != k);
                info.pairs.push((k.to_string(), v));
            };
            set("host", procfs::host_name());
            set("kernel", procfs::kernel_release());
            set("boot_id", procfs::boot_id());
            set("clocksource", procinfo::clocksource());
            set("trace_clock", clock::source_name().to_string());
            set("trace_interval_ns", cfg.interval_ns.to_string());
        });
        Ok(())
    }

    fn info_record(&self, buf: &mut RecordBuf, pid: u32) {
        let mut pairs: Vec<(&str, String)> = vec![
            (info_keys::NODE, self.node.clone()),
            (info_keys::HOST, procfs::host_name()),
            (info_keys::PID, pid.to_string()),
            (
                info_keys::PPID,
                std::os::unix::process::parent_id().to_string(),
            ),
            (info_keys::PROGRAM, procfs::program(Proc::This)),
            (info_keys::EXE, procfs::exe(Proc::This)),
            (info_keys::CMDLINE, procfs::cmdline(Proc::This)),
            (
                info_keys::PROC_START_NS,
                procfs::start_ns(Proc::This).unwrap_or(0).to_string(),
            ),
            (info_keys::INTERVAL_NS, self.cfg.interval_ns.to_string()),
            (info_keys::CLOCK, clock::source_name().to_string()),
            (
                info_keys::WRITER_VERSION,
                format!("libculprit_rt {}", env!("CARGO_PKG_VERSION")),
            ),
            (info_keys::INCLUDE, self.cfg.include_raw.clone()),
            (info_keys::EXCLUDE, self.cfg.exclude_raw.clone()),
            (info_keys::BUDGET, self.cfg.budget_raw.clone()),
            (
                info_keys::CALL_COST_PS,
                ((self.call.traced_ns * 1000.0) as u64).to_string(),
            ),
            (info_keys::DEMOTE, self.cfg.demote_raw.clone()),
            (info_keys::KERNEL, procfs::kernel_release()),
            (info_keys::BOOT_ID, procfs::boot_id()),
        ];
        if let (Some((_, prev)), true) = (&self.rotated, self.piece > 0) {
            // A later piece: the process facts above are the same; it continues the previous
            // piece (the origin was recorded in the first).
            pairs.push((info_keys::CONTINUES, prev.clone()));
            pairs.push((info_keys::PIECE, self.piece.to_string()));
            buf.info(pairs.iter().map(|(k, v)| (*k, v.as_str())));
            return;
        }
        match &self.origin {
            Origin::Start => {}
            Origin::Forked(f) => pairs.push((info_keys::FORKED_FROM, f.clone())),
            Origin::Exec(f) => pairs.push((info_keys::EXEC_FROM, f.clone())),
            Origin::Renamed(f) => pairs.push(("node_changed_from", f.clone())),
            Origin::Replaced(f) => pairs.push((info_keys::CONTINUES, f.clone())),
        }
        buf.info(pairs.iter().map(|(k, v)| (*k, v.as_str())));
    }

    /// Creates the file if this process has none yet (a forked child creates it at its first
    /// write). False when there is nothing to write to.
    fn ensure_open(&mut self) -> bool {
        if self.failed {
            return false;
        }
        if self.out.is_none() {
            if let Err(e) = self.open_file() {
                self.open_failed(e);
                return false;
            }
        }
        true
    }

    /// No file can be made: a forked child, or a new node, whose directory cannot be written
    /// or is refused. Nothing is printed (see the module docs); the process goes on untraced.
    fn open_failed(&mut self, _e: WriteError) {
        self.failed = true;
        self.queue.clear();
        self.buf.clear();
    }

    /// Notes trouble in the data: an Info record committed with the next records.
    fn note(&mut self, now: u64, what: &str) {
        self.buf
            .info([(TROUBLE_KEY, format!("{now}: {what}").as_str())]);
    }

    /// Commits the encoded records (and any kept from failed writes). A file that is gone is
    /// continued in a new one; a failed write keeps the records for the next try.
    fn commit(&mut self) {
        control::progress();
        self.queue.extend_from_slice(self.buf.as_bytes());
        self.buf.clear();
        if self.failed {
            self.queue.clear();
            return;
        }
        if self.queue.is_empty() || self.out.is_none() {
            return;
        }
        let now = sys::realtime_ns();
        for _attempt in 0..2 {
            let Some(out) = self.out.as_mut() else { return };
            match out.commit(&self.queue) {
                Ok(()) => {
                    self.queue.clear();
                    if let Some((since, why)) = self.failing.take() {
                        // Written with the next records.
                        self.note(
                            now,
                            &format!(
                                "writes failed from {since} ns on ({why}); the records were \
                                 kept and written late"
                            ),
                        );
                    }
                    return;
                }
                Err(WriteError::Gone(why)) => {
                    let old = self.file_name().unwrap_or_default();
                    if !self.replace_file(now, &why, old) {
                        return;
                    }
                }
                Err(WriteError::Refused(_)) => {
                    self.failed = true;
                    self.queue.clear();
                    return;
                }
                Err(WriteError::Failed(why)) => {
                    self.failing.get_or_insert((now, why));
                    if self.queue.len() > MAX_QUEUE {
                        let n = self.queue.len();
                        self.queue.clear();
                        self.note(
                            now,
                            &format!("{n} bytes of records dropped: writes kept failing"),
                        );
                    }
                    return;
                }
            }
        }
    }

    /// The file is gone (removed, replaced, cut short): start a new one that continues it,
    /// carrying over the records not yet written (except `Object` records: the new file
    /// describes every loaded object again). False when no new file can be made.
    fn replace_file(&mut self, now: u64, why: &str, old: String) -> bool {
        self.out = None;
        let kept = carry_over(&std::mem::take(&mut self.queue));
        self.origin = Origin::Replaced(old);
        self.start_ns = now;
        self.new_history(now);
        if let Err(e) = self.open_file() {
            self.open_failed(e);
            return false;
        }
        self.note(now, &format!("{why}; this file continues it"));
        self.queue = kept;
        self.queue.extend_from_slice(self.buf.as_bytes());
        self.buf.clear();
        true
    }

    /// A new file that starts its own history (a new node, a file replaced under us): its
    /// pieces are numbered from 0 again.
    fn new_history(&mut self, now: u64) {
        self.piece = 0;
        self.piece_start_ns = now;
        self.rotated = None;
    }

    /// At the interval boundary `boundary` (every interval before it written): moves to a new
    /// piece when `CULPRIT_ROTATE` / `CULPRIT_ROTATE_SIZE` say so. The new piece is made first,
    /// with the same safe creation as the first file, its Info record (`continues`, `piece`)
    /// and every loaded object; only then does the old one get its End record
    /// (`end_reason::ROTATED`: continued, not ended). If the new piece cannot be made, the old
    /// file goes on and the failure is noted in it (tried again one rotation period later).
    /// Nothing is rotated while writes fail (records are queued).
    fn maybe_rotate(&mut self, boundary: u64) {
        let r = self.cfg.rotate;
        if !r.enabled() || self.failed || !self.queue.is_empty() || boundary < self.rotate_retry_ns
        {
            return;
        }
        let Some(size) = self.out.as_ref().map(TraceOut::size) else {
            return;
        };
        if !r.due(self.piece_start_ns, boundary, size) {
            return;
        }
        let Some(old) = self.out.take() else { return };
        let old_name = old.name().to_string();
        let saved = (self.piece, self.piece_start_ns, self.rotated.clone());
        let first = self
            .rotated
            .as_ref()
            .map_or_else(|| old_name.clone(), |(first, _)| first.clone());
        self.piece += 1;
        self.piece_start_ns = boundary;
        self.rotated = Some((first, old_name.clone()));
        if let Err(e) = self.open_file() {
            (self.piece, self.piece_start_ns, self.rotated) = saved;
            self.out = Some(old);
            CURRENT_FILE.set(old_name);
            let retry = r.every_ns.unwrap_or(0).max(60 * self.cfg.interval_ns);
            self.rotate_retry_ns = boundary.saturating_add(retry);
            self.note(
                sys::realtime_ns(),
                &format!("cannot start a new piece ({e}); this file goes on"),
            );
            return;
        }
        // The new piece's name, read back: `open_file` may have moved to a free number.
        if let Some(name) = self.file_name() {
            self.piece = rotation::split_piece(&name).1.max(self.piece);
        }
        let mut end = RecordBuf::new();
        end.end(boundary, end_reason::ROTATED);
        if let Err(e) = old.finish(end.as_bytes()) {
            // The old piece lacks its end marker: readers see it as a writer that stopped
            // there; the new piece says so.
            self.note(
                sys::realtime_ns(),
                &format!("the previous piece {old_name} could not be marked continued: {e}"),
            );
        }
    }

    /// Writes interval `x` from the ring (see `intervals`): closes its entry, moves the
    /// counts of the threads that have not crossed out of it (idle or blocked) into it, waits
    /// for crossings in flight (up to [`HOOKS_WAIT_NS`]; the hooks never wait for the
    /// flusher), reads the entry and relabels it for the interval a ring later. Also takes
    /// the edges and histograms and frees the blocks of threads that exited ([`Self::reap`]).
    ///
    /// Returns the interval's tally and whether it is missing counts: its entry was labelled
    /// only after the interval began (the flusher was more than the ring behind) and some
    /// thread could not place counts of it or of a later interval. Such an interval is
    /// written `MISSED`, its counts (and those that could not be placed) as `dropped`.
    fn finalize(&mut self, x: u64, now: u64) -> (Tally, bool) {
        let mut t = Tally::default();
        let Some(ring) = intervals::get() else {
            self.reap(&mut t);
            return (t, false);
        };
        ring.close(x);
        let deadline = sys::monotonic_ns() + HOOKS_WAIT_NS;
        let e = ring.entry(x);
        let mut ran_out = false;
        for b in pool::blocks() {
            let st = b.state.load(Acquire);
            if st != state::LIVE && st != state::DEAD {
                continue;
            }
            let mut calls = 0;
            let took = b.flusher_take(x, x + 1, deadline, |_, fid, d| {
                calls += d.calls;
                e.add(fid, d.calls, d.excl, d.incl, d.unwound);
            });
            match took {
                Taken::Moved { late, unaccounted } => {
                    let u = unaccounted;
                    e.add_unaccounted(u.lost, u.overflows, u.dropped);
                    if late {
                        e.add_moved(calls);
                    }
                }
                Taken::GaveUp => ran_out = true,
                Taken::Crossed => {}
            }
        }
        let quiet = ring.wait_writers(x, deadline);
        let slot = (x % RING_LEN) as usize;
        let missing = self.labelled_at[slot] > x.saturating_mul(self.cfg.interval_ns)
            && intervals::overflow_high() > x;
        t.read_ring(ring, x, !quiet);
        self.reap(&mut t);
        control::progress();
        ring.recycle(x, quiet);
        self.labelled_at[slot] = now;
        if (ran_out || !quiet) && !self.waits_ran_out {
            self.waits_ran_out = true;
            self.note(
                now,
                "a thread did not finish moving its counts into the interval being written \
                 within 1 s; its counts went into a later interval (counted as moved)",
            );
        }
        // Counts found in blocks given back (none unless a fork left some): this interval.
        let agg = &mut t.agg;
        t.unaccounted += pool::release_idle(&mut self.idle, |addr, d| {
            *agg.entry(addr).or_default() += d;
        });
        (t, missing)
    }

    /// The open interval `x` so far, taken (`culprit_flush`, `culprit_set_node`, exit): its
    /// entry's counts and those the threads have not handed over yet (they keep counting in
    /// `x`; the rest of it comes in its next record, and records with the same start add up).
    fn take_open(&mut self, x: u64) -> Tally {
        let mut t = Tally::default();
        if let Some(ring) = intervals::get() {
            let deadline = sys::monotonic_ns() + HOOKS_WAIT_NS;
            for b in pool::blocks() {
                let st = b.state.load(Acquire);
                if st != state::LIVE && st != state::DEAD {
                    continue;
                }
                let (agg, mut calls) = (&mut t.agg, 0);
                let took = b.flusher_take(x, x, deadline, |addr, _, d| {
                    calls += d.calls;
                    *agg.entry(addr).or_default() += d;
                });
                if let Taken::Moved { late, unaccounted } = took {
                    t.unaccounted += unaccounted;
                    if late {
                        t.moved += calls;
                    }
                }
            }
            t.read_ring(ring, x, true);
        }
        self.reap(&mut t);
        Self::add_unplaced(&mut t);
        t
    }

    /// What the open interval `x` holds now, read without taking it (checkpoints): its
    /// entry's counts and those the threads have not handed over yet.
    fn peek_open(&self, x: u64) -> Tally {
        let mut t = Tally::default();
        if let Some(ring) = intervals::get() {
            t.read_ring(ring, x, false);
        }
        for b in pool::blocks() {
            let st = b.state.load(Acquire);
            if st == state::LIVE {
                t.threads += 1;
            }
            if (st == state::LIVE || st == state::DEAD) && b.pending_in(x) {
                let agg = &mut t.agg;
                t.unaccounted += b.peek_deltas(|addr, _, d| *agg.entry(addr).or_default() += d);
            }
        }
        t
    }

    /// Takes the edges and histograms of every thread (`CULPRIT_GRAPH`, `CULPRIT_HIST`; they
    /// stay on the flusher's schedule, see `interval_flags::LATE`), counts the live threads,
    /// frees the blocks of threads that exited (what they had not handed over goes into the
    /// ring, in its interval), and adds the calls of threads whose hooks were off.
    fn reap(&mut self, t: &mut Tally) {
        self.take_extras();
        for b in pool::blocks() {
            match b.state.load(Acquire) {
                state::LIVE => t.threads += 1,
                state::DEAD => {
                    if b.flusher_reap() {
                        t.threads += 1;
                    }
                    let _ = b
                        .state
                        .compare_exchange(state::DEAD, state::FREE, AcqRel, Acquire);
                }
                _ => {}
            }
        }
        t.unaccounted.dropped += pool::take_ignored();
    }

    /// Adds to `t` the counts no interval of the ring could take (their interval was beyond
    /// it), as dropped calls: into a `MISSED` interval, or the first written after every
    /// interval they came from.
    fn add_unplaced(t: &mut Tally) {
        let [calls, lost, overflows, dropped] = intervals::take_unplaced();
        t.unaccounted += Unaccounted {
            lost,
            overflows,
            dropped: calls + dropped,
        };
    }

    /// Takes every thread's edges and histograms counted since the last call.
    fn take_extras(&mut self) {
        if !mode::on(mode::GRAPH | mode::HIST) {
            return;
        }
        let (edges, hists) = (&mut self.edges, &mut self.hists);
        let mut moved = false;
        let mut edge = |caller: usize, callee: usize, d: EdgeDelta| {
            *edges.entry((caller, callee)).or_default() += d;
            moved = true;
        };
        let mut hist = |addr: usize, counts: &[u64; HIST_BUCKETS]| {
            let h = hists.entry(addr).or_insert([0; HIST_BUCKETS]);
            for (a, c) in h.iter_mut().zip(counts) {
                *a += c;
            }
        };
        for b in pool::blocks() {
            let st = b.state.load(Acquire);
            if st == state::LIVE || st == state::DEAD {
                self.edge_drops += b.take_extras(&mut edge, &mut hist);
            }
        }
        self.dirty |= moved || !self.hists.is_empty();
    }

    fn clear_extras(&mut self) {
        self.edges.clear();
        self.edge_drops = 0;
        self.hists.clear();
        self.dirty = false;
    }

    /// The interval's records for `start` from tally `t`: its Interval record, then its
    /// Unwound record (when calls were unwound), its Wakeups record (`wakeups`, committed
    /// intervals only) and, in those modes, its Edges and Histograms records (flagged
    /// `LATE` with `late`).
    fn encode_interval(
        &mut self,
        buf_is_self: bool,
        start: u64,
        flags: u32,
        t: &Tally,
        late: bool,
        wakeups: Option<WakeupsRec>,
    ) -> RecordBuf {
        let cal = self.cal;
        let mut entries: Vec<IntervalEntry> = t
            .agg
            .iter()
            .map(|(&addr, d)| IntervalEntry {
                addr: addr as u64,
                calls: d.calls,
                excl_ns: cal.to_ns(d.excl),
                incl_ns: cal.to_ns(d.incl),
            })
            .collect();
        entries.sort_unstable_by_key(|e| e.addr);
        let sat = |v: u64| v.min(u32::MAX as u64) as u32;
        let head = IntervalHead {
            start_ns: start,
            dur_ns: self.cfg.interval_ns,
            flags,
            threads: sat(t.threads),
            lost_frames: sat(t.unaccounted.lost),
            overflows: sat(t.unaccounted.overflows),
            dropped: sat(t.unaccounted.dropped),
        };
        let mut out = if buf_is_self {
            std::mem::take(&mut self.buf)
        } else {
            RecordBuf::new()
        };
        out.interval(&head, entries);
        let r = IntervalRef {
            start_ns: start,
            dur_ns: self.cfg.interval_ns,
            flags,
        };
        let mut unwound: Vec<UnwoundEntry> = t
            .agg
            .iter()
            .filter(|(_, d)| d.unwound > 0)
            .map(|(&addr, d)| UnwoundEntry {
                addr: addr as u64,
                calls: d.unwound,
            })
            .collect();
        if !unwound.is_empty() {
            unwound.sort_unstable_by_key(|e| e.addr);
            out.unwound(&r, unwound);
        }
        // Committed intervals only: a checkpoint holds nothing but what version-3 readers
        // accept in one.
        if let Some(w) = wakeups.filter(|w| w.wakeups > 0 || w.moved > 0 || w.written_late_ns > 0) {
            out.wakeups(&r, &w);
        }
        let extras = IntervalRef {
            flags: if late {
                flags | interval_flags::LATE
            } else {
                flags
            },
            ..r
        };
        if mode::on(mode::GRAPH) {
            let mut edges: Vec<EdgeEntry> = self
                .edges
                .iter()
                .map(|(&(caller, callee), d)| EdgeEntry {
                    caller: caller as u64,
                    callee: callee as u64,
                    calls: d.calls,
                    excl_ns: cal.to_ns(d.excl),
                    incl_ns: cal.to_ns(d.incl),
                })
                .collect();
            edges.sort_unstable_by_key(|e| (e.callee, e.caller));
            out.edges(&extras, sat(self.edge_drops), edges);
        }
        if mode::on(mode::HIST) {
            let mut hists: Vec<Histogram> = self
                .hists
                .iter()
                .map(|(&addr, counts)| Histogram {
                    addr: addr as u64,
                    counts: *counts,
                })
                .collect();
            hists.sort_unstable_by_key(|h| h.addr);
            out.histograms(&extras, &hists);
        }
        out
    }

    /// Encodes the interval starting at `start` from tally `t` (with the edges and
    /// histograms taken so far) into the records to commit; `late_ns`: how long after its end
    /// it is written (0: on time).
    fn write_interval(&mut self, start: u64, flags: u32, t: &Tally, late_ns: u64) {
        if !self.ensure_open() {
            self.clear_extras();
            return;
        }
        let changes = self.objects.refresh();
        if !changes.added.is_empty() || !changes.removed.is_empty() {
            decide::rebuild(&self.cfg.filters, self.objects.current());
        }
        for o in &changes.added {
            object_record(&mut self.buf, o, 0);
        }
        self.cal.refine();
        let mut w = std::mem::take(&mut self.wakeups);
        w.moved = t.moved;
        w.written_late_ns = late_ns;
        let late = late_ns >= self.cfg.interval_ns / 2;
        // Demotions first: a reader that has read this interval knows what it was demoted
        // from (`--follow` merges windows only once every node has passed them).
        self.write_demotions();
        self.buf = self.encode_interval(true, start, flags, t, late, Some(w));
        self.cost_and_budget(start, flags, t);
        for o in &changes.removed {
            object_record(&mut self.buf, o, object_flags::UNLOADED);
        }
        self.clear_extras();
    }

    /// The interval's Cost record — the process's CPU time since the last one, the runtime's
    /// estimate of its own share (traced calls and quiet calls × what each cost at start-up)
    /// — then the budget's check over the whole interval ([`Self::budget_check`]).
    fn cost_and_budget(&mut self, start: u64, flags: u32, t: &Tally) {
        let cpu_now = sys::process_cpu_ns();
        let cpu_ns = cpu_now.saturating_sub(self.cpu_at);
        self.cpu_at = cpu_now;
        // Only the flusher takes a block's quiet count; a block keeps it when its thread exits
        // (free, until another thread claims it) and hands it over when given back.
        let mut quiet = pool::take_quiet_released();
        for b in pool::blocks() {
            let st = b.state.load(Acquire);
            if st == state::LIVE || st == state::DEAD || st == state::FREE {
                quiet += b.take_quiet();
            }
        }
        let calls = t.calls();
        let cost_ns = calls as f64 * self.call.traced_ns + quiet as f64 * self.call.quiet_hook_ns();
        let r = IntervalRef {
            start_ns: start,
            dur_ns: self.cfg.interval_ns,
            flags,
        };
        self.buf.cost(
            &r,
            &CostRec {
                cpu_ns,
                cost_ns: cost_ns as u64,
                calls: calls + quiet,
                ..CostRec::default()
            },
        );
        if !interval_flags::is_missed(flags) {
            self.budget_check(t, cpu_ns, self.cfg.interval_ns);
        }
    }

    /// The budget's check of `t`, the calls of the last `dur_ns` (an interval, or the interval
    /// in progress at a checkpoint), in which the process used `cpu_ns` of CPU: above the
    /// budget, the functions that cost most for what they tell are demoted (`crate::budget`);
    /// functions `CULPRIT_DEMOTE` names are demoted on sight. Calls of functions already
    /// demoted are not counted: they no longer cost what they did.
    fn budget_check(&mut self, t: &Tally, cpu_ns: u64, dur_ns: u64) {
        let now = sys::realtime_ns();
        let cal = self.cal;
        // The record says what a function does in an interval: a checkpoint's part scaled.
        let per_interval = self.cfg.interval_ns as f64 / dur_ns.max(1) as f64;
        let decided = |addr: usize, d: &Delta, reason| Decided {
            addr,
            reason,
            calls: (d.calls as f64 * per_interval) as u64,
            self_ns: (cal.to_ns(d.excl) as f64 * per_interval) as u64,
        };
        let cands: Vec<(usize, &Delta)> = t
            .agg
            .iter()
            .filter(|(a, _)| demote::state_of(**a) == demote::state::TRACED)
            .map(|(&a, d)| (a, d))
            .collect();
        let forced: Vec<Decided> = cands
            .iter()
            .filter(|(a, _)| decide::demote_wanted(*a))
            .map(|&(a, d)| decided(a, d, demotion_reason::FORCED))
            .collect();
        if demote::begin(&forced, now) > 0 {
            self.decisions.push((now, 0));
        }
        let Some(budget) = self.cfg.budget else {
            return;
        };
        let funcs: Vec<FuncCost> = cands
            .iter()
            .map(|(_, d)| FuncCost {
                calls: d.calls,
                self_ns: cal.to_ns(d.excl),
            })
            .collect();
        let iv = budget::Interval {
            cpu_ns,
            dur_ns,
            calls: funcs.iter().map(|f| f.calls).sum(),
        };
        let pick = budget::choose(budget, self.call.traced_ns, &iv, &funcs);
        let chosen: Vec<Decided> = pick
            .iter()
            .filter(|&&i| demote::state_of(cands[i].0) == demote::state::TRACED)
            .map(|&i| decided(cands[i].0, cands[i].1, demotion_reason::BUDGET))
            .collect();
        // Its own time: the forced demotions of this pass have theirs.
        let at = now + 1;
        if demote::begin(&chosen, at) > 0 {
            let share = iv.share(self.call.traced_ns).min(1.0);
            self.decisions.push((at, (share * 1e6) as u32));
        }
    }

    /// The Demotions records of the functions whose callers were looked at long enough (half
    /// an interval or more, and until a call was seen, for at most five intervals): one per
    /// decision.
    fn write_demotions(&mut self) {
        let now = sys::realtime_ns();
        let done = demote::finish(
            now.saturating_sub(self.cfg.interval_ns / 2),
            now.saturating_sub(self.cfg.interval_ns.saturating_mul(5)),
        );
        let mut k = 0;
        while k < done.len() {
            let at = done[k].at_ns;
            let n = done[k..].iter().take_while(|f| f.at_ns == at).count();
            let group = &done[k..k + n];
            k += n;
            let cost_ppm = self.decisions.iter().find(|d| d.0 == at).map_or(0, |d| d.1);
            let forced = group
                .iter()
                .all(|f| f.decided.reason == demotion_reason::FORCED);
            let head = DemotionsHead {
                at_ns: at,
                budget_ppm: match (forced, self.cfg.budget) {
                    (false, Some(b)) => (b * 1e6) as u32,
                    _ => 0,
                },
                cost_ppm,
                call_cost_ps: (self.call.traced_ns * 1000.0) as u32,
            };
            let entries: Vec<Demotion> = group
                .iter()
                .map(|f| Demotion {
                    func: f.decided.addr as u64,
                    calls: f.decided.calls,
                    self_ns: f.decided.self_ns,
                    observed: f.observed,
                    reason: f.decided.reason,
                    callers: f.callers.iter().map(|c| c.map(|a| a as u64)).collect(),
                })
                .collect();
            self.buf.demotions(&head, &entries);
        }
        let oldest = done.last().map_or(0, |f| f.at_ns);
        self.decisions.retain(|d| d.0 > oldest);
    }

    /// Rewrites the hook call sites of untraced functions noted since the last call to NOPs
    /// (`sys::patch`), and says in the file how many are.
    fn patch_sites(&mut self) {
        if !sys::patch::enabled() || !sys::patch::pending() {
            return;
        }
        let hooks = [
            sys::hooks::__cyg_profile_func_enter as *const () as usize,
            sys::hooks::__cyg_profile_func_exit as *const () as usize,
        ];
        // The link map now (the tracker's is the last interval's, and its changes are the
        // Object records').
        let objs = crate::objects::scan();
        let mut functions = crate::bodies::Functions {
            bodies: &mut self.bodies,
            objects: &objs,
        };
        sys::patch::apply(&hooks, &mut functions);
        let st = sys::patch::stats();
        if st.patched != self.patched {
            self.patched = st.patched;
            self.buf.info([
                (info_keys::PATCHED_SITES, st.patched.to_string().as_str()),
                (info_keys::PATCH_KEPT, st.kept.to_string().as_str()),
                (info_keys::PATCHED_INLINED, st.inlined.to_string().as_str()),
            ]);
        }
    }

    /// Encodes `MISSED` records for the `n` intervals from `start` (one per interval up to
    /// [`MAX_MISSED_RECORDS`], then one covering the rest); the first carries `un`.
    fn write_missed(&mut self, start: u64, n: u64, un: Unaccounted) {
        if !self.ensure_open() {
            return;
        }
        let i = self.cfg.interval_ns;
        let sat = |v: u64| v.min(u32::MAX as u64) as u32;
        let mut un = un;
        let mut k = 0;
        while k < n {
            let dur_ns = if k == MAX_MISSED_RECORDS {
                (n - k) * i
            } else {
                i
            };
            let head = IntervalHead {
                start_ns: start + k * i,
                dur_ns,
                flags: interval_flags::MISSED,
                lost_frames: sat(un.lost),
                overflows: sat(un.overflows),
                dropped: sat(un.dropped),
                ..IntervalHead::default()
            };
            self.buf.interval(&head, std::iter::empty());
            un = Unaccounted::default();
            k += dur_ns / i;
        }
        self.clear_extras();
    }

    /// Writes the records of every interval that has ended by `now`, oldest first, however
    /// late: each from the ring (see [`Self::finalize`]). A gap longer than
    /// [`MAX_MISSED_RECORDS`] intervals is skipped in one step ([`Self::skip_gap`]).
    fn close_ended(&mut self, now: u64) {
        let i = self.cfg.interval_ns;
        if now < self.open_start + i {
            return;
        }
        while self.open_start + i <= now {
            let x = self.open_start / i;
            let cur = now / i;
            if cur - x > MAX_MISSED_RECORDS + 2 * RING_LEN {
                self.skip_gap(x, cur - RING_LEN, now);
                continue;
            }
            let (mut t, missing) = self.finalize(x, now);
            if missing || x + 1 >= intervals::overflow_high() {
                Self::add_unplaced(&mut t);
            }
            let end = self.open_start + i;
            if missing {
                let mut un = t.unaccounted;
                un.dropped += t.calls();
                self.write_missed(self.open_start, 1, un);
            } else {
                let flags = if self.observed_from > self.open_start {
                    interval_flags::PARTIAL
                } else {
                    0
                };
                let late = now - end;
                let late = if late > LATE_SLACK_NS { late } else { 0 };
                self.write_interval(self.open_start, flags, &t, late);
            }
            self.open_start = end;
            self.observed_from = end;
            if self.cfg.rotate.enabled() {
                self.commit();
                self.maybe_rotate(end);
            }
        }
        self.commit();
    }

    /// The flusher is so late (more than [`MAX_MISSED_RECORDS`] intervals: the process was
    /// stopped for days, or the wall clock jumped) that it writes the intervals from `from`
    /// to `to` (excluded) `MISSED` at once: whatever the ring and the threads hold of them is
    /// counted as dropped, and the ring starts again at `to`.
    fn skip_gap(&mut self, from: u64, to: u64, now: u64) {
        let i = self.cfg.interval_ns;
        let mut un = Unaccounted::default();
        if let Some(ring) = intervals::get() {
            for k in 0..RING_LEN {
                ring.close(from + k);
            }
            let deadline = sys::monotonic_ns() + HOOKS_WAIT_NS;
            let mut calls = 0;
            for b in pool::blocks() {
                let st = b.state.load(Acquire);
                if st != state::LIVE && st != state::DEAD {
                    continue;
                }
                let took = b.flusher_take(to - 1, to, deadline, |_, _, d| calls += d.calls);
                if let Taken::Moved { unaccounted, .. } = took {
                    un += unaccounted;
                }
            }
            for k in 0..RING_LEN {
                let quiet = ring.wait_writers(from + k, deadline);
                let head = ring.read(from + k, !quiet, |_, v| calls += v[0]);
                un += Unaccounted {
                    lost: head.lost,
                    overflows: head.overflows,
                    dropped: head.dropped,
                };
            }
            ring.relabel(to);
            un.dropped += calls;
        }
        self.labelled_at.fill(now);
        let mut t = Tally::default();
        self.reap(&mut t);
        Self::add_unplaced(&mut t);
        un += t.unaccounted;
        un.dropped += t.calls();
        self.write_missed(from * i, to - from, un);
        self.commit();
        self.open_start = to * i;
        self.observed_from = self.open_start;
    }

    /// Writes what the open interval has so far, flagged partial.
    fn write_partial(&mut self, now: u64) {
        let t = self.take_open(self.open_start / self.cfg.interval_ns);
        self.write_interval(self.open_start, interval_flags::PARTIAL, &t, 0);
        self.commit();
        self.observed_from = now.max(self.open_start + 1);
    }

    /// Writes the interval in progress as the file's checkpoint, read without taking it,
    /// when it changed since the last one.
    fn checkpoint(&mut self) {
        self.take_extras();
        if !self.queue.is_empty() || self.failed {
            return;
        }
        let t = self.peek_open(self.open_start / self.cfg.interval_ns);
        // The budget need not wait for the interval's end.
        let cpu_ns = sys::process_cpu_ns().saturating_sub(self.cpu_at);
        let since = sys::realtime_ns().saturating_sub(self.open_start.max(self.observed_from));
        if since >= CHECKPOINT_NS {
            self.budget_check(&t, cpu_ns, since);
        }
        let sig = t.signature();
        if t.is_empty() || (!self.dirty && self.last_checkpoint == Some(sig)) {
            return;
        }
        if !self.ensure_open() {
            return;
        }
        self.cal.refine();
        let rec = self.encode_interval(
            false,
            self.open_start,
            interval_flags::PARTIAL,
            &t,
            false,
            None,
        );
        let Some(out) = self.out.as_mut() else { return };
        match out.checkpoint(rec.as_bytes()) {
            Ok(()) => {
                self.dirty = false;
                self.last_checkpoint = Some(sig);
            }
            Err(WriteError::Gone(why)) => {
                let now = sys::realtime_ns();
                let old = self.file_name().unwrap_or_default();
                if self.replace_file(now, &why, old) {
                    self.commit();
                }
            }
            Err(WriteError::Refused(_)) => {
                self.failed = true;
                self.queue.clear();
            }
            // Tried again at the next checkpoint.
            Err(WriteError::Failed(_)) => {}
        }
    }

    fn end_file(&mut self, now: u64, reason: u32) {
        control::progress();
        if !self.ensure_open() {
            return;
        }
        self.buf.end(now, reason);
        self.queue.extend_from_slice(self.buf.as_bytes());
        self.buf.clear();
        if self.failed {
            return;
        }
        for _attempt in 0..2 {
            let Some(out) = self.out.take() else { return };
            let old = out.name().to_string();
            match out.finish(&self.queue) {
                Ok(()) => {
                    self.queue.clear();
                    return;
                }
                Err(WriteError::Gone(why)) => {
                    // The End record is the last of the queue: the new file gets it too.
                    if !self.replace_file(now, &why, old) {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    }

    fn switch_node(&mut self, now: u64) {
        let Some(node) = NODE_REQUEST.get().cloned() else {
            return;
        };
        if node == self.node {
            return;
        }
        self.write_partial(now);
        let old = self
            .out
            .as_ref()
            .map(|o| format!("{}/{}", self.node, o.name()));
        if self.out.is_some() {
            self.end_file(now, end_reason::DONE);
        }
        self.out = None;
        self.node = node;
        self.start_ns = now;
        self.new_history(now);
        if let Some(old) = old {
            self.origin = Origin::Renamed(old);
        }
        self.failed = false;
        self.queue.clear();
        self.failing = None;
        if let Err(e) = self.open_file() {
            self.open_failed(e);
        }
    }

    /// Commits the layer events the threads marked since the last call (see `io`), when there
    /// are any: every 100 ms, so a crash loses at most that much of them.
    fn write_layers(&mut self) {
        let mut rec = RecordBuf::new();
        // Ticks become ns with the ratio measured so far (the first interval's would otherwise
        // use the 1 ns per tick it starts with).
        self.cal.refine();
        let every = crate::requests::sample_every();
        if !io::drain_into(&mut rec, &self.cal, &mut self.io_span, every) || !self.ensure_open() {
            return;
        }
        self.buf.append(&rec);
        self.commit();
    }

    /// The process exits (`exit`, `_exit`): the last interval and the end marker. A forked
    /// child that counted nothing leaves no file.
    fn exit(&mut self, now: u64) {
        self.write_layers();
        let t = self.take_open(self.open_start / self.cfg.interval_ns);
        if self.out.is_none() && t.is_empty() {
            return;
        }
        self.write_interval(self.open_start, interval_flags::PARTIAL, &t, 0);
        self.write_stacks();
        // The End record is committed with the interval (one write).
        self.end_file(now, end_reason::EXIT);
    }

    /// The flusher loop: runs until the process exits.
    ///
    /// Requesters set a [`PENDING`] bit, then bump [`REQ`]; the flusher acknowledges by
    /// storing in [`DONE`] the value of `REQ` it read before taking the bits. It sleeps only
    /// when every request it has seen is acknowledged, so none waits for the next interval.
    pub fn run(mut self) {
        io::flusher_thread(sys::own_fd_table());
        FLUSHER_TID.store(sys::gettid(), Release);
        let start = sys::realtime_ns();
        let mut next_checkpoint = (start / CHECKPOINT_NS + 1) * CHECKPOINT_NS;
        let mut rng = Probe::new(start ^ u64::from(std::process::id()));
        let mut next_probe = rng.in_slot_after(start);
        let runq = RunDelay::open();
        let mut slept_at_delay = runq.read();
        loop {
            control::progress();
            let seen = REQ.load(Acquire);
            let now = sys::realtime_ns();
            if let Some((_, dur)) = self.stall.take_if(|&mut (at, _)| now >= at) {
                // A starved flusher, for tests: the hooks go on meanwhile.
                sys::sleep_ns(dur);
                continue;
            }
            let deadline = (self.open_start + self.cfg.interval_ns)
                .min(next_checkpoint)
                .min(next_probe);
            if PENDING.load(Acquire) == 0 && DONE.load(Acquire) == seen && now < deadline {
                slept_at_delay = runq.read();
                sys::futex_wait_until_realtime(&REQ, seen, deadline);
                continue;
            }
            if now >= next_probe {
                // Waiting for a CPU is not being stopped.
                let waited = runq.read().saturating_sub(slept_at_delay);
                self.woke((now - next_probe).saturating_sub(waited));
                next_probe = rng.in_slot_after(now);
            }
            let pending = PENDING.swap(0, AcqRel);
            let open = self.open_start;
            self.close_ended(now);
            if pending & req::NODE != 0 {
                self.switch_node(now);
            }
            if pending & req::FLUSH != 0 {
                self.write_layers();
                self.write_partial(now);
            }
            if self.open_start != open || pending & req::FLUSH != 0 {
                self.write_stacks();
            }
            if pending & req::EXIT != 0 {
                self.exit(now);
                // Nothing is served after this: release every waiter.
                DONE.store(REQ.load(Acquire), Release);
                sys::futex_wake_all(&DONE);
                return;
            }
            self.patch_sites();
            if now >= next_checkpoint {
                self.write_layers();
                self.checkpoint();
                next_checkpoint = (now / CHECKPOINT_NS + 1) * CHECKPOINT_NS;
            }
            DONE.store(seen, Release);
            sys::futex_wake_all(&DONE);
        }
    }
}

/// One interval's counts as the flusher writes them.
#[derive(Debug, Default)]
struct Tally {
    agg: HashMap<usize, Delta>,
    unaccounted: Unaccounted,
    /// Threads alive in the interval (live when written, and those that exited in it).
    threads: u64,
    /// Calls among them that returned in an earlier interval (see `intervals`).
    moved: u64,
}

impl Tally {
    /// Adds what the ring holds of interval `x` (taking it when `take`): its counts per
    /// function and its entry's head.
    fn read_ring(&mut self, ring: &'static intervals::Ring, x: u64, take: bool) {
        let agg = &mut self.agg;
        let head = ring.read(x, take, |addr, [calls, excl, incl, unwound]| {
            *agg.entry(addr).or_default() += Delta {
                calls,
                excl,
                incl,
                unwound,
            };
        });
        self.add_head(&head);
    }

    fn add_head(&mut self, h: &intervals::Head) {
        self.unaccounted += Unaccounted {
            lost: h.lost,
            overflows: h.overflows,
            dropped: h.dropped,
        };
        self.moved += h.moved;
        self.threads += h.exited;
    }

    fn calls(&self) -> u64 {
        self.agg.values().map(|d| d.calls).sum()
    }

    fn is_empty(&self) -> bool {
        self.agg.is_empty() && self.unaccounted == Unaccounted::default()
    }

    /// What changes when anything is counted: calls, exclusive ticks, calls not accounted.
    fn signature(&self) -> [u64; 3] {
        let u = &self.unaccounted;
        [
            self.calls(),
            self.agg.values().map(|d| d.excl).sum(),
            u.lost + u.overflows + u.dropped,
        ]
    }
}

/// The calling thread's run delay: ns spent runnable on a run queue, waiting for a CPU
/// (`/proc/thread-self/schedstat`, second field). Reads 0 where the kernel does not keep it.
struct RunDelay(Option<std::fs::File>);

impl RunDelay {
    /// Opens the file of the calling thread (the flusher's, called from it).
    fn open() -> Self {
        RunDelay(std::fs::File::open("/proc/thread-self/schedstat").ok())
    }

    fn read(&self) -> u64 {
        use std::os::unix::fs::FileExt as _;
        let Some(f) = &self.0 else { return 0 };
        let mut buf = [0u8; 96];
        let Ok(n) = f.read_at(&mut buf, 0) else {
            return 0;
        };
        std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(|s| s.split_ascii_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0)
    }
}

/// Random probe times (xorshift64: no quality needed beyond an even spread).
struct Probe(u64);

impl Probe {
    fn new(seed: u64) -> Self {
        Probe(seed | 1)
    }

    /// A random time in the [`CHECKPOINT_NS`] slot after the one `now` is in.
    fn in_slot_after(&mut self, now: u64) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        (now / CHECKPOINT_NS + 1) * CHECKPOINT_NS + x % CHECKPOINT_NS
    }
}

/// The records of `queue` worth carrying into a new file: all but `Object` records (the new
/// file describes the loaded objects itself, with its own ids).
fn carry_over(queue: &[u8]) -> Vec<u8> {
    let mut buf = RecordBuf::new();
    for rec in records_at(queue, 0) {
        match rec {
            Ok(Record::Info(i)) => buf.info(i.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))),
            Ok(Record::Interval(iv)) => {
                buf.interval(
                    &IntervalHead {
                        start_ns: iv.start_ns,
                        dur_ns: iv.dur_ns,
                        flags: iv.flags,
                        threads: iv.threads,
                        lost_frames: iv.lost_frames,
                        overflows: iv.overflows,
                        dropped: iv.dropped,
                    },
                    iv.entries(),
                );
            }
            Ok(Record::Unwound(u)) => {
                buf.unwound(&extra_ref(u.interval), u.entries());
            }
            Ok(Record::Edges(e)) => {
                buf.edges(&extra_ref(e.interval), e.dropped, e.entries());
            }
            Ok(Record::Histograms(h)) => {
                let hs: Vec<Histogram> = h.entries().collect();
                buf.histograms(&extra_ref(h.interval), &hs);
            }
            Ok(Record::Layers(l)) => {
                let layers: Vec<_> = l.layers().collect();
                buf.layers(
                    &LayersHead {
                        span_start_ns: l.span_start_ns,
                        span_end_ns: l.span_end_ns,
                        dropped: l.dropped,
                    },
                    &layers,
                    l.events(),
                );
            }
            Ok(Record::End(e)) => buf.end(e.end_ns, e.reason),
            Ok(Record::Wakeups(w)) => buf.wakeups(&extra_ref(w.interval), &w),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    buf.as_bytes().to_vec()
}

fn extra_ref(k: culprit_format::IntervalKey) -> IntervalRef {
    IntervalRef {
        start_ns: k.start_ns,
        dur_ns: k.dur_ns,
        flags: k.flags,
    }
}

fn object_record(buf: &mut RecordBuf, o: &Obj, extra_flags: u32) {
    buf.object(&ObjectDesc {
        id: o.id,
        flags: o.flags | extra_flags,
        bias: o.bias,
        start: o.start,
        end: o.end,
        build_id: &o.build_id,
        path: &o.path,
    });
}
