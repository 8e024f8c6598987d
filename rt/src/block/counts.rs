//! The flusher's side of a block: its counts read as per-interval deltas, its extras (edges,
//! histograms), the calibration's set-up, pauses and resets, and the open calls copied for a
//! stack snapshot.

use super::*;

impl ThreadBlock {
    /// Makes a fresh block the calibration's (`crate::calibrate`): no owner, an interval
    /// that never ends (no crossing), and `addr` at its home slot — traced, or quiet.
    pub fn prepare_calibration(&self, addr: usize, quiet: bool) {
        let f = &self.stack[0];
        f.sp.store(usize::MAX, Relaxed);
        f.slot.store(NO_SLOT * 64, Relaxed);
        self.set_top_index(0);
        self.boundary.store(u64::MAX, Relaxed);
        let s = &self.table[home(addr)];
        s.decision.store(decision::INCLUDE, Relaxed);
        s.addr
            .store(if quiet { addr | QUIET_KEY } else { addr }, Release);
    }

    /// Calls the fast path returned at once for (untraced functions) since the last call
    /// (flusher only).
    pub fn take_quiet(&self) -> u64 {
        let v = self.quiet.load(Relaxed);
        v.wrapping_sub(self.base_quiet.swap(v, Relaxed))
    }

    /// `culprit_pause()`: stop tracing this thread (nests). The caller then sets the
    /// thread-local word to [`Self::idle_word`].
    pub fn pause(&self) {
        self.pauses
            .store(self.pauses.load(Relaxed).wrapping_add(1), Relaxed);
    }

    /// `culprit_resume()`: undo one [`pause`](Self::pause). Returns false when not paused.
    pub fn resume(&self) -> bool {
        let n = self.pauses.load(Relaxed);
        if n == 0 {
            return false;
        }
        self.pauses.store(n - 1, Relaxed);
        true
    }

    /// A signal handler's call while a general-path hook ran (one locked add: a handler
    /// nested in this one cannot tear it).
    pub fn count_dropped(&self) {
        self.dropped.fetch_add(1, Relaxed);
    }

    /// A general-path hook abandoned by a handler that left with `siglongjmp`.
    pub fn count_lost(&self) {
        bump(&self.lost, 1);
    }

    /// Prepares a claimed block for a new owner thread: empty stack, nothing paused, the edge
    /// and histogram tables when a mode needs them (`false` when they cannot be had). Its table
    /// keeps its functions and cumulative counters (the flusher's baselines match them), and
    /// its slots' activation counts are all zero: the previous owner unwound its open frames
    /// as it exited ([`Self::unwind_all`]; after a fork, [`Self::reset_active`]), so a new
    /// thread touches no slot it does not call.
    pub fn reset_for_owner(&self) -> bool {
        self.pauses.store(0, Relaxed);
        self.over.store(0, Relaxed);
        self.req_on.store(0, Relaxed);
        // Index 0 is a sentinel root frame, so every real frame has a parent to pass time to;
        // it is above every stack pointer, so never abandoned, and its slot is never matched.
        let s = &self.stack[0];
        s.sp.store(usize::MAX, Relaxed);
        s.slot.store(NO_SLOT * 64, Relaxed);
        self.set_top_index(0);
        if mode::on(mode::GRAPH | mode::HIST) && self.extras.get().is_none() {
            match sys::alloc_zeroed::<Extras>() {
                Some(x) => self.extras.set(x),
                None => return false,
            }
        }
        true
    }

    /// Zeroes the activation counts of a block whose owner vanished without unwinding (the
    /// other threads of a process that forked).
    pub fn reset_active(&self) {
        for s in self.used_slots() {
            s.active.store(0, Relaxed);
        }
        self.set_top_index(0);
    }

    /// True when the block has edge or histogram tables (its counts are taken by the flusher,
    /// not handed over at thread exit).
    pub fn has_extras(&self) -> bool {
        self.extras.get().is_some()
    }

