//! The OS metrics through the library's whole path: records → OS families → training →
//! diagnosis → combined verdict → the resource checklist, and a node without OS metrics among
//! peers that have them.
//!
//! The data is SYNTHETIC (written with the format crate's writer as `culprit sample` writes it:
//! 1 s sample profiles and 1 s OsMetrics records, names and units from the catalogue): four
//! nodes whose servers write 8 MB/s and wait ~100 ms/s for block I/O. In the faulty run io1's
//! disk turns slow from second 120 — its writes fall to a quarter and its I/O delay rises to
//! ~900 ms/s — and io3 records no OS metrics at all (a sampler run with --no-os-metrics).
//! Everything from the files on is the library's real path.

mod common;

use std::path::Path;

use common::{noise, samples_second, samples_writer, temp_dir, TempDir};
use culprit_analysis::diagnosis::MetricStatus;
use culprit_analysis::family::Metric;
use culprit_analysis::missing::Finding;
use culprit_analysis::plan::Quiet;
use culprit_analysis::resource::Kind;
use culprit_analysis::session::{self, DiagnoseRequest};
use culprit_analysis::setup::{Overrides, Setup, TrainedThresholds};
use culprit_analysis::thresholds::{ThresholdRule, UnseenScale};
use culprit_analysis::time::NS_PER_S;
use culprit_analysis::train::{self, TrainingRun};
use culprit_analysis::Diagnosis;
use culprit_format::os_metrics::name;
use culprit_format::{end_reason, OsMetricEntry, OsMetricsHead, RecordBuf, SampleEntry};

/// 2024-01-01T00:00:00Z.
const T0: u64 = 1_704_067_200;
const SECS: u64 = 240;
const FAULT_FROM: u64 = 120;

/// Writes one run: `faulty` slows io1's disk from `FAULT_FROM` and leaves io3 without OS
/// metrics; `seed` varies the noise between runs.
fn write(root: &Path, faulty: bool, seed: u64) {
    for n in 0..4u64 {
        let mut w = samples_writer(
            root,
            n,
            T0,
            &[
                (1, "cpu-clock"),
                (2, "server"),
                (3, "handle_io"),
                (4, "io_pwrite"),
                (10, name::PROC_BLKIO_DELAY),
                (11, "ms/s"),
                (12, name::CG_WR_BYTES),
                (13, "B/s"),
                (14, name::NET_RXBYT),
                (15, "eth0"),
            ],
        );
        let mut buf = RecordBuf::new();
        let with_os = !(faulty && n == 3);
        for s in 0..SECS {
            let z = |c: u64| noise(seed * 10 + n, s, c);
            let slow = faulty && n == 1 && s >= FAULT_FROM;
            buf.clear();
            let entries: Vec<SampleEntry> = [(3u32, 300.0), (4, 120.0)]
                .iter()
                .enumerate()
                .map(|(i, &(f, base))| SampleEntry {
                    program: 2,
                    image: 2,
                    function: f,
                    count: (base * (1.0 + 0.05 * z(i as u64))).round() as u64,
                })
                .collect();
            samples_second(&mut buf, T0 + s, entries);
            if with_os {
                let (delay, bytes) = if slow { (900.0, 2e6) } else { (100.0, 8e6) };
                buf.os_metrics(
                    &OsMetricsHead {
                        start_ns: (T0 + s) * NS_PER_S,
                        dur_ns: NS_PER_S,
                        span_ns: NS_PER_S,
                        flags: 0,
                    },
                    [
                        OsMetricEntry {
                            metric: 10,
                            instance: None,
                            unit: 11,
                            value: delay * (1.0 + 0.2 * z(10)),
                        },
                        OsMetricEntry {
                            metric: 12,
                            instance: None,
                            unit: 13,
                            value: bytes * (1.0 + 0.1 * z(11)),
                        },
                        OsMetricEntry {
                            metric: 14,
                            instance: Some(15),
                            unit: 13,
                            value: 9e6 * (1.0 + 0.1 * z(12)),
                        },
                    ],
                );
            }
            w.append(&buf).unwrap();
        }
        w.finish((T0 + SECS) * NS_PER_S, end_reason::SIGNAL)
            .unwrap();
    }
}

