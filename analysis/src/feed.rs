//! A dataset into the analyzer, through the metric families: what the data holds ([`survey`])
//! and the [`Feeder`], which pushes every interval the loader read exactly once — offline in
//! time order a chunk at a time, in `--follow` after each refresh of the dataset, through the
//! same code.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::analyzer::Analyzer;
use crate::baseline::Ranges;
use crate::data::{Dataset, FileStatus, NodeData};
use crate::error::{Error, Result};
use crate::family::{FamilyReader, IntervalSink, Metric, MetricFamily, Sampling};
use crate::model::{CompIdx, CompLabel, Interval, PeerIdx};
use crate::thresholds::Recording;

/// CPU time per sample at the reference sampling rate of seed 000: 100,000 cycles per sample
/// at a 2 GHz reference clock, i.e. one sample per 50 µs of CPU.
pub const REFERENCE_NS_PER_SAMPLE: f64 = 50_000.0;
/// Clock assumed to convert a `cycles` period into CPU time.
pub const REFERENCE_CYCLES_PER_NS: f64 = 2.0;

/// What the data holds, for planning an analysis.
#[derive(Clone, Debug, Default)]
pub struct Survey {
    /// Metrics with data, and the gcd of their record intervals (ns).
    pub slots: HashMap<Metric, u64>,
    /// Largest record interval per metric (ns).
    pub coarsest: HashMap<Metric, u64>,
    /// How samples were taken, when there are samples.
    pub sampling: Option<Sampling>,
}

