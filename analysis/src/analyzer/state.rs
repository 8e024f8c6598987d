//! What the analyzer holds per metric: its configuration, the open buckets of data, each node's
//! filter state, and the results so far ([`MetricResult`], [`NodeResult`]), which diagnosis,
//! training and the missing-data findings read.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use crate::family::{Comparison, KeepRule, Metric, MetricFamily, Windows};
use crate::filter::KOfN;
use crate::model::{CompIdx, CompLabel, IntervalData, PeerIdx};
use crate::persistence::{Ledger, Persistence};
use crate::policy::{Policy, Spread, Weights};
use crate::rare::{RareBars, RareFound};
use crate::roles::{Adjust, RoleStats, Roles};
use crate::score::{Matrix, NormalProfiles};

/// Peer comparison needs at least this many nodes with data in a window.
pub const MIN_NODES: usize = 3;

/// A node is compared in a window when at least this share of the window's seconds (slots) is
/// present for it — covered by a whole interval and missed by none of its writers; its sums are
/// then scaled to the whole window (stage 1, `select.rs`). Below it the node is *not compared*
/// in that window (never "ok"): half a window is the least from which a rate is still a
/// window's rate rather than a few seconds' (docs/thresholds.md, "Gaps").
pub const MIN_PRESENT: f64 = 0.5;

/// `--follow`: how long past a metric's lag a window waits for a writer that is behind but
/// alive (its process runs on this host, or its file grew since it was last read) before it
/// closes without it. A starved process's flusher writes its intervals late but in order; the
/// runtime keeps each interval for tens of seconds (docs/tracer.md), so a minute covers what
/// it can still deliver. Intervals that arrive after their window closed are counted
/// ([`NodeResult::late`]) and said in the report; an offline diagnosis of the same data
/// compares them.
pub const BEHIND_WAIT_NS: u64 = 60 * 1_000_000_000;

/// An anomalous node of a window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Anomaly {
    /// The node.
    pub node: PeerIdx,
    /// Its score.
    pub score: f64,
    /// The threshold it exceeded.
    pub threshold: f64,
    /// True when a rare function made it anomalous ([`crate::rare`]).
    pub rare: bool,
}

/// What happened when one window closed (for `--follow` output).
#[derive(Clone, Debug)]
pub struct WindowEvent {
    /// Metric.
    pub metric: Metric,
    /// Window start, ns.
    pub start_ns: u64,
    /// Window end, ns.
    pub end_ns: u64,
    /// Nodes scored.
    pub scored: usize,
    /// The unsupervised cut-off, when untrained.
    pub cutoff: Option<f64>,
    /// Anomalous nodes.
    pub anomalous: Vec<Anomaly>,
    /// Nodes that became faulty in this window.
    pub newly_faulty: Vec<PeerIdx>,
    /// Nodes (with data before) left out of this window: less than [`MIN_PRESENT`] of it
    /// present.
    pub incomplete: Vec<PeerIdx>,
    /// Nodes compared on the seconds present, with the share present (below 1).
    pub partial: Vec<(PeerIdx, f64)>,
}

/// One metric's settings.
#[derive(Clone, Debug)]
pub struct MetricConfig {
    /// The family: its metric, unit, words, comparison, own windows.
    pub family: Arc<dyn MetricFamily>,
    /// Finest record interval of the metric's data, ns; every interval's length is a multiple
    /// of it and divides WinShift.
    pub slot_ns: u64,
    /// In `--follow`: how long a writer may stay silent past a window's end before the window
    /// closes without it.
    pub lag_ns: u64,
    /// Dimensionality rule.
    pub keep: KeepRule,
    /// Thresholds.
    pub policy: Policy,
    /// Variance weighting: each component is divided by its fault-free scale before distances
    /// are taken; `None` compares raw values.
    pub weights: Option<Weights>,
    /// Known-normal profiles (seed 002's supervised suspect score), for scorers that compare
    /// profiles.
    pub normal: Option<Arc<NormalProfiles>>,
    /// Nodes of another role, learnt from a baseline: each is compared against its own
    /// baseline ([`crate::roles`]).
    pub roles: Option<Arc<Roles>>,
    /// Rare functions ([`crate::rare`]): the bars of the functions the keep rule left out, when
    /// the metric compares them (count).
    pub rare: Option<RareBars>,
}

