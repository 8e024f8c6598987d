//! The page drawn from the golden diagnosis report (tests/golden/diagnose.json, made by the
//! real `culprit diagnose --json`): self-contained, names escaped everywhere (the tables and
//! the SVG charts), a chart per scored metric.

use culprit_analysis::Diagnosis;
use culprit_report_html::{render, write, Options};

fn golden() -> Diagnosis {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/golden/diagnose.json");
    let text = std::fs::read_to_string(p).expect("tests/golden/diagnose.json");
    serde_json::from_str(&text).expect("the golden report")
}

#[test]
fn names_are_escaped_in_tables_and_charts() {
    let mut d = golden();
    let evil = "operator<<(std::ostream&, \"x\")";
    let mut renamed = 0;
    for m in &mut d.metrics {
        for n in &mut m.nodes {
            for r in &mut n.top {
                r.function = evil.to_string();
                renamed += 1;
            }
        }
    }
    assert!(renamed > 0, "the golden report has no top functions");
    d.verdicts[0].combined.reason = "<script>alert(1)</script>".to_string();
    let page = render(&d, &Options::default()).unwrap();
    assert!(!page.contains("<script"), "an unescaped reason");
    assert!(!page.contains("operator<<"), "an unescaped function name");
    assert!(page.contains("operator&lt;&lt;"), "the function is missing");
}

#[test]
fn the_page_holds_the_verdict_and_a_chart_per_scored_metric() {
    let d = golden();
    let opts = Options {
        title: "golden".into(),
        fault_window: None,
        fault_node: Some("io2".into()),
    };
    let page = render(&d, &opts).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    for bad in [
        "src=\"http",
        "href=\"http",
        "url(http",
        "<script",
        "<link",
        "@import",
    ] {
        assert!(
            !page.contains(bad),
            "the page fetches or runs something: {bad}"
        );
    }
    for c in &d.culprits {
        assert!(
            page.contains(&format!("<b>{c}</b> is <b>")),
            "culprit {c} not in the verdict"
        );
    }
    for m in d
        .metrics
        .iter()
        .filter(|m| m.nodes.iter().any(|n| !n.scores.is_empty()))
    {
        assert!(
            page.contains(&format!("id=\"scores-{}\"><svg", m.metric.name())),
            "no chart for {}",
            m.metric.name()
        );
    }
    assert!(page.contains("the fault was injected into <b>io2</b>"));
}

/// The page is written whole under its name, nothing left beside it; a directory that does not
/// exist is one line of error naming the file.
#[test]
fn the_page_is_written_whole_or_not_at_all() {
    let d = golden();
    let dir = std::env::temp_dir().join(format!("culprit-html-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("report.html");
    write(&d, &path, &Options::default()).unwrap();
    let page = std::fs::read_to_string(&path).unwrap();
    assert_eq!(page, render(&d, &Options::default()).unwrap());
    let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(left.len(), 1, "{left:?}");
    let missing = dir.join("no-such-dir").join("report.html");
    let e = write(&d, &missing, &Options::default())
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("cannot write "), "{e}");
    assert!(e.contains("no-such-dir"), "{e}");
    assert!(!e.contains('\n'), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A diagnosis with a baseline learnt from the data and a node of another role: the page says
/// where the thresholds came from, what learning warned of, and lists the role (escaped).
#[test]
fn the_baseline_and_the_roles_are_shown() {
    use culprit_analysis::baseline::{BaselineReport, Stretch};
    use culprit_analysis::family::Metric;
    use culprit_analysis::model::CompLabel;
    use culprit_analysis::roles::{RoleComponent, RoleMetric, RoleReport};
    let mut d = golden();
    assert!(render(&d, &Options::default())
        .unwrap()
        .find("id=\"roles\"")
        .is_none());
    d.baseline = Some(BaselineReport {
        span: "the first 30 s".into(),
        learnt: Stretch {
            from: "2026-11-22T13:00:00.000Z".parse().unwrap(),
            to: "2026-11-22T13:00:30.000Z".parse().unwrap(),
        },
        times: 1,
        left_out: Vec::new(),
        warnings: vec!["baseline: io3 stood out <early>".into()],
    });
    d.roles = vec![RoleReport {
        node: "io<1>".into(),
        metrics: vec![RoleMetric {
            metric: Metric::TIME,
            windows: 9,
            outstanding: 9,
            components: vec![RoleComponent {
                label: CompLabel::func("srv", "io_pwrite"),
                node: 2.0,
                peers: 1.0,
            }],
        }],
    }];
    let page = render(&d, &Options::default()).unwrap();
    assert!(
        page.contains("thresholds learnt from the data itself"),
        "{page}"
    );
    assert!(page.contains("baseline: the first 30 s"), "{page}");
    assert!(page.contains("stood out &lt;early&gt;"), "{page}");
    let roles = &page[page.find("id=\"roles\"").expect("a roles list")..];
    assert!(
        roles.contains("<b>io&lt;1&gt;</b>: time: io_pwrite 2× its peers&#39;"),
        "{roles}"
    );
}
