//! What the stages of one window read: the window's buckets per node, and its feature matrix
//! ([`Features`], stage 3's output).

use crate::analyzer::state::NodeBucket;
use crate::score::Matrix;

/// The buckets of one window, per node.
pub(super) type Rows<'a> = Vec<Option<&'a Vec<NodeBucket>>>;
/// Distribution families: the per-slot values of one window's buckets, per node.
pub(super) type SlotRows<'a> = Vec<Option<&'a Vec<Vec<f64>>>>;

/// The feature matrix of a window: rows are complete nodes.
pub(super) struct Features {
    /// Window sums of the kept components (the metric's unit).
    pub(super) sums: Matrix,
    /// Per row, the window sum of *all* its components, kept or not, each divided by its
    /// weighting scale when weighted: seed 002's total T(h), which profiles divide by.
    pub(super) totals: Vec<f64>,
    /// Distribution families: cumulative histograms, and the kept component (index into the
    /// kept list) of each column.
    pub(super) cdf: Option<(Matrix, Vec<u32>)>,
}
