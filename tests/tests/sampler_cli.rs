//! `culprit sample` as a command: scope restriction, --duration, intervals it could not observe,
//! the no-permission error, bad flags. Budget: ~8 s (each run is 1-4 s).

mod sampler_util;

use std::collections::HashMap;
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use culprit_format::{end_reason, interval_flags};
use culprit_tests::*;
use sampler_util::*;

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn without_permission_one_error_names_the_sysctl_and_the_capability() {
    if !require(
        is_root(),
        "root (to run the sampler as an unprivileged user)",
    ) {
        return;
    }
    // kernel.perf_event_paranoid < 1 lets every user sample: raised for the test.
    let _paranoid = refuse_unprivileged_sampling().expect("root sets kernel.perf_event_paranoid");
    let dir = TempDir::new("smp-noperm");
    let bin = binary_for_nobody(&dir);
    let data = dir.join("data");
    std::fs::create_dir(&data).unwrap();
    // Writable by `nobody`, so that only perf_event_open can fail.
    run_ok(Command::new("chmod").arg("777").arg(&data));
    let o = as_nobody(&bin)
        .args(["sample", "--duration", "1s", "-o"])
        .arg(&data)
        .output()
        .expect("run setpriv");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "stderr:\n{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "one line:\n{err}");
    for needle in [
        "culprit: error:",
        "kernel.perf_event_paranoid",
        "CAP_PERFMON",
        "CAP_SYS_ADMIN",
    ] {
        assert!(err.contains(needle), "{needle:?} missing from:\n{err}");
    }
    // Nothing was written.
    assert_eq!(std::fs::read_dir(&data).unwrap().count(), 0);
}

/// A copy of the culprit binary that `nobody` can run (the checkout may be in a private home).
fn binary_for_nobody(dir: &TempDir) -> std::path::PathBuf {
    run_ok(Command::new("chmod").arg("755").arg(dir.path()));
    let bin = dir.join("culprit");
    std::fs::copy(culprit_bin(), &bin).unwrap();
    run_ok(Command::new("chmod").arg("755").arg(&bin));
    bin
}

/// `bin` run as user and group 65534 without capabilities.
fn as_nobody(bin: &std::path::Path) -> Command {
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
    ])
    .arg(bin);
    c
}

