//! `culprit diagnose`'s report for people ([`print_human`]) and `--follow`'s line per closed
//! window ([`print_window`]): rendered from the typed [`Diagnosis`], nothing recomputed.

use std::io::Write;

use culprit_analysis::analyzer::MIN_NODES;
use culprit_analysis::combine::Verdict;
use culprit_analysis::diagnosis::{
    CauseRow, ClosedWindow, MetricReport, MetricStatus, NodeReport, NodeVerdict, ThresholdSource,
};
use culprit_analysis::family::Metric;
use culprit_analysis::resource::{Direction, Observation, Resource};
use culprit_analysis::roles;
use culprit_analysis::time::{fmt_dur, fmt_wall, group_digits};
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

/// An OS metric's level: grouped digits when large, decimals when small.
fn fmt_level(unit: &str, v: f64) -> String {
    let a = v.abs();
    if unit == "ms" {
        fmt_value(unit, v)
    } else if a >= 100.0 {
        format!("{} {unit}", group_digits(v.round() as i64))
    } else if a >= 1.0 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.3} {unit}")
    }
}

fn fmt_ratio(r: Option<f64>) -> String {
    match r {
        Some(r) if r >= 10.0 => format!("{r:.0}×"),
        Some(r) => format!("{r:.2}×"),
        None => "peers 0".to_string(),
    }
}

/// `slow disk (I/O delay 4.1× peers, throughput 0.3×); ` before a verdict's reason.
fn resource_prefix(v: &NodeVerdict) -> String {
    match &v.resource {
        Some(r) if r.summary.is_empty() => format!("{}; ", r.name),
        Some(r) => format!("{} ({}); ", r.name, r.summary),
        None => String::new(),
    }
}

fn observation(o: &Observation) -> String {
    let what = match &o.instance {
        Some(i) => format!("{} [{i}]", o.metric),
        None => o.metric.clone(),
    };
    let state = if o.faulty {
        format!("faulty, {} anomalous windows", o.anomalous_windows)
    } else if o.anomalous_windows > 0 {
        format!("{} anomalous windows", o.anomalous_windows)
    } else {
        "not anomalous".to_string()
    };
    if o.class == culprit_analysis::resource::Class::Slowdown {
        // The white-box slowdown: a ratio to the peers already (the median function's).
        return format!("{what}: {} its peers' ({state})", fmt_ratio(o.ratio));
    }
    format!(
        "{what} {} vs {} ({}; {state})",
        fmt_level(&o.unit, o.node),
        fmt_level(&o.unit, o.peers),
        fmt_ratio(o.ratio)
    )
}

/// The resource section of a culprit or suspect.
fn print_resource(node: &str, r: &Resource, out: &mut impl Write) -> std::io::Result<()> {
    writeln!(out)?;
    writeln!(
        out,
        "{node} · resource: {} — checklist step {}: {}; confidence {:.2}",
        r.name, r.step, r.rule, r.confidence
    )?;
    for o in &r.evidence {
        let mark = match (o.diverges, o.direction) {
            (true, _) => "diverges",
            (false, _) if o.small => "small",
            (false, Direction::Up) => "higher",
            (false, Direction::Down) => "lower",
            (false, Direction::Level) => "level",
        };
        writeln!(out, "  {mark:<9} {}", observation(o))?;
    }
    for o in &r.also {
        writeln!(out, "  also      {}", observation(o))?;
    }
    if !r.foreign.is_empty() {
        writeln!(out, "  only on {node}: {}", r.foreign.join(", "))?;
    }
    if !r.functions.is_empty() {
        writeln!(out, "  top functions: {}", r.functions.join(", "))?;
    }
    Ok(())
}

