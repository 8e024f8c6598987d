//! The streaming peer-comparison analyzer (seed 000 §"Diagnosis").
//!
//! Input: per metric, per node and per writer (a process's file, a sampler run), intervals of
//! per-component values on aligned starts ([`Interval`]). Intervals are added into *buckets*
//! of WinShift seconds starting at multiples of WinShift since the epoch; a window of WinSize
//! seconds is the sum of WinSize/WinShift consecutive buckets, so every value is added once
//! whatever the overlap, and memory holds only the buckets of windows not yet closed.
//!
//! A window closes once every live writer has data past its end (or, in `--follow`, has been
//! silent for longer than the metric's lag; offline, once all input is in). Then the window goes
//! through the stages of [`pipeline`], top to bottom: demoted functions merged → complete nodes
//! → keep rule → feature
//! matrix → weights → scores → the threshold policy decides per node → k of 2k − 1 → root
//! cause.
//!
//! The analyzer knows nothing of files: [`crate::feed`] feeds it from a dataset through the
//! metric families, `crate::synth` (the `synth` feature) and the benchmarks from generated data.

use std::collections::HashMap;

use crate::baseline::Ranges;
use crate::demoted::Merge;
use crate::distance::Distance;
use crate::family::{Metric, Windows};
use crate::model::{CompIdx, CompLabel, Interval, IntervalData, PeerIdx};
use crate::score::{Peers, ScoreKind, Scorer};

pub mod pipeline;
mod state;

pub use crate::error::PushError;
use state::{add_slot_values, add_values, valid, MetricState, NodeBucket, NodeState, Writer};
pub use state::{
    AnomWindow, Anomaly, AppliedThreshold, Episode, GapRun, MetricConfig, MetricResult, NodeResult,
    Ranked, Relearnt, RootCause, ScoredWindow, WindowEvent, WindowRange, BEHIND_WAIT_NS, MIN_NODES,
    MIN_PRESENT,
};

/// Settings shared by all metrics.
#[derive(Clone, Debug)]
pub struct AnalyzerConfig {
    /// WinSize and WinShift (a family may bring its own).
    pub windows: Windows,
    /// k of the k-of-(2k − 1) filter.
    pub k: usize,
    /// Distance between feature vectors of window sums.
    pub distance: Distance,
    /// Node score.
    pub score: ScoreKind,
    /// Peers of the pairwise score.
    pub peers: Peers,
    /// Keep every node's score of every window ([`NodeResult::scores`]).
    pub keep_scores: bool,
}

/// What an analysis found: its settings, the nodes, every metric's results.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Settings.
    pub config: AnalyzerConfig,
    /// Node names by index.
    pub names: Vec<String>,
    /// Per metric, in the analyzer's order.
    pub metrics: Vec<MetricResult>,
}

/// The analyzer: all metrics of one analysis.
#[derive(Debug)]
pub struct Analyzer {
    cfg: AnalyzerConfig,
    scorer: Box<dyn Scorer>,
    names: Vec<String>,
    name_map: HashMap<String, PeerIdx>,
    metrics: Vec<MetricState>,
    /// Functions compared merged from a time on (tracers' demotions).
    merges: Vec<Merge>,
    /// Only windows wholly inside these stretches are analysed (a baseline, or what follows
    /// it); `None`: every window.
    only: Option<Ranges>,
}

impl Analyzer {
    /// An analyzer for these metrics. Metrics whose keep rule follows another metric's must
    /// come after it.
    pub fn new(cfg: AnalyzerConfig, metrics: Vec<MetricConfig>) -> Self {
        assert!(cfg.windows.shift_ns > 0 && cfg.windows.size_ns % cfg.windows.shift_ns == 0);
        let metrics = metrics
            .into_iter()
            .map(|m| {
                let w = m.family.windows().unwrap_or(cfg.windows);
                assert!(w.shift_ns > 0 && w.size_ns % w.shift_ns == 0);
                assert!(m.slot_ns > 0 && w.shift_ns % m.slot_ns == 0);
                MetricState::new(m, w, cfg.keep_scores)
            })
            .collect();
        Analyzer {
            scorer: cfg.score.scorer(cfg.peers),
            cfg,
            names: Vec::new(),
            name_map: HashMap::new(),
            metrics,
            merges: Vec::new(),
            only: None,
        }
    }

