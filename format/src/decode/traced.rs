//! Decoding what the tracer runtime writes: loaded objects, intervals of per-function
//! counters, and the records that go with an interval (unwound calls, caller → callee edges,
//! call-duration histograms, the flusher's wake-ups).

use crate::bytes::{entries_slice, le16, le32, le64};
use crate::interval::{IntervalHead, IntervalKey};
use crate::layout::*;

/// A decoded [`RecordKind::Object`] record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRec<'a> {
    /// Writer-assigned id.
    pub id: u32,
    /// [`object_flags`] bits.
    pub flags: u32,
    /// Load bias (runtime address − ELF virtual address).
    pub bias: u64,
    /// Lowest runtime address.
    pub start: u64,
    /// One past the highest runtime address.
    pub end: u64,
    /// Build-id bytes (may be empty).
    pub build_id: &'a [u8],
    /// Path as recorded (lossy UTF-8).
    pub path: std::borrow::Cow<'a, str>,
}

impl ObjectRec<'_> {
    /// Decodes a [`RecordKind::Object`] payload, checking every length.
    pub(crate) fn decode(p: &[u8]) -> Result<ObjectRec<'_>, &'static str> {
        if p.len() < OBJECT_FIXED_SIZE {
            return Err("object record too short");
        }
        let bid_len = le16(p, 32) as usize;
        let path_len = le16(p, 34) as usize;
        if OBJECT_FIXED_SIZE + bid_len + path_len > p.len() {
            return Err("object record lengths exceed record");
        }
        let bid = &p[OBJECT_FIXED_SIZE..OBJECT_FIXED_SIZE + bid_len];
        let path = &p[OBJECT_FIXED_SIZE + bid_len..OBJECT_FIXED_SIZE + bid_len + path_len];
        Ok(ObjectRec {
            id: le32(p, 0),
            flags: le32(p, 4),
            bias: le64(p, 8),
            start: le64(p, 16),
            end: le64(p, 24),
            build_id: bid,
            path: String::from_utf8_lossy(path),
        })
    }
}

/// One function's counters in an interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntervalEntry {
    /// Runtime address of the function (the `fn` argument of the hooks).
    pub addr: u64,
    /// Calls that returned during the interval.
    pub calls: u64,
    /// Exclusive (self) wall-clock ns of those calls.
    pub excl_ns: u64,
    /// Inclusive (total) wall-clock ns of those calls, recursion counted once.
    pub incl_ns: u64,
}

/// A decoded [`RecordKind::Interval`] record: its fixed fields (the [`IntervalHead`] the writer
/// gave, read as the record's own fields: `rec.start_ns`) and its entries.
#[derive(Clone, Debug)]
pub struct IntervalRec<'a> {
    /// The fixed fields (`dropped` is 0 in version-1 files).
    pub head: IntervalHead,
    n: u32,
    entries: &'a [u8],
}

impl<'a> IntervalRec<'a> {
    /// Decodes a [`RecordKind::Interval`] payload, checking every length.
    pub(crate) fn decode(p: &[u8]) -> Result<IntervalRec<'_>, &'static str> {
        if p.len() < INTERVAL_FIXED_SIZE {
            return Err("interval record too short");
        }
        let n = le32(p, 24);
        Ok(IntervalRec {
            head: IntervalHead {
                start_ns: le64(p, 0),
                dur_ns: le64(p, 8),
                flags: le32(p, 16),
                threads: le32(p, 20),
                lost_frames: le32(p, 28),
                overflows: le32(p, 32),
                dropped: le32(p, 36),
            },
            n,
            entries: entries_slice(p, INTERVAL_FIXED_SIZE, n, INTERVAL_ENTRY_SIZE)?,
        })
    }

    /// The entries.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = IntervalEntry> + 'a {
        let b = self.entries;
        (0..self.n as usize).map(move |i| {
            let o = i * INTERVAL_ENTRY_SIZE;
            IntervalEntry {
                addr: le64(b, o),
                calls: le64(b, o + 8),
                excl_ns: le64(b, o + 16),
                incl_ns: le64(b, o + 24),
            }
        })
    }
}

