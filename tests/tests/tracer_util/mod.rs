//! Shared helpers of the tracer tests: build the C test programs with gcc (-O0/-O2, linked
//! with libculprit_rt.so or not), run them traced, and read what the runtime wrote.
//!
//! Function totals are read through `culprit report --json` (what users see); interval-level
//! facts the report does not show (flags, order, Info keys, Object records) are decoded from
//! the same files with culprit-format.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use culprit_format::{interval_flags, ParsedFile, Record};
use culprit_tests::*;

/// How a test program gets the runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Link {
    /// `-lculprit_rt` at build time.
    Linked,
    /// Built with `-finstrument-functions` only; `LD_PRELOAD` at run time.
    Preload,
}

/// Every variant the tests cover: -O0 and -O2, linked and preloaded.
pub const VARIANTS: [(&str, Link); 4] = [
    ("-O0", Link::Linked),
    ("-O0", Link::Preload),
    ("-O2", Link::Linked),
    ("-O2", Link::Preload),
];

/// Compiles `tests/c/<source>` with `-finstrument-functions` and `opt` into `dir/<out>`.
pub fn build(dir: &Path, source: &str, out: &str, opt: &str, link: Link) -> PathBuf {
    let rt = runtime_lib();
    let rt_dir = rt.parent().expect("runtime dir");
    let exe = dir.join(out);
    let mut cmd = Command::new("gcc");
    cmd.args([opt, "-g", "-Wall", "-finstrument-functions", "-o"])
        .arg(&exe)
        .arg(c_source(source))
        .args(["-pthread", "-ldl"]);
    if link == Link::Linked {
        cmd.arg("-L")
            .arg(rt_dir)
            .arg("-lculprit_rt")
            .arg(format!("-Wl,-rpath,{}", rt_dir.display()));
    }
    run_ok(&mut cmd);
    exe
}

/// A shared library from `tests/c/<source>`, instrumented.
pub fn build_lib(dir: &Path, source: &str, out: &str, opt: &str) -> PathBuf {
    let lib = dir.join(out);
    run_ok(
        Command::new("gcc")
            .args([
                opt,
                "-g",
                "-fPIC",
                "-shared",
                "-finstrument-functions",
                "-o",
            ])
            .arg(&lib)
            .arg(c_source(source)),
    );
    lib
}

/// A command running `exe` traced into `data` as node `node`.
pub fn traced(exe: &Path, link: Link, data: &Path, node: &str) -> Command {
    let mut cmd = Command::new(exe);
    cmd.env("CULPRIT_DIR", data).env("CULPRIT_NODE", node);
    for v in [
        "CULPRIT_INCLUDE",
        "CULPRIT_EXCLUDE",
        "CULPRIT_INTERVAL_MS",
        "CULPRIT_TRACE_FILE",
    ] {
        cmd.env_remove(v);
    }
    if link == Link::Preload {
        cmd.env("LD_PRELOAD", runtime_lib());
    }
    cmd
}

/// Runs a command, asserting success; returns its output.
pub fn run(cmd: &mut Command) -> Output {
    run_ok(cmd)
}

/// One function's totals over a file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Func {
    pub calls: u64,
    pub self_ns: u64,
    pub total_ns: u64,
    /// Calls among `calls` the runtime ended itself (longjmp, exceptions, cancellation).
    pub unwound: u64,
}

/// One interval record, summarized.
#[derive(Clone, Debug)]
pub struct Interval {
    pub start_ns: u64,
    pub dur_ns: u64,
    pub flags: u32,
    pub threads: u32,
    pub lost_frames: u32,
    pub overflows: u32,
    pub dropped: u32,
    pub entries: usize,
    /// Calls of all functions in the interval.
    pub calls: u64,
}

/// What one `.cul` trace file says.
#[derive(Debug)]
pub struct Proc {
    pub file: PathBuf,
    pub info: BTreeMap<String, String>,
    pub ended: bool,
    pub end_record: bool,
    pub functions: BTreeMap<String, Func>,
    pub intervals: Vec<Interval>,
    pub objects: Vec<(u32, u32, String)>,
    /// Demotions records (the cost budget, `CULPRIT_DEMOTE`), functions by address.
    pub demotions: Vec<culprit_format::DemotionsRec>,
    /// Cost records, one per interval written.
    pub costs: Vec<culprit_format::CostRec>,
}

impl Proc {
    /// Totals of `name` (zero if absent).
    pub fn func(&self, name: &str) -> Func {
        self.functions.get(name).copied().unwrap_or_default()
    }

    /// Sum of lost frames over all intervals.
    pub fn lost_frames(&self) -> u64 {
        self.intervals.iter().map(|i| i.lost_frames as u64).sum()
    }

    pub fn pid(&self) -> u32 {
        self.info
            .get("pid")
            .and_then(|p| p.parse().ok())
            .unwrap_or(0)
    }
}

