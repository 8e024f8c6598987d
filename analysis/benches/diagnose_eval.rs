//! Accuracy evaluation of the diagnosis on synthetic peer groups (not a test, not a timing):
//! which score to make the default, and how to combine metrics.
//!
//! `cargo bench -p culprit-analysis --bench diagnose_eval` prints two tables:
//!
//! 1. Scores at N = 4, 5, 6, 10 nodes: for each score (seed 000's pairwise median, distance to
//!    the median node, leave-one-out), trained on three fault-free runs per cluster, then
//!    tested on a fault-free run, a run with a moderate fault (one node does 3× one function)
//!    and a run with an extreme fault (20× the hottest function): TP = the faulty node is
//!    flagged, FP = some healthy node is flagged (seed 000's definitions), over many clusters.
//!    Untrained (unsupervised rule) too. Twice: with healthy nodes all alike, and with one
//!    healthy node persistently different (1.5× on three functions — the metadata server), the
//!    case where the pairwise median flags healthy nodes.
//! 2. Combination rules over three metrics with independent noise: OR (seed 000's "combined"
//!    bound) against "corroborated or decisive" ([`culprit_analysis::combine`]).
//!
//! The synthetic model is [`culprit_analysis::synth`]: Zipf-like profiles, persistent
//! per-node differences (heterogeneity), per-interval noise, transient hiccups.

use std::collections::HashMap;
use std::sync::Arc;

use culprit_analysis::analyzer::{Analyzer, AnalyzerConfig, MetricConfig};
use culprit_analysis::combine::{combine_with, MetricVerdict, DECISIVE};
use culprit_analysis::distance::Distance;
use culprit_analysis::family::sampler::Samples;
use culprit_analysis::family::tracer::{Count, Time};
use culprit_analysis::family::{KeepRule, MetricFamily, Windows};
use culprit_analysis::policy::{trained_threshold, Policy, Unsupervised};
use culprit_analysis::score::{Peers, ScoreKind};
use culprit_analysis::synth::{Fault, OddNode, Scenario};
use culprit_analysis::time::NS_PER_S;

const SCORES: [ScoreKind; 5] = [
    ScoreKind::PairwiseMedian,
    ScoreKind::MedianNode,
    ScoreKind::LeaveOneOut,
    ScoreKind::Suspect,
    ScoreKind::SuspectShares,
];

fn engine(score: ScoreKind, policies: Vec<(Family, Policy)>) -> Analyzer {
    Analyzer::new(
        AnalyzerConfig {
            windows: Windows {
                size_ns: 60 * NS_PER_S,
                shift_ns: 30 * NS_PER_S,
            },
            k: 3,
            distance: Distance::Manhattan,
            score,
            peers: Peers::All,
            keep_scores: false,
        },
        policies
            .into_iter()
            .map(|(family, policy)| MetricConfig {
                family,
                slot_ns: 10 * NS_PER_S,
                lag_ns: 20 * NS_PER_S,
                keep: KeepRule::AtLeast(0.0),
                policy,
                weights: None,
                normal: None,
                roles: None,
                rare: None,
            })
            .collect(),
    )
}

/// A cluster's run: `metrics` independent metrics (each its own heterogeneity and noise).
fn scenario(n: usize, cluster: u64, run: u64, metric: u64) -> Scenario {
    Scenario {
        nodes: n,
        funcs: 20,
        secs: 1200,
        interval_s: 10,
        heterogeneity: 0.05,
        noise: 0.15,
        scale: 100.0,
        seed: cluster * 1_000_003 + run * 101 + metric * 7 + 1,
        node_seed: cluster * 31 + metric * 1_000_033 + 5,
        hiccup_rate: 0.01,
        hiccup_factor: 4.0,
        ..Scenario::default()
    }
}

type Family = Arc<dyn MetricFamily>;

/// Three metrics with independent noise.
fn metric(m: usize) -> Family {
    match m {
        0 => Arc::new(Samples),
        1 => Arc::new(Count),
        _ => Arc::new(Time),
    }
}

/// Runs a cluster's run through an analyzer with `m` metrics; returns the analyzer.
fn run(score: ScoreKind, policies: Vec<(Family, Policy)>, runs: &[Scenario]) -> Analyzer {
    let mut e = engine(score, policies);
    for (m, sc) in runs.iter().enumerate() {
        sc.feed(&mut e, m);
    }
    e.advance(None);
    e
}

