//! Reading a trace file's stacks region (where each thread is now; see
//! `culprit_format::stacks`), and the state of a writer process on this host.

use culprit_format::parse_header;
use culprit_format::procfs::{Proc, Stat};
use culprit_format::read::ReadAt;
use culprit_format::stacks::{read_region, StacksSnapshot};

/// Largest stacks region read (a damaged header must not make us allocate what it claims).
const MAX_REGION: u64 = 1 << 20;

/// The newest intact stack snapshot of the trace file `f` (`None` when it has no region, or
/// none can be read now: a slot torn by the writer is skipped).
pub(super) fn read_snapshot(f: &dyn ReadAt) -> Option<StacksSnapshot> {
    let mut head = [0u8; 128];
    let n = read_fully(f, &mut head, 0).ok()?;
    let (h, _) = parse_header(&head[..n]).ok()?;
    if h.stacks_offset == 0
        || h.stacks_len == 0
        || h.stacks_len > MAX_REGION
        || h.stacks_offset < h.header_size as u64
        || h.stacks_offset.saturating_add(h.stacks_len) > h.data_offset
    {
        return None;
    }
    let mut region = vec![0u8; h.stacks_len as usize];
    let got = read_fully(f, &mut region, h.stacks_offset).ok()?;
    // Two tries: a reader that meets both slots being rewritten (it cannot, at one snapshot
    // per interval, unless it is very slow) reads again.
    read_region(&region[..got]).or_else(|| {
        let got = read_fully(f, &mut region, h.stacks_offset).ok()?;
        read_region(&region[..got])
    })
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
