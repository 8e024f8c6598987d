//! The tracer when its flusher runs late: the hooks place every call in its interval
//! themselves (the ring of intervals, `rt/src/intervals.rs`), so a flusher that is
//! starved or stopped writes every interval late, in order, exactly — never missed, never
//! merged — as long as it is less than the ring (64 intervals) behind; beyond, the intervals
//! it could not keep are written MISSED with their calls counted as dropped. Also: thousands
//! of children that `_exit` at once each leave exact counts, and the runtime never takes the
//! program's standard descriptors.
//!
//! The programs keep their own exact counters (`tests/c/starve.c`, `tests/c/mass_exit.c`) and
//! the tests compare the files with them: totals exactly, each interval with the program's
//! own count of its slot (to within the batches that straddle a boundary).

mod tracer_util;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use culprit_format::{interval_flags, ParsedFile, Record};
use culprit_tests::*;
use tracer_util::*;

/// What `starve` printed: exact totals per function, calls per slot, the batch size, and
/// whether the runtime said it was tracing at the end (`None` without the runtime).
#[derive(Debug, Default)]
struct Counted {
    functions: BTreeMap<String, u64>,
    slots: BTreeMap<u64, u64>,
    batch: u64,
    active: Option<bool>,
}

impl Counted {
    fn parse(out: &str) -> Counted {
        let mut c = Counted::default();
        for line in out.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f[..] {
                ["fn", name, n] => {
                    c.functions.insert(name.to_string(), n.parse().unwrap());
                }
                ["slot", s, n] => {
                    c.slots.insert(s.parse().unwrap(), n.parse().unwrap());
                }
                ["batch", b] => c.batch = b.parse().unwrap(),
                ["active", a] => c.active = Some(a == "1"),
                _ => {}
            }
        }
        assert!(c.batch > 0, "no batch line in {out:?}");
        c
    }

    fn total(&self) -> u64 {
        self.functions.values().sum()
    }
}

/// One interval record of a trace file, with the calls of all functions in it.
#[derive(Clone, Copy, Debug)]
struct Iv {
    start_ns: u64,
    dur_ns: u64,
    flags: u32,
    calls: u64,
    dropped: u64,
    lost: u64,
    overflows: u64,
}

/// What a trace file says beyond the report: its intervals, and from its Wakeups records how
/// late the flusher wrote (the largest lateness) and the calls it moved.
#[derive(Debug)]
struct FileFacts {
    intervals: Vec<Iv>,
    max_written_late_ns: u64,
    moved: u64,
}

fn facts(path: &Path) -> FileFacts {
    let bytes = std::fs::read(path).unwrap();
    let pf = ParsedFile::parse(&bytes).unwrap();
    let mut f = FileFacts {
        intervals: Vec::new(),
        max_written_late_ns: 0,
        moved: 0,
    };
    for rec in pf.records() {
        match rec.unwrap() {
            Record::Interval(iv) => f.intervals.push(Iv {
                start_ns: iv.start_ns,
                dur_ns: iv.dur_ns,
                flags: iv.flags,
                calls: iv.entries().map(|e| e.calls).sum(),
                dropped: iv.dropped as u64,
                lost: iv.lost_frames as u64,
                overflows: iv.overflows as u64,
            }),
            Record::Wakeups(w) => {
                f.max_written_late_ns = f.max_written_late_ns.max(w.written_late_ns);
                f.moved += w.moved;
            }
            _ => {}
        }
    }
    f
}

/// Builds `starve` (only its work functions instrumented).
fn build_starve(dir: &Path) -> PathBuf {
    build(dir, "starve.c", "starve", "-O2", Link::Preload)
}

/// Runs `cmd` (a traced `starve`) to its end and parses what it counted.
fn run_counted(cmd: &mut Command) -> Counted {
    let o = run(cmd.stdout(Stdio::piped()));
    Counted::parse(&stdout(&o))
}

