//! The general path of the hooks: every entry and exit the fast path (`crate::ffi::hooks`)
//! does not handle, the shadow stack and the hash table behind them, calls that do not return,
//! untraced functions and the owner's open request (see the parent module for the semantics).

use super::*;

impl ThreadBlock {
    /// Every entry the fast path does not handle, with this block's owner idle (the caller
    /// marks it busy). `sp` is the hook's stack pointer at its entry. The fast path's case
    /// comes first (in the modes, every call comes here).
    #[inline(always)]
    pub fn enter_general(&self, addr: usize, sp: usize) {
        if crate::demote::generation() != self.demote_gen.load(Relaxed) {
            self.sync_demotions();
        }
        let top = self.top.load(Relaxed);
        if (hot::STACK..=hot::LAST_PUSH).contains(&top) && self.over.load(Relaxed) == 0 {
            let i = (top - hot::STACK) / hot::FRAME;
            let h = home(addr);
            if self.stack[i].sp.load(Relaxed) >= sp && self.table[h].addr.load(Relaxed) == addr {
                return self.push(i + 1, addr, h, sp);
            }
        }
        self.enter_rare(addr, sp)
    }

    /// Pushes a frame of `addr` at index `i`, counted in `slot` (or [`NO_SLOT`]).
    #[inline(always)]
    fn push(&self, i: usize, addr: usize, slot: usize, sp: usize) {
        let f = &self.stack[i];
        f.addr.store(addr, Relaxed);
        f.sp.store(sp, Relaxed);
        if slot != NO_SLOT {
            let s = &self.table[slot];
            s.active
                .store(s.active.load(Relaxed).wrapping_add(1), Relaxed);
        }
        f.slot.store(slot * 64, Relaxed);
        let t = now();
        f.t.store(t, Relaxed);
        f.tx.store(t, Relaxed);
        self.set_top_index(i);
    }

    #[inline(never)]
    fn enter_rare(&self, addr: usize, sp: usize) {
        let found = self.lookup(addr);
        if let Lookup::Untraced(i) = found {
            // Behaves as if not instrumented: nothing is pushed, its time stays in the
            // caller's self time.
            return self.untraced(i, addr, sys::patch::return_address(sp), true);
        }
        let over = self.over.load(Relaxed);
        if over > 0 {
            if sp <= self.overflow_sp.load(Relaxed) {
                // Inside the calls not pushed: one more.
                self.over.store(over + 1, Relaxed);
                bump(&self.overflows, 1);
                return;
            }
            // We run above the first call not pushed: all of them were abandoned.
            bump(&self.lost, over as u64);
            self.over.store(0, Relaxed);
        }
        let mut i = self.drop_abandoned(self.top_index(), sp);
        if i == STACK_DEPTH - 1 {
            i = self.compact();
        }
        if i == STACK_DEPTH - 1 {
            self.over.store(1, Relaxed);
            self.overflow_sp.store(sp, Relaxed);
            bump(&self.overflows, 1);
            return;
        }
        let slot = match found {
            Lookup::Traced(s) => s,
            _ => NO_SLOT,
        };
        self.push(i + 1, addr, slot, sp);
    }

    /// Every exit the fast path does not handle: calls that were not pushed (stack full),
    /// frames that count nothing (excluded), exits that do not match the top of the stack, and
    /// every exit in a mode. The fast path's case comes first.
    #[inline(always)]
    pub fn exit_general(&self, addr: usize, sp: usize) {
        if crate::demote::generation() != self.demote_gen.load(Relaxed) {
            self.sync_demotions();
        }
        let top = self.top.load(Relaxed);
        if top > hot::STACK && top <= hot::LAST_PUSH + hot::FRAME && self.over.load(Relaxed) == 0 {
            let i = (top - hot::STACK) / hot::FRAME;
            let slot = self.slot_of(&self.stack[i]);
            if slot != NO_SLOT && self.table[slot].addr.load(Relaxed) == addr {
                return self.pop(i, now(), false);
            }
        }
        self.exit_rare(addr, sp)
    }

    #[inline(never)]
    fn exit_rare(&self, addr: usize, sp: usize) {
        if let Some(i) = self.find(addr) {
            if let Lookup::Untraced(i) = self.classify(i) {
                return self.untraced(i, addr, sys::patch::return_address(sp), false);
            }
        }
        let over = self.over.load(Relaxed);
        if over > 0 {
            self.over.store(over - 1, Relaxed);
            return;
        }
        let i = self.top_index();
        if i >= 1 && self.frame_fn(&self.stack[i]) == addr {
            self.pop(i, now(), false);
        } else {
            self.exit_mismatch(addr, i);
        }
    }

