//! Round trips through the encoder and the reader, and what the reader does with damaged files.

use culprit_format::names::trace_file_name;
use culprit_format::writer::FileWriter;
use culprit_format::*;
use proptest::prelude::*;

fn sample_file() -> Vec<u8> {
    let mut header = FileHeader::new(FileKind::Trace, 1_000, 77);
    let mut buf = RecordBuf::new();
    buf.info([("node", "n1"), ("cmdline", "a\nb\\c")]);
    buf.object(&ObjectDesc {
        id: 1,
        flags: object_flags::MAIN,
        bias: 0x5555_0000,
        start: 0x5555_1000,
        end: 0x5555_9000,
        build_id: &[0xab; 20],
        path: "/usr/bin/prog",
    });
    buf.interval(
        &IntervalHead {
            start_ns: 2_000_000_000,
            dur_ns: 1_000_000_000,
            flags: 0,
            threads: 3,
            lost_frames: 1,
            overflows: 0,
            dropped: 4,
        },
        [
            IntervalEntry {
                addr: 0x5555_1234,
                calls: 10,
                excl_ns: 500,
                incl_ns: 900,
            },
            IntervalEntry {
                addr: 0x5555_2000,
                calls: 1,
                excl_ns: 7,
                incl_ns: 7,
            },
        ],
    );
    buf.strings([(1, "dd"), (2, "[kernel.kallsyms]"), (3, "")]);
    buf.samples(
        &SamplesHead {
            start_ns: 10,
            dur_ns: 10,
            flags: samples_flags::FREQ,
            event_sid: 1,
            period: 1000,
            total: 5,
            lost: 2,
        },
        [SampleEntry {
            program: 1,
            image: 2,
            function: 3,
            count: 5,
        }],
    );
    buf.events(10, 10, 0, [EventEntry { event: 2, count: 9 }]);
    buf.end(3_000_000_000, end_reason::EXIT);
    header.committed_end = DATA_OFFSET + buf.len() as u64;
    header.state = file_state::ENDED;
    let mut bytes = vec![0u8; DATA_OFFSET as usize];
    bytes[..128].copy_from_slice(&header.to_bytes());
    bytes.extend_from_slice(buf.as_bytes());
    bytes
}

#[test]
fn every_record_kind_round_trips() {
    let bytes = sample_file();
    let f = ParsedFile::parse(&bytes).unwrap();
    assert_eq!(f.kind, FileKind::Trace);
    assert!(f.ended());
    assert!(!f.truncated);
    assert_eq!(f.header.pid, 77);
    let recs: Vec<_> = f.records().collect::<Result<_, _>>().unwrap();
    assert_eq!(recs.len(), 7);
    match &recs[0] {
        Record::Info(i) => {
            assert_eq!(i.get("node"), Some("n1"));
            assert_eq!(i.get("cmdline"), Some("a\nb\\c"));
        }
        r => panic!("{r:?}"),
    }
    match &recs[1] {
        Record::Object(o) => {
            assert_eq!(o.path, "/usr/bin/prog");
            assert_eq!(o.build_id, &[0xab; 20]);
            assert_eq!(o.bias, 0x5555_0000);
            assert_eq!(o.flags, object_flags::MAIN);
        }
        r => panic!("{r:?}"),
    }
    match &recs[2] {
        Record::Interval(iv) => {
            assert_eq!(iv.start_ns, 2_000_000_000);
            assert_eq!(iv.threads, 3);
            assert_eq!(iv.lost_frames, 1);
            assert_eq!(iv.dropped, 4);
            let e: Vec<_> = iv.entries().collect();
            assert_eq!(e.len(), 2);
            assert_eq!(e[0].calls, 10);
            assert_eq!(e[0].incl_ns, 900);
            assert_eq!(e[1].addr, 0x5555_2000);
        }
        r => panic!("{r:?}"),
    }
    match &recs[3] {
        Record::Strings(s) => {
            let items: Vec<_> = s.items().map(|(i, s)| (i, s.into_owned())).collect();
            assert_eq!(
                items,
                vec![
                    (1, "dd".to_string()),
                    (2, "[kernel.kallsyms]".to_string()),
                    (3, String::new())
                ]
            );
        }
        r => panic!("{r:?}"),
    }
    match &recs[4] {
        Record::Samples(s) => {
            assert_eq!(s.lost, 2);
            assert_eq!(s.flags & samples_flags::FREQ, samples_flags::FREQ);
            assert_eq!(s.entries().next().unwrap().count, 5);
        }
        r => panic!("{r:?}"),
    }
    match &recs[5] {
        Record::Events(e) => assert_eq!(e.entries().next().unwrap().count, 9),
        r => panic!("{r:?}"),
    }
    match &recs[6] {
        Record::End(e) => assert_eq!(e.reason, end_reason::EXIT),
        r => panic!("{r:?}"),
    }
}

