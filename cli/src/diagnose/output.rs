//! The diagnosis report: built from an engine's state, printed for people or as JSON.
//!
//! The JSON form is a stable interface documented in docs/diagnose-json.md (schema
//! `culprit-diagnosis`, version [`SCHEMA_VERSION`]); fields are only ever added.

use std::io::Write;

use serde::Serialize;

use super::combine::{combine, evidence, Combined, MetricVerdict, Verdict};
use super::distance::Distance;
use super::engine::{Engine, MetricState, WindowEvent};
use super::missing::Finding;
use super::model::{fmt_dur, fmt_wall, rfc3339, MetricKind};
use super::score::ScoreKind;
use super::thresholds::{Policy, Unsupervised};

/// Version of the JSON report schema.
pub const SCHEMA_VERSION: u32 = 1;
/// Value of the report's `schema` field.
pub const SCHEMA: &str = "culprit-diagnosis";

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// [`SCHEMA_VERSION`].
    pub version: u32,
    /// The data directories.
    pub data: Vec<String>,
    /// True when every metric reported used trained thresholds.
    pub trained: bool,
    /// The thresholds file, if any.
    pub thresholds_file: Option<String>,
    /// Analysis settings.
    pub settings: SettingsOut,
    /// First window start (RFC 3339), if any window was analysed.
    pub from: Option<String>,
    /// Last window end.
    pub to: Option<String>,
    /// All nodes, sorted by name.
    pub nodes: Vec<String>,
    /// Nodes whose combined verdict is faulty or stopped (the exit status is 1 when not empty).
    pub culprits: Vec<String>,
    /// Combined verdict per node, sorted by name.
    pub verdicts: Vec<NodeVerdictOut>,
    /// Per metric.
    pub metrics: Vec<MetricOut>,
    /// Missing-data findings.
    pub findings: Vec<Finding>,
    /// Things the reader should know (fewer than 4 nodes, untrained metrics, fallbacks…).
    pub notes: Vec<String>,
    /// Problems reading the data.
    pub warnings: Vec<String>,
}

/// Settings as reported.
#[derive(Clone, Debug, Serialize)]
pub struct SettingsOut {
    /// WinSize, seconds.
    pub win_size_s: f64,
    /// WinShift, seconds.
    pub win_shift_s: f64,
    /// k (faulty when anomalous in k of the last 2k − 1 windows).
    pub k: usize,
    /// Score.
    pub score: ScoreKind,
    /// Distance.
    pub distance: Distance,
    /// Pairwise peers: `all` or `domains of N`.
    pub peers: String,
    /// Components keyed by program.
    pub by_program: bool,
    /// The unsupervised rule, for metrics without trained thresholds.
    pub unsupervised: Option<Unsupervised>,
}

/// Combined verdict on a node.
#[derive(Clone, Debug, Serialize)]
pub struct NodeVerdictOut {
    /// Node.
    pub node: String,
    /// Verdict.
    #[serde(flatten)]
    pub combined: Combined,
}

/// One metric.
#[derive(Clone, Debug, Serialize)]
pub struct MetricOut {
    /// Metric.
    pub metric: MetricKind,
    /// Unit of values.
    pub unit: &'static str,
    /// Unit of scores and thresholds.
    pub score_unit: &'static str,
    /// Thresholds: `trained` or `untrained`.
    pub thresholds: &'static str,
    /// Windows closed.
    pub windows: u64,
    /// Windows with fewer than 3 nodes with complete data (not scored).
    pub unscored_windows: u64,
    /// Functions (components) kept by the dimensionality rule.
    pub kept: usize,
    /// Per node, sorted by name.
    pub nodes: Vec<NodeMetricOut>,
}

