//! `culprit diagnose` / `culprit train` on real data: several processes of one C server
//! (tests/c/diag_server.c) built with `-finstrument-functions`, each its own node
//! (`CULPRIT_NODE`) under one `CULPRIT_DIR`, traced by `libculprit_rt.so` through `LD_PRELOAD`,
//! one of them misbehaving in one function.
//!
//! Runs are short (14 s, 200 ms records, windows of 2 s every 1 s; 1 s every 500 ms where a test
//! needs the short ones, `--follow`'s latency) so the file stays within a few minutes; the
//! servers are rate-limited, so they do the same work per second while the machine keeps up with
//! them. Persistence is what tells a fault from a busy host: with 1 s windows, 3 of 5 windows is
//! 2.5 s, and beside `stress-ng --cpu 2` and parallel builds a healthy server starved for two
//! seconds was "decisive on time" in 4 of 14 windows (2 of the first 2 runs of this file); with
//! 2 s windows and 4 of 7 it must stand out for about 3 s. One test runs the real sampler (`culprit sample`) beside them.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use culprit_analysis::combine::{Role, Verdict};
use culprit_analysis::diagnosis::{MetricStatus, Side, ThresholdSource, WindowLine};
use culprit_analysis::family::Metric;
use culprit_analysis::missing::{Ending, Finding};
use culprit_analysis::thresholds::ThresholdsFile;
use culprit_analysis::Diagnosis;
use culprit_tests::*;

mod diagnose_util;
use diagnose_util::*;

/// Record interval of the servers: 200 ms. (Chosen when an interval the flusher reached over
/// half an interval late was written MISSED, and a window with a missed interval on any node
/// was not compared: at load average 18, the 100 ms records of eight servers left 3 complete
/// windows in 14 s. The runtime now writes late intervals late but exact.) `--follow` keeps
/// 100 ms, for its latency.
const INTERVAL_MS: &str = "200";
const FOLLOW_INTERVAL_MS: &str = "100";

fn server(dir: &Path, trace_idle: bool) -> PathBuf {
    let exe = dir.join(if trace_idle { "srv_idle" } else { "srv" });
    let mut flags = vec!["-O0", "-g", "-finstrument-functions"];
    if trace_idle {
        flags.push("-DTRACE_IDLE");
    }
    gcc(&[&c_source("diag_server.c")], &exe, &flags);
    exe
}

/// A node of a run: its name and, if faulty, `[kind, function, amount, after_seconds]`.
struct Node<'a> {
    name: &'a str,
    fault: Option<[&'a str; 4]>,
}

fn ok(name: &str) -> Node<'_> {
    Node { name, fault: None }
}

/// Starts one node. As root the servers run at nice −10: this machine is shared, and a server
/// waiting for a CPU taken by unrelated work shows more wall-clock time in whatever function it
/// was in — the emulation of a node's own CPU share that keeps the peers comparable (measured:
/// benches/diagnose/real_eval.sh with NICE=-10; not real-time priority: see `pinned_realtime`
/// for why not with a fault that makes a peer CPU-bound). And all of them run on one CPU, so
/// that what the machine's other work and the servers' own do to one server they do to all:
/// spread over the two CPUs beside `stress-ng --cpu 2`, the scheduler kept one server alone
/// beside a CPU hog (which it preempts) and the others together (which preempt each other
/// mid-request), and the lone one was flagged for "less time in checksum_payload" in 8 of 12
/// windows.
fn spawn(exe: &Path, data: &Path, node: &Node<'_>, secs: &str) -> Child {
    spawn_every(exe, data, node, secs, INTERVAL_MS)
}

/// [`spawn`] with records every `interval_ms`.
fn spawn_every(exe: &Path, data: &Path, node: &Node<'_>, secs: &str, interval_ms: &str) -> Child {
    let mut cmd = pinned(exe);
    cmd.arg(secs)
        .env("CULPRIT_DIR", data)
        .env("CULPRIT_NODE", node.name)
        .env("CULPRIT_INTERVAL_MS", interval_ms)
        .env("LD_PRELOAD", runtime_lib())
        .env_remove("CULPRIT_INCLUDE")
        .env_remove("CULPRIT_EXCLUDE")
        .stdout(Stdio::null());
    if let Some(f) = node.fault {
        cmd.args(f);
    }
    cmd.spawn().expect("start diag_server")
}

/// The runs of this file take turns, with every other test that pins peers to one CPU
/// (`pinned_turn`): the machine has two cores, and a few dozen servers at once starve them
/// enough to blur who is slow.
fn turn() -> MachineLock {
    pinned_turn()
}