#[test]
fn truncated_file_keeps_complete_records() {
    let bytes = sample_file();
    // Cut inside the third record (the interval).
    let f = ParsedFile::parse(&bytes).unwrap();
    let mut it = f.records();
    it.next();
    it.next();
    let third = it.offset() as usize;
    let cut = &bytes[..third + 20];
    let f = ParsedFile::parse(cut).unwrap();
    assert!(f.truncated);
    let recs: Vec<_> = f.records().collect();
    assert_eq!(recs.len(), 3);
    assert!(recs[0].is_ok() && recs[1].is_ok());
    let err = recs[2].as_ref().unwrap_err().to_string();
    assert!(err.contains("cut short"), "{err}");
}

#[test]
fn corrupt_record_stops_iteration_with_offset() {
    let mut bytes = sample_file();
    let f = ParsedFile::parse(&bytes).unwrap();
    let mut it = f.records();
    it.next();
    let second = it.offset() as usize;
    bytes[second + 20] ^= 0xff;
    let f = ParsedFile::parse(&bytes).unwrap();
    let recs: Vec<_> = f.records().collect();
    assert_eq!(recs.len(), 2);
    assert_eq!(
        recs[1].as_ref().unwrap_err(),
        &FormatError::Corrupt {
            offset: second as u64,
            reason: "checksum mismatch"
        }
    );
}

#[test]
fn uncommitted_bytes_are_ignored() {
    let mut bytes = sample_file();
    let committed = bytes.len();
    bytes.extend_from_slice(&[0x55; 100]);
    let f = ParsedFile::parse(&bytes).unwrap();
    assert_eq!(f.records().count(), 7);
    assert_eq!(f.header.committed_end as usize, committed);
}

#[test]
fn header_errors_are_clear() {
    assert_eq!(
        ParsedFile::parse(b"hello").unwrap_err(),
        FormatError::NotCulprit
    );
    let mut bytes = sample_file();
    bytes[10] = 9; // min_reader_version
    let e = ParsedFile::parse(&bytes).unwrap_err();
    assert!(matches!(e, FormatError::TooNew { .. }));
    assert!(e.to_string().contains("upgrade culprit"));
    let mut bytes = sample_file();
    bytes[16] = 99; // kind
    assert!(matches!(
        ParsedFile::parse(&bytes).unwrap_err(),
        FormatError::BadHeader(_)
    ));
}

/// Recomputes the CRC of the record at `at` (after a deliberate change).
fn fix_crc(bytes: &mut [u8], at: usize) {
    let len = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
    let mut crc = record_crc(&bytes[at..at + 16], FORMAT_VERSION);
    crc.update(&bytes[at + 16..at + len]);
    let crc = crc.finish();
    bytes[at + 8..at + 12].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn a_flipped_kind_fails_the_checksum() {
    let mut bytes = sample_file();
    let f = ParsedFile::parse(&bytes).unwrap();
    let first = f.records().offset() as usize;
    bytes[first] ^= 0x40;
    let f = ParsedFile::parse(&bytes).unwrap();
    let err = f.records().next().unwrap().unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("corrupt record at byte {first}: checksum mismatch")
    );
}

