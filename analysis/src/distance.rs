//! Distances between feature vectors (seed 000 §"Distance Measure").
//!
//! Every distance here is a sum of per-component terms, `d(p, q) = Σ term(p̂ᵢ, q̂ᵢ)`, after an
//! optional per-vector preparation `p ↦ p̂` (identity except for KL, which compares
//! distributions). The per-component term is also the "component distance" that root-cause
//! analysis sums over anomalous windows, so root cause works with any distance.
//!
//! New distances (CDF distances of seed 001, variance weighting of seed 000 §5) are added here.

use serde::{Deserialize, Serialize};

/// Mixing weight of the uniform distribution in [`Distance::SymKl`]'s smoothing.
pub const KL_SMOOTHING: f64 = 1e-3;

/// Unit of CDF distances: Σ|P(i) − Q(i)| over histogram bins.
pub const CDF_UNIT: &str = "cdf";

/// A distance between two feature vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Distance {
    /// Σ|pᵢ − qᵢ| (the default: "Manhattan results were the best overall", seed 000).
    #[cfg_attr(feature = "clap", value(help = "Σ|p−q| (seed 000's best overall)"))]
    Manhattan,
    /// Σ|pᵢ − qᵢ| / max(pᵢ, qᵢ), a term being 0 when both are 0. Bounded by the dimension.
    #[cfg_attr(feature = "clap", value(help = "Σ|p−q|/max(p,q)"))]
    Relative,
    /// Σ(pᵢ − qᵢ)² / max(pᵢ, qᵢ), a term being 0 when both are 0.
    #[cfg_attr(feature = "clap", value(help = "Σ(p−q)²/max(p,q)"))]
    Scaled,
    /// Symmetric Kullback–Leibler divergence of the vectors as distributions over components:
    /// ½ Σ (p̂ᵢ − q̂ᵢ)(ln p̂ᵢ − ln q̂ᵢ) — which is ½ Σ p̂ᵢ ln(p̂ᵢ/q̂ᵢ) + q̂ᵢ ln(q̂ᵢ/p̂ᵢ) — where
    /// p̂ = (1 − λ)·p/Σp + λ/F mixes in the uniform distribution with λ = [`KL_SMOOTHING`] so
    /// that a zero component (a function one node never ran) gives a finite, large term instead
    /// of infinity. An all-zero vector becomes the uniform distribution.
    #[cfg_attr(
        feature = "clap",
        value(
            name = "kl",
            help = "symmetric Kullback–Leibler divergence of the vectors as distributions (zeros \
                smoothed with 0.1 % of the uniform distribution)"
        )
    )]
    #[serde(rename = "kl")]
    SymKl,
    /// Not a distance between window sums: every metric is compared as the distribution of its
    /// per-slot values in the window, Σ|P(i) − Q(i)| over their cumulative histograms (seed
    /// 001 §3.3, [`crate::cdf`]), as the OS metrics always are. On the histograms it is the
    /// Manhattan distance.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "compare each function's per-second distributions: Σ|P(i)−Q(i)| of \
            cumulative histograms (seed 001)"
        )
    )]
    Cdf,
}

impl Distance {
    /// The name users type and read.
    pub fn name(self) -> &'static str {
        match self {
            Distance::Manhattan => "manhattan",
            Distance::Relative => "relative",
            Distance::Scaled => "scaled",
            Distance::SymKl => "kl",
            Distance::Cdf => "cdf",
        }
    }

    /// Unit of the distance given the metric's unit.
    pub fn unit(self, metric_unit: &'static str) -> &'static str {
        match self {
            Distance::Manhattan | Distance::Scaled => metric_unit,
            Distance::Relative => "relative",
            Distance::SymKl => "nats",
            Distance::Cdf => CDF_UNIT,
        }
    }

    /// Grid on which trained thresholds are rounded up ("least integer threshold", seed 000):
    /// one unit for distances in the metric's unit, finer for the unit-free ones.
    pub fn threshold_quantum(self) -> f64 {
        match self {
            Distance::Manhattan | Distance::Scaled => 1.0,
            Distance::Relative | Distance::SymKl | Distance::Cdf => 1e-3,
        }
    }

    /// Prepares a vector in place before distances are taken.
    pub fn prepare(self, v: &mut [f64]) {
        if self != Distance::SymKl || v.is_empty() {
            return;
        }
        let total: f64 = v.iter().sum();
        let f = v.len() as f64;
        if total <= 0.0 {
            v.fill(1.0 / f);
            return;
        }
        let a = (1.0 - KL_SMOOTHING) / total;
        let b = KL_SMOOTHING / f;
        for x in v.iter_mut() {
            *x = *x * a + b;
        }
    }

    /// The term of one component (inputs prepared).
    #[inline]
    pub fn term(self, p: f64, q: f64) -> f64 {
        match self {
            Distance::Manhattan | Distance::Cdf => (p - q).abs(),
            Distance::Relative => {
                let m = p.max(q);
                if m > 0.0 {
                    (p - q).abs() / m
                } else {
                    0.0
                }
            }
            Distance::Scaled => {
                let m = p.max(q);
                if m > 0.0 {
                    (p - q) * (p - q) / m
                } else {
                    0.0
                }
            }
            Distance::SymKl => {
                if p > 0.0 && q > 0.0 {
                    0.5 * (p - q) * (p.ln() - q.ln())
                } else {
                    0.0
                }
            }
        }
    }

    /// The distance between two prepared vectors of equal length.
    pub fn dist(self, p: &[f64], q: &[f64]) -> f64 {
        debug_assert_eq!(p.len(), q.len());
        match self {
            Distance::Manhattan | Distance::Cdf => manhattan(p, q),
            _ => p.iter().zip(q).map(|(&a, &b)| self.term(a, b)).sum(),
        }
    }
}