impl Survey {
    /// How the data of `family` was recorded, for a thresholds file.
    pub fn recording(&self, family: &dyn MetricFamily) -> Recording {
        let sampling = self.sampling.as_ref().filter(|_| family.sampled());
        Recording {
            event: sampling.map(|s| s.event.clone()),
            period: sampling.map(|s| s.period),
            freq: sampling.is_some_and(|s| s.freq),
            interval_ns: self.slots.get(&family.metric()).copied().unwrap_or(0),
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

/// Looks at every record of the dataset: which metrics have data, their record intervals, and
/// how samples were taken (all nodes must sample alike for sample counts to compare).
pub fn survey(ds: &Dataset, families: &[Arc<dyn MetricFamily>]) -> Result<Survey> {
    let mut s = Survey::default();
    let mut sampling: BTreeMap<Sampling, String> = BTreeMap::new();
    for f in families {
        let m = f.metric();
        for node in &ds.nodes {
            f.interval_lengths(node, &mut |dur| {
                if dur == 0 {
                    return;
                }
                let e = s.slots.entry(m).or_insert(dur);
                *e = gcd(*e, dur);
                let c = s.coarsest.entry(m).or_insert(dur);
                *c = (*c).max(dur);
            });
            f.sampling(node, &mut |how| {
                sampling.entry(how).or_insert_with(|| node.name.clone());
            });
        }
    }
    if sampling.len() > 1 {
        let list: Vec<String> = sampling
            .iter()
            .map(|(how, node)| format!("{how} ({node})"))
            .collect();
        return Err(Error::Data(format!(
            "nodes were sampled differently ({}); sample counts only compare when every node \
             uses the same event and period: record again with the same `culprit sample` \
             settings",
            list.join(", ")
        )));
    }
    s.sampling = sampling.into_keys().next();
    Ok(s)
}

/// CPU ns one sample stands for, when known: frequency mode takes 1/f of CPU time per sample;
/// `cpu-clock`/`task-clock` periods are ns; `cycles` periods are converted at the reference
/// clock.
pub fn ns_per_sample(how: &Sampling) -> Option<f64> {
    if how.period == 0 {
        return None;
    }
    if how.freq {
        return Some(1e9 / how.period as f64);
    }
    match how.event.as_str() {
        "cpu-clock" | "task-clock" => Some(how.period as f64),
        "cycles" | "cpu-cycles" | "ref-cycles" => Some(how.period as f64 / REFERENCE_CYCLES_PER_NS),
        _ => None,
    }
}

/// The samples dimensionality rule in this data's samples.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplesRule {
    /// Samples per window at this data's rate.
    pub min_samples: f64,
    /// Said when the rate is unknown.
    pub note: Option<String>,
}

/// The samples dimensionality rule in this data's samples: `min_samples` is counted at the
/// reference rate (one sample per 50 µs of CPU, seed 000's 100,000 cycles at 2 GHz), so the
/// rule keeps functions with at least `min_samples × 50 µs` of CPU in a window whatever the
/// sampling rate.
pub fn samples_rule(min_samples: f64, sampling: Option<&Sampling>) -> SamplesRule {
    match sampling {
        Some(how) => match ns_per_sample(how) {
            Some(ns) => SamplesRule {
                min_samples: min_samples * REFERENCE_NS_PER_SAMPLE / ns,
                note: None,
            },
            None => SamplesRule {
                min_samples,
                note: Some(format!(
                    "sampling event {} has no known CPU time per sample: the samples \
                     dimensionality rule uses {min_samples} samples unscaled",
                    how.event
                )),
            },
        },
        None => SamplesRule {
            min_samples,
            note: None,
        },
    }
}

/// Feeds a dataset into an analyzer, one family reader per metric of the analyzer.
#[derive(Debug)]
pub struct Feeder {
    readers: Vec<Box<dyn FamilyReader>>,
    writers: HashMap<PathBuf, u64>,
    /// The analyzer's [`Analyzer::window_ranges`]: intervals outside them can reach no window
    /// it analyses, and are not pushed.
    only: Option<Ranges>,
    /// `--follow`: how far each file had been read at the last look.
    positions: HashMap<PathBuf, (usize, u64)>,
}

impl Feeder {
    /// A feeder for `analyzer`'s metrics; `by_program` keys functions by program too.
    pub fn new(analyzer: &Analyzer, by_program: bool) -> Self {
        Feeder {
            readers: analyzer
                .results()
                .map(|m| m.config.family.reader(by_program))
                .collect(),
            writers: HashMap::new(),
            only: analyzer.window_ranges().cloned(),
            positions: HashMap::new(),
        }
    }

    /// `--follow`: tells the analyzer which writers are alive at `now_ns` — the process writing
    /// the file runs on this host, or the file grew since the last look (a writer on another
    /// host, mirrored) — so that it waits for those that are behind ([`Analyzer::writer_alive`]).
    pub fn mark_alive(&mut self, ds: &Dataset, analyzer: &mut Analyzer, now_ns: u64) {
        let metrics = analyzer.results().count();
        for node in &ds.nodes {
            // (file, how far it was read, its writer runs on this host)
            let traces = node
                .traces
                .iter()
                .filter(|t| t.status == FileStatus::Open)
                .map(|t| (&t.path, t.read_position(), t.writer_running()));
            let samples = node
                .samples
                .iter()
                .filter(|s| s.status == FileStatus::Open)
                .map(|s| (&s.path, s.read_position(), s.writer_running()));
            let mut alive = Vec::new();
            for (path, pos, running) in traces.chain(samples) {
                let grew = self.positions.insert(path.clone(), pos) != Some(pos);
                if grew || running {
                    alive.extend(self.writers.get(path).copied());
                }
            }
            if alive.is_empty() {
                continue;
            }
            let n = analyzer.node(&node.name);
            for id in alive {
                for m in 0..metrics {
                    analyzer.writer_alive(m, n, id, now_ns);
                }
            }
        }
    }

    /// Pushes every interval not pushed yet. Offline, `chunk_ns` bounds memory: data is pushed
    /// in time order a chunk at a time, closing windows in between (`closed` hears what
    /// closed).
    pub fn feed(
        &mut self,
        ds: &Dataset,
        analyzer: &mut Analyzer,
        offline_chunk_ns: Option<u64>,
        mut closed: impl FnMut(&mut Analyzer, Vec<crate::analyzer::WindowEvent>, u64) -> Result<()>,
    ) -> Result<()> {
        analyzer.set_merges(crate::demoted::merges(ds));
        let Some(chunk) = offline_chunk_ns else {
            return self.feed_until(ds, analyzer, u64::MAX);
        };
        let mut t = self.next_start(ds);
        while let Some(from) = t {
            let until = (from / chunk + 1) * chunk;
            self.feed_until(ds, analyzer, until)?;
            let events = analyzer.advance(None);
            closed(analyzer, events, until)?;
            t = self.next_start(ds);
        }
        Ok(())
    }

    fn next_start(&self, ds: &Dataset) -> Option<u64> {
        self.readers
            .iter()
            .flat_map(|r| ds.nodes.iter().filter_map(|n| r.next_start(n)))
            .min()
    }

    /// Pushes intervals starting before `until`.
    fn feed_until(&mut self, ds: &Dataset, analyzer: &mut Analyzer, until: u64) -> Result<()> {
        for (m, reader) in self.readers.iter_mut().enumerate() {
            for node in &ds.nodes {
                let n = analyzer.node(&node.name);
                let mut sink = Sink {
                    analyzer,
                    m,
                    node: n,
                    writers: &mut self.writers,
                    only: self.only.as_ref(),
                };
                reader.feed(ds, node, until, &mut sink)?;
            }
        }
        Ok(())
    }
}

/// The analyzer as one node's sink for one metric.
struct Sink<'a> {
    analyzer: &'a mut Analyzer,
    m: usize,
    node: PeerIdx,
    writers: &'a mut HashMap<PathBuf, u64>,
    only: Option<&'a Ranges>,
}

impl Sink<'_> {
    fn writer(&mut self, file: &Path) -> u64 {
        let next = self.writers.len() as u64;
        *self.writers.entry(file.to_path_buf()).or_insert(next)
    }
}

