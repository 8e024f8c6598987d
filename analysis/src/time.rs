//! Wall-clock times and durations as users read and write them: UTC ISO-8601
//! (`2026-11-22T13:05:00Z`), RFC 3339 with milliseconds for JSON, epoch seconds, offsets from the
//! start or end of the data (`+30s`, `-2m`), and durations (`30s`, `500ms`). The calendar and the
//! parsing are `jiff`'s. Output for machines (JSON, [`rfc3339`], [`iso`]) is always UTC. Output for
//! people ([`fmt_wall`], [`wall_iso`], [`clock`]) is UTC too unless a program asks for the local
//! zone with [`show_local_time`] (the `culprit` binary does, unless given `--utc`): then times are
//! local with their offset shown (`2026-11-22 14:05:00+01:00`), and a zone at UTC still reads
//! `…Z`. Input accepts a `Z` or `±HH:MM` suffix (none means UTC).

use std::fmt;
use std::sync::RwLock;

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Nanoseconds per second.
pub const NS_PER_S: u64 = 1_000_000_000;
const NS: u64 = NS_PER_S;

/// The instant `ns` after the epoch (every `u64` is one: they end in 2554).
fn stamp(ns: u64) -> jiff::Timestamp {
    jiff::Timestamp::from_nanosecond(i128::from(ns)).unwrap_or(jiff::Timestamp::MAX)
}

/// `ns` in UTC by a `strftime` pattern; `%.3f` shows milliseconds (truncated).
fn utc(ns: u64, pattern: &str) -> String {
    stamp(ns - ns % 1_000_000).strftime(pattern).to_string()
}

/// The zone of output for people; `None` is UTC.
static HUMAN_ZONE: RwLock<Option<TimeZone>> = RwLock::new(None);

/// Shows times for people in this system's local zone (`TZ`, else `/etc/localtime`; UTC when
/// neither can be read) from now on.
pub fn show_local_time() {
    let tz = TimeZone::try_system().unwrap_or(TimeZone::UTC);
    if let Ok(mut z) = HUMAN_ZONE.write() {
        *z = Some(tz);
    }
}

/// `ns` for people by a `strftime` pattern without a zone: in UTC with `Z` appended, or in the
/// local zone ([`show_local_time`]) with its offset (`+01:00`) appended — `Z` when it is zero.
/// With `zone_name`, the zone's abbreviation follows instead (` UTC`, ` CET`).
fn human(ns: u64, pattern: &str, zone_name: bool) -> String {
    let tz = HUMAN_ZONE.read().ok().and_then(|z| z.clone());
    let t = stamp(ns - ns % 1_000_000);
    match tz {
        None if zone_name => format!("{} UTC", t.strftime(pattern)),
        None => format!("{}Z", t.strftime(pattern)),
        Some(tz) => {
            let z = t.to_zoned_datetime(tz);
            if zone_name {
                z.strftime(&format!("{pattern} %Z")).to_string()
            } else if z.offset() == jiff::tz::Offset::UTC {
                format!("{}Z", z.strftime(pattern))
            } else {
                z.strftime(&format!("{pattern}%:z")).to_string()
            }
        }
    }
}

/// Wall-clock now, ns since the epoch.
pub fn now_ns() -> u64 {
    u64::try_from(jiff::Timestamp::now().as_nanosecond()).unwrap_or(0)
}

/// `2026-11-22T13:05:00Z`, with `.mmm` when the milliseconds are not zero.
pub fn iso(ns: u64) -> String {
    if (ns % NS) / 1_000_000 == 0 {
        utc(ns, "%Y-%m-%dT%H:%M:%SZ")
    } else {
        utc(ns, "%Y-%m-%dT%H:%M:%S%.3fZ")
    }
}