/// Every trace file in `node_dir` (`DATA/<node>`), sorted by file name: functions from
/// `culprit report --json`, the rest decoded from the file.
pub fn load(node_dir: &Path) -> Vec<Proc> {
    let root = node_dir.parent().expect("DATA/<node>");
    let node = node_dir
        .file_name()
        .expect("node")
        .to_string_lossy()
        .into_owned();
    let out = run_ok(
        culprit()
            .arg("report")
            .arg(root)
            .args(["--node", &node, "--json"]),
    );
    let json = stdout_json(&out);
    assert_eq!(json["schema"], "culprit-report/1");
    let mut procs: Vec<Proc> = Vec::new();
    for n in json["nodes"].as_array().unwrap() {
        assert_eq!(n["node"], node.as_str());
        for pj in n["processes"].as_array().unwrap() {
            let files = pj["files"].as_array().unwrap();
            assert_eq!(files.len(), 1, "one file per process: {pj}");
            let mut p = load_file(&node_dir.join(files[0].as_str().unwrap()));
            for f in pj["functions"].as_array().unwrap() {
                let e = p
                    .functions
                    .entry(f["function"].as_str().unwrap().to_string())
                    .or_default();
                e.calls += f["calls"].as_u64().unwrap();
                e.self_ns += f["self_ns"].as_u64().unwrap();
                e.total_ns += f["total_ns"].as_u64().unwrap();
                e.unwound += f["unwound"].as_u64().unwrap_or(0);
            }
            assert_eq!(pj["lost_frames"].as_u64().unwrap(), p.lost_frames(), "{pj}");
            assert_eq!(pj["pid"].as_u64().unwrap(), p.pid() as u64);
            assert_eq!(pj["status"] == "ended", p.ended, "{pj}");
            procs.push(p);
        }
    }
    procs.sort_by(|a, b| a.file.cmp(&b.file));
    procs
}

fn load_file(path: &Path) -> Proc {
    let bytes = std::fs::read(path).unwrap();
    reader_agrees(path, &bytes);
    let pf = ParsedFile::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut p = Proc {
        file: path.to_path_buf(),
        info: BTreeMap::new(),
        ended: pf.ended(),
        end_record: false,
        functions: BTreeMap::new(),
        intervals: Vec::new(),
        objects: Vec::new(),
        demotions: Vec::new(),
        costs: Vec::new(),
    };
    for rec in pf.records() {
        let rec = rec.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        match rec {
            Record::Info(i) => p.info.extend(i.pairs),
            Record::Object(o) => p.objects.push((o.id, o.flags, o.path.to_string())),
            Record::Interval(iv) => {
                if iv.flags & interval_flags::MISSED != 0 {
                    assert!(iv.is_empty(), "MISSED interval with entries");
                }
                p.intervals.push(Interval {
                    start_ns: iv.start_ns,
                    dur_ns: iv.dur_ns,
                    flags: iv.flags,
                    threads: iv.threads,
                    lost_frames: iv.lost_frames,
                    overflows: iv.overflows,
                    dropped: iv.dropped,
                    entries: iv.len(),
                    calls: iv.entries().map(|e| e.calls).sum(),
                });
            }
            Record::End(_) => p.end_record = true,
            Record::Demotions(d) => p.demotions.push(d),
            Record::Cost(c) => p.costs.push(c),
            _ => {}
        }
    }
    p
}

/// The only trace file in `node_dir`.
pub fn load_one(node_dir: &Path) -> Proc {
    let mut v = load(node_dir);
    assert_eq!(
        v.len(),
        1,
        "expected one trace file in {}: {v:#?}",
        node_dir.display()
    );
    v.pop().unwrap()
}

/// Checks the invariants every complete file has: Info first, intervals aligned and in order,
/// every interval from first to last present (none skipped), an End record, marked ended.
pub fn assert_well_formed(p: &Proc) {
    assert!(
        p.ended && p.end_record,
        "{}: not cleanly ended (trouble noted: {:?})",
        p.file.display(),
        p.info.get("trouble")
    );
    assert_contiguous(p);
}

/// Intervals aligned to their length and contiguous (a split interval repeats its start).
pub fn assert_contiguous(p: &Proc) {
    assert!(p.info.contains_key("pid"), "no Info record");
    let mut next: Option<u64> = None;
    for iv in &p.intervals {
        assert_eq!(
            iv.start_ns % iv.dur_ns.max(1),
            0,
            "unaligned interval {iv:?}"
        );
        if let Some(n) = next {
            assert!(
                iv.start_ns == n || iv.start_ns + iv.dur_ns == n,
                "gap or disorder before {iv:?} (expected start {n}) in {}",
                p.file.display()
            );
        }
        next = Some(iv.start_ns + iv.dur_ns);
    }
}

/// `stdout` as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `stderr` as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Number of calls of fib(n) (itself included).
pub fn fib_calls(n: u64) -> u64 {
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..n + 1 {
        (a, b) = (b, a + b);
    }
    2 * a - 1
}
