//! Counting per interval: samples per (node, program, location), kernel events and stops per
//! node, losses by kind; intervals closed in order, missed ones marked.

use std::collections::{BTreeMap, BTreeSet};

use culprit_format::{interval_flags, LayerEvent};

use rustc_hash::FxHashMap;

use crate::nodes::NodeIdx;
use crate::procs::{Loc, ProgId};

/// What the records the kernel dropped were: each kind has a ring of its own per CPU, so a
/// LOST record says which (by the event that owns the ring).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Loss {
    /// IP samples.
    Samples,
    /// Kernel-event (tracepoint) records.
    Events,
    /// Process-tracking records: COMM, MMAP2, FORK, EXIT, NAMESPACES.
    Tracking,
}

#[derive(Debug, Default)]
pub(super) struct NodeAcc {
    pub(super) samples: FxHashMap<(ProgId, Loc), u64>,
    /// Samples per (program, call chain outermost first), with `--call-graph`.
    pub(super) stacks: FxHashMap<(ProgId, Box<[Loc]>), u64>,
    pub(super) total: u64,
    pub(super) events: Vec<u64>,
    /// Stops of processes begun, and ns stopped (see [`STOPPED_EVENT`]).
    pub(super) stopped: u64,
    pub(super) stopped_ns: u64,
    /// System-call layer events ([`crate::syscalls`]), in the order their calls ended.
    pub(super) layers: Vec<LayerEvent>,
    /// Those not kept (more than [`LAYER_EVENTS_MAX`] in the interval).
    pub(super) layers_dropped: u64,
}

/// Most layer events a node keeps per interval (56 bytes each in the file).
pub const LAYER_EVENTS_MAX: usize = 1 << 20;

#[derive(Debug, Default)]
pub(super) struct Acc {
    pub(super) nodes: Vec<NodeAcc>,
    pub(super) lost: u64,
    pub(super) lost_events: u64,
    pub(super) lost_tracking: u64,
}

/// One interval, closed and ready to write.
#[derive(Debug)]
pub struct Closed {
    /// Interval start, wall-clock ns.
    pub start_ns: u64,
    /// Length, ns.
    pub dur_ns: u64,
    /// [`interval_flags`] bits.
    pub flags: u32,
    pub(super) acc: Acc,
}

/// The open intervals.
#[derive(Debug)]
pub struct Intervals {
    dur_ns: u64,
    n_nodes: usize,
    n_events: usize,
    first: u64,
    first_partial: bool,
    next: u64,
    open: BTreeMap<u64, Acc>,
    missed: BTreeSet<u64>,
    /// Intervals ending after this wall time were not observed in full (the run ended
    /// before their records could be processed).
    missed_from: Option<u64>,
    late: u64,
}

/// Which intervals the sampler could not observe: a round of the ring reader that came more
/// than an interval after the previous one (the process was stopped or starved) *and* a ring
/// that overflowed (a LOST record) mean the wall-clock span between the two rounds was not
/// observed. The kernel writes its LOST record only once there is room again, so the evidence
/// may come one round after the stall.
#[derive(Clone, Debug, Default)]
pub struct Gaps {
    pending: Option<(u64, u64)>,
}

impl Gaps {
    /// One round: `stalled` is the wall-clock span since the previous round when it was longer
    /// than an interval, `lost` whether this round brought a LOST record. Returns the spans
    /// now known missed.
    pub fn round(&mut self, stalled: Option<(u64, u64)>, lost: bool) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        if let Some(span) = self.pending.take() {
            if lost {
                out.push(span);
            }
        }
        match stalled {
            Some(span) if lost => out.push(span),
            Some(span) => self.pending = Some(span),
            None => {}
        }
        out
    }
}

impl Intervals {
    /// Intervals of `dur_ns` starting with the one containing `start_wall_ns`.
    pub fn new(dur_ns: u64, start_wall_ns: u64, n_nodes: usize, n_events: usize) -> Intervals {
        let first = start_wall_ns / dur_ns;
        Intervals {
            dur_ns,
            n_nodes,
            n_events,
            first,
            first_partial: start_wall_ns % dur_ns != 0,
            next: first,
            open: BTreeMap::new(),
            missed: BTreeSet::new(),
            missed_from: None,
            late: 0,
        }
    }

    /// Interval length.
    pub fn dur_ns(&self) -> u64 {
        self.dur_ns
    }

    /// Records that arrived after their interval was written (counted into the oldest open one).
    pub fn late(&self) -> u64 {
        self.late
    }

    fn acc(&mut self, wall_ns: u64) -> &mut Acc {
        let mut idx = wall_ns / self.dur_ns;
        if idx < self.next {
            self.late += 1;
            idx = self.next;
        }
        let (n_nodes, n_events) = (self.n_nodes, self.n_events);
        self.open.entry(idx).or_insert_with(|| Acc {
            nodes: (0..n_nodes)
                .map(|_| NodeAcc {
                    events: vec![0; n_events],
                    ..NodeAcc::default()
                })
                .collect(),
            ..Acc::default()
        })
    }

