//! The sampler on a host whose CPUs are all busy (issue 29): `culprit sample` beside
//! `stress-ng --cpu 8` and a traced group of four peers (tests/c/load_peer.c: four threads of
//! calls and short sleeps each, under `culprit record`), the peers' nodes named by pid files
//! written after the sampler started. The collectors run ahead of the load, capped
//! (docs/sampler.md): no sample lost, every OS-metrics second of every node present, no
//! interval missed.
//!
//! Needs root (system-wide sampling, real-time scheduling); skipped with a reason elsewhere, a
//! failure in CI. Budget: ~15 s.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use culprit_format::{interval_flags, ParsedFile, Record};
use culprit_tests::*;

/// Per node: (sample intervals as (flags, samples lost), machine-or-own losses of samples from
/// Lost records, OS-metrics seconds as (start, flags)).
struct NodeRun {
    samples: Vec<(u32, u64)>,
    lost_samples: u64,
    os: Vec<(u64, u32)>,
    info: Vec<(String, String)>,
}

fn node_run(data: &Path, node: &str) -> NodeRun {
    let file = std::fs::read_dir(data.join(node))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("samples-"))
        })
        .unwrap_or_else(|| panic!("no samples file for {node}"));
    let bytes = std::fs::read(&file).unwrap();
    let pf = ParsedFile::parse(&bytes).unwrap();
    let mut run = NodeRun {
        samples: Vec::new(),
        lost_samples: 0,
        os: Vec::new(),
        info: Vec::new(),
    };
    for r in pf.records() {
        match r.unwrap() {
            Record::Info(i) => run.info.extend(i.pairs),
            Record::Samples(s) => run.samples.push((s.flags, s.lost)),
            Record::Lost(l) => run.lost_samples += l.samples,
            Record::OsMetrics(o) => run.os.push((o.start_ns, o.flags)),
            _ => {}
        }
    }
    run
}

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn beside_a_cpu_load_and_a_traced_group_nothing_is_lost() {
    if !require(
        is_root(),
        "root (system-wide sampling, real-time scheduling)",
    ) {
        return;
    }
    let tmp = TempDir::new("smp-load");
    let peer = tmp.join("load_peer");
    gcc(
        &[&c_source("load_peer.c")],
        &peer,
        &["-O1", "-finstrument-functions", "-pthread"],
    );
    let culprit_path = culprit_bin();
    let data = tmp.join("data");
    let nodes = ["p1", "p2", "p3", "p4"];
    let mut args: Vec<String> = vec![
        "sample".into(),
        "-o".into(),
        data.display().to_string(),
        "--interval".into(),
        "1s".into(),
        "--duration".into(),
        "9s".into(),
    ];
    for n in nodes {
        args.push("--node-pid".into());
        args.push(format!("{n}={}", tmp.join(format!("{n}.pid")).display()));
    }
    // No group of pinned peers (pinned_turn) runs while this test loads the machine on
    // purpose: they would be compared under a load that falls on them unevenly.
    let _turn = loading_turn();
    let _lock = machine_lock();
    let Some(load) = CpuLoad::start(8, Duration::from_secs(120)) else {
        return;
    };
    let sampler = culprit()
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let peers: Vec<_> = nodes
        .iter()
        .map(|n| {
            let script = format!(
                "echo $$ > {pid} && exec {culprit} record --node {n} --interval 200 -o {data} -- \
                 {peer} 5",
                pid = tmp.join(format!("{n}.pid")).display(),
                culprit = culprit_path.display(),
                data = data.display(),
                peer = peer.display(),
            );
            Command::new("sh")
                .args(["-c", &script])
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut p in peers {
        assert!(p.wait().unwrap().success());
    }
    let out = sampler.wait_with_output().unwrap();
    drop(load);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for n in nodes {
        let run = node_run(&data, n);
        let why = format!("{n}:\n{err}\ninfo: {:?}", run.info);
        assert!(run.samples.len() >= 8, "{why}");
        for (flags, lost) in &run.samples {
            assert_eq!(
                flags & interval_flags::MISSED,
                0,
                "a missed interval: {why}"
            );
            assert_eq!(*lost, 0, "samples lost: {why}");
        }
        assert_eq!(run.lost_samples, 0, "{why}");
        // Every OS-metrics second from the node's first to its last, none missed.
        assert!(
            run.os.len() >= 7,
            "{} OS-metrics seconds: {why}",
            run.os.len()
        );
        for w in run.os.windows(2) {
            assert_eq!(w[1].0, w[0].0 + 1_000_000_000, "a second is missing: {why}");
        }
        assert!(
            run.os.iter().all(|(_, f)| f & interval_flags::MISSED == 0),
            "{why}"
        );
    }
}
