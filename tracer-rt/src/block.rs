//! Per-thread profile tables and the hot path of the hooks.
//!
//! Each thread that calls an instrumented function gets one [`ThreadBlock`]: a shadow stack of
//! open calls and an open-addressing hash table from function address to [`Slot`]. Blocks live
//! in memory the runtime maps itself (never `malloc`) and are never unmapped; an exiting
//! thread hands its counts over and frees its block for the next new thread at once, and the
//! flusher gives the memory of blocks that stay free back to the kernel (see `pool`).
//!
//! # Who writes what
//!
//! Every field is an atomic, so sharing a block between its thread and the flusher is sound
//! without `unsafe`. The counters of a slot (`calls`, `excl`, `incl`) are *cumulative* and
//! written only by the owning thread with plain relaxed load + store (a `mov`, no locked
//! instruction). The flusher reads them with relaxed loads and keeps its own baselines
//! (`base_*`, written only by the flusher) to compute per-interval deltas. The stack, the
//! nesting counters and `active` are touched by the owning thread only.
//!
//! # Semantics (seed 000, §"Function-call tracing")
//!
//! On entry the function and its entry time are pushed. On exit: `calls += 1`; exclusive time
//! = elapsed − time of called functions (wall clock, so time blocked in system calls counts);
//! the elapsed time is added to the parent frame's child time. Inclusive time is added only when
//! the outermost activation of a function returns (`active` counts activations), so recursion
//! is counted once. A call is accounted when it returns: a function still running at the end of
//! an interval shows up in the interval in which it returns.
//!
//! # Signals and re-entrancy
//!
//! `flags` holds, while a hook runs, that hook's stack pointer (the busy mark), and a pause
//! bit. A hook that finds it non-zero returns at once: this covers a signal handler
//! interrupting a hook (the handler's calls are not traced, and counted as `dropped`, so none
//! is lost silently), a hook firing inside the runtime itself, and `culprit_pause()`. A signal handler that runs while the thread is in
//! instrumented code (not inside a hook) is traced normally: its calls nest on top of the
//! interrupted frame.
//!
//! A handler may leave with `siglongjmp` (a timeout) and abandon the hook it interrupted. The
//! busy mark would then stay forever and the thread go untraced; the stack pointer in it tells
//! a stale mark from a live one: a handler nested in a live hook runs below it on the stack,
//! code that runs at or above the abandoned hook's stack pointer cannot be inside it (unless
//! it runs on an alternate signal stack, which is checked).
//!
//! # Abandoned frames
//!
//! Every frame also keeps the stack pointer of its entry. A function entered at or above the
//! stack pointer of the top frame cannot be called by it: the top frame was left by `longjmp`
//! (a server loop that longjmps back on errors never returns to its caller, so nothing else
//! would ever remove those frames, and the shadow stack would fill up). Such frames are
//! dropped on entry, as a mismatched exit drops them, and counted as lost.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{compiler_fence, AtomicU16, AtomicU32, AtomicU64, AtomicUsize};

use crate::clock::{self, Monotonic, Ticks, Tsc};
use crate::decide::{self, decision};

/// Deepest shadow stack; deeper calls are counted as overflows and not traced. A power of two
/// (the fast path masks indices with it).
pub const STACK_DEPTH: usize = 1024;
const _: () = assert!(STACK_DEPTH.is_power_of_two());
/// Most frames sharing one stack pointer that can be live (see [`ThreadBlock::compact`]).
const MAX_RUN: usize = 128;
/// Compactions skipped after one that freed nothing.
const COMPACT_BACKOFF: u32 = 1024;
const TABLE_BITS: u32 = 12;
/// Function slots per thread.
pub const TABLE_CAP: usize = 1 << TABLE_BITS;
const TABLE_MASK: usize = TABLE_CAP - 1;
/// Slots a thread may fill before new functions count as overflows (keeps probe chains short).
pub const TABLE_MAX_USED: u32 = (TABLE_CAP * 7 / 8) as u32;

