//! One window, top to bottom (seed 000 §"Diagnosis"):
//!
//! 1. `complete_nodes` — nodes whose data covers the whole window; the others are missing for
//!    that window: a gap is never read as zeros;
//! 2. `keep_rule` — components reaching the metric's minimum in this window on some complete
//!    node join the kept set (which only grows, so offline and live analyses agree);
//! 3. `feature_matrix` — one row per complete node: the window sums of the kept components,
//!    or (distribution families) their cumulative histograms on shared bins;
//! 4. `weights` — variance weighting, the scorer's profiles (seed 002: each row divided by
//!    its sum) and the distance's preparation;
//! 5. scores — the [`Scorer`]: how unlike its peers each node is;
//! 6. `decide` — the threshold policy (trained, unsupervised, training) decides per node;
//! 7. the k-of-(2k − 1) filter turns anomalous windows into faulty verdicts, and each node's
//!    persistence accumulator (seed 001 §3.4) counts the window;
//! 8. `root_cause` — for anomalous nodes, each kept component's distance to the node's
//!    reference (the median node) is added up, and the components that alone deviate more than
//!    the window's typical node does in all of them count as anomalous in their own
//!    persistence accumulators (the order of the root-cause table).

use std::collections::HashMap;
use std::sync::Arc;

use crate::cdf;
use crate::distance::Distance;
use crate::family::{Comparison, KeepRule};
use crate::model::{CompIdx, PeerIdx};
use crate::policy::{shared_threshold, Policy};
use crate::score::{
    median_in_place, median_node, to_profile, Matrix, ProfileTotal, Reference, Scorer, Scores,
};

use super::state::{
    all_set, AnomWindow, Anomaly, AppliedThreshold, Episode, MetricState, NodeBucket, NormalRows,
    ScoredWindow, WindowEvent, WindowRange, MIN_NODES,
};

/// What every window of every metric shares.
pub(super) struct Context<'a> {
    pub(super) k: usize,
    pub(super) distance: Distance,
    pub(super) scorer: &'a dyn Scorer,
    pub(super) names: &'a [String],
}

/// The buckets of one window, per node.
type Rows<'a> = Vec<Option<&'a Vec<NodeBucket>>>;
/// Distribution families: the per-slot values of one window's buckets, per node.
type SlotRows<'a> = Vec<Option<&'a Vec<Vec<f64>>>>;

/// The feature matrix of a window: rows are complete nodes.
struct Features {
    /// Window sums of the kept components (the metric's unit).
    sums: Matrix,
    /// Per row, the window sum of *all* its components, kept or not, each divided by its
    /// weighting scale when weighted: seed 002's total T(h), which profiles divide by.
    totals: Vec<f64>,
    /// Distribution families: cumulative histograms, and the kept component (index into the
    /// kept list) of each column.
    cdf: Option<(Matrix, Vec<u32>)>,
}

/// Closes window `b` (bucket index of its start) of metric `ms`.
pub(super) fn close_window(
    ms: &mut MetricState,
    ctx: &Context<'_>,
    b: u64,
    per_window: u64,
) -> WindowEvent {
    // The window's buckets are read while the stages update the metric's state.
    let buckets = std::mem::take(&mut ms.buckets);
    let slot_values = std::mem::take(&mut ms.slot_values);
    let rows: Rows<'_> = (b..b + per_window).map(|i| buckets.get(&i)).collect();
    let slots: SlotRows<'_> = (b..b + per_window).map(|i| slot_values.get(&i)).collect();
    let start = b * ms.result.windows_ns.shift_ns;
    let ev = analyse(ms, ctx, &rows, &slots, start);
    drop((rows, slots));
    ms.buckets = buckets;
    ms.slot_values = slot_values;
    ev
}