    /// Analyses only the windows that lie wholly inside `ranges` (a baseline to learn, or the
    /// data after it to diagnose); the others close unseen — not scored, not counted, not
    /// growing the kept set, not moving any node's filter.
    pub fn only_windows(&mut self, ranges: Ranges) {
        self.only = Some(ranges);
    }

    /// The stretches of [`Analyzer::only_windows`].
    pub fn window_ranges(&self) -> Option<&Ranges> {
        self.only.as_ref()
    }

    /// Settings.
    pub fn config(&self) -> &AnalyzerConfig {
        &self.cfg
    }

    /// The results of metric `m` so far.
    pub fn result(&self, m: usize) -> &MetricResult {
        &self.metrics[m].result
    }

    /// The results of every metric so far.
    pub fn results(&self) -> impl Iterator<Item = &MetricResult> {
        self.metrics.iter().map(|m| &m.result)
    }

    /// What the analysis has found so far (a copy: the analysis goes on).
    pub fn outcome(&self) -> Outcome {
        Outcome {
            config: self.cfg.clone(),
            names: self.names.clone(),
            metrics: self.results().cloned().collect(),
        }
    }

    /// What the analysis found.
    pub fn into_outcome(self) -> Outcome {
        Outcome {
            config: self.cfg,
            names: self.names,
            metrics: self.metrics.into_iter().map(|m| m.result).collect(),
        }
    }

    /// The index of metric `metric`, if analysed.
    pub fn metric_index(&self, metric: Metric) -> Option<usize> {
        self.metrics
            .iter()
            .position(|m| m.result.metric() == metric)
    }

    /// The node called `name`, registering it.
    pub fn node(&mut self, name: &str) -> PeerIdx {
        if let Some(&i) = self.name_map.get(name) {
            return i;
        }
        let i = self.names.len();
        self.names.push(name.to_string());
        self.name_map.insert(name.to_string(), i);
        for m in &mut self.metrics {
            m.nodes.push(NodeState::new(self.cfg.k));
            m.result.nodes.push(NodeResult::default());
            m.writers.push(Vec::new());
            m.add_node(name);
        }
        i
    }

    /// Sets the functions compared merged in windows that end after each merge's start
    /// (functions a tracer demoted on some node: [`crate::demoted`]). Windows closed before
    /// are not compared again.
    pub fn set_merges(&mut self, merges: Vec<Merge>) {
        self.merges = merges;
    }

    /// Node names by index.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Node name.
    pub fn name(&self, n: PeerIdx) -> &str {
        &self.names[n]
    }

    /// The component `label` of metric `m`, registering it.
    pub fn component(&mut self, m: usize, label: &CompLabel) -> CompIdx {
        self.metrics[m].component(label)
    }

    /// Metric `m` is judged by what a baseline learnt again (a rolling baseline): new
    /// thresholds, scales, normal profiles and roles, and the kept set `kept` added to its
    /// own. Windows already closed keep their verdicts.
    pub fn relearn(&mut self, m: usize, cfg: Relearnt, kept: &[CompLabel]) {
        self.metrics[m].relearn(cfg, &self.names);
        self.seed_kept(m, kept);
    }

    /// Marks components kept from the start (a thresholds file's kept set).
    pub fn seed_kept(&mut self, m: usize, labels: &[CompLabel]) {
        let ms = &mut self.metrics[m];
        for l in labels {
            let c = ms.component(l);
            ms.keep(c);
        }
    }

    /// Says that a writer will send no more data (it ended cleanly), so windows need not wait
    /// for it.
    pub fn end_writer(&mut self, m: usize, node: PeerIdx, writer: u64) {
        let ms = &mut self.metrics[m];
        if let Some(w) = ms.writers[node].iter_mut().find(|w| w.id == writer) {
            w.ended = true;
        }
    }

