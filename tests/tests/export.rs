//! `culprit export`, each format checked by its real consumer on data of real traced C programs
//! (tests/c/export_srv.c on three nodes, `n2` with a slow disk) and, for the diagnosis and the
//! sampler's tables, on synthetic sampler data written with the format crate (four nodes, `io2`
//! doing 4× its `compress_block` from minute 2):
//!
//! * folded: golden file (calls: names and counts), rendered to SVG by inferno;
//! * pprof: `go tool pprof -top` (Debian golang-go) shows the expected top function;
//! * chrome: a structural check of the trace-event format (phases, pids/tids, timestamps that
//!   never decrease per track, slices that do not overlap per thread), counter sums equal the
//!   report's calls, the diagnosis' slices and markers;
//! * csv: golden file (per node, source, program, image, function: calls and samples);
//! * parquet: DuckDB (Python package, installed by scripts/install-deps) sums equal
//!   `culprit report --json` exactly; so do the OS metrics of a real `culprit sample` run
//!   (count, mean, min, max per metric; needs root for system-wide sampling).
//!
//! Golden files: tests/golden/export-*.txt; after an intended change, regenerate with
//! `CULPRIT_BLESS=1 cargo test -p culprit-tests --test export` and review the diff.

mod sampler_util;
mod tracer_util;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use culprit_format::{end_reason, EventEntry, RecordBuf, SampleEntry, SamplesHead};
use culprit_tests::*;
use serde_json::Value as Json;
use tracer_util::{build, traced, Link};

/// Traced data: `export_srv 500 WAIT` on n1, n2, n3, with n2 waiting 600 ms and the others
/// 100 ms.
fn traced_data(dir: &TempDir) -> PathBuf {
    traced_data_with(dir, false)
}

/// [`traced_data`], with the call graph (`CULPRIT_GRAPH=1`) when `graph`.
fn traced_data_with(dir: &TempDir, graph: bool) -> PathBuf {
    let exe = build(
        dir.path(),
        "export_srv.c",
        "export_srv",
        "-O2",
        Link::Linked,
    );
    let data = dir.join("data");
    for (node, wait) in [("n1", "100"), ("n2", "600"), ("n3", "100")] {
        let mut cmd = traced(&exe, Link::Linked, &data, node);
        if graph {
            cmd.env("CULPRIT_GRAPH", "1");
        } else {
            cmd.env_remove("CULPRIT_GRAPH");
        }
        run_ok(cmd.args(["500", wait]));
    }
    data
}

const NS: u64 = 1_000_000_000;
const T0: u64 = 1_704_067_200;

/// Synthetic sampler data: four nodes, 10 s intervals for 6 minutes, io2 doing 4× its
/// `compress_block` from minute 2, two kernel events.
fn sampler_data(root: &Path) {
    let funcs = [
        ("server", "server", "handle_io", 300u64),
        ("server", "server", "compress_block", 120),
        ("server", "libc.so.6", "memcpy", 60),
    ];
    for n in 0..4u64 {
        let strings = [
            (1, "cpu-clock"),
            (2, "server"),
            (3, "libc.so.6"),
            (4, "handle_io"),
            (5, "compress_block"),
            (6, "memcpy"),
            (7, "tcp:tcp_retransmit_skb"),
        ];
        let sid = |s: &str| strings.iter().find(|x| x.1 == s).unwrap().0;
        let mut w = peer_samples_file(root, n, T0 * NS, &strings);
        let mut buf = RecordBuf::new();
        for i in 0..36u64 {
            buf.clear();
            let entries: Vec<SampleEntry> = funcs
                .iter()
                .enumerate()
                .map(|(fi, (prog, image, func, base))| {
                    let wobble = ((n * 7 + i * 13 + fi as u64 * 5) % 11) as f64 / 100.0 - 0.05;
                    let mut v = *base as f64 * (1.0 + wobble);
                    if n == 2 && *func == "compress_block" && i >= 12 {
                        v *= 4.0;
                    }
                    SampleEntry {
                        program: sid(prog),
                        image: sid(image),
                        function: sid(func),
                        count: v.round() as u64,
                    }
                })
                .collect();
            let total = entries.iter().map(|e| e.count).sum();
            buf.samples(
                &SamplesHead {
                    start_ns: (T0 + 10 * i) * NS,
                    dur_ns: 10 * NS,
                    event_sid: 1,
                    period: 1_000_000,
                    total,
                    ..Default::default()
                },
                entries,
            );
            buf.events(
                (T0 + 10 * i) * NS,
                10 * NS,
                0,
                [EventEntry {
                    event: 7,
                    count: n + i % 3,
                }],
            );
            w.append(&buf).unwrap();
        }
        w.finish((T0 + 360) * NS, end_reason::SIGNAL).unwrap();
    }
}