/// The stages of the window starting at `start`.
fn analyse(
    ms: &mut MetricState,
    ctx: &Context<'_>,
    rows: &Rows<'_>,
    slots: &SlotRows<'_>,
    start: u64,
) -> WindowEvent {
    let end = start + ms.result.windows_ns.size_ns;
    ms.result.windows += 1;
    ms.result.window_range = Some(WindowRange {
        first_ns: ms.result.window_range.map_or(start, |r| r.first_ns),
        last_ns: start,
    });
    let complete = complete_nodes(ms, rows);
    keep_rule(ms, rows, &complete);
    let mut ev = WindowEvent {
        metric: ms.result.metric(),
        start_ns: start,
        end_ns: end,
        scored: complete.len(),
        cutoff: None,
        anomalous: Vec::new(),
        newly_faulty: Vec::new(),
        incomplete: Vec::new(),
    };
    note_incomplete(ms, ctx, &complete, end, &mut ev);
    if complete.len() < MIN_NODES {
        ms.result.unscored += 1;
        for &n in &complete {
            ms.nodes[n].gap(ctx.k);
        }
        return ev;
    }
    let features = feature_matrix(ms, rows, slots, &complete);
    if matches!(ms.result.config.policy, Policy::Training) {
        note_spread(ms, &features.sums);
    }
    // Distribution families compare cumulative histograms, already distributions.
    let profile = ctx.scorer.profiles().filter(|_| features.cdf.is_none());
    let profiles = profile.is_some();
    let (prepared, distance) = weights(ms, ctx.distance, &features, profile);
    let x = prepared
        .as_ref()
        .or(features.cdf.as_ref().map(|c| &c.0))
        .unwrap_or(&features.sums);
    let scores = match normal_rows(ms, profiles) {
        Some((normal, of)) => {
            let own: Vec<Vec<u32>> = complete
                .iter()
                .map(|&n| of.get(&ctx.names[n]).cloned().unwrap_or_default())
                .collect();
            ctx.scorer
                .score_supervised(distance, x, start, normal, &own)
        }
        None => ctx.scorer.score(distance, x, start),
    };
    if profiles && matches!(ms.result.config.policy, Policy::Training) {
        for (ri, &node) in complete.iter().enumerate() {
            let nr = &mut ms.result.nodes[node];
            for (&c, &v) in ms.result.kept_list.iter().zip(x.row(ri)) {
                *nr.profile_sum.entry(c).or_default() += v;
            }
            nr.profile_windows += 1;
        }
    }
    let cutoff = match &ms.result.config.policy {
        Policy::Untrained(rule) => {
            let size = if ms.comparison == Comparison::Histograms {
                // Distributions have no size; ρ of it is then ρ of each kept component's calls
                // moved one bucket.
                ms.result.kept_list.len() as f64
            } else {
                let mut zero = vec![0.0; x.cols];
                distance.prepare(&mut zero);
                distance.dist(&scores.median, &zero)
            };
            Some(rule.cutoff(&scores.scores, size))
        }
        // What every node of the window shares (a busy host, a change of workload) is not one
        // node's fault (`shared_threshold`): the window's median score.
        Policy::Trained {
            shared: Some(_), ..
        }
        | Policy::Training => {
            let mut v = scores.scores.clone();
            Some(median_in_place(&mut v))
        }
        _ => None,
    };
    if let (Policy::Training, Some(m)) = (&ms.result.config.policy, cutoff) {
        ms.result.max_median = ms.result.max_median.max(m);
    }
    ev.cutoff = cutoff;
    let mut raw_median: Option<Vec<f64>> = None;
    // Root cause compares components as they are (raw or weighted), never as profiles: in a
    // profile every function's share moves when one function grows. Computed once a node is
    // anomalous, with the typical node's distance to its reference.
    let mut cause: Option<CauseSpace> = None;
    for (ri, &node) in complete.iter().enumerate() {
        let s = scores.scores[ri];
        let threshold = decide(ms, ctx, node, s, cutoff);
        let anomalous = s > threshold;
        let nr = &mut ms.result.nodes[node];
        nr.scored += 1;
        nr.first_scored_ns.get_or_insert(start);
        nr.max_score = nr.max_score.max(s);
        nr.persistence.push(anomalous);
        if ms.keep_scores {
            nr.scores.push(ScoredWindow {
                start_ns: start,
                score: s,
                threshold,
            });
        }
        if matches!(ms.result.config.policy, Policy::Training) {
            ms.nodes[node].note_training_score(s, ctx.k, nr);
        }
        // 7. k of the last 2k − 1 windows.
        let was = ms.nodes[node].filter.faulty();
        if ms.nodes[node].filter.push(anomalous) {
            match nr.episodes.last_mut() {
                Some(e) if was => e.last_window_ns = start,
                _ => {
                    nr.episodes.push(Episode {
                        first_window_ns: start,
                        last_window_ns: start,
                    });
                    ev.newly_faulty.push(node);
                }
            }
        }
        if !anomalous {
            nr.functions.window(&[]);
            continue;
        }
        nr.anomalous.push(AnomWindow {
            start_ns: start,
            score: s,
            threshold,
        });
        ev.anomalous.push(Anomaly {
            node,
            score: s,
            threshold,
        });
        let space = cause.get_or_insert_with(|| {
            let unprofiled = profiles.then(|| {
                weights(ms, ctx.distance, &features, None)
                    .0
                    .unwrap_or_else(|| features.sums.clone())
            });
            let reference = unprofiled
                .as_ref()
                .map(|m| Scores::new(Vec::new(), median_node(m)));
            let cx = unprofiled.as_ref().unwrap_or(x);
            let typical = typical_distance(cx, reference.as_ref().unwrap_or(&scores), distance);
            CauseSpace {
                x: unprofiled,
                reference,
                typical,
            }
        });
        let input = RootCauseInput {
            features: &features,
            x: space.x.as_ref().unwrap_or(x),
            scores: space.reference.as_ref().unwrap_or(&scores),
            distance,
            reference: ctx.scorer.reference(),
            typical: space.typical,
        };
        root_cause(ms, &input, ri, node, &mut raw_median);
    }
    ev
}