/// One node for one metric.
#[derive(Clone, Debug, Serialize)]
pub struct NodeMetricOut {
    /// Node.
    pub node: String,
    /// `faulty`, `ok` or `no-data`.
    pub verdict: &'static str,
    /// Trained threshold applied, if any.
    pub threshold: Option<f64>,
    /// `own`, `largest` (no threshold of its own: the metric's largest), `unsupervised`.
    pub threshold_source: Option<&'static str>,
    /// Windows scored.
    pub windows_scored: u64,
    /// Windows with incomplete data for this node.
    pub windows_incomplete: u64,
    /// Untrained: windows in which the node stood out from its peers without having changed
    /// from its own baseline (persistently different, not counted as anomalous).
    pub windows_different: u64,
    /// Largest score.
    pub max_score: f64,
    /// Median of score / threshold over anomalous windows.
    pub evidence: Option<f64>,
    /// Faulty stretches.
    pub episodes: Vec<EpisodeOut>,
    /// Anomalous windows.
    pub anomalous_windows: Vec<WindowOut>,
    /// Root cause: the top functions (faulty and suspect nodes only).
    pub top: Vec<TopOut>,
}

/// A faulty stretch.
#[derive(Clone, Debug, Serialize)]
pub struct EpisodeOut {
    /// Start of the window whose close made the node faulty.
    pub from: String,
    /// End of the last window in which it was faulty.
    pub to: String,
}

/// An anomalous window.
#[derive(Clone, Debug, Serialize)]
pub struct WindowOut {
    /// Start (RFC 3339).
    pub start: String,
    /// End.
    pub end: String,
    /// Start, ns since the epoch.
    pub start_ns: u64,
    /// Score.
    pub score: f64,
    /// Threshold exceeded.
    pub threshold: f64,
}

/// One row of a root-cause table.
#[derive(Clone, Debug, Serialize)]
pub struct TopOut {
    /// 1-based rank.
    pub rank: usize,
    /// Function (or event) name.
    pub function: String,
    /// Image, if a function.
    pub image: Option<String>,
    /// Program, with `--by-program`.
    pub program: Option<String>,
    /// Σ component distance to the reference over the anomalous windows (score unit).
    pub distance: f64,
    /// Σ the node's value over those windows (metric unit).
    pub node_total: f64,
    /// Σ the reference's (median node's) value (metric unit).
    pub median_total: f64,
    /// `node_total − median_total`.
    pub deviation: f64,
    /// `deviation / median_total`, when the median is not zero.
    pub relative: Option<f64>,
    /// "more time", "fewer calls"…
    pub direction: &'static str,
}

/// What the report builder needs besides the engine.
#[derive(Debug)]
pub struct ReportInput<'a> {
    /// Data directories.
    pub data: Vec<String>,
    /// Thresholds file.
    pub thresholds_file: Option<String>,
    /// Metrics to report (others may have run as helpers, e.g. time for count's rule).
    pub reported: &'a [MetricKind],
    /// Findings.
    pub findings: Vec<Finding>,
    /// Notes.
    pub notes: Vec<String>,
    /// Loader warnings.
    pub warnings: Vec<String>,
    /// Rows per root-cause table.
    pub top: usize,
    /// Peers description.
    pub peers: String,
    /// Components keyed by program.
    pub by_program: bool,
}

fn threshold_kind(p: &Policy) -> &'static str {
    match p {
        Policy::Trained { .. } => "trained",
        _ => "untrained",
    }
}

