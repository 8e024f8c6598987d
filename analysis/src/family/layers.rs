//! The `layers` family: the I/O layers' characteristics per second (seed 003, Lu & Shen §3),
//! from layer-boundary events (record kind 14: the program's own marks, and the C library's calls
//! with `CULPRIT_IO=1`). One component per layer and characteristic — `disk: latency`,
//! `disk: queue time`, `disk: time below` (ms) — compared across peers as distributions of their
//! per-second values (the CDF distance of seed 001 §5: a latency is not a quantity that adds up
//! over a window). Which layer is the lowest anomalous one is the bottom-up analysis of
//! [`crate::layers::bottom_up`], which the diagnosis reports beside this family's verdicts.

use std::collections::HashMap;
use std::sync::Arc;

use crate::data::{Dataset, FileStatus, NodeData};
use crate::error::Result;
use crate::layers::{characteristics, requests, stretches, Characteristic, SLOT_NS};
use crate::model::{CompIdx, CompLabel, CompValue, Interval, IntervalData};

use super::{
    Comparison, FamilyReader, IntervalSink, KeepRule, KeepSettings, Metric, MetricFamily, Words,
};

/// Per layer: latency, queue time and time below per second, ms.
#[derive(Clone, Copy, Debug, Default)]
pub struct Layers;

/// The characteristics this family compares (throughput over busy time swings with how briefly a
/// fast layer is busy: the bottom-up analysis looks at it, window verdicts do not).
const COMPARED: [Characteristic; 3] = [
    Characteristic::Latency,
    Characteristic::Queue,
    Characteristic::Below,
];

/// First slot start and the end of complete slots of `node`'s layer data.
fn extent(node: &NodeData) -> Option<(u64, u64)> {
    let (mut lo, mut hi) = (u64::MAX, 0);
    for s in stretches(node) {
        if let Some(first) = s.events.iter().map(|e| e.t_ns).min() {
            lo = lo.min(first);
        }
        hi = hi.max(s.span.1);
    }
    (lo <= hi).then(|| (lo / SLOT_NS * SLOT_NS, hi / SLOT_NS * SLOT_NS))
}

impl MetricFamily for Layers {
    fn metric(&self) -> Metric {
        Metric::LAYERS
    }
    fn unit(&self) -> &'static str {
        "ms"
    }
    fn words(&self) -> Words {
        Words {
            more: "slower",
            less: "faster",
        }
    }
    fn keep_rule(&self, _keep: &KeepSettings) -> KeepRule {
        KeepRule::All
    }
    fn comparison(&self) -> Comparison {
        Comparison::Cdf { max_bins: 1000 }
    }
    fn how_to_record(&self) -> &'static str {
        "mark the program's layers with culprit_io_admit & co. (culprit.h), or trace with \
         CULPRIT_IO=1"
    }
    fn has_data(&self, node: &NodeData) -> bool {
        stretches(node).any(|s| !s.events.is_empty())
    }
    fn interval_lengths(&self, node: &NodeData, see: &mut dyn FnMut(u64)) {
        if self.has_data(node) {
            see(SLOT_NS);
        }
    }
    fn reader(&self, _by_program: bool) -> Box<dyn FamilyReader> {
        Box::<LayersReader>::default()
    }
}

/// Recomputes a node's requests at each feed and pushes the whole seconds not pushed yet.
#[derive(Debug, Default)]
struct LayersReader {
    /// Per node directory: start of the next second to push; whether its end was said.
    next: HashMap<std::path::PathBuf, (u64, bool)>,
    comps: HashMap<(Arc<str>, Characteristic), CompIdx>,
}

impl FamilyReader for LayersReader {
    fn feed(
        &mut self,
        _ds: &Dataset,
        node: &NodeData,
        until_ns: u64,
        sink: &mut dyn IntervalSink,
    ) -> Result<()> {
        let Some((origin, complete)) = extent(node) else {
            return Ok(());
        };
        let writer = node.dir.as_path();
        let (next, said_end) = self.next.get(writer).copied().unwrap_or((origin, false));
        let stop = complete.min(until_ns.saturating_add(SLOT_NS - 1) / SLOT_NS * SLOT_NS);
        if next < stop {
            let slots = ((stop - next) / SLOT_NS) as usize;
            let (reqs, layers) = requests(stretches(node));
            let end = stretches(node).map(|s| s.span.1).max().unwrap_or(stop);
            let mut per_layer = Vec::new();
            for l in &layers {
                let ids: Vec<CompIdx> = COMPARED
                    .iter()
                    .map(|&ch| {
                        *self
                            .comps
                            .entry((Arc::clone(&l.name), ch))
                            .or_insert_with(|| {
                                sink.component(CompLabel {
                                    program: None,
                                    image: None,
                                    name: format!("{}: {}", l.name, ch.name()).into(),
                                    bucket: None,
                                })
                            })
                    })
                    .collect();
                per_layer.push((ids, characteristics(&reqs, &l.name, next, slots, end)));
            }
            let mut values = Vec::new();
            for s in 0..slots {
                values.clear();
                for (ids, chars) in &per_layer {
                    for (&comp, ch) in ids.iter().zip(COMPARED) {
                        if let Some(v) = ch.of(&chars[s]) {
                            values.push(CompValue { comp, value: v });
                        }
                    }
                }
                sink.push(
                    writer,
                    &Interval {
                        start_ns: next + s as u64 * SLOT_NS,
                        dur_ns: SLOT_NS,
                        partial: false,
                        data: IntervalData::Sparse(&values),
                    },
                )?;
            }
        }
        let next = next.max(stop);
        let open = node
            .traces
            .iter()
            .any(|t| t.status == FileStatus::Open && !t.layers.is_empty())
            || node
                .samples
                .iter()
                .any(|s| s.status == FileStatus::Open && !s.layers.is_empty());
        let ended = !said_end && !open && next >= complete;
        if ended {
            sink.end(writer);
        }
        self.next
            .insert(writer.to_path_buf(), (next, said_end || ended));
        Ok(())
    }

    fn next_start(&self, node: &NodeData) -> Option<u64> {
        let (origin, complete) = extent(node)?;
        let next = self.next.get(&node.dir).map_or(origin, |n| n.0);
        (next < complete).then_some(next)
    }
}