impl IntervalSink for Sink<'_> {
    fn component(&mut self, label: CompLabel) -> CompIdx {
        self.analyzer.component(self.m, &label)
    }

    fn push(&mut self, writer: &Path, iv: &Interval<'_>) -> Result<()> {
        if let Some(r) = self.only {
            if !r.touches(iv.start_ns, iv.start_ns.saturating_add(iv.dur_ns)) {
                return Ok(());
            }
        }
        let id = self.writer(writer);
        self.analyzer
            .push(self.m, self.node, id, iv)
            .map_err(|source| Error::Record {
                what: format!("{}: record at {} ns", writer.display(), iv.start_ns),
                source,
            })
    }

    fn end(&mut self, writer: &Path) {
        let id = self.writer(writer);
        self.analyzer.end_writer(self.m, self.node, id);
    }
}

/// The component labels of `family` in a dataset's records.
pub fn labels(family: &dyn MetricFamily, ds: &Dataset, by_program: bool) -> HashSet<CompLabel> {
    let mut sink = Labels::default();
    let mut reader = family.reader(by_program);
    for node in &ds.nodes {
        // Labels only: nothing is pushed anywhere, so nothing can fail.
        let _ = reader.feed(ds, node, u64::MAX, &mut sink);
    }
    sink.labels.into_iter().collect()
}

/// Collects labels, ignores values.
#[derive(Default)]
struct Labels {
    labels: Vec<CompLabel>,
}

impl IntervalSink for Labels {
    fn component(&mut self, label: CompLabel) -> CompIdx {
        self.labels.push(label);
        (self.labels.len() - 1) as CompIdx
    }

    fn push(&mut self, _writer: &Path, _iv: &Interval<'_>) -> Result<()> {
        Ok(())
    }

    fn end(&mut self, _writer: &Path) {}
}

/// True when `node` has records of `family` with an interval in them.
pub fn has_records(family: &dyn MetricFamily, node: &NodeData) -> bool {
    let mut any = false;
    family.interval_lengths(node, &mut |_| any = true);
    any
}
