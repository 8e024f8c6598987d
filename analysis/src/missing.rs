//! Missing data as findings: a node that stopped producing data while its peers went on
//! (seed 002, "earliest last timestamp": fail-stop problems show as a trace that ends early), a
//! node that started late, gaps in a node's data, and damaged data files.
//!
//! Damage is a finding, never a verdict: a node whose data ends early because one of its files
//! is damaged (a flipped byte, a file cut short) did not necessarily stop, so it is reported
//! [`Finding::Damaged`], not [`Finding::Stopped`]; the intact part of its data is compared as
//! any other.
//!
//! Seed 002 compares each node's last timestamp with the mean and standard deviation of all of
//! them; with the handful of nodes of a real group the standard deviation is dominated by the
//! one that stopped, so here the reference is the *median* last timestamp and the margin is a
//! fixed grace (one WinShift, at least two record intervals): a node is "stopped" when its data
//! ends more than the grace before the median node's.

use serde::{Deserialize, Serialize};

use crate::analyzer::{Outcome, WindowRange};
use crate::family::{Metric, Windows};
use crate::score::median_in_place;
use crate::time::{fmt_wall, fmt_wall_utc, rezone, rfc3339};

/// How a node's data ended, judged from its files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Ending {
    /// Every file has an end marker: the programs exited (or the sampler was stopped).
    Clean,
    /// Some file has no end marker: the program crashed, was killed, or hangs with its
    /// flusher stopped.
    NoEndMarker,
    /// A file is damaged; data before the damage is used.
    Damaged,
    /// Not known (data not from files).
    Unknown,
}

/// A finding about missing data.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Finding {
    /// The node's data ends while its peers' goes on.
    Stopped {
        /// Node.
        node: String,
        /// End of its last data.
        at: String,
        /// Same, ns.
        at_ns: u64,
        /// End of the median node's data.
        peers_until: String,
        /// How it ended.
        ending: Ending,
    },
    /// The node's data starts after its peers'.
    LateStart {
        /// Node.
        node: String,
        /// Start of its first data.
        at: String,
        /// Same, ns.
        at_ns: u64,
        /// Start of the median node's data.
        peers_from: String,
    },
    /// The node's data has gaps or missed intervals inside its span.
    Gaps {
        /// Node.
        node: String,
        /// Metric.
        metric: Metric,
        /// Windows in which its data was incomplete, not counting those after it stopped or
        /// before it started.
        windows: u64,
    },
    /// The node has no data for a metric its peers have.
    NoData {
        /// Node.
        node: String,
        /// Metric.
        metric: Metric,
    },
    /// A data file of the node is damaged: what comes before the damage is used, what comes
    /// after it is missing.
    Damaged {
        /// Node.
        node: String,
        /// The file's name.
        file: String,
        /// What is wrong and where.
        reason: String,
    },
}

impl Finding {
    /// The node concerned.
    pub fn node(&self) -> &str {
        match self {
            Finding::Stopped { node, .. }
            | Finding::LateStart { node, .. }
            | Finding::Gaps { node, .. }
            | Finding::NoData { node, .. }
            | Finding::Damaged { node, .. } => node,
        }
    }

    /// True for findings that make a node's verdict "stopped" (exit status 1).
    pub fn is_stop(&self) -> bool {
        matches!(self, Finding::Stopped { .. })
    }

    /// True for a damaged data file (verdict "damaged" unless a metric finds the node faulty).
    pub fn is_damage(&self) -> bool {
        matches!(self, Finding::Damaged { .. })
    }

    /// One line for people.
    pub fn describe(&self) -> String {
        match self {
            Finding::Stopped {
                node,
                at_ns,
                peers_until,
                ending,
                ..
            } => {
                let how = match ending {
                    Ending::Clean => "its programs exited cleanly",
                    Ending::NoEndMarker => "no end marker: crashed, killed, or hung",
                    Ending::Damaged => "a data file is damaged",
                    Ending::Unknown => "cause unknown",
                };
                format!(
                    "{node} stopped producing data at {} while its peers went on until \
                     {} ({how})",
                    fmt_wall(*at_ns),
                    rezone(peers_until)
                )
            }
            Finding::LateStart {
                node,
                at_ns,
                peers_from,
                ..
            } => format!(
                "{node} started producing data at {}, after its peers (from {})",
                fmt_wall(*at_ns),
                rezone(peers_from)
            ),
            Finding::Gaps {
                node,
                metric,
                windows,
            } => format!(
                "{node} has gaps in its {metric} data: {windows} window(s) left out of the \
                 comparison (missing data is never read as zeros)"
            ),
            Finding::NoData { node, metric } => {
                format!("{node} has no {metric} data while its peers do")
            }
            Finding::Damaged { node, file, reason } => format!(
                "{node}: {file} is damaged ({reason}); its data before the damage is compared, \
                 the rest is missing (damage is not a verdict)"
            ),
        }
    }
}

