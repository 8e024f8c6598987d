//! What one call costs the hooks, measured in the process at start-up: the cost budget's
//! estimate of the runtime's own CPU time is the calls counted × these (`crate::budget`).
//!
//! The hooks' fast path is run on a private block (no owner, an interval that never ends, a
//! made-up function at its home slot): enter/exit pairs of a traced function, then of a quiet
//! (untraced) one, timed with the thread's CPU clock (`CLOCK_THREAD_CPUTIME_ID`, so time spent
//! waiting for a CPU is not counted), the least of three runs each, less the same loop calling
//! hooks that do nothing (the calls themselves are what `-finstrument-functions` costs with
//! glibc's no-op hooks too: the runtime's cost is what it adds to them). The block then goes
//! back to the kernel. It does not see the cache misses of real code, so it is a lower bound
//! of what a traced call costs there.

use crate::block::ThreadBlock;
use crate::entry::Hooks;
use crate::sys::{self, Publish};

static COST: Publish<CallCost> = Publish::new();

/// Keeps the start-up measure for the flusher (and forked children).
pub fn set(c: CallCost) {
    COST.set(c);
}

/// The start-up measure (zero before it).
pub fn cost() -> CallCost {
    COST.get().copied().unwrap_or_default()
}

/// Enter/exit pairs per run.
const PAIRS: u32 = 20_000;
const RUNS: usize = 3;

/// The CPU cost of one call (enter and exit), ns.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CallCost {
    /// A traced call: timestamps, a frame, the counters.
    pub traced_ns: f64,
    /// An untraced call whose key is quiet: the hooks return at once.
    pub quiet_ns: f64,
}

impl CallCost {
    /// What one quiet hook call (an entry or an exit) costs: the fast path counts each.
    pub fn quiet_hook_ns(&self) -> f64 {
        self.quiet_ns / 2.0
    }
}

/// A made-up function address: this module's own code, never instrumented.
fn fake_addr() -> usize {
    fake_addr as *const () as usize
}

/// Measures [`CallCost`] of `hooks` on this thread (start-up, before the program runs). All
/// zero when no block can be mapped, or off x86-64 (no fast path).
pub fn measure(hooks: &Hooks) -> CallCost {
    if !cfg!(target_arch = "x86_64") {
        return CallCost::default();
    }
    let Some(b) = sys::alloc_zeroed::<ThreadBlock>() else {
        return CallCost::default();
    };
    let addr = fake_addr();
    let saved = sys::tls_cur();
    let best = |pair: fn(usize)| {
        let mut best = f64::INFINITY;
        for _ in 0..RUNS {
            let t0 = sys::thread_cpu_ns();
            for _ in 0..PAIRS {
                pair(addr);
            }
            let dt = sys::thread_cpu_ns().saturating_sub(t0);
            best = best.min(dt as f64 / PAIRS as f64);
        }
        best
    };
    let run = |quiet: bool| {
        b.prepare_calibration(addr, quiet);
        sys::set_tls_cur(b as *const ThreadBlock as usize);
        let t = best(hooks.pair);
        sys::set_tls_cur(saved);
        t
    };
    let nop = best(hooks.nop_pair);
    let traced_ns = (run(false) - nop).max(0.0);
    let quiet_ns = (run(true) - nop).max(0.0);
    let _ = b.forget_all();
    sys::discard_tail(b, 0);
    CallCost {
        traced_ns,
        quiet_ns,
    }
}
