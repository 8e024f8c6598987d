//! The readers stream: a header that claims 40 GiB of records and a 2 GiB file whose records
//! go bad are each read by `culprit report` and `culprit diagnose` in under 200 MB of memory
//! (the child's `ru_maxrss`, from `wait4`), and cost their own node only.

use std::path::Path;
use std::process::{Command, Stdio};

use culprit_format::{ParsedFile, HEADER_COMMITTED_END_OFFSET, MAX_RECORD_LEN};
use culprit_tests::*;

/// Limit of the issue: 200 MB.
const LIMIT_KB: i64 = 200 * 1000;

/// Runs `cmd` with its output discarded; returns its exit code and peak resident set (KiB).
fn run_measured(cmd: &mut Command) -> (i32, i64) {
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our child with valid pointers; the Child is not waited on again.
    let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
    assert_eq!(r, pid, "wait4: {}", std::io::Error::last_os_error());
    std::mem::forget(child);
    (libc::WEXITSTATUS(status), ru.ru_maxrss)
}

fn set_committed(path: &Path, end: u64) {
    use std::os::unix::fs::FileExt as _;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&end.to_le_bytes(), HEADER_COMMITTED_END_OFFSET as u64)
        .unwrap();
}

#[test]
fn huge_claims_and_huge_files_are_read_in_bounded_memory() {
    let dir = TempDir::new("mem");
    write_peer_samples(dir.path(), true, false);
    // io1: a header claiming 40 GiB of committed records.
    let f1 = node_file(dir.path(), "io1");
    set_committed(&f1, 40 << 30);
    // io3: its records, then one whose header says 256 MiB long followed by garbage, the file
    // sparse up to 2 GiB and all of it committed.
    let f3 = node_file(dir.path(), "io3");
    let bytes = std::fs::read(&f3).unwrap();
    let end = ParsedFile::parse(&bytes).unwrap().header.committed_end;
    let mut rec = vec![0u8; 16];
    rec[0..2].copy_from_slice(&6u16.to_le_bytes());
    rec[4..8].copy_from_slice(&(MAX_RECORD_LEN - 8).to_le_bytes());
    rec.extend((0..1 << 20).map(|i: u32| (i.wrapping_mul(2_654_435_761) >> 24) as u8));
    {
        use std::os::unix::fs::FileExt as _;
        let f = std::fs::OpenOptions::new().write(true).open(&f3).unwrap();
        f.write_all_at(&rec, end).unwrap();
        f.set_len(2 << 30).unwrap();
    }
    set_committed(&f3, 2 << 30);
    for verb in [&["report", "--json"][..], &["diagnose"][..]] {
        let (code, kb) = run_measured(culprit().args(verb).arg(dir.path()));
        eprintln!("{verb:?}: exit {code}, max RSS {kb} KiB");
        assert!(kb < LIMIT_KB, "{verb:?} used {kb} KiB");
        // report succeeds; diagnose still finds io2 (the others' damage is not a verdict).
        assert_eq!(code, if verb[0] == "report" { 0 } else { 1 }, "{verb:?}");
    }
    let o = culprit()
        .args(["diagnose", "--json"])
        .arg(dir.path())
        .output()
        .unwrap();
    let v = stdout_json(&o);
    assert_eq!(v["culprits"], serde_json::json!(["io2"]));
    let damaged: Vec<&str> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["kind"] == "damaged")
        .map(|f| f["node"].as_str().unwrap())
        .collect();
    assert_eq!(damaged, ["io1", "io3"]);
}