impl MetricConfig {
    /// The metric.
    pub fn metric(&self) -> Metric {
        self.family.metric()
    }
}

/// An anomalous window of a node.
#[derive(Clone, Debug, PartialEq)]
pub struct AnomWindow {
    /// Window start, ns.
    pub start_ns: u64,
    /// The node's score.
    pub score: f64,
    /// The threshold it exceeded.
    pub threshold: f64,
    /// When a rare function made the window anomalous ([`crate::rare`]): the largest ratio of
    /// the node's count of one to its noise floor, over the node's bar (at least 1).
    pub rare: Option<f64>,
}

/// A stretch of windows during which the k-of-(2k − 1) filter held a node faulty.
#[derive(Clone, Debug, PartialEq)]
pub struct Episode {
    /// Start of the first window that made the node faulty.
    pub first_window_ns: u64,
    /// Start of the last window in which it was still faulty.
    pub last_window_ns: u64,
}

/// Root-cause sums of one component over a node's anomalous windows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RootCause {
    /// Σ component distance to the reference.
    pub distance: f64,
    /// Σ the node's value (metric unit).
    pub node: f64,
    /// Σ the reference's value (metric unit).
    pub reference: f64,
}

/// A component of a root-cause ranking.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ranked {
    /// The component.
    pub comp: CompIdx,
    /// Its sums.
    pub cause: RootCause,
    /// How persistently it alone deviated more than the typical node in all components
    /// (seed 001 §3.4).
    pub persistence: Persistence,
}

/// The threshold applied to a node (trained policy).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AppliedThreshold {
    /// The threshold.
    pub value: f64,
    /// True when it is the node's own, false when it is the metric's largest.
    pub own: bool,
}

/// A node's score in one window, with the threshold it was held to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ScoredWindow {
    /// Window start, ns.
    pub start_ns: u64,
    /// The node's score.
    pub score: f64,
    /// The threshold it was compared with (infinite in training).
    pub threshold: f64,
}

/// A stretch of consecutive windows in which a node's data had a gap, all compared on the
/// seconds present or all left out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GapRun {
    /// Start of the first window.
    pub first_ns: u64,
    /// Start of the last window.
    pub last_ns: u64,
    /// Windows in the stretch.
    pub windows: u64,
    /// True when the node was left out of them (less than [`MIN_PRESENT`] present), false when
    /// it was compared on the seconds present.
    pub left_out: bool,
    /// The smallest share of a window's seconds present in the stretch.
    pub min_present: f64,
}

