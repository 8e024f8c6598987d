//! `culprit train` and `culprit diagnose`: peer-comparison diagnosis (seed 000 §"Diagnosis").
//!
//! * [`model`] — metrics, components, intervals: the engine's input, independent of files;
//! * [`engine`] — windows, dimensionality rule, scoring, thresholds, k-of-(2k − 1) filter, root
//!   cause, streaming so that `--follow` and offline analysis are one code path;
//! * [`distance`], [`score`], [`filter`], [`thresholds`] — the pluggable pieces;
//! * [`combine`] — the combined verdict over metrics; [`missing`] — missing-data findings;
//! * [`adapter`] — data directories → engine; [`synth`] — generated data (tests, benchmark);
//! * [`output`] — the report, for people and as JSON (docs/diagnose-json.md).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};

pub mod adapter;
pub mod combine;
pub mod distance;
pub mod engine;
pub mod filter;
pub mod missing;
pub mod model;
pub mod output;
pub mod score;
pub mod synth;
pub mod thresholds;

use crate::data::{Dataset, FileStatus, LoadOptions};
use crate::timefmt::parse_duration_ns;
use adapter::{Adapter, Survey};
use distance::Distance;
use engine::{Engine, EngineConfig, KeepRule, MetricConfig, Spread, Weights, MIN_NODES};
use missing::Ending;
use model::{fmt_dur, CompLabel, MetricKind, NS_PER_S};
use score::{Peers, ScoreKind};
use thresholds::{
    trained_threshold, MetricThresholds, Policy, Settings, ThresholdRule, ThresholdsFile,
    Unsupervised, Weighting, WeightsFile, THRESHOLDS_FORMAT, THRESHOLDS_VERSION,
};

/// Grid of weighted thresholds (scores in typical deviations).
const WEIGHTED_QUANTUM: f64 = 1e-3;

/// Exit status when a culprit is found.
pub const EXIT_CULPRIT: i32 = 1;

/// Analysis options shared by `train` and `diagnose`. Options left unset take the value the
/// thresholds file was trained with, or the default.
#[derive(Debug, Clone, clap::Args)]
pub struct AnalysisArgs {
    /// Window size, WinSize (e.g. 60s, 2m, 500ms) [default: 60s]
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ns)]
    pub win_size: Option<u64>,
    /// Window shift, WinShift; windows start at multiples of it since the epoch [default: 30s]
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ns)]
    pub win_shift: Option<u64>,
    /// Faulty when anomalous in k of the last 2k−1 windows [default: 3]
    #[arg(long, value_name = "K")]
    pub k: Option<usize>,
    /// Distance between feature vectors [default: manhattan]
    #[arg(long, value_enum)]
    pub distance: Option<Distance>,
    /// Node score [default: median-node]
    #[arg(long, value_enum)]
    pub score: Option<ScoreKind>,
    /// Pairwise score: compare each node with a rotating analysis domain of N nodes (0: all
    /// nodes) [default: all up to 1000 nodes, else 10]
    #[arg(long, value_name = "N")]
    pub domain: Option<usize>,
    /// Keep a function if it has this many samples in a window on a node, counted at the
    /// reference rate of one sample per 50 µs of CPU (seed 000's 100,000 cycles at 2 GHz) and
    /// scaled to the recorded event and period [default: 100]
    #[arg(long, value_name = "N")]
    pub min_samples: Option<f64>,
    /// Keep a function if it has this much exclusive time in a window on a node (count uses the
    /// same rule) [default: 1s]
    #[arg(long, value_name = "DUR", value_parser = parse_duration_ns)]
    pub min_time: Option<u64>,
    /// Key functions by program too (compare per program instead of per node aggregate)
    #[arg(long)]
    pub by_program: bool,
    /// Weight each function by its fault-free variability, learned in training
    /// [default: variance when training]
    #[arg(long, value_enum)]
    pub weighting: Option<Weighting>,
    /// Metrics to analyse, comma-separated: samples,count,time,events [default: all with data]
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub metrics: Vec<String>,
    /// Only these nodes, comma-separated
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub nodes: Vec<String>,
    /// Read binaries under this directory instead of / (like perf report --symfs)
    #[arg(long, value_name = "DIR")]
    pub symfs: Option<PathBuf>,
}

/// Arguments of `culprit train`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  culprit train run1/ run2/ run3/ --out thresholds.json\n\n\
    Each DATA is the data root of one fault-free run (DATA/<node>/…). Per node and metric, the \
    threshold is the least integer leaving no window of any run anomalous, doubled (seed 000)."
)]
pub struct TrainArgs {
    /// Data roots of fault-free runs, one per run
    #[arg(required = true, value_name = "DATA")]
    pub data: Vec<PathBuf>,
    /// Where to write the thresholds
    #[arg(long, short, value_name = "FILE")]
    pub out: PathBuf,
    /// Print the thresholds as JSON
    #[arg(long)]
    pub json: bool,
    /// Which training score each threshold doubles
    #[arg(long, value_enum, default_value_t = ThresholdRule::Window)]
    pub threshold_rule: ThresholdRule,
    #[command(flatten)]
    pub analysis: AnalysisArgs,
}

