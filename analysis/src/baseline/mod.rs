//! A baseline from the data itself: `--baseline SPAN` names a stretch of the diagnosed data (or
//! of its rotated history) taken as normal. Thresholds are trained on it by the training code
//! of `culprit train` ([`crate::train`], `Policy::Training`) and the rest of the data is
//! diagnosed against them, in one command. Seed 000 trains on staged fault-free runs; an
//! operator has the same servers' own past instead: their first hour, yesterday, or — with
//! `--follow` — a rolling stretch of the last hours not under suspicion.
//!
//! Its parts: what a span is, the syntax people write and where it lies in the data (`span`:
//! [`BaselineSpan`]); the windows it leaves to an analysis (`ranges`: [`Ranges`]); learning it
//! (`learn`: [`learn`]); and a rolling baseline, learnt again without the stretches under
//! suspicion (`rolling`: [`Rolling`], [`suspect_ranges`]). docs/thresholds.md ("A baseline from
//! the data itself") describes the whole.

mod learn;
mod ranges;
mod rolling;
mod span;

/// The unit tests' spans: whole seconds.
#[cfg(test)]
mod test_span {
    use crate::data::Span;
    use crate::time::NS_PER_S;

    pub const S: u64 = NS_PER_S;

    /// From `a` s to `b` s after the epoch.
    pub fn sp(a: u64, b: u64) -> Span {
        Span {
            start_ns: a * S,
            end_ns: b * S,
        }
    }
}

pub use learn::{data_span, learn, learn_following, learn_in, BaselineReport, Learned, Stretch};
pub use ranges::Ranges;
pub use rolling::{relearn_every, suspect_ranges, Rolling};
pub use span::{Amount, BaselineSpan, DataSpan};

/// A baseline in a diagnosis: what the report says of it and, when it rolls, how to learn it
/// again.
#[derive(Debug)]
pub struct Baseline {
    /// For the report (updated as a rolling baseline moves on).
    pub report: BaselineReport,
    /// A rolling baseline (`last:DUR`).
    pub rolling: Option<Rolling>,
}