/// Span of a node's data over all metrics: (first start, last end).
fn span(outcome: &Outcome, node: usize) -> Option<(u64, u64)> {
    let mut out: Option<(u64, u64)> = None;
    for m in &outcome.metrics {
        let nm = &m.nodes[node];
        if let (Some(f), Some(l)) = (nm.first_ns, nm.last_ns) {
            out = Some(match out {
                Some((a, b)) => (a.min(f), b.max(l)),
                None => (f, l),
            });
        }
    }
    out
}

/// The findings of an analysis' data. `grace_ns` is the margin for "stopped" and "late";
/// `ending(node)` says how a node's files ended.
pub fn findings(
    outcome: &Outcome,
    reported: &[Metric],
    grace_ns: u64,
    ending: impl Fn(&str) -> Ending,
) -> Vec<Finding> {
    let names = &outcome.names;
    let spans: Vec<Option<(u64, u64)>> = (0..names.len()).map(|n| span(outcome, n)).collect();
    let mut firsts: Vec<f64> = spans.iter().flatten().map(|s| s.0 as f64).collect();
    let mut lasts: Vec<f64> = spans.iter().flatten().map(|s| s.1 as f64).collect();
    let mut out = Vec::new();
    if firsts.is_empty() {
        return out;
    }
    let med_first = median_in_place(&mut firsts) as u64;
    let med_last = median_in_place(&mut lasts) as u64;
    for (n, s) in spans.iter().enumerate() {
        let Some((first, last)) = *s else { continue };
        // A node whose data ends early at a damaged file did not necessarily stop: its
        // Damaged finding says so instead.
        if last + grace_ns < med_last && ending(&names[n]) != Ending::Damaged {
            out.push(Finding::Stopped {
                node: names[n].clone(),
                at: rfc3339(last),
                at_ns: last,
                peers_until: fmt_wall_utc(med_last),
                ending: ending(&names[n]),
            });
        }
        if first > med_first + grace_ns {
            out.push(Finding::LateStart {
                node: names[n].clone(),
                at: rfc3339(first),
                at_ns: first,
                peers_from: fmt_wall_utc(med_first),
            });
        }
    }
    for m in &outcome.metrics {
        if !reported.contains(&m.metric()) {
            continue;
        }
        let with_data = m.nodes.iter().filter(|n| n.first_ns.is_some()).count();
        for (n, nm) in m.nodes.iter().enumerate() {
            if nm.first_ns.is_none() {
                if with_data > 0 && spans[n].is_some() {
                    out.push(Finding::NoData {
                        node: names[n].clone(),
                        metric: m.metric(),
                    });
                }
                continue;
            }
            // Incomplete windows inside the node's own span: gaps, missed intervals.
            // Windows holding the node's partial first or last interval are edges, not gaps.
            let first = nm.first_full_ns.or(nm.first_ns).unwrap_or(0);
            let last = nm.last_full_ns.or(nm.last_ns).unwrap_or(0);
            let Some(range) = m.window_range else {
                continue;
            };
            let any = nm.first_ns.unwrap_or(0);
            let edges = edge_windows(m.windows_ns, range, Span { any, first, last });
            let inside = nm.incomplete.saturating_sub(edges);
            if inside > 0 {
                out.push(Finding::Gaps {
                    node: names[n].clone(),
                    metric: m.metric(),
                    windows: inside,
                });
            }
        }
    }
    out
}

/// Where a node's data is: its first data (`any`), its first whole interval and the end of its
/// last.
struct Span {
    any: u64,
    first: u64,
    last: u64,
}

/// Windows of `range` that are incomplete for a node only because they begin before its first
/// whole interval or end after its last: those are "late start"/"stopped", not gaps. The
/// analyzer counts a window incomplete once it ends after the node's first data.
fn edge_windows(w: Windows, range: WindowRange, span: Span) -> u64 {
    let (shift, size) = (w.shift_ns, w.size_ns);
    let total = (range.last_ns - range.first_ns) / shift + 1;
    (0..total)
        .map(|i| range.first_ns + i * shift)
        .filter(|&s| s < span.first || s + size > span.last)
        .filter(|&s| s + size > span.any)
        .count() as u64
}

/// Grace for "stopped" and "late": one WinShift, at least two of the coarsest record intervals.
pub fn grace(win_shift_ns: u64, coarsest_interval_ns: u64) -> u64 {
    win_shift_ns.max(2 * coarsest_interval_ns)
}