/// One function's calls that the runtime ended itself when it recovered its stack: left by
/// `longjmp`, an exception through code without cleanups, thread cancellation or exit. They are
/// included in the Interval entry's `calls`, ended at the recovery point.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwoundEntry {
    /// Function address.
    pub addr: u64,
    /// Unwound calls in the interval.
    pub calls: u64,
}

/// A decoded [`RecordKind::Unwound`] record.
#[derive(Clone, Debug)]
pub struct UnwoundRec<'a> {
    /// The interval.
    pub interval: IntervalKey,
    n: u32,
    entries: &'a [u8],
}

impl<'a> UnwoundRec<'a> {
    /// Decodes a [`RecordKind::Unwound`] payload, checking every length.
    pub(crate) fn decode(p: &[u8]) -> Result<UnwoundRec<'_>, &'static str> {
        if p.len() < UNWOUND_FIXED_SIZE {
            return Err("unwound record too short");
        }
        let n = le32(p, 20);
        Ok(UnwoundRec {
            interval: IntervalKey::read(p),
            n,
            entries: entries_slice(p, UNWOUND_FIXED_SIZE, n, UNWOUND_ENTRY_SIZE)?,
        })
    }

    /// The entries.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = UnwoundEntry> + 'a {
        let b = self.entries;
        (0..self.n as usize).map(move |i| {
            let o = i * UNWOUND_ENTRY_SIZE;
            UnwoundEntry {
                addr: le64(b, o),
                calls: le64(b, o + 8),
            }
        })
    }
}

/// Calls from one function (the caller) to another (the callee) in an interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EdgeEntry {
    /// Caller's address; 0 when the callee had no traced caller (a thread's first function,
    /// or one called from untraced code only).
    pub caller: u64,
    /// Callee's address.
    pub callee: u64,
    /// Calls of the callee from the caller that returned in the interval.
    pub calls: u64,
    /// The callee's exclusive ns in those calls: over a callee's edges they add up to its
    /// Interval entry's `excl_ns`.
    pub excl_ns: u64,
    /// Elapsed ns of those calls (each call counted, recursion included).
    pub incl_ns: u64,
}

/// A decoded [`RecordKind::Edges`] record.
#[derive(Clone, Debug)]
pub struct EdgesRec<'a> {
    /// The interval.
    pub interval: IntervalKey,
    /// Calls whose edge could not be recorded (a thread's edge table was full); they are in
    /// the Interval entries.
    pub dropped: u32,
    n: u32,
    entries: &'a [u8],
}

impl<'a> EdgesRec<'a> {
    /// Decodes a [`RecordKind::Edges`] payload, checking every length.
    pub(crate) fn decode(p: &[u8]) -> Result<EdgesRec<'_>, &'static str> {
        if p.len() < EDGES_FIXED_SIZE {
            return Err("edges record too short");
        }
        let n = le32(p, 20);
        Ok(EdgesRec {
            interval: IntervalKey::read(p),
            dropped: le32(p, 24),
            n,
            entries: entries_slice(p, EDGES_FIXED_SIZE, n, EDGES_ENTRY_SIZE)?,
        })
    }

    /// The entries.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = EdgeEntry> + 'a {
        let b = self.entries;
        (0..self.n as usize).map(move |i| {
            let o = i * EDGES_ENTRY_SIZE;
            EdgeEntry {
                caller: le64(b, o),
                callee: le64(b, o + 8),
                calls: le64(b, o + 16),
                excl_ns: le64(b, o + 24),
                incl_ns: le64(b, o + 32),
            }
        })
    }
}

/// One function's call-duration histogram in an interval (buckets: see
/// [`HIST_BUCKETS`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    /// Function address.
    pub addr: u64,
    /// Calls per bucket.
    pub counts: [u64; HIST_BUCKETS],
}

impl Histogram {
    /// An empty histogram of `addr`.
    pub fn new(addr: u64) -> Self {
        Histogram {
            addr,
            counts: [0; HIST_BUCKETS],
        }
    }
}

/// A decoded [`RecordKind::Histograms`] record.
#[derive(Clone, Debug)]
pub struct HistogramsRec<'a> {
    /// The interval.
    pub interval: IntervalKey,
    n: u32,
    entries: &'a [u8],
}

