//! Stage 3 of a window: its feature matrix — window sums of the kept components, or for
//! distribution families cumulative histograms on shared bins.

use std::collections::HashMap;
use std::sync::Arc;

use crate::analyzer::state::MetricState;
use crate::cdf;
use crate::family::Comparison;
use crate::model::{CompIdx, PeerIdx};
use crate::score::{median_node, Matrix};

use super::select::NodeWindow;
use super::window::{Features, SlotRows};

/// Stage 3, the feature matrix of the kept components, one row per compared node (its sums
/// scaled to the window, stage 1).
pub(super) fn feature_matrix(
    ms: &MetricState,
    windows: &[NodeWindow],
    slots: &SlotRows<'_>,
    complete: &[PeerIdx],
) -> Features {
    let kept = &ms.result.kept_list;
    let mut sums = Matrix::default();
    sums.reset(complete.len(), kept.len());
    for (ri, &node) in complete.iter().enumerate() {
        let row = sums.row_mut(ri);
        let vals = &windows[node].sums;
        for (o, &c) in row.iter_mut().zip(kept) {
            if let Some(v) = vals.get(c as usize) {
                *o += v;
            }
        }
    }
    let cdf = match ms.comparison {
        Comparison::Sums => None,
        Comparison::Cdf { max_bins } => Some(cdf_features(ms, windows, slots, complete, max_bins)),
        Comparison::Histograms => Some(histogram_features(ms, windows, complete)),
    };
    let totals = complete
        .iter()
        .map(|&node| {
            windows[node]
                .sums
                .iter()
                .enumerate()
                .map(|(c, &v)| v / ms.scale[c])
                .sum()
        })
        .collect();
    Features { sums, totals, cdf }
}

/// Stage 3 for distribution families: each kept component's values per slot on each complete
/// node (smoothed by the family's moving average), as cumulative histograms on bins shared by
/// the nodes ([`cdf`]); returns the matrix and the kept component of each column. A node
/// without a single value of a component in the window (absent throughout: an idle disk has no
/// `await`) is not compared on it: its histogram is the median of the others', so it adds
/// nothing to anyone's distance.
fn cdf_features(
    ms: &MetricState,
    windows: &[NodeWindow],
    slots: &SlotRows<'_>,
    complete: &[PeerIdx],
    max_bins: usize,
) -> (Matrix, Vec<u32>) {
    let spb = ms.slots_per_bucket;
    let per_node = slots.len() * spb;
    let kept = &ms.result.kept_list;
    let family = &ms.result.config.family;
    let smoothing = family.smoothing();
    let rule = cdf::BinRule {
        max_bins,
        min_width: family.resolution(),
    };
    // values[ci][ri]: component ci's per-slot values on complete node ri.
    let values: Vec<Vec<Vec<f64>>> = kept
        .iter()
        .map(|&c| {
            complete
                .iter()
                .map(|&node| {
                    // The values of the slots present only: a missed second is not a value
                    // (not even an absent one).
                    let present = &windows[node].slots;
                    let mut v = Vec::with_capacity(per_node);
                    for (bi, r) in slots.iter().enumerate() {
                        let at = c as usize * spb;
                        let values = r
                            .and_then(|r| r.get(node))
                            .and_then(|n| n.get(at..at + spb));
                        for s in 0..spb {
                            if present.get(bi * spb + s).copied().unwrap_or(true) {
                                v.push(values.map_or(ms.slot_fill, |x| x[s]));
                            }
                        }
                    }
                    super::role::adjust_slots(ms, node, c, &mut v);
                    cdf::moving_average(&mut v, smoothing);
                    v
                })
                .collect()
        })
        .collect();
    let bins: Vec<cdf::Bins> = values
        .iter()
        .map(|per| {
            let pooled: Vec<f64> = per
                .iter()
                .filter(|v| v.iter().any(|x| !x.is_nan()))
                .flatten()
                .copied()
                .collect();
            cdf::Bins::shared(&pooled, complete.len(), per_node, rule)
        })
        .collect();
    let cols: usize = bins.iter().map(|b| b.columns()).sum();
    let mut comp_of = Vec::with_capacity(cols);
    for (ci, b) in bins.iter().enumerate() {
        comp_of.extend(std::iter::repeat_n(ci as u32, b.columns()));
    }
    let mut x = Matrix::default();
    x.reset(complete.len(), cols);
    let mut at = 0;
    for (per_node, b) in values.iter().zip(&bins) {
        let n = b.columns();
        let mut silent = Vec::new();
        for (ri, v) in per_node.iter().enumerate() {
            if v.iter().all(|x| x.is_nan()) {
                silent.push(ri);
            } else {
                b.cumulative(v, &mut x.row_mut(ri)[at..at + n]);
            }
        }
        if !silent.is_empty() {
            // The median of the nodes with values (all equal when fewer than two have any).
            let mut others = Matrix::default();
            let with: Vec<usize> = (0..per_node.len())
                .filter(|r| !silent.contains(r))
                .collect();
            others.reset(with.len(), n);
            for (oi, &ri) in with.iter().enumerate() {
                others.row_mut(oi).copy_from_slice(&x.row(ri)[at..at + n]);
            }
            let med = if with.is_empty() {
                vec![0.0; n]
            } else {
                median_node(&others)
            };
            for &ri in &silent {
                x.row_mut(ri)[at..at + n].copy_from_slice(&med);
            }
        }
        at += n;
    }
    (x, comp_of)
}

