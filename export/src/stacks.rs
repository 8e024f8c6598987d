//! Call stacks, for the formats that draw them (folded stacks, pprof): the one place where the
//! data's call paths become stacks.
//!
//! What the loader gives today is per-function totals: the tracer's calls and exclusive time
//! per function per interval, the sampler's counts per (program, function). So every stack is
//! one frame deep. Deeper stacks need, for the tracer, its caller → callee edges (record kind
//! 10, `CULPRIT_GRAPH=1`: a function's exclusive time is then split over the paths that reach
//! it) and, for the sampler, its call chains (`--call-graph`): when the loader reads them, they
//! enter here, in [`trace_stacks`] and [`sample_stacks`], and [`Depth`] says which data had
//! them. Nothing else changes: the formats take stacks of any depth.

use culprit_analysis::data::{FuncId, ProgramId, SampleInterval, TraceInterval};

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
    /// Some tracer interval gave only per-function totals.
    pub trace_flat: bool,
    /// Some sampler interval gave only per-function counts.
    pub samples_flat: bool,
}

impl Depth {
    /// The note for people when stacks are one frame deep, if they are.
    pub fn note(&self) -> Option<String> {
        let what = match (self.trace_flat, self.samples_flat) {
            (false, false) => return None,
            (true, false) => "the tracer's",
            (false, true) => "the sampler's",
            (true, true) => "the tracer's and the sampler's",
        };
        Some(format!(
            "{what} stacks are one frame deep (function; samples: program;image;function): \
             this culprit does not read call paths yet (the tracer's call edges, the sampler's \
             call chains)"
        ))
    }
}

/// The tracer's stacks in one interval (root first, leaf last) with their values.
pub(crate) fn trace_stacks(
    iv: &TraceInterval,
    depth: &mut Depth,
    mut emit: impl FnMut(&[FuncId], TraceValues),
) {
    // Call edges, when the loader reads them, give paths here.
    if !iv.entries.is_empty() {
        depth.trace_flat = true;
    }
    for e in &iv.entries {
        emit(
            &[e.func],
            TraceValues {
                calls: e.calls,
                self_ns: e.excl_ns,
            },
        );
    }
}

/// The sampler's stacks in one interval (program, then frames root first) with their sample
/// counts.
pub(crate) fn sample_stacks(
    iv: &SampleInterval,
    depth: &mut Depth,
    mut emit: impl FnMut(ProgramId, &[FuncId], u64),
) {
    // Call chains, when the loader reads them, give stacks here.
    if !iv.entries.is_empty() {
        depth.samples_flat = true;
    }
    for e in &iv.entries {
        emit(e.program, &[e.func], e.count);
    }
}
