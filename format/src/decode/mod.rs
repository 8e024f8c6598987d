//! The validating reader. Nothing here trusts the bytes: every length is checked, every record's
//! CRC verified, and a problem becomes a [`FormatError`] that says where and what, never a panic.
//!
//! This module reads the file: its header, the stream of records and its checkpoint, and it
//! dispatches each payload by kind. The records themselves, their shapes and how each is decoded,
//! live by who writes them: `traced.rs` (the tracer runtime's objects, intervals and the
//! records that go with an interval), `sampled.rs` (the sampler's), and the modules of the
//! larger families ([`crate::layers`], [`crate::requests`], [`crate::cost`]).

use std::fmt;

use crate::bytes::{le16, le32, le64};
use crate::crc::record_crc;
use crate::layout::*;

/// `len` and `is_empty` of records whose `n` entries are decoded lazily from their bytes
/// (defined before the modules of records, which use it by its name).
macro_rules! entry_count {
    ($($rec:ident),+) => {$(
        impl $rec<'_> {
            /// Number of entries.
            pub fn len(&self) -> usize {
                self.n as usize
            }

            /// True without entries.
            pub fn is_empty(&self) -> bool {
                self.n == 0
            }
        }
    )+};
}

/// A record with a head (`pub head: SomeHead`, the fixed fields declared once for the writer
/// and the reader) reads as its head's fields: `rec.start_ns` for `rec.head.start_ns`.
macro_rules! reads_as_head {
    ($($rec:ident: $head:ident),+) => {$(
        impl std::ops::Deref for $rec<'_> {
            type Target = $head;

            fn deref(&self) -> &$head {
                &self.head
            }
        }
    )+};
}

pub(crate) mod sampled;
pub(crate) mod traced;

pub use sampled::{
    EventEntry, EventsRec, LostRec, OsMetricEntry, OsMetricsHead, OsMetricsRec, SampleEntry,
    SamplesHead, SamplesRec, StackEntry, StacksRec, StringsRec,
};
pub use traced::{
    EdgeEntry, EdgesRec, Histogram, HistogramsRec, IntervalEntry, IntervalRec, ObjectRec,
    UnwoundEntry, UnwoundRec, WakeupsRec,
};

/// What is wrong with a file or a record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatError {
    /// The file is shorter than a header, or does not start with [`MAGIC`].
    NotCulprit,
    /// The file needs a newer reader.
    TooNew {
        /// Version the writer used.
        version: u16,
        /// Reader version needed.
        min_reader_version: u16,
    },
    /// The header is inconsistent.
    BadHeader(&'static str),
    /// A record failed validation at the given file offset.
    Corrupt {
        /// File offset of the record.
        offset: u64,
        /// What is wrong.
        reason: &'static str,
    },
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FormatError::NotCulprit => write!(f, "not a culprit data file (bad magic)"),
            FormatError::TooNew {
                version,
                min_reader_version,
            } => write!(
                f,
                "written by a newer culprit (format {version}, needs reader {min_reader_version}, \
                 this reader is {READER_VERSION}); upgrade culprit to read it"
            ),
            FormatError::BadHeader(why) => write!(f, "corrupt file header: {why}"),
            FormatError::Corrupt { offset, reason } => {
                write!(f, "corrupt record at byte {offset}: {reason}")
            }
        }
    }
}

impl std::error::Error for FormatError {}

/// A whole file's bytes with its decoded header.
#[derive(Clone, Debug)]
pub struct ParsedFile<'a> {
    /// The header.
    pub header: FileHeader,
    /// What the header's kind field says.
    pub kind: FileKind,
    /// True when the file ends before the header's `committed_end` (the file was cut short).
    pub truncated: bool,
    bytes: &'a [u8],
    end: usize,
}

impl<'a> ParsedFile<'a> {
    /// Validates the header of `bytes` (a whole file, or as much of it as was read).
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FormatError> {
        let (header, kind) = parse_header(bytes)?;
        let truncated = (bytes.len() as u64) < header.committed_end;
        let end = header.committed_end.min(bytes.len() as u64) as usize;
        Ok(ParsedFile {
            header,
            kind,
            truncated,
            bytes,
            end,
        })
    }

    /// True when the writer marked the file as cleanly ended.
    pub fn ended(&self) -> bool {
        self.header.state == file_state::ENDED
    }

