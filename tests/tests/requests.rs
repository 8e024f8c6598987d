//! Seed 004's request analysis end to end: a real C program (`tests/c/requests.c`) serves READ
//! and WRITE requests on worker threads, handing each request's storage part to a helper
//! thread (`culprit_request_begin` with the root id as parent); it runs as four nodes in one
//! data directory, one of them with a slow `disk_read`. The runtime samples requests, the
//! analysis groups them by call tree, finds the over-dispersed READ category and ranks
//! `disk_read` on that node first — with no training.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use culprit_format::{ParsedFile, Record, RequestEvent};
use culprit_tests::*;
use diagnose_util::pinned_realtime;

mod diagnose_util;

const NODES: usize = 4;
const SLOW: usize = 2;
const REQUESTS: usize = 600;

fn build(dir: &Path) -> PathBuf {
    let rt = runtime_lib();
    let rt_dir = rt.parent().unwrap();
    let exe = dir.join("requests");
    let mut cmd = Command::new("gcc");
    cmd.args([
        "-O2",
        "-g",
        "-Wall",
        "-Wextra",
        "-Werror",
        "-finstrument-functions",
        "-I",
    ])
    .arg(include_dir())
    .arg("-o")
    .arg(&exe)
    .arg(c_source("requests.c"))
    .arg("-pthread")
    .arg("-L")
    .arg(rt_dir)
    .arg("-lculprit_rt")
    .arg(format!("-Wl,-rpath,{}", rt_dir.display()));
    run_ok(&mut cmd);
    exe
}

/// Runs the four nodes at once (n2 slow); returns each node's "sampled S of N" count. They
/// run as a pinned group of light peers (`pinned_realtime`, `pinned_turn`): unpinned at normal
/// priority beside `stress-ng --cpu 2` and builds, preemptions blamed a healthy node's
/// `disk_read`.
fn run_nodes(exe: &Path, data: &Path, sample: &str) -> Vec<usize> {
    let _turn = pinned_turn();
    let children: Vec<_> = (0..NODES)
        .map(|i| {
            let mut cmd = pinned_realtime(exe);
            cmd.args([&i.to_string(), &REQUESTS.to_string(), "2"])
                .env("CULPRIT_DIR", data)
                .env("CULPRIT_NODE", format!("n{i}"))
                .env("CULPRIT_REQUEST_SAMPLE", sample)
                .env_remove("LD_PRELOAD")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            if i == SLOW {
                cmd.env("REQ_SLOW_READ", "1");
            }
            cmd.spawn().expect("spawn requests")
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            let out = String::from_utf8_lossy(&o.stdout).into_owned();
            assert!(
                o.status.success(),
                "{out}{}",
                String::from_utf8_lossy(&o.stderr)
            );
            let n: Vec<&str> = out.split_whitespace().collect();
            assert_eq!((n[0], n[2], n[3]), ("sampled", "of", "600"), "{out}");
            n[1].parse().unwrap()
        })
        .collect()
}

/// Per node: the root ids whose root part and whose handed-off part were recorded.
fn recorded(data: &Path, node: &str) -> (BTreeSet<u64>, BTreeSet<u64>, u64) {
    let (mut roots, mut parts, mut calls) = (BTreeSet::new(), BTreeSet::new(), 0);
    for e in std::fs::read_dir(data.join(node)).unwrap() {
        let p = e.unwrap().path();
        if !p
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("trace-")
        {
            continue;
        }
        let bytes = std::fs::read(&p).unwrap();
        let pf = ParsedFile::parse(&bytes).unwrap();
        assert!(pf.ended());
        for r in pf.records() {
            if let Record::Requests(r) = r.unwrap() {
                assert_eq!(r.dropped, 0);
                for e in r.events() {
                    match e {
                        RequestEvent::Begin { id, parent: 0, .. } => {
                            roots.insert(id);
                        }
                        RequestEvent::Begin { parent, .. } => {
                            parts.insert(parent);
                        }
                        RequestEvent::Call { .. } => calls += 1,
                        RequestEvent::End { .. } => {}
                    }
                }
            }
        }
    }
    (roots, parts, calls)
}

