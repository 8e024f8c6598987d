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
//! The file is `$CULPRIT_DIR/<node>/trace-<pid>-<start_ns>.cul`, a shared mapping
//! ([`MappedFile`]). It starts with an `Info` record and one `Object` record per loaded object;
//! objects loaded later (`dlopen`) get an `Object` record before the first interval that can
//! hold their addresses, and unloaded ones an `UNLOADED` record after it. A clean exit writes
//! the last partial interval, an `End` record, and marks the file ended.

use std::collections::HashMap;
use std::path::Path;

use culprit_format::{
    end_reason, info_keys, interval_flags, names, object_flags, FileHeader, FileKind,
    IntervalEntry, IntervalHead, ObjectDesc, RecordBuf,
};

use crate::block::{state, Delta};
use crate::clock::{self, Calibration};
use crate::config::{host_name, Config};
use crate::objects::{Obj, Tracker};
use crate::runtime::{req, CURRENT_FILE, CURRENT_NODE, DONE, NODE_REQUEST, PENDING, REQ};
use crate::sys::{self, MappedFile};
use crate::{decide, procinfo};

use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};

/// Most `MISSED` records written one per interval for one gap; a longer gap gets one more
/// record covering the rest (its `dur_ns` is longer than an interval).
const MAX_MISSED_RECORDS: u64 = 100_000;

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
}

