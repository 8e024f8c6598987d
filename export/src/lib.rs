//! culprit's exports: the loaded data (and a diagnosis) in the formats of the tools people
//! already use.
//!
//! | format | what | read with |
//! | --- | --- | --- |
//! | [`Format::Folded`] | folded stacks, one line per stack and value | flamegraph.pl, inferno, speedscope |
//! | [`Format::Pprof`] | gzipped `profile.proto`: calls, self time, samples; node, program and pid labels | `go tool pprof` |
//! | [`Format::Chrome`] | Chrome trace-event JSON: per node and process, counter tracks per function; a diagnosis' windows and verdicts as slices and markers | Perfetto, `chrome://tracing` |
//! | [`Format::Csv`] | per node, interval and function: calls, self, total, samples; OS metrics and kernel events in a second file | anything |
//! | [`Format::Parquet`] | the same two tables, partitioned by node and day (`node=…/day=…/`) | DuckDB, Spark, pandas |
//!
//! Design constraints:
//!
//! * **Memory is bounded, whatever the data's size.** The dataset is read in steps
//!   ([`culprit_analysis::data::Dataset::set_read_limit`]): each step's intervals go to the
//!   format's writer, then are forgotten (module `scan`). Table formats (CSV, Parquet, Chrome) write
//!   as they go; aggregate formats (folded, pprof) keep one value per distinct stack.
//! * **Outputs never recompute the analysis**: they render the loaded data, and the
//!   [`culprit_analysis::Diagnosis`] as given (`culprit diagnose --json`).
//! * **Nothing is half-written**: a file output is written beside its target and renamed when
//!   complete; a Parquet directory likewise.
//! * **Stacks are as deep as the data**: the loader gives per-function totals (tracer) and
//!   per-function sample counts (sampler), so stacks are one frame deep today; call paths
//!   enter in one place (module `stacks`).
//!
//! The selection (node, program, pid, time range) is `culprit report`'s ([`Selection`]).

#![deny(unsafe_code)]

mod chrome;
mod csv;
pub mod error;
mod folded;
mod out;
#[cfg(feature = "parquet")]
mod parquet;
mod pprof;
mod scan;
pub mod select;
mod stacks;

use std::path::PathBuf;

pub use error::{Error, Result};
pub use select::Selection;

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

/// Exports as `req` asks.
pub fn export(req: &Request) -> Result<Summary> {
    if req.data.is_empty() {
        return Err(Error::Usage("no data directory given".into()));
    }
    if req.diagnosis.is_some() && req.format != Format::Chrome {
        return Err(Error::Usage(
            "--diagnosis is drawn by --format chrome only".into(),
        ));
    }
    if req.value.is_some() && !matches!(req.format, Format::Folded | Format::Pprof) {
        return Err(Error::Usage(
            "--value applies to --format folded and pprof only (the other formats carry every \
             value)"
                .into(),
        ));
    }
    let reader = scan::Reader::new(req)?;
    match req.format {
        Format::Folded => folded::export(req, &reader),
        Format::Pprof => pprof::export(req, &reader),
        Format::Chrome => chrome::export(req, &reader),
        Format::Csv => csv::export(req, &reader),
        #[cfg(feature = "parquet")]
        Format::Parquet => parquet::export(req, &reader),
        #[cfg(not(feature = "parquet"))]
        Format::Parquet => Err(Error::Usage(
            "this culprit was built without Parquet (the culprit-export crate's `parquet` \
             feature)"
                .into(),
        )),
    }
}
