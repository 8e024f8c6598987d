//! The tracer's families: `count` (calls per function) and `time` (exclusive wall-clock time
//! per function, blocked time included), from the runtime's per-process trace files.
//!
//! Per node, all processes add up (several worker processes of a server are one node); with
//! `by_program` each function is keyed by its program too.

use std::collections::HashMap;
use std::sync::Arc;

use crate::data::{Dataset, FileStatus, FuncId, NodeData, ProgramId, TraceEntry};
use crate::error::Result;
use crate::model::{CompIdx, CompLabel, CompValue};
use crate::time::fmt_dur;

use super::{
    Cursors, FamilyReader, IntervalSink, KeepHint, KeepRule, KeepSettings, Metric, MetricFamily,
    Words,
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
        flag: "--min-time",
    })
}

fn trace_lengths(node: &NodeData, see: &mut dyn FnMut(u64)) {
    for t in &node.traces {
        for iv in &t.intervals {
            see(iv.dur_ns);
        }
    }
}

impl MetricFamily for Count {
    fn metric(&self) -> Metric {
        Metric::COUNT
    }
    fn unit(&self) -> &'static str {
        "calls"
    }
    fn words(&self) -> Words {
        Words {
            more: "more calls",
            less: "fewer calls",
        }
    }
    fn keep_rule(&self, _keep: &KeepSettings) -> KeepRule {
        KeepRule::SameAs(Metric::TIME)
    }
    fn keep_hint(&self, keep: &KeepSettings) -> Option<KeepHint> {
        time_hint(keep)
    }
    fn how_to_record(&self) -> &'static str {
        HOW
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

impl MetricFamily for Time {
    fn metric(&self) -> Metric {
        Metric::TIME
    }
    fn unit(&self) -> &'static str {
        "ms"
    }
    fn words(&self) -> Words {
        Words {
            more: "more time",
            less: "less time",
        }
    }
    fn keep_rule(&self, keep: &KeepSettings) -> KeepRule {
        KeepRule::AtLeast(keep.min_time_ms)
    }
    fn keep_hint(&self, keep: &KeepSettings) -> Option<KeepHint> {
        time_hint(keep)
    }
    fn how_to_record(&self) -> &'static str {
        HOW
    }
    fn has_data(&self, node: &NodeData) -> bool {
        !node.traces.is_empty()
    }
    fn interval_lengths(&self, node: &NodeData, see: &mut dyn FnMut(u64)) {
        trace_lengths(node, see)
    }
    fn reader(&self, by_program: bool) -> Box<dyn FamilyReader> {
        Box::new(TraceReader::new(by_program, |e| e.excl_ns as f64 / 1e6))
    }
}

/// Reads trace files: one value per function per interval.
#[derive(Debug)]
struct TraceReader {
    by_program: bool,
    value: fn(&TraceEntry) -> f64,
    cursors: Cursors,
    comps: HashMap<(Option<ProgramId>, FuncId), CompIdx>,
}

impl TraceReader {
    fn new(by_program: bool, value: fn(&TraceEntry) -> f64) -> Self {
        TraceReader {
            by_program,
            value,
            cursors: Cursors::default(),
            comps: HashMap::new(),
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
            program: program.map(|p| Arc::clone(ds.names.programs.get(p))),
            image: Some(key.image.clone()),
            name: key.function.clone(),
        })
    })
}

impl FamilyReader for TraceReader {
    fn feed(
        &mut self,
        ds: &Dataset,
        node: &NodeData,
        until_ns: u64,
        sink: &mut dyn IntervalSink,
    ) -> Result<()> {
        let value = self.value;
        for t in &node.traces {
            let program = self.by_program.then_some(t.program);
            let comps = &mut self.comps;
            let open = t.status == FileStatus::Open;
            self.cursors.feed(
                &t.path,
                &t.intervals,
                open,
                until_ns,
                sink,
                |iv, sink, out| {
                    for e in &iv.entries {
                        let comp = function(comps, ds, program, e.func, sink);
                        out.push(CompValue {
                            comp,
                            value: value(e),
                        });
                    }
                },
            )?;
        }
        Ok(())
    }

    fn next_start(&self, node: &NodeData) -> Option<u64> {
        node.traces
            .iter()
            .filter_map(|t| self.cursors.next_start(&t.path, &t.intervals))
            .min()
    }
}
