//! A baseline from the data itself: `--baseline SPAN` names a stretch of the diagnosed data (or
//! of its rotated history) taken as normal. Thresholds are trained on it by the training code
//! of `culprit train` ([`crate::train`], `Policy::Training`) and the rest of the data is
//! diagnosed against them, in one command. Seed 000 trains on staged fault-free runs; an
//! operator has the same servers' own past instead: their first hour, yesterday, or — with
//! `--follow` — a rolling stretch of the last hours not under suspicion.
//!
//! This module holds what a span is ([`BaselineSpan`], the syntax people write), the windows it
//! leaves to an analysis ([`Ranges`]), and the stretches a rolling baseline must not learn
//! ([`suspect_ranges`]). docs/thresholds.md ("A baseline from the data itself") describes the
//! whole.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::analyzer::Outcome;
use crate::data::{Dataset, Source, Span};
use crate::error::SettingsMessage;
use crate::error::{Error, Result};
use crate::options::settings_message;
use crate::plan::Progress;
use crate::setup::{Setup, TrainedThresholds};
use crate::time::{fmt_dur, parse_duration_ns, parse_time, rfc3339, wall_iso, TimeSpec};
use crate::train::{self, Rules, TrainingRun};

/// How much of the data's beginning a `first …` baseline takes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Amount {
    /// A duration, ns.
    Duration(u64),
    /// A fraction of the data's length, in (0, 1).
    Fraction(f64),
}

/// A baseline span as people write it (`--baseline`, `train --span`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BaselineSpan {
    /// `first 30m`, `first 1/3`, `first 25%`: the beginning of the data.
    First(Amount),
    /// `2026-11-27T00:00..2026-11-28T00:00` (or `+10m..+40m`, `-2h..-1h`): a stretch given by
    /// its two ends, each a time of [`parse_time`].
    Between(TimeSpec, TimeSpec),
    /// `last:7d`: rolling — each stretch of data is diagnosed against the last 7 days before
    /// it, without the windows in which a node was flagged or suspected. Until that much data
    /// exists, the first stretch of that length is the baseline.
    Last(u64),
}

/// What a `--baseline` value may look like, for error messages.
const EXAMPLES: &str = "first 30m, first 1/3, first 25%, 2026-11-27T00:00..2026-11-28T00:00, \
                        +5m..+35m, last:7d";

impl FromStr for BaselineSpan {
    type Err = SettingsMessage;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let t = s.trim();
        let bad =
            |why: String| settings_message!("{} {s:?}: {why} (examples: {EXAMPLES})", @Baseline);
        if let Some(rest) = t.strip_prefix("last:").or_else(|| t.strip_prefix("last ")) {
            let d = parse_duration_ns(rest).map_err(bad)?;
            if d == 0 {
                return Err(bad("a rolling baseline needs a length above zero".into()));
            }
            return Ok(BaselineSpan::Last(d));
        }
        if let Some(rest) = t
            .strip_prefix("first:")
            .or_else(|| t.strip_prefix("first "))
        {
            return parse_amount(rest.trim())
                .map(BaselineSpan::First)
                .map_err(bad);
        }
        if let Some((a, b)) = t.split_once("..") {
            let a = parse_time(a).map_err(|e| bad(e.to_string()))?;
            let b = parse_time(b).map_err(|e| bad(e.to_string()))?;
            if let (TimeSpec::At(x), TimeSpec::At(y)) = (a, b) {
                if y <= x {
                    return Err(bad("the span ends before it starts".into()));
                }
            }
            return Ok(BaselineSpan::Between(a, b));
        }
        Err(bad("not a span".into()))
    }
}

