//! Alerting through Prometheus, end to end: a real faulty run on the emulated cluster (4
//! PVFS-like servers traced by libculprit_rt.so, the machine sampled by `culprit sample`, a CPU
//! spinner in one node's cgroups), followed live by `culprit diagnose --follow
//! --metrics-listen`, scraped every second over HTTP while it runs. The scrapes become `promtool
//! test rules` input series (one per scrape, as Prometheus would have stored them), and promtool
//! checks the shipped rules (examples/alerting): the faulty-node alert fires for the faulty node
//! and for no other while the fault is on, and for none before it. The shipped Grafana dashboard
//! must be valid JSON whose queries name only metrics the scrapes contain.
//!
//! Short windows (4 s every 2 s, k = 3, 1 s records), untrained; the samples and time metrics
//! (a CPU hog shows in samples, its victim in time). Budget: about 40 s. Needs root
//! (namespaces, cgroups, perf_event) and promtool (Debian `prometheus`, scripts/install-deps).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use culprit_testbed::run::{run_once, Instrument, Phases, RunPlan};
use culprit_testbed::tools::Tools;
use culprit_testbed::*;
use culprit_tests::*;

/// One scrape: Unix time (s) and the exposition.
struct Scrape {
    at: f64,
    text: String,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// `GET /metrics` over a plain TCP connection: the status line, headers and body.
fn get_metrics(addr: &str) -> std::io::Result<(String, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(
        b"GET /metrics HTTP/1.1\r\nHost: culprit\r\nAccept: application/openmetrics-text\r\n\r\n",
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let (head, body) = out
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no header end"))?;
    Ok((head.to_string(), body.to_string()))
}

/// The samples of an exposition: `name{labels}` → value (comments and `# EOF` left out).
fn samples(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("series and value");
            (series.to_string(), value.to_string())
        })
        .collect()
}

/// The value of `name` with exactly these labels (in exposition order).
fn value(s: &BTreeMap<String, String>, series: &str) -> Option<f64> {
    s.get(series).map(|v| v.parse().expect("a number"))
}

/// Adds `job` and `instance` labels, as a Prometheus scrape would.
fn scraped_series(series: &str) -> String {
    const TARGET: &str = "job=\"culprit\",instance=\"127.0.0.1:9464\"";
    match series.split_once('{') {
        Some((name, rest)) => format!("{name}{{{TARGET},{rest}"),
        None => format!("{series}{{{TARGET}}}"),
    }
}

/// The annotations of alert `alert` in the rules file, with `{{ $labels.node }}` filled in.
fn annotations(rules: &str, alert: &str, node: &str) -> Vec<(String, String)> {
    let start = rules
        .find(&format!("- alert: {alert}\n"))
        .expect("the alert is in the rules");
    let block = &rules[start..];
    let block = &block[..block[1..].find("- alert:").map_or(block.len(), |e| e + 1)];
    let mut out = Vec::new();
    let mut inside = false;
    for line in block.lines() {
        if line.trim() == "annotations:" {
            inside = true;
            continue;
        }
        if inside {
            let Some((key, v)) = line.trim().split_once(": ") else {
                break;
            };
            let v = v.trim_matches('"').replace("{{ $labels.node }}", node);
            out.push((key.to_string(), v));
        }
    }
    assert!(!out.is_empty(), "annotations of {alert}");
    out
}

/// A YAML double-quoted string.
fn quoted(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The `promtool test rules` file: every scraped series as input (one sample per scrape,
/// `_` where a scrape lacks it), and the alerts expected at the given scrape indices.
fn promtool_test(
    rules_file: &Path,
    scrapes: &[BTreeMap<String, String>],
    checks: &[(usize, Vec<String>)],
    rules: &str,
) -> String {
    let names: BTreeSet<&String> = scrapes.iter().flat_map(|s| s.keys()).collect();
    let mut y = String::new();
    y.push_str(&format!(
        "rule_files:\n  - {}\nevaluation_interval: 1s\ntests:\n  - interval: 1s\n    input_series:\n",
        quoted(&rules_file.display().to_string())
    ));
    for name in names {
        let values: Vec<String> = scrapes
            .iter()
            .map(|s| match s.get(name).map(String::as_str) {
                None => "_".to_string(),
                Some("+Inf") => "Inf".to_string(),
                Some(v) => v.to_string(),
            })
            .collect();
        y.push_str(&format!(
            "      - series: {}\n        values: {}\n",
            quoted(&scraped_series(name)),
            quoted(&values.join(" "))
        ));
    }
    y.push_str("    alert_rule_test:\n");
    for (at, nodes) in checks {
        y.push_str(&format!(
            "      - eval_time: {at}s\n        alertname: CulpritFaultyNode\n        exp_alerts:\n"
        ));
        if nodes.is_empty() {
            y.push_str("          []\n");
        }
        for n in nodes {
            y.push_str("          - exp_labels:\n");
            y.push_str("              severity: critical\n");
            y.push_str("              job: culprit\n");
            y.push_str("              instance: \"127.0.0.1:9464\"\n");
            y.push_str(&format!("              node: {}\n", quoted(n)));
            y.push_str("            exp_annotations:\n");
            for (k, v) in annotations(rules, "CulpritFaultyNode", n) {
                y.push_str(&format!("              {k}: {}\n", quoted(&v)));
            }
        }
    }
    y
}

/// Every `culprit_…` metric name in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = expr.as_bytes();
    let mut i = 0;
    while let Some(p) = expr[i..].find("culprit_") {
        let s = i + p;
        let boundary = s == 0 || !(b[s - 1].is_ascii_alphanumeric() || b[s - 1] == b'_');
        let mut e = s;
        while e < b.len() && (b[e].is_ascii_alphanumeric() || b[e] == b'_') {
            e += 1;
        }
        // A label name (`culprit_node_verdict="…"`) is followed by `=` or `!`.
        let is_label = matches!(b.get(e), Some(b'=') | Some(b'!'));
        if boundary && !is_label {
            out.push(expr[s..e].to_string());
        }
        i = e;
    }
    out
}

/// Every `expr` of a Grafana dashboard's panels.
fn dashboard_exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => dashboard_exprs(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| dashboard_exprs(x, out)),
        _ => {}
    }
}

