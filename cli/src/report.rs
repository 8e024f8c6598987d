//! `culprit report`: per-node, per-process function profiles (calls, self and total time) from
//! the tracer, sample profiles per (program, image, function) and kernel event counts from the
//! sampler — over the whole run or a time range, as a table or JSON (schema in
//! `docs/report-json.md`). The content is built by `culprit_analysis::report`; this module
//! parses the options and renders it.

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::bail;

use culprit_analysis::data::{Dataset, LoadOptions};
use culprit_analysis::layers::report::LayersOptions;
use culprit_analysis::report::calls::{call_tree, neighbours, Side, TreeMark};
use culprit_analysis::report::{self, OsReport, ProcessReport, Report, ReportOptions};
pub use culprit_analysis::report::{Only, SortKey, SCHEMA};
use culprit_analysis::time;

use crate::diagnose::render::group_digits;

/// Arguments of `culprit report`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    culprit report                          # ./culprit-data, every node\n  \
    culprit report DATA --node io2 --sort calls\n  \
    culprit report DATA --from +60s --to +120s --program pvfs-server\n  \
    culprit report DATA --graph                # traced with CULPRIT_GRAPH=1\n  \
    culprit report DATA --stacks --node io2    # where each thread is now\n  \
    culprit report DATA --layers               # I/O layers side by side (seed 003)\n  \
    culprit report DATA --callers io_pread --callees handle_request\n  \
    culprit report DATA --json | jq '.nodes[0].processes[0].functions[0]'\n\n\
    With CULPRIT_HIST=1 at record time the function tables show p50/p90/p99/max call durations.")]
pub struct Args {
    /// Data directories (a root holding NODE/ directories, or node directories).
    #[arg(value_name = "DATA", default_value = "culprit-data")]
    pub data: Vec<PathBuf>,
    /// Only this node (repeatable).
    #[arg(long = "node", value_name = "NAME")]
    pub nodes: Vec<String>,
    /// Only this program (repeatable; traced processes by program name, samples by the
    /// program they ran in).
    #[arg(long = "program", value_name = "NAME")]
    pub programs: Vec<String>,
    /// Only this process id (repeatable).
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Start of the time range: ISO time (2026-11-22T13:05:00Z), epoch seconds, or +DURATION
    /// after the data's start. Intervals starting at or after it are included.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub from: Option<String>,
    /// End of the time range (exclusive): same forms as --from, or -DURATION before the data's
    /// end.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub to: Option<String>,
    /// Sort functions by: self (exclusive time), total (inclusive time), calls, avg (self time
    /// per call), name.
    #[arg(long, value_enum, default_value_t = SortKey::Self_)]
    pub sort: SortKey,
    /// Rows per table (0 = all).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Merge the processes of each node (per program) instead of one table per process.
    #[arg(long)]
    pub merge: bool,
    /// Show only: traces, samples, events or os (OS metrics).
    #[arg(long, value_enum)]
    pub only: Option<Only>,
    /// With --json: also list every OS metric's per-interval values (`series`).
    #[arg(long)]
    pub os_series: bool,
    /// Also show samples that belong to no node (the `_unassigned` directory).
    #[arg(long)]
    pub all: bool,
    /// Read binaries under this root instead of / (like perf report --symfs).
    #[arg(long, value_name = "DIR")]
    pub symfs: Option<PathBuf>,
    /// Where each thread is: every traced process's current stack (its last, if it is gone)
    /// with how long each open call has been running.
    #[arg(long)]
    pub stacks: bool,
    /// Show the call graph (processes traced with CULPRIT_GRAPH=1): each caller's callees,
    /// indented, with calls and time (like `uftrace graph`).
    #[arg(long)]
    pub graph: bool,
    /// Show the callers of this function (name or glob; repeatable; needs CULPRIT_GRAPH=1).
    #[arg(long, value_name = "FUNCTION")]
    pub callers: Vec<String>,
    /// Show the callees of this function (name or glob; repeatable; needs CULPRIT_GRAPH=1).
    #[arg(long, value_name = "FUNCTION")]
    pub callees: Vec<String>,
    /// Show the I/O layers (seed 003): each process's layers side by side with their
    /// characteristics over the range, and the layers that serialise their requests.
    #[arg(long)]
    pub layers: bool,
    /// With --layers --json: also each layer's characteristics per second (`series`).
    #[arg(long, requires = "layers")]
    pub layer_series: bool,
    /// Print JSON (schema culprit-report/1, see docs/report-json.md).
    #[arg(long)]
    pub json: bool,
}