/// Σ|pᵢ − qᵢ| with four independent accumulators, so the compiler vectorizes it.
fn manhattan(p: &[f64], q: &[f64]) -> f64 {
    let mut acc = [0.0f64; 4];
    let pc = p.chunks_exact(4);
    let qc = q.chunks_exact(4);
    let (pr, qr) = (pc.remainder(), qc.remainder());
    for (a, b) in pc.zip(qc) {
        for i in 0..4 {
            acc[i] += (a[i] - b[i]).abs();
        }
    }
    let mut s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    for (a, b) in pr.iter().zip(qr) {
        s += (a - b).abs();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const ALL: [Distance; 4] = [
        Distance::Manhattan,
        Distance::Relative,
        Distance::Scaled,
        Distance::SymKl,
    ];

    fn prepared(d: Distance, v: &[f64]) -> Vec<f64> {
        let mut v = v.to_vec();
        d.prepare(&mut v);
        v
    }

    #[test]
    fn seed_formulas_on_a_worked_example() {
        let p = [4.0, 0.0, 2.0];
        let q = [1.0, 3.0, 2.0];
        assert_eq!(Distance::Manhattan.dist(&p, &q), 3.0 + 3.0 + 0.0);
        assert!((Distance::Relative.dist(&p, &q) - (3.0 / 4.0 + 3.0 / 3.0)).abs() < 1e-12);
        assert!((Distance::Scaled.dist(&p, &q) - (9.0 / 4.0 + 9.0 / 3.0)).abs() < 1e-12);
        // KL of two distributions without zeros equals the textbook formula up to smoothing.
        let p = [0.5, 0.25, 0.25];
        let q = [0.25, 0.5, 0.25];
        let exact: f64 = 0.5
            * p.iter()
                .zip(&q)
                .map(|(a, b): (&f64, &f64)| a * (a / b).ln() + b * (b / a).ln())
                .sum::<f64>();
        let got = Distance::SymKl.dist(
            &prepared(Distance::SymKl, &p),
            &prepared(Distance::SymKl, &q),
        );
        assert!((got - exact).abs() < 2e-3 * exact, "{got} vs {exact}");
    }

    #[test]
    fn kl_handles_zeros_and_empty_vectors() {
        let p = prepared(Distance::SymKl, &[10.0, 0.0]);
        let q = prepared(Distance::SymKl, &[0.0, 10.0]);
        let d = Distance::SymKl.dist(&p, &q);
        assert!(d.is_finite() && d > 1.0, "{d}");
        let z = prepared(Distance::SymKl, &[0.0, 0.0]);
        assert_eq!(z, vec![0.5, 0.5]);
        // Scale does not matter to KL: it compares shapes.
        let a = prepared(Distance::SymKl, &[1.0, 3.0]);
        let b = prepared(Distance::SymKl, &[100.0, 300.0]);
        assert!(Distance::SymKl.dist(&a, &b).abs() < 1e-12);
    }

    #[test]
    fn manhattan_fast_path_matches_terms() {
        let p: Vec<f64> = (0..11).map(|i| (i * 7 % 5) as f64).collect();
        let q: Vec<f64> = (0..11).map(|i| (i * 3 % 4) as f64).collect();
        let slow: f64 = p.iter().zip(&q).map(|(a, b)| (a - b).abs()).sum();
        assert_eq!(Distance::Manhattan.dist(&p, &q), slow);
    }

    fn vec_pair() -> impl Strategy<Value = (Vec<f64>, Vec<f64>, Vec<f64>)> {
        (1usize..12).prop_flat_map(|n| {
            (
                prop::collection::vec(0.0f64..1e6, n),
                prop::collection::vec(0.0f64..1e6, n),
                prop::collection::vec(0.0f64..1e6, n),
            )
        })
    }

    proptest! {
        #[test]
        fn distances_are_symmetric_nonnegative_and_zero_on_self((p, q, _r) in vec_pair()) {
            for d in ALL {
                let (p, q) = (prepared(d, &p), prepared(d, &q));
                let pq = d.dist(&p, &q);
                let qp = d.dist(&q, &p);
                prop_assert!(pq >= 0.0);
                prop_assert!((pq - qp).abs() <= 1e-9 * pq.max(1.0));
                prop_assert!(d.dist(&p, &p).abs() <= 1e-12);
                // The distance is the sum of its component terms (root cause relies on it).
                let terms: f64 = p.iter().zip(&q).map(|(&a, &b)| d.term(a, b)).sum();
                prop_assert!((terms - pq).abs() <= 1e-9 * pq.max(1.0));
            }
        }

        #[test]
        fn manhattan_obeys_the_triangle_inequality((p, q, r) in vec_pair()) {
            let d = Distance::Manhattan;
            prop_assert!(d.dist(&p, &r) <= d.dist(&p, &q) + d.dist(&q, &r) + 1e-6);
        }

        #[test]
        fn relative_terms_are_at_most_one((p, q, _r) in vec_pair()) {
            for (a, b) in p.iter().zip(&q) {
                prop_assert!(Distance::Relative.term(*a, *b) <= 1.0);
            }
        }
    }
}
