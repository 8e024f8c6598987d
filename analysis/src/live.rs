//! A diagnosis in progress at one moment (`diagnose --follow`): the interim report — built by
//! the same code as the final one, so a live verdict is never computed another way — with what
//! only a run in progress has: each node's latest window, whether it is anomalous and faulty
//! *now*, how many of the last 2k − 1 windows were anomalous, and where its newest data ends.
//! Outputs (the OpenMetrics endpoint of `diagnose --metrics-listen`) render a [`LiveStatus`];
//! none recomputes it.

use crate::analyzer::{MetricResult, Outcome, ScoredWindow};
use crate::combine::Verdict;
use crate::diagnosis::Diagnosis;
use crate::family::Metric;

/// The state of a diagnosis in progress.
#[derive(Clone, Debug)]
pub struct LiveStatus {
    /// The report as it stands (the same [`Diagnosis::build`] as at the end).
    pub report: Diagnosis,
    /// k of the k-of-(2k − 1) filter.
    pub k: usize,
    /// Per node, sorted by name.
    pub nodes: Vec<LiveNode>,
    /// Per reported metric.
    pub metrics: Vec<LiveMetric>,
    /// The node most likely at fault: the most severe combined verdict other than ok (stopped,
    /// faulty, suspect), ties broken by the strongest evidence (median score ÷ threshold of its
    /// anomalous windows, any metric), then by name. `None` while every node is ok.
    pub top_suspect: Option<String>,
    /// True once following has ended (every writer ended, or the time limit passed).
    pub finished: bool,
}

/// One node.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveNode {
    /// Node.
    pub node: String,
    /// Combined verdict so far.
    pub verdict: Verdict,
    /// End of its newest data (any metric), ns since the epoch.
    pub data_end_ns: Option<u64>,
    /// Its data stopped while its peers' went on (a culprit).
    pub stopped: bool,
    /// One of its files is damaged.
    pub damaged: bool,
}

/// One metric.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveMetric {
    /// Metric.
    pub metric: Metric,
    /// Windows closed so far.
    pub windows_closed: u64,
    /// Start of the latest window closed, ns.
    pub latest_window_ns: Option<u64>,
    /// Per node, sorted by name.
    pub nodes: Vec<LiveNodeMetric>,
}

/// One node for one metric.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveNodeMetric {
    /// Node.
    pub node: String,
    /// Its score and threshold in the latest window it was scored in.
    pub latest: Option<ScoredWindow>,
    /// Anomalous in the metric's latest window.
    pub anomalous: bool,
    /// Faulty as of the metric's latest window (k of the last 2k − 1 anomalous).
    pub faulty: bool,
    /// Anomalous windows among the metric's last 2k − 1.
    pub recent_anomalous: usize,
    /// Anomalous windows so far.
    pub anomalous_windows: u64,
    /// Windows it was scored in so far.
    pub windows_scored: u64,
}

impl LiveStatus {
    /// The status of an analysis whose results so far are `outcome` and whose interim report
    /// is `report`; `damaged(node)` says whether one of a node's files is damaged.
    pub fn new(
        outcome: &Outcome,
        report: Diagnosis,
        damaged: impl Fn(&str) -> bool,
        finished: bool,
    ) -> Self {
        let k = outcome.config.k;
        let names = &outcome.names;
        let mut order: Vec<usize> = (0..names.len()).collect();
        order.sort_by(|&a, &b| names[a].cmp(&names[b]));
        let reported: Vec<&MetricResult> = outcome
            .metrics
            .iter()
            .filter(|m| report.metric(m.metric()).is_some())
            .collect();
        let metrics = reported
            .iter()
            .map(|m| live_metric(m, names, &order, k))
            .collect();
        let nodes = order
            .iter()
            .map(|&n| {
                let name = &names[n];
                LiveNode {
                    node: name.clone(),
                    verdict: report
                        .verdict(name)
                        .map_or(Verdict::Ok, |v| v.combined.verdict),
                    data_end_ns: reported.iter().filter_map(|m| m.nodes[n].last_ns).max(),
                    stopped: report
                        .findings
                        .iter()
                        .any(|f| f.is_stop() && f.node() == name),
                    damaged: damaged(name),
                }
            })
            .collect();
        let top_suspect = top_suspect(&report);
        LiveStatus {
            report,
            k,
            nodes,
            metrics,
            top_suspect,
            finished,
        }
    }
}

