//! Per-window anomaly scores of nodes: how unlike its peers each node behaves.
//!
//! * [`ScoreKind::PairwiseMedian`] — seed 000: the median of a node's distances to every other
//!   node. O(N²·F) per window; above [`PAIRWISE_EXACT_MAX`] nodes (or with an explicit domain
//!   size) each node is compared only with the members of a *rotating analysis domain* of
//!   about `domain` nodes, re-drawn every window (seed 001 §4.7.1), which is O(N·domain·F).
//! * [`ScoreKind::MedianNode`] — the distance of a node to the component-wise median node of
//!   all nodes of the window. O(N·F). The default (docs/thresholds.md says why: it stays right
//!   at N = 4 when one node is an extreme outlier, where the pairwise median flags healthy
//!   nodes too).
//! * [`ScoreKind::LeaveOneOut`] — the distance of a node to the component-wise median of the
//!   *other* nodes. O(N·F·log N).
//!
//! * [`ScoreKind::Suspect`] — seed 002's suspect score (Mirgorodskiy et al., "Finding
//!   behavioral outliers"): each node's window values become a *profile* (divided by their sum,
//!   so only the mix of functions counts, not the amount of work), and a node's score is its
//!   distance to its k-th nearest neighbour, k = max(1, ⌊N/4⌋). With known-normal profiles
//!   (from training runs) it is the supervised variant, min(d(h, h_k), d(h, n₁)), n₁ the
//!   nearest normal profile. O(N²·F); rotating domains above [`PAIRWISE_EXACT_MAX`] nodes as
//!   for the pairwise score. The default without trained thresholds (docs/thresholds.md).
//!
//! Each is a [`Scorer`]; [`ScoreKind`] names them for settings. New scorers (RPCA of seed 004)
//! implement [`Scorer`] and get a [`ScoreKind`] name.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::distance::Distance;
use crate::model::CompLabel;

/// Above this many nodes the pairwise score uses rotating analysis domains unless told
/// otherwise (exact all-pairs costs N²·F per window: 5·10⁹ at 5,000 nodes × 200 functions).
pub const PAIRWISE_EXACT_MAX: usize = 1000;
/// Default size of a rotating analysis domain (seed 001 §4.7.1 suggests about 10).
pub const DEFAULT_DOMAIN: usize = 10;

/// How a node's anomaly score is computed from a window's feature vectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum ScoreKind {
    /// Distance to the component-wise median node (robust; the default).
    #[cfg_attr(
        feature = "clap",
        value(help = "distance to the component-wise median node (robust at 4–6 nodes)")
    )]
    MedianNode,
    /// Distance to the component-wise median of the other nodes.
    #[cfg_attr(
        feature = "clap",
        value(help = "distance to the component-wise median of the other nodes")
    )]
    LeaveOneOut,
    /// Median of the distances to the other nodes (seed 000).
    #[cfg_attr(
        feature = "clap",
        value(help = "median of the distances to the other nodes (seed 000)")
    )]
    #[cfg_attr(feature = "clap", value(name = "pairwise"))]
    #[serde(rename = "pairwise")]
    PairwiseMedian,
    /// Distance of the node's profile to its k-th nearest neighbour's, k = max(1, ⌊N/4⌋)
    /// (seed 002); the default without trained thresholds.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "seed 002's suspect score: distance of the node's profile (values ÷ their \
                    sum) to its k-th nearest neighbour's, k = max(1, N/4); the default \
                    without trained thresholds"
        )
    )]
    Suspect,
    /// The suspect score over seed 002's literal profiles: each node's values divided by its
    /// own total (time fractions).
    #[cfg_attr(
        feature = "clap",
        value(
            help = "the suspect score over each node's own shares (values ÷ the node's own \
                    total, seed 002's time fractions): blind to a node doing more of everything"
        )
    )]
    SuspectShares,
}

