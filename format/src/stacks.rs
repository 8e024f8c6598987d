//! Where each thread is now: the *stacks region* of a trace file (format version 5).
//!
//! Records are an append-only log, so "where is each thread right now" has a fixed place of
//! its own: a region between the header page and the first record (header fields
//! [`FileHeader::stacks_offset`](crate::FileHeader::stacks_offset) and `stacks_len`; the
//! records start after it, at `data_offset`, so readers that do not know the region skip it).
//! The tracer's flusher writes into it, at every interval boundary, on `culprit_flush()` and as
//! the process exits, a snapshot of every live thread: its innermost [`STACK_FRAMES`] open
//! calls (function address and wall-clock entry time) and how deep its stack is. Seed 002's
//! "last trace entry" of a process that stopped is the innermost frame of its last snapshot; a
//! call that has been running for a long time shows how long.
//!
//! # Consistent reads: a double-buffered seqlock
//!
//! The region holds [`STACKS_SLOTS`] slots of [`STACKS_SLOT_SIZE`] bytes. Snapshot number
//! `seq` (1, 2, …) goes into slot `seq % 2`, so the slot being rewritten never holds the newest
//! complete snapshot. Each slot carries its `seq` and a CRC-32 of its bytes: a reader that
//! reads a slot while it is rewritten sees a bad CRC and takes the other one. A reader takes
//! the valid slot with the highest `seq` ([`read_region`]); a writer that wrote twice during
//! one read (not possible at one snapshot per interval) only makes the reader try again.
//!
//! # Slot layout (little-endian)
//!
//! | offset | field |
//! | --- | --- |
//! | 0 | [`SLOT_MAGIC`] |
//! | 8 | `seq` (u64, ≥ 1) |
//! | 16 | `taken_ns`: wall-clock time of the snapshot |
//! | 24 | threads (u32) |
//! | 28 | threads left out for lack of room (u32) |
//! | 32 | bytes of the slot in use, header included (u32) |
//! | 36 | CRC-32 of those bytes with this field zero (u32) |
//! | 40 | reserved, zero (u64) |
//! | 48 | threads, [`THREAD_SIZE`] bytes each |
//!
//! A thread: tid (u32), serial (u32: 1 for the first thread the runtime saw in the process,
//! 2 for the next…), depth (u32: open calls, all of them), frames kept (u32, at most
//! [`STACK_FRAMES`]), [`thread_flags`] (u32), `still_ms` (u32: with
//! [`thread_flags::PROGRESS`], ms since the thread last made progress — a traced call of it
//! returned, or it ran on a CPU; zero in files of writers before it), then [`STACK_FRAMES`] frames of
//! (function address u64, entry time u64 in wall-clock ns), outermost kept frame first.

use crate::crc::crc32;

/// Frames kept per thread: the innermost ones.
pub const STACK_FRAMES: usize = 16;
/// Slots of the region.
pub const STACKS_SLOTS: usize = 2;
/// Bytes per slot.
pub const STACKS_SLOT_SIZE: usize = 32 << 10;
/// Bytes of the region the tracer reserves ([`STACKS_SLOTS`] slots).
pub const STACKS_REGION_SIZE: u64 = (STACKS_SLOTS * STACKS_SLOT_SIZE) as u64;
/// First bytes of a written slot.
pub const SLOT_MAGIC: [u8; 8] = *b"CULSTK1\0";
/// Bytes of a slot's header.
pub const SLOT_HEADER_SIZE: usize = 48;
/// Bytes per thread.
pub const THREAD_SIZE: usize = 24 + STACK_FRAMES * 16;
/// Threads a slot holds; more are counted as left out.
pub const MAX_THREADS: usize = (STACKS_SLOT_SIZE - SLOT_HEADER_SIZE) / THREAD_SIZE;

/// Flags of a thread in a snapshot.
pub mod thread_flags {
    /// `culprit_pause()` is in effect in the thread.
    pub const PAUSED: u32 = 1;
    /// The thread's stack is deeper than the runtime traces: its innermost calls are not
    /// shown.
    pub const OVERFLOW: u32 = 2;
    /// The stack changed while it was copied: its innermost frames may be off by a call (a
    /// thread that is busy; a thread that is stuck never has this).
    pub const UNSTABLE: u32 = 4;
    /// The writer watched the thread's progress: `still_ms` is set (older runtimes leave
    /// this bit and the field zero).
    pub const PROGRESS: u32 = 8;
    /// A traced call of the thread returned since the previous snapshot.
    pub const RETURNED: u32 = 16;
    /// The thread ran on a CPU (≥ 1 ms) since the previous snapshot.
    pub const RAN: u32 = 32;
}

