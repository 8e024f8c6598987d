//! The process's demoted functions: which functions the runtime stopped tracing to keep
//! within its cost budget ([`crate::budget`]) or because `CULPRIT_DEMOTE` names them, and the
//! callers it saw them called from.
//!
//! A demotion goes through two states:
//!
//! * **Observing** (set by the flusher when it decides): the function is untraced from then on.
//!   Each thread's general path sees its calls for a moment — the thread's next general-path
//!   hook after the decision tags the function's slot so that its calls come there — and
//!   records the traced frame each was called from (its *caller*: the analysis merges the
//!   function with its callers, whose self time now holds its time). After
//!   [`OBSERVE_CALLS`] calls in a thread, that thread's slot is tagged *quiet*: the hooks' fast
//!   path returns at once for it, and its hook call sites are rewritten to NOPs
//!   (`sys::patch`).
//! * **Demoted** (set by the flusher at the next interval): the callers seen are written into
//!   the file (a Demotions record, `culprit_format::cost`), with the time the observation
//!   began as the demotion's time.
//!
//! Everything here is lock-free and allocation-free for the hooks; the flusher alone adds
//! functions. A process demotes at most [`MAX_DEMOTED`] functions.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};

use culprit_format::cost::MAX_CALLERS as FORMAT_MAX_CALLERS;

/// Most functions a process demotes.
pub const MAX_DEMOTED: usize = 1024;
const CAP: usize = MAX_DEMOTED * 2;
/// Callers told apart per function.
pub const MAX_CALLERS: usize = 16;
const _: () = assert!(MAX_CALLERS <= FORMAT_MAX_CALLERS);
/// Calls of a demoted function each thread looks at to find its callers.
pub const OBSERVE_CALLS: u64 = 256;

/// A function's state.
pub mod state {
    /// Traced (not in the table).
    pub const TRACED: u32 = 0;
    /// Untraced; its callers are being looked at.
    pub const OBSERVING: u32 = 1;
    /// Untraced; its demotion is written.
    pub const DEMOTED: u32 = 2;
}

/// Caller word of calls made with no traced frame below.
pub const ROOT: usize = usize::MAX;

#[derive(Debug)]
struct Entry {
    /// Function address; 0 = empty.
    addr: AtomicUsize,
    state: AtomicU32,
    reason: AtomicU32,
    /// Wall-clock ns the observation began.
    at_ns: AtomicU64,
    /// What the function did in the interval decided on.
    calls: AtomicU64,
    self_ns: AtomicU64,
    /// Calls looked at.
    observed: AtomicU64,
    /// Callers seen (0 = empty, [`ROOT`]: none traced).
    callers: [AtomicUsize; MAX_CALLERS],
}

impl Entry {
    const fn new() -> Self {
        Entry {
            addr: AtomicUsize::new(0),
            state: AtomicU32::new(state::TRACED),
            reason: AtomicU32::new(0),
            at_ns: AtomicU64::new(0),
            calls: AtomicU64::new(0),
            self_ns: AtomicU64::new(0),
            observed: AtomicU64::new(0),
            callers: [const { AtomicUsize::new(0) }; MAX_CALLERS],
        }
    }
}

static TABLE: [Entry; CAP] = [const { Entry::new() }; CAP];
static COUNT: AtomicU32 = AtomicU32::new(0);
/// Changes whenever a function's state changes: a thread whose last look is older looks again
/// (`block`).
static GENERATION: AtomicU32 = AtomicU32::new(0);

fn home(addr: usize) -> usize {
    ((addr as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - CAP.trailing_zeros())) as usize
}

fn find(addr: usize) -> Option<&'static Entry> {
    if addr == 0 || COUNT.load(Acquire) == 0 {
        return None;
    }
    let mut i = home(addr);
    for _ in 0..CAP {
        let e = &TABLE[i];
        match e.addr.load(Acquire) {
            0 => return None,
            a if a == addr => return Some(e),
            _ => i = (i + 1) & (CAP - 1),
        }
    }
    None
}

/// The generation of the demotions: it changes when one does.
#[inline(always)]
pub fn generation() -> u32 {
    GENERATION.load(Acquire)
}

/// True when some function was demoted (or is being observed).
#[inline(always)]
pub fn any() -> bool {
    COUNT.load(Relaxed) != 0
}

/// The state of `addr` ([`state`]).
pub fn state_of(addr: usize) -> u32 {
    find(addr).map_or(state::TRACED, |e| e.state.load(Acquire))
}

/// What the flusher decided for one function.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Decided {
    /// Function address.
    pub addr: usize,
    /// `culprit_format::demotion_reason` value.
    pub reason: u32,
    /// Its calls and self time in the interval decided on.
    pub calls: u64,
    /// See `calls`.
    pub self_ns: u64,
}

/// The flusher: `funcs` are untraced from `at_ns` on; their callers are looked at. Returns how
/// many were taken (the table may be full; already demoted ones are skipped).
pub fn begin(funcs: &[Decided], at_ns: u64) -> usize {
    let mut n = 0;
    for d in funcs {
        if d.addr == 0 || find(d.addr).is_some() {
            continue;
        }
        if COUNT.load(Relaxed) as usize >= MAX_DEMOTED {
            break;
        }
        let mut i = home(d.addr);
        loop {
            let e = &TABLE[i];
            if e.addr.load(Relaxed) == 0 {
                e.reason.store(d.reason, Relaxed);
                e.at_ns.store(at_ns, Relaxed);
                e.calls.store(d.calls, Relaxed);
                e.self_ns.store(d.self_ns, Relaxed);
                e.state.store(state::OBSERVING, Relaxed);
                e.addr.store(d.addr, Release);
                COUNT.fetch_add(1, AcqRel);
                n += 1;
                break;
            }
            i = (i + 1) & (CAP - 1);
        }
    }
    if n > 0 {
        GENERATION.fetch_add(1, AcqRel);
    }
    n
}

