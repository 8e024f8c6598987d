//! `culprit report` on data files written with the format crate's writer for a real binary
//! compiled at test time (its functions are named through the recorded load map and build-id),
//! including damaged, cut-short and unended files. The runtime's own end-to-end tests check
//! report on data the runtime wrote; these pin down the reader's behaviour on bad input, which
//! the runtime cannot be made to produce on demand.

use std::path::{Path, PathBuf};
use std::process::Command;

use culprit_format::names::trace_file_name;
use culprit_format::*;
use culprit_tests::*;

const SEC: u64 = 1_000_000_000;
const T0: u64 = 1_795_352_700 * SEC; // 2026-11-22T13:05:00Z
const BIAS: u64 = 0x5555_0000_0000;

fn nm(bin: &Path, sym: &str) -> u64 {
    let o = run_ok(Command::new("nm").arg(bin));
    let text = String::from_utf8(o.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some(sym))
        .unwrap_or_else(|| panic!("{sym} not in nm output"));
    u64::from_str_radix(line.split_whitespace().next().unwrap(), 16).unwrap()
}

struct Bin {
    path: PathBuf,
    alpha: u64,
    beta: u64,
    build_id: Vec<u8>,
}

fn build_bin(dir: &TempDir) -> Bin {
    let src = dir.join("srv.c");
    std::fs::write(
        &src,
        "static int __attribute__((noinline)) alpha(int x) { return x * 3; }\n\
         int __attribute__((noinline)) beta(int x) { return alpha(x) + 1; }\n\
         int main(int c, char **v) { (void)v; return beta(c); }\n",
    )
    .unwrap();
    let path = dir.join("srv");
    gcc(&[&src], &path, &["-O1", "-fPIE", "-pie", "-Wl,--build-id"]);
    let notes = run_ok(Command::new("readelf").arg("-n").arg(&path));
    let text = String::from_utf8(notes.stdout).unwrap();
    let hex = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .expect("build id")
        .trim()
        .to_string();
    let build_id = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    Bin {
        alpha: nm(&path, "alpha"),
        beta: nm(&path, "beta"),
        path,
        build_id,
    }
}

/// Writes a trace file for `node` with `n` one-second intervals; `end` adds the end marker.
fn write_trace(root: &Path, node: &str, pid: u32, bin: &Bin, n: u64, end: bool) -> PathBuf {
    let pid_s = pid.to_string();
    let info = [
        (info_keys::NODE, node),
        (info_keys::PROGRAM, "srv"),
        (info_keys::PID, pid_s.as_str()),
        (info_keys::EXE, bin.path.to_str().unwrap()),
        (info_keys::INTERVAL_NS, "1000000000"),
    ];
    let main = synthetic::MainObject {
        bias: BIAS,
        size: 0x10_0000,
        build_id: &bin.build_id,
        path: bin.path.to_str().unwrap(),
    };
    let mut w = synthetic::trace_file(&root.join(node), pid, T0, &info, Some(main)).unwrap();
    let mut buf = RecordBuf::new();
    for i in 0..n {
        buf.clear();
        buf.interval(
            &IntervalHead {
                start_ns: T0 + i * SEC,
                dur_ns: SEC,
                threads: 2,
                ..Default::default()
            },
            [
                IntervalEntry {
                    addr: BIAS + bin.alpha,
                    calls: 100,
                    excl_ns: 300_000_000,
                    incl_ns: 300_000_000,
                },
                IntervalEntry {
                    addr: BIAS + bin.beta,
                    calls: 10,
                    excl_ns: 50_000_000,
                    incl_ns: 350_000_000,
                },
            ],
        );
        w.append(&buf).unwrap();
    }
    if end {
        w.finish(T0 + n * SEC, end_reason::EXIT).unwrap()
    } else {
        w.path().to_path_buf()
    }
}

fn report_json(args: &[&str]) -> serde_json::Value {
    let o = run_ok(culprit().arg("report").arg("--json").args(args));
    stdout_json(&o)
}

