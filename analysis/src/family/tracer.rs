//! The tracer's families: `count` (calls per function) and `time` (exclusive wall-clock time
//! per function, blocked time included), from the runtime's per-process trace files; the same
//! per caller → callee edge (`--features edges`, from `CULPRIT_GRAPH=1` traces: seed 002 §3
//! treats call paths as the functions of its profiles); and `latency`, each function's call
//! durations (`CULPRIT_HIST=1` traces) compared as distributions.
//!
//! Per node, all processes add up (several worker processes of a server are one node); with
//! `by_program` each function is keyed by its program too.

use std::collections::HashMap;
use std::sync::Arc;

use culprit_format::{hist_bucket_low_ns, HIST_BUCKETS};

use crate::data::{
    Dataset, FileStatus, FuncId, NodeData, ProgramId, TraceEdge, TraceEntry, TraceFile,
    TraceInterval,
};
use crate::demoted::Rule;
use crate::error::Result;
use crate::model::{CompIdx, CompLabel, CompValue};
use crate::time::fmt_dur;

use super::{
    About, Comparison, Cursors, FamilyReader, IntervalSink, KeepHint, KeepRule, KeepSettings,
    Metric, MetricFamily, Words,
};

const HOW: &str = "run the servers under `culprit record` or with libculprit_rt.so";

/// Calls per function. Its keep rule is time's (a function called often but briefly is noise).
#[derive(Clone, Copy, Debug, Default)]
pub struct Count;

/// Exclusive wall-clock time per function, ms.
#[derive(Clone, Copy, Debug, Default)]
pub struct Time;

fn time_hint(keep: &KeepSettings) -> Option<KeepHint> {
    Some(KeepHint {
        minimum: format!("{} of self time", fmt_dur((keep.min_time_ms * 1e6) as u64)),
        by: super::KeepBy::Time,
    })
}

fn trace_lengths(node: &NodeData, see: &mut dyn FnMut(u64)) {
    for t in &node.traces {
        for iv in &t.intervals {
            see(iv.dur_ns);
        }
    }
}

impl Count {
    /// What it is.
    pub const ABOUT: About = About {
        metric: Metric::COUNT,
        group: None,
        unit: "calls",
        words: Words {
            more: "more calls",
            less: "fewer calls",
        },
        how_to_record: HOW,
        comparison: Comparison::Sums,
        resolution: 1.0,
        windows: None,
        smoothing: 1,
        absent_is_zero: true,
        rare: true,
        sampled: false,
        demoted: Rule::Drop,
    };
}

impl MetricFamily for Count {
    fn about(&self) -> &About {
        &Self::ABOUT
    }
    fn keep_rule(&self, _keep: &KeepSettings) -> KeepRule {
        KeepRule::SameAs(Metric::TIME)
    }
    fn keep_hint(&self, keep: &KeepSettings) -> Option<KeepHint> {
        time_hint(keep)
    }
    fn has_data(&self, node: &NodeData) -> bool {
        !node.traces.is_empty()
    }
    fn interval_lengths(&self, node: &NodeData, see: &mut dyn FnMut(u64)) {
        trace_lengths(node, see)
    }
    fn reader(&self, by_program: bool) -> Box<dyn FamilyReader> {
        Box::new(TraceReader::new(by_program, |e| e.calls as f64))
    }
}

impl Time {
    /// What it is.
    pub const ABOUT: About = About {
        metric: Metric::TIME,
        group: None,
        unit: "ms",
        words: Words {
            more: "more time",
            less: "less time",
        },
        how_to_record: HOW,
        comparison: Comparison::Sums,
        resolution: 1.0,
        windows: None,
        smoothing: 1,
        absent_is_zero: true,
        rare: false,
        sampled: false,
        demoted: Rule::Merge,
    };
}

impl MetricFamily for Time {
    fn about(&self) -> &About {
        &Self::ABOUT
    }
    fn keep_rule(&self, keep: &KeepSettings) -> KeepRule {
        KeepRule::AtLeast(keep.min_time_ms)
    }
    fn keep_hint(&self, keep: &KeepSettings) -> Option<KeepHint> {
        time_hint(keep)
    }
    fn has_data(&self, node: &NodeData) -> bool {
        !node.traces.is_empty()
    }
    fn interval_lengths(&self, node: &NodeData, see: &mut dyn FnMut(u64)) {
        trace_lengths(node, see)
    }
    fn reader(&self, by_program: bool) -> Box<dyn FamilyReader> {
        let mut r = TraceReader::new(by_program, |e| e.excl_ns as f64 / 1e6);
        r.overhead = true;
        Box::new(r)
    }
}