/// Everything found about one node for one metric.
#[derive(Clone, Debug, Default)]
pub struct NodeResult {
    /// Windows in which the node was scored.
    pub scored: u64,
    /// Windows (after the node's first data) in which it was left out: its data missed more
    /// than [`MIN_PRESENT`] allows, or too few nodes could be compared.
    pub incomplete: u64,
    /// Windows in which it was compared on the seconds present (its sums scaled to the
    /// window): some of its seconds missing, at least [`MIN_PRESENT`] present.
    pub partial: u64,
    /// Its windows with a gap of its own (compared on the seconds present, or left out), as
    /// stretches.
    pub gaps: Vec<GapRun>,
    /// Windows compared in which it was not faulty but would have been, had the windows it
    /// could not be compared in been anomalous: the missing data could hide a fault
    /// ("not enough comparable windows").
    pub undecided: u64,
    /// Its intervals that arrived after their window had closed (`--follow`), left out.
    pub late: u64,
    /// Largest score.
    pub max_score: f64,
    /// Training: the least threshold under which the node would never have been faulty — the
    /// largest k-th largest score of any 2k − 1 consecutive scored windows.
    pub flag_score: f64,
    /// Anomalous windows.
    pub anomalous: Vec<AnomWindow>,
    /// Faulty stretches.
    pub episodes: Vec<Episode>,
    /// Root-cause sums by component.
    pub root_cause: HashMap<CompIdx, RootCause>,
    /// First data (interval start), ns.
    pub first_ns: Option<u64>,
    /// End of the last data, ns.
    pub last_ns: Option<u64>,
    /// Start of the first whole (not partial, not missed) interval, ns.
    pub first_full_ns: Option<u64>,
    /// End of the last whole interval, ns.
    pub last_full_ns: Option<u64>,
    /// The threshold applied (trained policy only).
    pub threshold: Option<AppliedThreshold>,
    /// Untrained: windows in which the node stood out from its peers without having changed
    /// from its own baseline (persistently different).
    pub different: u64,
    /// Its score in every window it was scored in, when the analyzer keeps them.
    pub scores: Vec<ScoredWindow>,
    /// Start of the first window it was scored in, ns.
    pub first_scored_ns: Option<u64>,
    /// Persistence of its anomalies over the windows it was scored in (seed 001 §3.4).
    pub persistence: Persistence,
    /// Persistence of each component's own anomalies (root-cause order).
    pub functions: Ledger<CompIdx>,
    /// Training with a scorer of profiles: the sum of its window profiles, by component, and
    /// the windows summed (its normal profile is their mean).
    pub profile_sum: HashMap<CompIdx, f64>,
    /// See `profile_sum`.
    pub profile_windows: u64,
    /// Training: whether the node differed from its peers the same way through the baseline
    /// ([`crate::roles`]).
    pub role: RoleStats,
    /// Rare functions that made its windows anomalous ([`crate::rare`]), by component.
    pub rare: HashMap<CompIdx, RareFound>,
    /// Training: the largest ratio of its count of a rare function to the function's noise
    /// floor, in any window ([`crate::rare`]).
    pub rare_max: f64,
}

impl NodeResult {
    /// True when the node was faulty in some window.
    pub fn faulty(&self) -> bool {
        !self.episodes.is_empty()
    }

    /// Notes a window starting at `start_ns` (windows every `shift_ns`) in which the node's
    /// own data had a gap: compared on `present` of its seconds, or left out.
    pub(super) fn note_gap(&mut self, start_ns: u64, shift_ns: u64, left_out: bool, present: f64) {
        if let Some(r) = self.gaps.last_mut() {
            if r.left_out == left_out && r.last_ns + shift_ns == start_ns {
                r.last_ns = start_ns;
                r.windows += 1;
                r.min_present = r.min_present.min(present);
                return;
            }
        }
        self.gaps.push(GapRun {
            first_ns: start_ns,
            last_ns: start_ns,
            windows: 1,
            left_out,
            min_present: present,
        });
    }
}

/// The first and last window closed (starts, ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowRange {
    /// Start of the first window.
    pub first_ns: u64,
    /// Start of the last window.
    pub last_ns: u64,
}

/// Everything found for one metric, with its configuration.
#[derive(Clone, Debug)]
pub struct MetricResult {
    /// Settings.
    pub config: MetricConfig,
    /// The metric's windows (the family's own, or the analysis').
    pub windows_ns: Windows,
    /// Component labels.
    pub comps: Vec<CompLabel>,
    /// Kept components, sorted by label (so column order never depends on node order).
    pub kept_list: Vec<CompIdx>,
    /// Windows closed.
    pub windows: u64,
    /// Windows with fewer than [`MIN_NODES`] complete nodes.
    pub unscored: u64,
    /// Intervals that arrived after their window had closed (dropped).
    pub late: u64,
    /// The windows closed.
    pub window_range: Option<WindowRange>,
    /// Training: per component, its spread around the median node.
    pub spread: Vec<Spread>,
    /// Training: the largest median score of a window (what the typical node deviated by).
    pub max_median: f64,
    /// Per node, by index.
    pub nodes: Vec<NodeResult>,
}

