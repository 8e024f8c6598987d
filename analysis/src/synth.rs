//! Synthetic peer groups, for unit tests and the evaluation benchmark (benches/): nodes with
//! a shared per-function profile, persistent per-node differences, per-interval noise, injected
//! faults and stops. Nothing here is used by `culprit` itself on real data.
//!
//! The model: node n's value of function i in an interval is
//! `base_i · (1 + h_{n,i}) · (1 + σ·z)`, where `base` falls off like a Zipf law (a few hot
//! functions, many cool ones), `h_{n,i} ~ N(0, heterogeneity)` is fixed per node (servers are
//! alike, not identical: different disks, different shares of metadata), and `z ~ N(0, 1)` is
//! fresh noise. A fault multiplies some functions of one node by a factor for a while.

use std::collections::HashMap;
use std::sync::Arc;

use crate::analyzer::{Analyzer, AnalyzerConfig, MetricConfig};
use crate::diagnosis::{Diagnosis, OsSettings, ReportInput};
use crate::distance::Distance;
use crate::family::tracer::Time;
use crate::family::{KeepRule, Metric, Windows};
use crate::live::LiveStatus;
use crate::model::{CompLabel, Interval, IntervalData};
use crate::policy::Policy;
use crate::score::{Peers, ScoreKind, SplitMix64};
use crate::time::NS_PER_S;

/// A fault: node `node` does `factor` times the usual amount of function `func` during
/// `[from_s, to_s)` (seconds from the start).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fault {
    /// Faulty node.
    pub node: usize,
    /// Function affected.
    pub func: usize,
    /// Multiplier.
    pub factor: f64,
    /// Start, seconds from the scenario start.
    pub from_s: u64,
    /// End, seconds from the scenario start.
    pub to_s: u64,
}

/// A healthy node that is persistently different from its peers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OddNode {
    /// The node.
    pub node: usize,
    /// Multiplier of its functions 2 to 4.
    pub factor: f64,
}

/// A node that stops producing data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stop {
    /// The node.
    pub node: usize,
    /// When, seconds from the start.
    pub at_s: u64,
}

/// A synthetic run.
#[derive(Clone, Debug)]
pub struct Scenario {
    /// Nodes.
    pub nodes: usize,
    /// Functions.
    pub funcs: usize,
    /// Length, seconds.
    pub secs: u64,
    /// Record interval, seconds.
    pub interval_s: u64,
    /// Start, seconds since the epoch.
    pub t0_s: u64,
    /// Standard deviation of persistent per-node, per-function differences (relative).
    pub heterogeneity: f64,
    /// Standard deviation of per-interval noise (relative).
    pub noise: f64,
    /// Value of the hottest function per second.
    pub scale: f64,
    /// Seed of the noise: same seed, same data.
    pub seed: u64,
    /// Seed of the persistent per-node differences: the same servers across runs share it.
    pub node_seed: u64,
    /// Probability per node and interval of a transient hiccup: one random function does
    /// `hiccup_factor` times its usual amount for that interval only (a GC pause, a retry).
    pub hiccup_rate: f64,
    /// See `hiccup_rate`.
    pub hiccup_factor: f64,
    /// A healthy node that is persistently different from its peers (it holds more metadata,
    /// a different disk), in every run.
    pub odd: Option<OddNode>,
    /// Faults (or, in evaluations, benign asymmetries: the same mechanism, judged healthy).
    pub faults: Vec<Fault>,
    /// A node that stops producing data at a time (seconds from the start).
    pub stop: Option<Stop>,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            nodes: 4,
            funcs: 20,
            secs: 1200,
            interval_s: 1,
            t0_s: 1_700_000_000,
            heterogeneity: 0.05,
            noise: 0.1,
            scale: 1000.0,
            seed: 1,
            node_seed: 1,
            hiccup_rate: 0.0,
            hiccup_factor: 3.0,
            odd: None,
            faults: Vec::new(),
            stop: None,
        }
    }
}

