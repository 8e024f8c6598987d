//! The streaming peer-comparison engine (seed 000 §"Diagnosis").
//!
//! Input: per metric, per node and per source (a process's file, a sampler run), intervals of
//! per-component values on aligned starts ([`Interval`]). Intervals are added into *buckets*
//! of WinShift seconds starting at multiples of WinShift since the epoch; a window of WinSize
//! seconds is the sum of WinSize/WinShift consecutive buckets, so every value is added once
//! whatever the overlap, and memory holds only the buckets of windows not yet closed.
//!
//! A window closes once every live source has data past its end (or, in `--follow`, has been
//! silent for longer than the metric's lag; offline, once all input is in). Then, per metric:
//!
//! 1. nodes whose data covers the whole window are *complete*; the others are missing for that
//!    window — a gap is never read as zeros;
//! 2. the dimensionality rule adds functions that reach the metric's minimum in this window on
//!    some complete node to the kept set (which only grows, so offline and live analyses agree);
//! 3. each complete node's feature vector (the window sums of the kept functions) is prepared
//!    for the distance, and scored ([`score`]);
//! 4. the policy (trained thresholds, unsupervised rule, or training) marks anomalies;
//! 5. the k-of-(2k − 1) filter ([`KOfN`]) turns anomalies into faulty verdicts;
//! 6. for anomalous nodes, each kept function's component distance to the node's reference (the
//!    median node) is added up for root cause.
//!
//! The engine knows nothing of files: [`super::adapter`] feeds it from data directories,
//! [`super::synth`] from generated data.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::distance::Distance;
use super::filter::KOfN;
use super::model::{CompIdx, CompLabel, Interval, IntervalData, MetricKind, NodeIdx};
use super::score::{self, median_node, Matrix, Peers, ScoreKind};
use super::thresholds::Policy;

/// Peer comparison needs at least this many nodes with data in a window.
pub const MIN_NODES: usize = 3;

/// Settings shared by all metrics.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// WinSize, ns.
    pub win_size_ns: u64,
    /// WinShift, ns (divides WinSize).
    pub win_shift_ns: u64,
    /// k of the k-of-(2k − 1) filter.
    pub k: usize,
    /// Distance between feature vectors.
    pub distance: Distance,
    /// Node score.
    pub score: ScoreKind,
    /// Peers of the pairwise score.
    pub peers: Peers,
}

/// Which functions a metric keeps (seed 000 §"Feature-Vector Dimensionality").
#[derive(Clone, Debug, PartialEq)]
pub enum KeepRule {
    /// Functions reaching this value in some window on some node.
    AtLeast(f64),
    /// The functions another metric keeps (count uses the time rule).
    SameAs(MetricKind),
    /// Every component (kernel events: few, all meaningful).
    All,
}

/// One metric's settings.
#[derive(Clone, Debug)]
pub struct MetricConfig {
    /// The metric.
    pub kind: MetricKind,
    /// Finest record interval of the metric's data, ns; every interval's length is a multiple
    /// of it and divides WinShift.
    pub slot_ns: u64,
    /// In `--follow`: how long a source may stay silent past a window's end before the window
    /// closes without it.
    pub lag_ns: u64,
    /// Dimensionality rule.
    pub keep: KeepRule,
    /// Thresholds.
    pub policy: Policy,
    /// Variance weighting: each component is divided by its fault-free scale before distances
    /// are taken; `None` compares raw values.
    pub weights: Option<Weights>,
}

/// Variance weighting (seed 000 §"Future work": "weight components by their observed variance
/// (e.g., divide a component by its standard deviation)"): per component, the typical
/// fault-free deviation of a node from the median node, learned in training. Dividing by it
/// makes every function's ordinary peer-to-peer jitter count alike, so a noisy function (an
/// idle wait trading time with the I/O calls, a scheduler counter in the tens of thousands)
/// stops drowning a quiet one that moves only under a fault (TCP retransmits).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Weights {
    /// Scale per component label.
    pub scales: HashMap<CompLabel, f64>,
    /// Scale of a component training never kept (a function that appears only now).
    pub default: f64,
}

impl Weights {
    /// The scale of `label` (always positive and finite).
    pub fn scale(&self, label: &CompLabel) -> f64 {
        let s = self.scales.get(label).copied().unwrap_or(self.default);
        if s.is_finite() && s > 0.0 {
            s
        } else {
            1.0
        }
    }
}

/// Training statistics of one component: how far nodes stray from the median node.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Spread {
    /// Σ |node value − median node value| over nodes and windows.
    pub dev_sum: f64,
    /// Σ median node value over windows.
    pub level_sum: f64,
    /// Node-windows in `dev_sum`.
    pub n: u64,
    /// Windows in `level_sum`.
    pub windows: u64,
}

impl Spread {
    /// Mean absolute deviation from the median node.
    pub fn mean_dev(&self) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            self.dev_sum / self.n as f64
        }
    }

    /// Mean value of the median node.
    pub fn mean_level(&self) -> f64 {
        if self.windows == 0 {
            0.0
        } else {
            self.level_sum / self.windows as f64
        }
    }
}

/// Why an interval was refused.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PushError {
    /// Interval length or start does not fit the windows.
    Misaligned {
        /// Interval start.
        start_ns: u64,
        /// Interval length.
        dur_ns: u64,
    },
    /// A value is negative or not finite.
    BadValue(f64),
    /// A component index was never registered.
    UnknownComponent(CompIdx),
}

impl std::fmt::Display for PushError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushError::Misaligned { start_ns, dur_ns } => write!(
                f,
                "interval of {dur_ns} ns at {start_ns} does not fit the windows (WinShift must \
                 be a multiple of the record interval, and intervals aligned to it)"
            ),
            PushError::BadValue(v) => write!(f, "value {v} is not a non-negative number"),
            PushError::UnknownComponent(c) => write!(f, "component {c} was never registered"),
        }
    }
}

