//! Rare functions (issue 31, 5), end to end with real processes: four nodes, each a real
//! server (tests/c/rare_calls.c) built with `-finstrument-functions` and traced by
//! `libculprit_rt.so`, which logs a debug line 4 times a second — a function far below the keep
//! rule's 1 s of time per window. On one node it logs 400× as often: the node must be flagged and
//! `log_line` named (top functions, the verdict in JSON, text and HTML); with no node changed,
//! nobody may be flagged.
//!
//! The servers are pinned to one CPU like diagnose_real.rs's (`diagnose_util::pinned`), so that
//! the machine's other work (`stress-ng --cpu 2` in CI) falls on all of them alike. Each test
//! runs 20 s.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

use culprit_analysis::combine::Verdict;
use culprit_tests::*;

mod diagnose_util;
use diagnose_util::*;

const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];

/// Log lines per second on a healthy node, and on the changed one (400×).
const RATE: f64 = 4.0;
const CHANGED: f64 = 1600.0;

/// Windows of 4 s every 2 s: a 20 s run has 8 or more, faulty at 3 of 5.
const WINDOWS: [&str; 4] = ["--win-size", "4s", "--win-shift", "2s"];

const RUN_S: &str = "20";

fn server(dir: &Path) -> PathBuf {
    let exe = dir.join("rare_calls");
    gcc(
        &[&c_source("rare_calls.c")],
        &exe,
        &["-O0", "-g", "-finstrument-functions"],
    );
    exe
}

/// Runs the four nodes for [`RUN_S`] seconds, `changed` (if any) logging [`CHANGED`] lines a
/// second; returns the data root.
fn run_group(dir: &TempDir, exe: &Path, changed: Option<&str>) -> PathBuf {
    let data = dir.join("data");
    let kids: Vec<Child> = NODES
        .iter()
        .map(|&n| {
            let rate = if Some(n) == changed { CHANGED } else { RATE };
            pinned(exe)
                .arg(RUN_S)
                .arg(rate.to_string())
                .env("CULPRIT_DIR", &data)
                .env("CULPRIT_NODE", n)
                .env("CULPRIT_INTERVAL_MS", "500")
                .env("LD_PRELOAD", runtime_lib())
                .env_remove("CULPRIT_INCLUDE")
                .env_remove("CULPRIT_EXCLUDE")
                .stdout(Stdio::null())
                .spawn()
                .expect("start rare_calls")
        })
        .collect();
    for mut k in kids {
        let st = k.wait().unwrap();
        assert!(st.success(), "rare_calls failed: {st}");
    }
    data
}

fn diagnose(data: &Path) -> (i32, culprit_analysis::Diagnosis) {
    let mut args = vec![data.to_str().unwrap()];
    args.extend(WINDOWS);
    diagnose_json(&args)
}

/// A node logging 400× as often as its peers, in a function far below the keep rule: flagged,
/// and `log_line` named in its top functions, its verdict's reason, the text report and the
/// HTML page; no other node flagged.
#[test]
fn a_rare_function_run_400_times_more_often_flags_its_node_and_is_named() {
    ensure_built();
    let dir = TempDir::new("rare-calls");
    let exe = server(dir.path());
    let data = run_group(&dir, &exe, Some("n3"));
    let (code, r) = diagnose(&data);
    let why = |r: &culprit_analysis::Diagnosis| format!("{:#?}", r.verdicts);
    assert_eq!(code, 1, "a culprit: exit status 1; {}", why(&r));
    assert_eq!(r.culprits, vec!["n3".to_string()], "{}", why(&r));
    for n in ["n1", "n2", "n4"] {
        assert_eq!(verdict(&r, n), Verdict::Ok, "{n}: {}", why(&r));
    }
    let v = r.verdict("n3").unwrap();
    assert!(
        v.combined.reason.contains("rare calls: log_line"),
        "the verdict names the function: {}",
        v.combined.reason
    );
    // The time rule did not keep it: it was found by its count.
    let count = metric(&r, "count");
    let n3 = node(count, "n3");
    let top = n3
        .top
        .iter()
        .find(|row| row.function == "log_line")
        .unwrap_or_else(|| panic!("log_line among n3's top functions: {:#?}", n3.top));
    // Rare: the keep rule left it out (it stayed far below 1 s of time), its count found it.
    assert!(top.rare, "log_line is a rare function: {top:#?}");
    assert_eq!(top.rank, 1, "{:#?}", n3.top);
    assert!(top.node_total > 100.0 * top.median_total, "{top:#?}");
    assert!(
        n3.anomalous_windows.iter().any(|w| w.rare.is_some()),
        "{:#?}",
        n3.anomalous_windows
    );
    // The text report and the HTML page say it too.
    let text = culprit()
        .arg("diagnose")
        .arg(&data)
        .args(WINDOWS)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("VERDICT: n3 is FAULTY"))
        .unwrap_or_else(|| panic!("a VERDICT line for n3:\n{text}"));
    assert!(line.contains("log_line"), "{line}");
    let html = dir.join("report.html");
    let o = culprit()
        .arg("diagnose")
        .arg(&data)
        .args(WINDOWS)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let page = std::fs::read_to_string(&html).unwrap();
    let at = page.find("id=\"verdict\"").expect("a VERDICT block");
    let end = page[at..].find("</div>\n").map_or(page.len(), |e| at + e);
    assert!(
        page[at..end].contains("rare calls: log_line"),
        "{}",
        &page[at..end]
    );
}

/// The same group with no node changed: nobody flagged, and no rare function anywhere.
#[test]
fn the_same_group_unchanged_flags_nobody() {
    ensure_built();
    let dir = TempDir::new("rare-calls-ok");
    let exe = server(dir.path());
    let data = run_group(&dir, &exe, None);
    let (code, r) = diagnose(&data);
    assert_eq!(code, 0, "{:#?}", r.verdicts);
    assert!(r.culprits.is_empty(), "{:#?}", r.verdicts);
    for n in NODES {
        assert_eq!(verdict(&r, n), Verdict::Ok, "{n}: {:#?}", r.verdicts);
    }
    let count = metric(&r, "count");
    for nr in &count.nodes {
        assert!(
            nr.anomalous_windows.iter().all(|w| w.rare.is_none()),
            "{}: {:#?}",
            nr.node,
            nr.anomalous_windows
        );
    }
}
