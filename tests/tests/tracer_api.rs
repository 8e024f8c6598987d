//! The runtime's C API (include/culprit.h, compiled into a real program) and `culprit record`.

mod tracer_util;

use std::process::{Command, Stdio};
use std::time::Duration;

use culprit_tests::*;
use tracer_util::*;

#[test]
fn c_api_from_the_header() {
    let tmp = TempDir::new("rt-api");
    let rt = runtime_lib();
    let rt_dir = rt.parent().unwrap();
    for opt in ["-O0", "-O2"] {
        let exe = tmp.join(format!("api{opt}"));
        run_ok(
            Command::new("gcc")
                .args([
                    opt,
                    "-Wall",
                    "-Wextra",
                    "-Werror",
                    "-finstrument-functions",
                    "-I",
                ])
                .arg(include_dir())
                .arg("-o")
                .arg(&exe)
                .arg(c_source("api.c"))
                .arg("-L")
                .arg(rt_dir)
                .arg("-lculprit_rt")
                .arg(format!("-Wl,-rpath,{}", rt_dir.display())),
        );
        let data = tmp.join(format!("d{opt}"));
        let out = run(&mut traced(&exe, Link::Linked, &data, "api-node1"));
        let version = env!("CARGO_PKG_VERSION");
        assert_eq!(
            stdout(&out),
            format!(
                "version {version} 1\nactive 1\nresume-unpaused -2\npause 0\nresume 0\n\
                 flush 0\nbad-node -2 -2\nset-node 0\n"
            )
        );
        assert_eq!(stderr(&out), "");
        let first = load_one(&data.join("api-node1"));
        assert_contiguous(&first);
        assert!(first.ended && first.end_record);
        assert_eq!(first.func("counted").calls, 10);
        assert!(
            !first.functions.contains_key("while_paused"),
            "{:#?}",
            first.functions
        );
        assert!(!first.functions.contains_key("never_traced"));
        assert_eq!(first.func("main").calls, 0);
        // culprit_flush and culprit_set_node each wrote a partial record of the interval.
        assert!(first.intervals.len() >= 2 && first.intervals.iter().all(|i| i.flags & 2 != 0));
        let second = load_one(&data.join("api-node2"));
        assert_well_formed(&second);
        assert_eq!(second.info["node"], "api-node2");
        let from = &second.info["node_changed_from"];
        assert!(
            from.starts_with("api-node1/") && first.file.ends_with(&from["api-node1/".len()..]),
            "{from}"
        );
        assert_eq!(second.func("on_new_node").calls, 3);
        assert_eq!(second.func("main").calls, 1);
        assert_eq!(second.func("counted").calls, 0);
    }
}

#[test]
fn record_runs_the_program_with_the_runtime() {
    let tmp = TempDir::new("rt-record");
    let exe = build(tmp.path(), "tracee.c", "tracee", "-O2", Link::Preload);
    let data = tmp.join("data");
    let out = run(culprit()
        .args(["record", "-o"])
        .arg(&data)
        .args([
            "--node",
            "rec1",
            "--interval",
            "500",
            "--exclude",
            "tiny_leaf",
            "--",
        ])
        .arg(&exe)
        .args(["leaf", "1000"]));
    assert_eq!(stdout(&out), "leaf 1000\n");
    let err = stderr(&out);
    assert!(
        err.contains("1 trace file written to") && err.contains("rec1"),
        "{err}"
    );
    let p = load_one(&data.join("rec1"));
    assert_well_formed(&p);
    assert_eq!(p.info["interval_ns"], "500000000");
    assert_eq!(p.func("leaf_loop").calls, 1);
    assert!(!p.functions.contains_key("tiny_leaf"));

    // The program's exit status comes back.
    let st = culprit()
        .args(["record", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&exe)
        .arg("no-such-mode")
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(2));

    // A bad node name is refused before anything runs.
    let o = culprit()
        .args(["record", "--node", "a/b", "--"])
        .arg(&exe)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).starts_with("culprit: error: --node"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn record_forwards_sigterm_and_reports_the_signal() {
    let tmp = TempDir::new("rt-record-term");
    let exe = build(tmp.path(), "tracee.c", "tracee", "-O0", Link::Preload);
    let data = tmp.join("data");
    let child = culprit()
        .args(["record", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&exe)
        .args(["run", "20000"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    // SAFETY: signals the culprit process we spawned and have not waited for yet.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(128 + libc::SIGTERM),
        "{}",
        stderr(&out)
    );
    // The program died of the signal: its completed intervals are there, without an end.
    let p = load_one(
        &data.join(
            std::fs::read_dir(&data)
                .unwrap()
                .next()
                .unwrap()
                .unwrap()
                .file_name(),
        ),
    );
    assert!(!p.ended);
    assert!(p.func("tiny_leaf").calls >= 1000, "{:#?}", p.intervals);
}

#[test]
fn record_warns_about_an_uninstrumented_program() {
    let tmp = TempDir::new("rt-record-plain");
    let o = run(culprit()
        .args(["record", "-o"])
        .arg(tmp.join("d"))
        .args(["--", "true"]));
    let err = stderr(&o);
    assert!(
        err.contains("culprit: warning:") && err.contains("-finstrument-functions"),
        "{err}"
    );
    assert_eq!(stdout(&o), "");
}

/// In a shared data root, `record`'s closing line counts only the files of its own run: not a
/// file another writer (here: a later command of the same shell, under node `other`) adds to
/// the root meanwhile, nor files there from before.
#[test]
fn record_counts_only_its_own_files() {
    let tmp = TempDir::new("rt-record-shared");
    let exe = build(tmp.path(), "tracee.c", "tracee", "-O2", Link::Preload);
    let data = tmp.join("data");
    std::fs::create_dir_all(data.join("old")).unwrap();
    std::fs::write(data.join("old/trace-7-1.cul"), b"").unwrap();
    let out = run(culprit()
        .args(["record", "-o"])
        .arg(&data)
        .args(["--node", "rec2", "--", "sh", "-c"])
        .arg(r#""$0" leaf 10 && mkdir -p "$1/other" && : > "$1/other/trace-99-1.cul""#)
        .arg(&exe)
        .arg(&data));
    let err = stderr(&out);
    let mine = std::fs::read_dir(data.join("rec2"))
        .unwrap()
        .flatten()
        .filter(|f| f.file_name().to_string_lossy().starts_with("trace-"))
        .count();
    assert!(mine >= 1, "{err}");
    let plural = if mine == 1 { "" } else { "s" };
    assert!(
        err.contains(&format!("culprit: {mine} trace file{plural} written to ")),
        "{mine} own files: {err}"
    );
    assert!(!err.contains("other") && !err.contains("old"), "{err}");
}