#[test]
fn bad_flags_are_one_clear_error() {
    for (args, needle) in [
        (&["--event", "bogus"][..], "known events: cycles"),
        (&["--node-pid", "n1=abc"][..], "is not a process id"),
        (&["--node-addr", "n1"][..], "takes NODE=VALUE"),
        (&["--node-addr", "n1=1.2.3"][..], "is not an IP address"),
        (&["--interval", "5 parsecs"][..], "unknown duration unit"),
        (
            &["--node", "_x", "--duration", "1s"][..],
            "not a valid node name",
        ),
        (&["--pid", "999999999"][..], "no such process"),
        (&["--ring-pages", "3"][..], "power of two"),
    ] {
        let dir = TempDir::new("smp-badflags");
        let o = culprit()
            .arg("sample")
            .arg("-o")
            .arg(dir.path())
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {needle:?} not in:\n{err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn pid_scope_keeps_one_process_tree_and_duration_ends_the_run() {
    if !require(can_sample(), "root or kernel.perf_event_paranoid=-1") {
        return;
    }
    let progs = build_programs();
    let _lock = machine_lock();
    let script = format!(
        "read go; exec {} 15 {} 2000000",
        progs.path("smp_spawn").display(),
        progs.path("smp_short").display()
    );
    let mut tree = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let data = TempDir::new("smp-pid");
    let pid = tree.id().to_string();
    let mut sampler = SamplerProc::start(
        data.path(),
        &[
            "--node",
            "pidnode",
            "--pid",
            &pid,
            "--interval",
            "500ms",
            "--duration",
            "2s",
            "--event",
            "cpu-clock",
            "--period",
            "250000",
        ],
        "pidnode",
    );
    // Outside the tree: must not show.
    let mut outsider = Command::new(progs.path("smp_ratio"))
        .arg("150")
        .spawn()
        .unwrap();
    tree.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(tree.wait().unwrap().success());
    assert!(outsider.wait().unwrap().success());
    let (code, err) = sampler.wait();
    assert_eq!(code, 0, "{err}");
    let run = read_node(data.path(), "pidnode");
    assert_well_formed(&run, 500_000_000);
    assert_eq!(
        run.end_reason,
        Some(end_reason::DONE),
        "--duration ends with DONE"
    );
    assert_eq!(run.info.get("scope"), Some(&format!("pid:{pid}")));
    let programs: std::collections::BTreeSet<String> =
        run.totals().keys().map(|(p, _, _)| p.clone()).collect();
    assert!(
        run.program_total("smp_short") > 20,
        "the tree's children are sampled: {programs:?}"
    );
    for p in &programs {
        assert!(
            ["sh", "smp_spawn", "smp_short"].contains(&p.as_str()),
            "{p} is outside the --pid tree: {programs:?}"
        );
    }
    // 2 s of 500 ms intervals: 4 or 5 records.
    assert!(
        (4..=5).contains(&run.intervals.len()),
        "{}",
        run.intervals.len()
    );
}

/// Issue 31: `--node-pid NODE=FILE` lets the sampler start before the server (as
/// `--delayacct` wants): the pid file does not exist when it starts; a server that forked a
/// worker and then wrote its pid file joins the node, worker included, with its samples and
/// its OS metrics; a process outside that tree does not.
#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn a_pid_file_that_appears_later_names_its_tree() {
    if !require(can_sample(), "root or kernel.perf_event_paranoid=-1") {
        return;
    }
    let progs = build_programs();
    let _lock = machine_lock();
    let data = TempDir::new("smp-pidfile");
    let pid_file = data.join("run").join("srv.pid");
    std::fs::create_dir_all(pid_file.parent().unwrap()).unwrap();
    let rule = format!("srv={}", pid_file.display());
    let sampler = SamplerProc::start(
        data.path(),
        &[
            "--node-pid",
            &rule,
            "--delayacct",
            "--interval",
            "500ms",
            "--event",
            "cpu-clock",
            "--tracepoints",
            "none",
        ],
        "_unassigned",
    );
    std::thread::sleep(Duration::from_millis(600));
    // The server: a worker forked first, then the pid file (written whole, then renamed).
    // The sampler reads pid files every 500 ms, so what runs before that is unassigned: the
    // worker and the server run long enough (≥ 1 s unloaded) to be seen after it.
    let script = format!(
        "{} 4000 & echo $$ > {f}.tmp && mv {f}.tmp {f} && exec {} 2000",
        progs.path("smp_libuser").display(),
        progs.path("smp_ratio").display(),
        f = pid_file.display()
    );
    let mut server = Command::new("sh").args(["-c", &script]).spawn().unwrap();
    let mut outsider = Command::new(progs.path("smp_strip"))
        .arg("800")
        .spawn()
        .unwrap();
    assert!(server.wait().unwrap().success());
    assert!(outsider.wait().unwrap().success());
    // The worker may outlive the server's own work.
    std::thread::sleep(Duration::from_millis(300));
    let (code, err) = sampler.stop();
    assert_eq!(code, 0, "{err}");
    let run = read_node(data.path(), "srv");
    let programs: std::collections::BTreeSet<String> =
        run.totals().keys().map(|(p, _, _)| p.clone()).collect();
    assert!(run.program_total("smp_ratio") > 100, "{programs:?}\n{err}");
    assert!(
        run.program_total("smp_libuser") > 100,
        "the worker forked before the pid file joins too: {programs:?}"
    );
    assert!(!programs.contains("smp_strip"), "{programs:?}");
    // Its OS metrics count its processes (both, once the file was read).
    let v = stdout_json(&run_ok(
        culprit()
            .args(["report", "--json", "--node", "srv", "--only", "os"])
            .arg(data.path()),
    ));
    let procs = v["nodes"][0]["os"]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "proc.procs")
        .cloned()
        .unwrap_or_default();
    assert!(procs["max"].as_f64().unwrap_or(0.0) >= 2.0, "{procs}\n{v}");
}

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn intervals_the_sampler_could_not_observe_are_flagged_missed() {
    if !require(can_sample(), "root or kernel.perf_event_paranoid=-1") {
        return;
    }
    let progs = build_programs();
    let _lock = machine_lock();
    let data = TempDir::new("smp-missed");
    // A one-page ring overflows within milliseconds while the sampler is stopped.
    let sampler = SamplerProc::start(
        data.path(),
        &[
            "--node",
            "mnode",
            "--interval",
            "500ms",
            "--event",
            "cpu-clock",
            "--period",
            "100000",
            "--ring-pages",
            "1",
            "--tracepoints",
            "none",
        ],
        "mnode",
    );
    let mut burner = Command::new(progs.path("smp_ratio"))
        .arg("100000")
        .spawn()
        .unwrap();
    let pid = sampler.child.id().to_string();
    std::thread::sleep(Duration::from_millis(700));
    run_ok(Command::new("kill").args(["-STOP", &pid]));
    std::thread::sleep(Duration::from_millis(1600));
    run_ok(Command::new("kill").args(["-CONT", &pid]));
    std::thread::sleep(Duration::from_millis(700));
    let (code, err) = sampler.stop();
    let _ = burner.kill();
    let _ = burner.wait();
    assert_eq!(code, 0, "{err}");
    let run = read_node(data.path(), "mnode");
    assert_well_formed(&run, 500_000_000);
    let missed: Vec<&Interval> = run
        .intervals
        .iter()
        .filter(|i| i.flags & interval_flags::MISSED != 0)
        .collect();
    assert!(
        !missed.is_empty(),
        "a 1.6 s stop covers a whole 500 ms interval: {:?}",
        run.intervals.iter().map(|i| i.flags).collect::<Vec<_>>()
    );
    for m in &missed {
        assert!(
            m.entries.is_empty() && m.total == 0,
            "a missed interval has no entries"
        );
    }
    // Intervals before the stop were observed.
    assert_eq!(run.intervals[0].flags & interval_flags::MISSED, 0);
    let lost: u64 = run.intervals.iter().map(|i| i.lost).sum();
    assert!(lost > 0, "the overflow is counted as lost samples");
}

#[test]
fn doctor_reports_every_check_with_what_to_do() {
    let o = culprit().args(["doctor", "--json"]).output().unwrap();
    let v = stdout_json(&o);
    assert_eq!(v["schema"], "culprit-doctor/1");
    let checks = v["checks"].as_array().expect("checks");
    let names: Vec<&str> = checks.iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "perf_access",
            "hardware_events",
            "tracefs",
            "kallsyms",
            "namespaces",
            "nftables",
            "cgroups",
            "delay_accounting",
            "uftrace"
        ]
    );
    for c in checks {
        assert!(!c["detail"].as_str().unwrap().is_empty());
        // A failed check says what to do.
        assert!(c["ok"].as_bool().unwrap() || c["fix"].as_str().is_some_and(|f| !f.is_empty()));
    }
    let perf_ok = checks[0]["ok"].as_bool().unwrap();
    assert_eq!(o.status.code(), Some(if perf_ok { 0 } else { 1 }));
    if is_root() {
        assert!(perf_ok, "root may sample: {}", checks[0]);
        assert_eq!(checks[3]["ok"], true, "root sees kallsyms addresses");
        // The text form: one line per check, OK or MISSING first.
        let o = culprit().arg("doctor").output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(text.lines().count(), names.len(), "{text}");
        assert!(text
            .lines()
            .all(|l| l.starts_with("OK ") || l.starts_with("MISSING ")));
        if let Some(_paranoid) = refuse_unprivileged_sampling() {
            let dir = TempDir::new("smp-doctor");
            let o = as_nobody(&binary_for_nobody(&dir))
                .args(["doctor", "--json"])
                .output()
                .unwrap();
            let v = stdout_json(&o);
            assert_eq!(o.status.code(), Some(1));
            assert_eq!(v["checks"][0]["ok"], false);
            let fix = v["checks"][0]["fix"].as_str().unwrap();
            assert!(fix.contains("CAP_PERFMON") && fix.contains("kernel.perf_event_paranoid"));
        }
    }
}

