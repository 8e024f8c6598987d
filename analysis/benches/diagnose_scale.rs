//! Scale benchmark of the analyzer (not a test): synthetic feature data generated and
//! streamed by the benchmark, nothing stored.
//!
//! `cargo bench -p culprit-analysis --bench diagnose_scale` runs, each case in a fresh child process so
//! its peak RSS (VmHWM) is its own:
//!
//! * **real time**: N nodes × F functions of 1 s data; one 30 s window shift = 30 × N × F values
//!   ingested, then the 60 s window closed and analysed. Real time means < 30 s per shift.
//!   N = 10 … 10,000, F = 50 … 1000, for the median-node score and the pairwise score (exact
//!   all-pairs and rotating analysis domains of 10, seed 001 §4.7.1).
//! * **day**: 1,000 nodes × 200 functions × 24 h of 1 s data (1.7·10¹⁰ values), streamed
//!   through the analyzer; target ≤ 60 s and ≤ 2 GB. One node is faulty for an hour; the run
//!   checks it is found with the right function.
//! * **domains vs exact**: the same faulty 1,000-node hour with exact pairwise and rotating
//!   domains: do they find the same culprits?
//!
//! The machine is shared: read the ratios, and repeat (`-- repeat 3`). The anchor (seed 001
//! §4.7.1): 3.44 ms per server and 182 µs per server pair per second of data on a 2.4 GHz
//! core, 88 servers in real time; 49 min and 6.1 GB for a day of 2,304 LUNs.

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use culprit_analysis::analyzer::{Analyzer, AnalyzerConfig, MetricConfig};
use culprit_analysis::distance::Distance;
use culprit_analysis::family::tracer::Time;
use culprit_analysis::family::{KeepRule, Windows};
use culprit_analysis::model::{CompLabel, Interval, IntervalData};
use culprit_analysis::policy::{Policy, Unsupervised, Weights};
use culprit_analysis::score::{Peers, ScoreKind, SplitMix64};
use culprit_analysis::time::NS_PER_S;

const SHIFT_S: u64 = 30;
const SIZE_S: u64 = 60;
/// 2024-01-01T00:00:00Z.
const T0: u64 = 1_704_067_200;

/// Streams synthetic 1 s feature vectors: node n's value of function i is
/// `base_i · het_{n,i} · (1 + 0.1·z)` with z from a table indexed at a random offset per
/// (node, second), so generation costs little next to the analyzer.
struct Gen {
    funcs: usize,
    base: Vec<Vec<f64>>,
    noise: Vec<f64>,
    rng: SplitMix64,
    fault: Option<(usize, usize, f64, u64, u64)>,
}

