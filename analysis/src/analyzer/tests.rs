use std::collections::HashMap;
use std::sync::Arc;

use super::*;
use crate::family::tracer::Time;
use crate::family::KeepRule;
use crate::filter::KOfN;
use crate::model::CompValue;
use crate::policy::{trained_threshold, Policy, Unsupervised, Weights};
use crate::time::NS_PER_S;

fn cfg(size: u64, shift: u64) -> AnalyzerConfig {
    AnalyzerConfig {
        windows: Windows {
            size_ns: size * NS_PER_S,
            shift_ns: shift * NS_PER_S,
        },
        k: 3,
        distance: Distance::Manhattan,
        score: ScoreKind::MedianNode,
        peers: Peers::Auto,
        keep_scores: true,
    }
}

fn metric(policy: Policy) -> MetricConfig {
    MetricConfig {
        family: Arc::new(Time),
        slot_ns: NS_PER_S,
        lag_ns: 2 * NS_PER_S,
        keep: KeepRule::AtLeast(1.0),
        policy,
        weights: None,
        normal: None,
        roles: None,
        rare: None,
    }
}

fn v(comp: CompIdx, value: f64) -> CompValue {
    CompValue { comp, value }
}

/// Pushes one whole second `s` of node `n`'s values (metric 0, writer 0).
fn push_second(e: &mut Analyzer, n: PeerIdx, s: u64, data: &[CompValue]) {
    e.push(
        0,
        n,
        0,
        &Interval {
            start_ns: s * NS_PER_S,
            dur_ns: NS_PER_S,
            partial: false,
            data: IntervalData::Sparse(data),
        },
    )
    .unwrap();
}

/// Four nodes, two functions, one second intervals from t0 for `secs`; node `bad` does
/// `extra` more of function 1 from second `from`.
fn run(e: &mut Analyzer, t0: u64, secs: u64, bad: Option<(usize, u64, f64)>) -> Vec<WindowEvent> {
    let names = ["a", "b", "c", "d"];
    let nodes: Vec<PeerIdx> = names.iter().map(|n| e.node(n)).collect();
    let f0 = e.component(0, &CompLabel::func("srv", "f0"));
    let f1 = e.component(0, &CompLabel::func("srv", "f1"));
    let mut evs = Vec::new();
    for s in 0..secs {
        for (i, &n) in nodes.iter().enumerate() {
            let jitter = ((s * 7 + i as u64 * 3) % 5) as f64;
            let mut v1 = 100.0 + jitter;
            if let Some((b, from, extra)) = bad {
                if b == i && s >= from {
                    v1 += extra;
                }
            }
            push_second(e, n, t0 + s, &[v(f0, 500.0 - jitter), v(f1, v1)]);
        }
        evs.extend(e.advance(Some((t0 + s + 1) * NS_PER_S)));
    }
    evs
}

#[test]
fn finds_the_node_and_function_untrained() {
    let mut e = Analyzer::new(
        cfg(6, 3),
        vec![metric(Policy::Untrained(Unsupervised::default()))],
    );
    let evs = run(&mut e, 1_000_002, 60, Some((2, 20, 300.0)));
    let ms = e.result(0);
    assert!(ms.nodes[2].faulty(), "{:?}", ms.nodes[2]);
    for n in [0, 1, 3] {
        assert!(
            !ms.nodes[n].faulty(),
            "node {n}: {:?}",
            ms.nodes[n].anomalous
        );
    }
    let top = ms.top(2, 10);
    assert_eq!(ms.comps[top[0].comp as usize].name.as_ref(), "f1");
    assert!(top[0].cause.node > top[0].cause.reference, "more time");
    // Every scored window's score is kept, with its threshold.
    let n2 = &ms.nodes[2];
    assert_eq!(n2.scores.len() as u64, n2.scored);
    assert!(n2.scores.iter().any(|w| w.score > w.threshold));
    // Reported within one WinShift of the window that made it faulty closing: windows close
    // in the advance() call right after their last interval arrives.
    let fired = evs.iter().find(|e| e.newly_faulty.contains(&2)).unwrap();
    assert!(fired.start_ns >= 20 * NS_PER_S);
    // First window starting at a multiple of WinShift since the epoch.
    assert_eq!(ms.window_range.unwrap().first_ns % (3 * NS_PER_S), 0);
}

