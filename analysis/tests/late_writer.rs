//! A writer behind but alive (issue 29): a starved process's flusher writes its intervals late
//! but in order. `diagnose --follow` waits for it while its process runs, and compares every
//! window with it; a writer whose process is gone is given up on after the metric's lag, and its
//! intervals that come after their window closed are counted and said. Offline, intervals
//! written late are ordinary intervals.
//!
//! The data is SYNTHETIC tracer output written in real time with the format crate's writer, as
//! the runtime writes it (Info, an Object record, 1 s Interval records, an End record); the
//! functions are named by address. The late node's Info names a process: this test's own (it
//! runs) or a child that has exited. Everything from the files on is the library's real path:
//! loader, family readers, analyzer, `--follow`'s loop. About 30 s.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use culprit_analysis::diagnosis::ClosedWindow;
use culprit_analysis::plan::{Progress, Quiet};
use culprit_analysis::session::{self, DiagnoseRequest, Follow};
use culprit_analysis::setup::{Overrides, Setup};
use culprit_analysis::time::{now_ns, NS_PER_S};
use culprit_analysis::Diagnosis;
use culprit_format::synthetic::{self, MainObject};
use culprit_format::writer::FileWriter;
use culprit_format::{end_reason, info_keys, procfs, IntervalEntry, IntervalHead, RecordBuf};

