//! Building records into a byte buffer. Writers append the finished bytes to a file or a mapping
//! past `committed_end`, then advance `committed_end`.

use crate::crc::record_crc;
use crate::decode::sampled::{
    EventEntry, LostRec, OsMetricEntry, OsMetricsHead, SampleEntry, SamplesHead,
};
use crate::decode::traced::{EdgeEntry, Histogram, IntervalEntry, UnwoundEntry, WakeupsRec};
use crate::interval::{IntervalHead, IntervalRef};
use crate::layers::{LayerDesc, LayerEvent, LayersHead, MAX_LAYER_NAME};
use crate::layout::*;

/// Description of a loaded object for an [`RecordKind::Object`] record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectDesc<'a> {
    /// Writer-assigned id, unique within the file (a reload gets a new id).
    pub id: u32,
    /// [`object_flags`] bits.
    pub flags: u32,
    /// Load bias: runtime address − ELF virtual address (`dlpi_addr`).
    pub bias: u64,
    /// Lowest runtime address of the object's loaded segments.
    pub start: u64,
    /// One past the highest runtime address of the object's loaded segments.
    pub end: u64,
    /// GNU build-id note contents, empty if none.
    pub build_id: &'a [u8],
    /// Path of the object as the dynamic loader knows it (absolute when known).
    pub path: &'a str,
}

/// A growable buffer of encoded records.
#[derive(Clone, Debug, Default)]
pub struct RecordBuf {
    buf: Vec<u8>,
}

impl RecordBuf {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty buffer with room for `n` bytes.
    pub fn with_capacity(n: usize) -> Self {
        RecordBuf {
            buf: Vec::with_capacity(n),
        }
    }

    /// The encoded records.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Number of encoded bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when nothing is encoded.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Appends the records of `other`.
    pub fn append(&mut self, other: &RecordBuf) {
        self.buf.extend_from_slice(&other.buf);
    }

    /// Forgets the encoded records, keeping the allocation.
    pub fn clear(&mut self) {
        self.buf.clear();
    }

    pub(crate) fn begin(&mut self, kind: RecordKind, flags: u16) -> usize {
        let start = self.buf.len();
        self.buf.extend_from_slice(&(kind as u16).to_le_bytes());
        self.buf.extend_from_slice(&flags.to_le_bytes());
        self.buf.extend_from_slice(&[0u8; 12]);
        start
    }

    pub(crate) fn finish(&mut self, start: usize) {
        let padded = pad8(self.buf.len() - start);
        self.buf.resize(start + padded, 0);
        let len = padded as u32;
        self.buf[start + 4..start + 8].copy_from_slice(&len.to_le_bytes());
        let rec = &self.buf[start..];
        let mut crc = record_crc(&rec[..RECORD_HEADER_SIZE], FORMAT_VERSION);
        crc.update(&rec[RECORD_HEADER_SIZE..]);
        let crc = crc.finish();
        self.buf[start + 8..start + 12].copy_from_slice(&crc.to_le_bytes());
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }

    pub(crate) fn patch_u32(&mut self, at: usize, v: u32) {
        self.buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    /// Appends an [`RecordKind::Info`] record. Keys should be `[a-z0-9_]+`; values may contain
    /// anything (newlines and backslashes are escaped).
    pub fn info<'k, 'v>(&mut self, pairs: impl IntoIterator<Item = (&'k str, &'v str)>) {
        let start = self.begin(RecordKind::Info, 0);
        for (k, v) in pairs {
            self.buf.extend_from_slice(k.as_bytes());
            self.buf.push(b'=');
            escape_into(v, &mut self.buf);
            self.buf.push(b'\n');
        }
        self.finish(start);
    }

    /// Appends an [`RecordKind::Object`] record.
    pub fn object(&mut self, o: &ObjectDesc<'_>) {
        let start = self.begin(RecordKind::Object, 0);
        self.u32(o.id);
        self.u32(o.flags);
        self.u64(o.bias);
        self.u64(o.start);
        self.u64(o.end);
        let build_id = &o.build_id[..o.build_id.len().min(u16::MAX as usize)];
        let path = &o.path.as_bytes()[..o.path.len().min(u16::MAX as usize)];
        self.buf
            .extend_from_slice(&(build_id.len() as u16).to_le_bytes());
        self.buf
            .extend_from_slice(&(path.len() as u16).to_le_bytes());
        self.u32(0);
        self.buf.extend_from_slice(build_id);
        self.buf.extend_from_slice(path);
        self.finish(start);
    }

    /// Appends an [`RecordKind::Interval`] record with the given entries. Returns the number of
    /// entries written.
    pub fn interval(
        &mut self,
        head: &IntervalHead,
        entries: impl IntoIterator<Item = IntervalEntry>,
    ) -> u32 {
        let start = self.begin(RecordKind::Interval, 0);
        self.u64(head.start_ns);
        self.u64(head.dur_ns);
        self.u32(head.flags);
        self.u32(head.threads);
        let n_at = self.buf.len();
        self.u32(0);
        self.u32(head.lost_frames);
        self.u32(head.overflows);
        self.u32(head.dropped);
        let mut n = 0u32;
        for e in entries {
            self.u64(e.addr);
            self.u64(e.calls);
            self.u64(e.excl_ns);
            self.u64(e.incl_ns);
            n += 1;
        }
        self.patch_u32(n_at, n);
        self.finish(start);
        n
    }

    /// Appends an [`RecordKind::End`] record.
    pub fn end(&mut self, end_ns: u64, reason: u32) {
        let start = self.begin(RecordKind::End, 0);
        self.u64(end_ns);
        self.u32(reason);
        self.u32(0);
        self.finish(start);
    }

    /// Appends a [`RecordKind::Strings`] record defining `(id, string)` pairs.
    pub fn strings<'s>(&mut self, items: impl IntoIterator<Item = (u32, &'s str)>) {
        let start = self.begin(RecordKind::Strings, 0);
        for (id, s) in items {
            self.u32(id);
            self.u32(s.len() as u32);
            self.buf.extend_from_slice(s.as_bytes());
            let pad = pad8(s.len()) - s.len();
            self.buf.extend(std::iter::repeat_n(0u8, pad));
        }
        self.finish(start);
    }

    /// Appends a [`RecordKind::Samples`] record. Returns the number of entries written.
    pub fn samples(
        &mut self,
        head: &SamplesHead,
        entries: impl IntoIterator<Item = SampleEntry>,
    ) -> u32 {
        let start = self.begin(RecordKind::Samples, 0);
        self.u64(head.start_ns);
        self.u64(head.dur_ns);
        self.u32(head.flags);
        self.u32(head.event_sid);
        self.u64(head.period);
        self.u64(head.total);
        self.u64(head.lost);
        let n_at = self.buf.len();
        self.u32(0);
        self.u32(0);
        let mut n = 0u32;
        for e in entries {
            self.u32(e.program);
            self.u32(e.image);
            self.u32(e.function);
            self.u32(0);
            self.u64(e.count);
            n += 1;
        }
        self.patch_u32(n_at, n);
        self.finish(start);
        n
    }

    /// Appends an [`RecordKind::Events`] record. Returns the number of entries written.
    pub fn events(
        &mut self,
        start_ns: u64,
        dur_ns: u64,
        flags: u32,
        entries: impl IntoIterator<Item = EventEntry>,
    ) -> u32 {
        let start = self.begin(RecordKind::Events, 0);
        self.u64(start_ns);
        self.u64(dur_ns);
        self.u32(flags);
        let n_at = self.buf.len();
        self.u32(0);
        let mut n = 0u32;
        for e in entries {
            self.u32(e.event);
            self.u32(0);
            self.u64(e.count);
            n += 1;
        }
        self.patch_u32(n_at, n);
        self.finish(start);
        n
    }
}

impl RecordBuf {
    /// Writes the interval a per-interval record belongs to (its first 20 bytes).
    pub(crate) fn interval_ref(&mut self, r: &IntervalRef) {
        self.u64(r.start_ns);
        self.u64(r.dur_ns);
        self.u32(r.flags);
    }