/// `30m`, `1/3`, `25%`, `third`, `half`, `quarter`.
fn parse_amount(s: &str) -> std::result::Result<Amount, String> {
    let fraction = |f: f64| {
        if f > 0.0 && f < 1.0 {
            Ok(Amount::Fraction(f))
        } else {
            Err(format!("{s:?} is not a part of the data between 0 and 1"))
        }
    };
    match s {
        "third" => return fraction(1.0 / 3.0),
        "half" => return fraction(0.5),
        "quarter" => return fraction(0.25),
        _ => {}
    }
    if let Some(p) = s.strip_suffix('%') {
        let v: f64 = p
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not a percentage"))?;
        return fraction(v / 100.0);
    }
    if let Some((n, d)) = s.split_once('/') {
        let (n, d): (f64, f64) = match (n.trim().parse(), d.trim().parse()) {
            (Ok(n), Ok(d)) => (n, d),
            _ => return Err(format!("{s:?} is not a fraction such as 1/3")),
        };
        return fraction(n / d);
    }
    let d = parse_duration_ns(s)?;
    if d == 0 {
        return Err("a baseline needs a length above zero".into());
    }
    Ok(Amount::Duration(d))
}

impl fmt::Display for BaselineSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = |t: &TimeSpec| match *t {
            TimeSpec::At(ns) => wall_iso(ns),
            TimeSpec::FromStart(d) => format!("+{}", fmt_dur(d).replace(' ', "")),
            TimeSpec::FromEnd(d) => format!("-{}", fmt_dur(d).replace(' ', "")),
        };
        match self {
            BaselineSpan::First(Amount::Duration(d)) => write!(f, "the first {}", fmt_dur(*d)),
            BaselineSpan::First(Amount::Fraction(x)) => {
                write!(f, "the first {:.0} % of the data", x * 100.0)
            }
            BaselineSpan::Between(a, b) => write!(f, "{}..{}", at(a), at(b)),
            BaselineSpan::Last(d) => write!(f, "rolling, the last {}", fmt_dur(*d)),
        }
    }
}

impl BaselineSpan {
    /// The rolling length of `last:DUR`.
    pub fn rolling(&self) -> Option<u64> {
        match *self {
            BaselineSpan::Last(d) => Some(d),
            _ => None,
        }
    }

    /// True when the span can be placed before the data has ended (`--follow`): a fraction of
    /// the data, or a time before its end, needs the end.
    pub fn known_before_the_end(&self) -> bool {
        match self {
            BaselineSpan::First(Amount::Fraction(_)) => false,
            BaselineSpan::Between(a, b) => {
                !matches!(a, TimeSpec::FromEnd(_)) && !matches!(b, TimeSpec::FromEnd(_))
            }
            _ => true,
        }
    }

    /// Where the span ends in data that starts where `data` does (for a rolling baseline, its
    /// first stretch), however far the data goes.
    pub fn end_in(&self, data: DataSpan) -> u64 {
        let begun = data;
        let data = data.span;
        match *self {
            BaselineSpan::First(Amount::Duration(d)) | BaselineSpan::Last(d) => {
                begun.start_for(d).saturating_add(d)
            }
            BaselineSpan::First(Amount::Fraction(x)) => {
                data.start_ns + ((data.end_ns - data.start_ns) as f64 * x).round() as u64
            }
            BaselineSpan::Between(_, b) => b.resolve(data.start_ns, data.end_ns),
        }
    }