/// Reads trace files: one value per function per interval.
#[derive(Debug)]
struct TraceReader {
    by_program: bool,
    value: fn(&TraceEntry) -> f64,
    /// Self times: also push the tracing overhead of the calls of demoted functions
    /// ([`crate::demoted`]).
    overhead: bool,
    cursors: Cursors,
    comps: HashMap<(Option<ProgramId>, FuncId), CompIdx>,
    overheads: HashMap<(Option<ProgramId>, FuncId), CompIdx>,
}

impl TraceReader {
    fn new(by_program: bool, value: fn(&TraceEntry) -> f64) -> Self {
        TraceReader {
            by_program,
            value,
            overhead: false,
            cursors: Cursors::default(),
            comps: HashMap::new(),
            overheads: HashMap::new(),
        }
    }
}

/// The component of function `func` (of program `program`, when keyed by program).
pub(super) fn function(
    comps: &mut HashMap<(Option<ProgramId>, FuncId), CompIdx>,
    ds: &Dataset,
    program: Option<ProgramId>,
    func: FuncId,
    sink: &mut dyn IntervalSink,
) -> CompIdx {
    *comps.entry((program, func)).or_insert_with(|| {
        let key = ds.names.funcs.get(func);
        sink.component(CompLabel {
            bucket: None,
            program: program.map(|p| Arc::clone(ds.names.programs.get(p))),
            image: Some(key.image.clone()),
            name: key.function.clone(),
        })
    })
}

/// Pushes every trace file's intervals of `node` not pushed yet, `values(program, interval,
/// sink, out)` giving one interval's values (`program` when keyed by program).
fn feed_traces(
    cursors: &mut Cursors,
    by_program: bool,
    node: &NodeData,
    until_ns: u64,
    sink: &mut dyn IntervalSink,
    mut values: impl FnMut(
        &TraceFile,
        Option<ProgramId>,
        &TraceInterval,
        &mut dyn IntervalSink,
        &mut Vec<CompValue>,
    ),
) -> Result<()> {
    for t in &node.traces {
        let program = by_program.then_some(t.program);
        let open = t.status == FileStatus::Open;
        cursors.feed(
            &t.path,
            &t.intervals,
            open,
            until_ns,
            sink,
            |iv, sink, out| values(t, program, iv, sink, out),
        )?;
    }
    Ok(())
}

/// Start of `node`'s earliest trace interval not pushed yet.
fn next_trace_start(cursors: &Cursors, node: &NodeData) -> Option<u64> {
    node.traces
        .iter()
        .filter_map(|t| cursors.next_start(&t.path, &t.intervals))
        .min()
}

impl FamilyReader for TraceReader {
    fn feed(
        &mut self,
        ds: &Dataset,
        node: &NodeData,
        until_ns: u64,
        sink: &mut dyn IntervalSink,
    ) -> Result<()> {
        let (value, comps, overheads) = (self.value, &mut self.comps, &mut self.overheads);
        let demoted = if self.overhead {
            crate::demoted::first_demotions(ds)
        } else {
            HashMap::new()
        };
        feed_traces(
            &mut self.cursors,
            self.by_program,
            node,
            until_ns,
            sink,
            |t, program, iv, sink, out| {
                let call_ns = crate::demoted::call_ns(t);
                for e in &iv.entries {
                    let comp = function(comps, ds, program, e.func, sink);
                    out.push(CompValue {
                        comp,
                        value: value(e),
                    });
                    // The calls of a function demoted on some node cost this node the
                    // hooks' time, which the demoting node no longer spends: pushed apart,
                    // for the merge to take out (`analyzer::pipeline::merge`).
                    let late = demoted
                        .get(&e.func)
                        .is_some_and(|&at| iv.start_ns + iv.dur_ns > at);
                    if late && call_ns > 0.0 && e.calls > 0 {
                        let comp = *overheads.entry((program, e.func)).or_insert_with(|| {
                            let key = ds.names.funcs.get(e.func);
                            sink.component(crate::demoted::overhead_label(
                                program.map(|p| Arc::clone(ds.names.programs.get(p))),
                                &key.image,
                                &key.function,
                            ))
                        });
                        out.push(CompValue {
                            comp,
                            value: e.calls as f64 * call_ns / 1e6,
                        });
                    }
                }
            },
        )
    }

    fn next_start(&self, node: &NodeData) -> Option<u64> {
        next_trace_start(&self.cursors, node)
    }
}

const HOW_EDGES: &str = "trace the servers with CULPRIT_GRAPH=1 (`culprit record --graph`)";
const HOW_HIST: &str = "trace the servers with CULPRIT_HIST=1 (`culprit record --hist`)";

