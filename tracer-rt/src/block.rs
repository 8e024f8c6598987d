//! Per-thread profile tables and the hot path of the hooks.
//!
//! Each thread that calls an instrumented function gets one [`ThreadBlock`]: a shadow stack of
//! open calls and an open-addressing hash table from function address to [`Slot`]. Blocks live
//! in memory the runtime maps itself (never `malloc`), are never freed while the process lives,
//! and are recycled for a new thread only after their thread has exited *and* the flusher has
//! taken their last counts ([`state`]).
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
//! `flags` holds a busy bit and a pause count. A hook that finds it non-zero returns at once:
//! this covers a signal handler interrupting a hook (the handler's calls are not traced), a
//! hook firing inside the runtime itself, and `culprit_pause()`. A signal handler that runs
//! while the thread is in instrumented code (not inside a hook) is traced normally: its calls
//! nest on top of the interrupted frame.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{compiler_fence, AtomicU16, AtomicU32, AtomicU64, AtomicUsize};

use crate::clock::{self, Monotonic, Ticks, Tsc};

/// Deepest shadow stack; deeper calls are counted as overflows and not traced.
pub const STACK_DEPTH: usize = 1024;
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
    /// Its thread exited; the flusher takes the last counts, then frees it.
    pub const DEAD: u32 = 2;
}

/// `flags`: a hook is running in this thread (a hook that finds it set returns at once).
const BUSY: u32 = 1;
/// `flags`: this thread's hooks read `CLOCK_MONOTONIC` instead of the TSC. Folded into `flags`
/// so that the TSC fast path tests one word.
const MONO: u32 = 2;
/// `flags`: one `culprit_pause()` (they nest).
const PAUSE_UNIT: u32 = 4;