/// Runs the group for `secs` seconds and waits for it.
fn run_group(exe: &Path, data: &Path, nodes: &[Node<'_>], secs: &str) {
    let children: Vec<Child> = nodes.iter().map(|n| spawn(exe, data, n, secs)).collect();
    for mut c in children {
        let st = c.wait().unwrap();
        assert!(st.success(), "diag_server failed: {st}");
    }
}

fn diagnose(args: &[&str]) -> (i32, Diagnosis) {
    let mut all = args.to_vec();
    all.extend(SHORT_WINDOWS);
    diagnose_json(&all)
}

/// Windows of 2 s every 1 s, faulty when anomalous in 4 of 7: a disturbance of L seconds
/// reaches about L + 1 of these overlapping windows, so 4 asks for 3 s of it. Beside
/// `stress-ng --cpu 2` and parallel builds, with k = 3 a healthy server starved for a second or
/// two (3 of 10 windows, 1.9× the untrained threshold on time) was flagged in 1 of the first 2
/// runs of this file; the faults here last 6 s or more.
const WINDOWS2: [&str; 8] = [
    "--win-size",
    "2s",
    "--win-shift",
    "1s",
    "--min-time",
    "2ms",
    "--k",
    "4",
];

fn diagnose2(args: &[&str]) -> (i32, Diagnosis) {
    let mut all = args.to_vec();
    all.extend(WINDOWS2);
    diagnose_json(&all)
}

/// Seconds each server runs where 4 of 7 windows decide: under heavy load the servers start
/// seconds apart and fewer windows are complete on every node (in 10 s runs at load average
/// 21: 3 in one run, 5 in another, where a fault from 3 s was anomalous in 3 and missed).
const RUN_S: &str = "14";

const FIVE: [&str; 5] = ["srv0", "srv1", "srv2", "srv3", "srv4"];

fn five_with(bad: usize, fault: [&'static str; 4]) -> Vec<Node<'static>> {
    FIVE.iter()
        .enumerate()
        .map(|(i, n)| Node {
            name: n,
            fault: (i == bad).then_some(fault),
        })
        .collect()
}

/// Copies `DATA/<node>/` to `to/<new name>/` for each (old, new).
fn copy_renamed(from: &Path, to: &Path, names: &[(&str, &str)]) {
    for (old, new) in names {
        let dst = to.join(new);
        std::fs::create_dir_all(&dst).unwrap();
        for e in std::fs::read_dir(from.join(old)).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
    }
}

/// Extra work in one function from 3 s on: that node is the culprit on time, the function first
/// in its top ten with more time; no other node is flagged. Then the same data with the nodes
/// renamed and listed in another order gives the same verdict. Budget: ~10 s.
#[test]
fn extra_work_in_one_function() {
    let _turn = turn();
    let dir = TempDir::new("real-work");
    let exe = server(dir.path(), false);
    let data = dir.join("data");
    run_group(
        &exe,
        &data,
        &five_with(2, ["work", "checksum_payload", "12", "3"]),
        RUN_S,
    );
    let (code, r) = diagnose2(&[data.to_str().unwrap()]);
    assert_eq!(code, 1, "{r:#?}");
    assert_eq!(r.culprits, ["srv2"], "{r:#?}");
    let t = node(metric(&r, "time"), "srv2");
    assert_eq!(t.verdict, MetricStatus::Faulty);
    assert_eq!(t.top[0].function, "checksum_payload", "{t:#?}");
    assert_eq!(t.top[0].direction.side(), Side::Above);
    assert_eq!(t.top[0].image.as_deref(), Some("srv"));
    for n in ["srv0", "srv1", "srv3", "srv4"] {
        assert_eq!(verdict(&r, n), Verdict::Ok, "{n}: {r:#?}");
    }
    // Renamed (srv2 becomes "alpha", first in name order) and given as node directories in
    // reverse order: same verdicts, same scores.
    let renames = [
        ("srv0", "zulu"),
        ("srv1", "kilo"),
        ("srv2", "alpha"),
        ("srv3", "yankee"),
        ("srv4", "bravo"),
    ];
    let other = dir.join("renamed");
    copy_renamed(&data, &other, &renames);
    let dirs: Vec<String> = renames
        .iter()
        .rev()
        .map(|(_, n)| other.join(n).display().to_string())
        .collect();
    let args: Vec<&str> = dirs.iter().map(String::as_str).collect();
    let (code2, r2) = diagnose2(&args);
    assert_eq!(code2, code);
    assert_eq!(r2.culprits, ["alpha"]);
    for (old, new) in renames {
        assert_eq!(verdict(&r, old), verdict(&r2, new));
        for m in ["time", "count"] {
            let (a, b) = (node(metric(&r, m), old), node(metric(&r2, m), new));
            assert_eq!(a.verdict, b.verdict, "{m} {old}/{new} verdict");
            assert_eq!(a.max_score, b.max_score, "{m} {old}/{new} max_score");
            assert_eq!(a.anomalous_windows, b.anomalous_windows, "{m} {old}/{new}");
            assert_eq!(a.top, b.top, "{m} {old}/{new} top");
        }
    }
}

/// More calls of one function: the count metric finds the node, the function first with more
/// calls. Extra blocking time in another function: time finds it, that function first.
/// The groups run one after the other, with 2 s windows: ten servers at once on two busy cores
/// starved a healthy one for two seconds, which 1 s windows read as a fault (seen in CI beside
/// four parallel builds: srv1 "decisive on time" in 4 of 14 windows). Budget: ~20 s.
#[test]
fn extra_calls_and_extra_blocking() {
    let _turn = turn();
    let dir = TempDir::new("real-calls");
    let exe = server(dir.path(), false);
    let (calls, block) = (dir.join("calls"), dir.join("block"));
    run_group(
        &exe,
        &calls,
        &five_with(4, ["calls", "checksum_payload", "4", "3"]),
        RUN_S,
    );
    run_group(
        &exe,
        &block,
        &five_with(0, ["block", "write_reply", "400", "3"]),
        RUN_S,
    );
    let (code, r) = diagnose2(&[calls.to_str().unwrap()]);
    assert_eq!(code, 1, "{r:#?}");
    assert_eq!(r.culprits, ["srv4"], "{r:#?}");
    let c = node(metric(&r, "count"), "srv4");
    assert_eq!(c.verdict, MetricStatus::Faulty, "{c:#?}");
    assert_eq!(c.top[0].function, "checksum_payload");
    assert_eq!(c.top[0].direction.side(), Side::Above);
    let rel = c.top[0].relative.unwrap();
    assert!(
        rel > 1.0,
        "about 3× the calls in the anomalous windows: {rel}"
    );

    let (code, r) = diagnose2(&[block.to_str().unwrap()]);
    assert_eq!(code, 1, "{r:#?}");
    assert_eq!(r.culprits, ["srv0"], "{r:#?}");
    let t = node(metric(&r, "time"), "srv0");
    assert_eq!(t.top[0].function, "write_reply", "{t:#?}");
    assert_eq!(t.top[0].direction.side(), Side::Above);
}

/// Two worker processes per node are one node: their profiles add up, and one slow worker
/// makes its node the culprit. Budget: ~9 s.
#[test]
fn worker_processes_add_up_per_node() {
    let _turn = turn();
    let dir = TempDir::new("real-workers");
    let exe = server(dir.path(), false);
    let data = dir.join("data");
    let nodes = ["w0", "w1", "w2", "w3"];
    let mut children = Vec::new();
    for (i, n) in nodes.iter().enumerate() {
        for worker in 0..2 {
            let fault = (i == 3 && worker == 1).then_some(["work", "checksum_payload", "16", "3"]);
            children.push(spawn(&exe, &data, &Node { name: n, fault }, RUN_S));
        }
    }
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let files = std::fs::read_dir(data.join("w0")).unwrap().count();
    assert_eq!(files, 3, "two trace files and node.info");
    let (code, r) = diagnose2(&[data.to_str().unwrap()]);
    assert_eq!(code, 1, "{r:#?}");
    assert_eq!(r.nodes, nodes);
    assert_eq!(r.culprits, ["w3"], "{r:#?}");
    let t = node(metric(&r, "time"), "w3");
    assert_eq!(t.top[0].function, "checksum_payload", "{t:#?}");
    // Two sources per node, starting and stopping at slightly different times: their partial
    // first and last intervals are edges, not gaps. (An interval the runtime could not observe
    // — written MISSED when its flusher is starved on this shared machine — is a real gap.)
    for n in nodes {
        if missed_intervals(&data.join(n)) > 0 {
            continue;
        }
        let gaps = r
            .findings
            .iter()
            .find(|f| matches!(f, Finding::Gaps { node, .. } if node == n));
        assert!(gaps.is_none(), "{gaps:#?}");
    }
}

/// Interval records flagged MISSED in a node directory's trace files.
fn missed_intervals(dir: &Path) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let bytes = std::fs::read(e.path()).unwrap();
        let Ok(f) = culprit_format::ParsedFile::parse(&bytes) else {
            continue;
        };
        for rec in f.records().flatten() {
            if let culprit_format::Record::Interval(iv) = rec {
                n += usize::from(iv.flags & culprit_format::interval_flags::MISSED != 0);
            }
        }
    }
    n
}

/// The real sampler (`culprit sample`, cpu-clock, one emulated node per server process with
/// --node-pid) beside the tracer: the samples metric finds the node doing extra work and the
/// function first, and corroborates time. Needs perf_event (root). Budget: ~14 s.
#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn samples_from_the_real_sampler() {
    if !require(is_root(), "root, for a system-wide perf_event sampler") {
        return;
    }
    let _turn = turn();
    let _machine = machine_lock();
    let dir = TempDir::new("real-samples");
    let exe = server(dir.path(), false);
    let data = dir.join("data");
    let nodes = five_with(1, ["work", "checksum_payload", "16", "4"]);
    let children: Vec<Child> = nodes.iter().map(|n| spawn(&exe, &data, n, RUN_S)).collect();
    let mut sample = culprit();
    sample
        .arg("sample")
        .arg("-o")
        .arg(&data)
        .args([
            "--duration",
            "14s",
            "--interval",
            "1s",
            "-e",
            "cpu-clock",
            "-F",
            "4000",
        ])
        .args(["--tracepoints", "none", "-q"]);
    for (n, c) in nodes.iter().zip(&children) {
        sample
            .arg("--node-pid")
            .arg(format!("{}={}", n.name, c.id()));
    }
    let sampled = sample.output().unwrap();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    assert!(
        sampled.status.success(),
        "culprit sample: {}",
        String::from_utf8_lossy(&sampled.stderr)
    );
    let (code, r) = diagnose_json(&[
        data.to_str().unwrap(),
        "--win-size",
        "2s",
        "--win-shift",
        "1s",
        "--min-time",
        "1ms",
        "--k",
        "4",
    ]);
    assert_eq!(code, 1, "{r:#?}");
    assert_eq!(r.culprits, ["srv1"], "{r:#?}");
    let s = node(metric(&r, "samples"), "srv1");
    assert_eq!(s.verdict, MetricStatus::Faulty, "{s:#?}");
    assert_eq!(s.top[0].function, "checksum_payload", "{s:#?}");
    assert_eq!(s.top[0].direction.side(), Side::Above);
    // The tracer's time sees the same fault: faulty on it too, or (on a loaded machine, where
    // fewer windows are complete on every node) corroborating the samples.
    let v = r.verdict("srv1").unwrap();
    let by: Vec<&str> = v.combined.metrics.iter().map(|m| m.name()).collect();
    assert!(by.contains(&"samples"), "{v:#?}");
    let time = v
        .combined
        .families
        .iter()
        .find(|c| c.family.name() == "time")
        .unwrap_or_else(|| panic!("{v:#?}"));
    assert!(
        matches!(time.role, Role::Faulty | Role::Corroborates),
        "{v:#?}"
    );
}