/// The lengths of `node`'s trace intervals that `has` some of a family's data.
fn lengths_with(node: &NodeData, has: fn(&TraceInterval) -> bool, see: &mut dyn FnMut(u64)) {
    for t in &node.traces {
        for iv in t.intervals.iter().filter(|iv| has(iv)) {
            see(iv.dur_ns);
        }
    }
}

fn has_edges(node: &NodeData) -> bool {
    node.traces
        .iter()
        .any(|t| t.intervals.iter().any(|iv| iv.edges.is_some()))
}

/// Calls per caller → callee edge (the `count` metric with `--features edges`).
#[derive(Clone, Copy, Debug, Default)]
pub struct EdgeCount;

/// The callee's exclusive time per caller → callee edge, ms (the `time` metric with
/// `--features edges`): over a function's callers these add up to its `time`.
#[derive(Clone, Copy, Debug, Default)]
pub struct EdgeTime;

impl EdgeCount {
    /// What it is: [`Count`] per edge, without its rare-function comparison.
    pub const ABOUT: About = About {
        how_to_record: HOW_EDGES,
        rare: false,
        demoted: Rule::DropEdges,
        ..Count::ABOUT
    };
}

impl EdgeTime {
    /// What it is: [`Time`] per edge.
    pub const ABOUT: About = About {
        how_to_record: HOW_EDGES,
        demoted: Rule::DropEdges,
        ..Time::ABOUT
    };
}

impl MetricFamily for EdgeCount {
    fn about(&self) -> &About {
        &Self::ABOUT
    }
    fn keep_rule(&self, _keep: &KeepSettings) -> KeepRule {
        KeepRule::SameAs(Metric::TIME)
    }
    fn keep_hint(&self, keep: &KeepSettings) -> Option<KeepHint> {
        time_hint(keep)
    }
    fn has_data(&self, node: &NodeData) -> bool {
        has_edges(node)
    }
    fn interval_lengths(&self, node: &NodeData, see: &mut dyn FnMut(u64)) {
        lengths_with(node, |iv| iv.edges.is_some(), see)
    }
    fn reader(&self, by_program: bool) -> Box<dyn FamilyReader> {
        Box::new(EdgeReader::new(by_program, |e| e.calls as f64))
    }
}

impl MetricFamily for EdgeTime {
    fn about(&self) -> &About {
        &Self::ABOUT
    }
    fn keep_rule(&self, keep: &KeepSettings) -> KeepRule {
        KeepRule::AtLeast(keep.min_time_ms)
    }
    fn keep_hint(&self, keep: &KeepSettings) -> Option<KeepHint> {
        time_hint(keep)
    }
    fn has_data(&self, node: &NodeData) -> bool {
        has_edges(node)
    }
    fn interval_lengths(&self, node: &NodeData, see: &mut dyn FnMut(u64)) {
        lengths_with(node, |iv| iv.edges.is_some(), see)
    }
    fn reader(&self, by_program: bool) -> Box<dyn FamilyReader> {
        Box::new(EdgeReader::new(by_program, |e| e.excl_ns as f64 / 1e6))
    }
}

/// Reads the edges of trace files: one value per edge per interval, the component named
/// `caller → callee` (`(root) → callee` without a traced caller) in the callee's image.
#[derive(Debug)]
struct EdgeReader {
    by_program: bool,
    value: fn(&TraceEdge) -> f64,
    cursors: Cursors,
    comps: HashMap<(Option<ProgramId>, Option<FuncId>, FuncId), CompIdx>,
}

impl EdgeReader {
    fn new(by_program: bool, value: fn(&TraceEdge) -> f64) -> Self {
        EdgeReader {
            by_program,
            value,
            cursors: Cursors::default(),
            comps: HashMap::new(),
        }
    }
}

/// Name of the component of an edge: `caller → callee`.
pub fn edge_name(caller: Option<&str>, callee: &str) -> String {
    format!("{} → {callee}", caller.unwrap_or("(root)"))
}

impl FamilyReader for EdgeReader {
    fn feed(
        &mut self,
        ds: &Dataset,
        node: &NodeData,
        until_ns: u64,
        sink: &mut dyn IntervalSink,
    ) -> Result<()> {
        let (value, comps) = (self.value, &mut self.comps);
        feed_traces(
            &mut self.cursors,
            self.by_program,
            node,
            until_ns,
            sink,
            |_, program, iv, sink, out| {
                for e in iv.edges.iter().flatten() {
                    let comp = *comps
                        .entry((program, e.caller, e.callee))
                        .or_insert_with(|| {
                            let callee = ds.names.funcs.get(e.callee);
                            let caller = e.caller.map(|c| ds.names.funcs.get(c).function.clone());
                            sink.component(CompLabel {
                                program: program.map(|p| Arc::clone(ds.names.programs.get(p))),
                                image: Some(callee.image.clone()),
                                name: Arc::from(edge_name(caller.as_deref(), &callee.function)),
                                bucket: None,
                            })
                        });
                    out.push(CompValue {
                        comp,
                        value: value(e),
                    });
                }
            },
        )
    }

