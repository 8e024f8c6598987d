//! The node's process tree: every task's `/proc` files, summed per node over an interval.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use culprit_format::os_metrics::name;

use super::parse;
use super::read::{Out, Reread};

/// A process the collector has read before.
#[derive(Debug)]
pub(super) struct ProcEntry {
    pub(super) start: u64,
    pub(super) io: Option<(u64, u64)>,
    pub(super) netns: Option<u64>,
    pub(super) seen: u64,
}

/// A thread the collector has read before.
#[derive(Debug)]
pub(super) struct ThreadEntry {
    pub(super) start: u64,
    pub(super) blkio: u64,
    pub(super) sched: (u64, u64, u64),
    pub(super) seen: u64,
    /// Boot-time clock ticks of the first of the consecutive reads that found the thread in
    /// uninterruptible sleep (`D`), up to the last read; `None` when the last read did not.
    pub(super) blocked_since: Option<u64>,
}

/// Most per-task files kept open (the rest are opened and closed each tick).
pub(super) const MAX_KEPT_FILES: usize = 256;

/// Which per-task file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) enum TaskFile {
    Stat,
    Schedstat,
    Io,
}

/// Per-process state across ticks, and the per-node sums of one tick.
#[derive(Debug, Default)]
pub(super) struct Procs {
    pub(super) procs: HashMap<u32, ProcEntry>,
    pub(super) threads: HashMap<u32, ThreadEntry>,
    /// Per-task files kept open and read again each tick: opening them by path was a sixth of
    /// the collector's time. A file of a task that died fails to read (even when its pid has
    /// been reused), is dropped and opened again for the new task.
    pub(super) files: HashMap<(u32, u32, TaskFile), (Reread, u64)>,
}

/// One node's per-process sums over an interval.
#[derive(Debug, Default)]
pub(super) struct ProcSums {
    pub(super) procs: u64,
    pub(super) threads: u64,
    pub(super) runnable: u64,
    pub(super) blocked: u64,
    pub(super) io_read: u64,
    pub(super) io: Option<(u64, u64)>,
    pub(super) blkio_ticks: u64,
    pub(super) sched: (u64, u64, u64),
    pub(super) sched_read: u64,
    /// Threads created before delay accounting was on: never accounted (their field 42 stays
    /// 0), so the node's block-I/O delay is unknown.
    pub(super) unaccounted: u64,
    /// Threads whose block-I/O delay grew by more than the interval: impossible for one thread,
    /// so the node's delay is absent for the interval. Seen once here: a task forked while
    /// delay accounting was being turned on reported a delay equal to the uptime (a wait
    /// whose start the kernel never recorded).
    pub(super) implausible: u64,
    /// Network namespaces of the node's processes.
    pub(super) netns: HashSet<u64>,
    /// Socket inodes the node's processes hold.
    pub(super) sockets: HashSet<u64>,
}

/// What every process read of one tick needs to know.
#[derive(Clone, Copy, Debug)]
pub(super) struct TickCtx {
    /// Tick number (marks what was seen).
    pub(super) tick: u64,
    /// Boot-time clock ticks of the previous tick (`None` on the first).
    pub(super) prev_boot_ticks: Option<u64>,
    /// Boot-time clock ticks of the collector's first tick (`None` on the first).
    pub(super) first_boot_ticks: Option<u64>,
    /// Boot-time clock ticks since which new tasks have delay accounting.
    pub(super) delay_since: Option<u64>,
    /// The interval's span in clock ticks.
    pub(super) span_ticks: f64,
    /// Boot-time clock ticks now.
    pub(super) boot_ticks: u64,
}

/// True when a task that started at `start` (clock ticks after boot) began at or after `since`
/// (a tick's boot-time clock ticks): all of its counters are new. Older tasks seen for the
/// first time (a process that joined the node, or one found at the first tick) only set a
/// baseline.
pub(super) fn born_since(start: u64, since: Option<u64>) -> bool {
    since.is_some_and(|p| start >= p)
}

