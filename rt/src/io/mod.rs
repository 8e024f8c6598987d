//! Layer-boundary I/O events (seed 003, Lu & Shen, §3): a request passing through a layer of
//! the I/O stack is *admitted* from the layer above, *issued* to the layer below, *completed*
//! by it and *called back* to the layer above. Programs mark these four events at the layers
//! they own (`culprit_io_admit` … in `include/culprit.h`); with `CULPRIT_IO=1` the runtime also
//! marks the C library's boundary itself: `read`, `write`, `pread`, `pwrite`, `preadv`,
//! `pwritev` on files (layer `libc`: ISSUE at the call, COMPLT at its return) and POSIX AIO
//! (layer `libc-aio`: ADMIT at `aio_read`/`aio_write`, CALLBACK at `aio_return`). glibc's AIO
//! helper threads call `pread` inside the library, where no interposer reaches: their ISSUE
//! and COMPLT come from the sampler's system-call tracepoints (`culprit sample --layers`).
//!
//! # Cost
//!
//! A mark is a thread-local load, a timestamp and six stores into the thread's own ring
//! ([`ring`]): no lock, no locked instruction, no system call, no allocation (a thread's first
//! mark maps its ring). The `-finstrument-functions` hooks are untouched: a program that marks
//! nothing pays nothing. Rings are drained by the flusher every 100 ms into
//! `culprit_format::RecordKind::Layers` records (committed, so a crash loses at most the last
//! 100 ms of events, like the profiles).
//!
//! # Guarantees of the interposers
//!
//! They keep `errno` as the C library left it, are async-signal-safe (a mark nested in a
//! signal handler that interrupted a mark is dropped and counted), call the C library's own
//! functions resolved when the runtime loads (a raw system call before that), record nothing
//! in the flusher thread, and pass straight through when `CULPRIT_IO` is not set.

use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use culprit_format::{
    layer_kind, layer_op, request_kind, LayerDesc, LayerEvent, LayersHead, RecordBuf, RequestEvent,
    RequestsHead,
};

use crate::clock::{self, Calibration};
use crate::sys::io::{RING_FLUSHER, RING_NONE, RING_OFF};
use crate::sys::{self};

pub mod fds;
pub mod layers;
pub mod ring;

use ring::{EventRing, RawEvent};

/// Marks are recorded (the runtime traces this process).
static ENABLED: AtomicBool = AtomicBool::new(false);
/// The C library's boundary is recorded (`CULPRIT_IO=1`).
static LIBC_ON: AtomicBool = AtomicBool::new(false);

/// Starts recording (at start-up, once tracing is set up); `libc`: also the C library's calls.
/// False when the per-thread exit key cannot be made (nothing is recorded then).
pub fn enable(libc: bool) -> bool {
    if !sys::io::create_ring_key::<EventRing>() {
        return false;
    }
    ENABLED.store(true, Release);
    LIBC_ON.store(libc, Release);
    true
}

/// True when the C library's calls are recorded.
pub fn libc_on() -> bool {
    LIBC_ON.load(Relaxed)
}

/// The calling thread (the flusher) records nothing from now on; `own_fds`: it has a
/// descriptor table of its own (`sys::own_fd_table`), so its `close` calls say nothing of the
/// program's descriptors.
pub fn flusher_thread(own_fds: bool) {
    sys::io::set_ring_word(if own_fds { RING_FLUSHER } else { RING_OFF });
}

/// `fork` child: nothing recorded before the fork is the child's.
pub fn after_fork() {
    ring::after_fork();
}

/// A timestamp in the hooks' ticks.
#[inline(always)]
fn now() -> u64 {
    if clock::uses_tsc() {
        sys::rdtsc()
    } else {
        sys::monotonic_ns()
    }
}

/// This thread's ring, claiming one at its first mark. `None` when it records nothing.
#[inline(always)]
fn my_ring() -> Option<&'static EventRing> {
    match sys::io::ring::<EventRing>() {
        Ok(r) => Some(r),
        Err(w) => first_ring(w),
    }
}