/// Arguments of `culprit diagnose`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  culprit diagnose DATA/ --thresholds thresholds.json\n  \
    culprit diagnose DATA/ --json > report.json\n  culprit diagnose DATA/ --follow\n\n\
    Exit status: 0 no node flagged, 1 a faulty (or stopped) node found, 2 error."
)]
pub struct DiagnoseArgs {
    /// A data root (one directory per node in it) or node directories
    #[arg(required = true, value_name = "DATA")]
    pub data: Vec<PathBuf>,
    /// Trained thresholds (from `culprit train`); without them an unsupervised rule is used
    #[arg(long, value_name = "FILE")]
    pub thresholds: Option<PathBuf>,
    /// Print the report as JSON (schema: docs/diagnose-json.md)
    #[arg(long)]
    pub json: bool,
    /// Diagnose a run in progress: report each window as it closes, until every writer has
    /// ended (or --for elapses), then print the report
    #[arg(long)]
    pub follow: bool,
    /// With --follow: stop after this long
    #[arg(long = "for", value_name = "DUR", value_parser = parse_duration_ns)]
    pub for_: Option<u64>,
    /// Rows of each root-cause table
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub top: usize,
    /// Give each node the threshold trained on it (seed 000) instead of the largest of all
    /// nodes' (the default: peers are alike, and which one strays most in a few training runs
    /// is chance)
    #[arg(long)]
    pub per_node_thresholds: bool,
    #[command(flatten)]
    pub analysis: AnalysisArgs,
}

/// Defaults (DESIGN.md §"The diagnosis algorithm and its defaults").
const DEFAULT_WIN_SIZE: u64 = 60 * NS_PER_S;
const DEFAULT_WIN_SHIFT: u64 = 30 * NS_PER_S;
const DEFAULT_K: usize = 3;
const DEFAULT_MIN_SAMPLES: f64 = 100.0;
const DEFAULT_MIN_TIME_MS: f64 = 1000.0;
const DEFAULT_WEIGHTING: Weighting = Weighting::Variance;

/// Validated analysis settings.
#[derive(Debug, Clone)]
struct Config {
    settings: Settings,
    peers: Peers,
    metrics: Option<Vec<MetricKind>>,
    load: LoadOptions,
}

/// Turns raw options into settings, taking unset ones from the thresholds file, refusing ones
/// that contradict it.
fn resolve(a: &AnalysisArgs, file: Option<(&ThresholdsFile, &str)>) -> anyhow::Result<Config> {
    let trained = file.map(|(f, _)| &f.settings);
    fn pick<T: PartialEq + Clone + std::fmt::Debug>(
        given: Option<T>,
        trained: Option<T>,
        default: T,
        what: &str,
        show: impl Fn(&T) -> String,
        file: Option<&str>,
    ) -> anyhow::Result<T> {
        match (given, trained) {
            (Some(g), Some(t)) if g != t => bail!(
                "{}: thresholds were trained with {what} {}, not {}; diagnose with the same \
                 settings or train again",
                file.unwrap_or("thresholds"),
                show(&t),
                show(&g)
            ),
            (Some(g), _) => Ok(g),
            (None, Some(t)) => Ok(t),
            (None, None) => Ok(default),
        }
    }
    let fname = file.map(|(_, n)| n);
    let dur = |v: &u64| fmt_dur(*v);
    let settings = Settings {
        win_size_ns: pick(
            a.win_size,
            trained.map(|t| t.win_size_ns),
            DEFAULT_WIN_SIZE,
            "--win-size",
            dur,
            fname,
        )?,
        win_shift_ns: pick(
            a.win_shift,
            trained.map(|t| t.win_shift_ns),
            DEFAULT_WIN_SHIFT,
            "--win-shift",
            dur,
            fname,
        )?,
        k: pick(
            a.k,
            trained.map(|t| t.k),
            DEFAULT_K,
            "--k",
            |v| v.to_string(),
            fname,
        )?,
        score: pick(
            a.score,
            trained.map(|t| t.score),
            ScoreKind::MedianNode,
            "--score",
            |v| v.name().to_string(),
            fname,
        )?,
        distance: pick(
            a.distance,
            trained.map(|t| t.distance),
            Distance::Manhattan,
            "--distance",
            |v| v.name().to_string(),
            fname,
        )?,
        by_program: pick(
            a.by_program.then_some(true),
            trained.map(|t| t.by_program),
            false,
            "--by-program",
            |v| v.to_string(),
            fname,
        )?,
        min_samples: pick(
            a.min_samples,
            trained.map(|t| t.min_samples),
            DEFAULT_MIN_SAMPLES,
            "--min-samples",
            |v| v.to_string(),
            fname,
        )?,
        min_time_ms: pick(
            a.min_time.map(|ns| ns as f64 / 1e6),
            trained.map(|t| t.min_time_ms),
            DEFAULT_MIN_TIME_MS,
            "--min-time",
            |v| format!("{v} ms"),
            fname,
        )?,
        weighting: pick(
            a.weighting,
            trained.map(|t| t.weighting),
            DEFAULT_WEIGHTING,
            "--weighting",
            |v| v.name().to_string(),
            fname,
        )?,
    };
    let s = &settings;
    if s.win_shift_ns == 0 || s.win_size_ns == 0 {
        bail!("--win-size and --win-shift must be longer than zero");
    }
    if s.win_size_ns % s.win_shift_ns != 0 {
        bail!(
            "--win-size ({}) must be a multiple of --win-shift ({})",
            fmt_dur(s.win_size_ns),
            fmt_dur(s.win_shift_ns)
        );
    }
    if s.k == 0 {
        bail!("--k must be at least 1");
    }
    if !(s.min_samples >= 0.0 && s.min_samples.is_finite()) {
        bail!("--min-samples must be a non-negative number");
    }
    let peers = match a.domain {
        None => Peers::Auto,
        Some(0) => Peers::All,
        Some(n) if n < MIN_NODES => {
            bail!("--domain {n}: an analysis domain needs at least {MIN_NODES} nodes (0: all)")
        }
        Some(n) => Peers::Domain(n),
    };
    let metrics = if a.metrics.is_empty() {
        None
    } else {
        let mut v = Vec::new();
        for m in &a.metrics {
            match MetricKind::from_name(m.trim()) {
                Some(k) => v.push(k),
                None => bail!("--metrics: unknown metric `{m}` (use samples, count, time, events)"),
            }
        }
        Some(v)
    };
    Ok(Config {
        settings,
        peers,
        metrics,
        load: LoadOptions {
            include_unassigned: false,
            symfs: a.symfs.clone(),
            nodes: a.nodes.clone(),
        },
    })
}

