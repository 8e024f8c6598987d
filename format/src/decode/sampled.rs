//! Decoding what the sampler writes: its string table, intervals of IP samples and kernel
//! event counts, sampled call chains, what the kernel dropped, and a node's OS metrics.

use crate::bytes::{entries_slice, le32, le64};
use crate::interval::IntervalKey;
use crate::layout::*;

/// A decoded [`RecordKind::Strings`] record.
#[derive(Clone, Debug)]
pub struct StringsRec<'a> {
    payload: &'a [u8],
}

impl<'a> StringsRec<'a> {
    /// Decodes a [`RecordKind::Strings`] payload, checking every length.
    pub(crate) fn decode(p: &[u8]) -> Result<StringsRec<'_>, &'static str> {
        // Validate the whole table up front so `items` cannot run off the end.
        let mut pos = 0usize;
        while pos + 8 <= p.len() {
            let len = le32(p, pos + 4) as usize;
            let next = pos
                .checked_add(8)
                .and_then(|x| x.checked_add(pad8(len)))
                .ok_or("string length overflows")?;
            if pos + 8 + len > p.len() {
                return Err("string exceeds record");
            }
            pos = next;
        }
        Ok(StringsRec {
            payload: &p[..pos.min(p.len())],
        })
    }

    /// The `(id, string)` pairs (lossy UTF-8).
    pub fn items(&self) -> impl Iterator<Item = (u32, std::borrow::Cow<'a, str>)> + 'a {
        let b = self.payload;
        let mut pos = 0usize;
        std::iter::from_fn(move || {
            if pos + 8 > b.len() {
                return None;
            }
            let id = le32(b, pos);
            let len = le32(b, pos + 4) as usize;
            let s = String::from_utf8_lossy(&b[pos + 8..pos + 8 + len]);
            pos += 8 + pad8(len);
            Some((id, s))
        })
    }
}

/// One (program, image, function) count in a sampler interval; the fields are string ids.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct SampleEntry {
    /// String id of the program name.
    pub program: u32,
    /// String id of the binary image (executable, library, `[kernel.kallsyms]`, module).
    pub image: u32,
    /// String id of the function (or `image+0xoffset` when unresolved).
    pub function: u32,
    /// Samples.
    pub count: u64,
}

/// Fixed fields of a [`RecordKind::Samples`] record, as the writer gives them and the reader
/// returns them ([`SamplesRec::head`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SamplesHead {
    /// Interval start, wall-clock ns since the epoch, a multiple of `dur_ns`.
    pub start_ns: u64,
    /// Interval length in ns.
    pub dur_ns: u64,
    /// [`interval_flags`] and [`samples_flags`] bits.
    pub flags: u32,
    /// String id of the event name.
    pub event_sid: u32,
    /// Events per sample, or frequency in Hz with [`samples_flags::FREQ`].
    pub period: u64,
    /// Samples taken in the interval (including those not attributed to any entry).
    pub total: u64,
    /// Samples the kernel reported lost in the interval.
    pub lost: u64,
}

/// A decoded [`RecordKind::Samples`] record: its fixed fields (read as the record's own:
/// `rec.total`) and its entries.
#[derive(Clone, Debug)]
pub struct SamplesRec<'a> {
    /// The fixed fields.
    pub head: SamplesHead,
    n: u32,
    entries: &'a [u8],
}

impl<'a> SamplesRec<'a> {
    /// Decodes a [`RecordKind::Samples`] payload, checking every length.
    pub(crate) fn decode(p: &[u8]) -> Result<SamplesRec<'_>, &'static str> {
        if p.len() < SAMPLES_FIXED_SIZE {
            return Err("samples record too short");
        }
        let n = le32(p, 48);
        Ok(SamplesRec {
            head: SamplesHead {
                start_ns: le64(p, 0),
                dur_ns: le64(p, 8),
                flags: le32(p, 16),
                event_sid: le32(p, 20),
                period: le64(p, 24),
                total: le64(p, 32),
                lost: le64(p, 40),
            },
            n,
            entries: entries_slice(p, SAMPLES_FIXED_SIZE, n, SAMPLES_ENTRY_SIZE)?,
        })
    }

