//! Rare functions: a function below the keep rule that one node calls orders of magnitude more
//! often than its peers (issue 31: a node logging 859 debug lines against its peers' 2 was
//! invisible, its logging function never reaching 1 s of time in a window).
//!
//! Seed 000 §"Feature-Vector Dimensionality" keeps a function only when it reaches 100 samples
//! or 1 s of time in some window on some node: "many components … have small values (and thus,
//! little diagnosis influence)". That holds for a function that is small on *every* node; it
//! does not hold for one that is small on the peers and large on one node — the rule then hides
//! the very difference peer comparison is for. culprit keeps the seed's rule for the feature
//! vectors (a rare function in the Manhattan distance would still be drowned by the large ones)
//! and adds, for the count metric only, a second test beside the distance, on the functions
//! the keep rule left out:
//!
//! * **the noise floor** of a function for a node is what its peers' counts say a healthy node
//!   can reach: the Poisson upper bound ([`poisson_upper`], one-sided 99.9 %) of the largest
//!   count any peer has shown of it in any window compared so far. Poisson, because calls of a
//!   rare function are counts of rare events: 0 against 2 is then no evidence (the bound of 0 is
//!   6.9 calls), and a peer's occasional burst raises the floor for good;
//! * **the ratio** of the node's count to that floor must reach the node's bar: untrained
//!   [`RARE_RATIO`] (10: an order of magnitude above anything its peers showed); trained, the
//!   largest ratio the node showed in fault-free training, doubled like every trained threshold
//!   (seed 000 §"Threshold selection"), never below [`RARE_RATIO`]. The floor is above the
//!   peers' median by construction, so a node that passes is also ≥ 10× its peers' median;
//! * a window in which a node passes is **anomalous** on count, like a window whose score
//!   exceeds its threshold, and goes through the same k-of-(2k − 1) filter; the function is
//!   added to the node's root cause.
//!
//! docs/thresholds.md ("Rare functions") derives the numbers and gives their measured cost.

use std::collections::BTreeMap;

/// Untrained bar, and the least trained one: a node's count of a rare function must reach 10×
/// its noise floor (an order of magnitude).
pub const RARE_RATIO: f64 = 10.0;

/// The standard normal quantile of the noise floor's one-sided confidence (99.9 %).
const Z: f64 = 3.090_232;

/// The upper bound of a Poisson mean when `k` events were seen, one-sided 99.9 %
/// (Wilson–Hilferty's approximation of the exact bound ½·χ²(2k + 2); within 2.5 % of it, above
/// it for small `k`: 7.1 calls for `k` = 0 against 6.9). `k` may be fractional: window sums are scaled over gaps.
pub fn poisson_upper(k: f64) -> f64 {
    let n = k.max(0.0) + 1.0;
    let c = 1.0 - 1.0 / (9.0 * n) + Z / (3.0 * n.sqrt());
    n * c * c * c
}

/// The bar of one metric: the ratio over its noise floor a node's count of a rare function
/// must reach for the window to be anomalous.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RareBars {
    /// The bar, for every node.
    pub bar: f64,
}

impl RareBars {
    /// Untrained: [`RARE_RATIO`].
    pub fn untrained() -> Self {
        RareBars { bar: RARE_RATIO }
    }

    /// The bar of a thresholds file's `rare` entry (per node): every node gets the largest
    /// node's (pooled, as thresholds are by default: peers are alike by the method's premise,
    /// and which node strayed most in training changes from run to run; docs/thresholds.md).
    /// An empty entry (a file written before it existed) gives the untrained bar.
    pub fn trained(bars: &BTreeMap<String, f64>) -> Self {
        RareBars {
            bar: bars.values().copied().fold(RARE_RATIO, f64::max),
        }
    }
}

/// A trained bar from the largest ratio a node showed in training: doubled (seed 000's
/// cushion), at least [`RARE_RATIO`].
pub fn trained_bar(max_ratio: f64) -> f64 {
    (2.0 * max_ratio).max(RARE_RATIO)
}

/// What was found of one rare function on one node, over its windows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RareFound {
    /// Windows in which it passed.
    pub windows: u64,
    /// Σ the node's count in them.
    pub node: f64,
    /// Σ its peers' median count in them.
    pub peers: f64,
    /// Σ its noise floor in them.
    pub floor: f64,
    /// The largest ratio of the node's count to the noise floor.
    pub max_ratio: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Exact one-sided 99.9 % upper bounds of a Poisson mean (½·χ²₀.₉₉₉(2k + 2)).
    #[test]
    fn poisson_upper_is_close_to_the_exact_bound() {
        for (k, exact) in [
            (0.0, 6.908),
            (1.0, 9.233),
            (2.0, 11.229),
            (10.0, 24.134),
            (100.0, 134.924),
        ] {
            let u = poisson_upper(k);
            assert!((u - exact).abs() / exact < 0.025, "k {k}: {u} vs {exact}");
        }
    }

    #[test]
    fn bars() {
        assert_eq!(RareBars::untrained().bar, RARE_RATIO);
        let mut m = BTreeMap::new();
        m.insert("n1".to_string(), 24.0);
        m.insert("n2".to_string(), 3.0);
        assert_eq!(RareBars::trained(&m).bar, 24.0, "pooled: the largest");
        assert_eq!(RareBars::trained(&BTreeMap::new()).bar, RARE_RATIO);
        assert_eq!(trained_bar(3.0), RARE_RATIO);
        assert_eq!(trained_bar(7.0), 14.0);
    }
}
