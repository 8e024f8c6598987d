//! Verdicts a person trusts on real servers (issue 31), end to end with real processes, real
//! cgroups and real signals:
//!
//! * a server whose forked child rewrites its log on a throttled disk: the child is *busy* in
//!   its writer (its writes keep returning), named as a child process, not a stuck thread of
//!   the server; the node is flagged with a slow disk;
//! * a process stopped 4 times a second: its pause count is the number of stops, not the
//!   number of its threads' stops.
//!
//! Needs root (cgroups, delay accounting, perf); each test creates what it needs under a
//! per-run name and removes it on drop.

mod html_util;
mod sampler_util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use culprit_tests::*;
use sampler_util::*;

const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];

/// A directory on a real disk (O_DIRECT fails on tmpfs, and blkio throttles block devices),
/// removed on drop.
struct DiskDir(PathBuf);

impl DiskDir {
    fn new(tag: &str) -> DiskDir {
        let d = workspace_root()
            .join("target")
            .join(format!("verdicts-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        DiskDir(d)
    }
}

impl Drop for DiskDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Windows short enough for a run of tens of seconds.
const SHORT: [&str; 8] = [
    "--win-size",
    "4s",
    "--win-shift",
    "2s",
    "--os-win-size",
    "8s",
    "--os-win-shift",
    "2s",
];

fn diagnose(data: &Path, extra: &[&str]) -> (serde_json::Value, String) {
    let json = culprit()
        .arg("diagnose")
        .arg(data)
        .arg("--json")
        .args(extra)
        .output()
        .unwrap();
    assert!(
        matches!(json.status.code(), Some(0 | 1)),
        "diagnose failed: {}",
        String::from_utf8_lossy(&json.stderr)
    );
    let text = culprit()
        .arg("diagnose")
        .arg(data)
        .args(extra)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    (
        stdout_json(&json),
        String::from_utf8_lossy(&text.stdout).into_owned(),
    )
}

fn findings<'a>(r: &'a serde_json::Value, kind: &str, node: &str) -> Vec<&'a serde_json::Value> {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == kind && f["node"] == node)
        .collect()
}

fn verdict<'a>(r: &'a serde_json::Value, node: &str) -> &'a serde_json::Value {
    r["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["node"] == node)
        .unwrap_or_else(|| panic!("no verdict for {node}: {r:#}"))
}

