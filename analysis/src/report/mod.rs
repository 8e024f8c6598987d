//! `culprit report`'s content: per-node, per-process function profiles (calls, self and total
//! time) from the tracer, sample profiles per (program, image, function) and kernel event
//! counts from the sampler, and OS metric statistics — over the whole run or a time range, as
//! a typed [`Report`] that the command renders as a table or JSON (schema in
//! `docs/report-json.md`). Nothing is computed while rendering.

//!
//! The types are in `types.rs`, [`build`] in `build.rs`; the call tree and a function's
//! neighbours, as `culprit report --graph`, `--callers` and `--callees` show them, in
//! [`calls`].

mod build;
pub mod calls;
pub mod cost;
mod types;

pub use build::build;
pub use types::{
    EdgeRow, EventRow, FunctionRow, Latency, NodeReport, Only, OsMetricRow, OsReport,
    ProcessReport, Report, ReportOptions, SampleRow, SamplesReport, SortKey, SCHEMA,
};
