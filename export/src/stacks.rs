//! Call stacks, for the formats that draw them (folded stacks, pprof): the one place where the
//! data's call paths become stacks.
//!
//! Which data gives which stack:
//!
//! * **the sampler's call chains** (`culprit sample --call-graph fp`, record kind 12): each
//!   chain is a whole stack as sampled, outermost frame first, kernel frames on top of the user
//!   frames they interrupted. Samples without a chain (an interval sampled without
//!   `--call-graph`) are one frame deep: the sampled function.
//! * **the tracer's call edges** (`CULPRIT_GRAPH=1`, record kind 10): the runtime records
//!   caller → callee pairs (calls, the callee's self time, its elapsed time), not whole paths.
//!   Paths are rebuilt from a process's edges over the selection ([`TraceCalls`]): from each
//!   function without a traced caller, down its callees. A function reached along several
//!   paths has its calls from one caller split over the paths that reach that caller, in
//!   proportion to the caller's calls along each (gprof's assumption: every call of a function
//!   does the same work, whoever called it). Two frames deep the values are exact; deeper they
//!   are exact where each function has one caller, as in a tree of calls.
//!   A call back into a function already on the path (recursion) ends the stack there (the
//!   repeated function is the leaf). Calls that no path reaches (only through recursion, or a
//!   path would be deeper than [`MAX_DEPTH`] or past [`MAX_PATHS`]) keep their two frames,
//!   `caller;callee`. Intervals traced without edges, and calls whose edge the runtime had no
//!   room for, are one frame deep: the function.
//!
//! Either way the values add up: over all stacks, each function's leaf values are its calls,
//! self time and samples in the data, exactly (up to rounding a split value to whole ns).

use std::collections::{BTreeMap, HashMap};

use culprit_analysis::data::{FuncId, ProgramId, SampleInterval, TraceInterval};

/// Rebuilt paths stop this deep (the rest keeps `caller;callee`).
pub(crate) const MAX_DEPTH: usize = 256;
/// Rebuilt paths per process, at most (the rest keeps `caller;callee`).
pub(crate) const MAX_PATHS: usize = 100_000;

/// A tracer stack's values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct TraceValues {
    /// Calls of the stack's leaf through this path.
    pub calls: u64,
    /// The leaf's exclusive time through this path, ns.
    pub self_ns: u64,
}

impl TraceValues {
    /// Adds `o`.
    pub fn add(&mut self, o: TraceValues) {
        self.calls += o.calls;
        self.self_ns += o.self_ns;
    }
}

/// Whether the stacks handed out so far had call paths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Depth {
    /// Some tracer interval had no call edges (traced without `CULPRIT_GRAPH=1`).
    pub trace_flat: bool,
    /// Some sampler interval had no call chains (sampled without `--call-graph`).
    pub samples_flat: bool,
}

impl Depth {
    /// Adds what `o` saw.
    pub fn add(&mut self, o: Depth) {
        self.trace_flat |= o.trace_flat;
        self.samples_flat |= o.samples_flat;
    }

    /// The notes for people where stacks are one frame deep.
    pub fn notes(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.trace_flat {
            v.push(
                "some traced intervals have no call edges (traced without CULPRIT_GRAPH=1): \
                 their stacks are one frame deep (the function)"
                    .to_string(),
            );
        }
        if self.samples_flat {
            v.push(
                "some sampled intervals have no call chains (sampled without --call-graph fp): \
                 their stacks are one frame deep (the sampled function)"
                    .to_string(),
            );
        }
        v
    }
}

/// One caller → callee edge's values, summed over intervals.
#[derive(Clone, Copy, Debug, Default)]
struct EdgeSum {
    calls: u64,
    excl_ns: u64,
}