    /// The checkpoint of the interval in progress (see [`FileHeader::pending_end`]), when the
    /// header announces one and the bytes hold it intact. Meaningful only when the writer is
    /// gone; the caller decides that.
    pub fn pending(&self) -> Option<IntervalRec<'a>> {
        let (c, p) = (self.header.committed_end, self.header.pending_end);
        if p <= c || p > self.bytes.len() as u64 || self.header.state == file_state::ENDED {
            return None;
        }
        pending_interval(&self.bytes[c as usize..p as usize], self.header.version)
    }

    /// The checkpoint with the records that go with its interval (see [`Self::pending`]).
    pub fn pending_records(&self) -> Option<Pending<'a>> {
        let (c, p) = (self.header.committed_end, self.header.pending_end);
        if p <= c || p > self.bytes.len() as u64 || self.header.state == file_state::ENDED {
            return None;
        }
        pending_records(&self.bytes[c as usize..p as usize], self.header.version)
    }

    /// The committed records, in file order.
    pub fn records(&self) -> Records<'a> {
        let start = (self.header.data_offset as usize).min(self.end);
        Records {
            bytes: self.bytes,
            pos: start,
            end: self.end,
            truncated: self.truncated,
            done: false,
            base: 0,
            version: self.header.version,
        }
    }
}

/// Validates a file header: the first bytes of a file (at least 128).
pub fn parse_header(bytes: &[u8]) -> Result<(FileHeader, FileKind), FormatError> {
    if bytes.len() < 128 || bytes[0..8] != MAGIC {
        return Err(FormatError::NotCulprit);
    }
    let header = FileHeader {
        magic: MAGIC,
        version: le16(bytes, 8),
        min_reader_version: le16(bytes, 10),
        header_size: le32(bytes, 12),
        kind: le32(bytes, 16),
        state: le32(bytes, 20),
        data_offset: le64(bytes, 24),
        committed_end: le64(bytes, 32),
        created_ns: le64(bytes, 40),
        pid: le32(bytes, 48),
        reserved0: 0,
        pending_end: le64(bytes, 56),
        stacks_offset: le64(bytes, 64),
        stacks_len: le64(bytes, 72),
        reserved: [0; 6],
    };
    if header.min_reader_version > READER_VERSION {
        return Err(FormatError::TooNew {
            version: header.version,
            min_reader_version: header.min_reader_version,
        });
    }
    let kind = FileKind::from_u32(header.kind).ok_or(FormatError::BadHeader("unknown kind"))?;
    if header.header_size < 128 || header.data_offset < header.header_size as u64 {
        return Err(FormatError::BadHeader("header size / data offset"));
    }
    if header.committed_end < header.data_offset {
        return Err(FormatError::BadHeader("committed end before data"));
    }
    Ok((header, kind))
}

/// Decodes `bytes` (the range `committed_end..pending_end` of a file) as a pending
/// checkpoint and returns its Interval record (see [`pending_records`]). `version` is the
/// file's format version.
pub fn pending_interval(bytes: &[u8], version: u16) -> Option<IntervalRec<'_>> {
    pending_records(bytes, version).map(|p| p.interval)
}

/// A checkpoint of the interval in progress: its Interval record and the records of that
/// interval that go with it.
#[derive(Clone, Debug)]
pub struct Pending<'a> {
    /// The Interval record (flagged [`interval_flags::PARTIAL`]).
    pub interval: IntervalRec<'a>,
    /// [`Record::Unwound`], [`Record::Edges`], [`Record::Histograms`] and [`Record::Cost`] of
    /// the same interval (format version 3 and later; Cost since 7).
    pub extras: Vec<Record<'a>>,
}

/// Decodes `bytes` (the range `committed_end..pending_end` of a file of format `version`) as a
/// pending checkpoint: one intact [`RecordKind::Interval`] record flagged
/// [`interval_flags::PARTIAL`], followed by nothing but intact Unwound, Edges, Histograms or
/// Cost records of the same interval. `None` for anything else (a reader may catch the writer
/// rewriting it: a checksum then fails).
pub fn pending_records(bytes: &[u8], version: u16) -> Option<Pending<'_>> {
    let mut recs = records_in(bytes, 0, version);
    let Record::Interval(interval) = recs.next()?.ok()? else {
        return None;
    };
    if interval.flags & interval_flags::PARTIAL == 0 {
        return None;
    }
    let mut extras = Vec::new();
    for rec in recs.by_ref() {
        let rec = rec.ok()?;
        let key = match &rec {
            Record::Unwound(r) => r.interval,
            Record::Edges(r) => r.interval,
            Record::Histograms(r) => r.interval,
            Record::Cost(r) => r.interval,
            _ => return None,
        };
        if key.start_ns != interval.start_ns {
            return None;
        }
        extras.push(rec);
    }
    if recs.offset() != bytes.len() as u64 {
        return None;
    }
    Some(Pending { interval, extras })
}