/// Checks a starve run's file against its own counts: totals exact (every call traced, or
/// counted as dropped in a MISSED interval), intervals contiguous and ended, and each whole
/// interval's calls the program's count of that slot to within the batches that straddle its
/// two boundaries. Returns the file's facts.
fn check_exact(data: &Path, counted: &Counted, threads: u64, allow_missed: bool) -> FileFacts {
    let p = load_one(&data.join("n1"));
    assert_well_formed(&p);
    let f = facts(&p.file);
    let traced: u64 = ["mid", "leaf_a", "leaf_b"]
        .iter()
        .map(|n| {
            let got = p.func(n).calls;
            if !allow_missed {
                assert_eq!(
                    got, counted.functions[*n],
                    "{n}: traced vs the program's count"
                );
            }
            got
        })
        .sum();
    let in_intervals: u64 = f.intervals.iter().map(|i| i.calls).sum();
    assert_eq!(
        traced, in_intervals,
        "the report's totals are the intervals'"
    );
    let dropped: u64 = f.intervals.iter().map(|i| i.dropped).sum();
    assert_eq!(
        traced + dropped,
        counted.total(),
        "every call traced or counted as dropped: {f:#?}"
    );
    for iv in &f.intervals {
        assert_eq!((iv.lost, iv.overflows), (0, 0), "{iv:?}");
        if iv.flags & interval_flags::MISSED == 0 {
            assert_eq!(iv.dropped, 0, "a call dropped in {iv:?}");
        }
    }
    // Each whole interval against the program's own count of its slot.
    let tol = threads * 3 * counted.batch * 2;
    let mut starts: BTreeMap<u64, usize> = BTreeMap::new();
    for iv in &f.intervals {
        *starts.entry(iv.start_ns).or_default() += 1;
    }
    for iv in &f.intervals {
        if iv.flags != 0 || starts[&iv.start_ns] > 1 {
            continue; // partial, split or missed
        }
        let want = counted
            .slots
            .get(&(iv.start_ns / iv.dur_ns))
            .copied()
            .unwrap_or(0);
        assert!(
            iv.calls.abs_diff(want) <= tol,
            "interval {} holds {} calls, the program counted {want} in it (± {tol}): {:#?}",
            iv.start_ns,
            iv.calls,
            f.intervals
        );
    }
    f
}

/// No interval of the file was written missed.
fn assert_none_missed(f: &FileFacts) {
    assert!(
        f.intervals
            .iter()
            .all(|i| i.flags & interval_flags::MISSED == 0),
        "{f:#?}"
    );
}

#[test]
fn a_flusher_late_within_the_ring_writes_every_interval_exactly() {
    let tmp = TempDir::new("rt-late");
    let exe = build_starve(tmp.path());
    let data = tmp.join("d");
    // 100 ms intervals; the flusher stops for 3 s (30 intervals) after 1 s.
    let counted = run_counted(
        traced(&exe, Link::Preload, &data, "n1")
            .env("CULPRIT_INTERVAL_MS", "100")
            .env("CULPRIT_TEST_FLUSHER_STALL_MS", "1000,3000")
            .args(["2", "5", "100"]),
    );
    let f = check_exact(&data, &counted, 2, false);
    assert_none_missed(&f);
    assert!(
        f.max_written_late_ns >= 2_500_000_000,
        "the flusher was late: {} ns",
        f.max_written_late_ns
    );
}