/// When the server's idle wait is traced too, extra work also shows as less idle time: both are
/// in the top ten with their signs, the working function with "more time". (The traced wait is
/// most of each node's time, so a fault moves a smaller share of the profile than untraced:
/// 16× work moved about 10 % and was 1.47× the untrained threshold — one metric, not decisive —
/// on a machine at load 20; 32× moves twice that.)
#[test]
fn traced_idle_shows_both_sides() {
    let _turn = turn();
    let dir = TempDir::new("real-idle");
    let exe = server(dir.path(), true);
    let data = dir.join("data");
    run_group(
        &exe,
        &data,
        &five_with(1, ["work", "checksum_payload", "32", "3"]),
        RUN_S,
    );
    let (code, r) = diagnose2(&[data.to_str().unwrap()]);
    assert_eq!(code, 1, "{r:#?}");
    assert_eq!(r.culprits, ["srv1"], "{r:#?}");
    let top = &node(metric(&r, "time"), "srv1").top;
    let dir_of = |f: &str| {
        top.iter()
            .find(|t| t.function == f)
            .map(|t| t.direction.side())
    };
    assert_eq!(dir_of("checksum_payload"), Some(Side::Above), "{top:#?}");
    assert_eq!(dir_of("wait_tick"), Some(Side::Below), "{top:#?}");
}

