//! Training: thresholds from fault-free runs (seed 000 §"Threshold selection"). Per node and
//! metric, the least threshold on the distance's grid that leaves no window of any run
//! anomalous (or, with [`ThresholdRule::Flagged`], that never flags the node), doubled.
//!
//! Pass 1 finds the kept function set over all runs; pass 2 scores every window with that set
//! from the start, as diagnose will use it; with variance weighting, pass 2's spreads give the
//! scales and a pass 3 scores with them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

use crate::analyzer::MIN_NODES;
use crate::data::{Dataset, DirSource, Source};
use crate::error::{Error, Result};
use crate::family::{Comparison, Metric, MetricFamily};
use crate::feed::{self, Feeder, Survey};
use crate::model::CompLabel;
use crate::plan::{build_analyzer, check_nodes, dedup, plan_metrics, MetricPlan, Progress};
use crate::policy::{trained_threshold, Policy, Spread, Weights};
use crate::setup::Setup;
use crate::thresholds::{
    MetricThresholds, ThresholdRule, ThresholdsFile, Weighting, WeightsFile, THRESHOLDS_FORMAT,
    THRESHOLDS_VERSION,
};
use crate::time::fmt_dur;

/// Grid of weighted thresholds (scores in typical deviations).
const WEIGHTED_QUANTUM: f64 = 1e-3;
/// Grid of CDF-distance thresholds: seed 001 §4.6.1 "start[s] with a minimum threshold value
/// (currently 0.1) and increase[s] in increments (of 0.1)". It is also a floor: peers whose
/// per-second values agreed exactly in training (the same rate every second) would otherwise get
/// a threshold of 0.002, and one second off by one bin would flag them.
const CDF_QUANTUM: f64 = 0.1;

/// One fault-free run to train on.
#[derive(Debug)]
pub struct TrainingRun {
    /// Its name in messages and in the thresholds file (the path given).
    pub name: String,
    /// Where its records come from.
    pub source: Box<dyn Source>,
}

impl TrainingRun {
    /// The run in data directory `path`.
    pub fn dir(path: &Path) -> Self {
        TrainingRun {
            name: path.display().to_string(),
            source: Box::new(DirSource::new(vec![path.to_path_buf()], false)),
        }
    }
}

/// What training produced.
#[derive(Clone, Debug)]
pub struct Training {
    /// The thresholds, ready to save.
    pub file: ThresholdsFile,
    /// Things the user should know.
    pub notes: Vec<String>,
}

/// A loaded training run.
struct Run {
    name: String,
    /// The settings with this run's OS metrics.
    setup: Setup,
    ds: Dataset,
    survey: Survey,
    plan: MetricPlan,
}

/// Trains thresholds on fault-free runs; each run is analysed on its own (windows never span
/// runs).
pub fn train(
    setup: &Setup,
    runs: Vec<TrainingRun>,
    rule: ThresholdRule,
    progress: &mut dyn Progress,
) -> Result<Training> {
    let mut notes = setup.notes.clone();
    let names: Vec<String> = runs.iter().map(|r| r.name.clone()).collect();
    let mut loaded = Vec::new();
    for r in runs {
        let what = format!("training run {}", r.name);
        let ds = Dataset::open_source(r.source, setup.load.clone()).map_err(|e| e.context(what))?;
        check_nodes(&ds, &r.name, &mut notes)?;
        let run_setup = setup.for_data(&ds);
        notes.extend(run_setup.notes.iter().cloned());
        let survey = feed::survey(&ds, &run_setup.families)?;
        loaded.push((r.name, run_setup, ds, survey));
    }
    // All runs must be recorded alike.
    let sampling: HashSet<_> = loaded.iter().filter_map(|r| r.3.sampling.clone()).collect();
    if sampling.len() > 1 {
        let list: Vec<String> = sampling.iter().map(|s| s.to_string()).collect();
        return Err(Error::Data(format!(
            "training runs were sampled differently ({}); train on runs recorded alike",
            list.join("; ")
        )));
    }
    // Pass 1: the kept function set over all runs.
    let mut kept: BTreeMap<Metric, Vec<CompLabel>> = BTreeMap::new();
    let mut runs = Vec::new();
    for (name, setup, ds, survey) in loaded {
        let plan = plan_metrics(&setup, &survey, &mut notes)?;
        let mut a = build_analyzer(
            &setup,
            &survey,
            &plan.run,
            false,
            |_| (Policy::Training, None),
            &mut notes,
        )?;
        feed_all(&setup, &ds, &mut a, progress)?;
        for m in a.results() {
            let set = kept.entry(m.metric()).or_default();
            for l in m.kept_labels() {
                if !set.contains(&l) {
                    set.push(l);
                }
            }
        }
        runs.push(Run {
            name,
            setup,
            ds,
            survey,
            plan,
        });
    }
    // Pass 2: scores with that set from the start, as diagnose will use it.
    let no_weights = BTreeMap::new();
    let pass2 = score(&runs, &kept, &no_weights, &mut notes, progress)?;
    let mut out = pass2.thresholds;
    // A metric's family, from a run that has it (the OS metrics depend on the data).
    let family_of = |m: Metric| {
        runs.iter()
            .find_map(|r| r.setup.families.iter().find(|f| f.metric() == m))
            .cloned()
            .expect("trained metrics have families")
    };
    // Variance weighting: scales from pass 2, then a pass 3 scoring with them.
    if setup.settings.weighting == Weighting::Variance {
        let files: BTreeMap<Metric, WeightsFile> = pass2
            .spreads
            .iter()
            .map(|(&m, sp)| {
                let v: Vec<(CompLabel, Spread)> = sp.iter().map(|(l, s)| (l.clone(), *s)).collect();
                (m, WeightsFile::from_spreads(&v, family_of(m).resolution()))
            })
            .collect();
        let weights: BTreeMap<Metric, Weights> =
            files.iter().map(|(&m, f)| (m, f.weights())).collect();
        let mut quiet = Vec::new();
        out = score(&runs, &kept, &weights, &mut quiet, progress)?.thresholds;
        for (m, t) in out.iter_mut() {
            t.weights = files.get(m).cloned();
        }
    }
    for (m, t) in out.iter_mut() {
        let quantum = quantum(setup, family_of(*m).as_ref());
        let basis = match rule {
            ThresholdRule::Flagged => &t.flag_scores,
            ThresholdRule::Window => &t.max_scores,
        };
        t.thresholds = basis
            .iter()
            .map(|(n, &s)| (n.clone(), trained_threshold(s, quantum)))
            .collect();
    }
    out.retain(|_, t| !t.thresholds.is_empty());
    if out.is_empty() {
        return Err(Error::Data(format!(
            "no window could be scored in the training runs (need {MIN_NODES} nodes with \
             complete data over a window of {}); record longer runs or use shorter windows",
            fmt_dur(setup.settings.win_size_ns)
        )));
    }
    Ok(Training {
        file: ThresholdsFile {
            format: THRESHOLDS_FORMAT.to_string(),
            version: THRESHOLDS_VERSION,
            runs: names,
            settings: setup.settings.clone(),
            metrics: out,
        },
        notes: dedup(notes),
    })
}

