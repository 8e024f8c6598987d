//! Decoding perf records (the bytes of a ring buffer or of a `perf.data` file's data section).
//!
//! Layouts follow `<linux/perf_event.h>`: a record is an 8-byte header (type, misc, size) and a
//! body whose sample fields depend on the event's `sample_type`; with `sample_id_all` every
//! non-sample record ends with the "sample id" trailer (TID, TIME, ID, STREAM_ID, CPU,
//! IDENTIFIER, those that are set). Nothing here trusts the bytes: a short or inconsistent
//! record decodes to [`Rec::Malformed`], never a panic.

use perf_event_open_sys::bindings as b;

const SAMPLE_IP: u64 = b::PERF_SAMPLE_IP as u64;
const SAMPLE_TID: u64 = b::PERF_SAMPLE_TID as u64;
const SAMPLE_TIME: u64 = b::PERF_SAMPLE_TIME as u64;
const SAMPLE_ADDR: u64 = b::PERF_SAMPLE_ADDR as u64;
const SAMPLE_READ: u64 = b::PERF_SAMPLE_READ as u64;
const SAMPLE_CALLCHAIN: u64 = b::PERF_SAMPLE_CALLCHAIN as u64;
const SAMPLE_ID: u64 = b::PERF_SAMPLE_ID as u64;
const SAMPLE_CPU: u64 = b::PERF_SAMPLE_CPU as u64;
const SAMPLE_PERIOD: u64 = b::PERF_SAMPLE_PERIOD as u64;
const SAMPLE_STREAM_ID: u64 = b::PERF_SAMPLE_STREAM_ID as u64;
const SAMPLE_RAW: u64 = b::PERF_SAMPLE_RAW as u64;
const SAMPLE_IDENTIFIER: u64 = b::PERF_SAMPLE_IDENTIFIER as u64;

/// `misc` bit of COMM records written by `exec`.
pub const MISC_COMM_EXEC: u16 = b::PERF_RECORD_MISC_COMM_EXEC as u16;
/// `misc` bits giving the CPU mode of a sample.
pub const MISC_CPUMODE_MASK: u16 = b::PERF_RECORD_MISC_CPUMODE_MASK as u16;
/// CPU mode: kernel.
pub const MISC_KERNEL: u16 = b::PERF_RECORD_MISC_KERNEL as u16;
/// CPU mode: user.
pub const MISC_USER: u16 = b::PERF_RECORD_MISC_USER as u16;
const MISC_MMAP_BUILD_ID: u16 = b::PERF_RECORD_MISC_MMAP_BUILD_ID as u16;

/// How the records of one stream are laid out: the event's `sample_type` and `sample_id_all`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `perf_event_attr.sample_type`.
    pub sample_type: u64,
    /// `perf_event_attr.sample_id_all`.
    pub sample_id_all: bool,
}

impl Layout {
    /// Size of the sample-id trailer of non-sample records.
    fn trailer_size(&self) -> usize {
        if !self.sample_id_all {
            return 0;
        }
        let st = self.sample_type;
        [
            SAMPLE_TID,
            SAMPLE_TIME,
            SAMPLE_ID,
            SAMPLE_STREAM_ID,
            SAMPLE_CPU,
            SAMPLE_IDENTIFIER,
        ]
        .iter()
        .filter(|&&bit| st & bit != 0)
        .count()
            * 8
    }

    /// The position of the identifier in a sample body (`Some(0)` with IDENTIFIER, else the
    /// position of ID when set), for streams that mix events.
    pub fn sample_id_pos(&self) -> Option<usize> {
        let st = self.sample_type;
        if st & SAMPLE_IDENTIFIER != 0 {
            return Some(0);
        }
        if st & SAMPLE_ID == 0 {
            return None;
        }
        let before = [SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME, SAMPLE_ADDR];
        Some(before.iter().filter(|&&bit| st & bit != 0).count() * 8)
    }
}

/// One decoded sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Sample<'a> {
    /// Event id (with IDENTIFIER or ID in the sample type).
    pub id: Option<u64>,
    /// Instruction pointer.
    pub ip: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Timestamp (ns of the event's clock).
    pub time: u64,
    /// CPU.
    pub cpu: u32,
    /// Header `misc` (CPU mode).
    pub misc: u16,
    /// Raw tracepoint data (without the size prefix), with RAW in the sample type.
    pub raw: Option<&'a [u8]>,
    /// The call chain's entries as the kernel wrote them (`u64`s, little-endian, context
    /// markers included), with CALLCHAIN in the sample type; empty otherwise.
    pub callchain: &'a [u8],
}

