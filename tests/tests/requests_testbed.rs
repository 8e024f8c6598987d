//! Seed 004 on the emulated cluster: the four PVFS-like servers mark their requests
//! (`culprit_request_begin/_end`, the storage part handed off to an I/O thread) and are traced
//! with the default sampling (one request in 10: a few dozen requests); io2's disk is throttled to a quarter.
//! `culprit diagnose --requests`, with no training and no windows, ranks io2's storage method
//! first: the WRITE requests' category is over-dispersed, and in its request × method matrix
//! the storage write's column lies far from the low-rank space, with io2's rows in its sparse
//! part. Needs root (CI provides it); about a minute.

use culprit_testbed::run::{run_once, Instrument, Phases, RunPlan};
use culprit_testbed::tools::Tools;
use culprit_testbed::*;
use culprit_tests::*;

#[test]
#[ignore = "needs privileges (root: namespaces, cgroups): scripts/test runs it with --include-ignored"]
fn a_throttled_disk_ranks_its_nodes_io_method_first() {
    if !require(is_root(), "root (network namespaces, cgroups)") {
        return;
    }
    let _lock = machine_lock();
    let tools = Tools {
        culprit: culprit_bin(),
        runtime: runtime_lib(),
        analysis_args: Vec::new(),
    };
    let dir = TempDir::new("requests-testbed");
    let programs = Programs::build(&dir.join("bin")).expect("build C programs");
    let plan = RunPlan {
        id: "slowdisk".into(),
        workload: Workload::Ddw,
        fault: Some((FaultKind::SlowDisk, 2)),
        phases: Phases {
            settle_s: 2.0,
            before_s: 5.0,
            fault_s: 25.0,
            after_s: 0.0,
        },
        instrument: Instrument {
            tracing: true,
            sampling: false,
            tracer_interval_ms: 1000,
            sampler_interval_ms: 1000,
        },
        cluster: ClusterSpec::new(dir.join("cluster")),
        // As in e2e_diagnosis: headroom on every healthy disk.
        clients: WorkloadSpec {
            rate: 6_000_000,
            ..WorkloadSpec::default()
        },
    };
    let run = run_once(
        &plan,
        &programs,
        Some(&tools),
        &dir.join("run"),
        &mut |s: &str| eprintln!("{s}"),
    )
    .expect("slow-disk run");
    let o = culprit()
        .arg("diagnose")
        .arg(&run.data_dir)
        .args(["--requests", "--json"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let human = culprit()
        .arg("diagnose")
        .arg(&run.data_dir)
        .arg("--requests")
        .output()
        .unwrap();
    eprintln!("{}", String::from_utf8_lossy(&human.stdout));
    assert_eq!(o.status.code(), Some(1), "{text}");
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let r = &j["requests"];
    // ddw's requests are large (~25 a second over the cluster): one in 10 of 30 s is a few
    // dozen, enough for one category (10 needed).
    assert!(r["requests"].as_u64().unwrap() >= 20, "{text}");
    assert_eq!(r["sample_every"], 10, "{text}");
    let top = &r["ranking"][0];
    assert_eq!(top["node"], "io2", "{text}");
    let f = top["function"].as_str().unwrap();
    assert!(
        ["io_pwrite", "io_pread"].contains(&f),
        "the storage method ranks first: {f}\n{text}"
    );
}
