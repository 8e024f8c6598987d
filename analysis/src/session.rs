//! A diagnosis from settings to [`Diagnosis`]: the settings resolved against a thresholds file
//! ([`Setup::resolve`]), the data surveyed, the metrics planned, trained thresholds checked
//! against the data, the analyzer fed — offline in one pass, or following a run in progress
//! ([`Follow`]) through the same code — and the report built.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::analyzer::{Analyzer, AnalyzerConfig, MetricConfig, Outcome, MIN_NODES};
use crate::data::{Dataset, DirSource, FileStatus, LoadOptions, NodeData, Source};
use crate::diagnosis::{ClosedWindow, Diagnosis, ReportInput};
use crate::distance::Distance;
use crate::error::{Error, Result};
use crate::family::{self, KeepSettings, Metric, MetricFamily, Windows};
use crate::feed::{self, Feeder, Survey};
use crate::missing::{self, Ending};
use crate::policy::{Policy, Unsupervised, Weights};
use crate::score::{Peers, ScoreKind, DEFAULT_DOMAIN, PAIRWISE_EXACT_MAX};
use crate::thresholds::{Settings, ThresholdsFile, Weighting};
use crate::time::{fmt_dur, NS_PER_S};

/// Default WinSize (seed 000).
pub const DEFAULT_WIN_SIZE: u64 = 60 * NS_PER_S;
/// Default WinShift (seed 000).
pub const DEFAULT_WIN_SHIFT: u64 = 30 * NS_PER_S;
/// Default k of the k-of-(2k − 1) filter (seed 000).
pub const DEFAULT_K: usize = 3;
/// Default samples dimensionality rule, samples per window at the reference rate (seed 000).
pub const DEFAULT_MIN_SAMPLES: f64 = 100.0;
/// Default time dimensionality rule, ms of exclusive time per window (seed 000).
pub const DEFAULT_MIN_TIME_MS: f64 = 1000.0;
/// Default weighting (docs/thresholds.md says why).
pub const DEFAULT_WEIGHTING: Weighting = Weighting::Variance;

/// Analysis options as given; unset ones take the value a thresholds file was trained with,
/// or the default.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    /// WinSize, ns.
    pub win_size_ns: Option<u64>,
    /// WinShift, ns.
    pub win_shift_ns: Option<u64>,
    /// k.
    pub k: Option<usize>,
    /// Distance.
    pub distance: Option<Distance>,
    /// Score.
    pub score: Option<ScoreKind>,
    /// Pairwise analysis domain size (0: all nodes).
    pub domain: Option<usize>,
    /// Samples dimensionality rule, at the reference rate.
    pub min_samples: Option<f64>,
    /// Time dimensionality rule, ns.
    pub min_time_ns: Option<u64>,
    /// Key functions by program.
    pub by_program: bool,
    /// Variance weighting.
    pub weighting: Option<Weighting>,
    /// Metrics to analyse, by name (empty: all with data).
    pub metrics: Vec<String>,
    /// Only these nodes (empty: all).
    pub nodes: Vec<String>,
    /// Read binaries under this directory instead of `/`.
    pub symfs: Option<PathBuf>,
}

/// A thresholds file and the name it is known by in messages (its path).
#[derive(Clone, Debug)]
pub struct TrainedThresholds {
    /// The file.
    pub file: ThresholdsFile,
    /// Its name.
    pub name: String,
}

impl TrainedThresholds {
    /// Reads and validates the thresholds file at `path`.
    pub fn load(path: &std::path::Path) -> Result<Self> {
        Ok(TrainedThresholds {
            file: ThresholdsFile::load(path)?,
            name: path.display().to_string(),
        })
    }
}

/// Validated analysis settings.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Settings (recorded with trained thresholds).
    pub settings: Settings,
    /// Peers of the pairwise score.
    pub peers: Peers,
    /// Metrics asked for (`None`: all with data).
    pub metrics: Option<Vec<Metric>>,
    /// What to load.
    pub load: LoadOptions,
    /// The metric families.
    pub families: Vec<Arc<dyn MetricFamily>>,
    /// Things the user should know about the settings.
    pub notes: Vec<String>,
}