/// Builds the report.
pub fn build(engine: &Engine, input: ReportInput<'_>) -> Report {
    let names = engine.names();
    let mut order: Vec<usize> = (0..names.len()).collect();
    order.sort_by(|&a, &b| names[a].cmp(&names[b]));
    let metrics: Vec<&MetricState> = engine
        .metrics
        .iter()
        .filter(|m| input.reported.contains(&m.cfg.kind))
        .collect();
    let analysed = metrics.iter().filter(|m| m.windows > m.unscored).count();
    let mut unsupervised = None;
    let mut trained = !metrics.is_empty();
    for m in &metrics {
        match &m.cfg.policy {
            Policy::Untrained(u) => {
                unsupervised = Some(*u);
                trained = false;
            }
            Policy::Training => trained = false,
            Policy::Trained { .. } => {}
        }
    }
    let mut verdicts = Vec::new();
    let mut culprits = Vec::new();
    for &n in &order {
        let per: Vec<MetricVerdict> = engine
            .metrics
            .iter()
            .enumerate()
            .filter(|(_, m)| input.reported.contains(&m.cfg.kind))
            .map(|(mi, _)| MetricVerdict::of(engine, mi, n))
            .collect();
        let stopped = input
            .findings
            .iter()
            .any(|f| f.is_stop() && f.node() == names[n]);
        let slack = (2 * engine.cfg.k as u64 - 1) * engine.cfg.win_shift_ns;
        let combined = combine(&per, analysed, stopped, slack);
        if combined.verdict.is_culprit() {
            culprits.push(names[n].clone());
        }
        verdicts.push(NodeVerdictOut {
            node: names[n].clone(),
            combined,
        });
    }
    let suspects: Vec<&str> = verdicts
        .iter()
        .filter(|v| v.combined.verdict != Verdict::Ok)
        .map(|v| v.node.as_str())
        .collect();
    let metrics_out = metrics
        .iter()
        .map(|m| metric_out(engine, m, &order, &suspects, input.top))
        .collect();
    let mut notes = input.notes;
    for m in &metrics {
        for &n in &order {
            let nm = &m.nodes[n];
            if nm.scored > 0 && nm.different * 2 >= nm.scored && !nm.faulty() {
                notes.push(format!(
                    "{} stands out from its peers in {} in {} of {} windows, but has not changed \
                     since its data began: a different role or hardware, or a fault older than \
                     the data. Not flagged; training on fault-free runs tells them apart",
                    names[n], m.cfg.kind, nm.different, nm.scored
                ));
            }
        }
    }
    let (mut from, mut to) = (None::<u64>, None::<u64>);
    for m in &metrics {
        if let Some((a, b)) = m.window_range {
            from = Some(from.map_or(a, |f| f.min(a)));
            let e = b + engine.cfg.win_size_ns;
            to = Some(to.map_or(e, |t| t.max(e)));
        }
    }
    Report {
        schema: SCHEMA,
        version: SCHEMA_VERSION,
        data: input.data,
        trained,
        thresholds_file: input.thresholds_file,
        settings: SettingsOut {
            win_size_s: engine.cfg.win_size_ns as f64 / 1e9,
            win_shift_s: engine.cfg.win_shift_ns as f64 / 1e9,
            k: engine.cfg.k,
            score: engine.cfg.score,
            distance: engine.cfg.distance,
            peers: input.peers,
            by_program: input.by_program,
            unsupervised,
        },
        from: from.map(rfc3339),
        to: to.map(rfc3339),
        nodes: order.iter().map(|&n| names[n].clone()).collect(),
        culprits,
        verdicts,
        metrics: metrics_out,
        findings: input.findings,
        notes,
        warnings: input.warnings,
    }
}

