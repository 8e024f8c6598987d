//! The engine's vocabulary: metrics, components (what a feature-vector coordinate stands for),
//! and one interval of input.
//!
//! Everything the analysis needs is defined here, independent of files: the engine is fed
//! per-node, per-metric intervals (sparse or dense per-component vectors on aligned interval
//! starts, or an explicit "missed" marker) by an adapter ([`super::adapter`] for data
//! directories, [`super::synth`] for tests and the scale benchmark).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Index of a node in an [`super::engine::Engine`] (registration order; never shown to users,
/// who see names).
pub type NodeIdx = usize;
/// Index of a component (function, event…) within one metric of an engine.
pub type CompIdx = u32;

/// The metrics the engine analyses, one at a time across all nodes (seed 000 §"Diagnosis").
///
/// New metric sources (OS metrics, latency histograms…) are added here: a variant, its unit,
/// its dimensionality rule and its words for the root-cause tables, plus an adapter that feeds
/// it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum MetricKind {
    /// Instruction-pointer samples per (program,) image and function, from the sampler.
    Samples,
    /// Calls per function, from the tracer.
    Count,
    /// Exclusive wall-clock time per function (blocked time included), from the tracer, in
    /// milliseconds.
    Time,
    /// Kernel event counts (tracepoints) per node, from the sampler; one component per event.
    Events,
}

impl MetricKind {
    /// All metrics, in report order.
    pub const ALL: [MetricKind; 4] = [
        MetricKind::Samples,
        MetricKind::Count,
        MetricKind::Time,
        MetricKind::Events,
    ];

    /// The name users type and read (`--metrics`, reports, JSON).
    pub fn name(self) -> &'static str {
        match self {
            MetricKind::Samples => "samples",
            MetricKind::Count => "count",
            MetricKind::Time => "time",
            MetricKind::Events => "events",
        }
    }

    /// Parses [`MetricKind::name`].
    pub fn from_name(s: &str) -> Option<Self> {
        MetricKind::ALL.into_iter().find(|m| m.name() == s)
    }

    /// Unit of the metric's values, of its Manhattan distances and of its thresholds.
    pub fn unit(self) -> &'static str {
        match self {
            MetricKind::Samples => "samples",
            MetricKind::Count => "calls",
            MetricKind::Time => "ms",
            MetricKind::Events => "events",
        }
    }

    /// The smallest difference worth counting, in the metric's unit: one call, one sample, one
    /// event, one millisecond. Variance weighting never divides by less.
    pub fn resolution(self) -> f64 {
        1.0
    }

    /// Words for a deviation above / below the median node ("more calls", "fewer samples").
    pub fn deviation_words(self) -> (&'static str, &'static str) {
        match self {
            MetricKind::Samples => ("more samples", "fewer samples"),
            MetricKind::Count => ("more calls", "fewer calls"),
            MetricKind::Time => ("more time", "less time"),
            MetricKind::Events => ("more events", "fewer events"),
        }
    }
}

impl fmt::Display for MetricKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What one coordinate of a metric's feature vector stands for. Components are compared across
/// nodes by these names, never by address (DESIGN.md §"Records, time and identity").
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "LabelRepr", from = "LabelRepr")]
pub struct CompLabel {
    /// Program the function ran in, when comparing per program (`--by-program`).
    pub program: Option<Arc<str>>,
    /// Binary image (executable, library, `[kernel.kallsyms]`); `None` for kernel events.
    pub image: Option<Arc<str>>,
    /// Function (demangled) or event name.
    pub name: Arc<str>,
}

/// [`CompLabel`] as stored in a thresholds file.
#[derive(Serialize, Deserialize)]
struct LabelRepr {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    program: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    image: Option<String>,
    name: String,
}

impl From<CompLabel> for LabelRepr {
    fn from(l: CompLabel) -> Self {
        LabelRepr {
            program: l.program.map(|s| s.to_string()),
            image: l.image.map(|s| s.to_string()),
            name: l.name.to_string(),
        }
    }
}

impl From<LabelRepr> for CompLabel {
    fn from(l: LabelRepr) -> Self {
        CompLabel {
            program: l.program.map(Arc::from),
            image: l.image.map(Arc::from),
            name: Arc::from(l.name),
        }
    }
}

impl CompLabel {
    /// A function in an image.
    pub fn func(image: &str, name: &str) -> Self {
        CompLabel {
            program: None,
            image: Some(Arc::from(image)),
            name: Arc::from(name),
        }
    }
}