/// Trained policies from three fault-free runs.
fn train(
    score: ScoreKind,
    n: usize,
    cluster: u64,
    metrics: usize,
    odd: Option<OddNode>,
) -> Vec<(Family, Policy)> {
    train_shared(score, n, cluster, metrics, odd, true)
}

/// [`train`], with the thresholds of windows busier than training scaled or not
/// ([`culprit_analysis::policy::shared_threshold`]).
fn train_shared(
    score: ScoreKind,
    n: usize,
    cluster: u64,
    metrics: usize,
    odd: Option<OddNode>,
    discount: bool,
) -> Vec<(Family, Policy)> {
    let mut medians = vec![0.0f64; metrics];
    let mut max: Vec<HashMap<String, f64>> = vec![HashMap::new(); metrics];
    for r in 0..3 {
        let runs: Vec<Scenario> = (0..metrics)
            .map(|m| Scenario {
                odd,
                ..scenario(n, cluster, r, m as u64)
            })
            .collect();
        let e = run(
            score,
            (0..metrics)
                .map(|m| (metric(m), Policy::Training))
                .collect(),
            &runs,
        );
        for (m, ms) in e.results().enumerate() {
            medians[m] = medians[m].max(ms.max_median);
            for (i, nm) in ms.nodes.iter().enumerate() {
                let v = max[m].entry(e.name(i).to_string()).or_insert(0.0);
                *v = v.max(nm.max_score);
            }
        }
    }
    max.into_iter()
        .enumerate()
        .map(|(m, by)| {
            let by_node: HashMap<String, f64> = by
                .into_iter()
                .map(|(k, v)| {
                    // Profiles (the suspect score) are shares, between 0 and 2.
                    let quantum = if score.profiles() { 1e-3 } else { 1.0 };
                    (k, trained_threshold(v, quantum))
                })
                .collect();
            let fallback = by_node.values().copied().fold(0.0, f64::max);
            (
                metric(m),
                Policy::Trained {
                    by_node,
                    fallback,
                    shared: discount.then_some(medians[m]),
                },
            )
        })
        .collect()
}

#[derive(Default, Clone, Copy)]
struct Rate {
    tp: u32,
    fp: u32,
    runs: u32,
}

impl Rate {
    fn add(&mut self, flagged: &[bool], faulty: Option<usize>) {
        self.runs += 1;
        if let Some(f) = faulty {
            self.tp += u32::from(flagged[f]);
        }
        let healthy_flagged = flagged
            .iter()
            .enumerate()
            .any(|(i, &x)| x && Some(i) != faulty);
        self.fp += u32::from(healthy_flagged);
    }
    fn pct(v: u32, runs: u32) -> String {
        format!("{:5.1}%", 100.0 * v as f64 / runs.max(1) as f64)
    }
}

fn flagged_by_metric(e: &Analyzer, m: usize) -> Vec<bool> {
    e.result(m).nodes.iter().map(|n| n.faulty()).collect()
}

