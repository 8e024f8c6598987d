//! Reading a trace file's stacks region (where each thread is now; see
//! `culprit_format::stacks`), checking a snapshot against the file's own records, and the
//! state of a writer process on this host.
//!
//! The region is a view, not evidence: a snapshot is used only when it is consistent with the
//! intervals read from the same file ([`check`]). A region cut short, a slot that is neither
//! empty nor intact, a snapshot newer than the file's intact records or with calls entered
//! after it was taken is damage once the file is done (ended or damaged), counted in the
//! damage finding, and never read as where the threads are.

use culprit_format::parse_header;
use culprit_format::procfs::{Proc, Stat};
use culprit_format::read::ReadAt;
use culprit_format::stacks::SLOT_HEADER_SIZE;
use culprit_format::stacks::{decode_slot, StacksSnapshot, STACKS_SLOTS, STACKS_SLOT_SIZE};

use super::files::TraceFile;

/// Largest stacks region read (a damaged header must not make us allocate what it claims).
const MAX_REGION: u64 = 1 << 20;

/// Slack for a frame entered while the snapshot was copied (its entry can follow the
/// snapshot's time by the copy's length), and for the flusher's delay between committing an
/// interval and taking the snapshot that follows it.
const SLACK_NS: u64 = 1_000_000_000;

/// What one read of a trace file's stacks region found.
#[derive(Debug, Default)]
pub(super) struct RegionRead {
    /// The newest intact snapshot.
    pub snapshot: Option<StacksSnapshot>,
    /// What is wrong with the region, when something is: a slot neither empty nor intact
    /// (torn by a writer at work, or damaged), the region cut short or outside the file.
    pub damage: Option<String>,
}

/// Reads the stacks region of the trace file `f`; `None` when it has none (older files,
/// counts from uprobes) or its header cannot be read.
pub(super) fn read_region(f: &dyn ReadAt) -> Option<RegionRead> {
    let mut head = [0u8; 128];
    let n = read_fully(f, &mut head, 0).ok()?;
    let (h, _) = parse_header(&head[..n]).ok()?;
    if h.stacks_offset == 0 && h.stacks_len == 0 {
        return None;
    }
    if h.stacks_len == 0
        || h.stacks_len > MAX_REGION
        || h.stacks_offset < h.header_size as u64
        || h.stacks_offset.saturating_add(h.stacks_len) > h.data_offset
    {
        return Some(RegionRead {
            snapshot: None,
            damage: Some(format!(
                "its header places the stacks region outside the file's layout ({} bytes at \
                 byte {})",
                h.stacks_len, h.stacks_offset
            )),
        });
    }
    let mut region = vec![0u8; h.stacks_len as usize];
    // Two tries: a reader that meets a slot being rewritten reads again (the writer rewrites
    // one slot per interval, so the second read finds it whole).
    let mut read = RegionRead::default();
    for _ in 0..2 {
        let got = read_fully(f, &mut region, h.stacks_offset).ok()?;
        read = slots(&region[..got]);
        if got < region.len() {
            // Beyond the file: nothing in a region cut short is evidence.
            return Some(RegionRead {
                snapshot: None,
                damage: Some(format!(
                    "its stacks region is cut short ({got} of {} bytes)",
                    region.len()
                )),
            });
        }
        if read.damage.is_none() {
            break;
        }
    }
    Some(read)
}

/// The newest intact snapshot of a region's bytes, and whether a slot is neither empty (never
/// written: zeros) nor intact.
fn slots(region: &[u8]) -> RegionRead {
    let mut out = RegionRead::default();
    for i in 0..STACKS_SLOTS {
        let from = (i * STACKS_SLOT_SIZE).min(region.len());
        let to = (from + STACKS_SLOT_SIZE).min(region.len());
        let slot = &region[from..to];
        let head = &slot[..slot.len().min(SLOT_HEADER_SIZE)];
        if head.iter().all(|&b| b == 0) {
            continue;
        }
        match decode_slot(slot) {
            Some(s) => {
                if out.snapshot.as_ref().is_none_or(|o| s.seq > o.seq) {
                    out.snapshot = Some(s);
                }
            }
            None => {
                out.damage = Some(format!("stack snapshot slot {i} is torn or corrupt"));
            }
        }
    }
    out
}

/// Why snapshot `s` of trace file `t` cannot be read as where its threads are, given the
/// intervals read from `t` so far (the region is read before the records, so every interval
/// committed before the snapshot was taken is among them).
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unfit {
    /// Taken after the file's last intact interval ended (by more than an interval): beyond
    /// what the records show. While the writer runs, a snapshot can be ahead of records it
    /// could not write (a full disk): damage only once the file is done.
    Ahead(String),
    /// Not something the writer writes: a call entered after the snapshot was taken.
    Inconsistent(String),
}

/// Checks snapshot `s` against the records of `t` (see [`Unfit`]).
pub(super) fn check(s: &StacksSnapshot, t: &TraceFile) -> Result<(), Unfit> {
    for th in &s.threads {
        if let Some(fr) = th
            .frames
            .iter()
            .find(|fr| fr.entry_ns > s.taken_ns.saturating_add(SLACK_NS))
        {
            return Err(Unfit::Inconsistent(format!(
                "its stack snapshot has a call of thread {} entered {} after the snapshot",
                th.serial,
                crate::time::duration(fr.entry_ns - s.taken_ns)
            )));
        }
    }
    let interval = if t.interval_ns == 0 {
        SLACK_NS
    } else {
        t.interval_ns
    };
    let last_end = t.intervals.iter().map(|iv| iv.start_ns + iv.dur_ns).max();
    match last_end {
        None => Err(Unfit::Ahead(
            "its stack snapshot follows no intact interval".into(),
        )),
        Some(end) if s.taken_ns > end.saturating_add(interval).saturating_add(SLACK_NS) => {
            Err(Unfit::Ahead(format!(
                "its stack snapshot was taken {} after its last intact interval",
                crate::time::duration(s.taken_ns - end)
            )))
        }
        Some(_) => Ok(()),
    }
}

/// The scheduler state letter of process `pid` on this host (`R`, `S`, `D`, `T` stopped by a
/// signal, `t` stopped by a tracer, `Z`…), from `/proc/PID/stat`; `None` when there is no such
/// process. The caller checks that the pid is still the writer's
/// (`TraceFile::writer_alive`).
pub fn process_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(Proc::Pid(pid).path("stat")).ok()?;
    Some(char::from(Stat::parse(&stat)?.state))
}

/// Reads until `buf` is full or the end of `f`; the bytes read.
fn read_fully(f: &dyn ReadAt, buf: &mut [u8], at: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], at + got as u64)? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_of_this_process() {
        // This test runs: R (or S when descheduled between the read and the check).
        let s = process_state(std::process::id()).unwrap();
        assert!(matches!(s, 'R' | 'S'), "{s}");
        assert_eq!(process_state(u32::MAX), None);
    }
}
