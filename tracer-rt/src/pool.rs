//! The process's thread blocks: which thread has which, how a thread gets one, and what
//! happens to its counts and memory when it exits.
//!
//! * A thread's first hook claims a free block (or maps a new one) and keeps it in the
//!   thread-local pointer.
//! * When the thread exits, it hands its counts not yet taken over to the process-wide
//!   retired table (a few atomic adds per function it called, no system call) and frees
//!   its block at once: the next new thread reuses it, so a server that starts a thread per
//!   request keeps as many blocks as it has threads at once, not as many as it started in an
//!   interval. Only when that table is full does the block wait, dead, for the flusher.
//! * The flusher takes the counts of every live block and of the retired table each
//!   interval, and gives the memory of blocks that stayed free for a whole interval back to
//!   the kernel ([`release_idle`]).
//! * Calls that no block can count (a thread exiting or being set up, or one that could not
//!   get a block) are counted in [`take_ignored`]: nothing is lost silently.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};

use crate::block::{hot, state, Delta, ThreadBlock, Unaccounted};
use crate::control;
use crate::sys::{self, Registry, ThreadData, Zeroable};

/// Most blocks (threads alive at once); a thread beyond it runs untraced, its calls counted
/// as dropped.
pub const MAX_BLOCKS: usize = 16384;

static BLOCKS: Registry<ThreadBlock, MAX_BLOCKS> = Registry::new();

/// Calls made in threads whose hooks are switched off while the runtime traces.
static IGNORED: AtomicU64 = AtomicU64::new(0);

// SAFETY: ThreadBlock is made only of atomics (and arrays of `repr(C)` structs of atomics),
// the all-zero value is its valid empty state, and it has no drop glue.
#[allow(unsafe_code)]
unsafe impl Zeroable for ThreadBlock {}

// SAFETY: as above, and it is the crate's only ThreadData type.
#[allow(unsafe_code)]
unsafe impl ThreadData for ThreadBlock {
    fn ignore_word() -> usize {
        hot::IGNORE.word()
    }

    fn on_thread_exit(&'static self) {
        thread_exited(self);
    }
}

/// This thread's block, if it has one.
#[inline(always)]
pub fn current() -> Option<&'static ThreadBlock> {
    sys::own_data()
}

/// The general path of `__cyg_profile_func_enter` (see `block`, "Two paths"): the fast-path
/// word says why the fast path did not take the call.
#[inline(always)]
pub fn enter_slow(addr: usize, sp: usize) {
    let cur = sys::tls_cur();
    if cur == hot::GENERAL.word() || current().is_some_and(|b| b.is(cur)) {
        // A mode, or a case the fast path leaves to the general path.
    } else if cur == hot::BUSY.word() {
        if nested_in_busy(sp, true) {
            return;
        }
    } else if cur == hot::NO_BLOCK.word() || cur == 0 {
        // (0: where the word has no initial value, see `sys`.)
        if ensure_block().is_none() {
            // Set-up failed: the thread stays untraced (its hooks are off).
            return count_ignored();
        }
    } else if cur == hot::IGNORE.word() {
        return count_ignored();
    } else if cur == hot::PAUSED.word() {
        return;
    }
    if let Some(b) = current() {
        general(b, sp, |b| b.enter_general(addr, sp));
    }
}

/// The general path of `__cyg_profile_func_exit`.
#[inline(always)]
pub fn exit_slow(addr: usize, sp: usize) {
    let cur = sys::tls_cur();
    if cur == hot::GENERAL.word() || current().is_some_and(|b| b.is(cur)) {
    } else if cur == hot::BUSY.word() {
        // A dropped call was counted at its entry.
        if nested_in_busy(sp, false) {
            return;
        }
    } else if cur == hot::NO_BLOCK.word()
        || cur == 0
        || cur == hot::IGNORE.word()
        || cur == hot::PAUSED.word()
    {
        return;
    }
    if let Some(b) = current() {
        general(b, sp, |b| b.exit_general(addr));
    }
}

/// Runs a general-path hook on `b`: the thread is marked busy meanwhile (see `block`,
/// "Signals and re-entrancy").
#[inline(always)]
fn general(b: &'static ThreadBlock, sp: usize, f: impl FnOnce(&ThreadBlock)) {
    sys::set_busy_sp(sp);
    sys::set_tls_cur(hot::BUSY.word());
    f(b);
    sys::set_tls_cur(b.idle_word());
}

/// A hook that found the thread busy: true when it runs in a signal handler nested in the
/// running general-path hook (its call is dropped, and counted when `entry`); false when that
/// hook was abandoned (a handler left it with `siglongjmp`: the mark is cleared, counted as
/// lost, and this hook goes on).
#[cold]
fn nested_in_busy(sp: usize, entry: bool) -> bool {
    let b = current();
    // Live: we run below it on the same stack, or on an alternate signal stack.
    if sp < sys::busy_sp() || sys::on_alt_stack() {
        if let (Some(b), true) = (b, entry) {
            b.count_dropped();
        }
        return true;
    }
    match b {
        Some(b) => {
            b.count_lost();
            sys::set_tls_cur(b.idle_word());
            false
        }
        None => true,
    }
}

