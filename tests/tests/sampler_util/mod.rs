//! Helpers shared by the sampler tests: building the C workloads, running `culprit sample` in
//! the background, and reading its files with the format crate's validating reader.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use culprit_format::{interval_flags, samples_flags, ParsedFile, Record};
use culprit_tests::*;

/// The C workloads, compiled into one directory.
pub struct Programs {
    pub dir: TempDir,
}

impl Programs {
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// Builds every workload of tests/c/smp_*.c.
pub fn build_programs() -> Programs {
    let dir = TempDir::new("smp-bin");
    let d = dir.path();
    let o2 = ["-O2", "-g0", "-fno-ipa-icf"];
    gcc(&[&c_source("smp_ratio.c")], &d.join("smp_ratio"), &o2);
    gcc(
        &[&c_source("smp_lib.c")],
        &d.join("libsmp_lib.so"),
        &["-O2", "-fPIC", "-shared", "-Wl,-soname,libsmp_lib.so"],
    );
    gcc(
        &[&c_source("smp_libuser.c"), &d.join("libsmp_lib.so")],
        &d.join("smp_libuser"),
        &["-O2", "-Wl,-rpath,$ORIGIN"],
    );
    gcc(
        &[&c_source("smp_strip.c")],
        &d.join("smp_strip"),
        &["-O2", "-rdynamic"],
    );
    run_ok(
        Command::new("strip")
            .arg("--strip-all")
            .arg(d.join("smp_strip")),
    );
    gcc(&[&c_source("smp_sys.c")], &d.join("smp_sys"), &o2);
    gcc(&[&c_source("smp_short.c")], &d.join("smp_short"), &o2);
    gcc(&[&c_source("smp_spawn.c")], &d.join("smp_spawn"), &o2);
    Programs { dir }
}

/// Starts `culprit sample --pid PID` at 1 kHz (cpu-clock, 1 s intervals, no tracepoints) with
/// `extra` flags, writing node `node` under `data`.
pub fn sample_pid(data: &Path, node: &str, pid: u32, extra: &[&str]) -> SamplerProc {
    let pid = pid.to_string();
    let mut args = vec![
        "--node",
        node,
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
    SamplerProc::start(data, &args, node)
}

/// Builds tests/c/smp_chain.c (every function keeps a frame pointer) into `bin` and runs it
/// for `ms` ms of its CPU time per phase under `culprit sample --pid PID` (1 kHz cpu-clock, 1 s
/// intervals, no tracepoints, `extra` flags) writing node `node` under `data`. Returns when
/// both ended well. Takes the machine lock while it runs.
pub fn sample_chain_fixture(bin: &Path, data: &Path, node: &str, ms: u32, extra: &[&str]) {
    let exe = bin.join("smp_chain");
    gcc(
        &[&c_source("smp_chain.c")],
        &exe,
        &["-O0", "-g", "-fno-omit-frame-pointer"],
    );
    let _lock = machine_lock();
    let mut child = Command::new(&exe)
        .arg(ms.to_string())
        .stdin(Stdio::piped())
        .spawn()
        .expect("start smp_chain");
    let sampler = sample_pid(data, node, child.id(), extra);
    // Go: the sampler runs.
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(b"go\n").expect("write");
    }
    assert!(child.wait().expect("wait").success());
    let (code, err) = sampler.stop();
    assert_eq!(code, 0, "{err}");
}

/// A `culprit sample` running in the background.
pub struct SamplerProc {
    pub child: Child,
    pub data: PathBuf,
}

impl SamplerProc {
    /// Starts `culprit sample -o DATA ARGS…` and waits until it writes its first file (its
    /// events are enabled right after), at most 20 s.
    pub fn start(data: &Path, args: &[&str], first_node: &str) -> SamplerProc {
        let child = culprit()
            .arg("sample")
            .arg("-o")
            .arg(data)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start culprit sample");
        let mut s = SamplerProc {
            child,
            data: data.to_path_buf(),
        };
        let t0 = Instant::now();
        loop {
            if sample_files(&data.join(first_node)).next().is_some() {
                break;
            }
            if s.child.try_wait().expect("wait").is_some() {
                let (code, err) = s.wait();
                panic!("culprit sample exited early ({code}):\n{err}");
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "culprit sample did not start in 20 s"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        // The file is created just before the events are enabled.
        std::thread::sleep(Duration::from_millis(50));
        s
    }

    /// Sends SIGTERM and waits (see [`SamplerProc::wait`]); returns (exit code, stderr).
    pub fn stop(mut self) -> (i32, String) {
        run_ok(
            Command::new("kill")
                .arg("-TERM")
                .arg(self.child.id().to_string()),
        );
        self.wait()
    }

    /// Waits for the process to exit on its own. The last interval is named and written after
    /// the stop; with a debug build on a machine loaded by other work that can take a while,
    /// so the limit (90 s) only catches a sampler that does not stop at all.
    pub fn wait(&mut self) -> (i32, String) {
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    use std::io::Read as _;
                    let _ = e.read_to_string(&mut err);
                }
                return (st.code().unwrap_or(-1), err);
            }
            if t0.elapsed() > Duration::from_secs(90) {
                let _ = self.child.kill();
                panic!("culprit sample did not exit in 90 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for SamplerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The samples-*.cul files of a node directory.
pub fn sample_files(node_dir: &Path) -> impl Iterator<Item = PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(node_dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("samples-") && n.ends_with(".cul"))
        })
        .collect();
    v.sort();
    v.into_iter()
}

/// One interval of a samples file.
#[derive(Clone, Debug)]
pub struct Interval {
    pub start_ns: u64,
    pub dur_ns: u64,
    pub flags: u32,
    pub event: String,
    pub period: u64,
    pub total: u64,
    pub lost: u64,
    /// (program, image, function) → samples.
    pub entries: HashMap<(String, String, String), u64>,
    /// Kernel event counts of the same interval.
    pub events: HashMap<String, u64>,
    pub events_flags: u32,
}

/// A samples file, decoded.
#[derive(Clone, Debug, Default)]
pub struct SampleRun {
    pub path: PathBuf,
    pub info: HashMap<String, String>,
    pub intervals: Vec<Interval>,
    pub end_reason: Option<u32>,
    pub ended: bool,
    /// Call chains (`--call-graph`): (program, `image:function` outermost first) → samples,
    /// over the run.
    pub stacks: HashMap<(String, Vec<String>), u64>,
    /// Stacks records read.
    pub stack_records: usize,
}

impl SampleRun {
    /// Samples per (program, image, function) over the whole run.
    pub fn totals(&self) -> HashMap<(String, String, String), u64> {
        let mut t = HashMap::new();
        for iv in &self.intervals {
            for (k, v) in &iv.entries {
                *t.entry(k.clone()).or_insert(0) += v;
            }
        }
        t
    }