/// Issue 31, 1: a key-value server's child rewriting its log on a disk throttled to 128 KiB/s
/// was reported "thread 1 stuck in rewriteAppendOnlyFileBackground", and the slow disk dropped.
/// Four nodes, each a traced server (`c/fork_writer.c`) in its own blkio cgroup; n3's disk
/// throttled so that its child's 4 MiB rewrite outlasts the run while its writes keep
/// returning. Expected: n3 flagged FAULTY (not STUCK) with a slow disk, a "busy" finding naming
/// "child process PID" in rewrite_log, no stuck finding, no healthy node flagged. ~45 s.
#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn a_forked_child_writing_to_a_throttled_disk_is_busy_not_stuck_and_the_disk_is_named() {
    if !require(is_root(), "root (cgroups, delay accounting, perf)") {
        return;
    }
    ensure_built();
    let bins = TempDir::new("verdicts-bin");
    let exe = bins.join("fork_writer");
    gcc(
        &[&c_source("fork_writer.c")],
        &exe,
        &["-finstrument-functions", "-O0", "-g"],
    );
    let _lock = machine_lock();
    let group = format!("culprit-verdicts-{}", std::process::id());
    let blkio = PathBuf::from("/sys/fs/cgroup/blkio").join(&group);
    let mut cgs = Cgroups(vec![blkio.clone()]);
    for n in NODES {
        cgs.0.push(blkio.join(n));
    }
    for d in &cgs.0 {
        std::fs::create_dir_all(d).unwrap();
    }
    let io = DiskDir::new("throttle");
    let (maj, min) = whole_disk_of(&io.0);
    std::fs::write(
        blkio.join("n3/blkio.throttle.write_bps_device"),
        format!("{maj}:{min} {}", 128 << 10),
    )
    .unwrap();
    let data = TempDir::new("verdicts-busy");
    let mut args: Vec<String> = vec![
        "--interval".into(),
        "1s".into(),
        "--event".into(),
        "cpu-clock".into(),
        "--tracepoints".into(),
        "none".into(),
        "--delayacct".into(),
    ];
    for n in NODES {
        args.push("--node-cgroup".into());
        args.push(format!("{n}=/{group}/{n}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sampler = SamplerProc::start(data.path(), &args, "n1");
    let secs = 30;
    let mut kids = Kill(Vec::new());
    for n in NODES {
        let dir = io.0.join(n);
        std::fs::create_dir_all(&dir).unwrap();
        let mut c = Command::new("sh");
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        kids.0.push(
            c.arg("-c")
                .arg(format!(
                    "echo $$ > {}/cgroup.procs && exec {} {} {secs} {}",
                    blkio.join(n).display(),
                    exe.display(),
                    dir.display(),
                    4 << 20
                ))
                .env("CULPRIT_DIR", data.path())
                .env("CULPRIT_NODE", n)
                .env("LD_PRELOAD", runtime_lib())
                .spawn()
                .unwrap(),
        );
    }
    std::thread::sleep(Duration::from_secs(2));
    for n in NODES {
        std::fs::write(io.0.join(n).join("go"), "").unwrap();
    }
    let t0 = Instant::now();
    for c in &mut kids.0 {
        let left = Duration::from_secs(secs + 20).saturating_sub(t0.elapsed());
        let until = Instant::now() + left;
        while c.try_wait().unwrap().is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let (code, err) = sampler.stop();
    assert_eq!(code, 0, "{err}");
    drop(kids);
    std::fs::write(
        blkio.join("n3/blkio.throttle.write_bps_device"),
        format!("{maj}:{min} 0"),
    )
    .unwrap();
    drop(cgs);

    // The traced and OS metrics: at 4 s windows the sampler's cpu-clock samples of a machine
    // loaded by other work (load 40 on 2 CPUs when this was written) flag healthy nodes on the
    // kernel's own lock functions, untrained (a weakness reported in issue 31's closing note,
    // not what this test is about).
    let mut args = SHORT.to_vec();
    args.extend(["--metrics", "time,count,os"]);
    let (r, text) = diagnose(data.path(), &args);
    eprintln!("{text}");
    assert!(
        findings(&r, "stuck", "n3").is_empty(),
        "a child whose writes keep returning is not stuck:\n{text}"
    );
    let busy = findings(&r, "busy", "n3");
    assert_eq!(busy.len(), 1, "{text}");
    let call = &busy[0]["call"];
    assert_eq!(call["function"], "rewrite_log", "{text}");
    assert_eq!(call["forked"], true, "{text}");
    let pid = call["pid"].as_u64().unwrap();
    assert!(
        text.contains(&format!("child process {pid} busy in rewrite_log")),
        "{text}"
    );
    assert!(busy[0]["progress"]["returned"] == true, "{text}");
    let v = verdict(&r, "n3");
    assert_eq!(v["verdict"], "faulty", "{text}");
    assert_eq!(v["resource"]["kind"], "slow-disk", "{text}");
    assert!(
        text.contains("VERDICT: n3 is FAULTY — slow disk"),
        "the VERDICT line names the disk:\n{text}"
    );
    assert_eq!(r["culprits"], serde_json::json!(["n3"]), "{text}");
    check_page(data.path(), &args);
}

/// The HTML page of a diagnosis with a resource (issue 31, 3): the VERDICT line names the
/// resource and its evidence at the top, the suspects table has a resource column and its
/// headers in words, no "ok (N×)" cell, and Chromium draws nothing right of 1,280 px.
fn check_page(data: &Path, args: &[&str]) {
    let html = data.join("report.html");
    let o = culprit()
        .arg("diagnose")
        .arg(data)
        .args(args)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "a culprit: exit status 1");
    let page = std::fs::read_to_string(&html).unwrap();
    let verdict_at = page.find("id=\"verdict\"").expect("a VERDICT block");
    let table_at = page.find("id=\"suspects\"").expect("the suspects table");
    assert!(verdict_at < table_at, "the VERDICT comes first");
    let verdict = &page[verdict_at..table_at];
    assert!(
        verdict.contains("<span class=\"resource\">slow disk (I/O delay"),
        "{verdict}"
    );
    assert!(page.contains("<th>resource</th>"), "{page}");
    assert!(!page.contains("mediannode"), "a header in words");
    assert!(!page.contains("ok ("), "an ok cell carries no evidence");
    let Some(shown) = html_util::render(&html) else {
        return;
    };
    assert!(shown.dom.contains("slow disk (I/O delay"), "{}", shown.dom);
    assert!(shown.drawn > 0.01, "the screenshot is blank");
    assert_eq!(
        shown.beyond,
        0,
        "the page is wider than {} px",
        html_util::PAGE_WIDTH
    );
}

/// Issue 31, 4: a 150 s run diagnosed with the default windows (60 s every 30 s: 3 complete
/// windows, fewer than the 5 a verdict reads) — windows that fit are chosen and said, and a
/// fault that began at 50 s is found without "different since its data began". Four traced
/// servers (`c/late_fault.c`); n2's requests do five times the work from 50 s on. ~155 s.
#[test]
fn a_150_s_run_gets_windows_that_fit_it() {
    ensure_built();
    let dir = TempDir::new("verdicts-windows");
    let exe = dir.join("late_fault");
    gcc(
        &[&c_source("late_fault.c")],
        &exe,
        &["-finstrument-functions", "-O0", "-g", "-pthread"],
    );
    let data = dir.join("data");
    let mut kids: Vec<std::process::Child> = NODES
        .iter()
        .map(|n| {
            let mut c = Command::new(&exe);
            c.arg("150");
            if *n == "n2" {
                c.arg("50");
            }
            c.env("CULPRIT_DIR", &data)
                .env("CULPRIT_NODE", n)
                .env("LD_PRELOAD", runtime_lib())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in &mut kids {
        assert!(c.wait().unwrap().success());
    }
    let (r, text) = diagnose(&data, &[]);
    eprintln!("{text}");
    let chosen = r["notes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n.as_str())
        .find(|n| n.contains("too short for the default windows"))
        .unwrap_or_else(|| panic!("no note on the windows chosen:\n{text}"));
    assert!(
        chosen.contains("windows of 16 s every 8 s chosen"),
        "{chosen}"
    );
    assert_eq!(r["settings"]["win_size_s"], 16.0, "{text}");
    assert_eq!(r["culprits"], serde_json::json!(["n2"]), "{text}");
    let v = verdict(&r, "n2");
    let reason = v["reason"].as_str().unwrap();
    assert!(!reason.contains("since its data began"), "{reason}");
    // The user's windows win.
    let (r, text) = diagnose(&data, &["--win-size", "60s", "--win-shift", "30s"]);
    assert_eq!(r["settings"]["win_size_s"], 60.0, "{text}");
    assert!(
        !r["notes"]
            .to_string()
            .contains("too short for the default windows"),
        "{text}"
    );
}