const BIAS: u64 = 0x10_0000;
/// Seconds of data.
const SECS: u64 = 14;
/// The late node writes nothing from this second on until `CATCH_UP`, then all of it at once.
const PAUSE_FROM: u64 = 3;
const CATCH_UP: u64 = 10;

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn temp_dir(tag: &str) -> TempDir {
    let p = std::env::temp_dir().join(format!("culprit-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    TempDir(p)
}

/// A node's trace file, its process `pid` started at `start_ns`.
fn writer(root: &Path, node: &str, pid: u32, start_ns: u64, t0_ns: u64) -> FileWriter {
    let (pid_s, start_s, boot) = (pid.to_string(), start_ns.to_string(), procfs::boot_id());
    let info = [
        (info_keys::PROGRAM, "server"),
        (info_keys::INTERVAL_NS, "1000000000"),
        (info_keys::PID, pid_s.as_str()),
        (info_keys::PROC_START_NS, start_s.as_str()),
        (info_keys::BOOT_ID, boot.as_str()),
    ];
    let main = MainObject {
        bias: BIAS,
        size: 0x10_000,
        build_id: &[],
        path: "/nonexistent-culprit-test/server",
    };
    synthetic::trace_file(&root.join(node), pid, t0_ns, &info, Some(main)).unwrap()
}

/// One second of work: two functions, the same on every node.
fn second(w: &mut FileWriter, start_ns: u64) {
    let mut buf = RecordBuf::new();
    buf.interval(
        &IntervalHead {
            start_ns,
            dur_ns: NS_PER_S,
            threads: 1,
            ..IntervalHead::default()
        },
        vec![
            IntervalEntry {
                addr: BIAS + 0x100,
                calls: 1000,
                excl_ns: 400_000_000,
                incl_ns: 400_000_000,
            },
            IntervalEntry {
                addr: BIAS + 0x200,
                calls: 100,
                excl_ns: 300_000_000,
                incl_ns: 300_000_000,
            },
        ],
    );
    w.append(&buf).unwrap();
}

/// Writes four nodes' files in real time from the next whole second; io3's process is
/// (`late_pid`, `late_start`) and it writes nothing from [`PAUSE_FROM`] until [`CATCH_UP`],
/// then the seconds it owes in order. Returns the first second (epoch ns).
fn write_live(root: &Path, late_pid: u32, late_start: u64) -> u64 {
    let t0 = (now_ns() / NS_PER_S + 1) * NS_PER_S;
    let me = std::process::id();
    let my_start = procfs::start_ns(procfs::Proc::Pid(me)).unwrap_or(0);
    let mut ws: Vec<FileWriter> = (0..4)
        .map(|n| {
            let (pid, start) = if n == 3 {
                (late_pid, late_start)
            } else {
                (me, my_start)
            };
            writer(root, &format!("io{n}"), pid, start, t0)
        })
        .collect();
    let mut late_next = 0;
    for s in 0..SECS {
        let end = t0 + (s + 1) * NS_PER_S;
        // Each second is written once it is over, as the flusher does.
        let wait = end.saturating_sub(now_ns());
        std::thread::sleep(Duration::from_nanos(wait));
        for w in &mut ws[..3] {
            second(w, t0 + s * NS_PER_S);
        }
        if !(PAUSE_FROM..CATCH_UP).contains(&s) {
            while late_next <= s {
                second(&mut ws[3], t0 + late_next * NS_PER_S);
                late_next += 1;
            }
        }
    }
    for w in ws {
        w.finish(t0 + SECS * NS_PER_S, end_reason::EXIT).unwrap();
    }
    t0
}

/// Collects the windows `--follow` closes.
#[derive(Default)]
struct Windows(Vec<ClosedWindow>);

impl Progress for Windows {
    fn windows_closed(&mut self, closed: &[ClosedWindow]) -> std::io::Result<()> {
        self.0.extend_from_slice(closed);
        Ok(())
    }
}

fn overrides() -> Overrides {
    Overrides {
        win_size_ns: Some(2 * NS_PER_S),
        win_shift_ns: Some(NS_PER_S),
        metrics: vec!["time".into()],
        min_time_ns: Some(1_000_000),
        ..Overrides::default()
    }
}

/// Follows `root` while the files are written; the report and the windows closed.
fn follow(root: &Path, late_pid: u32, late_start: u64) -> (Diagnosis, Vec<ClosedWindow>) {
    let setup = Setup::resolve(&overrides(), None).unwrap();
    let writing = {
        let root = root.to_path_buf();
        std::thread::spawn(move || write_live(&root, late_pid, late_start))
    };
    let mut req = DiagnoseRequest::dirs(&[root.to_path_buf()], 10);
    req.follow = Some(Follow {
        limit: Some(Duration::from_secs(SECS + 40)),
    });
    let mut windows = Windows::default();
    let t = Instant::now();
    let d = session::diagnose(&setup, None, req, &mut windows).expect("diagnose --follow");
    writing.join().unwrap();
    eprintln!("followed for {:.1?}", t.elapsed());
    (d, windows.0)
}

fn io3(d: &Diagnosis) -> &culprit_analysis::diagnosis::NodeReport {
    d.metrics[0].nodes.iter().find(|n| n.node == "io3").unwrap()
}

/// Behind but alive (its process, this test's, runs): every window waits for it and compares
/// it; nothing comes late. Offline, the same file is ordinary data.
#[test]
fn follow_waits_for_a_writer_behind_but_alive() {
    let dir = temp_dir("late-alive");
    let me = std::process::id();
    let start = procfs::start_ns(procfs::Proc::Pid(me)).unwrap();
    let (d, windows) = follow(&dir.0, me, start);
    assert!(!windows.is_empty());
    for w in &windows {
        assert!(
            !w.incomplete.contains(&"io3".to_string()),
            "a window closed without io3 while it was behind but alive: {w:?}"
        );
    }
    let n = io3(&d);
    assert_eq!(n.late_intervals, 0, "{n:#?}");
    assert_eq!(n.windows_incomplete, 0, "{n:#?}");
    assert!(
        d.notes.iter().all(|n| !n.contains("arrived after")),
        "{:?}",
        d.notes
    );
    let scored = |d: &Diagnosis, node: &str| {
        d.metrics[0]
            .nodes
            .iter()
            .find(|n| n.node == node)
            .unwrap()
            .windows_scored
    };
    assert_eq!(scored(&d, "io3"), scored(&d, "io0"), "{d:#?}");
    // Offline: the intervals written late are read as any others.
    let setup = Setup::resolve(&overrides(), None).unwrap();
    let off = session::diagnose(
        &setup,
        None,
        DiagnoseRequest::dirs(std::slice::from_ref(&dir.0), 10),
        &mut Quiet,
    )
    .unwrap();
    let n = io3(&off);
    assert_eq!((n.windows_incomplete, n.windows_partial), (0, 0), "{n:#?}");
    assert_eq!(n.windows_scored, scored(&off, "io0"));
    assert!(off.culprits.is_empty(), "{off:#?}");
}

/// A writer whose process is gone and whose file does not grow is given up on after the
/// metric's lag: windows close without it, and its intervals that come later are counted per
/// node and said in a note, not compared.
#[test]
fn follow_gives_up_on_a_writer_whose_process_is_gone() {
    let dir = temp_dir("late-gone");
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let gone = child.id();
    child.wait().unwrap();
    let (d, windows) = follow(&dir.0, gone, 1);
    assert!(
        windows
            .iter()
            .any(|w| w.incomplete.contains(&"io3".to_string())),
        "{windows:#?}"
    );
    let n = io3(&d);
    assert!(n.late_intervals > 0, "{n:#?}");
    assert!(
        d.notes
            .iter()
            .any(|s| s.starts_with("io3:") && s.contains("arrived after their window had closed")),
        "{:?}",
        d.notes
    );
}
