//! Sampled requests (seed 004, CloudDiag, §IV): a program marks where a request begins and
//! ends on a thread (`culprit_request_begin(id, type, parent)` / `culprit_request_end(id)` in
//! `include/culprit.h`); while a *sampled* request is open on a thread, the runtime records
//! every traced call that returns inside it — its function, depth below the request's start,
//! entry time, inclusive and exclusive time — so the analysis can build the request's call
//! tree and its request × method latency matrix (`culprit diagnose --requests`).
//!
//! # Sampling
//!
//! One request in `CULPRIT_REQUEST_SAMPLE` (default [`DEFAULT_SAMPLE_EVERY`]) is recorded, as
//! seed 004 §IV traces "at a given sampling rate". The decision is a hash of the request's root
//! id (`parent` when it is not 0, else `id`), so every part of a handed-off request — on other
//! threads, in other processes or on other nodes — is sampled or not alike, with no
//! coordination.
//!
//! # Cost
//!
//! With no sampled request open, the hooks are unchanged (their fast path does not know
//! requests exist). Opening a sampled request switches the thread's hook word to the general
//! path (like `CULPRIT_GRAPH`): calls then cost the general path's price plus one event pushed
//! into the thread's ring ([`crate::io::ring`], shared with layer events and drained by the
//! flusher every 100 ms into `culprit_format::RecordKind::Requests` records). An unsampled
//! request costs a hash. Measured figures: `benches/requests/run`, docs/performance.md "Requests".

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;

use crate::control;
use crate::io;
use crate::pool;
use crate::sys;

/// Default `CULPRIT_REQUEST_SAMPLE`: a request of a few dozen traced calls and about 10 µs of
/// work or more costs under 5 % on average (measured +4.2 % at 12 µs, +42 % at 0.9 µs:
/// benches/requests/run, docs/performance.md "Requests"); shorter requests need one in 100 or more.
pub const DEFAULT_SAMPLE_EVERY: u32 = 10;

/// One request in this many is recorded (set at start-up).
static SAMPLE_EVERY: AtomicU32 = AtomicU32::new(DEFAULT_SAMPLE_EVERY);

/// Sets the sampling rate (start-up).
pub fn set_sample_every(n: u32) {
    SAMPLE_EVERY.store(n.max(1), Relaxed);
}

/// The sampling rate.
pub fn sample_every() -> u32 {
    SAMPLE_EVERY.load(Relaxed)
}

/// Codes of the C API beyond `io::code`'s.
pub mod code {
    /// The request is recorded (sampled).
    pub const SAMPLED: i32 = 1;
    /// The request is not sampled (nothing is recorded for it; `culprit_request_end` is still
    /// fine to call).
    pub const NOT_SAMPLED: i32 = 0;
    /// Another sampled request is open on this thread (end it first).
    pub const NESTED: i32 = -5;
    /// `culprit_request_end` of a request that is not the one open on this thread.
    pub const NOT_OPEN: i32 = -2;
}

/// splitmix64's finaliser: consecutive ids spread over every residue.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// True when the request whose root id is `root` is sampled at one in `every`.
pub fn is_sampled(root: u64, every: u32) -> bool {
    every <= 1 || mix(root).checked_rem(u64::from(every)) == Some(0)
}

/// `culprit_request_begin`.
pub fn begin(id: u64, rtype: u64, parent: u64) -> i32 {
    if !control::is_active() {
        return io::code::NOT_TRACING;
    }
    let root = if parent != 0 { parent } else { id };
    if !is_sampled(root, sample_every()) {
        return code::NOT_SAMPLED;
    }
    let Some(b) = pool::ensure_block() else {
        return io::code::NOT_TRACING;
    };
    if b.request_open_id().is_some() {
        return code::NESTED;
    }
    if !io::request_event(io::RequestMark::Begin { id, parent, rtype }) {
        return io::code::DROPPED;
    }
    b.request_open(id);
    sys::set_tls_cur(b.idle_word());
    code::SAMPLED
}

/// `culprit_request_end`: 0, or [`code::NOT_OPEN`] when another sampled request than `id` is
/// open on this thread (an unsampled one: nothing to do, 0 too).
pub fn end(id: u64) -> i32 {
    let Some(b) = pool::current() else {
        return if control::is_active() {
            code::NOT_SAMPLED
        } else {
            io::code::NOT_TRACING
        };
    };
    match b.request_open_id() {
        Some(open) if open == id => {
            // The calls of the request are recorded before its end: close it first, then mark.
            let lost = b.request_close(id).unwrap_or(false);
            sys::set_tls_cur(b.idle_word());
            io::request_event(io::RequestMark::End { id, lost });
            io::code::OK
        }
        Some(_) => code::NOT_OPEN,
        None => code::NOT_SAMPLED,
    }
}
