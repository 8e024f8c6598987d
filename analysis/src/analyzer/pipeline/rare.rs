//! Stage 2b of a window, rare functions ([`crate::rare`]): among the components the keep rule
//! left out, those one compared node counts orders of magnitude above its peers' noise floor.
//! Each such node is anomalous in the window whatever its score; its functions join its root
//! cause (stage 8).

use crate::analyzer::state::{MetricState, MIN_NODES};
use crate::model::{CompIdx, PeerIdx};
use crate::policy::Policy;
use crate::rare::poisson_upper;
use crate::score::median_in_place;

use super::select::NodeWindow;

/// A rare function that made a node's window anomalous.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct RareHit {
    pub(super) comp: CompIdx,
    /// The node's count in the window.
    pub(super) node: f64,
    /// Its peers' median count.
    pub(super) peers: f64,
    /// Its noise floor: the Poisson upper bound of the largest count any peer showed.
    pub(super) floor: f64,
    /// `node / floor` over the node's bar (at least 1).
    pub(super) over: f64,
}

/// Stage 2b: each compared node's rare hits (indexed like `compared`; empty when the metric
/// compares no rare functions or too few nodes were compared). Training records each node's
/// largest ratio instead ([`crate::analyzer::NodeResult::rare_max`]). Every compared node's
/// counts then join the history the next windows' floors are taken from.
pub(super) fn rare_hits(
    ms: &mut MetricState,
    windows: &[NodeWindow],
    compared: &[PeerIdx],
) -> Vec<Vec<RareHit>> {
    let mut hits = vec![Vec::new(); compared.len()];
    let Some(bars) = ms.result.config.rare else {
        return hits;
    };
    if compared.len() < MIN_NODES {
        return hits;
    }
    let training = matches!(ms.result.config.policy, Policy::Training);
    let n_nodes = ms.nodes.len();
    let n_comps = ms.result.comps.len();
    ms.rare_peak.resize_with(n_comps, Vec::new);
    let value = |ri: usize, c: usize| windows[compared[ri]].sums.get(c).copied().unwrap_or(0.0);
    let mut peers: Vec<f64> = Vec::with_capacity(compared.len());
    for c in 0..n_comps {
        if ms.kept[c] || ms.result.comps[c].bucket.is_some() {
            continue;
        }
        // Only the node with the largest count can be a bar's multiple above the others'
        // (its floor is above each of them), so only it is tested.
        let (mut top, mut top_v) = (0, -1.0f64);
        for ri in 0..compared.len() {
            let v = value(ri, c);
            if v > top_v {
                (top, top_v) = (ri, v);
            }
        }
        if top_v <= 0.0 {
            continue;
        }
        let peak = &mut ms.rare_peak[c];
        peak.resize(n_nodes, 0.0);
        let node = compared[top];
        peers.clear();
        let mut largest = 0.0f64;
        for ri in 0..compared.len() {
            if ri != top {
                let v = value(ri, c);
                peers.push(v);
                largest = largest.max(v);
            }
        }
        for (n, &p) in peak.iter().enumerate() {
            if n != node {
                largest = largest.max(p);
            }
        }
        let floor = poisson_upper(largest);
        let ratio = top_v / floor;
        if training {
            let nr = &mut ms.result.nodes[node];
            nr.rare_max = nr.rare_max.max(ratio);
        } else {
            let bar = bars.bar;
            if ratio >= bar {
                hits[top].push(RareHit {
                    comp: c as CompIdx,
                    node: top_v,
                    peers: median_in_place(&mut peers),
                    floor,
                    over: ratio / bar,
                });
            }
        }
        for (ri, &n) in compared.iter().enumerate() {
            peak[n] = peak[n].max(value(ri, c));
        }
    }
    hits
}