#[test]
fn a_slow_method_on_one_node_ranks_first() {
    let tmp = TempDir::new("requests");
    let exe = build(tmp.path());
    let data = tmp.join("data");
    let sampled = run_nodes(&exe, &data, "2");
    for (i, &s) in sampled.iter().enumerate() {
        // One in two, by a hash of the id: about half, never all or none.
        assert!(
            (REQUESTS * 3 / 10..=REQUESTS * 7 / 10).contains(&s),
            "n{i}: {s} sampled"
        );
        let (roots, parts, calls) = recorded(&data, &format!("n{i}"));
        assert_eq!(roots.len(), s, "n{i}: every sampled root recorded");
        // The hand-off is sampled alike: every recorded root has its storage part, no part
        // lacks its root.
        assert_eq!(roots, parts, "n{i}");
        // parse, lookup, hand_off and send (+ checksum for reads); the disk call in the part.
        assert!(
            calls as usize >= s * 5,
            "n{i}: {calls} calls for {s} requests"
        );
    }

    let o = culprit()
        .arg("diagnose")
        .arg(&data)
        .args(["--requests", "--json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = &j["requests"];
    let total: usize = sampled.iter().sum();
    assert_eq!(r["requests"].as_u64().unwrap() as usize, total, "{text}");
    let top = &r["ranking"][0];
    assert_eq!(top["function"], "disk_read", "{text}");
    assert_eq!(top["node"], format!("n{SLOW}"), "{text}");
    // The READ category (type 1) is over-dispersed, and RPCA flags disk_read in it with n2
    // as its replica: all of n2's rows large, no other node's.
    let cats = r["categories"].as_array().unwrap();
    let read = cats
        .iter()
        .find(|c| c["rtype"] == 1)
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(read["anomalous"], true, "{text}");
    let f = read["flagged"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "disk_read")
        .unwrap_or_else(|| panic!("{text}"));
    assert!(f["cosine"].as_f64().unwrap() < 0.9);
    let reps = f["replicas"].as_array().unwrap();
    assert_eq!(reps[0]["node"], format!("n{SLOW}"), "{text}");
    assert!(
        reps[0]["large"].as_u64().unwrap() * 10 >= reps[0]["rows"].as_u64().unwrap() * 9,
        "{text}"
    );
    // No healthy node is blamed for disk_read.
    let blamed: BTreeMap<String, u64> = r["ranking"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["function"] == "disk_read")
        .map(|m| {
            (
                m["node"].as_str().unwrap().to_string(),
                m["categories"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        blamed.keys().collect::<Vec<_>>(),
        vec![&format!("n{SLOW}")],
        "{text}"
    );

    // People's report says the same.
    let o = culprit()
        .arg("diagnose")
        .arg(&data)
        .arg("--requests")
        .output()
        .unwrap();
    let human = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{human}");
    let first = human
        .lines()
        .find(|l| l.trim_start().starts_with("1. "))
        .unwrap_or_else(|| panic!("{human}"));
    assert!(
        first.contains("disk_read") && first.contains("on n2"),
        "{human}"
    );
}

#[test]
fn healthy_nodes_rank_nothing_and_no_marks_say_so() {
    let tmp = TempDir::new("requests-ok");
    let exe = build(tmp.path());
    let data = tmp.join("data");
    // Every request recorded (one in one), no node slow; a pinned group as in `run_nodes`.
    let turn = pinned_turn();
    let children: Vec<_> = (0..NODES)
        .map(|i| {
            pinned_realtime(&exe)
                .args([&i.to_string(), "300", "2"])
                .env("CULPRIT_DIR", &data)
                .env("CULPRIT_NODE", format!("n{i}"))
                .env("CULPRIT_REQUEST_SAMPLE", "1")
                .stdout(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&o.stdout), "sampled 300 of 300\n");
    }
    drop(turn);
    let o = culprit()
        .arg("diagnose")
        .arg(&data)
        .args(["--requests", "--json"])
        .output()
        .unwrap();
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let text = serde_json::to_string_pretty(&j).unwrap();
    assert_eq!(j["requests"]["requests"], 1200, "{text}");
    // disk_read is never blamed; whatever a busy machine's preemptions flag is not it.
    assert!(
        j["requests"]["ranking"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["function"] != "disk_read"),
        "{text}"
    );

    // Requests marked but none sampled (one in four billion): nothing recorded, exit 0 and
    // a note.
    let none = tmp.join("none");
    let o = run_ok(
        Command::new(&exe)
            .args(["0", "300", "2"])
            .env("CULPRIT_DIR", &none)
            .env("CULPRIT_NODE", "n0")
            .env("CULPRIT_REQUEST_SAMPLE", "4000000000"),
    );
    assert_eq!(String::from_utf8_lossy(&o.stdout), "sampled 0 of 300\n");
    let o = culprit()
        .arg("diagnose")
        .arg(&none)
        .arg("--requests")
        .output()
        .unwrap();
    let human = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{human}");
    assert!(human.contains("0 sampled request(s)"), "{human}");
    assert!(human.contains("note: no sampled requests"), "{human}");
}