    /// Appends a [`RecordKind::Unwound`] record. Returns the number of entries written.
    pub fn unwound(
        &mut self,
        r: &IntervalRef,
        entries: impl IntoIterator<Item = UnwoundEntry>,
    ) -> u32 {
        let start = self.begin(RecordKind::Unwound, 0);
        self.interval_ref(r);
        let n_at = self.buf.len();
        self.u32(0);
        let mut n = 0u32;
        for e in entries {
            self.u64(e.addr);
            self.u64(e.calls);
            n += 1;
        }
        self.patch_u32(n_at, n);
        self.finish(start);
        n
    }

    /// Appends a [`RecordKind::Edges`] record; `dropped` counts calls whose edge could not be
    /// recorded. Returns the number of entries written.
    pub fn edges(
        &mut self,
        r: &IntervalRef,
        dropped: u32,
        entries: impl IntoIterator<Item = EdgeEntry>,
    ) -> u32 {
        let start = self.begin(RecordKind::Edges, 0);
        self.interval_ref(r);
        let n_at = self.buf.len();
        self.u32(0);
        self.u32(dropped);
        self.u32(0);
        let mut n = 0u32;
        for e in entries {
            self.u64(e.caller);
            self.u64(e.callee);
            self.u64(e.calls);
            self.u64(e.excl_ns);
            self.u64(e.incl_ns);
            n += 1;
        }
        self.patch_u32(n_at, n);
        self.finish(start);
        n
    }

    /// Appends a [`RecordKind::Wakeups`] record (the `interval` field of `w` is ignored: `r`
    /// names the interval).
    pub fn wakeups(&mut self, r: &IntervalRef, w: &WakeupsRec) {
        let start = self.begin(RecordKind::Wakeups, 0);
        self.interval_ref(r);
        self.u32(w.wakeups);
        self.u32(w.late);
        self.u32(0);
        self.u64(w.late_ns);
        self.u64(w.max_late_ns);
        self.u64(w.moved);
        self.u64(w.written_late_ns);
        self.finish(start);
    }

    /// Appends a [`RecordKind::Lost`] record (the `interval` field of `l` is ignored: `r` names
    /// the interval).
    pub fn lost(&mut self, r: &IntervalRef, l: &LostRec) {
        let start = self.begin(RecordKind::Lost, 0);
        self.interval_ref(r);
        self.u32(l.whose);
        self.u64(l.samples);
        self.u64(l.events);
        self.u64(l.tracking);
        self.finish(start);
    }

    /// Appends a [`RecordKind::Stacks`] record: per distinct call chain of a program, the
    /// samples that had it; frames are `(image, function)` string ids, outermost first.
    /// Returns the number of entries written.
    pub fn stacks<'f>(
        &mut self,
        r: &IntervalRef,
        entries: impl IntoIterator<Item = (u32, u64, &'f [(u32, u32)])>,
    ) -> u32 {
        let start = self.begin(RecordKind::Stacks, 0);
        self.interval_ref(r);
        let n_at = self.buf.len();
        self.u32(0);
        let mut n = 0u32;
        for (program, count, frames) in entries {
            let frames = &frames[..frames.len().min(u16::MAX as usize)];
            self.u32(program);
            self.u32(frames.len() as u32);
            self.u64(count);
            for &(image, function) in frames {
                self.u32(image);
                self.u32(function);
            }
            n += 1;
        }
        self.patch_u32(n_at, n);
        self.finish(start);
        n
    }

