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
use crate::baseline::Ranges;
use crate::data::{Dataset, DirSource, Source};
use crate::error::{Error, Result};
use crate::family::{Comparison, Metric, MetricFamily};
use crate::feed::{self, Feeder, Survey};
use crate::model::CompLabel;
use crate::plan::{
    build_analyzer, check_nodes, dedup, plan_metrics, MetricPlan, MetricSetup, Progress,
};
use crate::policy::{trained_threshold, Policy, Spread, Weights};
use crate::roles::{self, Evidence, RoleEntry, Roles};
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
    /// Only the windows wholly inside these stretches are learnt (a baseline of the data,
    /// [`crate::baseline`]); `None`: all of the run.
    pub windows: Option<Ranges>,
}

impl TrainingRun {
    /// The run in data directory `path`.
    pub fn dir(path: &Path) -> Self {
        TrainingRun {
            name: path.display().to_string(),
            source: Box::new(DirSource::new(vec![path.to_path_buf()], false)),
            windows: None,
        }
    }

    /// The same run, learnt only in the windows wholly inside `ranges`.
    pub fn within(self, ranges: Ranges) -> Self {
        TrainingRun {
            windows: Some(ranges),
            ..self
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
    let (top, next) = odd_pair(maxima)?;
    let runs: HashSet<&str> = maxima.iter().map(|m| m.run.as_str()).collect();
    let whose = |m: &RunMax| {
        if runs.len() > 1 {
            format!("node {} in run {}", m.node, m.run)
        } else {
            format!("node {}", m.node)
        }
    };
    let times = if next.score > 0.0 {
        format!("{}× ", fmt_sig(top.score / next.score))
    } else {
        String::new()
    };
    Some(format!(
        "{metric}: {} sets the threshold: its largest score {} {unit} is {times}the next \
         largest ({} {unit}, {}); check that this run was fault-free and that the node does the \
         same work as its peers, or train without it",
        whose(top),
        fmt_sig(top.score),
        fmt_sig(next.score),
        whose(next)
    ))
}

/// The largest score of `maxima` and the next largest, when the largest is more than
/// [`ODD_FACTOR`] times the next.
fn odd_pair(maxima: &[RunMax]) -> Option<(&RunMax, &RunMax)> {
    let mut v: Vec<&RunMax> = maxima.iter().filter(|m| m.score.is_finite()).collect();
    if v.len() < 2 {
        return None;
    }
    v.sort_by(|a, b| b.score.total_cmp(&a.score));
    (v[0].score > ODD_FACTOR * v[1].score).then_some((v[0], v[1]))
}

/// [`odd_runs`] over every metric, one warning per node and run: a node that set the thresholds
/// of several metrics (a run of ~30 OS metrics can) is named once, with the metrics.
pub fn odd_nodes(per_metric: &[(Metric, String, Vec<RunMax>)]) -> Vec<String> {
    let mut by_node: BTreeMap<(String, String), Vec<(Metric, f64)>> = BTreeMap::new();
    let mut single: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut several_runs = false;
    for (m, unit, maxima) in per_metric {
        let Some((top, next)) = odd_pair(maxima) else {
            continue;
        };
        several_runs |= maxima.iter().any(|x| x.run != top.run);
        let key = (top.run.clone(), top.node.clone());
        by_node
            .entry(key.clone())
            .or_default()
            .push((*m, top.score / next.score));
        if let Some(w) = odd_runs(*m, unit, maxima) {
            single.entry(key).or_insert(w);
        }
    }
    by_node
        .into_iter()
        .map(|((run, node), v)| {
            if v.len() == 1 {
                return single.remove(&(run, node)).unwrap_or_default();
            }
            let names: Vec<String> = v.iter().map(|(m, _)| m.to_string()).collect();
            let (lo, hi) = v.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), (_, r)| {
                (lo.min(*r), hi.max(*r))
            });
            let whose = if several_runs {
                format!("node {node} in run {run}")
            } else {
                format!("node {node}")
            };
            format!(
                "{whose} sets the thresholds of {}: its largest scores are {}–{}× the next \
                 largest node's; check that this run was fault-free and that the node does the \
                 same work as its peers, or train without it",
                names.join(", "),
                fmt_sig(lo),
                fmt_sig(hi)
            )
        })
        .collect()
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
    windows: Option<Ranges>,
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
        loaded.push((r.name, run_setup, ds, survey, r.windows));
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
    for (name, setup, ds, survey, windows) in loaded {
        let plan = plan_metrics(&setup, &survey, &mut notes)?;
        let mut a = build_analyzer(
            &setup,
            &survey,
            &plan.run,
            false,
            |_| MetricSetup::policy(Policy::Training),
            &mut notes,
        )?;
        if let Some(w) = &windows {
            a.only_windows(w.clone());
        }
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
            windows,
        });
    }
    // Pass 2: scores with that set from the start, as diagnose will use it.
    let no_weights = BTreeMap::new();
    let unsupervised = |_: &str, _: Metric| None;
    let no_roles = BTreeMap::new();
    let mut pass2 = score(
        &runs,
        Pass {
            kept: &kept,
            weights: &no_weights,
            normal: &unsupervised,
            roles: &no_roles,
        },
        &mut notes,
        progress,
    )?;
    // A metric's family, from a run that has it (the OS metrics depend on the data).
    let family_of = |m: Metric| {
        runs.iter()
            .find_map(|r| r.setup.families.iter().find(|f| f.metric() == m))
            .cloned()
            .expect("trained metrics have families")
    };
    // Nodes of another role (crate::roles), from the unweighted pass; every later pass
    // compares them against their own baseline, so that neither the scales nor the thresholds
    // learn their difference.
    let min_windows = 2 * setup.settings.k as u64 - 1;
    let role_entries = role_entries(&pass2.evidence, min_windows, |m| family_of(m).resolution());
    let roles: BTreeMap<Metric, Arc<Roles>> = role_entries
        .iter()
        .filter_map(|(&m, e)| Some((m, Roles::from_entries(e)?)))
        .collect();
    let mut warnings_of_baseline = baseline_anomalies(
        &pass2.evidence,
        &role_entries,
        setup.settings.win_size_ns,
        runs.len() > 1,
    );
    if !roles.is_empty() {
        let mut quiet = Vec::new();
        pass2 = score(
            &runs,
            Pass {
                kept: &kept,
                weights: &no_weights,
                normal: &unsupervised,
                roles: &roles,
            },
            &mut quiet,
            progress,
        )?;
    }
    let mut out = pass2.thresholds;
    let mut maxima = pass2.maxima;
    let mut profiles = pass2.profiles;
    let mut weights: BTreeMap<Metric, Weights> = BTreeMap::new();
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
            Pass {
                kept: &kept,
                weights: &weights,
                normal: &unsupervised,
                roles: &roles,
            },
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
        let pass4 = score(
            &runs,
            Pass {
                kept: &kept,
                weights: &weights,
                normal: &others,
                roles: &roles,
            },
            &mut quiet,
            progress,
        )?;
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
        for r in t.rare.values_mut() {
            *r = crate::rare::trained_bar(*r);
        }
    }
    out.retain(|_, t| !t.thresholds.is_empty());
    for (m, t) in out.iter_mut() {
        t.roles = role_entries.get(m).cloned().unwrap_or_default();
    }
    let per_metric: Vec<(Metric, String, Vec<RunMax>)> = out
        .iter()
        .map(|(m, t)| {
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
            (*m, t.unit.clone(), v)
        })
        .collect();
    let mut warnings = odd_nodes(&per_metric);
    warnings.append(&mut warnings_of_baseline);
    if out.is_empty() {
        return Err(Error::Data(format!(
            "no window could be scored in the training runs (need {MIN_NODES} nodes with \
             complete data over a window of {}); record longer runs or use shorter windows",
            fmt_dur(setup.settings.win_size_ns)
        )));
    }
    Ok(Training {
        file: {
            let mut f = ThresholdsFile {
                format: THRESHOLDS_FORMAT.to_string(),
                version: THRESHOLDS_VERSION,
                runs: names,
                settings: setup.settings.clone(),
                metrics: out,
            };
            f.version = f.needed_version();
            f
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
    /// Per metric and node, the evidence of a standing difference over every run.
    evidence: BTreeMap<Metric, BTreeMap<String, Evidence>>,
}

/// Known-normal profiles for a run and metric (seed 002's supervised suspect score).
type NormalFor<'a> = &'a dyn Fn(&str, Metric) -> Option<Arc<NormalProfiles>>;

/// What a scoring pass judges by.
struct Pass<'a> {
    /// The kept set, from the start.
    kept: &'a BTreeMap<Metric, Vec<CompLabel>>,
    /// Weighting scales (none: unweighted).
    weights: &'a BTreeMap<Metric, Weights>,
    /// Known-normal profiles.
    normal: NormalFor<'a>,
    /// Nodes of another role.
    roles: &'a BTreeMap<Metric, Arc<Roles>>,
}

/// Scores every window of every run as `pass` says.
fn score(
    runs: &[Run],
    pass: Pass<'_>,
    notes: &mut Vec<String>,
    progress: &mut dyn Progress,
) -> Result<Scored> {
    let Pass {
        kept,
        weights,
        normal,
        roles,
    } = pass;
    let mut thresholds: BTreeMap<Metric, MetricThresholds> = BTreeMap::new();
    let mut spreads: BTreeMap<Metric, HashMap<CompLabel, Spread>> = BTreeMap::new();
    let mut maxima: BTreeMap<Metric, Vec<(String, String, f64, f64)>> = BTreeMap::new();
    let mut profiles: BTreeMap<Metric, Vec<NormalProfileEntry>> = BTreeMap::new();
    let mut evidence: BTreeMap<Metric, BTreeMap<String, Evidence>> = BTreeMap::new();
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
                roles: roles.get(&m).cloned(),
                rare: None,
            },
            notes,
        )?;
        if let Some(w) = &run.windows {
            a.only_windows(w.clone());
        }
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
                    roles: Vec::new(),
                    rare: BTreeMap::new(),
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
                evidence
                    .entry(metric)
                    .or_default()
                    .entry(name.clone())
                    .or_default()
                    .add(&run.name, &nm.role, &m.comps);
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
                if m.config.rare.is_some() {
                    // The largest ratio for now; made a bar with the thresholds.
                    let r = entry.rare.entry(name.clone()).or_insert(0.0);
                    *r = r.max(nm.rare_max);
                }
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
        evidence,
    })
}

