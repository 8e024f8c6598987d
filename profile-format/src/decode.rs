//! The validating reader. Nothing here trusts the bytes: every length is checked, every record's
//! CRC verified, and a problem becomes a [`FormatError`] that says where and what, never a panic.

use std::fmt;

use crate::crc::record_crc;
use crate::layout::*;

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

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
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
    /// [`Record::Unwound`], [`Record::Edges`] and [`Record::Histograms`] of the same interval
    /// (format version 3 and later).
    pub extras: Vec<Record<'a>>,
}

/// Decodes `bytes` (the range `committed_end..pending_end` of a file of format `version`) as a
/// pending checkpoint: one intact [`RecordKind::Interval`] record flagged
/// [`interval_flags::PARTIAL`], followed by nothing but intact Unwound, Edges or Histograms
/// records of the same interval. `None` for anything else (a reader may catch the writer
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
    /// The value of `key`, if present (the last one wins).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

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

/// A decoded [`RecordKind::Interval`] record.
#[derive(Clone, Debug)]
pub struct IntervalRec<'a> {
    /// Interval start, wall-clock ns.
    pub start_ns: u64,
    /// Interval length, ns.
    pub dur_ns: u64,
    /// [`interval_flags`] bits.
    pub flags: u32,
    /// Threads with a table during the interval.
    pub threads: u32,
    /// Frames dropped recovering from mismatched exits.
    pub lost_frames: u32,
    /// Calls not accounted for lack of room.
    pub overflows: u32,
    /// Calls not traced for other reasons (see `IntervalHead::dropped`); 0 in version-1 files.
    pub dropped: u32,
    n: u32,
    entries: &'a [u8],
}

impl<'a> IntervalRec<'a> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// True without entries.
    pub fn is_empty(&self) -> bool {
        self.n == 0
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

/// A decoded [`RecordKind::End`] record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndRec {
    /// Wall-clock ns of the end.
    pub end_ns: u64,
    /// [`end_reason`] value.
    pub reason: u32,
}

/// A decoded [`RecordKind::Strings`] record.
#[derive(Clone, Debug)]
pub struct StringsRec<'a> {
    payload: &'a [u8],
}

impl<'a> StringsRec<'a> {
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

/// A decoded [`RecordKind::Samples`] record.
#[derive(Clone, Debug)]
pub struct SamplesRec<'a> {
    /// Interval start, wall-clock ns.
    pub start_ns: u64,
    /// Interval length, ns.
    pub dur_ns: u64,
    /// [`interval_flags`] | [`samples_flags`] bits.
    pub flags: u32,
    /// String id of the event name.
    pub event_sid: u32,
    /// Period (or frequency with [`samples_flags::FREQ`]).
    pub period: u64,
    /// Samples taken.
    pub total: u64,
    /// Samples lost.
    pub lost: u64,
    n: u32,
    entries: &'a [u8],
}