impl Sample<'_> {
    /// The call chain's entries (see [`Sample::callchain`]).
    pub fn chain(&self) -> impl Iterator<Item = u64> + '_ {
        self.callchain
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
    }
}

/// Fields of the sample-id trailer of non-sample records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleId {
    /// Process id of the task the record is about (or current).
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Timestamp.
    pub time: Option<u64>,
    /// Event id.
    pub id: Option<u64>,
}

/// A PERF_RECORD_MMAP / MMAP2 record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mmap<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Start address.
    pub start: u64,
    /// Length.
    pub len: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// Device major / minor and inode (MMAP2 without build-id), for image identity.
    pub dev_ino: Option<(u32, u32, u64)>,
    /// Executable mapping (MMAP2 `prot` has PROT_EXEC; MMAP records without the data flag).
    pub exec: bool,
    /// File name bytes (NUL stripped).
    pub filename: &'a [u8],
}

/// A decoded record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rec<'a> {
    /// A sample.
    Sample(Sample<'a>),
    /// An executable (or data) mapping.
    Mmap(Mmap<'a>, SampleId),
    /// A name change; `exec` when written by `exec`.
    Comm {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// New name (NUL stripped).
        comm: &'a [u8],
        /// Written by exec.
        exec: bool,
        /// Trailer.
        sid: SampleId,
    },
    /// A new process or thread.
    Fork {
        /// New process id.
        pid: u32,
        /// Parent process id.
        ppid: u32,
        /// New thread id.
        tid: u32,
        /// Parent thread id.
        ptid: u32,
        /// Time.
        time: u64,
    },
    /// A thread or process ended.
    Exit {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// Time.
        time: u64,
    },
    /// The task's namespaces (at fork, `setns`, `unshare`); the network namespace's inode.
    Namespaces {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// Inode of the network namespace.
        netns: Option<u64>,
        /// Trailer.
        sid: SampleId,
    },
    /// The kernel dropped `lost` records of event `id` (ring full).
    Lost {
        /// Event id.
        id: u64,
        /// Records lost.
        lost: u64,
        /// Trailer.
        sid: SampleId,
    },
    /// Samples lost before reaching the ring (PERF_RECORD_LOST_SAMPLES).
    LostSamples {
        /// Samples lost.
        lost: u64,
        /// Trailer.
        sid: SampleId,
    },
    /// The kernel throttled (or unthrottled) sampling: too many samples per tick.
    Throttle {
        /// True for THROTTLE, false for UNTHROTTLE.
        on: bool,
        /// Time.
        time: u64,
    },
    /// A record type the sampler does not use (trailer decoded when possible).
    Other {
        /// Record type.
        kind: u32,
        /// Trailer.
        sid: SampleId,
    },
    /// A record too short for its type or its layout.
    Malformed {
        /// Record type.
        kind: u32,
    },
}

impl Rec<'_> {
    /// The record's timestamp, when it has one.
    pub fn time(&self) -> Option<u64> {
        match self {
            Rec::Sample(s) => Some(s.time),
            Rec::Mmap(_, sid)
            | Rec::Comm { sid, .. }
            | Rec::Namespaces { sid, .. }
            | Rec::Lost { sid, .. }
            | Rec::LostSamples { sid, .. }
            | Rec::Other { sid, .. } => sid.time,
            Rec::Fork { time, .. } | Rec::Exit { time, .. } | Rec::Throttle { time, .. } => {
                Some(*time)
            }
            Rec::Malformed { .. } => None,
        }
    }
}

/// Splits a buffer of whole records into `(type, misc, record bytes)`. Stops at the first
/// header whose size is impossible (less than 8 or past the end).
pub fn split(buf: &[u8]) -> impl Iterator<Item = (u32, u16, &[u8])> + '_ {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        if pos + 8 > buf.len() {
            return None;
        }
        let kind = u32_at(buf, pos)?;
        let misc = u16::from_le_bytes([buf[pos + 4], buf[pos + 5]]);
        let size = u16::from_le_bytes([buf[pos + 6], buf[pos + 7]]) as usize;
        if size < 8 || pos + size > buf.len() {
            pos = buf.len();
            return None;
        }
        let rec = &buf[pos..pos + size];
        pos += size;
        Some((kind, misc, rec))
    })
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

fn cstr(b: &[u8]) -> &[u8] {
    match b.iter().position(|&c| c == 0) {
        Some(n) => &b[..n],
        None => b,
    }
}

