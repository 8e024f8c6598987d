//! Sampled requests as a trace file holds them (record kind 15, seed 004): the loader decodes
//! each Requests record into a [`RequestStretch`] with its functions resolved like an
//! Interval record's; `analysis::requests` assembles requests and call trees from them.

use culprit_format::{RequestEvent, RequestsRec};

use super::names::FuncId;

/// One event of a sampled request, its function resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestMark {
    /// A request (or a part of one) begins on thread `tid`.
    Begin {
        /// Wall-clock ns.
        t_ns: u64,
        /// Thread id.
        tid: u32,
        /// Request id.
        id: u64,
        /// The request it continues (0: a root).
        parent: u64,
        /// The program's request type.
        rtype: u64,
    },
    /// It ends.
    End {
        /// Wall-clock ns.
        t_ns: u64,
        /// Thread id.
        tid: u32,
        /// Request id.
        id: u64,
        /// Some of its calls were lost: the call tree is incomplete.
        lost: bool,
    },
    /// A call returned inside the thread's open request.
    Call {
        /// Wall-clock ns of its entry.
        t_ns: u64,
        /// Thread id.
        tid: u32,
        /// The function.
        func: FuncId,
        /// Depth below the request's start (1: called directly in it).
        depth: u16,
        /// Inclusive ns.
        incl_ns: u64,
        /// Exclusive ns.
        excl_ns: u64,
    },
}

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
    let events = rec
        .events()
        .map(|e| match e {
            RequestEvent::Begin {
                t_ns,
                tid,
                id,
                parent,
                rtype,
            } => RequestMark::Begin {
                t_ns,
                tid,
                id,
                parent,
                rtype,
            },
            RequestEvent::End {
                t_ns,
                tid,
                id,
                lost,
            } => RequestMark::End {
                t_ns,
                tid,
                id,
                lost,
            },
            RequestEvent::Call {
                t_ns,
                tid,
                func: addr,
                depth,
                incl_ns,
                excl_ns,
            } => RequestMark::Call {
                t_ns,
                tid,
                func: func(addr),
                depth,
                incl_ns,
                excl_ns,
            },
        })
        .collect();
    RequestStretch {
        dropped: rec.dropped,
        sample_every: rec.sample_every,
        events,
    }
}
