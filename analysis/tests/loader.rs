//! The loader (`analysis::data`) on files written with the format crate's writer: incremental
//! refreshes read only what was committed since, damage keeps what came before it, a dead
//! writer's checkpoint counts and a live one's does not, a file that cannot be read costs its
//! own node only.

use std::path::{Path, PathBuf};

use culprit_analysis::data::{Dataset, FileStatus, LoadOptions};
use culprit_format::procfs::{self, Proc};
use culprit_format::synthetic;
use culprit_format::writer::FileWriter;
use culprit_format::{
    end_reason, interval_flags, IntervalEntry, IntervalHead, RecordBuf, SampleEntry, SamplesHead,
    HEADER_COMMITTED_END_OFFSET, HEADER_PENDING_END_OFFSET,
};

const NS: u64 = 1_000_000_000;
const T0: u64 = 1_704_067_200 * NS;

fn tmp(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("culprit-loader-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A sampler file for `node` under `root` with `n` one-second intervals of one function.
fn samples(root: &Path, node: &str, n: u64) -> FileWriter {
    let mut w = synthetic::samples_file(
        &root.join(node),
        T0,
        7,
        &[("event", "cpu-clock")],
        &[(1, "cpu-clock"), (2, "prog"), (3, "img"), (4, "f")],
    )
    .unwrap();
    append_intervals(&mut w, 0..n);
    w
}

fn append_intervals(w: &mut FileWriter, secs: std::ops::Range<u64>) {
    let mut buf = RecordBuf::new();
    for i in secs {
        buf.samples(
            &SamplesHead {
                start_ns: T0 + i * NS,
                dur_ns: NS,
                event_sid: 1,
                period: 1_000_000,
                total: 10 + i,
                ..Default::default()
            },
            [SampleEntry {
                program: 2,
                image: 3,
                function: 4,
                count: 10 + i,
            }],
        );
    }
    w.append(&buf).unwrap();
}

fn open(root: &Path) -> Dataset {
    Dataset::open(&[root.to_path_buf()], LoadOptions::default()).unwrap()
}

#[test]
fn refreshes_read_only_what_was_committed_since() {
    let root = tmp("refresh");
    let mut w = samples(&root, "n1", 3);
    let mut ds = open(&root);
    let s = &ds.nodes[0].samples[0];
    assert_eq!(s.intervals.len(), 3);
    assert_eq!(s.status, FileStatus::Open);
    assert_eq!(s.intervals[2].total, 12);
    append_intervals(&mut w, 3..5);
    let stats = ds.refresh().unwrap();
    assert_eq!((stats.new_files, stats.new_intervals), (0, 2));
    assert_eq!(ds.nodes[0].samples[0].intervals.len(), 5);
    let stats = ds.refresh().unwrap();
    assert_eq!(stats.new_intervals, 0);
    w.finish(T0 + 5 * NS, end_reason::SIGNAL).unwrap();
    ds.refresh().unwrap();
    let s = &ds.nodes[0].samples[0];
    assert_eq!(
        (s.status.clone(), s.end_ns),
        (FileStatus::Ended, Some(T0 + 5 * NS))
    );
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn damage_keeps_what_came_before_it() {
    let root = tmp("damage");
    let w = samples(&root, "n1", 6);
    let path = w.path().to_path_buf();
    drop(w);
    let mut bytes = std::fs::read(&path).unwrap();
    // The 5th Samples record: header page, Info + Strings, then records of equal length.
    let f = culprit_format::ParsedFile::parse(&bytes).unwrap();
    let mut recs = f.records();
    let mut offsets = Vec::new();
    while let Some(Ok(_)) = {
        offsets.push(recs.offset());
        recs.next()
    } {}
    let at = offsets[2 + 4] as usize;
    bytes[at + 20] ^= 0x80;
    std::fs::write(&path, &bytes).unwrap();
    let ds = open(&root);
    let s = &ds.nodes[0].samples[0];
    assert_eq!(s.intervals.len(), 4);
    let why = format!("corrupt record at byte {at}: checksum mismatch");
    assert_eq!(s.status, FileStatus::Damaged(why.clone()));
    assert_eq!(
        ds.warnings,
        [format!("{}: {why}; data before it is kept", path.display())]
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// A trace file of process `pid` whose Info says `start_ns` and `boot`, with one committed
/// interval and a checkpoint of the next.
fn trace_with_checkpoint(root: &Path, pid: u32, start_ns: u64, boot: &str) -> PathBuf {
    let (pid_s, start) = (pid.to_string(), start_ns.to_string());
    let info = [
        ("pid", pid_s.as_str()),
        ("program", "p"),
        ("proc_start_ns", start.as_str()),
        ("boot_id", boot),
    ];
    let mut w = synthetic::trace_file(&root.join("n1"), pid, T0, &info, None).unwrap();
    let mut buf = RecordBuf::new();
    let iv = |b: &mut RecordBuf, start_ns, flags, calls| {
        b.interval(
            &IntervalHead {
                start_ns,
                dur_ns: NS,
                flags,
                threads: 1,
                ..Default::default()
            },
            [IntervalEntry {
                addr: 0x1000,
                calls,
                excl_ns: 1,
                incl_ns: 1,
            }],
        );
    };
    iv(&mut buf, T0, 0, 5);
    w.append(&buf).unwrap();
    let path = w.path().to_path_buf();
    let committed = w.committed_end();
    drop(w);
    let mut cp = RecordBuf::new();
    iv(&mut cp, T0 + NS, interval_flags::PARTIAL, 3);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(cp.as_bytes());
    let pending = bytes.len() as u64;
    bytes[HEADER_PENDING_END_OFFSET..HEADER_PENDING_END_OFFSET + 8]
        .copy_from_slice(&pending.to_le_bytes());
    assert_eq!(
        &bytes[HEADER_COMMITTED_END_OFFSET..HEADER_COMMITTED_END_OFFSET + 8],
        &committed.to_le_bytes()
    );
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn a_checkpoint_counts_only_once_its_writer_is_gone() {
    // A live writer: this very process (same pid, start time and boot).
    let root = tmp("cp-live");
    let me = std::process::id();
    let start = procfs::start_ns(Proc::This).unwrap();
    trace_with_checkpoint(&root, me, start, &procfs::boot_id());
    let ds = open(&root);
    let t = &ds.nodes[0].traces[0];
    assert!(t.writer_alive());
    assert_eq!(
        t.intervals.len(),
        1,
        "a live writer's checkpoint is not used"
    );
    // A writer of another boot is gone: its checkpoint is its last interval.
    let root2 = tmp("cp-dead");
    trace_with_checkpoint(&root2, me, start, "another-boot");
    let ds = open(&root2);
    let t = &ds.nodes[0].traces[0];
    assert!(!t.writer_alive());
    assert_eq!(t.intervals.len(), 2);
    assert_eq!(t.intervals[1].flags, interval_flags::PARTIAL);
    assert_eq!(t.intervals[1].entries[0].calls, 3);
    for r in [root, root2] {
        let _ = std::fs::remove_dir_all(&r);
    }
}

#[test]
fn an_unreadable_file_costs_its_own_node_only() {
    let root = tmp("unreadable");
    samples(&root, "n1", 2);
    let bad = samples(&root, "n2", 2).path().to_path_buf();
    std::fs::write(
        &bad,
        b"not a culprit file, but long enough to have a header...".repeat(4),
    )
    .unwrap();
    let ds = open(&root);
    // The node stays, without data (its verdict is `damaged`, not a node fewer).
    let names: Vec<&str> = ds.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["n1", "n2"]);
    assert!(ds.nodes[1].traces.is_empty() && ds.nodes[1].samples.is_empty());
    assert_eq!(ds.unreadable.len(), 1);
    assert_eq!(ds.unreadable[0].node, "n2");
    assert_eq!(
        ds.unreadable[0].reason,
        "not a culprit data file (bad magic)"
    );
    let _ = std::fs::remove_dir_all(&root);
}