    /// The entries.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = SampleEntry> + 'a {
        let b = self.entries;
        (0..self.n as usize).map(move |i| {
            let o = i * SAMPLES_ENTRY_SIZE;
            SampleEntry {
                program: le32(b, o),
                image: le32(b, o + 4),
                function: le32(b, o + 8),
                count: le64(b, o + 16),
            }
        })
    }
}

/// One kernel event count; `event` is a string id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EventEntry {
    /// String id of the event name (e.g. `tcp:tcp_retransmit_skb`).
    pub event: u32,
    /// Occurrences in the interval.
    pub count: u64,
}

/// A decoded [`RecordKind::Events`] record.
#[derive(Clone, Debug)]
pub struct EventsRec<'a> {
    /// Interval start, wall-clock ns.
    pub start_ns: u64,
    /// Interval length, ns.
    pub dur_ns: u64,
    /// [`interval_flags`] bits.
    pub flags: u32,
    n: u32,
    entries: &'a [u8],
}

impl<'a> EventsRec<'a> {
    /// Decodes a [`RecordKind::Events`] payload, checking every length.
    pub(crate) fn decode(p: &[u8]) -> Result<EventsRec<'_>, &'static str> {
        if p.len() < EVENTS_FIXED_SIZE {
            return Err("events record too short");
        }
        let n = le32(p, 20);
        Ok(EventsRec {
            start_ns: le64(p, 0),
            dur_ns: le64(p, 8),
            flags: le32(p, 16),
            n,
            entries: entries_slice(p, EVENTS_FIXED_SIZE, n, EVENTS_ENTRY_SIZE)?,
        })
    }

    /// The entries.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = EventEntry> + 'a {
        let b = self.entries;
        (0..self.n as usize).map(move |i| {
            let o = i * EVENTS_ENTRY_SIZE;
            EventEntry {
                event: le32(b, o),
                count: le64(b, o + 8),
            }
        })
    }
}

/// One distinct call chain of a program in a sampler interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StackEntry {
    /// String id of the program name.
    pub program: u32,
    /// Samples with this chain.
    pub count: u64,
    /// `(image, function)` string ids, outermost first (the sampled function last); kernel
    /// frames (image `[kernel.kallsyms]` or a module) come after the user frames they
    /// interrupted.
    pub frames: Vec<(u32, u32)>,
}

/// A decoded [`RecordKind::Stacks`] record.
#[derive(Clone, Debug)]
pub struct StacksRec<'a> {
    /// The interval (the Samples record's).
    pub interval: IntervalKey,
    n: u32,
    entries: &'a [u8],
}

impl<'a> StacksRec<'a> {
    /// Decodes a [`RecordKind::Stacks`] payload, checking every length.
    pub(crate) fn decode(p: &[u8]) -> Result<StacksRec<'_>, &'static str> {
        if p.len() < STACKS_FIXED_SIZE {
            return Err("stacks record too short");
        }
        let n = le32(p, 20);
        Ok(StacksRec {
            interval: IntervalKey::read(p),
            n,
            entries: stack_entries(p, n)?,
        })
    }

    /// The chains (validated when the record was decoded).
    pub fn entries(&self) -> impl Iterator<Item = StackEntry> + 'a {
        let b = self.entries;
        let mut pos = 0usize;
        std::iter::from_fn(move || {
            if pos + 16 > b.len() {
                return None;
            }
            let depth = le32(b, pos + 4) as usize;
            let frames = (0..depth)
                .map(|i| (le32(b, pos + 16 + 8 * i), le32(b, pos + 20 + 8 * i)))
                .collect();
            let e = StackEntry {
                program: le32(b, pos),
                count: le64(b, pos + 8),
                frames,
            };
            pos += 16 + 8 * depth;
            Some(e)
        })
    }
}

fn stack_entries(p: &[u8], n: u32) -> Result<&[u8], &'static str> {
    let mut pos = STACKS_FIXED_SIZE;
    for _ in 0..n {
        if pos + 16 > p.len() {
            return Err("stack entry exceeds record");
        }
        let depth = le32(p, pos + 4) as usize;
        pos = depth
            .checked_mul(8)
            .and_then(|d| d.checked_add(pos + 16))
            .ok_or("stack depth overflows")?;
        if pos > p.len() {
            return Err("stack entry exceeds record");
        }
    }
    Ok(&p[STACKS_FIXED_SIZE..pos])
}

