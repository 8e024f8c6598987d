//! Nodes of another role in a window ([`crate::roles`]): in diagnosis, a role node's values are
//! brought to its peers' level by its baseline's ratio before the window is compared (stage 3);
//! in training, each node's evidence of a standing difference is noted (after stage 5).

use crate::analyzer::state::MetricState;
use crate::family::Comparison;
use crate::model::{CompIdx, PeerIdx};
use crate::policy::Unsupervised;
use crate::score::{median_in_place, Scores};

use super::window::{Features, SlotRows};

/// Stage 3, window sums: each role node's adjusted components brought to its peers' level
/// (their totals follow, for profiles). Distribution families adjust per-slot values instead
/// ([`adjust_slots`]); their sums, which only root cause reads, stay as measured.
pub(super) fn adjust_sums(ms: &MetricState, complete: &[PeerIdx], f: &mut Features) {
    if ms.comparison != Comparison::Sums {
        return;
    }
    let kept = &ms.result.kept_list;
    for (ri, &node) in complete.iter().enumerate() {
        let Some(list) = ms.adjust.get(node).filter(|l| !l.is_empty()) else {
            continue;
        };
        let row = f.sums.row_mut(ri);
        for &(c, a) in list {
            let Some(ci) = kept.iter().position(|&k| k == c) else {
                continue;
            };
            let was = row[ci];
            row[ci] = a.apply(was);
            if let Some(t) = f.totals.get_mut(ri) {
                *t += (row[ci] - was) / ms.scale[c as usize];
            }
        }
    }
}

/// Stage 3, distribution families: a role node's per-slot values of component `c` brought to
/// its peers' level before they are binned.
pub(super) fn adjust_slots(ms: &MetricState, node: PeerIdx, c: CompIdx, values: &mut [f64]) {
    if let Some(a) = ms.adjustment(node, c) {
        for v in values.iter_mut() {
            *v = a.apply(*v);
        }
    }
}

/// What a window of training shows of each node's standing difference.
pub(super) struct WindowEvidence<'a> {
    pub(super) start_ns: u64,
    pub(super) k: usize,
    pub(super) complete: &'a [PeerIdx],
    pub(super) scores: &'a Scores,
    /// The distance from the window's median node to an empty node (the unsupervised rule's
    /// `size`).
    pub(super) size: f64,
    pub(super) features: &'a Features,
    pub(super) slots: &'a SlotRows<'a>,
}

/// Training: notes, per node, whether it stood out from its peers in this window (the
/// unsupervised peer cut-off over the window's scores) and each kept component's level beside
/// the median node's. Histogram families (call durations) have no level to compare and learn no
/// role.
pub(super) fn note_evidence(ms: &mut MetricState, w: &WindowEvidence<'_>) {
    if ms.comparison == Comparison::Histograms {
        return;
    }
    let cutoff = Unsupervised::default().cutoff(&w.scores.scores, w.size);
    let levels = levels(ms, w);
    let kept = ms.result.kept_list.clone();
    let mut col = vec![0.0; w.complete.len()];
    let medians: Vec<f64> = (0..kept.len())
        .map(|ci| {
            for (ri, v) in col.iter_mut().enumerate() {
                *v = levels[ri][ci];
            }
            let mut present: Vec<f64> = col.iter().copied().filter(|v| !v.is_nan()).collect();
            if present.is_empty() {
                f64::NAN
            } else {
                median_in_place(&mut present)
            }
        })
        .collect();
    // Per component, the nodes' typical deviation from the median node in this window (the
    // median absolute deviation).
    let spreads: Vec<f64> = (0..kept.len())
        .map(|ci| {
            let mut d: Vec<f64> = levels
                .iter()
                .map(|row| (row[ci] - medians[ci]).abs())
                .filter(|v| !v.is_nan())
                .collect();
            if d.is_empty() {
                f64::NAN
            } else {
                median_in_place(&mut d)
            }
        })
        .collect();
    for (ri, &node) in w.complete.iter().enumerate() {
        let stats = &mut ms.result.nodes[node].role;
        stats.window(w.start_ns, w.scores.scores[ri] > cutoff, w.k);
        for (ci, &c) in kept.iter().enumerate() {
            let (v, m) = (levels[ri][ci], medians[ci]);
            if !v.is_nan() && !m.is_nan() {
                stats.level(c, v, m, spreads[ci]);
            }
        }
    }
}

/// Each complete node's level of each kept component in the window: its window sum, or for
/// distribution families the mean of its per-slot values (NaN when it had none).
fn levels(ms: &MetricState, w: &WindowEvidence<'_>) -> Vec<Vec<f64>> {
    let kept = &ms.result.kept_list;
    if ms.comparison == Comparison::Sums {
        return (0..w.complete.len())
            .map(|ri| w.features.sums.row(ri).to_vec())
            .collect();
    }
    let spb = ms.slots_per_bucket;
    w.complete
        .iter()
        .map(|&node| {
            kept.iter()
                .map(|&c| {
                    let at = c as usize * spb;
                    let (mut sum, mut n) = (0.0, 0u32);
                    for r in w.slots.iter() {
                        let vals = r
                            .and_then(|r| r.get(node))
                            .and_then(|v| v.get(at..at + spb));
                        for &x in vals.into_iter().flatten() {
                            if !x.is_nan() {
                                sum += x;
                                n += 1;
                            }
                        }
                    }
                    if n == 0 {
                        f64::NAN
                    } else {
                        sum / f64::from(n)
                    }
                })
                .collect()
        })
        .collect()
}
