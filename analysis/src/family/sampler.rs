//! The sampler's families: `samples` (instruction-pointer samples per program, image and
//! function) and `events` (kernel tracepoint counts per node), from `culprit sample`'s files.
//!
//! Samples in the tracing runtime (`culprit runtime` in `libculprit_rt.so`, and the PLT stubs
//! through which instrumented code calls its hooks, `__cyg_profile_func_enter@plt`…) are not
//! compared:
//! the tool's cost is never a root cause, and a node whose tracer demoted functions (its cost
//! budget) spends less in it than its peers with nothing wrong. The report shows them apart, as
//! the tracing cost ([`tracing_cost`]).

use culprit_format::vocab::{is_tracing_cost, STOPPED_EVENT, STOPPED_NS_EVENT};
use std::collections::HashMap;

use crate::data::{Dataset, EventId, FileStatus, FuncId, NodeData, ProgramId};
use crate::error::Result;
use crate::model::{CompIdx, CompLabel, CompValue};

use super::tracer::function;
use super::{
    About, Comparison, Cursors, FamilyReader, IntervalSink, KeepHint, KeepRule, KeepSettings,
    Metric, MetricFamily, Sampling, Words,
};
use crate::demoted::Rule;

const HOW: &str = "run `culprit sample`";

/// Instruction-pointer samples per (program,) image and function.
#[derive(Clone, Copy, Debug, Default)]
pub struct Samples;

/// Kernel event counts per node; one component per event.
#[derive(Clone, Copy, Debug, Default)]
pub struct Events;

impl Samples {
    /// What it is.
    pub const ABOUT: About = About {
        metric: Metric::SAMPLES,
        group: None,
        unit: "samples",
        words: Words {
            more: "more samples",
            less: "fewer samples",
        },
        how_to_record: HOW,
        comparison: Comparison::Sums,
        resolution: 1.0,
        windows: None,
        smoothing: 1,
        absent_is_zero: true,
        rare: false,
        sampled: true,
        demoted: Rule::Unaffected,
    };
}

impl Events {
    /// What it is.
    pub const ABOUT: About = About {
        metric: Metric::EVENTS,
        group: None,
        unit: "events",
        words: Words {
            more: "more events",
            less: "fewer events",
        },
        how_to_record: HOW,
        comparison: Comparison::Sums,
        resolution: 1.0,
        windows: None,
        smoothing: 1,
        absent_is_zero: true,
        rare: false,
        sampled: false,
        demoted: Rule::Unaffected,
    };
}

impl MetricFamily for Samples {
    fn about(&self) -> &About {
        &Self::ABOUT
    }
    fn keep_rule(&self, keep: &KeepSettings) -> KeepRule {
        KeepRule::AtLeast(keep.min_samples)
    }
    fn keep_hint(&self, keep: &KeepSettings) -> Option<KeepHint> {
        Some(KeepHint {
            minimum: format!("{} samples", keep.min_samples),
            by: super::KeepBy::Samples,
        })
    }
    fn sampling(&self, node: &NodeData, see: &mut dyn FnMut(Sampling)) {
        for f in &node.samples {
            for iv in f.intervals.iter().filter(|iv| !iv.missed()) {
                see(Sampling {
                    event: iv.event.to_string(),
                    period: iv.period,
                    freq: iv.freq,
                });
            }
        }
    }
    fn has_data(&self, node: &NodeData) -> bool {
        !node.samples.is_empty()
    }
    fn interval_lengths(&self, node: &NodeData, see: &mut dyn FnMut(u64)) {
        for f in &node.samples {
            for iv in &f.intervals {
                see(iv.dur_ns);
            }
        }
    }
    fn reader(&self, by_program: bool) -> Box<dyn FamilyReader> {
        Box::new(SamplesReader {
            by_program,
            cursors: Cursors::default(),
            comps: HashMap::new(),
        })
    }
}

impl MetricFamily for Events {
    fn about(&self) -> &About {
        &Self::ABOUT
    }
    fn keep_rule(&self, _keep: &KeepSettings) -> KeepRule {
        KeepRule::All
    }
    fn has_data(&self, node: &NodeData) -> bool {
        !node.samples.is_empty()
    }
    fn interval_lengths(&self, node: &NodeData, see: &mut dyn FnMut(u64)) {
        for f in &node.samples {
            for iv in &f.events {
                see(iv.dur_ns);
            }
        }
    }
    fn reader(&self, _by_program: bool) -> Box<dyn FamilyReader> {
        Box::new(EventsReader::default())
    }
}

