//! The tracer's richer data in diagnosis: caller → callee edges as components (`--features
//! edges`: root cause names the edge) and call-duration histograms compared with the CDF
//! distance (the `latency` family).
//!
//! The data is SYNTHETIC tracer output (written with the format crate's writer as the runtime
//! writes it: Info, an Object record, 1 s Interval records followed by Edges and Histograms
//! records); the functions are named by address (`server+0x…`: the object's file does not
//! exist). Everything from the files on is the library's real path: loader, family readers,
//! analyzer, diagnosis.

mod common;

use std::path::Path;

use common::{noise, temp_dir, trace_writer};
use culprit_analysis::diagnosis::MetricStatus;
use culprit_analysis::family::Features;
use culprit_analysis::plan::Quiet;
use culprit_analysis::session::{self, DiagnoseRequest};
use culprit_analysis::setup::{Overrides, Setup, TrainedThresholds};
use culprit_analysis::thresholds::{ThresholdRule, UnseenScale};
use culprit_analysis::time::NS_PER_S;
use culprit_analysis::train::{self, TrainingRun};
use culprit_analysis::Diagnosis;
use culprit_format::{
    end_reason, EdgeEntry, Histogram, IntervalEntry, IntervalHead, IntervalRef, RecordBuf,
};

/// 2024-01-01T00:00:00Z.
const T0: u64 = 1_704_067_200;
const SECS: u64 = 600;
/// io3's fault starts here (after the unsupervised rule's baseline windows).
const FAULT_FROM: u64 = 300;
const BIAS: u64 = 0x10_0000;

const MAIN: u64 = 0x100;
const HANDLE: u64 = 0x200;
const FLUSH: u64 = 0x300;
const IO_WRITE: u64 = 0x400;
const WORK: u64 = 0x500;

/// What one node writes in one second.
struct Second {
    entries: Vec<IntervalEntry>,
    edges: Vec<EdgeEntry>,
    hists: Vec<Histogram>,
}

/// Four nodes' trace files, one process each, 1 s intervals.
fn write(root: &Path, second: impl Fn(u64, u64) -> Second) {
    for n in 0..4u64 {
        let mut w = trace_writer(root, n, T0, BIAS, &[]);
        let mut buf = RecordBuf::new();
        for s in 0..SECS {
            let sec = second(n, s);
            let r = IntervalRef {
                start_ns: (T0 + s) * NS_PER_S,
                dur_ns: NS_PER_S,
                flags: 0,
            };
            buf.clear();
            buf.interval(
                &IntervalHead {
                    start_ns: r.start_ns,
                    dur_ns: r.dur_ns,
                    threads: 1,
                    ..IntervalHead::default()
                },
                sec.entries,
            );
            if !sec.edges.is_empty() {
                buf.edges(&r, 0, sec.edges);
            }
            if !sec.hists.is_empty() {
                buf.histograms(&r, &sec.hists);
            }
            w.append(&buf).unwrap();
        }
        w.finish((T0 + SECS) * NS_PER_S, end_reason::EXIT).unwrap();
    }
}

fn diagnose(root: &Path, o: Overrides) -> Diagnosis {
    let setup = Setup::resolve(&o, None).unwrap();
    let req = DiagnoseRequest::dirs(&[root.to_path_buf()], 10);
    session::diagnose(&setup, None, req, &mut Quiet).expect("diagnose")
}

fn edge(caller: u64, callee: u64, calls: u64, excl_ms: f64) -> EdgeEntry {
    let excl_ns = (excl_ms * 1e6) as u64;
    EdgeEntry {
        caller: if caller == 0 { 0 } else { BIAS + caller },
        callee: BIAS + callee,
        calls,
        excl_ns,
        incl_ns: excl_ns,
    }
}

fn name(addr: u64) -> String {
    format!("server+{addr:#x}")
}

/// io_write is called by handle and by flush; on io3 the calls from handle slow down.
fn edges_data(n: u64, s: u64) -> Second {
    let j = |c: u64| 1.0 + 0.02 * noise(n, s, c);
    let mut from_handle = 300.0 * j(1);
    let from_flush = 150.0 * j(2);
    if n == 3 && s >= FAULT_FROM {
        from_handle *= 1.5;
    }
    let edges = vec![
        edge(0, MAIN, 0, 0.0),
        edge(MAIN, HANDLE, 1000, 100.0 * j(3)),
        edge(MAIN, FLUSH, 500, 50.0 * j(4)),
        edge(HANDLE, IO_WRITE, 1000, from_handle),
        edge(FLUSH, IO_WRITE, 500, from_flush),
    ];
    // The functions' entries are their edges' sums.
    let mut entries: Vec<IntervalEntry> = Vec::new();
    for e in &edges {
        match entries.iter_mut().find(|x| x.addr == e.callee) {
            Some(x) => {
                x.calls += e.calls;
                x.excl_ns += e.excl_ns;
                x.incl_ns += e.incl_ns;
            }
            None => entries.push(IntervalEntry {
                addr: e.callee,
                calls: e.calls,
                excl_ns: e.excl_ns,
                incl_ns: e.incl_ns,
            }),
        }
    }
    entries.retain(|e| e.calls > 0);
    Second {
        entries,
        edges: edges.into_iter().filter(|e| e.calls > 0).collect(),
        hists: Vec::new(),
    }
}

