//! `diagnose --follow --metrics-listen`'s exposition: a [`LiveStatus`] as OpenMetrics 1.0 text,
//! rendered, nothing recomputed. The families and their meaning are documented in
//! docs/alerting.md (keep the table there in step with [`FAMILIES`]).
//!
//! Names follow the Prometheus conventions: a `culprit_` prefix, base units in the name
//! (`_seconds`), `_total` on counters, `_info` on info families; scores and thresholds are in
//! each metric's own score unit, given by `culprit_metric_info{score_unit}`.

use std::fmt::Write as _;

use culprit_analysis::combine::Verdict;
use culprit_analysis::live::LiveStatus;

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// A family of the exposition, as declared in its metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FamilyDoc {
    /// Name (`culprit_node_score`).
    pub name: &'static str,
    /// OpenMetrics type: `gauge`, `counter`, `info`, `stateset`.
    pub kind: &'static str,
    /// Help text.
    pub help: &'static str,
}

const fn fam(name: &'static str, kind: &'static str, help: &'static str) -> FamilyDoc {
    FamilyDoc { name, kind, help }
}

/// The families. Samples of counters end in `_total`, of info families in `_info`, of state
/// sets carry a label named after the family.
pub const FAMILIES: &[FamilyDoc] = &[
    fam("culprit_build", "info", "The culprit serving these metrics."),
    fam(
        "culprit_following",
        "gauge",
        "1 while diagnose --follow runs, 0 once every writer has ended (or --for passed).",
    ),
    fam(
        "culprit_filter_k",
        "gauge",
        "k: a node is faulty on a metric when anomalous in k of its last 2k-1 windows.",
    ),
    fam(
        "culprit_window_size_seconds",
        "gauge",
        "WinSize: the length of a diagnosis window.",
    ),
    fam(
        "culprit_window_shift_seconds",
        "gauge",
        "WinShift: a window closes every WinShift.",
    ),
    fam(
        "culprit_metric",
        "info",
        "A metric analysed, with the unit of its values and of its scores and thresholds.",
    ),
    fam(
        "culprit_windows_closed",
        "counter",
        "Windows of the metric closed so far.",
    ),
    fam(
        "culprit_window_end_timestamp_seconds",
        "gauge",
        "End of the metric's latest window closed, Unix time.",
    ),
    fam(
        "culprit_node_score",
        "gauge",
        "The node's score in the latest window it was scored in (the metric's score unit).",
    ),
    fam(
        "culprit_node_threshold",
        "gauge",
        "The threshold the node's latest score was compared with (same unit).",
    ),
    fam(
        "culprit_node_score_ratio",
        "gauge",
        "Latest score divided by its threshold: above 1 is anomalous.",
    ),
    fam(
        "culprit_node_anomalous",
        "gauge",
        "1 when the node is anomalous in the metric's latest window.",
    ),
    fam(
        "culprit_node_faulty",
        "gauge",
        "1 when the node is faulty on the metric as of its latest window (k of the last 2k-1).",
    ),
    fam(
        "culprit_node_recent_anomalous_windows",
        "gauge",
        "Anomalous windows among the metric's last 2k-1.",
    ),
    fam(
        "culprit_node_anomalous_windows",
        "counter",
        "Anomalous windows of the node so far.",
    ),
    fam(
        "culprit_node_scored_windows",
        "counter",
        "Windows the node was scored in so far.",
    ),
    fam(
        "culprit_node_verdict",
        "stateset",
        "The node's combined verdict so far (the report's; faulty and stopped set the exit status).",
    ),
    fam(
        "culprit_node_culprit",
        "gauge",
        "1 when the combined verdict so far is faulty or stopped.",
    ),
    fam(
        "culprit_node_stopped",
        "gauge",
        "1 when the node's data stopped while its peers' went on.",
    ),
    fam(
        "culprit_node_damaged",
        "gauge",
        "1 when one of the node's data files is damaged (data before the damage is used).",
    ),
    fam(
        "culprit_node_data_age_seconds",
        "gauge",
        "Time since the end of the node's newest data, at scrape time.",
    ),
    fam(
        "culprit_top_suspect",
        "info",
        "The node most likely at fault (most severe verdict, then strongest evidence).",
    ),
    fam(
        "culprit_node_top_function",
        "info",
        "First row of a faulty or suspect node's root-cause table for the metric.",
    ),
];

const VERDICTS: [(Verdict, &str); 4] = [
    (Verdict::Ok, "ok"),
    (Verdict::Suspect, "suspect"),
    (Verdict::Faulty, "faulty"),
    (Verdict::Stopped, "stopped"),
];

