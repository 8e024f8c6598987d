//! Reading a dataset in bounded steps (`Dataset::set_read_limit`): every record is read exactly
//! once, whatever the limit (records cut at no boundary, a record larger than the limit read
//! whole), and the file's state at the end is the same as after one unlimited read.

use std::path::{Path, PathBuf};

use culprit_analysis::data::{Dataset, FileStatus, LoadOptions};
use culprit_format::synthetic;
use culprit_format::{end_reason, EventEntry, RecordBuf, SampleEntry, SamplesHead};

const NS: u64 = 1_000_000_000;
const T0: u64 = 1_704_067_200 * NS;

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("culprit-analysis-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// One node, one sampler file of `n` 10 s intervals; interval `i` has `1 + i % 7` entries
/// (interval 50 has 400: a record of about 10 KiB) and one kernel event count.
fn write(root: &Path, n: u64) {
    let names: Vec<String> = (0..400).map(|i| format!("f{i}")).collect();
    let strings: Vec<(u32, &str)> = [(1, "cpu-clock"), (2, "srv"), (3, "tcp:tcp_retransmit_skb")]
        .into_iter()
        .chain(
            names
                .iter()
                .enumerate()
                .map(|(i, s)| (10 + i as u32, s.as_str())),
        )
        .collect();
    let mut w = synthetic::samples_file(
        &root.join("n1"),
        T0,
        42,
        &[("event", "cpu-clock"), ("period", "1000000")],
        &strings,
    )
    .unwrap();
    let mut buf = RecordBuf::new();
    for i in 0..n {
        buf.clear();
        let k = if i == 50 { 400 } else { 1 + i % 7 };
        let entries: Vec<SampleEntry> = (0..k)
            .map(|f| SampleEntry {
                program: 2,
                image: 2,
                function: 10 + f as u32,
                count: i + f,
            })
            .collect();
        let total = entries.iter().map(|e| e.count).sum();
        buf.samples(
            &SamplesHead {
                start_ns: T0 + i * 10 * NS,
                dur_ns: 10 * NS,
                event_sid: 1,
                period: 1_000_000,
                total,
                ..Default::default()
            },
            entries,
        );
        buf.events(
            T0 + i * 10 * NS,
            10 * NS,
            0,
            [EventEntry { event: 3, count: i }],
        );
        w.append(&buf).unwrap();
    }
    w.finish(T0 + n * 10 * NS, end_reason::EXIT).unwrap();
}

/// (intervals, samples, events) read, taking and forgetting what each refresh read.
fn read_in_steps(root: &Path, limit: Option<u64>) -> (usize, u64, u64, usize, FileStatus) {
    let source = culprit_analysis::data::DirSource::new(vec![root.to_path_buf()], false);
    let mut ds = Dataset::new(Box::new(source), LoadOptions::default());
    ds.set_read_limit(limit);
    let (mut intervals, mut samples, mut events, mut refreshes) = (0, 0, 0, 0);
    loop {
        let stats = ds.refresh().unwrap();
        refreshes += 1;
        for s in &mut ds.nodes[0].samples {
            for iv in s.intervals.drain(..) {
                intervals += 1;
                samples += iv.entries.iter().map(|e| e.count).sum::<u64>();
            }
            for iv in s.events.drain(..) {
                events += iv.counts.iter().map(|c| c.count).sum::<u64>();
            }
        }
        if stats.unread_streams == 0 {
            break;
        }
        assert!(refreshes < 10_000, "no progress");
    }
    assert!(ds.warnings.is_empty(), "{:?}", ds.warnings);
    let status = ds.nodes[0].samples[0].status.clone();
    (intervals, samples, events, refreshes, status)
}

#[test]
fn every_record_once_whatever_the_limit() {
    let root = temp_dir("read-limit");
    write(&root, 200);
    let (n, samples, events, refreshes, status) = read_in_steps(&root, None);
    assert_eq!(n, 200);
    assert_eq!(refreshes, 1);
    assert_eq!(status, FileStatus::Ended);
    // 16 bytes: one record per refresh; 1000: a few; 4096: below the 10 KiB record.
    for limit in [16, 1000, 4096, 1 << 20] {
        let got = read_in_steps(&root, Some(limit));
        assert_eq!((got.0, got.1, got.2), (n, samples, events), "limit {limit}");
        assert_eq!(got.4, FileStatus::Ended, "limit {limit}");
        // Bytes of records: about 40 KiB, one record of about 10 KiB.
        let least = match limit {
            16 => 400, // one record per refresh
            1000 => 30,
            4096 => 8,
            _ => 1,
        };
        assert!(got.3 >= least, "limit {limit}: {} refreshes", got.3);
    }
    let _ = std::fs::remove_dir_all(&root);
}