impl ScoreKind {
    /// The name users type and read.
    pub fn name(self) -> &'static str {
        match self {
            ScoreKind::MedianNode => "median-node",
            ScoreKind::LeaveOneOut => "leave-one-out",
            ScoreKind::PairwiseMedian => "pairwise",
            ScoreKind::Suspect => "suspect",
            ScoreKind::SuspectShares => "suspect-shares",
        }
    }

    /// True when the score compares profiles (seed 002).
    pub fn profiles(self) -> bool {
        self.profile_total().is_some()
    }

    /// What the score's profiles divide by, if it compares profiles.
    pub fn profile_total(self) -> Option<ProfileTotal> {
        match self {
            ScoreKind::Suspect => Some(ProfileTotal::Median),
            ScoreKind::SuspectShares => Some(ProfileTotal::Own),
            _ => None,
        }
    }
}

/// Seed 002's k for the suspect score among `n` nodes: "the algorithm worked well for all k
/// larger than 3 and up to |T|/4" and "if k < (total number of outliers) → false negatives";
/// with the 4 to 20 servers of a peer group, k = max(1, ⌊N/4⌋) tolerates up to a quarter of
/// the nodes being alike outliers.
pub fn suspect_k(n: usize) -> usize {
    (n / 4).max(1)
}

/// A dense row-major matrix: one row per node of a window, one column per kept component.
#[derive(Clone, Debug, Default)]
pub struct Matrix {
    /// Rows.
    pub rows: usize,
    /// Columns.
    pub cols: usize,
    /// `rows × cols` values.
    pub data: Vec<f64>,
}

impl Matrix {
    /// Row `i`.
    pub fn row(&self, i: usize) -> &[f64] {
        &self.data[i * self.cols..(i + 1) * self.cols]
    }

    /// Row `i`, mutable.
    pub fn row_mut(&mut self, i: usize) -> &mut [f64] {
        &mut self.data[i * self.cols..(i + 1) * self.cols]
    }

    /// Resizes to `rows × cols` zeros, keeping the allocation.
    pub fn reset(&mut self, rows: usize, cols: usize) {
        self.rows = rows;
        self.cols = cols;
        self.data.clear();
        self.data.resize(rows * cols, 0.0);
    }
}

/// The median of `v` (mean of the two middle values for an even length), reordering `v`.
/// `NaN` never reaches here (inputs are validated); it would sort last.
pub fn median_in_place(v: &mut [f64]) -> f64 {
    let n = v.len();
    assert!(n > 0, "median of nothing");
    let mid = n / 2;
    let (lo, m, _) = v.select_nth_unstable_by(mid, f64::total_cmp);
    let m = *m;
    if n % 2 == 1 {
        m
    } else {
        let below = lo.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (below + m) / 2.0
    }
}

/// The component-wise median of the rows of `x`: "the median node", the reference peer
/// comparison measures every node against.
pub fn median_node(x: &Matrix) -> Vec<f64> {
    let mut col = vec![0.0; x.rows];
    (0..x.cols)
        .map(|c| {
            for (r, v) in col.iter_mut().enumerate() {
                *v = x.data[r * x.cols + c];
            }
            median_in_place(&mut col)
        })
        .collect()
}

/// The scores of one window, and what root-cause analysis compares each node with.
#[derive(Debug)]
pub struct Scores {
    /// One score per row.
    pub scores: Vec<f64>,
    /// The component-wise median node of all rows.
    pub median: Vec<f64>,
    /// Leave-one-out only: each column's values sorted and each row's rank in them, to derive
    /// the median of the others.
    others: Option<SortedColumns>,
}

/// Columns sorted ascending (column-major) and each row's rank in each column.
#[derive(Debug)]
struct SortedColumns {
    sorted: Vec<f64>,
    rank: Vec<u32>,
}

impl Scores {
    /// Scores compared with the median node `median` (root cause uses it for every row).
    pub fn new(scores: Vec<f64>, median: Vec<f64>) -> Self {
        Scores {
            scores,
            median,
            others: None,
        }
    }