const FOUR: [&str; 4] = ["srv0", "srv1", "srv2", "srv3"];

/// Untrained diagnosis (seed 002's suspect score): a node doing 15× the work of one function
/// from its first second among 4 is a culprit — "different since its data began" — with that
/// function first in its table; a fault-free group beside it stays clean; every node of both is
/// ranked in the JSON report, most suspicious first. Budget: ~25 s. Beside `stress-ng --cpu 2` a
/// fault-free server was flagged on time when the groups ran at once (the faulty node's 15× work
/// took CPU from the other group's servers unevenly) and, with 1 s windows, when the machine
/// starved one for 2–3 s (4 of 13 windows): the groups run one after the other, 10 s each, with
/// 2 s windows.
#[test]
fn untrained_finds_a_node_different_from_the_start() {
    let _turn = turn();
    let dir = TempDir::new("real-untrained");
    let exe = server(dir.path(), false);
    let (faulty, clean) = (dir.join("faulty"), dir.join("clean"));
    let group = |bad: Option<usize>| -> Vec<Node<'static>> {
        FOUR.iter()
            .enumerate()
            .map(|(i, n)| Node {
                name: n,
                fault: (Some(i) == bad).then_some(["work", "checksum_payload", "15", "0"]),
            })
            .collect()
    };
    run_group(&exe, &faulty, &group(Some(2)), RUN_S);
    run_group(&exe, &clean, &group(None), RUN_S);
    let (code, r) = diagnose2(&[faulty.to_str().unwrap()]);
    assert!(!r.trained);
    assert_eq!(r.settings.score.name(), "suspect", "{r:#?}");
    assert_eq!(code, 1, "{r:#?}");
    assert_eq!(r.culprits, ["srv2"], "{r:#?}");
    let v = r.verdict("srv2").unwrap();
    assert!(
        v.combined.reason.contains("different since its data began"),
        "{v:#?}"
    );
    let t = node(metric(&r, "time"), "srv2");
    assert_eq!(t.verdict, MetricStatus::Faulty, "{t:#?}");
    assert_eq!(t.top[0].function, "checksum_payload", "{t:#?}");
    assert_eq!(t.top[0].direction.side(), Side::Above);
    assert!(t.top[0].persistence >= 3, "{t:#?}");
    // The ranking: every node once, the culprit first with the largest persistence.
    let ranked: Vec<&str> = r.ranking.iter().map(|n| n.node.as_str()).collect();
    assert_eq!(ranked.len(), 4, "{:#?}", r.ranking);
    assert_eq!(ranked[0], "srv2", "{:#?}", r.ranking);
    assert_eq!(r.ranking[0].verdict, Verdict::Faulty);
    assert!(r.ranking[0].score.unwrap() > 1.0, "{:#?}", r.ranking);
    assert!(r.ranking[1..]
        .iter()
        .all(|n| n.persistence < r.ranking[0].persistence));
    for (i, n) in r.ranking.iter().enumerate() {
        assert_eq!(n.rank, i + 1);
        assert!(!n.reason.is_empty(), "{n:#?}");
    }
    assert!(
        r.notes.iter().any(|n| n.contains("--exclude-node")),
        "{:#?}",
        r.notes
    );
    // Left out, the node is not compared. (Its peers' verdicts are not asserted: three nodes
    // are a fragile peer group, and its 15× work still loads the two cores they share.)
    let (_, r) = diagnose2(&[faulty.to_str().unwrap(), "--exclude-node", "srv2"]);
    assert_eq!(r.nodes, ["srv0", "srv1", "srv3"]);
    assert!(r.ranking.iter().all(|n| n.node != "srv2"));

    let (code, r) = diagnose2(&[clean.to_str().unwrap()]);
    assert_eq!(code, 0, "fault-free, untrained: {r:#?}");
    assert!(r.culprits.is_empty());
    assert_eq!(r.ranking.len(), 4);
}

