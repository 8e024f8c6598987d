//! Reading a stream of records from a file (or anything [`ReadAt`]) as its writer appends to
//! it: the one reader of `.cul` data for `culprit report`, `diagnose`, `train` and the exports.
//!
//! A [`StreamReader`] reads the header, then one committed record at a time: memory is bounded
//! by the largest record (and a record's checksum is verified in pieces before a large one is
//! held whole), never by the file or by what its header claims. It tails a growing file:
//! [`StreamReader::poll`] re-reads the header for the new `committed_end`, and a reader can be
//! [resumed](StreamReader::resume) at a saved [offset](StreamReader::offset) — by a later
//! refresh of the same analysis, or by a shipper forwarding records elsewhere.
//!
//! Damage is found, never guessed past: a record that fails validation, or a file that ends
//! before its `committed_end`, puts the stream in [`StreamState::Damaged`] with where and why;
//! the records before it stay good and nothing after it is read.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use crate::crc::record_crc;
use crate::decode::{decode_record, parse_header, pending_records, Pending, RecordHead};
use crate::layout::*;
use crate::{FormatError, Record};

/// Random access to a stream's bytes.
pub trait ReadAt {
    /// Reads up to `buf.len()` bytes at `offset` (like `pread`: possibly fewer, 0 at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;

    /// Bytes in the stream now.
    fn size(&self) -> io::Result<u64>;

    /// True while the stream's writer may still be writing its header (a header of zeros is
    /// then not damage).
    fn settling(&self) -> bool {
        false
    }
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, offset)
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
}

/// Bytes in memory (a file read whole, a message's payload).
impl ReadAt for &[u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.len());
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }

    fn size(&self) -> io::Result<u64> {
        Ok(self.len() as u64)
    }
}

impl<T: ReadAt + ?Sized> ReadAt for Box<T> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        (**self).read_at(buf, offset)
    }

    fn size(&self) -> io::Result<u64> {
        (**self).size()
    }

    fn settling(&self) -> bool {
        (**self).settling()
    }
}

/// Reads up to `buf.len()` bytes at `offset`, fewer only at the end of the stream.
pub fn read_fully(f: &(impl ReadAt + ?Sized), buf: &mut [u8], offset: u64) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Where and why a stream is damaged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Damage {
    /// File offset of the first byte not trusted.
    pub offset: u64,
    /// What is wrong, for people.
    pub reason: String,
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// What state a stream is in, as far as it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamState {
    /// No end marker yet: the writer is running, or it died (a crash, `kill -9`).
    Open,
    /// Every committed record was read and the writer marked the file ended.
    Ended,
    /// A record failed validation or the stream was cut short; nothing past it is read.
    Damaged(Damage),
}