/// Four nodes with a kept function (f0, 2,000 a second) and one the keep rule leaves out
/// (`log`, `rate` calls a second; node `bad` logs `bad_rate` a second from second `from`).
fn run_rare(e: &mut Analyzer, secs: u64, rate: f64, bad: Option<(usize, u64, f64)>) {
    let names = ["a", "b", "c", "d"];
    let nodes: Vec<PeerIdx> = names.iter().map(|n| e.node(n)).collect();
    let f0 = e.component(0, &CompLabel::func("srv", "f0"));
    let log = e.component(0, &CompLabel::func("srv", "log"));
    for s in 0..secs {
        for (i, &n) in nodes.iter().enumerate() {
            let jitter = ((s * 7 + i as u64 * 3) % 5) as f64;
            // A rare function's calls come in bursts: 0 to 2 × the rate, by node and second.
            let mut calls = (rate * (((s * 3 + i as u64) % 3) as f64)).round();
            if let Some((b, from, r)) = bad {
                if b == i && s >= from {
                    calls = r;
                }
            }
            push_second(
                e,
                n,
                1_000_002 + s,
                &[v(f0, 2000.0 - jitter), v(log, calls)],
            );
        }
        e.advance(Some((1_000_002 + s + 1) * NS_PER_S));
    }
    e.advance(None);
}

fn rare_metric(policy: Policy, bar: f64) -> MetricConfig {
    MetricConfig {
        family: Arc::new(crate::family::tracer::Count),
        keep: KeepRule::AtLeast(5000.0),
        rare: Some(crate::rare::RareBars { bar }),
        ..metric(policy)
    }
}

#[test]
fn a_rare_function_far_above_its_peers_flags_its_node() {
    let untrained = || Policy::Untrained(Unsupervised::default());
    // 1 call a second on the peers (0 to 2 by second), 400 on node 2 from second 20.
    let mut e = Analyzer::new(cfg(6, 3), vec![rare_metric(untrained(), 10.0)]);
    run_rare(&mut e, 60, 1.0, Some((2, 20, 400.0)));
    let ms = e.result(0);
    let log = ms
        .comps
        .iter()
        .position(|l| l.name.as_ref() == "log")
        .unwrap() as CompIdx;
    assert!(!ms.kept_list.contains(&log), "below the keep rule");
    assert!(ms.nodes[2].faulty(), "{:?}", ms.nodes[2].anomalous);
    assert!(ms.nodes[2].anomalous.iter().all(|a| a.rare.is_some()));
    for n in [0, 1, 3] {
        assert!(ms.nodes[n].anomalous.is_empty(), "node {n}");
    }
    let top = ms.top(2, 10);
    assert_eq!(top[0].comp, log, "the rare function first");
    assert!(ms.nodes[2].rare[&log].windows >= 3);
    // Fault-free: 0 against 2 or 4 calls in a window is no evidence.
    let mut e = Analyzer::new(cfg(6, 3), vec![rare_metric(untrained(), 10.0)]);
    run_rare(&mut e, 60, 1.0, None);
    assert!(e.result(0).nodes.iter().all(|n| n.anomalous.is_empty()));
    // Ten times more on one node is not orders of magnitude above its noise floor.
    let mut e = Analyzer::new(cfg(6, 3), vec![rare_metric(untrained(), 10.0)]);
    run_rare(&mut e, 60, 1.0, Some((2, 20, 10.0)));
    assert!(e.result(0).nodes.iter().all(|n| n.anomalous.is_empty()));
}