/// The normal profiles as rows of the kept components (rebuilt when the kept set grows) and
/// each node's rows, when the scorer compares profiles and the metric has some.
fn normal_rows(
    ms: &mut MetricState,
    profiles: bool,
) -> Option<(&Matrix, &HashMap<String, Vec<u32>>)> {
    let normal = ms.result.config.normal.as_ref().filter(|_| profiles)?;
    let kept = ms.result.kept_list.len();
    if ms.normal_rows.as_ref().is_none_or(|r| r.kept != kept) {
        let comps = &ms.result.comps;
        let labels = ms.result.kept_list.iter().map(|&c| &comps[c as usize]);
        let mut of: HashMap<String, Vec<u32>> = HashMap::new();
        for (i, (node, _)) in normal.profiles.iter().enumerate() {
            of.entry(node.clone()).or_default().push(i as u32);
        }
        ms.normal_rows = Some(NormalRows {
            kept,
            rows: normal.matrix(labels),
            of,
        });
    }
    ms.normal_rows.as_ref().map(|r| (&r.rows, &r.of))
}

/// Where root cause compares a window's nodes.
struct CauseSpace {
    /// The matrix before profiles (weighted, or the raw sums), when the scorer compared
    /// profiles; `None`: root cause uses the scored matrix.
    x: Option<Matrix>,
    /// The median node of `x`, when it is set.
    reference: Option<Scores>,
    /// [`typical_distance`] in that space.
    typical: f64,
}

/// The median over the window's nodes of each node's distance to its root-cause reference:
/// how much a typical node deviates in all components together. A component that alone
/// deviates more is anomalous in that window (its persistence counts up).
fn typical_distance(x: &Matrix, scores: &Scores, distance: Distance) -> f64 {
    let mut d: Vec<f64> = (0..x.rows)
        .map(|i| distance.dist(x.row(i), &scores.reference(x, i)))
        .collect();
    median_in_place(&mut d)
}