/// Lifecycle of a block (`ThreadBlock::state`).
pub mod state {
    /// Not owned by any thread: may be claimed.
    pub const FREE: u32 = 0;
    /// Owned by a running thread.
    pub const LIVE: u32 = 1;
    /// Its thread exited without handing its counts over (see `pool`); the flusher takes the
    /// last counts, then frees it.
    pub const DEAD: u32 = 2;
    /// Free, and its memory being given back by the flusher: not claimable meanwhile.
    pub const RELEASING: u32 = 3;
}

/// `flags`: this thread's hooks read `CLOCK_MONOTONIC` instead of the TSC. Folded into `flags`
/// so that the TSC fast path tests one word.
const MONO: usize = 1;
/// `flags`: `culprit_pause()` is in effect (`pauses` counts the nesting).
const PAUSED: usize = 2;
/// `flags` bits that are not the busy mark. The busy mark is the running hook's stack pointer
/// (8-aligned, so these bits are free; non-zero, so it marks busy by itself).
const LOW_BITS: usize = 7;

/// One function's counters in one thread (one cache line).
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Slot {
    /// Function address; 0 = empty. Written once by the owner (release).
    pub addr: AtomicUsize,
    calls: AtomicU64,
    excl: AtomicU64,
    incl: AtomicU64,
    base_calls: AtomicU64,
    base_excl: AtomicU64,
    base_incl: AtomicU64,
    active: AtomicU32,
    decision: AtomicU32,
}

#[derive(Debug)]
#[repr(C)]
struct Frame {
    addr: AtomicUsize,
    /// Entry timestamp (ticks); 0 for a frame that is not counted (excluded function, or
    /// the function table was full).
    t: AtomicU64,
    /// Elapsed ticks of completed children.
    child: AtomicU64,
    /// Stack pointer of the entry hook (`usize::MAX` for the sentinel).
    sp: AtomicUsize,
    /// Slot index of a counted frame.
    slot: AtomicU32,
    _pad: u32,
}

/// One thread's profile table and shadow stack. All-zero bytes are a valid empty block, so a
/// fresh anonymous mapping is one.
#[derive(Debug)]
#[repr(C, align(4096))]
pub struct ThreadBlock {
    /// [`state`] value.
    pub state: AtomicU32,
    /// Frames on the stack, counting the sentinel at index 0; above [`STACK_DEPTH`], the calls
    /// not pushed because the stack was full (their exits are skipped likewise).
    depth: AtomicU32,
    /// `MONO` | `PAUSED` | the busy mark (see the module docs).
    flags: AtomicUsize,
    /// Nesting of `culprit_pause()`.
    pauses: AtomicU32,
    _pad0: u32,
    /// Stack pointer of the first call not pushed because the stack was full.
    overflow_sp: AtomicUsize,
    /// Compactions to skip (see [`ThreadBlock::compact`]).
    compact_skip: AtomicU32,
    _pad2: u32,
    /// Times the block was claimed by a thread (the flusher tells idle free blocks by it).
    pub claims: AtomicU32,
    _pad3: u32,
    lost: AtomicU64,
    overflows: AtomicU64,
    /// Calls of a signal handler that interrupted a hook (see the module docs).
    dropped: AtomicU64,
    base_lost: AtomicU64,
    base_overflows: AtomicU64,
    base_dropped: AtomicU64,
    nused: AtomicU32,
    _pad1: u32,
    used: [AtomicU16; TABLE_CAP],
    stack: [Frame; STACK_DEPTH],
    table: [Slot; TABLE_CAP],
}

/// A block's per-interval counters of calls it could not account.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unaccounted {
    /// Frames dropped recovering from mismatched exits, abandoned frames.
    pub lost: u64,
    /// Calls refused for lack of room (stack or table full).
    pub overflows: u64,
    /// Calls not traced: a signal handler's, made while a hook ran.
    pub dropped: u64,
}

impl std::ops::AddAssign for Unaccounted {
    fn add_assign(&mut self, o: Unaccounted) {
        self.lost += o.lost;
        self.overflows += o.overflows;
        self.dropped += o.dropped;
    }
}