impl std::error::Error for PushError {}

/// One node's data in one bucket.
#[derive(Clone, Debug, Default)]
struct NodeBucket {
    vals: Vec<f64>,
    /// Slots covered by a whole (not partial, not missed) interval.
    full: Vec<u64>,
    /// Slots some source could not observe.
    missed: Vec<u64>,
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

/// Everything the engine knows about one node for one metric.
#[derive(Clone, Debug)]
pub struct NodeMetric {
    filter: KOfN,
    /// Windows in which the node was scored.
    pub scored: u64,
    /// Windows (after the node's first data) in which its data was incomplete.
    pub incomplete: u64,
    /// Largest score (training).
    pub max_score: f64,
    /// Training: the node's last 2k − 1 scores.
    recent: VecDeque<f64>,
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
    /// The threshold applied and whether it is the node's own (trained policy only).
    pub threshold: Option<(f64, bool)>,
    /// Untrained: the node's scores in its first windows (its own baseline).
    pub baseline: Vec<f64>,
    /// Untrained: windows in which the node stood out from its peers without having changed
    /// from its own baseline (persistently different).
    pub different: u64,
}

impl NodeMetric {
    /// Training: records a window's score for [`NodeMetric::flag_score`] (the same windows,
    /// in the same order, that the k-of-(2k − 1) filter sees when diagnosing).
    fn note_training_score(&mut self, s: f64, k: usize) {
        self.remember(s, k);
        if self.recent.len() >= k {
            let mut v: Vec<f64> = self.recent.iter().copied().collect();
            v.sort_by(|a, b| b.total_cmp(a));
            self.flag_score = self.flag_score.max(v[k - 1]);
        }
    }

    /// A window the node was not scored in: not anomalous, and a zero for training.
    fn gap(&mut self, k: usize) {
        let _ = self.filter.push(false);
        self.remember(0.0, k);
    }

    /// Keeps `s` among the last 2k − 1 scores.
    fn remember(&mut self, s: f64, k: usize) {
        if self.recent.len() == 2 * k - 1 {
            self.recent.pop_front();
        }
        self.recent.push_back(s);
    }

    fn new(k: usize) -> Self {
        NodeMetric {
            filter: KOfN::new(k),
            scored: 0,
            incomplete: 0,
            max_score: 0.0,
            recent: VecDeque::with_capacity(2 * k - 1),
            flag_score: 0.0,
            anomalous: Vec::new(),
            episodes: Vec::new(),
            root_cause: HashMap::new(),
            first_ns: None,
            last_ns: None,
            first_full_ns: None,
            last_full_ns: None,
            threshold: None,
            baseline: Vec::new(),
            different: 0,
        }
    }

    /// True when the node was faulty in some window.
    pub fn faulty(&self) -> bool {
        !self.episodes.is_empty()
    }

    /// True when the node is faulty as of the last window.
    pub fn faulty_now(&self) -> bool {
        self.filter.faulty()
    }
}

/// One source (process file, sampler run) of a node.
#[derive(Clone, Debug)]
struct Source {
    id: u64,
    frontier: u64,
    ended: bool,
}

/// What happened when one window closed (for `--follow` output).
#[derive(Clone, Debug)]
pub struct WindowEvent {
    /// Metric.
    pub metric: MetricKind,
    /// Window start, ns.
    pub start_ns: u64,
    /// Window end, ns.
    pub end_ns: u64,
    /// Nodes scored.
    pub scored: usize,
    /// The unsupervised cut-off, when untrained.
    pub cutoff: Option<f64>,
    /// Anomalous nodes: (node, score, threshold).
    pub anomalous: Vec<(NodeIdx, f64, f64)>,
    /// Nodes that became faulty in this window.
    pub newly_faulty: Vec<NodeIdx>,
    /// Nodes (with data before) whose data is incomplete in this window.
    pub incomplete: Vec<NodeIdx>,
}

/// The state of one metric.
#[derive(Debug)]
pub struct MetricState {
    /// Settings.
    pub cfg: MetricConfig,
    /// Component labels.
    pub comps: Vec<CompLabel>,
    comp_map: HashMap<CompLabel, CompIdx>,
    kept: Vec<bool>,
    /// Kept components, sorted by label (so column order never depends on node order).
    pub kept_list: Vec<CompIdx>,
    buckets: BTreeMap<u64, Vec<NodeBucket>>,
    next_window: Option<u64>,
    closed_any: bool,
    /// Per node.
    sources: Vec<Vec<Source>>,
    /// Per node.
    pub nodes: Vec<NodeMetric>,
    /// Windows closed.
    pub windows: u64,
    /// Windows with fewer than [`MIN_NODES`] complete nodes.
    pub unscored: u64,
    /// Intervals that arrived after their window had closed (dropped).
    pub late: u64,
    /// First and last window closed (start ns).
    pub window_range: Option<(u64, u64)>,
    pool: Vec<NodeBucket>,
    slots_per_bucket: usize,
    /// Per component: its weighting scale (1 when unweighted).
    scale: Vec<f64>,
    /// Training: per component, its spread around the median node.
    pub spread: Vec<Spread>,
}

/// The engine: all metrics of one analysis.
#[derive(Debug)]
pub struct Engine {
    /// Settings.
    pub cfg: EngineConfig,
    names: Vec<String>,
    name_map: HashMap<String, NodeIdx>,
    /// Per metric, in the order given.
    pub metrics: Vec<MetricState>,
}

impl Engine {
    /// An engine for these metrics. Metrics whose keep rule is [`KeepRule::SameAs`] must come
    /// after the metric they follow.
    pub fn new(cfg: EngineConfig, metrics: Vec<MetricConfig>) -> Self {
        assert!(cfg.win_shift_ns > 0 && cfg.win_size_ns % cfg.win_shift_ns == 0);
        let metrics = metrics
            .into_iter()
            .map(|m| {
                assert!(m.slot_ns > 0 && cfg.win_shift_ns % m.slot_ns == 0);
                MetricState {
                    comps: Vec::new(),
                    comp_map: HashMap::new(),
                    kept: Vec::new(),
                    kept_list: Vec::new(),
                    buckets: BTreeMap::new(),
                    next_window: None,
                    closed_any: false,
                    sources: Vec::new(),
                    nodes: Vec::new(),
                    windows: 0,
                    unscored: 0,
                    late: 0,
                    window_range: None,
                    pool: Vec::new(),
                    slots_per_bucket: (cfg.win_shift_ns / m.slot_ns) as usize,
                    scale: Vec::new(),
                    spread: Vec::new(),
                    cfg: m,
                }
            })
            .collect();
        Engine {
            cfg,
            names: Vec::new(),
            name_map: HashMap::new(),
            metrics,
        }
    }