/// Stage 3 for histogram families ([`Comparison::Histograms`]): each kept component's parts
/// summed over the window, as the cumulative fractions of its calls per bucket on each complete
/// node (a node without calls: all 1); returns the matrix and the kept component of each
/// column.
fn histogram_features(
    ms: &MetricState,
    windows: &[NodeWindow],
    complete: &[PeerIdx],
) -> (Matrix, Vec<u32>) {
    let comps = &ms.result.comps;
    let kept = &ms.result.kept_list;
    // The parts of each kept component, in bucket order.
    type Whole<'a> = (&'a Option<Arc<str>>, &'a Option<Arc<str>>, &'a Arc<str>);
    let mut by_whole: HashMap<Whole<'_>, Vec<(u8, CompIdx)>> = HashMap::new();
    for (i, l) in comps.iter().enumerate() {
        if let Some(b) = l.bucket {
            by_whole
                .entry((&l.program, &l.image, &l.name))
                .or_default()
                .push((b, i as CompIdx));
        }
    }
    // Every bucket from the whole's lowest part to its highest is a column (a bucket no node
    // has seen counts nothing, but the cumulative fractions are compared there too).
    let parts: Vec<Vec<Option<CompIdx>>> = kept
        .iter()
        .map(|&c| {
            let w = &comps[c as usize];
            let p = by_whole
                .get(&(&w.program, &w.image, &w.name))
                .map(Vec::as_slice)
                .unwrap_or_default();
            let (Some(lo), Some(hi)) = (p.iter().map(|x| x.0).min(), p.iter().map(|x| x.0).max())
            else {
                return Vec::new();
            };
            (lo..=hi)
                .map(|k| p.iter().find(|x| x.0 == k).map(|x| x.1))
                .collect()
        })
        .collect();
    let cols: usize = parts.iter().map(Vec::len).sum();
    let mut comp_of = Vec::with_capacity(cols);
    for (ci, p) in parts.iter().enumerate() {
        comp_of.extend(std::iter::repeat_n(ci as u32, p.len()));
    }
    let mut x = Matrix::default();
    x.reset(complete.len(), cols);
    for (ri, &node) in complete.iter().enumerate() {
        let row = x.row_mut(ri);
        let mut at = 0;
        for p in &parts {
            let sums: Vec<f64> = p
                .iter()
                .map(|c| match c {
                    Some(c) => windows[node].sums.get(*c as usize).copied().unwrap_or(0.0),
                    None => 0.0,
                })
                .collect();
            let total: f64 = sums.iter().sum();
            let mut acc = 0.0;
            for (o, s) in row[at..at + p.len()].iter_mut().zip(&sums) {
                acc += s;
                *o = if total > 0.0 { acc / total } else { 1.0 };
            }
            at += p.len();
        }
    }
    (x, comp_of)
}
