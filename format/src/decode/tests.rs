//! Unit tests of the record stream: checkpoints.

use super::*;
use crate::encode::RecordBuf;
use crate::interval::IntervalHead;
use crate::writer::header_page;

/// A file with one committed Info record and a checkpoint past it.
fn file_with_checkpoint(flags: u32) -> Vec<u8> {
    let mut bytes = header_page(FileKind::Trace, 1, 2);
    let mut buf = RecordBuf::new();
    buf.info([("pid", "2")]);
    bytes.extend_from_slice(buf.as_bytes());
    let committed = bytes.len() as u64;
    buf.clear();
    buf.interval(
        &IntervalHead {
            start_ns: 1_000,
            dur_ns: 1_000,
            flags,
            dropped: 3,
            ..Default::default()
        },
        [IntervalEntry {
            addr: 0x10,
            calls: 7,
            excl_ns: 1,
            incl_ns: 1,
        }],
    );
    bytes.extend_from_slice(buf.as_bytes());
    let pending = bytes.len() as u64;
    bytes[HEADER_COMMITTED_END_OFFSET..HEADER_COMMITTED_END_OFFSET + 8]
        .copy_from_slice(&committed.to_le_bytes());
    bytes[HEADER_PENDING_END_OFFSET..HEADER_PENDING_END_OFFSET + 8]
        .copy_from_slice(&pending.to_le_bytes());
    bytes
}

#[test]
fn checkpoint_is_read_only_when_intact() {
    let bytes = file_with_checkpoint(interval_flags::PARTIAL);
    let pf = ParsedFile::parse(&bytes).unwrap();
    assert_eq!(pf.records().count(), 1, "the checkpoint is not committed");
    let iv = pf.pending().expect("checkpoint");
    assert_eq!(iv.entries().next().unwrap().calls, 7);
    assert_eq!(iv.dropped, 3);
    // Torn (the writer rewriting it): ignored.
    let mut torn = bytes.clone();
    let n = torn.len();
    torn[n - 8] ^= 0xff;
    assert!(ParsedFile::parse(&torn).unwrap().pending().is_none());
    // Not flagged partial, or cut off: ignored.
    let full = file_with_checkpoint(0);
    assert!(ParsedFile::parse(&full).unwrap().pending().is_none());
    assert!(ParsedFile::parse(&bytes[..n - 8])
        .unwrap()
        .pending()
        .is_none());
    // Version-1 files (pending_end 0) have none.
    let mut v1 = bytes.clone();
    v1[HEADER_PENDING_END_OFFSET..HEADER_PENDING_END_OFFSET + 8].fill(0);
    assert!(ParsedFile::parse(&v1).unwrap().pending().is_none());
}