/// An option given and the value trained: the given one unless they differ.
fn pick<T: PartialEq + Clone>(
    given: Option<T>,
    trained: Option<T>,
    default: T,
    what: &str,
    show: impl Fn(&T) -> String,
    file: Option<&str>,
) -> Result<T> {
    match (given, trained) {
        (Some(g), Some(t)) if g != t => Err(Error::Settings(format!(
            "{}: thresholds were trained with {what} {}, not {}; diagnose with the same \
             settings or train again",
            file.unwrap_or("thresholds"),
            show(&t),
            show(&g)
        ))),
        (Some(g), _) => Ok(g),
        (None, Some(t)) => Ok(t),
        (None, None) => Ok(default),
    }
}

impl Setup {
    /// Turns options into settings, taking unset ones from the thresholds file and refusing
    /// ones that contradict it.
    pub fn resolve(o: &Overrides, trained: Option<&TrainedThresholds>) -> Result<Setup> {
        let t = trained.map(|t| &t.file.settings);
        let f = trained.map(|t| t.name.as_str());
        let dur = |v: &u64| fmt_dur(*v);
        let num = |v: &f64| v.to_string();
        let settings = Settings {
            win_size_ns: pick(
                o.win_size_ns,
                t.map(|t| t.win_size_ns),
                DEFAULT_WIN_SIZE,
                "--win-size",
                dur,
                f,
            )?,
            win_shift_ns: pick(
                o.win_shift_ns,
                t.map(|t| t.win_shift_ns),
                DEFAULT_WIN_SHIFT,
                "--win-shift",
                dur,
                f,
            )?,
            k: pick(o.k, t.map(|t| t.k), DEFAULT_K, "--k", |v| v.to_string(), f)?,
            score: pick(
                o.score,
                t.map(|t| t.score),
                ScoreKind::MedianNode,
                "--score",
                |v| v.name().to_string(),
                f,
            )?,
            distance: pick(
                o.distance,
                t.map(|t| t.distance),
                Distance::Manhattan,
                "--distance",
                |v| v.name().to_string(),
                f,
            )?,
            by_program: pick(
                o.by_program.then_some(true),
                t.map(|t| t.by_program),
                false,
                "--by-program",
                |v| v.to_string(),
                f,
            )?,
            min_samples: pick(
                o.min_samples,
                t.map(|t| t.min_samples),
                DEFAULT_MIN_SAMPLES,
                "--min-samples",
                num,
                f,
            )?,
            min_time_ms: pick(
                o.min_time_ns.map(|ns| ns as f64 / 1e6),
                t.map(|t| t.min_time_ms),
                DEFAULT_MIN_TIME_MS,
                "--min-time",
                |v| format!("{v} ms"),
                f,
            )?,
            weighting: pick(
                o.weighting,
                t.map(|t| t.weighting),
                DEFAULT_WEIGHTING,
                "--weighting",
                |v| v.name().to_string(),
                f,
            )?,
        };
        let s = &settings;
        let bad = |m: String| Err(Error::Settings(m));
        if s.win_shift_ns == 0 || s.win_size_ns == 0 {
            return bad("--win-size and --win-shift must be longer than zero".into());
        }
        if s.win_size_ns % s.win_shift_ns != 0 {
            return bad(format!(
                "--win-size ({}) must be a multiple of --win-shift ({})",
                fmt_dur(s.win_size_ns),
                fmt_dur(s.win_shift_ns)
            ));
        }
        if s.k == 0 {
            return bad("--k must be at least 1".into());
        }
        if !(s.min_samples >= 0.0 && s.min_samples.is_finite()) {
            return bad("--min-samples must be a non-negative number".into());
        }
        let peers = match o.domain {
            None => Peers::Auto,
            Some(0) => Peers::All,
            Some(n) if n < MIN_NODES => {
                return bad(format!(
                    "--domain {n}: an analysis domain needs at least {MIN_NODES} nodes (0: all)"
                ))
            }
            Some(n) => Peers::Domain(n),
        };
        let families = family::builtin::all();
        let metrics = if o.metrics.is_empty() {
            None
        } else {
            let mut v = Vec::new();
            for m in &o.metrics {
                match families.iter().find(|f| f.metric().name() == m.trim()) {
                    Some(f) => v.push(f.metric()),
                    None => {
                        return bad(format!(
                            "--metrics: unknown metric `{m}` (use samples, count, time, events)"
                        ))
                    }
                }
            }
            Some(v)
        };
        let mut notes = Vec::new();
        if trained.is_none() && o.weighting == Some(Weighting::Variance) {
            notes.push(
                "--weighting variance needs trained thresholds (the scales are learned by \
                 `culprit train`); without them functions are compared unweighted"
                    .to_string(),
            );
        }
        Ok(Setup {
            settings,
            peers,
            metrics,
            load: LoadOptions {
                include_unassigned: false,
                symfs: o.symfs.clone(),
                nodes: o.nodes.clone(),
            },
            families,
            notes,
        })
    }

