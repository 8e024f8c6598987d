//! `culprit diagnose` / `culprit train` end to end on sample files.
//!
//! The sample files here are SYNTHETIC sampler output: written with the format crate's
//! synthetic-file writer (`culprit_format::synthetic`) as `culprit sample` writes them (Info,
//! Strings, Samples, End records), with counts drawn from a seeded generator, because a test
//! needs a known culprit. Everything from the files on — loading, windows, scores,
//! thresholds, verdicts, the JSON report, exit codes — is the real `culprit` binary.

use std::path::Path;

use culprit_analysis::combine::Verdict;
use culprit_analysis::diagnosis::{MetricStatus, Side, ThresholdSource, Thresholds};
use culprit_analysis::distance::Distance;
use culprit_analysis::family::Metric;
use culprit_analysis::missing::{Ending, Finding};
use culprit_analysis::score::ScoreKind;
use culprit_analysis::thresholds::{ThresholdsFile, Weighting};
use culprit_format::synthetic;
use culprit_format::{end_reason, samples_flags, EventEntry, RecordBuf, SampleEntry, SamplesHead};
use culprit_tests::*;

mod diagnose_util;
use diagnose_util::*;

const NS: u64 = 1_000_000_000;
/// 2024-01-01T00:00:00Z.
const T0: u64 = 1_704_067_200;

