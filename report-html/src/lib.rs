//! culprit's HTML report: one self-contained file (inline SVG and CSS, no script, nothing
//! fetched) drawn from a [`Diagnosis`] — it reads the typed result and never recomputes a
//! verdict.
//!
//! What it shows, top to bottom: the verdict per node (culprits first, with the reason and the
//! findings: stuck calls, pauses, stopped data); per metric family, each node's score over time
//! against its threshold (the culprit's line drawn thick and red, its anomalous windows shaded,
//! the fault window when the caller knows it); the culprit's top functions as bars of their
//! deviation from the median node; the settings.
//!
//! Charts are drawn with `plotters` (SVG backend) into strings embedded in the page. A crate
//! of its own so the drawing library stays out of the analysis (which the runtime's tests, the
//! testbed and the sampler-side tools build) and out of the command's own lines.

#![deny(unsafe_code)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use culprit_analysis::combine::Verdict;
use culprit_analysis::diagnosis::{MetricReport, MetricStatus, NodeReport};
use culprit_analysis::family::Metric;
use culprit_analysis::Diagnosis;
use plotters::prelude::*;

/// Why a report could not be drawn.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The drawing library failed.
    #[error("cannot draw the {what} chart: {why}")]
    Draw {
        /// Which chart.
        what: String,
        /// The library's message.
        why: String,
    },
    /// The page could not be written.
    #[error("cannot write {}: {reason}", .path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// What the system said.
        reason: std::io::Error,
    },
}

/// What the report knows besides the diagnosis.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Page title.
    pub title: String,
    /// The fault's window, wall-clock ns (`[from, to)`), when known (the demo, experiments).
    pub fault_window: Option<(u64, u64)>,
    /// The node the fault was injected into, when known.
    pub fault_node: Option<String>,
}

const WIDTH: u32 = 900;
const HEIGHT: u32 = 300;
const BAR_HEIGHT: u32 = 26;

fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

fn draw_err(what: &str) -> impl Fn(String) -> Error + '_ {
    move |why| Error::Draw {
        what: what.to_string(),
        why,
    }
}

/// A palette for the peers: muted, distinct; the culprit gets red.
const PEER_COLOURS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
    RGBColor(23, 190, 207),
];
const CULPRIT: RGBColor = RGBColor(214, 39, 40);
/// The second and later flagged nodes: strong, and apart from the first's red.
const FLAGGED: [RGBColor; 3] = [CULPRIT, RGBColor(255, 127, 14), RGBColor(140, 20, 90)];

fn verdict_class(v: Verdict) -> &'static str {
    match v {
        Verdict::Ok => "ok",
        Verdict::Suspect | Verdict::Damaged | Verdict::NotCompared => "suspect",
        _ => "culprit",
    }
}

/// Order of verdicts in the ranked table: not compared ranks with ok (nothing was found).
fn severity(v: Verdict) -> Verdict {
    if v == Verdict::NotCompared {
        Verdict::Ok
    } else {
        v
    }
}

/// Seconds since `t0` of wall-clock `ns`.
fn secs(ns: u64, t0: u64) -> f64 {
    (ns as f64 - t0 as f64) / 1e9
}

