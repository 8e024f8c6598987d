//! Byte layout: the file header, the record header, record kinds, flags and fixed sizes.
//!
//! The structs here are `#[repr(C)]` so the runtime can place a [`FileHeader`] at the start of a
//! shared mapping and update `committed_end` / `state` atomically in place. Readers never cast
//! bytes to these structs: they decode field by field ([`crate::decode`]).

use std::mem::{offset_of, size_of};

/// First 8 bytes of every `.cul` file.
pub const MAGIC: [u8; 8] = *b"CULPRIT\0";
/// Format version this crate writes. Version 2 added the header's `pending_end` (the interval
/// in progress, for readers of a file whose writer died) and the Interval record's `dropped`
/// field (both invisible to version-1 readers, which read version-2 files unchanged), and
/// [`RecordKind::OsMetrics`] (version-1 readers skip it). Version 3 added the tracer's
/// [`RecordKind::Unwound`], [`RecordKind::Edges`] and [`RecordKind::Histograms`] records and
/// the sampler's [`RecordKind::Stacks`] (an interval's checkpoint may carry the tracer's after
/// its Interval record: a version-2 reader then ignores that checkpoint), and calls left by
/// `longjmp`, exceptions or cancellation count in the Interval entries (they were dropped and
/// counted in `lost_frames` before). Older readers skip the new kinds. Version 4: a record's
/// CRC covers its header (kind, flags, length, reserved word) as well as its payload
/// ([`HEADER_CRC_SINCE`]), so a flipped kind is damage, not a record silently skipped; readers
/// of version 1 cannot check such a CRC, hence [`MIN_READER_VERSION`] 2. Version 4 also added
/// [`RecordKind::Layers`] (layer-boundary I/O events), which older readers skip. Version 5 added
/// the trace file's stacks region (header fields `stacks_offset` and `stacks_len`, before
/// `data_offset`: older readers skip it; see [`crate::stacks`]) and the tracer's
/// [`RecordKind::Wakeups`] (older readers skip the kind). Version 6 added the tracer's
/// [`RecordKind::Requests`] (sampled requests and their calls; older readers skip the kind).
/// Version 7 appended two fields to [`RecordKind::Wakeups`] (`moved`, `written_late_ns`:
/// older readers read the first 48 bytes) and the flag [`interval_flags::LATE`] of the
/// tracer's Edges and Histograms records (older readers ignore it); a tracer of version 7
/// places every call in its interval itself, so a late writer writes intervals late, not
/// `MISSED`.
/// Version 7 also added the sampler's [`RecordKind::Lost`] (kind 16: what the kernel dropped, by
/// kind, and whose it was; older readers skip the kind), and the Samples record's `lost` counts
/// samples only (before, kernel-event and process-tracking records the kernel dropped were
/// counted there too whenever they shared a ring with the samples); and the tracer's
/// [`RecordKind::Demotions`] (kind 17: functions the runtime stopped tracing to stay within its
/// cost budget) and [`RecordKind::Cost`] (kind 18: the process's CPU time and the runtime's
/// estimated share of it, per interval; older readers skip both kinds), with the Info keys
/// [`info_keys::BUDGET`], [`info_keys::CALL_COST_PS`] and [`info_keys::DEMOTE`].
pub const FORMAT_VERSION: u16 = 7;
/// Oldest reader version able to read what this crate writes.
pub const MIN_READER_VERSION: u16 = 2;
/// Reader version this crate implements: it reads files whose `min_reader_version` is at most
/// this. Reader version 2 checks each record by the CRC rule of the file's `version`.
pub const READER_VERSION: u16 = 2;
/// First format version whose record CRC covers the record header; a file of an older version
/// has CRCs of the payload only, and a reader checks it that way.
pub const HEADER_CRC_SINCE: u16 = 4;
/// File offset of the first record. The header page is separate so it can be mapped alone.
pub const DATA_OFFSET: u64 = 4096;
/// Size of [`RecordHeader`] in bytes.
pub const RECORD_HEADER_SIZE: usize = 16;
/// Records are padded to a multiple of this many bytes.
pub const RECORD_ALIGN: usize = 8;
/// Largest record a reader accepts (256 MiB): a larger length field means corruption.
pub const MAX_RECORD_LEN: u32 = 256 << 20;
/// Extension of culprit's data files.
pub const FILE_EXTENSION: &str = "cul";