/// A decoded [`RecordKind::Lost`] record: what the kernel dropped in an interval (its rings
/// were full), by kind. Samples, kernel-event records and process-tracking records have rings
/// of their own, so each count is of what it says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LostRec {
    /// The interval.
    pub interval: IntervalKey,
    /// Whose the counts are ([`lost_whose`]): the machine's, or this node's own.
    pub whose: u32,
    /// IP samples dropped.
    pub samples: u64,
    /// Kernel-event (tracepoint) records dropped: the `Events` counts of the interval are
    /// short by as many occurrences.
    pub events: u64,
    /// Process-tracking records dropped (COMM, MMAP2, FORK, EXIT, NAMESPACES): samples of
    /// processes or mappings they announced may be named `[unknown]` or given to no node.
    pub tracking: u64,
}

impl LostRec {
    /// Decodes a [`RecordKind::Lost`] payload, checking every length.
    pub(crate) fn decode(p: &[u8]) -> Result<LostRec, &'static str> {
        if p.len() < LOST_SIZE {
            return Err("lost record too short");
        }
        Ok(LostRec {
            interval: IntervalKey::read(p),
            whose: le32(p, 20),
            samples: le64(p, 24),
            events: le64(p, 32),
            tracking: le64(p, 40),
        })
    }

    /// True when the counts are this node's own, not the machine's.
    pub fn is_own(&self) -> bool {
        self.whose == lost_whose::NODE
    }
}

/// One OS metric value; `metric`, `instance` and `unit` are string ids (names in
/// [`crate::os_metrics`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OsMetricEntry {
    /// String id of the metric name (`disk.await`).
    pub metric: u32,
    /// String id of the instance (device or interface name), `None` for node-wide metrics.
    pub instance: Option<u32>,
    /// String id of the unit (`ms`).
    pub unit: u32,
    /// The value.
    pub value: f64,
}

/// Fixed fields of a [`RecordKind::OsMetrics`] record, as the writer gives them and the
/// reader returns them ([`OsMetricsRec::head`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OsMetricsHead {
    /// Interval start, wall-clock ns since the epoch, a multiple of `dur_ns`.
    pub start_ns: u64,
    /// Interval length in ns.
    pub dur_ns: u64,
    /// Time between the two reads the rates come from, ns (monotonic clock; near `dur_ns`).
    /// Longer than `dur_ns` when the later read came late: its rates are averages over the
    /// span, written for each interval the span covers (the sampler since format version 7;
    /// before, such intervals were written MISSED).
    pub span_ns: u64,
    /// [`interval_flags`] bits.
    pub flags: u32,
}

/// A decoded [`RecordKind::OsMetrics`] record: its fixed fields (read as the record's own:
/// `rec.span_ns`) and its entries. A metric without an entry is absent in this interval (not
/// zero).
#[derive(Clone, Debug)]
pub struct OsMetricsRec<'a> {
    /// The fixed fields.
    pub head: OsMetricsHead,
    n: u32,
    entries: &'a [u8],
}

impl<'a> OsMetricsRec<'a> {
    /// Decodes a [`RecordKind::OsMetrics`] payload, checking every length.
    pub(crate) fn decode(p: &[u8]) -> Result<OsMetricsRec<'_>, &'static str> {
        if p.len() < OS_METRICS_FIXED_SIZE {
            return Err("os metrics record too short");
        }
        let n = le32(p, 28);
        Ok(OsMetricsRec {
            head: OsMetricsHead {
                start_ns: le64(p, 0),
                dur_ns: le64(p, 8),
                span_ns: le64(p, 16),
                flags: le32(p, 24),
            },
            n,
            entries: entries_slice(p, OS_METRICS_FIXED_SIZE, n, OS_METRICS_ENTRY_SIZE)?,
        })
    }

    /// The entries.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = OsMetricEntry> + 'a {
        let b = self.entries;
        (0..self.n as usize).map(move |i| {
            let o = i * OS_METRICS_ENTRY_SIZE;
            let instance = le32(b, o + 4);
            OsMetricEntry {
                metric: le32(b, o),
                instance: (instance != NO_INSTANCE).then_some(instance),
                unit: le32(b, o + 8),
                value: f64::from_bits(le64(b, o + 16)),
            }
        })
    }
}

entry_count!(SamplesRec, EventsRec, StacksRec, OsMetricsRec);
reads_as_head!(SamplesRec: SamplesHead, OsMetricsRec: OsMetricsHead);