#[test]
fn a_flusher_that_dies_never_holds_the_program_at_its_exit() {
    // A bug that panics in the flusher ends its thread (the panic never reaches the program).
    // The exit handler used to wait for its progress up to 60 s (`EXIT_STALL_MAX_NS`),
    // because a thread that is gone and one that is busy look alike in /proc. It must not
    // wait at all (nothing will write the records), and the data must say what happened.
    let tmp = TempDir::new("rt-flusher-dies");
    let exe = build_starve(tmp.path());
    let data = tmp.join("d");
    let started = std::time::Instant::now();
    let o = traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_INTERVAL_MS", "100")
        .env("CULPRIT_TEST_FLUSHER_STALL_MS", "300,panic")
        .args(["2", "1", "100"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("run starve");
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{}: {err}", o.status);
    // After start-up the runtime prints nothing: descriptor 2 may be the program's own file.
    assert_eq!(err, "", "nothing on the program's stderr");
    // The program's own output is whole: its totals and its batch line come last.
    let counted = Counted::parse(&stdout(&o));
    assert!(counted.total() > 0, "{counted:?}");
    // With nothing left to write the records, the runtime stops tracing and says so.
    assert_eq!(
        counted.active,
        Some(false),
        "culprit_is_active() after the flusher died"
    );
    // 1 s of work; the exit handler's wait for a flusher that is busy but makes no progress
    // is 60 s (and this is far from it on a loaded machine).
    assert!(
        took < std::time::Duration::from_secs(20),
        "the program's exit waited for a flusher that was gone: {took:?}"
    );
    let report = stdout(&run(Command::new(culprit_bin()).arg("report").arg(&data)));
    assert!(
        report.contains(
            "the flusher thread failed (CULPRIT_TEST_FLUSHER_STALL_MS asked the flusher to \
             panic); the records after this are lost"
        ) && report.contains("stopped without end marker"),
        "{report}"
    );
}

#[test]
fn a_late_flusher_with_the_monotonic_clock_writes_every_interval_exactly() {
    // The general path checks the boundary in Rust (every call takes it with this clock).
    let tmp = TempDir::new("rt-late-mono");
    let exe = build_starve(tmp.path());
    let data = tmp.join("d");
    let counted = run_counted(
        traced(&exe, Link::Preload, &data, "n1")
            .env("CULPRIT_CLOCK", "monotonic")
            .env("CULPRIT_INTERVAL_MS", "100")
            .env("CULPRIT_TEST_FLUSHER_STALL_MS", "500,1500")
            .args(["2", "3", "100"]),
    );
    let f = check_exact(&data, &counted, 2, false);
    assert_none_missed(&f);
    assert!(f.max_written_late_ns >= 1_000_000_000, "{f:#?}");
    // A late flusher is not a dead one: the runtime still traces.
    assert_eq!(counted.active, Some(true), "culprit_is_active() at the end");
}

#[test]
fn a_late_flusher_flags_the_edges_it_takes_late() {
    // Edges stay on the flusher's schedule: those it takes late hold calls of later
    // intervals, and their records say so (LATE); over the file they still add up to the
    // calls.
    let tmp = TempDir::new("rt-late-edges");
    let exe = build_starve(tmp.path());
    let data = tmp.join("d");
    let counted = run_counted(
        traced(&exe, Link::Preload, &data, "n1")
            .env("CULPRIT_GRAPH", "1")
            .env("CULPRIT_INTERVAL_MS", "100")
            .env("CULPRIT_TEST_FLUSHER_STALL_MS", "500,1500")
            .args(["2", "3", "100"]),
    );
    let f = check_exact(&data, &counted, 2, false);
    let p = load_one(&data.join("n1"));
    let bytes = std::fs::read(&p.file).unwrap();
    let pf = ParsedFile::parse(&bytes).unwrap();
    let (mut edge_calls, mut late, mut on_time) = (0u64, 0, 0);
    for rec in pf.records() {
        if let Record::Edges(e) = rec.unwrap() {
            edge_calls += e.entries().map(|x| x.calls).sum::<u64>();
            if e.interval.flags & interval_flags::LATE != 0 {
                late += 1;
            } else {
                on_time += 1;
            }
        }
    }
    let calls: u64 = f.intervals.iter().map(|i| i.calls).sum();
    assert_eq!(edge_calls, calls, "the edges add up to the calls");
    // The stop covers about 15 intervals written late, and the rest on time.
    assert!(
        late >= 10 && on_time >= 10,
        "{late} late, {on_time} on time"
    );
}

#[test]
fn a_flusher_later_than_the_ring_writes_missed_intervals_for_the_rest() {
    let tmp = TempDir::new("rt-beyond");
    let exe = build_starve(tmp.path());
    let data = tmp.join("d");
    // 100 ms intervals; the flusher stops for 9 s (90 intervals) after 1 s: the ring holds 64.
    let counted = run_counted(
        traced(&exe, Link::Preload, &data, "n1")
            .env("CULPRIT_INTERVAL_MS", "100")
            .env("CULPRIT_TEST_FLUSHER_STALL_MS", "1000,9000")
            .args(["2", "12", "100"]),
    );
    let f = check_exact(&data, &counted, 2, true);
    let missed: Vec<usize> = f
        .intervals
        .iter()
        .enumerate()
        .filter(|(_, i)| i.flags & interval_flags::MISSED != 0)
        .map(|(k, _)| k)
        .collect();
    // The stall's first 64 intervals are kept (exact, checked above), the other ~26 missed,
    // in one run.
    assert!(
        (23..=28).contains(&missed.len()),
        "{} missed: {f:#?}",
        missed.len()
    );
    assert_eq!(
        missed.last().unwrap() - missed[0] + 1,
        missed.len(),
        "one run of missed intervals: {f:#?}"
    );
    // The 64 intervals before them were written with their calls (each equal to the
    // program's own count, checked above; one may hold none on a loaded machine).
    let kept = &f.intervals[missed[0].saturating_sub(64)..missed[0]];
    assert!(
        kept.iter().all(|i| i.flags & interval_flags::MISSED == 0)
            && kept.iter().map(|i| i.calls).sum::<u64>() > 0,
        "the 64 intervals before the missed ones: {f:#?}"
    );
    let dropped: u64 = missed.iter().map(|&k| f.intervals[k].dropped).sum();
    assert!(
        dropped > 0,
        "the missed intervals' calls are counted: {f:#?}"
    );
}

/// A cgroup v1 `cpu` group of this test run, removed (its processes killed) when dropped.
struct QuotaGroup(culprit_testbed::cgroup::Group);

impl QuotaGroup {
    fn new(tag: &str, cpus: f64) -> QuotaGroup {
        let g = culprit_testbed::cgroup::Group::create(format!(
            "culprit-test-rt-ring-{}-{tag}",
            std::process::id()
        ))
        .expect("create the cgroup");
        let g = QuotaGroup(g);
        g.0.set_cpu_quota(Some(cpus)).expect("set the CPU quota");
        g
    }

    /// Makes `cmd` start in the group.
    fn place(&self, cmd: &mut Command) {
        culprit_testbed::sys::place(
            cmd,
            culprit_testbed::sys::Placement {
                netns: None,
                cgroup_procs: self.0.procs_files().expect("cgroup.procs"),
            },
        );
    }
}

impl Drop for QuotaGroup {
    fn drop(&mut self) {
        let _ = self.0.destroy();
    }
}

/// Eight threads of `starve` (over a million calls a second each unthrottled) for 10 s in a
/// cgroup with `cpus` of a CPU, beside `stress-ng --cpu 8`: every interval written, none
/// missed, no call dropped, every count the program's own.
fn starved_by_a_quota(tag: &str, cpus: f64) {
    if !require(is_root(), "root (a cgroup v1 cpu quota)") {
        return;
    }
    // No group of pinned peers (pinned_turn) runs while this test loads the machine on
    // purpose: they would be compared under a load that falls on them unevenly.
    let _turn = loading_turn();
    let _machine = machine_lock();
    let tmp = TempDir::new(&format!("rt-quota-{tag}"));
    let exe = build_starve(tmp.path());
    let data = tmp.join("d");
    let group = QuotaGroup::new(tag, cpus);
    let stress = Stress::cpu(8);
    assert!(
        stress.is_some() || !in_ci(),
        "stress-ng is missing (scripts/install-deps)"
    );
    let mut cmd = traced(&exe, Link::Preload, &data, "n1");
    cmd.args(["8", "10", "1000"]);
    group.place(&mut cmd);
    let counted = run_counted(&mut cmd);
    drop(stress);
    drop(group);
    let f = check_exact(&data, &counted, 8, false);
    let missed = f
        .intervals
        .iter()
        .filter(|i| i.flags & interval_flags::MISSED != 0)
        .count();
    eprintln!(
        "{tag}: {} calls, {} intervals, {missed} missed, 0 dropped, written up to {} ms late, \
         {} calls moved",
        counted.total(),
        f.intervals.len(),
        f.max_written_late_ns / 1_000_000,
        f.moved
    );
    assert_eq!(missed, 0, "{f:#?}");
    // The flusher was starved indeed (it wrote late), and it did not matter.
    assert!(f.max_written_late_ns >= 10_000_000, "{f:#?}");
}

#[test]
fn starved_by_a_5_percent_cpu_quota_beside_stress_every_interval_is_exact() {
    starved_by_a_quota("5pc", 0.05);
}

#[test]
fn starved_by_a_20_percent_cpu_quota_beside_stress_every_interval_is_exact() {
    starved_by_a_quota("20pc", 0.20);
}

/// `stress-ng` beside a test, stopped when dropped.
struct Stress(Child);

impl Stress {
    fn cpu(n: u32) -> Option<Stress> {
        Command::new("stress-ng")
            .args(["--cpu", &n.to_string(), "--quiet"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()
            .map(Stress)
    }
}

impl Drop for Stress {
    fn drop(&mut self) {
        // SAFETY: signals the process group leader we spawned (stress-ng forwards it to its
        // workers) and still own.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

#[test]
fn two_thousand_children_that_exit_at_once_each_leave_exact_counts() {
    // Not beside a group of pinned peers: see starved_by_a_quota.
    let _turn = loading_turn();
    let tmp = TempDir::new("rt-mass");
    let exe = build(tmp.path(), "mass_exit.c", "mass", "-O2", Link::Preload);
    let data = tmp.join("d");
    let stress = Stress::cpu(2);
    assert!(
        stress.is_some() || !in_ci(),
        "stress-ng is missing (scripts/install-deps)"
    );
    let o = run(traced(&exe, Link::Preload, &data, "n1")
        .arg("2000")
        .stdout(Stdio::piped()));
    drop(stress);
    let out = stdout(&o);
    assert!(out.contains("failed 0"), "{out}");
    let want: BTreeMap<u32, u64> = out
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                ["child", pid, n] => Some((pid.parse().unwrap(), n.parse().unwrap())),
                _ => None,
            }
        })
        .collect();
    assert_eq!(want.len(), 2000);
    // Every child's file: ended, and its calls exact. Read the files directly (2,001 of them).
    let mut seen = 0;
    for e in std::fs::read_dir(data.join("n1")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "cul") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let pf = ParsedFile::parse(&bytes).unwrap();
        let mut pid = 0;
        let (mut calls, mut dropped, mut missed, mut end) = (0u64, 0u64, 0, false);
        for rec in pf.records() {
            match rec.unwrap() {
                Record::Info(i) => {
                    if let Some((_, v)) = i.pairs.iter().find(|(k, _)| k == "pid") {
                        pid = v.parse().unwrap();
                    }
                }
                Record::Interval(iv) => {
                    calls += iv.entries().map(|e| e.calls).sum::<u64>();
                    dropped += iv.dropped as u64;
                    missed += (iv.flags & interval_flags::MISSED != 0) as u32;
                }
                Record::End(_) => end = true,
                _ => {}
            }
        }
        let Some(&n) = want.get(&pid) else {
            continue; // the parent
        };
        seen += 1;
        assert!(
            end && pf.ended(),
            "{}: child {pid} exited 0 but its file has no end",
            path.display()
        );
        assert_eq!(
            (calls, dropped, missed),
            (n, 0, 0),
            "{}: child {pid}",
            path.display()
        );
    }
    assert_eq!(seen, 2000, "a file per child");
}

#[test]
fn the_runtime_never_takes_the_programs_standard_descriptors() {
    let tmp = TempDir::new("rt-stdfds");
    let exe = tmp.join("stdfds");
    let rt = runtime_lib();
    let rt_dir = rt.parent().unwrap();
    run(Command::new("gcc")
        .args(["-O2", "-finstrument-functions", "-I"])
        .arg(include_dir())
        .arg("-o")
        .arg(&exe)
        .arg(c_source("stdfds.c"))
        .args(["-pthread", "-L"])
        .arg(rt_dir)
        .arg("-lculprit_rt")
        .arg(format!("-Wl,-rpath,{}", rt_dir.display())));
    let data = tmp.join("d");
    // 100 ms intervals: checkpoints and interval records as well as the flushes.
    let o = traced(&exe, Link::Linked, &data, "n1")
        .env("CULPRIT_INTERVAL_MS", "100")
        .arg("200000")
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(o.status.success(), "{out} {}", stderr(&o));
    let flushes: u64 = out
        .split_whitespace()
        .skip_while(|w| *w != "flushes")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(out.contains("wrong 0"), "{out}");
    assert!(
        flushes >= 100,
        "the runtime wrote while the loop ran: {out}"
    );
    let p = load_one(&data.join("n1"));
    assert_well_formed(&p);
}