#[derive(Debug)]
struct SamplesReader {
    by_program: bool,
    cursors: Cursors,
    comps: HashMap<(Option<ProgramId>, FuncId), CompIdx>,
}

impl FamilyReader for SamplesReader {
    fn feed(
        &mut self,
        ds: &Dataset,
        node: &NodeData,
        until_ns: u64,
        sink: &mut dyn IntervalSink,
    ) -> Result<()> {
        let by_program = self.by_program;
        for f in &node.samples {
            let comps = &mut self.comps;
            let open = f.status == FileStatus::Open;
            self.cursors.feed(
                &f.path,
                &f.intervals,
                open,
                until_ns,
                sink,
                |iv, sink, out| {
                    for e in &iv.entries {
                        if is_runtime(ds, e.func) {
                            continue;
                        }
                        let program = by_program.then_some(e.program);
                        let comp = function(comps, ds, program, e.func, sink);
                        out.push(CompValue {
                            comp,
                            value: e.count as f64,
                        });
                    }
                },
            )?;
        }
        Ok(())
    }

    fn next_start(&self, node: &NodeData) -> Option<u64> {
        node.samples
            .iter()
            .filter_map(|f| self.cursors.next_start(&f.path, &f.intervals))
            .min()
    }
}

#[derive(Debug, Default)]
struct EventsReader {
    cursors: Cursors,
    comps: HashMap<EventId, CompIdx>,
}

impl FamilyReader for EventsReader {
    fn feed(
        &mut self,
        ds: &Dataset,
        node: &NodeData,
        until_ns: u64,
        sink: &mut dyn IntervalSink,
    ) -> Result<()> {
        for f in &node.samples {
            let comps = &mut self.comps;
            let open = f.status == FileStatus::Open;
            self.cursors
                .feed(&f.path, &f.events, open, until_ns, sink, |iv, sink, out| {
                    for c in &iv.counts {
                        // Stops are the pause detector's (`crate::paused`): a stopped time is
                        // not an event count.
                        let name = ds.names.events.get(c.event);
                        if &**name == STOPPED_EVENT || &**name == STOPPED_NS_EVENT {
                            continue;
                        }
                        let comp = *comps.entry(c.event).or_insert_with(|| {
                            sink.component(CompLabel {
                                bucket: None,
                                program: None,
                                image: None,
                                name: ds.names.events.get(c.event).clone(),
                            })
                        });
                        out.push(CompValue {
                            comp,
                            value: c.count as f64,
                        });
                    }
                })?;
        }
        Ok(())
    }

    fn next_start(&self, node: &NodeData) -> Option<u64> {
        node.samples
            .iter()
            .filter_map(|f| self.cursors.next_start(&f.path, &f.events))
            .min()
    }
}

/// True for the samples that are tracing's cost: in the runtime (the function the sampler
/// names its samples by), or in the PLT stubs of the hooks.
fn is_runtime(ds: &Dataset, func: FuncId) -> bool {
    let k = ds.names.funcs.get(func);
    is_tracing_cost(&k.image, &k.function)
}

/// The tracing runtime's share of the traced programs' CPU samples on one node.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TracingCost {
    /// Node.
    pub node: String,
    /// Samples in `libculprit_rt.so` (its hooks and flusher) and in the hooks' PLT stubs.
    pub runtime_samples: u64,
    /// Samples of the programs the runtime ran in, its own included.
    pub program_samples: u64,
}

impl TracingCost {
    /// `runtime_samples / program_samples`.
    pub fn share(&self) -> f64 {
        self.runtime_samples as f64 / self.program_samples.max(1) as f64
    }
}

/// Per node with samples in the tracing runtime, its share of the samples of the programs it
/// ran in (over every non-missed interval read).
pub fn tracing_cost(ds: &Dataset) -> Vec<TracingCost> {
    let mut out = Vec::new();
    for node in &ds.nodes {
        let mut per_program: HashMap<ProgramId, (u64, u64)> = HashMap::new();
        for iv in node.samples.iter().flat_map(|f| &f.intervals) {
            for e in &iv.entries {
                let p = per_program.entry(e.program).or_default();
                p.1 += e.count;
                if is_runtime(ds, e.func) {
                    p.0 += e.count;
                }
            }
        }
        let (runtime, programs) = per_program
            .values()
            .filter(|(r, _)| *r > 0)
            .fold((0, 0), |a, (r, t)| (a.0 + r, a.1 + t));
        if runtime > 0 {
            out.push(TracingCost {
                node: node.name.clone(),
                runtime_samples: runtime,
                program_samples: programs,
            });
        }
    }
    out
}