/// One open call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StackFrame {
    /// Function address (in the process; its Object records name it).
    pub addr: u64,
    /// When the call was entered, wall-clock ns since the epoch.
    pub entry_ns: u64,
}

/// One thread's open calls.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ThreadStack {
    /// Kernel thread id.
    pub tid: u32,
    /// 1 for the first thread the runtime saw in the process, 2 for the next…
    pub serial: u32,
    /// Open calls (all of them; `frames` keeps the innermost [`STACK_FRAMES`]).
    pub depth: u32,
    /// [`thread_flags`].
    pub flags: u32,
    /// With [`thread_flags::PROGRESS`]: ms since the thread last made progress (a traced call
    /// returned, or it ran on a CPU), as of the snapshot. What tells a thread that is *stuck*
    /// in a call from one *busy* in it.
    pub still_ms: u32,
    /// The innermost open calls, outermost first.
    pub frames: Vec<StackFrame>,
}

/// Every live thread's open calls at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StacksSnapshot {
    /// Snapshot number, from 1.
    pub seq: u64,
    /// When it was taken, wall-clock ns.
    pub taken_ns: u64,
    /// Threads not in `threads` for lack of room.
    pub omitted: u32,
    /// The threads.
    pub threads: Vec<ThreadStack>,
}

/// File offset of the slot that snapshot `seq` goes into, in a region at `region_offset`.
pub fn slot_offset(region_offset: u64, seq: u64) -> u64 {
    region_offset + (seq % STACKS_SLOTS as u64) * STACKS_SLOT_SIZE as u64
}

