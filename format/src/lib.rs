//! The record format culprit's parts share: the tracer runtime (`libculprit_rt.so`) and the
//! sampler write it, `culprit report` / `train` / `diagnose` read it.
//!
//! This crate is the *contract*. It holds the byte layout, an encoder that builds records into a
//! buffer ([`encode`]), a validating decoder of records in memory ([`decode`]), and the file I/O
//! every writer and reader shares: the one reader of `.cul` streams ([`read`]: committed-end
//! tailing from a saved offset, bounded memory, damage found and located, ended/open state), an
//! append-only file writer ([`writer`], for the sampler and tests), and the process facts writers
//! record and readers compare ([`procfs`]: boot id, start times, host name). It uses `std` only
//! and has no dependencies, so the runtime can link it without pulling anything else into
//! programs it is loaded into; the runtime uses the encoder, the decoder of its own queue and
//! `procfs` (from its flusher thread, where it may allocate), not the reader.
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
//! * `….r<n>.cul` — piece `n` of a rotated writer's history ([`rotation`]): same identity,
//!   Info [`info_keys::CONTINUES`] names the previous piece; the previous piece ends with
//!   [`end_reason::ROTATED`].
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
//! Version 4 changed the record checksum: it covers the record header (kind, flags, length,
//! reserved word) as well as the payload, so a flipped kind or length is damage found, not a
//! record misread or silently skipped. Files of version 4 need reader version 2. This reader
//! still reads files of versions 1 to 3: it picks the checksum rule by the file's `version`
//! ([`HEADER_CRC_SINCE`], [`record_crc`]).
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
//! | [`RecordKind::Layers`] | both | a stretch of layer-boundary I/O events (seed 003): per event its time, layer, ADMIT/ISSUE/COMPLT/CALLBACK, request, object, offset, bytes ([`layers`]) |
//! | [`RecordKind::Requests`] | tracer | a stretch of sampled requests (seed 004): per event its time, thread, BEGIN (id, parent id, type) / END / CALL (function, depth, inclusive and exclusive ns) ([`requests`]); since format version 6 |
//! | [`RecordKind::Wakeups`] | tracer | one interval's flusher wake-ups and how late they came (a stopped or starved process); since version 7 also how late the interval was written and the calls moved into it from earlier intervals |
//! | [`RecordKind::Lost`] | sampler | one interval's records the kernel dropped: samples, kernel-event records and process-tracking records apart, and whether they were the node's own or the machine's ([`lost_whose`]); since format version 7, only for intervals that lost something |
//! | [`RecordKind::Cost`] | tracer | one interval's CPU time of the process and the runtime's estimate of its own share ([`cost`]); since format version 7 |
//! | [`RecordKind::Demotions`] | tracer | functions the runtime stopped tracing to keep its cost within budget: when, why, their calls and self time then, the callers they were seen called from ([`cost`]); since format version 7 |
//! | [`RecordKind::End`] | both | clean end: nothing follows |
//!
//! The tracer writes an interval's Unwound, Edges, Histograms and Cost records (kinds 9–11
//! and 18; edges and histograms only when asked for at record time) right after its Interval
//! record, with the same `start_ns`; records with the same start add up, like Interval
//! records.
//!
//! A trace file (format version 4) also has a *stacks region* between the header page and the
//! first record, rewritten in place: every live thread's innermost open calls as of the last
//! interval ([`stacks`]).
//!
//! Every interval gets a record, even an empty one; an interval the writer could not observe is
//! written with [`interval_flags::MISSED`] (the tracer, which places every call in its interval
//! itself, only when it fell more than 64 intervals behind: a late tracer writes intervals
//! late, exact). A file without an `End` record belongs to a process
//! that is still running or that died; readers must not read a gap as zeros.

#![deny(unsafe_code)]

mod bytes;
pub mod cost;
mod crc;
pub mod decode;
pub mod duration;
pub mod encode;
pub mod glob;
pub mod interval;
pub mod layers;
pub mod layout;
pub mod names;
pub mod os_metrics;
pub mod procfs;
pub mod read;
pub mod requests;
pub mod rotation;
pub mod stacks;
#[cfg(feature = "test-support")]
pub mod synthetic;
pub mod vocab;
pub mod writer;

pub use cost::{
    demotion_reason, CostRec, Demotion, DemotionsHead, DemotionsRec, COST_SIZE,
    DEMOTIONS_FIXED_SIZE, DEMOTION_ENTRY_SIZE,
};
pub use crc::{crc32, record_crc, Crc32};
pub use decode::{
    parse_header, pending_interval, pending_records, records_at, records_in, EdgeEntry, EdgesRec,
    EndRec, EventEntry, EventsRec, FormatError, Histogram, HistogramsRec, Info, IntervalEntry,
    IntervalRec, LostRec, ObjectRec, OsMetricEntry, OsMetricsHead, OsMetricsRec, ParsedFile,
    Pending, Record, Records, SampleEntry, SamplesHead, SamplesRec, StackEntry, StacksRec,
    StringsRec, UnwoundEntry, UnwoundRec, WakeupsRec,
};
pub use encode::{ObjectDesc, RecordBuf};
pub use interval::{IntervalHead, IntervalKey, IntervalRef};
pub use layers::{
    layer_kind, layer_level, layer_op, LayerDesc, LayerEvent, LayersHead, LayersRec,
    LAYERS_FIXED_SIZE, LAYER_EVENT_SIZE, MAX_LAYER_NAME, NO_OFFSET,
};
pub use layout::*;
pub use requests::{
    request_kind, RequestEvent, RequestsHead, RequestsRec, REQUESTS_FIXED_SIZE, REQUEST_EVENT_SIZE,
};
