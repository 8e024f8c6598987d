//! Training: thresholds from fault-free runs (seed 000 §"Threshold selection"). Per node and
//! metric, the least threshold on the distance's grid that leaves no window of any run
//! anomalous (or, with [`ThresholdRule::Flagged`], that never flags the node), doubled.
//!
//! Pass 1 finds the kept function set over all runs; pass 2 scores every window with that set
//! from the start, as diagnose will use it; with variance weighting, pass 2's spreads give the
//! scales and a pass 3 scores with them.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use crate::analyzer::MIN_NODES;
use crate::data::{Dataset, DirSource, Source};
use crate::error::{Error, Result};
use crate::family::{Comparison, Metric, MetricFamily};
use crate::feed::{self, Feeder, Survey};
use crate::model::CompLabel;
use crate::plan::{
    build_analyzer, check_nodes, dedup, plan_metrics, MetricPlan, MetricSetup, Progress,
};
use crate::policy::{trained_threshold, Policy, Spread, Weights};
use crate::score::NormalProfiles;
use crate::setup::Setup;
use crate::thresholds::{
    MetricThresholds, NormalProfileEntry, ShareEntry, ThresholdRule, ThresholdsFile, UnseenScale,
    Weighting, WeightsFile, THRESHOLDS_FORMAT, THRESHOLDS_VERSION,
};
use crate::time::{fmt_dur, fmt_sig};

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
    /// Things the user should check: a run or node that alone set a threshold far above the
    /// others ([`odd_runs`]).
    pub warnings: Vec<String>,
    /// Things the user should know.
    pub notes: Vec<String>,
}

/// The largest training score of one node in one run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunMax {
    /// The run.
    pub run: String,
    /// The node.
    pub node: String,
    /// Its largest score (or its flag score, under [`ThresholdRule::Flagged`]).
    pub score: f64,
}

/// Warnings on training runs that set a metric's thresholds far above the others: the largest
/// score of one node in one run is more than twice the next largest of any node in any run.
///
/// Why twice: a trained threshold is twice the largest fault-free score (seed 000), so such a
/// score would itself have been anomalous under thresholds trained on everything else — the
/// run was probably not fault-free (or that node is not like its peers), and it alone lifts
/// the threshold (pooled: every node's) above what the rest of the training needed.
pub fn odd_runs(metric: Metric, unit: &str, maxima: &[RunMax]) -> Option<String> {
    let mut v: Vec<&RunMax> = maxima.iter().filter(|m| m.score.is_finite()).collect();
    if v.len() < 2 {
        return None;
    }
    v.sort_by(|a, b| b.score.total_cmp(&a.score));
    let (top, next) = (v[0], v[1]);
    if top.score <= ODD_FACTOR * next.score {
        return None;
    }
    let runs: HashSet<&str> = maxima.iter().map(|m| m.run.as_str()).collect();
    let whose = if runs.len() > 1 {
        format!("node {} in run {}", top.node, top.run)
    } else {
        format!("node {}", top.node)
    };
    let times = if next.score > 0.0 {
        format!("{}× ", fmt_sig(top.score / next.score))
    } else {
        String::new()
    };
    Some(format!(
        "{metric}: {whose} sets the threshold: its largest score {} {unit} is {times}the next \
         largest ({} {unit}, node {} in {}); check that this run was fault-free and that the \
         node does the same work as its peers, or train without it",
        fmt_sig(top.score),
        fmt_sig(next.score),
        next.node,
        next.run
    ))
}

/// See [`odd_runs`].
const ODD_FACTOR: f64 = 2.0;

/// A loaded training run.
struct Run {
    name: String,
    /// The settings with this run's OS metrics.
    setup: Setup,
    ds: Dataset,
    survey: Survey,
    plan: MetricPlan,
}

/// How training turns scores and spreads into thresholds and weights.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rules {
    /// Which scores a node's threshold is made from (`--threshold-rule`).
    pub threshold: ThresholdRule,
    /// The weighting scale of a component training never kept (`--unseen-scale`).
    pub unseen: UnseenScale,
}

