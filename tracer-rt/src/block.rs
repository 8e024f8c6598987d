//! Per-thread profile tables, and the general path of the hooks.
//!
//! Each thread that calls an instrumented function gets one [`ThreadBlock`]: a shadow stack of
//! open calls and an open-addressing hash table from function address to [`Slot`]. Blocks live
//! in memory the runtime maps itself (never `malloc`) and are never unmapped; an exiting
//! thread hands its counts over and frees its block for the next new thread at once, and the
//! flusher gives the memory of blocks that stay free back to the kernel (see `pool`).
//!
//! # Two paths
//!
//! The common case — a traced function already at its home slot, room on the stack, the TSC,
//! no graph or histogram — is handled by the *fast path*, a few instructions of assembly in
//! `sys::hooks` that read and write this layout ([`hot`] gives it the offsets). Everything
//! else (a thread's first call, a new function, mismatched exits, abandoned frames, a full
//! stack, excluded functions, the monotonic clock, `CULPRIT_GRAPH`, `CULPRIT_HIST`, pauses)
//! goes to the *general path* here ([`ThreadBlock::enter_general`],
//! [`ThreadBlock::exit_general`]). Both keep the same invariants, so a call may enter on one
//! path and return on the other.
//!
//! The fast path knows no state word: the thread-local pointer it reads is either this
//! thread's block or one of the [`hot`] stand-ins, 64-byte dummies laid out so that the fast
//! path's checks fail on them and send the hook to the general path, which then knows from the
//! pointer why (no block yet, hooks off, paused, a general-path hook running, a mode that
//! always takes the general path). A function whose key carries [`SLOW_KEY`] (excluded, or not
//! decided yet) fails the fast path's key check likewise.
//!
//! # Who writes what
//!
//! Every field is an atomic, so sharing a block between its thread and the flusher is sound
//! without `unsafe`. The counters of a slot (`calls`, `excl`, `incl`, `unwound`) are
//! *cumulative* and written only by the owning thread, each with one read-modify-write
//! instruction on the fast path (`inc`/`add` to memory, not locked). The flusher reads them with
//! relaxed loads and keeps its baselines (`bases`, written only by the taker) to compute
//! per-interval deltas. The stack and `active` are touched by the owning thread only.
//!
//! # Semantics (seed 000, §"Function-call tracing")
//!
//! On entry the function's slot, its entry time `t`, a second copy `tx` and the stack pointer
//! are pushed. A returning child adds its elapsed time to its parent's `tx`, so on exit
//! `now − t` is the call's elapsed (inclusive) time and `now − tx` its exclusive time (wall
//! clock, so time blocked in system calls counts). Inclusive time is added to the slot only when
//! the outermost activation of a function returns (`active` counts activations), so recursion
//! is counted once. A call is accounted when it returns: a function still running at the end of
//! an interval shows up in the interval in which it returns.
//!
//! # Calls that do not return
//!
//! A call left by `longjmp`, by an exception through code without cleanups, or by thread
//! cancellation never calls its exit hook. When the runtime notices — an exit that matches a
//! frame further down, an entry at or above the top frame's stack pointer (the top frame cannot
//! be its caller), the stack filling up, the thread exiting — it *unwinds* the frames left
//! behind: each is accounted as a call that ended then (its count, its time up to then), like
//! a return, and counted in the slot's `unwound` as well. Exits that match no frame are
//! counted as lost (`lost_frames`).
//!
//! # Signals and re-entrancy
//!
//! A signal handler that interrupts instrumented code, or the fast path itself, is traced
//! normally: its calls nest on the top frame. The fast path is written so that this is safe:
//! every counter update is one instruction (a signal lands between instructions), an entry
//! records its stack pointer before it commits the new top and fills the frame after (a
//! handler's calls then nest on the new frame), an exit commits the pop last. An interrupted
//! fast path can at worst misplace some of a handler's time.
//!
//! The general path is not interruptible that way: while it runs, the thread-local pointer is
//! the `BUSY` stand-in and the hook's stack pointer is kept aside. A hook that finds `BUSY`
//! runs in a signal handler that interrupted the general path: it does nothing, and its call is
//! counted as `dropped`. A handler may leave with `siglongjmp` (a timeout) and abandon the
//! general path it interrupted; the stack pointer kept aside tells a stale mark from a live
//! one: a handler nested in a live hook runs below it on the stack, code that runs at or above
//! the abandoned hook's stack pointer cannot be inside it (unless it runs on an alternate signal
//! stack, which is checked).

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicUsize};

