//! A sampler's run: the reader thread that drains the rings, and the main loop that decodes,
//! tracks, counts, names and writes.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use culprit_format::procfs;

use crate::engine::{ClockMap, Engine};
use crate::nodes::ProcFacts;
use crate::os::{self, Collector, NodePids, OsInterval, OsStats};
use crate::priority;
use crate::procs::{self, Tracker};
use crate::profile::{Gaps, Intervals, Namer, NamingDeadline, Output};
use crate::sys::{self, PerfFd, Ring};

use super::config::{io_err, Error, FINISH_BUDGET, TICK};
use super::{Sampler, Summary};

impl Sampler {
    pub(super) fn run_inner(self, stop: &AtomicBool) -> Result<Summary, Error> {
        let interval_ns = self.config.interval.as_nanos() as u64;
        let cpu0 = sys::self_cpu_ns();
        let host = procfs::host_name();
        let start_wall = sys::realtime_ns();
        let start_mono = sys::monotonic_ns();
        let info = self.run_info(&host);
        let mut output =
            Output::create(&self.config.data_dir, self.nodes.names(), start_wall, info).map_err(
                io_err(format!("write to {}", self.config.data_dir.display())),
            )?;
        output.set_rotate(self.config.rotate);
        let tracker = Tracker::new(self.nodes.clone(), true);
        let intervals = Intervals::new(
            interval_ns,
            start_wall,
            self.nodes.names().len(),
            self.tps.len(),
        );
        let mut engine = Engine::new(tracker, intervals, measure_clock(), self.tps.clone());
        let mut namer = Namer::default();
        let deadline = self
            .config
            .duration
            .map(|d| start_mono + d.as_nanos() as u64);
        let facts = (self.nodes.needs_cgroups() || self.nodes.needs_netns())
            .then_some((self.nodes.needs_cgroups(), self.nodes.needs_netns()));
        let os_interval = self
            .config
            .os_metrics
            .as_ref()
            .map_or(os::DEFAULT_OS_INTERVAL, |o| o.interval);
        let self_scheduling = self.scheduling.clone();
        let Sampler {
            mut rings,
            mut pid_files,
            tp_fds,
            streams,
            os: collector,
            delayacct: _delayacct, // kept until the run ends, then restored
            ..
        } = self;
        let publish_pids = collector.as_ref().is_some_and(Collector::needs_pids);
        let node_pids: NodePids = NodePids::default();
        let (os_tx, os_rx) = std::sync::mpsc::channel::<OsInterval>();
        let mut os_stats = OsStats::default();

        let (tx, rx) = std::sync::mpsc::channel::<Round>();
        // (record-clock time from which records were not processed, their bytes).
        let mut unprocessed: Option<(u64, u64)> = None;
        let mut reader_cpu_ns = 0u64;
        let abort_flag = AtomicBool::new(false);
        let abort = &abort_flag;
        // The reader borrows the events: they are closed here, after the files are ended.
        let (ring_refs, tp_refs) = (&mut rings, &tp_fds);
        // Set by the reader the moment it sees the run end, even while this thread is naming.
        let naming_deadline = namer.deadline();
        let reader_naming = &*naming_deadline;
        let result = std::thread::scope(|scope| -> Result<(bool, u64), Error> {
            let reader = std::thread::Builder::new()
                .name("culprit-rings".into())
                .spawn_scoped(scope, move || {
                    let ends = Ends {
                        stop,
                        deadline,
                        abort,
                        naming: reader_naming,
                    };
                    read_rings(ring_refs, tp_refs, &tx, &ends, facts);
                    sys::thread_cpu_ns()
                })
                .map_err(io_err("start the ring reader thread"))?;
            // The OS metrics: their own thread and interval; values come back over a channel
            // and are written here, by the one writer of the node files.
            let os_thread = match collector {
                Some(c) => {
                    let pids = &node_pids;
                    let os_tx = os_tx.clone();
                    Some(
                        std::thread::Builder::new()
                            .name("culprit-os".into())
                            .spawn_scoped(scope, move || {
                                priority::raise(priority::OS_COLLECTOR);
                                os::run(c, os_interval, stop, abort, deadline, pids, &os_tx)
                            })
                            .map_err(io_err("start the OS metrics thread"))?,
                    )
                }
                None => None,
            };
            drop(os_tx);
            let mut last_publish = 0u64;
            let mut last_pid_files = 0u64;
            let mut os_write_ns = 0u64;
            // On an error: stop the reader and let it end (it owns the sending side).
            let finish = || {
                abort.store(true, Ordering::SeqCst);
                while rx.recv().is_ok() {}
            };
            // Processes already running: /proc is read after the events are enabled, so nothing
            // falls in between; records older than the snapshot are applied before it.
            let snap_time = match rx.recv() {
                Ok(Round::Enabled(Ok(()))) => sys::monotonic_ns(),
                Ok(Round::Enabled(Err(e))) => {
                    finish();
                    return Err(io_err("enable the perf events")(e));
                }
                _ => {
                    finish();
                    return Err(Error::Config("the ring reader thread ended early".into()));
                }
            };
            engine.set_snapshot(snap_time, procs::scan_proc(facts));
            let mut prev_round = snap_time;
            let mut gaps = Gaps::default();
            // Once the run is to end (a signal, or --duration passed), what is still queued is
            // done within FINISH_BUDGET; past it the rest is not processed, and the intervals
            // it covered are written MISSED: `--duration` is a deadline, and a signal ends the
            // run within a second.
            let mut finish_by: Option<u64> = None;
            let end = loop {
                crate::progress::beat();
                let Ok(msg) = rx.recv() else {
                    break (stop.load(Ordering::SeqCst), sys::monotonic_ns());
                };
                let Round::Data {
                    time: round,
                    bufs,
                    lost,
                    last,
                    facts,
                } = msg
                else {
                    continue;
                };
                let now = sys::monotonic_ns();
                if finish_by.is_none()
                    && (stop.load(Ordering::SeqCst) || deadline.is_some_and(|d| now >= d))
                {
                    finish_by = Some(now + FINISH_BUDGET.as_nanos() as u64);
                    naming_deadline.set(now + FINISH_BUDGET.as_nanos() as u64);
                }
                if finish_by.is_some_and(|f| now > f) {
                    let u = unprocessed.get_or_insert((prev_round, 0));
                    u.1 += bufs.iter().map(|b| b.len() as u64).sum::<u64>();
                    if let Some(end) = last {
                        break end;
                    }
                    continue;
                }
                engine.provide_facts(facts);
                for b in &bufs {
                    engine.ingest(b, &streams);
                }
                if !pid_files.is_empty() && round.saturating_sub(last_pid_files) >= 500_000_000 {
                    // Up to this round first: the trees are as the records left them.
                    engine.process_until(prev_round);
                    for (pid, node) in pid_files.poll() {
                        engine.tracker.adopt_tree(pid, node);
                    }
                    last_pid_files = round;
                }
                if publish_pids && round.saturating_sub(last_publish) >= 200_000_000 {
                    // Up to this round: the tracker has seen every fork, exec and exit before it.
                    engine.process_until(prev_round);
                    if let Ok(mut p) = node_pids.lock() {
                        *p = engine.tracker.node_pids();
                    }
                    last_publish = round;
                }
                while let Ok(o) = os_rx.try_recv() {
                    let t0 = sys::thread_cpu_ns();
                    if let Err(e) = output.write_os(&o) {
                        finish();
                        return Err(io_err("write OS metrics")(e));
                    }
                    os_write_ns += sys::thread_cpu_ns() - t0;
                }
                if let Some(end) = last {
                    break end;
                }
                // The reader did not run for more than an interval (the process was stopped or
                // starved) and a ring overflowed: the intervals inside the gap were not
                // observed. The kernel writes its LOST record only once there is room again,
                // so the evidence may come a round later.
                let stalled = (round.saturating_sub(prev_round) > interval_ns)
                    .then(|| (engine.clock.wall(prev_round), engine.clock.wall(round)));
                for (a, b) in gaps.round(stalled, lost) {
                    engine.intervals.mark_missed(a, b);
                }
                engine.process_until(prev_round);
                let closed = engine.intervals.close_until(engine.clock.wall(prev_round));
                if !closed.is_empty() {
                    forget_replaced(&mut engine, &mut namer, &mut output);
                    for c in &closed {
                        if let Err(e) = output.write(c, &mut namer, &engine.tracker) {
                            finish();
                            return Err(io_err("write a profile")(e));
                        }
                    }
                    engine.tracker.gc(prev_round.saturating_sub(5_000_000_000));
                    engine.clock = measure_clock();
                }
                prev_round = round;
            };
            reader_cpu_ns = reader.join().unwrap_or(0);
            crate::progress::beat();
            // However the loop ended, the OS thread ends too (woken now if it sleeps).
            abort.store(true, Ordering::SeqCst);
            if let Some(t) = os_thread {
                t.thread().unpark();
                if let Ok(st) = t.join() {
                    os_stats = st;
                }
            }
            let t0 = sys::thread_cpu_ns();
            for o in os_rx.try_iter() {
                output.write_os(&o).map_err(io_err("write OS metrics"))?;
            }
            os_stats.write_cpu_ns = os_write_ns + sys::thread_cpu_ns() - t0;
            Ok(end)
        });
        let (stopped, end_mono) = result?;

        if let Some((from, _)) = unprocessed {
            engine.intervals.mark_missed_from(engine.clock.wall(from));
        }
        engine.process_until(u64::MAX);
        let end_wall = match deadline {
            // A run of --duration ends at start + duration exactly.
            Some(d) if !stopped => engine.clock.wall(d.min(end_mono)),
            _ => engine.clock.wall(end_mono),
        };
        forget_replaced(&mut engine, &mut namer, &mut output);
        for c in engine.intervals.close_all(end_wall.max(start_wall + 1)) {
            crate::progress::beat();
            output
                .write(&c, &mut namer, &engine.tracker)
                .map_err(io_err("write a profile"))?;
        }
        let intervals = output.intervals();
        let notes = output.notes().to_vec();
        let nodes = output
            .finish(sys::realtime_ns(), stopped)
            .map_err(io_err("end the profile files"))?;
        // Last, with every file ended: closing the last event of a tracepoint waits for the
        // kernel's grace periods (`crate::progress`), on a busy host the slowest step of the
        // end. The kernel closes them one at a time (under its `event_mutex`): closing them on
        // several threads at once was measured no faster.
        let releasing = crate::progress::releasing();
        for ring in rings {
            drop(ring);
            crate::progress::beat();
        }
        for fd in tp_fds {
            drop(fd);
            crate::progress::beat();
        }
        drop(releasing);
        let cpu1 = sys::self_cpu_ns();
        let s = engine.stats;
        Ok(Summary {
            nodes,
            samples: s.samples,
            lost: s.lost,
            lost_events: s.lost_events,
            lost_tracking: s.lost_tracking,
            events: s.events,
            out_of_scope: s.out_of_scope,
            throttles: s.throttles,
            intervals,
            named: namer.named,
            elapsed_ns: sys::monotonic_ns() - start_mono,
            cpu_ns: (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1),
            stopped,
            tracking: engine.tracker.stats(),
            os: os_stats,
            notes,
            unprocessed_bytes: unprocessed.map_or(0, |u| u.1),
            reader_cpu_ns,
            scheduling: self_scheduling,
        })
    }
}

