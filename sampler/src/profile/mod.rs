//! Per-interval profiles: counting samples per (node, program, location) and kernel events per
//! node, naming locations once per distinct address, and writing one Samples and one Events
//! record per node and interval (seed 000 §"Sample profiling": profiles saved at a fixed
//! interval so faults can be localized to windows of time).
//!
//! Intervals are aligned to multiples of their length since the Unix epoch, so that intervals of
//! different nodes and writers line up without negotiation. Every interval gets records for every node, empty or not; the first and
//! the last are flagged PARTIAL when the sampler started or stopped inside them; an interval the
//! sampler could not observe (it was stopped and the rings overflowed) is flagged MISSED and has
//! no entries.
//!
//! # Where the code is
//!
//! `intervals` counts (per interval, node, program and location) and closes intervals in
//! order; `namer` names the locations of a closed interval; `output` writes them, one file
//! per node.

mod intervals;
mod namer;
mod output;

pub use intervals::{Closed, Gaps, Intervals, Loss, LAYER_EVENTS_MAX};
pub use namer::{Namer, NamingDeadline};
pub(crate) use output::datadir_error;
pub use output::{clocksource, NodeSummary, Output, RunInfo};

#[cfg(test)]
mod tests;
