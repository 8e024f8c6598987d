//! The cost budget (`CULPRIT_BUDGET`, default 2 % of the process's CPU time): which functions
//! to demote when the runtime costs more than that.
//!
//! # How the cost is estimated
//!
//! At start-up the flusher times the hooks themselves: a few hundred thousand enter/exit pairs
//! of a made-up function on a private block, the thread's own CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`) over the pairs, the least of three runs ([`crate::calibrate`]):
//! the CPU cost of one traced call, `call_ns` (about 17 ns on the machines the figures of
//! docs/performance.md come from, two `rdtsc` being most of it). Each interval the runtime's
//! cost is then *calls traced in it × `call_ns`*, and the process's CPU time in it is read from
//! `CLOCK_PROCESS_CPUTIME_ID` (every thread, the runtime's included); both go into the file
//! (Cost records, `culprit report`). On real code the hooks also miss in the caches, which
//! the calibration does not see: the estimate is a lower bound (on SQLite under our workload
//! the hooks' measured cost per call was 1.2× the calibrated one).
//!
//! # What is demoted
//!
//! When the cost is above the budget in an interval in which it was at least
//! [`MIN_COST_NS_PER_S`] a second (a nearly idle process is left alone whatever the share),
//! the functions that cost most for what they tell are demoted until the calls left would cost
//! at most [`HEADROOM`] of the budget: those whose self time per call is at most
//! [`WORK_NS_PER_CALL`] first — tiny helpers called very often, whose time tells little and
//! costs the most — in order of calls, then, only if the budget still cannot be met, functions
//! that do real work, in order of calls. A demoted function is untraced for the rest of the
//! process's life: its time stays in its callers' self time, as with `CULPRIT_EXCLUDE`, and the
//! analysis compares it as demoted on every node (docs/thresholds.md).

/// The self time per call above which a function does real work: demoted only when the budget
/// cannot be met otherwise (`culprit report` suggests exclusions by the same rule).
pub const WORK_NS_PER_CALL: f64 = 1_000.0;
/// Demotions bring the estimated cost down to this share of the budget, so that the next
/// interval's variation does not go over it at once.
pub const HEADROOM: f64 = 0.75;
/// Below this much tracing CPU a second nothing is demoted, whatever the share.
pub const MIN_COST_NS_PER_S: f64 = 1_000_000.0;
/// Most functions demoted in one interval.
pub const MAX_PER_INTERVAL: usize = 512;

/// One function's part of an interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FuncCost {
    /// Traced calls in the interval.
    pub calls: u64,
    /// Its self time in them, ns.
    pub self_ns: u64,
}

/// What one interval cost.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Interval {
    /// The process's CPU time in it, ns.
    pub cpu_ns: u64,
    /// Its length, ns.
    pub dur_ns: u64,
    /// Traced calls in it.
    pub calls: u64,
}

impl Interval {
    /// The runtime's estimated CPU time in the interval.
    pub fn cost_ns(&self, call_ns: f64) -> f64 {
        self.calls as f64 * call_ns
    }

    /// The estimate as a share of the process's CPU time.
    pub fn share(&self, call_ns: f64) -> f64 {
        self.cost_ns(call_ns) / self.cpu_ns.max(1) as f64
    }
}

fn works(f: &FuncCost) -> bool {
    f.self_ns as f64 / f.calls.max(1) as f64 > WORK_NS_PER_CALL
}

/// The functions (indices into `funcs`, the interval's traced functions not demoted yet) to
/// demote so that the interval `iv` would have cost at most [`HEADROOM`] × `budget` of its
/// CPU time at `call_ns` per call; none when it cost no more than the budget.
pub fn choose(budget: f64, call_ns: f64, iv: &Interval, funcs: &[FuncCost]) -> Vec<usize> {
    let cpu = iv.cpu_ns as f64;
    let mut cost = iv.cost_ns(call_ns);
    let per_s = cost / (iv.dur_ns.max(1) as f64 / 1e9);
    if call_ns <= 0.0 || cpu <= 0.0 || cost <= budget * cpu || per_s < MIN_COST_NS_PER_S {
        return Vec::new();
    }
    let goal = HEADROOM * budget * cpu;
    let mut order: Vec<usize> = (0..funcs.len()).filter(|&i| funcs[i].calls > 0).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&funcs[a], &funcs[b]);
        works(x)
            .cmp(&works(y))
            .then(y.calls.cmp(&x.calls))
            .then(a.cmp(&b))
    });
    let mut out = Vec::new();
    for i in order {
        if cost <= goal || out.len() >= MAX_PER_INTERVAL {
            break;
        }
        cost -= funcs[i].calls as f64 * call_ns;
        out.push(i);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    fn f(calls: u64, self_ns: u64) -> FuncCost {
        FuncCost { calls, self_ns }
    }

    #[test]
    fn within_budget_nothing_is_demoted() {
        // 1 M calls at 17 ns = 17 ms of 1 s of CPU: 1.7 % < 2 %.
        let iv = Interval {
            cpu_ns: S,
            dur_ns: S,
            calls: 1_000_000,
        };
        assert!(choose(0.02, 17.0, &iv, &[f(1_000_000, 10_000_000)]).is_empty());
    }

    #[test]
    fn tiny_and_frequent_first_until_within_headroom() {
        // 10 M calls at 17 ns = 170 ms of 1 s: 17 %. Goal 1.5 % = 15 ms = 882 k calls left.
        let funcs = [
            f(100_000, 500_000_000), // 5 µs a call: real work
            f(6_000_000, 60_000_000),
            f(3_000_000, 30_000_000),
            f(800_000, 8_000_000),
            f(100_000, 1_000_000),
        ];
        let iv = Interval {
            cpu_ns: S,
            dur_ns: S,
            calls: funcs.iter().map(|f| f.calls).sum(),
        };
        let d = choose(0.02, 17.0, &iv, &funcs);
        assert_eq!(d, vec![1, 2, 3]);
        let left: u64 = (0..funcs.len())
            .filter(|i| !d.contains(i))
            .map(|i| funcs[i].calls)
            .sum();
        assert!(left as f64 * 17.0 <= HEADROOM * 0.02 * S as f64);
    }

    #[test]
    fn real_work_only_when_the_budget_needs_it() {
        let funcs = [f(2_000_000, 4_000_000_000), f(10_000, 10_000)];
        let iv = Interval {
            cpu_ns: S,
            dur_ns: S,
            calls: 2_010_000,
        };
        assert_eq!(choose(0.02, 17.0, &iv, &funcs), vec![1, 0]);
    }

    #[test]
    fn a_nearly_idle_process_is_left_alone() {
        // 20 k calls: 340 µs of tracing in a second, 34 % of 1 ms of CPU.
        let iv = Interval {
            cpu_ns: 1_000_000,
            dur_ns: S,
            calls: 20_000,
        };
        assert!(choose(0.02, 17.0, &iv, &[f(20_000, 100_000)]).is_empty());
    }
}