/// Drops cached names of images whose files were replaced since the last interval.
fn forget_replaced(engine: &mut Engine, namer: &mut Namer, output: &mut Output) {
    let replaced = engine.tracker.take_replaced();
    if !replaced.is_empty() {
        namer.forget(&replaced);
        output.forget_locations();
    }
}

/// What the ring reader thread sends.
enum Round {
    /// The events were enabled (or could not be).
    Enabled(io::Result<()>),
    /// One drain of every ring.
    Data {
        /// Monotonic time the drain started: every record older than the previous round's
        /// time has been read.
        time: u64,
        /// The records, one buffer per ring with data.
        bufs: Vec<Vec<u8>>,
        /// Records were lost (a LOST record, or a ring found nearly full).
        lost: bool,
        /// Set on the last round (events disabled): (stopped by the flag, end time).
        last: Option<(bool, u64)>,
        /// Cgroups / network namespace of the processes that called `exec`, read right after
        /// the drain (only when node rules or the scope need them).
        facts: Vec<(u32, ProcFacts)>,
    },
}

/// What ends a run, as the ring reader sees it.
struct Ends<'a> {
    /// Set by a signal.
    stop: &'a AtomicBool,
    /// The end of `--duration`, CLOCK_MONOTONIC ns.
    deadline: Option<u64>,
    /// Set by the main loop on an error.
    abort: &'a AtomicBool,
    /// Set to [`FINISH_BUDGET`] after the end, once seen: the main thread may be naming a
    /// long interval's locations then, and stops reading images on time.
    naming: &'a NamingDeadline,
}

