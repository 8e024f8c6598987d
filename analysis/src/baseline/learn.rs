//! Learning a baseline: thresholds trained on the windows of a span by the training code of
//! `culprit train`, and the report's account of them.

use serde::{Deserialize, Serialize};

use crate::data::{Dataset, Source, Span};
use crate::error::{Error, Result};
use crate::options::settings_message;
use crate::plan::Progress;
use crate::setup::{Setup, TrainedThresholds};
use crate::time::{wall_iso, Timestamp};
use crate::train::{self, Rules, TrainingRun};

use super::ranges::Ranges;
use super::span::{BaselineSpan, DataSpan};

/// A stretch of time in a report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stretch {
    /// Start.
    pub from: Timestamp,
    /// End.
    pub to: Timestamp,
}

impl From<Span> for Stretch {
    fn from(s: Span) -> Self {
        Stretch {
            from: Timestamp::from_ns(s.start_ns),
            to: Timestamp::from_ns(s.end_ns),
        }
    }
}

/// What the report says of a baseline learnt from the diagnosed data (`--baseline`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BaselineReport {
    /// The span as people read it (`the first 30 s`, `rolling, the last 6 h`).
    pub span: String,
    /// The stretch learnt last: its first and last instant (a rolling baseline moves).
    pub learnt: Stretch,
    /// Times the baseline was learnt: 1, or more as a rolling baseline moves on.
    pub times: u32,
    /// Stretches inside the last baseline that were not learnt, because a node was flagged or
    /// suspected in them (rolling baselines).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<Stretch>,
    /// What learning found suspicious: a node that stood out in part of the baseline, a node
    /// whose scores alone set a threshold — the baseline may not have been healthy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A baseline learnt: the thresholds (a thresholds file in memory, roles included), where it
/// lies, and the report's account of it.
#[derive(Clone, Debug)]
pub struct Learned {
    /// The thresholds.
    pub trained: TrainedThresholds,
    /// The stretch learnt.
    pub span: Span,
    /// For the report.
    pub report: BaselineReport,
    /// Training's notes.
    pub notes: Vec<String>,
}

/// Opens the data `source` makes and returns its span (earliest interval start to latest
/// end) and when every node's data had begun.
pub fn data_span(source: Box<dyn Source>, setup: &Setup) -> Result<DataSpan> {
    let ds = Dataset::open_source(source, setup.load.clone())?;
    let span = ds
        .span()
        .ok_or_else(|| Error::Data("the data holds no interval to learn a baseline from".into()))?;
    Ok(DataSpan {
        span,
        all_begun_ns: ds.all_begun().unwrap_or(span.start_ns),
    })
}

/// Learns the baseline `spec` of the data `source` makes (called once for the span, once for
/// training): thresholds trained on its windows by [`train::train`], with `setup` (a training
/// setup: [`Setup::for_training`]) and `rules`.
pub fn learn(
    setup: &Setup,
    source: &dyn Fn() -> Box<dyn Source>,
    spec: BaselineSpan,
    rules: Rules,
    progress: &mut dyn Progress,
) -> Result<Learned> {
    let data = data_span(source(), setup)?;
    learn_whole(setup, source(), spec, data, rules, progress)
}

/// Learns the whole span `spec` places in data spanning `data`.
fn learn_whole(
    setup: &Setup,
    source: Box<dyn Source>,
    spec: BaselineSpan,
    data: DataSpan,
    rules: Rules,
    progress: &mut dyn Progress,
) -> Result<Learned> {
    let span = spec.resolve(data)?;
    let ranges = Ranges::one(span);
    learn_in(setup, source, spec, span, &ranges, rules, progress)
}

/// [`learn`] for `--follow`: waits (up to `limit`) until the data has gone past the end of
/// the span, then learns it. `waiting` hears once where the span ends, if the data has not
/// reached it yet. A span placed from the data's end (a fraction of it, `-2h..`) cannot be
/// followed.
pub fn learn_following(
    setup: &Setup,
    source: &dyn Fn() -> Box<dyn Source>,
    spec: BaselineSpan,
    rules: Rules,
    limit: Option<std::time::Duration>,
    waiting: &mut dyn FnMut(u64),
) -> Result<Learned> {
    if !spec.known_before_the_end() {
        return Err(Error::Settings(settings_message!(
            "{} {spec}: placed from the data's end, which a run in progress does not have yet; \
             with {} give a duration (first 30m), times, or last:DUR",
            @Baseline,
            @Follow
        )));
    }
    let started = std::time::Instant::now();
    let mut said = false;
    loop {
        // No node yet (a run just starting) is not an error while waiting.
        if let Ok(data) = data_span(source(), setup) {
            let end = spec.end_in(data);
            if data.span.end_ns > end {
                let quiet = &mut crate::plan::Quiet;
                return learn_whole(setup, source(), spec, data, rules, quiet);
            }
            if !said {
                waiting(end);
                said = true;
            }
        }
        if limit.is_some_and(|l| started.elapsed() >= l) {
            return Err(Error::Settings(settings_message!(
                "{} {spec}: the data did not reach the end of the baseline before {} ended",
                @Baseline,
                @For
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

/// Learns the windows of `source`'s data that lie in `ranges` (the stretch `span` less what a
/// rolling baseline leaves out).
pub fn learn_in(
    setup: &Setup,
    source: Box<dyn Source>,
    spec: BaselineSpan,
    span: Span,
    ranges: &Ranges,
    rules: Rules,
    progress: &mut dyn Progress,
) -> Result<Learned> {
    let name = format!(
        "baseline ({spec}: {} to {})",
        wall_iso(span.start_ns),
        wall_iso(span.end_ns)
    );
    let run = TrainingRun {
        name: name.clone(),
        source,
        windows: Some(ranges.clone()),
    };
    let training = train::train(setup, vec![run], rules, progress).map_err(|e| {
        e.context(settings_message!(
            "{} {spec}: cannot learn a baseline from {} to {}",
            @Baseline,
            wall_iso(span.start_ns),
            wall_iso(span.end_ns)
        ))
    })?;
    let left_out = Ranges::one(span)
        .without(ranges)
        .spans()
        .iter()
        .map(|&s| s.into())
        .collect();
    Ok(Learned {
        trained: TrainedThresholds {
            file: training.file,
            name,
        },
        span,
        report: BaselineReport {
            span: spec.to_string(),
            learnt: span.into(),
            times: 1,
            left_out,
            warnings: training.warnings,
        },
        notes: training.notes,
    })
}