fn metric_out(
    engine: &Engine,
    m: &MetricState,
    order: &[usize],
    suspects: &[&str],
    top: usize,
) -> MetricOut {
    let names = engine.names();
    let size = engine.cfg.win_size_ns;
    let (more, less) = m.cfg.kind.deviation_words();
    let nodes = order
        .iter()
        .map(|&n| {
            let nm = &m.nodes[n];
            let verdict = if nm.first_ns.is_none() {
                "no-data"
            } else if nm.faulty() {
                "faulty"
            } else {
                "ok"
            };
            let (threshold, threshold_source) = match (&m.cfg.policy, nm.threshold) {
                (Policy::Trained { .. }, Some((t, own))) => {
                    (Some(t), Some(if own { "own" } else { "largest" }))
                }
                (Policy::Untrained(_), _) => (None, Some("unsupervised")),
                _ => (None, None),
            };
            let show_top = nm.faulty() || suspects.contains(&names[n].as_str());
            let top = if show_top && !nm.anomalous.is_empty() {
                m.top(n, top)
                    .into_iter()
                    .enumerate()
                    .map(|(i, (c, rc))| {
                        let label = &m.comps[c as usize];
                        let deviation = rc.node - rc.reference;
                        TopOut {
                            rank: i + 1,
                            function: label.name.to_string(),
                            image: label.image.as_ref().map(|s| s.to_string()),
                            program: label.program.as_ref().map(|s| s.to_string()),
                            distance: rc.distance,
                            node_total: rc.node,
                            median_total: rc.reference,
                            deviation,
                            relative: (rc.reference > 0.0).then(|| deviation / rc.reference),
                            direction: if deviation >= 0.0 { more } else { less },
                        }
                    })
                    .collect()
            } else {
                Vec::new()
            };
            NodeMetricOut {
                node: names[n].clone(),
                verdict,
                threshold,
                threshold_source,
                windows_scored: nm.scored,
                windows_incomplete: nm.incomplete,
                windows_different: nm.different,
                max_score: nm.max_score,
                evidence: evidence(nm),
                episodes: nm
                    .episodes
                    .iter()
                    .map(|e| EpisodeOut {
                        from: rfc3339(e.first_window_ns),
                        to: rfc3339(e.last_window_ns + size),
                    })
                    .collect(),
                anomalous_windows: nm
                    .anomalous
                    .iter()
                    .map(|a| WindowOut {
                        start: rfc3339(a.start_ns),
                        end: rfc3339(a.start_ns + size),
                        start_ns: a.start_ns,
                        score: a.score,
                        threshold: a.threshold,
                    })
                    .collect(),
                top,
            }
        })
        .collect();
    MetricOut {
        metric: m.cfg.kind,
        unit: m.cfg.kind.unit(),
        score_unit: super::score_unit(engine.cfg.distance, m.cfg.weights.is_some(), m.cfg.kind),
        thresholds: threshold_kind(&m.cfg.policy),
        windows: m.windows,
        unscored_windows: m.unscored,
        kept: m.kept_list.len(),
        nodes,
    }
}

/// A value in a metric's unit, for people.
pub fn fmt_value(metric: MetricKind, v: f64) -> String {
    match metric {
        MetricKind::Time => {
            let a = v.abs();
            if a >= 1000.0 {
                format!("{:.2} s", v / 1000.0)
            } else if a >= 1.0 {
                format!("{v:.1} ms")
            } else {
                format!("{:.0} µs", v * 1000.0)
            }
        }
        _ => format!("{} {}", group_digits(v.round() as i64), metric.unit()),
    }
}

