//! The flusher thread: every interval, on wall-clock boundaries, it takes every thread's
//! counts since the last interval and appends one `Interval` record to the process's file.
//!
//! # Intervals
//!
//! Intervals are aligned to multiples of `CULPRIT_INTERVAL_MS` since the Unix epoch
//! (`CLOCK_REALTIME`), and every interval gets a record, even an empty one:
//!
//! * the first interval (the runtime started inside it) and the last (the process exited inside
//!   it) are flagged `PARTIAL`; so are both parts of an interval split by `culprit_flush()` or
//!   `culprit_set_node()` — records with the same start add up;
//! * the flusher wakes at each boundary with an absolute `CLOCK_REALTIME` timeout. Calls that
//!   return between the boundary and the wake-up (normally microseconds) count in the interval
//!   that just ended. If it wakes half an interval late or more (the process was stopped with
//!   SIGSTOP, or the flusher starved), the counts since its last wake-up cannot be placed in an
//!   interval: they are dropped, the intervals it missed are written with `MISSED` (no entries)
//!   and the current one is `PARTIAL`. A gap is thus never read as zeros.
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
    end_reason, info_keys, interval_flags, names, object_flags, procfs, records_at, rotation,
    EdgeEntry, Histogram, IntervalEntry, IntervalHead, IntervalRef, LayersHead, ObjectDesc, Record,
    RecordBuf, UnwoundEntry, WakeupsRec, HIST_BUCKETS,
};

use crate::block::{self, mode, state, Delta, EdgeDelta, OpenCall, Unaccounted};
use crate::clock::{self, Calibration};
use crate::config::Config;
use crate::control::{req, CURRENT_FILE, CURRENT_NODE, DONE, NODE_REQUEST, PENDING, REQ};
use crate::objects::{Obj, Tracker};
use crate::output::{TraceOut, WriteError};
use crate::{decide, io, pool, procinfo, sys};

use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};