use culprit_format::{hist_bucket, HIST_BUCKETS};

use crate::clock;
use crate::decide::{self, decision};
use crate::intervals::{self, Place};
use crate::sys::{self, OnceRef, Zeroable};

/// Deepest shadow stack, counting the sentinel frame; deeper calls are counted as overflows and
/// not traced.
pub const STACK_DEPTH: usize = 1024;
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
/// Index of the slot that is never filled (its key stays 0): the slot of frames that count
/// nothing (excluded functions, a full table) and of the sentinel, so that the fast path's exit
/// never matches them.
pub const NO_SLOT: usize = TABLE_CAP;
/// Key bit of a function the fast path must leave to the general path: excluded, or decided
/// provisionally. Addresses of user space never have it.
pub const SLOW_KEY: usize = 1 << 63;

/// Caller → callee edges per thread (`CULPRIT_GRAPH`).
const EDGE_BITS: u32 = 13;
const EDGE_CAP: usize = 1 << EDGE_BITS;
const EDGE_MAX_USED: u32 = (EDGE_CAP * 7 / 8) as u32;

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

/// The interval state of a block (`ThreadBlock::ivs`): `(interval + 1) << 2 | locks`; 0
/// for a block without an owner.
pub mod ivs {
    /// The owner is crossing: moving its counts into the ring.
    pub const CROSSING: u64 = 1;
    /// The flusher is moving the counts of an owner that has not crossed.
    pub const FLUSHER: u64 = 2;

    /// The word of interval `iv`, unlocked.
    pub const fn pack(iv: u64) -> u64 {
        (iv + 1) << 2
    }

    /// The interval of word `v` (not 0).
    pub const fn interval(v: u64) -> u64 {
        (v >> 2).wrapping_sub(1)
    }
}

/// Process-wide modes that take every call through the general path.
pub mod mode {
    use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

    /// Caller → callee edges (`CULPRIT_GRAPH=1`).
    pub const GRAPH: u32 = 1;
    /// Call-duration histograms (`CULPRIT_HIST=1`).
    pub const HIST: u32 = 2;
    /// The hooks read `CLOCK_MONOTONIC` instead of the TSC.
    pub const MONO: u32 = 4;

    static MODES: AtomicU32 = AtomicU32::new(0);

    /// Sets the modes (at start-up, before any block exists).
    pub fn set(bits: u32) {
        MODES.store(bits, Relaxed);
    }

    /// The modes in effect.
    #[inline(always)]
    pub fn get() -> u32 {
        MODES.load(Relaxed)
    }

    /// True when `bit` is on.
    #[inline(always)]
    pub fn on(bit: u32) -> bool {
        get() & bit != 0
    }
}

/// One function's counters in one thread (one cache line). The fast path addresses it by its
/// byte offset in the table, `(addr >> 4 & TABLE_MASK) * 64`.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct Slot {
    /// Function address, with [`SLOW_KEY`] when the fast path must not take it; 0 = empty.
    /// Written once by the owner (release).
    pub addr: AtomicUsize,
    calls: AtomicU64,
    excl: AtomicU64,
    incl: AtomicU64,
    /// Calls among `calls` that the runtime ended itself (see the module docs).
    unwound: AtomicU64,
    active: AtomicU32,
    decision: AtomicU32,
    /// The function's id in the ring of intervals (`intervals::Ring::func_id`; 0: none).
    fid: AtomicU32,
}

/// The taker's baselines of a slot (written only by the taker).
#[derive(Debug)]
#[repr(C)]
struct SlotBase {
    calls: AtomicU64,
    excl: AtomicU64,
    incl: AtomicU64,
    unwound: AtomicU64,
}

/// One open call.
#[derive(Debug)]
#[repr(C)]
struct Frame {
    /// Function address (written by the general path; the fast path leaves it stale, the
    /// slot's key names its function).
    addr: AtomicUsize,
    /// Byte offset of the function's slot in the table; `NO_SLOT * 64` for a frame that counts
    /// nothing.
    slot: AtomicUsize,
    /// Entry timestamp (ticks).
    t: AtomicU64,
    /// Entry timestamp plus the elapsed ticks of completed children.
    tx: AtomicU64,
    /// Stack pointer of the entry hook (`usize::MAX` for the sentinel).
    sp: AtomicUsize,
}

