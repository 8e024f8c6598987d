//! The tracer's richer data, end to end: calls that never return (C++ exceptions through C
//! code, thread cancellation, `pthread_exit`) counted exactly, the call graph of a C fixture
//! (`CULPRIT_GRAPH=1`), and call-duration histograms of calls of known length
//! (`CULPRIT_HIST=1`). Read through `culprit report --json` (and `--graph`, `--callers`,
//! `--callees` for the text).

mod tracer_util;

use std::collections::BTreeMap;
use std::process::Command;

use culprit_tests::*;
use tracer_util::*;

/// `culprit report --json` of `data`'s one process: the JSON of that process.
fn report_process(data: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let out = run_ok(culprit().arg("report").arg(data).arg("--json").args(extra));
    let json = stdout_json(&out);
    let procs = json["nodes"][0]["processes"].as_array().unwrap().clone();
    assert_eq!(procs.len(), 1, "{json:#}");
    procs[0].clone()
}

/// `function → (calls, unwound)` of a report's process.
fn calls(p: &serde_json::Value) -> BTreeMap<String, (u64, u64)> {
    p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["function"].as_str().unwrap().to_string(),
                (f["calls"].as_u64().unwrap(), f["unwound"].as_u64().unwrap()),
            )
        })
        .collect()
}

#[test]
fn calls_left_by_cpp_exceptions_through_c_code_are_counted() {
    let tmp = TempDir::new("td-exc");
    let mid = tmp.join("exc_mid.o");
    run_ok(
        Command::new("gcc")
            .args(["-O2", "-g", "-finstrument-functions", "-c", "-o"])
            .arg(&mid)
            .arg(c_source("exc_mid.c")),
    );
    for link in [Link::Preload, Link::Linked] {
        let exe = tmp.join(format!("exc-{link:?}"));
        let mut cmd = Command::new("g++");
        cmd.args(["-O2", "-g", "-finstrument-functions", "-o"])
            .arg(&exe)
            .arg(c_source("exc.cpp"))
            .arg(&mid);
        if link == Link::Linked {
            let rt = runtime_lib();
            let dir = rt.parent().unwrap();
            cmd.arg("-L")
                .arg(dir)
                .arg("-lculprit_rt")
                .arg(format!("-Wl,-rpath,{}", dir.display()));
        }
        run_ok(&mut cmd);
        let data = tmp.join(format!("d-{link:?}"));
        let out = run(traced(&exe, link, &data, "n1").arg("100"));
        assert_eq!(stdout(&out), "caught 50\n");
        let p = report_process(&data, &[]);
        let c = calls(&p);
        // C++ frames run their exit hook while the exception passes (gcc puts it in a
        // cleanup); the C frame has none: its 50 calls left by the exception are unwound
        // when cpp_outer's cleanup exits.
        assert_eq!(c["c_middle"], (100, 50), "{link:?} {c:#?}");
        assert_eq!(c["cpp_outer(int)"], (100, 0), "{c:#?}");
        assert_eq!(c["thrower_cb"], (100, 0), "{c:#?}");
        assert_eq!(c["thrower(int)"], (100, 0), "{c:#?}");
        assert_eq!(c["main"], (1, 0), "{c:#?}");
        assert_eq!(p["lost_frames"], 0);
    }
}

#[test]
fn calls_left_by_cancellation_and_pthread_exit_are_counted() {
    let tmp = TempDir::new("td-cancel");
    let exe = build(tmp.path(), "tracer_data.c", "td", "-O2", Link::Preload);
    for (mode, deepest) in [("cancel", "level3"), ("exit", "level2")] {
        let data = tmp.join(mode);
        let out = run(traced(&exe, Link::Preload, &data, "n1").args([mode, "8"]));
        assert_eq!(stdout(&out), "threads 8\n");
        let c = calls(&report_process(&data, &[]));
        // Each thread is inside worker → level1 → level2 (→ level3) when it ends: those calls
        // end with the thread.
        for f in ["worker", "level1", "level2", deepest] {
            assert_eq!(c[f], (8, 8), "{mode} {f}: {c:#?}");
        }
        if mode == "exit" {
            assert!(!c.contains_key("level3"), "{c:#?}");
        }
    }
}