    /// The index of metric `kind`, if analysed.
    pub fn metric_index(&self, kind: MetricKind) -> Option<usize> {
        self.metrics.iter().position(|m| m.cfg.kind == kind)
    }

    /// The node called `name`, registering it.
    pub fn node(&mut self, name: &str) -> NodeIdx {
        if let Some(&i) = self.name_map.get(name) {
            return i;
        }
        let i = self.names.len();
        self.names.push(name.to_string());
        self.name_map.insert(name.to_string(), i);
        for m in &mut self.metrics {
            m.nodes.push(NodeMetric::new(self.cfg.k));
            m.sources.push(Vec::new());
        }
        i
    }

    /// Node names by index.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The component `label` of metric `m`, registering it.
    pub fn component(&mut self, m: usize, label: &CompLabel) -> CompIdx {
        self.metrics[m].component(label)
    }

    /// Marks functions kept from the start (a thresholds file's kept set).
    pub fn seed_kept(&mut self, m: usize, labels: &[CompLabel]) {
        let ms = &mut self.metrics[m];
        for l in labels {
            let c = ms.component(l);
            ms.keep(c);
        }
    }

    /// Says that a source will send no more data (its writer ended cleanly), so windows need
    /// not wait for it.
    pub fn end_source(&mut self, m: usize, node: NodeIdx, source: u64) {
        let ms = &mut self.metrics[m];
        if let Some(s) = ms.sources[node].iter_mut().find(|s| s.id == source) {
            s.ended = true;
        }
    }

    /// Adds one interval of `source` of `node` to metric `m`.
    pub fn push(
        &mut self,
        m: usize,
        node: NodeIdx,
        source: u64,
        iv: &Interval<'_>,
    ) -> Result<(), PushError> {
        let shift = self.cfg.win_shift_ns;
        let ms = &mut self.metrics[m];
        let slot = ms.cfg.slot_ns;
        let spb = ms.slots_per_bucket;
        let misaligned = PushError::Misaligned {
            start_ns: iv.start_ns,
            dur_ns: iv.dur_ns,
        };
        if iv.dur_ns == 0
            || iv.dur_ns % slot != 0
            || shift % iv.dur_ns != 0
            || iv.start_ns % iv.dur_ns != 0
        {
            return Err(misaligned);
        }
        match iv.data {
            IntervalData::Sparse(v) => {
                for &(c, x) in v {
                    if !valid(x) {
                        return Err(PushError::BadValue(x));
                    }
                    if c as usize >= ms.comps.len() {
                        return Err(PushError::UnknownComponent(c));
                    }
                }
            }
            IntervalData::Dense(v) => {
                if v.len() > ms.comps.len() {
                    return Err(PushError::UnknownComponent(v.len() as CompIdx - 1));
                }
                // Values are checked while they are added (one pass over 10⁹ values a day in
                // the benchmark); an interval with a bad value is then marked missed.
            }
            IntervalData::Missed => {}
        }
        let end = iv.start_ns + iv.dur_ns;
        let nm = &mut ms.nodes[node];
        nm.first_ns = Some(nm.first_ns.map_or(iv.start_ns, |f| f.min(iv.start_ns)));
        nm.last_ns = Some(nm.last_ns.map_or(end, |l| l.max(end)));
        if !iv.partial && !matches!(iv.data, IntervalData::Missed) {
            nm.first_full_ns = Some(nm.first_full_ns.map_or(iv.start_ns, |f| f.min(iv.start_ns)));
            nm.last_full_ns = Some(nm.last_full_ns.map_or(end, |l| l.max(end)));
        }
        match ms.sources[node].iter_mut().find(|s| s.id == source) {
            Some(s) => s.frontier = s.frontier.max(end),
            None => ms.sources[node].push(Source {
                id: source,
                frontier: end,
                ended: false,
            }),
        }
        let bucket = iv.start_ns / shift;
        match ms.next_window {
            Some(w) if ms.closed_any && bucket < w => {
                ms.late += 1;
                return Ok(());
            }
            Some(w) if bucket < w => ms.next_window = Some(bucket),
            None => ms.next_window = Some(bucket),
            _ => {}
        }
        let n_comps = ms.comps.len();
        let row = ms.buckets.entry(bucket).or_default();
        if row.len() <= node {
            row.resize_with(node + 1, NodeBucket::default);
        }
        let nb = &mut row[node];
        if nb.full.is_empty() {
            let words = spb.div_ceil(64);
            let mut fresh = ms.pool.pop().unwrap_or_default();
            fresh.vals.clear();
            fresh.full.clear();
            fresh.full.resize(words, 0);
            fresh.missed.clear();
            fresh.missed.resize(words, 0);
            *nb = fresh;
        }
        let first = ((iv.start_ns % shift) / slot) as usize;
        let count = (iv.dur_ns / slot) as usize;
        let ok = add_values(&mut nb.vals, iv.data, n_comps);
        let bits = match iv.data {
            IntervalData::Missed => &mut nb.missed,
            _ if !ok => &mut nb.missed,
            // Values count; coverage comes from another source or not at all.
            _ if iv.partial => return Ok(()),
            _ => &mut nb.full,
        };
        for s in first..first + count {
            bits[s / 64] |= 1 << (s % 64);
        }
        if ok {
            return Ok(());
        }
        let bad = match iv.data {
            IntervalData::Dense(v) => v.iter().copied().find(|x| !valid(*x)),
            _ => None,
        };
        Err(PushError::BadValue(bad.unwrap_or(f64::NAN)))
    }