impl<'a> HistogramsRec<'a> {
    /// Decodes a [`RecordKind::Histograms`] payload, checking every length.
    pub(crate) fn decode(p: &[u8]) -> Result<HistogramsRec<'_>, &'static str> {
        if p.len() < HISTOGRAMS_FIXED_SIZE {
            return Err("histograms record too short");
        }
        let n = le32(p, 20);
        Ok(HistogramsRec {
            interval: IntervalKey::read(p),
            n,
            entries: histogram_entries(p, n)?,
        })
    }

    /// The histograms (validated when the record was decoded).
    pub fn entries(&self) -> impl Iterator<Item = Histogram> + 'a {
        let b = self.entries;
        let mut pos = 0usize;
        std::iter::from_fn(move || {
            if pos + 16 > b.len() {
                return None;
            }
            let mut h = Histogram::new(le64(b, pos));
            let mask = le64(b, pos + 8);
            let mut at = pos + 16;
            for (k, c) in h.counts.iter_mut().enumerate() {
                if mask & 1 << k != 0 {
                    *c = le32(b, at) as u64;
                    at += 4;
                }
            }
            pos = pos + 16 + pad8(4 * mask.count_ones() as usize);
            Some(h)
        })
    }
}

/// A decoded [`RecordKind::Wakeups`] record: how the tracer's flusher woke in an interval.
/// The flusher wakes for a probe at a random time in every 100 ms; a process stopped by
/// SIGSTOP, or starved of CPU, wakes it late. A short stop (tens of ms) misses no interval but
/// shows here: each probe that lands in a stop comes late by the rest of it, and the share of
/// late probes is the share of time stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WakeupsRec {
    /// The interval.
    pub interval: IntervalKey,
    /// Probes in the interval.
    pub wakeups: u32,
    /// Those that came later than the writer's slack (see the writer).
    pub late: u32,
    /// Sum of the lateness of the late ones, ns.
    pub late_ns: u64,
    /// The largest lateness, ns.
    pub max_late_ns: u64,
    /// Calls counted in this interval that returned in an earlier one, which the writer had
    /// written already when their thread handed them over (format version 7; 0 before).
    pub moved: u64,
    /// How long after the interval's end the writer wrote it, when later than its slack
    /// (format version 7; 0 before, and for an interval written on time).
    pub written_late_ns: u64,
}

impl WakeupsRec {
    /// Decodes a [`RecordKind::Wakeups`] payload, checking every length.
    pub(crate) fn decode(p: &[u8]) -> Result<WakeupsRec, &'static str> {
        if p.len() < WAKEUPS_SIZE {
            return Err("wakeups record too short");
        }
        Ok(WakeupsRec {
            interval: IntervalKey::read(p),
            wakeups: le32(p, 20),
            late: le32(p, 24),
            late_ns: le64(p, 32),
            max_late_ns: le64(p, 40),
            moved: if p.len() >= WAKEUPS_SIZE_V7 {
                le64(p, 48)
            } else {
                0
            },
            written_late_ns: if p.len() >= WAKEUPS_SIZE_V7 {
                le64(p, 56)
            } else {
                0
            },
        })
    }
}

/// Checks the variable-length entries of a Histograms record; returns their bytes.
fn histogram_entries(p: &[u8], n: u32) -> Result<&[u8], &'static str> {
    let mut pos = HISTOGRAMS_FIXED_SIZE;
    for _ in 0..n {
        if pos + 16 > p.len() {
            return Err("histogram entry exceeds record");
        }
        let mask = le64(p, pos + 8);
        if mask >> HIST_BUCKETS != 0 {
            return Err("histogram bucket out of range");
        }
        pos += 16 + pad8(4 * mask.count_ones() as usize);
        if pos > p.len() {
            return Err("histogram entry exceeds record");
        }
    }
    Ok(&p[HISTOGRAMS_FIXED_SIZE..pos])
}

entry_count!(IntervalRec, UnwoundRec, EdgesRec, HistogramsRec);
reads_as_head!(IntervalRec: IntervalHead);