    /// Drops the frames a call entered at `sp` cannot be called by, those that ran below it
    /// on the stack: `i` is the top frame. Returns the new top.
    ///
    /// A frame at the same stack pointer is kept: inlined functions call the hooks from their
    /// caller's stack frame, so the frames of one stack frame share a stack pointer, and a
    /// sibling of an abandoned frame cannot be told from a function inlined into it. Such
    /// leftovers are unwound when the stack fills up ([`Self::compact`]).
    fn drop_abandoned(&self, i: usize, sp: usize) -> usize {
        let mut keep = i;
        while keep >= 1 && self.stack[keep].sp.load(Relaxed) < sp {
            keep -= 1;
        }
        if keep == i || sys::on_alt_stack() {
            // Nothing to drop, or a handler on an alternate stack: its stack pointer says
            // nothing about the interrupted frames.
            return i;
        }
        self.unwind(keep, i, now());
        keep
    }

    /// Pops frame `i` (≥ 1, the top) as ending at `now`; `unwound`: it did not return, the
    /// runtime ends it (see the module docs).
    #[inline(always)]
    fn pop(&self, i: usize, now: u64, unwound: bool) {
        let f = &self.stack[i];
        let parent = &self.stack[i - 1];
        let slot = self.slot_of(f);
        if slot == NO_SLOT {
            // Counts nothing (excluded): behaves as if not instrumented, so its counted
            // children's time passes to the parent and its own time stays in the parent's
            // exclusive time.
            let children = f.tx.load(Relaxed).wrapping_sub(f.t.load(Relaxed));
            bump(&parent.tx, children);
        } else {
            self.check_boundary(now);
            let elapsed = now.wrapping_sub(f.t.load(Relaxed));
            let excl = now.wrapping_sub(f.tx.load(Relaxed));
            self.account(slot, elapsed, excl, i, unwound);
            bump(&parent.tx, elapsed);
        }
        self.set_top_index(i - 1);
    }

    /// Adds a call of `slot` that ended (frame `i`) to its counters.
    #[inline(always)]
    fn account(&self, slot: usize, elapsed: u64, excl: u64, i: usize, unwound: bool) {
        let s = &self.table[slot];
        if self.req_on.load(Relaxed) != 0 {
            self.request_call(slot, elapsed, excl, i);
        }
        let divert = self.divert.load(Relaxed);
        if divert == 0 {
            bump(&s.excl, excl);
            if unwound {
                bump(&s.unwound, 1);
            }
            // After the exclusive time, with release: a taker that sees neither the call
            // count nor the inclusive time move may skip the slot (`take_deltas`).
            s.calls
                .store(s.calls.load(Relaxed).wrapping_add(1), Release);
        }
        let a = s.active.load(Relaxed).wrapping_sub(1);
        s.active.store(a, Relaxed);
        let incl = if a == 0 { elapsed } else { 0 };
        if divert != 0 {
            self.account_diverted(s, divert - 1, excl, incl, unwound);
        } else if a == 0 {
            bump(&s.incl, elapsed);
        }
        let m = mode::get();
        if m & (mode::GRAPH | mode::HIST) == 0 {
            return;
        }
        let Some(x) = self.extras.get() else { return };
        if m & mode::HIST != 0 {
            let b = &x.hist[slot][hist_bucket(clock::ticks_to_ns_fast(elapsed))];
            b.store(b.load(Relaxed).wrapping_add(1), Relaxed);
        }
        if m & mode::GRAPH != 0 {
            // The caller is the nearest frame below that counts (excluded functions are
            // transparent); none: the root.
            let caller = (1..i)
                .rev()
                .map(|j| self.slot_of(&self.stack[j]))
                .find(|&s| s != NO_SLOT)
                .unwrap_or(NO_SLOT);
            self.add_edge(x, caller, slot, excl, elapsed);
        }
    }