impl fmt::Display for CompLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = &self.program {
            write!(f, "{p}: ")?;
        }
        f.write_str(&self.name)?;
        if let Some(i) = &self.image {
            write!(f, " [{i}]")?;
        }
        Ok(())
    }
}

/// The values of one interval of one node and metric.
#[derive(Clone, Copy, Debug)]
pub enum IntervalData<'a> {
    /// `(component, value)` pairs; components may repeat (values add up).
    Sparse(&'a [(CompIdx, f64)]),
    /// Values of components `0..len`.
    Dense(&'a [f64]),
    /// The writer could not observe the interval: missing data, never zeros.
    Missed,
}

/// One interval of input.
#[derive(Clone, Copy, Debug)]
pub struct Interval<'a> {
    /// Start, wall-clock ns since the epoch, a multiple of `dur_ns`.
    pub start_ns: u64,
    /// Length, ns.
    pub dur_ns: u64,
    /// True when the writer started or stopped inside the interval: its values count, but it
    /// does not make the interval covered (another process of the node may cover it).
    pub partial: bool,
    /// The values.
    pub data: IntervalData<'a>,
}

/// Nanoseconds per second.
pub const NS_PER_S: u64 = 1_000_000_000;

/// Formats wall-clock ns as `YYYY-MM-DD HH:MM:SS[.fff]Z` (UTC; sub-second digits only when
/// present).
pub fn fmt_wall(ns: u64) -> String {
    let secs = ns / NS_PER_S;
    let frac_ms = (ns % NS_PER_S) / 1_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (rem / 3600, (rem / 60) % 60, rem % 60);
    if ns % NS_PER_S == 0 {
        format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02}Z")
    } else {
        format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02}.{frac_ms:03}Z")
    }
}

/// Formats wall-clock ns as RFC 3339 (`YYYY-MM-DDTHH:MM:SS.fffZ`) for JSON.
pub fn rfc3339(ns: u64) -> String {
    let secs = ns / NS_PER_S;
    let frac_ms = (ns % NS_PER_S) / 1_000_000;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac_ms:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Formats a duration in ns for people: `60 s`, `1.5 s`, `250 ms`.
pub fn fmt_dur(ns: u64) -> String {
    if ns % NS_PER_S == 0 {
        format!("{} s", ns / NS_PER_S)
    } else if ns >= NS_PER_S {
        let v = format!("{:.3}", ns as f64 / 1e9);
        format!("{} s", v.trim_end_matches('0'))
    } else if ns % 1_000_000 == 0 {
        format!("{} ms", ns / 1_000_000)
    } else {
        format!("{} µs", ns / 1000)
    }
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_formatting() {
        assert_eq!(fmt_wall(0), "1970-01-01 00:00:00Z");
        // 2024-02-29 12:34:56 UTC = 1709210096.
        assert_eq!(fmt_wall(1_709_210_096 * NS_PER_S), "2024-02-29 12:34:56Z");
        assert_eq!(
            fmt_wall(1_709_210_096 * NS_PER_S + 250_000_000),
            "2024-02-29 12:34:56.250Z"
        );
        assert_eq!(
            rfc3339(1_709_210_096 * NS_PER_S),
            "2024-02-29T12:34:56.000Z"
        );
    }

    #[test]
    fn durations() {
        use crate::timefmt::parse_duration_ns as parse_dur;
        assert_eq!(parse_dur("60").unwrap(), 60 * NS_PER_S);
        assert_eq!(parse_dur("30s").unwrap(), 30 * NS_PER_S);
        assert_eq!(parse_dur("1.5s").unwrap(), 1_500_000_000);
        assert_eq!(parse_dur("500ms").unwrap(), 500_000_000);
        assert_eq!(parse_dur("2m").unwrap(), 120 * NS_PER_S);
        assert!(parse_dur("fast").is_err());
        assert!(parse_dur("-1").is_err());
        assert_eq!(fmt_dur(60 * NS_PER_S), "60 s");
        assert_eq!(fmt_dur(1_500_000_000), "1.5 s");
        assert_eq!(fmt_dur(250_000_000), "250 ms");
    }

    #[test]
    fn metric_names_round_trip() {
        for m in MetricKind::ALL {
            assert_eq!(MetricKind::from_name(m.name()), Some(m));
        }
    }
}
