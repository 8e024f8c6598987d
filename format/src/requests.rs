//! Sampled requests and their method calls ([`RecordKind::Requests`](crate::RecordKind::Requests),
//! kind 15): seed 004 (CloudDiag, §IV) traces sampled user requests and records, per request,
//! the execution time of every method invocation, with a request id and a hand-off id (the
//! seed's MID) so that the parts of one request served by several threads or nodes form one
//! call tree.
//!
//! The tracer writes what its threads did while a sampled request was open on them
//! (`culprit_request_begin` … `culprit_request_end` in `include/culprit.h`): a BEGIN event
//! (request id, the id of the request it continues, its type), one CALL event per traced call
//! that returned inside the request (entry time, function address, depth below the request's
//! start, inclusive and exclusive time), an END event. Events are drained from per-thread
//! buffers every 100 ms, so a request may span several records: readers reassemble it per
//! thread, in event order. Events carry absolute wall-clock times.
//!
//! Payload (little-endian):
//!
//! | offset | field |
//! | --- | --- |
//! | 0 | `span_start_ns` u64: wall-clock start of the stretch (≤ every event's time) |
//! | 8 | `span_end_ns` u64: its end |
//! | 16 | `flags` u32 (none defined; zero) |
//! | 20 | `n_events` u32 |
//! | 24 | `dropped` u32: events the writer lost in the stretch (buffer full, nested in a signal handler) |
//! | 28 | `sample_every` u32: one request in this many is recorded (1: all) |
//! | 32 | `n_events` × [`REQUEST_EVENT_SIZE`] bytes: `t_ns` u64, `a` u64, `b` u64, `c` u64, `tid` u32, `kind` u8, 0 u8, `depth` u16 |
//!
//! | kind | `t_ns` | `a` | `b` | `c` | `depth` |
//! | --- | --- | --- | --- | --- | --- |
//! | 1 BEGIN | begin | request id | parent id (0: none) | request type | 0 |
//! | 2 END | end | request id | 0 | 1 when some of the part's CALL events were lost, else 0 | 0 |
//! | 3 CALL | the call's entry | function address | inclusive ns | exclusive ns | 1 for a call made directly inside the request, 2 for its callees… |

/// Fixed part of a [`RecordKind::Requests`](crate::RecordKind::Requests) payload, in bytes.
pub const REQUESTS_FIXED_SIZE: usize = 32;
/// Size of one event of a [`RecordKind::Requests`](crate::RecordKind::Requests) record.
pub const REQUEST_EVENT_SIZE: usize = 40;

/// Event kinds of a [`RecordKind::Requests`](crate::RecordKind::Requests) record.
pub mod request_kind {
    /// A request begins on a thread.
    pub const BEGIN: u8 = 1;
    /// It ends there.
    pub const END: u8 = 2;
    /// A traced call returned inside it.
    pub const CALL: u8 = 3;
}

/// One event of a sampled request. `F` is how a call's function is named: its address (`u64`)
/// as the file holds it, or whatever a reader resolves it to ([`RequestEvent::map_func`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestEvent<F = u64> {
    /// A request (or a part handed off to this thread) begins.
    Begin {
        /// Wall-clock ns.
        t_ns: u64,
        /// Thread id.
        tid: u32,
        /// Request id.
        id: u64,
        /// Id of the request this part continues (seed 004's MID), 0 for a request's root.
        parent: u64,
        /// Request type (program-defined).
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
        /// Some of the part's calls were lost (the writer's buffer was full): its call tree is
        /// incomplete.
        lost: bool,
    },
    /// A traced call returned inside the open request of its thread.
    Call {
        /// Wall-clock ns of the call's entry.
        t_ns: u64,
        /// Thread id.
        tid: u32,
        /// Function address (resolved like an Interval record's).
        func: F,
        /// 1 for a call made directly inside the request, 2 for its callees…
        depth: u16,
        /// Inclusive (elapsed) ns.
        incl_ns: u64,
        /// Exclusive (self) ns.
        excl_ns: u64,
    },
}

impl<F> RequestEvent<F> {
    /// The same event with its call's function named by `f` (Begin and End have none).
    pub fn map_func<G>(self, f: impl FnOnce(F) -> G) -> RequestEvent<G> {
        match self {
            RequestEvent::Begin {
                t_ns,
                tid,
                id,
                parent,
                rtype,
            } => RequestEvent::Begin {
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
            } => RequestEvent::End {
                t_ns,
                tid,
                id,
                lost,
            },
            RequestEvent::Call {
                t_ns,
                tid,
                func,
                depth,
                incl_ns,
                excl_ns,
            } => RequestEvent::Call {
                t_ns,
                tid,
                func: f(func),
                depth,
                incl_ns,
                excl_ns,
            },
        }
    }
}

