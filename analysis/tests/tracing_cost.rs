//! The tool's cost is never a root cause: samples in the tracing runtime (`culprit runtime`
//! in `libculprit_rt.so`, and the program's PLT stubs of the hooks) are not compared — not in the scores, the suspect ranking or the
//! root-cause tables — and the report shows them apart, as each node's tracing cost.
//!
//! The data is SYNTHETIC sampler output (written with the format crate's writer as `culprit
//! sample` writes it, 1 s intervals); everything from the files on is the library's real path.

mod common;

use std::path::Path;

use common::{noise, samples_second, samples_writer, temp_dir};
use culprit_analysis::plan::Quiet;
use culprit_analysis::session::{self, DiagnoseRequest};
use culprit_analysis::setup::{Overrides, Setup};
use culprit_analysis::time::NS_PER_S;
use culprit_analysis::Diagnosis;
use culprit_format::{end_reason, RecordBuf, SampleEntry};

/// 2024-01-01T00:00:00Z.
const T0: u64 = 1_704_067_200;
const SECS: u64 = 300;
const FROM: u64 = 150;

/// Four nodes; from `FROM` on, io2's runtime and its hooks' PLT stub take five times their
/// peers' samples (a node
/// tracing more, or its peers having demoted functions), and with `fault` io3's
/// `compress_block` doubles.
fn write(root: &Path, fault: bool) {
    // (image string, function string, samples per second)
    let funcs = [(3, 4, 300.0), (3, 5, 200.0), (6, 7, 50.0), (3, 8, 20.0)];
    for n in 0..4u64 {
        let mut w = samples_writer(
            root,
            n,
            T0,
            &[
                (1, "cpu-clock"),
                (2, "server"),
                (3, "server"),
                (4, "handle_io"),
                (5, "compress_block"),
                (6, "libculprit_rt.so"),
                (7, "culprit runtime"),
                (8, "__cyg_profile_func_enter@plt"),
            ],
        );
        let mut buf = RecordBuf::new();
        for s in 0..SECS {
            buf.clear();
            let entries: Vec<SampleEntry> = funcs
                .iter()
                .enumerate()
                .map(|(fi, &(image, function, base))| {
                    let mut v = base * (1.0 + 0.03 * noise(n, s, fi as u64));
                    if s >= FROM && n == 2 && (function == 7 || function == 8) {
                        v *= 5.0;
                    }
                    if s >= FROM && n == 3 && function == 5 && fault {
                        v *= 2.0;
                    }
                    SampleEntry {
                        program: 2,
                        image,
                        function,
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

fn diagnose(root: &Path) -> Diagnosis {
    let setup = Setup::resolve(&Overrides::default(), None).unwrap();
    let req = DiagnoseRequest::dirs(&[root.to_path_buf()], 10);
    session::diagnose(&setup, None, req, &mut Quiet).expect("diagnose")
}

#[test]
fn the_runtime_s_samples_are_its_cost_not_a_root_cause() {
    let dir = temp_dir("tracing-cost");
    write(&dir.0, false);
    let d = diagnose(&dir.0);
    assert!(d.culprits.is_empty(), "{d:#?}");
    // It does not make io2 a suspect either: its score stays under its threshold.
    let io2 = d.ranking.iter().find(|r| r.node == "io2").unwrap();
    assert!(io2.score.is_some_and(|s| s < 1.0), "{:#?}", d.ranking);
    // Shown apart: about 70 of 570 samples a second (350 of 850 on io2 from FROM on).
    let cost: Vec<(&str, f64)> = d
        .tracing_cost
        .iter()
        .map(|c| (c.node.as_str(), c.share()))
        .collect();
    assert_eq!(cost.len(), 4, "{cost:?}");
    for (node, share) in cost {
        let want = if node == "io2" {
            (70.0 * 150.0 + 350.0 * 150.0) / (570.0 * 150.0 + 850.0 * 150.0)
        } else {
            70.0 / 570.0
        };
        assert!((share - want).abs() < 0.01, "{node}: {share} vs {want}");
    }
}

#[test]
fn a_fault_s_root_cause_never_names_the_runtime() {
    let dir = temp_dir("tracing-cost-fault");
    write(&dir.0, true);
    let d = diagnose(&dir.0);
    assert_eq!(d.culprits, ["io3"], "{d:#?}");
    for m in &d.metrics {
        for n in &m.nodes {
            assert!(
                n.top
                    .iter()
                    .all(|r| r.function != "culprit runtime" && !r.function.ends_with("@plt")),
                "{}: {:#?}",
                n.node,
                n.top
            );
        }
    }
    let io3 = d.metrics[0].nodes.iter().find(|n| n.node == "io3").unwrap();
    assert_eq!(io3.top[0].function, "compress_block", "{io3:#?}");
}
