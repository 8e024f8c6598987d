//! `culprit export`: the data in the formats of other tools (the culprit-export crate).

use std::path::PathBuf;

use culprit_export::{Format, Request, Selection, Value};

use crate::features::{self, Part};

/// Arguments of `culprit export`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    culprit export DATA --format folded | inferno-flamegraph > calls.svg\n  \
    culprit export DATA --format pprof -o prof.pb.gz && go tool pprof -top prof.pb.gz\n  \
    culprit diagnose DATA --json > d.json; culprit export DATA --format chrome --diagnosis d.json -o trace.json\n  \
    culprit export DATA --format csv -o prof.csv      # and prof.os.csv\n  \
    culprit export DATA --format parquet -o history/  # node=…/day=… partitions")]
pub struct Args {
    /// Data directories (a root holding NODE/ directories, or node directories).
    #[arg(value_name = "DATA", default_value = "culprit-data")]
    pub data: Vec<PathBuf>,
    /// Output format.
    #[arg(long, short = 'f', value_enum)]
    pub format: Format,
    /// Output file (a directory for parquet); standard output when absent.
    #[arg(long, short = 'o', value_name = "OUT")]
    pub output: Option<PathBuf>,
    /// Folded: what stacks count; pprof: the default sample type (self when the selection has
    /// traced calls, else samples).
    #[arg(long, value_enum)]
    pub value: Option<Value>,
    /// Chrome: draw this diagnosis (culprit diagnose --json) with the data.
    #[arg(long, value_name = "FILE.json")]
    pub diagnosis: Option<PathBuf>,
    /// Only this node (repeatable).
    #[arg(long = "node", value_name = "NAME")]
    pub nodes: Vec<String>,
    /// Only this program (repeatable; traced processes by program, samples by the program
    /// they ran in).
    #[arg(long = "program", value_name = "NAME")]
    pub programs: Vec<String>,
    /// Only this traced process (repeatable).
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Start of the time range, as in culprit report (ISO, epoch seconds, +DURATION).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub from: Option<String>,
    /// End of the time range (exclusive), as in culprit report (also -DURATION).
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub to: Option<String>,
    /// Also export samples that belong to no node (the `_unassigned` directory).
    #[arg(long)]
    pub all: bool,
    /// Read binaries under this root instead of / (like perf report --symfs).
    #[arg(long, value_name = "DIR")]
    pub symfs: Option<PathBuf>,
    /// Folded and pprof: leave out the node and program frames that start every stack (nodes
    /// and programs then merge in a flame graph).
    #[arg(long)]
    pub no_origin_frames: bool,
}

/// Runs `culprit export`.
pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.format == Format::Parquet {
        features::require(Part::Parquet)?;
    }
    let mut req = Request::new(args.data, args.format);
    req.selection = Selection {
        nodes: args.nodes,
        programs: args.programs,
        pids: args.pids,
        from: args.from,
        to: args.to,
    };
    req.include_unassigned = args.all;
    req.symfs = args.symfs;
    req.output = args.output;
    req.value = args.value;
    req.diagnosis = args.diagnosis;
    req.origin_frames = !args.no_origin_frames;
    let summary = culprit_export::export(&req)?;
    for n in &summary.notes {
        eprintln!("culprit: note: {n}");
    }
    for w in &summary.warnings {
        eprintln!("culprit: warning: {w}");
    }
    Ok(0)
}
