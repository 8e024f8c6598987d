//! Sampled requests as a trace file holds them (record kind 15, seed 004): the loader decodes
//! each Requests record into a [`RequestStretch`] with its functions resolved like an
//! Interval record's; `analysis::requests` assembles requests and call trees from them.

use culprit_format::{RequestEvent, RequestsRec};

use super::names::FuncId;

/// One event of a sampled request, its call's function resolved.
pub type RequestMark = RequestEvent<FuncId>;

/// One Requests record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestStretch {
    /// Events the writer lost in the stretch.
    pub dropped: u32,
    /// One request in this many was recorded.
    pub sample_every: u32,
    /// The events, per thread in the order they happened.
    pub events: Vec<RequestMark>,
}

/// Decodes a Requests record, each call's function resolved by `func`.
pub(super) fn stretch(
    rec: &RequestsRec<'_>,
    mut func: impl FnMut(u64) -> FuncId,
) -> RequestStretch {
    let events = rec.events().map(|e| e.map_func(&mut func)).collect();
    RequestStretch {
        dropped: rec.dropped,
        sample_every: rec.sample_every,
        events,
    }
}