/// Why a stream cannot be opened.
#[derive(Debug)]
#[non_exhaustive]
pub enum OpenError {
    /// The header is still zero while the writer may be writing it
    /// ([`ReadAt::settling`]): try again later.
    NotYet,
    /// Reading failed.
    Io(io::Error),
    /// The header is not a valid one (or needs a newer reader).
    Format(FormatError),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::NotYet => f.write_str("its header is not written yet"),
            OpenError::Io(e) => write!(f, "cannot read: {e}"),
            OpenError::Format(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for OpenError {}

/// Records at most this long are read whole at once; a longer one has its checksum verified in
/// pieces of this size first, so a corrupt length costs no memory.
const CHUNK: usize = 1 << 20;

/// Committed bytes read at once: the small records of a stream come a window at a time, not a
/// system call or three each (measured: 8 files of 100,000 records, 2.4 million calls before).
const WINDOW: usize = 256 << 10;

/// A reader of one stream's committed records. See the module documentation.
#[derive(Debug)]
pub struct StreamReader<R> {
    src: R,
    header: FileHeader,
    kind: FileKind,
    pos: u64,
    state: StreamState,
    /// Committed bytes of the stream from `buf_at`: the current record, and those after it
    /// that one read brought along.
    buf: Vec<u8>,
    buf_at: u64,
    /// The checkpoint's bytes (not committed: rewritten by the writer, never in `buf`).
    pending: Vec<u8>,
}

impl<R: ReadAt> StreamReader<R> {
    /// Reads the header of `src`; the reader stands at the first record.
    pub fn open(src: R) -> Result<Self, OpenError> {
        let mut r = Self::start(src)?;
        r.pos = r.header.data_offset;
        Ok(r)
    }

    /// Reads the header of `src`; the reader stands at `offset`, a record boundary an earlier
    /// reader of the same stream reached ([`StreamReader::offset`]). An offset outside the
    /// committed records makes the stream damaged.
    pub fn resume(src: R, offset: u64) -> Result<Self, OpenError> {
        let mut r = Self::start(src)?;
        r.pos = offset;
        if offset < r.header.data_offset || offset > r.header.committed_end {
            r.damage(offset, "resumed outside the committed records".into());
        }
        Ok(r)
    }

    fn start(src: R) -> Result<Self, OpenError> {
        let mut head = [0u8; 128];
        let n = read_fully(&src, &mut head, 0).map_err(OpenError::Io)?;
        if head.iter().all(|&b| b == 0) && src.settling() {
            return Err(OpenError::NotYet);
        }
        let (header, kind) = parse_header(&head[..n]).map_err(OpenError::Format)?;
        let mut r = StreamReader {
            src,
            header,
            kind,
            pos: 0,
            state: StreamState::Open,
            buf: Vec::new(),
            buf_at: 0,
            pending: Vec::new(),
        };
        r.settle_ended();
        Ok(r)
    }

    /// The header as last read.
    pub fn header(&self) -> &FileHeader {
        &self.header
    }

    /// What the stream holds.
    pub fn kind(&self) -> FileKind {
        self.kind
    }

    /// File offset of the next record: where a later reader can [resume](Self::resume).
    pub fn offset(&self) -> u64 {
        self.pos
    }

    /// The state as far as read.
    pub fn state(&self) -> &StreamState {
        &self.state
    }

    /// The stream, back.
    pub fn into_inner(self) -> R {
        self.src
    }

    /// Re-reads the header: records committed since become readable. A header that became
    /// invalid damages the stream.
    pub fn poll(&mut self) -> io::Result<()> {
        if matches!(self.state, StreamState::Damaged(_)) {
            return Ok(());
        }
        let mut head = [0u8; 128];
        let n = read_fully(&self.src, &mut head, 0)?;
        match parse_header(&head[..n]) {
            Ok((h, _)) if h.committed_end >= self.header.committed_end => {
                self.header = h;
                self.settle_ended();
            }
            Ok(_) => self.damage(0, "the header's committed end went backwards".into()),
            Err(e) => self.damage(0, format!("the header became invalid: {e}")),
        }
        Ok(())
    }

    fn damage(&mut self, offset: u64, reason: String) {
        self.state = StreamState::Damaged(Damage { offset, reason });
    }

    /// Ended when the writer marked the file ended and every committed record was read.
    fn settle_ended(&mut self) {
        if self.state == StreamState::Open
            && self.header.state == file_state::ENDED
            && self.pos == self.header.committed_end
        {
            self.state = StreamState::Ended;
        }
    }

    /// The next committed record, or `None` at the committed end (or once damaged: see
    /// [`StreamReader::state`]). A read error is returned and leaves the reader where it was,
    /// to try again.
    pub fn next_record(&mut self) -> io::Result<Option<Record<'_>>> {
        if matches!(self.state, StreamState::Damaged(_)) || self.pos >= self.header.committed_end {
            self.settle_ended();
            return Ok(None);
        }
        let at = self.pos;
        match self.read_record()? {
            Ok(range) => {
                let kind = RecordHead::parse(&self.buf[range.clone()])
                    .expect("checked")
                    .kind;
                let payload = range.start + RECORD_HEADER_SIZE..range.end;
                // Decoded twice (checked, then returned): the first borrow must end before
                // the reader is marked damaged.
                if let Err(reason) = decode_record(kind, &self.buf[payload.clone()]) {
                    self.damage(at, corrupt(at, reason));
                    return Ok(None);
                }
                self.pos += range.len() as u64;
                self.settle_ended();
                Ok(Some(
                    decode_record(kind, &self.buf[payload]).expect("decoded above"),
                ))
            }
            Err(reason) => {
                self.damage(at, reason);
                Ok(None)
            }
        }
    }

    /// Makes `buf` hold the committed bytes `at..at + need` (and up to [`WINDOW`] bytes more,
    /// to serve the next records without a system call). False when the stream ends first.
    fn fill(&mut self, at: u64, need: usize) -> io::Result<bool> {
        let have = self.buf_at..self.buf_at + self.buf.len() as u64;
        if have.contains(&at) && at + need as u64 <= have.end {
            return Ok(true);
        }
        let want = need
            .max(WINDOW)
            .min((self.header.committed_end - at) as usize)
            .max(need);
        if self.buf.capacity() > 2 * WINDOW && want <= WINDOW {
            // After a large record: give its memory back.
            self.buf = Vec::new();
        }
        self.buf.clear();
        self.buf.resize(want, 0);
        let got = read_fully(&self.src, &mut self.buf, at)?;
        self.buf.truncate(got);
        self.buf_at = at;
        Ok(got >= need)
    }

    /// Reads and checks the record at `pos`: where it is in `buf`, or why it is damaged.
    fn read_record(&mut self) -> io::Result<Result<std::ops::Range<usize>, String>> {
        let at = self.pos;
        let committed = self.header.committed_end;
        if committed - at < RECORD_HEADER_SIZE as u64 {
            return Ok(Err(corrupt(at, "record header past committed end")));
        }
        if !self.fill(at, RECORD_HEADER_SIZE)? {
            return Ok(Err(self.cut_short()?));
        }
        let start = (at - self.buf_at) as usize;
        let mut head = [0u8; RECORD_HEADER_SIZE];
        head.copy_from_slice(&self.buf[start..start + RECORD_HEADER_SIZE]);
        let h = match RecordHead::parse(&head) {
            Ok(h) => h,
            Err(reason) => return Ok(Err(corrupt(at, reason))),
        };
        let len = h.len as usize;
        if len as u64 > committed - at {
            return Ok(Err(corrupt(at, "record extends past committed end")));
        }
        if len > CHUNK {
            // Verify before holding it whole: a corrupt length must not cost its memory.
            let mut crc = record_crc(&head, self.header.version);
            let mut piece = vec![0u8; CHUNK];
            let mut off = at + RECORD_HEADER_SIZE as u64;
            while off < at + len as u64 {
                let n = ((at + len as u64 - off) as usize).min(CHUNK);
                if read_fully(&self.src, &mut piece[..n], off)? < n {
                    return Ok(Err(self.cut_short()?));
                }
                crc.update(&piece[..n]);
                off += n as u64;
            }
            if crc.finish() != h.crc {
                return Ok(Err(corrupt(at, "checksum mismatch")));
            }
        }
        if !self.fill(at, len)? {
            return Ok(Err(self.cut_short()?));
        }
        let start = (at - self.buf_at) as usize;
        let mut crc = record_crc(&head, self.header.version);
        crc.update(&self.buf[start + RECORD_HEADER_SIZE..start + len]);
        if crc.finish() != h.crc {
            return Ok(Err(corrupt(at, "checksum mismatch")));
        }
        Ok(Ok(start..start + len))
    }

    fn cut_short(&self) -> io::Result<String> {
        let committed = self.header.committed_end;
        Ok(format!(
            "file cut short ({} of {committed} committed bytes present)",
            self.src.size()?.min(committed)
        ))
    }

    /// The writer's checkpoint of the interval in progress (see [`FileHeader::pending_end`])
    /// when every committed record was read, the stream is open and the checkpoint is intact.
    /// Meaningful only when the writer is gone; the caller decides that. The checkpoint holds
    /// the Interval record and the tracer's records of that interval ([`Pending::extras`]).
    pub fn checkpoint(&mut self) -> io::Result<Option<Pending<'_>>> {
        let h = self.header;
        if self.state != StreamState::Open
            || self.pos != h.committed_end
            || h.pending_end <= h.committed_end
            || h.pending_end - h.committed_end > u64::from(MAX_RECORD_LEN)
            || h.pending_end > self.src.size()?
        {
            return Ok(None);
        }
        self.pending.clear();
        self.pending
            .resize((h.pending_end - h.committed_end) as usize, 0);
        if read_fully(&self.src, &mut self.pending, h.committed_end)? != self.pending.len() {
            return Ok(None);
        }
        Ok(pending_records(&self.pending, h.version))
    }
}

