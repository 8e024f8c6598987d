//! The intervals the flusher writes: finalizing each that has ended from the ring (and the
//! threads that did not cross), encoding its record with its extras, missed and skipped
//! intervals, layer events, and the stack snapshots.

use super::*;

impl Flusher {
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
    pub(super) fn take_open(&mut self, x: u64) -> Tally {
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
    pub(super) fn peek_open(&self, x: u64) -> Tally {
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
    pub(super) fn take_extras(&mut self) {
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
    pub(super) fn encode_interval(
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
    pub(super) fn write_interval(&mut self, start: u64, flags: u32, t: &Tally, late_ns: u64) {
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
    pub(super) fn close_ended(&mut self, now: u64) {
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

    /// Commits the layer events the threads marked since the last call (see `io`), when there
    /// are any: every 100 ms, so a crash loses at most that much of them.
    pub(super) fn write_layers(&mut self) {
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
}
