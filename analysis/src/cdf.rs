//! Distributions compared by their CDFs (seed 001 §3.3, "CDF Distances", and §5.3): each node's
//! per-slot values of a component over a window become a cumulative histogram on bins shared by
//! all nodes, and two nodes differ by Σ|P(i) − Q(i)| over the bins — which, unlike a divergence
//! of densities, also measures how far apart two histograms that do not overlap are.
//!
//! Bins follow seed 001's modified Freedman–Diaconis rule: BinSize = 2·IQR(x)·n^(−1/3) over the
//! values x of *all* nodes (so that the histograms are comparable), n the values per node
//! (seed 001: "since each histogram contains only WinSize samples, we compute BinSize using
//! WinSize number of observations"), and Bins = ⌈Range(x)/BinSize⌉, at most 1,000 (seed 001
//! §5.3: without a cap one outlier asked for 18 million bins). Two departures, each for a reason:
//!
//! * **below [`IQR_MIN_NODES`] nodes the IQR is estimated from the MAD** (2·MAD, the IQR of a
//!   symmetric distribution, so the bin width does not jump when a fifth node joins). The IQR
//!   of the pooled values breaks down when a quarter of them are outliers — with four nodes, one
//!   faulty node is exactly a quarter, and its values would widen the bins until the asymmetry
//!   they should show fits in one bin; the MAD (median absolute deviation from the median)
//!   withstands up to half;
//! * **a bin is never narrower than the metric's resolution** (its smallest difference worth
//!   counting). Σ|P(i) − Q(i)| is the earth mover's distance in units of the bin width, so when
//!   more than half the values are equal (a retransmit counter that is mostly 0) the rule's
//!   width goes to zero and one spike would count as hundreds of bins.
//!
//! Values may be *absent* (NaN: an OS metric the node could not provide in that second, such as
//! `await` without requests — absent is never zero). Absent values get a bin of their own below
//! all the others, so how often a value was absent is compared too, and the bins are computed
//! from the present values only.

use crate::score::median_in_place;

/// From this many nodes on the bins use the interquartile range itself; below, 2·MAD.
pub const IQR_MIN_NODES: usize = 5;
/// Seed 001 §5.3's bin cap.
pub const MAX_BINS: usize = 1000;

/// How bins are chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BinRule {
    /// Most bins per component and window.
    pub max_bins: usize,
    /// Narrowest bin, in the metric's unit (its resolution).
    pub min_width: f64,
}

/// Bins shared by all nodes' histograms of one component in one window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bins {
    /// Lower edge of the first bin of present values.
    pub lo: f64,
    /// Width of a bin (0 when all present values are equal).
    pub width: f64,
    /// Number of bins of present values, at least 1.
    pub count: usize,
    /// Some value is absent: a bin for absent values comes first.
    pub absent: bool,
}

/// The `p` quantile of sorted values, interpolated linearly between order statistics (the
/// "type 7" definition of R and NumPy).
pub fn quantile(sorted: &[f64], p: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        n => {
            let h = (n - 1) as f64 * p.clamp(0.0, 1.0);
            let i = h.floor() as usize;
            let j = (i + 1).min(n - 1);
            sorted[i] + (h - i as f64) * (sorted[j] - sorted[i])
        }
    }
}

/// The IQR of a normal distribution in units of its mean absolute deviation (1.349σ / 0.798σ).
const IQR_PER_MEAN_DEVIATION: f64 = 1.69;