/// The ring reader: enables the events, drains every ring each tick (or when one is half
/// full), and on stop or deadline disables them, drains once more and says it is the end.
fn read_rings(
    rings: &mut [Ring],
    tp_fds: &[PerfFd],
    tx: &std::sync::mpsc::Sender<Round>,
    ends: &Ends<'_>,
    facts_needed: Option<(bool, bool)>,
) {
    let Ends {
        stop,
        deadline,
        abort,
        naming,
    } = *ends;
    // Draining must not wait behind the work it samples: on a machine whose CPUs are all
    // busy, a reader at the default priority can be kept off a CPU long enough for the rings
    // to fill. It does little work, so it runs ahead of the load, capped (`crate::priority`).
    priority::raise(priority::RING_READER);
    let enabled = rings
        .iter()
        .map(|r| r.fd())
        .chain(tp_fds.iter())
        .try_for_each(PerfFd::enable);
    let ok = enabled.is_ok();
    if tx.send(Round::Enabled(enabled)).is_err() || !ok {
        return;
    }
    let drain =
        |rings: &mut [Ring]| {
            let mut bufs = Vec::new();
            let mut lost = false;
            let mut facts = Vec::new();
            for r in rings.iter_mut() {
                let mut b = Vec::new();
                let n = r.drain(&mut b);
                if n > 0 {
                    lost |= n * 8 >= r.data_size() * 7 || has_lost_record(&b);
                    if let Some((cg, ns)) = facts_needed {
                        facts.extend(exec_pids(&b).filter_map(|pid| {
                            crate::nodes::read_facts(pid, cg, ns).map(|f| (pid, f))
                        }));
                    }
                    bufs.push(b);
                }
            }
            (bufs, lost, facts)
        };
    loop {
        let now = sys::monotonic_ns();
        let mut wait = TICK.as_millis() as u64;
        if let Some(d) = deadline {
            wait = wait.min(d.saturating_sub(now) / 1_000_000);
        }
        sys::poll_rings(rings, wait as i32);
        let time = sys::monotonic_ns();
        let stopped = stop.load(Ordering::SeqCst);
        let done = stopped || deadline.is_some_and(|d| time >= d) || abort.load(Ordering::SeqCst);
        if done {
            naming.set(time + FINISH_BUDGET.as_nanos() as u64);
            for fd in rings.iter().map(|r| r.fd()).chain(tp_fds.iter()) {
                let _ = fd.disable();
            }
            let end = sys::monotonic_ns();
            let (bufs, lost, facts) = drain(rings);
            let _ = tx.send(Round::Data {
                time: end,
                bufs,
                lost,
                last: Some((stopped, end)),
                facts,
            });
            return;
        }
        let (bufs, lost, facts) = drain(rings);
        if tx
            .send(Round::Data {
                time,
                bufs,
                lost,
                last: None,
                facts,
            })
            .is_err()
        {
            return;
        }
    }
}

