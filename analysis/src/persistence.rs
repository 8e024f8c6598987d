//! Persistence ordering (seed 001 §3.4, Kasick's thesis): "a positive-value accumulator for every
//! component in which we add one (+1) for each window where the component is anomalous, and
//! subtract one (−1, and only if the accumulator is > 0) for each window where the component is
//! not", components then "ordered by decreasing accumulator value".
//!
//! One counter for everything culprit ranks: nodes (the ranked suspects of a report), functions
//! (the order of a root-cause table), metrics or OS resources (a family's own root cause). What
//! "anomalous in a window" means is the caller's: a node above its threshold, a function that
//! alone deviates more than a typical node does in all functions together.
//!
//! Seed 001 watches a live system and ranks by the accumulator's *current* value (its recent
//! history). A report of a finished run also needs a fault that ended before the data did, whose
//! accumulator has wound down since: it ranks by the *peak* value, and reports the current
//! value beside it.

use std::collections::HashMap;
use std::hash::Hash;

use serde::{Deserialize, Serialize};

/// The accumulator of one component.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Persistence {
    /// The accumulator now: +1 per anomalous window, −1 (not below 0) per other window.
    pub current: u32,
    /// Its largest value: the longest-sustained anomaly, net of the normal windows inside it.
    pub peak: u32,
    /// Anomalous windows in all.
    pub anomalous: u32,
    /// Windows counted (anomalous or not).
    pub windows: u32,
}

impl Persistence {
    /// Counts one window.
    pub fn push(&mut self, anomalous: bool) {
        self.windows += 1;
        if anomalous {
            self.current += 1;
            self.anomalous += 1;
            self.peak = self.peak.max(self.current);
        } else {
            self.current = self.current.saturating_sub(1);
        }
    }

    /// The order of seed 001 §3.4 read for a finished run: most persistent first (peak, then
    /// the current value, then the number of anomalous windows).
    pub fn order(&self, other: &Persistence) -> std::cmp::Ordering {
        (other.peak, other.current, other.anomalous).cmp(&(self.peak, self.current, self.anomalous))
    }
}

/// Accumulators of many components of which few are ever anomalous (the functions of a node).
/// A component never anomalous has an accumulator of zero, and decrementing zero changes
/// nothing, so only components seen anomalous are stored, and each stored one catches up on the
/// decrements of the windows since it was last anomalous when it is next touched or read: a
/// window costs as much as it has anomalous components.
#[derive(Clone, Debug)]
pub struct Ledger<K> {
    entries: HashMap<K, Entry>,
    windows: u32,
}

/// A stored accumulator: its value as of window `last`.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    value: u32,
    last: u32,
    peak: u32,
    anomalous: u32,
}

impl<K> Default for Ledger<K> {
    fn default() -> Self {
        Ledger {
            entries: HashMap::new(),
            windows: 0,
        }
    }
}

impl<K: Copy + Eq + Hash> Ledger<K> {
    /// Counts one window in which exactly the components `anomalous` were anomalous (each
    /// listed once).
    pub fn window(&mut self, anomalous: &[K]) {
        self.windows += 1;
        let now = self.windows;
        for &k in anomalous {
            let e = self.entries.entry(k).or_default();
            // The windows after `last` and before this one were not anomalous.
            let missed = now - 1 - e.last;
            e.value = e.value.saturating_sub(missed) + 1;
            e.last = now;
            e.anomalous += 1;
            e.peak = e.peak.max(e.value);
        }
    }

    /// Windows counted.
    pub fn windows(&self) -> u32 {
        self.windows
    }

    fn read(&self, e: &Entry) -> Persistence {
        Persistence {
            current: e.value.saturating_sub(self.windows - e.last),
            peak: e.peak,
            anomalous: e.anomalous,
            windows: self.windows,
        }
    }

    /// The accumulator of `k` (zero when never anomalous).
    pub fn get(&self, k: &K) -> Persistence {
        match self.entries.get(k) {
            Some(e) => self.read(e),
            None => Persistence {
                windows: self.windows,
                ..Persistence::default()
            },
        }
    }

    /// Components seen anomalous at least once, with their accumulators.
    pub fn iter(&self) -> impl Iterator<Item = (K, Persistence)> + '_ {
        self.entries.iter().map(|(&k, e)| (k, self.read(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn seed_001_accumulator() {
        let mut p = Persistence::default();
        for a in [true, true, false, true, false, false, false] {
            p.push(a);
        }
        // 1, 2, 1, 2, 1, 0, 0
        assert_eq!(p.current, 0);
        assert_eq!(p.peak, 2);
        assert_eq!(p.anomalous, 3);
        assert_eq!(p.windows, 7);
    }

    #[test]
    fn a_duty_cycle_above_half_grows() {
        // Seed 001 §6: "components will register as persistently anomalous if they oscillate
        // with a duty cycle greater than 50 %".
        let mut p = Persistence::default();
        for i in 0..30 {
            p.push(i % 3 != 0);
        }
        assert!(p.peak >= 9, "{p:?}");
        let mut q = Persistence::default();
        for i in 0..30 {
            q.push(i % 2 == 0);
        }
        assert_eq!(q.peak, 1, "{q:?}");
    }

    #[test]
    fn order_is_most_persistent_first() {
        let a = Persistence {
            current: 0,
            peak: 5,
            anomalous: 5,
            windows: 10,
        };
        let b = Persistence {
            current: 3,
            peak: 3,
            anomalous: 6,
            windows: 10,
        };
        let mut v = [b, a];
        v.sort_by(Persistence::order);
        assert_eq!(v, [a, b]);
    }

    proptest! {
        /// The sparse ledger agrees with one plain accumulator per component.
        #[test]
        fn ledger_matches_plain_accumulators(windows in prop::collection::vec(prop::collection::vec(0u8..6, 0..4), 0..40)) {
            let mut ledger = Ledger::<u8>::default();
            let mut plain = [Persistence::default(); 6];
            for w in &windows {
                let mut set: Vec<u8> = w.clone();
                set.sort_unstable();
                set.dedup();
                ledger.window(&set);
                for (k, p) in plain.iter_mut().enumerate() {
                    p.push(set.contains(&(k as u8)));
                }
            }
            for (k, p) in plain.iter().enumerate() {
                prop_assert_eq!(ledger.get(&(k as u8)), *p);
            }
        }
    }
}