/// Train on fault-free runs; another fault-free run flags nothing; a run where one node works
/// harder from the start (which the untrained rule would call persistently different) is
/// flagged with trained thresholds. Each group runs alone, as in training, and windows are 2 s
/// (3 of 5 windows is then 3 s of persistence: a server starved for a second by the rest of this
/// shared machine does not make a fault). Budget: ~40 s.
#[test]
fn trained_thresholds() {
    let _turn = turn();
    let dir = TempDir::new("real-train");
    let exe = server(dir.path(), false);
    let runs: Vec<PathBuf> = (0..2).map(|i| dir.join(format!("train{i}"))).collect();
    let clean = dir.join("clean");
    let faulty = dir.join("faulty");
    let group: Vec<Node<'_>> = FIVE.iter().map(|n| ok(n)).collect();
    for r in &runs {
        run_group(&exe, r, &group, RUN_S);
    }
    run_group(&exe, &clean, &group, RUN_S);
    run_group(
        &exe,
        &faulty,
        // Blocking, not computing: on this 2-core machine a CPU-heavy fault slows the peers
        // too, which separate servers would not feel.
        &five_with(3, ["block", "lookup_object", "300", "0"]),
        RUN_S,
    );
    let th = dir.join("thresholds.json");
    run_ok(
        culprit()
            .arg("train")
            .args(&runs)
            .args(WINDOWS2)
            .arg("--out")
            .arg(&th),
    );
    let f = ThresholdsFile::load(&th).unwrap();
    for m in ["time", "count"] {
        let t = &f.metrics[&Metric::from_name(m).unwrap()];
        assert_eq!(t.thresholds.len(), 5, "{m}: {t:#?}");
        assert!(t.windows >= 10, "{m}: {t:#?}");
    }
    // Settings come from the thresholds file: no window options needed (and none allowed to
    // differ).
    let th_s = th.to_str().unwrap();
    let o = culprit()
        .arg("diagnose")
        .arg(&clean)
        .args(["--thresholds", th_s, "--json"])
        .output()
        .unwrap();
    let r = report(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "fault-free after training: {r:#?}"
    );
    assert!(r.trained);
    let o = culprit()
        .arg("diagnose")
        .arg(&faulty)
        .args(["--thresholds", th_s, "--json"])
        .output()
        .unwrap();
    let r = report(&o);
    assert_eq!(o.status.code(), Some(1), "{r:#?}");
    assert_eq!(r.culprits, ["srv3"], "{r:#?}");
    let t = node(metric(&r, "time"), "srv3");
    assert_eq!(t.top[0].function, "lookup_object", "{t:#?}");
    // Pooled by default: every node gets the largest node's threshold.
    assert_eq!(t.threshold_source, Some(ThresholdSource::Largest));
    let o = culprit()
        .arg("diagnose")
        .arg(&faulty)
        .args(["--thresholds", th_s, "--json", "--per-node-thresholds"])
        .output()
        .unwrap();
    let r = report(&o);
    assert_eq!(r.culprits, ["srv3"], "{r:#?}");
    let t = node(metric(&r, "time"), "srv3");
    assert_eq!(t.threshold_source, Some(ThresholdSource::Own), "{t:#?}");
    let own = t.threshold.unwrap();
    let largest = f.metrics[&Metric::TIME].largest();
    assert!(own <= largest, "{own} > {largest}");
}