/// The spread the bin rule uses: the interquartile range of `present` from
/// [`IQR_MIN_NODES`] nodes on, else twice its median absolute deviation. When more than half
/// the values are equal both are 0, and the mean absolute deviation from the median (not 0 as
/// long as one value differs) stands in, scaled to an IQR: the bins then follow the spread of
/// the values that differ, so that whether they differ by one block or by a hundred shows.
pub fn spread(present: &[f64], nodes: usize) -> f64 {
    if present.is_empty() {
        return 0.0;
    }
    let mut v = present.to_vec();
    let robust = if nodes >= IQR_MIN_NODES {
        v.sort_by(f64::total_cmp);
        quantile(&v, 0.75) - quantile(&v, 0.25)
    } else {
        0.0
    };
    let med = median_in_place(&mut v);
    for x in v.iter_mut() {
        *x = (*x - med).abs();
    }
    let robust = if nodes >= IQR_MIN_NODES {
        robust
    } else {
        2.0 * median_in_place(&mut v)
    };
    if robust > 0.0 {
        return robust;
    }
    IQR_PER_MEAN_DEVIATION * v.iter().sum::<f64>() / v.len() as f64
}

impl Bins {
    /// Bins for `pooled` (every node's values, NaN for absent ones) of `nodes` nodes with
    /// `per_node` values each.
    pub fn shared(pooled: &[f64], nodes: usize, per_node: usize, rule: BinRule) -> Bins {
        let max_bins = rule.max_bins.max(1);
        let present: Vec<f64> = pooled.iter().copied().filter(|x| !x.is_nan()).collect();
        let absent = present.len() < pooled.len();
        let lo = present.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = present.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if present.is_empty() || hi <= lo {
            return Bins {
                lo: if lo.is_finite() { lo } else { 0.0 },
                width: 0.0,
                count: 1,
                absent,
            };
        }
        let range = hi - lo;
        let fd = 2.0 * spread(&present, nodes) * (per_node.max(1) as f64).powf(-1.0 / 3.0);
        let width = fd.max(rule.min_width);
        // More than half the values equal and no resolution: the finest bins allowed.
        let width = if width > 0.0 {
            width
        } else {
            range / max_bins as f64
        };
        let count = ((range / width).ceil() as usize).clamp(1, max_bins);
        Bins {
            lo,
            width: range / count as f64,
            count,
            absent,
        }
    }

    /// Columns of a histogram on these bins (the absent bin included).
    pub fn columns(&self) -> usize {
        self.count + usize::from(self.absent)
    }

    /// The column of `x`.
    fn index(&self, x: f64) -> usize {
        let first = usize::from(self.absent);
        if x.is_nan() {
            return 0;
        }
        if self.width <= 0.0 {
            return first;
        }
        first + (((x - self.lo) / self.width).max(0.0) as usize).min(self.count - 1)
    }

    /// The cumulative histogram of `values` into `out` ([`Bins::columns`] entries): the
    /// fraction of the values in column `i` or below.
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

/// Centred moving average of `width` values (seed 001 §3.3, "Moving Average Filter": noise of
/// period shorter than the filter is removed before distributions are compared), in place.
/// Near the ends the average is over the values that exist; absent values (NaN) are left out
/// of every average, and a value stays absent only when its whole span is.
pub fn moving_average(values: &mut [f64], width: usize) {
    if width <= 1 || values.len() < 2 {
        return;
    }
    let before = (width - 1) / 2;
    let after = width - 1 - before;
    let src = values.to_vec();
    for (i, out) in values.iter_mut().enumerate() {
        let from = i.saturating_sub(before);
        let to = (i + after + 1).min(src.len());
        let (mut sum, mut n) = (0.0, 0usize);
        for &x in &src[from..to] {
            if !x.is_nan() {
                sum += x;
                n += 1;
            }
        }
        *out = if n == 0 { f64::NAN } else { sum / n as f64 };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULE: BinRule = BinRule {
        max_bins: MAX_BINS,
        min_width: 0.0,
    };

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9 * b.abs().max(1.0)
    }

    /// Five nodes, four values each: 1, 2, …, 20. Type-7 quartiles 5.75 and 15.25, IQR 9.5;
    /// BinSize = 2 · 9.5 · 4^(−1/3) = 11.9700…; range 19 → ⌈1.587…⌉ = 2 bins of 9.5.
    #[test]
    fn freedman_diaconis_with_the_iqr_from_five_nodes() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        let mut sorted = v.clone();
        sorted.sort_by(f64::total_cmp);
        assert!(close(quantile(&sorted, 0.25), 5.75));
        assert!(close(quantile(&sorted, 0.75), 15.25));
        assert!(close(spread(&v, 5), 9.5));
        let b = Bins::shared(&v, 5, 4, RULE);
        assert_eq!(b.count, 2, "{b:?}");
        assert!(close(b.width, 9.5) && close(b.lo, 1.0), "{b:?}");
        assert!(!b.absent);
    }