/// Deterministic noise in [-1, 1).
fn noise(a: u64, b: u64, c: u64) -> f64 {
    let mut z = a
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(b.wrapping_mul(0xbf58_476d_1ce4_e5b9))
        .wrapping_add(c.wrapping_mul(0x94d0_49bb_1331_11eb));
    z ^= z >> 31;
    z = z.wrapping_mul(0xd6e8_feca_66c8_3b4d);
    z ^= z >> 29;
    (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// How one synthetic node samples.
#[derive(Clone)]
struct NodeSpec {
    name: String,
    /// Seed of its noise (the node's identity for the data, independent of its name).
    seed: u64,
    /// Extra factor on `fault_in` from interval `from`.
    fault: Option<(u64, f64)>,
    /// (program, function) the fault is in.
    fault_in: (&'static str, &'static str),
    /// Extra factor on TCP retransmissions (a kernel event) from interval `from`.
    retransmits: Option<(u64, f64)>,
    /// Stop writing after this many intervals, without an end marker (killed).
    killed_after: Option<u64>,
    /// Start writing at this interval (started late).
    starts_at: u64,
    /// Sampling period (cpu-clock, Hz).
    freq: u64,
}

impl NodeSpec {
    fn new(name: &str, seed: u64) -> Self {
        NodeSpec {
            name: name.to_string(),
            seed,
            fault: None,
            fault_in: ("server", "hot_path"),
            retransmits: None,
            killed_after: None,
            starts_at: 0,
            freq: 1000,
        }
    }
}

const FUNCS: [(&str, &str, &str, f64); 7] = [
    ("server", "server", "handle_request", 400.0),
    ("server", "server", "hot_path", 250.0),
    ("server", "libc.so.6", "memcpy", 180.0),
    ("server", "[kernel.kallsyms]", "tcp_sendmsg", 150.0),
    ("server", "server", "parse_header", 90.0),
    ("kworker", "[kernel.kallsyms]", "worker_thread", 60.0),
    ("backup", "libc.so.6", "memcpy", 40.0),
];

/// Kernel events of the synthetic sampler, with their rate per 10 s interval.
const EVENTS: [(&str, f64); 2] = [
    ("tcp:tcp_retransmit_skb", 30.0),
    ("block:block_rq_issue", 500.0),
];

/// Writes `DATA/<node>/samples-….cul` with `intervals` 10 s intervals from T0.
fn write_node(root: &Path, spec: &NodeSpec, intervals: u64) {
    let freq = spec.freq.to_string();
    let info = [
        ("node", spec.name.as_str()),
        ("event", "cpu-clock"),
        ("freq", freq.as_str()),
        ("scope", "system"),
    ];
    let mut strings: Vec<(u32, &str)> = vec![(1, "cpu-clock"), (2, EVENTS[0].0), (3, EVENTS[1].0)];
    let mut id = 4;
    let mut ids = Vec::new();
    for (prog, image, func, _) in FUNCS {
        let mut one = |s: &'static str| {
            if let Some((i, _)) = strings.iter().find(|(_, x)| *x == s) {
                return *i;
            }
            strings.push((id, s));
            id += 1;
            id - 1
        };
        ids.push((one(prog), one(image), one(func)));
    }
    let created = T0 * NS - 3 * NS;
    let mut w =
        synthetic::samples_file(&root.join(&spec.name), created, 4242, &info, &strings).unwrap();
    let mut buf = RecordBuf::new();
    let rate = spec.freq as f64 / 1000.0;
    for i in spec.starts_at..intervals {
        if spec.killed_after.is_some_and(|k| i >= k) {
            // SIGKILL: no more records, no end marker.
            return;
        }
        buf.clear();
        let entries: Vec<SampleEntry> = FUNCS
            .iter()
            .zip(&ids)
            .enumerate()
            .map(|(fi, ((prog, _, func, base), &(p, im, f)))| {
                let mut v = base * rate * (1.0 + 0.08 * noise(spec.seed, i, fi as u64));
                if let Some((from, factor)) = spec.fault {
                    if (*prog, *func) == spec.fault_in && i >= from {
                        v *= factor;
                    }
                }
                SampleEntry {
                    program: p,
                    image: im,
                    function: f,
                    count: v.round() as u64,
                }
            })
            .collect();
        let total = entries.iter().map(|e| e.count).sum();
        buf.samples(
            &SamplesHead {
                start_ns: (T0 + 10 * i) * NS,
                dur_ns: 10 * NS,
                flags: samples_flags::FREQ,
                event_sid: 1,
                period: spec.freq,
                total,
                lost: 0,
            },
            entries,
        );
        let events = EVENTS.iter().enumerate().map(|(ei, (_, rate))| {
            let mut v = rate * (1.0 + 0.1 * noise(spec.seed, i, 100 + ei as u64));
            if let Some((from, factor)) = spec.retransmits {
                if ei == 0 && i >= from {
                    v *= factor;
                }
            }
            EventEntry {
                event: 2 + ei as u32,
                count: v.round() as u64,
            }
        });
        buf.events((T0 + 10 * i) * NS, 10 * NS, 0, events);
        w.append(&buf).unwrap();
    }
    w.finish((T0 + 10 * intervals) * NS, end_reason::SIGNAL)
        .unwrap();
}

fn write_run(root: &Path, specs: &[NodeSpec], intervals: u64) {
    for s in specs {
        write_node(root, s, intervals);
    }
}

fn five_nodes() -> Vec<NodeSpec> {
    (0..5)
        .map(|i| NodeSpec::new(&format!("io{i}"), 100 + i))
        .collect()
}

/// One node does 3× the work in one function from minute 2: it is the culprit, that function
/// is first in its top ten, no other node is flagged, and the exit status is 1. Budget: ~1 s.
#[test]
fn finds_the_node_and_the_function() {
    let dir = TempDir::new("diag-samples");
    let mut specs = five_nodes();
    specs[3].fault = Some((12, 3.0));
    write_run(dir.path(), &specs, 48);
    let (code, r) = diagnose_json(&[dir.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{r:#?}");
    assert_eq!(r.schema, "culprit-diagnosis");
    assert_eq!(r.culprits, ["io3"]);
    assert!(!r.trained);
    let s = metric(&r, "samples");
    assert_eq!(s.thresholds, Thresholds::Untrained);
    let io3 = node(s, "io3");
    assert_eq!(io3.verdict, MetricStatus::Faulty);
    let top = &io3.top;
    assert_eq!(top[0].function, "hot_path", "{io3:#?}");
    assert_eq!(top[0].direction.side(), Side::Above);
    assert!(top[0].relative.unwrap() > 1.5, "{:#?}", top[0]);
    // The fault starts at interval 12 (2 minutes in); windows are aligned on 30 s.
    let first = io3.anomalous_windows[0].start_ns;
    assert_eq!(first % (30 * NS), 0);
    assert!(first >= (T0 + 60) * NS, "{first}");
    for n in ["io0", "io1", "io2", "io4"] {
        assert_eq!(
            node(s, n).verdict,
            MetricStatus::Ok,
            "{n}: {:#?}",
            node(s, n)
        );
    }
}

/// Seed 002's supervised suspect score: trained (`--score suspect`) on fault-free runs in which
/// io2 always does twice the hot_path work of its peers (another role), a later run with the
/// same io2 is clean — its profile is near its own normal profile — while untrained diagnosis
/// flags io2 as different since its data began; a real fault in another node is still found.
#[test]
fn supervised_suspect_score() {
    let root = TempDir::new("diag-supervised");
    let odd = |seed: u64, fault: Option<(u64, f64)>| -> Vec<NodeSpec> {
        let mut specs: Vec<NodeSpec> = (0..5)
            .map(|i| NodeSpec::new(&format!("io{i}"), seed + i))
            .collect();
        specs[2].fault = Some((0, 2.0));
        // In another function than io2's role: variance weighting learns io2's difference in
        // hot_path as that function's fault-free spread.
        specs[4].fault_in = ("server", "parse_header");
        specs[4].fault = fault;
        specs
    };
    let runs: Vec<_> = (0..3).map(|i| root.join(format!("run{i}"))).collect();
    for (r, run) in runs.iter().enumerate() {
        write_run(run, &odd(1000 * r as u64, None), 40);
    }
    let faulty = root.join("faulty");
    write_run(&faulty, &odd(9000, Some((10, 4.0))), 40);
    let th = root.join("thresholds.json");
    run_ok(
        culprit()
            .arg("train")
            .args(&runs[..2])
            .args(["--score", "suspect", "--out"])
            .arg(&th),
    );
    let f = ThresholdsFile::load(&th).unwrap();
    let s = &f.metrics[&Metric::SAMPLES];
    assert_eq!(f.settings.score, ScoreKind::Suspect);
    assert_eq!(s.unit, "share");
    assert_eq!(s.normal_profiles.len(), 10, "5 nodes × 2 runs");
    let p = &s.normal_profiles[0];
    // `--score suspect` makes each row a share of the window's *median* node's total
    // (ProfileTotal::Median), so a node a little above the median sums just over one: with
    // io2's role brought to its peers' level the five totals are alike, ±0.5 %.
    let total: f64 = p.shares.iter().map(|e| e.share).sum();
    assert!(total > 0.5 && total <= 1.02, "{total}");
    let th_s = th.to_str().unwrap();
    let (code, r) = diagnose_json(&[runs[2].to_str().unwrap(), "--thresholds", th_s]);
    assert_eq!(code, 0, "the odd node is normal for itself: {r:#?}");
    let (code, r) = diagnose_json(&[runs[2].to_str().unwrap()]);
    assert_eq!(code, 1, "untrained, the odd node differs: {r:#?}");
    assert_eq!(r.culprits, ["io2"]);
    let (code, r) = diagnose_json(&[faulty.to_str().unwrap(), "--thresholds", th_s]);
    assert_eq!(code, 1, "{r:#?}");
    assert_eq!(r.culprits, ["io4"], "{r:#?}");
}

/// The human report names the culprit, the metric, wall-clock windows and the function.
#[test]
fn human_report() {
    let dir = TempDir::new("diag-human");
    let mut specs = five_nodes();
    // From 2 minutes in: after the filter's first 2k − 1 windows, so a change, not "different
    // since its data began".
    specs[1].fault = Some((12, 4.0));
    write_run(dir.path(), &specs, 36);
    let o = culprit().arg("diagnose").arg(dir.path()).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("VERDICT: io1 is FAULTY"), "{text}");
    assert!(text.contains("UNTRAINED"), "{text}");
    assert!(text.contains("io1 · samples"), "{text}");
    assert!(
        text.contains("2024-01-01 00:0"),
        "wall-clock windows: {text}"
    );
    let line = text
        .lines()
        .skip_while(|l| !l.contains("top functions ("))
        .find(|l| l.trim_start().starts_with("1  "))
        .unwrap_or_else(|| panic!("no top-ten table: {text}"));
    // Every node ranked, the culprit first.
    let first = text
        .lines()
        .skip_while(|l| !l.starts_with("suspects, most suspicious first"))
        .nth(1)
        .unwrap_or_else(|| panic!("no ranking: {text}"));
    assert!(first.contains("io1") && first.contains("FAULTY"), "{first}");
    assert!(!text.contains("different since its data began"), "{text}");
    assert!(
        line.contains("hot_path [server]") && line.contains("more samples"),
        "{line}"
    );
}

/// Renaming and reordering nodes changes no verdict and no score.
#[test]
fn renaming_nodes_changes_nothing() {
    let a = TempDir::new("diag-names-a");
    let b = TempDir::new("diag-names-b");
    let mut specs = five_nodes();
    specs[2].fault = Some((10, 2.5));
    write_run(a.path(), &specs, 40);
    // Same data under other names, in another sort order: io0→zeta, io1→alpha, io2→mu, …
    let renamed = ["zeta", "alpha", "mu", "beta", "omega"];
    let mut specs_b = specs.clone();
    for (s, n) in specs_b.iter_mut().zip(renamed) {
        s.name = n.to_string();
    }
    write_run(b.path(), &specs_b, 40);
    let (ca, ra) = diagnose_json(&[a.path().to_str().unwrap()]);
    let (cb, rb) = diagnose_json(&[b.path().to_str().unwrap()]);
    assert_eq!(ca, cb);
    assert_eq!(rb.culprits, ["mu"]);
    let (ma, mb) = (metric(&ra, "samples"), metric(&rb, "samples"));
    for (s, n) in specs.iter().zip(renamed) {
        let (x, y) = (node(ma, &s.name), node(mb, n));
        assert_eq!(x.verdict, y.verdict, "{} vs {n}", s.name);
        assert_eq!(x.max_score, y.max_score, "{} vs {n}", s.name);
        assert_eq!(x.anomalous_windows, y.anomalous_windows);
        assert_eq!(x.top, y.top);
    }
    // Giving the node directories one by one, in another order, changes nothing either.
    let mut dirs: Vec<String> = renamed
        .iter()
        .rev()
        .map(|n| b.join(n).display().to_string())
        .collect();
    dirs.rotate_left(2);
    let args: Vec<&str> = dirs.iter().map(String::as_str).collect();
    let (cc, rc) = diagnose_json(&args);
    assert_eq!(cc, cb);
    assert_eq!(metric(&rc, "samples").nodes, mb.nodes);
}

/// Train on two fault-free runs; a third fault-free run flags nothing; a faulty run flags the
/// culprit; the thresholds file says how it was made.
#[test]
fn train_then_diagnose() {
    let root = TempDir::new("diag-train");
    let runs: Vec<_> = (0..3).map(|i| root.join(format!("run{i}"))).collect();
    for (r, run) in runs.iter().enumerate() {
        let specs: Vec<NodeSpec> = (0..5)
            .map(|i| NodeSpec::new(&format!("io{i}"), 1000 * r as u64 + i))
            .collect();
        write_run(run, &specs, 40);
    }
    let faulty = root.join("faulty");
    let mut specs: Vec<NodeSpec> = (0..5)
        .map(|i| NodeSpec::new(&format!("io{i}"), 7000 + i))
        .collect();
    specs[4].fault = Some((8, 2.0));
    write_run(&faulty, &specs, 40);
    let th = root.join("thresholds.json");
    run_ok(
        culprit()
            .arg("train")
            .arg(&runs[0])
            .arg(&runs[1])
            .arg("--out")
            .arg(&th),
    );
    let f = ThresholdsFile::load(&th).unwrap();
    assert_eq!(f.format, "culprit-thresholds");
    assert_eq!(f.settings.win_size_ns, 60 * NS);
    let s = &f.metrics[&Metric::SAMPLES];
    // Variance weighting by default: scores in deviations, a positive scale per kept function.
    assert_eq!(f.settings.weighting, Weighting::Variance);
    assert_eq!(s.unit, "deviations");
    let scales = &s.weights.as_ref().unwrap().scales;
    assert_eq!(scales.len(), s.kept.len(), "{s:#?}");
    assert!(scales.iter().all(|e| e.scale > 0.0));
    assert_eq!(s.recording.event.as_deref(), Some("cpu-clock"));
    assert_eq!(s.recording.period, Some(1000));
    assert!(s.recording.freq);
    let kept: Vec<&str> = s.kept.iter().map(|k| k.name.as_ref()).collect();
    assert!(kept.contains(&"hot_path"), "{kept:?}");
    for n in 0..5 {
        let t = s.thresholds[&format!("io{n}")];
        let m = s.max_scores[&format!("io{n}")];
        // Least step of the grid (0.001 deviation) above the largest score, doubled.
        assert!(
            t >= 2.0 * m && t <= 2.0 * (m + 0.001) + 1e-9,
            "io{n}: {t} vs {m}"
        );
        let steps = t / 0.002;
        assert!((steps - steps.round()).abs() < 1e-6, "io{n}: {t}");
        // The k-of-(2k − 1) basis (--threshold-rule flagged) never exceeds the largest score.
        let fl = s.flag_scores[&format!("io{n}")];
        assert!(fl > 0.0 && fl <= m, "io{n}: flag score {fl} vs largest {m}");
    }
    let th_s = th.to_str().unwrap();
    let (code, r) = diagnose_json(&[runs[2].to_str().unwrap(), "--thresholds", th_s]);
    assert_eq!(code, 0, "fault-free run after training: {r:#?}");
    assert!(r.trained);
    let (code, r) = diagnose_json(&[faulty.to_str().unwrap(), "--thresholds", th_s]);
    assert_eq!(code, 1);
    assert_eq!(r.culprits, ["io4"]);
    let io4 = node(metric(&r, "samples"), "io4");
    assert_eq!(io4.threshold_source, Some(ThresholdSource::Largest));
    assert_eq!(io4.top[0].function, "hot_path");
}

/// Thresholds applied to data sampled differently, or with other window settings: one clear
/// error line, exit status 2.
#[test]
fn thresholds_refuse_other_recordings() {
    let root = TempDir::new("diag-refuse");
    let train = root.join("train");
    write_run(&train, &five_nodes(), 30);
    let th = root.join("t.json");
    run_ok(culprit().arg("train").arg(&train).arg("--out").arg(&th));
    let other = root.join("other");
    let specs: Vec<NodeSpec> = five_nodes()
        .into_iter()
        .map(|mut s| {
            s.freq = 4000;
            s
        })
        .collect();
    write_run(&other, &specs, 30);
    let o = culprit()
        .arg("diagnose")
        .arg(&other)
        .arg("--thresholds")
        .arg(&th)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("culprit: error: ")
            && err.contains("cpu-clock, 1000 Hz")
            && err.contains("cpu-clock, 4000 Hz"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    let o = culprit()
        .arg("diagnose")
        .arg(&train)
        .arg("--thresholds")
        .arg(&th)
        .args(["--win-size", "120s"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--win-size 60 s, not 120 s"), "{err}");
    // Not a thresholds file at all.
    std::fs::write(root.join("bad.json"), "{\"hello\": 1}").unwrap();
    let o = culprit()
        .arg("diagnose")
        .arg(&train)
        .arg("--thresholds")
        .arg(root.join("bad.json"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a thresholds file"));
}

/// A node killed mid-run (no end marker) is reported as stopped, which is a finding and a
/// culprit; its missing windows are not read as zeros (no anomaly on it from the gap).
#[test]
fn killed_node_is_reported_as_stopped() {
    let dir = TempDir::new("diag-killed");
    let mut specs = five_nodes();
    specs[0].killed_after = Some(15);
    write_run(dir.path(), &specs, 40);
    let (code, r) = diagnose_json(&[dir.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{r:#?}");
    assert_eq!(r.culprits, ["io0"]);
    let Finding::Stopped {
        node: who,
        ending,
        at_ns,
        ..
    } = finding(&r, |f| matches!(f, Finding::Stopped { .. }))
    else {
        unreachable!()
    };
    assert_eq!(who, "io0");
    assert_eq!(*ending, Ending::NoEndMarker);
    assert_eq!(*at_ns, (T0 + 150) * NS);
    assert_eq!(verdict(&r, "io0"), Verdict::Stopped);
    let io0 = node(metric(&r, "samples"), "io0");
    assert!(io0.anomalous_windows.is_empty());
    assert!(io0.windows_incomplete > 0);
}

/// Fewer than three nodes: an error saying peer comparison needs three (meant for four).
#[test]
fn two_nodes_are_not_a_peer_group() {
    let dir = TempDir::new("diag-two");
    write_run(dir.path(), &five_nodes()[..2], 20);
    let o = culprit().arg("diagnose").arg(dir.path()).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("needs at least 3 nodes") && err.contains("4 or more"),
        "{err}"
    );
}

/// With --win-shift not a multiple of the 10 s sample interval: a clear error.
#[test]
fn windows_must_hold_whole_records() {
    let dir = TempDir::new("diag-shift");
    write_run(dir.path(), &five_nodes(), 20);
    let o = culprit()
        .arg("diagnose")
        .arg(dir.path())
        .args(["--win-shift", "5s", "--win-size", "20s"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("multiple of the samples record interval (10 s)"),
        "{err}"
    );
}

/// A rogue program's memcpy: merged with the server's memcpy by default (one component per
/// function and image), its own component with --by-program, where the table names the program.
#[test]
fn by_program_separates_programs() {
    let dir = TempDir::new("diag-byprog");
    let mut specs = five_nodes();
    specs[2].fault = Some((8, 8.0));
    specs[2].fault_in = ("backup", "memcpy");
    write_run(dir.path(), &specs, 36);
    let (code, r) = diagnose_json(&[dir.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{r:#?}");
    let top = &node(metric(&r, "samples"), "io2").top[0];
    assert_eq!(top.function, "memcpy");
    assert_eq!(top.program, None);
    let (code, r) = diagnose_json(&[dir.path().to_str().unwrap(), "--by-program"]);
    assert_eq!(code, 1, "{r:#?}");
    assert!(r.settings.by_program);
    let top = &node(metric(&r, "samples"), "io2").top[0];
    assert_eq!(top.function, "memcpy");
    assert_eq!(top.program.as_deref(), Some("backup"), "{top:#?}");
    assert_eq!(top.image.as_deref(), Some("libc.so.6"));
}

/// Kernel event counts are one more metric: a node retransmitting 5× as much is flagged on
/// events, with the event first in its table; samples do not see it (corroboration missing, but
/// decisive).
#[test]
fn kernel_events_are_a_metric() {
    let dir = TempDir::new("diag-events");
    let mut specs = five_nodes();
    specs[4].retransmits = Some((6, 5.0));
    write_run(dir.path(), &specs, 36);
    let (code, r) = diagnose_json(&[dir.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{r:#?}");
    assert_eq!(r.culprits, ["io4"]);
    let e = metric(&r, "events");
    assert_eq!(e.unit, "events");
    assert_eq!(e.kept, 2);
    let io4 = node(e, "io4");
    assert_eq!(io4.verdict, MetricStatus::Faulty);
    assert_eq!(io4.top[0].function, "tcp:tcp_retransmit_skb");
    assert_eq!(io4.top[0].image, None);
    assert_eq!(io4.top[0].direction.side(), Side::Above);
    assert_eq!(node(metric(&r, "samples"), "io4").verdict, MetricStatus::Ok);
    // --metrics restricts the analysis.
    let (code, r) = diagnose_json(&[dir.path().to_str().unwrap(), "--metrics", "samples"]);
    assert_eq!(code, 0, "{r:#?}");
    assert_eq!(r.metrics.len(), 1);
}

/// A node whose data starts two minutes after its peers': reported as a late start (not a
/// culprit), and its missing first windows are not anomalies.
#[test]
fn late_start_is_reported() {
    let dir = TempDir::new("diag-late");
    let mut specs = five_nodes();
    specs[3].starts_at = 12;
    write_run(dir.path(), &specs, 40);
    let (code, r) = diagnose_json(&[dir.path().to_str().unwrap()]);
    assert_eq!(code, 0, "{r:#?}");
    let Finding::LateStart {
        node: who, at_ns, ..
    } = finding(&r, |f| matches!(f, Finding::LateStart { .. }))
    else {
        unreachable!()
    };
    assert_eq!(who, "io3");
    assert_eq!(*at_ns, (T0 + 120) * NS);
    assert_eq!(verdict(&r, "io3"), Verdict::Ok);
    let io3 = node(metric(&r, "samples"), "io3");
    assert!(io3.anomalous_windows.is_empty(), "{io3:#?}");
}

/// Every distance and score finds the culprit and its function on the same data.
#[test]
fn every_distance_and_score_finds_it() {
    let dir = TempDir::new("diag-distances");
    let mut specs = five_nodes();
    specs[1].fault = Some((12, 4.0));
    write_run(dir.path(), &specs, 40);
    let d = dir.path().to_str().unwrap();
    let distances = [
        Distance::Manhattan,
        Distance::Relative,
        Distance::Scaled,
        Distance::SymKl,
    ];
    let scores = [
        ScoreKind::MedianNode,
        ScoreKind::LeaveOneOut,
        ScoreKind::PairwiseMedian,
    ];
    for distance in distances {
        for score in scores {
            let (dn, sn) = (distance.name(), score.name());
            let (code, r) = diagnose_json(&[d, "--distance", dn, "--score", sn]);
            let what = format!("{dn}/{sn}");
            assert_eq!(code, 1, "{what}: {r:#?}");
            assert_eq!(r.culprits, ["io1"], "{what}");
            assert_eq!(r.settings.distance, distance);
            assert_eq!(r.settings.score, score);
            let top = &node(metric(&r, "samples"), "io1").top[0];
            assert_eq!(top.function, "hot_path", "{what}: {top:#?}");
        }
    }
}

/// A node the thresholds were not trained for gets the metric's largest threshold, and the
/// report says so; data from another program (none of the trained functions) is refused.
#[test]
fn thresholds_for_unknown_nodes_and_programs() {
    let root = TempDir::new("diag-fallback");
    let train = root.join("train");
    write_run(&train, &five_nodes(), 30);
    let th = root.join("t.json");
    run_ok(culprit().arg("train").arg(&train).arg("--out").arg(&th));
    let t = ThresholdsFile::load(&th).unwrap();
    let largest = t.metrics[&Metric::SAMPLES].largest();
    let data = root.join("data");
    let mut specs = five_nodes();
    specs.push(NodeSpec::new("io5", 105));
    write_run(&data, &specs, 30);
    let th_s = th.to_str().unwrap();
    let (code, r) = diagnose_json(&[
        data.to_str().unwrap(),
        "--thresholds",
        th_s,
        "--per-node-thresholds",
    ]);
    assert_eq!(code, 0, "{r:#?}");
    let io5 = node(metric(&r, "samples"), "io5");
    assert_eq!(io5.threshold_source, Some(ThresholdSource::Largest));
    assert_eq!(io5.threshold, Some(largest));
    assert_eq!(
        node(metric(&r, "samples"), "io0").threshold_source,
        Some(ThresholdSource::Own)
    );
    let notes = r.notes.join("\n");
    assert!(
        notes.contains("io5 has no trained samples threshold of its own"),
        "{notes}"
    );
    // Another program: same sampling, other function names.
    let other = root.join("other");
    for n in 0..4 {
        let strings = [(1, "cpu-clock"), (2, "db"), (3, "db"), (4, "btree_seek")];
        let dir = other.join(format!("io{n}"));
        let mut w = synthetic::samples_file(&dir, T0 * NS, 1, &[], &strings).unwrap();
        let mut buf = RecordBuf::new();
        for i in 0..12u64 {
            buf.samples(
                &SamplesHead {
                    start_ns: (T0 + 10 * i) * NS,
                    dur_ns: 10 * NS,
                    flags: samples_flags::FREQ,
                    event_sid: 1,
                    period: 1000,
                    total: 500,
                    lost: 0,
                },
                [SampleEntry {
                    program: 2,
                    image: 3,
                    function: 4,
                    count: 500,
                }],
            );
        }
        w.append(&buf).unwrap();
    }
    let o = culprit()
        .arg("diagnose")
        .arg(&other)
        .args(["--thresholds", th_s])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("none of the") && err.contains("another program"),
        "{err}"
    );
}

/// Variance weighting learns its scales in training: asked for without thresholds, diagnose
/// says it compares unweighted instead of pretending.
#[test]
fn weighting_without_training_is_said() {
    let root = TempDir::new("diag-weight-untrained");
    let data = root.join("data");
    write_run(&data, &five_nodes(), 30);
    let (code, r) = diagnose_json(&[data.to_str().unwrap(), "--weighting", "variance"]);
    assert_eq!(code, 0, "{r:#?}");
    let notes = r.notes.join("\n");
    assert!(notes.contains("needs trained thresholds"), "{notes}");
    let (_, r) = diagnose_json(&[data.to_str().unwrap()]);
    assert!(!r.notes.join("\n").contains("needs trained thresholds"));
}