/// One thread's profile table and shadow stack. All-zero bytes are a valid empty block, so a
/// fresh anonymous mapping is one (it gets its sentinel frame when claimed).
#[derive(Debug)]
#[repr(C, align(4096))]
pub struct ThreadBlock {
    /// Byte offset of the top frame from the start of the block (the sentinel's when no call is
    /// open). First field: the fast path reads it at offset 0.
    top: AtomicUsize,
    /// Timestamp (ticks) by which the interval of [`Self::ivs`] has ended: the exit fast path
    /// takes the general path from it on, which moves the thread's counts into the ring of
    /// intervals (`crossing`, below). Set a little early (see [`ThreadBlock::cross`]). In the
    /// first cache line, which every hook reads anyway.
    boundary: AtomicU64,
    /// [`state`] value.
    pub state: AtomicU32,
    /// Times the block was claimed by a thread (the flusher tells idle free blocks by it).
    pub claims: AtomicU32,
    /// Calls not pushed because the stack was full, still running (their exits are skipped).
    over: AtomicU32,
    /// Nesting of `culprit_pause()`.
    pauses: AtomicU32,
    /// Stack pointer of the first call not pushed because the stack was full.
    overflow_sp: AtomicUsize,
    /// Compactions to skip (see [`ThreadBlock::compact`]).
    compact_skip: AtomicU32,
    nused: AtomicU32,
    lost: AtomicU64,
    overflows: AtomicU64,
    /// Calls of a signal handler that interrupted the general path (see the module docs).
    dropped: AtomicU64,
    base_lost: AtomicU64,
    base_overflows: AtomicU64,
    base_dropped: AtomicU64,
    /// Edge and histogram tables, mapped at the first claim when a mode needs them.
    extras: OnceRef<Extras>,
    /// Kernel thread id of the owner (set when claimed; read by the flusher's stack snapshots).
    tid: AtomicU32,
    /// 1 for the process's first traced thread, 2 for the next… (set when claimed).
    serial: AtomicU32,
    /// A sampled request is open in this thread (`crate::requests`): every call takes the
    /// general path, which records the calls that return inside it. Written by the owner only.
    req_on: AtomicU32,
    /// The top frame's index when the request began: calls above it are the request's.
    req_base: AtomicU32,
    /// The open request's id.
    req_id: AtomicU64,
    /// Some of the open request's calls could not be recorded (the ring was full).
    req_lost: AtomicU32,
    /// The interval the counts not yet handed over belong to, and who is moving them
    /// ([`ivs`]); 0: no owner. Written by the owner at its crossings and by the flusher for
    /// owners that do not cross (compare-and-swap: each count goes to one of them).
    ivs: AtomicU64,
    /// While the flusher moves this block's counts: 1 + the interval the owner's calls go
    /// straight into (the ring's entry). Owner only.
    divert: AtomicU64,
    /// 1 + the ring entry the owner is registered in as a writer, while it is. Owner only (to
    /// unregister after a general path abandoned by `siglongjmp`).
    writing: AtomicU32,
    stack: [Frame; STACK_DEPTH],
    table: [Slot; TABLE_CAP + 1],
    bases: [SlotBase; TABLE_CAP],
    used: [AtomicU16; TABLE_CAP],
}

/// What the fast path (`sys::hooks`) needs to know of the layout, and the stand-ins it may
/// find instead of a block.
pub mod hot {
    use std::mem::{offset_of, size_of};
    use std::sync::atomic::AtomicUsize;

    use super::{Frame, Slot, ThreadBlock, NO_SLOT, STACK_DEPTH, TABLE_MASK};