    /// Adds one interval of `writer` of `node` to metric `m`.
    pub fn push(
        &mut self,
        m: usize,
        node: PeerIdx,
        writer: u64,
        iv: &Interval<'_>,
    ) -> Result<(), PushError> {
        let ms = &mut self.metrics[m];
        let shift = ms.result.windows_ns.shift_ns;
        let slot = ms.result.config.slot_ns;
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
        let n_comps = ms.result.comps.len();
        match iv.data {
            IntervalData::Sparse(v) => {
                for e in v {
                    if !valid(e.value) {
                        return Err(PushError::BadValue(e.value));
                    }
                    if e.comp as usize >= n_comps {
                        return Err(PushError::UnknownComponent(e.comp));
                    }
                }
            }
            IntervalData::Dense(v) => {
                if v.len() > n_comps {
                    return Err(PushError::UnknownComponent(v.len() as CompIdx - 1));
                }
                // Values are checked while they are added (one pass over 10⁹ values a day in
                // the benchmark); an interval with a bad value is then marked missed.
            }
            IntervalData::Missed => {}
        }
        let end = iv.start_ns + iv.dur_ns;
        let nr = &mut ms.result.nodes[node];
        nr.first_ns = Some(nr.first_ns.map_or(iv.start_ns, |f| f.min(iv.start_ns)));
        nr.last_ns = Some(nr.last_ns.map_or(end, |l| l.max(end)));
        if !iv.partial && !matches!(iv.data, IntervalData::Missed) {
            nr.first_full_ns = Some(nr.first_full_ns.map_or(iv.start_ns, |f| f.min(iv.start_ns)));
            nr.last_full_ns = Some(nr.last_full_ns.map_or(end, |l| l.max(end)));
        }
        match ms.writers[node].iter_mut().find(|w| w.id == writer) {
            Some(w) => w.frontier = w.frontier.max(end),
            None => ms.writers[node].push(Writer {
                id: writer,
                frontier: end,
                ended: false,
                alive_ns: None,
            }),
        }
        let bucket = iv.start_ns / shift;
        match ms.next_window {
            Some(w) if ms.closed_any && bucket < w => {
                ms.result.late += 1;
                ms.result.nodes[node].late += 1;
                return Ok(());
            }
            Some(w) if bucket < w => ms.next_window = Some(bucket),
            None => ms.next_window = Some(bucket),
            _ => {}
        }
        let row = ms.buckets.entry(bucket).or_default();
        if row.len() <= node {
            row.resize_with(node + 1, NodeBucket::default);
        }
        let nb = &mut row[node];
        let wi = match nb.writers.iter().position(|w| w.id == writer) {
            Some(i) => i,
            None => {
                let mut fresh = ms.pool.pop().unwrap_or_default();
                fresh.reset(writer, spb.div_ceil(64));
                nb.writers.push(fresh);
                nb.writers.len() - 1
            }
        };
        let wb = &mut nb.writers[wi];
        let first = ((iv.start_ns % shift) / slot) as usize;
        let count = (iv.dur_ns / slot) as usize;
        let ok = if iv.partial {
            add_values(&mut wb.part, iv.data, n_comps)
        } else {
            add_values(&mut wb.vals, iv.data, n_comps)
        };
        if ms.per_slot {
            let row = ms.slot_values.entry(bucket).or_default();
            if row.len() <= node {
                row.resize_with(node + 1, Vec::new);
            }
            let fill = ms.slot_fill;
            add_slot_values(
                &mut row[node],
                iv.data,
                n_comps,
                spb,
                first..first + count,
                fill,
            );
        }
        if !ok {
            // A bad value poisons what the writer sent for this bucket: all of it is missing
            // (its sums may hold the bad value), never compared.
            wb.vals.fill(0.0);
            wb.part.fill(0.0);
            for s in 0..spb {
                wb.missed[s / 64] |= 1 << (s % 64);
            }
            let bad = match iv.data {
                IntervalData::Dense(v) => v.iter().copied().find(|x| !valid(*x)),
                _ => None,
            };
            return Err(PushError::BadValue(bad.unwrap_or(f64::NAN)));
        }
        let bits = match iv.data {
            IntervalData::Missed => &mut wb.missed,
            // Values count where the node was observed whole; coverage comes from another
            // writer or not at all.
            _ if iv.partial => &mut wb.partial,
            _ => &mut wb.full,
        };
        for s in first..first + count {
            bits[s / 64] |= 1 << (s % 64);
        }
        Ok(())
    }