fn count_ignored() {
    if control::is_active() {
        IGNORED.fetch_add(1, Relaxed);
    }
}

/// This thread's block, claiming one if it has none; `None` when not tracing or when this
/// thread's hooks are off.
pub fn ensure_block() -> Option<&'static ThreadBlock> {
    if let Some(b) = current() {
        return Some(b);
    }
    let cur = sys::tls_cur();
    if (cur != hot::NO_BLOCK.word() && cur != 0) || !control::is_active() {
        return None;
    }
    // Hooks firing while the block is set up (inside mmap, pthread_setspecific) do nothing;
    // if no block can be had, the thread stays so.
    sys::set_tls_cur(hot::IGNORE.word());
    let b = claim()?;
    sys::set_own_data(b);
    sys::set_tls_cur(b.idle_word());
    Some(b)
}

/// A block for a new thread: a free one if any, else a fresh mapping.
fn claim() -> Option<&'static ThreadBlock> {
    for b in BLOCKS.iter() {
        if b.state
            .compare_exchange(state::FREE, state::LIVE, AcqRel, Relaxed)
            .is_ok()
        {
            b.claims.fetch_add(1, Release);
            if !b.reset_for_owner() {
                b.state.store(state::FREE, Release);
                return None;
            }
            return Some(b);
        }
    }
    let b = sys::alloc_zeroed::<ThreadBlock>()?;
    b.state.store(state::LIVE, Relaxed);
    b.claims.store(1, Relaxed);
    let ok = b.reset_for_owner();
    // Full registry: the mapping is leaked (16k threads alive at once).
    if !BLOCKS.push(b) {
        return None;
    }
    if !ok {
        b.state.store(state::FREE, Release);
        return None;
    }
    Some(b)
}

/// Every block.
pub fn blocks() -> impl Iterator<Item = &'static ThreadBlock> {
    BLOCKS.iter()
}

/// The owner of `b` exits (its hooks are already off): its open calls end now (`pthread_exit`,
/// cancellation), its counts are handed over and it is freed. A block with edge or histogram
/// tables is left for the flusher to take (the retired table holds function counts only).
fn thread_exited(b: &'static ThreadBlock) {
    b.unwind_all();
    let st = if !b.has_extras() && RETIRED.retire(b) {
        state::FREE
    } else {
        state::DEAD
    };
    b.state.store(st, Release);
}

/// `fork` child: only the calling thread (block `me`) exists; nothing counted before the fork
/// is the child's.
pub fn after_fork(me: Option<&'static ThreadBlock>) {
    for b in BLOCKS.iter() {
        b.drop_deltas();
        if !me.is_some_and(|m| std::ptr::eq(m, b)) {
            b.reset_active();
            b.state.store(state::FREE, Release);
        }
    }
    RETIRED.take(|_, _| {});
    IGNORED.store(0, Relaxed);
}

/// Calls dropped in threads whose hooks were off, since the last call.
pub fn take_ignored() -> u64 {
    IGNORED.swap(0, AcqRel)
}

/// Counts of threads that exited since the last call: `f(addr, delta)` per function, and
/// (unaccounted calls, threads handed over).
pub fn take_retired(f: impl FnMut(usize, Delta)) -> (Unaccounted, u64) {
    RETIRED.take(f)
}

/// What the flusher remembers about a block between intervals.
#[derive(Clone, Copy, Debug)]
pub struct Idle {
    claims: u32,
    released: bool,
}

/// Gives back to the kernel the memory of blocks that stayed free since the last call (their
/// `claims` did not move); `seen` is the flusher's memory of the blocks. Counts still in them
/// go to `f` (there are none unless a fork left some behind).
pub fn release_idle(seen: &mut Vec<Idle>, mut f: impl FnMut(usize, Delta)) -> Unaccounted {
    let mut un = Unaccounted::default();
    for i in 0..BLOCKS.len() {
        let Some(b) = BLOCKS.get(i) else { continue };
        if seen.len() <= i {
            seen.resize(
                i + 1,
                Idle {
                    claims: u32::MAX,
                    released: false,
                },
            );
        }
        let s = &mut seen[i];
        let c = b.claims.load(Acquire);
        if c != s.claims {
            *s = Idle {
                claims: c,
                released: false,
            };
            continue;
        }
        if s.released
            || b.state
                .compare_exchange(state::FREE, state::RELEASING, AcqRel, Acquire)
                .is_err()
        {
            continue;
        }
        un += b.take_deltas(&mut f);
        let from = b.forget_all();
        sys::discard_tail(b, from);
        s.released = true;
        b.state.store(state::FREE, Release);
    }
    un
}

// ---------------------------------------------------------------------------------------------
// The retired table.

const RETIRED_BITS: u32 = 14;
const RETIRED_CAP: usize = 1 << RETIRED_BITS;
const RETIRED_MASK: usize = RETIRED_CAP - 1;
/// Slots that may be filled (keeps probe chains short, and an empty slot always exists).
const RETIRED_MAX: u32 = (RETIRED_CAP * 7 / 8) as u32;