#[test]
fn names_counts_and_status_per_node() {
    let dir = TempDir::new("report");
    let bin = build_bin(&dir);
    let data = dir.join("data");
    write_trace(&data, "n1", 101, &bin, 3, true);
    write_trace(&data, "n2", 102, &bin, 2, false); // like kill -9: no end marker
    let v = report_json(&[data.to_str().unwrap()]);
    assert_eq!(v["schema"], "culprit-report/1");
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    let p1 = &nodes[0]["processes"][0];
    assert_eq!(nodes[0]["node"], "n1");
    assert_eq!(p1["pid"], 101);
    assert_eq!(p1["status"], "ended");
    assert_eq!(p1["intervals"], 3);
    let f = &p1["functions"][0];
    // Sorted by self time: the static function first, named through the load map.
    assert_eq!(f["function"], "alpha");
    assert_eq!(f["image"], "srv");
    assert_eq!(f["calls"], 300);
    assert_eq!(f["self_ns"], 900_000_000u64);
    assert_eq!(p1["functions"][1]["function"], "beta");
    assert_eq!(p1["functions"][1]["total_ns"], 1_050_000_000u64);
    let p2 = &nodes[1]["processes"][0];
    assert_eq!(p2["status"], "stopped");
    assert_eq!(p2["intervals"], 2);

    // Human output names the functions and says the second process stopped.
    let o = run_ok(culprit().arg("report").arg(&data));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.contains("== node n1 =="), "{text}");
    assert!(text.contains("alpha (srv)"), "{text}");
    assert!(text.contains("stopped without end marker"), "{text}");
}

#[test]
fn time_range_and_filters() {
    let dir = TempDir::new("report-range");
    let bin = build_bin(&dir);
    let data = dir.join("data");
    write_trace(&data, "n1", 101, &bin, 5, true);
    write_trace(&data, "n2", 102, &bin, 5, true);
    let d = data.to_str().unwrap();
    // +1s .. +3s → intervals 1 and 2.
    let v = report_json(&[d, "--from", "+1s", "--to", "+3s", "--node", "n2"]);
    assert_eq!(v["nodes"].as_array().unwrap().len(), 1);
    let p = &v["nodes"][0]["processes"][0];
    assert_eq!(p["intervals"], 2);
    assert_eq!(p["functions"][0]["calls"], 200);
    // Absolute ISO time and "before the end".
    let v = report_json(&[d, "--from", "2026-11-22T13:05:03Z"]);
    assert_eq!(v["nodes"][0]["processes"][0]["intervals"], 2);
    let v = report_json(&[d, "--from", "-1s"]);
    assert_eq!(v["nodes"][0]["processes"][0]["intervals"], 1);
    // Program filter that matches nothing leaves no processes.
    let v = report_json(&[d, "--program", "other"]);
    assert!(v["nodes"][0]["processes"].as_array().unwrap().is_empty());
    // --merge folds processes of a program.
    let v = report_json(&[d, "--merge", "--sort", "calls"]);
    assert_eq!(v["nodes"][0]["processes"][0]["pid"], 0);
    assert_eq!(
        v["nodes"][0]["processes"][0]["functions"][0]["function"],
        "alpha"
    );
}

#[test]
fn damaged_files_keep_earlier_data_and_warn() {
    let dir = TempDir::new("report-damaged");
    let bin = build_bin(&dir);
    let data = dir.join("data");
    let good = write_trace(&data, "n1", 101, &bin, 4, true);
    // Corrupt the last interval record's payload: CRC fails there.
    let corrupt = write_trace(&data, "n2", 102, &bin, 4, true);
    let mut bytes = std::fs::read(&corrupt).unwrap();
    let len = bytes.len();
    bytes[len - 40] ^= 0xff; // inside the last interval (before the 32-byte End record)
    std::fs::write(&corrupt, &bytes).unwrap();
    // Cut a third file short in the middle of its records.
    let cut = write_trace(&data, "n3", 103, &bin, 4, false);
    let bytes = std::fs::read(&cut).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() - 20]).unwrap();
    let before = std::fs::read(&good).unwrap();

    let o = run_ok(culprit().args(["report", "--json"]).arg(&data));
    let v = stdout_json(&o);
    let stderr = String::from_utf8_lossy(&o.stderr);
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes[0]["processes"][0]["intervals"], 4);
    assert_eq!(nodes[1]["processes"][0]["status"], "damaged");
    assert_eq!(nodes[1]["processes"][0]["intervals"], 3);
    assert_eq!(nodes[2]["processes"][0]["status"], "damaged");
    assert_eq!(nodes[2]["processes"][0]["intervals"], 3);
    assert!(stderr.contains("checksum mismatch"), "{stderr}");
    assert!(stderr.contains("cut short"), "{stderr}");
    // Reading never changes the files.
    assert_eq!(std::fs::read(&good).unwrap(), before);
}

