//! What an export is asked to do ([`Request`]: data, selection, format, output) and what it did
//! ([`Summary`]).

use std::path::PathBuf;

use crate::select::Selection;

/// Bytes of each data file read per step by default: small enough that memory stays flat, large
/// enough that a step's fixed cost (listing the directories) does not matter.
pub const DEFAULT_READ_LIMIT: u64 = 4 << 20;

/// An export format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    /// Folded stacks for flame graphs (flamegraph.pl, inferno, speedscope).
    Folded,
    /// pprof: gzipped profile.proto (go tool pprof).
    Pprof,
    /// Chrome trace-event JSON (Perfetto, chrome://tracing).
    Chrome,
    /// CSV: per node, interval and function; kernel events and OS metrics in FILE.os.csv.
    Csv,
    /// Parquet, partitioned by node and day (DuckDB, Spark); -o DIR.
    Parquet,
}

/// What a folded stack counts (and pprof's default sample type).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Value {
    /// The tracer's exclusive time, ns.
    #[cfg_attr(feature = "clap", value(name = "self"))]
    SelfTime,
    /// The tracer's calls.
    Calls,
    /// The sampler's samples.
    Samples,
}

/// What to export, from where, to where.
#[derive(Clone, Debug)]
pub struct Request {
    /// Data directories (roots holding `<node>/`, or node directories).
    pub data: Vec<PathBuf>,
    /// Which part of the data.
    pub selection: Selection,
    /// Also read `_unassigned/` (samples that belong to no node).
    pub include_unassigned: bool,
    /// Read binaries under this root instead of `/` (symbols of traced functions).
    pub symfs: Option<PathBuf>,
    /// The format.
    pub format: Format,
    /// Output file (a directory for Parquet); standard output when `None`.
    pub output: Option<PathBuf>,
    /// Folded: what stacks count; pprof: the default sample type. `None`: self time when
    /// the selection has traced calls, else samples.
    pub value: Option<Value>,
    /// A diagnosis report (`culprit diagnose --json`) to draw with the data (Chrome only).
    pub diagnosis: Option<PathBuf>,
    /// Bytes of each data file read per step ([`DEFAULT_READ_LIMIT`]).
    pub read_limit: u64,
    /// Folded and pprof: the node and the program as a stack's first two frames, so that a
    /// flame graph keeps nodes apart (`culprit export --no-origin-frames` leaves them out).
    pub origin_frames: bool,
}

impl Request {
    /// A request for `format` of `data`, everything selected, to standard output.
    pub fn new(data: Vec<PathBuf>, format: Format) -> Self {
        Request {
            data,
            selection: Selection::default(),
            include_unassigned: false,
            symfs: None,
            format,
            output: None,
            value: None,
            diagnosis: None,
            read_limit: DEFAULT_READ_LIMIT,
            origin_frames: true,
        }
    }
}

/// What an export did.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Files written (empty when the output went to standard output only).
    pub written: Vec<PathBuf>,
    /// Rows, events or stacks written.
    pub items: u64,
    /// What the reader should know (stacks one frame deep, a file not written…).
    pub notes: Vec<String>,
    /// Problems found while loading (damaged files, binaries not found).
    pub warnings: Vec<String>,
}
