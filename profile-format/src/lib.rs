//! The record format culprit's parts share: the tracer runtime (`libculprit_rt.so`) and the
//! sampler write it, `culprit report` / `train` / `diagnose` read it.
//!
//! This crate is the *contract*. It holds the byte layout, an encoder that builds records into a
//! buffer and a validating reader; it does no I/O of its own except the small [`writer`] module
//! (an append-only file writer used by the sampler and by tests). It has no dependencies, so the
//! runtime can link it without pulling anything else into programs it is loaded into.
//!
//! # Files
//!
//! A data directory holds one directory per node (`DATA/<node>/`), and in it:
//!
//! * `trace-<pid>-<start_ns>.cul` — one per traced process (see [`names`]). `start_ns` is the
//!   wall-clock time at which the runtime started in that process image, so a reused pid or an
//!   `exec` in the same process gets a new file. Files of counts taken through uprobes on an
//!   unmodified binary have the same form (Info [`info_keys::SOURCE`] = `uprobes`; `start_ns`
//!   is when probing began).
//! * `samples-<start_ns>.cul` — one per run of the sampler for this node: IP samples, kernel
//!   event counts and OS metrics.
//! * `node.info` — small `key=value` text file describing the node ([`names::NodeInfo`]).
//!
//! Directories whose names start with `_` (such as [`names::UNASSIGNED_DIR`]) are not nodes:
//! the sampler puts there samples it cannot attribute to a node, and diagnosis skips them.
//!
//! # Layout of a `.cul` file
//!
//! All integers are little-endian. A file is a fixed [`FileHeader`] (128 bytes, padded to
//! [`DATA_OFFSET`] = 4096 so a writer can map the header page on its own), followed by an
//! append-only log of records. Each record is a 16-byte [`RecordHeader`] (kind, flags, total
//! length, CRC-32 of the payload) and a payload padded to a multiple of 8 bytes.
//!
//! The header's `committed_end` is the file offset up to which records are complete. A writer
//! first writes a whole record past `committed_end`, then advances `committed_end`. A reader
//! trusts nothing past `committed_end`, so a writer killed in the middle of a record (`kill -9`)
//! leaves every earlier record readable, and a reader can read while the writer runs.
//!
//! Past `committed_end`, the tracer keeps a *checkpoint* of the interval in progress (header
//! field `pending_end`, format version 2): one PARTIAL Interval record it rewrites every 100 ms.
//! A reader adds it as the file's last record only when the writer is gone (a crash, `abort`,
//! `kill -9`): a crash then loses at most the calls since the last checkpoint
//! ([`ParsedFile::pending`]).
//!
//! # Versions
//!
//! The header carries the format `version` the writer used and the `min_reader_version` a reader
//! must implement to read it. A reader implementing [`READER_VERSION`] reads any file whose
//! `min_reader_version <= READER_VERSION`, skipping record kinds it does not know. Adding a
//! record kind or appending fields at the end of a record's fixed part is a compatible change
//! (bump `version` only); changing the meaning of an existing field needs `min_reader_version`
//! bumped as well.
//!
//! # Record kinds
//!
//! | kind | written by | content |
//! | --- | --- | --- |
//! | [`RecordKind::Info`] | both | `key=value` lines describing the process or sampler ([`info_keys`]) |
//! | [`RecordKind::Object`] | tracer | a loaded ELF object: load bias, address range, build-id, path |
//! | [`RecordKind::Interval`] | tracer | one interval's profile: per function address, calls, exclusive and inclusive ns |
//! | [`RecordKind::Strings`] | sampler | new entries of the file's string table |
//! | [`RecordKind::Samples`] | sampler | one interval's IP samples per (program, image, function) |
//! | [`RecordKind::Events`] | sampler | one interval's kernel event counts (tracepoints) |
//! | [`RecordKind::OsMetrics`] | sampler | one interval's OS metrics of a node: (metric, instance, unit, value) per entry, names in [`os_metrics`]; a metric without an entry is absent |
//! | [`RecordKind::Unwound`] | tracer | one interval's calls left by `longjmp`, exceptions or cancellation, per function |
//! | [`RecordKind::Edges`] | tracer | one interval's caller → callee edges: calls, exclusive and inclusive ns |
//! | [`RecordKind::Histograms`] | tracer | one interval's call-duration histograms (log2 buckets of ns), per function |
//! | [`RecordKind::Stacks`] | sampler | one interval's sampled call chains per program (`--call-graph fp`) |
//! | [`RecordKind::End`] | both | clean end: nothing follows |
//!
//! The tracer writes an interval's Unwound, Edges and Histograms records (kinds 9–11; the
//! latter two only when asked for at record time) right after its Interval record, with the
//! same `start_ns`; records with the same start add up, like Interval records.
//!
//! Every interval gets a record, even an empty one; an interval the writer could not observe is
//! written with [`interval_flags::MISSED`]. A file without an `End` record belongs to a process
//! that is still running or that died; readers must not read a gap as zeros.

#![deny(unsafe_code)]

mod crc;
pub mod decode;
pub mod encode;
pub mod layout;
pub mod names;
pub mod os_metrics;
pub mod writer;

pub use crc::crc32;
pub use decode::{
    pending_interval, pending_records, records_at, EdgeEntry, EdgesRec, EndRec, EventEntry,
    EventsRec, FormatError, Histogram, HistogramsRec, Info, IntervalEntry, IntervalKey,
    IntervalRec, ObjectRec, OsMetricEntry, OsMetricsRec, ParsedFile, Pending, Record, Records,
    SampleEntry, SamplesRec, StackEntry, StacksRec, StringsRec, UnwoundEntry, UnwoundRec,
};
pub use encode::{IntervalHead, IntervalRef, ObjectDesc, OsMetricsHead, RecordBuf, SamplesHead};
pub use layout::*;
