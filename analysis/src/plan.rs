//! What diagnosis and training share once the data is loaded: the metrics to run, the
//! analyzer for them, the checks and notes on the data and the outcome, and the hooks through
//! which a long analysis says what it is doing ([`Progress`]).

use std::collections::HashSet;
use std::sync::Arc;

use crate::analyzer::{Analyzer, AnalyzerConfig, MetricConfig, Outcome, MIN_NODES};
use crate::data::Dataset;
use crate::diagnosis::ClosedWindow;
use crate::error::{Error, Result};
use crate::family::{KeepBy, KeepSettings, Metric, Windows};
use crate::feed::{self, Survey};
use crate::live::LiveStatus;
use crate::options::{settings_message, Setting};
use crate::policy::{Policy, Weights};
use crate::rare::RareBars;
use crate::roles::Roles;
use crate::score::NormalProfiles;
use crate::setup::Setup;
use crate::thresholds::MetricThresholds;
use crate::time::{fmt_dur, NS_PER_S};

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
    if let Some(req) = &setup.metrics {
        for &m in req {
            let found = if m == Metric::OS {
                all.iter().any(|&x| x.is_os() && available(x))
            } else {
                available(m)
            };
            if !found {
                let how = match setup.families.iter().find(|f| f.metric() == m) {
                    Some(f) => f.how_to_record(),
                    None if m == Metric::OS || m.is_os() => crate::family::os::HOW,
                    None => "",
                };
                notes.push(format!("no {m} data in the given directories ({how})"));
            }
        }
    }
    let reported: Vec<Metric> = all
        .iter()
        .copied()
        .filter(|&m| setup.wants(m) && available(m))
        .collect();
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

/// What a metric is judged by: its threshold policy, its weighting scales, its known-normal
/// profiles.
#[derive(Clone, Debug)]
pub(crate) struct MetricSetup {
    pub(crate) policy: Policy,
    pub(crate) weights: Option<Weights>,
    pub(crate) normal: Option<Arc<NormalProfiles>>,
    pub(crate) roles: Option<Arc<Roles>>,
    /// Rare functions' trained bars (`None`: untrained, [`RareBars::untrained`]).
    pub(crate) rare: Option<RareBars>,
}

impl MetricSetup {
    /// A policy alone.
    pub(crate) fn policy(policy: Policy) -> Self {
        MetricSetup {
            policy,
            weights: None,
            normal: None,
            roles: None,
            rare: None,
        }
    }

    /// What a thresholds file says of metric `m`: its trained policy (`policy`), scales,
    /// normal profiles and roles.
    pub(crate) fn trained(policy: Policy, t: Option<&MetricThresholds>) -> Self {
        MetricSetup {
            policy,
            weights: t.and_then(|t| t.weights.as_ref()).map(|w| w.weights()),
            normal: t.and_then(|t| t.normal()),
            roles: t.and_then(|t| Roles::from_entries(&t.roles)),
            rare: t
                .filter(|t| !t.rare.is_empty())
                .map(|t| RareBars::trained(&t.rare)),
        }
    }
}

/// Builds an analyzer for data described by `survey`, `policy` giving each metric's policy and
/// weights.
pub(crate) fn build_analyzer(
    setup: &Setup,
    survey: &Survey,
    run: &[Metric],
    keep_scores: bool,
    mut policy: impl FnMut(Metric) -> MetricSetup,
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
            return Err(Error::Settings(settings_message!(
                "{} {} is not a multiple of the {m} record interval ({}); windows must be \
                 made of whole records: use a multiple of {}",
                @WinShift,
                fmt_dur(shift),
                fmt_dur(coarsest),
                fmt_dur(coarsest)
            )));
        }
        if family.sampled() {
            notes.extend(note.clone());
        }
        let MetricSetup {
            policy,
            weights,
            normal,
            roles,
            rare,
        } = policy(m);
        let rare = family
            .rare()
            .then(|| rare.unwrap_or_else(RareBars::untrained));
        metrics.push(MetricConfig {
            keep: family.keep_rule(&keep),
            family,
            slot_ns: survey.slots[&m],
            lag_ns: coarsest + coarsest.max(NS_PER_S),
            policy,
            weights,
            normal,
            roles,
            rare,
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
    // Late intervals, per node (all its metrics on one line).
    for (n, name) in outcome.names.iter().enumerate() {
        let late: Vec<String> = outcome
            .metrics
            .iter()
            .filter(|m| m.nodes.get(n).is_some_and(|nr| nr.late > 0))
            .map(|m| format!("{} {}", m.nodes[n].late, m.metric()))
            .collect();
        if late.is_empty() {
            continue;
        }
        notes.push(format!(
            "{name}: {} interval(s) arrived after their window had closed and were left out \
             (its writer was behind by more than `--follow` waits for one that is alive: {} \
             past the record interval); a diagnosis of the same data afterwards compares them",
            late.join(", "),
            fmt_dur(crate::analyzer::BEHIND_WAIT_NS)
        ));
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
            match hint.by {
                KeepBy::Samples => Setting::MinSamples,
                KeepBy::Time => Setting::MinTime,
            }
            .flag(),
            fmt_dur(setup.settings.win_size_ns)
        ));
    }
}

/// Notes in order, each once.
pub(crate) fn dedup(v: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    v.into_iter().filter(|s| seen.insert(s.clone())).collect()
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

    /// `--follow`: true when [`Progress::live`] is wanted (each call copies the analysis so
    /// far and builds the interim report).
    fn wants_live(&self) -> bool {
        false
    }

    /// `--follow`: the diagnosis as it stands — when following starts, after windows close, and
    /// once more at the end ([`LiveStatus::finished`]).
    fn live(&mut self, _status: LiveStatus) -> std::io::Result<()> {
        Ok(())
    }
}

/// Progress nobody watches.
#[derive(Clone, Copy, Debug, Default)]
pub struct Quiet;

impl Progress for Quiet {}
