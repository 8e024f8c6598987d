//! Requests assembled from the tracer's per-thread request events (seed 004 §IV): each thread's
//! BEGIN … CALL … END is one *part* of a request on one node; parts with the same root id
//! (`parent` when not 0, else `id`) are one request, whatever thread, process or node served
//! them. A request's *call tree* is its parts in order — the root's parts by start time, then
//! the handed-off parts by id (the order the program numbered them in, which clock drift
//! between nodes cannot disturb: seed 004's MIDs) — each part's calls in depth-first order
//! (by entry time; a caller enters before its callees). A part handed off synchronously is
//! the child of the call that waited for it (`waits_are_children`).

use std::collections::HashMap;

use crate::data::{FuncId, NodeData, RequestMark};

/// One call made inside a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReqCall {
    /// Entry, wall-clock ns.
    pub t_ns: u64,
    /// The function.
    pub func: FuncId,
    /// Depth below the part's start (1: called directly in it).
    pub depth: u16,
    /// Exclusive (self) ns.
    pub excl_ns: u64,
    /// Inclusive ns.
    pub incl_ns: u64,
}

/// One thread's part of a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Part {
    /// Index of the node (in the dataset's node list).
    pub node: usize,
    /// The part's id.
    pub id: u64,
    /// The request it continues (0: none).
    pub parent: u64,
    /// The program's request type.
    pub rtype: u64,
    /// Begin and end, wall-clock ns.
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
    /// Its calls in depth-first order.
    pub calls: Vec<ReqCall>,
}

/// A request: its parts in call-tree order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The root id.
    pub root: u64,
    /// The root part's type (the first part's when no part is the root).
    pub rtype: u64,
    /// Parts in call-tree order.
    pub parts: Vec<Part>,
}

impl Request {
    /// First begin to last end, ns: the request's response latency.
    pub fn latency_ns(&self) -> u64 {
        let lo = self.parts.iter().map(|p| p.start_ns).min().unwrap_or(0);
        let hi = self.parts.iter().map(|p| p.end_ns).max().unwrap_or(0);
        hi.saturating_sub(lo)
    }

    /// The calls in call-tree order, each with its part's node.
    pub fn calls(&self) -> impl Iterator<Item = (usize, &ReqCall)> + '_ {
        self.parts
            .iter()
            .flat_map(|p| p.calls.iter().map(move |c| (p.node, c)))
    }

    /// The call-tree signature: the type, then per part a separator and its calls as
    /// (depth, function). Requests with equal signatures share a call tree (seed 004 §V.A).
    pub fn signature(&self) -> Vec<u64> {
        let mut s = vec![self.rtype];
        for p in &self.parts {
            s.push(u64::MAX);
            s.extend(
                p.calls
                    .iter()
                    .map(|c| (c.depth as u64) << 32 | c.func as u64),
            );
        }
        s
    }
}

/// What assembly found besides the requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AssemblyStats {
    /// Parts without an end (the process died, or the data stops inside them), or with calls
    /// lost (the writer's buffer was full).
    pub unfinished: usize,
    /// Events the writers lost (their buffers were full).
    pub dropped: u64,
    /// The largest sampling rate recorded (one in N).
    pub sample_every: u32,
}

/// A part handed off while a call of another part was running — that call waited for it
/// (synchronous hand-off: a call to another thread, process or node) — is the call's child in
/// the call tree: its time leaves the call's exclusive time, as a traced callee's would. The
/// innermost call whose run covers the part's takes it. A part that outlives every call of
/// the others (an asynchronous hand-off) takes nothing from them.
fn waits_are_children(parts: &mut [Part]) {
    for k in 0..parts.len() {
        if parts[k].parent == 0 {
            continue;
        }
        let (start, end) = (parts[k].start_ns, parts[k].end_ns);
        let mut best: Option<(usize, usize, u16)> = None;
        for (q, p) in parts.iter().enumerate() {
            if q == k {
                continue;
            }
            for (i, c) in p.calls.iter().enumerate() {
                let covers = c.t_ns <= start && c.t_ns.saturating_add(c.incl_ns) >= end;
                if covers && best.is_none_or(|(_, _, d)| c.depth > d) {
                    best = Some((q, i, c.depth));
                }
            }
        }
        if let Some((q, i, _)) = best {
            let c = &mut parts[q].calls[i];
            c.excl_ns = c.excl_ns.saturating_sub(end - start);
        }
    }
}

/// Every complete request of `nodes`, in root-id order.
pub fn assemble(nodes: &[NodeData]) -> (Vec<Request>, AssemblyStats) {
    let mut stats = AssemblyStats::default();
    let mut parts: Vec<Part> = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        for t in &node.traces {
            let mut open: HashMap<u32, Part> = HashMap::new();
            for s in &t.requests {
                stats.dropped += s.dropped as u64;
                stats.sample_every = stats.sample_every.max(s.sample_every);
                for e in &s.events {
                    match *e {
                        RequestMark::Begin {
                            t_ns,
                            tid,
                            id,
                            parent,
                            rtype,
                        } => {
                            let p = Part {
                                node: n,
                                id,
                                parent,
                                rtype,
                                start_ns: t_ns,
                                end_ns: t_ns,
                                calls: Vec::new(),
                            };
                            if open.insert(tid, p).is_some() {
                                stats.unfinished += 1;
                            }
                        }
                        RequestMark::Call {
                            t_ns,
                            tid,
                            func,
                            depth,
                            incl_ns,
                            excl_ns,
                        } => {
                            if let Some(p) = open.get_mut(&tid) {
                                p.calls.push(ReqCall {
                                    t_ns,
                                    func,
                                    depth,
                                    excl_ns,
                                    incl_ns,
                                });
                            }
                        }
                        RequestMark::End {
                            t_ns,
                            tid,
                            id,
                            lost,
                        } => match open.remove(&tid) {
                            Some(p) if p.id != id => {
                                open.insert(tid, p);
                            }
                            Some(_) if lost => stats.unfinished += 1,
                            Some(mut p) => {
                                p.end_ns = t_ns.max(p.start_ns);
                                // Recorded at return: entry order is depth-first order.
                                p.calls.sort_by_key(|c| (c.t_ns, c.depth));
                                parts.push(p);
                            }
                            None => {}
                        },
                    }
                }
            }
            stats.unfinished += open.len();
        }
    }
    let mut by_root: HashMap<u64, Vec<Part>> = HashMap::new();
    for p in parts {
        let root = if p.parent != 0 { p.parent } else { p.id };
        by_root.entry(root).or_default().push(p);
    }
    let mut requests: Vec<Request> = by_root
        .into_iter()
        .map(|(root, mut parts)| {
            parts.sort_by_key(|p| (p.id != root || p.parent != 0, p.id, p.start_ns));
            let rtype = parts
                .iter()
                .find(|p| p.parent == 0)
                .unwrap_or(&parts[0])
                .rtype;
            waits_are_children(&mut parts);
            Request { root, rtype, parts }
        })
        .collect();
    requests.sort_by_key(|r| r.root);
    (requests, stats)
}