/// Iterates the records in `bytes`, whose first byte is at file offset `base_offset`. Used to
/// read a growing file incrementally: read the header for `committed_end`, then read and parse
/// only the bytes between the last position and `committed_end`. Offsets in errors and
/// [`Records::offset`] are file offsets. The records are checked as this crate writes them
/// ([`FORMAT_VERSION`]); [`records_in`] reads those of a file of another version.
pub fn records_at(bytes: &[u8], base_offset: u64) -> Records<'_> {
    records_in(bytes, base_offset, FORMAT_VERSION)
}

/// [`records_at`] for the records of a file of format `version` (its CRC rule).
pub fn records_in(bytes: &[u8], base_offset: u64, version: u16) -> Records<'_> {
    Records {
        bytes,
        pos: 0,
        end: bytes.len(),
        truncated: false,
        done: false,
        base: base_offset,
        version,
    }
}

/// Iterator over a file's committed records. After an error it yields nothing more: records
/// before the error are good, nothing after it is trusted.
#[derive(Clone, Debug)]
pub struct Records<'a> {
    bytes: &'a [u8],
    pos: usize,
    end: usize,
    truncated: bool,
    done: bool,
    base: u64,
    version: u16,
}

impl<'a> Records<'a> {
    /// File offset of the next record.
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// True when the iterator stopped at an error (nothing after it is trusted).
    pub fn failed(&self) -> bool {
        self.done && self.pos < self.end
    }

    fn corrupt(&mut self, reason: &'static str) -> Option<Result<Record<'a>, FormatError>> {
        self.done = true;
        Some(Err(FormatError::Corrupt {
            offset: self.offset(),
            reason,
        }))
    }
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<Record<'a>, FormatError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.end {
            return None;
        }
        let left = self.end - self.pos;
        if left < RECORD_HEADER_SIZE {
            return self.corrupt(if self.truncated {
                "file cut short inside a record"
            } else {
                "record header past committed end"
            });
        }
        let h = &self.bytes[self.pos..];
        let head = match RecordHead::parse(h) {
            Ok(head) => head,
            Err(reason) => return self.corrupt(reason),
        };
        if head.len as usize > left {
            return self.corrupt(if self.truncated {
                "file cut short inside a record"
            } else {
                "record extends past committed end"
            });
        }
        let rec = &h[..head.len as usize];
        let mut crc = record_crc(rec, self.version);
        crc.update(&rec[RECORD_HEADER_SIZE..]);
        if crc.finish() != head.crc {
            return self.corrupt("checksum mismatch");
        }
        let offset = self.offset();
        match decode_record(head.kind, &rec[RECORD_HEADER_SIZE..]) {
            Ok(r) => {
                self.pos += head.len as usize;
                Some(Ok(r))
            }
            Err(reason) => {
                self.done = true;
                Some(Err(FormatError::Corrupt { offset, reason }))
            }
        }
    }
}

/// A record header whose length is plausible (not yet checked against the bytes there are).
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecordHead {
    pub(crate) kind: u16,
    pub(crate) len: u32,
    pub(crate) crc: u32,
}

impl RecordHead {
    /// Checks the first [`RECORD_HEADER_SIZE`] bytes of `h`.
    pub(crate) fn parse(h: &[u8]) -> Result<RecordHead, &'static str> {
        let len = le32(h, 4);
        if len < RECORD_HEADER_SIZE as u32 || len % RECORD_ALIGN as u32 != 0 || len > MAX_RECORD_LEN
        {
            return Err("bad record length");
        }
        Ok(RecordHead {
            kind: le16(h, 0),
            len,
            crc: le32(h, 8),
        })
    }
}

/// Decodes a payload whose checksum was verified; a kind this reader does not know is
/// [`Record::Unknown`].
pub(crate) fn decode_record(kind: u16, payload: &[u8]) -> Result<Record<'_>, &'static str> {
    match RecordKind::from_u16(kind) {
        None => Ok(Record::Unknown { kind }),
        Some(k) => decode_payload(k, payload),
    }
}

