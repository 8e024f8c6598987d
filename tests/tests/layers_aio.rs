//! Seed 003's AIO case study (§4.2) end to end: a program keeps 16 O_DIRECT reads outstanding
//! on one descriptor (tests/c/aio_serial.c), through glibc's POSIX AIO on node n1 and through a
//! pool of 16 threads calling pread on n2 and n3, traced with `CULPRIT_IO=1` (layers `libc-aio`
//! and `libc`) and its own `request` layer, beside `culprit sample --layers` (layer `syscall`,
//! from the pread64 tracepoints of every thread, glibc's AIO helper included, and `block`, the
//! device requests the process queued). `culprit
//! report --layers` and `culprit diagnose` name libc-aio's serialisation on n1 — one read at a
//! time below it while 16 are outstanding in it — and nothing on the pool nodes.
//!
//! Without the sampler (unprivileged) the report still shows the program's and the runtime's
//! layers side by side, and names nothing: no layer lies below libc-aio.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use culprit_tests::*;

mod diagnose_util;
use diagnose_util::*;

fn build(dir: &Path) -> PathBuf {
    let rt = runtime_lib();
    let rt_dir = rt.parent().unwrap();
    let exe = dir.join("aio_serial");
    run_ok(
        Command::new("gcc")
            .args(["-O2", "-g", "-Wall", "-Wextra", "-Werror", "-I"])
            .arg(include_dir())
            .arg("-o")
            .arg(&exe)
            .arg(c_source("aio_serial.c"))
            .arg("-pthread")
            .arg("-L")
            .arg(rt_dir)
            .arg("-lculprit_rt")
            .arg(format!("-Wl,-rpath,{}", rt_dir.display())),
    );
    exe
}

/// Starts `mode` on `node` for `seconds`, reading `file`, once `go` exists.
fn start(exe: &Path, data: &Path, node: &str, mode: &str, file: &Path, go: &Path) -> Child {
    Command::new(exe)
        .arg(mode)
        .arg(file)
        .arg("5")
        .arg(go)
        .env_remove("LD_PRELOAD")
        .env("CULPRIT_DIR", data)
        .env("CULPRIT_NODE", node)
        .env("CULPRIT_IO", "1")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

fn finish(c: Child) -> String {
    let o = c.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{out}");
    assert!(out.contains(" done: "), "{out}");
    out
}

/// The report's layers of `node`'s one process, and its serialisations.
fn process<'a>(report: &'a serde_json::Value, node: &str) -> &'a serde_json::Value {
    let n = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == node)
        .unwrap_or_else(|| panic!("no node {node}: {report:#}"));
    let ps = n["processes"].as_array().unwrap();
    assert_eq!(ps.len(), 1, "{n:#}");
    &ps[0]
}

