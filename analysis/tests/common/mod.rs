//! What the synthetic-data tests share: a node's samples and trace files as `culprit sample`
//! and the runtime start them (written by `culprit_format::synthetic`), deterministic noise,
//! and a temporary directory removed on drop.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use culprit_analysis::score::SplitMix64;
use culprit_analysis::time::NS_PER_S;
use culprit_format::synthetic::{self, MainObject};
use culprit_format::writer::FileWriter;
use culprit_format::{RecordBuf, SampleEntry, SamplesHead};

/// Deterministic noise in [-1, 1).
pub fn noise(a: u64, b: u64, c: u64) -> f64 {
    let mut rng = SplitMix64(a * 1_000_003 + b * 1009 + c);
    2.0 * rng.unit() - 1.0
}

/// Node `n`'s samples file under `root` (`root/io<n>/`), started at `t0_s` (epoch seconds)
/// with cpu-clock sampling at 1 ms and `strings` (id 1 must be `cpu-clock`, the event).
pub fn samples_writer(root: &Path, n: u64, t0_s: u64, strings: &[(u32, &str)]) -> FileWriter {
    synthetic::samples_file(
        &root.join(format!("io{n}")),
        t0_s * NS_PER_S,
        100 + n as u32,
        &[("event", "cpu-clock"), ("period", "1000000")],
        strings,
    )
    .unwrap()
}

/// Appends to `buf` one second of cpu-clock samples (1 ms period, event string 1) starting at
/// epoch second `at_s`.
pub fn samples_second(buf: &mut RecordBuf, at_s: u64, entries: Vec<SampleEntry>) {
    let total = entries.iter().map(|e| e.count).sum();
    buf.samples(
        &SamplesHead {
            start_ns: at_s * NS_PER_S,
            dur_ns: NS_PER_S,
            flags: 0,
            event_sid: 1,
            period: 1_000_000,
            total,
            lost: 0,
        },
        entries,
    );
}

/// Node `n`'s trace file under `root` (`root/io<n>/`, pid 100 + n), started at `t0_s` (epoch
/// seconds) as the runtime starts it: Info (program `server`, 1 s intervals, and `info`) and
/// the main executable's Object record at `bias` (its file does not exist: functions are named
/// `server+0x…`).
pub fn trace_writer(
    root: &Path,
    n: u64,
    t0_s: u64,
    bias: u64,
    info: &[(&str, &str)],
) -> FileWriter {
    let pid = (100 + n as u32).to_string();
    let mut pairs = vec![
        ("program", "server"),
        ("interval_ns", "1000000000"),
        ("pid", pid.as_str()),
    ];
    pairs.extend_from_slice(info);
    let main = MainObject {
        bias,
        size: 0x10_000,
        build_id: &[],
        path: "/nonexistent-culprit-test/server",
    };
    synthetic::trace_file(
        &root.join(format!("io{n}")),
        100 + n as u32,
        t0_s * NS_PER_S,
        &pairs,
        Some(main),
    )
    .unwrap()
}

/// A temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh temporary directory for `tag`.
pub fn temp_dir(tag: &str) -> TempDir {
    let p = std::env::temp_dir().join(format!("culprit-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    TempDir(p)
}
