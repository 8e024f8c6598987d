//! Call counts of chosen functions of binaries that were not built with
//! `-finstrument-functions`, through perf_event uprobes (the kernel's `uprobe` PMU: a
//! breakpoint at the function's entry, counted by the kernel without a tracefs probe
//! definition).
//!
//! # Two ways to count
//!
//! * **Counting mode, per task** ([`Counters`], `culprit record --uprobes`): one counting event
//!   per (function, thread of the target), with `inherit`, so threads and children created
//!   later are counted too; `read()` gives the exact total. No ring buffer, nothing to lose,
//!   and breakpoints are installed only in the target's address space (the kernel's uprobe
//!   filter), so other processes running the same binary or library pay nothing. These
//!   probes are defined in tracefs ([`defs`]): an inherited uprobe-PMU event breaks `clone`.
//! * **Sampling mode, per CPU, period 1** ([`system`], `culprit sample --uprobes`): one event per
//!   (function, CPU) for every process, each hit a 32-byte record with pid and tid in the CPU's
//!   ring. Counting events system-wide cannot tell processes apart, and per-process counting
//!   events created as processes appear would miss the calls a process makes before the
//!   sampler notices it (and every thread it started before); a record per hit attributes every
//!   call to its process, and so to its node, the way the sampler attributes samples. The cost
//!   is a ring write per hit (measured in `benches/uprobes`) and, past the ring's capacity,
//!   lost records: an interval with lost records is written as missed, never as exact counts.
//!
//! # Records
//!
//! Counts go to the trace kind of file the function-call tracer writes
//! (`DATA/<node>/trace-<pid>-<start_ns>.cul`, one Interval record per interval, Info `source` =
//! `uprobes`), so `report`, `diagnose` and the exports read them unchanged ([`trace`]).
//!
//! # Cost
//!
//! A uprobe hit is a breakpoint trap into the kernel and back: microseconds, not the
//! nanoseconds of an instrumentation hook. [`cost::calibrate`] measures it on this machine at
//! start-up, and [`run::Budget`] warns when a function is called so often that its probe
//! costs more than a budget of one CPU at the observed rate.

pub mod cost;
pub mod counters;
pub mod defs;
pub mod elf;
pub mod pmu;
pub mod run;
pub mod system;
pub mod target;
pub mod trace;

pub use counters::Counters;
pub use pmu::{Error, Pmu};
pub use target::{Plan, Probe, ProbeImage, ProbeSpec, Skipped};