/// Encodes `snap` as a slot (at most [`STACKS_SLOT_SIZE`] bytes: threads beyond
/// [`MAX_THREADS`] are counted in `omitted`, frames beyond [`STACK_FRAMES`] dropped from the
/// outermost end).
pub fn encode_slot(snap: &StacksSnapshot) -> Vec<u8> {
    let n = snap.threads.len().min(MAX_THREADS);
    let omitted = snap.omitted.saturating_add((snap.threads.len() - n) as u32);
    let len = SLOT_HEADER_SIZE + n * THREAD_SIZE;
    let mut b = Vec::with_capacity(len);
    b.extend_from_slice(&SLOT_MAGIC);
    b.extend_from_slice(&snap.seq.to_le_bytes());
    b.extend_from_slice(&snap.taken_ns.to_le_bytes());
    b.extend_from_slice(&(n as u32).to_le_bytes());
    b.extend_from_slice(&omitted.to_le_bytes());
    b.extend_from_slice(&(len as u32).to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    for t in &snap.threads[..n] {
        let kept = &t.frames[t.frames.len().saturating_sub(STACK_FRAMES)..];
        for v in [
            t.tid,
            t.serial,
            t.depth,
            kept.len() as u32,
            t.flags,
            t.still_ms,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        for i in 0..STACK_FRAMES {
            let f = kept.get(i).copied().unwrap_or_default();
            b.extend_from_slice(&f.addr.to_le_bytes());
            b.extend_from_slice(&f.entry_ns.to_le_bytes());
        }
    }
    let crc = crc32(&b);
    b[36..40].copy_from_slice(&crc.to_le_bytes());
    b
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Decodes one slot; `None` when it is empty, torn (bad CRC) or malformed.
pub fn decode_slot(bytes: &[u8]) -> Option<StacksSnapshot> {
    if bytes.len() < SLOT_HEADER_SIZE || bytes[..8] != SLOT_MAGIC {
        return None;
    }
    let n = le32(bytes, 24) as usize;
    let len = le32(bytes, 32) as usize;
    if n > MAX_THREADS || len != SLOT_HEADER_SIZE + n * THREAD_SIZE || len > bytes.len() {
        return None;
    }
    let mut check = bytes[..len].to_vec();
    check[36..40].fill(0);
    if crc32(&check) != le32(bytes, 36) {
        return None;
    }
    let seq = le64(bytes, 8);
    if seq == 0 {
        return None;
    }
    let threads = (0..n)
        .map(|i| {
            let o = SLOT_HEADER_SIZE + i * THREAD_SIZE;
            let kept = (le32(bytes, o + 12) as usize).min(STACK_FRAMES);
            ThreadStack {
                tid: le32(bytes, o),
                serial: le32(bytes, o + 4),
                depth: le32(bytes, o + 8),
                flags: le32(bytes, o + 16),
                still_ms: le32(bytes, o + 20),
                frames: (0..kept)
                    .map(|k| StackFrame {
                        addr: le64(bytes, o + 24 + k * 16),
                        entry_ns: le64(bytes, o + 32 + k * 16),
                    })
                    .collect(),
            }
        })
        .collect();
    Some(StacksSnapshot {
        seq,
        taken_ns: le64(bytes, 16),
        omitted: le32(bytes, 28),
        threads,
    })
}

/// The newest intact snapshot of a region's bytes (as read from the file; shorter when the
/// file is), if any.
pub fn read_region(region: &[u8]) -> Option<StacksSnapshot> {
    (0..STACKS_SLOTS)
        .filter_map(|i| {
            let from = i * STACKS_SLOT_SIZE;
            let to = (from + STACKS_SLOT_SIZE).min(region.len());
            region.get(from..to).and_then(decode_slot)
        })
        .max_by_key(|s| s.seq)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(seq: u64, threads: usize) -> StacksSnapshot {
        StacksSnapshot {
            seq,
            taken_ns: 1_700_000_000_000_000_000 + seq,
            omitted: 0,
            threads: (0..threads)
                .map(|t| ThreadStack {
                    tid: 100 + t as u32,
                    serial: t as u32 + 1,
                    depth: 20,
                    flags: thread_flags::OVERFLOW | thread_flags::PROGRESS,
                    still_ms: 1234 + t as u32,
                    frames: (0..20)
                        .map(|k| StackFrame {
                            addr: 0x1000 + k,
                            entry_ns: 5 + k,
                        })
                        .collect(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_slot_round_trips_keeping_the_innermost_frames() {
        let s = snap(3, 2);
        let b = encode_slot(&s);
        let d = decode_slot(&b).expect("valid");
        assert_eq!(d.seq, 3);
        assert_eq!(d.threads.len(), 2);
        let f = &d.threads[1].frames;
        assert_eq!(f.len(), STACK_FRAMES);
        assert_eq!(f[0].addr, 0x1000 + 4, "outermost kept frame");
        assert_eq!(f[STACK_FRAMES - 1].addr, 0x1000 + 19, "innermost frame");
        assert_eq!(d.threads[1].depth, 20);
    }

    #[test]
    fn the_reader_takes_the_newest_intact_slot() {
        let mut region = vec![0u8; STACKS_REGION_SIZE as usize];
        assert!(read_region(&region).is_none(), "nothing written yet");
        for seq in 1..=3u64 {
            let b = encode_slot(&snap(seq, 1));
            let at = slot_offset(0, seq) as usize;
            region[at..at + b.len()].copy_from_slice(&b);
        }
        assert_eq!(read_region(&region).unwrap().seq, 3);
        // Snapshot 4 half written over slot 0 (which held 2): torn, so 3 is read.
        let mut s4 = snap(4, 1);
        s4.threads[0]
            .frames
            .iter_mut()
            .for_each(|f| f.entry_ns += 1000);
        let b = encode_slot(&s4);
        let at = slot_offset(0, 4) as usize;
        region[at..at + b.len() / 2].copy_from_slice(&b[..b.len() / 2]);
        assert_eq!(read_region(&region).unwrap().seq, 3);
        // A short read of the region (a file cut short) is no panic.
        assert!(read_region(&region[..100]).is_none());
    }

    #[test]
    fn too_many_threads_are_counted_not_written() {
        let s = snap(1, MAX_THREADS + 5);
        let b = encode_slot(&s);
        assert!(b.len() <= STACKS_SLOT_SIZE);
        let d = decode_slot(&b).unwrap();
        assert_eq!(d.threads.len(), MAX_THREADS);
        assert_eq!(d.omitted, 5);
    }
}