/// Strips GCC clone suffixes (`.constprop.0`, `.isra.0`, `.part.0`, `.cold`), which perf
/// keeps and blazesym drops for user-space symbols.
fn base_symbol(s: &str) -> String {
    let mut s = s.to_string();
    for marker in [".constprop.", ".isra.", ".part.", ".cold"] {
        if let Some(i) = s.find(marker) {
            s.truncate(i);
        }
    }
    s
}

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn replaying_a_perf_recording_gives_the_counts_perf_report_gives() {
    if !require(is_root(), "root (perf record with kernel samples)") {
        return;
    }
    let progs = build_programs();
    let dir = TempDir::new("smp-replay");
    let data = dir.join("perf.data");
    run_ok(
        Command::new("perf")
            .args(["record", "-q", "-e", "cpu-clock", "-c", "250000", "-o"])
            .arg(&data)
            .arg("--")
            .arg(progs.path("smp_ratio"))
            .arg("300"),
    );
    let out = dir.join("out");
    run_ok(
        culprit()
            .args([
                "sample",
                "-q",
                "--node",
                "r",
                "--interval",
                "1s",
                "--replay",
            ])
            .arg(&data)
            .arg("-o")
            .arg(&out),
    );
    let ours = read_node(&out, "r").totals();
    let o = run_ok(
        Command::new("perf")
            .args([
                "report",
                "--stdio",
                "--sort",
                "comm,dso,sym",
                "-F",
                "sample,comm,dso,sym",
            ])
            .args(["--field-separator", "|", "-i"])
            .arg(&data),
    );
    let mut theirs: HashMap<(String, String, String), u64> = HashMap::new();
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let f: Vec<&str> = line.split('|').map(str::trim).collect();
        if line.starts_with('#') || f.len() != 4 {
            continue;
        }
        let sym = f[3].split_once("] ").map_or(f[3], |(_, s)| s);
        let key = (f[1].to_string(), f[2].to_string(), base_symbol(sym));
        *theirs.entry(key).or_insert(0) += f[0].parse::<u64>().unwrap();
    }
    let mut ours_n: HashMap<(String, String, String), u64> = HashMap::new();
    for ((p, i, f), c) in ours {
        *ours_n.entry((p, i, base_symbol(&f))).or_insert(0) += c;
    }
    let key = |f: &str| {
        (
            "smp_ratio".to_string(),
            "smp_ratio".to_string(),
            f.to_string(),
        )
    };
    for f in ["burn_two", "burn_one"] {
        assert_eq!(
            ours_n.get(&key(f)),
            theirs.get(&key(f)),
            "{f}: ours vs perf report"
        );
    }
    let total: u64 = theirs.values().sum();
    let same: u64 = theirs
        .iter()
        .filter(|(k, v)| ours_n.get(*k) == Some(*v))
        .map(|(_, v)| v)
        .sum();
    assert!(
        same * 100 >= total * 95,
        "only {same} of {total} samples agree with perf report\nours: {ours_n:?}\nperf: {theirs:?}"
    );
}