    /// The family of `metric`.
    pub(crate) fn family(&self, metric: Metric) -> &Arc<dyn MetricFamily> {
        self.families
            .iter()
            .find(|f| f.metric() == metric)
            .expect("planned metrics have families")
    }

    /// `all`, `rotating domains of N` or `n/a`: whom the pairwise score compares a node with.
    pub fn peers_text(&self, nodes: usize) -> String {
        if self.settings.score != ScoreKind::PairwiseMedian {
            return "n/a".to_string();
        }
        match self.peers {
            Peers::All => "all".to_string(),
            Peers::Auto if nodes <= PAIRWISE_EXACT_MAX => "all".to_string(),
            Peers::Auto => format!("rotating domains of {DEFAULT_DOMAIN}"),
            Peers::Domain(n) if n >= nodes => "all".to_string(),
            Peers::Domain(n) => format!("rotating domains of {n}"),
        }
    }

    /// Offline feeding chunk: bounds the buckets held at once.
    pub(crate) fn chunk_ns(&self) -> u64 {
        16 * self.settings.win_shift_ns
    }
}

/// The metrics of an analysis.
#[derive(Clone, Debug)]
pub(crate) struct MetricPlan {
    /// Metrics to report, in report order.
    pub(crate) reported: Vec<Metric>,
    /// Metrics to run: the reported ones and those whose kept set they follow, each after the
    /// one it follows.
    pub(crate) run: Vec<Metric>,
}

/// Plans the metrics of an analysis of data described by `survey`.
pub(crate) fn plan_metrics(
    setup: &Setup,
    survey: &Survey,
    notes: &mut Vec<String>,
) -> Result<MetricPlan> {
    let available = |m: Metric| survey.slots.contains_key(&m);
    let all: Vec<Metric> = setup.families.iter().map(|f| f.metric()).collect();
    let reported: Vec<Metric> = match &setup.metrics {
        Some(req) => {
            for &m in req {
                if !available(m) {
                    let how = setup.family(m).how_to_record();
                    notes.push(format!("no {m} data in the given directories ({how})"));
                }
            }
            all.iter()
                .copied()
                .filter(|m| req.contains(m) && available(*m))
                .collect()
        }
        None => all.iter().copied().filter(|m| available(*m)).collect(),
    };
    if reported.is_empty() {
        return Err(Error::Data(
            "no data to compare in the given directories for the metrics asked for".into(),
        ));
    }
    let keep = KeepSettings {
        min_samples: 0.0,
        min_time_ms: 0.0,
    };
    let mut run: Vec<Metric> = Vec::new();
    for &m in &reported {
        if let Some(driver) = setup.family(m).keep_rule(&keep).follows() {
            if !run.contains(&driver) {
                run.push(driver);
            }
        }
        if !run.contains(&m) {
            run.push(m);
        }
    }
    Ok(MetricPlan { reported, run })
}