#[test]
fn bad_input_gives_one_line_errors() {
    let dir = TempDir::new("report-bad");
    // Missing directory.
    let o = culprit()
        .args(["report"])
        .arg(dir.join("nope"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.starts_with("culprit: error:") && e.contains("nope"),
        "{e}"
    );
    // A directory without data.
    let o = culprit().arg("report").arg(dir.path()).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("no node data found"), "{e}");
    // A file that is not a culprit file is skipped with a warning, others still load.
    let bin = build_bin(&dir);
    let data = dir.join("data");
    write_trace(&data, "n1", 1, &bin, 1, true);
    std::fs::write(data.join("n1").join(trace_file_name(9, 9, 0)), b"garbage").unwrap();
    let o = run_ok(culprit().arg("report").arg(&data));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("not a culprit data file"), "{e}");
    // A bad time.
    let o = culprit()
        .args(["report", "--from", "tomorrow"])
        .arg(&data)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("bad time"));
}

#[test]
fn sample_profiles_and_events_are_shown() {
    let dir = TempDir::new("report-samples");
    // Sampler output written with the format writer (the sampler's own tests check the real
    // sampler writes the same records).
    let mut w = synthetic::samples_file(
        &dir.join("data").join("n1"),
        T0,
        1,
        &[(info_keys::NODE, "n1"), (info_keys::EVENT, "cpu-clock")],
        &[
            (1, "cpu-clock"),
            (2, "dd"),
            (3, "[kernel.kallsyms]"),
            (4, "clear_page_erms"),
            (5, "tcp:tcp_retransmit_skb"),
        ],
    )
    .unwrap();
    let mut buf = RecordBuf::new();
    for i in 0..2 {
        buf.samples(
            &SamplesHead {
                start_ns: T0 + i * 10 * SEC,
                dur_ns: 10 * SEC,
                flags: samples_flags::FREQ,
                event_sid: 1,
                period: 1000,
                total: 500,
                lost: 0,
            },
            [SampleEntry {
                program: 2,
                image: 3,
                function: 4,
                count: 400,
            }],
        );
        buf.events(
            T0 + i * 10 * SEC,
            10 * SEC,
            0,
            [EventEntry { event: 5, count: 7 }],
        );
    }
    w.append(&buf).unwrap();
    w.finish(T0 + 20 * SEC, end_reason::SIGNAL).unwrap();
    let v = report_json(&[dir.join("data").to_str().unwrap()]);
    let s = &v["nodes"][0]["samples"][0];
    assert_eq!(s["event"], "cpu-clock");
    assert_eq!(s["freq_hz"], 1000);
    assert_eq!(s["total"], 1000);
    assert_eq!(s["entries"][0]["program"], "dd");
    assert_eq!(s["entries"][0]["function"], "clear_page_erms");
    assert_eq!(s["entries"][0]["samples"], 800);
    assert_eq!(
        v["nodes"][0]["events"][0]["event"],
        "tcp:tcp_retransmit_skb"
    );
    assert_eq!(v["nodes"][0]["events"][0]["count"], 14);
}

/// One sampler file of `node` for the run `(host, pid)`: two 10 s intervals of 500 samples,
/// `lost` in the Samples records, and the given Lost records (interval index, record).
fn write_lossy_samples(
    root: &Path,
    node: &str,
    run: (&str, &str),
    lost: u64,
    losses: &[(u64, LostRec)],
) {
    let info = [
        (info_keys::NODE, node),
        (info_keys::EVENT, "cpu-clock"),
        (info_keys::HOST, run.0),
        (info_keys::PID, run.1),
        (info_keys::PROC_START_NS, "555"),
    ];
    let strings = [(1, "cpu-clock"), (2, "srv"), (3, "srv"), (4, "work")];
    let mut w = synthetic::samples_file(&root.join(node), T0, 1, &info, &strings).unwrap();
    let mut buf = RecordBuf::new();
    for i in 0..2 {
        let r = IntervalRef {
            start_ns: T0 + i * 10 * SEC,
            dur_ns: 10 * SEC,
            flags: 0,
        };
        buf.samples(
            &SamplesHead {
                start_ns: r.start_ns,
                dur_ns: r.dur_ns,
                event_sid: 1,
                period: 1_000_000,
                total: 500,
                lost,
                ..SamplesHead::default()
            },
            [SampleEntry {
                program: 2,
                image: 3,
                function: 4,
                count: 500,
            }],
        );
        for (_, l) in losses.iter().filter(|(at, _)| *at == i) {
            buf.lost(&r, l);
        }
    }
    w.append(&buf).unwrap();
    w.finish(T0 + 20 * SEC, end_reason::SIGNAL).unwrap();
}

