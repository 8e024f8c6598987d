//! Rotated files: one writer's history cut into pieces, so that a server running for months
//! keeps a bounded amount of data on disk (`CULPRIT_ROTATE`, `culprit sample --rotate`,
//! `culprit prune`).
//!
//! A writer rotates only at an interval boundary: every interval is in exactly one piece. The
//! piece it leaves gets an End record with [`end_reason::ROTATED`] (not a process end), the
//! new piece repeats what makes it readable on its own (the Info record, the tracer's Object
//! records, the sampler's string table), so that any piece can be read — and the oldest pruned
//! — without the others.
//!
//! * **Names.** Piece 0 keeps the writer's usual name (`trace-<pid>-<start_ns>.cul`,
//!   `samples-<start_ns>.cul`); piece `n ≥ 1` adds `.r<n>` with `n` zero-padded to six digits
//!   ([`piece_name`]): `trace-<pid>-<start_ns>.r000001.cul`. The pid and start in the name stay
//!   the writer's (identity), the pieces sort after the first and in order, and readers older
//!   than rotation skip them as unknown files.
//! * **Info.** Piece `n ≥ 1` has [`info_keys::CONTINUES`](crate::info_keys::CONTINUES) = the
//!   file name of piece `n − 1` (same directory) and [`info_keys::PIECE`](crate::info_keys::PIECE)
//!   = `n`; its process facts (pid, `proc_start_ns`, boot id) are those of piece 0.
//!
//! Readers join a writer's pieces into one history (`culprit_analysis::data`).

use crate::end_reason;

/// Digits of the piece number in a name. Past 999,999 pieces (11 days of rotating every
/// second) names get more digits and no longer sort by name; readers order pieces by the
/// number itself ([`split_piece`]).
pub const PIECE_DIGITS: usize = 6;

/// The file name of piece `piece` of the writer whose first file is `first` (a name ending in
/// `.cul`): `first` itself for piece 0, else `<stem>.r<piece>.cul`.
pub fn piece_name(first: &str, piece: u32) -> String {
    if piece == 0 {
        return first.to_string();
    }
    let stem = first.strip_suffix(".cul").unwrap_or(first);
    format!("{stem}.r{piece:0width$}.cul", width = PIECE_DIGITS)
}

/// Splits a data file name into the writer's first file name and the piece number:
/// `trace-1-2.r000003.cul` → (`trace-1-2.cul`, 3); a name without a piece part is piece 0.
pub fn split_piece(name: &str) -> (String, u32) {
    if let Some(stem) = name.strip_suffix(".cul") {
        if let Some((base, n)) = stem.rsplit_once(".r") {
            if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) {
                if let Ok(n) = n.parse::<u32>() {
                    return (format!("{base}.cul"), n);
                }
            }
        }
    }
    (name.to_string(), 0)
}

/// True when an End record's reason says the writer went on in a new piece.
pub fn is_rotated(reason: u32) -> bool {
    reason == end_reason::ROTATED
}

/// A length of time (the syntax of [`crate::duration`]: `1h`, `30m`, `10s`, `7d`, a bare number
/// of seconds) in ns, more than zero: the syntax of `CULPRIT_ROTATE`, `--rotate` and `--keep`.
pub fn parse_duration_ns(s: &str) -> Result<u64, String> {
    match crate::duration::parse_ns(s)? {
        0 => Err(format!("{s:?}: a length of time more than zero is needed")),
        ns => Ok(ns),
    }
}

/// A size like `100M`, `5G`, `512K`, `1T` (powers of 1024; a `B`/`iB` suffix is allowed) or a
/// bare number of bytes: the syntax of `CULPRIT_ROTATE_SIZE`, `--rotate-size`, `--max-size`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a size (examples: 100M, 5G)"))?;
    let u = unit.trim().to_ascii_uppercase();
    let u = u
        .strip_suffix("IB")
        .or_else(|| u.strip_suffix('B'))
        .unwrap_or(&u);
    let mult: f64 = match u {
        "" => 1.0,
        "K" => 1024.0,
        "M" => 1024.0 * 1024.0,
        "G" => 1024.0 * 1024.0 * 1024.0,
        "T" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(format!("unknown unit {unit:?} in {s:?} (use K, M, G, T)")),
    };
    let b = v * mult;
    if !b.is_finite() || !(1.0..=1e19).contains(&b) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(b as u64)
}

/// When a writer moves to a new piece: every `every_ns` of wall-clock time (on multiples of it
/// since the epoch) and/or once its piece holds `max_bytes`. Checked at interval boundaries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rotate {
    /// Rotate at wall-clock multiples of this (ns); `None`: not by time.
    pub every_ns: Option<u64>,
    /// Rotate once the piece is this large (bytes); `None`: not by size.
    pub max_bytes: Option<u64>,
}

impl Rotate {
    /// True when rotation is asked for at all.
    pub fn enabled(&self) -> bool {
        self.every_ns.is_some() || self.max_bytes.is_some()
    }

    /// True when a writer whose piece began at `piece_start_ns` and holds `bytes` should move
    /// to a new piece at the interval boundary `boundary_ns`.
    pub fn due(&self, piece_start_ns: u64, boundary_ns: u64, bytes: u64) -> bool {
        let by_time = self
            .every_ns
            .is_some_and(|e| e > 0 && boundary_ns / e > piece_start_ns / e);
        let by_size = self.max_bytes.is_some_and(|m| bytes >= m);
        by_time || by_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn piece_names_round_trip_and_sort() {
        let first = "trace-42-1700000000000000000.cul";
        assert_eq!(piece_name(first, 0), first);
        let p1 = piece_name(first, 1);
        assert_eq!(p1, "trace-42-1700000000000000000.r000001.cul");
        assert_eq!(split_piece(&p1), (first.to_string(), 1));
        assert_eq!(split_piece(first), (first.to_string(), 0));
        let mut v = vec![
            piece_name(first, 10),
            piece_name(first, 2),
            first.to_string(),
        ];
        v.sort();
        assert_eq!(
            v,
            vec![
                first.to_string(),
                piece_name(first, 2),
                piece_name(first, 10)
            ]
        );
        assert_eq!(
            split_piece("samples-9.1.cul"),
            ("samples-9.1.cul".into(), 0)
        );
    }

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration_ns("1h"), Ok(3_600_000_000_000));
        assert_eq!(parse_duration_ns("7d"), Ok(7 * 86_400_000_000_000));
        assert_eq!(parse_duration_ns("1s"), Ok(1_000_000_000));
        assert_eq!(parse_duration_ns("2"), Ok(2_000_000_000));
        assert!(parse_duration_ns("1y").is_err());
        assert!(parse_duration_ns("").is_err());
        assert!(parse_duration_ns("0s").is_err());
        assert_eq!(parse_size("5G"), Ok(5 << 30));
        assert_eq!(parse_size("100MB"), Ok(100 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("5X").is_err());
    }

    #[test]
    fn due_at_time_multiples_and_size() {
        let r = Rotate {
            every_ns: Some(10),
            max_bytes: None,
        };
        assert!(!r.due(11, 19, 0));
        assert!(r.due(11, 20, 0));
        let r = Rotate {
            every_ns: None,
            max_bytes: Some(100),
        };
        assert!(!r.due(0, 5, 99));
        assert!(r.due(0, 5, 100));
        assert!(!Rotate::default().enabled());
    }
}