impl MetricResult {
    /// The metric.
    pub fn metric(&self) -> Metric {
        self.config.metric()
    }

    /// Kept component labels, sorted.
    pub fn kept_labels(&self) -> Vec<CompLabel> {
        self.kept_list
            .iter()
            .map(|&c| self.comps[c as usize].clone())
            .collect()
    }

    /// The top `n` components of a node's root cause: most persistent first (seed 001 §3.4,
    /// [`Persistence::order`]), then largest summed distance (ties by label, so the order never
    /// depends on registration order).
    pub fn top(&self, node: PeerIdx, n: usize) -> Vec<Ranked> {
        let nr = &self.nodes[node];
        let mut v: Vec<Ranked> = nr
            .root_cause
            .iter()
            .map(|(&comp, &cause)| Ranked {
                comp,
                cause,
                persistence: nr.functions.get(&comp),
            })
            .collect();
        v.sort_by(|a, b| {
            a.persistence
                .order(&b.persistence)
                .then_with(|| b.cause.distance.total_cmp(&a.cause.distance))
                .then_with(|| self.comps[a.comp as usize].cmp(&self.comps[b.comp as usize]))
        });
        v.truncate(n);
        v
    }
}

/// A node's state between windows (not a result).
#[derive(Clone, Debug)]
pub(super) struct NodeState {
    pub(super) filter: KOfN,
    /// The filter with every window the node could not be compared in taken as anomalous:
    /// when it holds a fault the real one does not, the missing data could hide one.
    pub(super) doubt: KOfN,
    /// Training: the node's last 2k − 1 scores.
    recent: VecDeque<f64>,
    /// Untrained: the node's scores in its first windows (its own baseline).
    pub(super) baseline: Vec<f64>,
}

impl NodeState {
    pub(super) fn new(k: usize) -> Self {
        NodeState {
            filter: KOfN::new(k),
            doubt: KOfN::new(k),
            recent: VecDeque::with_capacity(2 * k - 1),
            baseline: Vec::new(),
        }
    }

    /// Training: records a window's score for [`NodeResult::flag_score`] (the same windows, in
    /// the same order, that the k-of-(2k − 1) filter sees when diagnosing).
    pub(super) fn note_training_score(&mut self, s: f64, k: usize, r: &mut NodeResult) {
        self.remember(s, k);
        if self.recent.len() >= k {
            let mut v: Vec<f64> = self.recent.iter().copied().collect();
            v.sort_by(|a, b| b.total_cmp(a));
            r.flag_score = r.flag_score.max(v[k - 1]);
        }
    }

    /// A window the node was not scored in: not anomalous, and a zero for training;
    /// `could_hide` when the node's data had begun and the window could have been compared
    /// (then a fault could hide in it: [`NodeResult::undecided`]).
    pub(super) fn gap(&mut self, k: usize, could_hide: bool) {
        let _ = self.filter.push(false);
        let _ = self.doubt.push(could_hide);
        self.remember(0.0, k);
    }

    /// Keeps `s` among the last 2k − 1 scores.
    fn remember(&mut self, s: f64, k: usize) {
        if self.recent.len() == 2 * k - 1 {
            self.recent.pop_front();
        }
        self.recent.push_back(s);
    }
}

/// Known-normal profiles as rows of the kept components.
#[derive(Debug)]
pub(super) struct NormalRows {
    /// The length of the kept list they were built for.
    pub(super) kept: usize,
    /// One row per profile.
    pub(super) rows: Matrix,
    /// Each node's rows.
    pub(super) of: HashMap<String, Vec<u32>>,
}

