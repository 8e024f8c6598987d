//! `culprit report --stacks`: where each thread of each traced process is (its last stack if
//! the process is gone), with how long each open call has been running.

use std::io::Write as _;

use culprit_analysis::data::Dataset;
use culprit_analysis::stacks::{snapshots, ProcessState};
use culprit_analysis::time;

/// Prints every process's last stack snapshot (JSON: an array of `ProcessNow`).
pub fn print(ds: &Dataset, json: bool) -> anyhow::Result<i32> {
    let procs = snapshots(ds);
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &procs)?;
        writeln!(out)?;
        return Ok(0);
    }
    if procs.is_empty() {
        writeln!(
            out,
            "no stack snapshots: the runtime writes them from format version 5 on, at each \
             interval of a traced process"
        )?;
    }
    let now = time::now_ns();
    for p in &procs {
        let when = match p.state {
            ProcessState::Running => format!(
                "snapshot of {} ({} ago)",
                time::fmt_wall(p.taken_ns),
                time::duration(now.saturating_sub(p.taken_ns))
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
    Ok(0)
}