    /// Offset of `ThreadBlock::top`.
    pub const TOP: usize = offset_of!(ThreadBlock, top);
    /// Offset of `ThreadBlock::boundary`.
    pub const BOUNDARY: usize = offset_of!(ThreadBlock, boundary);
    /// Offset of the table.
    pub const TABLE: usize = offset_of!(ThreadBlock, table);
    /// Size of a frame.
    pub const FRAME: usize = size_of::<Frame>();
    /// Offsets of a frame's fields.
    pub const F_SLOT: usize = offset_of!(Frame, slot);
    /// See [`F_SLOT`].
    pub const F_T: usize = offset_of!(Frame, t);
    /// See [`F_SLOT`].
    pub const F_TX: usize = offset_of!(Frame, tx);
    /// See [`F_SLOT`].
    pub const F_SP: usize = offset_of!(Frame, sp);
    /// Offsets of a slot's fields.
    pub const S_CALLS: usize = offset_of!(Slot, calls);
    /// See [`S_CALLS`].
    pub const S_EXCL: usize = offset_of!(Slot, excl);
    /// See [`S_CALLS`].
    pub const S_INCL: usize = offset_of!(Slot, incl);
    /// See [`S_CALLS`].
    pub const S_ACTIVE: usize = offset_of!(Slot, active);
    /// Offset of the first frame (the sentinel).
    pub const STACK: usize = offset_of!(ThreadBlock, stack);
    /// Highest `top` from which the fast path may push (the next frame is the last one).
    pub const LAST_PUSH: usize = STACK + (STACK_DEPTH - 2) * FRAME;
    /// `addr * 4 & HOME_MASK` is the byte offset of `addr`'s home slot: slots are 64 bytes and
    /// the home index is `addr >> 4` (functions are mostly 16-byte aligned), masked.
    pub const HOME_MASK: usize = TABLE_MASK << 6;

    const _: () = assert!(size_of::<Slot>() == 64);
    const _: () = assert!(TOP == 0);
    const _: () = assert!(BOUNDARY + 8 <= 64);
    const _: () = assert!(NO_SLOT * 64 == size_of::<[Slot; NO_SLOT]>());

    /// A stand-in for a block: `top` is 0, so the fast path reads the "frame" at offset 0, whose
    /// stack pointer (word 4) is 0 — every entry fails the caller check — and whose slot offset
    /// (word 1) points back at word 6 of the stand-in, a zero key no exit matches.
    #[derive(Debug)]
    #[repr(C, align(64))]
    pub struct StandIn([AtomicUsize; 8]);

    const FAKE_SLOT: usize = 0usize.wrapping_sub(TABLE).wrapping_add(48);
    const _: () = assert!(F_SLOT == 8 && F_SP == 32);

    impl StandIn {
        const fn new() -> Self {
            StandIn([
                AtomicUsize::new(0),
                AtomicUsize::new(FAKE_SLOT),
                AtomicUsize::new(0),
                AtomicUsize::new(0),
                AtomicUsize::new(0),
                AtomicUsize::new(0),
                AtomicUsize::new(0),
                AtomicUsize::new(0),
            ])
        }

        /// Its address, as the thread-local word holds it.
        pub fn word(&'static self) -> usize {
            self as *const StandIn as usize
        }
    }

    /// A thread that has no block yet (the thread-local word's initial value).
    pub static NO_BLOCK: StandIn = StandIn::new();
    /// A thread whose hooks do nothing (the flusher; a thread being set up or exiting).
    pub static IGNORE: StandIn = StandIn::new();
    /// A general-path hook runs in this thread.
    pub static BUSY: StandIn = StandIn::new();
    /// `culprit_pause()` is in effect in this thread.
    pub static PAUSED: StandIn = StandIn::new();
    /// Every call of this thread takes the general path (a mode, or calls beyond the stack).
    pub static GENERAL: StandIn = StandIn::new();
}

/// Edge and histogram tables of a block (only with `CULPRIT_GRAPH` / `CULPRIT_HIST`).
#[derive(Debug)]
#[repr(C, align(4096))]
pub struct Extras {
    /// Per slot, calls per duration bucket (cumulative, wrapping).
    hist: [[AtomicU32; HIST_BUCKETS]; TABLE_CAP],
    hist_base: [[AtomicU32; HIST_BUCKETS]; TABLE_CAP],
    edges: [Edge; EDGE_CAP],
    edge_used: [AtomicU16; EDGE_CAP],
    nedges: AtomicU32,
    /// Calls whose edge found no room.
    edge_drops: AtomicU64,
    base_edge_drops: AtomicU64,
}

// SAFETY: made only of atomics (and arrays of them), all-zero is its valid empty state, no drop
// glue.
#[allow(unsafe_code)]
unsafe impl Zeroable for Extras {}