fn peers_text(p: Peers, score: ScoreKind, nodes: usize) -> String {
    if score != ScoreKind::PairwiseMedian {
        return "n/a".to_string();
    }
    match p {
        Peers::All => "all".to_string(),
        Peers::Auto if nodes <= score::PAIRWISE_EXACT_MAX => "all".to_string(),
        Peers::Auto => format!("rotating domains of {}", score::DEFAULT_DOMAIN),
        Peers::Domain(n) if n >= nodes => "all".to_string(),
        Peers::Domain(n) => format!("rotating domains of {n}"),
    }
}

/// Metrics to report and metrics the engine runs (count needs time for its rule), in engine
/// order.
fn plan_metrics(
    survey: &Survey,
    requested: &Option<Vec<MetricKind>>,
    notes: &mut Vec<String>,
) -> anyhow::Result<(Vec<MetricKind>, Vec<MetricKind>)> {
    let available = |m: MetricKind| survey.slots.contains_key(&m);
    let reported: Vec<MetricKind> = match requested {
        Some(req) => {
            for m in req {
                if !available(*m) {
                    let how = match m {
                        MetricKind::Samples | MetricKind::Events => "run `culprit sample`",
                        _ => "run the servers under `culprit record` or with libculprit_rt.so",
                    };
                    notes.push(format!("no {m} data in the given directories ({how})"));
                }
            }
            MetricKind::ALL
                .into_iter()
                .filter(|m| req.contains(m) && available(*m))
                .collect()
        }
        None => MetricKind::ALL
            .into_iter()
            .filter(|m| available(*m))
            .collect(),
    };
    if reported.is_empty() {
        bail!("no data to compare in the given directories for the metrics asked for");
    }
    let order = [
        MetricKind::Samples,
        MetricKind::Time,
        MetricKind::Count,
        MetricKind::Events,
    ];
    let run: Vec<MetricKind> = order
        .into_iter()
        .filter(|m| {
            reported.contains(m)
                || (*m == MetricKind::Time && reported.contains(&MetricKind::Count))
        })
        .collect();
    Ok((reported, run))
}