/// A node killed with SIGKILL mid-run is reported as stopped (no end marker), which is a culprit
/// (exit status 1); the others are not flagged for its absence. Budget: ~9 s.
#[test]
fn killed_node_is_reported_as_stopped() {
    let _turn = turn();
    let dir = TempDir::new("real-kill");
    let exe = server(dir.path(), false);
    let data = dir.join("data");
    let nodes: Vec<Node<'_>> = FIVE.iter().map(|n| ok(n)).collect();
    let mut children: Vec<Child> = nodes.iter().map(|n| spawn(&exe, &data, n, "10")).collect();
    std::thread::sleep(Duration::from_secs(3));
    children[1].kill().unwrap();
    let killed_at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    for c in &mut children {
        let _ = c.wait();
    }
    let (code, r) = diagnose2(&[data.to_str().unwrap()]);
    assert_eq!(code, 1, "{r:#?}");
    assert_eq!(r.culprits, ["srv1"], "{r:#?}");
    assert_eq!(verdict(&r, "srv1"), Verdict::Stopped);
    let Finding::Stopped {
        node,
        ending,
        at_ns,
        ..
    } = finding(&r, |f| matches!(f, Finding::Stopped { .. }))
    else {
        unreachable!()
    };
    assert_eq!(node, "srv1");
    assert_eq!(*ending, Ending::NoEndMarker);
    let at = *at_ns as i128;
    let k = killed_at.as_nanos() as i128;
    assert!(
        (at - k).abs() < 500_000_000,
        "stopped at {at}, killed at {k}"
    );
    // Its peers are not flagged for its absence. (One of them can be a suspect — one metric, a
    // little above the unsupervised cut-off, no corroboration — when this shared machine
    // starves a server for a second; a suspect is reported, not counted as a culprit.)
    for n in ["srv0", "srv2", "srv3", "srv4"] {
        let v = verdict(&r, n);
        assert!(v == Verdict::Ok || v == Verdict::Suspect, "{n}: {r:#?}");
    }
}