    #[inline(always)]
    fn add_edge(&self, x: &Extras, caller: usize, callee: usize, excl: u64, elapsed: u64) {
        let key = ((caller << TABLE_BITS | callee) + 1) as u32;
        let mut i = (key.wrapping_mul(0x9E37_79B1) >> (32 - EDGE_BITS)) as usize;
        loop {
            let e = &x.edges[i];
            let k = e.key.load(Relaxed);
            if k == key {
                bump(&e.excl, excl);
                bump(&e.incl, elapsed);
                e.calls
                    .store(e.calls.load(Relaxed).wrapping_add(1), Release);
                return;
            }
            if k == 0 {
                let n = x.nedges.load(Relaxed);
                if n >= EDGE_MAX_USED {
                    bump(&x.edge_drops, 1);
                    return;
                }
                bump(&e.excl, excl);
                bump(&e.incl, elapsed);
                e.calls
                    .store(e.calls.load(Relaxed).wrapping_add(1), Relaxed);
                e.key.store(key, Release);
                x.edge_used[n as usize].store(i as u16, Relaxed);
                x.nedges.store(n + 1, Release);
                return;
            }
            i = (i + 1) & (EDGE_CAP - 1);
        }
    }

    /// An exit that does not match the top of the stack (longjmp, exceptions, cancellation,
    /// or a function entered before tracing started). If the function is open further down,
    /// the frames above it are unwound (they end now) and it returns; otherwise the exit is
    /// ignored and counted as lost.
    fn exit_mismatch(&self, addr: usize, i: usize) {
        let Some(j) = (1..=i)
            .rev()
            .find(|&j| self.frame_fn(&self.stack[j]) == addr)
        else {
            bump(&self.lost, 1);
            return;
        };
        let now = now();
        self.unwind(j, i, now);
        self.pop(j, now, false);
    }

    /// Unwinds frames `keep + 1 ..= i` (their calls end at `now`), leaving `keep` on top.
    fn unwind(&self, keep: usize, i: usize, now: u64) {
        for j in (keep + 1..=i).rev() {
            self.pop(j, now, true);
        }
    }

    /// Unwinds every open frame: the thread exits (`pthread_exit`, cancellation), its open
    /// calls end now.
    pub fn unwind_all(&self) {
        let i = self.top_index();
        if i >= 1 {
            self.unwind(0, i, now());
        }
        self.over.store(0, Relaxed);
    }

    /// The stack is full: unwinds the oldest frames of runs longer than [`MAX_RUN`] that
    /// share one stack pointer (more cannot be live: they would be functions inlined into one
    /// another that deep; see [`Self::drop_abandoned`]). Returns the new top. A compaction
    /// that frees nothing makes the next [`COMPACT_BACKOFF`] ones skipped, so a recursion that
    /// hovers at the limit does not scan the stack at every call.
    #[cold]
    fn compact(&self) -> usize {
        let skip = self.compact_skip.load(Relaxed);
        if skip > 0 {
            self.compact_skip.store(skip - 1, Relaxed);
            return STACK_DEPTH - 1;
        }
        let now = now();
        self.check_boundary(now);
        // Runs are found from the top down; frames above a dropped one move down over it, so
        // unwind the dropped frames (with their children's time) first, then close the gaps.
        let mut keep = vec_free::Marks::default();
        let mut r = 1usize;
        while r < STACK_DEPTH {
            let sp = self.stack[r].sp.load(Relaxed);
            let mut e = r + 1;
            while e < STACK_DEPTH && self.stack[e].sp.load(Relaxed) == sp {
                e += 1;
            }
            let dropped = (e - r).saturating_sub(MAX_RUN);
            for j in r..r + dropped {
                keep.drop(j);
            }
            r = e;
        }
        if keep.is_empty() {
            self.compact_skip.store(COMPACT_BACKOFF, Relaxed);
            return STACK_DEPTH - 1;
        }
        // Account the dropped frames as unwound calls ending now, each passing its time to the
        // frame below it that stays.
        for j in (1..STACK_DEPTH).rev() {
            if !keep.dropped(j) {
                continue;
            }
            let f = &self.stack[j];
            let below = (0..j).rev().find(|&k| !keep.dropped(k)).unwrap_or(0);
            let slot = self.slot_of(f);
            let carry = if slot == NO_SLOT {
                f.tx.load(Relaxed).wrapping_sub(f.t.load(Relaxed))
            } else {
                let elapsed = now.wrapping_sub(f.t.load(Relaxed));
                self.account(slot, elapsed, now.wrapping_sub(f.tx.load(Relaxed)), j, true);
                elapsed
            };
            bump(&self.stack[below].tx, carry);
        }
        let mut w = 1usize;
        for j in 1..STACK_DEPTH {
            if keep.dropped(j) {
                continue;
            }
            if j != w {
                let (from, to) = (&self.stack[j], &self.stack[w]);
                to.addr.store(from.addr.load(Relaxed), Relaxed);
                to.slot.store(from.slot.load(Relaxed), Relaxed);
                to.t.store(from.t.load(Relaxed), Relaxed);
                to.tx.store(from.tx.load(Relaxed), Relaxed);
                to.sp.store(from.sp.load(Relaxed), Relaxed);
            }
            w += 1;
        }
        self.set_top_index(w - 1);
        w - 1
    }

