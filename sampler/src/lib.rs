//! culprit's sampler: system-wide perf_event instruction-pointer sampling, process and mapping
//! tracking, kernel event counts and OS metrics. Locations are named by `culprit_symbolize`,
//! the symbolizer the analysis shares.
//!
//! Seed 000 §"Sample profiling" is the model: OProfile with `--separate=kernel`, which
//! attributes every sample to a program name, a binary image and a function, system-wide,
//! user and kernel, saved as a profile every 10 s. The samples metric is what catches rogue
//! processes (a `dd` disk hog, a `socat` network hog) and extra kernel TCP work, which the
//! function-call tracer cannot see.
//!
//! # Pipeline
//!
//! Three mmap'd rings per online CPU: the sampling event's ([`event`]), the tracepoints'
//! ([`tracefs`]; the first one's ring takes the others' records) and a `dummy` event's for the
//! process-tracking records (COMM, MMAP2, FORK, EXIT), so that what the kernel drops is known by
//! kind (docs/sampler.md). A reader thread drains the rings every 50 ms (or as soon as one is a
//! quarter full) and does nothing else, ahead of the load under a kernel-enforced CPU cap
//! ([`priority`]), so the rings never wait for the slow part; the main thread decodes the
//! records ([`record`]), merges them across rings in timestamp order (records older than the
//! previous drain are complete) and feeds the process tracker ([`procs`], [`nodes`]) and the
//! interval counters ([`engine`], [`profile`]). Each
//! interval, every distinct location is named once ([`culprit_symbolize`], in batches per image, cached
//! for the whole run) and one Samples and one Events record per node goes to
//! `DATA/<node>/samples-<start_ns>.cul` ([`culprit_format`]). [`Sampler`] drives it all;
//! [`perfdata`] replays a `perf.data` file through the same pipeline (to compare with
//! `perf report`).
//!
//! Beside the rings, a third thread collects black-box OS metrics per node every second
//! ([`os`]: disk, network, TCP per connection, CPU, the node's cgroup and processes; seed 001)
//! and hands them to the main thread, which writes them as OsMetrics records into the same node
//! files.
//!
//! # What lands where
//!
//! * Program: the process's `comm` (kernel worker threads `kworker/…` are all `kworker`, their
//!   numbering differs from node to node). Kernel-mode samples keep the program they
//!   interrupted (OProfile's `--separate=kernel`): image `[kernel.kallsyms]`, or `[module]`.
//! * Image: the base name of the file mapped at the address, `[vdso]`, `[anon]` (JIT code), or
//!   `[unknown]`. Function: the demangled symbol, else `image+0x<offset of the function start>`
//!   from the unwind table, else `image+0x<offset>`.
//! * Interrupts run in whatever process they interrupt. Over veth (emulated nodes) the
//!   receive-side TCP/IP work of a packet runs in the *sender's* context (veth hands the packet
//!   to the softirq on the sending CPU): measured here, `tcp_v4_rcv`, `tcp_rcv_established` and
//!   `ip_rcv_finish_core` land in the sending node's process, the receiving node sees only its
//!   own copy to user space. Kernel event counts do not have this problem for TCP retransmits
//!   (attributed by socket address) or block I/O (by the submitting process).
//!
//! # Dependencies, and why
//!
//! * **`perf-event-open-sys`** (raw `bindgen` bindings of `<linux/perf_event.h>` and the
//!   syscall/ioctl wrappers) with a small ring reader of our own (module `sys`, ~250 lines, the
//!   only `unsafe` in the crate). The `perf-event` crate only counts; it cannot read a sampling
//!   ring. `perf-event-open` 0.7.0 does sample, but (read in its source) it decodes every record
//!   into a large owned struct with a `Vec` per variable field, needs kernel-version feature
//!   flags chosen at build time for fields such as MMAP2 build-ids, pulls in `futures`, and its
//!   API changed in every minor release from 0.4 to 0.7 — while what the sampler needs is small
//!   and fixed: copy a ring's bytes out, decode five record types from a sample type it chose,
//!   and put tracepoints into the same ring (`SET_OUTPUT`), which that crate does not expose.
//!   `perf-event2` also samples but has had no release since 2024.
//! * **Our own record decoder ([`record`]) and perf.data reader ([`perfdata`]), not
//!   `linux-perf-event-reader` / `linux-perf-data`** (samply's crates, weighed for this in
//!   version 0.10.2 / 0.13.0). The event reader decodes SAMPLE, MMAP2, COMM, FORK, EXIT and LOST
//!   records zero-copy, but passes LOST_SAMPLES and NAMESPACES through as raw records: the
//!   sampler needs both (lost samples make an interval missed; a NAMESPACES record moves a
//!   process to its node), so adopting it would leave a second, hand-written decoder for the same
//!   rings. Our decoder is one function per record type over a `sample_type` the sampler chose
//!   itself (~300 lines with its robustness tests). `linux-perf-data` reads the whole perf.data
//!   container (feature sections, compression, pipe mode) on top of the event reader; the replay
//!   exists to compare attribution with `perf report` on the same samples (benches/sampler) and
//!   needs the attributes and the data section only, decoded by the same decoder as live
//!   sampling (one path for live and recorded data). Worth revisiting if the replay must read
//!   compressed (`perf record -z`) or piped files, which it refuses today.
//! * **`rustc-hash`** for the maps on the per-sample path (keyed by pids, addresses, small ids).
//! * **`object`** (with `gimli`) for ELF files: uprobe targets and the DWARF scan for inlined
//!   functions.
//! * **No netlink crate** for the OS metrics' per-connection view: one fixed `sock_diag`
//!   request and reply layout, parsed in [`os::diag`], the socket calls in module `sys` (see
//!   there for why not `netlink-packet-sock-diag`).
//! * **`culprit-symbolize`** (blazesym, `/proc/kallsyms`, the vDSO, unwind starts, PLT stubs;
//!   its crate docs say why blazesym) names locations, and opens other users' files safely
//!   (`culprit_symbolize::untrusted`: the images of other users' processes, uprobe targets).
//!
//! # Uprobes
//!
//! [`uprobe`] counts calls of chosen functions of binaries built without instrumentation
//! (perf_event uprobes), per process, into the tracer's kind of file: `culprit record
//! --uprobes` / `--attach` and `culprit sample --uprobes`.
//!
//! # Use as a library
//!
//! The testbed and `culprit record --sample` drive the sampler in-process:
//!
//! ```no_run
//! use std::sync::atomic::AtomicBool;
//! use std::time::Duration;
//! use culprit_sampler::{Config, NodeRule, Sampler};
//!
//! let mut cfg = Config::new("culprit-data", "io1");
//! cfg.interval = Duration::from_secs(1);
//! cfg.node_rules.push(NodeRule::Netns { node: "io2".into(), path: "/run/netns/io2".into() });
//! let sampler = Sampler::open(cfg)?; // errors say what is missing (privilege, event, …)
//! eprintln!("{}", sampler.describe()); // which event and rate are in use
//! let stop = AtomicBool::new(false); // set it from another thread to end the run
//! let summary = sampler.run(&stop)?;
//! println!("{} samples, {} lost", summary.samples, summary.lost);
//! # Ok::<(), culprit_sampler::Error>(())
//! ```
//!
//! # Privileges
//!
//! System-wide sampling needs root, CAP_PERFMON (or CAP_SYS_ADMIN), or
//! `kernel.perf_event_paranoid` ≤ 0 (−1 for tracepoint fields); [`Error::Permission`] says so.
//! `culprit doctor` checks what a machine allows ([`doctor`], [`probe`]).

