//! What the synthetic-data tests share: a node's samples file as `culprit sample` starts it,
//! deterministic noise, and a temporary directory removed on drop.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use culprit_analysis::score::SplitMix64;
use culprit_analysis::time::NS_PER_S;
use culprit_format::names::samples_file_name;
use culprit_format::writer::FileWriter;
use culprit_format::{FileKind, RecordBuf};

/// Deterministic noise in [-1, 1).
pub fn noise(a: u64, b: u64, c: u64) -> f64 {
    let mut rng = SplitMix64(a * 1_000_003 + b * 1009 + c);
    2.0 * rng.unit() - 1.0
}

/// Node `n`'s samples file under `root` (`root/io<n>/`), started at `t0_s` (epoch seconds)
/// with cpu-clock sampling at 1 ms and `strings` (id 1 must be `cpu-clock`, the event).
pub fn samples_writer(root: &Path, n: u64, t0_s: u64, strings: &[(u32, &str)]) -> FileWriter {
    let dir = root.join(format!("io{n}"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut w = FileWriter::create_unique(
        &dir,
        |seq| samples_file_name(t0_s * NS_PER_S, seq),
        FileKind::Samples,
        t0_s * NS_PER_S,
        100 + n as u32,
    )
    .unwrap();
    let mut buf = RecordBuf::new();
    buf.info([("event", "cpu-clock"), ("period", "1000000")]);
    buf.strings(strings.iter().copied());
    w.append(&buf).unwrap();
    w
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