/// The status of the OS family in the verdict table: FAULTY when one OS metric is, else
/// undecided when one is (missing data could hide a fault), else ok when one was compared,
/// else not compared when one has data.
fn os_status(os: &[&MetricReport], node: &str) -> MetricStatus {
    let statuses: Vec<MetricStatus> = os
        .iter()
        .filter_map(|m| m.nodes.iter().find(|x| x.node == node).map(|x| x.verdict))
        .collect();
    [
        MetricStatus::Faulty,
        MetricStatus::Undecided,
        MetricStatus::Ok,
        MetricStatus::NotCompared,
    ]
    .into_iter()
    .find(|s| statuses.contains(s))
    .unwrap_or(MetricStatus::NoData)
}

/// Width of a column of the verdict table.
const COLUMN: usize = 12;

fn fmt_score(v: f64) -> String {
    if v.abs() >= 100.0 {
        group_digits(v.round() as i64)
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Prints the report for people.
pub fn print_human(r: &Diagnosis, out: &mut impl Write) -> std::io::Result<()> {
    let span = match (&r.from, &r.to) {
        (Some(a), Some(b)) => format!("{} – {}", fmt_wall(a.ns()), fmt_wall(b.ns())),
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
    if r.metrics.iter().any(|m| m.family == Metric::OS) {
        writeln!(
            out,
            "OS metrics: distributions of per-second values (moving average of {}) in windows of \
             {} every {}, CDF distance",
            r.settings.smoothing,
            fmt_dur((r.settings.os_win_size_s * 1e9).round() as u64),
            fmt_dur((r.settings.os_win_shift_s * 1e9).round() as u64)
        )?;
    }
    match (&r.thresholds_file, r.trained) {
        _ if r.baseline.is_some() => print_baseline(r, out)?,
        (Some(f), true) => writeln!(out, "thresholds: trained ({f})")?,
        (Some(f), false) => {
            let untrained: Vec<String> = r
                .metrics
                .iter()
                .filter_map(|m| Some(format!("{} ({})", m.metric, m.untrained.as_deref()?)))
                .collect();
            writeln!(
                out,
                "thresholds: trained ({f}) for some metrics; UNTRAINED: {}",
                untrained.join(", ")
            )?
        }
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
                "VERDICT: {} is {} — {}{}",
                v.node,
                paint(v.combined.verdict.word(), 0),
                resource_prefix(v),
                v.combined.reason
            )?;
        }
    }
    for v in r.verdicts.iter().filter(|v| {
        matches!(
            v.combined.verdict,
            Verdict::Suspect | Verdict::Damaged | Verdict::NotCompared
        )
    }) {
        writeln!(
            out,
            "{}: {} — {}{}",
            paint(v.combined.verdict.word(), 0),
            v.node,
            resource_prefix(v),
            v.combined.reason
        )?;
    }
    for role in &r.roles {
        writeln!(
            out,
            "another role: {} — {}; judged against its own baseline",
            role.node,
            roles::summary(role)
        )?;
    }
    print_layers(r, out)?;
    writeln!(out)?;
    // Verdict table: the OS metrics in one column (one family).
    let (os, white): (Vec<&MetricReport>, Vec<&MetricReport>) =
        r.metrics.iter().partition(|m| m.family == Metric::OS);
    let w = r.nodes.iter().map(|n| n.len()).max().unwrap_or(4).max(4);
    write!(out, "{:<w$}", "node")?;
    for m in &white {
        write!(out, "  {:<COLUMN$}", m.metric.name())?;
    }
    if !os.is_empty() {
        write!(out, "  {:<COLUMN$}", format!("os ({})", os.len()))?;
    }
    writeln!(out, "  combined")?;
    let mut seen: Vec<MetricStatus> = Vec::new();
    for v in &r.verdicts {
        write!(out, "{:<w$}", v.node)?;
        let mut cells: Vec<MetricStatus> = white
            .iter()
            .map(|m| {
                m.nodes
                    .iter()
                    .find(|x| x.node == v.node)
                    .map_or(MetricStatus::NoData, |x| x.verdict)
            })
            .collect();
        if !os.is_empty() {
            cells.push(os_status(&os, &v.node));
        }
        for s in cells {
            write!(out, "  {}", paint(s.word(), COLUMN))?;
            seen.push(s);
        }
        writeln!(out, "  {}", paint(v.combined.verdict.word(), 0))?;
    }
    if seen.contains(&MetricStatus::Undecided) {
        writeln!(
            out,
            "  undecided: not faulty in the windows compared, but its data had gaps: a fault \
             could hide in the windows left out (not enough comparable windows)"
        )?;
    }
    if seen.contains(&MetricStatus::NotCompared) {
        writeln!(
            out,
            "  not compared: it has data, but no window could compare it (gaps throughout, or \
             too few nodes)"
        )?;
    }
    for v in &r.verdicts {
        if let Some(res) = &v.resource {
            print_resource(&v.node, res, out)?;
        }
    }
    print_ranking(r, out)?;
    if !r.findings.is_empty() {
        writeln!(out)?;
        writeln!(out, "findings:")?;
        for line in culprit_analysis::missing::lines(&r.findings) {
            writeln!(out, "  {line}")?;
        }
    }
    // OS metrics of faulty and suspect nodes: one line each (their resource is above).
    for v in r.verdicts.iter().filter(|v| v.resource.is_some()) {
        let lines: Vec<String> = os
            .iter()
            .filter_map(|m| {
                let nm = m.nodes.iter().find(|x| x.node == v.node)?;
                if nm.anomalous_windows.is_empty() {
                    return None;
                }
                let state = match nm.episodes.first() {
                    Some(e) => format!("faulty from {}", fmt_wall(e.from.ns())),
                    None => "anomalous".to_string(),
                };
                let thr = nm.threshold.map_or("unsupervised".to_string(), |t| {
                    format!("threshold {} {}", fmt_score(t), m.score_unit)
                });
                Some(format!(
                    "  {:<18} {state}; {} of {} windows; {thr}",
                    m.metric.name(),
                    nm.anomalous_windows.len(),
                    nm.windows_scored
                ))
            })
            .collect();
        if !lines.is_empty() {
            writeln!(out)?;
            writeln!(out, "{} · os metrics anomalous:", v.node)?;
            for l in lines {
                writeln!(out, "{l}")?;
            }
        }
    }
    // Details of faulty and suspect nodes.
    for m in &white {
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
                Some(e) => format!("faulty from the window starting {}", fmt_wall(e.from.ns())),
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
            let role = r
                .roles
                .iter()
                .find(|x| x.node == nm.node && x.metrics.iter().any(|rm| rm.metric == m.metric));
            if role.is_some() {
                writeln!(
                    out,
                    "  another role: its functions are compared with its own normal (the median \
                     node's values scaled by its difference in the baseline)"
                )?;
            }
            let size = m
                .windows_ns
                .map_or((r.settings.win_size_s * 1e9).round() as u64, |w| w.size_ns);
            writeln!(out, "  anomalous windows: {}", window_ranges(nm, size))?;
            writeln!(
                out,
                "  top functions (most persistent first: windows in which the function alone \
                 deviated more than a typical node in all; then component distance to the \
                 median node, summed over the anomalous windows):"
            )?;
            let fw = nm.top.iter().map(label_len).max().unwrap_or(8).clamp(8, 60);
            for t in &nm.top {
                let rel = match t.relative {
                    Some(r) => format!(" ({:+.0}%)", r * 100.0),
                    None => " (median 0)".to_string(),
                };
                writeln!(
                    out,
                    "  {:>2}  {:<fw$}  {}: {} vs {}{rel}   [persistence {}, distance {} {}]",
                    t.rank,
                    label(t),
                    t.direction,
                    fmt_number(&m.unit, t.node_total),
                    fmt_value(&m.unit, t.median_total),
                    t.persistence,
                    fmt_score(t.distance),
                    if m.distance_unit.is_empty() {
                        &m.score_unit
                    } else {
                        &m.distance_unit
                    }
                )?;
            }
        }
    }
    if !r.tracing_cost.is_empty() {
        let per: Vec<String> = r
            .tracing_cost
            .iter()
            .map(|c| format!("{} {:.1} %", c.node, 100.0 * c.share()))
            .collect();
        writeln!(out)?;
        writeln!(
            out,
            "tracing cost (samples in libculprit_rt.so, of the traced programs' samples; \
             never compared): {}",
            per.join(", ")
        )?;
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

/// Where the thresholds came from when they were learnt from the data itself, and what
/// learning warned of.
fn print_baseline(r: &Diagnosis, out: &mut impl Write) -> std::io::Result<()> {
    let Some(b) = &r.baseline else {
        return Ok(());
    };
    let times = match b.times {
        1 => String::new(),
        n => format!("; learnt {n} times, last"),
    };
    writeln!(
        out,
        "thresholds: learnt from the data itself — baseline {}{times} {} – {}",
        b.span,
        fmt_wall(b.learnt.from.ns()),
        fmt_wall(b.learnt.to.ns())
    )?;
    for s in &b.left_out {
        writeln!(
            out,
            "  not learnt (a node was flagged or suspected): {} – {}",
            fmt_wall(s.from.ns()),
            fmt_wall(s.to.ns())
        )?;
    }
    for w in &b.warnings {
        writeln!(out, "warning: {w}")?;
    }
    Ok(())
}

/// The ranking of suspects: every node, most suspicious first.
fn print_ranking(r: &Diagnosis, out: &mut impl Write) -> std::io::Result<()> {
    if r.ranking.is_empty() {
        return Ok(());
    }
    writeln!(out)?;
    writeln!(
        out,
        "suspects, most suspicious first (persistence: anomalous windows net of normal ones; \
         score: × its threshold):"
    )?;
    let w = r.ranking.iter().map(|n| n.node.len()).max().unwrap_or(4);
    for n in &r.ranking {
        let metric = n.metric.map_or(String::new(), |m| format!(" ({m})"));
        let score = n
            .score
            .map_or("–".to_string(), |s| format!("{}×", fmt_score(s)));
        writeln!(
            out,
            "  {:>2}  {:<w$}  {:<8} persistence {:<3}{:<10} score {:<7} {}",
            n.rank,
            n.node,
            n.verdict.word(),
            n.persistence,
            metric,
            score,
            n.reason
        )?;
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

/// Anomalous windows as wall-clock ranges, overlapping windows merged.
fn window_ranges(nm: &NodeReport, size: u64) -> String {
    let runs = nm.anomalous_runs(size);
    let mut parts: Vec<String> = runs
        .iter()
        .map(|r| range_text(r.start_ns, r.end_ns, r.windows))
        .collect();
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
                match (a.rare, a.score > a.threshold) {
                    (true, true) => format!("{} ({s} > {t}; rare calls)", a.node),
                    (true, false) => format!("{} (rare calls)", a.node),
                    _ => format!("{} ({s} > {t})", a.node),
                }
            })
            .collect();
        line.push_str(&format!("; anomalous: {}", list.join(", ")));
    }
    if !ev.partial.is_empty() {
        let list: Vec<String> = ev
            .partial
            .iter()
            .map(|(n, p)| format!("{n} ({:.0} %)", p * 100.0))
            .collect();
        line.push_str(&format!(
            "; compared on the seconds present: {}",
            list.join(", ")
        ));
    }
    if !ev.incomplete.is_empty() {
        line.push_str(&format!(
            "; left out (under half present): {}",
            ev.incomplete.join(", ")
        ));
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
    for s in &r.serialised {
        writeln!(
            out,
            "I/O LAYERS: {} pid {} — {}",
            s.node,
            s.pid,
            culprit_analysis::layers::serial::describe(s)
        )?;
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
mod tests;