fn scores_table(clusters: u64) {
    println!("Scores (one metric; {clusters} clusters per row; TP/FP as in seed 000 Table 1):");
    println!(
        "{:>3}  {:<10} {:<14} {:<10} {:>14} {:>20} {:>20} {:>20}",
        "N",
        "peers",
        "score",
        "thresholds",
        "fault-free FP",
        "3x fault TP/FP",
        "20x fault TP/FP",
        "5x from start TP/FP"
    );
    for odd in [false, true] {
        for n in [4usize, 5, 6, 10] {
            for score in SCORES {
                for trained in [true, false] {
                    let (mut ff, mut moderate, mut extreme, mut early) = (
                        Rate::default(),
                        Rate::default(),
                        Rate::default(),
                        Rate::default(),
                    );
                    for c in 0..clusters {
                        let odd_node = odd.then_some(OddNode {
                            node: (c as usize + 1) % n,
                            factor: 1.5,
                        });
                        let p = if trained {
                            train(score, n, c, 1, odd_node)
                        } else {
                            vec![(metric(0), Policy::Untrained(Unsupervised::default()))]
                        };
                        let mut sc = scenario(n, c, 10, 0);
                        sc.odd = odd_node;
                        let e = run(score, p.clone(), &[sc]);
                        ff.add(&flagged_by_metric(&e, 0), None);
                        let bad = (c as usize) % n;
                        for (rate, func, factor, from_s) in [
                            (&mut moderate, 1 + (c as usize % 5), 3.0, 300),
                            (&mut extreme, 0, 20.0, 300),
                            // Different from the first window (issue 14: a node doing 15x the
                            // work of one function from the start).
                            (&mut early, 1 + (c as usize % 5), 5.0, 0),
                        ] {
                            let mut sc = scenario(n, c, 11, 0);
                            sc.odd = odd_node;
                            sc.faults = vec![Fault {
                                node: bad,
                                func,
                                factor,
                                from_s,
                                to_s: 900,
                            }];
                            let e = run(score, p.clone(), &[sc]);
                            rate.add(&flagged_by_metric(&e, 0), Some(bad));
                        }
                    }
                    println!(
                        "{n:>3}  {:<10} {:<14} {:<10} {:>14} {:>11} /{:>7} {:>11} /{:>7} {:>11} /{:>7}",
                        if odd { "one odd" } else { "alike" },
                        score.name(),
                        if trained { "trained" } else { "untrained" },
                        Rate::pct(ff.fp, ff.runs),
                        Rate::pct(moderate.tp, moderate.runs),
                        Rate::pct(moderate.fp, moderate.runs),
                        Rate::pct(extreme.tp, extreme.runs),
                        Rate::pct(extreme.fp, extreme.runs),
                        Rate::pct(early.tp, early.runs),
                        Rate::pct(early.fp, early.runs),
                    );
                }
            }
        }
    }
}

/// Per node: flagged by OR of the metrics, and by the combination rule with each decisive
/// factor.
fn combined(e: &Analyzer, decisive: &[f64]) -> Vec<Vec<bool>> {
    let n = e.names().len();
    let analysed = e.results().count();
    // out[0]: OR; out[1 + j]: the rule with decisive[j].
    let per_node: Vec<Vec<bool>> = (0..n)
        .map(|i| {
            let per: Vec<MetricVerdict> = e.results().map(|m| MetricVerdict::of(m, i)).collect();
            std::iter::once(per.iter().any(|v| v.faulty))
                .chain(decisive.iter().map(|&d| {
                    combine_with(&per, analysed, false, 5 * 30 * NS_PER_S, d)
                        .verdict
                        .is_culprit()
                }))
                .collect()
        })
        .collect();
    (0..=decisive.len())
        .map(|j| per_node.iter().map(|v| v[j]).collect())
        .collect()
}

fn combination_table(clusters: u64) {
    let decisive = [DECISIVE, 2.0, 3.0];
    println!();
    println!(
        "Combining 3 metrics with independent noise (median-node score trained, suspect score \
         untrained; {clusters} clusters of \
         4, 5 and 6 nodes each). A benign asymmetry is a healthy node doing 1.6x one function \
         in one metric (a workload imbalance); TP/FP per row:"
    );
    print!("{:<10} {:<34} {:>14}", "thresholds", "runs", "OR");
    for d in decisive {
        print!(" {:>14}", format!("rule, {d}x"));
    }
    println!();
    for trained in [true, false] {
        // Each kind of analysis with its default score.
        let score = if trained {
            ScoreKind::MedianNode
        } else {
            ScoreKind::Suspect
        };
        // (label, factor, metrics affected, counts as a fault)
        let cases: [(&str, f64, usize, bool); 6] = [
            ("fault-free", 1.0, 0, false),
            ("benign asymmetry, 1 metric", 1.6, 1, false),
            ("fault, 1 metric, 3x one function", 3.0, 1, true),
            ("fault, 1 metric, 6x one function", 6.0, 1, true),
            ("fault, 2 metrics, 2x one function", 2.0, 2, true),
            ("fault, 3 metrics, 1.5x one function", 1.5, 3, true),
        ];
        for (label, factor, metrics, is_fault) in cases {
            let mut rates = vec![Rate::default(); 1 + decisive.len()];
            for n in [4usize, 5, 6] {
                for c in 0..clusters {
                    let p = if trained {
                        train(score, n, c, 3, None)
                    } else {
                        (0..3)
                            .map(|m| (metric(m), Policy::Untrained(Unsupervised::default())))
                            .collect()
                    };
                    let bad = (c as usize) % n;
                    let runs: Vec<Scenario> = (0..3)
                        .map(|m| {
                            let mut sc = scenario(n, c, 20, m as u64);
                            if m < metrics {
                                sc.faults = vec![Fault {
                                    node: bad,
                                    func: 1 + (c as usize % 5),
                                    factor,
                                    from_s: 300,
                                    to_s: 900,
                                }];
                            }
                            sc
                        })
                        .collect();
                    let e = run(score, p, &runs);
                    for (r, flagged) in rates.iter_mut().zip(combined(&e, &decisive)) {
                        r.add(&flagged, is_fault.then_some(bad));
                    }
                }
            }
            print!(
                "{:<10} {:<34}",
                if trained { "trained" } else { "untrained" },
                label
            );
            for r in &rates {
                let tp = if is_fault {
                    Rate::pct(r.tp, r.runs)
                } else {
                    "    -".to_string()
                };
                print!(" {:>6}/{:>7}", tp, Rate::pct(r.fp, r.runs));
            }
            println!();
        }
    }
}

