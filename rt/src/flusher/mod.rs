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
use std::panic::AssertUnwindSafe;

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
use crate::config::{Config, TestStall, STALL_VAR};
use crate::control::{
    self, req, CURRENT_FILE, CURRENT_NODE, DONE, FLUSHER_GONE, FLUSHER_TID, NODE_REQUEST, PENDING,
    REQ,
};
use crate::demote::{self, Decided};
use crate::entry::Hooks;
use crate::intervals::{self, RING_LEN};
use crate::objects::{Obj, Tracker};
use crate::output::{TraceOut, WriteError};
use crate::{decide, io, pool, procinfo, sys};

use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};

// The flusher's work, beside its loop here: the file (`file`), the intervals it writes
// (`interval`), and the runtime's cost and the budget's demotions (`cost`).
mod cost;
mod file;
mod interval;

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
    /// The hooks' addresses: the call sites [`Flusher::patch_sites`] rewrites call them.
    hooks: [usize; 2],
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
    stall: Option<(u64, TestStall)>,
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
        hooks: Hooks,
    ) -> Self {
        let i = cfg.interval_ns;
        Flusher {
            cfg,
            node,
            cal,
            start_ns,
            origin,
            hooks: hooks.addresses,
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
                .map(|(after, then)| (start_ns + after * 1_000_000, then)),
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
    ///
    /// A panic in it (a bug) ends the thread, never the program: what it was is noted in the
    /// data if the file can still take it (`culprit report`: "trouble at …: the flusher thread
    /// failed (…)"), and the records after it are lost. Nothing is printed (see the module
    /// docs).
    pub fn run(mut self) {
        io::flusher_thread(sys::own_fd_table());
        FLUSHER_TID.store(sys::gettid(), Release);
        if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| self.serve())) {
            let why = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".to_string());
            let _ = std::panic::catch_unwind(AssertUnwindSafe(|| {
                // What was encoded but not committed may be cut short by the panic.
                self.buf.clear();
                self.note(
                    sys::realtime_ns(),
                    &format!("the flusher thread failed ({why}); the records after this are lost"),
                );
                self.commit();
            }));
            // Nothing writes this process's records any more: tracing stops, so the program
            // stops paying for it where it can. Threads that start now get no block,
            // `culprit_is_active()` says 0 and the exit waits for nothing. (Threads already
            // traced keep their blocks: their hooks still count, into memory nobody reads.)
            let on = control::state::ACTIVE;
            let _ = control::STATE.compare_exchange(on, control::state::OFF, AcqRel, Acquire);
        }
        FLUSHER_GONE.store(true, Release);
        sys::futex_wake_all(&DONE);
    }

    /// The loop of [`Self::run`], until the process exits.
    fn serve(&mut self) {
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
            match self.stall.take_if(|&mut (at, _)| now >= at) {
                // A starved flusher, for tests: the hooks go on meanwhile.
                Some((_, TestStall::Sleep(ms))) => {
                    sys::sleep_ns(ms * 1_000_000);
                    continue;
                }
                Some((_, TestStall::Panic)) => panic!("{STALL_VAR} asked the flusher to panic"),
                None => {}
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
