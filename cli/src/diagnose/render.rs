//! `culprit diagnose`'s report for people: rendered from the typed [`Diagnosis`], nothing
//! recomputed.

use std::io::Write;

use culprit_analysis::analyzer::MIN_NODES;
use culprit_analysis::combine::Verdict;
use culprit_analysis::diagnosis::{
    CauseRow, ClosedWindow, MetricStatus, NodeReport, ThresholdSource,
};
use culprit_analysis::time::{fmt_dur, fmt_wall, parse_time, TimeSpec};
use culprit_analysis::Diagnosis;

use crate::style::verdict as paint;

/// A value in a metric's unit, for people; milliseconds read as durations.
pub fn fmt_value(unit: &str, v: f64) -> String {
    match unit {
        "ms" => {
            let a = v.abs();
            if a >= 1000.0 {
                format!("{:.2} s", v / 1000.0)
            } else if a >= 1.0 {
                format!("{v:.1} ms")
            } else {
                format!("{:.0} µs", v * 1000.0)
            }
        }
        _ => format!("{} {unit}", group_digits(v.round() as i64)),
    }
}

/// A value without its unit when the unit follows anyway ("57,533 vs 15,148 samples"); time
/// keeps its unit, which varies.
fn fmt_number(unit: &str, v: f64) -> String {
    match unit {
        "ms" => fmt_value(unit, v),
        _ => group_digits(v.round() as i64),
    }
}