/// The grid thresholds of `family` are rounded up on ("least integer threshold", seed 000).
fn quantum(setup: &Setup, family: &dyn MetricFamily) -> f64 {
    match (family.comparison(), setup.settings.weighting) {
        (Comparison::Cdf { .. }, _) => CDF_QUANTUM,
        (Comparison::Histograms, _) => 1e-3,
        (_, Weighting::Variance) => WEIGHTED_QUANTUM,
        (_, Weighting::None) => setup.settings.distance.threshold_quantum(),
    }
}

/// Feeds a whole run offline.
fn feed_all(
    setup: &Setup,
    ds: &Dataset,
    a: &mut crate::analyzer::Analyzer,
    progress: &mut dyn Progress,
) -> Result<()> {
    let mut feeder = Feeder::new(a, setup.settings.by_program);
    feeder.feed(ds, a, Some(setup.chunk_ns()), |_, _, at| {
        progress.analysed(at, 0, 0);
        Ok(())
    })?;
    a.advance(None);
    Ok(())
}

/// What a scoring pass found.
struct Scored {
    /// Per metric, each node's largest scores.
    thresholds: BTreeMap<Metric, MetricThresholds>,
    /// Per metric, each kept component's spread around the median node.
    spreads: BTreeMap<Metric, HashMap<CompLabel, Spread>>,
}

/// Scores every window of every run with the kept set from the start and the given weights.
fn score(
    runs: &[Run],
    kept: &BTreeMap<Metric, Vec<CompLabel>>,
    weights: &BTreeMap<Metric, Weights>,
    notes: &mut Vec<String>,
    progress: &mut dyn Progress,
) -> Result<Scored> {
    let mut thresholds: BTreeMap<Metric, MetricThresholds> = BTreeMap::new();
    let mut spreads: BTreeMap<Metric, HashMap<CompLabel, Spread>> = BTreeMap::new();
    let weighted = !weights.is_empty();
    for run in runs {
        let setup = &run.setup;
        let mut a = build_analyzer(
            setup,
            &run.survey,
            &run.plan.run,
            false,
            |m| (Policy::Training, weights.get(&m).cloned()),
            notes,
        )?;
        for (mi, m) in run.plan.run.iter().enumerate() {
            if let Some(k) = kept.get(m) {
                a.seed_kept(mi, k);
            }
        }
        feed_all(setup, &run.ds, &mut a, progress)?;
        let outcome = a.into_outcome();
        for m in &outcome.metrics {
            let metric = m.metric();
            if !run.plan.reported.contains(&metric) {
                continue;
            }
            let sp = spreads.entry(metric).or_default();
            for &c in &m.kept_list {
                let s = m.spread[c as usize];
                let acc = sp.entry(m.comps[c as usize].clone()).or_default();
                acc.dev_sum += s.dev_sum;
                acc.level_sum += s.level_sum;
                acc.n += s.n;
                acc.windows += s.windows;
            }
            let family = &m.config.family;
            let entry = thresholds
                .entry(metric)
                .or_insert_with(|| MetricThresholds {
                    unit: family
                        .score_unit(setup.settings.distance, weighted)
                        .to_string(),
                    recording: run.survey.recording(family.as_ref()),
                    kept: kept.get(&metric).cloned().unwrap_or_default(),
                    thresholds: BTreeMap::new(),
                    max_scores: BTreeMap::new(),
                    flag_scores: BTreeMap::new(),
                    windows: 0,
                    weights: None,
                });
            entry.windows += m.windows - m.unscored;
            if m.windows == m.unscored {
                notes.push(format!(
                    "{}: no {metric} window had {MIN_NODES} nodes with complete data; the run \
                     is too short for windows of {}",
                    run.name,
                    fmt_dur(setup.settings.win_size_ns)
                ));
            }
            for (n, nm) in m.nodes.iter().enumerate() {
                if nm.scored == 0 {
                    continue;
                }
                let name = outcome.names[n].clone();
                let fs = entry.flag_scores.entry(name.clone()).or_insert(0.0);
                *fs = fs.max(nm.flag_score);
                let ms = entry.max_scores.entry(name).or_insert(0.0);
                *ms = ms.max(nm.max_score);
            }
        }
    }
    Ok(Scored {
        thresholds,
        spreads,
    })
}
