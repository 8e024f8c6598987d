//! Which part of the data an export takes: `culprit report`'s filters, with its meaning.
//!
//! * nodes: only these node directories are read;
//! * programs: traced processes by program name, samples by the program they ran in;
//! * pids: traced processes only (samples are not per process);
//! * time range: intervals *starting* in `[from, to)`; times are ISO, epoch seconds,
//!   `+DURATION` after the data's start or `-DURATION` before its end, where start and end span
//!   every interval of the nodes read (whatever the program and pid filters).

use culprit_analysis::data::{Names, ProgramId, TraceFile};
use culprit_analysis::time::{self, TimeSpec};

use crate::error::{Error, Result};

/// Filters, as `culprit report` takes them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    /// Only these nodes (all when empty).
    pub nodes: Vec<String>,
    /// Only these programs (all when empty).
    pub programs: Vec<String>,
    /// Only these traced processes (all when empty).
    pub pids: Vec<u32>,
    /// Start of the time range (inclusive), as given.
    pub from: Option<String>,
    /// End of the time range (exclusive), as given.
    pub to: Option<String>,
}

/// The time range, in wall-clock ns: intervals starting in `[from, to)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    /// Inclusive.
    pub from: u64,
    /// Exclusive.
    pub to: u64,
}

impl Range {
    /// True when an interval starting at `start_ns` is in the range.
    pub fn contains(&self, start_ns: u64) -> bool {
        start_ns >= self.from && start_ns < self.to
    }
}

/// The parsed time bounds: absolute times, or relative to the data's span.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    from: Option<TimeSpec>,
    to: Option<TimeSpec>,
}

impl Bounds {
    /// True when a bound is relative to the data's start or end (the data is then read once
    /// more to find its span).
    pub(crate) fn relative(&self) -> bool {
        [self.from, self.to]
            .iter()
            .any(|b| matches!(b, Some(TimeSpec::FromStart(_) | TimeSpec::FromEnd(_))))
    }

    /// The range, given the data's span (earliest interval start, latest interval end) when
    /// a bound is relative.
    pub(crate) fn resolve(&self, span: Option<(u64, u64)>) -> Result<Range> {
        let (lo, hi) = span.unwrap_or((0, 0));
        let from = self.from.map_or(0, |t| t.resolve(lo, hi));
        let to = self.to.map_or(u64::MAX, |t| t.resolve(lo, hi));
        if from >= to {
            return Err(Error::Usage(format!(
                "empty time range: --from {} is not before --to {}",
                time::iso(from),
                time::iso(to)
            )));
        }
        Ok(Range { from, to })
    }
}

impl Selection {
    /// The time bounds, parsed.
    pub(crate) fn bounds(&self) -> Result<Bounds> {
        let parse = |flag: &str, s: &Option<String>| -> Result<Option<TimeSpec>> {
            s.as_deref()
                .map(|s| {
                    time::parse_time(s).map_err(|e| Error::Usage(format!("--{flag} {s}: {e}")))
                })
                .transpose()
        };
        Ok(Bounds {
            from: parse("from", &self.from)?,
            to: parse("to", &self.to)?,
        })
    }

    /// True when the traced process of `t` is selected.
    pub fn trace_file(&self, names: &Names, t: &TraceFile) -> bool {
        (self.pids.is_empty() || self.pids.contains(&t.pid)) && self.program(names, t.program)
    }

    /// True when program `p` is selected.
    pub fn program(&self, names: &Names, p: ProgramId) -> bool {
        self.programs.is_empty() || {
            let name = names.programs.get(p);
            self.programs.iter().any(|x| **x == **name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_bounds_need_the_span() {
        let sel = Selection {
            from: Some("+10s".into()),
            to: Some("-5s".into()),
            ..Default::default()
        };
        let b = sel.bounds().unwrap();
        assert!(b.relative());
        let r = b.resolve(Some((100_000_000_000, 200_000_000_000))).unwrap();
        assert_eq!((r.from, r.to), (110_000_000_000, 195_000_000_000));
        assert!(r.contains(110_000_000_000) && !r.contains(195_000_000_000));
    }

    #[test]
    fn absolute_and_empty_ranges() {
        let sel = Selection {
            from: Some("1700000000".into()),
            ..Default::default()
        };
        let b = sel.bounds().unwrap();
        assert!(!b.relative());
        assert_eq!(b.resolve(None).unwrap().from, 1_700_000_000_000_000_000);
        let bad = Selection {
            from: Some("1700000010".into()),
            to: Some("1700000000".into()),
            ..Default::default()
        };
        let e = bad.bounds().unwrap().resolve(None).unwrap_err();
        assert!(e.to_string().starts_with("empty time range"), "{e}");
        let unparsable = Selection {
            to: Some("yesterday".into()),
            ..Default::default()
        };
        assert!(unparsable
            .bounds()
            .unwrap_err()
            .to_string()
            .contains("--to"));
    }
}
