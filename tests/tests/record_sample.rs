//! `culprit record --sample`: the program is traced and its process tree sampled into the same
//! node directory; processes outside the tree are not sampled; the exit status passes through.

use std::process::{Command, Stdio};

use culprit_tests::*;

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn record_sample_traces_and_samples_the_program_only() {
    if !require(
        can_sample(),
        "perf_event access (root, CAP_PERFMON or kernel.perf_event_paranoid <= 0)",
    ) {
        return;
    }
    let _lock = machine_lock();
    let dir = TempDir::new("record-sample");
    let bin = dir.join("rec_burn");
    gcc(
        &[&c_source("rec_burn.c")],
        &bin,
        &["-O2", "-g", "-finstrument-functions"],
    );
    // A CPU hog outside the program's process tree: it must not show up.
    let mut hog = Command::new("dd")
        .args(["if=/dev/zero", "of=/dev/null", "bs=64k"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let data = dir.join("data");
    let o = culprit()
        .args([
            "record",
            "--sample",
            "--sample-interval",
            "1s",
            "--node",
            "box",
            "-o",
        ])
        .arg(&data)
        .arg("--")
        .arg(&bin)
        .output()
        .unwrap();
    let _ = hog.kill();
    let _ = hog.wait();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("sampling"), "{stderr}");
    let v = stdout_json(&run_ok(culprit().args(["report", "--json"]).arg(&data)));
    let node = &v["nodes"][0];
    assert_eq!(node["node"], "box");
    let f = node["processes"][0]["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "spin_here")
        .expect("spin_here traced");
    assert!(f["calls"].as_u64().unwrap() > 10);
    let s = &node["samples"][0];
    assert_eq!(s["status"], "ended", "{s}");
    let entries = s["entries"].as_array().unwrap();
    let spin: u64 = entries
        .iter()
        .filter(|e| e["function"] == "spin_here")
        .map(|e| e["samples"].as_u64().unwrap())
        .sum();
    let total = s["total"].as_u64().unwrap();
    assert!(
        spin * 2 > total,
        "spin_here has {spin} of {total} samples: {s}"
    );
    assert!(
        entries.iter().all(|e| e["program"] != "dd"),
        "a process outside the tree was sampled: {s}"
    );
}

#[test]
fn record_sample_reports_a_missing_program() {
    let o = culprit()
        .args(["record", "--sample", "--", "/nonexistent/prog"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("not found"), "{e}");
}