    fn used_slots(&self) -> impl Iterator<Item = &Slot> + '_ {
        self.used_indices().map(|i| &self.table[i])
    }

    pub(super) fn used_indices(&self) -> impl Iterator<Item = usize> + '_ {
        let n = self.nused.load(Acquire).min(TABLE_MAX_USED) as usize;
        self.used[..n]
            .iter()
            .map(|u| u.load(Relaxed) as usize & TABLE_MASK)
            .filter(|&i| self.table[i].addr.load(Acquire) != 0)
    }

    /// Traced calls of the owner that returned, in all (wrapping; the flusher's stack
    /// snapshots compare it from one to the next to tell a thread that makes progress).
    pub fn returned_calls(&self) -> u64 {
        self.used_indices()
            .map(|i| self.table[i].calls.load(Relaxed))
            .fold(0, u64::wrapping_add)
    }

    /// Functions in the table.
    pub fn used_count(&self) -> u32 {
        self.nused.load(Acquire).min(TABLE_MAX_USED)
    }

    /// Calls `f(addr, fid, delta)` for every function whose counters moved since the last
    /// call (`fid`: its id in the ring of intervals), advances the baselines, and returns the
    /// unaccounted calls since then. The baselines are swapped atomically, so when two take at
    /// once every delta goes to exactly one of them; who may take is decided by `ivs`
    /// (the owner as it crosses or exits, the flusher for an owner that has not crossed).
    pub fn take_deltas(&self, f: impl FnMut(usize, u32, Delta)) -> Unaccounted {
        self.deltas(true, f)
    }

    /// What [`Self::take_deltas`] would take now, leaving it (the flusher's checkpoints).
    pub fn peek_deltas(&self, f: impl FnMut(usize, u32, Delta)) -> Unaccounted {
        self.deltas(false, f)
    }

    fn deltas(&self, take: bool, mut f: impl FnMut(usize, u32, Delta)) -> Unaccounted {
        let base = |b: &AtomicU64, v: u64| {
            if take {
                b.swap(v, Relaxed)
            } else {
                b.load(Relaxed)
            }
        };
        for i in self.used_indices() {
            let (s, b) = (&self.table[i], &self.bases[i]);
            // The exclusive time moves only before the call count (`account`): a slot whose
            // count and inclusive time did not move costs four loads of two cache lines.
            let c = s.calls.load(Acquire);
            let inc = s.incl.load(Relaxed);
            if c == b.calls.load(Relaxed) && inc == b.incl.load(Relaxed) {
                continue;
            }
            let e = s.excl.load(Relaxed);
            let u = s.unwound.load(Relaxed);
            let d = Delta {
                calls: c.wrapping_sub(base(&b.calls, c)),
                excl: e.wrapping_sub(base(&b.excl, e)),
                incl: inc.wrapping_sub(base(&b.incl, inc)),
                unwound: u.wrapping_sub(base(&b.unwound, u)),
            };
            if d != Delta::default() {
                f(s.addr.load(Relaxed) & !TAGS, s.fid.load(Relaxed), d);
            }
        }
        let un = |c: &AtomicU64, b: &AtomicU64| {
            let v = c.load(Relaxed);
            v.wrapping_sub(base(b, v))
        };
        Unaccounted {
            lost: un(&self.lost, &self.base_lost),
            overflows: un(&self.overflows, &self.base_overflows),
            dropped: un(&self.dropped, &self.base_dropped),
        }
    }

    /// Takes the edges and histograms counted since the last call (flusher only):
    /// `edge(caller, callee, delta)` (caller 0: none traced), `hist(addr, counts)`. Returns the
    /// calls whose edge found no room.
    pub fn take_extras(
        &self,
        mut edge: impl FnMut(usize, usize, EdgeDelta),
        mut hist: impl FnMut(usize, &[u64; HIST_BUCKETS]),
    ) -> u64 {
        let Some(x) = self.extras.get() else { return 0 };
        let name = |slot: usize| {
            if slot >= NO_SLOT {
                0
            } else {
                self.table[slot].addr.load(Relaxed) & !TAGS
            }
        };
        let n = x.nedges.load(Acquire).min(EDGE_MAX_USED) as usize;
        for u in &x.edge_used[..n] {
            let e = &x.edges[u.load(Relaxed) as usize & (EDGE_CAP - 1)];
            let k = e.key.load(Acquire);
            if k == 0 {
                continue;
            }
            let c = e.calls.load(Acquire);
            if c == e.base_calls.load(Relaxed) {
                continue;
            }
            let (ex, inc) = (e.excl.load(Relaxed), e.incl.load(Relaxed));
            let d = EdgeDelta {
                calls: c.wrapping_sub(e.base_calls.swap(c, Relaxed)),
                excl: ex.wrapping_sub(e.base_excl.swap(ex, Relaxed)),
                incl: inc.wrapping_sub(e.base_incl.swap(inc, Relaxed)),
            };
            let k = (k - 1) as usize;
            edge(name(k >> TABLE_BITS), name(k & TABLE_MASK), d);
        }
        for i in self.used_indices() {
            let mut counts = [0u64; HIST_BUCKETS];
            let mut any = false;
            for (k, (c, b)) in x.hist[i].iter().zip(&x.hist_base[i]).enumerate() {
                let v = c.load(Relaxed);
                let d = v.wrapping_sub(b.swap(v, Relaxed));
                counts[k] = d as u64;
                any |= d != 0;
            }
            if any {
                hist(name(i), &counts);
            }
        }
        let v = x.edge_drops.load(Relaxed);
        v.wrapping_sub(x.base_edge_drops.swap(v, Relaxed))
    }

    /// Forgets counts not yet taken (a forked child must not report its parent's counts).
    pub fn drop_deltas(&self) {
        self.take_deltas(|_, _, _| {});
        self.take_extras(|_, _, _| {}, |_, _| {});
    }

    /// Empties a block no thread owns and whose counts are taken (state
    /// [`state::RELEASING`]), as a fresh one: the fields in its first page are reset here; the
    /// caller gives the other pages back to the kernel (they read as zeros), and those of its
    /// extras. Returns the offset from which the pages may be discarded.
    pub fn forget_all(&self) -> usize {
        self.nused.store(0, Relaxed);
        for a in [
            &self.lost,
            &self.overflows,
            &self.dropped,
            &self.base_lost,
            &self.base_overflows,
            &self.base_dropped,
            &self.quiet,
            &self.base_quiet,
        ] {
            a.store(0, Relaxed);
        }
        self.demote_gen.store(0, Relaxed);
        self.top.store(0, Relaxed);
        self.boundary.store(0, Relaxed);
        self.ivs.store(0, Relaxed);
        self.divert.store(0, Relaxed);
        self.writing.store(0, Relaxed);
        self.over.store(0, Relaxed);
        self.pauses.store(0, Relaxed);
        self.overflow_sp.store(0, Relaxed);
        self.compact_skip.store(0, Relaxed);
        if let Some(x) = self.extras.get() {
            sys::discard_tail(x, 0);
        }
        std::mem::offset_of!(ThreadBlock, stack)
    }
}

