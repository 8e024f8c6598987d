//! Scheduling of the collection threads, so that the load they measure cannot stop them.
//!
//! The threads that *collect* — the ring reader of `culprit sample` (it copies the perf rings
//! out before they fill), the OS-metrics collector (it reads `/proc` once a second), and the
//! loops that read uprobe counters or rings — do a short, bounded piece of work per wake-up.
//! On a host whose CPUs are all busy (a CPU hog, a node starved by its quota, load 30 on two
//! cores) a thread at the normal priority waits behind the load: rings overflow and seconds go
//! unobserved exactly when culprit matters most. So they run ahead of the load, **with a cap
//! the kernel enforces**:
//!
//! 1. `SCHED_DEADLINE` with a [`Budget`]: at most `runtime` of CPU in every `period` (the
//!    kernel throttles the thread past it until its next period), ahead of every other thread
//!    while within it. The budgets: the ring reader 10 ms per 50 ms (20 % of one CPU; a drain
//!    of a full 16 MiB ring costs about 4 ms), the OS-metrics collector 50 ms per second (5 %),
//!    the uprobe readers 5 ms per 50 ms (10 %). Measured use is far below (docs/sampler.md).
//! 2. Where the kernel refuses a deadline (no CAP_SYS_NICE; the CPUs' deadline bandwidth
//!    taken; a thread pinned to some CPUs): `SCHED_FIFO` at priority 1, the lowest real-time
//!    priority, but only while the kernel's real-time throttling is on
//!    (`kernel.sched_rt_runtime_us` ≠ −1: real-time threads then leave at least 5 % of every
//!    second to the rest); the cap is then the bounded work per wake-up plus that throttling.
//! 3. Else nice −20 (normal policy: the thread shares the CPU by weight, never starves it).
//! 4. Else (no privilege at all) the normal priority, said in one line at start.
//!
//! The thread that decodes, names and writes (the sampler's main loop) does unbounded work
//! (naming a new large image can take a second), so it gets no real-time policy: nice −10,
//! a larger share of a contended CPU, nothing more ([`raise_worker`]).
//!
//! Every policy is set with reset-on-fork: threads and processes a collector creates start at
//! the normal policy.

use std::fmt;
use std::time::Duration;

use crate::sys;

/// A CPU budget: at most `runtime` of CPU in every `period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// CPU time allowed per period.
    pub runtime: Duration,
    /// The period.
    pub period: Duration,
}

impl Budget {
    /// The share of one CPU, in percent.
    pub fn percent(&self) -> f64 {
        100.0 * self.runtime.as_secs_f64() / self.period.as_secs_f64()
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ms per {} ms",
            self.runtime.as_millis(),
            self.period.as_millis()
        )
    }
}

/// The sampler's ring reader: 10 ms every 50 ms (its tick).
pub const RING_READER: Budget = Budget {
    runtime: Duration::from_millis(10),
    period: Duration::from_millis(50),
};

/// The OS-metrics collector: 50 ms every second (its interval).
pub const OS_COLLECTOR: Budget = Budget {
    runtime: Duration::from_millis(50),
    period: Duration::from_secs(1),
};

/// The uprobe readers (counters read every interval, or rings drained every 50 ms).
pub const UPROBE_READER: Budget = Budget {
    runtime: Duration::from_millis(5),
    period: Duration::from_millis(50),
};

/// A watchdog that only looks at a flag now and then (`culprit sample`'s, which ends the
/// process should a run not end within a second of a signal).
pub const WATCHDOG: Budget = Budget {
    runtime: Duration::from_millis(1),
    period: Duration::from_millis(50),
};

/// The nice value of the sampler's main loop (decoding, naming, writing).
pub const WORKER_NICE: i32 = -10;

/// What a thread got.
#[derive(Clone, Debug, PartialEq)]
pub enum Raised {
    /// `SCHED_DEADLINE` with this budget.
    Deadline(Budget),
    /// `SCHED_FIFO` at priority 1 (real-time throttling on).
    Fifo,
    /// The normal policy at this nice value.
    Nice(i32),
    /// Nothing could be raised: why.
    Unchanged(String),
}

impl Default for Raised {
    fn default() -> Self {
        Raised::Unchanged("not started".into())
    }
}

impl fmt::Display for Raised {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Raised::Deadline(b) => write!(f, "SCHED_DEADLINE, at most {b}"),
            Raised::Fifo => write!(f, "SCHED_FIFO 1 (under the kernel's real-time throttling)"),
            Raised::Nice(n) => write!(f, "nice {n}"),
            Raised::Unchanged(why) => write!(f, "normal priority ({why})"),
        }
    }
}

/// True while the kernel's real-time throttling is on (`kernel.sched_rt_runtime_us` is not
/// −1), so a real-time thread cannot take a whole CPU.
fn rt_throttled() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/sched_rt_runtime_us")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .is_some_and(|v| v >= 0)
}