impl<'a> SamplesRec<'a> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// True without entries.
    pub fn is_empty(&self) -> bool {
        self.n == 0
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
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// True without entries.
    pub fn is_empty(&self) -> bool {
        self.n == 0
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

/// The interval an [`UnwoundRec`], [`EdgesRec`] or [`HistogramsRec`] belongs to: the
/// Interval record of the same file with the same `start_ns` (written just before it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IntervalKey {
    /// Interval start, wall-clock ns.
    pub start_ns: u64,
    /// Interval length, ns.
    pub dur_ns: u64,
    /// [`interval_flags`] bits.
    pub flags: u32,
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
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// True without entries.
    pub fn is_empty(&self) -> bool {
        self.n == 0
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
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// True without entries.
    pub fn is_empty(&self) -> bool {
        self.n == 0
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
    /// Number of functions.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// True without functions.
    pub fn is_empty(&self) -> bool {
        self.n == 0
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
    /// True when the counts are this node's own, not the machine's.
    pub fn is_own(&self) -> bool {
        self.whose == lost_whose::NODE
    }
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
    /// Number of chains.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// True without chains.
    pub fn is_empty(&self) -> bool {
        self.n == 0
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

fn interval_key(p: &[u8]) -> IntervalKey {
    IntervalKey {
        start_ns: le64(p, 0),
        dur_ns: le64(p, 8),
        flags: le32(p, 16),
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

/// A decoded [`RecordKind::OsMetrics`] record. A metric without an entry is absent in this
/// interval (not zero).
#[derive(Clone, Debug)]
pub struct OsMetricsRec<'a> {
    /// Interval start, wall-clock ns.
    pub start_ns: u64,
    /// Interval length, ns.
    pub dur_ns: u64,
    /// Time between the two reads the rates come from, ns (monotonic clock; near `dur_ns`).
    /// Longer than `dur_ns` when the later read came late: its rates are averages over the
    /// span, written for each interval the span covers (the sampler since format version 7;
    /// before, such intervals were written MISSED).
    pub span_ns: u64,
    /// [`interval_flags`] bits.
    pub flags: u32,
    n: u32,
    entries: &'a [u8],
}

impl<'a> OsMetricsRec<'a> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.n as usize
    }

    /// True without entries.
    pub fn is_empty(&self) -> bool {
        self.n == 0
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

fn entries_slice(p: &[u8], fixed: usize, n: u32, size: usize) -> Result<&[u8], &'static str> {
    let need = (n as usize)
        .checked_mul(size)
        .and_then(|x| x.checked_add(fixed))
        .ok_or("entry count overflows")?;
    if need > p.len() {
        return Err("entry count exceeds record length");
    }
    Ok(&p[fixed..need])
}

fn decode_payload(kind: RecordKind, p: &[u8]) -> Result<Record<'_>, &'static str> {
    Ok(match kind {
        RecordKind::Info => {
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
            Record::Info(Info { pairs })
        }
        RecordKind::Object => {
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
            Record::Object(ObjectRec {
                id: le32(p, 0),
                flags: le32(p, 4),
                bias: le64(p, 8),
                start: le64(p, 16),
                end: le64(p, 24),
                build_id: bid,
                path: String::from_utf8_lossy(path),
            })
        }
        RecordKind::Interval => {
            if p.len() < INTERVAL_FIXED_SIZE {
                return Err("interval record too short");
            }
            let n = le32(p, 24);
            Record::Interval(IntervalRec {
                start_ns: le64(p, 0),
                dur_ns: le64(p, 8),
                flags: le32(p, 16),
                threads: le32(p, 20),
                lost_frames: le32(p, 28),
                overflows: le32(p, 32),
                dropped: le32(p, 36),
                n,
                entries: entries_slice(p, INTERVAL_FIXED_SIZE, n, INTERVAL_ENTRY_SIZE)?,
            })
        }
        RecordKind::End => {
            if p.len() < END_SIZE {
                return Err("end record too short");
            }
            Record::End(EndRec {
                end_ns: le64(p, 0),
                reason: le32(p, 8),
            })
        }
        RecordKind::Strings => {
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
            Record::Strings(StringsRec {
                payload: &p[..pos.min(p.len())],
            })
        }
        RecordKind::Samples => {
            if p.len() < SAMPLES_FIXED_SIZE {
                return Err("samples record too short");
            }
            let n = le32(p, 48);
            Record::Samples(SamplesRec {
                start_ns: le64(p, 0),
                dur_ns: le64(p, 8),
                flags: le32(p, 16),
                event_sid: le32(p, 20),
                period: le64(p, 24),
                total: le64(p, 32),
                lost: le64(p, 40),
                n,
                entries: entries_slice(p, SAMPLES_FIXED_SIZE, n, SAMPLES_ENTRY_SIZE)?,
            })
        }
        RecordKind::Unwound => {
            if p.len() < UNWOUND_FIXED_SIZE {
                return Err("unwound record too short");
            }
            let n = le32(p, 20);
            Record::Unwound(UnwoundRec {
                interval: interval_key(p),
                n,
                entries: entries_slice(p, UNWOUND_FIXED_SIZE, n, UNWOUND_ENTRY_SIZE)?,
            })
        }
        RecordKind::Edges => {
            if p.len() < EDGES_FIXED_SIZE {
                return Err("edges record too short");
            }
            let n = le32(p, 20);
            Record::Edges(EdgesRec {
                interval: interval_key(p),
                dropped: le32(p, 24),
                n,
                entries: entries_slice(p, EDGES_FIXED_SIZE, n, EDGES_ENTRY_SIZE)?,
            })
        }
        RecordKind::Histograms => {
            if p.len() < HISTOGRAMS_FIXED_SIZE {
                return Err("histograms record too short");
            }
            let n = le32(p, 20);
            Record::Histograms(HistogramsRec {
                interval: interval_key(p),
                n,
                entries: histogram_entries(p, n)?,
            })
        }
        RecordKind::Wakeups => {
            if p.len() < WAKEUPS_SIZE {
                return Err("wakeups record too short");
            }
            Record::Wakeups(WakeupsRec {
                interval: interval_key(p),
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
        RecordKind::Lost => {
            if p.len() < LOST_SIZE {
                return Err("lost record too short");
            }
            Record::Lost(LostRec {
                interval: interval_key(p),
                whose: le32(p, 20),
                samples: le64(p, 24),
                events: le64(p, 32),
                tracking: le64(p, 40),
            })
        }
        RecordKind::Stacks => {
            if p.len() < STACKS_FIXED_SIZE {
                return Err("stacks record too short");
            }
            let n = le32(p, 20);
            Record::Stacks(StacksRec {
                interval: interval_key(p),
                n,
                entries: stack_entries(p, n)?,
            })
        }
        RecordKind::Events => {
            if p.len() < EVENTS_FIXED_SIZE {
                return Err("events record too short");
            }
            let n = le32(p, 20);
            Record::Events(EventsRec {
                start_ns: le64(p, 0),
                dur_ns: le64(p, 8),
                flags: le32(p, 16),
                n,
                entries: entries_slice(p, EVENTS_FIXED_SIZE, n, EVENTS_ENTRY_SIZE)?,
            })
        }
        RecordKind::Layers => Record::Layers(crate::layers::decode(p)?),
        RecordKind::Requests => Record::Requests(crate::requests::decode(p)?),
        RecordKind::OsMetrics => {
            if p.len() < OS_METRICS_FIXED_SIZE {
                return Err("os metrics record too short");
            }
            let n = le32(p, 28);
            Record::OsMetrics(OsMetricsRec {
                start_ns: le64(p, 0),
                dur_ns: le64(p, 8),
                span_ns: le64(p, 16),
                flags: le32(p, 24),
                n,
                entries: entries_slice(p, OS_METRICS_FIXED_SIZE, n, OS_METRICS_ENTRY_SIZE)?,
            })
        }
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
mod tests {
    use super::*;
    use crate::encode::{IntervalHead, RecordBuf};
    use crate::writer::header_page;

    /// A file with one committed Info record and a checkpoint past it.
    fn file_with_checkpoint(flags: u32) -> Vec<u8> {
        let mut bytes = header_page(FileKind::Trace, 1, 2);
        let mut buf = RecordBuf::new();
        buf.info([("pid", "2")]);
        bytes.extend_from_slice(buf.as_bytes());
        let committed = bytes.len() as u64;
        buf.clear();
        buf.interval(
            &IntervalHead {
                start_ns: 1_000,
                dur_ns: 1_000,
                flags,
                dropped: 3,
                ..Default::default()
            },
            [IntervalEntry {
                addr: 0x10,
                calls: 7,
                excl_ns: 1,
                incl_ns: 1,
            }],
        );
        bytes.extend_from_slice(buf.as_bytes());
        let pending = bytes.len() as u64;
        bytes[HEADER_COMMITTED_END_OFFSET..HEADER_COMMITTED_END_OFFSET + 8]
            .copy_from_slice(&committed.to_le_bytes());
        bytes[HEADER_PENDING_END_OFFSET..HEADER_PENDING_END_OFFSET + 8]
            .copy_from_slice(&pending.to_le_bytes());
        bytes
    }

    #[test]
    fn checkpoint_is_read_only_when_intact() {
        let bytes = file_with_checkpoint(interval_flags::PARTIAL);
        let pf = ParsedFile::parse(&bytes).unwrap();
        assert_eq!(pf.records().count(), 1, "the checkpoint is not committed");
        let iv = pf.pending().expect("checkpoint");
        assert_eq!(iv.entries().next().unwrap().calls, 7);
        assert_eq!(iv.dropped, 3);
        // Torn (the writer rewriting it): ignored.
        let mut torn = bytes.clone();
        let n = torn.len();
        torn[n - 8] ^= 0xff;
        assert!(ParsedFile::parse(&torn).unwrap().pending().is_none());
        // Not flagged partial, or cut off: ignored.
        let full = file_with_checkpoint(0);
        assert!(ParsedFile::parse(&full).unwrap().pending().is_none());
        assert!(ParsedFile::parse(&bytes[..n - 8])
            .unwrap()
            .pending()
            .is_none());
        // Version-1 files (pending_end 0) have none.
        let mut v1 = bytes.clone();
        v1[HEADER_PENDING_END_OFFSET..HEADER_PENDING_END_OFFSET + 8].fill(0);
        assert!(ParsedFile::parse(&v1).unwrap().pending().is_none());
    }
}
