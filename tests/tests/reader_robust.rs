//! `culprit report` and `culprit diagnose` on the data directories users really have: junk
//! next to the data, files being created, corrupt headers, output into a closed pipe. Each
//! must give at most a warning line and go on — never hang, abort or panic. The data is
//! written by the real runtime (tests/c/tracee.c, LD_PRELOAD).

mod tracer_util;

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use culprit_tests::*;
use tracer_util::*;

/// A data root with node `n1` holding one real trace file; returns (root, the file).
fn real_data(tmp: &TempDir) -> (PathBuf, PathBuf) {
    let exe = build(tmp.path(), "tracee.c", "tracee", "-O2", Link::Preload);
    let data = tmp.join("data");
    run(traced(&exe, Link::Preload, &data, "n1").args(["fib", "15"]));
    let file = std::fs::read_dir(data.join("n1"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "cul"))
        .expect("a trace file");
    (data, file)
}

/// Runs `cmd` to completion, killing it (and failing) after `limit`.
fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child: Child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let t0 = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish in {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn fib_calls_in(report: &Output) -> u64 {
    let json: serde_json::Value = serde_json::from_slice(&report.stdout).expect("JSON");
    json["nodes"][0]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["functions"].as_array().unwrap().iter())
        .filter(|f| f["function"] == "fib")
        .map(|f| f["calls"].as_u64().unwrap())
        .sum()
}

#[test]
fn a_fifo_named_like_a_data_file_is_skipped_not_waited_on() {
    let tmp = TempDir::new("rd-fifo");
    let (data, _) = real_data(&tmp);
    let fifo = data.join("n1").join("trace-1-1.cul");
    run_ok(Command::new("mkfifo").arg(&fifo));
    let o = output_within(
        culprit().arg("report").arg("--json").arg(&data),
        Duration::from_secs(20),
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("not a regular file"),
        "{}",
        text(&o.stderr)
    );
    assert_eq!(fib_calls_in(&o), fib_calls(15));
}

#[test]
fn a_corrupt_committed_end_is_not_allocated() {
    let tmp = TempDir::new("rd-huge");
    let (data, file) = real_data(&tmp);
    // A second copy of the file whose header claims a petabyte of records.
    let bad = file.with_file_name("trace-2-2.cul");
    let mut bytes = std::fs::read(&file).unwrap();
    let at = culprit_format::HEADER_COMMITTED_END_OFFSET;
    bytes[at..at + 8].copy_from_slice(&(1u64 << 50).to_le_bytes());
    std::fs::write(&bad, bytes).unwrap();
    for verb in ["report", "diagnose"] {
        let o = output_within(culprit().arg(verb).arg(&data), Duration::from_secs(30));
        let err = text(&o.stderr);
        assert!(
            matches!(o.status.code(), Some(0..=2)),
            "{verb}: {:?}\n{err}",
            o.status
        );
        assert!(
            !err.contains("panicked") && !err.contains("memory allocation"),
            "{err}"
        );
    }
    let o = run_ok(culprit().arg("report").arg("--json").arg(&data));
    assert!(text(&o.stderr).contains("cut short"), "{}", text(&o.stderr));
    // The good file is whole, the bad copy's records are all there too.
    assert_eq!(fib_calls_in(&o), 2 * fib_calls(15));
}

#[test]
fn a_file_being_created_is_read_later_without_a_warning() {
    let tmp = TempDir::new("rd-new");
    let (data, _) = real_data(&tmp);
    let node = data.join("n1");
    // What a writer leaves for a moment: the file exists, its header is not written yet.
    std::fs::write(node.join("trace-3-3.cul"), vec![0u8; 4096]).unwrap();
    let o = run_ok(culprit().arg("report").arg(&data));
    assert!(
        !text(&o.stderr).contains("trace-3-3"),
        "{}",
        text(&o.stderr)
    );
    // An old file like that is reported.
    let old = node.join("trace-4-4.cul");
    std::fs::write(&old, vec![0u8; 4096]).unwrap();
    let f = std::fs::File::options().write(true).open(&old).unwrap();
    f.set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    let o = run_ok(culprit().arg("report").arg(&data));
    assert!(text(&o.stderr).contains("trace-4-4"), "{}", text(&o.stderr));
}

/// Runs `culprit ARGS` with its stdout a pipe whose reader is already gone.
fn into_closed_pipe(args: &[&std::ffi::OsStr]) -> Output {
    let mut child = culprit()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    drop(child.stdout.take());
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    Output {
        status,
        stdout: Vec::new(),
        stderr: err.into_bytes(),
    }
}

#[test]
fn json_into_a_closed_pipe_is_not_an_error() {
    let tmp = TempDir::new("rd-pipe");
    let (data, _) = real_data(&tmp);
    let d: &Path = &data;
    for args in [
        vec!["report".as_ref(), "--json".as_ref(), d.as_os_str()],
        vec!["report".as_ref(), d.as_os_str()],
    ] {
        let o = into_closed_pipe(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o.stderr));
        assert!(
            !text(&o.stderr).contains("error"),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
}

#[test]
fn diagnose_says_when_windows_are_too_short_to_keep_any_function() {
    let tmp = TempDir::new("rd-nokept");
    let exe = build(tmp.path(), "robust.c", "robust", "-O2", Link::Preload);
    let data = tmp.join("data");
    let nodes: Vec<_> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| {
            traced(&exe, Link::Preload, &data, n)
                .env("CULPRIT_INTERVAL_MS", "100")
                .args(["busy", "1200"])
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for mut c in nodes {
        assert!(c.wait().unwrap().success());
    }
    let diagnose = |extra: &[&str]| {
        let o = culprit()
            .arg("diagnose")
            .arg(&data)
            .args(["--win-size", "200ms", "--win-shift", "100ms", "--k", "1"])
            .args(extra)
            .output()
            .expect("run culprit diagnose");
        // 0: nothing flagged, 1: a node flagged (peers on a shared machine are noisy).
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "{:?}\n{}",
            o.status,
            text(&o.stderr)
        );
        text(&o.stdout)
    };
    // Nothing reaches the default --min-time (1 s) in a 200 ms window.
    let out = diagnose(&[]);
    assert!(
        out.contains("time: no function reached 1 s of self time") && out.contains("--min-time"),
        "{out}"
    );
    let out = diagnose(&["--min-time", "1ms"]);
    assert!(!out.contains("no function reached"), "{out}");
}