/// Raises the calling thread, a collector with `budget`, as far as it may (see the module
/// documentation for the order).
pub fn raise(budget: Budget) -> Raised {
    let dl = sys::set_thread_deadline(
        budget.runtime.as_nanos() as u64,
        budget.period.as_nanos() as u64,
    );
    let dl_err = match dl {
        Ok(()) => return Raised::Deadline(budget),
        Err(e) => e,
    };
    if rt_throttled() && sys::set_thread_fifo(1).is_ok() {
        return Raised::Fifo;
    }
    if sys::set_thread_nice(-20).is_ok() {
        return Raised::Nice(-20);
    }
    Raised::Unchanged(format!("SCHED_DEADLINE refused: {dl_err}"))
}

/// Raises the calling thread, a collector with `budget` (as [`raise`]), until the returned
/// guard is dropped: then it is back at the normal policy and its nice value. For a loop that
/// runs on a thread that goes on afterwards (`culprit record --uprobes` counts on its main
/// thread).
pub fn raise_scoped(budget: Budget) -> Scoped {
    let nice = sys::thread_nice();
    Scoped {
        raised: raise(budget),
        nice,
    }
}

/// A thread raised by [`raise_scoped`], restored on drop.
#[derive(Debug)]
pub struct Scoped {
    /// What the thread got.
    pub raised: Raised,
    nice: i32,
}

impl Drop for Scoped {
    fn drop(&mut self) {
        if !matches!(self.raised, Raised::Unchanged(_)) {
            let _ = sys::set_thread_normal(self.nice);
        }
    }
}

/// Raises the calling thread, the sampler's main loop, to nice [`WORKER_NICE`] when allowed;
/// returns the nice value it had, to give back with [`restore_worker`].
pub fn raise_worker() -> Option<i32> {
    let before = sys::thread_nice();
    (before > WORKER_NICE && sys::set_thread_nice(WORKER_NICE).is_ok()).then_some(before)
}

/// Gives the calling thread back the nice value [`raise_worker`] returned.
pub fn restore_worker(before: Option<i32>) {
    if let Some(n) = before {
        let _ = sys::set_thread_nice(n);
    }
}

/// What a collector thread with `budget` would get, tried on a thread made for the purpose
/// (the caller's own scheduling stays as it is).
pub fn probe(budget: Budget) -> Raised {
    std::thread::Builder::new()
        .name("culprit-probe".into())
        .spawn(move || raise(budget))
        .ok()
        .and_then(|t| t.join().ok())
        .unwrap_or_else(|| Raised::Unchanged("cannot start a thread".into()))
}

/// True when the calling thread runs under a real-time or deadline policy.
pub fn is_raised() -> bool {
    sys::thread_policy() != libc::SCHED_OTHER
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scoped_raise_is_given_back() {
        std::thread::spawn(|| {
            let nice = sys::thread_nice();
            {
                let g = raise_scoped(UPROBE_READER);
                if sys::euid() == 0 {
                    assert!(!matches!(g.raised, Raised::Unchanged(_)), "{}", g.raised);
                }
            }
            assert_eq!(sys::thread_policy(), libc::SCHED_OTHER);
            assert_eq!(sys::thread_nice(), nice);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn budgets_are_small_shares_of_a_cpu() {
        for b in [RING_READER, OS_COLLECTOR, UPROBE_READER, WATCHDOG] {
            assert!(b.percent() <= 20.0, "{b}: {} %", b.percent());
            assert!(b.runtime < b.period);
        }
        assert_eq!(RING_READER.to_string(), "10 ms per 50 ms");
    }

    /// As root the deadline policy is granted and the kernel enforces the cap: a thread that
    /// spins gets about its budget of CPU, not the whole CPU.
    #[test]
    fn a_deadline_thread_gets_its_budget_and_no_more() {
        if sys::euid() != 0 {
            eprintln!("SKIPPED: needs root (CAP_SYS_NICE)");
            return;
        }
        let budget = Budget {
            runtime: Duration::from_millis(2),
            period: Duration::from_millis(20),
        };
        let (raised, cpu, wall) = std::thread::spawn(move || {
            let r = raise(budget);
            let (c0, w0) = (sys::thread_cpu_ns(), std::time::Instant::now());
            while w0.elapsed() < Duration::from_millis(400) {
                std::hint::spin_loop();
            }
            (r, sys::thread_cpu_ns() - c0, w0.elapsed())
        })
        .join()
        .unwrap();
        if !matches!(raised, Raised::Deadline(_)) {
            // The CPUs' deadline bandwidth may be taken by other samplers on a shared host.
            eprintln!("SKIPPED: deadline refused here ({raised})");
            return;
        }
        let share = cpu as f64 / wall.as_nanos() as f64;
        assert!(
            share < 0.2,
            "a thread capped at 10 % took {:.0} % of a CPU",
            share * 100.0
        );
    }
}
