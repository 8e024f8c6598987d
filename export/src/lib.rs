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
//!   as they go; aggregate formats (folded, pprof) keep one value per distinct
//!   stack, and per traced program (pprof: process) one per distinct call edge.
//! * **Outputs never recompute the analysis**: they render the loaded data, and the
//!   [`culprit_analysis::Diagnosis`] as given (`culprit diagnose --json`).
//! * **Nothing is half-written**: a file output is written beside its target and renamed when
//!   complete; a Parquet directory likewise.
//! * **Stacks are as deep as the data** (module `stacks`, the one place they are made): the
//!   sampler's call chains as sampled (`--call-graph fp`), the tracer's paths rebuilt from its
//!   caller → callee edges (`CULPRIT_GRAPH=1`), one frame where the data has neither.
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
pub mod request;
mod scan;
pub mod select;
mod stacks;

pub use error::{Error, Result};
pub use request::{Format, Request, Summary, Value, DEFAULT_READ_LIMIT};
pub use select::Selection;

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