#[test]
fn training_learns_the_rare_ratio_and_the_bar_holds_it() {
    // Node 1 logs 30 a second throughout training: its ratio is learnt.
    let mut t = Analyzer::new(cfg(6, 3), vec![rare_metric(Policy::Training, 10.0)]);
    run_rare(&mut t, 40, 0.0, Some((1, 0, 30.0)));
    let learnt = t.result(0).nodes[1].rare_max;
    // 180 calls a window against a floor of 6.9 (the peers' 0): about 26.
    assert!((20.0..30.0).contains(&learnt), "{learnt}");
    assert!(t.result(0).nodes[0].rare_max < 1.0);
    let bar = crate::rare::trained_bar(learnt);
    // Untrained the same data flags node 1; with the trained bar it does not.
    let untrained = Policy::Untrained(Unsupervised::default());
    let mut u = Analyzer::new(cfg(6, 3), vec![rare_metric(untrained.clone(), 10.0)]);
    run_rare(&mut u, 40, 0.0, Some((1, 0, 30.0)));
    assert!(u.result(0).nodes[1].faulty());
    let mut d = Analyzer::new(cfg(6, 3), vec![rare_metric(untrained, bar)]);
    run_rare(&mut d, 40, 0.0, Some((1, 0, 30.0)));
    assert!(d.result(0).nodes.iter().all(|n| n.anomalous.is_empty()));
}

#[test]
fn training_then_diagnosis() {
    let mut t = Analyzer::new(cfg(6, 3), vec![metric(Policy::Training)]);
    run(&mut t, 1_000_002, 40, None);
    t.advance(None);
    let by_node: HashMap<String, f64> = (0..4)
        .map(|n| {
            let m = t.result(0).nodes[n].max_score;
            (t.name(n).to_string(), trained_threshold(m, 1.0))
        })
        .collect();
    assert!(t.result(0).nodes.iter().all(|n| n.anomalous.is_empty()));
    let fallback = by_node.values().copied().fold(0.0, f64::max);
    let policy = Policy::Trained {
        by_node,
        fallback,
        shared: None,
    };
    let mut clean = Analyzer::new(cfg(6, 3), vec![metric(policy.clone())]);
    run(&mut clean, 2_000_001, 40, None);
    assert!(clean.result(0).nodes.iter().all(|n| !n.faulty()));
    let mut bad = Analyzer::new(cfg(6, 3), vec![metric(policy)]);
    run(&mut bad, 2_000_001, 40, Some((1, 10, 200.0)));
    let faulty: Vec<usize> = (0..4)
        .filter(|&n| bad.result(0).nodes[n].faulty())
        .collect();
    assert_eq!(faulty, vec![1]);
}

/// Variance weighting (seed 000 §"Future work"): a quiet function that moves on one node
/// stands out once each function is divided by its fault-free scale, while raw distances
/// flag healthy nodes. Noisy: the nodes take 1000, 1100, 1200, 1300, rotating every 8 s
/// (raw distances of 200–600 per 4 s window); quiet: 10 everywhere, 40 on node d from
/// second 20.
fn weighting_run(weights: Option<Weights>) -> Vec<Vec<PeerIdx>> {
    let mut m = metric(Policy::Trained {
        by_node: HashMap::new(),
        fallback: 50.0,
        shared: None,
    });
    m.weights = weights;
    let mut e = Analyzer::new(cfg(4, 2), vec![m]);
    let nodes: Vec<PeerIdx> = ["a", "b", "c", "d"].iter().map(|n| e.node(n)).collect();
    let noisy = e.component(0, &CompLabel::func("srv", "noisy"));
    let quiet = e.component(0, &CompLabel::func("srv", "quiet"));
    let mut anomalous = Vec::new();
    for s in 0..40u64 {
        for (i, &n) in nodes.iter().enumerate() {
            let q = if i == 3 && s >= 20 { 40.0 } else { 10.0 };
            let level = ((s / 8 + i as u64) % 4) as f64;
            push_second(
                &mut e,
                n,
                s,
                &[v(noisy, 1000.0 + 100.0 * level), v(quiet, q)],
            );
        }
        for ev in e.advance(Some((s + 1) * NS_PER_S)) {
            anomalous.push(ev.anomalous.iter().map(|a| a.node).collect());
        }
    }
    anomalous
}

