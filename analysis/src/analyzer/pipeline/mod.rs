//! One window, top to bottom (seed 000 §"Diagnosis"):
//!
//! 0. `merge` — functions a tracer demoted on some node are compared as demoted on every node
//!    (merged with their callers, or left out: [`crate::demoted`]);
//! 1. `node_windows` — each node's data over the window: the share of its seconds present and
//!    its sums scaled to the whole window; a node with at least half of them present is
//!    compared, the others are missing for that window: a gap is never read as zeros;
//! 2. `keep_rule` — components reaching the metric's minimum in this window on some compared
//!    node join the kept set (which only grows, so offline and live analyses agree);
//!    `rare_hits` (2b, count) — among the components left out, those one node counts orders of
//!    magnitude above its peers' noise floor ([`crate::rare`]): the node is anomalous in the
//!    window whatever its score (stage 6), and the functions join its root cause (stage 8);
//! 3. `feature_matrix` — one row per compared node: the window sums of the kept components,
//!    or (distribution families) their cumulative histograms on shared bins;
//! 4. `weights` — variance weighting, the scorer's profiles (seed 002: each row divided by
//!    its sum) and the distance's preparation;
//! 5. scores — the [`Scorer`]: how unlike its peers each node is;
//! 6. `decide` — the threshold policy (trained, unsupervised, training) decides per node;
//! 7. the k-of-(2k − 1) filter turns anomalous windows into faulty verdicts (a second filter,
//!    with the windows a node could not be compared in taken as anomalous, says when missing
//!    data could hide a fault: "not enough comparable windows"), and each node's persistence
//!    accumulator (seed 001 §3.4) counts the window;
//! 8. `root_cause` — for anomalous nodes, each kept component's distance to the node's
//!    reference (the median node) is added up, and the components that alone deviate more than
//!    the window's typical node does in all of them count as anomalous in their own
//!    persistence accumulators (the order of the root-cause table).
//!
//! The window's flow is here (`close_window`, `analyse`); the stages are in their own files:
//! `merge.rs` (0), `select.rs` (1–2), `rare.rs` (2b), `features.rs` (3), `weights.rs` (4), `cause.rs` (8); what they share is
//! `window.rs`.

mod cause;
mod features;
mod merge;
mod rare;
mod role;
mod select;
mod weights;
mod window;

use std::collections::HashMap;

use crate::distance::Distance;
use crate::family::Comparison;
use crate::model::PeerIdx;
use crate::policy::{shared_threshold, Policy};
use crate::score::{median_in_place, median_node, Matrix, Scorer, Scores};

use super::state::{
    AnomWindow, Anomaly, AppliedThreshold, Episode, MetricState, NormalRows, ScoredWindow,
    WindowEvent, WindowRange, MIN_NODES,
};
use cause::{root_cause, typical_distance, CauseSpace, RootCauseInput};
use features::feature_matrix;
pub(super) use select::NodeWindow;
use select::{keep_rule, node_windows, note_gaps};
use weights::{note_spread, weights};
use window::{Rows, SlotRows};

/// What every window of every metric shares.
pub(super) struct Context<'a> {
    pub(super) k: usize,
    pub(super) distance: Distance,
    pub(super) scorer: &'a dyn Scorer,
    pub(super) names: &'a [String],
    pub(super) merges: &'a [crate::demoted::Merge],
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
    let mut windows = std::mem::take(&mut ms.node_windows);
    let rows: Rows<'_> = (b..b + per_window).map(|i| buckets.get(&i)).collect();
    let slots: SlotRows<'_> = (b..b + per_window).map(|i| slot_values.get(&i)).collect();
    let start = b * ms.result.windows_ns.shift_ns;
    let end = start + ms.result.windows_ns.size_ns;
    let ev = {
        // Stage 0: functions demoted on some node, compared as demoted on every node.
        let merged = merge::apply(ms, ctx.merges, &rows, &slots, end);
        let m = merged.as_ref().map(|m| (m.rows(), m.slots()));
        let (r, sl) = match &m {
            Some((r, sl)) => (r, sl),
            None => (&rows, &slots),
        };
        let compared = node_windows(ms, r, &mut windows);
        analyse(ms, ctx, &windows, &compared, sl, start)
    };
    drop((rows, slots));
    ms.buckets = buckets;
    ms.slot_values = slot_values;
    ms.node_windows = windows;
    ev
}

/// The stages of the window starting at `start`.
fn analyse(
    ms: &mut MetricState,
    ctx: &Context<'_>,
    windows: &[NodeWindow],
    complete: &[PeerIdx],
    slots: &SlotRows<'_>,
    start: u64,
) -> WindowEvent {
    let end = start + ms.result.windows_ns.size_ns;
    ms.result.windows += 1;
    ms.result.window_range = Some(WindowRange {
        first_ns: ms.result.window_range.map_or(start, |r| r.first_ns),
        last_ns: start,
    });
    keep_rule(ms, windows, complete);
    let mut ev = WindowEvent {
        metric: ms.result.metric(),
        start_ns: start,
        end_ns: end,
        scored: complete.len(),
        cutoff: None,
        anomalous: Vec::new(),
        newly_faulty: Vec::new(),
        incomplete: Vec::new(),
        partial: Vec::new(),
    };
    let scored = complete.len() >= MIN_NODES;
    note_gaps(ms, ctx.k, windows, scored, start, &mut ev);
    if !scored {
        ms.result.unscored += 1;
        return ev;
    }
    let rare = rare::rare_hits(ms, windows, complete);
    let mut features = feature_matrix(ms, windows, slots, complete);
    role::adjust_sums(ms, complete, &mut features);
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
            Some(rule.cutoff(&scores.scores, median_size(ms, distance, &scores)))
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
        let evidence = role::WindowEvidence {
            start_ns: start,
            k: ctx.k,
            complete,
            scores: &scores,
            size: median_size(ms, distance, &scores),
            features: &features,
            slots,
        };
        role::note_evidence(ms, &evidence);
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
        let rare = &rare[ri];
        let anomalous = s > threshold || !rare.is_empty();
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
        // 7. k of the last 2k − 1 windows; and whether the windows the node could not be
        // compared in could hide a fault the filter cannot see.
        let was = ms.nodes[node].filter.faulty();
        let doubt = ms.nodes[node].doubt.push(anomalous);
        let faulty = ms.nodes[node].filter.push(anomalous);
        if doubt && !faulty {
            nr.undecided += 1;
        }
        if faulty {
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
        let over = rare.iter().map(|h| h.over).reduce(f64::max);
        nr.anomalous.push(AnomWindow {
            start_ns: start,
            score: s,
            threshold,
            rare: over,
        });
        ev.anomalous.push(Anomaly {
            node,
            score: s,
            threshold,
            rare: over.is_some(),
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
            rare,
        };
        root_cause(ms, &input, ri, node, &mut raw_median);
    }
    ev
}

/// The unsupervised rule's `size` of a window: the distance from its median node to an empty
/// node. Distributions have no size; ρ of it is then ρ of each kept component's calls moved one
/// bucket.
fn median_size(ms: &MetricState, distance: Distance, scores: &Scores) -> f64 {
    if ms.comparison == Comparison::Histograms {
        ms.result.kept_list.len() as f64
    } else {
        let mut zero = vec![0.0; scores.median.len()];
        distance.prepare(&mut zero);
        distance.dist(&scores.median, &zero)
    }
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
