//! Paused, not slow: a node whose process was stopped by a signal (SIGSTOP) or a tracer.
//!
//! A stopped process looks like slow code to every metric: calls take longer, fewer are made.
//! A long stop leaves missed intervals (and drops the node out of the comparison), but short
//! ones — tens of milliseconds, several times a second — miss no interval and shift the time
//! profile by about ten percent, never flagged. Three views tell a stop from slowness:
//!
//! * **the kernel's** (`culprit sample`): every thread that stops is switched out in the
//!   stopped state (`sched_switch` with `prev_state` T or t); the sampler counts each stop of a
//!   process once (at its first thread switched out stopped, until one of them runs again) per
//!   node and measures how long each process stayed stopped (until a stopped thread ran
//!   again), in its Events records (`culprit:stopped`, `culprit:stopped_ns`);
//! * **the runtime's**: the tracer's flusher wakes for a probe at a random time in every
//!   100 ms; each probe that falls into a stop comes late by the rest of it (`Wakeups`
//!   records). A node's stopped time is estimated per interval as the larger of the lateness
//!   and (late probes × the time between probes): the first for a long stop (one probe late
//!   by nearly all of it), the second for short ones (the probes fall at random times, so the
//!   share that lands in a stop is the share of time stopped, whatever the stops' rhythm);
//! * **/proc on this host**, while it is still stopped: state `T` or `t`. A reader on another
//!   host cannot see it: there a stopped node shows as "stopped producing data" (no end
//!   marker) with its last call, until it resumes and the other two views say "paused".
//!
//! A node is paused when it is stopped now, or when one view's stopped time is at least
//! [`PAUSE_MIN_NS`] and [`PEER_FACTOR`] times the median of its peers' (a machine so busy
//! that every flusher wakes late does not make every node paused). Where the kernel's view
//! exists it decides, and the runtime's is not read: the kernel sees every stop, while a probe
//! also comes late when its thread waits for a CPU. On a host whose nodes each waited
//! 500 ms/s for a CPU, a fault-free node's five late probes read as 500 ms stopped, 3× its
//! peers', while the kernel had seen it stop not once.

use std::sync::Arc;

use crate::data::{Dataset, NodeData};
use crate::missing::Finding;
use crate::score::median_in_place;
use crate::stacks::ProcessState;
use culprit_format::vocab::{STOPPED_EVENT, STOPPED_NS_EVENT};

/// Least stopped time that makes a node paused.
pub const PAUSE_MIN_NS: u64 = 500_000_000;
/// How many times its peers' median stopped time a paused node's must be.
pub const PEER_FACTOR: f64 = 3.0;
/// The runtime probes once in every slot this long (format: `WakeupsRec`); a late probe
/// stands for its slot.
pub const PROBE_SLOT_NS: u64 = 100_000_000;

/// A node's stopped time as each view sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StopViews {
    /// Kernel: stopped ns and stops, when the node was sampled with `sched:sched_switch`.
    pub kernel: Option<(u64, u64)>,
    /// Runtime: estimated stopped ns of its most stopped process, when traced.
    pub runtime: Option<u64>,
    /// Stopped now (on this host): since when (wall-clock ns).
    pub now_since: Option<u64>,
}

/// The views of one node.
pub fn views(ds: &Dataset, node: &NodeData) -> StopViews {
    let mut v = StopViews::default();
    let stopped = ds.names.events.lookup(&Arc::from(STOPPED_EVENT));
    let stopped_ns = ds.names.events.lookup(&Arc::from(STOPPED_NS_EVENT));
    if let (Some(id), Some(id_ns)) = (stopped, stopped_ns) {
        let (mut n, mut ns, mut seen) = (0u64, 0u64, false);
        for f in &node.samples {
            for iv in &f.events {
                for c in &iv.counts {
                    if c.event == id {
                        n += c.count;
                        seen = true;
                    } else if c.event == id_ns {
                        ns += c.count;
                        seen = true;
                    }
                }
            }
        }
        if seen {
            v.kernel = Some((ns, n));
        }
    }
    for t in &node.traces {
        if !t.wakeups.is_empty() {
            let est: u64 = t
                .wakeups
                .iter()
                .map(|w| w.late_ns.max(u64::from(w.late) * PROBE_SLOT_NS))
                .sum();
            v.runtime = Some(v.runtime.unwrap_or(0).max(est));
        }
        if ProcessState::of(t) == ProcessState::Stopped {
            let last = t
                .intervals
                .iter()
                .map(|iv| iv.start_ns + iv.dur_ns)
                .max()
                .unwrap_or(t.created_ns);
            let since = t.stacks.as_ref().map_or(last, |s| s.taken_ns.max(last));
            v.now_since = Some(v.now_since.map_or(since, |s: u64| s.min(since)));
        }
    }
    v
}