/// The nodes of another role of each metric ([`roles::roles_among`]).
fn role_entries(
    evidence: &BTreeMap<Metric, BTreeMap<String, Evidence>>,
    min_windows: u64,
    resolution: impl Fn(Metric) -> f64,
) -> BTreeMap<Metric, Vec<RoleEntry>> {
    let mut out: BTreeMap<Metric, Vec<RoleEntry>> = BTreeMap::new();
    for (&m, nodes) in evidence {
        let entries = roles::roles_among(nodes, min_windows, resolution(m));
        // Roles are standing differences of a few nodes from the many: a metric on which half
        // the nodes or more "differ" has no peers to differ from, and learns no role.
        if !entries.is_empty() && entries.len() * 2 < nodes.len() {
            out.insert(m, entries);
        }
    }
    out
}

/// Warnings for stretches of the training data in which a node stood out from its peers in k
/// of 2k − 1 windows without having another role on that metric: the data probably holds an
/// anomaly, which training has learnt as normal.
fn baseline_anomalies(
    evidence: &BTreeMap<Metric, BTreeMap<String, Evidence>>,
    roles: &BTreeMap<Metric, Vec<RoleEntry>>,
    win_size_ns: u64,
    name_runs: bool,
) -> Vec<String> {
    // Per run and node: the metrics, and the first and last window of their stretches.
    let mut by_node: BTreeMap<(&str, &str), (Vec<Metric>, u64, u64)> = BTreeMap::new();
    for (&m, nodes) in evidence {
        let role_of = |n: &str| roles.get(&m).is_some_and(|v| v.iter().any(|r| r.node == n));
        for (node, e) in nodes {
            if role_of(node) {
                continue;
            }
            for (run, a, b) in &e.stretches {
                let v =
                    by_node
                        .entry((run.as_str(), node.as_str()))
                        .or_insert((Vec::new(), *a, *b));
                if !v.0.contains(&m) {
                    v.0.push(m);
                }
                v.1 = v.1.min(*a);
                v.2 = v.2.max(*b);
            }
        }
    }
    by_node
        .into_iter()
        .map(|((run, node), (metrics, a, b))| {
            let w = roles::baseline_anomaly(&metrics, node, (a, b), win_size_ns);
            if name_runs {
                format!("{w} (training run {run})")
            } else {
                w
            }
        })
        .collect()
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

    /// A node that sets the thresholds of several metrics is named once.
    #[test]
    fn one_warning_per_odd_node() {
        let odd = vec![
            mx("b", "io1", 5.0),
            mx("b", "io2", 2.0),
            mx("b", "io3", 1.0),
        ];
        let fine = vec![mx("b", "io1", 1.0), mx("b", "io2", 1.5)];
        let per = [
            (Metric::TIME, "deviations".to_string(), odd.clone()),
            (Metric::COUNT, "deviations".to_string(), odd.clone()),
            (Metric::SAMPLES, "deviations".to_string(), fine),
        ];
        let w = odd_nodes(&per);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("node io1 sets the thresholds of "),
            "{}",
            w[0]
        );
        assert!(w[0].contains("time") && w[0].contains("count"), "{}", w[0]);
        assert!(w[0].contains("2.5–2.5×"), "{}", w[0]);
        // One metric: the detailed warning.
        let w = odd_nodes(&per[..1]);
        assert_eq!(w, [odd_runs(Metric::TIME, "deviations", &odd).unwrap()]);
    }
}