fn fmt_score(v: f64) -> String {
    if v.abs() >= 100.0 {
        group_digits(v.round() as i64)
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
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

/// Prints the report for people.
pub fn print_human(r: &Diagnosis, out: &mut impl Write) -> std::io::Result<()> {
    let span = match (&r.from, &r.to) {
        (Some(a), Some(b)) => format!("{} – {}", short(a), short(b)),
        _ => "no complete window".to_string(),
    };
    writeln!(
        out,
        "culprit diagnose: {} nodes ({}); {span}",
        r.nodes.len(),
        r.nodes.join(", ")
    )?;
    writeln!(
        out,
        "windows {} every {}, faulty when anomalous in {} of the last {}; score {}, distance {}",
        fmt_dur((r.settings.win_size_s * 1e9).round() as u64),
        fmt_dur((r.settings.win_shift_s * 1e9).round() as u64),
        r.settings.k,
        2 * r.settings.k - 1,
        r.settings.score.name(),
        r.settings.distance.name()
    )?;
    match (&r.thresholds_file, r.trained) {
        (Some(f), true) => writeln!(out, "thresholds: trained ({f})")?,
        (Some(f), false) => writeln!(
            out,
            "thresholds: trained ({f}) for some metrics; UNTRAINED for the others"
        )?,
        (None, _) => writeln!(
            out,
            "thresholds: {} — robust per-window rule (docs/thresholds.md); train on \
             fault-free runs with `culprit train` for sharper verdicts",
            paint("UNTRAINED", 0)
        )?,
    }
    writeln!(out)?;
    if r.culprits.is_empty() {
        writeln!(out, "VERDICT: no node flagged")?;
    } else {
        for v in r
            .verdicts
            .iter()
            .filter(|v| v.combined.verdict.is_culprit())
        {
            writeln!(
                out,
                "VERDICT: {} is {} — {}",
                v.node,
                paint(v.combined.verdict.word(), 0),
                v.combined.reason
            )?;
        }
    }
    for v in r
        .verdicts
        .iter()
        .filter(|v| matches!(v.combined.verdict, Verdict::Suspect | Verdict::Damaged))
    {
        writeln!(
            out,
            "{}: {} — {}",
            paint(v.combined.verdict.word(), 0),
            v.node,
            v.combined.reason
        )?;
    }
    print_layers(r, out)?;
    writeln!(out)?;
    // Verdict table.
    let w = r.nodes.iter().map(|n| n.len()).max().unwrap_or(4).max(4);
    write!(out, "{:<w$}", "node")?;
    for m in &r.metrics {
        write!(out, "  {:<10}", m.metric.name())?;
    }
    writeln!(out, "  combined")?;
    for v in &r.verdicts {
        write!(out, "{:<w$}", v.node)?;
        for m in &r.metrics {
            let nm = m.nodes.iter().find(|x| x.node == v.node);
            let word = match nm.map(|x| x.verdict) {
                Some(MetricStatus::Faulty) => "FAULTY",
                Some(MetricStatus::Ok) => "ok",
                _ => "-",
            };
            write!(out, "  {}", paint(word, 10))?;
        }
        writeln!(out, "  {}", paint(v.combined.verdict.word(), 0))?;
    }
    if !r.findings.is_empty() {
        writeln!(out)?;
        writeln!(out, "missing data:")?;
        for f in &r.findings {
            writeln!(out, "  {}", f.describe())?;
        }
    }
    // Details of faulty and suspect nodes.
    for m in &r.metrics {
        for nm in m.nodes.iter().filter(|n| !n.top.is_empty()) {
            writeln!(out)?;
            let thr = match (nm.threshold, nm.threshold_source) {
                (Some(t), Some(ThresholdSource::Largest)) => format!(
                    "threshold {} {} (the largest trained node's)",
                    fmt_score(t),
                    m.score_unit
                ),
                (Some(t), _) => format!("threshold {} {} (own)", fmt_score(t), m.score_unit),
                _ => "unsupervised threshold".to_string(),
            };
            let state = match nm.episodes.first() {
                Some(e) => format!("faulty from the window starting {}", short(&e.from)),
                None => "anomalous but not faulty".to_string(),
            };
            writeln!(
                out,
                "{} · {}: {state}; anomalous in {} of {} windows; {thr}",
                nm.node,
                m.metric,
                nm.anomalous_windows.len(),
                nm.windows_scored
            )?;
            let size = m
                .windows_ns
                .map_or((r.settings.win_size_s * 1e9).round() as u64, |w| w.size_ns);
            writeln!(out, "  anomalous windows: {}", window_ranges(nm, size))?;
            writeln!(
                out,
                "  top functions (component distance to the median node, summed over the \
                 anomalous windows):"
            )?;
            let fw = nm.top.iter().map(label_len).max().unwrap_or(8).clamp(8, 60);
            for t in &nm.top {
                let rel = match t.relative {
                    Some(r) => format!(" ({:+.0}%)", r * 100.0),
                    None => " (median 0)".to_string(),
                };
                writeln!(
                    out,
                    "  {:>2}  {:<fw$}  {}: {} vs {}{rel}   [distance {} {}]",
                    t.rank,
                    label(t),
                    t.direction,
                    fmt_number(&m.unit, t.node_total),
                    fmt_value(&m.unit, t.median_total),
                    fmt_score(t.distance),
                    m.score_unit
                )?;
            }
        }
    }
    if !r.notes.is_empty() {
        writeln!(out)?;
        for n in &r.notes {
            writeln!(out, "note: {n}")?;
        }
    }
    for wline in &r.warnings {
        writeln!(out, "warning: {wline}")?;
    }
    Ok(())
}

fn label(t: &CauseRow) -> String {
    let mut s = String::new();
    if let Some(p) = &t.program {
        s.push_str(p);
        s.push_str(": ");
    }
    s.push_str(&t.function);
    match &t.image {
        Some(i) if i.starts_with('[') => {
            s.push(' ');
            s.push_str(i);
        }
        Some(i) => {
            s.push_str(" [");
            s.push_str(i);
            s.push(']');
        }
        None => {}
    }
    s
}

fn label_len(t: &CauseRow) -> usize {
    label(t).chars().count()
}

/// `2024-01-01T10:00:30.000Z` (the JSON's form) → `2024-01-01 10:00:30Z`.
fn short(rfc: &str) -> String {
    match parse_time(rfc) {
        Ok(TimeSpec::At(ns)) => fmt_wall(ns),
        _ => rfc.to_string(),
    }
}

/// Anomalous windows as wall-clock ranges, overlapping windows merged.
fn window_ranges(nm: &NodeReport, size: u64) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut cur: Option<(u64, u64, usize)> = None;
    for a in &nm.anomalous_windows {
        cur = match cur {
            Some((s, e, n)) if a.start_ns <= e => Some((s, a.start_ns + size, n + 1)),
            Some((s, e, n)) => {
                parts.push(range_text(s, e, n));
                Some((a.start_ns, a.start_ns + size, 1))
            }
            None => Some((a.start_ns, a.start_ns + size, 1)),
        };
    }
    if let Some((s, e, n)) = cur {
        parts.push(range_text(s, e, n));
    }
    if parts.len() > 8 {
        let more = parts.len() - 8;
        parts.truncate(8);
        parts.push(format!("… and {more} more"));
    }
    parts.join(", ")
}

fn range_text(s: u64, e: u64, n: usize) -> String {
    let a = fmt_wall(s);
    let b = fmt_wall(e);
    // Print the end's time of day only when the date is the same.
    let b = if a.get(..10) == b.get(..10) {
        b[11..].to_string()
    } else {
        b
    };
    if n == 1 {
        format!("{a}–{b}")
    } else {
        format!("{a}–{b} ({n} windows)")
    }
}

/// One line per window closed, for `--follow` (`k` of the k-of-(2k − 1) filter).
pub fn print_window(ev: &ClosedWindow, k: usize, out: &mut impl Write) -> std::io::Result<()> {
    let mut line = format!(
        "{} {}: {} node(s) scored",
        range_text(ev.start_ns, ev.end_ns, 1),
        ev.metric,
        ev.scored
    );
    if ev.scored < MIN_NODES {
        line.push_str(" — too few, not compared");
    }
    if !ev.anomalous.is_empty() {
        let list: Vec<String> = ev
            .anomalous
            .iter()
            .map(|a| {
                let (s, t) = (fmt_score(a.score), fmt_score(a.threshold));
                format!("{} ({s} > {t})", a.node)
            })
            .collect();
        line.push_str(&format!("; anomalous: {}", list.join(", ")));
    }
    if !ev.incomplete.is_empty() {
        line.push_str(&format!("; incomplete data: {}", ev.incomplete.join(", ")));
    }
    writeln!(out, "{line}")?;
    for n in &ev.newly_faulty {
        writeln!(
            out,
            "  → {n} is faulty on {} (anomalous in {k} of the last {} windows)",
            ev.metric,
            2 * k - 1
        )?;
    }
    Ok(())
}

/// The bottom-up I/O layer findings (seed 003), one line per node.
fn print_layers(r: &Diagnosis, out: &mut impl Write) -> std::io::Result<()> {
    for f in &r.layers {
        let Some(lowest) = f.layers.first() else {
            continue;
        };
        let what: Vec<String> = lowest
            .anomalies
            .iter()
            .map(|a| {
                format!(
                    "{} {} {} vs the peers' {} {} ({} of {} s)",
                    a.characteristic.name(),
                    num(a.node_value),
                    a.unit,
                    num(a.peers_value),
                    a.unit,
                    a.slots_anomalous,
                    a.slots_compared
                )
            })
            .collect();
        write!(
            out,
            "I/O LAYERS: {} — lowest anomalous layer {}: {}",
            f.node,
            f.layer,
            what.join(", ")
        )?;
        let above: Vec<&str> = f.layers[1..].iter().map(|l| l.layer.as_str()).collect();
        if !above.is_empty() {
            write!(out, "; also anomalous above it: {}", above.join(", "))?;
        }
        writeln!(out)?;
    }
    Ok(())
}

/// A value with three significant digits or so.
fn num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_for_people() {
        assert_eq!(fmt_value("ms", 5210.0), "5.21 s");
        assert_eq!(fmt_value("ms", 12.34), "12.3 ms");
        assert_eq!(fmt_value("calls", 1234567.0), "1,234,567 calls");
        assert_eq!(fmt_value("samples", -42.0), "-42 samples");
    }

    #[test]
    fn digits_are_grouped() {
        assert_eq!(group_digits(0u8), "0");
        assert_eq!(group_digits(999u64), "999");
        assert_eq!(group_digits(1000u64), "1,000");
        assert_eq!(group_digits(1234567u64), "1,234,567");
        assert_eq!(group_digits(-1234i64), "-1,234");
        assert_eq!(group_digits(u64::MAX), "18,446,744,073,709,551,615");
    }
}