    /// Samples of `program`, per (image, function).
    pub fn of_program(&self, program: &str) -> HashMap<(String, String), u64> {
        let mut t = HashMap::new();
        for ((p, i, f), v) in self.totals() {
            if p == program {
                *t.entry((i, f)).or_insert(0) += v;
            }
        }
        t
    }

    /// Total samples of `program`.
    pub fn program_total(&self, program: &str) -> u64 {
        self.of_program(program).values().sum()
    }

    /// Sum of kernel event `name` over the run.
    pub fn event_total(&self, name: &str) -> u64 {
        self.intervals
            .iter()
            .map(|iv| iv.events.get(name).copied().unwrap_or(0))
            .sum()
    }

    /// Short text of the top entries, for assertion messages.
    pub fn top(&self, n: usize) -> String {
        let mut v: Vec<_> = self.totals().into_iter().collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.1));
        v.iter()
            .take(n)
            .map(|((p, i, f), c)| format!("{c:>7} {p} {f} ({i})\n"))
            .collect()
    }
}

/// Reads a samples file with the validating reader; panics on any format error.
pub fn read_run(path: &Path) -> SampleRun {
    let bytes = std::fs::read(path).expect("read samples file");
    reader_agrees(path, &bytes);
    let pf = ParsedFile::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut strings: HashMap<u32, String> = HashMap::new();
    let mut run = SampleRun {
        path: path.to_path_buf(),
        ended: pf.ended(),
        ..SampleRun::default()
    };
    let s = |strings: &HashMap<u32, String>, id: u32| {
        strings
            .get(&id)
            .cloned()
            .unwrap_or_else(|| panic!("string id {id} used before it was defined"))
    };
    for r in pf.records() {
        match r.unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
            Record::Info(i) => run.info.extend(i.pairs),
            Record::Strings(st) => {
                for (id, text) in st.items() {
                    strings.insert(id, text.into_owned());
                }
            }
            Record::Samples(rec) => {
                let mut entries = HashMap::new();
                for e in rec.entries() {
                    let key = (
                        s(&strings, e.program),
                        s(&strings, e.image),
                        s(&strings, e.function),
                    );
                    assert!(
                        entries.insert(key.clone(), e.count).is_none(),
                        "duplicate entry {key:?}"
                    );
                }
                run.intervals.push(Interval {
                    start_ns: rec.start_ns,
                    dur_ns: rec.dur_ns,
                    flags: rec.flags,
                    event: s(&strings, rec.event_sid),
                    period: rec.period,
                    total: rec.total,
                    lost: rec.lost,
                    entries,
                    events: HashMap::new(),
                    events_flags: 0,
                });
            }
            Record::Events(rec) => {
                let iv = run
                    .intervals
                    .last_mut()
                    .expect("an Events record follows its Samples record");
                assert_eq!(
                    iv.start_ns, rec.start_ns,
                    "Events record of another interval"
                );
                iv.events_flags = rec.flags;
                for e in rec.entries() {
                    iv.events.insert(s(&strings, e.event), e.count);
                }
            }
            Record::Stacks(rec) => {
                run.stack_records += 1;
                for e in rec.entries() {
                    let frames = e
                        .frames
                        .iter()
                        .map(|&(i, f)| format!("{}:{}", s(&strings, i), s(&strings, f)))
                        .collect();
                    *run.stacks
                        .entry((s(&strings, e.program), frames))
                        .or_insert(0) += e.count;
                }
            }
            Record::End(e) => run.end_reason = Some(e.reason),
            _ => {}
        }
    }
    run
}