/// The flusher's state; owned by the flusher thread (no lock anywhere).
#[derive(Debug)]
pub struct Flusher {
    cfg: &'static Config,
    node: String,
    cal: Calibration,
    start_ns: u64,
    origin: Origin,
    out: Option<MappedFile>,
    failed: bool,
    objects: Tracker,
    /// Start of the interval being accumulated.
    open_start: u64,
    /// Time since which that interval is observed (after its start: partial).
    observed_from: u64,
    agg: HashMap<usize, Delta>,
    threads: u32,
    lost: u64,
    overflows: u64,
    buf: RecordBuf,
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
            threads: 0,
            lost: 0,
            overflows: 0,
            buf: RecordBuf::new(),
        }
    }

    /// Name of the file being written, once it exists.
    pub fn file_name(&self) -> Option<String> {
        self.out.as_ref().and_then(|m| {
            m.path()
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
        })
    }

    /// Creates the file with its `Info` and `Object` records, and refreshes `node.info`.
    pub fn open_file(&mut self) -> std::io::Result<()> {
        let dir = self.cfg.node_dir(&self.node);
        std::fs::create_dir_all(&dir)?;
        let pid = std::process::id();
        let header = FileHeader::new(FileKind::Trace, self.start_ns, pid).to_bytes();
        let start_ns = self.start_ns;
        let mut out = MappedFile::create(
            &dir,
            |seq| names::trace_file_name(pid, start_ns, seq),
            &header,
        )?;
        self.buf.clear();
        self.info_record(pid);
        self.objects.reset();
        let ch = self.objects.refresh();
        for o in &ch.added {
            object_record(&mut self.buf, o, 0);
        }
        out.append(self.buf.as_bytes())?;
        self.buf.clear();
        if let Some(n) = out.path().file_name() {
            CURRENT_FILE.set(n.to_string_lossy().into_owned());
        }
        CURRENT_NODE.set(self.node.clone());
        self.out = Some(out);
        write_node_info(&dir, self.cfg);
        Ok(())
    }

    fn info_record(&mut self, pid: u32) {
        let mut pairs: Vec<(&str, String)> = vec![
            (info_keys::NODE, self.node.clone()),
            (info_keys::HOST, host_name()),
            (info_keys::PID, pid.to_string()),
            (
                info_keys::PPID,
                std::os::unix::process::parent_id().to_string(),
            ),
            (info_keys::PROGRAM, procinfo::program()),
            (info_keys::EXE, procinfo::exe()),
            (info_keys::CMDLINE, procinfo::cmdline()),
            (
                info_keys::PROC_START_NS,
                procinfo::proc_start_ns().unwrap_or(0).to_string(),
            ),
            (info_keys::INTERVAL_NS, self.cfg.interval_ns.to_string()),
            (info_keys::CLOCK, clock::source_name().to_string()),
            (
                info_keys::WRITER_VERSION,
                format!("libculprit_rt {}", env!("CARGO_PKG_VERSION")),
            ),
            (info_keys::INCLUDE, self.cfg.include_raw.clone()),
            (info_keys::EXCLUDE, self.cfg.exclude_raw.clone()),
            (info_keys::KERNEL, procinfo::kernel()),
            (info_keys::BOOT_ID, procinfo::boot_id()),
        ];
        match &self.origin {
            Origin::Start => {}
            Origin::Forked(f) => pairs.push((info_keys::FORKED_FROM, f.clone())),
            Origin::Exec(f) => pairs.push((info_keys::EXEC_FROM, f.clone())),
            Origin::Renamed(f) => pairs.push(("node_changed_from", f.clone())),
        }
        self.buf.info(pairs.iter().map(|(k, v)| (*k, v.as_str())));
    }

    /// Creates the file if this process has none yet (a forked child creates it at its first
    /// write). False when there is nothing to write to.
    fn ensure_open(&mut self) -> bool {
        if self.failed {
            return false;
        }
        if self.out.is_none() {
            if let Err(e) = self.open_file() {
                self.fail(&format!(
                    "cannot write trace data under {}: {e}",
                    self.cfg.node_dir(&self.node).display()
                ));
                return false;
            }
        }
        true
    }

    /// Appends the encoded records to the file. A failure stops writing for good, after one
    /// line on stderr: the program goes on untraced.
    fn commit(&mut self) {
        if self.failed || self.buf.is_empty() {
            self.buf.clear();
            return;
        }
        let Some(out) = self.out.as_mut() else {
            self.buf.clear();
            return;
        };
        if let Err(e) = out.append(self.buf.as_bytes()) {
            let p = out.path().display().to_string();
            self.fail(&format!("cannot write to {p}: {e}"));
        }
        self.buf.clear();
    }

    fn fail(&mut self, msg: &str) {
        sys::stderr_line(&format!("culprit: {msg}; tracing stopped"));
        self.failed = true;
        self.buf.clear();
    }

    /// Takes every thread's counts since the last call into `agg`, and frees the blocks of
    /// threads that have exited (their last counts are now taken).
    fn collect(&mut self) {
        for b in sys::blocks() {
            let st = b.state.load(Acquire);
            if st == state::FREE {
                continue;
            }
            self.threads += 1;
            let agg = &mut self.agg;
            let (lost, over) = b.take_deltas(|addr, d| {
                let e = agg.entry(addr).or_default();
                e.calls += d.calls;
                e.excl += d.excl;
                e.incl += d.incl;
            });
            self.lost += lost;
            self.overflows += over;
            if st == state::DEAD {
                let _ = b
                    .state
                    .compare_exchange(state::DEAD, state::FREE, AcqRel, Acquire);
            }
        }
    }

    fn clear_counts(&mut self) {
        self.agg.clear();
        self.threads = 0;
        self.lost = 0;
        self.overflows = 0;
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
        let mut entries: Vec<IntervalEntry> = self
            .agg
            .iter()
            .map(|(&addr, d)| IntervalEntry {
                addr: addr as u64,
                calls: d.calls,
                excl_ns: self.cal.to_ns(d.excl),
                incl_ns: self.cal.to_ns(d.incl),
            })
            .collect();
        entries.sort_unstable_by_key(|e| e.addr);
        let head = IntervalHead {
            start_ns: start,
            dur_ns: self.cfg.interval_ns,
            flags,
            threads: self.threads,
            lost_frames: self.lost.min(u32::MAX as u64) as u32,
            overflows: self.overflows.min(u32::MAX as u64) as u32,
        };
        self.buf.interval(&head, entries);
        for o in &changes.removed {
            object_record(&mut self.buf, o, object_flags::UNLOADED);
        }
        self.clear_counts();
        self.commit();
    }

    fn write_missed(&mut self, start: u64, dur_ns: u64) {
        let head = IntervalHead {
            start_ns: start,
            dur_ns,
            flags: interval_flags::MISSED,
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
            return;
        }
        // Woke too late to tell which interval the counts belong to.
        self.collect();
        self.clear_counts();
        let cur = now / i * i;
        if self.ensure_open() {
            let mut s = self.open_start;
            let mut n = 0;
            while s < cur {
                if n == MAX_MISSED_RECORDS {
                    self.write_missed(s, cur - s);
                    break;
                }
                self.write_missed(s, i);
                s += i;
                n += 1;
            }
            self.commit();
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

    fn end_file(&mut self, now: u64, reason: u32) {
        if !self.ensure_open() {
            return;
        }
        self.buf.end(now, reason);
        self.commit();
        if let Some(out) = self.out.take() {
            if !self.failed {
                out.finish();
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
        let old = match (self.out.is_some(), self.file_name()) {
            (true, Some(f)) => Some(format!("{}/{f}", self.node)),
            _ => None,
        };
        if self.out.is_some() {
            self.end_file(now, end_reason::DONE);
        }
        self.node = node;
        self.start_ns = now;
        if let Some(old) = old {
            self.origin = Origin::Renamed(old);
        }
        self.failed = false;
        if let Err(e) = self.open_file() {
            self.fail(&format!(
                "cannot write trace data under {}: {e}",
                self.cfg.node_dir(&self.node).display()
            ));
        }
    }

    /// The flusher loop: runs until the process exits.
    ///
    /// Requesters set a [`PENDING`] bit, then bump [`REQ`]; the flusher acknowledges by
    /// storing in [`DONE`] the value of `REQ` it read before taking the bits. It sleeps only
    /// when every request it has seen is acknowledged, so none waits for the next interval.
    pub fn run(mut self) {
        loop {
            let seen = REQ.load(Acquire);
            let now = sys::realtime_ns();
            let deadline = self.open_start + self.cfg.interval_ns;
            if PENDING.load(Acquire) == 0 && DONE.load(Acquire) == seen && now < deadline {
                sys::futex_wait_until_realtime(&REQ, seen, deadline);
                continue;
            }
            let pending = PENDING.swap(0, AcqRel);
            self.close_ended(now);
            if pending & req::NODE != 0 {
                self.switch_node(now);
            }
            if pending & req::FLUSH != 0 {
                self.write_partial(now);
            }
            if pending & req::EXIT != 0 {
                self.collect();
                self.write_interval(self.open_start, interval_flags::PARTIAL);
                self.end_file(now, end_reason::EXIT);
                // Nothing is served after this: release every waiter.
                DONE.store(REQ.load(Acquire), Release);
                sys::futex_wake_all(&DONE);
                return;
            }
            DONE.store(seen, Release);
            sys::futex_wake_all(&DONE);
        }
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

/// Refreshes `DATA/<node>/node.info` (keeps keys other writers put there; atomic replace).
fn write_node_info(dir: &Path, cfg: &Config) {
    let path = dir.join(names::NODE_INFO_FILE);
    let mut info = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| names::NodeInfo::parse(&t))
        .unwrap_or_default();
    let mut set = |k: &str, v: String| {
        info.pairs.retain(|(key, _)| key != k);
        info.pairs.push((k.to_string(), v));
    };
    set("host", host_name());
    set("kernel", procinfo::kernel());
    set("boot_id", procinfo::boot_id());
    set("clocksource", procinfo::clocksource());
    set("trace_clock", clock::source_name().to_string());
    set("trace_interval_ns", cfg.interval_ns.to_string());
    let tmp = dir.join(format!(
        ".{}.tmp.{}",
        names::NODE_INFO_FILE,
        std::process::id()
    ));
    if std::fs::write(&tmp, info.to_text()).is_ok() && std::fs::rename(&tmp, &path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}
