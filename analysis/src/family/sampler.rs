//! The sampler's families: `samples` (instruction-pointer samples per program, image and
//! function) and `events` (kernel tracepoint counts per node), from `culprit sample`'s files.

use std::collections::HashMap;

use crate::data::{Dataset, EventId, FileStatus, FuncId, NodeData, ProgramId};
use crate::error::Result;
use crate::model::{CompIdx, CompLabel, CompValue};

use super::tracer::function;
use super::{
    Cursors, FamilyReader, IntervalSink, KeepHint, KeepRule, KeepSettings, Metric, MetricFamily,
    Sampling, Words,
};

const HOW: &str = "run `culprit sample`";

/// Instruction-pointer samples per (program,) image and function.
#[derive(Clone, Copy, Debug, Default)]
pub struct Samples;

/// Kernel event counts per node; one component per event.
#[derive(Clone, Copy, Debug, Default)]
pub struct Events;

impl MetricFamily for Samples {
    fn metric(&self) -> Metric {
        Metric::SAMPLES
    }
    fn unit(&self) -> &'static str {
        "samples"
    }
    fn words(&self) -> Words {
        Words {
            more: "more samples",
            less: "fewer samples",
        }
    }
    fn keep_rule(&self, keep: &KeepSettings) -> KeepRule {
        KeepRule::AtLeast(keep.min_samples)
    }
    fn keep_hint(&self, keep: &KeepSettings) -> Option<KeepHint> {
        Some(KeepHint {
            minimum: format!("{} samples", keep.min_samples),
            flag: "--min-samples",
        })
    }
    fn sampled(&self) -> bool {
        true
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
    fn how_to_record(&self) -> &'static str {
        HOW
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
    fn metric(&self) -> Metric {
        Metric::EVENTS
    }
    fn unit(&self) -> &'static str {
        "events"
    }
    fn words(&self) -> Words {
        Words {
            more: "more events",
            less: "fewer events",
        }
    }
    fn keep_rule(&self, _keep: &KeepSettings) -> KeepRule {
        KeepRule::All
    }
    fn how_to_record(&self) -> &'static str {
        HOW
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