#[cold]
fn first_ring(word: usize) -> Option<&'static EventRing> {
    if word != RING_NONE || !ENABLED.load(Acquire) {
        return None;
    }
    let saved = sys::io::errno();
    // Marks made while the ring is set up (none expected) record nothing.
    sys::io::set_ring_word(RING_OFF);
    let r = ring::claim();
    if r.is_none() {
        ring::count_unringed(1);
    }
    sys::io::set_errno(saved);
    r
}

/// Error codes of the C API (`include/culprit.h`).
pub mod code {
    /// Recorded.
    pub const OK: i32 = 0;
    /// The runtime does not record in this process or thread.
    pub const NOT_TRACING: i32 = -1;
    /// No such layer (or a bad name, to `culprit_io_layer`).
    pub const BAD_LAYER: i32 = -2;
    /// The event was dropped (the thread's buffer was full, or a signal handler interrupted a
    /// mark); counted in the data.
    pub const DROPPED: i32 = -3;
    /// No more layers can be named.
    pub const FULL: i32 = -4;
}

/// `culprit_io_layer`: the id of the layer called `name`.
pub fn layer(name: &str) -> i32 {
    match layers::register(name) {
        Ok(id) => id as i32,
        Err(layers::LayerError::BadName) => code::BAD_LAYER,
        Err(layers::LayerError::Full) => code::FULL,
    }
}

/// `culprit_io_admit` and the three others: one event of `kind` at layer `layer`.
#[inline(always)]
pub fn mark(layer: i32, kind: u8, req: u64, op: i32, obj: u64, offset: u64, bytes: u64) -> i32 {
    let Some(r) = my_ring() else {
        return code::NOT_TRACING;
    };
    if !(0..=u16::MAX as i32).contains(&layer) || !layers::exists(layer as u16) {
        return code::BAD_LAYER;
    }
    let op = match op {
        1 => layer_op::READ,
        2 => layer_op::WRITE,
        _ => layer_op::OTHER,
    };
    let e = RawEvent {
        t: now(),
        req,
        obj,
        offset,
        bytes,
        layer: layer as u16,
        kind,
        op,
        fd: -1,
    };
    if r.push(&[e]) {
        code::OK
    } else {
        code::DROPPED
    }
}

/// A C-library call on a file being recorded (see [`libc_begin`]).
#[derive(Clone, Copy, Debug)]
pub struct LibcCall {
    t0: u64,
    obj: u64,
    fd: i32,
    op: u8,
}

/// Before a C-library I/O call on `fd`: `Some` when it is to be recorded (`CULPRIT_IO=1`, a
/// thread that records, a file). Leaves `errno` alone.
#[inline(always)]
pub fn libc_begin(fd: i32, write: bool) -> Option<LibcCall> {
    if !LIBC_ON.load(Relaxed) {
        return None;
    }
    my_ring()?;
    let obj = fds::file_of(fd)?;
    Some(LibcCall {
        t0: now(),
        obj,
        fd,
        op: if write {
            layer_op::WRITE
        } else {
            layer_op::READ
        },
    })
}

/// After the call of `c`, which asked for `asked` bytes at `offset` (`NO_OFFSET` for `read`
/// and `write`) and returned `ret`: its ISSUE and COMPLT events. Leaves `errno` alone.
#[inline(always)]
pub fn libc_end(c: LibcCall, ret: isize, asked: u64, offset: u64) {
    let t1 = now();
    let Some(r) = my_ring() else { return };
    let req = (r.tid() as u64) << 32 | r.next_seq() as u64;
    let issue = RawEvent {
        t: c.t0,
        req,
        obj: c.obj,
        offset,
        bytes: asked,
        layer: layers::LIBC,
        kind: layer_kind::ISSUE,
        op: c.op,
        fd: c.fd,
    };
    let complt = RawEvent {
        t: t1,
        kind: layer_kind::COMPLT,
        bytes: ret.max(0) as u64,
        ..issue
    };
    r.push(&[issue, complt]);
}