/// One function's counts handed over by exited threads: added with atomic adds by exiting
/// threads, taken with atomic swaps by the flusher (nothing in between is lost).
#[derive(Debug)]
#[repr(C, align(64))]
struct RetiredSlot {
    addr: AtomicUsize,
    calls: AtomicU64,
    excl: AtomicU64,
    incl: AtomicU64,
    unwound: AtomicU64,
}

impl RetiredSlot {
    const fn new() -> Self {
        RetiredSlot {
            addr: AtomicUsize::new(0),
            calls: AtomicU64::new(0),
            excl: AtomicU64::new(0),
            incl: AtomicU64::new(0),
            unwound: AtomicU64::new(0),
        }
    }
}

/// Counts of exited threads not yet taken by the flusher. Lives in `.bss`: pages are used
/// only as functions arrive.
#[derive(Debug)]
struct Retired {
    slots: [RetiredSlot; RETIRED_CAP],
    /// Indices (+1) of the filled slots, in filling order; 0 while being written.
    used: [AtomicU32; RETIRED_CAP],
    nused: AtomicU32,
    /// Slots promised to threads retiring right now (see [`Retired::retire`]).
    reserved: AtomicU32,
    lost: AtomicU64,
    overflows: AtomicU64,
    dropped: AtomicU64,
    threads: AtomicU64,
}

static RETIRED: Retired = Retired::new();

impl Retired {
    const fn new() -> Self {
        Retired {
            slots: [const { RetiredSlot::new() }; RETIRED_CAP],
            used: [const { AtomicU32::new(0) }; RETIRED_CAP],
            nused: AtomicU32::new(0),
            reserved: AtomicU32::new(0),
            lost: AtomicU64::new(0),
            overflows: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            threads: AtomicU64::new(0),
        }
    }

    /// Moves the counts of `b` (whose owner is exiting) here. False, with nothing moved, when
    /// the table might not hold its functions.
    fn retire(&self, b: &ThreadBlock) -> bool {
        let n = b.used_count();
        let r = self.reserved.fetch_add(n, AcqRel);
        if r.saturating_add(n) > RETIRED_MAX {
            self.reserved.fetch_sub(n, AcqRel);
            return false;
        }
        // With the reservation, every new function finds an empty slot.
        let mut added = 0;
        let un = b.take_deltas(|addr, d| added += self.add(addr, d) as u32);
        self.reserved.fetch_sub(n - added.min(n), AcqRel);
        self.lost.fetch_add(un.lost, Relaxed);
        self.overflows.fetch_add(un.overflows, Relaxed);
        self.dropped.fetch_add(un.dropped, Relaxed);
        self.threads.fetch_add(1, Release);
        true
    }

    /// Adds `d` to the slot of `addr`; true when this filled a new slot.
    fn add(&self, addr: usize, d: Delta) -> bool {
        let mut i =
            ((addr as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - RETIRED_BITS)) as usize;
        let mut new = false;
        for _ in 0..RETIRED_CAP {
            let s = &self.slots[i];
            let k = s.addr.load(Acquire);
            let mine = k == addr
                || (k == 0
                    && match s.addr.compare_exchange(0, addr, AcqRel, Acquire) {
                        Ok(_) => {
                            new = true;
                            let n = self.nused.fetch_add(1, AcqRel) as usize;
                            if let Some(u) = self.used.get(n) {
                                u.store(i as u32 + 1, Release);
                            }
                            true
                        }
                        Err(other) => other == addr,
                    });
            if mine {
                // Locked adds on lines other exiting threads share: only those that add.
                for (a, v) in [
                    (&s.calls, d.calls),
                    (&s.excl, d.excl),
                    (&s.incl, d.incl),
                    (&s.unwound, d.unwound),
                ] {
                    if v != 0 {
                        a.fetch_add(v, Relaxed);
                    }
                }
                return new;
            }
            i = (i + 1) & RETIRED_MASK;
        }
        new
    }

    /// Takes everything added since the last call.
    fn take(&self, mut f: impl FnMut(usize, Delta)) -> (Unaccounted, u64) {
        let n = (self.nused.load(Acquire) as usize).min(RETIRED_CAP);
        for u in &self.used[..n] {
            let i = u.load(Acquire);
            if i == 0 {
                continue; // being written: taken next time
            }
            let s = &self.slots[(i - 1) as usize & RETIRED_MASK];
            let d = Delta {
                calls: s.calls.swap(0, AcqRel),
                excl: s.excl.swap(0, AcqRel),
                incl: s.incl.swap(0, AcqRel),
                unwound: s.unwound.swap(0, AcqRel),
            };
            if d != Delta::default() {
                f(s.addr.load(Relaxed), d);
            }
        }
        (
            Unaccounted {
                lost: self.lost.swap(0, AcqRel),
                overflows: self.overflows.swap(0, AcqRel),
                dropped: self.dropped.swap(0, AcqRel),
            },
            self.threads.swap(0, AcqRel),
        )
    }
}
