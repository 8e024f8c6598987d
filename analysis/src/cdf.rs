//! Distributions compared by their CDFs (seed 001 §5, "CDF Distances"): each node's per-slot
//! values of a component over a window become a cumulative histogram on bins shared by all
//! nodes, and two nodes differ by Σ|P(i) − Q(i)| over the bins — which, unlike a divergence of
//! densities, also measures how far apart two histograms that do not overlap are.
//!
//! Bins follow seed 001's modified Freedman–Diaconis rule, BinSize = 2·IQR·n^(−1/3) over the
//! values of all nodes (so that histograms are comparable), n the values per node, at most
//! `max_bins` bins; the interquartile range is estimated as twice the median absolute
//! deviation, which seed 001 found robust to one outlying node in groups as small as three.

use crate::score::median_in_place;

/// Bins shared by all nodes' histograms of one component in one window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bins {
    /// Lower edge of the first bin.
    pub lo: f64,
    /// Width of a bin (0 when all values are equal).
    pub width: f64,
    /// Number of bins, at least 1.
    pub count: usize,
}

impl Bins {
    /// Bins for `pooled` (every node's values), `per_node` values per node.
    pub fn shared(pooled: &[f64], per_node: usize, max_bins: usize) -> Bins {
        let max_bins = max_bins.max(1);
        let lo = pooled.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = pooled.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if pooled.is_empty() || hi <= lo {
            return Bins {
                lo: if lo.is_finite() { lo } else { 0.0 },
                width: 0.0,
                count: 1,
            };
        }
        let range = hi - lo;
        let mut v = pooled.to_vec();
        let med = median_in_place(&mut v);
        for x in v.iter_mut() {
            *x = (*x - med).abs();
        }
        let iqr = 2.0 * median_in_place(&mut v);
        let fd = 2.0 * iqr * (per_node.max(1) as f64).powf(-1.0 / 3.0);
        // More than half the values equal: the finest bins allowed.
        let width = if fd > 0.0 {
            fd
        } else {
            range / max_bins as f64
        };
        let count = ((range / width).ceil() as usize).clamp(1, max_bins);
        Bins {
            lo,
            width: range / count as f64,
            count,
        }
    }

    /// The bin of `x`.
    fn index(&self, x: f64) -> usize {
        if self.width <= 0.0 {
            return 0;
        }
        (((x - self.lo) / self.width) as usize).min(self.count - 1)
    }

    /// The cumulative histogram of `values` into `out` (`count` entries): the fraction of the
    /// values in bin `i` or below.
    pub fn cumulative(&self, values: &[f64], out: &mut [f64]) {
        out.fill(0.0);
        if values.is_empty() {
            return;
        }
        for &x in values {
            out[self.index(x)] += 1.0;
        }
        let n = values.len() as f64;
        let mut acc = 0.0;
        for o in out.iter_mut() {
            acc += *o;
            *o = acc / n;
        }
    }
}

/// The CDF distance Σ|P(i) − Q(i)| of two cumulative histograms on the same bins.
pub fn distance(p: &[f64], q: &[f64]) -> f64 {
    p.iter().zip(q).map(|(a, b)| (a - b).abs()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_values_are_zero_apart_and_shifted_ones_are_not() {
        let a: Vec<f64> = (0..60).map(|i| (i % 10) as f64).collect();
        let b: Vec<f64> = a.iter().map(|x| x + 20.0).collect();
        let pooled: Vec<f64> = a.iter().chain(&b).copied().collect();
        let bins = Bins::shared(&pooled, 60, 1000);
        let (mut p, mut q) = (vec![0.0; bins.count], vec![0.0; bins.count]);
        bins.cumulative(&a, &mut p);
        bins.cumulative(&a, &mut q);
        assert_eq!(distance(&p, &q), 0.0);
        bins.cumulative(&b, &mut q);
        // Disjoint histograms: every bin between them counts fully.
        assert!(distance(&p, &q) > bins.count as f64 / 3.0, "{bins:?}");
        assert_eq!(*p.last().unwrap(), 1.0);
    }

    #[test]
    fn bins_are_capped_and_never_empty() {
        let mut v = vec![0.0; 100];
        v.push(1e9);
        let b = Bins::shared(&v, 10, 50);
        assert!(b.count >= 1 && b.count <= 50, "{b:?}");
        let flat = Bins::shared(&[3.0; 10], 10, 50);
        assert_eq!(flat.count, 1);
        let mut out = [0.0];
        flat.cumulative(&[3.0, 3.0], &mut out);
        assert_eq!(out, [1.0]);
    }

    #[test]
    fn same_mean_different_spread_differs() {
        // Equal sums over the window, different distributions: what window sums cannot see.
        let narrow: Vec<f64> = (0..60).map(|i| 100.0 + (i % 3) as f64 - 1.0).collect();
        let wide: Vec<f64> = (0..60)
            .map(|i| if i % 2 == 0 { 50.0 } else { 150.0 })
            .collect();
        assert_eq!(narrow.iter().sum::<f64>(), wide.iter().sum::<f64>());
        let pooled: Vec<f64> = narrow.iter().chain(&wide).copied().collect();
        let bins = Bins::shared(&pooled, 60, 1000);
        let (mut p, mut q) = (vec![0.0; bins.count], vec![0.0; bins.count]);
        bins.cumulative(&narrow, &mut p);
        bins.cumulative(&wide, &mut q);
        assert!(distance(&p, &q) > 1.0);
    }
}
