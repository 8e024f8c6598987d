//! Feeds the engine from data directories: trace files give `count` and `time`, sampler files
//! `samples` and `events`.
//!
//! Per node, all processes are added up (several worker processes of a server are one node);
//! with `by_program` each component is also keyed by program, so the same function in two
//! programs is two components. Every interval the loader read is pushed exactly once — offline
//! in one pass, in `--follow` after each refresh of the dataset, through the same code.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

use super::engine::{Engine, KeepRule};
use culprit_format::interval_flags;

use super::model::{CompIdx, CompLabel, Interval, IntervalData, MetricKind};
use super::thresholds::Recording;
use crate::data::{Dataset, EventId, FileStatus, FuncId, ProgId};

/// CPU time per sample at the reference sampling rate of seed 000: 100,000 cycles per sample
/// at a 2 GHz reference clock, i.e. one sample per 50 µs of CPU.
pub const REFERENCE_NS_PER_SAMPLE: f64 = 50_000.0;
/// Clock assumed to convert a `cycles` period into CPU time.
pub const REFERENCE_CYCLES_PER_NS: f64 = 2.0;

/// What the data holds for the engine's plan.
#[derive(Clone, Debug, Default)]
pub struct Survey {
    /// Metrics with data, and the gcd of their record intervals (ns).
    pub slots: HashMap<MetricKind, u64>,
    /// Largest record interval per metric (ns).
    pub coarsest: HashMap<MetricKind, u64>,
    /// How samples were taken: (event, period, freq), when there are samples.
    pub sampling: Option<(String, u64, bool)>,
}