    /// Counts a sample.
    pub fn sample(&mut self, wall_ns: u64, node: NodeIdx, prog: ProgId, loc: Loc) {
        let n = &mut self.acc(wall_ns).nodes[node as usize];
        n.total += 1;
        *n.samples.entry((prog, loc)).or_insert(0) += 1;
    }

    /// Counts a sample's call chain (outermost frame first).
    pub fn stack(&mut self, wall_ns: u64, node: NodeIdx, prog: ProgId, frames: Box<[Loc]>) {
        let n = &mut self.acc(wall_ns).nodes[node as usize];
        *n.stacks.entry((prog, frames)).or_insert(0) += 1;
    }

    /// Counts one occurrence of tracepoint `event` on `node`.
    pub fn event(&mut self, wall_ns: u64, node: NodeIdx, event: usize) {
        self.acc(wall_ns).nodes[node as usize].events[event] += 1;
    }

    /// Keeps the ISSUE and COMPLT of a system call of `node` that ended at `wall_ns`.
    pub fn layer_events(&mut self, wall_ns: u64, node: NodeIdx, evs: [LayerEvent; 2]) {
        let n = &mut self.acc(wall_ns).nodes[node as usize];
        if n.layers.len() + 2 > LAYER_EVENTS_MAX {
            n.layers_dropped += 2;
        } else {
            n.layers.extend(evs);
        }
    }

    /// Counts a stop of a process of `node` (its first thread switched out stopped).
    pub fn stopped(&mut self, wall_ns: u64, node: NodeIdx) {
        self.acc(wall_ns).nodes[node as usize].stopped += 1;
    }

    /// Adds the time `node`'s process stayed stopped from `from` to `to` (wall-clock ns) to
    /// the intervals it covers (the part before the oldest open interval goes into it).
    pub fn stopped_span(&mut self, node: NodeIdx, from: u64, to: u64) {
        let mut t = from;
        while t < to {
            let end = ((t / self.dur_ns + 1) * self.dur_ns).min(to);
            let dur = self.dur_ns;
            let n = &mut self.acc(t).nodes[node as usize];
            // A node's stopped time is its most stopped process's: at most the interval.
            n.stopped_ns = (n.stopped_ns + (end - t)).min(dur);
            t = end;
        }
    }

    /// Counts records of kind `what` the kernel dropped.
    pub fn lost(&mut self, wall_ns: u64, n: u64, what: Loss) {
        let a = self.acc(wall_ns);
        match what {
            Loss::Samples => a.lost += n,
            Loss::Events => a.lost_events += n,
            Loss::Tracking => a.lost_tracking += n,
        }
    }

    /// Marks the intervals lying wholly inside `(from, to)` (wall ns) as not observed.
    pub fn mark_missed(&mut self, from_wall: u64, to_wall: u64) {
        let first = from_wall.div_ceil(self.dur_ns).max(self.next);
        let end = to_wall / self.dur_ns; // intervals < end end before `to`
        for idx in first..end {
            self.missed.insert(idx);
        }
    }

    /// Marks every interval that ends after `from_wall` (wall ns) as not observed: the records
    /// from then on were not processed.
    pub fn mark_missed_from(&mut self, from_wall: u64) {
        self.missed_from = Some(self.missed_from.map_or(from_wall, |m| m.min(from_wall)));
    }

    /// Closes every interval that ends at or before `wall_ns`.
    pub fn close_until(&mut self, wall_ns: u64) -> Vec<Closed> {
        let mut out = Vec::new();
        while (self.next + 1) * self.dur_ns <= wall_ns {
            out.push(self.close_next(0));
        }
        out
    }

    /// Closes every remaining interval up to the one containing `stop_wall_ns`, the last flagged
    /// PARTIAL unless the run ended exactly on a boundary.
    pub fn close_all(&mut self, stop_wall_ns: u64) -> Vec<Closed> {
        let mut out = Vec::new();
        let last = stop_wall_ns.saturating_sub(1) / self.dur_ns;
        while self.next <= last.max(self.first) {
            let is_last = self.next == last.max(self.first);
            let partial = is_last && stop_wall_ns % self.dur_ns != 0;
            out.push(self.close_next(if partial { interval_flags::PARTIAL } else { 0 }));
        }
        out
    }

    fn close_next(&mut self, extra: u32) -> Closed {
        let idx = self.next;
        self.next += 1;
        let mut flags = extra;
        if idx == self.first && self.first_partial {
            flags |= interval_flags::PARTIAL;
        }
        let mut acc = self.open.remove(&idx).unwrap_or_default();
        if acc.nodes.is_empty() {
            acc.nodes = (0..self.n_nodes)
                .map(|_| NodeAcc {
                    events: vec![0; self.n_events],
                    ..NodeAcc::default()
                })
                .collect();
        }
        if self.missed.remove(&idx)
            || self
                .missed_from
                .is_some_and(|m| (idx + 1) * self.dur_ns > m)
        {
            flags |= interval_flags::MISSED;
        }
        Closed {
            start_ns: idx * self.dur_ns,
            dur_ns: self.dur_ns,
            flags,
            acc,
        }
    }
}
