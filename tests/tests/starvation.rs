//! A node starved of CPU, found and named (issue 29): four peers of a real multi-threaded C program
//! (tests/c/starve_peer.c, 8 threads each, traced by libculprit_rt.so), each in its own cgroup v1
//! `cpu`/`cpuacct` group, equal shares of a group capped at 1.6 CPUs (the nodes' "machine"),
//! sampled by one `culprit sample` with the groups as node rules, all beside `stress-ng --cpu 8`
//! capped at the rest of the two CPUs (a loaded host: every collector runs late). Trained on two
//! fault-free runs; then one node's group gets a CFS quota of 5 % of a CPU (and, in a second run,
//! another node 20 %) ten seconds into the run. Trained and untrained, that node and only it is
//! flagged, by the white-box metrics too, and the resource is "CPU starvation"; no window of the
//! count and time metrics is left out for any node. From the tracer's data alone (no run-queue or
//! throttling metric), the node is "slowed as a whole".
//!
//! The runtime places every call in its interval itself (a ring of 64 intervals: a flusher
//! starved for a minute still writes each second, late), so no node's runtime misses an
//! interval or drops a call here, and every window of every node is compared.
//!
//! Shortened windows (10 s every 5 s, k = 3; OS metrics 20 s every 5 s); about five minutes.
//! Needs root (cgroups, perf); the machine lock keeps other privileged tests out meanwhile.

mod sampler_util;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use culprit_analysis::diagnosis::MetricStatus;
use culprit_analysis::family::Metric;
use culprit_analysis::missing::Finding;
use culprit_analysis::resource::Kind;
use culprit_analysis::Diagnosis;
use culprit_testbed::cgroup::{destroy_tree, Group};
use culprit_tests::*;
use sampler_util::{Kill, SamplerProc};

const NODES: [&str; 4] = ["n1", "n2", "n3", "n4"];
const THREADS: u32 = 8;
/// The nodes (and the sampler) share one group, their "machine": capped at this many CPUs of
/// the 2, so that the host's other work keeps the rest, and weighing the most a group can at
/// the top, so that the nodes get their CPUs beside `stress-ng` and the host's other work. (A
/// group of ordinary weight, beside the other work of a shared 2-core machine at load average
/// 30–45, gave each node 60–130 ms of CPU a second: a 5 % quota was hardly below that.)
const MACHINE_CPUS: f64 = 1.6;
const MACHINE_SHARES: u32 = 262_144;
/// What the host's other work (the CPU hogs) may use: the rest of the two CPUs.
const HOST_CPUS: f64 = 2.0 - MACHINE_CPUS;
/// Each node's share of the machine (the sampler's too).
const SHARES: u32 = 8192;
/// When the quota is set, seconds into a faulty run.
const FAULT_AFTER_S: u64 = 10;

/// The analysis settings of every train and diagnose call.
const WINDOWS: [&str; 14] = [
    "--win-size",
    "10s",
    "--win-shift",
    "5s",
    "--k",
    "3",
    "--min-time",
    "167ms",
    "--min-samples",
    "16.7",
    "--os-win-size",
    "20s",
    "--os-win-shift",
    "5s",
];

/// Seconds between starting the nodes' programs and their common first second.
const START_MARGIN_S: f64 = 8.0;