    /// The vector row `i` is compared with for root cause: the median of the others for
    /// leave-one-out, the median node otherwise (seed 000: "component distances to the median
    /// node").
    pub fn reference(&self, x: &Matrix, i: usize) -> Vec<f64> {
        match &self.others {
            Some(o) => (0..x.cols)
                .map(|c| {
                    loo_median(
                        &o.sorted[c * x.rows..(c + 1) * x.rows],
                        o.rank[i * x.cols + c],
                    )
                })
                .collect(),
            None => self.median.clone(),
        }
    }
}

/// The median of a sorted column without the element at `rank`.
fn loo_median(sorted: &[f64], rank: u32) -> f64 {
    let n = sorted.len() - 1;
    let r = rank as usize;
    let at = |j: usize| if j < r { sorted[j] } else { sorted[j + 1] };
    if n % 2 == 1 {
        at(n / 2)
    } else {
        (at(n / 2 - 1) + at(n / 2)) / 2.0
    }
}

/// How many peers the pairwise score compares each node with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peers {
    /// Every other node up to [`PAIRWISE_EXACT_MAX`] nodes, rotating domains of
    /// [`DEFAULT_DOMAIN`] above.
    Auto,
    /// Every other node, whatever the size.
    All,
    /// Rotating analysis domains of about this many nodes.
    Domain(usize),
}

/// What root cause compares a node's raw (unweighted) values with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reference {
    /// The component-wise median of all nodes.
    MedianNode,
    /// The component-wise median of the other nodes.
    MedianOfOthers,
}

/// A node score: how unlike its peers each node of a window is. Scores are compared with a
/// threshold per node (trained, or the unsupervised rule's), so a scorer only ranks.
pub trait Scorer: std::fmt::Debug + Send + Sync {
    /// Scores the rows of `x` (prepared for `d`). `seed` varies randomized choices (rotating
    /// domains) from window to window; the window start is used.
    fn score(&self, d: Distance, x: &Matrix, seed: u64) -> Scores;

    /// Scores with known-normal rows `normal` (profiles from training runs, prepared like
    /// `x`), row `i` of `x` being compared with the normal rows `own[i]`; scorers without a
    /// supervised variant ignore them.
    fn score_supervised(
        &self,
        d: Distance,
        x: &Matrix,
        seed: u64,
        _normal: &Matrix,
        _own: &[Vec<u32>],
    ) -> Scores {
        self.score(d, x, seed)
    }

    /// What root cause compares a node's raw values with.
    fn reference(&self) -> Reference {
        Reference::MedianNode
    }

    /// What the pipeline divides each row by before scoring, when the scorer compares
    /// *profiles* (seed 002); root cause compares the rows as they were.
    fn profiles(&self) -> Option<ProfileTotal> {
        None
    }
}

/// What a profile divides a node's window values by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileTotal {
    /// The node's own total over all its components (seed 002's T(h): time fractions). Blind
    /// to a node doing more (or less) of everything: a slow node serving fewer requests has
    /// the same call shares.
    Own,
    /// The median node's total of the window: the values as shares of what a typical node did.
    /// Load common to all nodes still cancels (every total grows alike), and so the score stays
    /// free of units, but a node doing more of one function, or of everything, keeps its size.
    Median,
}

/// Known-normal profiles for seed 002's supervised suspect score: one per node of each
/// fault-free training run (its mean window profile), by component label.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NormalProfiles {
    /// The profiles, with the node each is of.
    pub profiles: Vec<(String, HashMap<CompLabel, f64>)>,
}