/// Per-interval counters of one function, in ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// Calls that returned.
    pub calls: u64,
    /// Exclusive ticks.
    pub excl: u64,
    /// Inclusive ticks.
    pub incl: u64,
}

#[inline(always)]
fn hash(addr: usize) -> usize {
    ((addr as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - TABLE_BITS)) as usize
}

#[inline(always)]
fn bump(a: &AtomicU64, by: u64) {
    a.store(a.load(Relaxed).wrapping_add(by), Relaxed);
}

impl ThreadBlock {
    /// Hook on function entry (owner thread only).
    ///
    /// The fast path is a traced function already in the table at its home slot, with room
    /// on the stack, using the TSC; everything else is a tail call to a cold function.
    /// `sp` is the hook's stack pointer ([`crate::sys::stack_pointer`]).
    #[inline(always)]
    pub fn enter(&self, addr: usize, sp: usize) {
        if self.flags.load(Relaxed) != 0 {
            return self.enter_flagged(addr, sp);
        }
        self.flags.store(sp, Relaxed);
        compiler_fence(SeqCst);
        let d = self.depth.load(Relaxed) as usize;
        let i = hash(addr);
        let s = &self.table[i];
        // 1 ≤ d < STACK_DEPTH, and the top frame can be our caller (it runs at or above us;
        // at the same stack pointer when we are inlined into it).
        if d.wrapping_sub(1) < STACK_DEPTH - 1
            && self.stack[d - 1].sp.load(Relaxed) >= sp
            && s.addr.load(Relaxed) == addr
            && s.decision.load(Relaxed) & decision::MASK == decision::INCLUDE
        {
            // (The mask is a no-op here, d < STACK_DEPTH; it spares a bounds check.)
            let f = &self.stack[d & (STACK_DEPTH - 1)];
            f.addr.store(addr, Relaxed);
            f.child.store(0, Relaxed);
            f.sp.store(sp, Relaxed);
            f.slot.store(i as u32, Relaxed);
            s.active
                .store(s.active.load(Relaxed).wrapping_add(1), Relaxed);
            f.t.store(Tsc::now(), Relaxed);
            self.depth.store(d as u32 + 1, Relaxed);
            compiler_fence(SeqCst);
            self.flags.store(0, Relaxed);
            return;
        }
        self.enter_general::<Tsc>(addr, 0, sp)
    }

    /// Hook on function exit (owner thread only). Fast path: the top frame is this function's
    /// and counted, with the TSC.
    #[inline(always)]
    pub fn exit(&self, addr: usize, sp: usize) {
        if self.flags.load(Relaxed) != 0 {
            return self.exit_flagged(addr, sp);
        }
        self.flags.store(sp, Relaxed);
        compiler_fence(SeqCst);
        let d = self.depth.load(Relaxed) as usize;
        if d.wrapping_sub(2) < STACK_DEPTH - 1 {
            let f = &self.stack[d - 1];
            let t = f.t.load(Relaxed);
            if f.addr.load(Relaxed) == addr && t != 0 {
                let elapsed = Tsc::now().wrapping_sub(t);
                self.account(f, elapsed);
                self.depth.store(d as u32 - 1, Relaxed);
                bump(&self.stack[d - 2].child, elapsed);
                compiler_fence(SeqCst);
                self.flags.store(0, Relaxed);
                return;
            }
        }
        self.exit_general::<Tsc>(addr, 0, sp)
    }

    /// Adds a returning counted frame's call to its slot.
    #[inline(always)]
    fn account(&self, f: &Frame, elapsed: u64) {
        let s = &self.table[f.slot.load(Relaxed) as usize & TABLE_MASK];
        bump(&s.excl, elapsed.saturating_sub(f.child.load(Relaxed)));
        // After the exclusive time, with release (a plain store on x86): a taker that sees
        // neither the call count nor the inclusive time move may skip the slot
        // (`take_deltas`).
        s.calls
            .store(s.calls.load(Relaxed).wrapping_add(1), Release);
        let a = s.active.load(Relaxed).wrapping_sub(1);
        s.active.store(a, Relaxed);
        if a == 0 {
            bump(&s.incl, elapsed);
        }
    }