/// Wall-clock seconds since the epoch.
fn now_s() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The test process in a group of its own (beside the nodes' machine, as heavy), so that
/// starting programs and setting the quota on time do not wait behind the nodes; moved back to
/// the root group on drop, before its groups are removed.
struct Harness;

impl Harness {
    fn join(rel: &str) -> Harness {
        let g = Group::create(format!("{rel}/harness")).expect("create cgroup");
        std::fs::write(g.dir("cpu").join("cpu.shares"), SHARES.to_string()).unwrap();
        std::fs::write(
            g.dir("cpu").join("cgroup.procs"),
            std::process::id().to_string(),
        )
        .unwrap();
        Harness
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = std::fs::write(
            "/sys/fs/cgroup/cpu/cgroup.procs",
            std::process::id().to_string(),
        );
    }
}

/// Removes the run's cgroups (killing what is left in them) on drop.
struct Cgroups(PathBuf);

impl Drop for Cgroups {
    fn drop(&mut self) {
        let _ = destroy_tree(&self.0);
    }
}

fn own_group(c: &mut Command) -> &mut Command {
    use std::os::unix::process::CommandExt as _;
    c.process_group(0)
}

/// Makes the child join `g`'s `cpu` and `cpuacct` groups between fork and exec, so that it
/// starts (loads, links, sets the runtime up) with its node's weight, not the test's.
fn join_before_exec(c: &mut Command, g: &Group) {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt as _;
    use std::os::unix::process::CommandExt as _;
    let files: Vec<CString> = ["cpu", "cpuacct"]
        .iter()
        .map(|h| CString::new(g.dir(h).join("cgroup.procs").as_os_str().as_bytes()).unwrap())
        .collect();
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // async-signal-safe functions (open, write, close) on buffers allocated before the fork.
    unsafe {
        c.pre_exec(move || {
            for f in &files {
                let fd = libc::open(f.as_ptr(), libc::O_WRONLY);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // "0": the writing process.
                let ok = libc::write(fd, b"0".as_ptr().cast(), 1) == 1;
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if !ok {
                    return Err(err);
                }
            }
            Ok(())
        })
    };
}

/// One recorded run: its data root and each node's own call counts (the program's).
struct Run {
    data: PathBuf,
    counts: Vec<(String, String)>,
}

/// Records `secs` seconds of the four nodes under `dir`, cgroups under `rel`; with `quota`,
/// node `quota.0` is capped at `quota.1` CPUs from [`FAULT_AFTER_S`] on.
fn record(prog: &Path, dir: &Path, rel: &str, quota: Option<(&str, f64)>, secs: u64) -> Run {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    let _groups = Cgroups(PathBuf::from(rel));
    // The run's group: the nodes' machine. Shares are hierarchical, so it and the groups above
    // it weigh far more than a process at the top (stress-ng's workers, the host's other
    // work), and a CFS quota of MACHINE_CPUS caps it, leaving the rest of the host its share.
    let mut above = PathBuf::new();
    for part in Path::new(rel).components() {
        above.push(part);
        let dir = Path::new("/sys/fs/cgroup/cpu").join(&above);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cpu.shares"), MACHINE_SHARES.to_string()).unwrap();
    }
    let machine = Group::create(rel).expect("create cgroup");
    machine
        .set_cpu_quota(Some(MACHINE_CPUS))
        .expect("cap the nodes' machine");
    let groups: Vec<Group> = NODES
        .iter()
        .map(|n| {
            let g = Group::create(format!("{rel}/{n}")).expect("create cgroup");
            std::fs::write(g.dir("cpu").join("cpu.shares"), SHARES.to_string()).unwrap();
            g
        })
        .collect();
    let mut args: Vec<String> = vec!["--interval".into(), "1s".into()];
    for n in NODES {
        args.push("--node-cgroup".into());
        args.push(format!("{n}=/{rel}/{n}"));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let sampler = SamplerProc::start(&data, &args, "n1");
    // The sampler runs on the nodes' machine, with a node's share: outside it, the nodes'
    // weight would starve it (making the collectors immune to the load they measure is
    // `culprit sample`'s own job, issue 29).
    let collector = Group::create(format!("{rel}/collector")).expect("create cgroup");
    std::fs::write(collector.dir("cpu").join("cpu.shares"), SHARES.to_string()).unwrap();
    std::fs::write(
        collector.dir("cpu").join("cgroup.procs"),
        sampler.child.id().to_string(),
    )
    .unwrap();
    // All nodes start on the same second, however long starting them one after the other
    // takes on a loaded machine (a node alone on the machine for a few seconds would run
    // faster than it does beside its peers).
    let start = now_s() + START_MARGIN_S;
    let mut kids = Kill(Vec::new());
    for (n, g) in NODES.iter().zip(&groups) {
        let mut cmd = Command::new(prog);
        cmd.args([THREADS.to_string(), secs.to_string(), format!("{start:.3}")])
            .env("CULPRIT_DIR", &data)
            .env("CULPRIT_NODE", n)
            .env("LD_PRELOAD", runtime_lib())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        join_before_exec(own_group(&mut cmd), g);
        kids.0.push(cmd.spawn().expect("start starve"));
    }
    assert!(now_s() < start, "the nodes were started in time");
    let t0 = Instant::now();
    if let Some((node, cpus)) = quota {
        let at = start + FAULT_AFTER_S as f64;
        std::thread::sleep(Duration::from_secs_f64((at - now_s()).max(0.0)));
        let i = NODES.iter().position(|n| *n == node).unwrap();
        groups[i].set_cpu_quota(Some(cpus)).expect("set the quota");
    }
    let mut counts = Vec::new();
    for (n, c) in NODES.iter().zip(&mut kids.0) {
        let out = std::mem::take(&mut c.stdout);
        let st = c.wait().expect("wait for starve");
        let mut text = String::new();
        if let Some(mut o) = out {
            use std::io::Read as _;
            let _ = o.read_to_string(&mut text);
        }
        assert!(st.success(), "{n}: starve exited {st}");
        counts.push((n.to_string(), text.replace('\n', ", ")));
    }
    eprintln!("recorded {} in {:.0?}", dir.display(), t0.elapsed());
    let (code, err) = sampler.stop();
    assert_eq!(code, 0, "culprit sample: {err}");
    Run { data, counts }
}

/// `culprit diagnose` of `data` (with `thresholds` if given): the report and its text.
fn diagnose(data: &Path, thresholds: Option<&Path>) -> (Diagnosis, String) {
    diagnose_with(data, thresholds, &[])
}

/// [`diagnose`] with more options.
fn diagnose_with(data: &Path, thresholds: Option<&Path>, more: &[&str]) -> (Diagnosis, String) {
    let run = |json: bool| {
        let mut c = culprit();
        c.arg("diagnose").arg(data).args(WINDOWS).args(more);
        if let Some(t) = thresholds {
            c.arg("--thresholds").arg(t);
        }
        if json {
            c.arg("--json");
        }
        c.output().expect("run culprit diagnose")
    };
    let text = run(false);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&text.stdout),
        String::from_utf8_lossy(&text.stderr)
    );
    let o = run(true);
    let d: Diagnosis = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{text}", String::from_utf8_lossy(&o.stderr)));
    (d, text)
}

