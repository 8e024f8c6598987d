//! The tracer across processes: fork, daemonizing, exec, kill -9, SIGSTOP (its intervals
//! written late, as zeros), and a data directory that cannot be written.

mod tracer_util;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use culprit_tests::*;
use tracer_util::*;

fn file_name(p: &Proc) -> String {
    p.file.file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn forked_child_writes_its_own_file() {
    let tmp = TempDir::new("rt-fork");
    for (i, (opt, link)) in VARIANTS.into_iter().enumerate() {
        let exe = build(tmp.path(), "tracee.c", &format!("t{i}"), opt, link);
        let data = tmp.join(format!("d{i}"));
        let out = run(traced(&exe, link, &data, "n1").arg("fork"));
        assert_eq!(stdout(&out), "forked 1\n");
        let procs = load(&data.join("n1"));
        assert_eq!(procs.len(), 2, "{procs:#?}");
        let parent = procs
            .iter()
            .find(|p| !p.info.contains_key("forked_from"))
            .unwrap();
        let child = procs
            .iter()
            .find(|p| p.info.contains_key("forked_from"))
            .unwrap();
        assert_eq!(child.info["forked_from"], file_name(parent));
        assert_ne!(child.pid(), parent.pid());
        assert_eq!(child.info["ppid"], parent.pid().to_string());
        for p in [parent, child] {
            assert_well_formed(p);
        }
        // Each process reports its own calls only; the child starts from zero.
        assert_eq!(child.func("child_work").calls, 1, "{opt} {link:?}");
        assert_eq!(child.func("tiny_leaf").calls, 1000);
        assert_eq!(child.func("parent_work").calls, 0);
        assert_eq!(child.func("main").calls, 0, "the child exits inside main");
        assert_eq!(parent.func("parent_work").calls, 1);
        assert_eq!(parent.func("tiny_leaf").calls, 2000);
        assert_eq!(parent.func("child_work").calls, 0);
        assert_eq!(parent.func("main").calls, 1);
    }
}

/// Waits until `path` holds a pid whose process has exited.
fn wait_for_daemon(path: &Path) -> u32 {
    let t0 = Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
        {
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return pid;
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "daemon did not finish"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn double_fork_daemon_keeps_being_traced() {
    let tmp = TempDir::new("rt-daemon");
    for (i, (opt, link)) in [("-O0", Link::Preload), ("-O2", Link::Linked)]
        .into_iter()
        .enumerate()
    {
        let exe = build(tmp.path(), "tracee.c", &format!("t{i}"), opt, link);
        // A relative CULPRIT_DIR: the daemon chdir("/")s, the runtime made it absolute.
        let data = format!("d{i}");
        let pidfile = tmp.join(format!("pid{i}"));
        let out = run(traced(&exe, link, Path::new(&data), "n1")
            .current_dir(tmp.path())
            .arg("daemon")
            .arg(&pidfile));
        assert_eq!(stdout(&out), "daemonized\n");
        let pid = wait_for_daemon(&pidfile);
        let procs = load(&tmp.join(&data).join("n1"));
        let d = procs
            .iter()
            .find(|p| p.pid() == pid)
            .unwrap_or_else(|| panic!("no file for daemon {pid}: {procs:#?}"));
        assert_well_formed(d);
        assert_eq!(d.func("daemon_work").calls, 1, "{opt} {link:?}");
        assert_eq!(d.func("tiny_leaf").calls, 3000);
        assert!(d.info.contains_key("forked_from"));
    }
}

#[test]
fn exec_starts_clean_in_a_new_file() {
    let tmp = TempDir::new("rt-exec");
    for (i, (opt, link)) in [("-O0", Link::Preload), ("-O2", Link::Linked)]
        .into_iter()
        .enumerate()
    {
        let exe = build(tmp.path(), "tracee.c", &format!("t{i}"), opt, link);
        let data = tmp.join(format!("d{i}"));
        let out = run(traced(&exe, link, &data, "n1").args(["exec", "12"]));
        assert_eq!(stdout(&out), "fib(12)=144\n");
        let procs = load(&data.join("n1"));
        assert_eq!(procs.len(), 2, "{procs:#?}");
        let new = procs
            .iter()
            .find(|p| p.info.contains_key("exec_from"))
            .unwrap();
        let old = procs
            .iter()
            .find(|p| !p.info.contains_key("exec_from"))
            .unwrap();
        assert_eq!(new.info["exec_from"], file_name(old));
        assert_eq!(new.pid(), old.pid());
        assert_eq!(new.info["proc_start_ns"], old.info["proc_start_ns"]);
        assert_well_formed(new);
        // The new image counts only its own calls.
        assert_eq!(new.func("fib").calls, fib_calls(12));
        assert_eq!(new.func("tiny_leaf").calls, 0);
        assert_eq!(new.func("main").calls, 1);
        // exec runs no exit handler: the old image's file has no end marker, and the
        // interval in progress at exec is lost (as after kill -9).
        assert!(!old.ended);
        assert_contiguous(old);
        // culprit report tells the exec'd image from a killed one.
        let rep = run_ok(culprit().args(["report", "--json"]).arg(&data));
        let v = stdout_json(&rep);
        let statuses: Vec<&str> = v["nodes"][0]["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["status"].as_str().unwrap())
            .collect();
        assert_eq!(statuses, ["exec", "ended"], "{v}");
    }
}

#[test]
fn kill_9_keeps_the_completed_intervals() {
    let tmp = TempDir::new("rt-kill");
    let exe = build(tmp.path(), "tracee.c", "t", "-O2", Link::Preload);
    let data = tmp.join("d");
    let mut child = traced(&exe, Link::Preload, &data, "n1")
        .args(["run", "20000"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(3300));
    child.kill().unwrap();
    child.wait().unwrap();
    let p = load_one(&data.join("n1"));
    assert!(!p.ended && !p.end_record);
    assert_contiguous(&p);
    // At least two whole seconds after the first (partial) one, each with its calls.
    let whole: Vec<_> = p.intervals.iter().filter(|i| i.flags == 0).collect();
    assert!(whole.len() >= 2, "{:#?}", p.intervals);
    for iv in &whole {
        assert!(iv.calls >= 1000, "{iv:?}");
        assert_eq!(iv.dur_ns, 1_000_000_000);
    }
    assert_eq!(p.intervals[0].flags, 2, "first interval is partial");
}

#[test]
fn stopped_process_writes_its_stopped_intervals_as_zeros() {
    // A process stopped with SIGSTOP made no call while stopped: its flusher writes those
    // intervals when it resumes, late, as real (zero) intervals — not MISSED — and says how
    // late it woke (Wakeups records: the pause detection reads them).
    let tmp = TempDir::new("rt-stop");
    let exe = build(tmp.path(), "tracee.c", "t", "-O2", Link::Preload);
    let data = tmp.join("d");
    let child = traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_INTERVAL_MS", "100")
        .args(["run", "1500"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id() as i32;
    std::thread::sleep(Duration::from_millis(400));
    // SAFETY: signals a child process we spawned and still own (not yet waited for).
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(700));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let p = load_one(&data.join("n1"));
    assert_well_formed(&p);
    assert!(
        p.intervals
            .iter()
            .all(|i| i.flags & 1 == 0 && i.dropped == 0),
        "{:#?}",
        p.intervals
    );
    // 150 rounds of 1000 calls, every one of them placed.
    assert_eq!(p.func("tiny_leaf").calls, 150_000);
    // The stop: at least four whole intervals in a row without a call.
    let longest_idle = p
        .intervals
        .split(|i| i.calls > 0)
        .map(|run| run.iter().filter(|i| i.flags == 0).count())
        .max()
        .unwrap_or(0);
    assert!(longest_idle >= 4, "{:#?}", p.intervals);
    // The flusher's late wake-up is recorded.
    let bytes = std::fs::read(&p.file).unwrap();
    let f = culprit_format::ParsedFile::parse(&bytes).unwrap();
    let max_late = f
        .records()
        .filter_map(|r| match r {
            Ok(culprit_format::Record::Wakeups(w)) => Some(w.max_late_ns.max(w.written_late_ns)),
            _ => None,
        })
        .max()
        .unwrap_or(0);
    assert!(max_late >= 400_000_000, "late by {max_late} ns");
}

#[test]
fn unwritable_data_dir_runs_untraced_with_one_line() {
    let tmp = TempDir::new("rt-unwritable");
    for (i, (opt, link)) in [("-O0", Link::Preload), ("-O2", Link::Linked)]
        .into_iter()
        .enumerate()
    {
        let exe = build(tmp.path(), "tracee.c", &format!("t{i}"), opt, link);
        let bare = run(std::process::Command::new(&exe)
            .env("CULPRIT_DIR", tmp.join("bare"))
            .args(["fib", "18"]));
        let out = run(
            traced(&exe, link, Path::new("/proc/culprit-cannot-exist"), "n1").args(["fib", "18"]),
        );
        assert_eq!(out.stdout, bare.stdout);
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.starts_with("culprit: "), "{err}");
        assert!(err.contains("/proc/culprit-cannot-exist"), "{err}");
    }
}

#[test]
fn uninstrumented_program_is_left_alone() {
    let tmp = TempDir::new("rt-plain");
    let data = tmp.join("d");
    let out = run(std::process::Command::new("/bin/echo")
        .arg("hi")
        .env("CULPRIT_DIR", &data)
        .env("LD_PRELOAD", runtime_lib()));
    assert_eq!(stdout(&out), "hi\n");
    assert_eq!(stderr(&out), "");
    assert!(!data.exists(), "no data for a program that calls no hook");
}