/// A value without its unit when the unit follows anyway ("57,533 vs 15,148 samples"); time
/// keeps its unit, which varies.
fn fmt_number(metric: MetricKind, v: f64) -> String {
    match metric {
        MetricKind::Time => fmt_value(metric, v),
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

fn group_digits(v: i64) -> String {
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
pub fn print_human(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
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
            "thresholds: UNTRAINED — robust per-window rule (docs/thresholds.md); train on \
             fault-free runs with `culprit train` for sharper verdicts"
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
                v.combined.verdict.word(),
                v.combined.reason
            )?;
        }
    }
    for v in r
        .verdicts
        .iter()
        .filter(|v| v.combined.verdict == Verdict::Suspect)
    {
        writeln!(out, "suspect: {} — {}", v.node, v.combined.reason)?;
    }
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
                Some("faulty") => "FAULTY",
                Some("ok") => "ok",
                _ => "-",
            };
            write!(out, "  {word:<10}")?;
        }
        writeln!(out, "  {}", v.combined.verdict.word())?;
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
                (Some(t), Some("largest")) => format!(
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
            writeln!(
                out,
                "  anomalous windows: {}",
                window_ranges(nm, (r.settings.win_size_s * 1e9).round() as u64)
            )?;
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
                    fmt_number(m.metric, t.node_total),
                    fmt_value(m.metric, t.median_total),
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

fn label(t: &TopOut) -> String {
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

fn label_len(t: &TopOut) -> usize {
    label(t).chars().count()
}

/// `2024-01-01T10:00:30.000Z` → `2024-01-01 10:00:30Z`.
fn short(rfc: &str) -> String {
    rfc.replace('T', " ").replace(".000Z", "Z")
}

/// Anomalous windows as wall-clock ranges, overlapping windows merged.
fn window_ranges(nm: &NodeMetricOut, size: u64) -> String {
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

/// One line per window event, for `--follow`.
pub fn print_event(engine: &Engine, ev: &WindowEvent, out: &mut impl Write) -> std::io::Result<()> {
    let names = engine.names();
    let mut line = format!(
        "{} {}: {} node(s) scored",
        range_text(ev.start_ns, ev.end_ns, 1),
        ev.metric,
        ev.scored
    );
    if ev.scored < super::engine::MIN_NODES {
        line.push_str(" — too few, not compared");
    }
    if !ev.anomalous.is_empty() {
        let list: Vec<String> = ev
            .anomalous
            .iter()
            .map(|(n, s, t)| format!("{} ({} > {})", names[*n], fmt_score(*s), fmt_score(*t)))
            .collect();
        line.push_str(&format!("; anomalous: {}", list.join(", ")));
    }
    if !ev.incomplete.is_empty() {
        let list: Vec<&str> = ev.incomplete.iter().map(|&n| names[n].as_str()).collect();
        line.push_str(&format!("; incomplete data: {}", list.join(", ")));
    }
    writeln!(out, "{line}")?;
    for &n in &ev.newly_faulty {
        writeln!(
            out,
            "  → {} is faulty on {} (anomalous in {} of the last {} windows)",
            names[n],
            ev.metric,
            engine.cfg.k,
            2 * engine.cfg.k - 1
        )?;
    }
    Ok(())
}

/// A window event as one JSON object (`--follow --json` prints one per line).
#[derive(Debug, Serialize)]
pub struct EventOut<'a> {
    /// Always `window`.
    pub event: &'static str,
    /// Metric.
    pub metric: MetricKind,
    /// Window start.
    pub start: String,
    /// Window end.
    pub end: String,
    /// Nodes scored.
    pub scored: usize,
    /// Anomalous nodes.
    pub anomalous: Vec<&'a str>,
    /// Nodes that became faulty.
    pub newly_faulty: Vec<&'a str>,
    /// Nodes with incomplete data.
    pub incomplete: Vec<&'a str>,
}

/// The JSON form of a window event.
pub fn event_json<'a>(engine: &'a Engine, ev: &WindowEvent) -> EventOut<'a> {
    let names = engine.names();
    EventOut {
        event: "window",
        metric: ev.metric,
        start: rfc3339(ev.start_ns),
        end: rfc3339(ev.end_ns),
        scored: ev.scored,
        anomalous: ev.anomalous.iter().map(|a| names[a.0].as_str()).collect(),
        newly_faulty: ev.newly_faulty.iter().map(|&n| names[n].as_str()).collect(),
        incomplete: ev.incomplete.iter().map(|&n| names[n].as_str()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_for_people() {
        assert_eq!(fmt_value(MetricKind::Time, 5210.0), "5.21 s");
        assert_eq!(fmt_value(MetricKind::Time, 12.34), "12.3 ms");
        assert_eq!(fmt_value(MetricKind::Count, 1234567.0), "1,234,567 calls");
        assert_eq!(fmt_value(MetricKind::Samples, -42.0), "-42 samples");
    }
}