/// [`iso`] for people: in the zone of [`show_local_time`] when asked
/// (`2026-11-22T14:05:00+01:00`).
pub fn wall_iso(ns: u64) -> String {
    if (ns % NS) / 1_000_000 == 0 {
        human(ns, "%Y-%m-%dT%H:%M:%S", false)
    } else {
        human(ns, "%Y-%m-%dT%H:%M:%S%.3f", false)
    }
}

/// `13:05:00`, time of day for compact tables under a header that shows the zone (UTC, or the
/// local zone after [`show_local_time`]).
pub fn clock(ns: u64) -> String {
    let full = human(ns, "%H:%M:%S", false);
    full.get(..8).unwrap_or(&full).to_string()
}

/// `13:05:00 UTC` (or `14:05:00 CET` after [`show_local_time`]): time of day with its zone.
pub fn clock_zoned(ns: u64) -> String {
    human(ns, "%H:%M:%S", true)
}

/// Formats wall-clock ns as `YYYY-MM-DD HH:MM:SS[.fff]Z` (sub-second digits only when the time
/// is not on a whole second), for people: UTC, or local with its offset after
/// [`show_local_time`].
pub fn fmt_wall(ns: u64) -> String {
    if ns % NS == 0 {
        human(ns, "%Y-%m-%d %H:%M:%S", false)
    } else {
        human(ns, "%Y-%m-%d %H:%M:%S%.3f", false)
    }
}

/// [`fmt_wall`] always in UTC, for fields of machine output in that form.
pub fn fmt_wall_utc(ns: u64) -> String {
    if ns % NS == 0 {
        utc(ns, "%Y-%m-%d %H:%M:%SZ")
    } else {
        utc(ns, "%Y-%m-%d %H:%M:%S%.3fZ")
    }
}

/// A time written by [`fmt_wall_utc`], [`iso`] or [`rfc3339`] rewritten by [`fmt_wall`] (for
/// people); text that is not a time is returned as it is.
pub fn rezone(text: &str) -> String {
    match parse_time(text) {
        Ok(TimeSpec::At(ns)) => fmt_wall(ns),
        _ => text.to_string(),
    }
}

/// Formats wall-clock ns as RFC 3339 with milliseconds (`YYYY-MM-DDTHH:MM:SS.fffZ`), for JSON.
pub fn rfc3339(ns: u64) -> String {
    utc(ns, "%Y-%m-%dT%H:%M:%S%.3fZ")
}

/// A time in a report (the JSON report's times, the stretches and windows it names): ns since
/// the epoch to the millisecond, as the report carries it, so that a report read back holds the
/// times it was written with. Serialised as [`rfc3339`] (`2026-11-22T13:05:00.250Z`), read back
/// from RFC 3339 (any offset, any fraction of a second, truncated to the millisecond).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The time `ns` after the epoch, to the millisecond (truncated, as [`rfc3339`] writes it).
    pub fn from_ns(ns: u64) -> Self {
        Timestamp(ns - ns % 1_000_000)
    }

    /// ns since the epoch (a whole number of milliseconds).
    pub fn ns(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Timestamp {
    /// [`rfc3339`]: UTC, with milliseconds.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&rfc3339(self.0))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&stamp(self.0).strftime("%Y-%m-%dT%H:%M:%S%.3fZ"))
    }
}

impl std::str::FromStr for Timestamp {
    type Err = ParseError;

