//! Seed 003 end to end: four nodes run a real C program (tests/c/layered_io.c) that marks two
//! layers of its own, "request-queue" above "disk", with the C library's layer below them
//! (`CULPRIT_IO=1`). After 4 s, one node's disk layer is slowed by a real sleep per request;
//! `culprit diagnose` flags that node on the `layers` metric and, comparing each layer's
//! characteristics across the peers bottom-up, names its disk layer (the C library below it is
//! as fast as the peers'). A run of healthy nodes flags and names nothing.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use culprit_analysis::family::Metric;
use culprit_analysis::layers::Characteristic;
use culprit_tests::*;

mod diagnose_util;
use diagnose_util::*;

fn start(exe: &Path, data: &Path, node: &str, seconds: u32, delay_us: u32) -> Child {
    std::fs::create_dir_all(data).unwrap();
    Command::new(exe)
        .args([
            data.join(format!("{node}.dat")).to_str().unwrap(),
            &seconds.to_string(),
            &delay_us.to_string(),
            "4",
        ])
        .env_remove("LD_PRELOAD")
        .env("CULPRIT_DIR", data)
        .env("CULPRIT_NODE", node)
        .env("CULPRIT_IO", "1")
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

/// Runs nodes n1..n4 side by side for `seconds` (`slow` gets a 15 ms disk after 4 s) and
/// diagnoses them.
fn run(
    dir: &TempDir,
    exe: &Path,
    tag: &str,
    seconds: u32,
    slow: Option<&str>,
) -> (i32, culprit_analysis::Diagnosis) {
    let data = dir.join(tag);
    let kids: Vec<Child> = ["n1", "n2", "n3", "n4"]
        .into_iter()
        .map(|n| {
            let delay = if Some(n) == slow { 15_000 } else { 0 };
            start(exe, &data, n, seconds, delay)
        })
        .collect();
    for mut k in kids {
        assert!(k.wait().unwrap().success());
    }
    // Keep the data files out of the node directories' comparison.
    for n in ["n1", "n2", "n3", "n4"] {
        let _ = std::fs::remove_file(data.join(format!("{n}.dat")));
    }
    diagnose_json(&[
        data.to_str().unwrap(),
        "--win-size",
        "2s",
        "--win-shift",
        "1s",
    ])
}

#[test]
fn a_slow_disk_layer_is_named_bottom_up() {
    let dir = TempDir::new("layers-diag");
    let exe = dir.join("layered_io");
    let rt = runtime_lib();
    let rt_dir = rt.parent().unwrap().to_str().unwrap();
    run_ok(
        Command::new("gcc")
            .args(["-O2", "-Wall", "-Werror", "-I"])
            .arg(include_dir())
            .arg("-o")
            .arg(&exe)
            .arg(c_source("layered_io.c"))
            .args(["-L", rt_dir, "-lculprit_rt"])
            .arg(format!("-Wl,-rpath,{rt_dir}")),
    );
    let (code, r) = run(&dir, &exe, "slow", 11, Some("n3"));
    assert_eq!(r.culprits, ["n3"], "{:#?}", r.verdicts);
    assert_eq!(code, 1);
    let layers = r.metric(Metric::LAYERS).expect("the layers metric ran");
    assert!(!layers
        .nodes
        .iter()
        .find(|n| n.node == "n3")
        .unwrap()
        .episodes
        .is_empty());
    assert_eq!(r.layers.len(), 1, "one node named: {:#?}", r.layers);
    let f = &r.layers[0];
    assert_eq!(
        (f.node.as_str(), f.layer.as_str()),
        ("n3", "disk"),
        "{f:#?}"
    );
    let lat = f.layers[0]
        .anomalies
        .iter()
        .find(|a| a.characteristic == Characteristic::Latency)
        .expect("the disk's latency is anomalous");
    assert!(lat.node_value > 10.0, "{lat:?}");
    assert!(lat.peers_value < 5.0, "{lat:?}");
    // The request queue above shows it too; the C library below does not.
    assert!(
        f.layers.iter().any(|l| l.layer == "request-queue"),
        "{f:#?}"
    );
    assert!(f.layers.iter().all(|l| l.layer != "libc"), "{f:#?}");

    let (code, healthy) = run(&dir, &exe, "healthy", 6, None);
    assert!(healthy.layers.is_empty(), "{:#?}", healthy.layers);
    assert!(healthy.culprits.is_empty(), "{:#?}", healthy.verdicts);
    assert_eq!(code, 0);
}