    /// Closes every window that can close. `now_ns` is the wall clock in `--follow` (windows
    /// wait for live sources); `None` means all input is in (offline).
    pub fn advance(&mut self, now_ns: Option<u64>) -> Vec<WindowEvent> {
        let mut events = Vec::new();
        loop {
            let mut progressed = false;
            for m in 0..self.metrics.len() {
                if let Some(ev) = self.close_one(m, now_ns) {
                    events.push(ev);
                    progressed = true;
                }
            }
            if !progressed {
                return events;
            }
        }
    }

    /// The latest window end metric `m` can close at.
    fn close_limit(&self, m: usize, now_ns: Option<u64>) -> u64 {
        let ms = &self.metrics[m];
        let max = ms
            .sources
            .iter()
            .flatten()
            .map(|s| s.frontier)
            .max()
            .unwrap_or(0);
        let Some(now) = now_ns else {
            return max;
        };
        ms.sources
            .iter()
            .flatten()
            .filter(|s| !s.ended && now.saturating_sub(s.frontier) <= ms.cfg.lag_ns)
            .map(|s| s.frontier)
            .min()
            .unwrap_or(max)
            .min(max)
    }

    fn close_one(&mut self, m: usize, now_ns: Option<u64>) -> Option<WindowEvent> {
        let limit = self.close_limit(m, now_ns);
        let shift = self.cfg.win_shift_ns;
        let per_window = self.cfg.win_size_ns / shift;
        let b = self.metrics[m].next_window?;
        let end = (b + per_window) * shift;
        if end > limit {
            return None;
        }
        // Follow the driver's kept set (count uses the time rule).
        if let KeepRule::SameAs(kind) = self.metrics[m].cfg.keep.clone() {
            if let Some(d) = self.metric_index(kind) {
                let labels: Vec<CompLabel> = self.metrics[d]
                    .kept_list
                    .iter()
                    .map(|&c| self.metrics[d].comps[c as usize].clone())
                    .collect();
                let ms = &mut self.metrics[m];
                for l in &labels {
                    if let Some(&c) = ms.comp_map.get(l) {
                        ms.keep(c);
                    }
                }
            }
        }
        let cfg = self.cfg.clone();
        let ev = self.metrics[m].close_window(&cfg, &self.names, b, per_window);
        let ms = &mut self.metrics[m];
        ms.closed_any = true;
        // Recycle buckets no open window needs.
        let keep_from = b + 1;
        while let Some((&k, _)) = ms.buckets.first_key_value() {
            if k >= keep_from {
                break;
            }
            let row = ms.buckets.remove(&k).unwrap_or_default();
            ms.pool
                .extend(row.into_iter().filter(|nb| !nb.full.is_empty()));
        }
        // Skip closable windows without any data (an idle night must not take a loop per
        // window); they count as "not anomalous" for every node.
        let closable_until = (limit / shift).saturating_sub(per_window) + 1;
        let next = match ms.buckets.first_key_value() {
            Some((&k, _)) => (k + 1).saturating_sub(per_window),
            None => closable_until,
        }
        .min(closable_until)
        .max(keep_from);
        let skipped = next - keep_from;
        for nm in &mut ms.nodes {
            for _ in 0..skipped.min(2 * cfg.k as u64) {
                nm.gap(cfg.k);
            }
        }
        ms.next_window = Some(next);
        Some(ev)
    }