/// One writer's data in one bucket (WinShift of data) of a node: kept apart from the node's
/// other writers so that a writer that missed seconds is scaled over its own seconds, never
/// over another's (stage 1, `select.rs`).
#[derive(Clone, Debug, Default)]
pub(super) struct WriterBucket {
    /// The writer.
    pub(super) id: u64,
    /// Sum of each component over its whole intervals.
    pub(super) vals: Vec<f64>,
    /// Sum of each component over its partial intervals (it started or stopped inside them,
    /// or woke too late to place the calls of their start).
    pub(super) part: Vec<f64>,
    /// Slots covered by a whole (not partial, not missed) interval.
    pub(super) full: Vec<u64>,
    /// Slots it could not observe (missed intervals, or an interval with a bad value).
    pub(super) missed: Vec<u64>,
    /// Slots its partial intervals touch.
    pub(super) partial: Vec<u64>,
}

impl WriterBucket {
    /// Empties it for writer `id`, with `words` words of slot bits.
    pub(super) fn reset(&mut self, id: u64, words: usize) {
        self.id = id;
        self.vals.clear();
        self.part.clear();
        for bits in [&mut self.full, &mut self.missed, &mut self.partial] {
            bits.clear();
            bits.resize(words, 0);
        }
    }
}

/// One node's data in one bucket: each of its writers' (most nodes have one).
#[derive(Clone, Debug, Default)]
pub(super) struct NodeBucket {
    pub(super) writers: Vec<WriterBucket>,
}

/// One writer (process file, sampler run) of a node.
#[derive(Clone, Debug)]
pub(super) struct Writer {
    pub(super) id: u64,
    pub(super) frontier: u64,
    pub(super) ended: bool,
    /// `--follow`: when the writer was last seen alive (its process runs, its file grew),
    /// wall-clock ns; a writer behind but alive holds windows open longer
    /// ([`BEHIND_WAIT_NS`]).
    pub(super) alive_ns: Option<u64>,
}

/// The state of one metric.
#[derive(Debug)]
pub(super) struct MetricState {
    pub(super) result: MetricResult,
    pub(super) comparison: Comparison,
    /// The comparison needs each slot's values (distributions), not only window sums.
    pub(super) per_slot: bool,
    pub(super) comp_map: HashMap<CompLabel, CompIdx>,
    pub(super) kept: Vec<bool>,
    pub(super) buckets: BTreeMap<u64, Vec<NodeBucket>>,
    /// Distribution families: per bucket and node, each component's value per slot
    /// (component-major); kept apart so that window sums, the common case, carry nothing more.
    pub(super) slot_values: BTreeMap<u64, Vec<Vec<f64>>>,
    pub(super) next_window: Option<u64>,
    pub(super) closed_any: bool,
    /// Per node.
    pub(super) writers: Vec<Vec<Writer>>,
    /// Per node.
    pub(super) nodes: Vec<NodeState>,
    pub(super) pool: Vec<WriterBucket>,
    pub(super) slots_per_bucket: usize,
    /// Per component: its weighting scale (1 when unweighted).
    pub(super) scale: Vec<f64>,
    /// Per component: weighted, without a trained scale, and scaled by its size in each
    /// window ([`Weights::unseen_scale`]).
    pub(super) unseen: Vec<bool>,
    /// The normal profiles as rows of the kept components, for the kept list's length.
    pub(super) normal_rows: Option<NormalRows>,
    /// Keep every node's score of every window.
    pub(super) keep_scores: bool,
    /// Distribution families: the value of a slot without data — 0, or NaN where absent is not
    /// zero ([`crate::family::About::absent_is_zero`]).
    pub(super) slot_fill: f64,
    /// Per node, a node of another role's adjusted components ([`MetricConfig::roles`]),
    /// sorted by component.
    pub(super) adjust: Vec<Vec<(CompIdx, Adjust)>>,
    /// Each node's data over the window being closed (reused from window to window).
    pub(super) node_windows: Vec<super::pipeline::NodeWindow>,
    /// Rare functions ([`crate::rare`]): per component, each node's largest count in a window
    /// compared so far (node-major per component; empty when the metric compares none).
    pub(super) rare_peak: Vec<Vec<f64>>,
}

