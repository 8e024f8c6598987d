//! Stage 4 of a window: variance weighting, the scorer's profiles and the distance's
//! preparation (and, in training, each component's spread, which the weights are learnt from).

use crate::analyzer::state::MetricState;
use crate::distance::Distance;
use crate::score::{median_in_place, median_node, to_profile, Matrix, ProfileTotal};

use super::window::Features;

/// Training: how far each component strays from the median node (variance weighting learns
/// its scales from this).
pub(super) fn note_spread(ms: &mut MetricState, raw: &Matrix) {
    let med = median_node(raw);
    for (ci, &c) in ms.result.kept_list.iter().enumerate() {
        let sp = &mut ms.result.spread[c as usize];
        sp.level_sum += med[ci];
        sp.windows += 1;
        for ri in 0..raw.rows {
            sp.dev_sum += (raw.row(ri)[ci] - med[ci]).abs();
            sp.n += 1;
        }
    }
}

/// Stage 4, weights, profiles and the distance's preparation: the matrix the scorer compares
/// (`None`: the raw sums, or a distribution family's cumulative histograms, as they are) and
/// the distance it compares with — for histograms the CDF distance, Σ|P(i) − Q(i)| (Manhattan
/// on them, already distributions: they are not made profiles).
pub(super) fn weights(
    ms: &MetricState,
    distance: Distance,
    f: &Features,
    profile: Option<ProfileTotal>,
) -> (Option<Matrix>, Distance) {
    let profiles = profile.is_some();
    if f.cdf.is_some() {
        return (None, Distance::Manhattan);
    }
    let weighted = ms.result.config.weights.is_some();
    if distance != Distance::SymKl && !weighted && !profiles {
        return (None, distance);
    }
    let kept = &ms.result.kept_list;
    let mut p = f.sums.clone();
    // The scale of each kept component in this window: trained, or for a component training
    // never kept, by its size in the window's median node (`Weights::unseen_scale`).
    let scale: Vec<f64> = match &ms.result.config.weights {
        Some(w) if kept.iter().any(|&c| ms.unseen[c as usize]) => {
            let mut col = vec![0.0; f.sums.rows];
            kept.iter()
                .enumerate()
                .map(|(ci, &c)| {
                    if !ms.unseen[c as usize] {
                        return ms.scale[c as usize];
                    }
                    for (r, v) in col.iter_mut().enumerate() {
                        *v = f.sums.row(r)[ci];
                    }
                    w.unseen_scale(median_in_place(&mut col))
                })
                .collect()
        }
        _ => kept.iter().map(|&c| ms.scale[c as usize]).collect(),
    };
    let median_total = if f.totals.is_empty() {
        0.0
    } else {
        median_in_place(&mut f.totals.clone())
    };
    for i in 0..p.rows {
        let row = p.row_mut(i);
        if weighted {
            for (v, s) in row.iter_mut().zip(&scale) {
                *v /= s;
            }
        }
        match profile {
            Some(ProfileTotal::Own) => to_profile(row, f.totals[i]),
            Some(ProfileTotal::Median) => to_profile(row, median_total),
            None => {}
        }
        distance.prepare(row);
    }
    (Some(p), distance)
}
