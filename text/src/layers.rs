//! `culprit report --layers` for people: each process's I/O layers side by side (seed 003 §3's
//! characteristics over the range shown, highest layer first) and the layers that serialise
//! their requests. The content is `culprit_analysis::layers::report`'s [`LayersReport`].

use std::io::Write;

use culprit_analysis::layers::report::{LayerSummary, LayersReport};
use culprit_analysis::layers::serial;
use culprit_analysis::time;

/// Prints the layers report; `has_events` tells whether the data holds layer events at all
/// (outside the range too), for the message when the report has none.
pub fn print_human(
    r: &LayersReport,
    has_events: bool,
    out: &mut impl Write,
) -> std::io::Result<()> {
    if r.nodes.is_empty() {
        writeln!(
            out,
            "no I/O layer events{}: mark the program's layers with culprit_io_admit & co. \
             (culprit.h), or trace with CULPRIT_IO=1 (the C library's calls)",
            if has_events { " in range" } else { "" }
        )?;
        return Ok(());
    }
    writeln!(
        out,
        "I/O layers from {} to {} (seed 003's characteristics over the range)",
        time::fmt_wall(r.from_ns),
        time::fmt_wall(r.to_ns)
    )?;
    for n in &r.nodes {
        for p in &n.processes {
            writeln!(out)?;
            writeln!(
                out,
                "{}  pid {}{}",
                n.node,
                p.pid,
                p.program
                    .as_deref()
                    .map_or(String::new(), |p| format!(" {p}"))
            )?;
            table(out, &p.layers)?;
            if p.dropped_events > 0 {
                writeln!(
                    out,
                    "  ({} marks dropped: requests missing their last event count as \
                     outstanding until the data ends)",
                    p.dropped_events
                )?;
            }
            for s in &p.serialised {
                writeln!(out, "  SERIALISED: {}", serial::describe(s))?;
            }
        }
    }
    Ok(())
}

type Row = (&'static str, fn(&LayerSummary) -> String);

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

const ROWS: &[Row] = &[
    ("level", |l| l.level.to_string()),
    ("requests", |l| l.total.requests.to_string()),
    ("MB", |l| format!("{:.3}", l.total.bytes as f64 / 1e6)),
    ("avg size KiB", |l| {
        opt(l.total.avg_size.map(|v| v / 1024.0), 1)
    }),
    ("max size KiB", |l| {
        format!("{:.1}", l.total.max_size as f64 / 1024.0)
    }),
    ("sequential %", |l| {
        opt(l.total.sequential.map(|v| v * 100.0), 1)
    }),
    ("run (requests)", |l| opt(l.run_requests, 1)),
    ("concurrency avg", |l| format!("{:.3}", l.total.concurrency)),
    ("  while busy", |l| opt(l.busy_concurrency, 2)),
    ("  max", |l| l.total.max_concurrency.to_string()),
    ("idle %", |l| format!("{:.1}", l.total.idle * 100.0)),
    ("MB/s busy", |l| opt(l.total.throughput_mb_s, 2)),
    ("latency ms", |l| opt(l.total.latency_ms, 3)),
    ("queue ms", |l| opt(l.total.queue_ms, 3)),
    ("below ms", |l| opt(l.total.below_ms, 3)),
    ("reply ms", |l| opt(l.total.reply_ms, 3)),
];

/// Characteristics as rows, layers as columns (highest on the left).
fn table(out: &mut impl Write, layers: &[LayerSummary]) -> std::io::Result<()> {
    let w = layers
        .iter()
        .map(|l| l.layer.chars().count())
        .max()
        .unwrap_or(0)
        .max(10);
    write!(out, "  {:<16}", "layer")?;
    for l in layers {
        write!(out, " {:>w$}", l.layer)?;
    }
    writeln!(out)?;
    for (name, f) in ROWS {
        write!(out, "  {name:<16}")?;
        for l in layers {
            write!(out, " {:>w$}", f(l))?;
        }
        writeln!(out)?;
    }
    Ok(())
}
