//! What a baseline span is: the syntax people write (`--baseline`, `train --span`) and where
//! a span lies in the data.

use std::fmt;
use std::str::FromStr;

use crate::data::Span;
use crate::error::SettingsMessage;
use crate::error::{Error, Result};
use crate::options::settings_message;
use crate::time::{fmt_dur, parse_duration_ns, parse_time, wall_iso, TimeSpec};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::test_span::{sp, S};

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
}
