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
//! `ffi::hooks` that read and write this layout ([`hot`] gives it the offsets). Everything
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

// The code of a block, beside its layout here: the hooks' general path (`general`), crossings
// into the ring of intervals (`crossing`), and the flusher's side (`counts`).
mod counts;
mod crossing;
mod general;

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
/// Key bit of a function the fast path must leave to the general path: decided provisionally,
/// or untraced (excluded, demoted) while the general path still looks at its calls (the call
/// sites to patch, a demoted function's callers). Addresses of user space never have it.
pub const SLOW_KEY: usize = 1 << 63;
/// Key bit of an untraced function the hooks' fast path returns at once for (see
/// `ffi::hooks`): excluded or demoted, once the general path has seen enough of its calls
/// ([`QUIET_AFTER`]).
pub const QUIET_KEY: usize = 1 << 62;
/// Both tag bits.
pub const TAGS: usize = SLOW_KEY | QUIET_KEY;
/// Calls of an untraced function a thread's general path looks at (noting their call sites
/// for patching, a demoted function's callers) before its key turns quiet.
pub const QUIET_AFTER: u32 = crate::demote::OBSERVE_CALLS as u32;
/// One quiet call in this many (per thread, by its `quiet` count) still takes the general path,
/// which notes its call site for patching: a quiet function's calls from sites the general
/// path never saw (an inlined copy first run after the key turned quiet, a caller that came
/// later) are found in proportion to what they cost, and patched in turn. Costs the quiet
/// calls of sites that stay (not patchable) one general-path visit in 4,096.
pub const QUIET_NOTE_EVERY: u64 = 4096;
const _: () = assert!(QUIET_NOTE_EVERY.is_power_of_two() && QUIET_NOTE_EVERY <= 1 << 31);

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
    /// The function is demoted (`crate::demote`): untraced in this thread from the next call.
    demoted: AtomicU32,
    /// Calls of the (untraced) function the general path has seen in this thread.
    seen: AtomicU32,
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
    /// Calls of untraced functions the fast path returned at once for (cumulative, owner
    /// only, one `inc` each): what they cost is part of the runtime's cost (`crate::budget`).
    quiet: AtomicU64,
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
    /// The generation of the process's demotions this block's table was brought up to
    /// (`crate::demote::generation`). Owner only.
    demote_gen: AtomicU32,
    /// The flusher's baseline of `quiet`.
    base_quiet: AtomicU64,
    stack: [Frame; STACK_DEPTH],
    table: [Slot; TABLE_CAP + 1],
    bases: [SlotBase; TABLE_CAP],
    used: [AtomicU16; TABLE_CAP],
}

/// What the fast path (`ffi::hooks`) needs to know of the layout, and the stand-ins it may
/// find instead of a block.
pub mod hot {
    use std::mem::{offset_of, size_of};
    use std::sync::atomic::AtomicUsize;

    use super::{Frame, Slot, ThreadBlock, NO_SLOT, STACK_DEPTH, TABLE_MASK};

    /// Offset of `ThreadBlock::top`.
    pub const TOP: usize = offset_of!(ThreadBlock, top);
    /// Offset of `ThreadBlock::boundary`.
    pub const BOUNDARY: usize = offset_of!(ThreadBlock, boundary);
    /// Offset of `ThreadBlock::quiet`.
    pub const QUIET: usize = offset_of!(ThreadBlock, quiet);
    /// Bit of [`super::QUIET_KEY`].
    pub const QUIET_BIT: u32 = super::QUIET_KEY.trailing_zeros();
    /// The low bits of `ThreadBlock::quiet` that are 0 on a quiet call the general path sees
    /// ([`super::QUIET_NOTE_EVERY`]).
    pub const QUIET_NOTE_MASK: u64 = super::QUIET_NOTE_EVERY - 1;
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
    const _: () = assert!(BOUNDARY + 8 <= 64 && QUIET + 8 <= 64);
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

/// What a thread's table says of a function for a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lookup {
    /// Traced, at this slot.
    Traced(usize),
    /// Not traced (excluded, or demoted), at this slot.
    Untraced(usize),
    /// No room for it: not counted (an overflow).
    Full,
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
            s => self.table[s].addr.load(Relaxed) & !TAGS,
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
}
