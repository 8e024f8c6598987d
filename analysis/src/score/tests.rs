use super::*;
use proptest::prelude::*;

fn score(kind: ScoreKind, d: Distance, x: &Matrix, peers: Peers, seed: u64) -> Scores {
    kind.scorer(peers).score(d, x, seed)
}

fn matrix(rows: &[Vec<f64>]) -> Matrix {
    Matrix {
        rows: rows.len(),
        cols: rows[0].len(),
        data: rows.iter().flatten().copied().collect(),
    }
}

#[test]
fn median_of_odd_and_even() {
    assert_eq!(median_in_place(&mut [3.0, 1.0, 2.0]), 2.0);
    assert_eq!(median_in_place(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
    assert_eq!(median_in_place(&mut [7.0]), 7.0);
}

#[test]
fn median_node_is_component_wise() {
    let x = matrix(&[
        vec![1.0, 10.0],
        vec![2.0, 30.0],
        vec![3.0, 20.0],
        vec![100.0, 0.0],
    ]);
    assert_eq!(median_node(&x), vec![2.5, 15.0]);
}

/// The small-cluster failure of the seed's score (issue 4): with 4 nodes and one extreme
/// outlier, a healthy node's pairwise median becomes its distance to its least similar
/// healthy peer, while its distance to the median node barely moves.
#[test]
fn one_outlier_among_four() {
    let healthy = [vec![100.0, 100.0], vec![104.0, 100.0], vec![96.0, 100.0]];
    let mut rows = healthy.to_vec();
    rows.push(vec![100.0, 1000.0]);
    let x = matrix(&rows);
    let d = Distance::Manhattan;
    let pw = score(ScoreKind::PairwiseMedian, d, &x, Peers::All, 0).scores;
    let mn = score(ScoreKind::MedianNode, d, &x, Peers::All, 0).scores;
    let lo = score(ScoreKind::LeaveOneOut, d, &x, Peers::All, 0).scores;
    assert_eq!(
        ScoreKind::LeaveOneOut.scorer(Peers::All).reference(),
        Reference::MedianOfOthers
    );
    // Healthy node 1 (104): pairwise distances 4, 8, 904 → median 8, its distance to its
    // least similar healthy peer.
    assert_eq!(pw[1], 8.0);
    // Median node: (100, 100) → node 1 is 4 away, the outlier 900.
    assert_eq!(mn[1], 4.0);
    assert_eq!(mn[3], 900.0);
    // Leave-one-out: median of the others of node 3 = (100, 100) → 900.
    assert_eq!(lo[3], 900.0);
    assert_eq!(lo[1], 4.0);
    for s in [&pw, &mn, &lo] {
        let top = (0..4).max_by(|&a, &b| s[a].total_cmp(&s[b])).unwrap();
        assert_eq!(top, 3);
    }
}

/// Seed 002: the k-th nearest neighbour, k = max(1, ⌊N/4⌋); two alike outliers among eight
/// (k = 2) both score high, which the nearest neighbour (k = 1) would miss.
#[test]
fn suspect_score_is_the_kth_nearest_neighbour() {
    assert_eq!(
        (
            suspect_k(3),
            suspect_k(4),
            suspect_k(7),
            suspect_k(8),
            suspect_k(20)
        ),
        (1, 1, 1, 2, 5)
    );
    let x = matrix(&[
        vec![0.50, 0.50],
        vec![0.52, 0.48],
        vec![0.49, 0.51],
        vec![0.90, 0.10],
    ]);
    let s = score(ScoreKind::Suspect, Distance::Manhattan, &x, Peers::All, 0).scores;
    assert!((s[3] - 0.76).abs() < 1e-9, "{s:?}");
    assert!((s[0] - 0.02).abs() < 1e-9, "{s:?}");
    let mut rows = vec![vec![0.5, 0.5]; 6];
    rows[0] = vec![0.51, 0.49];
    rows.push(vec![0.9, 0.1]);
    rows.push(vec![0.9, 0.1]);
    let s = score(
        ScoreKind::Suspect,
        Distance::Manhattan,
        &matrix(&rows),
        Peers::All,
        0,
    )
    .scores;
    assert!(s[6] > 0.7 && s[7] > 0.7, "{s:?}");
    assert!(s[..6].iter().all(|&v| v < 0.05), "{s:?}");
    // Supervised: a node near one of its own known-normal profiles is not a suspect; another
    // node's normal profile does not count.
    let normal = matrix(&[vec![0.9, 0.1]]);
    let mut own = vec![Vec::new(); 8];
    own[6] = vec![0];
    let sup = ScoreKind::Suspect
        .scorer(Peers::All)
        .score_supervised(Distance::Manhattan, &matrix(&rows), 0, &normal, &own)
        .scores;
    assert!(sup[6] < 1e-9, "{sup:?}");
    assert!(sup[7] > 0.7, "{sup:?}");
    assert!(sup[0] <= s[0]);
}

#[test]
fn profiles_are_shares_of_the_total() {
    let mut r = [1.0, 3.0];
    to_profile(&mut r, 8.0);
    assert_eq!(r, [0.125, 0.375]);
    let mut z = [0.0, 0.0];
    to_profile(&mut z, 0.0);
    assert_eq!(z, [0.0, 0.0]);
}

#[test]
fn domains_partition_every_node_once() {
    for (n, k) in [(10, 10), (25, 10), (100, 7), (3, 10), (1001, 10)] {
        let g = domains(n, k, 42);
        let mut all: Vec<u32> = g.iter().flatten().copied().collect();
        all.sort_unstable();
        assert_eq!(all, (0..n as u32).collect::<Vec<_>>());
        if n >= k {
            assert!(g.iter().all(|m| m.len() >= k && m.len() < 2 * k), "{n} {k}");
        }
        assert_ne!(domains(n, k, 43), g, "rotates with the seed ({n})");
    }
}

fn rows_strategy() -> impl Strategy<Value = Vec<Vec<f64>>> {
    (3usize..9, 1usize..6)
        .prop_flat_map(|(n, f)| prop::collection::vec(prop::collection::vec(0.0f64..1000.0, f), n))
}

proptest! {
    #[test]
    fn median_is_between_min_and_max_and_order_free(mut v in prop::collection::vec(-1e6f64..1e6, 1..40)) {
        let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let mut sorted = v.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let expect = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
        let m = median_in_place(&mut v);
        prop_assert!(lo <= m && m <= hi);
        prop_assert_eq!(m, expect);
    }

    /// Reordering nodes reorders their scores and changes nothing else (node names and
    /// order must not change a verdict).
    #[test]
    fn scores_are_permutation_equivariant(rows in rows_strategy(), rot in 0usize..8) {
        let n = rows.len();
        let perm: Vec<usize> = (0..n).map(|i| (i + rot) % n).rev().collect();
        let permuted: Vec<Vec<f64>> = perm.iter().map(|&i| rows[i].clone()).collect();
        for kind in [ScoreKind::MedianNode, ScoreKind::LeaveOneOut, ScoreKind::PairwiseMedian, ScoreKind::Suspect, ScoreKind::SuspectShares] {
            let a = score(kind, Distance::Manhattan, &matrix(&rows), Peers::All, 1).scores;
            let b = score(kind, Distance::Manhattan, &matrix(&permuted), Peers::All, 1).scores;
            for (pi, &orig) in perm.iter().enumerate() {
                prop_assert_eq!(b[pi], a[orig]);
            }
        }
    }

    /// The leave-one-out shortcut equals recomputing the median of the others.
    #[test]
    fn leave_one_out_matches_brute_force(rows in rows_strategy()) {
        let x = matrix(&rows);
        let s = score(ScoreKind::LeaveOneOut, Distance::Manhattan, &x, Peers::All, 0);
        for i in 0..x.rows {
            let others: Vec<Vec<f64>> = rows.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, r)| r.clone()).collect();
            let m = median_node(&matrix(&others));
            prop_assert_eq!(s.reference(&x, i), m.clone());
            let d = Distance::Manhattan.dist(x.row(i), &m);
            prop_assert!((s.scores[i] - d).abs() < 1e-9);
        }
    }

    /// With domains at least as large as the cluster, the rotating score is exact.
    #[test]
    fn big_domains_are_exact(rows in rows_strategy()) {
        let x = matrix(&rows);
        let exact = score(ScoreKind::PairwiseMedian, Distance::Manhattan, &x, Peers::All, 0).scores;
        let dom = score(ScoreKind::PairwiseMedian, Distance::Manhattan, &x, Peers::Domain(rows.len()), 5).scores;
        prop_assert_eq!(exact, dom);
    }
}

#[test]
fn parallel_and_serial_agree() {
    let n = 600;
    let f = 40;
    let mut rng = SplitMix64(7);
    let data: Vec<f64> = (0..n * f).map(|_| rng.unit() * 100.0).collect();
    let x = Matrix {
        rows: n,
        cols: f,
        data,
    };
    let par = score(
        ScoreKind::PairwiseMedian,
        Distance::Manhattan,
        &x,
        Peers::All,
        0,
    )
    .scores;
    let serial: Vec<f64> = (0..n)
        .map(|i| {
            let mut ds: Vec<f64> = (0..n)
                .filter(|&j| j != i)
                .map(|j| Distance::Manhattan.dist(x.row(i), x.row(j)))
                .collect();
            median_in_place(&mut ds)
        })
        .collect();
    assert_eq!(par, serial);
}