    /// Four nodes, one far away: pooled 1 2 3 4 | 2 3 4 5 | 3 4 5 6 | 100 100 100 100. The
    /// median is 4, the absolute deviations' median 1.5, so the spread is 2·1.5 = 3 and
    /// BinSize = 2 · 3 · 4^(−1/3) = 3.7798; range 99 → ⌈26.19⌉ = 27 bins. The IQR of the same
    /// values (3 to 29.5: the outlying node is a quarter of them) would give 3 bins, and the
    /// healthy nodes' values would all fall into the first (2 · 26.5 · 4^(−1/3) = 33.4: 3 bins).
    #[test]
    fn below_five_nodes_the_mad_stands_in_for_the_iqr() {
        let v = [
            1.0, 2.0, 3.0, 4.0, 2.0, 3.0, 4.0, 5.0, 3.0, 4.0, 5.0, 6.0, 100.0, 100.0, 100.0, 100.0,
        ];
        assert!(close(spread(&v, 4), 3.0));
        let b = Bins::shared(&v, 4, 4, RULE);
        assert_eq!(b.count, 27, "{b:?}");
        assert!(close(b.width, 99.0 / 27.0));
        assert!(close(spread(&v, 5), 26.5));
        assert_eq!(Bins::shared(&v, 5, 4, RULE).count, 3);
    }

    /// Bins at 0, 1, 2, 3 (width 1): P from 0 1 1 3 is 1/4, 3/4, 3/4, 1; Q from 2 2 3 3 is
    /// 0, 0, 1/2, 1; Σ|P − Q| = 1/4 + 3/4 + 1/4 + 0 = 1.25.
    #[test]
    fn cdf_distance_by_hand() {
        let b = Bins {
            lo: 0.0,
            width: 1.0,
            count: 4,
            absent: false,
        };
        let (mut p, mut q) = ([0.0; 4], [0.0; 4]);
        b.cumulative(&[0.0, 1.0, 1.0, 3.0], &mut p);
        b.cumulative(&[2.0, 2.0, 3.0, 3.0], &mut q);
        assert_eq!(p, [0.25, 0.75, 0.75, 1.0]);
        assert_eq!(q, [0.0, 0.0, 0.5, 1.0]);
        assert!(close(distance(&p, &q), 1.25));
        assert!(close(distance(&q, &p), 1.25), "symmetric");
    }

    /// Absent values have a column of their own, first: P from NaN 1 1 2 over bins 1, 2 (and
    /// the absent column) is 1/4, 3/4, 1; Q from 1 1 2 2 is 0, 1/2, 1: distance 1/4 + 1/4.
    #[test]
    fn absent_values_are_their_own_bin() {
        let b = Bins::shared(
            &[f64::NAN, 1.0, 1.0, 2.0, 1.0, 1.0, 2.0, 2.0],
            2,
            4,
            BinRule {
                max_bins: 2,
                min_width: 0.0,
            },
        );
        assert!(b.absent && b.count == 2 && b.columns() == 3, "{b:?}");
        let (mut p, mut q) = ([0.0; 3], [0.0; 3]);
        b.cumulative(&[f64::NAN, 1.0, 1.0, 2.0], &mut p);
        b.cumulative(&[1.0, 1.0, 2.0, 2.0], &mut q);
        assert_eq!(p, [0.25, 0.75, 1.0]);
        assert_eq!(q, [0.0, 0.5, 1.0]);
        assert!(close(distance(&p, &q), 0.5));
    }