/// Reads the single samples file of `DATA/<node>`.
pub fn read_node(data: &Path, node: &str) -> SampleRun {
    let files: Vec<PathBuf> = sample_files(&data.join(node)).collect();
    assert_eq!(files.len(), 1, "one samples file in {node}: {files:?}");
    read_run(&files[0])
}

/// Checks the structure every run must have: contiguous aligned intervals, each with its
/// Events record, the first and last PARTIAL, the event and period recorded, ended cleanly.
pub fn assert_well_formed(run: &SampleRun, interval_ns: u64) {
    assert!(
        !run.intervals.is_empty(),
        "no intervals in {}",
        run.path.display()
    );
    for (i, iv) in run.intervals.iter().enumerate() {
        assert_eq!(iv.dur_ns, interval_ns);
        assert_eq!(iv.start_ns % interval_ns, 0, "interval not aligned");
        if i > 0 {
            assert_eq!(
                iv.start_ns,
                run.intervals[i - 1].start_ns + interval_ns,
                "gap between intervals"
            );
        }
        assert!(!iv.event.is_empty());
        assert!(iv.period > 0);
        assert_eq!(
            iv.entries.values().sum::<u64>(),
            iv.total,
            "entries add up to the interval's total"
        );
        assert_eq!(
            iv.flags & interval_flags::MISSED,
            iv.events_flags & interval_flags::MISSED
        );
        let _ = samples_flags::FREQ;
    }
    assert_ne!(
        run.intervals[0].flags & interval_flags::PARTIAL,
        0,
        "first interval PARTIAL"
    );
    assert_ne!(
        run.intervals.last().unwrap().flags & interval_flags::PARTIAL,
        0,
        "last interval PARTIAL"
    );
    assert!(run.ended, "file marked ended");
    assert!(run.end_reason.is_some(), "End record present");
}

/// Children started in their own process group; the whole group is killed on drop.
pub struct Kill(pub Vec<Child>);

impl Drop for Kill {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // SAFETY: kill takes plain integers; a negative pid names the child's own group.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Cgroup directories, removed (innermost last in the list, first on drop) when dropped.
pub struct Cgroups(pub Vec<PathBuf>);

impl Drop for Cgroups {
    fn drop(&mut self) {
        for d in self.0.iter().rev() {
            for _ in 0..50 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
}

/// The whole disk (MAJ, MIN) a path lives on: blkio throttling applies to whole disks.
pub fn whole_disk_of(p: &Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt as _;
    let dev = std::fs::metadata(p).unwrap().dev();
    culprit_testbed::cgroup::whole_disk((libc::major(dev), libc::minor(dev)))
}