/// One traced process's calls over the selection: its call edges where it recorded them, and
/// the per-function totals the edges do not cover. Memory: one entry per distinct edge and
/// function, whatever the number of intervals.
#[derive(Clone, Debug, Default)]
pub(crate) struct TraceCalls {
    edges: HashMap<(Option<FuncId>, FuncId), EdgeSum>,
    /// Each function's calls over the selection, from the intervals' entries.
    totals: HashMap<FuncId, TraceValues>,
    /// What the edges hold of each function over the selection.
    covered: HashMap<FuncId, TraceValues>,
}

impl TraceCalls {
    /// Adds one interval. Its edges are not matched with its own entries: the runtime writes
    /// the edges it has taken with the interval it is writing, flagged `LATE` when that is a
    /// later one than the calls' (a flusher that ran late), so what the edges do not cover is
    /// reckoned over the whole selection, not interval by interval (which counted a late
    /// interval's calls twice: one frame deep in their interval, and along their paths in the
    /// next).
    pub fn add(&mut self, iv: &TraceInterval) {
        for e in &iv.entries {
            self.totals.entry(e.func).or_default().add(TraceValues {
                calls: e.calls,
                self_ns: e.excl_ns,
            });
        }
        for e in iv.edges.iter().flatten() {
            let s = self.edges.entry((e.caller, e.callee)).or_default();
            s.calls += e.calls;
            s.excl_ns += e.excl_ns;
            self.covered.entry(e.callee).or_default().add(TraceValues {
                calls: e.calls,
                self_ns: e.excl_ns,
            });
        }
    }

    /// Each function's calls the edges do not cover (calls whose edge found no room, a process
    /// traced without edges, edges outside the selection): one frame deep.
    fn flat(&self) -> impl Iterator<Item = (FuncId, TraceValues)> + '_ {
        self.totals.iter().filter_map(|(&f, t)| {
            let c = self.covered.get(&f).copied().unwrap_or_default();
            let rest = TraceValues {
                calls: t.calls.saturating_sub(c.calls),
                self_ns: t.self_ns.saturating_sub(c.self_ns),
            };
            (rest != TraceValues::default()).then_some((f, rest))
        })
    }

    /// True when no call was added.
    pub fn is_empty(&self) -> bool {
        self.edges.is_empty() && self.totals.is_empty()
    }

    /// Which of its data was one frame deep: a process that recorded no edge at all was traced
    /// without `CULPRIT_GRAPH=1` (an interval without edges alone is not that: its edges may
    /// have been written with a later one).
    pub fn depth(&self) -> Depth {
        Depth {
            trace_flat: self.edges.is_empty() && !self.totals.is_empty(),
            samples_flat: false,
        }
    }

    /// The process's stacks (root first, leaf last) with their values; each stack once.
    pub fn stacks(&self, mut emit: impl FnMut(&[FuncId], TraceValues)) {
        let mut out: HashMap<Vec<FuncId>, (f64, f64)> = HashMap::new();
        Paths::new(&self.edges).walk(&mut out);
        let mut add = |stack: Vec<FuncId>, v: TraceValues| {
            let e = out.entry(stack).or_default();
            e.0 += v.calls as f64;
            e.1 += v.self_ns as f64;
        };
        for (f, v) in self.flat() {
            add(vec![f], v);
        }
        let mut out: Vec<(Vec<FuncId>, (f64, f64))> = out.into_iter().collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        for (stack, (calls, self_ns)) in out {
            let v = TraceValues {
                calls: calls.round() as u64,
                self_ns: self_ns.round() as u64,
            };
            if v != TraceValues::default() {
                emit(&stack, v);
            }
        }
    }
}

/// Paths rebuilt from one process's edges.
struct Paths<'a> {
    edges: &'a HashMap<(Option<FuncId>, FuncId), EdgeSum>,
    /// Callees of each caller (`None`: functions without a traced caller), in id order.
    callees: BTreeMap<Option<FuncId>, Vec<FuncId>>,
    /// Calls of each function over all its edges.
    calls_in: HashMap<FuncId, u64>,
    /// Share of each edge placed on a path so far.
    placed: HashMap<(Option<FuncId>, FuncId), f64>,
    paths: usize,
}