fn corrupt(offset: u64, reason: &str) -> String {
    format!("corrupt record at byte {offset}: {reason}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::RecordBuf;
    use crate::interval::IntervalHead;
    use crate::writer::header_page;

    /// A header page and two records; committed up to the end.
    fn file() -> Vec<u8> {
        let mut bytes = header_page(FileKind::Trace, 1, 2);
        let mut buf = RecordBuf::new();
        buf.info([("pid", "2")]);
        buf.interval(
            &IntervalHead {
                start_ns: 1_000,
                dur_ns: 1_000,
                ..Default::default()
            },
            [],
        );
        bytes.extend_from_slice(buf.as_bytes());
        set_committed(&mut bytes, None);
        bytes
    }

    fn set_committed(bytes: &mut [u8], end: Option<u64>) {
        let end = end.unwrap_or(bytes.len() as u64);
        bytes[HEADER_COMMITTED_END_OFFSET..HEADER_COMMITTED_END_OFFSET + 8]
            .copy_from_slice(&end.to_le_bytes());
    }

    fn kinds(r: &mut StreamReader<&[u8]>) -> Vec<&'static str> {
        let mut out = Vec::new();
        while let Some(rec) = r.next_record().unwrap() {
            out.push(match rec {
                Record::Info(_) => "info",
                Record::Interval(_) => "interval",
                Record::End(_) => "end",
                _ => "other",
            });
        }
        out
    }

    #[test]
    fn reads_committed_records_and_resumes_at_an_offset() {
        let bytes = file();
        let mut r = StreamReader::open(&bytes[..]).unwrap();
        assert_eq!(kinds(&mut r), ["info", "interval"]);
        assert_eq!(r.state(), &StreamState::Open);
        assert_eq!(r.offset(), bytes.len() as u64);
        // Only the first record committed: a reader sees it, then the second after a poll.
        let mut growing = bytes.clone();
        let first_end = DATA_OFFSET + 16 + 8;
        set_committed(&mut growing, Some(first_end));
        let mut r = StreamReader::open(&growing[..]).unwrap();
        assert_eq!(kinds(&mut r), ["info"]);
        let saved = r.offset();
        assert_eq!(saved, first_end);
        set_committed(&mut growing, None);
        let mut later = StreamReader::resume(&growing[..], saved).unwrap();
        assert_eq!(kinds(&mut later), ["interval"]);
        assert!(matches!(
            StreamReader::resume(&growing[..], 7).unwrap().state(),
            StreamState::Damaged(_)
        ));
    }

    #[test]
    fn a_flipped_kind_is_damage_and_old_files_check_the_payload_only() {
        let mut bytes = file();
        bytes[DATA_OFFSET as usize + 24] ^= 0x01; // the kind of the second record
        let mut r = StreamReader::open(&bytes[..]).unwrap();
        assert_eq!(kinds(&mut r), ["info"]);
        match r.state() {
            StreamState::Damaged(d) => {
                assert_eq!(d.offset, DATA_OFFSET + 24);
                assert_eq!(
                    d.reason,
                    format!(
                        "corrupt record at byte {}: checksum mismatch",
                        DATA_OFFSET + 24
                    )
                );
            }
            s => panic!("{s:?}"),
        }
        // Files of versions 2 and 3: CRCs of payloads; the reader checks them that way.
        for version in [2u16, 3] {
            let mut old = file();
            old[8..10].copy_from_slice(&version.to_le_bytes());
            let mut at = DATA_OFFSET as usize;
            while at < old.len() {
                let len = u32::from_le_bytes(old[at + 4..at + 8].try_into().unwrap()) as usize;
                let crc = crate::crc32(&old[at + 16..at + len]);
                old[at + 8..at + 12].copy_from_slice(&crc.to_le_bytes());
                at += len;
            }
            let mut r = StreamReader::open(&old[..]).unwrap();
            assert_eq!(kinds(&mut r), ["info", "interval"], "version {version}");
            assert_eq!(r.state(), &StreamState::Open);
        }
    }

    #[test]
    fn a_checkpoint_read_between_polls_does_not_disturb_the_records() {
        use std::os::unix::fs::FileExt as _;
        let mut bytes = header_page(FileKind::Trace, 1, 2);
        let mut buf = RecordBuf::new();
        buf.info([("pid", "2")]);
        bytes.extend_from_slice(buf.as_bytes());
        let committed = bytes.len() as u64;
        let interval = |flags| {
            let mut b = RecordBuf::new();
            b.interval(
                &IntervalHead {
                    start_ns: 1_000,
                    dur_ns: 1_000,
                    flags,
                    ..Default::default()
                },
                [],
            );
            b
        };
        // For now, the checkpoint of the interval in progress follows the committed Info.
        bytes.extend_from_slice(interval(interval_flags::PARTIAL).as_bytes());
        set_committed(&mut bytes, Some(committed));
        let pending = bytes.len() as u64;
        bytes[HEADER_PENDING_END_OFFSET..HEADER_PENDING_END_OFFSET + 8]
            .copy_from_slice(&pending.to_le_bytes());
        let path = std::env::temp_dir().join(format!("culprit-read-cp-{}", std::process::id()));
        std::fs::write(&path, &bytes).unwrap();
        let mut r = StreamReader::open(File::open(&path).unwrap()).unwrap();
        assert!(matches!(r.next_record().unwrap(), Some(Record::Info(_))));
        assert!(r.next_record().unwrap().is_none());
        let cp = r.checkpoint().unwrap().expect("a checkpoint");
        assert_eq!(cp.interval.flags, interval_flags::PARTIAL);
        assert!(cp.extras.is_empty());
        // The writer commits the interval where its checkpoint was; the same reader reads it.
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(interval(0).as_bytes(), committed).unwrap();
        f.write_all_at(&pending.to_le_bytes(), HEADER_COMMITTED_END_OFFSET as u64)
            .unwrap();
        f.write_all_at(&0u64.to_le_bytes(), HEADER_PENDING_END_OFFSET as u64)
            .unwrap();
        r.poll().unwrap();
        match r.next_record().unwrap() {
            Some(Record::Interval(iv)) => assert_eq!(iv.flags, 0),
            other => panic!("{other:?}"),
        }
        assert_eq!(r.state(), &StreamState::Open);
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn a_huge_claim_is_a_short_file_not_an_allocation() {
        let mut bytes = file();
        set_committed(&mut bytes, Some(40 << 30));
        let mut r = StreamReader::open(&bytes[..]).unwrap();
        assert_eq!(kinds(&mut r), ["info", "interval"]);
        match r.state() {
            StreamState::Damaged(d) => assert_eq!(
                d.reason,
                format!(
                    "file cut short ({} of {} committed bytes present)",
                    bytes.len(),
                    40u64 << 30
                )
            ),
            s => panic!("{s:?}"),
        }
        assert!(r.buf.capacity() <= WINDOW);
    }
}