/// The score chart of one metric: every node's score per window, its threshold, shading.
fn score_chart(d: &Diagnosis, m: &MetricReport, t0: u64, opts: &Options) -> Result<String, Error> {
    let what = m.metric.name();
    let size_ns = m
        .windows_ns
        .map_or((d.settings.win_size_s * 1e9) as u64, |w| w.size_ns);
    let mut x_max: f64 = 1.0;
    let mut y_max: f64 = 0.0;
    for n in &m.nodes {
        for s in &n.scores {
            x_max = x_max.max(secs(s.start_ns + size_ns, t0));
            if s.score.is_finite() {
                y_max = y_max.max(s.score);
            }
            if s.threshold.is_finite() {
                y_max = y_max.max(s.threshold);
            }
        }
    }
    if let Some((_, b)) = opts.fault_window {
        x_max = x_max.max(secs(b, t0));
    }
    let y_max = if y_max > 0.0 { y_max * 1.1 } else { 1.0 };
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| draw_err(what)(e.to_string()))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!("{what}: each node's score per window ({})", m.score_unit),
                ("sans-serif", 16),
            )
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..x_max, 0f64..y_max)
            .map_err(|e| draw_err(what)(e.to_string()))?;
        chart
            .configure_mesh()
            .x_desc("seconds since the first window")
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(|e| draw_err(what)(e.to_string()))?;
        // The fault window (known to the demo and experiments), light yellow.
        if let Some((a, b)) = opts.fault_window {
            chart
                .draw_series(std::iter::once(Rectangle::new(
                    [(secs(a, t0).max(0.0), 0.0), (secs(b, t0), y_max)],
                    RGBColor(255, 243, 176).mix(0.6).filled(),
                )))
                .map_err(|e| draw_err(what)(e.to_string()))?
                .label("fault injected")
                .legend(|(x, y)| {
                    Rectangle::new(
                        [(x, y - 5), (x + 14, y + 5)],
                        RGBColor(255, 230, 120).filled(),
                    )
                });
        }
        // Anomalous windows of culprits and suspects, shaded red.
        for n in m.nodes.iter().filter(|n| is_flagged(d, &n.node)) {
            chart
                .draw_series(n.anomalous_windows.iter().map(|a| {
                    Rectangle::new(
                        [
                            (secs(a.start_ns, t0), 0.0),
                            (secs(a.start_ns + size_ns, t0), y_max),
                        ],
                        CULPRIT.mix(0.08).filled(),
                    )
                }))
                .map_err(|e| draw_err(what)(e.to_string()))?;
        }
        let (mut peer, mut culprit) = (0, 0);
        for n in &m.nodes {
            let flagged = is_flagged(d, &n.node);
            let colour = if flagged {
                culprit += 1;
                FLAGGED[(culprit - 1) % FLAGGED.len()]
            } else {
                peer += 1;
                PEER_COLOURS[(peer - 1) % PEER_COLOURS.len()]
            };
            let style = if flagged {
                colour.stroke_width(3)
            } else {
                colour.stroke_width(1)
            };
            let pts = points(n, size_ns, t0, |s| s.score);
            chart
                .draw_series(LineSeries::new(pts, style))
                .map_err(|e| draw_err(what)(e.to_string()))?
                .label(&n.node)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 14, y)], style));
            // The node's threshold, dashed in its colour (trained thresholds differ by node).
            let th = points(n, size_ns, t0, |s| s.threshold);
            if !th.is_empty() {
                chart
                    .draw_series(DashedLineSeries::new(
                        th,
                        4,
                        4,
                        colour.mix(0.7).stroke_width(1),
                    ))
                    .map_err(|e| draw_err(what)(e.to_string()))?;
            }
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .position(SeriesLabelPosition::UpperLeft)
            .draw()
            .map_err(|e| draw_err(what)(e.to_string()))?;
        root.present().map_err(|e| draw_err(what)(e.to_string()))?;
    }
    Ok(svg)
}

/// A node's (window middle, value) points, finite values only.
fn points(
    n: &NodeReport,
    size_ns: u64,
    t0: u64,
    f: impl Fn(&culprit_analysis::analyzer::ScoredWindow) -> f64,
) -> Vec<(f64, f64)> {
    n.scores
        .iter()
        .filter(|s| f(s).is_finite())
        .map(|s| (secs(s.start_ns + size_ns / 2, t0), f(s)))
        .collect()
}

fn is_flagged(d: &Diagnosis, node: &str) -> bool {
    d.verdict(node)
        .is_some_and(|v| !matches!(v.combined.verdict, Verdict::Ok | Verdict::Damaged))
}