/// `(caller, callee) → calls` of a report's process.
fn edges(p: &serde_json::Value) -> BTreeMap<(String, String), u64> {
    p["edges"]
        .as_array()
        .unwrap_or_else(|| panic!("no edges: {p:#}"))
        .iter()
        .map(|e| {
            (
                (
                    e["caller"].as_str().unwrap_or("-").to_string(),
                    e["callee"].as_str().unwrap().to_string(),
                ),
                e["calls"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_call_graph_of_a_c_fixture() {
    let tmp = TempDir::new("td-graph");
    for (i, (opt, link)) in [("-O0", Link::Preload), ("-O2", Link::Linked)]
        .into_iter()
        .enumerate()
    {
        let exe = build(tmp.path(), "tracer_data.c", &format!("g{i}"), opt, link);
        let data = tmp.join(format!("d{i}"));
        let out = run(traced(&exe, link, &data, "n1")
            .env("CULPRIT_GRAPH", "1")
            .arg("graph"));
        assert_eq!(stdout(&out), "sink 82\n");
        let p = report_process(&data, &[]);
        let e = edges(&p);
        let s = |a: &str, b: &str| (a.to_string(), b.to_string());
        let want: BTreeMap<(String, String), u64> = [
            (s("-", "main"), 1),
            (s("main", "ga"), 1),
            (s("ga", "gb"), 10),
            (s("ga", "gc"), 5),
            (s("gb", "gc"), 20),
            (s("gc", "leaf"), 75),
            (s("main", "leaf"), 7),
        ]
        .into_iter()
        .collect();
        assert_eq!(e, want, "{opt} {link:?}");
        // Over its callers, a function's edges add up to its calls and self time.
        let funcs = p["functions"].as_array().unwrap();
        for f in funcs {
            let name = f["function"].as_str().unwrap();
            let into: Vec<&serde_json::Value> = p["edges"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|x| x["callee"] == name)
                .collect();
            let calls: u64 = into.iter().map(|x| x["calls"].as_u64().unwrap()).sum();
            let self_ns: u64 = into.iter().map(|x| x["self_ns"].as_u64().unwrap()).sum();
            assert_eq!(calls, f["calls"].as_u64().unwrap(), "{name}");
            // Each record's ticks are converted to ns on their own: ±1 ns of rounding each.
            let want = f["self_ns"].as_u64().unwrap();
            assert!(
                self_ns.abs_diff(want) <= into.len() as u64,
                "{name}: {self_ns} vs {want}"
            );
        }
        // The text views.
        let text = |args: &[&str]| {
            stdout(&run_ok(
                culprit()
                    .arg("report")
                    .arg(&data)
                    .args(args)
                    .args(["--limit", "0"]),
            ))
        };
        let g = text(&["--graph"]);
        // (column of the name, name) of each line of the graph, after its two header lines.
        let tree: Vec<(usize, &str)> = g
            .lines()
            .skip_while(|l| !l.contains("call graph"))
            .skip(2)
            .take_while(|l| !l.trim().is_empty())
            .filter_map(|l| {
                let name = l.split_whitespace().rfind(|t| *t != "…")?;
                // In characters: durations print "µs" (two bytes).
                Some((l[..l.rfind(name)?].chars().count(), name))
            })
            .collect();
        let at = tree[0].0;
        assert_eq!(
            tree[..5],
            [
                (at, "main"),
                (at + 2, "ga"),
                (at + 4, "gb"),
                (at + 6, "gc"),
                (at + 8, "leaf")
            ],
            "{g}"
        );
        // gc is expanded once; main's own call of leaf comes under main.
        assert!(tree[5..].contains(&(at + 4, "gc")), "{g}");
        assert!(tree[5..].contains(&(at + 2, "leaf")), "{g}");
        let callers = text(&["--callers", "gc"]);
        assert!(callers.contains("ga → gc"), "{callers}");
        assert!(callers.contains("gb → gc"), "{callers}");
        let callees = text(&["--callees", "main"]);
        assert!(callees.contains("main → ga"), "{callees}");
        assert!(callees.contains("main → leaf"), "{callees}");
        assert!(!callees.contains("ga → gb"), "{callees}");
    }
}

#[test]
fn edges_are_not_recorded_unless_asked_for() {
    let tmp = TempDir::new("td-nograph");
    let exe = build(tmp.path(), "tracer_data.c", "g", "-O2", Link::Preload);
    let data = tmp.join("d");
    run(traced(&exe, Link::Preload, &data, "n1").arg("graph"));
    let p = report_process(&data, &[]);
    assert!(p.get("edges").is_none(), "{p:#}");
    assert!(p["functions"][0].get("latency").is_none(), "{p:#}");
    let g = stdout(&run_ok(culprit().arg("report").arg(&data).arg("--graph")));
    assert!(
        g.contains("no call graph: trace with CULPRIT_GRAPH=1"),
        "{g}"
    );
}

/// `function → (buckets, latency)` of a report's process traced with CULPRIT_HIST=1.
fn latency_of(p: &serde_json::Value, f: &str) -> serde_json::Value {
    p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["function"] == f)
        .unwrap_or_else(|| panic!("{f} not in {p:#}"))["latency"]
        .clone()
}

#[test]
fn histograms_of_calls_of_known_duration() {
    let tmp = TempDir::new("td-hist");
    let exe = build(tmp.path(), "tracer_data.c", "h", "-O2", Link::Preload);
    let data = tmp.join("d");
    let out = run(traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_HIST", "1")
        .arg("sleeps"));
    assert_eq!(stdout(&out), "slept\n");
    let p = report_process(&data, &[]);
    let ms = 1_000_000u64;
    // A sleep is never shorter than asked; on a loaded machine it may be much longer, so only
    // the lower bounds are tight.
    for (f, n, at_least) in [("nap_1ms", 40, ms), ("nap_10ms", 15, 10 * ms)] {
        let l = latency_of(&p, f);
        assert_eq!(l["calls"], n, "{f}: {l}");
        let p50 = l["p50_ns"].as_u64().unwrap();
        // The bucket holding `at_least` starts at most a factor of 2 below it.
        assert!(p50 >= at_least / 2, "{f} p50 {p50}: {l}");
        assert!(p50 <= 20 * at_least, "{f} p50 {p50}: {l}");
        assert!(l["max_ns"].as_u64().unwrap() >= at_least, "{f}: {l}");
    }
    let q = latency_of(&p, "quick");
    assert_eq!(q["calls"], 1000);
    assert!(q["p50_ns"].as_u64().unwrap() < 50_000, "{q}");
    // The buckets themselves.
    let nap = &buckets(&latency_of(&p, "nap_1ms"));
    assert_eq!(nap.iter().sum::<u64>(), 40);
    // Every 1 ms sleep is in bucket 19 (0.52–1.05 ms) or above.
    assert_eq!(nap[..19].iter().sum::<u64>(), 0, "{nap:?}");
    let nap10 = &buckets(&latency_of(&p, "nap_10ms"));
    assert_eq!(nap10[..23].iter().sum::<u64>(), 0, "{nap10:?}");
    // The text report shows the quantiles.
    let text = stdout(&run_ok(culprit().arg("report").arg(&data)));
    assert!(
        text.contains("p50") && text.contains("p99") && text.contains("max"),
        "{text}"
    );
}

#[test]
fn a_rare_slow_call_shows_in_the_tail_and_the_distance() {
    let tmp = TempDir::new("td-slow");
    let exe = build(tmp.path(), "tracer_data.c", "s", "-O2", Link::Preload);
    let mut hists = Vec::new();
    for (name, per_mille) in [("healthy", "0"), ("faulty", "1")] {
        let data = tmp.join(name);
        run(traced(&exe, Link::Preload, &data, "n1")
            .env("CULPRIT_HIST", "1")
            .args(["slow", "4000", per_mille]));
        let p = report_process(&data, &[]);
        let l = latency_of(&p, "work");
        assert_eq!(l["calls"], 4000, "{l}");
        let h = buckets(&l);
        hists.push((l, h));
    }
    let (healthy, faulty) = (&hists[0], &hists[1]);
    // 4 calls of 2 ms of CPU (at least 2 ms of wall time each) among 4,000 of 20 µs.
    let slow_buckets = culprit_format::hist_bucket(2_000_000);
    assert!(
        faulty.1[slow_buckets..].iter().sum::<u64>() >= 4,
        "{:?}",
        faulty.1
    );
    assert!(
        faulty.0["max_ns"].as_u64().unwrap() >= 2_000_000,
        "{}",
        faulty.0
    );
    // Most calls take 20 µs of CPU: the median stays where it was.
    for (l, _) in [healthy, faulty] {
        let p50 = l["p50_ns"].as_u64().unwrap();
        assert!((10_000..1_000_000).contains(&p50), "{l}");
    }
    // The distance of the faulty histogram to the healthy one counts the slow calls: at least
    // their fraction times how many buckets they moved (on a loaded machine preemption adds
    // its own slow calls to both runs, so only this lower bound is sure).
    let d = culprit_analysis::latency::cdf_distance(&healthy.1, &faulty.1);
    assert!(d > 0.0, "{:?} vs {:?}", healthy.1, faulty.1);
}

/// A function's histogram from the report's JSON (`latency.buckets`).
fn buckets(l: &serde_json::Value) -> [u64; culprit_format::HIST_BUCKETS] {
    let mut h = [0; culprit_format::HIST_BUCKETS];
    for b in l["buckets"].as_array().unwrap_or_else(|| panic!("{l}")) {
        h[b[0].as_u64().unwrap() as usize] = b[1].as_u64().unwrap();
    }
    h
}

#[test]
fn a_killed_process_keeps_its_edges_and_histograms_in_the_checkpoint() {
    let tmp = TempDir::new("td-kill");
    let exe = build(tmp.path(), "tracer_data.c", "k", "-O2", Link::Preload);
    let data = tmp.join("d");
    // 20 µs calls for a long while, a 60 s interval: everything is in the checkpoint only.
    let mut child = traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_GRAPH", "1")
        .env("CULPRIT_HIST", "1")
        .env("CULPRIT_INTERVAL_MS", "60000")
        .args(["slow", "100000000", "0"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start");
    // Several checkpoints (every 100 ms).
    std::thread::sleep(std::time::Duration::from_millis(1500));
    child.kill().unwrap();
    child.wait().unwrap();
    let p = report_process(&data, &[]);
    assert_eq!(p["status"], "stopped", "{p:#}");
    let work = latency_of(&p, "work");
    assert!(work["calls"].as_u64().unwrap() > 10, "{work}");
    let e = edges(&p);
    let calls_from_main = e
        .get(&("main".to_string(), "work".to_string()))
        .copied()
        .unwrap_or(0);
    // The flusher reads the edges, then the histograms, of the running thread without stopping
    // it: calls that end in between are in one and not yet in the other (on a busy machine the
    // flusher may be preempted between the two reads for a few time slices: hundreds of calls).
    let calls = work["calls"].as_u64().unwrap();
    assert!(
        calls_from_main.abs_diff(calls) <= calls / 20,
        "edges {calls_from_main} vs histogram {calls}: {e:?}"
    );
}