/// What a file holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum FileKind {
    /// Function-call profiles of one process, written by `libculprit_rt.so`.
    Trace = 1,
    /// IP-sample profiles and kernel event counts of one node, written by `culprit sample`.
    Samples = 2,
}

impl FileKind {
    /// Decodes the header's `kind` field.
    pub fn from_u32(v: u32) -> Option<Self> {
        match v {
            1 => Some(Self::Trace),
            2 => Some(Self::Samples),
            _ => None,
        }
    }
}

/// Values of the header's `state` field.
pub mod file_state {
    /// The writer is running, or died without writing an end marker.
    pub const OPEN: u32 = 0;
    /// The writer wrote an [`End`](crate::RecordKind::End) record and closed the file.
    pub const ENDED: u32 = 1;
}

/// The fixed header at offset 0 of every `.cul` file (128 bytes; the rest of the first 4096-byte
/// page is zero).
///
/// `committed_end`, `pending_end` and `state` are updated in place by the writer (`pwrite` of
/// the field, or an atomic store when the file is a shared mapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct FileHeader {
    /// [`MAGIC`].
    pub magic: [u8; 8],
    /// Format version the writer used.
    pub version: u16,
    /// Oldest reader version that can read this file.
    pub min_reader_version: u16,
    /// `size_of::<FileHeader>()` as the writer knew it (128 for version 1).
    pub header_size: u32,
    /// [`FileKind`] as `u32`.
    pub kind: u32,
    /// [`file_state`] value.
    pub state: u32,
    /// File offset of the first record ([`DATA_OFFSET`]).
    pub data_offset: u64,
    /// File offset up to which records are complete and valid.
    pub committed_end: u64,
    /// Wall-clock time the file was created, ns since the Unix epoch.
    pub created_ns: u64,
    /// Writer's process id.
    pub pid: u32,
    /// Reserved, zero.
    pub reserved0: u32,
    /// When greater than `committed_end`: the bytes from `committed_end` to here hold one
    /// [`RecordKind::Interval`] record flagged [`interval_flags::PARTIAL`], the counts of the
    /// interval in progress as of the writer's last checkpoint (the tracer writes one every
    /// 100 ms). It is not committed: the writer rewrites it at every checkpoint and sets this
    /// field to 0 before it commits more records. A reader uses it only when the writer is gone
    /// (it died without an end marker); it is then the file's last record. 0 when unused
    /// (always, in version-1 files).
    pub pending_end: u64,
    /// File offset of the stacks region ([`crate::stacks`]): where each thread is now. 0
    /// when the file has none (sampler files, files older than version 4).
    pub stacks_offset: u64,
    /// Bytes of the stacks region.
    pub stacks_len: u64,
    /// Reserved, zero.
    pub reserved: [u64; 6],
}

const _: () = assert!(size_of::<FileHeader>() == 128);

/// Byte offset of [`FileHeader::committed_end`] (for atomic in-place updates).
pub const HEADER_COMMITTED_END_OFFSET: usize = offset_of!(FileHeader, committed_end);
/// Byte offset of [`FileHeader::state`] (for atomic in-place updates).
pub const HEADER_STATE_OFFSET: usize = offset_of!(FileHeader, state);
/// Byte offset of [`FileHeader::pending_end`] (for in-place updates).
pub const HEADER_PENDING_END_OFFSET: usize = offset_of!(FileHeader, pending_end);
/// Byte offset of [`FileHeader::stacks_offset`].
pub const HEADER_STACKS_OFFSET: usize = offset_of!(FileHeader, stacks_offset);

impl FileHeader {
    /// A fresh header for a new, empty file.
    pub fn new(kind: FileKind, created_ns: u64, pid: u32) -> Self {
        FileHeader {
            magic: MAGIC,
            version: FORMAT_VERSION,
            min_reader_version: MIN_READER_VERSION,
            header_size: size_of::<FileHeader>() as u32,
            kind: kind as u32,
            state: file_state::OPEN,
            data_offset: DATA_OFFSET,
            committed_end: DATA_OFFSET,
            created_ns,
            pid,
            reserved0: 0,
            pending_end: 0,
            stacks_offset: 0,
            stacks_len: 0,
            reserved: [0; 6],
        }
    }