/// The culprit's top functions of one metric as horizontal bars of deviation from the median
/// node (`node_total − median_total`, in the metric's unit).
fn deviation_chart(m: &MetricReport, n: &NodeReport) -> Result<String, Error> {
    let what = format!("{} {}", m.metric.name(), n.node);
    let rows = &n.top;
    let max = rows
        .iter()
        .map(|r| r.deviation.abs())
        .fold(0.0f64, f64::max)
        .max(1e-9);
    let height = 60 + BAR_HEIGHT * rows.len() as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| draw_err(&what)(e.to_string()))?;
        let (labels, bars) = root.split_horizontally(300);
        let mut chart = ChartBuilder::on(&bars)
            .caption(
                format!("{}: deviation from the median node ({})", n.node, m.unit),
                ("sans-serif", 14),
            )
            .margin(6)
            .x_label_area_size(28)
            .build_cartesian_2d(-max * 1.05..max * 1.05, 0f64..rows.len() as f64)
            .map_err(|e| draw_err(&what)(e.to_string()))?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .x_label_style(("sans-serif", 12))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(|e| draw_err(&what)(e.to_string()))?;
        chart
            .draw_series(rows.iter().enumerate().map(|(i, r)| {
                let y = (rows.len() - 1 - i) as f64;
                let colour = if r.deviation >= 0.0 {
                    CULPRIT
                } else {
                    PEER_COLOURS[0]
                };
                Rectangle::new([(0.0, y + 0.15), (r.deviation, y + 0.85)], colour.filled())
            }))
            .map_err(|e| draw_err(&what)(e.to_string()))?;
        // Function names beside their bars, in the left part.
        let top_px = 6 + 20; // margin + caption
        let plot_h = height as i32 - top_px - 6 - 24;
        for (i, r) in rows.iter().enumerate() {
            let y = top_px + (plot_h * (2 * i as i32 + 1)) / (2 * rows.len().max(1) as i32);
            let label = format!("{}. {}", r.rank, truncate(&r.function, 38));
            labels
                .draw_text(
                    &label,
                    &("monospace", 13).into_text_style(&labels),
                    (8, y - 6),
                )
                .map_err(|e| draw_err(&what)(e.to_string()))?;
        }
        root.present().map_err(|e| draw_err(&what)(e.to_string()))?;
    }
    Ok(svg)
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let t: String = s.chars().take(n - 1).collect();
        format!("{t}…")
    }
}

/// "trained thresholds (FILE)", "trained (FILE) for some metrics; untrained: …", "untrained".
fn thresholds_words(d: &Diagnosis) -> String {
    let untrained: Vec<&str> = d
        .metrics
        .iter()
        .filter(|m| m.thresholds == culprit_analysis::diagnosis::Thresholds::Untrained)
        .map(|m| m.metric.name())
        .collect();
    if d.baseline.is_some() {
        return if untrained.is_empty() {
            "thresholds learnt from the data itself (--baseline)".to_string()
        } else {
            format!(
                "thresholds learnt from the data itself (--baseline); untrained: {}",
                untrained.join(", ")
            )
        };
    }
    match &d.thresholds_file {
        Some(f) if untrained.is_empty() => format!("trained thresholds ({f})"),
        Some(f) => format!(
            "trained thresholds ({f}); untrained, not in it: {}",
            untrained.join(", ")
        ),
        None => "untrained (no thresholds file)".to_string(),
    }
}

/// The resource on a VERDICT line: "<span>slow disk (I/O delay 14× peers)</span>; ".
fn resource_words(v: &culprit_analysis::diagnosis::NodeVerdict) -> String {
    match &v.resource {
        Some(r) if r.summary.is_empty() => {
            format!("<span class=\"resource\">{}</span>; ", esc(&r.name))
        }
        Some(r) => format!(
            "<span class=\"resource\">{} ({})</span>; ",
            esc(&r.name),
            esc(&r.summary)
        ),
        None => String::new(),
    }
}

