//! Peers stay comparable when one node's tracer demotes a function (record kind 17): a
//! function demoted anywhere is compared as demoted everywhere, merged with its callers in
//! `time`, left out of `count` (`culprit_analysis::demoted`).
//!
//! The data is SYNTHETIC tracer output written with the format crate's writer as the runtime
//! writes it (Info, an Object record, 1 s Interval records, a Demotions record on the node that
//! demotes); tests/tests/budget.rs runs the same with real processes. Everything from the files
//! on is the library's real path: loader, family readers, analyzer, diagnosis.

mod common;

use std::path::Path;

use culprit_analysis::plan::Quiet;
use culprit_analysis::session::{self, DiagnoseRequest};
use culprit_analysis::setup::{Overrides, Setup};
use culprit_analysis::time::NS_PER_S;
use culprit_analysis::Diagnosis;
use culprit_format::{
    demotion_reason, end_reason, Demotion, DemotionsHead, IntervalEntry, IntervalHead, RecordBuf,
};

use common::{noise, temp_dir, trace_writer};

/// 2024-01-01T00:00:00Z.
const T0: u64 = 1_704_067_200;
const SECS: u64 = 600;
/// io1 demotes `leaf` here.
const DEMOTE_AT: u64 = 200;
/// io3's fault (when there is one) starts here.
const FAULT_FROM: u64 = 360;
const BIAS: u64 = 0x10_0000;

const MAIN: u64 = 0x100;
const HANDLE: u64 = 0x200;
const LEAF: u64 = 0x300;
const OTHER: u64 = 0x400;

#[derive(Clone, Copy)]
struct Case {
    /// io1 writes the Demotions record (else its data changes the same way, unexplained).
    record: bool,
    /// io3's `handle` slows down from FAULT_FROM.
    fault: bool,
}

fn entry(addr: u64, calls: u64, excl_ms: f64) -> IntervalEntry {
    let excl_ns = (excl_ms * 1e6) as u64;
    IntervalEntry {
        addr: BIAS + addr,
        calls,
        excl_ns,
        incl_ns: excl_ns,
    }
}

/// The hooks' cost of one traced call (Info `call_cost_ps`).
const CALL_NS: f64 = 50.0;

/// One second of node `n`: `handle` calls `leaf` 2 M times (300 ms of its own work, and the
/// hooks' 100 ms, `CALL_NS` a call, split between `leaf` and `handle`); once io1 demoted
/// `leaf`, its calls are gone, its work is `handle`'s and the hooks' time is gone.
fn second(n: u64, s: u64, c: Case) -> Vec<IntervalEntry> {
    let j = |k: u64| 1.0 + 0.02 * noise(n, s, k);
    let mut handle_ms = 200.0 * j(1);
    if c.fault && n == 3 && s >= FAULT_FROM {
        handle_ms *= 1.6;
    }
    let leaf_work_ms = 300.0 * j(2);
    let leaf_calls = (2_000_000.0 * j(3)) as u64;
    let hooks_ms = leaf_calls as f64 * CALL_NS / 1e6;
    let mut v = vec![
        entry(MAIN, 1, 50.0 * j(4)),
        entry(OTHER, 10_000, 150.0 * j(5)),
    ];
    if n == 1 && s >= DEMOTE_AT {
        v.push(entry(HANDLE, 20_000, handle_ms + leaf_work_ms));
    } else {
        v.push(entry(HANDLE, 20_000, handle_ms + 0.4 * hooks_ms));
        v.push(entry(LEAF, leaf_calls, leaf_work_ms + 0.6 * hooks_ms));
    }
    v
}

fn write(root: &Path, c: Case) {
    for n in 0..4u64 {
        let mut w = trace_writer(
            root,
            n,
            T0,
            BIAS,
            &[("budget", "2%"), ("call_cost_ps", "50000")],
        );
        let mut buf = RecordBuf::new();
        for s in 0..SECS {
            buf.clear();
            if n == 1 && s == DEMOTE_AT && c.record {
                // Written before the interval it happened in, as the runtime does.
                buf.demotions(
                    &DemotionsHead {
                        at_ns: (T0 + s) * NS_PER_S + 1,
                        budget_ppm: 20_000,
                        cost_ppm: 350_000,
                        call_cost_ps: 50_000,
                    },
                    &[Demotion {
                        func: BIAS + LEAF,
                        calls: 2_000_000,
                        self_ns: 400_000_000,
                        observed: 10_000,
                        reason: demotion_reason::BUDGET,
                        callers: vec![Some(BIAS + HANDLE)],
                    }],
                );
            }
            buf.interval(
                &IntervalHead {
                    start_ns: (T0 + s) * NS_PER_S,
                    dur_ns: NS_PER_S,
                    threads: 1,
                    ..IntervalHead::default()
                },
                second(n, s, c),
            );
            w.append(&buf).unwrap();
        }
        w.finish((T0 + SECS) * NS_PER_S, end_reason::EXIT).unwrap();
    }
}

fn diagnose(root: &Path, metric: &str) -> Diagnosis {
    let o = Overrides {
        metrics: vec![metric.into()],
        ..Overrides::default()
    };
    let setup = Setup::resolve(&o, None).unwrap();
    let req = DiagnoseRequest::dirs(&[root.to_path_buf()], 10);
    session::diagnose(&setup, None, req, &mut Quiet).expect("diagnose")
}

fn name(addr: u64) -> String {
    format!("server+{addr:#x}")
}

#[test]
fn a_demotion_on_one_node_flags_no_node() {
    let dir = temp_dir("demotions-ok");
    write(
        &dir.0,
        Case {
            record: true,
            fault: false,
        },
    );
    for metric in ["time", "count"] {
        let d = diagnose(&dir.0, metric);
        assert!(d.culprits.is_empty(), "{metric}: {d:#?}");
        assert!(
            d.notes.iter().any(|n| n.starts_with(
                "io1: the tracer of pid 101 stopped \
                 tracing server+0x300 at 2024-01-01T00:03:20"
            ) && n
                .contains("35 % of the program's CPU time, was above its budget of 2.0 %")),
            "{:#?}",
            d.notes
        );
    }
}

#[test]
fn the_same_change_unexplained_is_flagged() {
    // The test can fail: without the record, io1's data looks different in both metrics.
    let dir = temp_dir("demotions-unexplained");
    write(
        &dir.0,
        Case {
            record: false,
            fault: false,
        },
    );
    for metric in ["time", "count"] {
        let d = diagnose(&dir.0, metric);
        assert_eq!(d.culprits, ["io1"], "{metric}: {d:#?}");
    }
}

#[test]
fn a_fault_in_a_caller_is_still_found_and_named_with_its_merge() {
    let dir = temp_dir("demotions-fault");
    write(
        &dir.0,
        Case {
            record: true,
            fault: true,
        },
    );
    let d = diagnose(&dir.0, "time");
    assert_eq!(d.culprits, ["io3"], "{d:#?}");
    let io3 = d.metrics[0].nodes.iter().find(|n| n.node == "io3").unwrap();
    assert_eq!(
        io3.top[0].function,
        format!("{} + demoted {}", name(HANDLE), name(LEAF)),
        "{io3:#?}"
    );
}