/// The starved node and only it is a culprit, found by the white-box metrics, named "CPU
/// starvation"; every count and time window compared every node.
/// Each node's trace intervals whose calls its runtime could not place: written MISSED, or
/// partial with calls dropped (its flusher woke too late).
fn missed_intervals(data: &Path) -> Vec<(String, usize)> {
    let ds = culprit_analysis::data::Dataset::open(&[data.to_path_buf()], Default::default())
        .expect("load the data");
    ds.nodes
        .iter()
        .map(|n| {
            let missed = n
                .traces
                .iter()
                .flat_map(|t| &t.intervals)
                .filter(|iv| culprit_format::interval_flags::is_missed(iv.flags) || iv.dropped > 0)
                .count();
            (n.name.clone(), missed)
        })
        .collect()
}

fn assert_starved(d: &Diagnosis, text: &str, data: &Path, node: &str, how: &str) {
    eprintln!("--- {how} ---\n{text}");
    // The runtime's ring places every call of a starved node in its interval, late: none
    // missed, none dropped (docs/tracer.md, "The ring of intervals").
    let missed = missed_intervals(data);
    assert!(
        missed.iter().all(|(_, k)| *k == 0),
        "{how}: intervals whose calls the runtime could not place, per node: {missed:?}"
    );
    assert_eq!(d.culprits, [node], "{how}: {node} and only {node}:\n{text}");
    let v = d.verdict(node).unwrap();
    let r = v
        .resource
        .as_ref()
        .unwrap_or_else(|| panic!("{how}: a resource:\n{text}"));
    assert_eq!(r.kind, Kind::CpuStarvation, "{how}: the resource:\n{text}");
    let white: Vec<Metric> = [Metric::COUNT, Metric::TIME]
        .into_iter()
        .filter(|&m| {
            d.metric(m)
                .and_then(|m| m.nodes.iter().find(|n| n.node == node))
                .is_some_and(|n| n.verdict == MetricStatus::Faulty)
        })
        .collect();
    assert!(
        !white.is_empty(),
        "{how}: a white-box metric finds {node} faulty:\n{text}"
    );
    for m in [Metric::COUNT, Metric::TIME] {
        let mr = d.metric(m).unwrap_or_else(|| panic!("{how}: {m} analysed"));
        for n in &mr.nodes {
            // Inside its span (the windows holding its first and last seconds are edges), no
            // window of a node is left out: gaps are compared on the seconds present.
            let left_out: u64 = d
                .findings
                .iter()
                .filter_map(|f| match f {
                    Finding::Gaps {
                        node,
                        metric,
                        windows,
                        partial,
                        ..
                    } if *node == n.node && *metric == m => Some(windows - partial),
                    _ => None,
                })
                .sum();
            // Every node is compared; the healthy ones are decided. The starved node may be
            // undecided on one of the two, faulty on the other: a few anomalous time windows
            // beside the run's last, uncompared windows neither convict nor clear it, and
            // "undecided" is what the report must say then. (A CI run failed after the
            // untrained report, its time not among the corroborating metrics; the log cut the
            // assertion off; this is the likeliest one that report failed.)
            let judged = match n.verdict {
                MetricStatus::NotCompared => false,
                MetricStatus::Undecided => n.node == node && !white.is_empty(),
                _ => true,
            };
            assert_eq!(
                left_out, 0,
                "{how}: every {m} window compares {}:\n{text}",
                n.node
            );
            assert!(judged, "{how}: {} is judged on {m}:\n{text}", n.node);
        }
    }
}