fn layer_names(p: &serde_json::Value) -> Vec<&str> {
    p["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["layer"].as_str().unwrap())
        .collect()
}

fn layers_json(data: &Path) -> serde_json::Value {
    stdout_json(&run_ok(
        culprit()
            .arg("report")
            .arg(data)
            .args(["--layers", "--json"]),
    ))
}

/// Every Layers record in the sampler's files of `node_dir` spans all of its events (a system
/// call's ISSUE, its entry, may precede the interval it ended in).
fn spans_cover_their_events(node_dir: &Path) {
    let mut events = 0;
    for entry in std::fs::read_dir(node_dir).unwrap().flatten() {
        if !entry.file_name().to_string_lossy().starts_with("samples-") {
            continue;
        }
        let bytes = std::fs::read(entry.path()).unwrap();
        let pf = culprit_format::ParsedFile::parse(&bytes).unwrap();
        for rec in pf.records() {
            if let culprit_format::Record::Layers(l) = rec.unwrap() {
                for e in l.events() {
                    events += 1;
                    assert!(
                        l.span_start_ns <= e.t_ns && e.t_ns <= l.span_end_ns,
                        "{e:?} outside {}..{}",
                        l.span_start_ns,
                        l.span_end_ns
                    );
                }
            }
        }
    }
    assert!(events > 0, "no layer events in {}", node_dir.display());
}

#[test]
fn without_the_sampler_the_layers_are_shown_and_nothing_is_named() {
    let dir = TempDir::new("layers-aio-rt");
    let exe = build(dir.path());
    let data = dir.join("data");
    let file = dir.join("file");
    let go = dir.join("go");
    std::fs::write(&go, "").unwrap();
    let out = finish(start(&exe, &data, "n1", "aio", &file, &go));
    let r = layers_json(&data);
    assert_eq!(r["schema"], "culprit-layers/1");
    let p = process(&r, "n1");
    // The program's layer on top; the runtime's AIO layer and the C library's (the file's
    // writes) at level 300.
    assert_eq!(layer_names(p), ["request", "libc-aio", "libc"], "{p:#}");
    let reads: u64 = out
        .split_whitespace()
        .find_map(|w| w.parse().ok())
        .expect("count of reads");
    for l in &p["layers"].as_array().unwrap()[..2] {
        assert_eq!(l["total"]["requests"], reads, "{l:#}");
        assert_eq!(l["total"]["bytes"], reads * 65536, "{l:#}");
        assert_eq!(l["total"]["max_concurrency"], 16, "{l:#}");
    }
    assert!(p["serialised"].as_array().unwrap().is_empty(), "{p:#}");
    assert!(p["dropped_events"].is_u64(), "{p:#}");
    let human = run_ok(culprit().arg("report").arg(&data).arg("--layers"));
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(text.contains("n1  pid "), "{text}");
    assert!(
        text.lines()
            .any(|l| l.trim_start().starts_with("layer") && l.contains("libc-aio")),
        "{text}"
    );
    assert!(!text.contains("SERIALISED"), "{text}");
}

/// Budget: 30–160 s (three programs writing 64 MiB, then reading side by side for 5 s, the
/// sampler, the analysis).
#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn glibc_aio_serialisation_is_named_from_the_syscall_tracepoints() {
    if !require(is_root(), "root, for the syscall tracepoints") {
        return;
    }
    let _machine = machine_lock();
    let dir = TempDir::new("layers-aio");
    let exe = build(dir.path());
    let data = dir.join("data");
    let go = dir.join("go");
    // Each node reads its own file (written before the reads start).
    let kids: Vec<(&str, Child)> = [("n1", "aio"), ("n2", "pool"), ("n3", "pool")]
        .into_iter()
        .map(|(n, mode)| {
            let file = dir.join(format!("{n}.file"));
            (n, start(&exe, &data, n, mode, &file, &go))
        })
        .collect();
    let mut sample = culprit();
    sample.arg("sample").arg("-o").arg(&data).args([
        "--layers",
        "--interval",
        "1s",
        "--duration",
        "60s",
        "--no-os-metrics",
        "--quiet",
    ]);
    for (n, c) in &kids {
        sample.arg("--node-pid").arg(format!("{n}={}", c.id()));
    }
    let mut sampler = sample.spawn().unwrap();
    // The reads start once the sampler writes its files (its tracepoints are on by then).
    let samples = data.join("n1");
    for _ in 0..300 {
        let ready = std::fs::read_dir(&samples).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("samples-"))
        });
        if ready {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&go, "").unwrap();
    // O_DIRECT reads reach the device (where the file system allows them).
    // Every program is waited for before any output is judged.
    let outs: Vec<String> = kids.into_iter().map(|(_, c)| finish(c)).collect();
    let direct = outs.iter().all(|out| out.contains("O_DIRECT"));
    run_ok(Command::new("kill").args(["-INT", &sampler.id().to_string()]));
    assert!(sampler.wait().unwrap().success());
    for n in ["n1", "n2", "n3"] {
        let _ = std::fs::remove_file(dir.join(format!("{n}.file")));
    }

    for n in ["n1", "n2", "n3"] {
        spans_cover_their_events(&data.join(n));
    }
    let r = layers_json(&data);
    let aio = process(&r, "n1");
    let above_block = |p: &serde_json::Value| {
        let mut names: Vec<String> = layer_names(p).into_iter().map(String::from).collect();
        if direct {
            assert_eq!(names.pop().as_deref(), Some("block"), "{p:#}");
        }
        names
    };
    assert_eq!(above_block(aio), ["request", "libc-aio", "libc", "syscall"]);
    let s = aio["serialised"].as_array().unwrap();
    assert_eq!(s.len(), 1, "{aio:#}");
    assert_eq!(
        (&s[0]["layer"], &s[0]["below"]),
        (&"libc-aio".into(), &"syscall".into())
    );
    assert!(s[0]["outstanding"].as_f64().unwrap() >= 4.0, "{s:#?}");
    assert!(s[0]["below_concurrency"].as_f64().unwrap() <= 1.5, "{s:#?}");
    for n in ["n2", "n3"] {
        let pool = process(&r, n);
        assert_eq!(
            above_block(pool),
            ["request", "libc", "syscall"],
            "{pool:#}"
        );
        assert!(
            pool["serialised"].as_array().unwrap().is_empty(),
            "{pool:#}"
        );
        // The pool's reads overlap below the C library too.
        let sys = &pool["layers"][2];
        assert!(sys["busy_concurrency"].as_f64().unwrap() > 4.0, "{sys:#}");
    }
    let human = run_ok(culprit().arg("report").arg(&data).arg("--layers"));
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("SERIALISED: libc-aio serialises: 1.0 outstanding in syscall below it"),
        "{text}"
    );

    let win = ["--win-size", "2s", "--win-shift", "1s"];
    let (_, d) = diagnose_json(&[&[data.to_str().unwrap()][..], &win].concat());
    assert_eq!(d.serialised.len(), 1, "{:#?}", d.serialised);
    assert_eq!(
        (
            d.serialised[0].node.as_str(),
            d.serialised[0].layer.as_str()
        ),
        ("n1", "libc-aio")
    );
    let o = culprit()
        .arg("diagnose")
        .arg(&data)
        .args(win)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.lines()
            .any(|l| l.starts_with("I/O LAYERS: n1 pid ") && l.contains("libc-aio serialises")),
        "{text}"
    );
}
