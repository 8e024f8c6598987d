//! Stage 8 of a window, root cause: for an anomalous node, each kept component's distance to
//! the node's reference, added up over the windows; components that alone deviate more than
//! the window's typical node count in their own persistence accumulators.

use crate::analyzer::state::MetricState;
use crate::distance::Distance;
use crate::model::PeerIdx;
use crate::roles::Adjust;
use crate::score::{median_in_place, median_node, Matrix, Reference, Scores};

use super::rare::RareHit;
use super::window::Features;

/// Where root cause compares a window's nodes.
pub(super) struct CauseSpace {
    /// The matrix before profiles (weighted, or the raw sums), when the scorer compared
    /// profiles; `None`: root cause uses the scored matrix.
    pub(super) x: Option<Matrix>,
    /// The median node of `x`, when it is set.
    pub(super) reference: Option<Scores>,
    /// [`typical_distance`] in that space.
    pub(super) typical: f64,
}

/// The median over the window's nodes of each node's distance to its root-cause reference:
/// how much a typical node deviates in all components together. A component that alone
/// deviates more is anomalous in that window (its persistence counts up).
pub(super) fn typical_distance(x: &Matrix, scores: &Scores, distance: Distance) -> f64 {
    let mut d: Vec<f64> = (0..x.rows)
        .map(|i| distance.dist(x.row(i), &scores.reference(x, i)))
        .collect();
    median_in_place(&mut d)
}

/// What root cause compares.
pub(super) struct RootCauseInput<'a> {
    pub(super) features: &'a Features,
    /// The matrix scored.
    pub(super) x: &'a Matrix,
    pub(super) scores: &'a Scores,
    pub(super) distance: Distance,
    pub(super) reference: Reference,
    /// [`typical_distance`] of the window.
    pub(super) typical: f64,
    /// The node's rare functions in the window (stage 2b).
    pub(super) rare: &'a [RareHit],
}

/// Stage 8, root cause: each kept component's distance to the node's reference, in the
/// distance's terms (sizes and signs in the metric's unit).
pub(super) fn root_cause(
    ms: &mut MetricState,
    input: &RootCauseInput<'_>,
    ri: usize,
    node: PeerIdx,
    raw_median: &mut Option<Vec<f64>>,
) {
    let raw = &input.features.sums;
    let x = input.x;
    let reference = input.scores.reference(x, ri);
    let prepared = input.features.cdf.is_some()
        || input.distance == Distance::SymKl
        || ms.result.config.weights.is_some();
    let raw_ref = if !prepared {
        reference.clone()
    } else if input.reference == Reference::MedianOfOthers {
        let mut others = Matrix::default();
        others.reset(raw.rows - 1, raw.cols);
        for (oi, j) in (0..raw.rows).filter(|&j| j != ri).enumerate() {
            others.row_mut(oi).copy_from_slice(raw.row(j));
        }
        median_node(&others)
    } else {
        raw_median.get_or_insert_with(|| median_node(raw)).clone()
    };
    // A node of another role shows its values as measured against its own normal (its peers'
    // level scaled back by its baseline's difference): window sums were adjusted, distributions
    // were not.
    let own: Vec<Option<Adjust>> = if input.features.cdf.is_none() {
        ms.result
            .kept_list
            .iter()
            .map(|&c| ms.adjustment(node, c))
            .collect()
    } else {
        Vec::new()
    };
    let kept = &ms.result.kept_list;
    let nr = &mut ms.result.nodes[node];
    let rr = raw.row(ri);
    let xr = x.row(ri);
    // The distance's term of each kept component (a distribution family's component spans
    // several columns: its bins).
    let mut terms = vec![0.0; kept.len()];
    match &input.features.cdf {
        None => {
            for (t, (&a, &b)) in terms.iter_mut().zip(xr.iter().zip(&reference)) {
                *t = input.distance.term(a, b);
            }
        }
        Some((_, comp_of)) => {
            for (col, &ci) in comp_of.iter().enumerate() {
                terms[ci as usize] += input.distance.term(xr[col], reference[col]);
            }
        }
    }
    let mut standing_out = Vec::new();
    for (ci, &c) in kept.iter().enumerate() {
        let t = terms[ci];
        if t > input.typical {
            standing_out.push(c);
        }
        if t == 0.0 && rr[ci] == raw_ref[ci] {
            continue;
        }
        let acc = nr.root_cause.entry(c).or_default();
        acc.distance += t;
        match own.get(ci).copied().flatten() {
            Some(a) => {
                acc.node += a.unapply(rr[ci]);
                acc.reference += a.unapply(raw_ref[ci]);
            }
            None => {
                acc.node += rr[ci];
                acc.reference += raw_ref[ci];
            }
        }
    }
    // A rare function is outside the kept set: its distance is its calls' difference from its
    // peers' median (divided by its scale when weighted); it stood out by its own test.
    for h in input.rare {
        let scale = ms.scale.get(h.comp as usize).copied().unwrap_or(1.0);
        let acc = nr.root_cause.entry(h.comp).or_default();
        acc.distance += (h.node - h.peers).abs() / scale;
        acc.node += h.node;
        acc.reference += h.peers;
        let found = nr.rare.entry(h.comp).or_default();
        found.windows += 1;
        found.node += h.node;
        found.peers += h.peers;
        found.floor += h.floor;
        found.max_ratio = found.max_ratio.max(h.over);
        standing_out.push(h.comp);
    }
    nr.functions.window(&standing_out);
}