/// Calls of one callee from one caller in one thread.
#[derive(Debug)]
#[repr(C, align(64))]
struct Edge {
    /// `(caller slot << 13 | callee slot) + 1`; 0 = empty. The caller slot is [`NO_SLOT`] for
    /// calls without a traced caller.
    key: AtomicU32,
    calls: AtomicU64,
    excl: AtomicU64,
    incl: AtomicU64,
    base_calls: AtomicU64,
    base_excl: AtomicU64,
    base_incl: AtomicU64,
}

/// A block's per-interval counters of calls it could not account.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unaccounted {
    /// Exits that matched no open call, and abandoned general-path hooks.
    pub lost: u64,
    /// Calls refused for lack of room (stack or table full).
    pub overflows: u64,
    /// Calls not traced: a signal handler's, made while a general-path hook ran.
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
    /// Calls that returned, or were unwound.
    pub calls: u64,
    /// Exclusive ticks.
    pub excl: u64,
    /// Inclusive ticks.
    pub incl: u64,
    /// Calls among `calls` the runtime ended itself.
    pub unwound: u64,
}

impl std::ops::AddAssign for Delta {
    fn add_assign(&mut self, o: Delta) {
        self.calls += o.calls;
        self.excl += o.excl;
        self.incl += o.incl;
        self.unwound += o.unwound;
    }
}

/// Per-interval counters of one caller → callee edge, in ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EdgeDelta {
    /// Calls.
    pub calls: u64,
    /// The callee's exclusive ticks.
    pub excl: u64,
    /// Elapsed ticks.
    pub incl: u64,
}

impl std::ops::AddAssign for EdgeDelta {
    fn add_assign(&mut self, o: EdgeDelta) {
        self.calls += o.calls;
        self.excl += o.excl;
        self.incl += o.incl;
    }
}

/// The home slot of `addr` (see [`hot::HOME_MASK`]).
#[inline(always)]
fn home(addr: usize) -> usize {
    (addr >> 4) & TABLE_MASK
}

#[inline(always)]
fn bump(a: &AtomicU64, by: u64) {
    a.store(a.load(Relaxed).wrapping_add(by), Relaxed);
}

/// The current timestamp of the hooks (ticks).
#[inline(always)]
pub fn now() -> u64 {
    if mode::on(mode::MONO) {
        clock::Monotonic::now()
    } else {
        clock::Tsc::now()
    }
}

use clock::Ticks as _;

impl ThreadBlock {
    #[inline(always)]
    fn top_index(&self) -> usize {
        (self.top.load(Relaxed).wrapping_sub(hot::STACK) / hot::FRAME).min(STACK_DEPTH - 1)
    }

    #[inline(always)]
    fn set_top_index(&self, i: usize) {
        self.top.store(hot::STACK + i * hot::FRAME, Relaxed);
    }

    /// The slot index of frame `i` ([`NO_SLOT`] when it counts nothing).
    #[inline(always)]
    fn slot_of(&self, f: &Frame) -> usize {
        (f.slot.load(Relaxed) / 64).min(NO_SLOT)
    }

    /// The function of an open frame.
    fn frame_fn(&self, f: &Frame) -> usize {
        match self.slot_of(f) {
            NO_SLOT => f.addr.load(Relaxed),
            s => self.table[s].addr.load(Relaxed) & !SLOW_KEY,
        }
    }

    /// True when the thread-local word `w` is this block.
    #[inline(always)]
    pub fn is(&self, w: usize) -> bool {
        w == self as *const ThreadBlock as usize
    }

    /// What the thread-local word should hold for this block's owner when no hook runs: the
    /// block itself, unless its calls must take the general path.
    pub fn idle_word(&'static self) -> usize {
        if self.pauses.load(Relaxed) > 0 {
            hot::PAUSED.word()
        } else if mode::get() != 0 || self.over.load(Relaxed) > 0 || self.req_on.load(Relaxed) != 0
        {
            hot::GENERAL.word()
        } else {
            self as *const ThreadBlock as usize
        }
    }

    /// Every entry the fast path does not handle, with this block's owner idle (the caller
    /// marks it busy). `sp` is the hook's stack pointer at its entry. The fast path's case
    /// comes first (in the modes, every call comes here).
    #[inline(always)]
    pub fn enter_general(&self, addr: usize, sp: usize) {
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
        let slot = self.slot_for(addr).unwrap_or(NO_SLOT);
        self.push(i + 1, addr, slot, sp);
    }