/// A node's cell of a white-box metric: its verdict, with the evidence of a faulty one.
fn metric_cell(m: &MetricReport, node: &str) -> String {
    m.nodes
        .iter()
        .find(|n| n.node == node)
        .map_or("–".to_string(), |n| {
            let word = n.verdict.word().to_lowercase();
            // The evidence belongs to a faulty verdict, never to an "ok".
            match n.evidence {
                Some(e) if n.verdict == MetricStatus::Faulty => format!("{word} ({e:.1}×)"),
                _ => word,
            }
        })
}

/// A node's cell of the OS metrics: faulty on how many, those listed folded; else the state
/// most of them are in.
fn os_cell(os: &[&MetricReport], node: &str) -> String {
    let faulty: Vec<String> = os
        .iter()
        .filter_map(|m| {
            let n = m.nodes.iter().find(|n| n.node == node)?;
            (n.verdict == MetricStatus::Faulty)
                .then(|| metric_cell(m, node))
                .map(|c| format!("{}: {c}", m.metric.name()))
        })
        .collect();
    if faulty.is_empty() {
        let mut words: Vec<&str> = os
            .iter()
            .filter_map(|m| m.nodes.iter().find(|n| n.node == node))
            .map(|n| n.verdict.word())
            .collect();
        words.sort_unstable();
        words.dedup();
        return esc(&words.join(", ").to_lowercase());
    }
    format!(
        "<details><summary>faulty on {}</summary>{}</details>",
        faulty.len(),
        faulty
            .iter()
            .map(|f| esc(f))
            .collect::<Vec<_>>()
            .join("<br>")
    )
}

/// `text` escaped, folded behind its first words when longer than `n` characters.
fn folded(text: &str, n: usize) -> String {
    if text.chars().count() <= n {
        return esc(text);
    }
    let head: String = text.chars().take(n).collect();
    let cut = head.rfind(' ').unwrap_or(head.len());
    format!(
        "<details><summary>{}…</summary>{}</details>",
        esc(&head[..cut]),
        esc(text)
    )
}

const STYLE: &str = "body{font-family:sans-serif;margin:24px;color:#222;max-width:1180px}\
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}\
table{border-collapse:collapse;max-width:100%}td,th{padding:3px 10px;border-bottom:1px solid #eee;\
text-align:left;vertical-align:top}th{white-space:nowrap}td.why{min-width:16em;overflow-wrap:anywhere}\
details summary{cursor:pointer}.resource{color:#7a2a00}\
.culprit{color:#b01010;font-weight:bold}.suspect{color:#b06000}.ok{color:#2a7a2a}\
.verdict{font-size:18px;padding:10px 14px;border:2px solid #b01010;background:#fff3f3;\
border-radius:6px}.verdict.none{border-color:#2a7a2a;background:#f3fff3}\
.chart svg{max-width:100%;height:auto}.note{color:#666;font-size:13px}";

/// Writes the page of `d` to `path` (to a temporary name first, so a failure leaves no half
/// page and keeps an older report whole).
pub fn write(d: &Diagnosis, path: &Path, opts: &Options) -> Result<(), Error> {
    let page = render(d, opts)?;
    let tmp = path.with_extension("html.tmp");
    std::fs::write(&tmp, page).map_err(|reason| Error::Write {
        path: tmp.clone(),
        reason,
    })?;
    std::fs::rename(&tmp, path).map_err(|reason| Error::Write {
        path: path.to_path_buf(),
        reason,
    })
}