    /// What the table says of `addr` for a call, adding it when new.
    fn lookup(&self, addr: usize) -> Lookup {
        let mut i = home(addr);
        loop {
            let k = self.table[i].addr.load(Relaxed);
            if k & !TAGS == addr {
                return self.classify(i);
            }
            if k == 0 {
                return self.insert(i, addr);
            }
            i = (i + 1) & TABLE_MASK;
        }
    }

    /// The slot of `addr`, if the table has it.
    fn find(&self, addr: usize) -> Option<usize> {
        let mut i = home(addr);
        for _ in 0..TABLE_CAP {
            match self.table[i].addr.load(Relaxed) {
                0 => return None,
                k if k & !TAGS == addr => return Some(i),
                _ => i = (i + 1) & TABLE_MASK,
            }
        }
        None
    }

    /// Whether the function of slot `i` is traced (re-deciding a provisional decision when the
    /// decision table changed).
    fn classify(&self, i: usize) -> Lookup {
        let s = &self.table[i];
        if s.demoted.load(Relaxed) != 0 {
            return Lookup::Untraced(i);
        }
        let d = s.decision.load(Relaxed);
        let d = if d & decision::MASK == decision::INCLUDE {
            d
        } else {
            self.redecide(i, d)
        };
        if d & decision::EXCLUDE == 0 {
            Lookup::Traced(i)
        } else {
            Lookup::Untraced(i)
        }
    }

    fn redecide(&self, i: usize, d: u32) -> u32 {
        let s = &self.table[i];
        if d & decision::PROVISIONAL != 0 && d >> 2 != decide::generation() {
            let nd = decide::decide(s.addr.load(Relaxed) & !TAGS);
            s.decision.store(nd, Relaxed);
            s.addr
                .store(key_of(s.addr.load(Relaxed) & !TAGS, nd), Relaxed);
            nd
        } else {
            d
        }
    }

    fn insert(&self, i: usize, addr: usize) -> Lookup {
        let n = self.nused.load(Relaxed);
        if n >= TABLE_MAX_USED {
            bump(&self.overflows, 1);
            return Lookup::Full;
        }
        let s = &self.table[i];
        let d = decide::decide(addr);
        s.decision.store(d, Relaxed);
        s.active.store(0, Relaxed);
        s.seen.store(0, Relaxed);
        let demoted = crate::demote::state_of(addr) != crate::demote::state::TRACED;
        s.demoted.store(demoted as u32, Relaxed);
        s.fid
            .store(intervals::get().map_or(0, |r| r.func_id(addr)), Relaxed);
        let key = if demoted {
            addr | SLOW_KEY
        } else {
            key_of(addr, d)
        };
        s.addr.store(key, Release);
        self.used[n as usize & TABLE_MASK].store(i as u16, Relaxed);
        self.nused.store(n + 1, Release);
        self.classify(i)
    }

    /// A call of the untraced function of slot `i` on the general path (an entry, or an exit),
    /// which returns to `ret`: its call site is noted for patching (`sys::patch`), a demoted
    /// function's caller is looked at (`crate::demote`), and once [`QUIET_AFTER`] calls were
    /// seen in this thread its key turns quiet — the fast path returns at once for it. An exit
    /// pops the transparent frame of a call it made while it was traced, if that is on top.
    fn untraced(&self, i: usize, addr: usize, ret: usize, entry: bool) {
        let s = &self.table[i];
        let seen = s.seen.load(Relaxed).saturating_add(1);
        s.seen.store(seen, Relaxed);
        let demoted = s.demoted.load(Relaxed) != 0;
        if demoted && entry {
            crate::demote::observe(addr, self.caller(), seen as u64);
        }
        // A provisional exclusion (a name not known yet) may turn into tracing: its calls keep
        // coming here, and its sites are left alone.
        let definitive = demoted || s.decision.load(Relaxed) & decision::PROVISIONAL == 0;
        if definitive {
            sys::patch::note_site(ret, addr);
        }
        if seen >= QUIET_AFTER && definitive {
            s.addr.store(addr | QUIET_KEY, Release);
        }
        if !entry {
            let top = self.top_index();
            let f = &self.stack[top];
            if top >= 1 && self.slot_of(f) == NO_SLOT && f.addr.load(Relaxed) == addr {
                self.pop(top, now(), false);
            }
        }
    }