impl Procs {
    /// Reads `/proc/PID/task/TID/<file>` (or `/proc/PID/io`) through a kept-open file.
    pub(super) fn read<T>(
        &mut self,
        (pid, tid): (u32, u32),
        file: TaskFile,
        tick: u64,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Option<T> {
        let key = (pid, tid, file);
        let path = || match file {
            TaskFile::Stat => format!("/proc/{pid}/task/{tid}/stat"),
            TaskFile::Schedstat => format!("/proc/{pid}/task/{tid}/schedstat"),
            TaskFile::Io => format!("/proc/{pid}/io"),
        };
        if !self.files.contains_key(&key) && self.files.len() >= MAX_KEPT_FILES {
            // Servers with thousands of threads: do not hold thousands of descriptors.
            return parse(&std::fs::read_to_string(path()).ok()?);
        }
        for attempt in 0..2 {
            if let std::collections::hash_map::Entry::Vacant(slot) = self.files.entry(key) {
                slot.insert((Reread::open(Path::new(&path())).ok()?, tick));
            }
            let (f, seen) = self.files.get_mut(&key).expect("inserted above");
            *seen = tick;
            match f.text() {
                Some(t) if !t.is_empty() => return parse(t),
                // Gone (or reused): once more with a fresh file.
                _ if attempt == 0 => {
                    self.files.remove(&key);
                }
                _ => {}
            }
        }
        self.files.remove(&key);
        None
    }

    /// Reads the node's processes and threads, adding this interval's increments to `sums`.
    pub(super) fn read_node(
        &mut self,
        pids: &[u32],
        cx: &TickCtx,
        want_sockets: bool,
        sums: &mut ProcSums,
    ) {
        let tick = cx.tick;
        let mut fd_dir = String::new();
        for &pid in pids {
            let Some(lead) = self.read((pid, pid), TaskFile::Stat, tick, parse::task_stat) else {
                continue; // gone
            };
            let known = self
                .procs
                .get(&pid)
                .is_some_and(|p| p.start == lead.starttime);
            if !known {
                self.procs.insert(
                    pid,
                    ProcEntry {
                        start: lead.starttime,
                        io: None,
                        netns: None,
                        seen: tick,
                    },
                );
            }
            // A process started after the collector's first tick counts its I/O from its
            // birth, even when it joins the node's list a tick or two late (its fork seen late
            // by a sampler starved on a busy host): a late baseline lost a second of a new
            // writer's bytes. The bytes before the tick it is found in land in that tick.
            let born = !known && born_since(lead.starttime, cx.first_boot_ticks);
            let io = self.read((pid, pid), TaskFile::Io, tick, parse::proc_io);
            let e = self.procs.get_mut(&pid).expect("inserted above");
            e.seen = tick;
            sums.procs += 1;
            if let Some(cur) = io {
                let base = match (e.io, born) {
                    (Some(p), _) if p.0 <= cur.0 && p.1 <= cur.1 => Some(p),
                    (_, true) => Some((0, 0)),
                    _ => None,
                };
                sums.io_read += 1;
                if let Some(b) = base {
                    let s = sums.io.get_or_insert((0, 0));
                    s.0 += cur.0 - b.0;
                    s.1 += cur.1 - b.1;
                }
            }
            e.io = io;
            if e.netns.is_none() {
                e.netns = std::fs::read_link(format!("/proc/{pid}/ns/net"))
                    .ok()
                    .and_then(|l| parse::netns_inode(&l.to_string_lossy()));
            }
            if let Some(ns) = e.netns {
                sums.netns.insert(ns);
            }
            for tid in crate::procs::tasks(pid) {
                self.read_thread((pid, tid), cx, sums);
            }
            if want_sockets {
                fd_dir.clear();
                fd_dir.push_str(&format!("/proc/{pid}/fd"));
                if let Ok(rd) = std::fs::read_dir(&fd_dir) {
                    for f in rd.flatten() {
                        if let Some(ino) = std::fs::read_link(f.path())
                            .ok()
                            .and_then(|l| parse::socket_inode(l.to_str()?))
                        {
                            sums.sockets.insert(ino);
                        }
                    }
                }
            }
        }
    }

    pub(super) fn read_thread(
        &mut self,
        (pid, tid): (u32, u32),
        cx: &TickCtx,
        sums: &mut ProcSums,
    ) {
        let (tick, prev_boot_ticks) = (cx.tick, cx.prev_boot_ticks);
        let (delay_since, span_ticks) = (cx.delay_since, cx.span_ticks);
        let Some(st) = self.read((pid, tid), TaskFile::Stat, cx.tick, parse::task_stat) else {
            return;
        };
        let sched = self.read((pid, tid), TaskFile::Schedstat, cx.tick, parse::schedstat);
        sums.threads += 1;
        if delay_since.is_some_and(|since| st.starttime < since) {
            sums.unaccounted += 1;
        }
        match st.state {
            b'R' => sums.runnable += 1,
            b'D' => sums.blocked += 1,
            _ => {}
        }
        let known = self.threads.get(&tid).filter(|t| t.start == st.starttime);
        let blocked_since = known.and_then(|t| t.blocked_since);
        let base = match known {
            Some(t) => Some((t.blkio, t.sched)),
            None if born_since(st.starttime, prev_boot_ticks) => Some((0, (0, 0, 0))),
            None => None,
        };
        let sched_now = sched.unwrap_or((0, 0, 0));
        if let Some((b, s)) = base {
            // The kernel credits a block-I/O wait when it ends, whole: a wait that began before
            // the previous read is credited now. It cannot have begun before the thread was
            // last seen out of `D` state, so more than the span, plus the time the thread has
            // been seen blocked and one more span before it, is not a wait of this thread (6.12+ kernels with EEVDF's
            // delayed dequeue sometimes credit a task with seconds per second, even with hours
            // at once — measured: +814,772 ticks in one second). Such a thread's interval is
            // implausible: the node's value is then absent rather than wrong.
            let d = st.blkio_ticks.saturating_sub(b);
            let carried = blocked_since.map_or(0.0, |since| {
                prev_boot_ticks.unwrap_or(since).saturating_sub(since) as f64 + span_ticks
            });
            if d as f64 > span_ticks + carried + 2.0 {
                sums.implausible += 1;
            } else {
                sums.blkio_ticks += d;
            }
            if sched.is_some() {
                sums.sched_read += 1;
                sums.sched.0 += sched_now.0.saturating_sub(s.0);
                sums.sched.1 += sched_now.1.saturating_sub(s.1);
                sums.sched.2 += sched_now.2.saturating_sub(s.2);
            }
        }
        let blocked_since = (st.state == b'D').then(|| blocked_since.unwrap_or(cx.boot_ticks));
        self.threads.insert(
            tid,
            ThreadEntry {
                start: st.starttime,
                blkio: st.blkio_ticks,
                sched: sched_now,
                seen: tick,
                blocked_since,
            },
        );
    }

    pub(super) fn gc(&mut self, tick: u64) {
        self.files.retain(|_, (_, seen)| *seen == tick);
        self.procs.retain(|_, p| p.seen == tick);
        self.threads.retain(|_, t| t.seen == tick);
    }
}

pub(super) fn proc_values(
    s: &ProcSums,
    span: f64,
    ms_per_tick: f64,
    delayacct: bool,
    out: &mut Out,
) {
    out.put(name::PROC_PROCS, None, Some(s.procs as f64));
    if s.procs == 0 {
        return; // no process: nothing of theirs to measure
    }
    out.put(name::PROC_THREADS, None, Some(s.threads as f64));
    out.put(name::PROC_RUNNABLE, None, Some(s.runnable as f64));
    out.put(name::PROC_BLOCKED, None, Some(s.blocked as f64));
    if let Some((r, w)) = s.io {
        out.put(name::PROC_RD_BYTES, None, Some(r as f64 / span));
        out.put(name::PROC_WR_BYTES, None, Some(w as f64 / span));
    }
    if delayacct && s.threads > 0 && s.unaccounted == 0 && s.implausible == 0 {
        out.put(
            name::PROC_BLKIO_DELAY,
            None,
            Some(s.blkio_ticks as f64 * ms_per_tick / span),
        );
    }
    if s.sched_read > 0 {
        out.put(name::PROC_CPU, None, Some(s.sched.0 as f64 / 1e6 / span));
        out.put(
            name::PROC_RUNQ_DELAY,
            None,
            Some(s.sched.1 as f64 / 1e6 / span),
        );
        out.put(name::PROC_CSWCH, None, Some(s.sched.2 as f64 / span));
    }
}
