//! `culprit report`: per-node, per-process function profiles (calls, self and total time) from
//! the tracer, sample profiles per (program, image, function) and kernel event counts from the
//! sampler — over the whole run or a time range, as a table or JSON (schema in
//! `docs/report-json.md`). The content is built by `culprit_analysis::report` and rendered
//! for people by `culprit_text::report` (`--layers`, `--stacks`: their modules there); this
//! module parses the options.

use std::io::Write as _;

use anyhow::bail;

use culprit_analysis::data::{Dataset, LoadOptions};
use culprit_analysis::layers::report::{self as layers, LayersOptions};
use culprit_analysis::report::{self, ReportOptions};
pub use culprit_analysis::report::{Only, SortKey, SCHEMA};
use culprit_analysis::{stacks, time};
use culprit_text::report::Show;

use crate::select::DataSelection;

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
    culprit report DATA --json | jq '.nodes[0].processes[0].functions[0]'\n  \
    culprit report DATA --exclude-flags      # gcc flags leaving the costliest hooks out\n\n\
    With CULPRIT_HIST=1 at record time the function tables show p50/p90/p99/max call durations.")]
pub struct Args {
    /// The data directories and what of them to show.
    #[command(flatten)]
    pub select: DataSelection,
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
    /// Print the gcc flags that leave out of each program's build the functions whose hooks
    /// cost most: those the runtime demoted to keep within its budget, and those whose calls
    /// keep the tracing cost above it (`-finstrument-functions-exclude-function-list=…`).
    #[arg(long, conflicts_with_all = ["json", "stacks", "layers", "graph"])]
    pub exclude_flags: bool,
    /// Print JSON (schema culprit-report/1, see docs/report-json.md).
    #[arg(long)]
    pub json: bool,
}

/// Runs `culprit report`.
pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.select.data.is_empty() {
        bail!("no data directory given");
    }
    let ds = Dataset::open(
        &args.select.data,
        LoadOptions {
            include_unassigned: args.select.all,
            symfs: args.select.symfs.clone(),
            nodes: args.select.nodes.clone(),
            ..LoadOptions::default()
        },
    )?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.stacks {
        let procs = stacks::snapshots(&ds);
        if args.json {
            serde_json::to_writer_pretty(&mut out, &procs)?;
            writeln!(out)?;
        } else {
            culprit_text::stacks::print_human(&procs, time::now_ns(), &mut out)?;
        }
        return Ok(0);
    }
    let parse = |t: &Option<String>| t.as_deref().map(time::parse_time).transpose();
    let (from, to) = (parse(&args.select.from)?, parse(&args.select.to)?);
    if args.layers {
        let opts = LayersOptions {
            pids: args.select.pids.clone(),
            programs: args.select.programs.clone(),
            series: args.layer_series,
            ..LayersOptions::default()
        };
        let r = layers::build_in(&ds, opts, from, to);
        if args.json {
            serde_json::to_writer_pretty(&mut out, &r)?;
            writeln!(out)?;
        } else {
            let has_events = layers::span(&ds).is_some();
            culprit_text::layers::print_human(&r, has_events, &mut out)?;
        }
        return Ok(0);
    }
    let opts = ReportOptions {
        programs: args.select.programs.clone(),
        pids: args.select.pids.clone(),
        from,
        to,
        sort: args.sort,
        // JSON has every row; the flags look at every function's name.
        limit: if args.json || args.exclude_flags {
            0
        } else {
            args.limit
        },
        merge: args.merge,
        only: args.only,
        os_series: args.os_series,
    };
    let report = report::build(&ds, &opts)?;
    if args.exclude_flags {
        culprit_text::report::print_exclude_flags(&report, &mut out)?;
    } else if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        let show = Show {
            merge: args.merge,
            graph: args.graph,
            callers: &args.callers,
            callees: &args.callees,
        };
        culprit_text::report::print_human(&report, show, &mut out)?;
    }
    for w in &report.warnings {
        eprintln!("culprit: warning: {w}");
    }
    Ok(0)
}
