//! A diagnosis from settings ([`Setup`]) to [`Diagnosis`]: the data surveyed, the metrics
//! planned, trained thresholds checked against the data, the analyzer fed — offline in one
//! pass, or following a run in progress ([`Follow`]) through the same code — and the report
//! built.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::analyzer::{Analyzer, Outcome, Relearnt, MIN_NODES};
use crate::baseline::{suspect_ranges, Baseline, Ranges};
use crate::combine::Verdict;
use crate::data::{Dataset, DirSource, FileStatus, NodeData, Source};
use crate::diagnosis::{ClosedWindow, Diagnosis, OsSettings, ReportInput};
use crate::error::{Error, Result};
use crate::family::Metric;
use crate::feed::{self, Feeder, Survey};
use crate::live::LiveStatus;
use crate::missing::{self, Ending, Finding};
use crate::plan::{
    build_analyzer, check_nodes, dedup, keep_settings, outcome_notes, plan_metrics, MetricPlan,
    MetricSetup, Progress,
};
use crate::policy::{Policy, Pool, Unsupervised};
use crate::resource::DatasetLevels;
use crate::roles;
use crate::setup::{Setup, TrainedThresholds, DEFAULT_SMOOTHING};
use crate::time::{fmt_dur, now_ns, rfc3339, NS_PER_S};
use crate::{paused, stacks};