    /// RFC 3339 (`2026-11-22T13:05:00.250Z`, `2026-11-22T14:05:00+01:00`), to the millisecond.
    fn from_str(text: &str) -> Result<Self, ParseError> {
        let t = text
            .parse::<jiff::Timestamp>()
            .map_err(|e| ParseError(format!("time {text:?}: {e}")))?;
        u64::try_from(t.as_nanosecond())
            .map(Timestamp::from_ns)
            .map_err(|_| ParseError(format!("time {text:?} is before 1970")))
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A duration in ns as `1.23 s`, `45.6 ms`, `789 µs`, `12 ns`.
pub fn duration(ns: u64) -> String {
    let f = ns as f64;
    if ns >= NS {
        format!("{:.2} s", f / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", f / 1e6)
    } else if ns >= 1_000 {
        format!("{:.1} µs", f / 1e3)
    } else {
        format!("{ns} ns")
    }
}

/// A duration like `30s`, `2m`, `1h`, `500ms`, `1m30s`, `1.5`, or a bare number of seconds →
/// ns. The one duration syntax of every command (`--win-size`, `--interval`, `+30s`…):
/// [`culprit_format::duration`].
pub fn parse_duration_ns(s: &str) -> Result<u64, String> {
    culprit_format::duration::parse_ns(s)
}

/// A time or duration the user wrote that could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError(String);

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ParseError {}

/// [`parse_duration_ns`] with a [`std::error::Error`].
pub fn parse_duration(s: &str) -> Result<u64, ParseError> {
    parse_duration_ns(s).map_err(ParseError)
}

/// A point in time given by the user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSpec {
    /// Absolute wall-clock ns.
    At(u64),
    /// ns after the start of the data.
    FromStart(u64),
    /// ns before the end of the data.
    FromEnd(u64),
}

impl TimeSpec {
    /// Resolves against the data's first and last times.
    pub fn resolve(self, data_start: u64, data_end: u64) -> u64 {
        match self {
            TimeSpec::At(t) => t,
            TimeSpec::FromStart(d) => data_start.saturating_add(d),
            TimeSpec::FromEnd(d) => data_end.saturating_sub(d),
        }
    }
}

/// Parses `2026-11-22T13:05:00Z` (also with a space, fractional seconds, `±HH:MM`, or no
/// suffix for UTC), epoch seconds (`1763816700.5`), `+30s` (after the data's start) or `-2m`
/// (before its end).
pub fn parse_time(s: &str) -> Result<TimeSpec, ParseError> {
    let s = s.trim();
    if let Some(rest) = s.strip_prefix('+') {
        return Ok(TimeSpec::FromStart(parse_duration(rest)?));
    }
    if let Some(rest) = s.strip_prefix('-') {
        return Ok(TimeSpec::FromEnd(parse_duration(rest)?));
    }
    if let Ok(v) = s.parse::<f64>() {
        if v.is_finite() && v >= 0.0 {
            return Ok(TimeSpec::At((v * 1e9).round() as u64));
        }
    }
    parse_iso(s).map(TimeSpec::At).map_err(|why| {
        ParseError(format!(
            "bad time {s:?} (examples: 2026-11-22T13:05:00Z, 1763816700, +30s after the start, \
             -2m before the end): {why}"
        ))
    })
}

/// An ISO date-time with an offset, or without one (UTC).
fn parse_iso(s: &str) -> Result<u64, String> {
    let t = match s.parse::<jiff::Timestamp>() {
        Ok(t) => t,
        Err(with_offset) => s
            .parse::<DateTime>()
            .and_then(|dt| TimeZone::UTC.to_timestamp(dt))
            .map_err(|_| with_offset.to_string())?,
    };
    u64::try_from(t.as_nanosecond()).map_err(|_| "time before 1970".to_string())
}

/// Formats a duration in ns for people, exactly when it is a round number: `60 s`, `1.5 s`,
/// `250 ms` (settings; [`duration`] rounds measured durations instead).
pub fn fmt_dur(ns: u64) -> String {
    if ns % NS == 0 {
        format!("{} s", ns / NS)
    } else if ns >= NS {
        let v = format!("{:.3}", ns as f64 / 1e9);
        format!("{} s", v.trim_end_matches('0'))
    } else if ns % 1_000_000 == 0 {
        format!("{} ms", ns / 1_000_000)
    } else {
        format!("{} µs", ns / 1000)
    }
}

/// `1234567` → `1,234,567` (every integer count culprit shows people).
pub fn group_digits(v: impl Into<i128>) -> String {
    let v: i128 = v.into();
    let s = v.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(ch);
    }
    if v < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// A measured number for people: three significant digits, no float noise (`8.79`, `1,234`,
/// `0.0421`); integers up to 99,999 are shown whole. Thresholds, scores, scales.
pub fn fmt_sig(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let a = v.abs();
    if a >= 1000.0 {
        return group_digits(v.round() as i64);
    }
    if a == 0.0 {
        return "0".to_string();
    }
    let decimals = (2 - a.log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_grouped() {
        assert_eq!(group_digits(0u8), "0");
        assert_eq!(group_digits(999u64), "999");
        assert_eq!(group_digits(1000u64), "1,000");
        assert_eq!(group_digits(1234567u64), "1,234,567");
        assert_eq!(group_digits(-1234i64), "-1,234");
        assert_eq!(group_digits(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn significant_digits() {
        assert_eq!(fmt_sig(8.790000000000001), "8.79");
        assert_eq!(fmt_sig(64.0), "64");
        assert_eq!(fmt_sig(25_245.6), "25,246");
        assert_eq!(fmt_sig(581.7), "582");
        assert_eq!(fmt_sig(0.042_13), "0.0421");
        assert_eq!(fmt_sig(1.5), "1.5");
        assert_eq!(fmt_sig(0.0), "0");
        assert_eq!(fmt_sig(-12.345), "-12.3");
    }

    #[test]
    fn iso_round_trip() {
        // 2026-11-22T13:05:00Z
        let t = 1_795_352_700 * NS;
        assert_eq!(iso(t), "2026-11-22T13:05:00Z");
        assert_eq!(parse_time("2026-11-22T13:05:00Z").unwrap(), TimeSpec::At(t));
        assert_eq!(parse_time("2026-11-22T13:05:00").unwrap(), TimeSpec::At(t));
        assert_eq!(
            parse_time("2026-11-22 14:05:00.250+01:00").unwrap(),
            TimeSpec::At(t + 250_000_000)
        );
        assert_eq!(iso(t + 250_000_000), "2026-11-22T13:05:00.250Z");
        assert_eq!(iso(t + 250_999_999), "2026-11-22T13:05:00.250Z");
        assert_eq!(iso(t + 999_999), "2026-11-22T13:05:00Z");
        assert_eq!(iso(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso(951_782_400 * NS), "2000-02-29T00:00:00Z");
        assert!(parse_time("1969-12-31T23:59:59Z").is_err());
    }

    #[test]
    fn specs_and_durations() {
        assert_eq!(parse_time("+30s").unwrap(), TimeSpec::FromStart(30 * NS));
        assert_eq!(parse_time("-2m").unwrap(), TimeSpec::FromEnd(120 * NS));
        assert_eq!(parse_time("12.5").unwrap(), TimeSpec::At(12_500_000_000));
        assert!(parse_time("yesterday").is_err());
        assert!(parse_time("2026-13-01T00:00:00Z").is_err());
        assert_eq!(parse_duration("500ms").unwrap(), 500_000_000);
        assert_eq!(parse_duration("1h").unwrap(), 3600 * NS);
        assert!(parse_duration("-1").is_err());
        assert_eq!(TimeSpec::FromEnd(5).resolve(10, 100), 95);
        assert_eq!(duration(1_500_000_000), "1.50 s");
        assert_eq!(duration(2_500_000), "2.5 ms");
        assert_eq!(clock(t_of(13, 5, 9)), "13:05:09");
    }

    #[test]
    fn wall_clock_formatting() {
        assert_eq!(fmt_wall(0), "1970-01-01 00:00:00Z");
        // 2024-02-29 12:34:56 UTC = 1709210096.
        assert_eq!(fmt_wall(1_709_210_096 * NS), "2024-02-29 12:34:56Z");
        assert_eq!(
            fmt_wall(1_709_210_096 * NS + 250_000_000),
            "2024-02-29 12:34:56.250Z"
        );
        assert_eq!(fmt_wall(1_709_210_096 * NS + 5), "2024-02-29 12:34:56.000Z");
        assert_eq!(rfc3339(1_709_210_096 * NS), "2024-02-29T12:34:56.000Z");
        assert_eq!(fmt_wall(u64::MAX), "2554-07-21 23:34:33.709Z");
        assert!(now_ns() > 1_700_000_000 * NS);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("60").unwrap(), 60 * NS);
        assert_eq!(parse_duration_ns("30s").unwrap(), 30 * NS);
        assert_eq!(parse_duration_ns("1.5s").unwrap(), 1_500_000_000);
        assert_eq!(parse_duration_ns("1.5").unwrap(), 1_500_000_000);
        assert_eq!(parse_duration_ns("500ms").unwrap(), 500_000_000);
        assert_eq!(parse_duration_ns("250us").unwrap(), 250_000);
        assert_eq!(parse_duration_ns("2m").unwrap(), 120 * NS);
        assert_eq!(parse_duration_ns("2min").unwrap(), 120 * NS);
        assert_eq!(parse_duration_ns("1m30s").unwrap(), 90 * NS);
        assert_eq!(
            parse_duration_ns("fast").unwrap_err(),
            "\"fast\" is not a duration (examples: 10s, 500ms, 2m, 1h)"
        );
        assert_eq!(
            parse_duration_ns("5 parsecs").unwrap_err(),
            "unknown duration unit \"parsecs\" in \"5 parsecs\" (use ns, us, ms, s, m, h, d, w)"
        );
        assert!(parse_duration_ns("-1").is_err());
        assert!(parse_duration_ns("-1s").is_err());
        assert!(parse_duration_ns("2000000000s").is_err());
        assert_eq!(fmt_dur(60 * NS), "60 s");
        assert_eq!(fmt_dur(1_500_000_000), "1.5 s");
        assert_eq!(fmt_dur(250_000_000), "250 ms");
    }

    /// A report's time writes as `rfc3339` writes it and reads back equal, fractions of a
    /// second included; a time to finer than the millisecond is truncated, as `rfc3339` does.
    #[test]
    fn timestamp_round_trip() {
        for ns in [
            0,
            1_795_352_700 * NS,
            1_795_352_700 * NS + 250_000_000,
            1_709_210_096 * NS + 999_000_000,
        ] {
            let t = Timestamp::from_ns(ns);
            let json = serde_json::to_string(&t).unwrap();
            assert_eq!(json, format!("\"{}\"", rfc3339(ns)));
            assert_eq!(t.to_string(), rfc3339(ns));
            assert_eq!(serde_json::from_str::<Timestamp>(&json).unwrap(), t);
            assert_eq!(t.ns(), ns);
        }
        let fine = Timestamp::from_ns(1_795_352_700 * NS + 250_999_999);
        assert_eq!(fine.ns(), 1_795_352_700 * NS + 250_000_000);
        assert_eq!(
            serde_json::to_string(&fine).unwrap(),
            "\"2026-11-22T13:05:00.250Z\""
        );
        let read = |s: &str| serde_json::from_str::<Timestamp>(s);
        assert_eq!(read("\"2026-11-22T14:05:00.25+01:00\"").unwrap(), fine);
        assert_eq!(
            read("\"2026-11-22T13:05:00Z\"").unwrap().ns(),
            1_795_352_700 * NS
        );
        assert!(read("\"1969-12-31T23:59:59Z\"").is_err());
        assert!(
            read("\"2026-11-22T13:05:00\"").is_err(),
            "no offset: not RFC 3339"
        );
        assert!(read("1795352700").is_err());
    }

    fn t_of(h: u64, m: u64, s: u64) -> u64 {
        (h * 3600 + m * 60 + s) * NS
    }
}