impl<'a> Paths<'a> {
    fn new(edges: &'a HashMap<(Option<FuncId>, FuncId), EdgeSum>) -> Self {
        let mut callees: BTreeMap<Option<FuncId>, Vec<FuncId>> = BTreeMap::new();
        let mut calls_in: HashMap<FuncId, u64> = HashMap::new();
        for (&(caller, callee), e) in edges {
            callees.entry(caller).or_default().push(callee);
            *calls_in.entry(callee).or_default() += e.calls;
        }
        for v in callees.values_mut() {
            v.sort_unstable();
        }
        Paths {
            edges,
            callees,
            calls_in,
            placed: HashMap::new(),
            paths: 0,
        }
    }

    fn walk(mut self, out: &mut HashMap<Vec<FuncId>, (f64, f64)>) {
        let mut path = Vec::new();
        // Functions without a traced caller, then callers with no call of their own in the
        // selection (a loop in `main` that never returned): both start a path with all of
        // their calls.
        let roots: Vec<FuncId> = self.callees.get(&None).cloned().unwrap_or_default();
        for root in roots {
            let e = self.edges[&(None, root)];
            path.push(root);
            self.place(out, &path, (None, root), 1.0, e);
            let of_root = self.share_of(root, e.calls as f64);
            self.descend(out, &mut path, of_root);
            path.pop();
        }
        let open: Vec<FuncId> = self
            .callees
            .keys()
            .flatten()
            .copied()
            .filter(|f| !self.calls_in.contains_key(f))
            .collect();
        for f in open {
            path.push(f);
            self.descend(out, &mut path, 1.0);
            path.pop();
        }
        // What no path reached keeps its two frames.
        for (&(caller, callee), e) in self.edges {
            let rest = 1.0 - self.placed.get(&(caller, callee)).copied().unwrap_or(0.0);
            if rest > 1e-9 {
                let stack: Vec<FuncId> = caller.into_iter().chain([callee]).collect();
                let v = out.entry(stack).or_default();
                v.0 += rest * e.calls as f64;
                v.1 += rest * e.excl_ns as f64;
            }
        }
    }

    /// The share of `f`'s calls that `calls` of them are (1 when `f` has none recorded).
    fn share_of(&self, f: FuncId, calls: f64) -> f64 {
        match self.calls_in.get(&f) {
            Some(&n) if n > 0 => calls / n as f64,
            _ => 1.0,
        }
    }

    /// Places `share` of edge `key` (values `e`) at `path`.
    fn place(
        &mut self,
        out: &mut HashMap<Vec<FuncId>, (f64, f64)>,
        path: &[FuncId],
        key: (Option<FuncId>, FuncId),
        share: f64,
        e: EdgeSum,
    ) {
        *self.placed.entry(key).or_default() += share;
        let v = out.entry(path.to_vec()).or_default();
        v.0 += share * e.calls as f64;
        v.1 += share * e.excl_ns as f64;
        self.paths += 1;
    }

    /// The callees of the path's last function, `share` of whose calls are on this path.
    fn descend(
        &mut self,
        out: &mut HashMap<Vec<FuncId>, (f64, f64)>,
        path: &mut Vec<FuncId>,
        share: f64,
    ) {
        let caller = *path.last().expect("a path has a frame");
        let Some(callees) = self.callees.get(&Some(caller)).cloned() else {
            return;
        };
        if path.len() >= MAX_DEPTH || share < 1e-12 {
            return;
        }
        for callee in callees {
            if self.paths >= MAX_PATHS {
                return;
            }
            let key = (Some(caller), callee);
            let e = self.edges[&key];
            let recursive = path.contains(&callee);
            path.push(callee);
            self.place(out, path, key, share, e);
            if !recursive {
                let next = self.share_of(callee, share * e.calls as f64);
                self.descend(out, path, next);
            }
            path.pop();
        }
    }
}