fn check_golden(name: &str, got: &str) {
    let path = workspace_root().join("tests/golden").join(name);
    if std::env::var_os("CULPRIT_BLESS").is_some() {
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (bless with CULPRIT_BLESS=1)", path.display()));
    assert!(
        got == want,
        "{name} differs from {}; if intended, bless with CULPRIT_BLESS=1.\n--- got:\n{got}",
        path.display()
    );
}

fn export(data: &Path, args: &[&str]) -> std::process::Output {
    run_ok(culprit().arg("export").arg(data).args(args))
}

fn stderr_text(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn folded_golden_and_flame_graph() {
    let dir = TempDir::new("export-folded");
    let data = traced_data(&dir);
    let o = export(&data, &["--format", "folded", "--value", "calls"]);
    let calls = String::from_utf8(o.stdout.clone()).unwrap();
    check_golden("export-folded-calls.txt", &calls);
    // No call edges in the data: stderr says the stacks are one frame deep.
    assert!(
        stderr_text(&o).contains("one frame deep"),
        "{}",
        stderr_text(&o)
    );
    // Self time on the slow node: disk_wait dominates (its frames alone: --no-origin-frames).
    let o = export(
        &data,
        &["--format", "folded", "--node", "n2", "--no-origin-frames"],
    );
    let text = String::from_utf8(o.stdout).unwrap();
    let top = text
        .lines()
        .max_by_key(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .unwrap();
    assert!(top.starts_with("disk_wait "), "{text}");
    let ns: u64 = top.rsplit_once(' ').unwrap().1.parse().unwrap();
    // disk_wait counts whole ms and may end up to 1 ms early.
    assert!(ns >= 595_000_000, "{top}");
    // inferno draws both (calls: every function wide enough to be drawn, the nodes merged —
    // split per node, a function called once per node is too thin to draw).
    assert!(flame_graph(&text).contains("disk_wait"));
    let svg = merged_calls_flame_graph(&data);
    for f in ["disk_wait", "checksum", "handle"] {
        assert!(svg.contains(f), "{f} not in the flame graph");
    }
}

/// The flame graph of every call, the nodes merged (`--no-origin-frames`: split per node, a
/// function called once per node is too thin to draw).
fn merged_calls_flame_graph(data: &Path) -> String {
    let merged = export(
        data,
        &[
            "--format",
            "folded",
            "--value",
            "calls",
            "--no-origin-frames",
        ],
    );
    flame_graph(&String::from_utf8(merged.stdout).unwrap())
}

/// Renders folded lines with inferno; returns the SVG.
fn flame_graph(text: &str) -> String {
    let mut opts = inferno::flamegraph::Options::default();
    let mut svg = Vec::new();
    inferno::flamegraph::from_lines(&mut opts, text.lines(), &mut svg).unwrap();
    let svg = String::from_utf8(svg).unwrap();
    assert!(
        svg.starts_with("<?xml") && svg.contains("<svg"),
        "not an SVG"
    );
    svg
}

/// The value of each folded line.
fn folded_values(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .map(|l| {
            let (stack, n) = l.rsplit_once(' ').expect("stack and value");
            (stack.to_string(), n.parse().expect("a number"))
        })
        .collect()
}

#[test]
fn tracer_call_paths_in_folded_stacks_and_pprof() {
    let dir = TempDir::new("export-graph");
    let data = traced_data_with(&dir, true);
    // Calls along each path: export_srv's calls form a tree, so its paths are exact.
    let o = export(&data, &["--format", "folded", "--value", "calls"]);
    let calls_text = String::from_utf8(o.stdout.clone()).unwrap();
    check_golden("export-folded-graph-calls.txt", &calls_text);
    assert!(
        !stderr_text(&o).contains("one frame deep"),
        "{}",
        stderr_text(&o)
    );
    let calls = folded_values(&calls_text);
    // Each node's stacks apart, its node and program first (issue 31).
    assert_eq!(
        calls.get("n1;export_srv;main;handle;lookup;checksum"),
        Some(&3000),
        "{calls_text}"
    );
    assert!(
        calls
            .keys()
            .all(|k| k.split(';').nth(1) == Some("export_srv")),
        "{calls_text}"
    );
    // Self time: the slow node's disk_wait under main; every function's self time as the
    // one-frame export (edges off) would count it: edges cover every call.
    let o = export(
        &data,
        &["--format", "folded", "--node", "n2", "--no-origin-frames"],
    );
    let text = String::from_utf8(o.stdout).unwrap();
    let self_ns = folded_values(&text);
    let (top, ns) = self_ns.iter().max_by_key(|(_, &n)| n).unwrap();
    assert_eq!(top, "main;disk_wait", "{text}");
    assert!(*ns >= 595_000_000, "{text}");
    let csv = dir.join("n2.csv");
    export(
        &data,
        &[
            "--format",
            "csv",
            "--node",
            "n2",
            "-o",
            csv.to_str().unwrap(),
        ],
    );
    let csv = std::fs::read_to_string(&csv).unwrap();
    let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let (func, self_col) = (col("function"), col("self_ns"));
    let mut per_func: BTreeMap<String, u64> = BTreeMap::new();
    for l in csv.lines().skip(1) {
        let f: Vec<&str> = l.split(',').collect();
        *per_func.entry(f[func].to_string()).or_default() += f[self_col].parse::<u64>().unwrap();
    }
    let mut leaves: BTreeMap<String, u64> = BTreeMap::new();
    for (stack, n) in &self_ns {
        *leaves
            .entry(stack.rsplit(';').next().unwrap().to_string())
            .or_default() += n;
    }
    assert_eq!(leaves, per_func, "{text}");
    // inferno draws the paths (calls: every function wide enough to be drawn, the nodes
    // merged).
    let svg = merged_calls_flame_graph(&data);
    for f in ["main", "handle", "lookup", "checksum", "disk_wait"] {
        assert!(svg.contains(f), "{f} not in the flame graph");
    }

    // pprof: the same paths; main's cumulative calls are every call below it.
    if !have_go() {
        return;
    }
    let file = dir.join("p.pb.gz");
    export(&data, &["--format", "pprof", "-o", file.to_str().unwrap()]);
    let cum = pprof_cum(&file, &["-sample_index=calls"]);
    assert_eq!(cum["main"], 3 + 1500 + 1500 + 3000 + 9000 + 3, "{cum:?}");
    assert_eq!(cum["handle"], 1500 + 1500 + 3000 + 9000, "{cum:?}");
    assert_eq!(cum["lookup"], 3000 + 9000, "{cum:?}");
    let o = run_ok(
        Command::new("go")
            .args(["tool", "pprof", "-traces", "-sample_index=calls"])
            .arg(&file),
    );
    let traces = String::from_utf8_lossy(&o.stdout);
    // A trace lists its frames leaf first, one per line.
    let frames: Vec<&str> = traces.split_whitespace().collect();
    assert!(
        frames
            .windows(4)
            .any(|w| w == ["checksum", "lookup", "handle", "main"]),
        "{traces}"
    );
}

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn sampler_call_chains_in_folded_stacks_and_pprof() {
    if !require(
        can_sample(),
        "root (or perf_event_paranoid -1) to run culprit sample",
    ) {
        return;
    }
    let dir = TempDir::new("export-chains");
    let data = dir.join("data");
    sampler_util::sample_chain_fixture(dir.path(), &data, "c1", 300, &["--call-graph", "fp"]);
    let o = export(
        &data,
        &[
            "--format",
            "folded",
            "--program",
            "smp_chain",
            "--value",
            "samples",
            "--no-origin-frames",
        ],
    );
    let text = String::from_utf8(o.stdout.clone()).unwrap();
    assert!(
        !stderr_text(&o).contains("one frame deep"),
        "{}",
        stderr_text(&o)
    );
    let stacks = folded_values(&text);
    // The known path: nearly every sample in inner has main → outer → middle → inner.
    let in_inner: u64 = stacks
        .iter()
        .filter(|(s, _)| s.ends_with(";inner"))
        .map(|(_, n)| n)
        .sum();
    let whole: u64 = stacks
        .iter()
        .filter(|(s, _)| s.starts_with("smp_chain;") && s.ends_with(";main;outer;middle;inner"))
        .map(|(_, n)| n)
        .sum();
    assert!(in_inner >= 100, "{text}");
    assert!(
        whole * 100 >= in_inner * 95,
        "{whole} of {in_inner}: {text}"
    );
    // System calls: kernel frames on top of main → syscalls.
    assert!(
        stacks
            .keys()
            .any(|s| s.contains(";main;syscalls;") && s.contains("write")),
        "{text}"
    );
    // Every sample once: the chains add up to the per-function counts (CSV, read from the
    // Samples records, not the chains).
    let csv = dir.join("c.csv");
    export(
        &data,
        &[
            "--format",
            "csv",
            "--program",
            "smp_chain",
            "-o",
            csv.to_str().unwrap(),
        ],
    );
    let csv = std::fs::read_to_string(&csv).unwrap();
    let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = head.iter().position(|h| *h == "samples").unwrap();
    let samples: u64 = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').nth(col).unwrap().parse::<u64>().unwrap_or(0))
        .sum();
    assert_eq!(stacks.values().sum::<u64>(), samples);
    let svg = flame_graph(&text);
    for f in ["outer", "middle", "inner", "syscalls"] {
        assert!(svg.contains(f), "{f} not in the flame graph");
    }

    if !have_go() {
        return;
    }
    let file = dir.join("c.pb.gz");
    export(
        &data,
        &[
            "--format",
            "pprof",
            "--program",
            "smp_chain",
            "-o",
            file.to_str().unwrap(),
        ],
    );
    let cum = pprof_cum(&file, &["-sample_index=samples"]);
    assert!(cum["outer"] >= whole, "{cum:?}");
    assert!(cum["main"] >= cum["outer"] + cum["syscalls"], "{cum:?}");
}

/// True when Go's pprof runs (else skipped, or failed under CI).
fn have_go() -> bool {
    require(
        Command::new("go").arg("version").output().is_ok(),
        "Go's pprof (Debian golang-go, installed by scripts/install-deps)",
    )
}

/// `go tool pprof -top -cum`'s cumulative value per function (plain numbers: count types).
fn pprof_cum(file: &Path, args: &[&str]) -> HashMap<String, u64> {
    let o = run_ok(
        Command::new("go")
            .args(["tool", "pprof", "-top", "-cum", "-nodecount=1000"])
            .args(args)
            .arg(file),
    );
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    text.lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() < 6 {
                return None;
            }
            Some((f[5..].join(" "), f[3].parse().ok()?))
        })
        .collect()
}

/// `go tool pprof -top`'s rows: (flat, function), most first.
fn pprof_top(file: &Path, args: &[&str]) -> Vec<(String, String)> {
    let o = run_ok(
        Command::new("go")
            .args(["tool", "pprof", "-top"])
            .args(args)
            .arg(file),
    );
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let rows: Vec<(String, String)> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 6).then(|| (f[0].to_string(), f[5..].join(" ")))
        })
        .collect();
    assert!(!rows.is_empty(), "no rows in:\n{text}");
    rows
}