    /// A fresh header for a new trace file with a stacks region of `len` bytes right after
    /// the header page; the records start after it.
    pub fn with_stacks(kind: FileKind, created_ns: u64, pid: u32, len: u64) -> Self {
        let mut h = FileHeader::new(kind, created_ns, pid);
        h.stacks_offset = DATA_OFFSET;
        h.stacks_len = len;
        h.data_offset = DATA_OFFSET + len;
        h.committed_end = h.data_offset;
        h
    }

    /// The header as its 128 little-endian bytes.
    pub fn to_bytes(&self) -> [u8; 128] {
        let mut b = [0u8; 128];
        b[0..8].copy_from_slice(&self.magic);
        b[8..10].copy_from_slice(&self.version.to_le_bytes());
        b[10..12].copy_from_slice(&self.min_reader_version.to_le_bytes());
        b[12..16].copy_from_slice(&self.header_size.to_le_bytes());
        b[16..20].copy_from_slice(&self.kind.to_le_bytes());
        b[20..24].copy_from_slice(&self.state.to_le_bytes());
        b[24..32].copy_from_slice(&self.data_offset.to_le_bytes());
        b[32..40].copy_from_slice(&self.committed_end.to_le_bytes());
        b[40..48].copy_from_slice(&self.created_ns.to_le_bytes());
        b[48..52].copy_from_slice(&self.pid.to_le_bytes());
        b[56..64].copy_from_slice(&self.pending_end.to_le_bytes());
        b[64..72].copy_from_slice(&self.stacks_offset.to_le_bytes());
        b[72..80].copy_from_slice(&self.stacks_len.to_le_bytes());
        b
    }
}

const _: () = assert!(HEADER_STATE_OFFSET == 20);
const _: () = assert!(HEADER_COMMITTED_END_OFFSET == 32);
const _: () = assert!(HEADER_PENDING_END_OFFSET == 56);
const _: () = assert!(HEADER_STACKS_OFFSET == 64);

/// Record kinds (the first field of every record header).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum RecordKind {
    /// `key=value` lines, UTF-8 ([`info_keys`]).
    Info = 1,
    /// A loaded ELF object (tracer).
    Object = 2,
    /// One interval's function-call profile (tracer).
    Interval = 3,
    /// Clean end of the file.
    End = 4,
    /// New string-table entries (sampler).
    Strings = 5,
    /// One interval's IP-sample counts (sampler).
    Samples = 6,
    /// One interval's kernel event counts (sampler).
    Events = 7,
    /// One interval's black-box OS metrics of a node (sampler): disk, network, TCP, CPU,
    /// cgroup and process-tree values ([`crate::os_metrics`]).
    OsMetrics = 8,
    /// One interval's calls left without returning (tracer): per function, how many of the
    /// interval's calls were ended by the runtime when it recovered its stack.
    Unwound = 9,
    /// One interval's caller → callee edges (tracer, `CULPRIT_GRAPH=1`).
    Edges = 10,
    /// One interval's call-duration histograms (tracer, `CULPRIT_HIST=1`).
    Histograms = 11,
    /// One interval's sampled call chains (sampler, `--call-graph fp`).
    Stacks = 12,
    /// One interval's wake-ups of the tracer's flusher and how late they came: a process
    /// stopped (SIGSTOP) or starved wakes late (tracer).
    Wakeups = 13,
    /// A stretch of layer-boundary I/O events (seed 003): the tracer's C API and C-library
    /// calls ([`crate::layers`]).
    Layers = 14,
    /// A stretch of sampled requests and the calls made in them (seed 004): the tracer's
    /// `culprit_request_*` C API ([`crate::requests`]).
    Requests = 15,
    /// One interval's records the kernel dropped (sampler): samples, kernel-event records and
    /// process-tracking records counted apart, and whose they were ([`lost_whose`]). Written
    /// only for intervals in which something was lost (format version 7).
    Lost = 16,
    /// Functions the tracer stopped tracing while the program ran, to keep its cost within its
    /// budget ([`crate::cost`]).
    Demotions = 17,
    /// One interval's CPU time of the process and the tracer's estimate of its own share
    /// ([`crate::cost`]).
    Cost = 18,
}

impl RecordKind {
    /// Decodes a record header's kind; `None` for kinds this reader does not know.
    pub fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            1 => Self::Info,
            2 => Self::Object,
            3 => Self::Interval,
            4 => Self::End,
            5 => Self::Strings,
            6 => Self::Samples,
            7 => Self::Events,
            8 => Self::OsMetrics,
            9 => Self::Unwound,
            10 => Self::Edges,
            11 => Self::Histograms,
            12 => Self::Stacks,
            13 => Self::Wakeups,
            14 => Self::Layers,
            15 => Self::Requests,
            16 => Self::Lost,
            17 => Self::Demotions,
            18 => Self::Cost,
            _ => return None,
        })
    }
}

