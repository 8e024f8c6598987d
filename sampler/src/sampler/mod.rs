//! The sampler daemon as a library: a validated [`Config`], [`Sampler::open`] (opens the perf
//! events, reports which event and rate are in use), and [`Sampler::run`] until a stop flag or
//! the configured duration. `culprit sample`, `culprit record --sample` and the testbed drive it
//! in-process.
//!
//! [`Config`] and the ring sizes are in `config`, opening in `open`, the run in `run`.

use std::sync::atomic::AtomicBool;

use culprit_format::{info_keys, procfs};

use crate::engine::{Streams, TpSpec};
use crate::event::{CallGraph, Rate, Sampling};
use crate::nodes::{Nodes, PidFiles, Scope};
use crate::os::{self, Collector, OsStats};
use crate::priority;
use crate::procs::TrackerStats;
use crate::profile::{NodeSummary, RunInfo};
use crate::sys::{PerfFd, Ring};

mod config;
mod open;
mod run;

pub use config::{
    default_node_name, event_ring_pages, online_cpus, perf_event_paranoid, ring_pages_for, Config,
    Error, DEFAULT_INTERVAL, DEFAULT_RING_PAGES, FINISH_BUDGET,
};

/// An opened sampler, ready to run.
#[derive(Debug)]
pub struct Sampler {
    config: Config,
    sampling: Sampling,
    nodes: Nodes,
    cpus: Vec<u32>,
    rings: Vec<Ring>,
    tp_fds: Vec<PerfFd>,
    streams: Streams,
    tps: Vec<TpSpec>,
    warnings: Vec<String>,
    os: Option<Collector>,
    delayacct: Option<os::delayacct::Guard>,
    /// What the collection threads get ([`crate::priority`]), as probed at open.
    scheduling: priority::Raised,
    /// `--node-pid NODE=FILE` rules whose files are read again as they change.
    pid_files: PidFiles,
}

// The testbed runs a sampler on its own thread.
const _: () = {
    const fn assert_send<T: Send>() {}
    assert_send::<Sampler>();
    assert_send::<Config>();
};

/// What a run did.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Per node: file, samples, bytes.
    pub nodes: Vec<NodeSummary>,
    /// Samples counted.
    pub samples: u64,
    /// Samples lost (ring full).
    pub lost: u64,
    /// Kernel-event (tracepoint) records lost.
    pub lost_events: u64,
    /// Process-tracking records (COMM, MMAP2, FORK, EXIT, NAMESPACES) lost.
    pub lost_tracking: u64,
    /// Tracepoint hits counted.
    pub events: u64,
    /// Samples outside the scope.
    pub out_of_scope: u64,
    /// Throttle records.
    pub throttles: u64,
    /// Intervals written (per node).
    pub intervals: u64,
    /// Distinct locations named.
    pub named: u64,
    /// Wall-clock ns the run lasted.
    pub elapsed_ns: u64,
    /// The sampler's own user and system CPU ns during the run (getrusage).
    pub cpu_ns: (u64, u64),
    /// True when the stop flag ended the run (not the duration).
    pub stopped: bool,
    /// Process tracking counters.
    pub tracking: TrackerStats,
    /// What the OS-metrics collector did (zero when it was off).
    pub os: OsStats,
    /// What was not read and why, one line each (process images refused as unsafe to open:
    /// a FIFO or a device in place of a library), also written into the node files.
    pub notes: Vec<String>,
    /// Bytes of records left unprocessed to end on time ([`FINISH_BUDGET`] after the signal
    /// or the deadline); the intervals they covered are written MISSED. 0 normally.
    pub unprocessed_bytes: u64,
    /// CPU time of the ring reader thread, ns (its cap: [`priority::RING_READER`]).
    pub reader_cpu_ns: u64,
    /// What the collection threads got ([`crate::priority`]).
    pub scheduling: priority::Raised,
}

impl Sampler {
    /// The event and rate in use.
    pub fn sampling(&self) -> &Sampling {
        &self.sampling
    }

    /// The node names files are written for.
    pub fn node_names(&self) -> &[String] {
        self.nodes.names()
    }

    /// Tracepoints counted.
    pub fn tracepoints(&self) -> impl Iterator<Item = &str> {
        self.tps.iter().map(|t| t.name.as_str())
    }