    /// Appends a [`RecordKind::Histograms`] record: per function, its address, a 64-bit mask
    /// of the non-empty buckets and their counts (u32 each, saturated), padded to 8 bytes.
    /// Functions without a call are left out. Returns the number of functions written.
    pub fn histograms<'h>(
        &mut self,
        r: &IntervalRef,
        entries: impl IntoIterator<Item = &'h Histogram>,
    ) -> u32 {
        let start = self.begin(RecordKind::Histograms, 0);
        self.interval_ref(r);
        let n_at = self.buf.len();
        self.u32(0);
        let mut n = 0u32;
        for h in entries {
            let mask = h
                .counts
                .iter()
                .enumerate()
                .filter(|(_, &c)| c > 0)
                .fold(0u64, |m, (k, _)| m | 1 << k);
            if mask == 0 {
                continue;
            }
            self.u64(h.addr);
            self.u64(mask);
            for &c in h.counts.iter().filter(|&&c| c > 0) {
                self.u32(c.min(u32::MAX as u64) as u32);
            }
            if mask.count_ones() % 2 == 1 {
                self.u32(0);
            }
            n += 1;
        }
        self.patch_u32(n_at, n);
        self.finish(start);
        n
    }

    /// Appends a [`RecordKind::OsMetrics`] record. Entries whose value is not finite are left
    /// out (absent). Returns the number of entries written.
    pub fn os_metrics(
        &mut self,
        head: &OsMetricsHead,
        entries: impl IntoIterator<Item = OsMetricEntry>,
    ) -> u32 {
        let start = self.begin(RecordKind::OsMetrics, 0);
        self.u64(head.start_ns);
        self.u64(head.dur_ns);
        self.u64(head.span_ns);
        self.u32(head.flags);
        let n_at = self.buf.len();
        self.u32(0);
        let mut n = 0u32;
        for e in entries.into_iter().filter(|e| e.value.is_finite()) {
            self.u32(e.metric);
            self.u32(e.instance.unwrap_or(NO_INSTANCE));
            self.u32(e.unit);
            self.u32(0);
            self.u64(e.value.to_bits());
            n += 1;
        }
        self.patch_u32(n_at, n);
        self.finish(start);
        n
    }
}

fn escape_into(v: &str, out: &mut Vec<u8>) {
    for &b in v.as_bytes() {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\0' => out.extend_from_slice(b"\\0"),
            _ => out.push(b),
        }
    }
}

impl RecordBuf {
    /// Appends a [`RecordKind::Layers`] record: the layer table, then the events (each event's
    /// `layer` is an id of the table). Returns the number of events written.
    pub fn layers<'l>(
        &mut self,
        head: &LayersHead,
        layers: impl IntoIterator<Item = &'l LayerDesc<'l>>,
        events: impl IntoIterator<Item = LayerEvent>,
    ) -> u32 {
        let start = self.begin(RecordKind::Layers, 0);
        self.u64(head.span_start_ns);
        self.u64(head.span_end_ns);
        self.u32(0);
        let nl_at = self.len();
        self.u32(0);
        let ne_at = self.len();
        self.u32(0);
        self.u32(head.dropped);
        let mut nl = 0u32;
        for l in layers {
            let name = truncated(&l.name, MAX_LAYER_NAME);
            self.bytes(&l.id.to_le_bytes());
            self.bytes(&(name.len() as u16).to_le_bytes());
            self.bytes(&l.level.to_le_bytes());
            self.bytes(name.as_bytes());
            self.bytes(&[0u8; 8][..pad8(name.len()) - name.len()]);
            nl += 1;
        }
        let mut ne = 0u32;
        for e in events {
            self.bytes(&e.to_bytes());
            ne += 1;
        }
        self.patch_u32(nl_at, nl);
        self.patch_u32(ne_at, ne);
        self.finish(start);
        ne
    }
}

impl RecordBuf {
    /// Appends a [`RecordKind::Requests`] record. Returns the number of events written.
    pub fn requests(
        &mut self,
        head: &crate::requests::RequestsHead,
        events: impl IntoIterator<Item = crate::requests::RequestEvent>,
    ) -> u32 {
        let start = self.begin(RecordKind::Requests, 0);
        self.u64(head.span_start_ns);
        self.u64(head.span_end_ns);
        self.u32(0);
        let ne_at = self.len();
        self.u32(0);
        self.u32(head.dropped);
        self.u32(head.sample_every);
        let mut ne = 0u32;
        for e in events {
            self.bytes(&e.to_bytes());
            ne += 1;
        }
        self.patch_u32(ne_at, ne);
        self.finish(start);
        ne
    }
}

/// `s` cut to at most `max` bytes at a character boundary.
fn truncated(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