#[test]
fn variance_weighting_lets_a_quiet_function_speak() {
    let raw = weighting_run(None);
    assert!(raw.len() > 10);
    assert!(
        raw.iter().any(|a| a.iter().any(|&n| n != 3)),
        "raw: healthy nodes flagged by the noise {raw:?}"
    );
    let w = Weights {
        scales: [
            (CompLabel::func("srv", "noisy"), 100.0),
            (CompLabel::func("srv", "quiet"), 1.0),
        ]
        .into_iter()
        .collect(),
        default: 1.0,
        unseen_ratio: None,
    };
    let weighted = weighting_run(Some(w));
    assert_eq!(weighted.len(), raw.len());
    // Windows ending by second 20 see nothing; those starting at or after it see node d only.
    let windows_before = (20 - 4) / 2 + 1;
    assert!(
        weighted[..windows_before].iter().all(|a| a.is_empty()),
        "{weighted:?}"
    );
    assert!(
        weighted[windows_before + 2..].iter().all(|a| a == &[3]),
        "{weighted:?}"
    );
}

/// The least threshold that never flags a node: the largest k-th largest score of any
/// 2k − 1 consecutive windows; a gap counts as a zero score (as it counts as not anomalous).
#[test]
fn flag_score_follows_the_k_of_n_filter() {
    let (mut ns, mut nr) = (NodeState::new(3), NodeResult::default());
    for s in [10.0, 1.0, 1.0, 1.0, 1.0, 8.0, 7.0, 9.0, 1.0] {
        ns.note_training_score(s, 3, &mut nr);
    }
    // [1, 8, 7, 9, 1]: above 7 only 8 and 9 — two of five, never faulty; above 6.9, three.
    assert_eq!(nr.flag_score, 7.0);
    let mut f = KOfN::new(3);
    let flagged = |t: f64, f: &mut KOfN| {
        let mut any = false;
        for s in [10.0, 1.0, 1.0, 1.0, 1.0, 8.0, 7.0, 9.0, 1.0] {
            any |= f.push(s > t);
        }
        any
    };
    assert!(!flagged(7.0, &mut f));
    assert!(flagged(6.9, &mut KOfN::new(3)));
    let (mut g, mut gr) = (NodeState::new(3), NodeResult::default());
    for s in [5.0, 5.0] {
        g.note_training_score(s, 3, &mut gr);
    }
    g.gap(3, true);
    assert_eq!(gr.flag_score, 0.0, "two high windows and a gap never flag");
    g.note_training_score(5.0, 3, &mut gr);
    assert_eq!(gr.flag_score, 5.0);
}

#[test]
fn gaps_are_missing_not_zeros() {
    let mut e = Analyzer::new(
        cfg(2, 1),
        vec![metric(Policy::Untrained(Unsupervised::default()))],
    );
    let nodes: Vec<PeerIdx> = ["a", "b", "c", "d"].iter().map(|n| e.node(n)).collect();
    let f = e.component(0, &CompLabel::func("x", "f"));
    for s in 0..30u64 {
        for &n in &nodes {
            // Node d stops at 10 s and comes back at 20 s with a missed interval.
            if n == nodes[3] && (10..20).contains(&s) {
                continue;
            }
            let data = [v(f, 1000.0)];
            let iv = Interval {
                start_ns: (100 + s) * NS_PER_S,
                dur_ns: NS_PER_S,
                partial: false,
                data: if n == nodes[3] && s == 20 {
                    IntervalData::Missed
                } else {
                    IntervalData::Sparse(&data)
                },
            };
            e.push(0, n, 0, &iv).unwrap();
        }
    }
    e.advance(None);
    let d = &e.result(0).nodes[3];
    // Windows [110,112) … [119,121) hold none of d's seconds: left out. [109,111) and
    // [120,122) hold one of two (109; 121, 120 being missed): compared on it, scaled.
    assert_eq!(d.incomplete, 10, "{d:?}");
    assert_eq!(d.partial, 2, "{d:?}");
    assert_eq!(d.scored, 29 - 10, "{d:?}");
    assert!(d.anomalous.is_empty(), "a gap is not an anomaly");
    // Scaled to the window, its sums are its peers': a score of 0 where it was compared.
    assert!(d.scores.iter().all(|w| w.score == 0.0), "{:?}", d.scores);
    let runs: Vec<(u64, u64, bool)> = d
        .gaps
        .iter()
        .map(|r| (r.first_ns / NS_PER_S, r.windows, r.left_out))
        .collect();
    assert_eq!(runs, [(109, 1, false), (110, 10, true), (120, 1, false)]);
    assert_eq!(d.gaps[0].min_present, 0.5);
    assert_eq!(e.result(0).unscored, 0);
}