#[test]
fn pprof_opens_in_go_tool_pprof() {
    if !have_go() {
        return;
    }
    let dir = TempDir::new("export-pprof");
    let data = traced_data(&dir);
    let file = dir.join("p.pb.gz");
    export(&data, &["--format", "pprof", "-o", file.to_str().unwrap()]);
    // Calls: checksum, 3 per lookup, 2 lookups per request, 500 requests, 3 nodes.
    let rows = pprof_top(&file, &["-sample_index=calls"]);
    assert_eq!(
        rows[0],
        ("9000".to_string(), "checksum".to_string()),
        "{rows:?}"
    );
    assert_eq!(
        rows[1],
        ("3000".to_string(), "lookup".to_string()),
        "{rows:?}"
    );
    // Self time (the default sample type): disk_wait, and on n2 alone too.
    let rows = pprof_top(&file, &[]);
    assert_eq!(rows[0].1, "disk_wait", "{rows:?}");
    let rows = pprof_top(&file, &["-tagfocus=node=n2", "-sample_index=calls"]);
    assert_eq!(
        rows[0],
        ("3000".to_string(), "checksum".to_string()),
        "{rows:?}"
    );
}

/// Checks the trace-event format's structure; returns the events.
fn check_chrome(text: &str) -> Vec<Json> {
    let doc: Json = serde_json::from_str(text).expect("valid JSON");
    let events = doc["traceEvents"].as_array().expect("traceEvents").clone();
    assert!(!events.is_empty());
    let mut named_pids = std::collections::HashSet::new();
    let mut counter_ts: HashMap<(u64, String), f64> = HashMap::new();
    let mut slice_end: HashMap<(u64, u64), f64> = HashMap::new();
    for e in &events {
        let ph = e["ph"].as_str().expect("ph");
        let pid = e["pid"].as_u64().unwrap_or_else(|| panic!("pid: {e}"));
        let tid = e["tid"].as_u64().unwrap_or_else(|| panic!("tid: {e}"));
        let name = e["name"].as_str().unwrap_or_else(|| panic!("name: {e}"));
        if ph == "M" {
            assert!(
                ["process_name", "thread_name"].contains(&name),
                "metadata {e}"
            );
            assert!(e["args"]["name"].is_string(), "{e}");
            if name == "process_name" {
                named_pids.insert(pid);
            }
            continue;
        }
        assert!(
            named_pids.contains(&pid),
            "pid {pid} used before its name: {e}"
        );
        let ts = e["ts"].as_f64().unwrap_or_else(|| panic!("ts: {e}"));
        assert!(ts >= 0.0);
        match ph {
            "C" => {
                let args = e["args"].as_object().expect("counter args");
                assert!(
                    !args.is_empty() && args.values().all(Json::is_number),
                    "{e}"
                );
                let last = counter_ts.entry((pid, name.to_string())).or_insert(ts);
                assert!(ts >= *last, "counter {name} of pid {pid} goes back in time");
                *last = ts;
            }
            "X" => {
                let dur = e["dur"].as_f64().expect("dur");
                assert!(dur >= 0.0);
                let end = slice_end.entry((pid, tid)).or_insert(ts);
                assert!(ts >= *end, "slices overlap on pid {pid} tid {tid}: {e}");
                *end = ts + dur;
            }
            "i" => assert!(["g", "p", "t"].contains(&e["s"].as_str().unwrap_or("t"))),
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
    events
}

#[test]
fn chrome_trace_is_well_formed_and_adds_up() {
    let dir = TempDir::new("export-chrome");
    let data = traced_data(&dir);
    let file = dir.join("t.json");
    export(&data, &["--format", "chrome", "-o", file.to_str().unwrap()]);
    let events = check_chrome(&std::fs::read_to_string(&file).unwrap());
    // Per node: a process named after it, and the calls of each counter track add up to the
    // report's.
    let report = stdout_json(&run_ok(culprit().args(["report", "--json"]).arg(&data)));
    for node in report["nodes"].as_array().unwrap() {
        let p = &node["processes"][0];
        let title = format!(
            "{} · {} [{}]",
            node["node"].as_str().unwrap(),
            p["program"].as_str().unwrap(),
            p["pid"]
        );
        let pid = events
            .iter()
            .find(|e| e["ph"] == "M" && e["args"]["name"] == title.as_str())
            .unwrap_or_else(|| panic!("no process {title}"))["pid"]
            .as_u64()
            .unwrap();
        for f in p["functions"].as_array().unwrap() {
            let track = format!(
                "{} ({})",
                f["function"].as_str().unwrap(),
                f["image"].as_str().unwrap()
            );
            let calls: u64 = events
                .iter()
                .filter(|e| e["ph"] == "C" && e["pid"] == pid && e["name"] == track.as_str())
                .map(|e| e["args"]["calls"].as_u64().unwrap())
                .sum();
            assert_eq!(calls, f["calls"].as_u64().unwrap(), "{title}: {track}");
        }
    }
}

#[test]
fn chrome_draws_a_diagnosis() {
    let dir = TempDir::new("export-chrome-diag");
    sampler_data(dir.path());
    let o = culprit()
        .arg("diagnose")
        .arg(dir.path())
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr_text(&o));
    let report = dir.join("d.json");
    std::fs::write(&report, &o.stdout).unwrap();
    let file = dir.join("t.json");
    export(
        dir.path(),
        &[
            "--format",
            "chrome",
            "--diagnosis",
            report.to_str().unwrap(),
            "-o",
            file.to_str().unwrap(),
        ],
    );
    let events = check_chrome(&std::fs::read_to_string(&file).unwrap());
    let pid_of = |title: &str| {
        events
            .iter()
            .find(|e| e["ph"] == "M" && e["args"]["name"] == title)
            .unwrap_or_else(|| panic!("no process {title}"))["pid"]
            .as_u64()
            .unwrap()
    };
    let io2 = pid_of("io2 · diagnosis");
    let io0 = pid_of("io0 · diagnosis");
    let count = |pid: u64, ph: &str, name: &str| {
        events
            .iter()
            .filter(|e| e["pid"] == pid && e["ph"] == ph && e["name"] == name)
            .count()
    };
    assert!(count(io2, "X", "anomalous") >= 3, "io2's anomalous windows");
    assert!(count(io2, "X", "faulty") >= 1, "io2's faulty stretch");
    assert_eq!(count(io0, "X", "faulty"), 0);
    assert_eq!(count(io2, "i", "io2: faulty"), 1);
    let verdict = events.iter().find(|e| e["name"] == "io2: faulty").unwrap();
    assert!(
        verdict["args"]["top"]
            .to_string()
            .contains("compress_block"),
        "{verdict}"
    );
    assert!(events
        .iter()
        .any(|e| e["ph"] == "i" && e["s"] == "g" && e["name"] == "culprit: io2"));
    // The data's counters are there too: samples per function, kernel events.
    assert!(events
        .iter()
        .any(|e| e["ph"] == "C" && e["name"] == "server: compress_block (server)"));
    assert!(events
        .iter()
        .any(|e| e["ph"] == "C" && e["name"] == "tcp:tcp_retransmit_skb"));
}

#[test]
fn csv_golden() {
    let dir = TempDir::new("export-csv");
    let data = traced_data(&dir);
    sampler_data(&data);
    let file = dir.join("p.csv");
    export(&data, &["--format", "csv", "-o", file.to_str().unwrap()]);
    let text = std::fs::read_to_string(&file).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some(
            "node,start,start_ns,dur_ns,source,program,pid,image,function,calls,self_ns,\
             total_ns,samples"
        )
    );
    // Normalised: per node, source, program, image, function, the sums of calls and samples
    // (times and pids vary from run to run).
    let mut sums: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        assert_eq!(f.len(), 13, "{l}");
        let key = format!("{} {} {} {} {}", f[0], f[4], f[5], f[7], f[8]);
        let s = sums.entry(key).or_default();
        s.0 += f[9].parse::<u64>().unwrap_or(0);
        s.1 += f[12].parse::<u64>().unwrap_or(0);
    }
    let got: String = sums
        .iter()
        .map(|(k, (c, s))| format!("{k} calls={c} samples={s}\n"))
        .collect();
    check_golden("export-csv.txt", &got);
    let os = std::fs::read_to_string(dir.join("p.os.csv")).unwrap();
    let os_lines: Vec<&str> = os.lines().collect();
    assert_eq!(
        os_lines[0],
        "node,start,start_ns,dur_ns,source,metric,instance,unit,value"
    );
    // 4 nodes × 36 intervals × 1 kernel event.
    assert_eq!(os_lines.len(), 1 + 4 * 36);
    assert!(os_lines[1].contains(",events,tcp:tcp_retransmit_skb,,events,"));
}