/// One decoded record. Entry lists are decoded lazily from the borrowed bytes.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Record<'a> {
    /// `key=value` pairs.
    Info(Info),
    /// A loaded ELF object.
    Object(ObjectRec<'a>),
    /// A tracer interval profile.
    Interval(IntervalRec<'a>),
    /// Clean end.
    End(EndRec),
    /// String-table entries.
    Strings(StringsRec<'a>),
    /// A sampler interval profile.
    Samples(SamplesRec<'a>),
    /// Kernel event counts for an interval.
    Events(EventsRec<'a>),
    /// Calls of an interval left without returning (tracer).
    Unwound(UnwoundRec<'a>),
    /// Caller → callee edges of an interval (tracer).
    Edges(EdgesRec<'a>),
    /// Call-duration histograms of an interval (tracer).
    Histograms(HistogramsRec<'a>),
    /// Sampled call chains of an interval (sampler).
    Stacks(StacksRec<'a>),
    /// Black-box OS metrics of a node for an interval.
    OsMetrics(OsMetricsRec<'a>),
    /// A stretch of layer-boundary I/O events.
    Layers(crate::layers::LayersRec<'a>),
    /// A stretch of sampled requests and their calls (tracer).
    Requests(crate::requests::RequestsRec<'a>),
    /// The flusher's wake-ups in an interval and how late they came (tracer).
    Wakeups(WakeupsRec),
    /// Functions the tracer stopped tracing (its cost budget).
    Demotions(crate::cost::DemotionsRec),
    /// The process's CPU time and the tracer's estimate of its share, in an interval.
    Cost(crate::cost::CostRec),
    /// Records the kernel dropped in an interval, by kind (sampler).
    Lost(LostRec),
    /// A record kind this reader does not know (written by a newer compatible writer).
    Unknown {
        /// The kind number.
        kind: u16,
    },
}

/// Decoded [`RecordKind::Info`] pairs, in file order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Info {
    /// The pairs.
    pub pairs: Vec<(String, String)>,
}

impl Info {
    /// Decodes a [`RecordKind::Info`] payload, checking every length.
    pub(crate) fn decode(p: &[u8]) -> Result<Info, &'static str> {
        let text = std::str::from_utf8(p.split(|&b| b == 0).next().unwrap_or(&[]))
            .map_err(|_| "info record is not UTF-8")?;
        let mut pairs = Vec::new();
        for line in text.lines() {
            if line.is_empty() {
                continue;
            }
            let (k, v) = line.split_once('=').ok_or("info line without '='")?;
            pairs.push((k.to_string(), unescape(v)));
        }
        Ok(Info { pairs })
    }

    /// The value of `key`, if present (the last one wins).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// A decoded [`RecordKind::End`] record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndRec {
    /// Wall-clock ns of the end.
    pub end_ns: u64,
    /// [`end_reason`] value.
    pub reason: u32,
}

impl EndRec {
    /// Decodes a [`RecordKind::End`] payload, checking every length.
    pub(crate) fn decode(p: &[u8]) -> Result<EndRec, &'static str> {
        if p.len() < END_SIZE {
            return Err("end record too short");
        }
        Ok(EndRec {
            end_ns: le64(p, 0),
            reason: le32(p, 8),
        })
    }
}

fn decode_payload(kind: RecordKind, p: &[u8]) -> Result<Record<'_>, &'static str> {
    Ok(match kind {
        RecordKind::Info => Record::Info(Info::decode(p)?),
        RecordKind::Object => Record::Object(ObjectRec::decode(p)?),
        RecordKind::Interval => Record::Interval(IntervalRec::decode(p)?),
        RecordKind::End => Record::End(EndRec::decode(p)?),
        RecordKind::Strings => Record::Strings(StringsRec::decode(p)?),
        RecordKind::Samples => Record::Samples(SamplesRec::decode(p)?),
        RecordKind::Unwound => Record::Unwound(UnwoundRec::decode(p)?),
        RecordKind::Edges => Record::Edges(EdgesRec::decode(p)?),
        RecordKind::Histograms => Record::Histograms(HistogramsRec::decode(p)?),
        RecordKind::Wakeups => Record::Wakeups(WakeupsRec::decode(p)?),
        RecordKind::Lost => Record::Lost(LostRec::decode(p)?),
        RecordKind::Stacks => Record::Stacks(StacksRec::decode(p)?),
        RecordKind::Events => Record::Events(EventsRec::decode(p)?),
        RecordKind::Layers => Record::Layers(crate::layers::decode(p)?),
        RecordKind::Requests => Record::Requests(crate::requests::decode(p)?),
        RecordKind::Demotions => Record::Demotions(crate::cost::decode_demotions(p)?),
        RecordKind::Cost => Record::Cost(crate::cost::decode_cost(p)?),
        RecordKind::OsMetrics => Record::OsMetrics(OsMetricsRec::decode(p)?),
    })
}

fn unescape(v: &str) -> String {
    if !v.contains('\\') {
        return v.to_string();
    }
    let mut out = String::with_capacity(v.len());
    let mut it = v.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('0') => out.push('\0'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests;