/// Pushes second `s` of writer `w` of node `n` (metric 0).
fn push_as(e: &mut Analyzer, n: PeerIdx, w: u64, s: u64, partial: bool, data: IntervalData<'_>) {
    e.push(
        0,
        n,
        w,
        &Interval {
            start_ns: s * NS_PER_S,
            dur_ns: NS_PER_S,
            partial,
            data,
        },
    )
    .unwrap();
}

/// One window of 10 s, four nodes each doing 100 per second of `f`; node d's data has
/// gaps shaped by `d_second(writer, s)`; returns d's and a's window sums of `f` as the
/// analyzer compared them (root cause of an anomalous window is not needed: the score is
/// |d − median| in this one-component Manhattan world).
fn one_window(
    d_writers: u64,
    d_second: impl Fn(u64, u64) -> Option<(bool, Option<f64>)>,
) -> NodeResult {
    let mut e = Analyzer::new(
        cfg(10, 10),
        vec![metric(Policy::Untrained(Unsupervised::default()))],
    );
    let nodes: Vec<PeerIdx> = ["a", "b", "c", "d"].iter().map(|n| e.node(n)).collect();
    let f = e.component(0, &CompLabel::func("x", "f"));
    for s in 100..110u64 {
        for &n in &nodes[..3] {
            push_second(&mut e, n, s, &[v(f, 100.0)]);
        }
        for w in 0..d_writers {
            if let Some((partial, val)) = d_second(w, s) {
                let data = [v(f, val.unwrap_or(0.0))];
                let data = match val {
                    Some(_) => IntervalData::Sparse(&data),
                    None => IntervalData::Missed,
                };
                push_as(&mut e, nodes[3], w, s, partial, data);
            }
        }
    }
    e.advance(None);
    e.result(0).nodes[3].clone()
}

/// The score of d's one window: |its scaled sum − the median's 100 × 10|.
fn d_score(d: &NodeResult) -> Option<f64> {
    assert!(d.scores.len() <= 1);
    d.scores.first().map(|w| w.score)
}

#[test]
fn a_window_with_a_gap_is_compared_on_the_seconds_present() {
    // Three seconds missed, in the middle: 7 s of 100 scaled to 10 s.
    let d = one_window(1, |_, s| {
        Some((false, (!(103..106).contains(&s)).then_some(100.0)))
    });
    assert_eq!((d.partial, d.incomplete), (1, 0));
    assert_eq!(d_score(&d), Some(0.0));
    // Doing 3× on the seconds present is 3× on the window.
    let d = one_window(1, |_, s| {
        Some((false, (!(103..106).contains(&s)).then_some(300.0)))
    });
    assert_eq!(d_score(&d), Some(2000.0));
    // Six of ten missed: not compared, never ok.
    let d = one_window(1, |_, s| Some((false, (s < 104).then_some(100.0))));
    assert_eq!((d.scored, d.partial, d.incomplete), (0, 0, 1));
    // Half present is the floor.
    let d = one_window(1, |_, s| Some((false, (s < 105).then_some(100.0))));
    assert_eq!((d.scored, d.partial), (1, 1));
    assert_eq!(d_score(&d), Some(0.0));
    // A partial interval after a missed stretch (the flusher woke late: the calls of its
    // first part were dropped) does not count: the second is not present.
    let d = one_window(1, |_, s| match s {
        103 | 104 => Some((false, None)),
        105 => Some((true, Some(40.0))),
        _ => Some((false, Some(100.0))),
    });
    assert_eq!(d_score(&d), Some(0.0));
    // A late start: seconds before the node's first are not zeros either.
    let d = one_window(1, |_, s| match s {
        ..102 => None,
        102 => Some((true, Some(30.0))),
        _ => Some((false, Some(100.0))),
    });
    assert_eq!(d_score(&d), Some(0.0));
}