/// `--follow` on a run in progress: the faulty node is reported as its window closes, within one
/// WinShift of the window's end, and the final report equals an offline diagnosis of the same
/// data (one code path). Budget: ~10 s.
#[test]
fn follow_reports_as_windows_close() {
    let _turn = turn();
    let dir = TempDir::new("real-follow");
    let exe = server(dir.path(), false);
    let data = dir.join("data");
    // From 3 s: the untrained rule needs fault-free windows among the first of each node.
    let nodes = five_with(2, ["work", "checksum_payload", "16", "3"]);
    let mut children: Vec<Child> = nodes
        .iter()
        .map(|n| spawn_every(&exe, &data, n, "8", FOLLOW_INTERVAL_MS))
        .collect();
    // Wait for every node's first record.
    let t0 = Instant::now();
    while FIVE.iter().any(|n| {
        std::fs::read_dir(data.join(n)).map_or(true, |rd| {
            !rd.flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(".cul"))
        })
    }) {
        assert!(t0.elapsed() < Duration::from_secs(5), "no data appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut follow = culprit()
        .arg("diagnose")
        .arg(&data)
        .args(SHORT_WINDOWS)
        .args(["--follow", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = follow.stdout.take().unwrap();
    let mut lines: Vec<(Line, u128)> = Vec::new();
    for line in BufReader::new(out).lines() {
        let line = line.unwrap();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        lines.push((serde_json::from_str(&line).unwrap(), now));
    }
    let st = follow.wait().unwrap();
    for mut c in children.drain(..) {
        c.wait().unwrap();
    }
    assert_eq!(st.code(), Some(1), "{lines:#?}");
    let (fired, seen_at) = lines
        .iter()
        .find_map(|(l, at)| match l {
            Line::Window(w) if w.newly_faulty.iter().any(|n| n == "srv2") => Some((w, at)),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no window made srv2 faulty: {lines:#?}"));
    let end = fired.end.ns();
    let latency = *seen_at as i128 - end as i128;
    eprintln!(
        "follow: srv2 reported {} ms after its window closed",
        latency / 1_000_000
    );
    assert!(
        latency < 500_000_000,
        "reported {latency} ns after the window closed (WinShift is 500 ms)"
    );
    let Some((Line::Report(report), _)) = lines.last() else {
        panic!("the last line is not the report: {lines:#?}");
    };
    let (_, offline) = diagnose(&[data.to_str().unwrap()]);
    assert_eq!(report.culprits, offline.culprits);
    assert_eq!(report.verdicts, offline.verdicts);
    assert_eq!(report.metrics, offline.metrics);
}

/// A baseline from the data itself (`diagnose --baseline`): one node does twice the checksum
/// work of its peers from its first second (another role, like a server holding more
/// metadata) and another starts blocking in `lookup_object` at 16 s. Learnt from the first
/// 10 s, only the later fault is a culprit; the first node is reported as another role and
/// judged against its own normal. The same stretch learnt into a thresholds file (`culprit
/// train --from DATA --span`) keeps the role, and diagnosing with it finds the same, and so
/// does a rolling baseline of 12 s. The servers may start a second or two apart on a loaded
/// machine: the first 10 s are counted from when every node's data has begun (from the first
/// node's start, the last one's 8 windows could fall to 6, fewer than the 2k − 1 a role needs).
/// It failed in every CI run of 2026-11-29 ("srv1 is another role: []"), never alone: beside
/// the lock lane's tests (the emulated cluster's sampler, cgroup throttling) one peer at a time
/// was preempted for 10–20 ms inside `checksum_payload`, so in 2 of the baseline's 9 windows
/// srv1's standing 2× (3.5 ms a second more) was not apart from its peers' spread, short of the
/// 80 % a role needs. This file's groups now run in the lock lane (scripts/run-tests).
/// Budget: ~45 s.
#[test]
fn baseline_knows_another_role() {
    let _turn = turn();
    let dir = TempDir::new("real-baseline");
    let exe = server(dir.path(), false);
    let data = dir.join("data");
    let nodes: Vec<Node<'_>> = FIVE
        .iter()
        .enumerate()
        .map(|(i, n)| Node {
            name: n,
            fault: match i {
                1 => Some(["work", "checksum_payload", "2", "0"]),
                3 => Some(["block", "lookup_object", "300", "16"]),
                _ => None,
            },
        })
        .collect();
    run_group(&exe, &data, &nodes, "26");
    let d = data.to_str().unwrap();
    let (code, r) = diagnose2(&[d, "--baseline", "first 10s"]);
    assert_eq!(code, 1, "{r:#?}");
    assert_eq!(r.culprits, ["srv3"], "{r:#?}");
    assert!(r.trained);
    let b = r.baseline.as_ref().expect("the baseline is reported");
    assert_eq!(b.times, 1);
    // Only what follows the baseline is diagnosed.
    assert!(r.from.unwrap() >= b.learnt.to);
    let role = |r: &Diagnosis| {
        let role = r.roles.iter().find(|x| x.node == "srv1");
        let role = role.unwrap_or_else(|| panic!("srv1 is another role: {:#?}", r.roles));
        let time = role.metrics.iter().find(|m| m.metric == Metric::TIME);
        let c = time
            .unwrap_or_else(|| panic!("on time: {role:#?}"))
            .components[0]
            .clone();
        assert_eq!(&*c.label.name, "checksum_payload", "{role:#?}");
        assert!((1.4..3.0).contains(&(c.node / c.peers)), "{role:#?}");
        assert!(r.roles.iter().all(|x| x.node != "srv3"), "{:#?}", r.roles);
    };
    role(&r);
    assert_eq!(verdict(&r, "srv1"), Verdict::Ok, "{r:#?}");
    let ranked = r.ranking.iter().find(|n| n.node == "srv1").unwrap();
    assert!(ranked.reason.starts_with("another role"), "{ranked:#?}");
    // For the fleet: the same stretch as a thresholds file (version 2: it holds a role).
    let th = dir.join("fleet.json");
    run_ok(
        culprit()
            .arg("train")
            .args(["--from", d, "--span", "first 10s", "--out"])
            .arg(&th)
            .args(WINDOWS2),
    );
    let f = ThresholdsFile::load(&th).unwrap();
    assert_eq!(f.version, 2);
    let (code, r2) = diagnose_json(&[d, "--thresholds", th.to_str().unwrap()]);
    assert_eq!(code, 1, "{r2:#?}");
    assert_eq!(r2.culprits, ["srv3"], "{r2:#?}");
    assert!(r2.baseline.is_none());
    role(&r2);
    // Offline, a rolling baseline is learnt again as the diagnosis goes on, the fault's
    // windows left out. 12 s, not 10: a 10 s baseline holds 9 windows of 2 s, and a learning
    // that leaves out the suspects' windows kept 7 (2k − 1, the least it may). Beside
    // `stress-ng --cpu 4` those 7 held no preempted window: their largest healthy score, 0.17
    // deviations, became the threshold, and a healthy server preempted in two later windows
    // was flagged at 18.8× it. 14 s would leave the 26 s run's fault too little room to be
    // learnt past (relearnt once in 2 of 3 runs).
    let (code, r3) = diagnose2(&[d, "--baseline", "last:12s"]);
    assert_eq!(code, 1, "{r3:#?}");
    assert_eq!(r3.culprits, ["srv3"], "{r3:#?}");
    let b3 = r3.baseline.as_ref().unwrap();
    assert!(b3.times >= 2, "{b3:#?}");
    role(&r3);
}

/// A baseline that itself holds an anomaly is said, not silently learnt: `srv2` starts
/// blocking in `lookup_object` 8 s into a 16 s baseline (at load average 30 the servers start
/// seconds apart and the baseline's compared windows begin late: a fault from 6 s of a 14 s
/// baseline covered most of them and was learnt as a role). It stood out from its peers in k of
/// 2k − 1 windows of the baseline but not through the whole of it, so it is no role and the
/// report's `baseline` warns of it (as `culprit train` warns of an odd run). Budget: ~30 s.
#[test]
fn an_anomaly_in_the_baseline_is_said() {
    let _turn = turn();
    let dir = TempDir::new("real-baseline-anomaly");
    let exe = server(dir.path(), false);
    let data = dir.join("data");
    run_group(
        &exe,
        &data,
        &five_with(2, ["block", "lookup_object", "300", "8"]),
        "24",
    );
    let d = data.to_str().unwrap();
    let (_, r) = diagnose2(&[d, "--baseline", "first 16s"]);
    let b = r.baseline.as_ref().expect("the baseline is reported");
    assert!(
        b.warnings
            .iter()
            .any(|w| w.starts_with("baseline: srv2 stood out from its peers")),
        "{b:#?}"
    );
    assert!(r.roles.iter().all(|x| x.node != "srv2"), "{:#?}", r.roles);
    // Said on stderr too, where a person running the command sees it.
    let o = culprit()
        .arg("diagnose")
        .arg(d)
        .args(["--baseline", "first 16s"])
        .args(WINDOWS2)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("baseline: srv2 stood out"), "{err}");
}

/// `--follow` with a rolling baseline (`last:10s`): learnt first from the first 10 s, then again
/// every 2.5 s of diagnosed data from the last 10 s without the windows under suspicion (a
/// learning left with fewer than 2k − 1 = 7 windows is refused). A node that starts blocking at
/// 15 s is flagged and stays flagged to the end: its fault is never
/// learnt as normal. Budget: ~35 s.
#[test]
fn follow_with_a_rolling_baseline() {
    let _turn = turn();
    let dir = TempDir::new("real-rolling");
    let exe = server(dir.path(), false);
    let data = dir.join("data");
    let nodes = five_with(2, ["block", "lookup_object", "300", "15"]);
    let mut children: Vec<Child> = nodes.iter().map(|n| spawn(&exe, &data, n, "27")).collect();
    let o = culprit()
        .arg("diagnose")
        .arg(&data)
        .args(WINDOWS2)
        .args([
            "--follow",
            "--json",
            "--baseline",
            "last:10s",
            "--for",
            "60s",
        ])
        .output()
        .unwrap();
    for mut c in children.drain(..) {
        c.wait().unwrap();
    }
    let stdout = String::from_utf8_lossy(&o.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    let r: Diagnosis = serde_json::from_str(last).unwrap_or_else(|e| {
        panic!(
            "the last line is not the report ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&o.stderr)
        )
    });
    assert_eq!(o.status.code(), Some(1), "{r:#?}");
    assert_eq!(r.culprits, ["srv2"], "{r:#?}");
    let b = r.baseline.as_ref().expect("the baseline is reported");
    eprintln!("rolling baseline: {b:?}; notes {:?}", r.notes);
    assert!(b.times >= 2, "learnt again as the data went on: {b:#?}");
    assert!(b.span.starts_with("rolling"), "{b:#?}");
    // Flagged to the end: the fault's windows were not learnt.
    let t = node(metric(&r, "time"), "srv2");
    let last_episode = t.episodes.last().unwrap_or_else(|| panic!("{t:#?}"));
    let end = r.to.unwrap();
    assert!(
        last_episode.to.ns() + 4_000_000_000 >= end.ns(),
        "srv2 stopped being faulty before the end ({end}): {t:#?}\n{b:#?}"
    );
}

/// A line of `diagnose --follow --json`: a window event, or the report at the end.
#[derive(Debug, serde::Deserialize)]
#[serde(untagged)]
enum Line {
    Window(WindowLine),
    Report(Box<Diagnosis>),
}