    /// Things that work less well than asked (tracepoints not counted, …), one line each.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// One line saying what is sampled, how, and where it goes.
    pub fn describe(&self) -> String {
        let tps: Vec<&str> = self.tracepoints().collect();
        let os = match (&self.os, &self.config.os_metrics) {
            (Some(_), Some(oc)) => format!(
                "; OS metrics every {} s{}",
                oc.interval.as_secs_f64(),
                match (&self.delayacct, os::delayacct::state()) {
                    (Some(g), _) if g.changed() => " (delay accounting turned on for the run)",
                    (_, Some(true)) => " (delay accounting on)",
                    _ => " (delay accounting off: no per-process I/O delay)",
                }
            ),
            _ => String::new(),
        };
        format!(
            "sampling {} on {} CPUs, {} ({}), {} s intervals → {}/{{{}}}; kernel events: {}{os}; \
             collection threads: {}",
            self.sampling,
            self.cpus.len(),
            self.nodes.scope().describe(),
            if self.nodes.has_rules() {
                "nodes by rule"
            } else {
                "one node"
            },
            self.config.interval.as_secs_f64(),
            self.config.data_dir.display(),
            self.nodes.names().join(","),
            if tps.is_empty() {
                "none".to_string()
            } else {
                tps.join(", ")
            },
            match &self.scheduling {
                priority::Raised::Deadline(_) => "SCHED_DEADLINE (capped)",
                priority::Raised::Fifo => "SCHED_FIFO 1 (capped by real-time throttling)",
                priority::Raised::Nice(_) => "nice -20",
                priority::Raised::Unchanged(_) => "normal priority",
            }
        )
    }

    fn run_info(&self, host: &str) -> RunInfo {
        let mut pairs: Vec<(String, String)> = vec![
            (info_keys::HOST.into(), host.into()),
            (info_keys::KERNEL.into(), procfs::kernel_release()),
            (info_keys::BOOT_ID.into(), procfs::boot_id()),
            (info_keys::PID.into(), std::process::id().to_string()),
            // With the pid, what tells a live sampler's file from a dead one's (retention).
            (
                info_keys::PROC_START_NS.into(),
                procfs::start_ns(procfs::Proc::This)
                    .unwrap_or(0)
                    .to_string(),
            ),
            (info_keys::EVENT.into(), self.sampling.event.name.into()),
        ];
        match self.sampling.rate {
            Rate::Period(p) => pairs.push((info_keys::PERIOD.into(), p.to_string())),
            Rate::Freq(f) => pairs.push((info_keys::FREQ.into(), f.to_string())),
        }
        pairs.extend([
            (info_keys::CPUS.into(), self.cpus.len().to_string()),
            (info_keys::SCOPE.into(), self.nodes.scope().describe()),
            (
                info_keys::INTERVAL_NS.into(),
                self.config.interval.as_nanos().to_string(),
            ),
            (info_keys::CLOCK.into(), "monotonic".into()),
            (
                info_keys::WRITER_VERSION.into(),
                env!("CARGO_PKG_VERSION").into(),
            ),
            ("sampling".into(), self.sampling.to_string()),
            (
                "call_graph".into(),
                match self.config.call_graph {
                    CallGraph::None => "none",
                    CallGraph::Fp => "fp",
                }
                .into(),
            ),
            ("ring_pages".into(), self.config.ring_pages.to_string()),
            (
                "tracepoints".into(),
                self.tracepoints().collect::<Vec<_>>().join(","),
            ),
        ]);
        if let Some(why) = &self.sampling.fallback_reason {
            pairs.push(("event_fallback".into(), why.clone()));
        }
        if let (Some(_), Some(oc)) = (&self.os, &self.config.os_metrics) {
            pairs.push(("os_interval_ns".into(), oc.interval.as_nanos().to_string()));
            pairs.push((
                "delayacct".into(),
                match os::delayacct::state() {
                    Some(true) => "on",
                    Some(false) => "off",
                    None => "unavailable",
                }
                .into(),
            ));
        }
        for w in &self.warnings {
            pairs.push((info_keys::WARNING.into(), w.clone()));
        }
        RunInfo {
            pairs,
            event: self.sampling.event.name.into(),
            period: self.sampling.rate.value(),
            freq: self.sampling.rate.is_freq(),
            tracepoints: self.tps.iter().map(|t| t.name.clone()).collect(),
            call_graph: self.config.call_graph != CallGraph::None,
            own_loss: self.nodes.names().len() == 1
                && !self.nodes.has_rules()
                && matches!(self.nodes.scope(), Scope::System),
        }
    }

    /// Samples until `stop` is set or the configured duration passes, writing one profile per
    /// interval and node; then flushes the last (partial) interval and ends the files.
    ///
    /// Two threads: a reader that only drains the rings (so they never overflow while names are
    /// being looked up, which can take a while for a large new image), and this one, which
    /// decodes, tracks, counts, names and writes.
    pub fn run(self, stop: &AtomicBool) -> Result<Summary, Error> {
        // This thread decodes, names and writes: unbounded work, so no real-time policy, but a
        // larger share of a contended CPU (`crate::priority`), given back at the end.
        let before = priority::raise_worker();
        let out = self.run_inner(stop);
        priority::restore_worker(before);
        out
    }
}