    /// The function of the nearest frame that counts (0: none, a thread's first call).
    fn caller(&self) -> usize {
        (1..=self.top_index())
            .rev()
            .map(|j| &self.stack[j])
            .find(|f| self.slot_of(f) != NO_SLOT)
            .map_or(0, |f| self.frame_fn(f))
    }

    /// Brings this thread's table up to the process's demotions: a newly demoted function's
    /// key sends its next calls to the general path (which looks at them, then makes it
    /// quiet), and its calls open on the stack become transparent frames (counting nothing,
    /// like an excluded function's), so that none is counted as unwound or lost when its exit
    /// no longer comes. Owner only, in the general path.
    #[cold]
    fn sync_demotions(&self) {
        self.demote_gen.store(crate::demote::generation(), Relaxed);
        let top = self.top_index();
        for i in self.used_indices() {
            let s = &self.table[i];
            let addr = s.addr.load(Relaxed) & !TAGS;
            if s.demoted.load(Relaxed) != 0
                || crate::demote::state_of(addr) == crate::demote::state::TRACED
            {
                continue;
            }
            s.demoted.store(1, Relaxed);
            s.seen.store(0, Relaxed);
            s.addr.store(addr | SLOW_KEY, Release);
            for j in 1..=top {
                let f = &self.stack[j];
                if self.slot_of(f) == i {
                    f.addr.store(addr, Relaxed);
                    f.slot.store(NO_SLOT * 64, Relaxed);
                    s.active
                        .store(s.active.load(Relaxed).wrapping_sub(1), Relaxed);
                }
            }
        }
    }
}

/// The key of `addr` in a slot, given its decision (see [`SLOW_KEY`]).
fn key_of(addr: usize, d: u32) -> usize {
    if d & decision::MASK == decision::INCLUDE {
        addr
    } else {
        addr | SLOW_KEY
    }
}

/// A small set of stack indices without allocating (the general path never allocates).
mod vec_free {
    use super::STACK_DEPTH;

    /// Marks of dropped frames, one bit per stack index.
    #[derive(Default)]
    pub struct Marks {
        bits: [u64; STACK_DEPTH / 64],
        any: bool,
    }

    impl Marks {
        pub fn drop(&mut self, i: usize) {
            self.bits[i / 64] |= 1 << (i % 64);
            self.any = true;
        }

        pub fn dropped(&self, i: usize) -> bool {
            self.bits[i / 64] & (1 << (i % 64)) != 0
        }

        pub fn is_empty(&self) -> bool {
            !self.any
        }
    }
}

/// The open request of a block's owner (`crate::requests`): set and read by the owner only.
impl ThreadBlock {
    /// Opens sampled request `id` at the current stack depth (the caller then sets the
    /// thread-local word to [`Self::idle_word`], which sends every call to the general path).
    pub fn request_open(&self, id: u64) {
        self.req_id.store(id, Relaxed);
        self.req_base.store(self.top_index() as u32, Relaxed);
        self.req_lost.store(0, Relaxed);
        self.req_on.store(1, Relaxed);
    }

    /// Closes the open request if it is `id`: `Some(lost)`, `lost` when some of its calls
    /// could not be recorded; `None` (left open) otherwise.
    pub fn request_close(&self, id: u64) -> Option<bool> {
        if self.req_on.load(Relaxed) == 0 || self.req_id.load(Relaxed) != id {
            return None;
        }
        self.req_on.store(0, Relaxed);
        Some(self.req_lost.load(Relaxed) != 0)
    }

    /// The id of the open sampled request, if any.
    pub fn request_open_id(&self) -> Option<u64> {
        (self.req_on.load(Relaxed) != 0).then(|| self.req_id.load(Relaxed))
    }

    /// A call of `slot` (frame `i`) returned inside the open request: recorded when it was
    /// entered after the request began (above its base frame).
    #[cold]
    fn request_call(&self, slot: usize, elapsed: u64, excl: u64, i: usize) {
        let base = self.req_base.load(Relaxed) as usize;
        if i <= base {
            return;
        }
        let f = &self.stack[i];
        let addr = self.table[slot].addr.load(Relaxed) & !TAGS;
        let kept = crate::io::request_event(crate::io::RequestMark::Call {
            func: addr as u64,
            depth: (i - base).min(u16::MAX as usize) as u16,
            t0: f.t.load(Relaxed),
            incl: elapsed,
            excl,
        });
        if !kept {
            // Its call tree is incomplete: the END says so, and readers leave the part out.
            self.req_lost.store(1, Relaxed);
        }
    }
}