impl Survey {
    /// The recording of metric `m`, for the thresholds file.
    pub fn recording(&self, m: MetricKind) -> Recording {
        let sampled = matches!(m, MetricKind::Samples);
        let (event, period, freq) = match (&self.sampling, sampled) {
            (Some((e, p, f)), true) => (Some(e.clone()), Some(*p), *f),
            _ => (None, None, false),
        };
        Recording {
            event,
            period,
            freq,
            interval_ns: self.slots.get(&m).copied().unwrap_or(0),
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Looks at every interval of the dataset: which metrics have data, their record intervals, and
/// how samples were taken (all nodes must sample alike for sample counts to compare).
pub fn survey(ds: &Dataset) -> anyhow::Result<Survey> {
    let mut s = Survey::default();
    let mut note = |m: MetricKind, dur: u64| {
        if dur == 0 {
            return;
        }
        let e = s.slots.entry(m).or_insert(dur);
        *e = gcd(*e, dur);
        let c = s.coarsest.entry(m).or_insert(dur);
        *c = (*c).max(dur);
    };
    let mut sampling: BTreeSet<(String, u64, bool)> = BTreeSet::new();
    let mut where_: HashMap<(String, u64, bool), String> = HashMap::new();
    for node in &ds.nodes {
        for t in &node.traces {
            for iv in &t.intervals {
                note(MetricKind::Count, iv.dur_ns);
                note(MetricKind::Time, iv.dur_ns);
            }
        }
        for f in &node.samples {
            for iv in &f.intervals {
                note(MetricKind::Samples, iv.dur_ns);
                if !iv.missed() {
                    let key = (iv.event.to_string(), iv.period, iv.freq);
                    where_
                        .entry(key.clone())
                        .or_insert_with(|| node.name.clone());
                    sampling.insert(key);
                }
            }
            for iv in &f.events {
                note(MetricKind::Events, iv.dur_ns);
            }
        }
    }
    if sampling.len() > 1 {
        let list: Vec<String> = sampling
            .iter()
            .map(|k| format!("{} ({})", describe_sampling(k), where_[k]))
            .collect();
        bail!(
            "nodes were sampled differently ({}); sample counts only compare when every node \
             uses the same event and period: record again with the same `culprit sample` \
             settings",
            list.join(", ")
        );
    }
    s.sampling = sampling.into_iter().next();
    Ok(s)
}

/// `cpu-clock, 1000 Hz` / `cycles, period 100000`.
pub fn describe_sampling((event, period, freq): &(String, u64, bool)) -> String {
    if *freq {
        format!("{event}, {period} Hz")
    } else {
        format!("{event}, period {period}")
    }
}

/// CPU ns one sample stands for, when known: frequency mode takes 1/f of CPU time per sample;
/// `cpu-clock`/`task-clock` periods are ns; `cycles` periods are converted at the reference
/// clock.
pub fn ns_per_sample(event: &str, period: u64, freq: bool) -> Option<f64> {
    if period == 0 {
        return None;
    }
    if freq {
        return Some(1e9 / period as f64);
    }
    match event {
        "cpu-clock" | "task-clock" => Some(period as f64),
        "cycles" | "cpu-cycles" | "ref-cycles" => Some(period as f64 / REFERENCE_CYCLES_PER_NS),
        _ => None,
    }
}

/// The samples dimensionality rule in this data's samples: `min_samples` is counted at the
/// reference rate (one sample per 50 µs of CPU, seed 000's 100,000 cycles at 2 GHz), so the
/// rule keeps functions with at least `min_samples × 50 µs` of CPU in a window whatever the
/// sampling rate. Returns the threshold and, when the rate is unknown, a note.
pub fn samples_rule(
    min_samples: f64,
    sampling: Option<&(String, u64, bool)>,
) -> (f64, Option<String>) {
    match sampling {
        Some((event, period, freq)) => match ns_per_sample(event, *period, *freq) {
            Some(ns) => (min_samples * REFERENCE_NS_PER_SAMPLE / ns, None),
            None => (
                min_samples,
                Some(format!(
                    "sampling event {event} has no known CPU time per sample: the samples \
                     dimensionality rule uses {min_samples} samples unscaled"
                )),
            ),
        },
        None => (min_samples, None),
    }
}

/// Feeds a dataset into an engine, remembering what it already pushed.
#[derive(Debug, Default)]
pub struct Adapter {
    by_program: bool,
    cursors: HashMap<PathBuf, Cursor>,
    next_source: u64,
    funcs: HashMap<(usize, Option<ProgId>, FuncId), CompIdx>,
    events: HashMap<(usize, EventId), CompIdx>,
    scratch: Vec<(CompIdx, f64)>,
    scratch2: Vec<(CompIdx, f64)>,
}

#[derive(Debug, Default, Clone, Copy)]
struct Cursor {
    source: u64,
    traces: usize,
    samples: usize,
    events: usize,
    ended: bool,
}

impl Adapter {
    /// An adapter; `by_program` keys components by program too.
    pub fn new(by_program: bool) -> Self {
        Adapter {
            by_program,
            ..Default::default()
        }
    }

    /// The rule each metric keeps functions by.
    pub fn keep_rule(m: MetricKind, min_samples: f64, min_time_ms: f64) -> KeepRule {
        match m {
            MetricKind::Samples => KeepRule::AtLeast(min_samples),
            MetricKind::Time => KeepRule::AtLeast(min_time_ms),
            MetricKind::Count => KeepRule::SameAs(MetricKind::Time),
            MetricKind::Events => KeepRule::All,
        }
    }

    /// Pushes every interval not pushed yet. Offline, `chunk_ns` bounds memory: data is pushed
    /// in time order a chunk at a time, closing windows in between.
    pub fn feed(
        &mut self,
        ds: &Dataset,
        engine: &mut Engine,
        offline_chunk_ns: Option<u64>,
    ) -> anyhow::Result<()> {
        let Some(chunk) = offline_chunk_ns else {
            self.feed_until(ds, engine, u64::MAX)?;
            return Ok(());
        };
        let mut t = self.earliest_unpushed(ds);
        while let Some(from) = t {
            let until = (from / chunk + 1) * chunk;
            self.feed_until(ds, engine, until)?;
            engine.advance(None);
            t = self.earliest_unpushed(ds);
        }
        Ok(())
    }

    fn earliest_unpushed(&self, ds: &Dataset) -> Option<u64> {
        let mut min: Option<u64> = None;
        let mut see = |v: u64| min = Some(min.map_or(v, |m| m.min(v)));
        for node in &ds.nodes {
            for t in &node.traces {
                let c = self.cursors.get(&t.path).copied().unwrap_or_default();
                if let Some(iv) = t.intervals.get(c.traces) {
                    see(iv.start_ns);
                }
            }
            for f in &node.samples {
                let c = self.cursors.get(&f.path).copied().unwrap_or_default();
                if let Some(iv) = f.intervals.get(c.samples) {
                    see(iv.start_ns);
                }
                if let Some(iv) = f.events.get(c.events) {
                    see(iv.start_ns);
                }
            }
        }
        min
    }

    /// Pushes intervals starting before `until`.
    fn feed_until(&mut self, ds: &Dataset, engine: &mut Engine, until: u64) -> anyhow::Result<()> {
        let count = engine.metric_index(MetricKind::Count);
        let time = engine.metric_index(MetricKind::Time);
        let samples = engine.metric_index(MetricKind::Samples);
        let events = engine.metric_index(MetricKind::Events);
        for node in &ds.nodes {
            let n = engine.node(&node.name);
            for t in &node.traces {
                let mut c = self.cursor(&t.path);
                while let Some(iv) = t.intervals.get(c.traces) {
                    if iv.start_ns >= until {
                        break;
                    }
                    c.traces += 1;
                    if count.is_none() && time.is_none() {
                        continue;
                    }
                    self.scratch.clear();
                    self.scratch2.clear();
                    if !iv.missed() {
                        for e in &iv.entries {
                            if let Some(m) = count {
                                let comp = self.func(engine, ds, m, t.program, e.func);
                                self.scratch.push((comp, e.calls as f64));
                            }
                            if let Some(m) = time {
                                let comp = self.func(engine, ds, m, t.program, e.func);
                                self.scratch2.push((comp, e.excl_ns as f64 / 1e6));
                            }
                        }
                    }
                    let at = Record(iv.start_ns, iv.dur_ns, iv.flags, &t.path);
                    for (m, vals) in [(count, &self.scratch), (time, &self.scratch2)] {
                        if let Some(m) = m {
                            push(engine, m, n, c.source, &at, vals)?;
                        }
                    }
                }
                if c.traces == t.intervals.len() && t.status != FileStatus::Open && !c.ended {
                    c.ended = true;
                    for m in [count, time].into_iter().flatten() {
                        engine.end_source(m, n, c.source);
                    }
                }
                self.cursors.insert(t.path.clone(), c);
            }
            for f in &node.samples {
                let mut c = self.cursor(&f.path);
                while let Some(iv) = f.intervals.get(c.samples) {
                    if iv.start_ns >= until {
                        break;
                    }
                    c.samples += 1;
                    let Some(m) = samples else { continue };
                    self.scratch.clear();
                    for e in &iv.entries {
                        let comp = self.func(engine, ds, m, e.program, e.func);
                        self.scratch.push((comp, e.count as f64));
                    }
                    let at = Record(iv.start_ns, iv.dur_ns, iv.flags, &f.path);
                    push(engine, m, n, c.source, &at, &self.scratch)?;
                }
                while let Some(iv) = f.events.get(c.events) {
                    if iv.start_ns >= until {
                        break;
                    }
                    c.events += 1;
                    let Some(m) = events else { continue };
                    self.scratch.clear();
                    for &(ev, count) in &iv.counts {
                        let comp = *self.events.entry((m, ev)).or_insert_with(|| {
                            engine.component(
                                m,
                                &CompLabel {
                                    program: None,
                                    image: None,
                                    name: ds.names.events.get(ev).clone(),
                                },
                            )
                        });
                        self.scratch.push((comp, count as f64));
                    }
                    let at = Record(iv.start_ns, iv.dur_ns, iv.flags, &f.path);
                    push(engine, m, n, c.source, &at, &self.scratch)?;
                }
                let done = c.samples == f.intervals.len() && c.events == f.events.len();
                if done && f.status != FileStatus::Open && !c.ended {
                    c.ended = true;
                    for m in [samples, events].into_iter().flatten() {
                        engine.end_source(m, n, c.source);
                    }
                }
                self.cursors.insert(f.path.clone(), c);
            }
        }
        Ok(())
    }

    fn cursor(&mut self, path: &PathBuf) -> Cursor {
        if let Some(c) = self.cursors.get(path) {
            return *c;
        }
        let c = Cursor {
            source: self.next_source,
            ..Default::default()
        };
        self.next_source += 1;
        self.cursors.insert(path.clone(), c);
        c
    }

    fn func(
        &mut self,
        engine: &mut Engine,
        ds: &Dataset,
        m: usize,
        program: ProgId,
        func: FuncId,
    ) -> CompIdx {
        let prog = self.by_program.then_some(program);
        *self.funcs.entry((m, prog, func)).or_insert_with(|| {
            let key = ds.names.funcs.get(func);
            engine.component(
                m,
                &CompLabel {
                    program: prog.map(|p| ds.names.programs.get(p).clone()),
                    image: Some(key.image.clone()),
                    name: key.function.clone(),
                },
            )
        })
    }
}

/// Where an interval record came from: start, length, flags, file.
struct Record<'a>(u64, u64, u32, &'a Path);

/// Pushes one record's values (or its "missed" mark) into metric `m`.
fn push(
    engine: &mut Engine,
    m: usize,
    node: usize,
    source: u64,
    rec: &Record<'_>,
    vals: &[(CompIdx, f64)],
) -> anyhow::Result<()> {
    let Record(start_ns, dur_ns, flags, path) = *rec;
    let iv = Interval {
        start_ns,
        dur_ns,
        partial: flags & interval_flags::PARTIAL != 0,
        data: if flags & interval_flags::MISSED != 0 {
            IntervalData::Missed
        } else {
            IntervalData::Sparse(vals)
        },
    };
    engine
        .push(m, node, source, &iv)
        .with_context(|| format!("{}: record at {start_ns} ns", path.display()))
}