#![deny(unsafe_code)]

pub mod blocklayer;
pub mod daemon;
pub mod doctor;
pub mod engine;
pub mod event;
pub mod flags;
pub mod launch;
pub mod nodes;
pub mod os;
pub mod perfdata;
pub mod priority;
pub mod probe;
pub mod procs;
pub mod profile;
pub mod progress;
pub mod record;
mod sampler;
#[allow(unsafe_code)]
mod sys;
pub mod syscalls;
pub mod tracefs;
pub mod uprobe;

pub use event::{CallGraph, Rate, Sampling};
pub use nodes::{NodeRule, Scope};
pub use sampler::{
    default_node_name, event_ring_pages, online_cpus, perf_event_paranoid, ring_pages_for, Config,
    Error, Sampler, Summary, DEFAULT_INTERVAL, DEFAULT_RING_PAGES, FINISH_BUDGET,
};

/// Installs SIGINT and SIGTERM handlers (once per process, `signal-hook`) that set the returned
/// flag; pass it to [`Sampler::run`] so a signal flushes the last interval and ends the files
/// cleanly. A handler that cannot be installed leaves that signal's default action.
pub fn stop_on_signals() -> &'static std::sync::atomic::AtomicBool {
    use std::sync::atomic::AtomicBool;
    use std::sync::{Arc, OnceLock};
    static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    STOP.get_or_init(|| {
        let flag = Arc::new(AtomicBool::new(false));
        for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            let _ = signal_hook::flag::register(sig, flag.clone());
        }
        flag
    })
}

/// This process's user and system CPU time so far, in ns (getrusage), for benchmarks.
pub fn self_cpu_ns() -> (u64, u64) {
    sys::self_cpu_ns()
}