/// Runs `culprit report`.
pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.data.is_empty() {
        bail!("no data directory given");
    }
    let ds = Dataset::open(
        &args.data,
        LoadOptions {
            include_unassigned: args.all,
            symfs: args.symfs.clone(),
            nodes: args.nodes.clone(),
            ..LoadOptions::default()
        },
    )?;
    if args.stacks {
        return crate::stacks::print(&ds, args.json);
    }
    let parse = |t: &Option<String>| t.as_deref().map(time::parse_time).transpose();
    let (from, to) = (parse(&args.from)?, parse(&args.to)?);
    if args.layers {
        let opts = LayersOptions {
            pids: args.pids.clone(),
            programs: args.programs.clone(),
            series: args.layer_series,
            ..LayersOptions::default()
        };
        return crate::layers::print(&ds, opts, from, to, args.json);
    }
    let opts = ReportOptions {
        programs: args.programs.clone(),
        pids: args.pids.clone(),
        from,
        to,
        sort: args.sort,
        // JSON has every row.
        limit: if args.json { 0 } else { args.limit },
        merge: args.merge,
        only: args.only,
        os_series: args.os_series,
    };
    let report = report::build(&ds, &opts)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_human(&mut out, &report, &args)?;
    }
    for w in &report.warnings {
        eprintln!("culprit: warning: {w}");
    }
    Ok(0)
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

fn print_os(out: &mut dyn std::io::Write, os: &OsReport) -> std::io::Result<()> {
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

fn print_human(out: &mut dyn std::io::Write, r: &Report, args: &Args) -> std::io::Result<()> {
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
            let who = if args.merge {
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
            if args.graph {
                print_graph(out, p)?;
            }
            for f in &args.callers {
                print_neighbours(out, p, f, Side::Callers)?;
            }
            for f in &args.callees {
                print_neighbours(out, p, f, Side::Callees)?;
            }
        }
        for s in &n.samples {
            let rate = match (s.freq_hz, s.period) {
                (Some(f), _) => format!("{f} Hz"),
                (None, Some(p)) => format!("period {}", group_digits(p)),
                _ => "?".to_string(),
            };
            writeln!(
                out,
                "\nsamples  ·  {} at {rate}  ·  {} interval(s)  ·  {} samples  ·  {} lost  ·  {}",
                s.event,
                s.intervals,
                group_digits(s.total),
                group_digits(s.lost),
                s.status
            )?;
            if s.missed_intervals > 0 {
                writeln!(out, "  note: {} interval(s) missed", s.missed_intervals)?;
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
    Ok(())
}

/// The function table: calls, self, total, self per call; the unwound calls when any; the
/// call-duration quantiles when histograms were recorded.
fn print_functions(out: &mut dyn std::io::Write, p: &ProcessReport) -> std::io::Result<()> {
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

fn no_graph(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(
        out,
        "  (no call graph: trace with CULPRIT_GRAPH=1, or `culprit record --graph`)"
    )
}

/// The call graph: from each function without a traced caller, its callees, indented
/// ([`call_tree`]); a subtree expanded above ends in `…`, recursion in `(recursive)`.
fn print_graph(out: &mut dyn std::io::Write, p: &ProcessReport) -> std::io::Result<()> {
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
    out: &mut dyn std::io::Write,
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
