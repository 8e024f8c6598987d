//! The `layers` family: the I/O layers' characteristics per second (seed 003, Lu & Shen §3),
//! from layer-boundary events (record kind 14: the program's own marks, and the C library's calls
//! with `CULPRIT_IO=1`). One component per layer and stage, the time the requests completed in
//! each second spent there, summed: `disk: time` (first event to last), `disk: queue time`
//! (ADMIT→ISSUE), `disk: time below` (ISSUE→COMPLT), ms. Sums add up over a window like the
//! tracer's `time` and are compared the same way (seed 000), so the keep rule drops stages too
//! brief to matter: compared as distributions (seed 001's CDF distance), a disk queue of a few µs
//! that a busy machine stretched to 3 ms in some seconds moved a peer across hundreds of bins
//! and flagged it in a throttled-disk run. Which layer is the lowest anomalous one is the
//! bottom-up analysis of [`crate::layers::bottom_up`], on per-request means, which the diagnosis
//! reports beside this family's verdicts.

use std::collections::HashMap;
use std::sync::Arc;

use crate::data::{Dataset, FileStatus, NodeData};
use crate::error::Result;
use crate::layers::{characteristics, requests, stretches, Characteristics, SLOT_NS};
use crate::model::{CompIdx, CompLabel, CompValue, Interval, IntervalData};
use crate::time::fmt_dur;

use super::{
    About, Comparison, FamilyReader, IntervalSink, KeepHint, KeepRule, KeepSettings, Metric,
    MetricFamily, Words,
};

/// Per layer: time, queue time and time below of the requests completed, per second, ms.
#[derive(Clone, Copy, Debug, Default)]
pub struct Layers;

/// A stage's summed request time in a second's characteristics, ms.
type StageTime = fn(&Characteristics) -> f64;

/// The stages this family compares: name and value (throughput over busy time swings with how
/// briefly a fast layer is busy: the bottom-up analysis looks at it, window verdicts do not).
const COMPARED: [(&str, StageTime); 3] = [
    ("time", |c| c.latency_sum_ms),
    ("queue time", |c| c.queue_sum_ms),
    ("time below", |c| c.below_sum_ms),
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

impl Layers {
    /// What it is.
    pub const ABOUT: About = About {
        metric: Metric::LAYERS,
        group: None,
        unit: "ms",
        words: Words {
            more: "more time",
            less: "less time",
        },
        how_to_record: "mark the program's layers with culprit_io_admit & co. (culprit.h), or \
                        trace with CULPRIT_IO=1",
        comparison: Comparison::Sums,
        resolution: 1.0,
        windows: None,
        smoothing: 1,
        absent_is_zero: true,
        rare: false,
        sampled: false,
        demoted: crate::demoted::Rule::Unaffected,
    };
}

impl MetricFamily for Layers {
    fn about(&self) -> &About {
        &Self::ABOUT
    }
    fn keep_rule(&self, keep: &KeepSettings) -> KeepRule {
        KeepRule::AtLeast(keep.min_time_ms)
    }
    fn keep_hint(&self, keep: &KeepSettings) -> Option<KeepHint> {
        Some(KeepHint {
            minimum: format!(
                "{} of request time",
                fmt_dur((keep.min_time_ms * 1e6) as u64)
            ),
            by: super::KeepBy::Time,
        })
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
    comps: HashMap<(Arc<str>, &'static str), CompIdx>,
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
                    .map(|&(stage, _)| {
                        *self
                            .comps
                            .entry((Arc::clone(&l.name), stage))
                            .or_insert_with(|| {
                                sink.component(CompLabel {
                                    program: None,
                                    image: None,
                                    name: format!("{}: {stage}", l.name).into(),
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
                    for (&comp, (_, value)) in ids.iter().zip(COMPARED) {
                        let v = value(&chars[s]);
                        if v > 0.0 {
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