    /// Every exit the fast path does not handle: calls that were not pushed (stack full),
    /// frames that count nothing (excluded), exits that do not match the top of the stack, and
    /// every exit in a mode. The fast path's case comes first.
    #[inline(always)]
    pub fn exit_general(&self, addr: usize) {
        let top = self.top.load(Relaxed);
        if top > hot::STACK && top <= hot::LAST_PUSH + hot::FRAME && self.over.load(Relaxed) == 0 {
            let i = (top - hot::STACK) / hot::FRAME;
            let slot = self.slot_of(&self.stack[i]);
            if slot != NO_SLOT && self.table[slot].addr.load(Relaxed) == addr {
                return self.pop(i, now(), false);
            }
        }
        self.exit_rare(addr)
    }

    #[inline(never)]
    fn exit_rare(&self, addr: usize) {
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

    /// The slot of `addr` for a traced call; `None` when the call is not counted (excluded,
    /// or the table is full).
    fn slot_for(&self, addr: usize) -> Option<usize> {
        let mut i = home(addr);
        loop {
            let s = &self.table[i];
            let k = s.addr.load(Relaxed);
            if k & !SLOW_KEY == addr {
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
            let nd = decide::decide(s.addr.load(Relaxed) & !SLOW_KEY);
            s.decision.store(nd, Relaxed);
            s.addr
                .store(key_of(s.addr.load(Relaxed) & !SLOW_KEY, nd), Relaxed);
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
        s.fid
            .store(intervals::get().map_or(0, |r| r.func_id(addr)), Relaxed);
        s.addr.store(key_of(addr, d), Release);
        self.used[n as usize & TABLE_MASK].store(i as u16, Relaxed);
        self.nused.store(n + 1, Release);
        (d & decision::EXCLUDE == 0).then_some(i)
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

    fn used_indices(&self) -> impl Iterator<Item = usize> + '_ {
        let n = self.nused.load(Acquire).min(TABLE_MAX_USED) as usize;
        self.used[..n]
            .iter()
            .map(|u| u.load(Relaxed) as usize & TABLE_MASK)
            .filter(|&i| self.table[i].addr.load(Acquire) != 0)
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
                f(s.addr.load(Relaxed) & !SLOW_KEY, s.fid.load(Relaxed), d);
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
                self.table[slot].addr.load(Relaxed) & !SLOW_KEY
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
        ] {
            a.store(0, Relaxed);
        }
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

/// What the flusher found when it came to move a block's counts ([`ThreadBlock::flusher_take`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// Nothing to move: no owner, or the owner has crossed out of the interval already.
    Crossed,
    /// Moved; `late`: they belonged to an interval before the one asked (a crossing the
    /// flusher gave up waiting for).
    Moved {
        /// The counts were of an earlier interval.
        late: bool,
        /// Calls not accounted among them.
        unaccounted: Unaccounted,
    },
    /// The owner's crossing did not finish by the deadline.
    GaveUp,
}

/// Crossings: a thread moves its counts into the ring of intervals (`intervals`) at the first
/// accounting past its boundary; the flusher moves those of threads that do not cross.
impl ThreadBlock {
    /// The general path's boundary check (the fast path's is one `cmp` in assembly).
    #[inline(always)]
    fn check_boundary(&self, now: u64) {
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
    fn account_diverted(&self, s: &Slot, iv: u64, excl: u64, incl: u64, unwound: bool) {
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

/// One open call, as the flusher copies it for a stack snapshot.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenCall {
    /// Function address.
    pub addr: usize,
    /// Entry timestamp (ticks).
    pub t: u64,
}

/// A thread's open calls as copied by [`ThreadBlock::open_calls`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenCalls {
    /// Open calls in all (the copy keeps the innermost ones).
    pub depth: usize,
    /// Calls copied (outermost first).
    pub n: usize,
    /// The stack kept changing while it was copied.
    pub unstable: bool,
    /// `culprit_pause()` is in effect.
    pub paused: bool,
    /// Calls beyond the deepest stack are not traced: the innermost ones are missing.
    pub overflow: bool,
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
        let addr = self.table[slot].addr.load(Relaxed) & !SLOW_KEY;
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
