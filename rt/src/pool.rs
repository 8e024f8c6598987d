//! The process's thread blocks: which thread has which, how a thread gets one, and what
//! happens to its counts and memory when it exits.
//!
//! * A thread's first hook claims a free block (or maps a new one) and keeps it in the
//!   thread-local pointer.
//! * When the thread exits, it hands its counts not yet handed over to the ring of intervals
//!   like a crossing (`intervals`; a few atomic adds per function it called, no system call)
//!   and frees its block at once: the next new thread reuses it, so a server that starts a
//!   thread per request keeps as many blocks as it has threads at once, not as many as it
//!   started in an interval. Only when the flusher is moving its counts that very moment, or
//!   the block has edge or histogram tables, does the block wait, dead, for the flusher.
//! * The flusher moves the counts of threads that do not cross into the ring as it writes
//!   each interval, and gives the memory of blocks that stayed free for a whole interval back
//!   to the kernel ([`release_idle`]).
//! * Calls that no block can count (a thread exiting or being set up, or one that could not
//!   get a block) are counted in [`take_ignored`]: nothing is lost silently.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU32, AtomicU64};

use crate::block::{hot, state, Delta, ThreadBlock, Unaccounted};
use crate::control;
use crate::intervals;
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
        general(b, sp, |b| b.exit_general(addr, sp));
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
            b.repair_abandoned();
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

/// Threads that got a block so far (their serial numbers in stack snapshots).
static SERIALS: AtomicU32 = AtomicU32::new(0);

/// A block for a new thread: a free one if any, else a fresh mapping.
fn claim() -> Option<&'static ThreadBlock> {
    let b = claim_block()?;
    b.set_owner(sys::gettid(), SERIALS.fetch_add(1, Relaxed) + 1);
    Some(b)
}

fn claim_block() -> Option<&'static ThreadBlock> {
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
            b.start_intervals();
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
    b.start_intervals();
    Some(b)
}

/// Every block.
pub fn blocks() -> impl Iterator<Item = &'static ThreadBlock> {
    BLOCKS.iter()
}

/// The owner of `b` exits (its hooks are already off): its open calls end now (`pthread_exit`,
/// cancellation), its counts are handed over to the ring and it is freed. A block with edge or
/// histogram tables is left for the flusher to take those (the ring holds function counts
/// only), and so is one whose counts the flusher is moving that very moment.
fn thread_exited(b: &'static ThreadBlock) {
    b.unwind_all();
    let st = if b.hand_over_at_exit() && !b.has_extras() {
        state::FREE
    } else {
        state::DEAD
    };
    b.state.store(st, Release);
}

/// `fork` child: only the calling thread (block `me`) exists; nothing counted before the fork
/// is the child's. The ring of intervals starts afresh from interval `oldest`.
pub fn after_fork(me: Option<&'static ThreadBlock>, oldest: u64) {
    SERIALS.store(1, Relaxed);
    intervals::reset(oldest);
    for b in BLOCKS.iter() {
        b.drop_deltas();
        let _ = b.take_quiet();
        if !me.is_some_and(|m| std::ptr::eq(m, b)) {
            b.reset_active();
            b.forget_owner();
            b.state.store(state::FREE, Release);
        }
    }
    if let Some(m) = me {
        m.set_owner(sys::gettid(), 1);
        m.start_intervals();
    }
    IGNORED.store(0, Relaxed);
    QUIET_RELEASED.store(0, Relaxed);
}

/// Calls dropped in threads whose hooks were off, since the last call.
pub fn take_ignored() -> u64 {
    IGNORED.swap(0, AcqRel)
}

/// Quiet hook calls of blocks given back to the kernel ([`release_idle`]), since the last
/// call: their threads had exited, and the flusher had not taken them yet.
static QUIET_RELEASED: AtomicU64 = AtomicU64::new(0);

/// Quiet hook calls of blocks given back since the last call (flusher only).
pub fn take_quiet_released() -> u64 {
    QUIET_RELEASED.swap(0, Relaxed)
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
        un += b.take_deltas(|addr, _, d| f(addr, d));
        QUIET_RELEASED.fetch_add(b.take_quiet(), Relaxed);
        let from = b.forget_all();
        sys::discard_tail(b, from);
        s.released = true;
        b.state.store(state::FREE, Release);
    }
    un
}
