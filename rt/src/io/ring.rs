//! Per-thread event rings: a thread writes its layer events into its own ring with plain
//! stores (no lock, no locked instruction, no system call); the flusher drains every ring every
//! 100 ms. Rings live in memory the runtime maps itself and are never unmapped: a thread that
//! exits leaves its ring to the flusher, which drains it and frees it for the next new thread.
//!
//! # Who writes what
//!
//! The owning thread writes the slots and `head`; the flusher reads slots up to `head`
//! (acquire) and writes `tail` (release), which the owner reads to know the room left. A slot is
//! never rewritten before the flusher has moved `tail` past it.
//!
//! # Signals
//!
//! A signal handler that marks an event while its thread is inside [`EventRing::push`] would
//! write the same slot: the owner raises `busy` around the push, and a push that finds it
//! raised (it runs in a handler nested in the push) drops its events and counts them. A push
//! is a few stores, so this is rare.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{compiler_fence, AtomicU32, AtomicU64, Ordering::SeqCst};

use crate::sys::io::RingData;
use crate::sys::{self, Registry, Zeroable};

/// Events a ring holds (48 bytes each: 768 KiB of address space per thread, pages used as
/// they are written). At the flusher's 100 ms period, 160,000 events per second per thread.
pub const RING_CAP: usize = 16384;
const RING_MASK: u32 = RING_CAP as u32 - 1;
/// Most rings (threads that mark events alive at once); a thread beyond runs unrecorded, its
/// events counted as dropped.
pub const MAX_RINGS: usize = 16384;

/// Lifecycle of a ring (`EventRing::state`).
pub mod state {
    /// Not owned by any thread: may be claimed.
    pub const FREE: u32 = 0;
    /// Owned by a running thread.
    pub const LIVE: u32 = 1;
    /// Its thread exited; the flusher takes its last events, then frees it.
    pub const DEAD: u32 = 2;
}

/// One event as the hot path writes it: timestamps in ticks (see `clock`).
#[derive(Debug)]
#[repr(C)]
struct Slot {
    t: AtomicU64,
    req: AtomicU64,
    obj: AtomicU64,
    offset: AtomicU64,
    bytes: AtomicU64,
    /// `layer | kind << 16 | op << 24 | (fd as u32) << 32`.
    meta: AtomicU64,
}

/// One event to push.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawEvent {
    /// Timestamp, ticks.
    pub t: u64,
    /// Request id.
    pub req: u64,
    /// Object id.
    pub obj: u64,
    /// Offset (`NO_OFFSET` when none).
    pub offset: u64,
    /// Bytes.
    pub bytes: u64,
    /// Layer id.
    pub layer: u16,
    /// `layer_kind`.
    pub kind: u8,
    /// `layer_op`.
    pub op: u8,
    /// Descriptor, −1 when none.
    pub fd: i32,
}

impl RawEvent {
    fn meta(&self) -> u64 {
        self.layer as u64
            | (self.kind as u64) << 16
            | (self.op as u64) << 24
            | (self.fd as u32 as u64) << 32
    }

    fn from_slot(s: &Slot) -> RawEvent {
        let m = s.meta.load(Relaxed);
        RawEvent {
            t: s.t.load(Relaxed),
            req: s.req.load(Relaxed),
            obj: s.obj.load(Relaxed),
            offset: s.offset.load(Relaxed),
            bytes: s.bytes.load(Relaxed),
            layer: m as u16,
            kind: (m >> 16) as u8,
            op: (m >> 24) as u8,
            fd: (m >> 32) as u32 as i32,
        }
    }
}

/// One thread's events. All-zero bytes are an empty free ring.
#[derive(Debug)]
#[repr(C, align(4096))]
pub struct EventRing {
    /// [`state`] value.
    pub state: AtomicU32,
    /// Thread id of the owner (set at claim).
    tid: AtomicU32,
    /// Events pushed (wrapping); written by the owner.
    head: AtomicU32,
    /// Events taken (wrapping); written by the flusher.
    tail: AtomicU32,
    /// The owner is inside a push.
    busy: AtomicU32,
    /// Requests numbered by the owner (libc-layer request ids).
    seq: AtomicU32,
    /// Events dropped (ring full, nested in a signal handler); the flusher swaps it.
    dropped: AtomicU64,
    slots: [Slot; RING_CAP],
}