/// Most `MISSED` records written one per interval for one gap; a longer gap gets one more
/// record covering the rest (its `dur_ns` is longer than an interval).
const MAX_MISSED_RECORDS: u64 = 100_000;
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
    agg: HashMap<usize, Delta>,
    /// Caller → callee edges (`CULPRIT_GRAPH`); caller 0: none traced.
    edges: HashMap<(usize, usize), EdgeDelta>,
    /// Calls whose edge found no room.
    edge_drops: u64,
    /// Call-duration histograms (`CULPRIT_HIST`).
    hists: HashMap<usize, [u64; HIST_BUCKETS]>,
    unaccounted: Unaccounted,
    /// Threads that exited during the interval.
    exited: u64,
    /// Blocks owned by a thread at the last collection.
    live: u32,
    /// Something was collected since the last checkpoint.
    dirty: bool,
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
    /// Rotation (`CULPRIT_ROTATE`): the number of the piece being written (0: the first).
    piece: u32,
    /// When the piece being written began (wall-clock ns).
    piece_start_ns: u64,
    /// The name of the first piece and of the previous one, once rotated.
    rotated: Option<(String, String)>,
    /// After a rotation that failed, no new try before this interval boundary.
    rotate_retry_ns: u64,
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
            agg: HashMap::new(),
            edges: HashMap::new(),
            edge_drops: 0,
            hists: HashMap::new(),
            unaccounted: Unaccounted::default(),
            exited: 0,
            live: 0,
            dirty: false,
            queue: Vec::new(),
            failing: None,
            idle: Vec::new(),
            buf: RecordBuf::new(),
            io_span: start_ns,
            wakeups: WakeupsRec::default(),
            stack_seq: 0,
            piece: 0,
            piece_start_ns: start_ns,
            rotated: None,
            rotate_retry_ns: 0,
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
        for b in pool::blocks() {
            if b.state.load(Acquire) != state::LIVE {
                continue;
            }
            let oc = b.open_calls(&mut calls);
            let (tid, serial) = b.owner();
            let mut flags = 0;
            for (on, bit) in [
                (oc.paused, thread_flags::PAUSED),
                (oc.overflow, thread_flags::OVERFLOW),
                (oc.unstable, thread_flags::UNSTABLE),
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

    /// Name of the file being written, once it exists.
    pub fn file_name(&self) -> Option<String> {
        self.out.as_ref().map(|o| o.name().to_string())
    }

    /// Creates the file with its `Info` and `Object` records, and refreshes `node.info`.
    pub fn open_file(&mut self) -> Result<(), WriteError> {
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

    /// Takes every thread's counts since the last call into `agg`, and frees the blocks of
    /// threads that have exited (their last counts are now taken).
    fn collect(&mut self) {
        let agg = &mut self.agg;
        let mut moved = false;
        let mut add = |addr: usize, d: Delta| {
            *agg.entry(addr).or_default() += d;
            moved = true;
        };
        let (edges, hists) = (&mut self.edges, &mut self.hists);
        let mut edge = |caller: usize, callee: usize, d: EdgeDelta| {
            *edges.entry((caller, callee)).or_default() += d;
        };
        let mut hist = |addr: usize, counts: &[u64; HIST_BUCKETS]| {
            let h = hists.entry(addr).or_insert([0; HIST_BUCKETS]);
            for (a, c) in h.iter_mut().zip(counts) {
                *a += c;
            }
        };
        let mut un = Unaccounted::default();
        let mut live = 0;
        for b in pool::blocks() {
            let st = b.state.load(Acquire);
            if st != state::LIVE && st != state::DEAD {
                continue;
            }
            un += b.take_deltas(&mut add);
            self.edge_drops += b.take_extras(&mut edge, &mut hist);
            if st == state::DEAD {
                self.exited += 1;
                let _ = b
                    .state
                    .compare_exchange(state::DEAD, state::FREE, AcqRel, Acquire);
            } else {
                live += 1;
            }
        }
        let (u, exited) = pool::take_retired(&mut add);
        un += u;
        un.dropped += pool::take_ignored();
        self.exited += exited;
        self.live = live;
        self.dirty |= moved || un != Unaccounted::default();
        self.unaccounted += un;
    }

    fn clear_counts(&mut self) {
        self.agg.clear();
        self.edges.clear();
        self.edge_drops = 0;
        self.hists.clear();
        self.unaccounted = Unaccounted::default();
        self.exited = 0;
        self.dirty = false;
    }

    /// The interval's records for `start` from what `collect` gathered: its Interval record,
    /// then its Unwound record (when calls were unwound) and, in those modes, its Edges and
    /// Histograms records.
    fn encode_interval(&mut self, buf_is_self: bool, start: u64, flags: u32) -> RecordBuf {
        let cal = self.cal;
        let mut entries: Vec<IntervalEntry> = self
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
            threads: sat(self.live as u64 + self.exited),
            lost_frames: sat(self.unaccounted.lost),
            overflows: sat(self.unaccounted.overflows),
            dropped: sat(self.unaccounted.dropped),
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
        let mut unwound: Vec<UnwoundEntry> = self
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
        if buf_is_self && self.wakeups.wakeups > 0 {
            out.wakeups(&r, &std::mem::take(&mut self.wakeups));
        }
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
            out.edges(&r, sat(self.edge_drops), edges);
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
            out.histograms(&r, &hists);
        }
        out
    }

    /// Writes the interval starting at `start` with what `collect` gathered.
    fn write_interval(&mut self, start: u64, flags: u32) {
        if !self.ensure_open() {
            self.clear_counts();
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
        self.buf = self.encode_interval(true, start, flags);
        for o in &changes.removed {
            object_record(&mut self.buf, o, object_flags::UNLOADED);
        }
        self.clear_counts();
        self.commit();
    }

    fn write_missed(&mut self, start: u64, dur_ns: u64, dropped: u64) {
        let head = IntervalHead {
            start_ns: start,
            dur_ns,
            flags: interval_flags::MISSED,
            dropped: dropped.min(u32::MAX as u64) as u32,
            ..IntervalHead::default()
        };
        self.buf.interval(&head, std::iter::empty());
    }

    /// Writes the records of every interval that has ended by `now`.
    fn close_ended(&mut self, now: u64) {
        let i = self.cfg.interval_ns;
        let end = self.open_start + i;
        if now < end {
            return;
        }
        if now - end < i / 2 {
            self.collect();
            let flags = if self.observed_from > self.open_start {
                interval_flags::PARTIAL
            } else {
                0
            };
            self.write_interval(self.open_start, flags);
            self.open_start = end;
            self.observed_from = end;
            self.maybe_rotate(end);
            let mut add_late = HashMap::new();
            let un = pool::release_idle(&mut self.idle, |addr, d: Delta| {
                *add_late.entry(addr).or_default() += d;
            });
            // Counts found in released blocks (none unless a fork left some): this interval.
            self.agg = add_late;
            self.unaccounted += un;
            return;
        }
        // Woke too late (the process was stopped, or the flusher starved): what the last
        // checkpoints collected belongs to the open interval, observed up to then; what came
        // since cannot be placed, and is counted as dropped.
        let observed = !self.agg.is_empty() || self.unaccounted != Unaccounted::default();
        if observed {
            self.write_interval(self.open_start, interval_flags::PARTIAL);
        }
        self.collect();
        let unplaced: u64 =
            self.agg.values().map(|d| d.calls).sum::<u64>() + self.unaccounted.dropped;
        self.clear_counts();
        let cur = now / i * i;
        let mut s = if observed {
            self.open_start + i
        } else {
            self.open_start
        };
        if s < cur && self.ensure_open() {
            let mut n = 0;
            let mut dropped = unplaced;
            while s < cur {
                if n == MAX_MISSED_RECORDS {
                    self.write_missed(s, cur - s, dropped);
                    break;
                }
                self.write_missed(s, i, dropped);
                dropped = 0;
                s += i;
                n += 1;
            }
            self.commit();
        } else if unplaced > 0 {
            // No whole interval was missed: the current one carries the count.
            self.unaccounted.dropped += unplaced;
        }
        self.open_start = cur;
        self.observed_from = now;
    }

    /// Writes what the open interval has so far, flagged partial.
    fn write_partial(&mut self, now: u64) {
        self.collect();
        self.write_interval(self.open_start, interval_flags::PARTIAL);
        self.observed_from = now.max(self.open_start + 1);
    }

    /// Collects, and writes the interval in progress as the file's checkpoint when something
    /// was counted since the last one.
    fn checkpoint(&mut self) {
        self.collect();
        if !self.dirty || !self.queue.is_empty() || self.failed {
            return;
        }
        if self.agg.is_empty() && self.unaccounted == Unaccounted::default() {
            return;
        }
        if !self.ensure_open() {
            return;
        }
        self.cal.refine();
        let rec = self.encode_interval(false, self.open_start, interval_flags::PARTIAL);
        let Some(out) = self.out.as_mut() else { return };
        match out.checkpoint(rec.as_bytes()) {
            Ok(()) => self.dirty = false,
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
        self.collect();
        let nothing = self.agg.is_empty() && self.unaccounted == Unaccounted::default();
        if self.out.is_none() && nothing {
            return;
        }
        self.write_interval(self.open_start, interval_flags::PARTIAL);
        self.write_stacks();
        self.end_file(now, end_reason::EXIT);
    }

    /// The flusher loop: runs until the process exits.
    ///
    /// Requesters set a [`PENDING`] bit, then bump [`REQ`]; the flusher acknowledges by
    /// storing in [`DONE`] the value of `REQ` it read before taking the bits. It sleeps only
    /// when every request it has seen is acknowledged, so none waits for the next interval.
    pub fn run(mut self) {
        io::thread_off();
        let start = sys::realtime_ns();
        let mut next_checkpoint = (start / CHECKPOINT_NS + 1) * CHECKPOINT_NS;
        let mut rng = Probe::new(start ^ u64::from(std::process::id()));
        let mut next_probe = rng.in_slot_after(start);
        let runq = RunDelay::open();
        let mut slept_at_delay = runq.read();
        loop {
            let seen = REQ.load(Acquire);
            let now = sys::realtime_ns();
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