/// The dimensionality settings in this data (the samples rule scaled to its sampling rate),
/// and the note when the rate is unknown.
pub(crate) fn keep_settings(setup: &Setup, survey: &Survey) -> (KeepSettings, Option<String>) {
    let rule = feed::samples_rule(setup.settings.min_samples, survey.sampling.as_ref());
    let keep = KeepSettings {
        min_samples: rule.min_samples,
        min_time_ms: setup.settings.min_time_ms,
    };
    (keep, rule.note)
}

/// Builds an analyzer for data described by `survey`, `policy` giving each metric's policy and
/// weights.
pub(crate) fn build_analyzer(
    setup: &Setup,
    survey: &Survey,
    run: &[Metric],
    keep_scores: bool,
    mut policy: impl FnMut(Metric) -> (Policy, Option<Weights>),
    notes: &mut Vec<String>,
) -> Result<Analyzer> {
    let s = &setup.settings;
    let windows = Windows {
        size_ns: s.win_size_ns,
        shift_ns: s.win_shift_ns,
    };
    let (keep, note) = keep_settings(setup, survey);
    let mut metrics = Vec::new();
    for &m in run {
        let family = Arc::clone(setup.family(m));
        let coarsest = survey.coarsest[&m];
        let shift = family.windows().unwrap_or(windows).shift_ns;
        if shift % coarsest != 0 {
            return Err(Error::Settings(format!(
                "--win-shift {} is not a multiple of the {m} record interval ({}); windows \
                 must be made of whole records: use a multiple of {}",
                fmt_dur(shift),
                fmt_dur(coarsest),
                fmt_dur(coarsest)
            )));
        }
        if family.sampled() {
            notes.extend(note.clone());
        }
        let (policy, weights) = policy(m);
        metrics.push(MetricConfig {
            keep: family.keep_rule(&keep),
            family,
            slot_ns: survey.slots[&m],
            lag_ns: coarsest + coarsest.max(NS_PER_S),
            policy,
            weights,
        });
    }
    Ok(Analyzer::new(
        AnalyzerConfig {
            windows,
            k: s.k,
            distance: s.distance,
            score: s.score,
            peers: setup.peers,
            keep_scores,
        },
        metrics,
    ))
}

/// An error with fewer than [`MIN_NODES`] nodes; a note with exactly that many.
pub(crate) fn check_nodes(ds: &Dataset, what: &str, notes: &mut Vec<String>) -> Result<()> {
    let names: Vec<&str> = ds.nodes.iter().map(|n| n.name.as_str()).collect();
    if names.len() < MIN_NODES {
        return Err(Error::Data(format!(
            "{what}: peer comparison needs at least {MIN_NODES} nodes and is meant for 4 or \
             more; found {} ({})",
            names.len(),
            names.join(", ")
        )));
    }
    if names.len() == MIN_NODES {
        notes.push(format!(
            "only {MIN_NODES} nodes: each node's peers are two, so the comparison is fragile; \
             peer comparison is meant for 4 or more nodes"
        ));
    }
    Ok(())
}

/// Notes on the outcome: intervals that came too late, and metrics that kept no component
/// although windows were scored (every score was then zero, and "no node flagged" would only
/// mean that nothing was compared).
pub(crate) fn outcome_notes(
    outcome: &Outcome,
    setup: &Setup,
    keep: &KeepSettings,
    notes: &mut Vec<String>,
) {
    for m in &outcome.metrics {
        if m.late > 0 {
            notes.push(format!(
                "{}: {} interval(s) arrived after their window had closed and were left out",
                m.metric(),
                m.late
            ));
        }
    }
    for m in &outcome.metrics {
        if m.windows == m.unscored || !m.kept_list.is_empty() {
            continue;
        }
        let Some(hint) = m.config.family.keep_hint(keep) else {
            continue;
        };
        notes.push(format!(
            "{}: no function reached {} in a window on any node, so nothing was compared \
             and no node can be flagged on {}; lower {}, or use windows longer than {}",
            m.metric(),
            hint.minimum,
            m.metric(),
            hint.flag,
            fmt_dur(setup.settings.win_size_ns)
        ));
    }
}