    /// `--follow`: writer `writer` of `node` was seen alive (its process runs, or its file grew)
    /// at `now_ns`; behind but alive, it holds metric `m`'s windows open for up to
    /// [`BEHIND_WAIT_NS`] more than the metric's lag.
    pub fn writer_alive(&mut self, m: usize, node: PeerIdx, writer: u64, now_ns: u64) {
        let ms = &mut self.metrics[m];
        if let Some(w) = ms
            .writers
            .get_mut(node)
            .and_then(|ws| ws.iter_mut().find(|w| w.id == writer))
        {
            w.alive_ns = Some(w.alive_ns.map_or(now_ns, |a| a.max(now_ns)));
        }
    }

    /// Closes every window that can close. `now_ns` is the wall clock in `--follow` (windows
    /// wait for live writers); `None` means all input is in (offline).
    pub fn advance(&mut self, now_ns: Option<u64>) -> Vec<WindowEvent> {
        let mut events = Vec::new();
        loop {
            let mut progressed = false;
            for m in 0..self.metrics.len() {
                if let Some(closed) = self.close_one(m, now_ns) {
                    events.extend(closed);
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
            .writers
            .iter()
            .flatten()
            .map(|w| w.frontier)
            .max()
            .unwrap_or(0);
        let Some(now) = now_ns else {
            return max;
        };
        let lag = ms.result.config.lag_ns;
        ms.writers
            .iter()
            .flatten()
            .filter(|w| {
                // Behind but alive: waited for a while longer.
                let alive = w.alive_ns.is_some_and(|a| now.saturating_sub(a) <= lag);
                let wait = if alive { lag + BEHIND_WAIT_NS } else { lag };
                !w.ended && now.saturating_sub(w.frontier) <= wait
            })
            .map(|w| w.frontier)
            .min()
            .unwrap_or(max)
            .min(max)
    }

    /// Closes the next window of metric `m` if it can close: `None` when it cannot, `Some(None)`
    /// when it closed outside [`Analyzer::only_windows`] (unseen).
    fn close_one(&mut self, m: usize, now_ns: Option<u64>) -> Option<Option<WindowEvent>> {
        let limit = self.close_limit(m, now_ns);
        let w = self.metrics[m].result.windows_ns;
        let shift = w.shift_ns;
        let per_window = w.size_ns / shift;
        let b = self.metrics[m].next_window?;
        let end = (b + per_window) * shift;
        if end > limit {
            return None;
        }
        // Follow the driver's kept set (count uses the time rule).
        if let Some(driver) = self.metrics[m].result.config.keep.follows() {
            if let Some(d) = self.metric_index(driver) {
                let labels = self.metrics[d].result.kept_labels();
                let ms = &mut self.metrics[m];
                for l in &labels {
                    if let Some(&c) = ms.comp_map.get(l) {
                        ms.keep(c);
                    }
                }
            }
        }
        let k = self.cfg.k;
        let ctx = pipeline::Context {
            k,
            distance: self.cfg.distance,
            scorer: self.scorer.as_ref(),
            names: &self.names,
            merges: &self.merges,
        };
        let start = b * shift;
        let seen = self
            .only
            .as_ref()
            .is_none_or(|r| r.holds(start, start + w.size_ns));
        let ev = seen.then(|| pipeline::close_window(&mut self.metrics[m], &ctx, b, per_window));
        let ms = &mut self.metrics[m];
        ms.closed_any = true;
        // Recycle buckets no open window needs.
        let keep_from = b + 1;
        while let Some((&k, _)) = ms.buckets.first_key_value() {
            if k >= keep_from {
                break;
            }
            let row = ms.buckets.remove(&k).unwrap_or_default();
            ms.pool.extend(row.into_iter().flat_map(|nb| nb.writers));
        }
        ms.slot_values.retain(|&k, _| k >= keep_from);
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
        for ns in &mut ms.nodes {
            for _ in 0..skipped.min(2 * k as u64) {
                ns.gap(k, false);
            }
        }
        ms.next_window = Some(next);
        Some(ev)
    }
}

#[cfg(test)]
mod tests;