/// How a node's data ended, from its files.
fn ending_of(ds: &Dataset, node: &str) -> Ending {
    if ds.unreadable.iter().any(|u| u.node == node) {
        return Ending::Damaged;
    }
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

/// The findings about where threads are and whether processes ran (seed 002's last
/// function, stuck calls, paused nodes) added to the missing-data ones.
fn activity_findings(ds: &Dataset, mut findings: Vec<Finding>) -> Vec<Finding> {
    for f in &mut findings {
        if let Finding::Stopped {
            node, last_call, ..
        } = f
        {
            *last_call = stacks::last_call(ds, node);
        }
    }
    for s in stacks::stuck(ds) {
        findings.push(match s.busy {
            None => Finding::Stuck {
                node: s.node,
                call: s.call,
                peers_longest_s: s.peers_longest_s,
                still_s: s.still_s,
            },
            Some(progress) => Finding::Busy {
                node: s.node,
                call: s.call,
                peers_longest_s: s.peers_longest_s,
                progress,
            },
        });
    }
    findings.extend(paused::findings(ds, now_ns()));
    findings
}

/// A finding for each damaged or unreadable data file of the nodes (damage is a finding, not a
/// verdict: see [`missing`]).
fn damage_findings(ds: &Dataset) -> Vec<Finding> {
    let name = |p: &std::path::Path| {
        p.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for n in &ds.nodes {
        // A trace file's stacks region that is damage counts with the rest of the file.
        let files = n
            .traces
            .iter()
            .map(|t| (&t.path, &t.status, t.stacks_damage.as_deref()))
            .chain(n.samples.iter().map(|s| (&s.path, &s.status, None)));
        for (path, status, stacks) in files {
            let stacks = stacks.map(|why| format!("{why}; no snapshot of it is used"));
            let reason = match (status, stacks) {
                (FileStatus::Damaged(r), Some(s)) => format!("{r}; {s}"),
                (FileStatus::Damaged(r), None) => r.clone(),
                (_, Some(s)) => s,
                (_, None) => continue,
            };
            out.push(Finding::Damaged {
                node: n.name.clone(),
                file: name(path),
                reason,
            });
        }
    }
    for u in &ds.unreadable {
        out.push(Finding::Damaged {
            node: u.node.clone(),
            file: name(&u.path),
            reason: u.reason.clone(),
        });
    }
    out
}

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
    /// Which trained threshold each node gets.
    pub pool: Pool,
    /// Trained: scale a window's thresholds when its median score exceeds training's
    /// ([`crate::policy::shared_threshold`]); false judges by the thresholds alone.
    pub discount_shared: bool,
    /// Follow a run in progress.
    pub follow: Option<Follow>,
    /// Only the windows wholly inside these stretches are diagnosed (the data after a
    /// baseline, [`crate::baseline`]); `None`: every window.
    pub windows: Option<Ranges>,
    /// The baseline the thresholds were learnt from (`--baseline`), for the report — and, when
    /// it rolls, to learn it again as the data goes on.
    pub baseline: Option<Baseline>,
}

impl DiagnoseRequest {
    /// A request to diagnose data directories offline.
    pub fn dirs(paths: &[PathBuf], top: usize) -> Self {
        DiagnoseRequest {
            data: paths.iter().map(|p| p.display().to_string()).collect(),
            source: Box::new(DirSource::new(paths.to_vec(), false)),
            top,
            pool: Pool::default(),
            discount_shared: true,
            follow: None,
            windows: None,
            baseline: None,
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
    // A finished run too short for the default windows gets windows that fit it (a run
    // followed live grows: its windows stay as set).
    let mut fitted = setup.clone();
    if req.follow.is_none() {
        if let Some(span) = ds.span() {
            notes.extend(fitted.fit_windows(span.end_ns.saturating_sub(span.start_ns)));
        }
    }
    let setup = &fitted.for_data(&ds);
    // The OS metrics' notes (the others are in already; notes are deduplicated at the end).
    notes.extend(setup.notes.iter().cloned());
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
            (req.pool, req.discount_shared),
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
            let mt = trained.and_then(|t| t.file.metrics.get(&m));
            match policies.remove(&m) {
                Some(policy) => MetricSetup::trained(policy, mt),
                None => MetricSetup::policy(Policy::Untrained(rule)),
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
    if let Some(w) = req.windows {
        analyzer.only_windows(w);
    }
    let mut feeder = Feeder::new(&analyzer, setup.settings.by_program);
    let mut reporting = Reporting {
        setup,
        survey: &survey,
        plan: &plan,
        trained: trained.cloned(),
        baseline: req.baseline,
        judging: (req.pool, req.discount_shared),
        data: req.data,
        top: req.top,
        notes,
    };
    match req.follow {
        Some(f) => follow(
            f,
            &mut reporting,
            &mut ds,
            &mut analyzer,
            &mut feeder,
            progress,
        )?,
        None => {
            let span = ds.span().unwrap_or_default();
            // A rolling baseline is learnt again between chunks: chunks no longer than its
            // period, so that it rolls as often offline as when following.
            let every = reporting
                .baseline
                .as_ref()
                .and_then(|b| b.rolling.as_ref())
                .map(|r| r.every_ns);
            let chunk = every.map_or(setup.chunk_ns(), |e| e.min(setup.chunk_ns()));
            feeder.feed(
                &ds,
                &mut analyzer,
                Some(chunk.max(setup.settings.win_shift_ns)),
                |a, events, at| {
                    progress.analysed(at.min(span.end_ns), span.start_ns, span.end_ns);
                    report_windows(a, &events, progress)?;
                    reporting.roll(&ds, a)
                },
            )?;
            let events = analyzer.advance(None);
            report_windows(&analyzer, &events, progress)?;
        }
    }
    let outcome = analyzer.into_outcome();
    let diagnosis = reporting.report(&outcome, &ds);
    // "No node flagged" must mean that nodes were compared and found alike: with fewer windows
    // than a verdict needs (k), say so instead (a stopped node needs no window).
    let complete = outcome
        .metrics
        .iter()
        .filter(|m| plan.reported.contains(&m.metric()))
        .map(|m| m.windows - m.unscored)
        .max()
        .unwrap_or(0);
    let k = setup.settings.k;
    if diagnosis.culprits.is_empty() && complete < k as u64 {
        return Err(Error::NotEnoughData {
            needed: k,
            complete,
            windows: format!(
                "{} every {}",
                fmt_dur(setup.settings.win_size_ns),
                fmt_dur(setup.settings.win_shift_ns)
            ),
        });
    }
    Ok(diagnosis)
}

/// What the report says besides the analysis' outcome; one [`Reporting::report`] builds the
/// final report and, in `--follow`, the interim ones.
struct Reporting<'a> {
    setup: &'a Setup,
    survey: &'a Survey,
    plan: &'a MetricPlan,
    trained: Option<TrainedThresholds>,
    baseline: Option<Baseline>,
    /// Which trained threshold each node gets, and whether shared deviations are discounted
    /// (for thresholds learnt again).
    judging: (Pool, bool),
    data: Vec<String>,
    top: usize,
    notes: Vec<String>,
}

impl Reporting<'_> {
    /// A rolling baseline's turn: once the diagnosis has moved far enough past the last
    /// learning, the baseline is learnt again from the last stretch of its length without the
    /// stretches in which a node was flagged or suspected, and the analyzer judges the windows
    /// to come by it. A baseline that cannot be learnt again (all of it under suspicion, too
    /// little data) leaves the last one in place, and a note says so.
    fn roll(&mut self, ds: &Dataset, analyzer: &mut Analyzer) -> Result<()> {
        let Some(base) = self.baseline.as_mut() else {
            return Ok(());
        };
        let Some(rolling) = base.rolling.as_mut() else {
            return Ok(());
        };
        let frontier = analyzer
            .results()
            .filter_map(|m| m.window_range.map(|r| r.last_ns + m.windows_ns.size_ns))
            .max();
        let Some(frontier) = frontier.filter(|&f| rolling.due(f)) else {
            return Ok(());
        };
        let suspects = suspect_ranges(&analyzer.outcome());
        let learned = match rolling.relearn(frontier, &suspects, &mut crate::plan::Quiet) {
            Ok(l) => l,
            Err(e) => {
                self.notes.push(format!(
                    "rolling baseline: not learnt again at {}: {e}; the baseline learnt before \
                     stays",
                    rfc3339(frontier)
                ));
                return Ok(());
            }
        };
        let mut notes = Vec::new();
        let mut policies = trained_policies(
            self.setup,
            &learned.trained,
            ds,
            self.survey,
            self.plan,
            self.judging,
            &mut notes,
        )?;
        for (mi, m) in self.plan.run.iter().enumerate() {
            let (Some(policy), Some(mt)) =
                (policies.remove(m), learned.trained.file.metrics.get(m))
            else {
                continue;
            };
            let s = MetricSetup::trained(policy, Some(mt));
            let cfg = Relearnt {
                policy: s.policy,
                weights: s.weights,
                normal: s.normal,
                roles: s.roles,
                rare: Some(s.rare.unwrap_or_else(crate::rare::RareBars::untrained)),
            };
            analyzer.relearn(mi, cfg, &mt.kept);
        }
        base.report.learnt = learned.report.learnt;
        base.report.times += 1;
        base.report.left_out = learned.report.left_out;
        base.report.warnings = learned.report.warnings;
        self.trained = Some(learned.trained);
        Ok(())
    }

    /// The report of `outcome` on the data `ds`.
    fn report(&self, outcome: &Outcome, ds: &Dataset) -> Diagnosis {
        let setup = self.setup;
        let mut notes = self.notes.clone();
        notes.extend(crate::demoted::notes(ds));
        outcome_notes(
            outcome,
            setup,
            &keep_settings(setup, self.survey).0,
            &mut notes,
        );
        let coarsest = self
            .survey
            .coarsest
            .values()
            .copied()
            .max()
            .unwrap_or(NS_PER_S);
        let grace = missing::grace(setup.settings.win_shift_ns, coarsest);
        let mut findings = activity_findings(
            ds,
            missing::findings(outcome, &self.plan.reported, grace, |n| ending_of(ds, n)),
        );
        findings.extend(damage_findings(ds));
        let peers = setup.peers_text(outcome.names.len());
        let levels = DatasetLevels::new(ds);
        let mut diagnosis = Diagnosis::build(
            outcome,
            ReportInput {
                data: self.data.clone(),
                thresholds_file: self.trained.as_ref().map(|t| t.name.clone()),
                reported: &self.plan.reported,
                findings,
                notes: dedup(notes),
                warnings: ds.warnings.clone(),
                top: self.top,
                peers,
                by_program: setup.settings.by_program,
                os: OsSettings {
                    windows: setup.os_windows(),
                    smoothing: setup.settings.smoothing.unwrap_or(DEFAULT_SMOOTHING),
                },
                levels: Some(&levels),
                after_baseline: self.baseline.is_some(),
            },
        );
        diagnosis.tracing_cost = crate::family::sampler::tracing_cost(ds);
        // Seed 003: the I/O layers' characteristics, compared bottom-up across the peers.
        if let Some(t) = crate::layers::table(&ds.nodes) {
            let layers = diagnosis.metric(Metric::LAYERS);
            let since = |node: &str| {
                let n = layers?.nodes.iter().find(|n| n.node == node)?;
                n.anomalous_windows.first().map(|w| w.start_ns)
            };
            diagnosis.layers = crate::layers::bottom_up(&t, &since);
            // Seed 003 §4.2: a layer issuing one request at a time below many outstanding.
            diagnosis.serialised = crate::layers::serial::find(&ds.nodes);
        }
        if let Some(t) = &self.trained {
            self.report_roles(t, &mut diagnosis);
        }
        diagnosis.baseline = self.baseline.as_ref().map(|b| b.report.clone());
        diagnosis
    }

    /// The nodes of another role the thresholds know (among the nodes diagnosed, on the
    /// metrics reported), and the ranking's reason for those found healthy against their own
    /// baseline.
    fn report_roles(&self, t: &TrainedThresholds, diagnosis: &mut Diagnosis) {
        let entries = t
            .file
            .metrics
            .iter()
            .filter(|(m, _)| self.plan.reported.contains(m))
            .map(|(m, mt)| (*m, mt.roles.as_slice()));
        diagnosis.roles = roles::report(entries)
            .into_iter()
            .filter(|r| diagnosis.nodes.contains(&r.node))
            .collect();
        for r in &mut diagnosis.ranking {
            let Some(role) = diagnosis.roles.iter().find(|x| x.node == r.node) else {
                continue;
            };
            if r.verdict == Verdict::Ok {
                r.reason = format!(
                    "another role ({}), like its own baseline",
                    roles::summary(role)
                );
            }
        }
    }

    /// The state of the analysis so far, for [`Progress::live`].
    fn live(&self, analyzer: &Analyzer, ds: &Dataset, finished: bool) -> LiveStatus {
        let outcome = analyzer.outcome();
        let report = self.report(&outcome, ds);
        LiveStatus::new(
            &outcome,
            report,
            |n| {
                // A damaged stacks region is damage too (its finding says so).
                ending_of(ds, n) == Ending::Damaged
                    || ds
                        .nodes
                        .iter()
                        .any(|x| x.name == n && x.traces.iter().any(|t| t.stacks_damage.is_some()))
            },
            finished,
        )
    }
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
    (pool, discount_shared): (Pool, bool),
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
        let unit = family.score_unit(
            setup.settings.distance,
            mt.weights.is_some(),
            setup.settings.score.profiles(),
        );
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
        let trained: HashMap<String, f64> =
            mt.thresholds.iter().map(|(k, v)| (k.clone(), *v)).collect();
        // Pooled (the default): seed 000 §"Threshold selection" keeps one threshold per server,
        // but the servers it compares are alike, and in our fault-free runs which node strayed
        // most changed from run to run (docs/thresholds.md): a node's own maximum over a few
        // training runs is a sample of one.
        let (by_node, fallback) = pool.apply(&trained);
        if matches!(pool, Pool::Own | Pool::OwnOrMedian) {
            for node in &ds.nodes {
                if !mt.thresholds.contains_key(&node.name) && plan.reported.contains(&m) {
                    notes.push(format!(
                        "{} has no trained {m} threshold of its own: {} {} is used",
                        node.name,
                        crate::time::fmt_sig(fallback),
                        mt.unit
                    ));
                }
            }
        }
        policies.insert(
            m,
            Policy::Trained {
                by_node,
                fallback,
                shared: mt.shared_median.filter(|_| discount_shared),
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
/// [`MIN_NODES`] nodes have written a record — of each metric asked for with `--metrics`, since
/// the metrics analysed are planned from the data present when following starts (a sampler
/// writes its first profile later than the tracer).
fn wait_for_nodes(source: Box<dyn Source>, setup: &Setup, f: Follow) -> Result<Dataset> {
    let started = Instant::now();
    let limit = f.limit.unwrap_or(Duration::MAX);
    let mut ds = Dataset::new(source, setup.load.clone());
    loop {
        if ds.refresh().is_ok() {
            let with_records = ds.nodes.iter().filter(|n| has_any_record(setup, n)).count();
            let asked_for_present = setup.metrics.iter().flatten().all(|&m| {
                let family = setup.family(m);
                let with = ds
                    .nodes
                    .iter()
                    .filter(|n| feed::has_records(family.as_ref(), n))
                    .count();
                with >= MIN_NODES
            });
            if with_records >= MIN_NODES && asked_for_present {
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

/// `--follow`: the offline path, fed after each refresh of the dataset.
fn follow(
    f: Follow,
    reporting: &mut Reporting<'_>,
    ds: &mut Dataset,
    analyzer: &mut Analyzer,
    feeder: &mut Feeder,
    progress: &mut dyn Progress,
) -> Result<()> {
    let started = Instant::now();
    let finest = reporting
        .survey
        .slots
        .values()
        .copied()
        .min()
        .unwrap_or(NS_PER_S);
    let poll = Duration::from_nanos((finest / 4).clamp(20_000_000, 1_000_000_000));
    progress.following(ds.nodes.len()).map_err(Error::Output)?;
    let no_chunks = |_: &mut Analyzer, _, _| Ok(());
    let mut first = true;
    loop {
        feeder.feed(ds, analyzer, None, no_chunks)?;
        // A writer behind but alive (its process runs, its file grows late) holds windows
        // open for a while (analyzer::BEHIND_WAIT_NS).
        let now = now_ns();
        feeder.mark_alive(ds, analyzer, now);
        let events = analyzer.advance(Some(now));
        report_windows(analyzer, &events, progress)?;
        reporting.roll(ds, analyzer)?;
        if progress.wants_live() && (first || !events.is_empty()) {
            let status = reporting.live(analyzer, ds, false);
            progress.live(status).map_err(Error::Output)?;
        }
        first = false;
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
    if progress.wants_live() {
        let status = reporting.live(analyzer, ds, true);
        progress.live(status).map_err(Error::Output)?;
    }
    progress.stopped_following().map_err(Error::Output)
}