/// Before `aio_read`/`aio_write` of the control block at `cb`: its ADMIT event, to be pushed
/// by [`aio_submitted`] once the C library took the request.
#[inline]
pub fn aio_begin(cb: usize, fd: i32, offset: i64, bytes: usize, write: bool) -> Option<RawEvent> {
    if !LIBC_ON.load(Relaxed) {
        return None;
    }
    my_ring()?;
    let obj = fds::file_of(fd)?;
    Some(RawEvent {
        t: now(),
        req: cb as u64,
        obj,
        offset: offset as u64,
        bytes: bytes as u64,
        layer: layers::LIBC_AIO,
        kind: layer_kind::ADMIT,
        op: if write {
            layer_op::WRITE
        } else {
            layer_op::READ
        },
        fd,
    })
}

/// The request of [`aio_begin`] was queued (`rc == 0`) or refused.
pub fn aio_submitted(admit: RawEvent, rc: i32) {
    if rc == 0 {
        if let Some(r) = my_ring() {
            r.push(&[admit]);
        }
    }
}

/// `aio_return` of the control block at `cb` (descriptor `fd`, `offset`) returned `ret`: the
/// request's CALLBACK.
pub fn aio_returned(cb: usize, fd: i32, offset: i64, write: bool, ret: isize) {
    if !LIBC_ON.load(Relaxed) {
        return;
    }
    let Some(r) = my_ring() else { return };
    let Some(obj) = fds::file_of(fd) else { return };
    r.push(&[RawEvent {
        t: now(),
        req: cb as u64,
        obj,
        offset: offset as u64,
        bytes: ret.max(0) as u64,
        layer: layers::LIBC_AIO,
        kind: layer_kind::CALLBACK,
        op: if write {
            layer_op::WRITE
        } else {
            layer_op::READ
        },
        fd,
    }]);
}

/// `fd` was closed or replaced (`close`, `dup2`, `dup3`).
#[inline]
pub fn fd_closed(fd: i32) {
    if LIBC_ON.load(Relaxed) && sys::io::ring_word() != RING_FLUSHER {
        fds::forget(fd);
    }
}

/// The pseudo-layer id of request events in the rings (`crate::requests`): no real layer has it
/// (there are at most `layers::MAX_LAYERS`).
const REQUEST_LAYER: u16 = u16::MAX;

/// A request event to push into the thread's ring (`crate::requests`).
#[derive(Clone, Copy, Debug)]
pub enum RequestMark {
    /// A sampled request begins.
    Begin {
        /// Its id.
        id: u64,
        /// The request it continues (0: none).
        parent: u64,
        /// Its type.
        rtype: u64,
    },
    /// It ends.
    End {
        /// Its id.
        id: u64,
        /// Some of its calls could not be recorded.
        lost: bool,
    },
    /// A call returned inside it (times in ticks).
    Call {
        /// The function.
        func: u64,
        /// Depth below the request's start (1: called directly inside it).
        depth: u16,
        /// Entry time.
        t0: u64,
        /// Inclusive ticks.
        incl: u64,
        /// Exclusive ticks.
        excl: u64,
    },
}

/// Pushes a request event into this thread's ring (claimed at the first); false when it was
/// dropped or the thread records nothing. Ring slots are reused as (t, req, obj, offset,
/// bytes) = BEGIN (now, id, parent, type, 0), END (now, id, 0, lost, 0), CALL (entry, function,
/// inclusive, exclusive, depth) under a layer id no real layer has.
#[inline]
pub fn request_event(m: RequestMark) -> bool {
    let Some(r) = my_ring() else { return false };
    let e = match m {
        RequestMark::Begin { id, parent, rtype } => RawEvent {
            t: now(),
            req: id,
            obj: parent,
            offset: rtype,
            bytes: 0,
            layer: REQUEST_LAYER,
            kind: request_kind::BEGIN,
            op: 0,
            fd: 0,
        },
        RequestMark::End { id, lost } => RawEvent {
            t: now(),
            req: id,
            obj: 0,
            offset: lost as u64,
            bytes: 0,
            layer: REQUEST_LAYER,
            kind: request_kind::END,
            op: 0,
            fd: 0,
        },
        RequestMark::Call {
            func,
            depth,
            t0,
            incl,
            excl,
        } => RawEvent {
            t: t0,
            req: func,
            obj: incl,
            offset: excl,
            bytes: depth as u64,
            layer: REQUEST_LAYER,
            kind: request_kind::CALL,
            op: 0,
            fd: 0,
        },
    };
    r.push(&[e])
}