fn alerting_dir() -> PathBuf {
    workspace_root().join("examples/alerting")
}

/// The rules and the dashboard name only metrics a live scrape has.
fn check_names(exposed: &BTreeSet<String>) {
    let rules = std::fs::read_to_string(alerting_dir().join("culprit.rules.yml")).unwrap();
    let dash = std::fs::read_to_string(alerting_dir().join("culprit-dashboard.json")).unwrap();
    let dash: serde_json::Value = serde_json::from_str(&dash).expect("dashboard JSON is valid");
    let mut exprs = Vec::new();
    dashboard_exprs(&dash, &mut exprs);
    let panels = dash["panels"].as_array().expect("panels").len();
    assert!(exprs.len() >= panels, "every panel has a query: {exprs:?}");
    let mut named = BTreeSet::new();
    for e in exprs.iter().map(String::as_str).chain([rules.as_str()]) {
        named.extend(metric_names(e));
    }
    assert!(named.len() >= 10, "{named:?}");
    let unknown: Vec<&String> = named.iter().filter(|n| !exposed.contains(*n)).collect();
    assert!(
        unknown.is_empty(),
        "rules or dashboard name metrics culprit does not expose: {unknown:?}"
    );
}

#[test]
fn metric_names_skip_label_names() {
    assert_eq!(
        metric_names("culprit_node_verdict{culprit_node_verdict=\"suspect\"} and x_culprit_y"),
        ["culprit_node_verdict"]
    );
}

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn faulty_node_alert_fires_for_the_faulty_node_only() {
    if !require(is_root(), "root (network namespaces, cgroups)") {
        return;
    }
    let promtool = Command::new("promtool").arg("--version").output();
    if !require(
        promtool.is_ok_and(|o| o.status.success()),
        "promtool (Debian package prometheus; scripts/install-deps)",
    ) {
        return;
    }
    let t_lock = Instant::now();
    let _lock = machine_lock();
    eprintln!("machine lock after {:.1} s", t_lock.elapsed().as_secs_f64());
    let t_test = Instant::now();
    let tools = Tools {
        culprit: culprit_bin(),
        runtime: runtime_lib(),
        analysis_args: Vec::new(),
    };
    let dir = TempDir::new("alerting");
    let programs = Programs::build(&dir.join("bin")).expect("build C programs");
    eprintln!("programs built in {:.1} s", t_test.elapsed().as_secs_f64());
    let run_dir = dir.join("faulty");
    let data = run_dir.join("data");

    // Follow the run from before it starts: diagnose waits for three nodes' first records.
    let mut follow = Command::new(culprit_bin())
        .arg("diagnose")
        .arg(&data)
        .args(["--follow", "--for", "150s", "--json"])
        .args(["--metrics-listen", "127.0.0.1:0"])
        .args(["--win-size", "4s", "--win-shift", "2s", "--k", "3"])
        .args(["--min-time", "67ms", "--min-samples", "6.7"])
        // Not count: in one of nine such runs (two, counting a failure whose log was lost) the
        // untrained count metric also convicted a healthy peer (io3, faulty on count) — a
        // false positive of the diagnosis, not of the alerting this test is about. Naming the
        // metrics makes `--follow` wait for the sampler's first records too.
        .args(["--metrics", "samples,time"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start culprit diagnose --follow");
    let mut stderr = BufReader::new(follow.stderr.take().unwrap());
    let mut line = String::new();
    stderr.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("culprit: serving OpenMetrics on http://")
        .and_then(|s| s.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("the address on stderr: {line:?}"))
        .to_string();
    let stderr_rest = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let stdout = follow.stdout.take().unwrap();
    let stdout_all = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(stdout).read_to_string(&mut s);
        s
    });

    // Scrape every second until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let scraper = {
        let stop = Arc::clone(&stop);
        let addr = addr.clone();
        std::thread::spawn(move || {
            let mut scrapes = Vec::new();
            let t0 = Instant::now();
            let mut next = Duration::ZERO;
            while !stop.load(Ordering::Relaxed) {
                if let Ok((head, body)) = get_metrics(&addr) {
                    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
                    assert!(
                        head.contains(
                            "Content-Type: application/openmetrics-text; version=1.0.0; \
                             charset=utf-8"
                        ),
                        "{head}"
                    );
                    assert!(body.ends_with("# EOF\n"), "{body}");
                    scrapes.push(Scrape {
                        at: unix_now(),
                        text: body,
                    });
                }
                next += Duration::from_secs(1);
                if let Some(d) = next.checked_sub(t0.elapsed()) {
                    std::thread::sleep(d);
                }
            }
            scrapes
        })
    };

    let plan = RunPlan {
        id: "alerting".into(),
        workload: Workload::Ddw,
        fault: Some((FaultKind::CpuHog, 2)),
        phases: Phases {
            settle_s: 2.0,
            before_s: 12.0,
            fault_s: 16.0,
            after_s: 0.0,
        },
        instrument: Instrument {
            tracing: true,
            sampling: true,
            tracer_interval_ms: 1000,
            sampler_interval_ms: 1000,
        },
        cluster: ClusterSpec::new(dir.join("cluster")),
        clients: WorkloadSpec {
            rate: 6_000_000,
            ..WorkloadSpec::default()
        },
    };
    let run = run_once(&plan, &programs, Some(&tools), &run_dir, &mut |s| {
        eprintln!("{s}")
    });
    eprintln!("run ended at {:.1} s", t_test.elapsed().as_secs_f64());
    // Every writer has ended: diagnose stops following and exits.
    let t_wait = Instant::now();
    let status = loop {
        if let Some(st) = follow.try_wait().unwrap() {
            break st;
        }
        if t_wait.elapsed() > Duration::from_secs(30) {
            let _ = follow.kill();
            break follow.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    stop.store(true, Ordering::Relaxed);
    let scrapes = scraper.join().expect("scraper");
    let err = stderr_rest.join().unwrap();
    let out = stdout_all.join().unwrap();
    let run = run.expect("faulty run");
    let faulty = run.faulty_node.clone();
    eprintln!("diagnose ended at {:.1} s", t_test.elapsed().as_secs_f64());
    eprintln!(
        "{} scrapes; fault on {faulty} from {:.1} to {:.1}; diagnose exit {status}",
        scrapes.len(),
        run.t_fault_on,
        run.t_fault_off
    );
    assert!(
        status.code() == Some(1),
        "diagnose finds a culprit ({status}): {err}\n{}",
        out.lines().last().unwrap_or("")
    );

    let parsed: Vec<BTreeMap<String, String>> = scrapes.iter().map(|s| samples(&s.text)).collect();
    let exposed: BTreeSet<String> = parsed
        .iter()
        .flat_map(|s| s.keys())
        .map(|k| k.split('{').next().unwrap().to_string())
        .collect();
    check_names(&exposed);

    // When the fault is on: a scrape where the faulty node is a culprit and faulty now.
    let culprit_now = |s: &BTreeMap<String, String>, n: &str| {
        value(s, &format!("culprit_node_culprit{{node=\"{n}\"}}")) == Some(1.0)
            && s.iter().any(|(k, v)| {
                k.starts_with(&format!("culprit_node_faulty{{node=\"{n}\",")) && v == "1"
            })
    };
    let fired = parsed
        .iter()
        .position(|s| culprit_now(s, &faulty))
        .unwrap_or_else(|| {
            panic!(
                "no scrape shows {faulty} faulty; the report:\n{}\nthe last scrape:\n{}",
                out.lines().last().unwrap_or(""),
                scrapes.last().map_or("", |s| s.text.as_str())
            )
        });
    eprintln!(
        "{faulty} alerting {:.1} s after the fault began",
        scrapes[fired].at - run.t_fault_on
    );
    assert!(
        scrapes[fired].at >= run.t_fault_on,
        "flagged before the fault"
    );
    // Before the fault: the last scrape with windows closed on every metric.
    let before = parsed
        .iter()
        .zip(&scrapes)
        .rposition(|(s, sc)| {
            sc.at < run.t_fault_on && s.keys().any(|k| k.starts_with("culprit_node_score{"))
        })
        .expect("a scrape with scores before the fault");
    let checks = vec![(before, Vec::new()), (fired, vec![faulty.clone()])];

    let rules_text = std::fs::read_to_string(alerting_dir().join("culprit.rules.yml")).unwrap();
    let test_file = dir.join("alerting-test.yml");
    std::fs::write(
        &test_file,
        promtool_test(
            &alerting_dir().join("culprit.rules.yml"),
            &parsed,
            &checks,
            &rules_text,
        ),
    )
    .unwrap();
    let o = Command::new("promtool")
        .arg("test")
        .arg("rules")
        .arg(&test_file)
        .output()
        .expect("run promtool");
    assert!(
        o.status.success(),
        "promtool test rules:\n{}{}\nscrape at the check ({fired}):\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
        scrapes[fired].text
    );
}
