//! Timestamps of the hot path and their conversion to nanoseconds.
//!
//! The hooks take two timestamps per call, so the source matters: `rdtsc` costs about 10 ns
//! here, `clock_gettime(CLOCK_MONOTONIC)` through the vDSO about 23 ns. The TSC is used when
//! `/proc/cpuinfo` says it is invariant (`constant_tsc` and `nonstop_tsc`: same rate on every
//! CPU, in every power state); otherwise `CLOCK_MONOTONIC` in ns. Ticks are converted to ns by
//! the flusher, never in the hooks, with a ratio measured against `CLOCK_MONOTONIC` since the
//! runtime started and refined at every flush (the longer the span, the better the ratio).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use crate::sys;

static USE_TSC: AtomicBool = AtomicBool::new(false);
/// ns per tick in 32.32 fixed point, for the hooks' histograms (refined at every flush).
static NS_PER_TICK_Q32: AtomicU64 = AtomicU64::new(1 << 32);

/// `ticks` in ns with the latest ratio (the hooks' histograms: one multiplication).
#[inline(always)]
pub fn ticks_to_ns_fast(ticks: u64) -> u64 {
    ((ticks as u128 * NS_PER_TICK_Q32.load(Relaxed) as u128) >> 32) as u64
}

/// `ns` in ticks with the latest ratio, short by 1/256: a boundary computed with it comes
/// early, never late, despite the ratio's error (1e-4 after the start-up measurement, far less
/// once refined) and a wall clock being slewed (NTP: at most 1/2000). See
/// `ThreadBlock::set_boundary`.
pub fn ns_to_ticks_short(ns: u64) -> u64 {
    let q = NS_PER_TICK_Q32.load(Relaxed).max(1);
    let t = ((ns as u128) << 32) / q as u128;
    (t - (t >> 8)).min(u64::MAX as u128) as u64
}

/// A timestamp source of the hot path.
pub trait Ticks {
    /// The current timestamp.
    fn now() -> u64;
}

/// The time-stamp counter.
#[derive(Debug)]
pub struct Tsc;

impl Ticks for Tsc {
    #[inline(always)]
    fn now() -> u64 {
        sys::rdtsc()
    }
}

/// `CLOCK_MONOTONIC`, in ns.
#[derive(Debug)]
pub struct Monotonic;

impl Ticks for Monotonic {
    #[inline(always)]
    fn now() -> u64 {
        sys::monotonic_ns()
    }
}

/// True when the hooks use the TSC.
pub fn uses_tsc() -> bool {
    USE_TSC.load(Relaxed)
}

/// Name of the timestamp source, for the `clock` info key.
pub fn source_name() -> &'static str {
    if USE_TSC.load(Relaxed) {
        "tsc"
    } else {
        "monotonic"
    }
}

/// True when /proc/cpuinfo's flags promise an invariant TSC.
fn tsc_is_invariant(cpuinfo: &str) -> bool {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("flags"))
        .is_some_and(|l| {
            let mut words = l.split_whitespace();
            let (mut constant, mut nonstop) = (false, false);
            for w in &mut words {
                constant |= w == "constant_tsc";
                nonstop |= w == "nonstop_tsc";
            }
            constant && nonstop
        })
}

/// Converts ticks to ns; refined at every [`Calibration::refine`].
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    tsc0: u64,
    mono0: u64,
    ns_per_tick: f64,
}

impl Calibration {
    /// Chooses the timestamp source (once per process) and starts calibrating: it first
    /// measures the ratio over 200 µs (good to about 1e-4: the hooks place interval
    /// boundaries with it from the first call), over 2 ms with `early` (histograms: the hooks
    /// convert ticks to ns from the first call).
    pub fn start(early: bool) -> Self {
        let tsc = cfg!(target_arch = "x86_64")
            && std::env::var_os("CULPRIT_CLOCK").is_none_or(|v| v != "monotonic")
            && std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|s| tsc_is_invariant(&s));
        USE_TSC.store(tsc, Relaxed);
        let (tsc0, mono0) = Self::pair();
        let mut c = Calibration {
            tsc0,
            mono0,
            ns_per_tick: 1.0,
        };
        if tsc {
            c.refine_over(if early { 2_000_000 } else { 200_000 });
        }
        c
    }

    fn pair() -> (u64, u64) {
        // Bracket the clock read between two TSC reads and take the midpoint — of the tightest
        // of a few brackets: a thread preempted inside one is off by up to half the preemption
        // (milliseconds on a loaded host), and the ratio comes from two pairs, the first taken
        // at start-up, when a loaded host preempts most. (A 20 ms spin once came out as 19.0 ms
        // in a test run beside other work; a preempted start-up bracket is one way to get it.)
        let mut best = (u64::MAX, 0, 0);
        for _ in 0..8 {
            let a = sys::rdtsc();
            let m = sys::monotonic_ns();
            let b = sys::rdtsc();
            let width = b.wrapping_sub(a);
            if width < best.0 {
                best = (width, a / 2 + b / 2, m);
            }
        }
        (best.1, best.2)
    }

    /// Refines the ratio with the span since the start. Needs at least 1 ms of span for a
    /// ratio good to 1e-4; a shorter one (a program that exits at once) waits out the rest.
    pub fn refine(&mut self) {
        self.refine_over(1_000_000);
    }

    fn refine_over(&mut self, min_ns: u64) {
        if !USE_TSC.load(Relaxed) {
            return;
        }
        loop {
            let (t, m) = Self::pair();
            let (dt, dm) = (t.saturating_sub(self.tsc0), m.saturating_sub(self.mono0));
            if dm >= min_ns && dt > 0 {
                self.ns_per_tick = dm as f64 / dt as f64;
                NS_PER_TICK_Q32.store((self.ns_per_tick * (1u64 << 32) as f64) as u64, Relaxed);
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// `ticks` in ns.
    pub fn to_ns(&self, ticks: u64) -> u64 {
        if USE_TSC.load(Relaxed) {
            (ticks as f64 * self.ns_per_tick).round() as u64
        } else {
            ticks
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invariant_tsc_needs_both_flags() {
        assert!(tsc_is_invariant(
            "flags\t: fpu tsc constant_tsc nonstop_tsc x\n"
        ));
        assert!(!tsc_is_invariant("flags\t: fpu tsc constant_tsc\n"));
        assert!(!tsc_is_invariant("processor: 0\n"));
    }
}