/// A node of two processes, one of which missed seconds: that one is scaled over its own
/// seconds, the other is not extrapolated from them.
#[test]
fn each_writer_is_scaled_over_its_own_seconds() {
    // Writer 0 does 80 a second throughout; writer 1 does 20 but missed 4 seconds.
    let d = one_window(2, |w, s| {
        Some(match w {
            0 => (false, Some(80.0)),
            _ => (false, (!(102..106).contains(&s)).then_some(20.0)),
        })
    });
    assert_eq!(d.partial, 1);
    assert_eq!(d_score(&d), Some(0.0), "80 × 10 + 20 × 6 × 10/6");
    // A second process started mid-window: its first partial interval counts (another
    // writer covers that second), and its seconds are not scaled to the window.
    let d = one_window(2, |w, s| match (w, s) {
        (0, _) => Some((false, Some(90.0))),
        (_, ..105) => None,
        (_, 105) => Some((true, Some(5.0))),
        _ => Some((false, Some(10.0))),
    });
    assert_eq!((d.partial, d.incomplete), (0, 0));
    assert_eq!(d_score(&d), Some(55.0), "900 + 5 + 40 against 1000");
}

/// A node anomalous in the windows it could be compared in, with the others missing, is
/// "undecided" (not enough comparable windows), never "transient"; one compared
/// throughout and anomalous in two of five is not.
#[test]
fn missing_windows_that_could_hide_a_fault_are_undecided() {
    let run = |gap: bool| {
        let mut e = Analyzer::new(
            cfg(2, 1),
            vec![metric(Policy::Trained {
                by_node: HashMap::new(),
                fallback: 50.0,
                shared: None,
            })],
        );
        let nodes: Vec<PeerIdx> = ["a", "b", "c", "d"].iter().map(|n| e.node(n)).collect();
        let f = e.component(0, &CompLabel::func("x", "f"));
        for s in 100..120u64 {
            for (i, &n) in nodes.iter().enumerate() {
                let bad = i == 3 && s == 110;
                let missing = i == 3 && gap && (111..115).contains(&s);
                let data = [v(f, if bad { 500.0 } else { 100.0 })];
                let data = if missing {
                    IntervalData::Missed
                } else {
                    IntervalData::Sparse(&data)
                };
                push_as(&mut e, n, 0, s, false, data);
            }
        }
        e.advance(None);
        e.result(0).nodes[3].clone()
    };
    let d = run(true);
    assert!(!d.faulty() && !d.anomalous.is_empty(), "{d:?}");
    assert!(d.undecided > 0, "{d:?}");
    let d = run(false);
    assert!(!d.faulty() && !d.anomalous.is_empty(), "{d:?}");
    assert_eq!(d.undecided, 0, "{d:?}");
}

#[test]
fn follow_waits_for_live_sources_then_gives_up_on_silent_ones() {
    let mut e = Analyzer::new(
        cfg(2, 1),
        vec![metric(Policy::Untrained(Unsupervised::default()))],
    );
    let nodes: Vec<PeerIdx> = ["a", "b", "c"].iter().map(|n| e.node(n)).collect();
    let f = e.component(0, &CompLabel::func("x", "f"));
    let push = |e: &mut Analyzer, n, s: u64| push_second(e, n, s, &[v(f, 1.0)]);
    for s in 10..14 {
        push(&mut e, nodes[0], s);
        push(&mut e, nodes[1], s);
    }
    push(&mut e, nodes[2], 10);
    // Node c is behind but not yet silent for longer than the lag: nothing closes past it.
    assert!(e.advance(Some(12 * NS_PER_S)).is_empty());
    // Once c has been silent for longer than the lag, windows close without it.
    let evs = e.advance(Some(14 * NS_PER_S));
    assert_eq!(
        evs.iter().map(|e| e.start_ns).collect::<Vec<_>>(),
        vec![10 * NS_PER_S, 11 * NS_PER_S, 12 * NS_PER_S]
    );
    // [10, 12) holds one of its two seconds: compared on it; the next two hold none.
    assert_eq!(evs[0].partial, [(nodes[2], 0.5)]);
    assert!(evs[1].incomplete.contains(&nodes[2]));
    // Too few compared nodes: unscored.
    assert_eq!(e.result(0).unscored, 2);
    // Late intervals of c are counted, per node, and left out.
    push(&mut e, nodes[2], 11);
    assert_eq!(e.result(0).nodes[2].late, 1);
}