impl RequestEvent {
    /// Encodes the event into its [`REQUEST_EVENT_SIZE`] bytes.
    pub fn to_bytes(&self) -> [u8; REQUEST_EVENT_SIZE] {
        let (t, a, b, c, tid, kind, depth) = match *self {
            RequestEvent::Begin {
                t_ns,
                tid,
                id,
                parent,
                rtype,
            } => (t_ns, id, parent, rtype, tid, request_kind::BEGIN, 0),
            RequestEvent::End {
                t_ns,
                tid,
                id,
                lost,
            } => (t_ns, id, 0, lost as u64, tid, request_kind::END, 0),
            RequestEvent::Call {
                t_ns,
                tid,
                func,
                depth,
                incl_ns,
                excl_ns,
            } => (t_ns, func, incl_ns, excl_ns, tid, request_kind::CALL, depth),
        };
        let mut o = [0u8; REQUEST_EVENT_SIZE];
        o[0..8].copy_from_slice(&t.to_le_bytes());
        o[8..16].copy_from_slice(&a.to_le_bytes());
        o[16..24].copy_from_slice(&b.to_le_bytes());
        o[24..32].copy_from_slice(&c.to_le_bytes());
        o[32..36].copy_from_slice(&tid.to_le_bytes());
        o[36] = kind;
        o[38..40].copy_from_slice(&depth.to_le_bytes());
        o
    }

    /// Decodes one event; `None` for an unknown kind (skipped by readers).
    fn from_bytes(b: &[u8]) -> Option<RequestEvent> {
        let u64at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let t_ns = u64at(0);
        let tid = u32::from_le_bytes(b[32..36].try_into().expect("4 bytes"));
        Some(match b[36] {
            request_kind::BEGIN => RequestEvent::Begin {
                t_ns,
                tid,
                id: u64at(8),
                parent: u64at(16),
                rtype: u64at(24),
            },
            request_kind::END => RequestEvent::End {
                t_ns,
                tid,
                id: u64at(8),
                lost: u64at(24) & 1 != 0,
            },
            request_kind::CALL => RequestEvent::Call {
                t_ns,
                tid,
                func: u64at(8),
                depth: u16::from_le_bytes([b[38], b[39]]),
                incl_ns: u64at(16),
                excl_ns: u64at(24),
            },
            _ => return None,
        })
    }
}

/// Fixed fields of a [`RecordKind::Requests`](crate::RecordKind::Requests) record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RequestsHead {
    /// Wall-clock start of the stretch the events were collected over, at or before every
    /// event's time: where the writer's previous stretch ended, or its earliest event when an
    /// event was stamped before it was collected (a call's start, pushed at its return).
    pub span_start_ns: u64,
    /// Its end, at or after every event's time.
    pub span_end_ns: u64,
    /// Events the writer lost in the stretch.
    pub dropped: u32,
    /// One request in this many is recorded.
    pub sample_every: u32,
}

/// A decoded [`RecordKind::Requests`](crate::RecordKind::Requests) record.
#[derive(Clone, Debug)]
pub struct RequestsRec<'a> {
    /// Wall-clock start of the stretch.
    pub span_start_ns: u64,
    /// Its end.
    pub span_end_ns: u64,
    /// Flags (none defined).
    pub flags: u32,
    /// Events the writer lost in the stretch.
    pub dropped: u32,
    /// One request in this many is recorded.
    pub sample_every: u32,
    n_events: u32,
    events: &'a [u8],
}

impl<'a> RequestsRec<'a> {
    /// Number of events (of every kind, known or not).
    pub fn len(&self) -> usize {
        self.n_events as usize
    }

    /// True without events.
    pub fn is_empty(&self) -> bool {
        self.n_events == 0
    }

    /// The events of known kinds, per thread in the order they happened (threads interleave).
    pub fn events(&self) -> impl Iterator<Item = RequestEvent> + 'a {
        let b = self.events;
        (0..self.n_events as usize).filter_map(move |i| {
            RequestEvent::from_bytes(&b[i * REQUEST_EVENT_SIZE..][..REQUEST_EVENT_SIZE])
        })
    }
}

/// Decodes a [`RecordKind::Requests`](crate::RecordKind::Requests) payload, checking every
/// length.
pub(crate) fn decode(p: &[u8]) -> Result<RequestsRec<'_>, &'static str> {
    if p.len() < REQUESTS_FIXED_SIZE {
        return Err("requests record too short");
    }
    let le32 = |o: usize| u32::from_le_bytes(p[o..o + 4].try_into().expect("4 bytes"));
    let le64 = |o: usize| u64::from_le_bytes(p[o..o + 8].try_into().expect("8 bytes"));
    let n_events = le32(20);
    let need = (n_events as usize)
        .checked_mul(REQUEST_EVENT_SIZE)
        .and_then(|n| n.checked_add(REQUESTS_FIXED_SIZE))
        .ok_or("event count overflows")?;
    if need > p.len() {
        return Err("event count exceeds record length");
    }
    Ok(RequestsRec {
        span_start_ns: le64(0),
        span_end_ns: le64(8),
        flags: le32(16),
        dropped: le32(24),
        sample_every: le32(28),
        n_events,
        events: &p[REQUESTS_FIXED_SIZE..need],
    })
}