impl MetricState {
    pub(super) fn new(cfg: MetricConfig, windows_ns: Windows, keep_scores: bool) -> Self {
        let comparison = cfg.family.comparison();
        let cfg_absent_is_zero = cfg.family.absent_is_zero();
        MetricState {
            slots_per_bucket: (windows_ns.shift_ns / cfg.slot_ns) as usize,
            result: MetricResult {
                config: cfg,
                windows_ns,
                comps: Vec::new(),
                kept_list: Vec::new(),
                windows: 0,
                unscored: 0,
                late: 0,
                window_range: None,
                spread: Vec::new(),
                max_median: 0.0,
                nodes: Vec::new(),
            },
            per_slot: comparison != Comparison::Sums,
            comparison,
            comp_map: HashMap::new(),
            kept: Vec::new(),
            buckets: BTreeMap::new(),
            slot_values: BTreeMap::new(),
            next_window: None,
            closed_any: false,
            writers: Vec::new(),
            nodes: Vec::new(),
            pool: Vec::new(),
            scale: Vec::new(),
            unseen: Vec::new(),
            normal_rows: None,
            keep_scores,
            slot_fill: if cfg_absent_is_zero { 0.0 } else { f64::NAN },
            adjust: Vec::new(),
            node_windows: Vec::new(),
            rare_peak: Vec::new(),
        }
    }

    /// Registers node `node` called `name`: its role's adjustments, if it has another role.
    pub(super) fn add_node(&mut self, name: &str) {
        let list = match self.result.config.roles.clone() {
            Some(r) => r.by_node.get(name).cloned().unwrap_or_default(),
            None => Vec::new(),
        };
        let mut v: Vec<(CompIdx, Adjust)> =
            list.iter().map(|(l, a)| (self.component(l), *a)).collect();
        v.sort_by_key(|x| x.0);
        self.adjust.push(v);
    }

    /// The adjustment of component `c` of node `node`, if it has another role there.
    pub(super) fn adjustment(&self, node: PeerIdx, c: CompIdx) -> Option<Adjust> {
        let v = self.adjust.get(node)?;
        v.binary_search_by_key(&c, |x| x.0).ok().map(|i| v[i].1)
    }

    pub(super) fn component(&mut self, label: &CompLabel) -> CompIdx {
        if let Some(&c) = self.comp_map.get(label) {
            return c;
        }
        let r = &mut self.result;
        let c = r.comps.len() as CompIdx;
        r.comps.push(label.clone());
        self.comp_map.insert(label.clone(), c);
        self.kept.push(false);
        let (scale, unseen) = scale_of(r.config.weights.as_ref(), label);
        self.scale.push(scale);
        self.unseen.push(unseen);
        r.spread.push(Spread::default());
        c
    }

    /// New thresholds, scales, normal profiles and roles (a rolling baseline learnt again):
    /// the components' scales and the nodes' adjustments follow; what the analysis found so
    /// far stays.
    pub(super) fn relearn(&mut self, cfg: Relearnt, names: &[String]) {
        let c = &mut self.result.config;
        (c.policy, c.weights, c.normal, c.roles) = (cfg.policy, cfg.weights, cfg.normal, cfg.roles);
        if c.rare.is_some() {
            c.rare = cfg.rare;
        }
        for (i, label) in self.result.comps.iter().enumerate() {
            (self.scale[i], self.unseen[i]) = scale_of(self.result.config.weights.as_ref(), label);
        }
        self.normal_rows = None;
        self.adjust.clear();
        for n in names {
            self.add_node(n);
        }
    }