    /// Entry with `flags` set: busy or paused (nothing to do), or the monotonic clock.
    #[cold]
    #[inline(never)]
    fn enter_flagged(&self, addr: usize, sp: usize) {
        match self.idle_flags(sp) {
            Some(0) => self.enter_general::<Tsc>(addr, 0, sp),
            Some(MONO) => self.enter_general::<Monotonic>(addr, MONO, sp),
            // Paused: not traced on purpose.
            Some(_) => {}
            // A signal handler's call while a hook runs. One locked add: a handler nested in
            // this one cannot tear it.
            None => {
                self.dropped.fetch_add(1, Relaxed);
            }
        }
    }

    #[cold]
    #[inline(never)]
    fn exit_flagged(&self, addr: usize, sp: usize) {
        match self.idle_flags(sp) {
            Some(0) => self.exit_general::<Tsc>(addr, 0, sp),
            Some(MONO) => self.exit_general::<Monotonic>(addr, MONO, sp),
            _ => {}
        }
    }

    /// The thread's idle `flags`, or `None` when a hook is running in this thread (this hook
    /// is then inside a signal handler that interrupted it, and must do nothing). A busy mark
    /// left by a hook that a handler abandoned with `siglongjmp` is cleared (see the module
    /// docs) and counted as a lost frame.
    fn idle_flags(&self, sp: usize) -> Option<usize> {
        let f = self.flags.load(Relaxed);
        let busy = f & !LOW_BITS;
        if busy == 0 {
            return Some(f);
        }
        // Live: we run below it on the same stack, or on an alternate signal stack.
        if sp < busy || crate::sys::on_alt_stack() {
            return None;
        }
        self.flags.store(f & LOW_BITS, Relaxed);
        bump(&self.lost, 1);
        Some(f & LOW_BITS)
    }

    /// Drops the frames a call entered at `sp` cannot be called by, those that ran below it
    /// on the stack: `d` frames are open. Returns the new depth.
    ///
    /// A frame at the same stack pointer is kept: inlined functions call the hooks from their
    /// caller's stack frame, so the frames of one stack frame share a stack pointer, and a
    /// sibling of an abandoned frame cannot be told from a function inlined into it. Such
    /// leftovers are trimmed when the stack fills up ([`Self::compact`]).
    fn drop_abandoned(&self, d: usize, sp: usize) -> usize {
        let mut keep = d;
        if d > STACK_DEPTH {
            // Calls not pushed (the stack was full). All are abandoned when we run above the
            // first of them; otherwise we may be inside them.
            if sp <= self.overflow_sp.load(Relaxed) {
                return d;
            }
            keep = STACK_DEPTH;
        }
        while keep > 1 && self.stack[keep - 1].sp.load(Relaxed) < sp {
            keep -= 1;
        }
        if keep == d || crate::sys::on_alt_stack() {
            // Nothing to drop, or a handler on an alternate stack: its stack pointer says
            // nothing about the interrupted frames.
            return d;
        }
        if d > STACK_DEPTH {
            bump(&self.lost, (d - STACK_DEPTH) as u64);
        }
        self.abandon(keep, d.min(STACK_DEPTH));
        keep
    }

    /// Every entry off the fast path. `base` is the thread's idle `flags` value.
    #[inline(never)]
    fn enter_general<C: Ticks>(&self, addr: usize, base: usize, sp: usize) {
        self.flags.store(base | (sp & !LOW_BITS), Relaxed);
        compiler_fence(SeqCst);
        let mut d = self.drop_abandoned(self.depth.load(Relaxed) as usize, sp);
        if d == STACK_DEPTH {
            d = self.compact();
        }
        if d < STACK_DEPTH {
            let f = &self.stack[d];
            f.addr.store(addr, Relaxed);
            f.child.store(0, Relaxed);
            f.sp.store(sp, Relaxed);
            match self.slot_for(addr) {
                Some(i) => {
                    let s = &self.table[i];
                    f.slot.store(i as u32, Relaxed);
                    s.active
                        .store(s.active.load(Relaxed).wrapping_add(1), Relaxed);
                    f.t.store(C::now().max(1), Relaxed);
                }
                None => f.t.store(0, Relaxed),
            }
        } else {
            if d == STACK_DEPTH {
                self.overflow_sp.store(sp, Relaxed);
            }
            bump(&self.overflows, 1);
        }
        self.depth.store(d as u32 + 1, Relaxed);
        compiler_fence(SeqCst);
        self.flags.store(base, Relaxed);
    }