/// Issue 31: a sampler of several nodes shares its per-CPU rings between them, so what it lost
/// belongs to no node: each node shows its own loss (none), and the run's loss is shown once.
/// The only node of a whole-machine sampler shows its loss as its own; a file older than
/// format 7 (losses of every kind in the Samples record, no Lost record) is reported once as
/// records of any kind. Before: every node showed the machine's count as its own.
#[test]
fn each_node_shows_its_own_loss_and_the_machine_loss_once() {
    let dir = TempDir::new("report-loss");
    let data = dir.join("data");
    let machine = |samples, events, tracking| LostRec {
        whose: lost_whose::MACHINE,
        samples,
        events,
        tracking,
        ..LostRec::default()
    };
    for node in ["a", "b", "c"] {
        write_lossy_samples(
            &data,
            node,
            ("h1", "77"),
            5,
            &[(0, machine(5, 100, 2)), (1, machine(0, 50, 0))],
        );
    }
    let own = LostRec {
        whose: lost_whose::NODE,
        samples: 3,
        events: 9,
        ..LostRec::default()
    };
    write_lossy_samples(&data, "solo", ("h2", "88"), 3, &[(1, own)]);
    write_lossy_samples(&data, "old", ("h3", "99"), 40, &[]);
    // Written by a sampler of format version 6.
    let old_file = node_file(&data, "old");
    let mut bytes = std::fs::read(&old_file).unwrap();
    bytes[8..10].copy_from_slice(&6u16.to_le_bytes());
    std::fs::write(&old_file, bytes).unwrap();
    let v = report_json(&[data.to_str().unwrap()]);
    let node = |name: &str| {
        v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["node"] == name)
            .unwrap()["samples"][0]
            .clone()
    };
    let losses = v["machine_losses"].as_array().unwrap();
    assert_eq!(losses.len(), 2, "{v}");
    let shared = node("a")["machine_loss"].as_u64().unwrap() as usize;
    for n in ["a", "b", "c"] {
        assert_eq!(node(n)["lost"], 0, "{n}: {v}");
        assert_eq!(node(n)["machine_loss"], shared, "{n}");
    }
    let m = &losses[shared];
    assert_eq!(m["nodes"], serde_json::json!(["a", "b", "c"]));
    assert_eq!(
        (m["samples"].as_u64(), m["events"].as_u64()),
        (Some(5), Some(150))
    );
    assert_eq!(
        (m["tracking"].as_u64(), m["unsorted"].as_u64()),
        (Some(2), Some(0))
    );
    assert_eq!(m["host"], "h1");
    assert_eq!(m["sampler_pid"], 77);
    let solo = node("solo");
    assert_eq!(
        (solo["lost"].as_u64(), solo["lost_events"].as_u64()),
        (Some(3), Some(9))
    );
    assert!(solo["machine_loss"].is_null());
    let old = node("old");
    assert_eq!(old["lost"], 0);
    let o = &losses[old["machine_loss"].as_u64().unwrap() as usize];
    assert_eq!(o["unsorted"], 80, "two intervals of 40: {o}");

    let text = String::from_utf8(run_ok(culprit().arg("report").arg(&data)).stdout).unwrap();
    assert_eq!(
        text.matches("sampler losses not attributable to a node")
            .count(),
        1,
        "{text}"
    );
    assert!(
        text.contains("host h1, sampler pid 77, nodes a, b, c: 5 samples, 150 kernel-event records, 2 process-tracking records"),
        "{text}"
    );
    assert_eq!(
        text.matches("lost: not attributable to a node").count(),
        4,
        "{text}"
    );
    assert!(text.contains("3 lost"), "{text}");
}