    /// Node name.
    pub fn name(&self, n: NodeIdx) -> &str {
        &self.names[n]
    }
}

/// Adds an interval's values; returns false when a dense value was not [`valid`] (sparse values
/// are checked before).
fn add_values(vals: &mut Vec<f64>, data: IntervalData<'_>, n_comps: usize) -> bool {
    match data {
        IntervalData::Sparse(v) => {
            if v.iter().any(|&(c, _)| c as usize >= vals.len()) {
                vals.resize(n_comps, 0.0);
            }
            for &(c, x) in v {
                vals[c as usize] += x;
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

/// A metric value: finite and not negative (NaN fails both comparisons).
#[inline]
fn valid(x: f64) -> bool {
    (0.0..=f64::MAX).contains(&x)
}

/// Adds `c` to a kept set, keeping the list sorted by label.
fn keep_in(kept: &mut [bool], kept_list: &mut Vec<CompIdx>, comps: &[CompLabel], c: CompIdx) {
    if kept[c as usize] {
        return;
    }
    kept[c as usize] = true;
    let at = kept_list.partition_point(|&k| comps[k as usize] < comps[c as usize]);
    kept_list.insert(at, c);
}

fn all_set(bits: &[u64], n: usize) -> bool {
    let full_words = n / 64;
    if bits[..full_words].iter().any(|&w| w != u64::MAX) {
        return false;
    }
    let rest = n % 64;
    rest == 0 || bits[full_words] & ((1u64 << rest) - 1) == (1u64 << rest) - 1
}

impl MetricState {
    fn component(&mut self, label: &CompLabel) -> CompIdx {
        if let Some(&c) = self.comp_map.get(label) {
            return c;
        }
        let c = self.comps.len() as CompIdx;
        self.comps.push(label.clone());
        self.comp_map.insert(label.clone(), c);
        self.kept.push(false);
        self.scale
            .push(self.cfg.weights.as_ref().map_or(1.0, |w| w.scale(label)));
        self.spread.push(Spread::default());
        c
    }

    fn keep(&mut self, c: CompIdx) {
        keep_in(&mut self.kept, &mut self.kept_list, &self.comps, c);
    }

    /// Kept component labels, sorted.
    pub fn kept_labels(&self) -> Vec<CompLabel> {
        self.kept_list
            .iter()
            .map(|&c| self.comps[c as usize].clone())
            .collect()
    }

    fn close_window(
        &mut self,
        cfg: &EngineConfig,
        names: &[String],
        b: u64,
        per_window: u64,
    ) -> WindowEvent {
        let spb = self.slots_per_bucket;
        let shift = cfg.win_shift_ns;
        let start = b * shift;
        let end = start + cfg.win_size_ns;
        self.windows += 1;
        self.window_range = Some(match self.window_range {
            Some((f, _)) => (f, start),
            None => (start, start),
        });
        let n_nodes = self.nodes.len();
        let n_comps = self.comps.len();
        let buckets = &self.buckets;
        let rows: Vec<Option<&Vec<NodeBucket>>> =
            (b..b + per_window).map(|i| buckets.get(&i)).collect();
        // 1. Complete nodes and, for the dimensionality rule, the largest window sum of each
        //    component over them.
        let mut complete: Vec<NodeIdx> = Vec::new();
        let mut col_max = vec![0.0f64; n_comps];
        let mut sum = vec![0.0f64; n_comps];
        for node in 0..n_nodes {
            let ok = rows.iter().all(|r| {
                r.and_then(|r| r.get(node)).is_some_and(|nb| {
                    !nb.full.is_empty()
                        && all_set(&nb.full, spb)
                        && nb.missed.iter().all(|&w| w == 0)
                })
            });
            if !ok {
                continue;
            }
            complete.push(node);
            if let KeepRule::AtLeast(_) = self.cfg.keep {
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
        }
        // 2. Dimensionality rule.
        match self.cfg.keep {
            KeepRule::AtLeast(min) => {
                for (c, &v) in col_max.iter().enumerate() {
                    if v >= min {
                        keep_in(
                            &mut self.kept,
                            &mut self.kept_list,
                            &self.comps,
                            c as CompIdx,
                        );
                    }
                }
            }
            KeepRule::All => {
                for c in 0..n_comps {
                    keep_in(
                        &mut self.kept,
                        &mut self.kept_list,
                        &self.comps,
                        c as CompIdx,
                    );
                }
            }
            KeepRule::SameAs(_) => {}
        }
        let mut ev = WindowEvent {
            metric: self.cfg.kind,
            start_ns: start,
            end_ns: end,
            scored: complete.len(),
            cutoff: None,
            anomalous: Vec::new(),
            newly_faulty: Vec::new(),
            incomplete: Vec::new(),
        };
        let is_complete = {
            let mut v = vec![false; n_nodes];
            for &n in &complete {
                v[n] = true;
            }
            v
        };
        for (node, nm) in self.nodes.iter_mut().enumerate() {
            if !is_complete[node] {
                if nm.first_ns.is_some_and(|f| f < end) {
                    nm.incomplete += 1;
                    ev.incomplete.push(node);
                }
                nm.gap(cfg.k);
            }
        }
        if complete.len() < MIN_NODES {
            self.unscored += 1;
            for &n in &complete {
                self.nodes[n].gap(cfg.k);
            }
            return ev;
        }
        // 3. Feature vectors of the kept functions, prepared, scored.
        let kept = &self.kept_list;
        let mut raw = Matrix::default();
        raw.reset(complete.len(), kept.len());
        for (ri, &node) in complete.iter().enumerate() {
            let row = raw.row_mut(ri);
            for r in rows.iter().flatten() {
                let vals = &r[node].vals;
                for (o, &c) in row.iter_mut().zip(kept) {
                    if let Some(v) = vals.get(c as usize) {
                        *o += v;
                    }
                }
            }
        }
        // Training: how far each component strays from the median node (variance weighting).
        if matches!(self.cfg.policy, Policy::Training) {
            let med = median_node(&raw);
            for (ci, &c) in kept.iter().enumerate() {
                let sp = &mut self.spread[c as usize];
                sp.level_sum += med[ci];
                sp.windows += 1;
                for ri in 0..raw.rows {
                    sp.dev_sum += (raw.row(ri)[ci] - med[ci]).abs();
                    sp.n += 1;
                }
            }
        }
        let weighted = self.cfg.weights.is_some();
        let prepared = if cfg.distance == Distance::SymKl || weighted {
            let mut p = raw.clone();
            for i in 0..p.rows {
                let row = p.row_mut(i);
                if weighted {
                    for (v, &c) in row.iter_mut().zip(kept) {
                        *v /= self.scale[c as usize];
                    }
                }
                cfg.distance.prepare(row);
            }
            Some(p)
        } else {
            None
        };
        let x = prepared.as_ref().unwrap_or(&raw);
        let scores = score::score(cfg.score, cfg.distance, x, cfg.peers, start);
        // 4. Thresholds.
        let cutoff = match &self.cfg.policy {
            Policy::Untrained(rule) => {
                let mut zero = vec![0.0; x.cols];
                cfg.distance.prepare(&mut zero);
                let size = cfg.distance.dist(&scores.median, &zero);
                Some(rule.cutoff(&scores.scores, size))
            }
            _ => None,
        };
        ev.cutoff = cutoff;
        let mut raw_median: Option<Vec<f64>> = None;
        for (ri, &node) in complete.iter().enumerate() {
            let s = scores.scores[ri];
            let threshold = match &self.cfg.policy {
                Policy::Training => f64::INFINITY,
                Policy::Trained { by_node, fallback } => {
                    let (t, own) = match by_node.get(&names[node]) {
                        Some(&t) => (t, true),
                        None => (*fallback, false),
                    };
                    self.nodes[node].threshold = Some((t, own));
                    t
                }
                Policy::Untrained(rule) => {
                    let peer = cutoff.unwrap_or(f64::INFINITY);
                    let nm = &mut self.nodes[node];
                    let own = rule.baseline_cutoff(&nm.baseline);
                    if nm.baseline.len() < rule.baseline_windows {
                        nm.baseline.push(s);
                    }
                    if s > peer && s <= own {
                        nm.different += 1;
                    }
                    peer.max(own)
                }
            };
            let nm = &mut self.nodes[node];
            nm.scored += 1;
            nm.max_score = nm.max_score.max(s);
            if matches!(self.cfg.policy, Policy::Training) {
                nm.note_training_score(s, cfg.k);
            }
            let anomalous = s > threshold;
            let was = nm.filter.faulty();
            let faulty = nm.filter.push(anomalous);
            if faulty {
                match nm.episodes.last_mut() {
                    Some(e) if was => e.last_window_ns = start,
                    _ => {
                        nm.episodes.push(Episode {
                            first_window_ns: start,
                            last_window_ns: start,
                        });
                        ev.newly_faulty.push(node);
                    }
                }
            }
            if !anomalous {
                continue;
            }
            nm.anomalous.push(AnomWindow {
                start_ns: start,
                score: s,
                threshold,
            });
            ev.anomalous.push((node, s, threshold));
            // 6. Root cause: component distances to the reference, in the distance's terms;
            //    sizes and signs in the metric's unit.
            let reference = scores.reference(x, ri);
            let raw_ref = if prepared.is_none() {
                reference.clone()
            } else if cfg.score == ScoreKind::LeaveOneOut {
                let mut others = Matrix::default();
                others.reset(raw.rows - 1, raw.cols);
                for (oi, j) in (0..raw.rows).filter(|&j| j != ri).enumerate() {
                    others.row_mut(oi).copy_from_slice(raw.row(j));
                }
                median_node(&others)
            } else {
                raw_median.get_or_insert_with(|| median_node(&raw)).clone()
            };
            let xr = x.row(ri);
            let rr = raw.row(ri);
            for (ci, &c) in kept.iter().enumerate() {
                let t = cfg.distance.term(xr[ci], reference[ci]);
                if t == 0.0 && rr[ci] == raw_ref[ci] {
                    continue;
                }
                let acc = nm.root_cause.entry(c).or_default();
                acc.distance += t;
                acc.node += rr[ci];
                acc.reference += raw_ref[ci];
            }
        }
        ev
    }

    /// The top `n` components of a node's root cause, largest summed distance first (ties by
    /// label, so the order never depends on registration order).
    pub fn top(&self, node: NodeIdx, n: usize) -> Vec<(CompIdx, RootCause)> {
        let mut v: Vec<(CompIdx, RootCause)> = self.nodes[node]
            .root_cause
            .iter()
            .map(|(&c, &r)| (c, r))
            .collect();
        v.sort_by(|a, b| {
            b.1.distance
                .total_cmp(&a.1.distance)
                .then_with(|| self.comps[a.0 as usize].cmp(&self.comps[b.0 as usize]))
        });
        v.truncate(n);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::NS_PER_S;
    use super::super::thresholds::Unsupervised;
    use super::*;

    fn cfg(size: u64, shift: u64) -> EngineConfig {
        EngineConfig {
            win_size_ns: size * NS_PER_S,
            win_shift_ns: shift * NS_PER_S,
            k: 3,
            distance: Distance::Manhattan,
            score: ScoreKind::MedianNode,
            peers: Peers::Auto,
        }
    }

    fn metric(policy: Policy) -> MetricConfig {
        MetricConfig {
            kind: MetricKind::Time,
            slot_ns: NS_PER_S,
            lag_ns: 2 * NS_PER_S,
            keep: KeepRule::AtLeast(1.0),
            policy,
            weights: None,
        }
    }

    /// Pushes one whole second `s` of node `n`'s values (metric 0, source 0).
    fn push_second(e: &mut Engine, n: NodeIdx, s: u64, data: &[(CompIdx, f64)]) {
        e.push(
            0,
            n,
            0,
            &Interval {
                start_ns: s * NS_PER_S,
                dur_ns: NS_PER_S,
                partial: false,
                data: IntervalData::Sparse(data),
            },
        )
        .unwrap();
    }

    /// Four nodes, two functions, one second intervals from t0 for `secs`; node `bad` does
    /// `extra` more of function 1 from second `from`.
    fn run(e: &mut Engine, t0: u64, secs: u64, bad: Option<(usize, u64, f64)>) -> Vec<WindowEvent> {
        let names = ["a", "b", "c", "d"];
        let nodes: Vec<NodeIdx> = names.iter().map(|n| e.node(n)).collect();
        let f0 = e.component(0, &CompLabel::func("srv", "f0"));
        let f1 = e.component(0, &CompLabel::func("srv", "f1"));
        let mut evs = Vec::new();
        for s in 0..secs {
            for (i, &n) in nodes.iter().enumerate() {
                let jitter = ((s * 7 + i as u64 * 3) % 5) as f64;
                let mut v1 = 100.0 + jitter;
                if let Some((b, from, extra)) = bad {
                    if b == i && s >= from {
                        v1 += extra;
                    }
                }
                push_second(e, n, t0 + s, &[(f0, 500.0 - jitter), (f1, v1)]);
            }
            evs.extend(e.advance(Some((t0 + s + 1) * NS_PER_S)));
        }
        evs
    }

    #[test]
    fn finds_the_node_and_function_untrained() {
        let mut e = Engine::new(
            cfg(6, 3),
            vec![metric(Policy::Untrained(Unsupervised::default()))],
        );
        let evs = run(&mut e, 1_000_002, 60, Some((2, 20, 300.0)));
        let ms = &e.metrics[0];
        assert!(ms.nodes[2].faulty(), "{:?}", ms.nodes[2]);
        for n in [0, 1, 3] {
            assert!(
                !ms.nodes[n].faulty(),
                "node {n}: {:?}",
                ms.nodes[n].anomalous
            );
        }
        let top = ms.top(2, 10);
        assert_eq!(ms.comps[top[0].0 as usize].name.as_ref(), "f1");
        assert!(top[0].1.node > top[0].1.reference, "more time");
        // Reported within one WinShift of the window that made it faulty closing: windows close
        // in the advance() call right after their last interval arrives.
        let fired = evs.iter().find(|e| e.newly_faulty.contains(&2)).unwrap();
        assert!(fired.start_ns >= 20 * NS_PER_S);
        // First window starting at a multiple of WinShift since the epoch.
        assert_eq!(ms.window_range.unwrap().0 % (3 * NS_PER_S), 0);
    }

    #[test]
    fn training_then_diagnosis() {
        let mut t = Engine::new(cfg(6, 3), vec![metric(Policy::Training)]);
        run(&mut t, 1_000_002, 40, None);
        t.advance(None);
        let by_node: HashMap<String, f64> = (0..4)
            .map(|n| {
                let m = t.metrics[0].nodes[n].max_score;
                (
                    t.name(n).to_string(),
                    super::super::thresholds::trained_threshold(m, 1.0),
                )
            })
            .collect();
        assert!(t.metrics[0].nodes.iter().all(|n| n.anomalous.is_empty()));
        let fallback = by_node.values().copied().fold(0.0, f64::max);
        let policy = Policy::Trained { by_node, fallback };
        let mut clean = Engine::new(cfg(6, 3), vec![metric(policy.clone())]);
        run(&mut clean, 2_000_001, 40, None);
        assert!(clean.metrics[0].nodes.iter().all(|n| !n.faulty()));
        let mut bad = Engine::new(cfg(6, 3), vec![metric(policy)]);
        run(&mut bad, 2_000_001, 40, Some((1, 10, 200.0)));
        let faulty: Vec<usize> = (0..4)
            .filter(|&n| bad.metrics[0].nodes[n].faulty())
            .collect();
        assert_eq!(faulty, vec![1]);
    }

    /// Variance weighting (seed 000 §"Future work"): a quiet function that moves on one node
    /// stands out once each function is divided by its fault-free scale, while raw distances
    /// flag healthy nodes. Noisy: the nodes take 1000, 1100, 1200, 1300, rotating every 8 s
    /// (raw distances of 200–600 per 4 s window); quiet: 10 everywhere, 40 on node d from
    /// second 20.
    fn weighting_run(weights: Option<Weights>) -> Vec<Vec<NodeIdx>> {
        let mut m = metric(Policy::Trained {
            by_node: HashMap::new(),
            fallback: 50.0,
        });
        m.weights = weights;
        let mut e = Engine::new(cfg(4, 2), vec![m]);
        let nodes: Vec<NodeIdx> = ["a", "b", "c", "d"].iter().map(|n| e.node(n)).collect();
        let noisy = e.component(0, &CompLabel::func("srv", "noisy"));
        let quiet = e.component(0, &CompLabel::func("srv", "quiet"));
        let mut anomalous = Vec::new();
        for s in 0..40u64 {
            for (i, &n) in nodes.iter().enumerate() {
                let q = if i == 3 && s >= 20 { 40.0 } else { 10.0 };
                let level = ((s / 8 + i as u64) % 4) as f64;
                push_second(&mut e, n, s, &[(noisy, 1000.0 + 100.0 * level), (quiet, q)]);
            }
            for ev in e.advance(Some((s + 1) * NS_PER_S)) {
                anomalous.push(ev.anomalous.iter().map(|a| a.0).collect());
            }
        }
        anomalous
    }

    #[test]
    fn variance_weighting_lets_a_quiet_function_speak() {
        let raw = weighting_run(None);
        assert!(raw.len() > 10);
        assert!(
            raw.iter().any(|a| a.iter().any(|&n| n != 3)),
            "raw: healthy nodes flagged by the noise {raw:?}"
        );
        let w = Weights {
            scales: [
                (CompLabel::func("srv", "noisy"), 100.0),
                (CompLabel::func("srv", "quiet"), 1.0),
            ]
            .into_iter()
            .collect(),
            default: 1.0,
        };
        let weighted = weighting_run(Some(w));
        assert_eq!(weighted.len(), raw.len());
        // Windows ending by second 20 see nothing; those starting at or after it see node d only.
        let windows_before = (20 - 4) / 2 + 1;
        assert!(
            weighted[..windows_before].iter().all(|a| a.is_empty()),
            "{weighted:?}"
        );
        assert!(
            weighted[windows_before + 2..].iter().all(|a| a == &[3]),
            "{weighted:?}"
        );
    }

    /// The least threshold that never flags a node: the largest k-th largest score of any
    /// 2k − 1 consecutive windows; a gap counts as a zero score (as it counts as not anomalous).
    #[test]
    fn flag_score_follows_the_k_of_n_filter() {
        let mut nm = NodeMetric::new(3);
        for s in [10.0, 1.0, 1.0, 1.0, 1.0, 8.0, 7.0, 9.0, 1.0] {
            nm.note_training_score(s, 3);
        }
        // [1, 8, 7, 9, 1]: above 7 only 8 and 9 — two of five, never faulty; above 6.9, three.
        assert_eq!(nm.flag_score, 7.0);
        let mut f = KOfN::new(3);
        let flagged = |t: f64, f: &mut KOfN| {
            let mut any = false;
            for s in [10.0, 1.0, 1.0, 1.0, 1.0, 8.0, 7.0, 9.0, 1.0] {
                any |= f.push(s > t);
            }
            any
        };
        assert!(!flagged(7.0, &mut f));
        assert!(flagged(6.9, &mut KOfN::new(3)));
        let mut g = NodeMetric::new(3);
        for s in [5.0, 5.0] {
            g.note_training_score(s, 3);
        }
        g.gap(3);
        assert_eq!(g.flag_score, 0.0, "two high windows and a gap never flag");
        g.note_training_score(5.0, 3);
        assert_eq!(g.flag_score, 5.0);
    }

    #[test]
    fn weights_scale_falls_back_and_stays_positive() {
        let w = Weights {
            scales: [(CompLabel::func("x", "zero"), 0.0)].into_iter().collect(),
            default: 7.0,
        };
        assert_eq!(w.scale(&CompLabel::func("x", "other")), 7.0);
        assert_eq!(w.scale(&CompLabel::func("x", "zero")), 1.0);
    }

    #[test]
    fn gaps_are_missing_not_zeros() {
        let mut e = Engine::new(
            cfg(2, 1),
            vec![metric(Policy::Untrained(Unsupervised::default()))],
        );
        let nodes: Vec<NodeIdx> = ["a", "b", "c", "d"].iter().map(|n| e.node(n)).collect();
        let f = e.component(0, &CompLabel::func("x", "f"));
        for s in 0..30u64 {
            for &n in &nodes {
                // Node d stops at 10 s and comes back at 20 s with a missed interval.
                if n == nodes[3] && (10..20).contains(&s) {
                    continue;
                }
                let data = [(f, 1000.0)];
                let iv = Interval {
                    start_ns: (100 + s) * NS_PER_S,
                    dur_ns: NS_PER_S,
                    partial: false,
                    data: if n == nodes[3] && s == 20 {
                        IntervalData::Missed
                    } else {
                        IntervalData::Sparse(&data)
                    },
                };
                e.push(0, n, 0, &iv).unwrap();
            }
        }
        e.advance(None);
        let d = &e.metrics[0].nodes[3];
        // Windows [109,111) … [120,122) touch the gap or the missed interval.
        assert_eq!(d.incomplete, 12, "{d:?}");
        assert!(d.anomalous.is_empty(), "a gap is not an anomaly");
        assert_eq!(e.metrics[0].unscored, 0);
    }

    #[test]
    fn follow_waits_for_live_sources_then_gives_up_on_silent_ones() {
        let mut e = Engine::new(
            cfg(2, 1),
            vec![metric(Policy::Untrained(Unsupervised::default()))],
        );
        let nodes: Vec<NodeIdx> = ["a", "b", "c"].iter().map(|n| e.node(n)).collect();
        let f = e.component(0, &CompLabel::func("x", "f"));
        let push = |e: &mut Engine, n, s: u64| push_second(e, n, s, &[(f, 1.0)]);
        for s in 10..14 {
            push(&mut e, nodes[0], s);
            push(&mut e, nodes[1], s);
        }
        push(&mut e, nodes[2], 10);
        // Node c is behind but not yet silent for longer than the lag: nothing closes past it.
        assert!(e.advance(Some(12 * NS_PER_S)).is_empty());
        // Once c has been silent for longer than the lag, windows close without it.
        let evs = e.advance(Some(14 * NS_PER_S));
        assert_eq!(
            evs.iter().map(|e| e.start_ns).collect::<Vec<_>>(),
            vec![10 * NS_PER_S, 11 * NS_PER_S, 12 * NS_PER_S]
        );
        assert!(evs[1].incomplete.contains(&nodes[2]));
        // Too few complete nodes: unscored.
        assert_eq!(e.metrics[0].unscored, 3);
    }

    #[test]
    fn refuses_misaligned_and_bad_values() {
        let mut e = Engine::new(
            cfg(2, 1),
            vec![metric(Policy::Untrained(Unsupervised::default()))],
        );
        let n = e.node("a");
        let f = e.component(0, &CompLabel::func("x", "f"));
        let iv = |start, dur, data| Interval {
            start_ns: start,
            dur_ns: dur,
            partial: false,
            data,
        };
        let ok = [(f, 1.0)];
        assert!(matches!(
            e.push(
                0,
                n,
                0,
                &iv(NS_PER_S / 2, NS_PER_S, IntervalData::Sparse(&ok))
            ),
            Err(PushError::Misaligned { .. })
        ));
        assert!(matches!(
            e.push(0, n, 0, &iv(0, 2 * NS_PER_S, IntervalData::Sparse(&ok))),
            Err(PushError::Misaligned { .. })
        ));
        let bad = [(f, f64::NAN)];
        assert!(matches!(
            e.push(0, n, 0, &iv(0, NS_PER_S, IntervalData::Sparse(&bad))),
            Err(PushError::BadValue(_))
        ));
        let dense = [1.0, -2.0];
        let _ = e.component(0, &CompLabel::func("x", "g"));
        assert!(matches!(
            e.push(0, n, 0, &iv(0, NS_PER_S, IntervalData::Dense(&dense))),
            Err(PushError::BadValue(-2.0))
        ));
        let unknown = [(7, 1.0)];
        assert!(matches!(
            e.push(0, n, 0, &iv(0, NS_PER_S, IntervalData::Sparse(&unknown))),
            Err(PushError::UnknownComponent(7))
        ));
    }
}