/// Include/exclude decision cached in a slot: low two bits, the decision table generation above.
pub mod decision {
    /// Traced.
    pub const INCLUDE: u32 = 0;
    /// Excluded by `CULPRIT_INCLUDE` / `CULPRIT_EXCLUDE`: behaves as if not instrumented.
    pub const EXCLUDE: u32 = 1;
    /// The address had no known symbol when decided: re-decide when the table changes.
    pub const PROVISIONAL: u32 = 2;
    /// Mask of the decision bits.
    pub const MASK: u32 = 3;
}

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
    flags: AtomicU32,
    /// Frames on the stack, counting the sentinel at index 0; above [`STACK_DEPTH`], the calls
    /// not pushed because the stack was full (their exits are skipped likewise).
    depth: AtomicU32,
    _pad0: u32,
    /// Registry link (address of the next block, 0 at the end); set before publication.
    pub next: AtomicUsize,
    lost: AtomicU64,
    overflows: AtomicU64,
    base_lost: AtomicU64,
    base_overflows: AtomicU64,
    nused: AtomicU32,
    _pad1: u32,
    used: [AtomicU16; TABLE_CAP],
    stack: [Frame; STACK_DEPTH],
    table: [Slot; TABLE_CAP],
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
    #[inline(always)]
    pub fn enter(&self, addr: usize) {
        if self.flags.load(Relaxed) != 0 {
            return self.enter_flagged(addr);
        }
        self.flags.store(BUSY, Relaxed);
        compiler_fence(SeqCst);
        let d = self.depth.load(Relaxed) as usize;
        let i = hash(addr);
        let s = &self.table[i];
        if d < STACK_DEPTH
            && s.addr.load(Relaxed) == addr
            && s.decision.load(Relaxed) & decision::MASK == decision::INCLUDE
        {
            let f = &self.stack[d];
            f.addr.store(addr, Relaxed);
            f.child.store(0, Relaxed);
            f.slot.store(i as u32, Relaxed);
            s.active
                .store(s.active.load(Relaxed).wrapping_add(1), Relaxed);
            f.t.store(Tsc::now(), Relaxed);
            self.depth.store(d as u32 + 1, Relaxed);
            compiler_fence(SeqCst);
            self.flags.store(0, Relaxed);
            return;
        }
        self.enter_general::<Tsc>(addr, 0)
    }

    /// Hook on function exit (owner thread only). Fast path: the top frame is this function's
    /// and counted, with the TSC.
    #[inline(always)]
    pub fn exit(&self, addr: usize) {
        if self.flags.load(Relaxed) != 0 {
            return self.exit_flagged(addr);
        }
        self.flags.store(BUSY, Relaxed);
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
        self.exit_general::<Tsc>(addr, 0)
    }

    /// Adds a returning counted frame's call to its slot.
    #[inline(always)]
    fn account(&self, f: &Frame, elapsed: u64) {
        let s = &self.table[f.slot.load(Relaxed) as usize & TABLE_MASK];
        bump(&s.calls, 1);
        bump(&s.excl, elapsed.saturating_sub(f.child.load(Relaxed)));
        let a = s.active.load(Relaxed).wrapping_sub(1);
        s.active.store(a, Relaxed);
        if a == 0 {
            bump(&s.incl, elapsed);
        }
    }

    /// Entry with `flags` set: busy or paused (nothing to do), or the monotonic clock.
    #[cold]
    #[inline(never)]
    fn enter_flagged(&self, addr: usize) {
        if self.flags.load(Relaxed) == MONO {
            self.enter_general::<Monotonic>(addr, MONO);
        }
    }

    #[cold]
    #[inline(never)]
    fn exit_flagged(&self, addr: usize) {
        if self.flags.load(Relaxed) == MONO {
            self.exit_general::<Monotonic>(addr, MONO);
        }
    }

    /// Every entry off the fast path. `base` is the thread's idle `flags` value.
    #[inline(never)]
    fn enter_general<C: Ticks>(&self, addr: usize, base: u32) {
        self.flags.store(base | BUSY, Relaxed);
        compiler_fence(SeqCst);
        let d = self.depth.load(Relaxed) as usize;
        if d < STACK_DEPTH {
            let f = &self.stack[d];
            f.addr.store(addr, Relaxed);
            f.child.store(0, Relaxed);
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
            bump(&self.overflows, 1);
        }
        self.depth.store(d as u32 + 1, Relaxed);
        compiler_fence(SeqCst);
        self.flags.store(base, Relaxed);
    }

    /// Every exit off the fast path: calls that were not pushed (stack full), frames that are
    /// not counted (excluded), exits that do not match the top of the stack.
    #[inline(never)]
    fn exit_general<C: Ticks>(&self, addr: usize, base: u32) {
        self.flags.store(base | BUSY, Relaxed);
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
        for j in (i + 1..d).rev() {
            let f = &self.stack[j];
            if f.t.load(Relaxed) != 0 {
                let s = &self.table[f.slot.load(Relaxed) as usize & TABLE_MASK];
                s.active
                    .store(s.active.load(Relaxed).saturating_sub(1), Relaxed);
            }
            bump(&self.stack[j - 1].child, f.child.load(Relaxed));
            bump(&self.lost, 1);
        }
        self.pop::<C>(i);
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
        let d = if d & decision::PROVISIONAL != 0 && d >> 2 != crate::decide::generation() {
            let nd = crate::decide::decide(s.addr.load(Relaxed));
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
        let d = crate::decide::decide(addr);
        s.decision.store(d, Relaxed);
        s.active.store(0, Relaxed);
        s.addr.store(addr, Release);
        self.used[n as usize & TABLE_MASK].store(i as u16, Relaxed);
        self.nused.store(n + 1, Release);
        (d & decision::EXCLUDE == 0).then_some(i)
    }

    /// `culprit_pause()`: stop tracing this thread (nests).
    pub fn pause(&self) {
        self.flags
            .store(self.flags.load(Relaxed).wrapping_add(PAUSE_UNIT), Relaxed);
    }

    /// `culprit_resume()`: undo one [`pause`](Self::pause). Returns false when not paused.
    pub fn resume(&self) -> bool {
        let f = self.flags.load(Relaxed);
        if f & !(MONO | BUSY) == 0 {
            return false;
        }
        self.flags.store(f - PAUSE_UNIT, Relaxed);
        true
    }

    /// Prepares a claimed block for a new owner thread: empty stack, nothing paused. Its
    /// table keeps its functions and cumulative counters (the flusher's baselines match them).
    pub fn reset_for_owner(&self) {
        let base = if clock::uses_tsc() { 0 } else { MONO };
        self.flags.store(base, Relaxed);
        // Index 0 is a sentinel root frame, so every real frame has a parent to pass time to.
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

    /// Flusher: calls `f(addr, delta)` for every function whose counters moved since the last
    /// call, advances the baselines, and returns the (lost frames, overflows) deltas.
    pub fn take_deltas(&self, mut f: impl FnMut(usize, Delta)) -> (u64, u64) {
        for s in self.used_slots() {
            let (c, e, i) = (
                s.calls.load(Relaxed),
                s.excl.load(Relaxed),
                s.incl.load(Relaxed),
            );
            let d = Delta {
                calls: c.wrapping_sub(s.base_calls.swap(c, Relaxed)),
                excl: e.wrapping_sub(s.base_excl.swap(e, Relaxed)),
                incl: i.wrapping_sub(s.base_incl.swap(i, Relaxed)),
            };
            if d != Delta::default() {
                f(s.addr.load(Relaxed), d);
            }
        }
        let l = self.lost.load(Relaxed);
        let o = self.overflows.load(Relaxed);
        (
            l.wrapping_sub(self.base_lost.swap(l, Relaxed)),
            o.wrapping_sub(self.base_overflows.swap(o, Relaxed)),
        )
    }

    /// Forgets counts not yet taken (a forked child must not report its parent's counts).
    pub fn drop_deltas(&self) {
        self.take_deltas(|_, _| {});
    }
}