/// Notes in order, each once.
pub(crate) fn dedup(v: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    v.into_iter().filter(|s| seen.insert(s.clone())).collect()
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

/// Hooks for what a long analysis is doing, for a command line to draw.
pub trait Progress {
    /// Offline: the data up to `at_ns` has been analysed, of data from `from_ns` to `to_ns`.
    fn analysed(&mut self, _at_ns: u64, _from_ns: u64, _to_ns: u64) {}

    /// `--follow` started on `nodes` nodes.
    fn following(&mut self, _nodes: usize) -> std::io::Result<()> {
        Ok(())
    }

    /// Windows closed: as they close in `--follow`, per chunk of data offline.
    fn windows_closed(&mut self, _closed: &[ClosedWindow]) -> std::io::Result<()> {
        Ok(())
    }

    /// `--follow` stopped: every writer ended, or the time limit passed.
    fn stopped_following(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Progress nobody watches.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quiet;

impl Progress for Quiet {}

/// Diagnosing a run in progress.
#[derive(Clone, Copy, Debug, Default)]
pub struct Follow {
    /// Stop after this long (default: when every writer has ended).
    pub limit: Option<Duration>,
}

/// What to diagnose besides the settings.
#[derive(Debug)]
pub struct DiagnoseRequest {
    /// The data as the user named it (for the report).
    pub data: Vec<String>,
    /// Where records come from.
    pub source: Box<dyn Source>,
    /// Rows of each root-cause table.
    pub top: usize,
    /// Give each node its own trained threshold instead of the largest of all nodes'.
    pub per_node_thresholds: bool,
    /// Follow a run in progress.
    pub follow: Option<Follow>,
}

impl DiagnoseRequest {
    /// A request to diagnose data directories offline.
    pub fn dirs(paths: &[PathBuf], top: usize) -> Self {
        DiagnoseRequest {
            data: paths.iter().map(|p| p.display().to_string()).collect(),
            source: Box::new(DirSource::new(paths.to_vec(), false)),
            top,
            per_node_thresholds: false,
            follow: None,
        }
    }
}

/// Diagnoses the data of `req`: the typed report, from which the exit status follows.
pub fn diagnose(
    setup: &Setup,
    trained: Option<&TrainedThresholds>,
    req: DiagnoseRequest,
    progress: &mut dyn Progress,
) -> Result<Diagnosis> {
    let mut notes = setup.notes.clone();
    let mut ds = match req.follow {
        None => Dataset::open_source(req.source, setup.load.clone())?,
        Some(f) => wait_for_nodes(req.source, setup, f)?,
    };
    check_nodes(&ds, "diagnose", &mut notes)?;
    let survey = feed::survey(&ds, &setup.families)?;
    let plan = plan_metrics(setup, &survey, &mut notes)?;
    for &m in &plan.reported {
        let family = setup.family(m);
        let with = ds.nodes.iter().filter(|n| family.has_data(n)).count();
        if with < MIN_NODES {
            notes.push(format!(
                "{m}: only {with} node(s) have data; peer comparison needs {MIN_NODES}"
            ));
        }
    }
    let mut policies = match trained {
        Some(t) => trained_policies(
            setup,
            t,
            &ds,
            &survey,
            &plan,
            req.per_node_thresholds,
            &mut notes,
        )?,
        None => HashMap::new(),
    };
    let rule = Unsupervised::default();
    let mut analyzer = build_analyzer(
        setup,
        &survey,
        &plan.run,
        true,
        |m| {
            let weights = trained
                .and_then(|t| t.file.metrics.get(&m))
                .and_then(|t| t.weights.as_ref())
                .map(|w| w.weights());
            match policies.remove(&m) {
                Some(p) => (p, weights),
                None => (Policy::Untrained(rule), None),
            }
        },
        &mut notes,
    )?;
    if let Some(t) = trained {
        for (mi, m) in plan.run.iter().enumerate() {
            if let Some(mt) = t.file.metrics.get(m) {
                analyzer.seed_kept(mi, &mt.kept);
            }
        }
    }
    let mut feeder = Feeder::new(&analyzer, setup.settings.by_program);
    match req.follow {
        Some(f) => follow(f, &survey, &mut ds, &mut analyzer, &mut feeder, progress)?,
        None => {
            let span = data_span(&ds);
            feeder.feed(
                &ds,
                &mut analyzer,
                Some(setup.chunk_ns()),
                |a, events, at| {
                    progress.analysed(at.min(span.1), span.0, span.1);
                    report_windows(a, &events, progress)
                },
            )?;
            let events = analyzer.advance(None);
            report_windows(&analyzer, &events, progress)?;
        }
    }
    let outcome = analyzer.into_outcome();
    outcome_notes(
        &outcome,
        setup,
        &keep_settings(setup, &survey).0,
        &mut notes,
    );
    let coarsest = survey.coarsest.values().copied().max().unwrap_or(NS_PER_S);
    let grace = missing::grace(setup.settings.win_shift_ns, coarsest);
    let findings = missing::findings(&outcome, &plan.reported, grace, |n| ending_of(&ds, n));
    let peers = setup.peers_text(outcome.names.len());
    Ok(Diagnosis::build(
        &outcome,
        ReportInput {
            data: req.data,
            thresholds_file: trained.map(|t| t.name.clone()),
            reported: &plan.reported,
            findings,
            notes: dedup(notes),
            warnings: ds.warnings.clone(),
            top: req.top,
            peers,
            by_program: setup.settings.by_program,
        },
    ))
}

/// First start and last end of the data (for progress).
fn data_span(ds: &Dataset) -> (u64, u64) {
    let mut lo = u64::MAX;
    let mut hi = 0;
    let mut see = |start: u64, dur: u64| {
        lo = lo.min(start);
        hi = hi.max(start + dur);
    };
    for n in &ds.nodes {
        for t in &n.traces {
            t.intervals
                .iter()
                .for_each(|iv| see(iv.start_ns, iv.dur_ns));
        }
        for s in &n.samples {
            s.intervals
                .iter()
                .for_each(|iv| see(iv.start_ns, iv.dur_ns));
            s.events.iter().for_each(|iv| see(iv.start_ns, iv.dur_ns));
        }
    }
    (lo.min(hi), hi)
}

fn report_windows(
    analyzer: &Analyzer,
    events: &[crate::analyzer::WindowEvent],
    progress: &mut dyn Progress,
) -> Result<()> {
    if events.is_empty() {
        return Ok(());
    }
    let closed: Vec<ClosedWindow> = events
        .iter()
        .map(|e| ClosedWindow::new(e, analyzer.names()))
        .collect();
    progress.windows_closed(&closed).map_err(Error::Output)
}

/// The policies of trained metrics, after checking the thresholds file against the data.
fn trained_policies(
    setup: &Setup,
    t: &TrainedThresholds,
    ds: &Dataset,
    survey: &Survey,
    plan: &MetricPlan,
    per_node: bool,
    notes: &mut Vec<String>,
) -> Result<HashMap<Metric, Policy>> {
    let name = &t.name;
    let mut policies = HashMap::new();
    for &m in &plan.run {
        let Some(mt) = t.file.metrics.get(&m) else {
            if plan.reported.contains(&m) {
                notes.push(format!(
                    "{name} has no trained thresholds for {m}: {m} uses the unsupervised rule"
                ));
            }
            continue;
        };
        let family = setup.family(m);
        let unit = family.score_unit(setup.settings.distance, mt.weights.is_some());
        if mt.unit != unit {
            return Err(Error::Thresholds(format!(
                "{name}: {m} thresholds are in {}, this analysis scores in {unit}",
                mt.unit
            )));
        }
        let rec = survey.recording(family.as_ref());
        if family.sampled()
            && (rec.event != mt.recording.event
                || rec.period != mt.recording.period
                || rec.freq != mt.recording.freq)
        {
            return Err(Error::Thresholds(format!(
                "{name}: thresholds were trained on samples taken with {}; this data was \
                 sampled with {}: sample again with the trained settings, or train on data \
                 sampled like this",
                mt.recording.describe(),
                rec.describe()
            )));
        }
        if !mt.kept.is_empty() {
            let seen = feed::labels(family.as_ref(), ds, setup.settings.by_program);
            let found = mt.kept.iter().filter(|l| seen.contains(l)).count();
            if found == 0 {
                return Err(Error::Thresholds(format!(
                    "{name}: none of the {} functions the {m} thresholds were trained on \
                     appear in this data (trained on another program or build?); train on \
                     fault-free runs of the programs diagnosed here",
                    mt.kept.len()
                )));
            }
            if found * 2 < mt.kept.len() {
                notes.push(format!(
                    "{m}: only {found} of the {} trained functions appear in this data; the \
                     workload may differ from training",
                    mt.kept.len()
                ));
            }
        }
        let fallback = mt.largest();
        if !per_node {
            // Pooled: seed 000 §"Threshold selection" keeps one threshold per server, but the
            // servers it compares are alike, and in our fault-free runs which node strayed
            // most changed from run to run (docs/thresholds.md): a node's own maximum over a
            // few training runs is a sample of one, the largest over all nodes is the expected
            // deviation of any of them.
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
            if !mt.thresholds.contains_key(&node.name) && plan.reported.contains(&m) {
                notes.push(format!(
                    "{} has no trained {m} threshold of its own: the metric's largest ({} {}) \
                     is used",
                    node.name, fallback, mt.unit
                ));
            }
        }
        policies.insert(
            m,
            Policy::Trained {
                by_node: mt.thresholds.iter().map(|(k, v)| (k.clone(), *v)).collect(),
                fallback,
            },
        );
    }
    Ok(policies)
}

/// True when `node` has written a record of any family.
fn has_any_record(setup: &Setup, node: &NodeData) -> bool {
    setup
        .families
        .iter()
        .any(|f| feed::has_records(f.as_ref(), node))
}

/// Opens the data of a run that may have just started: waits (up to the limit) until at least
/// [`MIN_NODES`] nodes have written a record.
fn wait_for_nodes(source: Box<dyn Source>, setup: &Setup, f: Follow) -> Result<Dataset> {
    let started = Instant::now();
    let limit = f.limit.unwrap_or(Duration::MAX);
    let mut ds = Dataset::new(source, setup.load.clone());
    loop {
        if ds.refresh().is_ok() {
            let with_records = ds.nodes.iter().filter(|n| has_any_record(setup, n)).count();
            if with_records >= MIN_NODES {
                return Ok(ds);
            }
        }
        if started.elapsed() >= limit {
            // Say what is wrong the way the offline path would.
            ds.refresh()?;
            ds.require_nodes()?;
            return Ok(ds);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn wall_now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// `--follow`: the offline path, fed after each refresh of the dataset.
fn follow(
    f: Follow,
    survey: &Survey,
    ds: &mut Dataset,
    analyzer: &mut Analyzer,
    feeder: &mut Feeder,
    progress: &mut dyn Progress,
) -> Result<()> {
    let started = Instant::now();
    let finest = survey.slots.values().copied().min().unwrap_or(NS_PER_S);
    let poll = Duration::from_nanos((finest / 4).clamp(20_000_000, 1_000_000_000));
    progress.following(ds.nodes.len()).map_err(Error::Output)?;
    let no_chunks = |_: &Analyzer, _, _| Ok(());
    loop {
        feeder.feed(ds, analyzer, None, no_chunks)?;
        let events = analyzer.advance(Some(wall_now_ns()));
        report_windows(analyzer, &events, progress)?;
        let all_ended = ds.nodes.iter().all(|n| {
            n.traces.iter().all(|t| t.status != FileStatus::Open)
                && n.samples.iter().all(|s| s.status != FileStatus::Open)
        });
        let timed_out = f.limit.is_some_and(|d| started.elapsed() >= d);
        if all_ended || timed_out {
            break;
        }
        std::thread::sleep(poll);
        ds.refresh()?;
    }
    feeder.feed(ds, analyzer, None, no_chunks)?;
    let events = analyzer.advance(None);
    report_windows(analyzer, &events, progress)?;
    progress.stopped_following().map_err(Error::Output)
}
