//! `--distance cdf`: a family of window sums compared instead as distributions of its per-slot
//! values (seed 001 §3.3's CDF distance offered to seed 000's metrics). Everything else — its
//! records, unit, keep rule — is the wrapped family's.

use std::sync::Arc;

use crate::cdf::MAX_BINS;
use crate::data::NodeData;

use super::{
    About, Comparison, FamilyReader, KeepHint, KeepRule, KeepSettings, MetricFamily, Sampling,
};

/// `inner`'s values compared as distributions.
#[derive(Debug)]
pub struct Distributions {
    inner: Arc<dyn MetricFamily>,
    about: About,
}

impl Distributions {
    /// `inner`'s values compared as distributions, smoothed over `smoothing` slots.
    pub fn new(inner: Arc<dyn MetricFamily>, smoothing: usize) -> Distributions {
        let about = About {
            comparison: Comparison::Cdf { max_bins: MAX_BINS },
            smoothing,
            ..*inner.about()
        };
        Distributions { inner, about }
    }
}

impl MetricFamily for Distributions {
    fn about(&self) -> &About {
        &self.about
    }
    fn keep_rule(&self, keep: &KeepSettings) -> KeepRule {
        self.inner.keep_rule(keep)
    }
    fn keep_hint(&self, keep: &KeepSettings) -> Option<KeepHint> {
        self.inner.keep_hint(keep)
    }
    fn sampling(&self, node: &NodeData, see: &mut dyn FnMut(Sampling)) {
        self.inner.sampling(node, see)
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