// SAFETY: EventRing is made only of atomics (and an array of `repr(C)` structs of atomics),
// the all-zero value is its valid empty state, and it has no drop glue.
#[allow(unsafe_code)]
unsafe impl Zeroable for EventRing {}

// SAFETY: as above, and it is the crate's only RingData type.
#[allow(unsafe_code)]
unsafe impl RingData for EventRing {
    fn on_thread_exit(&'static self) {
        self.state.store(state::DEAD, Release);
    }
}

impl EventRing {
    /// Pushes `events` (all or none); false, with them counted as dropped, when the ring has
    /// no room or the push interrupted another (a signal handler). Only the owner calls it.
    #[inline(always)]
    pub fn push(&self, events: &[RawEvent]) -> bool {
        let n = events.len() as u32;
        if self.busy.load(Relaxed) != 0 {
            self.dropped.fetch_add(n as u64, Relaxed);
            return false;
        }
        self.busy.store(1, Relaxed);
        compiler_fence(SeqCst);
        let h = self.head.load(Relaxed);
        let ok = h.wrapping_sub(self.tail.load(Acquire)) + n <= RING_CAP as u32;
        if ok {
            for (i, e) in events.iter().enumerate() {
                let s = &self.slots[(h.wrapping_add(i as u32) & RING_MASK) as usize];
                s.t.store(e.t, Relaxed);
                s.req.store(e.req, Relaxed);
                s.obj.store(e.obj, Relaxed);
                s.offset.store(e.offset, Relaxed);
                s.bytes.store(e.bytes, Relaxed);
                s.meta.store(e.meta(), Relaxed);
            }
            self.head.store(h.wrapping_add(n), Release);
        } else {
            self.dropped.fetch_add(n as u64, Relaxed);
        }
        compiler_fence(SeqCst);
        self.busy.store(0, Relaxed);
        ok
    }

    /// The next request number of the owner (wrapping).
    #[inline(always)]
    pub fn next_seq(&self) -> u32 {
        let s = self.seq.load(Relaxed);
        self.seq.store(s.wrapping_add(1), Relaxed);
        s
    }

    /// The owner's thread id.
    pub fn tid(&self) -> u32 {
        self.tid.load(Relaxed)
    }

    /// Takes every event pushed so far (flusher only): `f(event)` in push order; returns the
    /// events dropped since the last take.
    pub fn take(&self, mut f: impl FnMut(RawEvent)) -> u64 {
        let h = self.head.load(Acquire);
        let mut t = self.tail.load(Relaxed);
        while t != h {
            f(RawEvent::from_slot(&self.slots[(t & RING_MASK) as usize]));
            t = t.wrapping_add(1);
        }
        self.tail.store(t, Release);
        self.dropped.swap(0, AcqRel)
    }

    /// Forgets every event and count (a `fork` child: they are the parent's).
    fn clear(&self) {
        self.tail.store(self.head.load(Acquire), Release);
        self.dropped.store(0, Relaxed);
    }
}

static RINGS: Registry<EventRing, MAX_RINGS> = Registry::new();

/// Events of threads that could not get a ring.
static UNRINGED: AtomicU64 = AtomicU64::new(0);

/// A ring for the calling thread: a free one if any, else a fresh mapping; made the thread's
/// (its exit frees it). `None` (the thread then records nothing) when none can be had.
pub fn claim() -> Option<&'static EventRing> {
    let r = RINGS
        .iter()
        .find(|r| {
            r.state
                .compare_exchange(state::FREE, state::LIVE, AcqRel, Relaxed)
                .is_ok()
        })
        .or_else(|| {
            let r = sys::alloc_zeroed::<EventRing>()?;
            r.state.store(state::LIVE, Relaxed);
            RINGS.push(r).then_some(r)
        })?;
    r.tid.store(sys::io::gettid(), Relaxed);
    r.seq.store(0, Relaxed);
    if !sys::io::set_ring(r) {
        r.state.store(state::FREE, Release);
        return None;
    }
    Some(r)
}