    /// Adds `c` to the kept set, keeping the list sorted by label.
    pub(super) fn keep(&mut self, c: CompIdx) {
        if self.kept[c as usize] {
            return;
        }
        self.kept[c as usize] = true;
        let comps = &self.result.comps;
        let list = &mut self.result.kept_list;
        let at = list.partition_point(|&k| comps[k as usize] < comps[c as usize]);
        list.insert(at, c);
    }
}

/// What a metric is judged by, learnt again (`MetricState::relearn`).
#[derive(Clone, Debug)]
pub struct Relearnt {
    /// Thresholds.
    pub policy: Policy,
    /// Weighting scales.
    pub weights: Option<Weights>,
    /// Known-normal profiles.
    pub normal: Option<Arc<NormalProfiles>>,
    /// Nodes of another role.
    pub roles: Option<Arc<Roles>>,
    /// Rare functions' bars (`None`: the metric compares none).
    pub rare: Option<RareBars>,
}

/// A component's weighting scale (1 unweighted), and whether it is scaled by its size in each
/// window instead (weighted, without a trained scale: [`Weights::unseen_scale`]).
fn scale_of(w: Option<&Weights>, label: &CompLabel) -> (f64, bool) {
    (
        w.map_or(1.0, |w| w.scale(label)),
        w.is_some_and(|w| w.unseen_ratio.is_some() && !w.trained(label)),
    )
}

/// Adds an interval's values; returns false when a dense value was not [`valid`] (sparse values
/// are checked before).
pub(super) fn add_values(vals: &mut Vec<f64>, data: IntervalData<'_>, n_comps: usize) -> bool {
    match data {
        IntervalData::Sparse(v) => {
            if v.iter().any(|e| e.comp as usize >= vals.len()) {
                vals.resize(n_comps, 0.0);
            }
            for e in v {
                vals[e.comp as usize] += e.value;
            }
            true
        }
        IntervalData::Dense(v) => {
            if vals.len() < v.len() {
                vals.resize(v.len(), 0.0);
            }
            // No early exit, so that the loop vectorizes.
            let mut ok = true;
            for (a, &x) in vals.iter_mut().zip(v) {
                *a += x;
                ok &= (0.0..=f64::MAX).contains(&x);
            }
            ok
        }
        IntervalData::Missed => true,
    }
}

/// Distribution families: adds an interval's values to each of its slots `slots` of the
/// bucket (component-major, `spb` slots per component); a slot without data holds `fill` (0,
/// or NaN for absent). Out of line: window sums, the common case, never call it.
#[inline(never)]
pub(super) fn add_slot_values(
    slots: &mut Vec<f64>,
    data: IntervalData<'_>,
    n_comps: usize,
    spb: usize,
    covered: std::ops::Range<usize>,
    fill: f64,
) {
    let need = |c: usize| (c + 1) * spb;
    let add = |slot: &mut f64, x: f64| *slot = if slot.is_nan() { x } else { *slot + x };
    match data {
        IntervalData::Sparse(v) => {
            if slots.len() < n_comps * spb {
                slots.resize(n_comps * spb, fill);
            }
            for e in v {
                for s in covered.clone() {
                    add(&mut slots[e.comp as usize * spb + s], e.value);
                }
            }
        }
        IntervalData::Dense(v) => {
            if slots.len() < need(v.len().saturating_sub(1)) {
                slots.resize(v.len() * spb, fill);
            }
            for (c, &x) in v.iter().enumerate() {
                for s in covered.clone() {
                    add(&mut slots[c * spb + s], x);
                }
            }
        }
        IntervalData::Missed => {}
    }
}

/// A metric value: finite and not negative (NaN fails both comparisons).
#[inline]
pub(super) fn valid(x: f64) -> bool {
    (0.0..=f64::MAX).contains(&x)
}