/// A Python with the `duckdb` package: `CULPRIT_PYTHON`, the environment scripts/install-deps
/// makes (`CULPRIT_PYENV`, by default ~/.cache/culprit/pyenv), or `python3`.
fn duckdb_python() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = std::env::var_os("CULPRIT_PYTHON") {
        candidates.push(p.into());
    }
    if let Some(env) = std::env::var_os("CULPRIT_PYENV") {
        candidates.push(Path::new(&env).join("bin/python"));
    }
    if let Some(home) = std::env::var_os("HOME") {
        candidates.push(Path::new(&home).join(".cache/culprit/pyenv/bin/python"));
    }
    candidates.push("python3".into());
    candidates.into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import duckdb"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// The rows of a DuckDB query, every value as text.
fn duckdb_rows(python: &Path, sql: &str) -> Vec<Vec<String>> {
    let script = format!(
        "import duckdb, json\nrows = duckdb.sql({sql:?}).fetchall()\nprint(json.dumps([[str(x) for x in r] for r in rows]))\n"
    );
    let o = run_ok(Command::new(python).args(["-c", &script]));
    serde_json::from_value(stdout_json(&o)).expect("rows of strings")
}

/// The rows of a DuckDB query, each as one line (values separated by spaces), sorted.
fn duckdb_lines(python: &Path, sql: &str) -> Vec<String> {
    let mut v: Vec<String> = duckdb_rows(python, sql)
        .into_iter()
        .map(|r| r.join(" "))
        .collect();
    v.sort();
    v
}