#[test]
fn unknown_record_kinds_are_skipped() {
    let mut bytes = sample_file();
    let f = ParsedFile::parse(&bytes).unwrap();
    let first = f.records().offset() as usize;
    // Re-label the info record as kind 200 (its CRC, which covers the kind, fixed): still
    // valid, yields Unknown.
    bytes[first] = 200;
    fix_crc(&mut bytes, first);
    let f = ParsedFile::parse(&bytes).unwrap();
    let recs: Vec<_> = f.records().collect::<Result<_, _>>().unwrap();
    assert!(matches!(recs[0], Record::Unknown { kind: 200 }));
    assert_eq!(recs.len(), 7);
}

#[test]
fn file_writer_commits_and_ends() {
    let dir = std::env::temp_dir().join(format!("culprit-format-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut w = FileWriter::create_unique(
        &dir,
        |seq| trace_file_name(1, 2, seq),
        FileKind::Samples,
        5,
        1,
    )
    .unwrap();
    // A second writer with the same identity gets another name.
    let w2 = FileWriter::create_unique(
        &dir,
        |seq| trace_file_name(1, 2, seq),
        FileKind::Samples,
        5,
        1,
    )
    .unwrap();
    assert_ne!(w.path(), w2.path());
    let mut buf = RecordBuf::new();
    buf.info([("node", "x")]);
    w.append(&buf).unwrap();
    let live = std::fs::read(w.path()).unwrap();
    let f = ParsedFile::parse(&live).unwrap();
    assert!(!f.ended());
    assert_eq!(f.records().count(), 1);
    let path = w.finish(9, end_reason::DONE).unwrap();
    let done = std::fs::read(&path).unwrap();
    let f = ParsedFile::parse(&done).unwrap();
    assert!(f.ended());
    assert_eq!(f.records().count(), 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The tracer's records of one interval: Unwound, Edges, Histograms.
fn tracer_extras(buf: &mut RecordBuf, start_ns: u64) {
    let r = IntervalRef {
        start_ns,
        dur_ns: 1_000_000_000,
        flags: interval_flags::PARTIAL,
    };
    buf.unwound(
        &r,
        [UnwoundEntry {
            addr: 0x10,
            calls: 3,
        }],
    );
    buf.edges(
        &r,
        2,
        [
            EdgeEntry {
                caller: 0,
                callee: 0x10,
                calls: 1,
                excl_ns: 5,
                incl_ns: 9,
            },
            EdgeEntry {
                caller: 0x10,
                callee: 0x20,
                calls: 4,
                excl_ns: 4,
                incl_ns: 4,
            },
        ],
    );
    let mut a = Histogram::new(0x10);
    a.counts[0] = 1;
    a.counts[3] = 7;
    a.counts[HIST_BUCKETS - 1] = u64::MAX; // saturates to u32::MAX
    let mut b = Histogram::new(0x20);
    b.counts[10] = 2;
    let empty = Histogram::new(0x30);
    buf.histograms(&r, [&a, &empty, &b]);
}

#[test]
fn tracer_extras_round_trip() {
    let mut buf = RecordBuf::new();
    tracer_extras(&mut buf, 5_000);
    let recs: Vec<Record<'_>> = records_at(buf.as_bytes(), 0).map(|r| r.unwrap()).collect();
    assert_eq!(recs.len(), 3);
    let Record::Unwound(u) = &recs[0] else {
        panic!("{:?}", recs[0])
    };
    assert_eq!(u.interval.start_ns, 5_000);
    assert_eq!(
        u.entries().collect::<Vec<_>>(),
        [UnwoundEntry {
            addr: 0x10,
            calls: 3
        }]
    );
    let Record::Edges(e) = &recs[1] else {
        panic!("{:?}", recs[1])
    };
    assert_eq!(e.dropped, 2);
    let edges: Vec<_> = e.entries().collect();
    assert_eq!(edges.len(), 2);
    assert_eq!(
        (edges[1].caller, edges[1].callee, edges[1].calls),
        (0x10, 0x20, 4)
    );
    let Record::Histograms(h) = &recs[2] else {
        panic!("{:?}", recs[2])
    };
    assert_eq!(h.len(), 2, "functions without calls are left out");
    let hs: Vec<Histogram> = h.entries().collect();
    assert_eq!(hs[0].addr, 0x10);
    assert_eq!(hs[0].counts[0], 1);
    assert_eq!(hs[0].counts[3], 7);
    assert_eq!(hs[0].counts[HIST_BUCKETS - 1], u32::MAX as u64);
    assert_eq!(hs[0].counts.iter().filter(|&&c| c > 0).count(), 3);
    assert_eq!(hs[1].addr, 0x20);
    assert_eq!(hs[1].counts[10], 2);
    assert_eq!(hist_bucket(0), 0);
    assert_eq!(hist_bucket(1), 0);
    assert_eq!(hist_bucket(2), 1);
    assert_eq!(hist_bucket(1023), 9);
    assert_eq!(hist_bucket(1024), 10);
    assert_eq!(hist_bucket(u64::MAX), HIST_BUCKETS - 1);
    assert_eq!(hist_bucket_low_ns(10), 1024);
}

/// The sampler's Lost record (format version 7) round-trips; a short one is damage; a reader
/// that does not know the kind (older) skips it and reads the Samples record after it.
#[test]
fn lost_round_trips_and_older_readers_skip_it() {
    let mut buf = RecordBuf::new();
    let r = IntervalRef {
        start_ns: 2_000,
        dur_ns: 1_000,
        flags: interval_flags::PARTIAL,
    };
    let l = LostRec {
        interval: IntervalKey::default(),
        whose: lost_whose::NODE,
        samples: 3,
        events: 12_078,
        tracking: 5,
    };
    buf.lost(&r, &l);
    let rec = records_at(buf.as_bytes(), 0).next().unwrap().unwrap();
    let Record::Lost(got) = rec else {
        panic!("{rec:?}")
    };
    assert_eq!(
        got,
        LostRec {
            interval: IntervalKey {
                start_ns: 2_000,
                dur_ns: 1_000,
                flags: interval_flags::PARTIAL
            },
            ..l
        }
    );
    assert!(got.is_own());
    assert_eq!(buf.as_bytes().len(), RECORD_HEADER_SIZE + LOST_SIZE);
    // Cut to 40 bytes of payload (with a valid checksum): damage, not a panic.
    let mut bytes = buf.as_bytes()[..RECORD_HEADER_SIZE + 40].to_vec();
    bytes[4..8].copy_from_slice(&((RECORD_HEADER_SIZE + 40) as u32).to_le_bytes());
    fix_crc(&mut bytes, 0);
    assert!(records_at(&bytes, 0).next().unwrap().is_err());
    // A reader of an older version: the kind is unknown to it, and that is all.
    let mut old = buf.as_bytes().to_vec();
    old[0..2].copy_from_slice(&999u16.to_le_bytes());
    fix_crc(&mut old, 0);
    let mut then = RecordBuf::new();
    then.samples(
        &SamplesHead {
            start_ns: 2_000,
            dur_ns: 1_000,
            total: 7,
            lost: 3,
            ..SamplesHead::default()
        },
        [],
    );
    old.extend_from_slice(then.as_bytes());
    let recs: Vec<Record<'_>> = records_at(&old, 0).map(Result::unwrap).collect();
    assert!(matches!(recs[0], Record::Unknown { kind: 999 }));
    assert!(matches!(&recs[1], Record::Samples(s) if s.total == 7 && s.lost == 3));
}

#[test]
fn stacks_round_trip() {
    let mut buf = RecordBuf::new();
    let r = IntervalRef {
        start_ns: 10,
        dur_ns: 10,
        flags: 0,
    };
    let a: &[(u32, u32)] = &[(1, 2), (1, 3), (4, 5)];
    buf.stacks(&r, [(7, 9, a), (8, 1, &[][..])]);
    let rec = records_at(buf.as_bytes(), 0).next().unwrap().unwrap();
    let Record::Stacks(st) = rec else {
        panic!("{rec:?}")
    };
    let e: Vec<StackEntry> = st.entries().collect();
    assert_eq!(e.len(), 2);
    assert_eq!(
        e[0],
        StackEntry {
            program: 7,
            count: 9,
            frames: a.to_vec()
        }
    );
    assert!(e[1].frames.is_empty());
    // A depth past the record is an error, not a panic.
    let mut bytes = buf.as_bytes().to_vec();
    bytes[16 + 24 + 4] = 200;
    let crc = crc32(&bytes[16..]);
    bytes[8..12].copy_from_slice(&crc.to_le_bytes());
    assert!(records_at(&bytes, 0).next().unwrap().is_err());
}

#[test]
fn a_checkpoint_carries_its_interval_records() {
    let mut buf = RecordBuf::new();
    buf.interval(
        &IntervalHead {
            start_ns: 5_000,
            dur_ns: 1_000_000_000,
            flags: interval_flags::PARTIAL,
            ..Default::default()
        },
        [],
    );
    tracer_extras(&mut buf, 5_000);
    let p = pending_records(buf.as_bytes(), FORMAT_VERSION).expect("checkpoint");
    assert_eq!(p.interval.start_ns, 5_000);
    assert_eq!(p.extras.len(), 3);
    assert!(pending_interval(buf.as_bytes(), FORMAT_VERSION).is_some());
    // Records of another interval, or of another kind, make it no checkpoint.
    let mut other = RecordBuf::new();
    other.interval(
        &IntervalHead {
            start_ns: 5_000,
            dur_ns: 1_000_000_000,
            flags: interval_flags::PARTIAL,
            ..Default::default()
        },
        [],
    );
    tracer_extras(&mut other, 6_000);
    assert!(pending_records(other.as_bytes(), FORMAT_VERSION).is_none());
    let mut info = RecordBuf::new();
    info.interval(
        &IntervalHead {
            flags: interval_flags::PARTIAL,
            ..Default::default()
        },
        [],
    );
    info.info([("a", "b")]);
    assert!(pending_records(info.as_bytes(), FORMAT_VERSION).is_none());
}

#[test]
fn damaged_histograms_are_errors() {
    let mut buf = RecordBuf::new();
    tracer_extras(&mut buf, 1);
    let mut bytes = buf.as_bytes().to_vec();
    // The Histograms record is the last; claim more functions than it holds.
    let at = bytes.len() - buf.as_bytes().len();
    let mut recs = records_at(&bytes, 0);
    recs.next();
    recs.next();
    let h_at = recs.offset() as usize + at;
    bytes[h_at + 16 + 20] = 9;
    let crc = crc32(&bytes[h_at + 16..]);
    bytes[h_at + 8..h_at + 12].copy_from_slice(&crc.to_le_bytes());
    let last = records_at(&bytes, 0).last().unwrap();
    assert!(matches!(last, Err(FormatError::Corrupt { .. })), "{last:?}");
}

fn os_file(values: &[(u32, Option<u32>, f64)]) -> Vec<u8> {
    let mut header = FileHeader::new(FileKind::Samples, 1_000, 77);
    let mut buf = RecordBuf::new();
    buf.strings([(0, "disk.await"), (1, "vda"), (2, "ms"), (3, "cpu.user")]);
    let n = buf.os_metrics(
        &OsMetricsHead {
            start_ns: 5_000_000_000,
            dur_ns: 1_000_000_000,
            span_ns: 1_000_123_456,
            flags: interval_flags::PARTIAL,
        },
        values
            .iter()
            .map(|&(metric, instance, value)| OsMetricEntry {
                metric,
                instance,
                unit: 2,
                value,
            }),
    );
    assert_eq!(
        n as usize,
        values.iter().filter(|v| v.2.is_finite()).count()
    );
    buf.end(9, end_reason::DONE);
    header.committed_end = DATA_OFFSET + buf.len() as u64;
    let mut bytes = vec![0u8; DATA_OFFSET as usize];
    bytes[..128].copy_from_slice(&header.to_bytes());
    bytes.extend_from_slice(buf.as_bytes());
    bytes
}

#[test]
fn os_metrics_round_trip_and_leave_out_non_finite_values() {
    let values = [
        (0, Some(1), 12.5),
        (3, None, 0.0),
        (0, Some(1), f64::NAN),
        (3, None, f64::INFINITY),
        (3, None, -1e-300),
        (3, None, 1.8e300),
    ];
    let bytes = os_file(&values);
    let f = ParsedFile::parse(&bytes).unwrap();
    let recs: Vec<_> = f.records().collect::<Result<_, _>>().unwrap();
    assert_eq!(recs.len(), 3);
    let Record::OsMetrics(r) = &recs[1] else {
        panic!("{:?}", recs[1]);
    };
    assert_eq!(
        (r.start_ns, r.dur_ns, r.span_ns, r.flags),
        (
            5_000_000_000,
            1_000_000_000,
            1_000_123_456,
            interval_flags::PARTIAL
        )
    );
    let got: Vec<(u32, Option<u32>, u32, f64)> = r
        .entries()
        .map(|e| (e.metric, e.instance, e.unit, e.value))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, Some(1), 2, 12.5),
            (3, None, 2, 0.0),
            (3, None, 2, -1e-300),
            (3, None, 2, 1.8e300)
        ]
    );
    // The kind number is part of the contract.
    assert_eq!(RecordKind::OsMetrics as u16, 8);
    assert_eq!(RecordKind::from_u16(8), Some(RecordKind::OsMetrics));
}