/// Decodes the sample-id trailer at the end of a non-sample record.
fn trailer(rec: &[u8], layout: &Layout) -> Option<SampleId> {
    let size = layout.trailer_size();
    if size == 0 {
        return Some(SampleId::default());
    }
    let mut at = rec.len().checked_sub(size)?;
    if at < 8 {
        return None;
    }
    let st = layout.sample_type;
    let mut sid = SampleId::default();
    if st & SAMPLE_TID != 0 {
        sid.pid = u32_at(rec, at)?;
        sid.tid = u32_at(rec, at + 4)?;
        at += 8;
    }
    if st & SAMPLE_TIME != 0 {
        sid.time = Some(u64_at(rec, at)?);
        at += 8;
    }
    if st & SAMPLE_ID != 0 {
        sid.id = Some(u64_at(rec, at)?);
        at += 8;
    }
    for bit in [SAMPLE_STREAM_ID, SAMPLE_CPU] {
        if st & bit != 0 {
            at += 8;
        }
    }
    if st & SAMPLE_IDENTIFIER != 0 {
        sid.id = Some(u64_at(rec, at)?);
    }
    Some(sid)
}

/// Decodes a sample body (`rec` includes the 8-byte header).
fn sample<'a>(rec: &'a [u8], misc: u16, layout: &Layout) -> Option<Sample<'a>> {
    let st = layout.sample_type;
    let mut at = 8usize;
    let mut s = Sample {
        misc,
        ..Sample::default()
    };
    if st & SAMPLE_IDENTIFIER != 0 {
        s.id = Some(u64_at(rec, at)?);
        at += 8;
    }
    if st & SAMPLE_IP != 0 {
        s.ip = u64_at(rec, at)?;
        at += 8;
    }
    if st & SAMPLE_TID != 0 {
        s.pid = u32_at(rec, at)?;
        s.tid = u32_at(rec, at + 4)?;
        at += 8;
    }
    if st & SAMPLE_TIME != 0 {
        s.time = u64_at(rec, at)?;
        at += 8;
    }
    if st & SAMPLE_ADDR != 0 {
        at += 8;
    }
    if st & SAMPLE_ID != 0 {
        s.id = Some(u64_at(rec, at)?);
        at += 8;
    }
    if st & SAMPLE_STREAM_ID != 0 {
        at += 8;
    }
    if st & SAMPLE_CPU != 0 {
        s.cpu = u32_at(rec, at)?;
        at += 8;
    }
    if st & SAMPLE_PERIOD != 0 {
        at += 8;
    }
    if st & SAMPLE_READ != 0 {
        // Variable layout the sampler never asks for: nothing after it is decoded.
        return Some(s);
    }
    if st & SAMPLE_CALLCHAIN != 0 {
        let nr = u64_at(rec, at)? as usize;
        let end = nr.checked_mul(8)?.checked_add(at + 8)?;
        s.callchain = rec.get(at + 8..end)?;
        at = end;
    }
    if st & SAMPLE_RAW != 0 {
        let size = u32_at(rec, at)? as usize;
        s.raw = Some(rec.get(at + 4..at + 4 + size)?);
    }
    Some(s)
}

/// Decodes one record of a stream with `layout`.
pub fn decode<'a>(kind: u32, misc: u16, rec: &'a [u8], layout: &Layout) -> Rec<'a> {
    decode_opt(kind, misc, rec, layout).unwrap_or(Rec::Malformed { kind })
}