/// The 16-byte header of every record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct RecordHeader {
    /// [`RecordKind`] as `u16`.
    pub kind: u16,
    /// Kind-specific flags (none defined in version 1; zero).
    pub flags: u16,
    /// Total length of the record including this header, a multiple of [`RECORD_ALIGN`].
    pub len: u32,
    /// CRC-32 of the record without this field: bytes `0..8` and `12..len` (format version 4
    /// on; of the payload, bytes `16..len`, before).
    pub crc: u32,
    /// Reserved, zero.
    pub reserved: u32,
}

const _: () = assert!(size_of::<RecordHeader>() == RECORD_HEADER_SIZE);

/// Flags of [`RecordKind::Interval`], [`RecordKind::Samples`], [`RecordKind::Events`] and
/// [`RecordKind::OsMetrics`] records.
pub mod interval_flags {
    /// The writer could not observe this interval (it was stopped or starved): the interval is
    /// missing data, not zero activity. Such a record has no entries.
    pub const MISSED: u32 = 1;
    /// The interval is only partly covered: the writer started or stopped inside it.
    pub const PARTIAL: u32 = 2;
    /// Only in the interval reference of the tracer's Edges and Histograms records (kinds 10
    /// and 11; never in an Interval record): the writer wrote the interval late, more than
    /// half an interval after its end. Its calls are exact (each call is placed in its
    /// interval as it returns), but edges and histograms are taken from the threads when the
    /// writer writes: these hold the calls up to then, from later intervals too, and the
    /// late intervals written after it in the same catch-up hold almost none.
    pub const LATE: u32 = 4;

    /// True when `flags` say the writer could not observe the interval ([`MISSED`]).
    pub const fn is_missed(flags: u32) -> bool {
        flags & MISSED != 0
    }
}

/// Flags of [`RecordKind::Object`] records.
pub mod object_flags {
    /// The object is the main executable.
    pub const MAIN: u32 = 1;
    /// The object was unloaded (`dlclose`); addresses in its range no longer belong to it.
    pub const UNLOADED: u32 = 2;
    /// The object is the kernel-provided vDSO (no file on disk).
    pub const VDSO: u32 = 4;
}

/// Flags of [`RecordKind::Samples`] records beyond [`interval_flags`].
pub mod samples_flags {
    /// `period` is a frequency in Hz (the kernel adjusts the period), not a fixed event period.
    pub const FREQ: u32 = 0x100;
}

/// `reason` of [`RecordKind::End`] records.
pub mod end_reason {
    /// The process exited normally (`exit`, return from `main`).
    pub const EXIT: u32 = 1;
    /// The writer was stopped by a signal it handles (sampler: SIGINT/SIGTERM).
    pub const SIGNAL: u32 = 2;
    /// The writer's run ended as configured (sampler `--duration`).
    pub const DONE: u32 = 3;
    /// Not an end: the writer went on in a new piece of the same history (rotation; see
    /// `rotation`). Readers join the pieces and must not call the writer ended or stopped.
    pub const ROTATED: u32 = 4;
}