/// Stage 1, complete nodes: data covering every slot of the window, none of it missed.
fn complete_nodes(ms: &MetricState, rows: &Rows<'_>) -> Vec<PeerIdx> {
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
fn keep_rule(ms: &mut MetricState, rows: &Rows<'_>, complete: &[PeerIdx]) {
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

/// Nodes that are not complete: a gap (not anomalous), and incomplete once their data began.
fn note_incomplete(
    ms: &mut MetricState,
    ctx: &Context<'_>,
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
        ns.gap(ctx.k);
    }
}

/// Stage 3, the feature matrix of the kept components, one row per complete node.
fn feature_matrix(
    ms: &MetricState,
    rows: &Rows<'_>,
    slots: &SlotRows<'_>,
    complete: &[PeerIdx],
) -> Features {
    let kept = &ms.result.kept_list;
    let mut sums = Matrix::default();
    sums.reset(complete.len(), kept.len());
    for (ri, &node) in complete.iter().enumerate() {
        let row = sums.row_mut(ri);
        for r in rows.iter().flatten() {
            let vals = &r[node].vals;
            for (o, &c) in row.iter_mut().zip(kept) {
                if let Some(v) = vals.get(c as usize) {
                    *o += v;
                }
            }
        }
    }
    let cdf = match ms.comparison {
        Comparison::Sums => None,
        Comparison::Cdf { max_bins } => Some(cdf_features(ms, slots, complete, max_bins)),
        Comparison::Histograms => Some(histogram_features(ms, rows, complete)),
    };
    let totals = complete
        .iter()
        .map(|&node| {
            let mut t = 0.0;
            for r in rows.iter().flatten() {
                for (c, &v) in r[node].vals.iter().enumerate() {
                    t += v / ms.scale[c];
                }
            }
            t
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
                    let mut v = Vec::with_capacity(per_node);
                    for r in slots {
                        let at = c as usize * spb;
                        let values = r
                            .and_then(|r| r.get(node))
                            .and_then(|n| n.get(at..at + spb));
                        match values {
                            Some(s) => v.extend_from_slice(s),
                            None => v.resize(v.len() + spb, ms.slot_fill),
                        }
                    }
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
    rows: &Rows<'_>,
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
                    Some(c) => rows
                        .iter()
                        .flatten()
                        .map(|r| r[node].vals.get(*c as usize).copied().unwrap_or(0.0))
                        .sum(),
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

/// Training: how far each component strays from the median node (variance weighting learns
/// its scales from this).
fn note_spread(ms: &mut MetricState, raw: &Matrix) {
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
fn weights(
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

/// Stage 6, the threshold policy decides node `node`'s threshold in this window.
fn decide(
    ms: &mut MetricState,
    ctx: &Context<'_>,
    node: PeerIdx,
    s: f64,
    cutoff: Option<f64>,
) -> f64 {
    match &ms.result.config.policy {
        Policy::Training => f64::INFINITY,
        Policy::Trained {
            by_node,
            fallback,
            shared,
        } => {
            let (value, own) = match by_node.get(&ctx.names[node]) {
                Some(&t) => (t, true),
                None => (*fallback, false),
            };
            ms.result.nodes[node].threshold = Some(AppliedThreshold { value, own });
            shared_threshold(value, cutoff.unwrap_or(0.0), *shared)
        }
        Policy::Untrained(rule) => {
            // Seed 002's unsupervised case: a node that stands out from its peers is anomalous
            // whether or not it has changed. Its own first windows only tell the report whether
            // it changed or was different from the start.
            let peer = cutoff.unwrap_or(f64::INFINITY);
            let ns = &mut ms.nodes[node];
            let own = rule.baseline_cutoff(&ns.baseline);
            if ns.baseline.len() < rule.baseline_windows {
                ns.baseline.push(s);
            }
            if s > peer && s <= own {
                ms.result.nodes[node].different += 1;
            }
            peer
        }
    }
}

/// What root cause compares.
struct RootCauseInput<'a> {
    features: &'a Features,
    /// The matrix scored.
    x: &'a Matrix,
    scores: &'a Scores,
    distance: Distance,
    reference: Reference,
    /// [`typical_distance`] of the window.
    typical: f64,
}

/// Stage 8, root cause: each kept component's distance to the node's reference, in the
/// distance's terms (sizes and signs in the metric's unit).
fn root_cause(
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
        acc.node += rr[ci];
        acc.reference += raw_ref[ci];
    }
    nr.functions.window(&standing_out);
}
