//! The interval a record covers, declared once for the writer and the reader: the key every
//! per-interval record starts with ([`IntervalKey`]: start, length, flags, the first 20 bytes
//! of the payload) and the fixed part of an Interval record ([`IntervalHead`]).

use crate::bytes::{le32, le64};

/// The interval a per-interval record belongs to: its first 20 payload bytes (`start_ns` u64,
/// `dur_ns` u64, `flags` u32). The records that go with an Interval record
/// ([`RecordKind::Unwound`](crate::layout::RecordKind::Unwound), `Edges`, `Histograms`,
/// `Wakeups`, `Cost`) carry the Interval record's key: same file, same `start_ns`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntervalKey {
    /// Interval start, wall-clock ns since the epoch (the Interval record's `start_ns`).
    pub start_ns: u64,
    /// Interval length in ns.
    pub dur_ns: u64,
    /// [`interval_flags`](crate::layout::interval_flags) bits (the Interval record's).
    pub flags: u32,
}

/// The name writers use for the [`IntervalKey`] they pass to [`crate::RecordBuf`]: the same
/// shape, one declaration.
pub type IntervalRef = IntervalKey;

impl IntervalKey {
    /// The key at the start of a payload at least 20 bytes long (checked by the caller).
    pub(crate) fn read(p: &[u8]) -> IntervalKey {
        IntervalKey {
            start_ns: le64(p, 0),
            dur_ns: le64(p, 8),
            flags: le32(p, 16),
        }
    }
}

/// Fixed fields of an [`RecordKind::Interval`](crate::layout::RecordKind::Interval) record,
/// as the writer gives them and the reader returns them
/// ([`IntervalRec::head`](crate::IntervalRec)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntervalHead {
    /// Interval start, wall-clock ns since the epoch, a multiple of `dur_ns`.
    pub start_ns: u64,
    /// Interval length in ns.
    pub dur_ns: u64,
    /// [`interval_flags`](crate::layout::interval_flags) bits.
    pub flags: u32,
    /// Threads that had a profile table during the interval.
    pub threads: u32,
    /// Stack frames dropped to recover from exits that did not match the top of the stack
    /// (longjmp, exceptions, cancellation) during the interval.
    pub lost_frames: u32,
    /// Calls not accounted because a thread's shadow stack or function table was full.
    pub overflows: u32,
    /// Calls not traced for any other reason: made by a signal handler that interrupted a hook,
    /// by a thread the runtime could not give a table (or that was exiting), or that returned
    /// while the writer could not place them in an interval (it woke too late). Format
    /// version 2; 0 in older files.
    pub dropped: u32,
}