/// Builds an engine for a dataset.
fn build_engine(
    cfg: &Config,
    survey: &Survey,
    run: &[MetricKind],
    mut policy: impl FnMut(MetricKind) -> (Policy, Option<Weights>),
    notes: &mut Vec<String>,
) -> anyhow::Result<Engine> {
    let s = &cfg.settings;
    let mut metrics = Vec::new();
    for &m in run {
        let coarsest = survey.coarsest[&m];
        if s.win_shift_ns % coarsest != 0 {
            bail!(
                "--win-shift {} is not a multiple of the {m} record interval ({}); windows \
                 must be made of whole records: use a multiple of {}",
                fmt_dur(s.win_shift_ns),
                fmt_dur(coarsest),
                fmt_dur(coarsest)
            );
        }
        let (min_samples, note) = adapter::samples_rule(s.min_samples, survey.sampling.as_ref());
        if m == MetricKind::Samples {
            notes.extend(note);
        }
        let (policy, weights) = policy(m);
        metrics.push(MetricConfig {
            kind: m,
            slot_ns: survey.slots[&m],
            lag_ns: coarsest + coarsest.max(NS_PER_S),
            keep: Adapter::keep_rule(m, min_samples, s.min_time_ms),
            policy,
            weights,
        });
    }
    Ok(Engine::new(
        EngineConfig {
            win_size_ns: s.win_size_ns,
            win_shift_ns: s.win_shift_ns,
            k: s.k,
            distance: s.distance,
            score: s.score,
            peers: cfg.peers,
        },
        metrics,
    ))
}

fn check_nodes(ds: &Dataset, what: &str, notes: &mut Vec<String>) -> anyhow::Result<()> {
    let names: Vec<&str> = ds.nodes.iter().map(|n| n.name.as_str()).collect();
    if names.len() < MIN_NODES {
        bail!(
            "{what}: peer comparison needs at least {MIN_NODES} nodes and is meant for 4 or \
             more; found {} ({})",
            names.len(),
            names.join(", ")
        );
    }
    if names.len() == MIN_NODES {
        notes.push(format!(
            "only {MIN_NODES} nodes: each node's peers are two, so the comparison is fragile; \
             peer comparison is meant for 4 or more nodes"
        ));
    }
    Ok(())
}

/// How a node's data ended, from its files.
fn ending_of(ds: &Dataset, node: &str) -> Ending {
    let Some(n) = ds.nodes.iter().find(|n| n.name == node) else {
        return Ending::Unknown;
    };
    let statuses = n
        .traces
        .iter()
        .map(|t| &t.status)
        .chain(n.samples.iter().map(|s| &s.status));
    let mut out = Ending::Clean;
    for st in statuses {
        match st {
            FileStatus::Damaged(_) => return Ending::Damaged,
            FileStatus::Open => out = Ending::NoEndMarker,
            FileStatus::Ended => {}
        }
    }
    out
}