/// A general-path hook of `addr`, being observed, called from `caller` (the nearest traced
/// frame below it; [`ROOT`] when none): remembers the caller. Returns true while the calling
/// thread should look at more calls (its `seen`-th so far).
pub fn observe(addr: usize, caller: usize, seen: u64) -> bool {
    let Some(e) = find(addr) else { return false };
    if e.state.load(Acquire) != state::OBSERVING {
        return false;
    }
    e.observed.fetch_add(1, Relaxed);
    let caller = if caller == 0 { ROOT } else { caller };
    for c in &e.callers {
        match c.load(Acquire) {
            x if x == caller => break,
            0 => match c.compare_exchange(0, caller, AcqRel, Acquire) {
                Ok(_) => break,
                Err(x) if x == caller => break,
                Err(_) => {}
            },
            _ => {}
        }
    }
    seen < OBSERVE_CALLS
}

/// One finished demotion, for the Demotions record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Finished {
    /// When the function stopped being traced (wall-clock ns).
    pub at_ns: u64,
    /// What was decided.
    pub decided: Decided,
    /// Calls looked at.
    pub observed: u64,
    /// Callers seen (`None`: no traced frame below).
    pub callers: Vec<Option<usize>>,
}

/// The flusher: the functions observed since before `before_ns` become demoted; returns them,
/// oldest first. One whose calls no thread has been seen making yet (a host so busy that the
/// program's threads did not run meanwhile) is observed on until `give_up_ns`, so that its
/// record names its callers when it has any.
pub fn finish(before_ns: u64, give_up_ns: u64) -> Vec<Finished> {
    let mut out = Vec::new();
    if !any() {
        return out;
    }
    for e in &TABLE {
        let addr = e.addr.load(Acquire);
        if addr == 0
            || e.state.load(Acquire) != state::OBSERVING
            || e.at_ns.load(Relaxed) >= before_ns
            || (e.observed.load(Relaxed) == 0 && e.at_ns.load(Relaxed) >= give_up_ns)
        {
            continue;
        }
        e.state.store(state::DEMOTED, Release);
        out.push(Finished {
            at_ns: e.at_ns.load(Relaxed),
            decided: Decided {
                addr,
                reason: e.reason.load(Relaxed),
                calls: e.calls.load(Relaxed),
                self_ns: e.self_ns.load(Relaxed),
            },
            observed: e.observed.load(Relaxed),
            callers: e
                .callers
                .iter()
                .map(|c| c.load(Acquire))
                .filter(|&c| c != 0)
                .map(|c| (c != ROOT).then_some(c))
                .collect(),
        });
    }
    if !out.is_empty() {
        GENERATION.fetch_add(1, AcqRel);
    }
    out.sort_by_key(|f| (f.at_ns, f.decided.addr));
    out
}

/// Every function demoted or being observed (the addresses), for a forked child's file.
pub fn all() -> Vec<usize> {
    TABLE
        .iter()
        .map(|e| e.addr.load(Acquire))
        .filter(|&a| a != 0)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the table is process-wide.
    #[test]
    fn observe_then_finish() {
        let d = |addr| Decided {
            addr,
            reason: 1,
            calls: 5_000_000,
            self_ns: 50_000_000,
        };
        let g = generation();
        assert_eq!(state_of(0x4000), state::TRACED);
        assert_eq!(begin(&[d(0x4000), d(0x5000), d(0x4000)], 100), 2);
        assert_ne!(generation(), g);
        assert_eq!(state_of(0x4000), state::OBSERVING);
        assert!(observe(0x4000, 0x1000, 1));
        assert!(observe(0x4000, 0x1000, 2));
        assert!(observe(0x4000, 0, 3));
        assert!(!observe(0x4000, 0x2000, OBSERVE_CALLS));
        assert!(!observe(0x9000, 0x1000, 1), "not demoted");
        // Decided at 100: not finished by a flusher pass at 100; at 200 the observed one is,
        // while 0x5000, whose calls no thread was seen making, is observed on until its
        // give-up time has passed it.
        assert!(finish(100, 0).is_empty());
        let f = finish(200, 50);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].decided.addr, 0x4000);
        assert_eq!(state_of(0x5000), state::OBSERVING);
        let late = finish(200, 150);
        assert_eq!(late.len(), 1);
        assert_eq!((late[0].decided.addr, late[0].observed), (0x5000, 0));
        assert!(late[0].callers.is_empty());
        let a = f.iter().find(|f| f.decided.addr == 0x4000).unwrap();
        assert_eq!(a.at_ns, 100);
        assert_eq!(a.observed, 4);
        assert_eq!(a.callers, vec![Some(0x1000), None, Some(0x2000)]);
        assert_eq!(state_of(0x4000), state::DEMOTED);
        assert!(!observe(0x4000, 0x3000, 1), "demoted: no longer observed");
        assert!(finish(300, 300).is_empty());
        let mut all = all();
        all.sort();
        assert_eq!(all, vec![0x4000, 0x5000]);
    }
}