impl ThreadBlock {
    /// Records the owner thread (at claim time, on the general path).
    pub fn set_owner(&self, tid: u32, serial: u32) {
        self.tid.store(tid, Relaxed);
        self.serial.store(serial, Relaxed);
    }

    /// The owner's thread id and serial number.
    pub fn owner(&self) -> (u32, u32) {
        (self.tid.load(Relaxed), self.serial.load(Relaxed))
    }

    /// Copies the owner's innermost open calls into `out` (outermost first), for the
    /// flusher's stack snapshot. The owner goes on meanwhile and the hooks do no extra work for
    /// this: the copy is taken again (up to three times) until the top and every copied
    /// frame's entry time read the same before and after it; a thread whose stack kept changing
    /// is marked `unstable` (it is busy: its innermost frame may be off by a call). A stack that
    /// does not move — a thread blocked or looping in one call — is always copied exactly.
    pub fn open_calls(&self, out: &mut [OpenCall]) -> OpenCalls {
        let mut r = OpenCalls::default();
        for attempt in 0..3 {
            let top = self.top_index();
            let n = top.min(out.len());
            let first = top + 1 - n;
            for (k, j) in (first..=top).enumerate() {
                let f = &self.stack[j];
                out[k] = OpenCall {
                    addr: self.frame_fn(f),
                    t: f.t.load(Acquire),
                };
            }
            let same = self.top_index() == top
                && (first..=top)
                    .enumerate()
                    .all(|(k, j)| self.stack[j].t.load(Acquire) == out[k].t);
            r = OpenCalls {
                depth: top,
                n,
                unstable: !same,
                paused: self.pauses.load(Relaxed) > 0,
                overflow: self.over.load(Relaxed) > 0,
            };
            if same {
                break;
            }
            if attempt < 2 {
                std::hint::spin_loop();
            }
        }
        r
    }
}