/// The paused findings of a dataset (see the module docs). `now_ns` is the time a process
/// stopped now has been stopped until.
pub fn findings(ds: &Dataset, now_ns: u64) -> Vec<Finding> {
    let all: Vec<StopViews> = ds.nodes.iter().map(|n| views(ds, n)).collect();
    let peers_median = |n: usize, pick: &dyn Fn(&StopViews) -> Option<u64>| -> f64 {
        let mut v: Vec<f64> = all
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != n)
            .filter_map(|(_, s)| pick(s).map(|x| x as f64))
            .collect();
        if v.is_empty() {
            0.0
        } else {
            median_in_place(&mut v)
        }
    };
    let mut out = Vec::new();
    for (n, node) in ds.nodes.iter().enumerate() {
        let v = all[n];
        let peers = (
            peers_median(n, &|s| s.kernel.map(|k| k.0)),
            peers_median(n, &|s| s.runtime),
        );
        let Some((source, stopped_ns)) = decide(&v, peers, now_ns) else {
            continue;
        };
        out.push(Finding::Paused {
            node: node.name.clone(),
            stopped_s: stopped_ns as f64 / 1e9,
            stops: v.kernel.map(|k| k.1).filter(|&n| n > 0),
            source: source.to_string(),
            now: v.now_since.is_some(),
        });
    }
    out
}

/// Whether views `v` make a node paused, given the median of its peers' kernel and runtime
/// stopped times: the source that tells (`proc`, `kernel` or `runtime`) and the stopped ns.
fn decide(
    v: &StopViews,
    (kernel_peers, runtime_peers): (f64, f64),
    now_ns: u64,
) -> Option<(&'static str, u64)> {
    let stands_out = |ns: u64, med: f64| ns >= PAUSE_MIN_NS && ns as f64 >= PEER_FACTOR * med;
    let kernel = v.kernel.filter(|&(ns, _)| stands_out(ns, kernel_peers));
    // The runtime's estimate only where the kernel did not look (module docs).
    let runtime = v
        .runtime
        .filter(|&ns| v.kernel.is_none() && stands_out(ns, runtime_peers));
    match (v.now_since, kernel, runtime) {
        (Some(since), k, r) => {
            // Stopped now: what the other views saw before, plus the stop in progress.
            let before = k.map(|k| k.0).or(r).unwrap_or(0);
            Some(("proc", before.max(now_ns.saturating_sub(since))))
        }
        (None, Some((ns, _)), _) => Some(("kernel", ns)),
        (None, None, Some(ns)) => Some(("runtime", ns)),
        (None, None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_view_stands_out_from_its_peers() {
        // Tracer only: 1.5 s of late probes against peers' 100 ms.
        let v = StopViews {
            runtime: Some(1500 * MS),
            ..StopViews::default()
        };
        assert_eq!(decide(&v, (0.0, 100e6), 0), Some(("runtime", 1500 * MS)));
        // Every node's probes late alike: not paused.
        assert_eq!(decide(&v, (0.0, 800e6), 0), None);
        // Under the least stopped time: not paused.
        let short = StopViews {
            runtime: Some(400 * MS),
            ..StopViews::default()
        };
        assert_eq!(decide(&short, (0.0, 0.0), 0), None);
        // The kernel saw the stops.
        let k = StopViews {
            kernel: Some((900 * MS, 30)),
            runtime: Some(700 * MS),
            now_since: None,
        };
        assert_eq!(decide(&k, (0.0, 0.0), 0), Some(("kernel", 900 * MS)));
        // Stopped now, for 2 s.
        let now = StopViews {
            now_since: Some(1_000 * MS),
            ..StopViews::default()
        };
        assert_eq!(
            decide(&now, (0.0, 0.0), 3_000 * MS),
            Some(("proc", 2_000 * MS))
        );
    }

    /// Late probes of a node the kernel saw never stop are a wait for a CPU, not a pause.
    #[test]
    fn the_kernel_decides_where_it_looked() {
        let v = StopViews {
            kernel: Some((0, 0)),
            runtime: Some(500 * MS),
            now_since: None,
        };
        assert_eq!(decide(&v, (0.0, 150e6), 0), None);
        let unsampled = StopViews { kernel: None, ..v };
        assert_eq!(
            decide(&unsampled, (0.0, 150e6), 0),
            Some(("runtime", 500 * MS))
        );
    }
}