    /// The stretch of wall-clock time the baseline covers in data spanning `data` (for a
    /// rolling baseline: its first stretch). An error when it holds no data, or leaves none
    /// after it to diagnose.
    pub fn resolve(&self, data: DataSpan) -> Result<Span> {
        let begun = data;
        let data = data.span;
        let len = data.end_ns.saturating_sub(data.start_ns);
        let span = match *self {
            BaselineSpan::First(Amount::Duration(d)) | BaselineSpan::Last(d) => {
                let start_ns = begun.start_for(d);
                Span {
                    start_ns,
                    end_ns: start_ns.saturating_add(d),
                }
            }
            BaselineSpan::First(Amount::Fraction(x)) => Span {
                start_ns: data.start_ns,
                end_ns: data.start_ns + (len as f64 * x).round() as u64,
            },
            BaselineSpan::Between(a, b) => Span {
                start_ns: a.resolve(data.start_ns, data.end_ns),
                end_ns: b.resolve(data.start_ns, data.end_ns),
            },
        };
        let start = span.start_ns.max(data.start_ns);
        let end = span.end_ns.min(data.end_ns);
        if end <= start {
            return Err(Error::Settings(settings_message!(
                "{} {self}: the data ({} to {}) holds nothing of it",
                @Baseline,
                wall_iso(data.start_ns),
                wall_iso(data.end_ns)
            )));
        }
        if span.end_ns >= data.end_ns {
            return Err(Error::Settings(settings_message!(
                "{} {self}: it reaches the end of the data ({}), so nothing is left to \
                 diagnose; choose a shorter baseline",
                @Baseline,
                wall_iso(data.end_ns)
            )));
        }
        Ok(Span {
            start_ns: start,
            end_ns: end,
        })
    }
}

/// The data a baseline is placed in: its span, and when every node's data had begun.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSpan {
    /// The earliest interval start to the latest end.
    pub span: Span,
    /// The latest of the nodes' first interval starts.
    pub all_begun_ns: u64,
}

impl DataSpan {
    /// Data whose nodes all begin at its start.
    pub fn together(span: Span) -> Self {
        DataSpan {
            span,
            all_begun_ns: span.start_ns,
        }
    }

    /// Where a span of `len` placed from the data's start begins (`first DUR`, a rolling
    /// baseline's first stretch): when every node's data has begun, if that is within `len` of
    /// the earliest start — peers started a few seconds apart, and a baseline from the first
    /// one's start would give the last fewer windows than the others, too few for a role
    /// (crate::roles) — else at the earliest start (a node that joined later has no baseline,
    /// as it had no data then).
    pub fn start_for(&self, len: u64) -> u64 {
        if self.all_begun_ns < self.span.start_ns.saturating_add(len) {
            self.all_begun_ns.max(self.span.start_ns)
        } else {
            self.span.start_ns
        }
    }
}

/// Stretches of wall-clock time, sorted and disjoint: the windows an analysis may close. A
/// window is analysed only when it lies wholly inside one stretch, so a baseline learns no
/// window that reaches past it, and the diagnosis after it judges none that reaches into it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ranges(Vec<Span>);

impl Ranges {
    /// One stretch.
    pub fn one(span: Span) -> Self {
        Ranges::from_spans(vec![span])
    }

    /// Everything from `start_ns` on.
    pub fn from(start_ns: u64) -> Self {
        Ranges::one(Span {
            start_ns,
            end_ns: u64::MAX,
        })
    }

    /// The union of `spans` (empty ones dropped).
    pub fn from_spans(mut spans: Vec<Span>) -> Self {
        spans.retain(|s| s.end_ns > s.start_ns);
        spans.sort_by_key(|s| s.start_ns);
        let mut out: Vec<Span> = Vec::with_capacity(spans.len());
        for s in spans {
            match out.last_mut() {
                Some(l) if s.start_ns <= l.end_ns => l.end_ns = l.end_ns.max(s.end_ns),
                _ => out.push(s),
            }
        }
        Ranges(out)
    }

    /// The stretches.
    pub fn spans(&self) -> &[Span] {
        &self.0
    }

    /// True when the window `[start_ns, end_ns)` lies wholly inside one stretch.
    pub fn holds(&self, start_ns: u64, end_ns: u64) -> bool {
        // The last stretch starting at or before the window's start is the only candidate.
        let i = self.0.partition_point(|s| s.start_ns <= start_ns);
        i > 0 && end_ns <= self.0[i - 1].end_ns
    }

    /// True when `[start_ns, end_ns)` overlaps a stretch (the feeder drops intervals that do
    /// not).
    pub fn touches(&self, start_ns: u64, end_ns: u64) -> bool {
        let i = self.0.partition_point(|s| s.end_ns <= start_ns);
        i < self.0.len() && self.0[i].start_ns < end_ns
    }