/// Trains thresholds on fault-free runs; each run is analysed on its own (windows never span
/// runs).
pub fn train(
    setup: &Setup,
    runs: Vec<TrainingRun>,
    rules: Rules,
    progress: &mut dyn Progress,
) -> Result<Training> {
    let Rules {
        threshold: rule,
        unseen,
    } = rules;
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
            |_| MetricSetup::policy(Policy::Training),
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
    let unsupervised = |_: &str, _: Metric| None;
    let pass2 = score(
        &runs,
        (&kept, &no_weights, &unsupervised),
        &mut notes,
        progress,
    )?;
    let mut out = pass2.thresholds;
    let mut maxima = pass2.maxima;
    let mut profiles = pass2.profiles;
    let mut weights: BTreeMap<Metric, Weights> = BTreeMap::new();
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
                (
                    m,
                    WeightsFile::from_spreads(&v, family_of(m).resolution(), unseen),
                )
            })
            .collect();
        weights = files.iter().map(|(&m, f)| (m, f.weights())).collect();
        let mut quiet = Vec::new();
        let pass3 = score(
            &runs,
            (&kept, &weights, &unsupervised),
            &mut quiet,
            progress,
        )?;
        out = pass3.thresholds;
        maxima = pass3.maxima;
        profiles = pass3.profiles;
        for (m, t) in out.iter_mut() {
            t.weights = files.get(m).cloned();
        }
    }
    // The suspect score with reference runs is seed 002's supervised variant: each run is
    // scored against the normal profiles of the *other* runs (its own would make every node
    // look normal), and diagnose against all of them.
    if setup.settings.score.profiles() {
        let others = |run: &str, m: Metric| {
            let rows: Vec<(String, HashMap<CompLabel, f64>)> = profiles
                .get(&m)?
                .iter()
                .filter(|p| p.run != run)
                .map(|p| {
                    let shares = p.shares.iter().map(|e| (e.label.clone(), e.share));
                    (p.node.clone(), shares.collect())
                })
                .collect();
            (!rows.is_empty()).then(|| Arc::new(NormalProfiles { profiles: rows }))
        };
        let mut quiet = Vec::new();
        let pass4 = score(&runs, (&kept, &weights, &others), &mut quiet, progress)?;
        let scales: BTreeMap<Metric, Option<WeightsFile>> =
            out.iter().map(|(m, t)| (*m, t.weights.clone())).collect();
        out = pass4.thresholds;
        maxima = pass4.maxima;
        for (m, t) in out.iter_mut() {
            t.weights = scales.get(m).cloned().flatten();
            t.normal_profiles = profiles.remove(m).unwrap_or_default();
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
    let warnings: Vec<String> = out
        .iter()
        .filter_map(|(m, t)| {
            let v: Vec<RunMax> = maxima
                .get(m)
                .map(|v| {
                    v.iter()
                        .map(|(run, node, max, flag)| RunMax {
                            run: run.clone(),
                            node: node.clone(),
                            score: match rule {
                                ThresholdRule::Window => *max,
                                ThresholdRule::Flagged => *flag,
                            },
                        })
                        .collect()
                })
                .unwrap_or_default();
            odd_runs(*m, &t.unit, &v)
        })
        .collect();
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
        warnings,
        notes: dedup(notes),
    })
}