/// Labels of the functions in a dataset's records for metric `m`.
fn data_labels(ds: &Dataset, m: MetricKind, by_program: bool) -> HashSet<CompLabel> {
    let mut out = HashSet::new();
    let label = |prog: u32, func: u32| {
        let k = ds.names.funcs.get(func);
        CompLabel {
            program: by_program.then(|| ds.names.programs.get(prog).clone()),
            image: Some(k.image.clone()),
            name: k.function.clone(),
        }
    };
    for node in &ds.nodes {
        match m {
            MetricKind::Count | MetricKind::Time => {
                for t in &node.traces {
                    for iv in &t.intervals {
                        for e in &iv.entries {
                            out.insert(label(t.program, e.func));
                        }
                    }
                }
            }
            MetricKind::Samples => {
                for f in &node.samples {
                    for iv in &f.intervals {
                        for e in &iv.entries {
                            out.insert(label(e.program, e.func));
                        }
                    }
                }
            }
            MetricKind::Events => {
                for f in &node.samples {
                    for iv in &f.events {
                        for (ev, _) in &iv.counts {
                            out.insert(CompLabel {
                                program: None,
                                image: None,
                                name: ds.names.events.get(*ev).clone(),
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// Offline feeding chunk: bounds the buckets held at once.
fn chunk(cfg: &Config) -> u64 {
    16 * cfg.settings.win_shift_ns
}

fn wall_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// A training run: its path, data and survey.
type TrainingRun = (PathBuf, Dataset, Survey);
/// A training run's plan: path, metrics reported, metrics run.
type TrainingPlan<'a> = (&'a PathBuf, Vec<MetricKind>, Vec<MetricKind>);

/// Scores every window of every training run with the kept set from the start (as diagnose will
/// use it) and the given weights: per metric, each node's largest score, and each kept
/// component's spread around the median node.
#[allow(clippy::type_complexity)]
fn score_training(
    cfg: &Config,
    runs: &[TrainingRun],
    plans: &[TrainingPlan<'_>],
    kept: &BTreeMap<MetricKind, Vec<CompLabel>>,
    weights: &BTreeMap<MetricKind, Weights>,
    notes: &mut Vec<String>,
) -> anyhow::Result<(
    BTreeMap<MetricKind, MetricThresholds>,
    BTreeMap<MetricKind, HashMap<CompLabel, Spread>>,
)> {
    let mut out_metrics: BTreeMap<MetricKind, MetricThresholds> = BTreeMap::new();
    let mut spreads: BTreeMap<MetricKind, HashMap<CompLabel, Spread>> = BTreeMap::new();
    let weighted = !weights.is_empty();
    for ((path, ds, survey), (_, reported, run)) in runs.iter().zip(plans) {
        let mut e = build_engine(
            cfg,
            survey,
            run,
            |m| (Policy::Training, weights.get(&m).cloned()),
            notes,
        )?;
        for (mi, m) in run.iter().enumerate() {
            if let Some(k) = kept.get(m) {
                e.seed_kept(mi, k);
            }
        }
        Adapter::new(cfg.settings.by_program).feed(ds, &mut e, Some(chunk(cfg)))?;
        e.advance(None);
        for m in &e.metrics {
            if !reported.contains(&m.cfg.kind) {
                continue;
            }
            let kind = m.cfg.kind;
            let sp = spreads.entry(kind).or_default();
            for &c in &m.kept_list {
                let s = m.spread[c as usize];
                let acc = sp.entry(m.comps[c as usize].clone()).or_default();
                acc.dev_sum += s.dev_sum;
                acc.level_sum += s.level_sum;
                acc.n += s.n;
                acc.windows += s.windows;
            }
            let entry = out_metrics.entry(kind).or_insert_with(|| MetricThresholds {
                unit: score_unit(cfg.settings.distance, weighted, kind).to_string(),
                recording: survey.recording(kind),
                kept: kept.get(&kind).cloned().unwrap_or_default(),
                thresholds: BTreeMap::new(),
                max_scores: BTreeMap::new(),
                flag_scores: BTreeMap::new(),
                windows: 0,
                weights: None,
            });
            entry.windows += m.windows - m.unscored;
            if m.windows == m.unscored {
                notes.push(format!(
                    "{}: no {kind} window had {MIN_NODES} nodes with complete data; the run is \
                     too short for windows of {}",
                    path.display(),
                    fmt_dur(cfg.settings.win_size_ns)
                ));
            }
            for (n, nm) in m.nodes.iter().enumerate() {
                if nm.scored == 0 {
                    continue;
                }
                let name = e.name(n).to_string();
                let fs = entry.flag_scores.entry(name.clone()).or_insert(0.0);
                *fs = fs.max(nm.flag_score);
                let ms = entry.max_scores.entry(name).or_insert(0.0);
                *ms = ms.max(nm.max_score);
            }
        }
    }
    Ok((out_metrics, spreads))
}

/// Unit of a metric's scores and thresholds.
pub fn score_unit(distance: Distance, weighted: bool, m: MetricKind) -> &'static str {
    match distance {
        Distance::Manhattan | Distance::Scaled if weighted => thresholds::WEIGHTED_UNIT,
        d => d.unit(m.unit()),
    }
}

/// Runs `culprit train`.
pub fn run_train(args: TrainArgs) -> anyhow::Result<i32> {
    let cfg = resolve(&args.analysis, None)?;
    let mut notes = Vec::new();
    // Each DATA is one run: windows never span runs.
    let mut runs = Vec::new();
    for p in &args.data {
        let ds = Dataset::open(std::slice::from_ref(p), cfg.load.clone())
            .with_context(|| format!("training run {}", p.display()))?;
        check_nodes(&ds, &p.display().to_string(), &mut notes)?;
        let survey = adapter::survey(&ds)?;
        runs.push((p.clone(), ds, survey));
    }
    // All runs must be recorded alike.
    let sampling: HashSet<_> = runs.iter().filter_map(|r| r.2.sampling.clone()).collect();
    if sampling.len() > 1 {
        let list: Vec<String> = sampling.iter().map(adapter::describe_sampling).collect();
        bail!(
            "training runs were sampled differently ({}); train on runs recorded alike",
            list.join("; ")
        );
    }
    // Pass 1: the kept function set over all runs. Pass 2: scores with that set from the start,
    // as diagnose will use it.
    let mut kept: BTreeMap<MetricKind, Vec<CompLabel>> = BTreeMap::new();
    let mut plans = Vec::new();
    for (path, ds, survey) in &runs {
        let (reported, run) = plan_metrics(survey, &cfg.metrics, &mut notes)?;
        let mut e = build_engine(&cfg, survey, &run, |_| (Policy::Training, None), &mut notes)?;
        Adapter::new(cfg.settings.by_program).feed(ds, &mut e, Some(chunk(&cfg)))?;
        e.advance(None);
        for m in &e.metrics {
            let set = kept.entry(m.cfg.kind).or_default();
            for l in m.kept_labels() {
                if !set.contains(&l) {
                    set.push(l);
                }
            }
        }
        plans.push((path, reported, run));
    }
    let no_weights = BTreeMap::new();
    let (mut out_metrics, spreads) =
        score_training(&cfg, &runs, &plans, &kept, &no_weights, &mut notes)?;
    // Variance weighting: scales from the unweighted pass, then a pass 3 scoring with them.
    if cfg.settings.weighting == Weighting::Variance {
        let files: BTreeMap<MetricKind, WeightsFile> = spreads
            .iter()
            .map(|(&m, sp)| {
                let v: Vec<(CompLabel, Spread)> = sp.iter().map(|(l, s)| (l.clone(), *s)).collect();
                (m, WeightsFile::from_spreads(&v, m.resolution()))
            })
            .collect();
        let weights: BTreeMap<MetricKind, Weights> =
            files.iter().map(|(&m, f)| (m, f.weights())).collect();
        let mut quiet = Vec::new();
        (out_metrics, _) = score_training(&cfg, &runs, &plans, &kept, &weights, &mut quiet)?;
        for (m, t) in out_metrics.iter_mut() {
            t.weights = files.get(m).cloned();
        }
    }
    let quantum = match cfg.settings.weighting {
        Weighting::Variance => WEIGHTED_QUANTUM,
        Weighting::None => cfg.settings.distance.threshold_quantum(),
    };
    for t in out_metrics.values_mut() {
        let basis = match args.threshold_rule {
            ThresholdRule::Flagged => &t.flag_scores,
            ThresholdRule::Window => &t.max_scores,
        };
        t.thresholds = basis
            .iter()
            .map(|(n, &s)| (n.clone(), trained_threshold(s, quantum)))
            .collect();
    }
    out_metrics.retain(|_, t| !t.thresholds.is_empty());
    if out_metrics.is_empty() {
        bail!(
            "no window could be scored in the training runs (need {MIN_NODES} nodes with \
             complete data over a window of {}); record longer runs or use shorter windows",
            fmt_dur(cfg.settings.win_size_ns)
        );
    }
    let file = ThresholdsFile {
        format: THRESHOLDS_FORMAT.to_string(),
        version: THRESHOLDS_VERSION,
        runs: args.data.iter().map(|p| p.display().to_string()).collect(),
        settings: cfg.settings.clone(),
        metrics: out_metrics,
    };
    file.save(&args.out)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &file)?;
        writeln!(out)?;
        return Ok(0);
    }
    writeln!(
        out,
        "culprit train: {} run(s); windows {} every {}; score {}, distance {}, weighting {}, \
         threshold rule {}",
        file.runs.len(),
        fmt_dur(cfg.settings.win_size_ns),
        fmt_dur(cfg.settings.win_shift_ns),
        cfg.settings.score.name(),
        cfg.settings.distance.name(),
        cfg.settings.weighting.name(),
        args.threshold_rule.name()
    )?;
    for (m, t) in &file.metrics {
        let list: Vec<String> = t
            .thresholds
            .iter()
            .map(|(n, v)| format!("{n} {v}"))
            .collect();
        writeln!(
            out,
            "{m}: {} functions kept, {} windows; thresholds ({}): {}",
            t.kept.len(),
            t.windows,
            t.unit,
            list.join(", ")
        )?;
    }
    for n in dedup(notes) {
        writeln!(out, "note: {n}")?;
    }
    writeln!(out, "wrote {}", args.out.display())?;
    Ok(0)
}

fn dedup(v: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    v.into_iter().filter(|s| seen.insert(s.clone())).collect()
}

/// A note for each metric that kept no function at all although windows were scored: every
/// score was then zero, and "no node flagged" would only mean that nothing was compared (short
/// windows that no function fills up to the keep rule's minimum).
fn nothing_kept_notes(engine: &Engine, cfg: &Config, notes: &mut Vec<String>) {
    for m in &engine.metrics {
        if m.windows == m.unscored || !m.kept_list.is_empty() {
            continue;
        }
        let (min, flag) = match (m.cfg.kind, &m.cfg.keep) {
            (MetricKind::Samples, KeepRule::AtLeast(v)) => {
                (format!("{v} samples"), "--min-samples")
            }
            (MetricKind::Time | MetricKind::Count, _) => (
                format!(
                    "{} of self time",
                    fmt_dur((cfg.settings.min_time_ms * 1e6) as u64)
                ),
                "--min-time",
            ),
            _ => continue,
        };
        notes.push(format!(
            "{}: no function reached {min} in a window on any node, so nothing was compared \
             and no node can be flagged on {}; lower {flag}, or use windows longer than {}",
            m.cfg.kind,
            m.cfg.kind,
            fmt_dur(cfg.settings.win_size_ns)
        ));
    }
}

/// Runs `culprit diagnose`.
pub fn run_diagnose(args: DiagnoseArgs) -> anyhow::Result<i32> {
    let file = match &args.thresholds {
        Some(p) => Some(ThresholdsFile::load(p)?),
        None => None,
    };
    let fname = args.thresholds.as_ref().map(|p| p.display().to_string());
    let cfg = resolve(&args.analysis, file.as_ref().zip(fname.as_deref()))?;
    let mut notes = Vec::new();
    if file.is_none() && args.analysis.weighting == Some(Weighting::Variance) {
        notes.push(
            "--weighting variance needs trained thresholds (the scales are learned by `culprit \
             train`); without them functions are compared unweighted"
                .to_string(),
        );
    }
    let mut ds = open_dataset(&args, &cfg)?;
    check_nodes(&ds, "diagnose", &mut notes)?;
    let survey = adapter::survey(&ds)?;
    let (reported, run) = plan_metrics(&survey, &cfg.metrics, &mut notes)?;
    for &m in &reported {
        let with = ds
            .nodes
            .iter()
            .filter(|n| match m {
                MetricKind::Count | MetricKind::Time => !n.traces.is_empty(),
                _ => !n.samples.is_empty(),
            })
            .count();
        if with < MIN_NODES {
            notes.push(format!(
                "{m}: only {with} node(s) have data; peer comparison needs {MIN_NODES}"
            ));
        }
    }
    // Trained thresholds, checked against the data.
    let mut policies: HashMap<MetricKind, Policy> = HashMap::new();
    if let (Some(f), Some(name)) = (&file, &fname) {
        for &m in &run {
            let Some(t) = f.metrics.get(&m) else {
                if reported.contains(&m) {
                    notes.push(format!(
                        "{name} has no trained thresholds for {m}: {m} uses the unsupervised rule"
                    ));
                }
                continue;
            };
            let unit = score_unit(cfg.settings.distance, t.weights.is_some(), m);
            if t.unit != unit {
                bail!(
                    "{name}: {m} thresholds are in {}, this analysis scores in {unit}",
                    t.unit
                );
            }
            let rec = survey.recording(m);
            if m == MetricKind::Samples
                && (rec.event != t.recording.event
                    || rec.period != t.recording.period
                    || rec.freq != t.recording.freq)
            {
                let show = |r: &thresholds::Recording| match (&r.event, r.period) {
                    (Some(e), Some(p)) => adapter::describe_sampling(&(e.clone(), p, r.freq)),
                    _ => "unknown".to_string(),
                };
                bail!(
                    "{name}: thresholds were trained on samples taken with {}; this data was \
                     sampled with {}: sample again with the trained settings, or train on data \
                     sampled like this",
                    show(&t.recording),
                    show(&rec)
                );
            }
            if !t.kept.is_empty() {
                let seen = data_labels(&ds, m, cfg.settings.by_program);
                let found = t.kept.iter().filter(|l| seen.contains(l)).count();
                if found == 0 {
                    bail!(
                        "{name}: none of the {} functions the {m} thresholds were trained on \
                         appear in this data (trained on another program or build?); train on \
                         fault-free runs of the programs diagnosed here",
                        t.kept.len()
                    );
                }
                if found * 2 < t.kept.len() {
                    notes.push(format!(
                        "{m}: only {found} of the {} trained functions appear in this data; the \
                         workload may differ from training",
                        t.kept.len()
                    ));
                }
            }
            let fallback = t.largest();
            if !args.per_node_thresholds {
                // Pooled: seed 000 §"Threshold selection" keeps one threshold per server, but
                // the servers it compares are alike, and in our fault-free runs which node
                // strayed most changed from run to run (docs/thresholds.md): a node's own
                // maximum over a few training runs is a sample of one, the largest over all
                // nodes is the expected deviation of any of them.
                policies.insert(
                    m,
                    Policy::Trained {
                        by_node: HashMap::new(),
                        fallback,
                    },
                );
                continue;
            }
            for node in &ds.nodes {
                if !t.thresholds.contains_key(&node.name) && reported.contains(&m) {
                    notes.push(format!(
                        "{} has no trained {m} threshold of its own: the metric's largest ({} {}) \
                         is used",
                        node.name, fallback, t.unit
                    ));
                }
            }
            policies.insert(
                m,
                Policy::Trained {
                    by_node: t.thresholds.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                    fallback,
                },
            );
        }
    }
    let rule = Unsupervised::default();
    let mut engine = build_engine(
        &cfg,
        &survey,
        &run,
        |m| {
            let weights = file
                .as_ref()
                .and_then(|f| f.metrics.get(&m))
                .and_then(|t| t.weights.as_ref())
                .map(|w| w.weights());
            match policies.remove(&m) {
                Some(p) => (p, weights),
                None => (Policy::Untrained(rule), None),
            }
        },
        &mut notes,
    )?;
    if let Some(f) = &file {
        for (mi, m) in run.iter().enumerate() {
            if let Some(t) = f.metrics.get(m) {
                engine.seed_kept(mi, &t.kept);
            }
        }
    }
    let mut adapter = Adapter::new(cfg.settings.by_program);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.follow {
        follow(
            &args,
            &cfg,
            &survey,
            &mut ds,
            &mut engine,
            &mut adapter,
            &mut out,
        )?;
    } else {
        adapter.feed(&ds, &mut engine, Some(chunk(&cfg)))?;
        engine.advance(None);
    }
    for m in &engine.metrics {
        if m.late > 0 {
            notes.push(format!(
                "{}: {} interval(s) arrived after their window had closed and were left out",
                m.cfg.kind, m.late
            ));
        }
    }
    nothing_kept_notes(&engine, &cfg, &mut notes);
    let coarsest = survey.coarsest.values().copied().max().unwrap_or(NS_PER_S);
    let grace = missing::grace(cfg.settings.win_shift_ns, coarsest);
    let findings = missing::findings(&engine, &reported, grace, |n| ending_of(&ds, n));
    let report = output::build(
        &engine,
        output::ReportInput {
            data: args.data.iter().map(|p| p.display().to_string()).collect(),
            thresholds_file: fname,
            reported: &reported,
            findings,
            notes: dedup(notes),
            warnings: ds.warnings.clone(),
            top: args.top,
            peers: peers_text(cfg.peers, cfg.settings.score, engine.names().len()),
            by_program: cfg.settings.by_program,
        },
    );
    if args.json && args.follow {
        // After the window events' JSON lines: the report on one line too.
        serde_json::to_writer(&mut out, &report)?;
        writeln!(out)?;
    } else if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        output::print_human(&report, &mut out)?;
    }
    out.flush()?;
    Ok(if report.culprits.is_empty() {
        0
    } else {
        EXIT_CULPRIT
    })
}

/// Opens the data. With `--follow` the run may have just started: wait (up to `--for`) until
/// at least [`MIN_NODES`] nodes have written a record.
fn open_dataset(args: &DiagnoseArgs, cfg: &Config) -> anyhow::Result<Dataset> {
    if !args.follow {
        return Dataset::open(&args.data, cfg.load.clone());
    }
    let started = Instant::now();
    let limit = Duration::from_nanos(args.for_.unwrap_or(u64::MAX));
    let mut ds: Option<Dataset> = None;
    loop {
        let ready = match ds.as_mut() {
            Some(d) => {
                d.refresh()?;
                let with_records = d
                    .nodes
                    .iter()
                    .filter(|n| {
                        n.traces.iter().any(|t| !t.intervals.is_empty())
                            || n.samples
                                .iter()
                                .any(|s| !s.intervals.is_empty() || !s.events.is_empty())
                    })
                    .count();
                with_records >= MIN_NODES
            }
            None => {
                ds = Dataset::open(&args.data, cfg.load.clone()).ok();
                false
            }
        };
        if ready {
            return Ok(ds.expect("ready implies opened"));
        }
        if started.elapsed() >= limit {
            // Say what is wrong the way the offline path would.
            return match ds {
                Some(d) => Ok(d),
                None => Dataset::open(&args.data, cfg.load.clone()),
            };
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `--follow`: the offline path, fed after each refresh of the dataset.
fn follow(
    args: &DiagnoseArgs,
    cfg: &Config,
    survey: &Survey,
    ds: &mut Dataset,
    engine: &mut Engine,
    adapter: &mut Adapter,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let finest = survey.slots.values().copied().min().unwrap_or(NS_PER_S);
    let poll = Duration::from_nanos((finest / 4).clamp(20_000_000, 1_000_000_000));
    if !args.json {
        writeln!(
            out,
            "following {} node(s); windows of {} every {}; a window is reported when every \
             live writer has data past its end",
            ds.nodes.len(),
            fmt_dur(cfg.settings.win_size_ns),
            fmt_dur(cfg.settings.win_shift_ns)
        )?;
    }
    loop {
        adapter.feed(ds, engine, None)?;
        let events = engine.advance(Some(wall_now_ns()));
        print_events(args.json, engine, &events, out)?;
        out.flush()?;
        let all_ended = ds.nodes.iter().all(|n| {
            n.traces.iter().all(|t| t.status != FileStatus::Open)
                && n.samples.iter().all(|s| s.status != FileStatus::Open)
        });
        let timed_out = args
            .for_
            .is_some_and(|d| started.elapsed() >= Duration::from_nanos(d));
        if all_ended || timed_out {
            break;
        }
        std::thread::sleep(poll);
        ds.refresh()?;
    }
    adapter.feed(ds, engine, None)?;
    let events = engine.advance(None);
    print_events(args.json, engine, &events, out)?;
    if !args.json {
        writeln!(out)?;
    }
    Ok(())
}

fn print_events(
    json: bool,
    engine: &Engine,
    events: &[engine::WindowEvent],
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    for ev in events {
        if json {
            serde_json::to_writer(&mut *out, &output::event_json(engine, ev))?;
            writeln!(out)?;
        } else {
            output::print_event(engine, ev, out)?;
        }
    }
    Ok(())
}
