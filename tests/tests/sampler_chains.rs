//! The sampler's call chains (`culprit sample --call-graph fp`) on a program with a known call
//! path, and the tracer's runtime seen by the sampler as one pseudo-function.
//!
//! Frame-pointer chains are whole only through code that keeps a frame pointer: the fixture is
//! built with `-O0 -fno-omit-frame-pointer`; libc is not, so the caller of a libc function that
//! was sampled drops out of the chain (as with `perf record --call-graph fp`). Real perf_event
//! sampling: needs root (or perf_event_paranoid = -1); in CI a missing privilege fails.

mod sampler_util;

use std::process::Command;

use culprit_tests::*;
use sampler_util::*;

const NODE: &str = "chains";

/// Starts `culprit sample --pid PID` at 1 kHz with `extra` flags.
fn sample_pid(data: &std::path::Path, pid: u32, extra: &[&str]) -> SamplerProc {
    let pid = pid.to_string();
    let mut args = vec![
        "--node",
        NODE,
        "--pid",
        &pid,
        "--interval",
        "1s",
        "--event",
        "cpu-clock",
        "--period",
        "1000000",
        "--tracepoints",
        "none",
    ];
    args.extend_from_slice(extra);
    SamplerProc::start(data, &args, NODE)
}

/// True when `frames` holds `path` as consecutive frames.
fn has_path(frames: &[String], path: &[&str]) -> bool {
    frames
        .windows(path.len())
        .any(|w| w.iter().zip(path).all(|(a, b)| a == b))
}

#[test]
fn call_chains_follow_the_known_call_path_into_the_kernel() {
    if !require(
        can_sample(),
        "root or kernel.perf_event_paranoid=-1 (perf sampling)",
    ) {
        return;
    }
    let bin = TempDir::new("chain-bin");
    let exe = bin.join("smp_chain");
    gcc(
        &[&c_source("smp_chain.c")],
        &exe,
        &["-O0", "-g", "-fno-omit-frame-pointer"],
    );
    let data = TempDir::new("chain-data");
    let _lock = machine_lock();
    let mut child = Command::new(&exe)
        .arg("800")
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("start");
    let sampler = sample_pid(data.path(), child.id(), &["--call-graph", "fp"]);
    // Go: the sampler runs.
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"go\n").expect("write");
    }
    assert!(child.wait().expect("wait").success());
    let (code, err) = sampler.stop();
    assert_eq!(code, 0, "{err}");
    let run = read_node(data.path(), NODE);
    assert_eq!(run.info.get("call_graph").map(String::as_str), Some("fp"));
    assert_eq!(
        run.stack_records,
        run.intervals.len(),
        "every interval has its Stacks record"
    );
    let of = |prog: &'static str| {
        run.stacks
            .iter()
            .filter(move |((p, _), _)| p == prog)
            .map(|((_, f), &c)| (f, c))
    };
    // Every sample of the program has its chain.
    let chained: u64 = of("smp_chain").map(|(_, c)| c).sum();
    assert_eq!(chained, run.program_total("smp_chain"));

    let img = |f: &str| format!("smp_chain:{f}");
    let spin_path = ["main", "outer", "middle", "inner"].map(img);
    let spin_path: Vec<&str> = spin_path.iter().map(String::as_str).collect();
    let in_inner: Vec<(&Vec<String>, u64)> = of("smp_chain")
        .filter(|(f, _)| f.last().is_some_and(|l| *l == img("inner")))
        .collect();
    let total: u64 = in_inner.iter().map(|(_, c)| c).sum();
    let whole: u64 = in_inner
        .iter()
        .filter(|(f, _)| has_path(f, &spin_path))
        .map(|(_, c)| c)
        .sum();
    assert!(total >= 300, "{total} samples in inner: {:#?}", run.stacks);
    assert!(
        whole * 100 >= total * 95,
        "{whole} of {total} chains in inner have main → outer → middle → inner: {:#?}",
        in_inner
    );

    // System calls: the user path, then the kernel's frames on top of it. libc's write keeps
    // no frame pointer, so its caller (writer) drops out of the chain: the sampled user
    // address (in libc) comes right after syscalls.
    let write_path = ["main", "syscalls"].map(img);
    let write_path: Vec<&str> = write_path.iter().map(String::as_str).collect();
    let into_kernel: Vec<&Vec<String>> = of("smp_chain")
        .map(|(f, _)| f)
        .filter(|f| has_path(f, &write_path))
        .filter(|f| {
            let at = f.iter().position(|x| *x == img("syscalls")).unwrap();
            f[at + 1..]
                .iter()
                .any(|x| x.starts_with("[kernel.kallsyms]:"))
        })
        .collect();
    assert!(
        !into_kernel.is_empty(),
        "no chain from writer into the kernel: {:#?}",
        run.stacks
    );
    assert!(
        into_kernel.iter().any(|f| f
            .iter()
            .any(|x| x.starts_with("[kernel.kallsyms]:") && x.contains("write"))),
        "no kernel write function on top of writer: {into_kernel:#?}"
    );
}

#[test]
fn samples_in_the_tracer_runtime_are_one_pseudo_function() {
    if !require(
        can_sample(),
        "root or kernel.perf_event_paranoid=-1 (perf sampling)",
    ) {
        return;
    }
    let bin = TempDir::new("rtsmp-bin");
    let exe = bin.join("tracee");
    gcc(
        &[&c_source("tracee.c")],
        &exe,
        &["-O2", "-finstrument-functions", "-pthread", "-ldl"],
    );
    let data = TempDir::new("rtsmp-data");
    let _lock = machine_lock();
    // A tight loop of tiny instrumented calls: much of its time is in the hooks.
    let mut child = Command::new(&exe)
        .args(["leaf", "100000000"])
        .env("LD_PRELOAD", runtime_lib())
        .env("CULPRIT_DIR", data.join("traces"))
        .env("CULPRIT_NODE", "t")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start");
    let sampler = sample_pid(data.path(), child.id(), &[]);
    assert!(child.wait().expect("wait").success());
    let (code, err) = sampler.stop();
    assert_eq!(code, 0, "{err}");
    let run = read_node(data.path(), NODE);
    let in_runtime: Vec<((String, String), u64)> = run
        .of_program("tracee")
        .into_iter()
        .filter(|((image, _), _)| image.starts_with("libculprit_rt.so"))
        .collect();
    let n: u64 = in_runtime.iter().map(|(_, c)| c).sum();
    assert!(n >= 20, "{n} samples in the runtime:\n{}", run.top(10));
    assert!(
        in_runtime.iter().all(|((_, f), _)| f == "culprit runtime"),
        "{in_runtime:?}"
    );
}
