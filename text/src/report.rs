//! `culprit report` for people: per node, each process's function table (with the call graph,
//! callers and callees when asked), the sample profiles, kernel event counts and OS metrics of
//! a [`Report`] built by `culprit_analysis::report`.

use std::io::Write;

use culprit_analysis::report::calls::{call_tree, neighbours, Side, TreeMark};
use culprit_analysis::report::{OsReport, ProcessReport, Report};
use culprit_analysis::time::{self, group_digits};

/// What `culprit report` was asked to show beside the tables.
#[derive(Debug, Clone, Copy, Default)]
pub struct Show<'a> {
    /// The processes of each node were merged per program (`--merge`).
    pub merge: bool,
    /// Each process's call graph (`--graph`).
    pub graph: bool,
    /// The callers of these functions, names or globs (`--callers`).
    pub callers: &'a [String],
    /// The callees of these functions, names or globs (`--callees`).
    pub callees: &'a [String],
}

/// A value for the table: enough digits to read, not more.
fn os_number(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e6 {
        format!("{v:.3e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

fn print_os(out: &mut dyn Write, os: &OsReport) -> std::io::Result<()> {
    writeln!(
        out,
        "
OS metrics  ·  {} interval(s) of {}{}",
        os.intervals,
        time::duration(os.interval_ns),
        if os.missed_intervals > 0 {
            format!("  ·  {} missed", os.missed_intervals)
        } else {
            String::new()
        }
    )?;
    writeln!(
        out,
        "  {:<22} {:<10} {:>11} {:>11} {:>11}  {:<10} absent",
        "metric", "instance", "mean", "min", "max", "unit"
    )?;
    for m in &os.metrics {
        writeln!(
            out,
            "  {:<22} {:<10} {:>11} {:>11} {:>11}  {:<10} {}",
            m.metric,
            m.instance.as_deref().unwrap_or("-"),
            os_number(m.mean),
            os_number(m.min),
            os_number(m.max),
            m.unit,
            m.absent
        )?;
    }
    Ok(())
}

/// Prints the report for people.
pub fn print_human(r: &Report, show: Show<'_>, out: &mut impl Write) -> std::io::Result<()> {
    if r.to_ns > r.from_ns {
        writeln!(
            out,
            "culprit report: {} node(s), {} – {} ({})",
            r.nodes.len(),
            time::wall_iso(r.from_ns),
            time::wall_iso(r.to_ns),
            time::duration(r.to_ns - r.from_ns)
        )?;
    } else {
        writeln!(
            out,
            "culprit report: {} node(s), no intervals in range",
            r.nodes.len()
        )?;
    }
    for n in &r.nodes {
        writeln!(out)?;
        writeln!(out, "== node {} ==", n.node)?;
        for p in &n.processes {
            let who = if show.merge {
                format!("{} (merged: {} process files)", p.program, p.files.len())
            } else {
                format!("pid {} {}", p.pid, p.program)
            };
            let span = match (p.first_ns, p.last_ns) {
                (Some(a), Some(b)) => {
                    format!("{}–{}", time::clock(a), time::clock(b))
                }
                _ => "no intervals in range".to_string(),
            };
            let mut status = p.status.clone();
            if let Some(d) = &p.damage {
                status = format!("damaged ({d})");
            } else if status == "stopped" {
                status = "stopped without end marker (killed or crashed)".to_string();
            } else if status == "exec" {
                status = "replaced by exec (continues in the next file)".to_string();
            }
            let source = if p.source == "instrumentation" {
                String::new()
            } else {
                format!("  ·  counts from {}", p.source)
            };
            writeln!(
                out,
                "\n{who}  ·  {} interval(s) of {}  ·  {span}  ·  {status}{source}",
                p.intervals,
                time::duration(p.interval_ns)
            )?;
            let mut notes = Vec::new();
            if p.missed_intervals > 0 {
                notes.push(format!("{} interval(s) missed", p.missed_intervals));
            }
            if p.lost_frames > 0 {
                notes.push(format!(
                    "{} exit(s) matched no open call (the runtime lost track of them)",
                    p.lost_frames
                ));
            }
            let unwound: u64 = p.functions.iter().map(|f| f.unwound).sum();
            if unwound > 0 {
                notes.push(format!(
                    "{} call(s) did not return (left by longjmp, an exception or \
                     cancellation): counted as ending when the runtime noticed (column unwound)",
                    unwound
                ));
            }
            if p.overflows > 0 {
                notes.push(format!(
                    "{} call(s) not accounted (a call stack too deep, or too many distinct \
                     functions in one thread: see the limits in docs/tracer.md)",
                    p.overflows
                ));
            }
            if p.dropped_calls > 0 {
                notes.push(format!(
                    "{} call(s) not traced (a signal handler's calls while a hook ran, a \
                     thread without a table, or calls made while the runtime was stopped)",
                    p.dropped_calls
                ));
            }
            if !notes.is_empty() {
                writeln!(out, "  note: {}", notes.join("; "))?;
            }
            for t in &p.trouble {
                let (at, what) = t.split_once(": ").unwrap_or(("", t));
                let when = at
                    .parse::<u64>()
                    .map(time::clock)
                    .unwrap_or_else(|_| at.to_string());
                writeln!(out, "  trouble at {when}: {what}")?;
            }
            if p.functions.is_empty() {
                writeln!(out, "  (no calls in range)")?;
                continue;
            }
            print_functions(out, p)?;
            if show.graph {
                print_graph(out, p)?;
            }
            for f in show.callers {
                print_neighbours(out, p, f, Side::Callers)?;
            }
            for f in show.callees {
                print_neighbours(out, p, f, Side::Callees)?;
            }
        }
        for s in &n.samples {
            let rate = match (s.freq_hz, s.period) {
                (Some(f), _) => format!("{f} Hz"),
                (None, Some(p)) => format!("period {}", group_digits(p)),
                _ => "?".to_string(),
            };
            // The node's own loss; what the kernel could not attribute is said once, below.
            let lost = match s.machine_loss {
                Some(i) if s.lost == 0 => {
                    format!("lost: not attributable to a node (note {})", i + 1)
                }
                Some(i) => format!("{} lost (and note {})", group_digits(s.lost), i + 1),
                None => format!("{} lost", group_digits(s.lost)),
            };
            writeln!(
                out,
                "\nsamples  ·  {} at {rate}  ·  {} interval(s)  ·  {} samples  ·  {lost}  ·  {}",
                s.event,
                s.intervals,
                group_digits(s.total),
                s.status
            )?;
            if s.missed_intervals > 0 {
                writeln!(out, "  note: {} interval(s) missed", s.missed_intervals)?;
            }
            if s.lost_events + s.lost_tracking > 0 {
                writeln!(
                    out,
                    "  note: the kernel dropped {} kernel-event and {} process-tracking record(s) \
                     of this node (its event counts are short by the first)",
                    group_digits(s.lost_events),
                    group_digits(s.lost_tracking)
                )?;
            }
            writeln!(
                out,
                "  {:>10}  {:>6}  {:<16}  function (image)",
                "samples", "%", "program"
            )?;
            for e in &s.entries {
                let pct = if s.total > 0 {
                    100.0 * e.samples as f64 / s.total as f64
                } else {
                    0.0
                };
                writeln!(
                    out,
                    "  {:>10}  {:>5.1}%  {:<16}  {} ({})",
                    group_digits(e.samples),
                    pct,
                    e.program,
                    e.function,
                    e.image
                )?;
            }
        }
        if !n.events.is_empty() {
            writeln!(out, "\nkernel events")?;
            for e in &n.events {
                writeln!(out, "  {:>12}  {}", group_digits(e.count), e.event)?;
            }
        }
        if let Some(os) = &n.os {
            print_os(out, os)?;
        }
    }
    print_machine_losses(r, out)
}

/// What each sampler run lost that belongs to no node in particular, once per run.
fn print_machine_losses(r: &Report, out: &mut impl Write) -> std::io::Result<()> {
    if r.machine_losses.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "\nsampler losses not attributable to a node (a CPU's ring is shared by every node; the \
         kernel says how many records it dropped, not whose):"
    )?;
    for (i, l) in r.machine_losses.iter().enumerate() {
        let mut what = Vec::new();
        if l.samples + l.events + l.tracking > 0 || l.unsorted == 0 {
            what.push(format!(
                "{} samples, {} kernel-event records, {} process-tracking records",
                group_digits(l.samples),
                group_digits(l.events),
                group_digits(l.tracking)
            ));
        }
        if l.unsorted > 0 {
            what.push(format!(
                "{} records of any kind (files older than format 7 did not tell them apart)",
                group_digits(l.unsorted)
            ));
        }
        writeln!(
            out,
            "  {}. host {}{}, nodes {}: {}",
            i + 1,
            if l.host.is_empty() { "?" } else { &l.host },
            l.sampler_pid
                .map(|p| format!(", sampler pid {p}"))
                .unwrap_or_default(),
            l.nodes.join(", "),
            what.join("; ")
        )?;
    }
    Ok(())
}

/// The function table: calls, self, total, self per call; the unwound calls when any; the
/// call-duration quantiles when histograms were recorded.
fn print_functions(out: &mut dyn Write, p: &ProcessReport) -> std::io::Result<()> {
    let unwound = p.functions.iter().any(|f| f.unwound > 0);
    let lat = p.functions.iter().any(|f| f.latency.is_some());
    let mut head = format!(
        "  {:>12}  {:>10}  {:>10}  {:>10}",
        "calls", "self", "total", "self/call"
    );
    if unwound {
        head += &format!("  {:>10}", "unwound");
    }
    if lat {
        head += &format!("  {:>9}  {:>9}  {:>9}  {:>9}", "p50", "p90", "p99", "max");
    }
    writeln!(out, "{head}  function (image)")?;
    for f in &p.functions {
        let avg = f.self_ns.checked_div(f.calls).unwrap_or(0);
        let mut row = format!(
            "  {:>12}  {:>10}  {:>10}  {:>10}",
            group_digits(f.calls),
            time::duration(f.self_ns),
            time::duration(f.total_ns),
            time::duration(avg)
        );
        if unwound {
            row += &format!("  {:>10}", group_digits(f.unwound));
        }
        if lat {
            match &f.latency {
                Some(l) => {
                    row += &format!(
                        "  {:>9}  {:>9}  {:>9}  {:>9}",
                        time::duration(l.p50_ns),
                        time::duration(l.p90_ns),
                        time::duration(l.p99_ns),
                        if l.max_ns == u64::MAX {
                            "long".to_string()
                        } else {
                            time::duration(l.max_ns)
                        }
                    )
                }
                None => row += &format!("  {:>9}  {:>9}  {:>9}  {:>9}", "", "", "", ""),
            }
        }
        writeln!(out, "{row}  {} ({})", f.function, f.image)?;
    }
    Ok(())
}

fn no_graph(out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "  (no call graph: trace with CULPRIT_GRAPH=1, or `culprit record --graph`)"
    )
}

/// The call graph: from each function without a traced caller, its callees, indented
/// ([`call_tree`]); a subtree expanded above ends in `…`, recursion in `(recursive)`.
fn print_graph(out: &mut dyn Write, p: &ProcessReport) -> std::io::Result<()> {
    let Some(edges) = &p.edges else {
        return no_graph(out);
    };
    writeln!(
        out,
        "\n  call graph (calls and time of each callee when called by the function above it)"
    )?;
    writeln!(
        out,
        "  {:>12}  {:>10}  {:>10}  function",
        "calls", "total", "self"
    )?;
    for l in call_tree(edges) {
        let mark = match l.mark {
            TreeMark::None => "",
            TreeMark::Again => " …",
            TreeMark::Recursive => " (recursive)",
        };
        writeln!(
            out,
            "  {:>12}  {:>10}  {:>10}  {}{}{}",
            group_digits(l.edge.calls),
            time::duration(l.edge.total_ns),
            time::duration(l.edge.self_ns),
            "  ".repeat(l.depth),
            l.edge.callee,
            mark
        )?;
    }
    if p.edge_drops > 0 {
        writeln!(
            out,
            "  note: {} call(s) have no edge (the runtime's edge table was full)",
            group_digits(p.edge_drops)
        )?;
    }
    Ok(())
}

/// The callers (or callees) of the functions matching `pattern` (a name or a glob).
fn print_neighbours(
    out: &mut dyn Write,
    p: &ProcessReport,
    pattern: &str,
    side: Side,
) -> std::io::Result<()> {
    let Some(edges) = &p.edges else {
        return no_graph(out);
    };
    let rows = neighbours(edges, pattern, side);
    let what = match side {
        Side::Callers => "callers",
        Side::Callees => "callees",
    };
    writeln!(out, "\n  {what} of {pattern}")?;
    if rows.is_empty() {
        writeln!(out, "  (none in range)")?;
        return Ok(());
    }
    writeln!(
        out,
        "  {:>12}  {:>10}  {:>10}  {}",
        "calls",
        "total",
        "self",
        match side {
            Side::Callers => "caller → function",
            Side::Callees => "function → callee",
        }
    )?;
    for e in rows {
        writeln!(
            out,
            "  {:>12}  {:>10}  {:>10}  {} → {}",
            group_digits(e.calls),
            time::duration(e.total_ns),
            time::duration(e.self_ns),
            e.caller.as_deref().unwrap_or("(no traced caller)"),
            e.callee
        )?;
    }
    Ok(())
}