    /// Every exit off the fast path: calls that were not pushed (stack full), frames that are
    /// not counted (excluded), exits that do not match the top of the stack.
    #[inline(never)]
    fn exit_general<C: Ticks>(&self, addr: usize, base: usize, sp: usize) {
        self.flags.store(base | (sp & !LOW_BITS), Relaxed);
        compiler_fence(SeqCst);
        let d = self.depth.load(Relaxed) as usize;
        if d > STACK_DEPTH {
            self.depth.store(d as u32 - 1, Relaxed);
        } else if d >= 2 && self.stack[d - 1].addr.load(Relaxed) == addr {
            self.pop::<C>(d - 1);
        } else {
            self.exit_mismatch::<C>(addr, d);
        }
        compiler_fence(SeqCst);
        self.flags.store(base, Relaxed);
    }

    /// Pops frame `top` (≥ 1) as returning now.
    fn pop<C: Ticks>(&self, top: usize) {
        let f = &self.stack[top];
        let t = f.t.load(Relaxed);
        let carry = if t != 0 {
            let elapsed = C::now().wrapping_sub(t);
            self.account(f, elapsed);
            elapsed
        } else {
            // Not counted (excluded): behaves as if not instrumented, so its counted children's
            // time passes to the parent and its own time stays in the parent's exclusive time.
            f.child.load(Relaxed)
        };
        self.depth.store(top as u32, Relaxed);
        bump(&self.stack[top - 1].child, carry);
    }

    /// An exit that does not match the top of the stack (longjmp, exceptions, cancellation,
    /// or a function entered before tracing started). If the function is open further down,
    /// the frames above it are dropped — they record no call and no time; their completed
    /// children's time passes down, so their own time ends up in the matching frame's
    /// exclusive time — and counted as lost. Otherwise the exit is ignored and counted as lost.
    fn exit_mismatch<C: Ticks>(&self, addr: usize, d: usize) {
        let d = d.min(STACK_DEPTH);
        let Some(i) = (1..d)
            .rev()
            .find(|&i| self.stack[i].addr.load(Relaxed) == addr)
        else {
            bump(&self.lost, 1);
            return;
        };
        self.abandon(i + 1, d);
        self.pop::<C>(i);
    }

    /// The stack is full: trims runs of frames sharing one stack pointer to their newest
    /// [`MAX_RUN`] (more cannot be live: they would be functions inlined into one another that
    /// deep), dropping the older ones as abandoned (see [`Self::drop_abandoned`]). Returns the
    /// new depth. A compaction that frees nothing makes the next [`COMPACT_BACKOFF`] ones
    /// skipped, so a recursion that hovers at the limit does not scan the stack at every call.
    #[cold]
    fn compact(&self) -> usize {
        let skip = self.compact_skip.load(Relaxed);
        if skip > 0 {
            self.compact_skip.store(skip - 1, Relaxed);
            return STACK_DEPTH;
        }
        let (mut w, mut r) = (1usize, 1usize);
        while r < STACK_DEPTH {
            let sp = self.stack[r].sp.load(Relaxed);
            let mut e = r + 1;
            while e < STACK_DEPTH && self.stack[e].sp.load(Relaxed) == sp {
                e += 1;
            }
            let dropped = (e - r).saturating_sub(MAX_RUN);
            for j in r..r + dropped {
                let f = &self.stack[j];
                self.release_slot(f);
                bump(&self.stack[w - 1].child, f.child.load(Relaxed));
                bump(&self.lost, 1);
            }
            for j in r + dropped..e {
                if j != w {
                    let (from, to) = (&self.stack[j], &self.stack[w]);
                    to.addr.store(from.addr.load(Relaxed), Relaxed);
                    to.t.store(from.t.load(Relaxed), Relaxed);
                    to.child.store(from.child.load(Relaxed), Relaxed);
                    to.sp.store(from.sp.load(Relaxed), Relaxed);
                    to.slot.store(from.slot.load(Relaxed), Relaxed);
                }
                w += 1;
            }
            r = e;
        }
        if w == STACK_DEPTH {
            self.compact_skip.store(COMPACT_BACKOFF, Relaxed);
        }
        self.depth.store(w as u32, Relaxed);
        w
    }

