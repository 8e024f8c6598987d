//! The one duration syntax of culprit: of the command line (`--win-size`, `--interval`,
//! `--keep`, `+30s`…) and of the runtime's environment (`CULPRIT_ROTATE`).
//!
//! A bare number is seconds (`60`, `1.5`); otherwise one or more *number unit* groups, with or
//! without spaces or commas between them (`500ms`, `1m30s`, `1h 15m`, `2 hours, 30 minutes`).
//! Units, short or spelled out: `ns`, `us`/`µs`, `ms`, `s`/`sec`/`second(s)`, `m`/`min`/`minute(s)`,
//! `h`/`hr`/`hour(s)`, `d`/`day(s)`, `w`/`week(s)` (and `nanosecond(s)`, `microsecond(s)`,
//! `millisecond(s)`).

/// The largest duration taken: 10⁹ s (about 31 years).
const MAX_NS: f64 = 1e18;

/// A duration in ns (see the module's syntax). Errors are one line naming what was wrong.
pub fn parse_ns(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let not_a_duration = || format!("{s:?} is not a duration (examples: 10s, 500ms, 2m, 1h)");
    if t.is_empty() {
        return Err(not_a_duration());
    }
    if let Ok(v) = t.parse::<f64>() {
        return in_range(s, v * 1e9);
    }
    let mut rest = t;
    let mut total = 0.0;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (num, after) = rest.split_at(num_len);
        let v: f64 = num.parse().map_err(|_| not_a_duration())?;
        let after = after.trim_start();
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.' || c == ',' || c.is_whitespace())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_len);
        let mult = match unit {
            "ns" | "nanosecond" | "nanoseconds" => 1.0,
            "us" | "µs" | "microsecond" | "microseconds" => 1e3,
            "ms" | "millisecond" | "milliseconds" => 1e6,
            "s" | "sec" | "secs" | "second" | "seconds" => 1e9,
            "m" | "min" | "mins" | "minute" | "minutes" => 60e9,
            "h" | "hr" | "hrs" | "hour" | "hours" => 3600e9,
            "d" | "day" | "days" => 86_400e9,
            "w" | "week" | "weeks" => 7.0 * 86_400e9,
            "" => return Err(not_a_duration()),
            u => {
                return Err(format!(
                    "unknown duration unit {u:?} in {s:?} (use ns, us, ms, s, m, h, d, w)"
                ))
            }
        };
        total += v * mult;
        rest = after.trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r.trim_start();
            if rest.is_empty() {
                return Err(not_a_duration());
            }
        }
    }
    in_range(s, total)
}

fn in_range(s: &str, ns: f64) -> Result<u64, String> {
    if !ns.is_finite() || !(0.0..=MAX_NS).contains(&ns) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(ns.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn the_syntax() {
        assert_eq!(parse_ns("60"), Ok(60 * S));
        assert_eq!(parse_ns("1.5"), Ok(1_500_000_000));
        assert_eq!(parse_ns(" 30s "), Ok(30 * S));
        assert_eq!(parse_ns("0.1s"), Ok(100_000_000));
        assert_eq!(parse_ns("500ms"), Ok(500_000_000));
        assert_eq!(parse_ns("250us"), Ok(250_000));
        assert_eq!(parse_ns("250µs"), Ok(250_000));
        assert_eq!(parse_ns("7ns"), Ok(7));
        assert_eq!(parse_ns("2m"), Ok(120 * S));
        assert_eq!(parse_ns("2min"), Ok(120 * S));
        assert_eq!(parse_ns("1m30s"), Ok(90 * S));
        assert_eq!(parse_ns("1h 15m"), Ok(4500 * S));
        assert_eq!(parse_ns("1 h"), Ok(3600 * S));
        assert_eq!(parse_ns("7d"), Ok(7 * 86_400 * S));
        assert_eq!(parse_ns("2w"), Ok(14 * 86_400 * S));
        assert_eq!(parse_ns("0s"), Ok(0));
        assert_eq!(parse_ns("2 hours, 30 minutes"), Ok(9000 * S));
        assert_eq!(parse_ns("1 day"), Ok(86_400 * S));
        assert_eq!(parse_ns("3 mins 4 secs"), Ok(184 * S));
        assert_eq!(parse_ns("1 week"), Ok(7 * 86_400 * S));
    }

    #[test]
    fn what_is_refused() {
        assert_eq!(
            parse_ns("fast").unwrap_err(),
            "\"fast\" is not a duration (examples: 10s, 500ms, 2m, 1h)"
        );
        assert_eq!(
            parse_ns("5 parsecs").unwrap_err(),
            "unknown duration unit \"parsecs\" in \"5 parsecs\" (use ns, us, ms, s, m, h, d, w)"
        );
        for bad in [
            "",
            "s",
            "1y",
            "-1",
            "-1s",
            "1..5s",
            "1s2",
            "2000000000s",
            "nan",
            "inf",
        ] {
            assert!(parse_ns(bad).is_err(), "{bad:?} was taken");
        }
    }
}