/// The flusher's side: drains every ring into one Layers record (with the table of the layers
/// it names), when there is anything. `span_start` is where the previous record's span ended;
/// times are converted with `cal` (ticks → ns) against the wall clock now.
/// `sample_every` is the request sampling rate Requests records carry.
///
/// A record's span covers every event it carries: it starts where the previous one ended, or
/// at its earliest event when that is earlier. An event is stamped when it happened but
/// pushed when its call returned — a C-library call's ISSUE at the call's start, an AIO
/// request's ADMIT before `aio_read` (which may start a thread), a request's call at its
/// entry — so it may reach a drain after the one whose stretch it happened in (seen 94 ms
/// before its record's span beside CI's load).
pub fn drain_into(
    buf: &mut RecordBuf,
    cal: &Calibration,
    span_start: &mut u64,
    sample_every: u32,
) -> bool {
    if !ENABLED.load(Acquire) {
        return false;
    }
    let pid = std::process::id();
    let mut raw: Vec<(u32, RawEvent)> = Vec::new();
    let mut reqs: Vec<(u32, RawEvent)> = Vec::new();
    let mut used = [false; layers::MAX_LAYERS];
    let dropped = ring::drain(|tid, e| {
        if e.layer == REQUEST_LAYER {
            return reqs.push((tid, e));
        }
        if let Some(u) = used.get_mut(e.layer as usize) {
            *u = true;
        }
        raw.push((tid, e));
    });
    // The clock is read after the drain: every event drained is older than `now_t` (one read
    // before would stamp events marked during the drain with its time).
    let (now_t, now_wall) = (now(), sys::realtime_ns());
    let events: Vec<LayerEvent> = raw
        .into_iter()
        .map(|(tid, e)| LayerEvent {
            t_ns: now_wall.saturating_sub(cal.to_ns(now_t.saturating_sub(e.t))),
            req: e.req,
            obj: e.obj,
            offset: e.offset,
            bytes: e.bytes,
            pid,
            tid,
            layer: e.layer,
            kind: e.kind,
            op: e.op,
            fd: e.fd,
        })
        .collect();
    fds::age();
    let from = std::mem::replace(span_start, now_wall);
    let wall = |t: u64| now_wall.saturating_sub(cal.to_ns(now_t.saturating_sub(t)));
    let wrote_requests = !reqs.is_empty();
    if wrote_requests {
        let earliest = reqs.iter().map(|(_, e)| wall(e.t)).min();
        buf.requests(
            &RequestsHead {
                span_start_ns: earliest.map_or(from, |t| t.min(from)),
                span_end_ns: now_wall,
                dropped: dropped.min(u32::MAX as u64) as u32,
                sample_every,
            },
            reqs.into_iter().map(|(tid, e)| match e.kind {
                request_kind::BEGIN => RequestEvent::Begin {
                    t_ns: wall(e.t),
                    tid,
                    id: e.req,
                    parent: e.obj,
                    rtype: e.offset,
                },
                request_kind::END => RequestEvent::End {
                    t_ns: wall(e.t),
                    tid,
                    id: e.req,
                    lost: e.offset != 0,
                },
                _ => RequestEvent::Call {
                    t_ns: wall(e.t),
                    tid,
                    func: e.req,
                    depth: e.bytes as u16,
                    incl_ns: cal.to_ns(e.obj),
                    excl_ns: cal.to_ns(e.offset),
                },
            }),
        );
    }
    if events.is_empty() && (dropped == 0 || wrote_requests) {
        return wrote_requests;
    }
    let descs: Vec<LayerDesc<'_>> = used
        .iter()
        .enumerate()
        .filter(|(_, &u)| u)
        .filter_map(|(id, _)| {
            let l = layers::get(id as u16)?;
            Some(LayerDesc {
                id: id as u16,
                level: l.level,
                name: (&*l.name).into(),
            })
        })
        .collect();
    let earliest = events.iter().map(|e| e.t_ns).min();
    buf.layers(
        &LayersHead {
            span_start_ns: earliest.map_or(from, |t| t.min(from)),
            span_end_ns: now_wall,
            dropped: dropped.min(u32::MAX as u64) as u32,
        },
        &descs,
        events,
    );
    true
}