/// Fixed part of an [`RecordKind::Interval`] payload, in bytes.
pub const INTERVAL_FIXED_SIZE: usize = 40;
/// Size of one [`RecordKind::Interval`] entry: addr, calls, exclusive ns, inclusive ns.
pub const INTERVAL_ENTRY_SIZE: usize = 32;
/// Fixed part of an [`RecordKind::Object`] payload, in bytes (variable build-id and path follow).
pub const OBJECT_FIXED_SIZE: usize = 40;
/// Fixed part of a [`RecordKind::Samples`] payload, in bytes.
pub const SAMPLES_FIXED_SIZE: usize = 56;
/// Size of one [`RecordKind::Samples`] entry: program, image, function string ids, count.
pub const SAMPLES_ENTRY_SIZE: usize = 24;
/// Fixed part of a [`RecordKind::Events`] payload, in bytes.
pub const EVENTS_FIXED_SIZE: usize = 24;
/// Size of one [`RecordKind::Events`] entry: event string id, count.
pub const EVENTS_ENTRY_SIZE: usize = 16;
/// Fixed part of a [`RecordKind::OsMetrics`] payload, in bytes: start, length, measured span,
/// flags, entry count.
pub const OS_METRICS_FIXED_SIZE: usize = 32;
/// Size of one [`RecordKind::OsMetrics`] entry: metric, instance and unit string ids, reserved,
/// value (`f64`).
pub const OS_METRICS_ENTRY_SIZE: usize = 24;
/// Instance string id of an [`RecordKind::OsMetrics`] entry that has no instance (a node-wide
/// metric such as `cpu.user`).
pub const NO_INSTANCE: u32 = u32::MAX;
/// Size of an [`RecordKind::End`] payload.
pub const END_SIZE: usize = 16;
/// Fixed part of a [`RecordKind::Unwound`] payload, in bytes.
pub const UNWOUND_FIXED_SIZE: usize = 24;
/// Size of one [`RecordKind::Unwound`] entry: function address, unwound calls.
pub const UNWOUND_ENTRY_SIZE: usize = 16;
/// Fixed part of an [`RecordKind::Edges`] payload, in bytes.
pub const EDGES_FIXED_SIZE: usize = 32;
/// Size of one [`RecordKind::Edges`] entry: caller, callee, calls, exclusive ns, inclusive ns.
pub const EDGES_ENTRY_SIZE: usize = 40;
/// Fixed part of a [`RecordKind::Histograms`] payload, in bytes.
pub const HISTOGRAMS_FIXED_SIZE: usize = 24;
/// Fixed part of a [`RecordKind::Stacks`] payload, in bytes.
pub const STACKS_FIXED_SIZE: usize = 24;
/// Size of a [`RecordKind::Wakeups`] payload as format version 5 wrote it: the interval
/// (start, length, flags), wake-ups, late wake-ups, reserved, the sum and the largest of the
/// lateness beyond the slack. Version 7 appends calls moved and how late the interval was
/// written ([`WAKEUPS_SIZE_V7`]).
pub const WAKEUPS_SIZE: usize = 48;
/// Size of a [`RecordKind::Wakeups`] payload since format version 7.
pub const WAKEUPS_SIZE_V7: usize = 64;
/// Size of a [`RecordKind::Lost`] payload: the interval (start, length, flags), whose
/// ([`lost_whose`]), samples, kernel-event records and process-tracking records lost.
pub const LOST_SIZE: usize = 48;

/// Values of a [`RecordKind::Lost`] record's `whose` field.
pub mod lost_whose {
    /// The counts are the whole machine's (every CPU's rings): the kernel says how many records
    /// a ring dropped, not whose they were, so they belong to no node in particular. Every
    /// node file of the sampler run carries the same counts.
    pub const MACHINE: u32 = 0;
    /// The counts are this node's own: it is the only node of a sampler that samples the whole
    /// machine, so every sample dropped was its.
    pub const NODE: u32 = 1;
}

/// Buckets of a call-duration histogram: bucket 0 holds calls of 0–1 ns, bucket `k ≥ 1` calls
/// of `2^k ..= 2^(k+1) − 1` ns, and the last one everything longer (≥ 2^47 ns, 39 hours).
pub const HIST_BUCKETS: usize = 48;

/// The histogram bucket of a call of `ns` nanoseconds (see [`HIST_BUCKETS`]).
#[inline(always)]
pub const fn hist_bucket(ns: u64) -> usize {
    let b = (63 - (ns | 1).leading_zeros()) as usize;
    if b < HIST_BUCKETS {
        b
    } else {
        HIST_BUCKETS - 1
    }
}

/// The shortest duration (ns) bucket `k` holds.
pub const fn hist_bucket_low_ns(k: usize) -> u64 {
    if k == 0 {
        0
    } else {
        1 << k
    }
}