    fn next_start(&self, node: &NodeData) -> Option<u64> {
        next_trace_start(&self.cursors, node)
    }
}

/// Each function's call durations, compared as distributions ([`Comparison::Histograms`]):
/// its histogram's buckets are the parts, and the whole stands for the function with its
/// estimated time in calls (each call at its bucket's geometric middle), ms — the keep rule's
/// and root cause's value. A fault that makes a few calls much slower moves little of the
/// mean but a part of the distribution by many buckets: the CDF distance counts that
/// fraction times the buckets moved (seed 001 §5).
#[derive(Clone, Copy, Debug, Default)]
pub struct Latency;

impl Latency {
    /// What it is.
    pub const ABOUT: About = About {
        metric: Metric::LATENCY,
        group: None,
        unit: "ms",
        words: Words {
            more: "slower calls",
            less: "faster calls",
        },
        how_to_record: HOW_HIST,
        comparison: Comparison::Histograms,
        resolution: 1.0,
        windows: None,
        smoothing: 1,
        absent_is_zero: true,
        rare: false,
        sampled: false,
        demoted: Rule::Drop,
    };
}

impl MetricFamily for Latency {
    fn about(&self) -> &About {
        &Self::ABOUT
    }
    fn keep_rule(&self, keep: &KeepSettings) -> KeepRule {
        KeepRule::AtLeast(keep.min_time_ms)
    }
    fn keep_hint(&self, keep: &KeepSettings) -> Option<KeepHint> {
        time_hint(keep)
    }
    fn has_data(&self, node: &NodeData) -> bool {
        node.traces
            .iter()
            .any(|t| t.intervals.iter().any(|iv| iv.hists.is_some()))
    }
    fn interval_lengths(&self, node: &NodeData, see: &mut dyn FnMut(u64)) {
        lengths_with(node, |iv| iv.hists.is_some(), see)
    }
    fn reader(&self, by_program: bool) -> Box<dyn FamilyReader> {
        Box::new(HistReader {
            by_program,
            cursors: Cursors::default(),
            comps: HashMap::new(),
        })
    }
}

/// The geometric middle of bucket `k`, ms.
fn bucket_mid_ms(k: usize) -> f64 {
    let lo = hist_bucket_low_ns(k).max(1) as f64;
    lo * std::f64::consts::SQRT_2 / 1e6
}

/// Reads the histograms of trace files.
#[derive(Debug)]
struct HistReader {
    by_program: bool,
    cursors: Cursors,
    /// The whole and the parts of each function's histogram.
    comps: HashMap<(Option<ProgramId>, FuncId), HistComps>,
}

/// The component standing for a function's histogram, and those of its buckets.
type HistComps = (CompIdx, [Option<CompIdx>; HIST_BUCKETS]);

impl FamilyReader for HistReader {
    fn feed(
        &mut self,
        ds: &Dataset,
        node: &NodeData,
        until_ns: u64,
        sink: &mut dyn IntervalSink,
    ) -> Result<()> {
        let comps = &mut self.comps;
        feed_traces(
            &mut self.cursors,
            self.by_program,
            node,
            until_ns,
            sink,
            |_, program, iv, sink, out| {
                for h in iv.hists.iter().flatten() {
                    let key = ds.names.funcs.get(h.func);
                    let label = |bucket: Option<u8>| CompLabel {
                        program: program.map(|p| Arc::clone(ds.names.programs.get(p))),
                        image: Some(key.image.clone()),
                        name: key.function.clone(),
                        bucket,
                    };
                    let (whole, parts) = comps
                        .entry((program, h.func))
                        .or_insert_with(|| (sink.component(label(None)), [None; HIST_BUCKETS]));
                    let mut est = 0.0;
                    for (k, &c) in h.counts.iter().enumerate() {
                        if c == 0 {
                            continue;
                        }
                        let part =
                            *parts[k].get_or_insert_with(|| sink.component(label(Some(k as u8))));
                        out.push(CompValue {
                            comp: part,
                            value: c as f64,
                        });
                        est += c as f64 * bucket_mid_ms(k);
                    }
                    out.push(CompValue {
                        comp: *whole,
                        value: est,
                    });
                }
            },
        )
    }

    fn next_start(&self, node: &NodeData) -> Option<u64> {
        next_trace_start(&self.cursors, node)
    }
}