/// The pids of the COMM records written by `exec` in a buffer of records.
fn exec_pids(buf: &[u8]) -> impl Iterator<Item = u32> + '_ {
    use perf_event_open_sys::bindings as b;
    crate::record::split(buf)
        .filter(|(k, misc, _)| {
            *k == b::PERF_RECORD_COMM && misc & crate::record::MISC_COMM_EXEC != 0
        })
        .filter_map(|(_, _, rec)| Some(u32::from_le_bytes(rec.get(8..12)?.try_into().ok()?)))
}

/// True when a buffer of records holds a LOST or LOST_SAMPLES record.
fn has_lost_record(buf: &[u8]) -> bool {
    use perf_event_open_sys::bindings as b;
    crate::record::split(buf)
        .any(|(k, _, _)| k == b::PERF_RECORD_LOST || k == b::PERF_RECORD_LOST_SAMPLES)
}

/// realtime − monotonic, read between two monotonic reads; the closest of three tries.
fn measure_clock() -> ClockMap {
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..3 {
        let a = sys::monotonic_ns();
        let w = sys::realtime_ns();
        let b = sys::monotonic_ns();
        let offset = w as i64 - (a / 2 + b / 2) as i64;
        if best.is_none_or(|(gap, _)| b - a < gap) {
            best = Some((b - a, offset));
        }
    }
    ClockMap {
        offset: best.map_or(0, |b| b.1),
    }
}