fn live_metric(m: &MetricResult, names: &[String], order: &[usize], k: usize) -> LiveMetric {
    let latest_window_ns = m.window_range.map(|r| r.last_ns);
    // The k-of-(2k − 1) filter's span, as window starts: the latest and the 2k − 2 before it.
    let span_ns = (2 * k as u64).saturating_sub(2) * m.windows_ns.shift_ns;
    let nodes = order
        .iter()
        .map(|&n| {
            let nm = &m.nodes[n];
            let (anomalous, faulty, recent_anomalous) = match latest_window_ns {
                Some(last) => (
                    nm.anomalous.last().is_some_and(|a| a.start_ns == last),
                    nm.episodes.last().is_some_and(|e| e.last_window_ns == last),
                    nm.anomalous
                        .iter()
                        .rev()
                        .take_while(|a| a.start_ns + span_ns >= last)
                        .count(),
                ),
                None => (false, false, 0),
            };
            LiveNodeMetric {
                node: names[n].clone(),
                latest: nm.scores.last().copied(),
                anomalous,
                faulty,
                recent_anomalous,
                anomalous_windows: nm.anomalous.len() as u64,
                windows_scored: nm.scored,
            }
        })
        .collect();
    LiveMetric {
        metric: m.metric(),
        windows_closed: m.windows,
        latest_window_ns,
        nodes,
    }
}

/// The most severe verdict other than ok, then the strongest evidence, then the name.
fn top_suspect(report: &Diagnosis) -> Option<String> {
    let evidence = |node: &str| {
        report
            .metrics
            .iter()
            .flat_map(|m| m.nodes.iter())
            .filter(|n| n.node == node)
            .filter_map(|n| n.evidence)
            .fold(0.0, f64::max)
    };
    report
        .verdicts
        .iter()
        .filter(|v| !matches!(v.combined.verdict, Verdict::Ok | Verdict::NotCompared))
        .map(|v| (v.combined.verdict, evidence(&v.node), &v.node))
        .max_by(|a, b| {
            a.0.cmp(&b.0)
                .then(a.1.total_cmp(&b.1))
                // Equal verdicts and evidence: the first name wins.
                .then(b.2.cmp(a.2))
        })
        .map(|(_, _, n)| n.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::{Fault, Scenario};

    /// Node 2 does 3× one function from second 60 of 120; the status after `secs` seconds.
    fn status_after(secs: u64) -> LiveStatus {
        Scenario {
            secs,
            faults: vec![Fault {
                node: 2,
                func: 0,
                factor: 3.0,
                from_s: 60,
                to_s: 120,
            }],
            ..Scenario::default()
        }
        .live_status(4000.0, |n| n == "n01")
    }

    /// Before the fault nothing is anomalous; during it node 2 is faulty now, with at least k
    /// of the last 2k − 1 windows anomalous, and is the top suspect; the others are not.
    #[test]
    fn faulty_now_and_recent_windows() {
        let before = status_after(50);
        assert_eq!(before.top_suspect, None);
        let m = &before.metrics[0];
        assert!(m.windows_closed > 10);
        assert!(m
            .nodes
            .iter()
            .all(|n| !n.anomalous && !n.faulty && n.recent_anomalous == 0));
        assert!(m.nodes.iter().all(|n| n.latest.is_some()));

        let during = status_after(90);
        assert_eq!(
            during.top_suspect.as_deref(),
            Some("n02"),
            "{:#?}",
            during.report
        );
        let m = &during.metrics[0];
        for n in &m.nodes {
            if n.node == "n02" {
                assert!(n.faulty && n.anomalous, "{n:?}");
                assert_eq!(n.recent_anomalous, 2 * during.k - 1, "{n:?}");
                let l = n.latest.unwrap();
                assert!(l.score > l.threshold);
                assert_eq!(Some(l.start_ns), m.latest_window_ns);
            } else {
                assert!(!n.faulty && n.recent_anomalous == 0, "{n:?}");
            }
        }
        let v: Vec<(&str, Verdict, bool)> = during
            .nodes
            .iter()
            .map(|n| (n.node.as_str(), n.verdict, n.damaged))
            .collect();
        assert_eq!(
            v,
            [
                ("n00", Verdict::Ok, false),
                ("n01", Verdict::Ok, true),
                ("n02", Verdict::Faulty, false),
                ("n03", Verdict::Ok, false)
            ]
        );
        assert!(during.nodes.iter().all(|n| n.data_end_ns.is_some()));
    }
}