/// 10 s / 5 s windows (the OS metrics: 30 s / 5 s).
fn overrides() -> Overrides {
    Overrides {
        win_size_ns: Some(10 * NS_PER_S),
        win_shift_ns: Some(5 * NS_PER_S),
        min_samples: Some(1.0),
        ..Overrides::default()
    }
}

fn diagnose(faulty: &Path, trained: &TrainedThresholds) -> Diagnosis {
    let setup = Setup::resolve(&overrides(), Some(trained)).unwrap();
    let req = DiagnoseRequest::dirs(&[faulty.to_path_buf()], 10);
    session::diagnose(&setup, Some(trained), req, &mut Quiet).expect("diagnose")
}

#[test]
fn a_slow_disk_is_named_and_a_node_without_os_metrics_is_still_compared() {
    let train_dirs: Vec<TempDir> = (0..2).map(|i| temp_dir(&format!("osf-train{i}"))).collect();
    for (i, d) in train_dirs.iter().enumerate() {
        write(&d.0, false, i as u64 + 1);
    }
    let setup = Setup::resolve(&overrides(), None).unwrap();
    let runs = train_dirs.iter().map(|d| TrainingRun::dir(&d.0)).collect();
    let training = train::train(
        &setup,
        runs,
        train::Rules {
            threshold: ThresholdRule::Window,
            unseen: UnseenScale::default(),
        },
        &mut Quiet,
    )
    .unwrap();
    let file = &training.file;
    // The OS metrics are trained with their own windows, recorded in the file.
    assert!(file
        .metrics
        .contains_key(&Metric::from_name(name::PROC_BLKIO_DELAY).unwrap()));
    assert_eq!(
        file.settings.os_windows_ns,
        Some((30 * NS_PER_S, 5 * NS_PER_S))
    );
    let tdir = temp_dir("osf-thresholds");
    let tpath = tdir.0.join("t.json");
    file.save(&tpath).unwrap();
    let trained = TrainedThresholds::load(&tpath).unwrap();

    let faulty = temp_dir("osf-faulty");
    write(&faulty.0, true, 7);
    let d = diagnose(&faulty.0, &trained);
    assert_eq!(d.culprits, ["io1"], "{d:#?}");
    let v = d.verdict("io1").unwrap();
    let r = v.resource.as_ref().unwrap();
    assert_eq!(r.kind, Kind::SlowDisk, "{r:#?}");
    assert!(r.summary.starts_with("I/O delay "), "{}", r.summary);
    let delay = r
        .evidence
        .iter()
        .find(|o| o.metric == name::PROC_BLKIO_DELAY)
        .unwrap();
    assert!(delay.diverges && delay.ratio.unwrap() > 5.0, "{delay:#?}");
    assert!(r.confidence > 0.5, "{r:#?}");
    // The OS family found it; its contribution is reported.
    let os = v.combined.families.iter().find(|f| f.family == Metric::OS);
    assert!(os.is_some_and(|f| !f.faulty.is_empty()), "{v:#?}");

    // io3 recorded no OS metrics: one finding says so (not one per OS metric), and it is
    // still compared on the samples.
    let io3: Vec<&Finding> = d.findings.iter().filter(|f| f.node() == "io3").collect();
    assert_eq!(io3.len(), 1, "{io3:#?}");
    assert!(
        matches!(io3[0], Finding::NoData { metric, .. } if *metric == Metric::OS),
        "{io3:#?}"
    );
    assert!(
        io3[0].describe().contains("no OS metrics"),
        "{}",
        io3[0].describe()
    );
    let samples = d.metric(Metric::SAMPLES).unwrap();
    let s3 = samples.nodes.iter().find(|n| n.node == "io3").unwrap();
    assert_eq!(s3.verdict, MetricStatus::Ok);
    assert!(s3.windows_scored > 20, "{s3:#?}");
    for m in d.metrics.iter().filter(|m| m.family == Metric::OS) {
        let n3 = m.nodes.iter().find(|n| n.node == "io3").unwrap();
        assert_eq!(n3.verdict, MetricStatus::NoData, "{}", m.metric);
    }
    assert!(d.verdict("io3").unwrap().resource.is_none());

    // The report reads back through the strict reader.
    let json = serde_json::to_string(&d).unwrap();
    let back: Diagnosis = serde_json::from_str(&json).unwrap();
    assert_eq!(back.verdicts, d.verdicts);
}