    /// These stretches without `cut`.
    pub fn without(&self, cut: &Ranges) -> Ranges {
        let mut out = Vec::new();
        for s in &self.0 {
            let mut from = s.start_ns;
            for c in &cut.0 {
                if c.end_ns <= from || c.start_ns >= s.end_ns {
                    continue;
                }
                if c.start_ns > from {
                    out.push(Span {
                        start_ns: from,
                        end_ns: c.start_ns,
                    });
                }
                from = from.max(c.end_ns);
            }
            if from < s.end_ns {
                out.push(Span {
                    start_ns: from,
                    end_ns: s.end_ns,
                });
            }
        }
        Ranges::from_spans(out)
    }

    /// Total length, ns.
    pub fn total_ns(&self) -> u64 {
        self.0.iter().map(|s| s.end_ns - s.start_ns).sum()
    }
}

/// A stretch of time in a report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stretch {
    /// Start (RFC 3339).
    pub from: String,
    /// End (RFC 3339).
    pub to: String,
}

impl From<Span> for Stretch {
    fn from(s: Span) -> Self {
        Stretch {
            from: rfc3339(s.start_ns),
            to: rfc3339(s.end_ns),
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

/// A baseline in a diagnosis: what the report says of it and, when it rolls, how to learn it
/// again.
#[derive(Debug)]
pub struct Baseline {
    /// For the report (updated as a rolling baseline moves on).
    pub report: BaselineReport,
    /// A rolling baseline (`last:DUR`).
    pub rolling: Option<Rolling>,
}

/// A rolling baseline: every [`Rolling::every_ns`] of diagnosed data, the last
/// [`Rolling::len_ns`] before it — without the stretches in which a node was flagged or
/// suspected ([`suspect_ranges`]) — is learnt again, so that thresholds follow the fleet as it
/// changes while a fault is never learnt as normal.
pub struct Rolling {
    /// The span as given.
    pub spec: BaselineSpan,
    /// How much data it learns.
    pub len_ns: u64,
    /// How often it is learnt again (diagnosed data between two learnings).
    pub every_ns: u64,
    /// The training setup.
    pub setup: Setup,
    /// Training's rules.
    pub rules: Rules,
    /// The data, opened afresh for each learning.
    pub source: Box<dyn Fn() -> Box<dyn Source> + Send>,
    /// The end of the stretch learnt last.
    pub learnt_to: u64,
}

impl fmt::Debug for Rolling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rolling")
            .field("spec", &self.spec)
            .field("every_ns", &self.every_ns)
            .field("learnt_to", &self.learnt_to)
            .finish_non_exhaustive()
    }
}

/// How often a rolling baseline of `len_ns` is learnt again: every quarter of its length, at
/// least every hour (learning reads the whole baseline again), and never more often than
/// `shift_ns` (a window shift: nothing new to learn before).
pub fn relearn_every(len_ns: u64, shift_ns: u64) -> u64 {
    (len_ns / 4).min(3600 * crate::time::NS_PER_S).max(shift_ns)
}

impl Rolling {
    /// True when the diagnosis has reached `frontier_ns`, far enough past the last learning.
    pub fn due(&self, frontier_ns: u64) -> bool {
        frontier_ns >= self.learnt_to.saturating_add(self.every_ns)
    }

