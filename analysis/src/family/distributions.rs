//! `--distance cdf`: a family of window sums compared instead as distributions of its per-slot
//! values (seed 001 §3.3's CDF distance offered to seed 000's metrics). Everything else — its
//! records, unit, keep rule — is the wrapped family's.

use std::sync::Arc;

use crate::cdf::MAX_BINS;
use crate::data::NodeData;

use super::{
    Comparison, FamilyReader, KeepHint, KeepRule, KeepSettings, Metric, MetricFamily, Sampling,
    Windows, Words,
};

/// `inner`'s values compared as distributions, smoothed over `smoothing` slots.
#[derive(Debug)]
pub struct Distributions {
    /// The family wrapped.
    pub inner: Arc<dyn MetricFamily>,
    /// Moving-average width.
    pub smoothing: usize,
}

impl MetricFamily for Distributions {
    fn metric(&self) -> Metric {
        self.inner.metric()
    }
    fn unit(&self) -> &'static str {
        self.inner.unit()
    }
    fn words(&self) -> Words {
        self.inner.words()
    }
    fn resolution(&self) -> f64 {
        self.inner.resolution()
    }
    fn keep_rule(&self, keep: &KeepSettings) -> KeepRule {
        self.inner.keep_rule(keep)
    }
    fn keep_hint(&self, keep: &KeepSettings) -> Option<KeepHint> {
        self.inner.keep_hint(keep)
    }
    fn comparison(&self) -> Comparison {
        Comparison::Cdf { max_bins: MAX_BINS }
    }
    fn windows(&self) -> Option<Windows> {
        self.inner.windows()
    }
    fn smoothing(&self) -> usize {
        self.smoothing
    }
    fn absent_is_zero(&self) -> bool {
        self.inner.absent_is_zero()
    }
    fn group(&self) -> Metric {
        self.inner.group()
    }
    fn sampled(&self) -> bool {
        self.inner.sampled()
    }
    fn sampling(&self, node: &NodeData, see: &mut dyn FnMut(Sampling)) {
        self.inner.sampling(node, see)
    }
    fn demoted(&self) -> crate::demoted::Rule {
        self.inner.demoted()
    }
    fn how_to_record(&self) -> &'static str {
        self.inner.how_to_record()
    }
    fn has_data(&self, node: &NodeData) -> bool {
        self.inner.has_data(node)
    }
    fn interval_lengths(&self, node: &NodeData, see: &mut dyn FnMut(u64)) {
        self.inner.interval_lengths(node, see)
    }
    fn reader(&self, by_program: bool) -> Box<dyn FamilyReader> {
        self.inner.reader(by_program)
    }
}