/// The exposition of `status` (`None` before following has started) at `now_ns`.
pub fn render(status: Option<&LiveStatus>, now_ns: u64) -> String {
    let mut fams: Vec<Family> = FAMILIES
        .iter()
        .map(|d| Family {
            name: d.name,
            kind: d.kind,
            help: d.help,
            samples: Vec::new(),
        })
        .collect();
    let mut add = |family: &str, suffix: &str, labels: &[(&str, &str)], value: String| {
        let f = fams
            .iter_mut()
            .find(|f| f.name == family)
            .expect("every family rendered is in FAMILIES");
        let mut line = format!("{family}{suffix}");
        if !labels.is_empty() {
            line.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    line.push(',');
                }
                let _ = write!(line, "{k}=\"{}\"", escape(v));
            }
            line.push('}');
        }
        line.push(' ');
        line.push_str(&value);
        f.samples.push(line);
    };
    add(
        "culprit_build",
        "_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        "1".into(),
    );
    let Some(s) = status else {
        return finish(&fams);
    };
    let r = &s.report;
    add(
        "culprit_following",
        "",
        &[],
        u8::from(!s.finished).to_string(),
    );
    add("culprit_filter_k", "", &[], s.k.to_string());
    add(
        "culprit_window_size_seconds",
        "",
        &[],
        float(r.settings.win_size_s),
    );
    add(
        "culprit_window_shift_seconds",
        "",
        &[],
        float(r.settings.win_shift_s),
    );
    for m in &r.metrics {
        let name = m.metric.name();
        add(
            "culprit_metric",
            "_info",
            &[
                ("metric", name),
                ("unit", &m.unit),
                ("score_unit", &m.score_unit),
            ],
            "1".into(),
        );
    }
    for lm in &s.metrics {
        let metric = lm.metric.name();
        add(
            "culprit_windows_closed",
            "_total",
            &[("metric", metric)],
            lm.windows_closed.to_string(),
        );
        let size_s = r
            .metric(lm.metric)
            .and_then(|m| m.windows_ns)
            .map_or(r.settings.win_size_s, |w| w.size_ns as f64 / 1e9);
        if let Some(start) = lm.latest_window_ns {
            add(
                "culprit_window_end_timestamp_seconds",
                "",
                &[("metric", metric)],
                float(start as f64 / 1e9 + size_s),
            );
        }
        for n in &lm.nodes {
            let labels = [("node", n.node.as_str()), ("metric", metric)];
            if let Some(l) = n.latest {
                add("culprit_node_score", "", &labels, float(l.score));
                add("culprit_node_threshold", "", &labels, float(l.threshold));
                if l.threshold > 0.0 && l.threshold.is_finite() {
                    add(
                        "culprit_node_score_ratio",
                        "",
                        &labels,
                        float(l.score / l.threshold),
                    );
                }
            }
            add(
                "culprit_node_anomalous",
                "",
                &labels,
                u8::from(n.anomalous).to_string(),
            );
            add(
                "culprit_node_faulty",
                "",
                &labels,
                u8::from(n.faulty).to_string(),
            );
            add(
                "culprit_node_recent_anomalous_windows",
                "",
                &labels,
                n.recent_anomalous.to_string(),
            );
            add(
                "culprit_node_anomalous_windows",
                "_total",
                &labels,
                n.anomalous_windows.to_string(),
            );
            add(
                "culprit_node_scored_windows",
                "_total",
                &labels,
                n.windows_scored.to_string(),
            );
        }
    }
    for n in &s.nodes {
        let node = n.node.as_str();
        for (v, word) in VERDICTS {
            add(
                "culprit_node_verdict",
                "",
                &[("node", node), ("culprit_node_verdict", word)],
                u8::from(n.verdict == v).to_string(),
            );
        }
        add(
            "culprit_node_culprit",
            "",
            &[("node", node)],
            u8::from(n.verdict.is_culprit()).to_string(),
        );
        add(
            "culprit_node_stopped",
            "",
            &[("node", node)],
            u8::from(n.stopped).to_string(),
        );
        add(
            "culprit_node_damaged",
            "",
            &[("node", node)],
            u8::from(n.damaged).to_string(),
        );
        if let Some(end) = n.data_end_ns {
            add(
                "culprit_node_data_age_seconds",
                "",
                &[("node", node)],
                float(now_ns.saturating_sub(end) as f64 / 1e9),
            );
        }
    }
    if let Some(t) = &s.top_suspect {
        add("culprit_top_suspect", "_info", &[("node", t)], "1".into());
    }
    for m in &r.metrics {
        for nr in &m.nodes {
            if let Some(row) = nr.top.first() {
                add(
                    "culprit_node_top_function",
                    "_info",
                    &[
                        ("node", &nr.node),
                        ("metric", m.metric.name()),
                        ("function", &row.function),
                        ("image", row.image.as_deref().unwrap_or("")),
                    ],
                    "1".into(),
                );
            }
        }
    }
    finish(&fams)
}

struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: Vec<String>,
}

/// Every family's metadata and samples, then `# EOF`.
fn finish(fams: &[Family]) -> String {
    let mut out = String::new();
    for f in fams {
        let _ = writeln!(out, "# TYPE {} {}", f.name, f.kind);
        if let Some(unit) = unit_of(f.name) {
            let _ = writeln!(out, "# UNIT {} {unit}", f.name);
        }
        let _ = writeln!(out, "# HELP {} {}", f.name, escape_help(f.help));
        for s in &f.samples {
            out.push_str(s);
            out.push('\n');
        }
    }
    out.push_str("# EOF\n");
    out
}

/// The unit of a family whose name ends in one (OpenMetrics: the name's suffix).
fn unit_of(name: &str) -> Option<&'static str> {
    name.ends_with("_seconds").then_some("seconds")
}

/// A label value: backslash, double quote and line feed escaped.
fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            _ => s.push(c),
        }
    }
    s
}

fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A float as OpenMetrics writes it (`+Inf`, `-Inf`, `NaN`).
fn float(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v == f64::INFINITY {
        "+Inf".into()
    } else if v == f64::NEG_INFINITY {
        "-Inf".into()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use culprit_analysis::synth::{Fault, Scenario};

    use super::*;

    /// One sample: family, full name, labels, value.
    #[derive(Debug)]
    struct Sample {
        family: String,
        name: String,
        labels: BTreeMap<String, String>,
        value: f64,
    }

    /// Parses OpenMetrics text strictly enough to catch what Prometheus would reject: metadata
    /// before samples, every sample in the family declared last with its type's suffix, label
    /// values unescaped, values numbers, no series twice, `# EOF` once at the end.
    fn parse(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
        let body = text.strip_suffix("# EOF\n").expect("ends with # EOF");
        assert!(!body.contains("# EOF"), "one # EOF");
        let mut types: BTreeMap<String, String> = BTreeMap::new();
        let mut current: Option<(String, String)> = None;
        let mut samples = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for line in body.lines() {
            if let Some(meta) = line.strip_prefix("# ") {
                let mut p = meta.splitn(3, ' ');
                let (what, name, rest) = (p.next().unwrap(), p.next().unwrap(), p.next());
                match what {
                    "TYPE" => {
                        let kind = rest.unwrap().to_string();
                        assert!(
                            ["gauge", "counter", "info", "stateset"].contains(&kind.as_str()),
                            "{line}"
                        );
                        assert!(types.insert(name.into(), kind.clone()).is_none(), "{line}");
                        current = Some((name.into(), kind));
                    }
                    "UNIT" | "HELP" => {
                        assert_eq!(current.as_ref().map(|c| c.0.as_str()), Some(name));
                        if what == "UNIT" {
                            assert!(name.ends_with(&format!("_{}", rest.unwrap())), "{line}");
                        }
                    }
                    _ => panic!("unknown metadata: {line}"),
                }
                continue;
            }
            let (family, kind) = current.clone().expect("a sample after its TYPE");
            let (series, value) = line.rsplit_once(' ').expect("name and value");
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, parse_labels(l.strip_suffix('}').expect("closing brace"))),
                None => (series, BTreeMap::new()),
            };
            let suffix = name
                .strip_prefix(family.as_str())
                .expect("name of its family");
            let want = match kind.as_str() {
                "counter" => "_total",
                "info" => "_info",
                _ => "",
            };
            assert_eq!(suffix, want, "{line}");
            if kind == "stateset" {
                assert!(labels.contains_key(&family), "{line}");
            }
            let value = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v
                    .parse::<f64>()
                    .unwrap_or_else(|_| panic!("a number: {line}")),
            };
            if kind == "counter" {
                assert!(value >= 0.0 && value.fract() == 0.0, "{line}");
            }
            assert!(seen.insert(series.to_string()), "twice: {line}");
            samples.push(Sample {
                family,
                name: name.into(),
                labels,
                value,
            });
        }
        (types, samples)
    }

    fn parse_labels(s: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut chars = s.chars().peekable();
        while chars.peek().is_some() {
            let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
            assert!(
                key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{key}"
            );
            assert_eq!(chars.next(), Some('"'));
            let mut v = String::new();
            loop {
                match chars.next().expect("closing quote") {
                    '"' => break,
                    '\\' => match chars.next() {
                        Some('n') => v.push('\n'),
                        Some(c @ ('\\' | '"')) => v.push(c),
                        c => panic!("bad escape {c:?}"),
                    },
                    c => v.push(c),
                }
            }
            assert!(out.insert(key, v).is_none());
            match chars.next() {
                Some(',') | None => {}
                c => panic!("after a label: {c:?}"),
            }
        }
        out
    }

    fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        samples
            .iter()
            .find(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
    }

    #[test]
    fn before_following_every_family_is_declared() {
        let (types, samples) = parse(&render(None, 0));
        assert_eq!(types.len(), FAMILIES.len());
        assert_eq!(samples.len(), 1);
        assert_eq!(samples[0].name, "culprit_build_info");
    }

    /// A synthetic group with a faulty node, rendered and parsed back: the families' rules
    /// hold and the values are the status' (node 2 faulty now and the top suspect, node 1
    /// damaged, data ages from the scrape time).
    #[test]
    fn exposition_parses_back_to_the_status() {
        let status = Scenario {
            secs: 90,
            faults: vec![Fault {
                node: 2,
                func: 0,
                factor: 3.0,
                from_s: 60,
                to_s: 120,
            }],
            ..Scenario::default()
        }
        .live_status(4000.0, |n| n == "n01");
        let end = status.nodes[0].data_end_ns.unwrap();
        let text = render(Some(&status), end + 2_500_000_000);
        let (types, samples) = parse(&text);
        assert_eq!(types.len(), FAMILIES.len());
        assert!(samples.iter().all(|s| s.name.starts_with("culprit_")));
        let time = [("metric", "time")];
        assert_eq!(value(&samples, "culprit_filter_k", &[]), Some(3.0));
        assert_eq!(
            value(&samples, "culprit_window_shift_seconds", &[]),
            Some(3.0)
        );
        assert_eq!(value(&samples, "culprit_following", &[]), Some(1.0));
        assert_eq!(
            value(&samples, "culprit_windows_closed_total", &time),
            Some(status.metrics[0].windows_closed as f64)
        );
        for n in ["n00", "n01", "n02", "n03"] {
            let l = [("node", n), ("metric", "time")];
            let bad = f64::from(u8::from(n == "n02"));
            assert_eq!(value(&samples, "culprit_node_faulty", &l), Some(bad), "{n}");
            assert_eq!(
                value(&samples, "culprit_node_culprit", &[("node", n)]),
                Some(bad)
            );
            let verdict = [("node", n), ("culprit_node_verdict", "faulty")];
            assert_eq!(value(&samples, "culprit_node_verdict", &verdict), Some(bad));
            let ratio = value(&samples, "culprit_node_score_ratio", &l).unwrap();
            assert_eq!(ratio > 1.0, n == "n02", "{n}: {ratio}");
            let score = value(&samples, "culprit_node_score", &l).unwrap();
            let threshold = value(&samples, "culprit_node_threshold", &l).unwrap();
            assert_eq!(threshold, 4000.0);
            assert!((score / threshold - ratio).abs() < 1e-9);
            let damaged = f64::from(u8::from(n == "n01"));
            assert_eq!(
                value(&samples, "culprit_node_damaged", &[("node", n)]),
                Some(damaged)
            );
            assert_eq!(
                value(&samples, "culprit_node_data_age_seconds", &[("node", n)]),
                Some(2.5)
            );
        }
        let l = [("node", "n02"), ("metric", "time")];
        assert_eq!(
            value(&samples, "culprit_node_recent_anomalous_windows", &l),
            Some(5.0)
        );
        assert_eq!(
            value(&samples, "culprit_top_suspect_info", &[("node", "n02")]),
            Some(1.0)
        );
        let top: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.family == "culprit_node_top_function")
            .collect();
        assert_eq!(top.len(), 1, "{top:?}");
        assert_eq!(top[0].labels["function"], "f000");
        assert_eq!(top[0].labels["image"], "synth");
    }

    #[test]
    fn label_values_and_floats() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        assert_eq!(
            parse_labels(&format!("x=\"{}\"", escape("a\"b\\c\nd")))["x"],
            "a\"b\\c\nd"
        );
        assert_eq!(float(f64::INFINITY), "+Inf");
        assert_eq!(float(f64::NAN), "NaN");
        assert_eq!(float(0.25), "0.25");
    }
}