fn decode_opt<'a>(kind: u32, misc: u16, rec: &'a [u8], layout: &Layout) -> Option<Rec<'a>> {
    let body_end = || rec.len().checked_sub(layout.trailer_size());
    Some(match kind {
        b::PERF_RECORD_SAMPLE => Rec::Sample(sample(rec, misc, layout)?),
        b::PERF_RECORD_MMAP => {
            let end = body_end()?;
            Rec::Mmap(
                Mmap {
                    pid: u32_at(rec, 8)?,
                    tid: u32_at(rec, 12)?,
                    start: u64_at(rec, 16)?,
                    len: u64_at(rec, 24)?,
                    pgoff: u64_at(rec, 32)?,
                    dev_ino: None,
                    exec: misc & (b::PERF_RECORD_MISC_MMAP_DATA as u16) == 0,
                    filename: cstr(rec.get(40..end)?),
                },
                trailer(rec, layout)?,
            )
        }
        b::PERF_RECORD_MMAP2 => {
            let end = body_end()?;
            let dev_ino = if misc & MISC_MMAP_BUILD_ID != 0 {
                None
            } else {
                Some((u32_at(rec, 40)?, u32_at(rec, 44)?, u64_at(rec, 48)?))
            };
            let prot = u32_at(rec, 64)?;
            Rec::Mmap(
                Mmap {
                    pid: u32_at(rec, 8)?,
                    tid: u32_at(rec, 12)?,
                    start: u64_at(rec, 16)?,
                    len: u64_at(rec, 24)?,
                    pgoff: u64_at(rec, 32)?,
                    dev_ino,
                    exec: prot & libc::PROT_EXEC as u32 != 0,
                    filename: cstr(rec.get(72..end)?),
                },
                trailer(rec, layout)?,
            )
        }
        b::PERF_RECORD_COMM => {
            let end = body_end()?;
            Rec::Comm {
                pid: u32_at(rec, 8)?,
                tid: u32_at(rec, 12)?,
                comm: cstr(rec.get(16..end)?),
                exec: misc & MISC_COMM_EXEC != 0,
                sid: trailer(rec, layout)?,
            }
        }
        b::PERF_RECORD_FORK | b::PERF_RECORD_EXIT => {
            let pid = u32_at(rec, 8)?;
            let ppid = u32_at(rec, 12)?;
            let tid = u32_at(rec, 16)?;
            let ptid = u32_at(rec, 20)?;
            let time = u64_at(rec, 24)?;
            if kind == b::PERF_RECORD_FORK {
                Rec::Fork {
                    pid,
                    ppid,
                    tid,
                    ptid,
                    time,
                }
            } else {
                Rec::Exit { pid, tid, time }
            }
        }
        b::PERF_RECORD_NAMESPACES => {
            let n = u64_at(rec, 16)?;
            let at = 24 + 16 * b::NET_NS_INDEX as usize;
            Rec::Namespaces {
                pid: u32_at(rec, 8)?,
                tid: u32_at(rec, 12)?,
                netns: if n > u64::from(b::NET_NS_INDEX) {
                    Some(u64_at(rec, at + 8)?)
                } else {
                    None
                },
                sid: trailer(rec, layout)?,
            }
        }
        b::PERF_RECORD_LOST => Rec::Lost {
            id: u64_at(rec, 8)?,
            lost: u64_at(rec, 16)?,
            sid: trailer(rec, layout)?,
        },
        b::PERF_RECORD_LOST_SAMPLES => Rec::LostSamples {
            lost: u64_at(rec, 8)?,
            sid: trailer(rec, layout)?,
        },
        b::PERF_RECORD_THROTTLE | b::PERF_RECORD_UNTHROTTLE => Rec::Throttle {
            on: kind == b::PERF_RECORD_THROTTLE,
            time: u64_at(rec, 8)?,
        },
        // Types from 64 up are perf-tool records in perf.data files (no trailer).
        k if k >= 64 => Rec::Other {
            kind: k,
            sid: SampleId::default(),
        },
        k => Rec::Other {
            kind: k,
            sid: trailer(rec, layout).unwrap_or_default(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAYOUT: Layout = Layout {
        sample_type: SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME,
        sample_id_all: true,
    };

    fn header(kind: u32, misc: u16, body: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&kind.to_le_bytes());
        v.extend_from_slice(&misc.to_le_bytes());
        v.extend_from_slice(&((body.len() + 8) as u16).to_le_bytes());
        v.extend_from_slice(body);
        v
    }

    fn trailer_bytes(pid: u32, tid: u32, time: u64, id: u64) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&pid.to_le_bytes());
        v.extend_from_slice(&tid.to_le_bytes());
        v.extend_from_slice(&time.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
        v
    }

    #[test]
    fn sample_fields_in_order() {
        let mut body = Vec::new();
        body.extend_from_slice(&7u64.to_le_bytes()); // identifier
        body.extend_from_slice(&0x4010u64.to_le_bytes()); // ip
        body.extend_from_slice(&100u32.to_le_bytes());
        body.extend_from_slice(&101u32.to_le_bytes());
        body.extend_from_slice(&555u64.to_le_bytes());
        let rec = header(b::PERF_RECORD_SAMPLE, MISC_USER, &body);
        let (k, m, bytes) = split(&rec).next().unwrap();
        match decode(k, m, bytes, &LAYOUT) {
            Rec::Sample(s) => {
                assert_eq!(s.id, Some(7));
                assert_eq!(s.ip, 0x4010);
                assert_eq!((s.pid, s.tid, s.time), (100, 101, 555));
                assert_eq!(s.misc & MISC_CPUMODE_MASK, MISC_USER);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn sample_call_chain() {
        let layout = Layout {
            sample_type: LAYOUT.sample_type | SAMPLE_CALLCHAIN,
            sample_id_all: true,
        };
        let mut body = Vec::new();
        body.extend_from_slice(&7u64.to_le_bytes()); // identifier
        body.extend_from_slice(&0x4010u64.to_le_bytes()); // ip
        body.extend_from_slice(&100u32.to_le_bytes());
        body.extend_from_slice(&101u32.to_le_bytes());
        body.extend_from_slice(&555u64.to_le_bytes());
        let chain = [b::PERF_CONTEXT_USER, 0x4010, 0x5020];
        body.extend_from_slice(&(chain.len() as u64).to_le_bytes());
        for c in chain {
            body.extend_from_slice(&c.to_le_bytes());
        }
        let rec = header(b::PERF_RECORD_SAMPLE, MISC_USER, &body);
        match decode(b::PERF_RECORD_SAMPLE, MISC_USER, &rec, &layout) {
            Rec::Sample(s) => assert_eq!(s.chain().collect::<Vec<_>>(), chain),
            other => panic!("{other:?}"),
        }
        // A chain longer than the record: malformed, not a panic.
        let mut short = rec.clone();
        short.truncate(rec.len() - 8);
        short[6] = short.len() as u8;
        assert!(matches!(
            decode(b::PERF_RECORD_SAMPLE, MISC_USER, &short, &layout),
            Rec::Malformed { .. }
        ));
    }

    #[test]
    fn comm_with_trailer_and_exec_flag() {
        let mut body = Vec::new();
        body.extend_from_slice(&5u32.to_le_bytes());
        body.extend_from_slice(&5u32.to_le_bytes());
        body.extend_from_slice(b"dd\0\0\0\0\0\0");
        body.extend(trailer_bytes(5, 5, 999, 3));
        let rec = header(b::PERF_RECORD_COMM, MISC_COMM_EXEC, &body);
        let r = decode(b::PERF_RECORD_COMM, MISC_COMM_EXEC, &rec, &LAYOUT);
        match r {
            Rec::Comm {
                comm, exec, sid, ..
            } => {
                assert_eq!(comm, b"dd");
                assert!(exec);
                assert_eq!(sid.time, Some(999));
                assert_eq!(sid.id, Some(3));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(r.time(), Some(999));
    }

    #[test]
    fn mmap2_filename_and_prot() {
        let mut body = Vec::new();
        for v in [9u32, 9] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        for v in [0x1000u64, 0x2000, 0x3000] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        body.extend_from_slice(&8u32.to_le_bytes()); // maj
        body.extend_from_slice(&1u32.to_le_bytes()); // min
        body.extend_from_slice(&42u64.to_le_bytes()); // ino
        body.extend_from_slice(&0u64.to_le_bytes()); // ino generation
        body.extend_from_slice(&(libc::PROT_READ | libc::PROT_EXEC).to_le_bytes());
        body.extend_from_slice(&0u32.to_le_bytes()); // flags
        body.extend_from_slice(b"/bin/x\0\0");
        body.extend(trailer_bytes(9, 9, 1234, 3));
        let rec = header(b::PERF_RECORD_MMAP2, MISC_USER, &body);
        match decode(b::PERF_RECORD_MMAP2, MISC_USER, &rec, &LAYOUT) {
            Rec::Mmap(m, sid) => {
                assert_eq!(m.filename, b"/bin/x");
                assert!(m.exec);
                assert_eq!((m.start, m.len, m.pgoff), (0x1000, 0x2000, 0x3000));
                assert_eq!(m.dev_ino, Some((8, 1, 42)));
                assert_eq!(sid.time, Some(1234));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn short_and_garbage_records_do_not_panic() {
        for kind in [1, 2, 3, 4, 7, 9, 10, 13, 16, 5, 99] {
            for len in 8..48 {
                let rec = vec![0xffu8; len];
                let _ = decode(kind, 0xffff, &rec, &LAYOUT);
            }
        }
        // A header claiming more bytes than present ends the split.
        let mut rec = header(9, 0, &[0u8; 16]);
        rec[6] = 200;
        assert_eq!(split(&rec).count(), 0);
        assert_eq!(split(&[1, 2, 3]).count(), 0);
    }
}