    /// A counted frame that will not return: one activation less of its function.
    fn release_slot(&self, f: &Frame) {
        if f.t.load(Relaxed) != 0 {
            let s = &self.table[f.slot.load(Relaxed) as usize & TABLE_MASK];
            s.active
                .store(s.active.load(Relaxed).saturating_sub(1), Relaxed);
        }
    }

    /// Drops frames `keep..d` (1 ≤ keep ≤ d ≤ STACK_DEPTH) as abandoned: they record no
    /// call; their completed children's time passes down, so their own time ends up in the
    /// exclusive time of the frame below. Counted as lost.
    fn abandon(&self, keep: usize, d: usize) {
        for j in (keep.max(1)..d.min(STACK_DEPTH)).rev() {
            let f = &self.stack[j];
            self.release_slot(f);
            bump(&self.stack[j - 1].child, f.child.load(Relaxed));
            bump(&self.lost, 1);
        }
        self.depth.store(keep as u32, Relaxed);
    }

    /// The slot of `addr` for a traced call; `None` when the call is not counted (excluded,
    /// or the table is full).
    fn slot_for(&self, addr: usize) -> Option<usize> {
        let mut i = hash(addr);
        loop {
            let s = &self.table[i];
            let k = s.addr.load(Relaxed);
            if k == addr {
                let d = s.decision.load(Relaxed);
                if d & decision::MASK == decision::INCLUDE {
                    return Some(i);
                }
                return self.redecide(i, d);
            }
            if k == 0 {
                return self.insert(i, addr);
            }
            i = (i + 1) & TABLE_MASK;
        }
    }

    fn redecide(&self, i: usize, d: u32) -> Option<usize> {
        let s = &self.table[i];
        let d = if d & decision::PROVISIONAL != 0 && d >> 2 != decide::generation() {
            let nd = decide::decide(s.addr.load(Relaxed));
            s.decision.store(nd, Relaxed);
            nd
        } else {
            d
        };
        (d & decision::EXCLUDE == 0).then_some(i)
    }

    fn insert(&self, i: usize, addr: usize) -> Option<usize> {
        let n = self.nused.load(Relaxed);
        if n >= TABLE_MAX_USED {
            bump(&self.overflows, 1);
            return None;
        }
        let s = &self.table[i];
        let d = decide::decide(addr);
        s.decision.store(d, Relaxed);
        s.active.store(0, Relaxed);
        s.addr.store(addr, Release);
        self.used[n as usize & TABLE_MASK].store(i as u16, Relaxed);
        self.nused.store(n + 1, Release);
        (d & decision::EXCLUDE == 0).then_some(i)
    }

    /// `culprit_pause()`: stop tracing this thread (nests).
    pub fn pause(&self) {
        self.pauses
            .store(self.pauses.load(Relaxed).wrapping_add(1), Relaxed);
        self.flags.store(self.flags.load(Relaxed) | PAUSED, Relaxed);
    }

    /// `culprit_resume()`: undo one [`pause`](Self::pause). Returns false when not paused.
    pub fn resume(&self) -> bool {
        let n = self.pauses.load(Relaxed);
        if n == 0 {
            return false;
        }
        self.pauses.store(n - 1, Relaxed);
        if n == 1 {
            self.flags
                .store(self.flags.load(Relaxed) & !PAUSED, Relaxed);
        }
        true
    }