/// What scaling the thresholds of windows busier than training costs where no load is shared,
/// and what it saves where it is (every node's values of a window multiplied by a common
/// factor, with its own noise: a busy host): TP of a 3x and a 6x fault, median-node score.
fn shared_table(clusters: u64) {
    println!();
    println!(
        "Trained, median-node: thresholds of windows busier than training scaled (on) or not \
         (off). Busy: the test run's every value x1.5 and its noise doubled on every node (a \
         loaded host); {clusters} clusters per cell; TP/FP:"
    );
    println!(
        "{:>3}  {:<8} {:>4} {:>10} {:>10} {:>16} {:>16} {:>16}",
        "N", "peers", "scale", "quiet FP", "busy FP", "3x TP/FP", "6x TP/FP", "busy 6x TP/FP"
    );
    let busy = |mut sc: Scenario| {
        sc.scale *= 1.5;
        sc.noise *= 2.0;
        sc
    };
    for odd in [false, true] {
        for n in [4usize, 6] {
            for discount in [false, true] {
                let mut r = [Rate::default(); 5];
                for c in 0..clusters {
                    let odd_node = odd.then_some(OddNode {
                        node: (c as usize + 1) % n,
                        factor: 1.5,
                    });
                    let p = train_shared(ScoreKind::MedianNode, n, c, 1, odd_node, discount);
                    let bad = (c as usize) % n;
                    let cases: [(Option<f64>, bool); 5] = [
                        (None, false),
                        (None, true),
                        (Some(3.0), false),
                        (Some(6.0), false),
                        (Some(6.0), true),
                    ];
                    for (rate, (factor, loaded)) in r.iter_mut().zip(cases) {
                        let mut sc = scenario(n, c, 11, 0);
                        sc.odd = odd_node;
                        if let Some(factor) = factor {
                            sc.faults = vec![Fault {
                                node: bad,
                                func: 1 + (c as usize % 5),
                                factor,
                                from_s: 300,
                                to_s: 900,
                            }];
                        }
                        let sc = if loaded { busy(sc) } else { sc };
                        let e = run(ScoreKind::MedianNode, p.clone(), &[sc]);
                        rate.add(&flagged_by_metric(&e, 0), factor.map(|_| bad));
                    }
                }
                println!(
                    "{n:>3}  {:<8} {:>5} {:>10} {:>10} {:>8} /{:>7} {:>8} /{:>7} {:>8} /{:>7}",
                    if odd { "one odd" } else { "alike" },
                    if discount { "on" } else { "off" },
                    Rate::pct(r[0].fp, r[0].runs),
                    Rate::pct(r[1].fp, r[1].runs),
                    Rate::pct(r[2].tp, r[2].runs),
                    Rate::pct(r[2].fp, r[2].runs),
                    Rate::pct(r[3].tp, r[3].runs),
                    Rate::pct(r[3].fp, r[3].runs),
                    Rate::pct(r[4].tp, r[4].runs),
                    Rate::pct(r[4].fp, r[4].runs),
                );
            }
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a number sets the clusters per case.
    let clusters = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(100);
    let t = std::time::Instant::now();
    scores_table(clusters);
    combination_table(clusters);
    shared_table(clusters);
    println!("\n({:.1} s)", t.elapsed().as_secs_f64());
}
