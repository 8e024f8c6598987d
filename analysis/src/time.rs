//! Wall-clock times and durations as users read and write them: UTC ISO-8601
//! (`2026-11-22T13:05:00Z`), RFC 3339 with milliseconds for JSON, epoch seconds, offsets from the
//! start or end of the data (`+30s`, `-2m`), and durations (`30s`, `500ms`). No time-zone database:
//! output is UTC, input accepts a `Z` or `±HH:MM` suffix.

use std::fmt;

/// Nanoseconds per second.
pub const NS_PER_S: u64 = 1_000_000_000;
const NS: u64 = NS_PER_S;

/// Days since 1970-01-01 → (year, month, day) (Howard Hinnant's civil_from_days).
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

/// (year, month, day) → days since 1970-01-01.
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `2026-11-22T13:05:00Z`, with `.mmm` when the time is not on a whole second.
pub fn iso(ns: u64) -> String {
    let secs = (ns / NS) as i64;
    let ms = (ns % NS) / 1_000_000;
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    let (h, mi, s) = (sod / 3600, (sod / 60) % 60, sod % 60);
    if ms == 0 {
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
    } else {
        format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{ms:03}Z")
    }
}

/// `13:05:00` (UTC time of day), for compact tables.
pub fn clock(ns: u64) -> String {
    let sod = (ns / NS) % 86_400;
    format!("{:02}:{:02}:{:02}", sod / 3600, (sod / 60) % 60, sod % 60)
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

/// A duration like `30s`, `2m`, `1h`, `500ms`, `1.5`, or a bare number of seconds → ns. The
/// one duration syntax of every command (`--win-size`, `--interval`, `+30s`…).
pub fn parse_duration_ns(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (examples: 10s, 500ms, 2m)"))?;
    let secs = match unit.trim() {
        "ns" => v / 1e9,
        "us" | "µs" => v / 1e6,
        "ms" => v / 1e3,
        "s" | "" => v,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        other => {
            return Err(format!(
                "unknown duration unit {other:?} in {s:?} (use ms, s, m, h)"
            ))
        }
    };
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok((secs * 1e9).round() as u64)
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

/// Parses `2026-11-22T13:05:00Z` (also with a space, fractional seconds, `±HH:MM`), epoch
/// seconds (`1763816700.5`), `+30s` (after the data's start) or `-2m` (before its end).
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

fn parse_iso(s: &str) -> Result<u64, &'static str> {
    let b = s.as_bytes();
    if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !(b[10] == b'T' || b[10] == b' ') {
        return Err("not an ISO date-time");
    }
    let num = |r: std::ops::Range<usize>| -> Result<i64, &'static str> {
        s.get(r)
            .and_then(|x| x.parse().ok())
            .ok_or("not an ISO date-time")
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)? as u32, num(8..10)? as u32);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return Err("date-time field out of range");
    }
    let mut rest = &s[19..];
    let mut frac_ns = 0u64;
    if let Some(r) = rest.strip_prefix('.') {
        let digits: String = r.chars().take_while(|c| c.is_ascii_digit()).collect();
        rest = &r[digits.len()..];
        let mut padded = digits.clone();
        padded.truncate(9);
        while padded.len() < 9 {
            padded.push('0');
        }
        frac_ns = padded.parse().unwrap_or(0);
    }
    let offset_s: i64 = match rest {
        "" | "Z" | "z" => 0,
        o if (o.starts_with('+') || o.starts_with('-')) && o.len() == 6 && &o[3..4] == ":" => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            let oh: i64 = o[1..3].parse().map_err(|_| "bad offset")?;
            let om: i64 = o[4..6].parse().map_err(|_| "bad offset")?;
            sign * (oh * 3600 + om * 60)
        }
        _ => return Err("bad time-zone suffix"),
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset_s;
    if secs < 0 {
        return Err("time before 1970");
    }
    Ok(secs as u64 * NS + frac_ns)
}

/// Formats wall-clock ns as `YYYY-MM-DD HH:MM:SS[.fff]Z` (UTC; sub-second digits only when
/// present), for people.
pub fn fmt_wall(ns: u64) -> String {
    let secs = ns / NS;
    let frac_ms = (ns % NS) / 1_000_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    let (hh, mm, ss) = (rem / 3600, (rem / 60) % 60, rem % 60);
    if ns % NS == 0 {
        format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02}Z")
    } else {
        format!("{y:04}-{m:02}-{d:02} {hh:02}:{mm:02}:{ss:02}.{frac_ms:03}Z")
    }
}

/// Formats wall-clock ns as RFC 3339 with milliseconds (`YYYY-MM-DDTHH:MM:SS.fffZ`), for JSON.
pub fn rfc3339(ns: u64) -> String {
    let secs = ns / NS;
    let frac_ms = (ns % NS) / 1_000_000;
    let (y, m, d) = civil_from_days((secs / 86_400) as i64);
    let rem = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac_ms:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
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

/// A measured number for people: three significant digits, no float noise (`8.79`, `1,234`,
/// `0.0421`); integers up to 99,999 are shown whole. Thresholds, scores, scales.
pub fn fmt_sig(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let a = v.abs();
    if a >= 1000.0 {
        let r = v.round() as i64;
        let s = r.unsigned_abs().to_string();
        let mut out = String::new();
        for (i, ch) in s.chars().enumerate() {
            if i > 0 && (s.len() - i) % 3 == 0 {
                out.push(',');
            }
            out.push(ch);
        }
        return if r < 0 { format!("-{out}") } else { out };
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
        assert_eq!(
            parse_time("2026-11-22 14:05:00.250+01:00").unwrap(),
            TimeSpec::At(t + 250_000_000)
        );
        assert_eq!(iso(t + 250_000_000), "2026-11-22T13:05:00.250Z");
        assert_eq!(iso(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso(951_782_400 * NS), "2000-02-29T00:00:00Z");
        for days in [-1000i64, 0, 59, 60, 365, 11_016, 20_000, 100_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
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
        assert_eq!(rfc3339(1_709_210_096 * NS), "2024-02-29T12:34:56.000Z");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ns("60").unwrap(), 60 * NS);
        assert_eq!(parse_duration_ns("30s").unwrap(), 30 * NS);
        assert_eq!(parse_duration_ns("1.5s").unwrap(), 1_500_000_000);
        assert_eq!(parse_duration_ns("500ms").unwrap(), 500_000_000);
        assert_eq!(parse_duration_ns("2m").unwrap(), 120 * NS);
        assert!(parse_duration_ns("fast").is_err());
        assert!(parse_duration_ns("-1").is_err());
        assert_eq!(fmt_dur(60 * NS), "60 s");
        assert_eq!(fmt_dur(1_500_000_000), "1.5 s");
        assert_eq!(fmt_dur(250_000_000), "250 ms");
    }

    fn t_of(h: u64, m: u64, s: u64) -> u64 {
        (h * 3600 + m * 60 + s) * NS
    }
}