    /// Learns the last [`Rolling::len_ns`] before `frontier_ns` again, without `suspects`.
    pub fn relearn(
        &mut self,
        frontier_ns: u64,
        suspects: &Ranges,
        progress: &mut dyn Progress,
    ) -> Result<Learned> {
        let span = Span {
            start_ns: frontier_ns.saturating_sub(self.len_ns),
            end_ns: frontier_ns,
        };
        let ranges = Ranges::one(span).without(suspects);
        // Marked learnt whatever happens, so that a failure is not retried window after window.
        self.learnt_to = frontier_ns;
        let learned = learn_in(
            &self.setup,
            (self.source)(),
            self.spec,
            span,
            &ranges,
            self.rules,
            progress,
        )?;
        // Too little left once the windows under suspicion are out: fewer windows than a
        // verdict's own span (2k − 1) can neither set thresholds nor tell a role, which would be
        // forgotten; the baseline learnt before stays.
        let least = 2 * self.setup.settings.k as u64 - 1;
        if let Some((m, t)) = learned
            .trained
            .file
            .metrics
            .iter()
            .find(|(_, t)| t.windows < least)
        {
            return Err(Error::Data(format!(
                "too little left to learn from once the windows under suspicion are out ({} \
                 windows on {m}, fewer than {least})",
                t.windows
            )));
        }
        Ok(learned)
    }
}

/// The stretches a rolling baseline must not learn, the windows under suspicion: every window
/// in which some node was anomalous on some metric, and every stretch in which a node was
/// faulty on a metric (flagged, or a suspect: the combined verdict is made of these) from the
/// first window that could have counted towards it — 2k − 2 windows before the filter fired —
/// to the end of its last faulty window.
pub fn suspect_ranges(outcome: &Outcome) -> Ranges {
    let k = outcome.config.k as u64;
    let mut spans = Vec::new();
    for m in &outcome.metrics {
        let w = m.windows_ns;
        let lead = (2 * k).saturating_sub(2) * w.shift_ns;
        for n in &m.nodes {
            for a in &n.anomalous {
                spans.push(Span {
                    start_ns: a.start_ns,
                    end_ns: a.start_ns.saturating_add(w.size_ns),
                });
            }
            for e in &n.episodes {
                spans.push(Span {
                    start_ns: e.first_window_ns.saturating_sub(lead),
                    end_ns: e.last_window_ns.saturating_add(w.size_ns),
                });
            }
        }
    }
    Ranges::from_spans(spans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::NS_PER_S;

    const S: u64 = NS_PER_S;

    fn sp(a: u64, b: u64) -> Span {
        Span {
            start_ns: a * S,
            end_ns: b * S,
        }
    }

    #[test]
    fn the_syntax() {
        let p = |s: &str| s.parse::<BaselineSpan>();
        assert_eq!(
            p("first 30m"),
            Ok(BaselineSpan::First(Amount::Duration(1800 * S)))
        );
        assert_eq!(
            p("first 2 hours, 30 minutes"),
            Ok(BaselineSpan::First(Amount::Duration(9000 * S)))
        );
        assert_eq!(
            p("first 25%"),
            Ok(BaselineSpan::First(Amount::Fraction(0.25)))
        );
        assert_eq!(
            p("first 1/4"),
            Ok(BaselineSpan::First(Amount::Fraction(0.25)))
        );
        assert_eq!(
            p("first half"),
            Ok(BaselineSpan::First(Amount::Fraction(0.5)))
        );
        assert_eq!(p("last:7d"), Ok(BaselineSpan::Last(7 * 86_400 * S)));
        assert_eq!(p("last 2h"), Ok(BaselineSpan::Last(7200 * S)));
        assert_eq!(
            p("+10s..+40s"),
            Ok(BaselineSpan::Between(
                TimeSpec::FromStart(10 * S),
                TimeSpec::FromStart(40 * S)
            ))
        );
        let day = p("2026-11-27T00:00..2026-11-28T00:00").unwrap();
        let BaselineSpan::Between(TimeSpec::At(a), TimeSpec::At(b)) = day else {
            panic!("{day:?}");
        };
        assert_eq!(b - a, 86_400 * S);
        for bad in [
            "",
            "first",
            "first 0s",
            "first 150%",
            "first 3/2",
            "first 1/0",
            "last:0s",
            "last:soon",
            "yesterday",
            "2026-11-28T00:00..2026-11-27T00:00",
            "+1m..tomorrow",
        ] {
            let e = p(bad).unwrap_err();
            assert_eq!(e.settings().next(), Some("baseline"), "{bad:?}: {e}");
            let e = e.render(|s| format!("--{s}"));
            assert!(e.starts_with("--baseline"), "{bad:?}: {e}");
            assert!(!e.contains('\n'), "{bad:?}: one line: {e}");
        }
    }

    #[test]
    fn resolved_against_the_data() {
        let data = DataSpan::together(sp(1000, 1090));
        let first = |a| BaselineSpan::First(a).resolve(data);
        assert_eq!(first(Amount::Duration(30 * S)).unwrap(), sp(1000, 1030));
        assert_eq!(first(Amount::Fraction(1.0 / 3.0)).unwrap(), sp(1000, 1030));
        // The whole data, or more: nothing left to diagnose.
        assert!(first(Amount::Duration(90 * S)).is_err());
        // A rolling baseline starts with its first stretch.
        assert_eq!(
            BaselineSpan::Last(60 * S).resolve(data).unwrap(),
            sp(1000, 1060)
        );
        assert!(BaselineSpan::Last(600 * S).resolve(data).is_err());
        let between = BaselineSpan::Between(TimeSpec::At(900 * S), TimeSpec::FromStart(20 * S));
        assert_eq!(between.resolve(data).unwrap(), sp(1000, 1020));
        let outside = BaselineSpan::Between(TimeSpec::At(10 * S), TimeSpec::At(20 * S));
        let e = outside.resolve(data).unwrap_err().to_string();
        assert!(e.contains("holds nothing"), "{e}");
        assert!(!BaselineSpan::First(Amount::Fraction(0.5)).known_before_the_end());
        assert!(BaselineSpan::Last(S).known_before_the_end());
    }

    #[test]
    fn a_span_from_the_start_begins_when_every_node_has() {
        // The last peer's data began 3 s after the first's: the first 30 s are its first 30 s
        // too, and a rolling baseline's first stretch likewise.
        let staggered = DataSpan {
            span: sp(1000, 1090),
            all_begun_ns: 1003 * S,
        };
        let first = BaselineSpan::First(Amount::Duration(30 * S));
        assert_eq!(first.resolve(staggered).unwrap(), sp(1003, 1033));
        assert_eq!(first.end_in(staggered), 1033 * S);
        assert_eq!(
            BaselineSpan::Last(20 * S).resolve(staggered).unwrap(),
            sp(1003, 1023)
        );
        // A fraction of the data and given times are placed in the data as it is.
        let third = BaselineSpan::First(Amount::Fraction(1.0 / 3.0));
        assert_eq!(third.resolve(staggered).unwrap(), sp(1000, 1030));
        // A node that joined after the span would have ended has no baseline: the span starts
        // with the data.
        let late = DataSpan {
            span: sp(1000, 1090),
            all_begun_ns: 1040 * S,
        };
        assert_eq!(first.resolve(late).unwrap(), sp(1000, 1030));
    }

    #[test]
    fn ranges_hold_whole_windows() {
        let r = Ranges::from_spans(vec![sp(30, 40), sp(0, 10), sp(5, 12), sp(50, 50)]);
        assert_eq!(r.spans(), &[sp(0, 12), sp(30, 40)]);
        assert!(r.holds(0, 10 * S));
        assert!(r.holds(2 * S, 12 * S));
        assert!(!r.holds(5 * S, 15 * S), "reaches past the stretch");
        assert!(!r.holds(25 * S, 35 * S), "starts before the stretch");
        assert!(r.holds(30 * S, 40 * S));
        assert!(!r.holds(40 * S, 41 * S));
        assert!(r.touches(11 * S, 31 * S));
        assert!(!r.touches(12 * S, 30 * S));
        let cut = Ranges::from_spans(vec![sp(3, 5), sp(35, 60)]);
        assert_eq!(r.without(&cut).spans(), &[sp(0, 3), sp(5, 12), sp(30, 35)]);
        assert_eq!(r.without(&cut).total_ns(), 15 * S);
        assert!(Ranges::from(7 * S).holds(7 * S, u64::MAX));
    }
}
