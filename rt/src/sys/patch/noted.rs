//! Noting: the process-wide set of hook call sites of untraced functions, filled from the
//! hooks' general path without allocation or system call, and what became of each.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize};

/// Room for noted sites (return addresses). A program has two or three per instrumented
/// function and inlined copy; only those of untraced functions come here.
pub(super) const SITES: usize = 1 << 14;
/// Slots probed before a site is given up (counted in [`Stats::full`]).
pub(super) const PROBES: usize = 16;

/// A noted site's state.
pub(super) mod st {
    /// Noted, not looked at yet.
    pub const QUEUED: u8 = 0;
    /// Rewritten to a NOP.
    pub const PATCHED: u8 = 1;
    /// Looked at and left as it is (not a hook call site, not proven, refused).
    pub const KEPT: u8 = 2;
    /// Not a hook call site: the return address of a call of the function itself, noted when
    /// its exit hook was reached by the tail jump that ends its body (`site::returns_from`;
    /// that jump is rewritten with the body). Not counted as kept.
    pub const RETURN: u8 = 3;
}

pub(super) static SITE: [AtomicUsize; SITES] = [const { AtomicUsize::new(0) }; SITES];
/// The function each site was noted for.
pub(super) static FUNC: [AtomicUsize; SITES] = [const { AtomicUsize::new(0) }; SITES];
pub(super) static STATE: [AtomicU8; SITES] = [const { AtomicU8::new(st::QUEUED) }; SITES];
/// A site was noted since the flusher last looked.
pub(super) static DIRTY: AtomicBool = AtomicBool::new(false);
/// Sites that found no room.
pub(super) static FULL: AtomicU32 = AtomicU32::new(0);
/// `mprotect` was refused once: never try again.
pub(super) static REFUSED: AtomicBool = AtomicBool::new(false);
/// Patching is off (`CULPRIT_PATCH=0`, or not x86-64).
pub(super) static OFF: AtomicBool = AtomicBool::new(!cfg!(target_arch = "x86_64"));

/// Turns patching off for good (the runtime still filters untraced calls in the hooks).
pub fn disable() {
    OFF.store(true, Relaxed);
}

/// True when sites were noted since the flusher last looked.
pub fn pending() -> bool {
    DIRTY.load(Acquire)
}

/// True while call sites may be patched.
pub fn enabled() -> bool {
    !OFF.load(Relaxed) && !REFUSED.load(Relaxed)
}

#[inline(always)]
pub(super) fn slot_of(ret: usize) -> usize {
    ((ret as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SITES.trailing_zeros())) as usize
}

/// A hook's general path: the call that returns to `ret` was made for `func`, which is not
/// traced; remember the site so that the flusher rewrites it. Lock-free, allocation-free,
/// async-signal-safe: one hash probe when the site is known. A site seen for two functions
/// (code the compiler shared between inlined copies) is never patched.
#[inline]
pub fn note_site(ret: usize, func: usize) {
    if ret == 0 || !enabled() {
        return;
    }
    let mut i = slot_of(ret);
    for _ in 0..PROBES {
        let s = &SITE[i];
        let k = s.load(Acquire);
        if k == ret {
            if FUNC[i].load(Acquire) != func && FUNC[i].load(Acquire) != 0 {
                STATE[i].store(st::KEPT, Release);
            }
            return;
        }
        if k == 0 {
            match s.compare_exchange(0, ret, AcqRel, Acquire) {
                Ok(_) => {
                    FUNC[i].store(func, Release);
                    DIRTY.store(true, Release);
                    return;
                }
                Err(other) if other == ret => return,
                Err(_) => {}
            }
        }
        i = (i + 1) & (SITES - 1);
    }
    FULL.fetch_add(1, Relaxed);
}

/// The return address of a hook, from the stack pointer at its entry (the fast path passes it
/// to the general path).
///
/// `sp` must be the hook's stack pointer at its first instruction (as `ffi::hooks` passes it):
/// the word there is the hook's return address.
#[inline(always)]
pub fn return_address(sp: usize) -> usize {
    if cfg!(target_arch = "x86_64") && sp != 0 && sp.is_multiple_of(8) {
        // SAFETY: on x86-64 the hooks pass their stack pointer at entry, where the `call` that
        // reached them pushed the return address: the word is on this thread's live stack.
        unsafe { (sp as *const usize).read() }
    } else {
        0
    }
}

/// What patching did so far (cumulative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Call sites rewritten to NOPs (and tail jumps to the exit hook to `ret`).
    pub patched: u32,
    /// Sites left as they were (not provably a hook call, an inlined copy's `%rdi` not proven,
    /// or `mprotect` refused). Return addresses of untraced functions whose exit hook is a tail
    /// jump are not counted (`st::RETURN`).
    pub kept: u32,
    /// Sites that found no room in the set (their calls keep reaching the hooks).
    pub full: u32,
    /// Of `patched`, those in another function's body (inlined copies), proven.
    pub inlined: u32,
    /// `mprotect` was refused: patching is off.
    pub refused: bool,
}

/// What patching did so far.
pub fn stats() -> Stats {
    let mut s = Stats {
        patched: TAILS.load(Relaxed),
        full: FULL.load(Relaxed),
        inlined: INLINED.load(Relaxed),
        refused: REFUSED.load(Relaxed),
        ..Stats::default()
    };
    for (k, st) in SITE.iter().zip(&STATE) {
        if k.load(Relaxed) == 0 {
            continue;
        }
        match st.load(Relaxed) {
            st::PATCHED => s.patched += 1,
            st::KEPT => s.kept += 1,
            _ => {}
        }
    }
    s
}

/// Tail jumps rewritten to `ret`.
pub(super) static TAILS: AtomicU32 = AtomicU32::new(0);

/// Sites in inlined copies rewritten (proven).
pub(super) static INLINED: AtomicU32 = AtomicU32::new(0);
