//! Stages 1 and 2 of a window: the nodes whose data covers it, and the keep rule (components
//! reaching the metric's minimum join the kept set); nodes not complete are gaps.

use crate::analyzer::state::{all_set, MetricState, WindowEvent};
use crate::family::KeepRule;
use crate::model::{CompIdx, PeerIdx};

use super::window::Rows;

/// Stage 1, complete nodes: data covering every slot of the window, none of it missed.
pub(super) fn complete_nodes(ms: &MetricState, rows: &Rows<'_>) -> Vec<PeerIdx> {
    let spb = ms.slots_per_bucket;
    (0..ms.nodes.len())
        .filter(|&node| {
            rows.iter().all(|r| {
                r.and_then(|r| r.get(node)).is_some_and(|nb| {
                    !nb.full.is_empty()
                        && all_set(&nb.full, spb)
                        && nb.missed.iter().all(|&w| w == 0)
                })
            })
        })
        .collect()
}

/// Each component's largest window sum over the complete nodes.
fn window_maxima(ms: &MetricState, rows: &Rows<'_>, complete: &[PeerIdx]) -> Vec<f64> {
    let n_comps = ms.result.comps.len();
    let mut col_max = vec![0.0f64; n_comps];
    if !matches!(ms.result.config.keep, KeepRule::AtLeast(_)) {
        return col_max;
    }
    let mut sum = vec![0.0f64; n_comps];
    for &node in complete {
        sum.fill(0.0);
        for r in rows.iter().flatten() {
            for (s, v) in sum.iter_mut().zip(&r[node].vals) {
                *s += v;
            }
        }
        for (m, s) in col_max.iter_mut().zip(&sum) {
            *m = m.max(*s);
        }
    }
    col_max
}

/// Stage 2, the keep rule: components reaching the minimum in this window join the kept set.
pub(super) fn keep_rule(ms: &mut MetricState, rows: &Rows<'_>, complete: &[PeerIdx]) {
    match ms.result.config.keep {
        KeepRule::AtLeast(min) => {
            let col_max = window_maxima(ms, rows, complete);
            for (c, &v) in col_max.iter().enumerate() {
                // The parts of a histogram follow their whole.
                if v >= min && ms.result.comps[c].bucket.is_none() {
                    ms.keep(c as CompIdx);
                }
            }
        }
        KeepRule::All => {
            for c in 0..ms.result.comps.len() {
                if ms.result.comps[c].bucket.is_none() {
                    ms.keep(c as CompIdx);
                }
            }
        }
        KeepRule::SameAs(_) => {}
    }
}

/// Nodes that are not complete: a gap (not anomalous) in their k-of-(2k − 1) filter, and
/// incomplete once their data began.
pub(super) fn note_incomplete(
    ms: &mut MetricState,
    k: usize,
    complete: &[PeerIdx],
    end: u64,
    ev: &mut WindowEvent,
) {
    let mut is_complete = vec![false; ms.nodes.len()];
    for &n in complete {
        is_complete[n] = true;
    }
    for (node, ns) in ms.nodes.iter_mut().enumerate() {
        if is_complete[node] {
            continue;
        }
        let nr = &mut ms.result.nodes[node];
        if nr.first_ns.is_some_and(|f| f < end) {
            nr.incomplete += 1;
            ev.incomplete.push(node);
        }
        ns.gap(k);
    }
}
