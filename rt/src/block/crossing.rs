//! Crossings: how a block's counts reach the ring of intervals (`crate::intervals`) when its
//! owner passes an interval boundary, or when the flusher moves them for a thread that does not.

use super::*;

/// Crossings: a thread moves its counts into the ring of intervals (`intervals`) at the first
/// accounting past its boundary; the flusher moves those of threads that do not cross.
impl ThreadBlock {
    /// The general path's boundary check (the fast path's is one `cmp` in assembly).
    #[inline(always)]
    pub(super) fn check_boundary(&self, now: u64) {
        if now >= self.boundary.load(Relaxed) {
            self.cross(now);
        }
    }

    /// Starts the interval state of a new owner (at claim time, and in a forked child's
    /// thread): counts from now on belong to the interval now.
    pub fn start_intervals(&self) {
        let now = now();
        let wall = sys::realtime_ns();
        let cur = wall / intervals::interval_ns();
        self.divert.store(0, Relaxed);
        self.writing.store(0, Relaxed);
        self.ivs.store(ivs::pack(cur), Release);
        self.set_boundary(now, wall, cur);
    }

    /// Sets the boundary to the end of interval `iv`, given a (ticks, wall-clock ns) pair
    /// read now. The ticks to go come out a little short (`clock::ns_to_ticks_short`): the
    /// boundary is reached early, never late, despite the ratio's error and a slewing wall
    /// clock; the crossing then finds the interval not over and sets it again, closer.
    fn set_boundary(&self, now: u64, wall: u64, iv: u64) {
        let end = (iv + 1).saturating_mul(intervals::interval_ns());
        let ticks = clock::ns_to_ticks_short(end.saturating_sub(wall));
        self.boundary.store(now.saturating_add(ticks), Relaxed);
    }

    /// The first accounting at or past the boundary: moves the counts since the last crossing
    /// — all of the interval recorded then, since every later exit would have crossed first
    /// — into the ring, then records the interval now and its boundary. Never waits: if the
    /// flusher is moving this block's counts right now, the call being accounted goes
    /// straight into the ring (`divert`) and the next exit tries again.
    #[cold]
    #[inline(never)]
    fn cross(&self, now: u64) {
        let Some(ring) = intervals::get() else {
            self.boundary.store(u64::MAX, Relaxed);
            return;
        };
        let wall = sys::realtime_ns();
        let cur = wall / intervals::interval_ns();
        let v = self.ivs.load(Acquire);
        if v == 0 {
            return self.start_intervals();
        }
        if v & ivs::FLUSHER != 0 {
            self.divert.store(cur + 1, Relaxed);
            return;
        }
        let iv = ivs::interval(v);
        if iv >= cur {
            // Early (the boundary is set a little short), or the flusher moved the counts and
            // the interval on while this thread was idle.
            self.divert.store(0, Relaxed);
            self.set_boundary(now, wall, iv);
            return;
        }
        // `v` may carry a crossing mark of our own, left by a crossing abandoned with
        // `siglongjmp` (see `repair_abandoned`): it is ours to finish.
        if self
            .ivs
            .compare_exchange(v, v | ivs::CROSSING, Acquire, Relaxed)
            .is_err()
        {
            self.divert.store(cur + 1, Relaxed);
            return;
        }
        self.divert.store(0, Relaxed);
        self.hand_over(ring, iv, true);
        self.ivs.store(ivs::pack(cur), Release);
        self.set_boundary(now, wall, cur);
    }

    /// Moves the counts not yet handed over, all of interval `iv`, into the ring (the caller
    /// holds the block's crossing or flusher mark). `owner`: the caller is the owner thread.
    fn hand_over(&self, ring: &'static intervals::Ring, iv: u64, owner: bool) {
        match ring.enter(iv, true) {
            Place::At(e, moved) => {
                if owner {
                    self.writing.store(e.index() + 1, Relaxed);
                }
                let mut calls = 0;
                let un = self.take_deltas(|_, fid, d| {
                    calls += d.calls;
                    e.add(fid, d.calls, d.excl, d.incl, d.unwound);
                });
                e.add_unaccounted(un.lost, un.overflows, un.dropped);
                if moved {
                    e.add_moved(calls);
                }
                e.leave();
                if owner {
                    self.writing.store(0, Relaxed);
                }
            }
            Place::Beyond => {
                let mut calls = 0;
                let un = self.take_deltas(|_, _, d| calls += d.calls);
                intervals::unplaced(calls, un.lost, un.overflows, un.dropped);
            }
        }
    }