/// The sampler's stacks in one interval (program, then frames root first) with their sample
/// counts: its call chains, and one frame for samples without one.
pub(crate) fn sample_stacks(
    iv: &SampleInterval,
    depth: &mut Depth,
    mut emit: impl FnMut(ProgramId, &[FuncId], u64),
) {
    let Some(stacks) = &iv.stacks else {
        if !iv.entries.is_empty() {
            depth.samples_flat = true;
        }
        for e in &iv.entries {
            emit(e.program, &[e.func], e.count);
        }
        return;
    };
    let mut chained: HashMap<(ProgramId, FuncId), u64> = HashMap::new();
    for s in stacks {
        let Some(&leaf) = s.frames.last() else {
            continue;
        };
        *chained.entry((s.program, leaf)).or_default() += s.count;
        emit(s.program, &s.frames, s.count);
    }
    // Samples the chains do not hold (none is expected: every sample has its chain).
    for e in &iv.entries {
        let c = chained.get(&(e.program, e.func)).copied().unwrap_or(0);
        if e.count > c {
            emit(e.program, &[e.func], e.count - c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use culprit_analysis::data::{TraceEdge, TraceEntry};

    fn edge(caller: Option<FuncId>, callee: FuncId, calls: u64, excl_ns: u64) -> TraceEdge {
        TraceEdge {
            caller,
            callee,
            calls,
            excl_ns,
            incl_ns: excl_ns,
        }
    }

    fn interval(edges: Option<Vec<TraceEdge>>, entries: Vec<TraceEntry>) -> TraceInterval {
        TraceInterval {
            head: culprit_format::IntervalHead {
                dur_ns: 1,
                threads: 1,
                ..culprit_format::IntervalHead::default()
            },
            entries,
            edges,
            edge_drops: 0,
            hists: None,
            cost: None,
        }
    }

    /// The entries the edges add up to.
    fn entries_of(edges: &[TraceEdge]) -> Vec<TraceEntry> {
        let mut m: BTreeMap<FuncId, (u64, u64)> = BTreeMap::new();
        for e in edges {
            let v = m.entry(e.callee).or_default();
            v.0 += e.calls;
            v.1 += e.excl_ns;
        }
        m.into_iter()
            .map(|(func, (calls, excl_ns))| TraceEntry {
                func,
                calls,
                excl_ns,
                incl_ns: excl_ns,
                unwound: 0,
            })
            .collect()
    }

    fn stacks(t: &TraceCalls) -> Vec<(Vec<FuncId>, u64, u64)> {
        let mut v = Vec::new();
        t.stacks(|s, x| v.push((s.to_vec(), x.calls, x.self_ns)));
        v
    }

    /// Each function's leaf values over all stacks.
    fn leaf_totals(v: &[(Vec<FuncId>, u64, u64)]) -> BTreeMap<FuncId, (u64, u64)> {
        let mut m = BTreeMap::new();
        for (s, c, n) in v {
            let e: &mut (u64, u64) = m.entry(*s.last().unwrap()).or_default();
            e.0 += c;
            e.1 += n;
        }
        m
    }

    #[test]
    fn a_tree_of_calls_gives_its_paths_exactly() {
        // 0 → 1 → 2 (3 calls), 0 → 3
        let edges = vec![
            edge(None, 0, 1, 10),
            edge(Some(0), 1, 2, 20),
            edge(Some(1), 2, 6, 60),
            edge(Some(0), 3, 1, 5),
        ];
        let mut t = TraceCalls::default();
        t.add(&interval(Some(edges.clone()), entries_of(&edges)));
        assert_eq!(
            stacks(&t),
            vec![
                (vec![0], 1, 10),
                (vec![0, 1], 2, 20),
                (vec![0, 1, 2], 6, 60),
                (vec![0, 3], 1, 5),
            ]
        );
        assert_eq!(t.depth(), Depth::default());
    }

    #[test]
    fn a_shared_callee_is_split_by_its_callers_calls() {
        // main(0) calls a(1) 1× and b(2) 3×; a and b both call c(3); c calls d(4) 8×.
        let edges = vec![
            edge(None, 0, 1, 0),
            edge(Some(0), 1, 1, 0),
            edge(Some(0), 2, 3, 0),
            edge(Some(1), 3, 1, 100),
            edge(Some(2), 3, 3, 300),
            edge(Some(3), 4, 8, 800),
        ];
        let mut t = TraceCalls::default();
        t.add(&interval(Some(edges.clone()), entries_of(&edges)));
        let v = stacks(&t);
        // c's two callers exact (two frames from the edge), d split 1:3 by c's calls.
        assert!(v.contains(&(vec![0, 1, 3], 1, 100)), "{v:?}");
        assert!(v.contains(&(vec![0, 2, 3], 3, 300)), "{v:?}");
        assert!(v.contains(&(vec![0, 1, 3, 4], 2, 200)), "{v:?}");
        assert!(v.contains(&(vec![0, 2, 3, 4], 6, 600)), "{v:?}");
        assert_eq!(leaf_totals(&v)[&4], (8, 800));
    }

    #[test]
    fn recursion_ends_a_stack_and_every_value_is_kept() {
        // 0 → 1, 1 → 1 (recursion, 4 calls), 1 → 2; 5 → 6 where 5 never returned.
        let edges = vec![
            edge(None, 0, 1, 1),
            edge(Some(0), 1, 1, 10),
            edge(Some(1), 1, 4, 40),
            edge(Some(1), 2, 5, 50),
            edge(Some(5), 6, 2, 7),
        ];
        let mut t = TraceCalls::default();
        t.add(&interval(Some(edges.clone()), entries_of(&edges)));
        let v = stacks(&t);
        assert!(v.iter().all(|(s, _, _)| {
            // No function twice on a stack, but as its leaf.
            let body = &s[..s.len() - 1];
            (1..body.len()).all(|i| !body[..i].contains(&body[i]))
        }));
        assert!(v.contains(&(vec![5, 6], 2, 7)), "{v:?}");
        let totals = leaf_totals(&v);
        for (f, want) in [(0, (1, 1)), (1, (5, 50)), (2, (5, 50)), (6, (2, 7))] {
            assert_eq!(totals[&f], want, "function {f}: {v:?}");
        }
    }

    #[test]
    fn calls_without_edges_stay_one_frame_deep() {
        let edges = vec![edge(None, 0, 1, 10)];
        let mut entries = entries_of(&edges);
        entries[0].calls += 2; // two calls whose edge found no room
        entries[0].excl_ns += 5;
        let mut t = TraceCalls::default();
        t.add(&interval(Some(edges), entries));
        t.add(&interval(None, entries_of(&[edge(None, 7, 3, 9)])));
        assert_eq!(stacks(&t), vec![(vec![0], 3, 15), (vec![7], 3, 9)]);
        // Edges in the process: traced with CULPRIT_GRAPH=1.
        assert!(!t.depth().trace_flat);
        let mut flat = TraceCalls::default();
        flat.add(&interval(None, entries_of(&[edge(None, 7, 3, 9)])));
        assert_eq!(stacks(&flat), vec![(vec![7], 3, 9)]);
        assert!(flat.depth().trace_flat);
    }

    /// A flusher that ran late writes the edges it took with the next interval (flagged
    /// `LATE`), not with the interval of their calls: the calls are counted once, along their
    /// paths (beside CI's load, a process's every call came out twice, once one frame deep).
    #[test]
    fn edges_written_with_a_later_interval_count_their_calls_once() {
        let edges = vec![edge(None, 0, 1, 10), edge(Some(0), 1, 4, 20)];
        let mut t = TraceCalls::default();
        t.add(&interval(None, entries_of(&edges)));
        t.add(&interval(Some(edges), Vec::new()));
        assert_eq!(stacks(&t), vec![(vec![0], 1, 10), (vec![0, 1], 4, 20)]);
        assert!(!t.depth().trace_flat);
    }
}