#[test]
fn parquet_totals_equal_the_report_in_duckdb() {
    let Some(python) = duckdb_python() else {
        require(
            false,
            "Python's duckdb package (scripts/install-deps installs it in \
             ~/.cache/culprit/pyenv; or set CULPRIT_PYTHON)",
        );
        return;
    };
    let dir = TempDir::new("export-parquet");
    let data = traced_data(&dir);
    sampler_data(&data);
    let out = dir.join("pq");
    export(&data, &["--format", "parquet", "-o", out.to_str().unwrap()]);
    let glob = |t: &str| format!("{}/{t}/*/*/*.parquet", out.display());
    // The tracer's totals per node, process and function.
    let from_duckdb = duckdb_lines(
        &python,
        &format!(
            "SELECT node, pid, image, function, sum(calls), sum(self_ns), sum(total_ns) \
             FROM read_parquet('{}', hive_partitioning = true) WHERE source = 'trace' \
             GROUP BY ALL",
            glob("profiles")
        ),
    );
    let report = stdout_json(&run_ok(culprit().args(["report", "--json"]).arg(&data)));
    let mut from_report = Vec::new();
    let mut sampled = Vec::new();
    let mut events = Vec::new();
    for node in report["nodes"].as_array().unwrap() {
        let name = node["node"].as_str().unwrap();
        for p in node["processes"].as_array().unwrap() {
            for f in p["functions"].as_array().unwrap() {
                from_report.push(format!(
                    "{name} {} {} {} {} {} {}",
                    p["pid"],
                    f["image"].as_str().unwrap(),
                    f["function"].as_str().unwrap(),
                    f["calls"],
                    f["self_ns"],
                    f["total_ns"]
                ));
            }
        }
        for s in node["samples"].as_array().unwrap() {
            for e in s["entries"].as_array().unwrap() {
                sampled.push(format!(
                    "{name} {} {} {} {}",
                    e["program"].as_str().unwrap(),
                    e["image"].as_str().unwrap(),
                    e["function"].as_str().unwrap(),
                    e["samples"]
                ));
            }
        }
        for e in node["events"].as_array().unwrap() {
            events.push(format!(
                "{name} {} {}",
                e["event"].as_str().unwrap(),
                e["count"]
            ));
        }
    }
    from_report.sort();
    assert_eq!(from_report.len(), 3 * 6, "{from_report:?}");
    assert_eq!(from_duckdb, from_report);
    // The sampler's, and the kernel events in the os table.
    let got = duckdb_lines(
        &python,
        &format!(
            "SELECT node, program, image, function, sum(samples) FROM read_parquet('{}', \
             hive_partitioning = true) WHERE source = 'samples' GROUP BY ALL",
            glob("profiles")
        ),
    );
    sampled.sort();
    assert_eq!(sampled.len(), 4 * 3);
    assert_eq!(got, sampled);
    let got = duckdb_lines(
        &python,
        &format!(
            "SELECT node, metric, CAST(sum(value) AS BIGINT) FROM read_parquet('{}', \
             hive_partitioning = true) WHERE source = 'events' GROUP BY ALL",
            glob("os")
        ),
    );
    events.sort();
    assert_eq!(got, events);
    // The query of docs/export.md, as written there: which node was slow in a function.
    let doc = std::fs::read_to_string(workspace_root().join("docs/export.md")).unwrap();
    let sql = doc
        .split("```sql\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a sql block in docs/export.md");
    assert!(sql.contains("'history/profiles/*/*/*.parquet'") && sql.contains("'compress_block'"));
    let sql = sql
        .replace(
            "'history/profiles/*/*/*.parquet'",
            &format!("'{}'", glob("profiles")),
        )
        .replace("'compress_block'", "'disk_wait'")
        .replace(';', "");
    let rows = duckdb_rows(&python, &sql);
    assert_eq!(rows.len(), 3, "{rows:?}");
    // n2 waited 600 ms, its peers 100 ms: six times the median node's time per call.
    assert_eq!(rows[0][1], "n2", "{rows:?}");
    let ratio: f64 = rows[0][5].parse().unwrap();
    assert!(ratio > 3.0, "{rows:?}");
}

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn os_metrics_of_a_real_sampler_in_duckdb_and_csv() {
    if !require(
        can_sample(),
        "root (or perf_event_paranoid -1) to run culprit sample",
    ) {
        return;
    }
    let Some(python) = duckdb_python() else {
        require(false, "Python's duckdb package (scripts/install-deps)");
        return;
    };
    let dir = TempDir::new("export-os");
    let data = dir.join("data");
    let sampler = sampler_util::SamplerProc::start(
        &data,
        &["--node", "n1", "--interval", "1s", "--tracepoints", "none"],
        "n1",
    );
    std::thread::sleep(std::time::Duration::from_millis(3500));
    let (code, err) = sampler.stop();
    assert_eq!(code, 0, "{err}");
    let report = stdout_json(&run_ok(
        culprit()
            .args(["report", "--json", "--only", "os"])
            .arg(&data),
    ));
    let rows = report["nodes"][0]["os"]["metrics"]
        .as_array()
        .expect("an os section")
        .clone();
    assert!(rows.len() >= 5, "{rows:?}");
    let out = dir.join("pq");
    export(&data, &["--format", "parquet", "-o", out.to_str().unwrap()]);
    let got: HashMap<String, Vec<String>> = duckdb_rows(
        &python,
        &format!(
            "SELECT metric, coalesce(instance, ''), unit, count(*), avg(value), min(value), \
             max(value) FROM read_parquet('{}/os/*/*/*.parquet', hive_partitioning = true) \
             WHERE source = 'os' AND node = 'n1' GROUP BY ALL",
            out.display()
        ),
    )
    .into_iter()
    .map(|r| (format!("{} {} {}", r[0], r[1], r[2]), r[3..].to_vec()))
    .collect();
    assert_eq!(got.len(), rows.len());
    let mut values = 0;
    for r in &rows {
        let key = format!(
            "{} {} {}",
            r["metric"].as_str().unwrap(),
            r["instance"].as_str().unwrap_or(""),
            r["unit"].as_str().unwrap()
        );
        let g = got
            .get(&key)
            .unwrap_or_else(|| panic!("{key} not in Parquet"));
        assert_eq!(g[0], r["present"].to_string(), "{key}: values");
        values += r["present"].as_u64().unwrap();
        let close = |a: &str, b: f64| {
            let a: f64 = a.parse().unwrap();
            (a - b).abs() <= 1e-9 * b.abs().max(1.0)
        };
        assert!(
            close(&g[1], r["mean"].as_f64().unwrap()),
            "{key}: mean {g:?} {r}"
        );
        assert!(
            close(&g[2], r["min"].as_f64().unwrap()),
            "{key}: min {g:?} {r}"
        );
        assert!(
            close(&g[3], r["max"].as_f64().unwrap()),
            "{key}: max {g:?} {r}"
        );
    }
    // CSV: the same values in FILE.os.csv, none in the profiles.
    let file = dir.join("p.csv");
    export(&data, &["--format", "csv", "-o", file.to_str().unwrap()]);
    let os = std::fs::read_to_string(dir.join("p.os.csv")).unwrap();
    let os_rows = os.lines().filter(|l| l.contains(",os,")).count() as u64;
    assert_eq!(os_rows, values);
}