/// The grid thresholds of `family` are rounded up on ("least integer threshold", seed 000).
fn quantum(setup: &Setup, family: &dyn MetricFamily) -> f64 {
    match (family.comparison(), setup.settings.weighting) {
        (Comparison::Cdf { .. }, _) => CDF_QUANTUM,
        (Comparison::Histograms, _) => 1e-3,
        // Profiles: shares of a node's total, between 0 and 2.
        _ if setup.settings.score.profiles() => 1e-3,
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
    /// Per metric: (run, node, largest score, flag score) of every node of every run.
    maxima: BTreeMap<Metric, Vec<(String, String, f64, f64)>>,
    /// Per metric, with a scorer of profiles: every node's mean window profile in every run.
    profiles: BTreeMap<Metric, Vec<NormalProfileEntry>>,
}

/// Known-normal profiles for a run and metric (seed 002's supervised suspect score).
type NormalFor<'a> = &'a dyn Fn(&str, Metric) -> Option<Arc<NormalProfiles>>;

/// Scores every window of every run with the kept set from the start and the given weights.
fn score(
    runs: &[Run],
    (kept, weights, normal): (
        &BTreeMap<Metric, Vec<CompLabel>>,
        &BTreeMap<Metric, Weights>,
        NormalFor<'_>,
    ),
    notes: &mut Vec<String>,
    progress: &mut dyn Progress,
) -> Result<Scored> {
    let mut thresholds: BTreeMap<Metric, MetricThresholds> = BTreeMap::new();
    let mut spreads: BTreeMap<Metric, HashMap<CompLabel, Spread>> = BTreeMap::new();
    let mut maxima: BTreeMap<Metric, Vec<(String, String, f64, f64)>> = BTreeMap::new();
    let mut profiles: BTreeMap<Metric, Vec<NormalProfileEntry>> = BTreeMap::new();
    let weighted = !weights.is_empty();
    for run in runs {
        let setup = &run.setup;
        let mut a = build_analyzer(
            setup,
            &run.survey,
            &run.plan.run,
            false,
            |m| MetricSetup {
                policy: Policy::Training,
                weights: weights.get(&m).cloned(),
                normal: normal(&run.name, m),
            },
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
                        .score_unit(
                            setup.settings.distance,
                            weighted,
                            setup.settings.score.profiles(),
                        )
                        .to_string(),
                    recording: run.survey.recording(family.as_ref()),
                    kept: kept.get(&metric).cloned().unwrap_or_default(),
                    thresholds: BTreeMap::new(),
                    max_scores: BTreeMap::new(),
                    flag_scores: BTreeMap::new(),
                    windows: 0,
                    shared_median: None,
                    weights: None,
                    normal_profiles: Vec::new(),
                });
            entry.windows += m.windows - m.unscored;
            if m.windows > m.unscored {
                entry.shared_median = Some(entry.shared_median.unwrap_or(0.0).max(m.max_median));
            }
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
                if nm.profile_windows > 0 {
                    let w = nm.profile_windows as f64;
                    let mut shares: Vec<ShareEntry> = nm
                        .profile_sum
                        .iter()
                        .filter(|(_, &v)| v > 0.0)
                        .map(|(&c, &v)| ShareEntry {
                            label: m.comps[c as usize].clone(),
                            share: v / w,
                        })
                        .collect();
                    shares.sort_by(|a, b| a.label.cmp(&b.label));
                    profiles
                        .entry(metric)
                        .or_default()
                        .push(NormalProfileEntry {
                            run: run.name.clone(),
                            node: name.clone(),
                            shares,
                        });
                }
                maxima.entry(metric).or_default().push((
                    run.name.clone(),
                    name.clone(),
                    nm.max_score,
                    nm.flag_score,
                ));
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
        maxima,
        profiles,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mx(run: &str, node: &str, score: f64) -> RunMax {
        RunMax {
            run: run.into(),
            node: node.into(),
            score,
        }
    }

    /// The case: a count threshold of 64 against 4–9 for the other nodes.
    #[test]
    fn a_run_that_alone_sets_the_threshold_is_named() {
        let v = [
            mx("r0", "io0", 2.0),
            mx("r0", "io1", 32.0),
            mx("r1", "io2", 4.5),
            mx("r1", "io1", 3.0),
        ];
        let w = odd_runs(Metric::COUNT, "deviations", &v).unwrap();
        assert!(w.contains("node io1 in run r0"), "{w}");
        assert!(w.contains("7.11×"), "{w}");
        assert!(w.contains("32 deviations"), "{w}");
        // Within twice the next: spread, not an odd run.
        let v = [
            mx("r0", "io0", 8.0),
            mx("r1", "io1", 4.5),
            mx("r1", "io2", 1.0),
        ];
        assert_eq!(odd_runs(Metric::COUNT, "calls", &v), None);
        assert_eq!(odd_runs(Metric::COUNT, "calls", &v[..1]), None);
    }
}