impl Gen {
    fn new(nodes: usize, funcs: usize, seed: u64) -> Self {
        let mut rng = SplitMix64(seed);
        let normal = |rng: &mut SplitMix64| {
            let (u1, u2) = (rng.unit().max(1e-300), rng.unit());
            (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
        };
        let base = (0..nodes)
            .map(|_| {
                (0..funcs)
                    .map(|i| 1000.0 / ((i + 1) as f64).powf(0.8) * (1.0 + 0.03 * normal(&mut rng)))
                    .collect()
            })
            .collect();
        let noise = (0..(1 << 16) + funcs)
            .map(|_| 0.1 * normal(&mut rng))
            .collect();
        Gen {
            funcs,
            base,
            noise,
            rng,
            fault: None,
        }
    }

    /// Node n's vector for second t into `out`.
    fn fill(&mut self, n: usize, t: u64, out: &mut [f64]) {
        let o = (self.rng.next_u64() & 0xffff) as usize;
        let z = &self.noise[o..o + self.funcs];
        for ((x, b), z) in out.iter_mut().zip(&self.base[n]).zip(z) {
            *x = b * (1.0 + z);
        }
        if let Some((fnode, func, factor, from, to)) = self.fault {
            if n == fnode && t >= from && t < to {
                out[func] *= factor;
            }
        }
    }
}

fn engine(nodes: usize, funcs: usize, score: ScoreKind, peers: Peers, weighted: bool) -> Analyzer {
    // Variance weighting as `culprit train` leaves it: a learned scale per function.
    let weights = weighted.then(|| Weights {
        scales: (0..funcs)
            .map(|i| {
                (
                    CompLabel::func("bench", &format!("f{i:04}")),
                    1.0 + (i % 7) as f64,
                )
            })
            .collect(),
        default: 1.0,
        unseen_ratio: None,
    });
    let mut e = Analyzer::new(
        AnalyzerConfig {
            windows: Windows {
                size_ns: SIZE_S * NS_PER_S,
                shift_ns: SHIFT_S * NS_PER_S,
            },
            k: 3,
            distance: Distance::Manhattan,
            score,
            peers,
            keep_scores: false,
        },
        vec![MetricConfig {
            family: Arc::new(Time),
            slot_ns: NS_PER_S,
            lag_ns: 2 * NS_PER_S,
            keep: KeepRule::AtLeast(0.0),
            policy: Policy::Untrained(Unsupervised::default()),
            weights,
            normal: None,
            roles: None,
            rare: None,
        }],
    );
    for n in 0..nodes {
        e.node(&format!("n{n:05}"));
    }
    for i in 0..funcs {
        e.component(0, &CompLabel::func("bench", &format!("f{i:04}")));
    }
    e
}

/// Pushes seconds `[from, to)` of all nodes (time-major, as data arrives), then closes what can
/// close. Returns the number of windows closed.
fn stream(
    e: &mut Analyzer,
    g: &mut Gen,
    nodes: usize,
    from: u64,
    to: u64,
    buf: &mut [f64],
) -> usize {
    let mut closed = 0;
    for t in from..to {
        for n in 0..nodes {
            g.fill(n, t, buf);
            let iv = Interval {
                start_ns: (T0 + t) * NS_PER_S,
                dur_ns: NS_PER_S,
                partial: false,
                data: IntervalData::Dense(buf),
            };
            e.push(0, n, 0, &iv).expect("aligned");
        }
        if (t + 1) % SHIFT_S == 0 {
            closed += e.advance(None).len();
        }
    }
    closed
}

/// CPU seconds (user + system) used by this process so far.
fn cpu_secs() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let rest = s.rsplit_once(')').map_or("", |r| r.1);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn peak_rss_mb() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn parse_score(s: &str) -> (ScoreKind, Peers, &'static str) {
    match s {
        "median" => (ScoreKind::MedianNode, Peers::All, "median-node"),
        "weighted" => (ScoreKind::MedianNode, Peers::All, "median-node, weighted"),
        "pairwise" => (ScoreKind::PairwiseMedian, Peers::All, "pairwise, all pairs"),
        "domains" => (
            ScoreKind::PairwiseMedian,
            Peers::Domain(10),
            "pairwise, domains of 10",
        ),
        _ => panic!("score {s}"),
    }
}

/// Child: one real-time shift. Prints `secs_per_shift rss_mb`.
fn child_realtime(nodes: usize, funcs: usize, score: &str) {
    let (kind, peers, _) = parse_score(score);
    let mut e = engine(nodes, funcs, kind, peers, score == "weighted");
    let mut g = Gen::new(nodes, funcs, 7);
    let mut buf = vec![0.0; funcs];
    // Warm up: one full window of data, its window closed.
    stream(&mut e, &mut g, nodes, 0, SIZE_S, &mut buf);
    let t = Instant::now();
    let cpu0 = cpu_secs();
    let closed = stream(&mut e, &mut g, nodes, SIZE_S, SIZE_S + SHIFT_S, &mut buf);
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu0;
    assert_eq!(closed, 1, "one window per shift");
    println!("{secs} {} {cpu}", peak_rss_mb());
}

/// Child: a day. Prints `secs rss_mb windows flagged culprit_found`.
fn child_day(nodes: usize, funcs: usize, hours: u64, score: &str) {
    let (kind, peers, _) = parse_score(score);
    let mut e = engine(nodes, funcs, kind, peers, score == "weighted");
    let mut g = Gen::new(nodes, funcs, 11);
    let secs = hours * 3600;
    // One node does 3× its 4th function (+7% of its activity) for an hour, in the middle.
    let (fnode, ffunc) = (nodes / 3, 3);
    g.fault = Some((fnode, ffunc, 3.0, secs / 2, secs / 2 + 3600));
    let t = Instant::now();
    let cpu0 = cpu_secs();
    let mut buf = vec![0.0; funcs];
    let windows = stream(&mut e, &mut g, nodes, 0, secs, &mut buf);
    e.advance(None);
    let el = t.elapsed().as_secs_f64();
    let cpu = cpu_secs() - cpu0;
    let m = e.result(0);
    let faulty: Vec<usize> = (0..nodes).filter(|&n| m.nodes[n].faulty()).collect();
    let top = faulty
        .first()
        .and_then(|&n| m.top(n, 1).first().map(|r| r.comp as i64))
        .unwrap_or(-1);
    println!(
        "{el} {} {windows} {} {} {cpu}",
        peak_rss_mb(),
        faulty.len(),
        faulty.first().map_or(-1, |&n| n as i64) == fnode as i64 && top == ffunc as i64
    );
}

/// Child: culprits found by a score on a faulty hour of N nodes. Prints `secs culprits…`.
fn child_culprits(nodes: usize, funcs: usize, score: &str) {
    let (kind, peers, _) = parse_score(score);
    let mut e = engine(nodes, funcs, kind, peers, score == "weighted");
    let mut g = Gen::new(nodes, funcs, 13);
    // Three faulty nodes, different functions and strengths (+7 to +9% of their activity),
    // from minute 20 to 40.
    let faults = [
        (nodes / 5, 2, 3.0),
        (nodes / 2, 5, 4.0),
        (nodes - 3, 9, 6.0),
    ];
    let mut buf = vec![0.0; funcs];
    let t = Instant::now();
    for s in 0..3600u64 {
        for n in 0..nodes {
            g.fill(n, s, &mut buf);
            if (1200..2400).contains(&s) {
                for &(fnode, func, factor) in &faults {
                    if n == fnode {
                        buf[func] *= factor;
                    }
                }
            }
            let iv = Interval {
                start_ns: (T0 + s) * NS_PER_S,
                dur_ns: NS_PER_S,
                partial: false,
                data: IntervalData::Dense(&buf),
            };
            e.push(0, n, 0, &iv).expect("aligned");
        }
        if (s + 1) % SHIFT_S == 0 {
            e.advance(None);
        }
    }
    e.advance(None);
    let el = t.elapsed().as_secs_f64();
    let faulty: Vec<String> = (0..nodes)
        .filter(|&n| e.result(0).nodes[n].faulty())
        .map(|n| n.to_string())
        .collect();
    println!("{el} {}", faulty.join(","));
}

fn child(args: &[String]) -> Vec<String> {
    let exe = std::env::current_exe().expect("current_exe");
    let o = Command::new(exe)
        .arg("--child")
        .args(args)
        .output()
        .expect("spawn child");
    assert!(
        o.status.success(),
        "child {args:?} failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        let num = |i: usize| args[i].parse::<usize>().expect("number");
        match args[1].as_str() {
            "realtime" => child_realtime(num(2), num(3), &args[4]),
            "day" => child_day(num(2), num(3), num(4) as u64, &args[5]),
            "culprits" => child_culprits(num(2), num(3), &args[4]),
            other => panic!("unknown child {other}"),
        }
        return;
    }
    let repeat = args
        .iter()
        .position(|a| a == "repeat")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(1usize);
    let quick = args.iter().any(|a| a == "quick");
    println!("diagnose scale benchmark ({} cores)", num_cpus());
    println!();
    println!("Real time: one 30 s shift of 1 s data ingested + one 60 s window analysed");
    println!(
        "{:>7} {:>6}  {:<24} {:>10} {:>10} {:>12} {:>10}",
        "nodes", "funcs", "score", "s/shift", "CPU s", "x real time", "peak MB"
    );
    let mut cases: Vec<(usize, usize, &str)> = Vec::new();
    for n in [10, 100, 1000, 10_000] {
        cases.push((n, 200, "median"));
    }
    for f in [50, 1000] {
        cases.push((1000, f, "median"));
        cases.push((10_000, f, "median"));
    }
    for n in [10, 100, 1000] {
        cases.push((n, 200, "pairwise"));
    }
    cases.push((10_000, 200, "domains"));
    cases.push((10_000, 200, "weighted"));
    if !quick {
        cases.push((10_000, 200, "pairwise"));
    }
    for (n, f, s) in cases {
        for _ in 0..repeat {
            let r = child(&["realtime".into(), n.to_string(), f.to_string(), s.into()]);
            let secs: f64 = r[0].parse().unwrap();
            println!(
                "{n:>7} {f:>6}  {:<24} {secs:>10.3} {:>10.2} {:>12.1} {:>10.0}",
                parse_score(s).2,
                r[2].parse::<f64>().unwrap(),
                SHIFT_S as f64 / secs,
                r[1].parse::<f64>().unwrap()
            );
        }
    }
    println!();
    let hours = if quick { 2 } else { 24 };
    println!(
        "A day: 1,000 nodes × 200 functions × {hours} h of 1 s data ({:.2e} values), one node \
         faulty for an hour",
        1000.0 * 200.0 * 3600.0 * hours as f64
    );
    for _ in 0..repeat {
        let r = child(&[
            "day".into(),
            "1000".into(),
            "200".into(),
            hours.to_string(),
            "median".into(),
        ]);
        println!(
            "  {:.1} s ({:.1} CPU s), peak {:.0} MB, {} windows, {} node(s) flagged, culprit and \
             function found: {}",
            r[0].parse::<f64>().unwrap(),
            r[5].parse::<f64>().unwrap(),
            r[1].parse::<f64>().unwrap(),
            r[2],
            r[3],
            r[4]
        );
    }
    println!();
    println!(
        "Same culprits? 1,000 nodes, 1 h, three faulty nodes (ids 200, 500, 997), 200 functions"
    );
    for s in ["median", "pairwise", "domains"] {
        let r = child(&["culprits".into(), "1000".into(), "200".into(), s.into()]);
        println!(
            "  {:<24} {:>8.1} s  flagged: {}",
            parse_score(s).2,
            r[0].parse::<f64>().unwrap(),
            r.get(1).map_or("none", String::as_str)
        );
    }
}

fn num_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}
