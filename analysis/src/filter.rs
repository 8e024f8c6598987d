//! Anomaly filtering: a node is faulty when it is anomalous in at least k of the last 2k − 1
//! windows (seed 000 §"Window Aggregation & Anomaly Filtering", k = 3).
//!
//! A window in which the node has no (complete) data is not evidence either way: it counts as
//! "not anomalous" and still takes a place among the last 2k − 1, so a gap delays a verdict
//! rather than inventing one.

use std::collections::VecDeque;

/// The k-of-(2k − 1) filter of one node and metric.
#[derive(Clone, Debug)]
pub struct KOfN {
    k: usize,
    last: VecDeque<bool>,
    anomalous: usize,
}

impl KOfN {
    /// A filter for `k ≥ 1`.
    pub fn new(k: usize) -> Self {
        assert!(k >= 1, "k must be at least 1");
        KOfN {
            k,
            last: VecDeque::with_capacity(2 * k - 1),
            anomalous: 0,
        }
    }

    /// The span of windows considered, 2k − 1.
    pub fn span(&self) -> usize {
        2 * self.k - 1
    }

    /// Records the next window; returns true when the node is now faulty (at least k of the
    /// last 2k − 1 windows anomalous).
    pub fn push(&mut self, anomalous: bool) -> bool {
        if self.last.len() == self.span() && self.last.pop_front() == Some(true) {
            self.anomalous -= 1;
        }
        self.last.push_back(anomalous);
        self.anomalous += usize::from(anomalous);
        self.faulty()
    }

    /// True when at least k of the last 2k − 1 windows were anomalous.
    pub fn faulty(&self) -> bool {
        self.anomalous >= self.k
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn three_of_five() {
        let mut f = KOfN::new(3);
        let seq = [true, false, true, false, false, true, false, true];
        let got: Vec<bool> = seq.iter().map(|&a| f.push(a)).collect();
        // Window 5: last five T F T F F → 2; window 6: F T F F T → 2; window 8: F F T F T → 2.
        assert_eq!(got, vec![false; 8]);
        let mut f = KOfN::new(3);
        let got: Vec<bool> = [true, true, false, true, false, false, false]
            .iter()
            .map(|&a| f.push(a))
            .collect();
        assert_eq!(got, vec![false, false, false, true, true, false, false]);
    }

    #[test]
    fn k_one_is_the_raw_anomaly() {
        let mut f = KOfN::new(1);
        assert!(f.push(true));
        assert!(!f.push(false));
    }

    proptest! {
        /// The filter equals a brute-force count over the last 2k − 1 windows.
        #[test]
        fn matches_brute_force(k in 1usize..6, seq in prop::collection::vec(any::<bool>(), 0..60)) {
            let mut f = KOfN::new(k);
            for (i, &a) in seq.iter().enumerate() {
                let got = f.push(a);
                let from = (i + 1).saturating_sub(2 * k - 1);
                let n = seq[from..=i].iter().filter(|&&x| x).count();
                prop_assert_eq!(got, n >= k);
            }
        }

        /// Fewer than k anomalies in total can never make a node faulty; k consecutive ones
        /// always do.
        #[test]
        fn bounds(k in 1usize..6, seq in prop::collection::vec(any::<bool>(), 0..60)) {
            let mut f = KOfN::new(k);
            let total = seq.iter().filter(|&&x| x).count();
            let fired = seq.iter().map(|&a| f.push(a)).fold(false, |a, b| a | b);
            if total < k {
                prop_assert!(!fired);
            }
            let run = seq.windows(k).any(|w| w.iter().all(|&x| x));
            if run {
                prop_assert!(fired);
            }
        }
    }
}