#[test]
fn root_cause_names_the_edge_with_features_edges() {
    let dir = temp_dir("edges-family");
    write(&dir.0, edges_data);
    // Functions: io_write is the root cause (its two callers are mixed).
    let d = diagnose(
        &dir.0,
        Overrides {
            metrics: vec!["time".into()],
            ..Overrides::default()
        },
    );
    assert_eq!(d.culprits, ["io3"], "{d:#?}");
    let io3 = d.metrics[0].nodes.iter().find(|n| n.node == "io3").unwrap();
    assert_eq!(io3.top[0].function, name(IO_WRITE), "{io3:#?}");
    // Edges: the call path that slowed down.
    let d = diagnose(
        &dir.0,
        Overrides {
            metrics: vec!["time".into()],
            features: Some(Features::Edges),
            ..Overrides::default()
        },
    );
    assert_eq!(d.culprits, ["io3"], "{d:#?}");
    let m = &d.metrics[0];
    let io3 = m.nodes.iter().find(|n| n.node == "io3").unwrap();
    assert_eq!(io3.verdict, MetricStatus::Faulty);
    assert_eq!(
        io3.top[0].function,
        format!("{} → {}", name(HANDLE), name(IO_WRITE)),
        "{io3:#?}"
    );
    for n in m.nodes.iter().filter(|n| n.node != "io3") {
        assert_eq!(n.verdict, MetricStatus::Ok, "{n:#?}");
    }
}

/// `work`: 50,000 calls a second around 16 µs (buckets 13–15); on io3, 0.1 % of them take
/// 100× as long (bucket 21): the mean grows by about 10 %.
fn latency_data(n: u64, s: u64, fault: bool) -> Second {
    let calls = 50_000u64;
    let mut h = Histogram::new(BIAS + WORK);
    let j = |c: u64| 1.0 + 0.01 * noise(n, s, c);
    h.counts[13] = (0.2 * calls as f64 * j(1)) as u64;
    h.counts[15] = (0.2 * calls as f64 * j(2)) as u64;
    h.counts[14] = calls - h.counts[13] - h.counts[15];
    let mut excl_ns = calls * 16_000;
    if fault && n == 3 && s >= FAULT_FROM {
        let slow = calls / 1000;
        h.counts[14] -= slow;
        h.counts[21] = slow;
        excl_ns += slow * 1_600_000;
    }
    assert_eq!(h.counts.iter().sum::<u64>(), calls);
    Second {
        entries: vec![IntervalEntry {
            addr: BIAS + WORK,
            calls,
            excl_ns,
            incl_ns: excl_ns,
        }],
        edges: Vec::new(),
        hists: vec![h],
    }
}

#[test]
fn latency_distributions_show_a_rare_slow_call() {
    let dir = temp_dir("latency-family");
    let (healthy, faulty) = (dir.0.join("healthy"), dir.0.join("faulty"));
    write(&healthy, |n, s| latency_data(n, s, false));
    write(&faulty, |n, s| latency_data(n, s, true));
    let o = || Overrides {
        metrics: vec!["latency".into()],
        ..Overrides::default()
    };
    // Without training the rule's floor (ρ = 5 % of the calls moved one bucket) is above a
    // 0.1 % tail: nobody is flagged, but io3's scores are the largest.
    let d = diagnose(&faulty, o());
    assert!(d.culprits.is_empty(), "{d:#?}");
    let top = d.metrics[0]
        .nodes
        .iter()
        .max_by(|a, b| a.max_score.total_cmp(&b.max_score))
        .unwrap();
    assert_eq!(top.node, "io3");
    // The distance counts the 0.1 % of calls moved 7 buckets: 0.007 once the window is all
    // fault.
    assert!((top.max_score - 0.007).abs() < 0.001, "{}", top.max_score);
    // Trained on a fault-free run (seed 000), the tail is a fault.
    let setup = Setup::resolve(&o(), None).unwrap();
    let training = train::train(
        &setup,
        vec![TrainingRun::dir(&healthy)],
        train::Rules {
            threshold: ThresholdRule::Window,
            unseen: UnseenScale::default(),
        },
        &mut Quiet,
    )
    .unwrap();
    let trained = TrainedThresholds {
        file: training.file,
        name: "healthy".into(),
    };
    let setup = Setup::resolve(&o(), Some(&trained)).unwrap();
    let req = DiagnoseRequest::dirs(std::slice::from_ref(&faulty), 10);
    let d = session::diagnose(&setup, Some(&trained), req, &mut Quiet).expect("diagnose");
    assert_eq!(d.culprits, ["io3"], "{d:#?}");
    let m = &d.metrics[0];
    assert_eq!(m.metric.name(), "latency");
    assert_eq!(m.score_unit, "cdf");
    let io3 = m.nodes.iter().find(|n| n.node == "io3").unwrap();
    assert_eq!(io3.verdict, MetricStatus::Faulty);
    assert_eq!(io3.top[0].function, name(WORK), "{io3:#?}");
    for n in m.nodes.iter().filter(|n| n.node != "io3") {
        assert_eq!(n.verdict, MetricStatus::Ok, "{n:#?}");
    }
}
