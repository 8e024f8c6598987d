//! Call-duration histograms (`CULPRIT_HIST=1`): quantiles, and the distance between two of
//! them.
//!
//! The runtime counts each call in a log2 bucket of its duration in ns: bucket 0 holds 0–1 ns,
//! bucket `k` ≥ 1 holds `2^k ..= 2^(k+1) − 1` ns (`culprit_format::HIST_BUCKETS`). A quantile
//! falls in one bucket and is placed inside it geometrically (its rank's fraction of the
//! bucket's calls, on a log scale); the maximum is the upper bound of the highest non-empty
//! bucket. Both are good to a factor of 2 at worst, which is what a log2 histogram can say.

use culprit_format::{hist_bucket_low_ns, HIST_BUCKETS};

/// A function's counts per duration bucket.
pub type Buckets = [u64; HIST_BUCKETS];

/// Calls in `h`.
pub fn calls(h: &Buckets) -> u64 {
    h.iter().sum()
}

/// The `q` quantile (0 < q ≤ 1) of the durations, ns; `None` without calls.
pub fn quantile_ns(h: &Buckets, q: f64) -> Option<u64> {
    let n = calls(h);
    if n == 0 {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * n as f64).max(1.0);
    let mut below = 0u64;
    for (k, &c) in h.iter().enumerate() {
        if c == 0 {
            continue;
        }
        if (below + c) as f64 >= rank {
            let frac = ((rank - below as f64) / c as f64).clamp(0.0, 1.0);
            let lo = hist_bucket_low_ns(k) as f64;
            let v = if k == 0 {
                2.0 * frac
            } else {
                lo * 2f64.powf(frac)
            };
            return Some(v.round() as u64);
        }
        below += c;
    }
    max_ns(h)
}

/// The longest call's duration bound, ns (the highest non-empty bucket's upper end).
pub fn max_ns(h: &Buckets) -> Option<u64> {
    let k = h.iter().rposition(|&c| c > 0)?;
    Some(if k + 1 >= HIST_BUCKETS {
        u64::MAX
    } else {
        hist_bucket_low_ns(k + 1) - 1
    })
}

/// The CDF distance of two histograms (seed 001 §5): Σ over buckets of |P(k) − Q(k)|, P and Q
/// the cumulative fractions of calls up to bucket `k`. 0 for equal distributions; moving a
/// fraction `f` of the calls `d` buckets (a factor `2^d` slower) adds `f·d`. An empty histogram
/// is at distance 0 from another empty one and [`HIST_BUCKETS`] − 1 at most from any other.
pub fn cdf_distance(p: &Buckets, q: &Buckets) -> f64 {
    let (np, nq) = (calls(p) as f64, calls(q) as f64);
    if np == 0.0 && nq == 0.0 {
        return 0.0;
    }
    let (mut cp, mut cq, mut d) = (0.0, 0.0, 0.0);
    // The last bucket's cumulative fractions are both 1 (or one of them 0 when empty).
    for k in 0..HIST_BUCKETS {
        cp += p[k] as f64;
        cq += q[k] as f64;
        let fp = if np > 0.0 { cp / np } else { 1.0 };
        let fq = if nq > 0.0 { cq / nq } else { 1.0 };
        d += (fp - fq).abs();
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(pairs: &[(usize, u64)]) -> Buckets {
        let mut h = [0; HIST_BUCKETS];
        for &(k, c) in pairs {
            h[k] = c;
        }
        h
    }

    #[test]
    fn quantiles_fall_in_their_bucket() {
        // 1000 calls of 1–2 µs (bucket 10), 10 of 100–200 µs (bucket 16 and 17).
        let h = hist(&[(10, 990), (16, 9), (17, 1)]);
        let p50 = quantile_ns(&h, 0.5).unwrap();
        assert!((1024..2048).contains(&p50), "{p50}");
        let p99 = quantile_ns(&h, 0.99).unwrap();
        assert!((1024..=2048).contains(&p99), "{p99}");
        let p999 = quantile_ns(&h, 0.999).unwrap();
        assert!((65_536..=131_072).contains(&p999), "{p999}");
        assert_eq!(max_ns(&h), Some(262_143));
        assert_eq!(quantile_ns(&[0; HIST_BUCKETS], 0.5), None);
        assert_eq!(quantile_ns(&hist(&[(0, 4)]), 1.0), Some(2));
    }

    #[test]
    fn distance_grows_with_the_fraction_moved_and_how_far() {
        let a = hist(&[(10, 1000)]);
        assert_eq!(cdf_distance(&a, &a), 0.0);
        // 0.1 % of the calls 100× slower (≈ 6.6 octaves: bucket 16 or 17).
        let b = hist(&[(10, 999), (17, 1)]);
        let d = cdf_distance(&a, &b);
        assert!((d - 0.007).abs() < 1e-9, "{d}");
        // Ten times as many slow calls: ten times the distance.
        let c = hist(&[(10, 990), (17, 10)]);
        assert!((cdf_distance(&a, &c) - 10.0 * d).abs() < 1e-9);
        // Symmetric, and the same shape at another scale is at distance 0.
        assert_eq!(cdf_distance(&b, &a), d);
        assert_eq!(cdf_distance(&a, &hist(&[(10, 7)])), 0.0);
        assert_eq!(cdf_distance(&a, &[0; HIST_BUCKETS]), 10.0);
    }
}
