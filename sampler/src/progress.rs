//! A heartbeat of the sampler's work, for a watchdog that must tell a run that is slow (a
//! host so loaded the sampler gets little CPU) from one that is stuck (a thread in a kernel
//! call that never returns): the main loop, the writing of each interval and the ending of
//! each file beat; a run whose beats stop is stuck.

use std::sync::atomic::{AtomicU64, Ordering};

static BEATS: AtomicU64 = AtomicU64::new(0);

/// Says the run made progress.
pub fn beat() {
    BEATS.fetch_add(1, Ordering::Relaxed);
}

/// Beats so far: a watchdog compares two readings.
pub fn beats() -> u64 {
    BEATS.load(Ordering::Relaxed)
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
}
