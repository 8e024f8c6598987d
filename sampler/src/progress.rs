//! A heartbeat of the sampler's work, for a watchdog that must tell a run that is slow (a
//! host so loaded the sampler gets little CPU) from one that is stuck (a thread in a kernel
//! call that never returns): the main loop, the writing of each interval, the ending of each
//! file and the release of each perf event beat; a run whose beats stop is stuck.
//!
//! The last step, once every file is ended, is giving the perf events back to the kernel
//! ([`releasing`]): closing the last event of a tracepoint waits for the kernel's RCU grace
//! periods (`synchronize_rcu_tasks_trace`, `synchronize_rcu`), tens of milliseconds each on a
//! busy host, and more than a second for the lot beside heavy disk I/O. That is not a hang
//! the watchdog could end: a process that exits closes the same events and waits the same.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

static BEATS: AtomicU64 = AtomicU64::new(0);
/// Runs giving their perf events back now (a count, so that runs overlapping in one process,
/// as unit tests do, do not end each other's release).
static RELEASING: AtomicU32 = AtomicU32::new(0);

/// Says the run made progress.
pub fn beat() {
    BEATS.fetch_add(1, Ordering::Relaxed);
}

/// Beats so far: a watchdog compares two readings.
pub fn beats() -> u64 {
    BEATS.load(Ordering::Relaxed)
}

/// Says the run's data is complete (its files ended) and its perf events are being given back
/// to the kernel, until the returned guard is dropped.
pub fn releasing() -> Releasing {
    RELEASING.fetch_add(1, Ordering::SeqCst);
    Releasing(())
}

/// True while a run gives its perf events back ([`releasing`]).
pub fn is_releasing() -> bool {
    RELEASING.load(Ordering::SeqCst) > 0
}

/// The release of a run's perf events, in progress until dropped.
#[derive(Debug)]
pub struct Releasing(());

impl Drop for Releasing {
    fn drop(&mut self) {
        RELEASING.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_beat_is_seen() {
        let before = beats();
        beat();
        assert!(beats() > before);
    }

    #[test]
    fn releasing_lasts_as_long_as_its_guard() {
        let before = RELEASING.load(Ordering::SeqCst);
        let g = releasing();
        assert!(is_releasing());
        drop(g);
        assert_eq!(RELEASING.load(Ordering::SeqCst), before);
    }
}