/// A writer behind but alive (its process runs, its file grows late) holds windows open
/// for up to BEHIND_WAIT_NS past the lag; its late intervals then count as any other.
#[test]
fn follow_waits_longer_for_a_writer_behind_but_alive() {
    let mut e = Analyzer::new(
        cfg(2, 1),
        vec![metric(Policy::Untrained(Unsupervised::default()))],
    );
    let nodes: Vec<PeerIdx> = ["a", "b", "c"].iter().map(|n| e.node(n)).collect();
    let f = e.component(0, &CompLabel::func("x", "f"));
    let push = |e: &mut Analyzer, n, s: u64| push_second(e, n, s, &[v(f, 1.0)]);
    for s in 10..40 {
        push(&mut e, nodes[0], s);
        push(&mut e, nodes[1], s);
    }
    push(&mut e, nodes[2], 10);
    // Seen alive at 40 s, 29 s behind: nothing closes past it.
    e.writer_alive(0, nodes[2], 0, 40 * NS_PER_S);
    assert!(e.advance(Some(40 * NS_PER_S)).is_empty());
    // Its intervals arrive late, in order: every window is compared with it.
    for s in 11..40 {
        push(&mut e, nodes[2], s);
    }
    e.writer_alive(0, nodes[2], 0, 41 * NS_PER_S);
    let evs = e.advance(Some(41 * NS_PER_S));
    assert_eq!(evs.len(), 29);
    assert!(evs
        .iter()
        .all(|ev| ev.scored == 3 && ev.incomplete.is_empty()));
    assert_eq!(e.result(0).nodes[2].late, 0);
    // Alive but behind for longer than the bound: windows close without it.
    for s in 40..200 {
        push(&mut e, nodes[0], s);
        push(&mut e, nodes[1], s);
    }
    e.writer_alive(0, nodes[2], 0, 200 * NS_PER_S);
    let evs = e.advance(Some(200 * NS_PER_S));
    let waited = (200 - 40) * NS_PER_S;
    assert!(!evs.is_empty());
    assert!(
        evs.last().unwrap().end_ns + 3 * NS_PER_S + BEHIND_WAIT_NS >= 200 * NS_PER_S
            && waited > BEHIND_WAIT_NS
    );
}

#[test]
fn refuses_misaligned_and_bad_values() {
    let mut e = Analyzer::new(
        cfg(2, 1),
        vec![metric(Policy::Untrained(Unsupervised::default()))],
    );
    let n = e.node("a");
    let f = e.component(0, &CompLabel::func("x", "f"));
    let iv = |start, dur, data| Interval {
        start_ns: start,
        dur_ns: dur,
        partial: false,
        data,
    };
    let ok = [v(f, 1.0)];
    assert!(matches!(
        e.push(
            0,
            n,
            0,
            &iv(NS_PER_S / 2, NS_PER_S, IntervalData::Sparse(&ok))
        ),
        Err(PushError::Misaligned { .. })
    ));
    assert!(matches!(
        e.push(0, n, 0, &iv(0, 2 * NS_PER_S, IntervalData::Sparse(&ok))),
        Err(PushError::Misaligned { .. })
    ));
    let bad = [v(f, f64::NAN)];
    assert!(matches!(
        e.push(0, n, 0, &iv(0, NS_PER_S, IntervalData::Sparse(&bad))),
        Err(PushError::BadValue(_))
    ));
    let dense = [1.0, -2.0];
    let _ = e.component(0, &CompLabel::func("x", "g"));
    assert!(matches!(
        e.push(0, n, 0, &iv(0, NS_PER_S, IntervalData::Dense(&dense))),
        Err(PushError::BadValue(-2.0))
    ));
    let unknown = [v(7, 1.0)];
    assert!(matches!(
        e.push(0, n, 0, &iv(0, NS_PER_S, IntervalData::Sparse(&unknown))),
        Err(PushError::UnknownComponent(7))
    ));
}