    /// A counter that is mostly 0, two nodes of 64 seconds, one spike of 3: the MAD is 0, so
    /// the mean absolute deviation from the median, 3/128, stands in: spread 1.69 · 3/128,
    /// BinSize = 2 · 1.69 · 3/128 · 64^(−1/3) = 1.69 · 3/256, ⌈3 / BinSize⌉ = ⌈151.5⌉ = 152 bins,
    /// and the spike is 151 bins from 0: a distance of 151/64. A resolution of 1 makes it 3
    /// bins (2/64): a spike of one unit more is not a landslide.
    #[test]
    fn mostly_equal_values_use_the_mean_deviation_and_the_resolution() {
        let mut a = vec![0.0; 64];
        a[10] = 3.0;
        let b = vec![0.0; 64];
        let pooled: Vec<f64> = a.iter().chain(&b).copied().collect();
        assert!(close(spread(&pooled, 2), 1.69 * 3.0 / 128.0));
        let d = |rule: BinRule| {
            let bins = Bins::shared(&pooled, 2, 64, rule);
            let (mut p, mut q) = (vec![0.0; bins.columns()], vec![0.0; bins.columns()]);
            bins.cumulative(&a, &mut p);
            bins.cumulative(&b, &mut q);
            (bins.count, distance(&p, &q))
        };
        let (n, fine) = d(RULE);
        assert_eq!(n, 152);
        assert!(close(fine, 151.0 / 64.0), "{fine}");
        let (n, coarse) = d(BinRule {
            max_bins: MAX_BINS,
            min_width: 1.0,
        });
        assert_eq!(n, 3);
        assert!(close(coarse, 2.0 / 64.0), "{coarse}");
    }

    #[test]
    fn same_values_are_zero_apart_and_shifted_ones_are_not() {
        let a: Vec<f64> = (0..60).map(|i| (i % 10) as f64).collect();
        let b: Vec<f64> = a.iter().map(|x| x + 20.0).collect();
        let pooled: Vec<f64> = a.iter().chain(&b).copied().collect();
        let bins = Bins::shared(&pooled, 2, 60, RULE);
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
        let rule = BinRule {
            max_bins: 50,
            min_width: 0.0,
        };
        let b = Bins::shared(&v, 3, 10, rule);
        assert!(b.count >= 1 && b.count <= 50, "{b:?}");
        let flat = Bins::shared(&[3.0; 10], 3, 10, rule);
        assert_eq!(flat.count, 1);
        let mut out = [0.0];
        flat.cumulative(&[3.0, 3.0], &mut out);
        assert_eq!(out, [1.0]);
        let none = Bins::shared(&[f64::NAN; 4], 3, 2, rule);
        assert_eq!((none.count, none.columns()), (1, 2));
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
        let bins = Bins::shared(&pooled, 2, 60, RULE);
        let (mut p, mut q) = (vec![0.0; bins.count], vec![0.0; bins.count]);
        bins.cumulative(&narrow, &mut p);
        bins.cumulative(&wide, &mut q);
        assert!(distance(&p, &q) > 1.0);
    }

    /// Width 3, centred: (1+2)/2, (1+2+6)/3, (2+6+absent)/2, (6+absent+4)/2, (absent+4)/1.
    #[test]
    fn moving_average_by_hand() {
        let mut v = [1.0, 2.0, 6.0, f64::NAN, 4.0];
        moving_average(&mut v, 3);
        assert_eq!(v, [1.5, 3.0, 4.0, 5.0, 4.0]);
        let mut gap = [f64::NAN, f64::NAN, f64::NAN, 1.0];
        moving_average(&mut gap, 3);
        assert!(gap[0].is_nan());
        assert_eq!(&gap[2..], &[1.0, 1.0]);
        let mut same = [1.0, 5.0];
        moving_average(&mut same, 1);
        assert_eq!(same, [1.0, 5.0]);
    }
}