/// Counts `n` events of a thread without a ring.
pub fn count_unringed(n: u64) {
    UNRINGED.fetch_add(n, Relaxed);
}

/// Drains every ring (flusher only): `f(tid, event)` per event, thread by thread; rings of
/// threads that exited are freed once drained. Returns the events dropped since the last call.
pub fn drain(mut f: impl FnMut(u32, RawEvent)) -> u64 {
    let mut dropped = UNRINGED.swap(0, AcqRel);
    for r in RINGS.iter() {
        let st = r.state.load(Acquire);
        if st == state::FREE {
            continue;
        }
        let tid = r.tid();
        dropped += r.take(|e| f(tid, e));
        if st == state::DEAD {
            // Its thread is gone: nothing more comes.
            r.state.store(state::FREE, Release);
        }
    }
    dropped
}

/// `fork` child: only the calling thread exists, and nothing recorded before the fork is the
/// child's. Other threads' rings are freed; the caller's is kept, emptied.
pub fn after_fork() {
    let mine = sys::io::ring::<EventRing>().ok();
    for r in RINGS.iter() {
        r.clear();
        if mine.is_some_and(|m| std::ptr::eq(m, r)) {
            r.tid.store(sys::io::gettid(), Relaxed);
        } else {
            r.state.store(state::FREE, Release);
        }
    }
    UNRINGED.store(0, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(i: u64) -> RawEvent {
        RawEvent {
            t: i,
            req: i * 10,
            obj: 3,
            offset: 4096 * i,
            bytes: 4096,
            layer: 2,
            kind: 1 + (i % 4) as u8,
            op: 1,
            fd: -1,
        }
    }

    #[test]
    fn a_ring_keeps_order_and_counts_what_does_not_fit() {
        let r = sys::alloc_zeroed::<EventRing>().unwrap();
        for i in 0..10 {
            assert!(r.push(&[ev(i)]));
        }
        let mut got = Vec::new();
        assert_eq!(r.take(|e| got.push(e)), 0);
        assert_eq!(got, (0..10).map(ev).collect::<Vec<_>>());
        // Fill it: the last push does not fit and is counted, whole.
        for i in 0..RING_CAP as u64 / 2 {
            assert!(r.push(&[ev(i), ev(i + 1)]));
        }
        assert!(!r.push(&[ev(0)]));
        assert!(!r.push(&[ev(0), ev(1)]));
        let mut n = 0;
        assert_eq!(r.take(|_| n += 1), 3);
        assert_eq!(n, RING_CAP);
        // Room again, and the indices wrap.
        assert!(r.push(&[ev(7)]));
        let mut last = None;
        r.take(|e| last = Some(e));
        assert_eq!(last, Some(ev(7)));
    }

    #[test]
    fn a_push_inside_a_push_is_dropped_and_counted() {
        let r = sys::alloc_zeroed::<EventRing>().unwrap();
        r.busy.store(1, Relaxed); // as a signal handler would find it
        assert!(!r.push(&[ev(1), ev(2)]));
        r.busy.store(0, Relaxed);
        let mut n = 0;
        assert_eq!(r.take(|_| n += 1), 2);
        assert_eq!(n, 0);
    }

    #[test]
    fn meta_round_trips_negative_descriptors() {
        let mut e = ev(5);
        e.fd = -1;
        e.layer = 65535;
        e.op = 2;
        let r = sys::alloc_zeroed::<EventRing>().unwrap();
        r.push(&[e]);
        let mut got = None;
        r.take(|x| got = Some(x));
        assert_eq!(got, Some(e));
    }
}
