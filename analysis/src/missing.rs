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

use crate::analyzer::Outcome;
use crate::combine::Verdict;
use crate::family::Metric;
use crate::score::median_in_place;
use crate::stacks::OpenCall;
use crate::time::{fmt_wall, fmt_wall_utc, rezone, Timestamp};

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
        at: Timestamp,
        /// Same, ns.
        at_ns: u64,
        /// End of the median node's data.
        peers_until: String,
        /// How it ended.
        ending: Ending,
        /// The call it was in, from its last stack snapshot (seed 002's last function), when
        /// the runtime took one.
        #[serde(deserialize_with = "Option::deserialize")]
        last_call: Option<OpenCall>,
    },
    /// A thread has been inside one call far longer than any peer ever stayed in that
    /// function (see `crate::stacks`).
    Stuck {
        /// Node.
        node: String,
        /// The call.
        call: OpenCall,
        /// The peers' longest call of the function, seconds (an upper bound).
        peers_longest_s: f64,
        /// Seconds the thread had made no progress (no traced call returned, not run on a
        /// CPU), when its runtime watched (added within version 1; `null` for older runtimes).
        #[serde(default)]
        still_s: Option<f64>,
    },
    /// A thread (or child process) has been inside one call far longer than any peer stayed in
    /// that function, but keeps making progress in it (its calls return, or it runs): *busy*
    /// in it, not stuck (see `crate::stacks`; added within version 1). Not a verdict.
    Busy {
        /// Node.
        node: String,
        /// The call.
        call: OpenCall,
        /// The peers' longest call of the function, seconds (an upper bound).
        peers_longest_s: f64,
        /// What progress it made since the snapshot before.
        progress: crate::stacks::Busy,
    },
    /// The node's process was stopped (SIGSTOP, or a tracer), not slow (see `crate::paused`).
    Paused {
        /// Node.
        node: String,
        /// Total time stopped, seconds.
        stopped_s: f64,
        /// Times it was stopped (the kernel's count), when known.
        #[serde(deserialize_with = "Option::deserialize")]
        stops: Option<u64>,
        /// Where the stopped time comes from: `kernel` (the sampler's count of switches out
        /// of the stopped state), `runtime` (the tracer's late wake-ups) or `proc` (the
        /// process is stopped now, seen in /proc on this host).
        source: String,
        /// Still stopped now.
        now: bool,
    },
    /// The node's data starts after its peers'.
    LateStart {
        /// Node.
        node: String,
        /// Start of its first data.
        at: Timestamp,
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
        /// Windows in which its data had a gap, not counting those after it stopped or before
        /// it started: `partial` of them compared on the seconds present, the others left out
        /// (less than half present).
        windows: u64,
        /// Of `windows`, those compared on the seconds present (added within version 1).
        #[serde(default)]
        partial: u64,
        /// The least share of a window's seconds present among the `partial` ones (added within
        /// version 1).
        #[serde(default)]
        min_present: Option<f64>,
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
            | Finding::Stuck { node, .. }
            | Finding::Busy { node, .. }
            | Finding::Paused { node, .. }
            | Finding::Damaged { node, .. } => node,
        }
    }

    /// True for findings that make a node's verdict "stopped" (exit status 1).
    pub fn is_stop(&self) -> bool {
        matches!(self, Finding::Stopped { .. })
    }

    /// The verdict a stuck or paused finding gives its node, with the reason.
    pub fn verdict(&self) -> Option<(Verdict, String)> {
        match self {
            Finding::Stuck {
                node,
                call,
                still_s,
                ..
            } => {
                let who = if call.forked {
                    format!("{} of {node}", call.who())
                } else {
                    call.who()
                };
                Some((
                    Verdict::Stuck,
                    format!(
                        "{who} stuck in {} for {}{}",
                        call.function,
                        crate::time::duration((stuck_s(call, *still_s) * 1e9) as u64),
                        no_progress_words(*still_s)
                    ),
                ))
            }
            Finding::Paused { .. } => Some((Verdict::Paused, self.describe())),
            _ => None,
        }
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
                last_call,
                ..
            } => {
                let how = match ending {
                    Ending::Clean => "its programs exited cleanly",
                    Ending::NoEndMarker => "no end marker: crashed, killed, hung or stopped",
                    Ending::Damaged => "a data file is damaged",
                    Ending::Unknown => "cause unknown",
                };
                let last = last_call
                    .as_ref()
                    .map(|c| format!("; last seen: {}", c.describe()))
                    .unwrap_or_default();
                format!(
                    "{node} stopped producing data at {} while its peers went on until \
                     {} ({how}){last}",
                    fmt_wall(*at_ns),
                    rezone(peers_until)
                )
            }
            Finding::Stuck {
                node,
                call,
                peers_longest_s,
                still_s,
            } => format!(
                "{node}: {} stuck in {} for {}{} (pid {}, {}; its peers' longest call of it: at \
                 most {})",
                thread_word(call),
                call.function,
                crate::time::duration((stuck_s(call, *still_s) * 1e9) as u64),
                no_progress_words(*still_s),
                call.pid,
                call.program,
                crate::time::duration((peers_longest_s * 1e9) as u64)
            ),
            Finding::Busy {
                node,
                call,
                peers_longest_s,
                progress,
            } => format!(
                "{node}: {} busy in {} for {} — {}, so not stuck (pid {}, {}; its peers' \
                 longest call of it: at most {})",
                thread_word(call),
                call.function,
                crate::time::duration((call.running_s * 1e9) as u64),
                progress.words(),
                call.pid,
                call.program,
                crate::time::duration((peers_longest_s * 1e9) as u64)
            ),
            Finding::Paused {
                node,
                stopped_s,
                stops,
                source,
                now,
            } => {
                let times = stops.map(|n| format!(" {n} times,")).unwrap_or_default();
                let from = match source.as_str() {
                    "kernel" => "the kernel's switches out of the stopped state",
                    "runtime" => "the tracer's late wake-ups",
                    _ => "/proc on this host",
                };
                let still = if *now { "; stopped now" } else { "" };
                format!(
                    "{node}: paused (SIGSTOP or a tracer), not slow:{times} stopped for {} in \
                     total (from {from}){still}",
                    crate::time::duration((stopped_s * 1e9) as u64)
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
            Finding::Gaps { node, metric, .. } => format!(
                "{node} has gaps in its {metric} data: {} (missing data is never read as \
                 zeros)",
                self.gap_words().unwrap_or_default()
            ),
            Finding::NoData { node, metric } if *metric == Metric::OS => format!(
                "{node} has no OS metrics while its peers do (a sampler run with \
                 --no-os-metrics, or one that does not record them): it is compared on the other \
                 metrics only, and no resource can be named from its OS metrics"
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

impl Finding {
    /// A gap finding's windows in words: "7 window(s) compared on the seconds present (at
    /// least 55 % of each), 2 left out (under half present)".
    fn gap_words(&self) -> Option<String> {
        let Finding::Gaps {
            windows,
            partial,
            min_present,
            ..
        } = self
        else {
            return None;
        };
        let mut parts = Vec::new();
        if *partial > 0 {
            let least = min_present
                .map(|p| format!(" (at least {:.0} % of each)", p * 100.0))
                .unwrap_or_default();
            parts.push(format!(
                "{partial} window(s) compared on the seconds present{least}"
            ));
        }
        let left = windows.saturating_sub(*partial);
        if left > 0 {
            parts.push(format!(
                "{left} window(s) left out of the comparison (under half present)"
            ));
        }
        Some(parts.join(", "))
    }
}

/// The findings for people: gaps grouped, one line per node (metrics with the same gaps on
/// one clause), every other finding on its own line, in the findings' order.
pub fn lines(findings: &[Finding]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut done: Vec<&str> = Vec::new();
    for f in findings {
        let Finding::Gaps { node, .. } = f else {
            out.push(f.describe());
            continue;
        };
        if done.contains(&node.as_str()) {
            continue;
        }
        done.push(node);
        // (words, metrics) in order of first appearance.
        let mut clauses: Vec<(String, Vec<String>)> = Vec::new();
        for g in findings {
            let Finding::Gaps {
                node: n, metric, ..
            } = g
            else {
                continue;
            };
            if n != node {
                continue;
            }
            let words = g.gap_words().unwrap_or_default();
            match clauses.iter_mut().find(|c| c.0 == words) {
                Some(c) => c.1.push(metric.to_string()),
                None => clauses.push((words, vec![metric.to_string()])),
            }
        }
        let text: Vec<String> = clauses
            .iter()
            .map(|(words, metrics)| format!("{}: {words}", metrics.join(", ")))
            .collect();
        out.push(format!(
            "{node} has gaps in its data (missing data is never read as zeros) — {}",
            text.join("; ")
        ));
    }
    out
}

fn thread_word(c: &OpenCall) -> String {
    if c.forked {
        c.who()
    } else {
        format!("thread {} (tid {})", c.thread, c.tid)
    }
}

/// How long a stuck call is stuck: the call's time, or the thread's time without progress
/// when shorter (`crate::stacks`, "stuck means no progress").
fn stuck_s(call: &OpenCall, still_s: Option<f64>) -> f64 {
    still_s.map_or(call.running_s, |s| s.min(call.running_s))
}

/// ", no call returned and no CPU used" when the runtime watched the thread's progress.
fn no_progress_words(still_s: Option<f64>) -> &'static str {
    if still_s.is_some() {
        " (no call of it returned, no CPU used)"
    } else {
        ""
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
                at: Timestamp::from_ns(last),
                at_ns: last,
                peers_until: fmt_wall_utc(med_last),
                ending: ending(&names[n]),
                last_call: None,
            });
        }
        if first > med_first + grace_ns {
            out.push(Finding::LateStart {
                node: names[n].clone(),
                at: Timestamp::from_ns(first),
                at_ns: first,
                peers_from: fmt_wall_utc(med_first),
            });
        }
    }
    // A node without any OS metric while its peers have them: one finding for the family, not
    // one per metric.
    let os: Vec<&crate::analyzer::MetricResult> = outcome
        .metrics
        .iter()
        .filter(|m| reported.contains(&m.metric()) && m.config.family.group() == Metric::OS)
        .collect();
    let no_os: Vec<bool> = (0..names.len())
        .map(|n| {
            !os.is_empty() && spans[n].is_some() && os.iter().all(|m| m.nodes[n].first_ns.is_none())
        })
        .collect();
    for (n, &none) in no_os.iter().enumerate() {
        if none {
            out.push(Finding::NoData {
                node: names[n].clone(),
                metric: Metric::OS,
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
                let family_said = m.config.family.group() == Metric::OS && no_os[n];
                if with_data > 0 && spans[n].is_some() && !family_said {
                    out.push(Finding::NoData {
                        node: names[n].clone(),
                        metric: m.metric(),
                    });
                }
                continue;
            }
            // The node's own gaps inside its span: windows holding its partial first or last
            // interval, or after it stopped, are edges, not gaps (the analyzer counts no window
            // before its first whole interval).
            let last = nm.last_full_ns.or(nm.last_ns).unwrap_or(0);
            let size = m.windows_ns.size_ns;
            let shift = m.windows_ns.shift_ns;
            let (mut windows, mut partial) = (0u64, 0u64);
            let mut min_present: Option<f64> = None;
            for r in &nm.gaps {
                let inside = (0..r.windows)
                    .filter(|i| r.first_ns + i * shift + size <= last)
                    .count() as u64;
                windows += inside;
                if !r.left_out && inside > 0 {
                    partial += inside;
                    min_present = Some(min_present.map_or(r.min_present, |p| p.min(r.min_present)));
                }
            }
            if windows > 0 {
                out.push(Finding::Gaps {
                    node: names[n].clone(),
                    metric: m.metric(),
                    windows,
                    partial,
                    min_present,
                });
            }
        }
    }
    out
}

/// Grace for "stopped" and "late": one WinShift, at least two of the coarsest record intervals.
pub fn grace(win_shift_ns: u64, coarsest_interval_ns: u64) -> u64 {
    win_shift_ns.max(2 * coarsest_interval_ns)
}