    /// Prepares a claimed block for a new owner thread: empty stack, nothing paused. Its
    /// table keeps its functions and cumulative counters (the flusher's baselines match them).
    pub fn reset_for_owner(&self) {
        let base = if clock::uses_tsc() { 0 } else { MONO };
        self.flags.store(base, Relaxed);
        self.pauses.store(0, Relaxed);
        // Index 0 is a sentinel root frame, so every real frame has a parent to pass time to;
        // it is above every stack pointer, so never abandoned.
        self.stack[0].sp.store(usize::MAX, Relaxed);
        self.depth.store(1, Relaxed);
        for s in self.used_slots() {
            s.active.store(0, Relaxed);
        }
    }

    fn used_slots(&self) -> impl Iterator<Item = &Slot> + '_ {
        let n = self.nused.load(Acquire).min(TABLE_MAX_USED) as usize;
        self.used[..n]
            .iter()
            .map(|u| &self.table[u.load(Relaxed) as usize & TABLE_MASK])
            .filter(|s| s.addr.load(Acquire) != 0)
    }

    /// Functions in the table.
    pub fn used_count(&self) -> u32 {
        self.nused.load(Acquire).min(TABLE_MAX_USED)
    }

    /// Calls `f(addr, delta)` for every function whose counters moved since the last call,
    /// advances the baselines, and returns the unaccounted calls since then. Run by the
    /// flusher, and by the owner thread as it exits: the baselines are swapped atomically, so
    /// when both take at once every delta goes to exactly one of them (the counters no longer
    /// move once the owner exits).
    pub fn take_deltas(&self, mut f: impl FnMut(usize, Delta)) -> Unaccounted {
        for s in self.used_slots() {
            // The exclusive time moves only before the call count (`account`): a slot whose
            // count and inclusive time did not move costs four loads of one cache line.
            let c = s.calls.load(Acquire);
            let i = s.incl.load(Relaxed);
            if c == s.base_calls.load(Relaxed) && i == s.base_incl.load(Relaxed) {
                continue;
            }
            let e = s.excl.load(Relaxed);
            let d = Delta {
                calls: c.wrapping_sub(s.base_calls.swap(c, Relaxed)),
                excl: e.wrapping_sub(s.base_excl.swap(e, Relaxed)),
                incl: i.wrapping_sub(s.base_incl.swap(i, Relaxed)),
            };
            if d != Delta::default() {
                f(s.addr.load(Relaxed), d);
            }
        }
        let take = |c: &AtomicU64, base: &AtomicU64| {
            let v = c.load(Relaxed);
            v.wrapping_sub(base.swap(v, Relaxed))
        };
        Unaccounted {
            lost: take(&self.lost, &self.base_lost),
            overflows: take(&self.overflows, &self.base_overflows),
            dropped: take(&self.dropped, &self.base_dropped),
        }
    }

    /// Forgets counts not yet taken (a forked child must not report its parent's counts).
    pub fn drop_deltas(&self) {
        self.take_deltas(|_, _| {});
    }

    /// Empties a block no thread owns and whose counts are taken (state
    /// [`state::RELEASING`]), as a fresh one: the fields in its first page are reset here; the
    /// caller gives the other pages back to the kernel (they read as zeros). Returns the offset
    /// from which the pages may be discarded.
    pub fn forget_all(&self) -> usize {
        self.nused.store(0, Relaxed);
        for a in [
            &self.lost,
            &self.overflows,
            &self.dropped,
            &self.base_lost,
            &self.base_overflows,
            &self.base_dropped,
        ] {
            a.store(0, Relaxed);
        }
        self.depth.store(0, Relaxed);
        self.flags.store(0, Relaxed);
        self.pauses.store(0, Relaxed);
        self.overflow_sp.store(0, Relaxed);
        self.compact_skip.store(0, Relaxed);
        std::mem::offset_of!(ThreadBlock, used)
    }
}