/// A standard normal value (Box–Muller).
fn normal(rng: &mut SplitMix64) -> f64 {
    let u1 = rng.unit().max(1e-300);
    let u2 = rng.unit();
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

impl Scenario {
    /// Node name of node `n` (`n00`, `n01`, …).
    pub fn node_name(n: usize) -> String {
        format!("n{n:02}")
    }

    /// Generates the run in time order: `sink(node, interval start ns, values)`.
    pub fn generate(&self, mut sink: impl FnMut(usize, u64, &[f64])) {
        let mut node_rng = SplitMix64(self.node_seed);
        let mut rng = SplitMix64(self.seed);
        let base: Vec<f64> = (0..self.funcs)
            .map(|i| self.scale / ((i + 1) as f64).powf(0.8))
            .collect();
        let het: Vec<Vec<f64>> = (0..self.nodes)
            .map(|_| {
                (0..self.funcs)
                    .map(|_| (1.0 + self.heterogeneity * normal(&mut node_rng)).max(0.0))
                    .collect()
            })
            .collect();
        let mut v = vec![0.0; self.funcs];
        let step = self.interval_s.max(1);
        let mut t = 0;
        while t < self.secs {
            for (n, het_n) in het.iter().enumerate() {
                if self.stop.is_some_and(|s| s.node == n && t >= s.at_s) {
                    continue;
                }
                let hiccup = (self.hiccup_rate > 0.0 && rng.unit() < self.hiccup_rate)
                    .then(|| (rng.next_u64() % self.funcs as u64) as usize);
                for (i, x) in v.iter_mut().enumerate() {
                    let mut val = base[i] * het_n[i] * step as f64;
                    // Noise shrinks with aggregation like a sum of per-second noises.
                    val *= 1.0 + self.noise / (step as f64).sqrt() * normal(&mut rng);
                    if let Some(odd) = self.odd.filter(|o| o.node == n) {
                        if (2..5).contains(&i) {
                            val *= odd.factor;
                        }
                    }
                    if hiccup == Some(i) {
                        val *= self.hiccup_factor;
                    }
                    for f in &self.faults {
                        if f.node == n && f.func == i && t >= f.from_s && t < f.to_s {
                            val *= f.factor;
                        }
                    }
                    *x = val.max(0.0);
                }
                sink(n, (self.t0_s + t) * NS_PER_S, &v);
            }
            t += step;
        }
    }

    /// Registers the nodes and functions in metric `m` of `analyzer` and pushes the run,
    /// closing windows as it goes (offline).
    pub fn feed(&self, analyzer: &mut Analyzer, m: usize) {
        let nodes: Vec<usize> = (0..self.nodes)
            .map(|n| analyzer.node(&Self::node_name(n)))
            .collect();
        for i in 0..self.funcs {
            analyzer.component(m, &CompLabel::func("synth", &format!("f{i:03}")));
        }
        let dur = self.interval_s.max(1) * NS_PER_S;
        let mut last = 0;
        self.generate(|n, start, v| {
            let iv = Interval {
                start_ns: start,
                dur_ns: dur,
                partial: false,
                data: IntervalData::Dense(v),
            };
            // Everything before this interval is in: close what can close.
            if start != last {
                last = start;
                analyzer.advance(None);
            }
            analyzer
                .push(m, nodes[n], 0, &iv)
                .expect("synthetic data fits the windows");
        });
        analyzer.advance(None);
    }

    /// The state `diagnose --follow` would report at the end of this scenario: the time family
    /// alone, 6 s windows every 3 s, k = 3, every node held to the trained threshold
    /// `threshold`; `damaged(node)` marks nodes with a damaged file.
    pub fn live_status(&self, threshold: f64, damaged: impl Fn(&str) -> bool) -> LiveStatus {
        let cfg = AnalyzerConfig {
            windows: Windows {
                size_ns: 6 * NS_PER_S,
                shift_ns: 3 * NS_PER_S,
            },
            k: 3,
            distance: Distance::Manhattan,
            score: ScoreKind::MedianNode,
            peers: Peers::Auto,
            keep_scores: true,
        };
        let metric = MetricConfig {
            family: Arc::new(Time),
            slot_ns: NS_PER_S,
            lag_ns: 2 * NS_PER_S,
            keep: KeepRule::AtLeast(1.0),
            policy: Policy::Trained {
                by_node: HashMap::new(),
                fallback: threshold,
                shared: None,
            },
            weights: None,
            normal: None,
            roles: None,
            rare: None,
        };
        let mut a = Analyzer::new(cfg, vec![metric]);
        self.feed(&mut a, 0);
        let outcome = a.outcome();
        let report = Diagnosis::build(
            &outcome,
            ReportInput {
                data: Vec::new(),
                thresholds_file: None,
                reported: &[Metric::TIME],
                findings: Vec::new(),
                notes: Vec::new(),
                warnings: Vec::new(),
                top: 3,
                peers: String::new(),
                by_program: false,
                os: OsSettings {
                    windows: Windows {
                        size_ns: 6 * NS_PER_S,
                        shift_ns: 3 * NS_PER_S,
                    },
                    smoothing: 1,
                },
                levels: None,
                after_baseline: false,
            },
        );
        LiveStatus::new(&outcome, report, damaged, false)
    }
}