    /// A call accounted while the flusher moves this block's counts: straight into the entry
    /// of interval `iv` (the interval now).
    #[cold]
    pub(super) fn account_diverted(&self, s: &Slot, iv: u64, excl: u64, incl: u64, unwound: bool) {
        let Some(ring) = intervals::get() else { return };
        match ring.enter(iv, false) {
            Place::At(e, moved) => {
                self.writing.store(e.index() + 1, Relaxed);
                e.add(s.fid.load(Relaxed), 1, excl, incl, unwound as u64);
                if moved {
                    e.add_moved(1);
                }
                e.leave();
                self.writing.store(0, Relaxed);
            }
            Place::Beyond => intervals::unplaced(1, 0, 0, 0),
        }
    }

    /// The owner exits (its hooks are already off): hands its counts over like a crossing
    /// and counts itself in the interval now. False when the flusher is moving them right
    /// now: the block is then left to it (state `DEAD`).
    pub fn hand_over_at_exit(&self) -> bool {
        let Some(ring) = intervals::get() else {
            return true;
        };
        let v = self.ivs.load(Acquire);
        if v == 0 {
            return true;
        }
        if v & ivs::FLUSHER != 0
            || self
                .ivs
                .compare_exchange(v, v | ivs::CROSSING, Acquire, Relaxed)
                .is_err()
        {
            return false;
        }
        self.hand_over(ring, ivs::interval(v), true);
        if let Place::At(e, _) = ring.enter(intervals::current(), false) {
            e.add_exited();
            e.leave();
        }
        self.ivs.store(0, Release);
        true
    }

    /// The flusher moves the counts of an owner that has not crossed out of interval `x`
    /// (idle, blocked, or gone: a `DEAD` block): `f(addr, fid, delta)` gets them, and the
    /// block's interval becomes `next`. A crossing in flight is waited for until `deadline`
    /// (monotonic ns); the hooks never wait for the flusher (see `cross`).
    pub fn flusher_take(
        &self,
        x: u64,
        next: u64,
        deadline: u64,
        mut f: impl FnMut(usize, u32, Delta),
    ) -> Taken {
        loop {
            let v = self.ivs.load(SeqCst);
            if v == 0 || ivs::interval(v) > x {
                return Taken::Crossed;
            }
            if v & (ivs::CROSSING | ivs::FLUSHER) != 0 {
                if sys::monotonic_ns() >= deadline {
                    return Taken::GaveUp;
                }
                sys::sleep_ns(intervals::WAIT_STEP_NS);
                continue;
            }
            if self
                .ivs
                .compare_exchange(v, v | ivs::FLUSHER, SeqCst, Relaxed)
                .is_err()
            {
                continue;
            }
            let unaccounted = self.take_deltas(&mut f);
            let _ = self
                .ivs
                .compare_exchange(v | ivs::FLUSHER, ivs::pack(next), Release, Relaxed);
            return Taken::Moved {
                late: ivs::interval(v) < x,
                unaccounted,
            };
        }
    }

    /// The flusher frees the block of a thread that exited without handing its counts over
    /// (state `DEAD`): they go into the ring, at their interval. True when there were any
    /// to move (the thread is then counted as exited by the caller).
    pub fn flusher_reap(&self) -> bool {
        let v = self.ivs.load(SeqCst);
        if v == 0 {
            return false;
        }
        let Some(ring) = intervals::get() else {
            return false;
        };
        if v & ivs::CROSSING != 0
            || self
                .ivs
                .compare_exchange(v, v | ivs::FLUSHER, SeqCst, Relaxed)
                .is_err()
        {
            return false;
        }
        self.hand_over(ring, ivs::interval(v), false);
        self.ivs.store(0, Release);
        true
    }

    /// The block has no owner any more (the other threads of a process that forked).
    pub fn forget_owner(&self) {
        self.ivs.store(0, Relaxed);
        self.divert.store(0, Relaxed);
        self.writing.store(0, Relaxed);
    }

    /// True when the owner has not crossed out of interval `x` yet: its pending counts
    /// ([`Self::peek_deltas`]) belong to `x` or earlier.
    pub fn pending_in(&self, x: u64) -> bool {
        let v = self.ivs.load(Acquire);
        v != 0 && ivs::interval(v) <= x
    }

    /// A general-path hook of the owner was abandoned (a signal handler left it with
    /// `siglongjmp`): undoes what a crossing in it may have left — its registration as a
    /// writer in the ring, its crossing mark (the counts not moved yet go at the next
    /// crossing).
    pub fn repair_abandoned(&self) {
        let w = self.writing.swap(0, Relaxed);
        if w != 0 {
            intervals::abandoned_writer(w - 1);
        }
        let v = self.ivs.load(Relaxed);
        if v & ivs::CROSSING != 0 {
            self.ivs.store(v & !ivs::CROSSING, Release);
        }
    }
}