impl NormalProfiles {
    /// The profiles as rows whose columns are `labels` (a component a profile lacks is 0).
    pub fn matrix<'a>(&self, labels: impl Iterator<Item = &'a CompLabel> + Clone) -> Matrix {
        let cols = labels.clone().count();
        let mut m = Matrix::default();
        m.reset(self.profiles.len(), cols);
        for (i, (_, p)) in self.profiles.iter().enumerate() {
            for (o, l) in m.row_mut(i).iter_mut().zip(labels.clone()) {
                *o = p.get(l).copied().unwrap_or(0.0);
            }
        }
        m
    }
}

/// Divides a row by `total` (a row without activity, or a zero total, stays as it is): seed
/// 002's profile, "the time t(h, fᵢ) spent in function fᵢ" over "the total T(h)", with the
/// total of every function, not only those the keep rule compares (with one function kept,
/// its share of the work still tells nodes apart), and T the node's own or the median node's
/// ([`ProfileTotal`]).
pub fn to_profile(row: &mut [f64], total: f64) {
    if total > 0.0 {
        for v in row.iter_mut() {
            *v /= total;
        }
    }
}

impl ScoreKind {
    /// The scorer of this kind; `peers` applies to the pairwise score.
    pub fn scorer(self, peers: Peers) -> Box<dyn Scorer> {
        match self {
            ScoreKind::MedianNode => Box::new(MedianNodeScore),
            ScoreKind::LeaveOneOut => Box::new(LeaveOneOutScore),
            ScoreKind::PairwiseMedian => Box::new(PairwiseScore { peers }),
            ScoreKind::Suspect => Box::new(SuspectScore {
                peers,
                total: ProfileTotal::Median,
            }),
            ScoreKind::SuspectShares => Box::new(SuspectScore {
                peers,
                total: ProfileTotal::Own,
            }),
        }
    }
}

/// [`ScoreKind::MedianNode`]: the distance to the component-wise median node. O(N·F).
#[derive(Clone, Copy, Debug, Default)]
pub struct MedianNodeScore;

impl Scorer for MedianNodeScore {
    fn score(&self, d: Distance, x: &Matrix, _seed: u64) -> Scores {
        let median = median_node(x);
        let scores = par_map(x.rows, x.cols, |i| d.dist(x.row(i), &median));
        Scores::new(scores, median)
    }
}

/// [`ScoreKind::LeaveOneOut`]: the distance to the component-wise median of the other nodes,
/// derived from sorted columns. O(N·F·log N).
#[derive(Clone, Copy, Debug, Default)]
pub struct LeaveOneOutScore;

impl Scorer for LeaveOneOutScore {
    fn score(&self, d: Distance, x: &Matrix, _seed: u64) -> Scores {
        let median = median_node(x);
        let others = sorted_columns(x);
        let scores = par_map(x.rows, x.cols, |i| {
            let mut s = 0.0;
            for (c, &v) in x.row(i).iter().enumerate() {
                let col = &others.sorted[c * x.rows..(c + 1) * x.rows];
                s += d.term(v, loo_median(col, others.rank[i * x.cols + c]));
            }
            s
        });
        Scores {
            scores,
            median,
            others: Some(others),
        }
    }

    fn reference(&self) -> Reference {
        Reference::MedianOfOthers
    }
}

/// [`ScoreKind::PairwiseMedian`]: the median of the distances to the other nodes (seed 000), or
/// to the members of a rotating analysis domain (seed 001 §4.7.1).
#[derive(Clone, Copy, Debug)]
pub struct PairwiseScore {
    /// Which peers each node is compared with.
    pub peers: Peers,
}

impl Scorer for PairwiseScore {
    fn score(&self, d: Distance, x: &Matrix, seed: u64) -> Scores {
        let median = median_node(x);
        let domain = match self.peers {
            Peers::All => None,
            Peers::Auto if x.rows <= PAIRWISE_EXACT_MAX => None,
            Peers::Auto => Some(DEFAULT_DOMAIN),
            Peers::Domain(k) if k >= x.rows => None,
            Peers::Domain(k) => Some(k.max(3)),
        };
        let scores = match domain {
            None => pairwise_all(d, x),
            Some(k) => pairwise_domains(d, x, k, seed),
        };
        Scores::new(scores, median)
    }
}

