//! A metric family whose values are compared as distributions (seed 001 §5, CDF distances),
//! defined outside the crate through the public trait: the per-second sample counts of each
//! function, as cumulative histograms on shared bins, in its own 10 s / 5 s windows.
//!
//! The data is SYNTHETIC sampler output (written with the format crate's writer as `culprit
//! sample` writes it, 1 s intervals): node io3 starts alternating twice and a tenth of its
//! usual `compress_block` samples second by second — the same window sums, another
//! distribution. Compared as sums (the built-in `samples` family) nothing is flagged; compared
//! as distributions io3 is the culprit and `compress_block` its function. Everything from the
//! files on is the library's real path: loader, family reader, analyzer, diagnosis.

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{noise, samples_second, samples_writer, temp_dir};
use culprit_analysis::data::NodeData;
use culprit_analysis::diagnosis::MetricStatus;
use culprit_analysis::family::sampler::Samples;
use culprit_analysis::family::{
    About, Comparison, FamilyReader, KeepRule, KeepSettings, Metric, MetricFamily, Windows,
};
use culprit_analysis::plan::Quiet;
use culprit_analysis::session::{self, DiagnoseRequest};
use culprit_analysis::setup::{Overrides, Setup};
use culprit_analysis::time::NS_PER_S;
use culprit_analysis::Diagnosis;
use culprit_format::{end_reason, RecordBuf, SampleEntry};

/// 2024-01-01T00:00:00Z.
const T0: u64 = 1_704_067_200;
const SECS: u64 = 240;
/// io3's distribution changes from here (after the unsupervised rule's baseline windows).
const FAULT_FROM: u64 = 120;

/// Per-second sample counts of each function, compared as distributions.
#[derive(Debug)]
struct SamplesPerSecond;

impl SamplesPerSecond {
    /// What `samples` is, but per second, compared as distributions in its own windows (and
    /// unlike it not recording how nodes were sampled).
    const ABOUT: About = About {
        metric: Metric::new("samples-per-second"),
        unit: "samples/s",
        comparison: Comparison::Cdf { max_bins: 1000 },
        windows: Some(Windows {
            size_ns: 10 * NS_PER_S,
            shift_ns: 5 * NS_PER_S,
        }),
        sampled: false,
        ..Samples::ABOUT
    };
}

impl MetricFamily for SamplesPerSecond {
    fn about(&self) -> &About {
        &Self::ABOUT
    }
    fn keep_rule(&self, _keep: &KeepSettings) -> KeepRule {
        KeepRule::All
    }
    fn has_data(&self, node: &NodeData) -> bool {
        Samples.has_data(node)
    }
    fn interval_lengths(&self, node: &NodeData, see: &mut dyn FnMut(u64)) {
        Samples.interval_lengths(node, see)
    }
    fn reader(&self, by_program: bool) -> Box<dyn FamilyReader> {
        // The same records as `samples`, one value per function per second.
        Samples.reader(by_program)
    }
}

/// Four nodes, 1 s intervals of cpu-clock samples; io3's `compress_block` alternates 1.9× and
/// 0.1× from `FAULT_FROM` on.
fn write(root: &Path) {
    let funcs = [
        ("handle_io", 300.0),
        ("compress_block", 200.0),
        ("memcpy", 80.0),
    ];
    for n in 0..4u64 {
        let mut w = samples_writer(
            root,
            n,
            T0,
            &[
                (1, "cpu-clock"),
                (2, "server"),
                (3, "handle_io"),
                (4, "compress_block"),
                (5, "memcpy"),
            ],
        );
        let mut buf = RecordBuf::new();
        for s in 0..SECS {
            buf.clear();
            let entries: Vec<SampleEntry> = funcs
                .iter()
                .enumerate()
                .map(|(fi, (_, base))| {
                    let mut v = base * (1.0 + 0.05 * noise(n, s, fi as u64));
                    if n == 3 && fi == 1 && s >= FAULT_FROM {
                        v = base * if s % 2 == 0 { 1.9 } else { 0.1 };
                    }
                    SampleEntry {
                        program: 2,
                        image: 2,
                        function: 3 + fi as u32,
                        count: v.round() as u64,
                    }
                })
                .collect();
            samples_second(&mut buf, T0 + s, entries);
            w.append(&buf).unwrap();
        }
        w.finish((T0 + SECS) * NS_PER_S, end_reason::SIGNAL)
            .unwrap();
    }
}

fn diagnose(root: &Path, setup: &Setup) -> Diagnosis {
    let req = DiagnoseRequest::dirs(&[root.to_path_buf()], 10);
    session::diagnose(setup, None, req, &mut Quiet).expect("diagnose")
}

#[test]
fn distributions_show_what_sums_cannot() {
    let dir = temp_dir("cdf-family");
    write(&dir.0);
    // Window sums (the built-in family) in the same 10 s / 5 s windows: io3's sums are its
    // peers', nothing stands out.
    let sums = Setup::resolve(
        &Overrides {
            win_size_ns: Some(10 * NS_PER_S),
            win_shift_ns: Some(5 * NS_PER_S),
            ..Overrides::default()
        },
        None,
    )
    .unwrap();
    let d = diagnose(&dir.0, &sums);
    assert_eq!(d.metrics.len(), 1, "{d:#?}");
    assert!(d.culprits.is_empty(), "sums flag nobody: {d:#?}");

    // The same records compared as distributions, the family's own windows inside the
    // analysis' default 60 s / 30 s.
    let mut cdf = Setup::resolve(&Overrides::default(), None).unwrap();
    cdf.families = vec![Arc::new(SamplesPerSecond)];
    let d = diagnose(&dir.0, &cdf);
    assert_eq!(d.culprits, ["io3"], "{d:#?}");
    let m = &d.metrics[0];
    assert_eq!(m.metric.name(), "samples-per-second");
    assert_eq!(m.score_unit, "cdf");
    let io3 = m.nodes.iter().find(|n| n.node == "io3").unwrap();
    assert_eq!(io3.verdict, MetricStatus::Faulty);
    assert_eq!(io3.top[0].function, "compress_block", "{io3:#?}");
    // Its own windows: 10 s long, every 5 s; faulty once the distribution changed.
    assert_eq!(m.windows_ns.map(|w| w.size_ns), Some(10 * NS_PER_S));
    let w = &io3.anomalous_windows[0];
    assert_eq!(w.start_ns % (5 * NS_PER_S), 0);
    let from = io3.episodes[0].from;
    assert!(from >= "2024-01-01T00:01:50Z".parse().unwrap(), "{io3:#?}");
    // Every node's score of every window is kept (not in the JSON report).
    let expected = (SECS - 10) / 5 + 1;
    for n in &m.nodes {
        assert_eq!(n.scores.len() as u64, expected, "{}", n.node);
        if n.node != "io3" {
            assert_eq!(n.verdict, MetricStatus::Ok, "{n:#?}");
        }
    }
}
