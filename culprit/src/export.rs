//! `culprit export`: the data in the formats of other tools (the culprit-export crate).

use std::path::PathBuf;

use culprit_export::{Format, Request, Selection, Value};

use crate::features::{self, Part};
use crate::select::DataSelection;

/// Arguments of `culprit export`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    culprit export DATA --format folded | inferno-flamegraph > calls.svg\n  \
    culprit export DATA --format pprof -o prof.pb.gz && go tool pprof -top prof.pb.gz\n  \
    culprit diagnose DATA --json > d.json; culprit export DATA --format chrome --diagnosis d.json -o trace.json\n  \
    culprit export DATA --format csv -o prof.csv      # and prof.os.csv\n  \
    culprit export DATA --format parquet -o history/  # node=…/day=… partitions")]
pub struct Args {
    /// The data directories and what of them to export.
    #[command(flatten)]
    pub select: DataSelection,
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
    let select = args.select;
    let mut req = Request::new(select.data, args.format);
    req.selection = Selection {
        nodes: select.nodes,
        programs: select.programs,
        pids: select.pids,
        from: select.from,
        to: select.to,
    };
    req.include_unassigned = select.all;
    req.symfs = select.symfs;
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