#[test]
#[ignore = "needs privileges (root): scripts/test runs it with --include-ignored"]
fn a_node_under_a_cpu_quota_is_found_and_named_cpu_starvation() {
    if !require(is_root(), "root (cgroups, perf_event)") {
        return;
    }
    if !require(
        Command::new("stress-ng").arg("--version").output().is_ok(),
        "stress-ng (scripts/install-deps)",
    ) {
        return;
    }
    let dir = TempDir::new("starvation");
    let prog = dir.join("starve_peer");
    gcc(
        &[&c_source("starve_peer.c")],
        &prog,
        &["-O2", "-pthread", "-finstrument-functions"],
    );
    let _ = culprit_bin();
    // No group of pinned peers (pinned_turn) runs while this test loads the machine on
    // purpose: they would be compared under a load that falls on them unevenly.
    let _turn = loading_turn();
    let _lock = machine_lock();
    let rel = format!("culprit-starve-{}", std::process::id());
    let _all = Cgroups(PathBuf::from(&rel));
    // The host's other work: eight CPU hogs in a group of their own, capped together at what
    // the nodes' machine leaves of the two CPUs. With the nodes busy the machine is as loaded
    // as with uncapped hogs; what the cap spares is the CPU the nodes leave unused, which
    // uncapped hogs burnt and the host's other work (CI's other tests and builds) now gets.
    let host_rel = format!("{rel}-host");
    let _host = Cgroups(PathBuf::from(&host_rel));
    let host = Group::create(&host_rel).expect("create cgroup");
    host.set_cpu_quota(Some(HOST_CPUS)).expect("cap the hogs");
    let mut hogs = Command::new("stress-ng");
    hogs.args(["--cpu", "8", "--timeout", "0", "--quiet"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    join_before_exec(&mut hogs, &host);
    let _stress = Kill(vec![own_group(&mut hogs).spawn().expect("start stress-ng")]);
    let top = Path::new("/sys/fs/cgroup/cpu").join(&rel);
    std::fs::create_dir_all(&top).unwrap();
    std::fs::write(top.join("cpu.shares"), MACHINE_SHARES.to_string()).unwrap();
    // Dropped before `_all` (declared after it).
    let _harness = Harness::join(&rel);

    let mut train = Vec::new();
    for i in 0..2 {
        let run = record(
            &prog,
            &dir.join(format!("train{i}")),
            &format!("{rel}/train{i}"),
            None,
            40,
        );
        train.push(run.data);
    }
    let thresholds = dir.join("thresholds.json");
    run_ok(
        culprit()
            .arg("train")
            .args(&train)
            .arg("--out")
            .arg(&thresholds)
            .args(WINDOWS),
    );

    for (node, cpus) in [("n3", 0.05), ("n2", 0.20)] {
        let tag = format!("quota{}", (cpus * 100.0) as u32);
        let run = record(
            &prog,
            &dir.join(&tag),
            &format!("{rel}/{tag}"),
            Some((node, cpus)),
            60,
        );
        eprintln!("{tag}: the program's own counts: {:?}", run.counts);
        let (d, text) = diagnose(&run.data, Some(&thresholds));
        assert_starved(&d, &text, &run.data, node, &format!("{tag}, trained"));
        let (d, text) = diagnose(&run.data, None);
        assert_starved(&d, &text, &run.data, node, &format!("{tag}, untrained"));
        // The tracer alone has no run-queue or throttling metric: what its own data says is
        // that every function is slower per call while the node makes fewer calls — slowed as
        // a whole, not a resource it has no evidence of.
        let (d, text) = diagnose_with(&run.data, None, &["--metrics", "count,time"]);
        eprintln!("--- {tag}, tracer only, untrained ---\n{text}");
        assert_eq!(d.culprits, [node], "{tag}, tracer only:\n{text}");
        let kind = d
            .verdict(node)
            .and_then(|v| v.resource.as_ref())
            .map(|r| r.kind);
        assert_eq!(kind, Some(Kind::SlowedWhole), "{tag}, tracer only:\n{text}");
    }
}