/// [`ScoreKind::Suspect`] and [`ScoreKind::SuspectShares`]: seed 002's suspect score over
/// profiles (the pipeline makes the rows profiles, [`Scorer::profiles`]).
#[derive(Clone, Copy, Debug)]
pub struct SuspectScore {
    /// Which peers each node is compared with (rotating domains above
    /// [`PAIRWISE_EXACT_MAX`] nodes, as for the pairwise score).
    pub peers: Peers,
    /// What profiles divide by.
    pub total: ProfileTotal,
}

impl SuspectScore {
    fn domain(&self, rows: usize) -> Option<usize> {
        match self.peers {
            Peers::All => None,
            Peers::Auto if rows <= PAIRWISE_EXACT_MAX => None,
            Peers::Auto => Some(DEFAULT_DOMAIN),
            Peers::Domain(k) if k >= rows => None,
            Peers::Domain(k) => Some(k.max(3)),
        }
    }
}

impl Scorer for SuspectScore {
    fn score(&self, d: Distance, x: &Matrix, seed: u64) -> Scores {
        let median = median_node(x);
        let scores = match self.domain(x.rows) {
            None => {
                let all: Vec<u32> = (0..x.rows as u32).collect();
                par_map(x.rows, x.rows * x.cols, |i| kth_nearest(d, x, i, &all))
            }
            Some(k) => {
                let groups = domains(x.rows, k, seed);
                let group_of = group_of(&groups, x.rows);
                par_map(x.rows, k * x.cols, |i| {
                    kth_nearest(d, x, i, &groups[group_of[i] as usize])
                })
            }
        };
        Scores::new(scores, median)
    }

    /// Seed 002's supervised case: "the distance of h to either its k-th neighbor from T or the
    /// first neighbor from N, whichever is closer" — with N the node's *own* normal profiles
    /// (its fault-free training runs). The seed's normal traces are of alike processes; in a
    /// peer group with a node of another role, a fault that makes a node look like that node's
    /// normal profile would otherwise pass as normal.
    fn score_supervised(
        &self,
        d: Distance,
        x: &Matrix,
        seed: u64,
        normal: &Matrix,
        own: &[Vec<u32>],
    ) -> Scores {
        let mut s = self.score(d, x, seed);
        if normal.rows == 0 || normal.cols != x.cols || own.len() != x.rows {
            return s;
        }
        let nearest = par_map(x.rows, normal.rows * x.cols, |i| {
            own[i]
                .iter()
                .map(|&j| d.dist(x.row(i), normal.row(j as usize)))
                .fold(f64::INFINITY, f64::min)
        });
        for (v, n) in s.scores.iter_mut().zip(nearest) {
            *v = v.min(n);
        }
        s
    }

    fn profiles(&self) -> Option<ProfileTotal> {
        Some(self.total)
    }
}

/// Row `i`'s distance to its k-th nearest neighbour among `members` (which include `i`),
/// k = [`suspect_k`] of the members.
fn kth_nearest(d: Distance, x: &Matrix, i: usize, members: &[u32]) -> f64 {
    let mut ds: Vec<f64> = members
        .iter()
        .map(|&j| j as usize)
        .filter(|&j| j != i)
        .map(|j| d.dist(x.row(i), x.row(j)))
        .collect();
    if ds.is_empty() {
        return 0.0;
    }
    let k = suspect_k(members.len()).min(ds.len());
    let (_, v, _) = ds.select_nth_unstable_by(k - 1, f64::total_cmp);
    *v
}