/// The report page for `d`.
pub fn render(d: &Diagnosis, opts: &Options) -> Result<String, Error> {
    let mut h = String::new();
    let title = if opts.title.is_empty() {
        "culprit diagnosis"
    } else {
        &opts.title
    };
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n<h1>{}</h1>\n",
        esc(title),
        esc(title)
    );
    let _ = writeln!(
        h,
        "<p class=\"note\">data: {} · windows {} s every {} s · {} of the last {} · score {}, \
         distance {} · {}</p>",
        esc(&d.data.join(", ")),
        d.settings.win_size_s,
        d.settings.win_shift_s,
        d.settings.k,
        2 * d.settings.k - 1,
        d.settings.score.name(),
        d.settings.distance.name(),
        esc(&thresholds_words(d))
    );
    if let Some(b) = &d.baseline {
        let _ = writeln!(
            h,
            "<p class=\"note\" id=\"baseline\">baseline: {} ({} – {}; learnt {} time{})</p>",
            esc(&b.span),
            b.learnt.from,
            b.learnt.to,
            b.times,
            if b.times == 1 { "" } else { "s" }
        );
        for w in &b.warnings {
            let _ = writeln!(h, "<p class=\"note\">warning: {}</p>", esc(w));
        }
    }
    // The verdict.
    let culprits: Vec<_> = d
        .verdicts
        .iter()
        .filter(|v| v.combined.verdict.is_culprit())
        .collect();
    if culprits.is_empty() {
        h.push_str("<div class=\"verdict none\" id=\"verdict\">VERDICT: no culprit</div>\n");
    } else {
        h.push_str("<div class=\"verdict\" id=\"verdict\">");
        for v in &culprits {
            let _ = write!(
                h,
                "<div>VERDICT: <b>{}</b> is <b>{}</b> — {}{}</div>",
                esc(&v.node),
                v.combined.verdict.word(),
                resource_words(v),
                esc(&v.combined.reason)
            );
        }
        h.push_str("</div>\n");
    }
    if let Some(f) = &opts.fault_node {
        let _ = writeln!(
            h,
            "<p>Truth: the fault was injected into <b>{}</b>.</p>",
            esc(f)
        );
    }
    // The suspects, ranked: culprits, then suspects, then the rest; by evidence. One column
    // per white-box metric, one for all the OS metrics (its faulty metrics listed, folded),
    // the resource, and the reason folded when long: readable at 1,280 px.
    let (os, white): (Vec<&MetricReport>, Vec<&MetricReport>) =
        d.metrics.iter().partition(|m| m.family == Metric::OS);
    h.push_str(
        "<h2>Suspects, ranked</h2>\n<table id=\"suspects\"><tr><th>#</th><th>node</th>\
         <th>verdict</th><th>resource</th>",
    );
    for m in &white {
        let _ = write!(h, "<th>{}</th>", esc(m.metric.name()));
    }
    if !os.is_empty() {
        let _ = write!(h, "<th>OS metrics ({})</th>", os.len());
    }
    h.push_str("<th>why</th></tr>\n");
    let mut ranked: Vec<_> = d.verdicts.iter().collect();
    let evidence = |node: &str| -> f64 {
        d.metrics
            .iter()
            .filter_map(|m| m.nodes.iter().find(|n| n.node == node))
            .filter_map(|n| n.evidence)
            .fold(0.0, f64::max)
    };
    ranked.sort_by(|a, b| {
        let culprit =
            |v: &&culprit_analysis::diagnosis::NodeVerdict| v.combined.verdict.is_culprit();
        culprit(b)
            .cmp(&culprit(a))
            .then(severity(b.combined.verdict).cmp(&severity(a.combined.verdict)))
            .then(evidence(&b.node).total_cmp(&evidence(&a.node)))
            .then(a.node.cmp(&b.node))
    });
    for (i, v) in ranked.iter().enumerate() {
        let _ = write!(
            h,
            "<tr><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td class=\"resource\">{}</td>",
            i + 1,
            esc(&v.node),
            verdict_class(v.combined.verdict),
            v.combined.verdict.word(),
            v.resource.as_ref().map_or(String::new(), |r| esc(&r.name))
        );
        for m in &white {
            let _ = write!(h, "<td>{}</td>", esc(&metric_cell(m, &v.node)));
        }
        if !os.is_empty() {
            let _ = write!(h, "<td>{}</td>", os_cell(&os, &v.node));
        }
        let _ = writeln!(
            h,
            "<td class=\"why\">{}</td></tr>",
            folded(&v.combined.reason, 140)
        );
    }
    h.push_str("</table>\n");
    if !d.roles.is_empty() {
        h.push_str(
            "<h2>Another role</h2>\n<p class=\"note\">These nodes differed from their peers the \
             same way throughout the baseline; each is judged against its own baseline and \
             convicted only when it changes from it.</p>\n<ul id=\"roles\">\n",
        );
        for r in &d.roles {
            let _ = writeln!(
                h,
                "<li><b>{}</b>: {}</li>",
                esc(&r.node),
                esc(&culprit_analysis::roles::summary(r))
            );
        }
        h.push_str("</ul>\n");
    }
    if !d.findings.is_empty() {
        h.push_str("<h2>Findings</h2>\n<ul>\n");
        let (gaps, other): (Vec<String>, Vec<String>) =
            culprit_analysis::missing::lines(&d.findings)
                .into_iter()
                .partition(|l| l.contains(" has gaps in its data"));
        for line in &other {
            let _ = writeln!(h, "<li>{}</li>", esc(line));
        }
        // Gaps, one line a node, folded: they must not push the charts off the page.
        if !gaps.is_empty() {
            let _ = write!(
                h,
                "<li><details><summary>{} node(s) have gaps in their data (missing data is never \
                 read as zeros)</summary><ul>",
                gaps.len()
            );
            for line in &gaps {
                let _ = write!(h, "<li>{}</li>", esc(line));
            }
            h.push_str("</ul></details></li>\n");
        }
        h.push_str("</ul>\n");
    }
    // Scores over time, per metric family.
    let t0 = d
        .metrics
        .iter()
        .flat_map(|m| m.nodes.iter())
        .flat_map(|n| n.scores.iter().map(|s| s.start_ns))
        .min()
        .unwrap_or(0);
    h.push_str(
        "<h2>Scores over time</h2>\n<p class=\"note\">Each line is a node's score in \
                each window (plotted at the window's middle); dashed: its threshold. The \
                flagged nodes' lines are thick (the first red), their anomalous windows shaded.</p>\n",
    );
    for m in &d.metrics {
        // A chart with no score drawn (every window unscored, or every score zero) is left out.
        let drawn = m
            .nodes
            .iter()
            .flat_map(|n| n.scores.iter())
            .any(|s| s.score.is_finite() && s.score > 0.0);
        if !drawn {
            continue;
        }
        let svg = score_chart(d, m, t0, opts)?;
        let _ = writeln!(
            h,
            "<div class=\"chart\" id=\"scores-{}\">{svg}</div>",
            esc(m.metric.name())
        );
    }
    // The culprits' top functions.
    let mut any_top = false;
    for m in &d.metrics {
        for n in m.nodes.iter().filter(|n| !n.top.is_empty()) {
            if !any_top {
                h.push_str("<h2>Top functions: deviation from the median node</h2>\n");
                any_top = true;
            }
            let svg = deviation_chart(m, n)?;
            let _ = writeln!(
                h,
                "<div class=\"chart\" id=\"top-{}-{}\">{svg}</div>",
                esc(m.metric.name()),
                esc(&n.node)
            );
        }
    }
    if !d.notes.is_empty() || !d.warnings.is_empty() {
        h.push_str("<h2>Notes</h2>\n<ul class=\"note\">\n");
        for n in d.notes.iter().chain(&d.warnings) {
            let _ = writeln!(h, "<li>{}</li>", esc(n));
        }
        h.push_str("</ul>\n");
    }
    let _ = writeln!(
        h,
        "<p class=\"note\">culprit {} · {} to {}</p></body></html>",
        env!("CARGO_PKG_VERSION"),
        d.from.map_or("–".to_string(), |t| t.to_string()),
        d.to.map_or("–".to_string(), |t| t.to_string())
    );
    Ok(h)
}
