//! `culprit report --stacks` for people: where each thread of each traced process is (its last
//! stack if the process is gone), with how long each open call has been running.

use std::io::Write;

use culprit_analysis::stacks::{ProcessNow, ProcessState};
use culprit_analysis::time;

/// Prints every process's last stack snapshot (`culprit_analysis::stacks::snapshots`); a
/// running process's snapshot is aged against `now_ns`.
pub fn print_human(procs: &[ProcessNow], now_ns: u64, out: &mut impl Write) -> std::io::Result<()> {
    if procs.is_empty() {
        writeln!(
            out,
            "no stack snapshots: the runtime writes them from format version 5 on, at each \
             interval of a traced process"
        )?;
    }
    for p in procs {
        let when = match p.state {
            ProcessState::Running => format!(
                "snapshot of {} ({} ago)",
                time::fmt_wall(p.taken_ns),
                time::duration(now_ns.saturating_sub(p.taken_ns))
            ),
            _ => format!("last snapshot: {}", time::fmt_wall(p.taken_ns)),
        };
        writeln!(
            out,
            "{}  pid {} {}: {}; {when}",
            p.node,
            p.pid,
            p.program,
            p.state.word()
        )?;
        for t in &p.threads {
            let mut notes = Vec::new();
            if t.paused {
                notes.push("culprit_pause() in effect");
            }
            if t.overflow {
                notes.push("deeper than traced: the innermost calls are missing");
            }
            if t.unstable {
                notes.push("busy: changed while copied");
            }
            let hidden = t.depth as usize - t.calls.len().min(t.depth as usize);
            let more = if hidden > 0 {
                format!(", {hidden} outer not shown")
            } else {
                String::new()
            };
            let notes = if notes.is_empty() {
                String::new()
            } else {
                format!(" ({})", notes.join("; "))
            };
            writeln!(
                out,
                "  thread {} (tid {}): {} open call(s){more}{notes}",
                t.thread, t.tid, t.depth
            )?;
            for (i, c) in t.calls.iter().enumerate() {
                let mark = if i + 1 == t.calls.len() { ">" } else { " " };
                writeln!(
                    out,
                    "   {mark} {:<40} {:>12}  since {}",
                    c.function,
                    time::duration(c.running_ns),
                    time::clock(c.entry_ns)
                )?;
            }
        }
        if p.omitted > 0 {
            writeln!(out, "  ({} more threads not in the snapshot)", p.omitted)?;
        }
    }
    Ok(())
}