/// Keys used in [`RecordKind::Info`] records. Writers may add others; readers ignore unknown keys.
pub mod info_keys {
    /// Node name the data belongs to.
    pub const NODE: &str = "node";
    /// Host name of the machine.
    pub const HOST: &str = "host";
    /// Process id.
    pub const PID: &str = "pid";
    /// Parent process id.
    pub const PPID: &str = "ppid";
    /// Short program name (`comm`, or the executable's base name).
    pub const PROGRAM: &str = "program";
    /// Path of the executable.
    pub const EXE: &str = "exe";
    /// Command line, arguments separated by spaces (shell-quoted where needed).
    pub const CMDLINE: &str = "cmdline";
    /// Process start time from /proc (wall-clock ns): pid + this identifies the process.
    pub const PROC_START_NS: &str = "proc_start_ns";
    /// Interval length in ns.
    pub const INTERVAL_NS: &str = "interval_ns";
    /// Timestamp source of the tracer: `tsc` or `monotonic`.
    pub const CLOCK: &str = "clock";
    /// Version of the writer (crate version).
    pub const WRITER_VERSION: &str = "writer_version";
    /// Name of the file of the process this one was forked from (same node directory).
    pub const FORKED_FROM: &str = "forked_from";
    /// Name of the file this process image replaced by `exec` (same pid).
    pub const EXEC_FROM: &str = "exec_from";
    /// `CULPRIT_INCLUDE` in effect.
    pub const INCLUDE: &str = "include";
    /// `CULPRIT_EXCLUDE` in effect.
    pub const EXCLUDE: &str = "exclude";
    /// Kernel release (`uname -r`).
    pub const KERNEL: &str = "kernel";
    /// `/proc/sys/kernel/random/boot_id`.
    pub const BOOT_ID: &str = "boot_id";
    /// Sampler: event name (e.g. `cycles`, `cpu-clock`).
    pub const EVENT: &str = "event";
    /// Sampler: sampling period (events per sample) when fixed.
    pub const PERIOD: &str = "period";
    /// Sampler: sampling frequency in Hz when in frequency mode.
    pub const FREQ: &str = "freq";
    /// Sampler: number of CPUs sampled.
    pub const CPUS: &str = "cpus";
    /// Sampler: scope (`system`, `pid:<n>`, `cgroup:<path>`).
    pub const SCOPE: &str = "scope";
    /// Where a trace file's counts come from: absent or `instrumentation` for the runtime's
    /// `-finstrument-functions` hooks, `uprobes` for perf_event uprobes placed on an unmodified
    /// binary (`culprit record --uprobes`, `culprit sample --uprobes`). Uprobe counts are calls
    /// *entered* in an interval (the runtime counts calls that returned); their Object records
    /// place each binary at a writer-chosen bias, so addresses mean something only within the
    /// file.
    pub const SOURCE: &str = "source";
    /// Uprobes: the probed functions, `image:symbol` comma-separated.
    pub const UPROBES: &str = "uprobes";
    /// Uprobes: how time was measured: `none` (counts only: time fields are zero) or
    /// `uretprobes` (entry and return probes).
    pub const UPROBE_TIME: &str = "uprobe_time";
    /// Name of the file (same directory) this file continues: the writer's previous piece
    /// (rotation), or a file that was removed or replaced under the tracer.
    pub const CONTINUES: &str = "continues";
    /// Rotation: this file's piece number (absent or 0 for a writer's first file).
    pub const PIECE: &str = "piece";
    /// What worked less well than asked, one line each, in the file's first Info record or in
    /// a later one when it happened (the sampler: events not counted, a process image refused
    /// because it was not a regular file).
    pub const WARNING: &str = "warning";
    /// Tracer: the cost budget in effect (`CULPRIT_BUDGET`): a percentage of the process's
    /// CPU time (`2%`), or `off`. Format version 7 on; absent in older files (no budget).
    pub const BUDGET: &str = "budget";
    /// Tracer: its estimate of the CPU cost of one traced call (enter and exit), ps, measured
    /// at start-up (`0` when not measured).
    pub const CALL_COST_PS: &str = "call_cost_ps";
    /// Tracer: patterns of `CULPRIT_DEMOTE` in effect (functions demoted on sight).
    pub const DEMOTE: &str = "demote";
    /// Tracer: hook call sites of untraced functions rewritten to NOPs so far (a later Info
    /// record of the file updates it).
    pub const PATCHED_SITES: &str = "patched_sites";
    /// Tracer: call sites of untraced functions looked at and left as they were (not provably
    /// a hook call of that function alone, not writable in one atomic store, or refused).
    pub const PATCH_KEPT: &str = "patch_kept";
    /// Tracer: of [`PATCHED_SITES`], those in another function's body (an inlined copy's hook
    /// calls), each proven from the code to be made for the untraced function alone.
    pub const PATCHED_INLINED: &str = "patched_inlined";
}

/// Rounds `n` up to the record alignment.
pub const fn pad8(n: usize) -> usize {
    (n + RECORD_ALIGN - 1) & !(RECORD_ALIGN - 1)
}