#[test]
fn os_metrics_entry_count_is_checked() {
    let mut bytes = os_file(&[(0, None, 1.0)]);
    let f = ParsedFile::parse(&bytes).unwrap();
    let mut it = f.records();
    it.next();
    let at = it.offset() as usize;
    // Claim 1000 entries in a record that holds one; fix the CRC so only the count is wrong.
    bytes[at + 16 + 28..at + 16 + 32].copy_from_slice(&1000u32.to_le_bytes());
    fix_crc(&mut bytes, at);
    let f = ParsedFile::parse(&bytes).unwrap();
    let recs: Vec<_> = f.records().collect();
    assert_eq!(recs.len(), 2);
    let err = recs[1].as_ref().unwrap_err().to_string();
    assert!(err.contains("entry count exceeds"), "{err}");
}

proptest! {
    /// Whatever the damage, the reader returns errors, never panics, and never yields more
    /// records than were written.
    #[test]
    fn damaged_files_never_panic(flips in proptest::collection::vec((0usize..1000, any::<u8>()), 0..8),
                                 cut in 0usize..2000) {
        let mut bytes = sample_file();
        let data = DATA_OFFSET as usize;
        for (at, v) in flips {
            let i = data + at % (bytes.len() - data);
            bytes[i] = v;
        }
        bytes.truncate(bytes.len().saturating_sub(cut).max(128));
        if let Ok(f) = ParsedFile::parse(&bytes) {
            let n = f.records().take(100).count();
            prop_assert!(n <= 7);
            for r in f.records().flatten() {
                match r {
                    Record::Strings(s) => { let _ = s.items().count(); }
                    Record::Interval(i) => { let _ = i.entries().count(); }
                    Record::OsMetrics(o) => { let _ = o.entries().count(); }
                    _ => {}
                }
            }
        }
    }

    /// The same for the tracer's variable-length Histograms records and the other extras.
    #[test]
    fn damaged_extras_never_panic(flips in proptest::collection::vec((0usize..600, any::<u8>()), 1..6)) {
        let mut buf = RecordBuf::new();
        tracer_extras(&mut buf, 7);
        let mut bytes = buf.as_bytes().to_vec();
        for (at, v) in flips {
            let i = at % bytes.len();
            bytes[i] = v;
        }
        for r in records_at(&bytes, 0).take(10).flatten() {
            match r {
                Record::Histograms(h) => { let _ = h.entries().count(); }
                Record::Edges(e) => { let _ = e.entries().count(); }
                Record::Unwound(u) => { let _ = u.entries().count(); }
                _ => {}
            }
        }
        let _ = pending_records(&bytes, FORMAT_VERSION);
    }
}