fn sorted_columns(x: &Matrix) -> SortedColumns {
    let mut sorted = vec![0.0; x.rows * x.cols];
    let mut rank = vec![0u32; x.rows * x.cols];
    let mut idx: Vec<u32> = Vec::with_capacity(x.rows);
    for c in 0..x.cols {
        idx.clear();
        idx.extend(0..x.rows as u32);
        idx.sort_by(|&a, &b| {
            x.data[a as usize * x.cols + c].total_cmp(&x.data[b as usize * x.cols + c])
        });
        for (r, &i) in idx.iter().enumerate() {
            sorted[c * x.rows + r] = x.data[i as usize * x.cols + c];
            rank[i as usize * x.cols + c] = r as u32;
        }
    }
    SortedColumns { sorted, rank }
}

/// Exact seed-000 score: for each row, the median of its distances to all other rows. Rows are
/// processed independently (each recomputes its distances) so memory stays O(N) per thread.
fn pairwise_all(d: Distance, x: &Matrix) -> Vec<f64> {
    par_map(x.rows, x.rows * x.cols, |i| {
        let mut ds: Vec<f64> = (0..x.rows)
            .filter(|&j| j != i)
            .map(|j| d.dist(x.row(i), x.row(j)))
            .collect();
        median_in_place(&mut ds)
    })
}

/// Rotating analysis domains (seed 001 §4.7.1): shuffle the rows with a generator seeded by the
/// window, cut them into groups of `k` to `2k − 1`, score each row against its group only.
fn pairwise_domains(d: Distance, x: &Matrix, k: usize, seed: u64) -> Vec<f64> {
    let groups = domains(x.rows, k, seed);
    let group_of = group_of(&groups, x.rows);
    par_map(x.rows, k * x.cols, |i| {
        let members = &groups[group_of[i] as usize];
        let mut ds: Vec<f64> = members
            .iter()
            .map(|&j| j as usize)
            .filter(|&j| j != i)
            .map(|j| d.dist(x.row(i), x.row(j)))
            .collect();
        median_in_place(&mut ds)
    })
}

/// The group of each of the `n` rows [`domains`] partitioned into `groups`.
fn group_of(groups: &[Vec<u32>], n: usize) -> Vec<u32> {
    let mut of = vec![0u32; n];
    for (g, members) in groups.iter().enumerate() {
        for &m in members {
            of[m as usize] = g as u32;
        }
    }
    of
}

/// Partitions `0..n` into groups of `k..2k−1` members (one group when `n < 2k`), shuffled
/// deterministically by `seed`.
pub fn domains(n: usize, k: usize, seed: u64) -> Vec<Vec<u32>> {
    let mut order: Vec<u32> = (0..n as u32).collect();
    let mut rng = SplitMix64(seed ^ 0x6a09_e667_f3bc_c909);
    for i in (1..n).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    let g = (n / k).max(1);
    let (base, extra) = (n / g, n % g);
    let mut out = Vec::with_capacity(g);
    let mut at = 0;
    for gi in 0..g {
        let len = base + usize::from(gi < extra);
        out.push(order[at..at + len].to_vec());
        at += len;
    }
    out
}

/// SplitMix64 (Steele, Lea, Flood 2014): a tiny, good, deterministic generator.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A uniform value in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Work (in rough element operations) below which threads are not worth starting.
const PAR_MIN_WORK: usize = 1 << 21;

/// `(0..n).map(f)` on all cores when the work (`n × per_item`) is large enough.
fn par_map(n: usize, per_item: usize, f: impl Fn(usize) -> f64 + Sync) -> Vec<f64> {
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    if threads < 2 || n.saturating_mul(per_item) < PAR_MIN_WORK || n < 2 {
        return (0..n).map(f).collect();
    }
    let mut out = vec![0.0; n];
    let chunk = n.div_ceil(threads);
    std::thread::scope(|s| {
        for (ci, part) in out.chunks_mut(chunk).enumerate() {
            let f = &f;
            s.spawn(move || {
                for (j, o) in part.iter_mut().enumerate() {
                    *o = f(ci * chunk + j);
                }
            });
        }
    });
    out
}

#[cfg(test)]
mod tests;
