//! The sampler daemon as a library: a validated [`Config`], [`Sampler::open`] (opens the perf
//! events, reports which event and rate are in use), and [`Sampler::run`] until a stop flag or
//! the configured duration. `culprit sample`, `culprit record --sample` and the testbed drive it
//! in-process.

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use culprit_format::{info_keys, procfs};

use crate::engine::{ClockMap, Engine, Stream, Streams, TpSpec};
use crate::event::{self, sampling_attr, tracepoint_attr, CallGraph, Rate, Sampling};
use crate::nodes::{NodeRule, Nodes, PidFiles, ProcFacts, Scope};
use crate::os::{self, Collector, NodePids, OsConfig, OsInterval, OsStats};
use crate::priority;
use crate::procs::{self, Tracker, TrackerStats};
use crate::profile::{Gaps, Intervals, Namer, NodeSummary, Output, RunInfo};
use crate::record::Layout;
use crate::sys::{self, PerfFd, Ring};
use crate::tracefs::{self, Decoder, Tracepoint};

/// What can go wrong opening or running the sampler.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// perf_event_open refused for lack of privilege.
    #[error(
        "no permission to sample system-wide ({source}): kernel.perf_event_paranoid is {paranoid}; \
         sampling every process and the kernel needs root, or the capability CAP_PERFMON (or \
         CAP_SYS_ADMIN), or `sysctl kernel.perf_event_paranoid=-1`"
    )]
    Permission {
        /// The sysctl's value, as read (or `unknown`).
        paranoid: String,
        /// The system call's error.
        source: io::Error,
    },
    /// The requested event cannot be opened here.
    #[error("cannot sample event {event}: {reason}")]
    Event {
        /// Event name.
        event: String,
        /// Why, and what to do.
        reason: String,
    },
    /// The configuration is invalid.
    #[error("{0}")]
    Config(String),
    /// An I/O error with what was being done.
    #[error("{what}: {source}")]
    Io {
        /// What the sampler was doing.
        what: String,
        /// The error.
        source: io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// Configuration of a sampler run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Data root: files go to `DATA/<node>/`.
    pub data_dir: PathBuf,
    /// Node name when no node rules are given (default: the host name).
    pub node: String,
    /// Event name; `None` for the default (hardware cycles, falling back to cpu-clock).
    pub event: Option<String>,
    /// Rate; `None` for the event's default.
    pub rate: Option<Rate>,
    /// Profile interval (default 10 s).
    pub interval: Duration,
    /// Stop after this long; `None` runs until the stop flag is set.
    pub duration: Option<Duration>,
    /// What to sample.
    pub scope: Scope,
    /// Emulated nodes: rules assigning processes (and TCP events) to nodes.
    pub node_rules: Vec<NodeRule>,
    /// Tracepoints to count (`system:name`); `None` for [`tracefs::DEFAULT_TRACEPOINTS`].
    pub tracepoints: Option<Vec<String>>,
    /// Data pages per CPU ring (a power of two); 0 sizes them from the rate ([`ring_pages_for`]).
    pub ring_pages: usize,
    /// Call chains (`--call-graph`).
    pub call_graph: CallGraph,
    /// Mount tracefs when it is not mounted (root only).
    pub mount_tracefs: bool,
    /// Black-box OS metrics per node ([`crate::os`]); `None` turns them off.
    pub os_metrics: Option<OsConfig>,
    /// When each node's file moves to a new piece (`--rotate`, `--rotate-size`).
    pub rotate: culprit_format::rotation::Rotate,
}

/// Default profile interval (seed 000: 10 s).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);
/// Smallest ring per CPU when sized from the rate: 64 pages (256 KiB).
pub const DEFAULT_RING_PAGES: usize = 64;
/// Largest ring per CPU when sized from the rate: 4096 pages (16 MiB).
const MAX_AUTO_RING_PAGES: usize = 4096;
/// Seconds of records a ring sized from the rate holds: the reader drains every 50 ms (or at a
/// quarter full), so this is what a starved reader can fall behind before samples are lost.
const RING_SLACK_S: u64 = 2;
/// How long the sampler may take, once a signal or `--duration` ends its run, to process what
/// is still queued, name it and write it; past it the rest is dropped (its intervals written
/// MISSED), so that the run ends within a second.
pub const FINISH_BUDGET: Duration = Duration::from_millis(600);
/// How often the rings are drained when no watermark wakes the sampler earlier.
const TICK: Duration = Duration::from_millis(50);

impl Config {
    /// Defaults: system-wide, default event and rate, 10 s intervals, default tracepoints.
    pub fn new(data_dir: impl Into<PathBuf>, node: impl Into<String>) -> Config {
        Config {
            data_dir: data_dir.into(),
            node: node.into(),
            event: None,
            rate: None,
            interval: DEFAULT_INTERVAL,
            duration: None,
            scope: Scope::System,
            node_rules: Vec::new(),
            tracepoints: None,
            ring_pages: 0,
            call_graph: CallGraph::None,
            mount_tracefs: true,
            os_metrics: Some(OsConfig::default()),
            rotate: culprit_format::rotation::Rotate::default(),
        }
    }
}

/// The default node name: the host name, sanitized into a valid node name.
pub fn default_node_name() -> String {
    culprit_format::names::sanitize_node_name(&procfs::host_name())
}

/// `kernel.perf_event_paranoid`, if readable.
pub fn perf_event_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The online CPUs (from `/sys/devices/system/cpu/online`, e.g. `0-3,6`).
pub fn online_cpus() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<u32>(), b.parse::<u32>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<u32>().ok()),
        }
    }
    if out.is_empty() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
        out.extend(0..n);
    }
    out
}

/// Pages of each CPU's samples ring for `sampling`: what 2 seconds of samples of a busy CPU
/// take at the rate (call chains of 32 frames on average), as a power of two between
/// [`DEFAULT_RING_PAGES`] and 4096 pages (16 MiB). Without root the kernel charges
/// rings beyond `kernel.perf_event_mlock_kb` (516 KiB per CPU) to the locked-memory limit, so
/// the three rings of a CPU stay within it: 64 pages here.
pub fn ring_pages_for(sampling: &Sampling, call_graph: CallGraph) -> usize {
    // Samples per second of a busy CPU: from the rate; hardware events at a 4 GHz clock.
    let hz = match sampling.rate {
        Rate::Freq(f) => f,
        Rate::Period(p) if sampling.event.is_clock() => 1_000_000_000 / p.max(1),
        Rate::Period(p) => 4_000_000_000 / p.max(1),
    };
    // header + identifier, ip, tid, time; a chain adds its length and the entries.
    let sample_bytes = 40
        + if call_graph == CallGraph::Fp {
            8 + 8 * 32
        } else {
            0
        };
    pages_for(hz * sample_bytes * RING_SLACK_S, 64)
}

/// Pages of each CPU's kernel-events ring for `tracepoints`: 2 seconds at 64 KiB/s per
/// tracepoint, 512 KiB/s for `sched:sched_switch` (≈7,000 switches/s per CPU) and 4 MiB/s for
/// each system-call tracepoint of `--layers` (a `pread` of cached data takes a few µs: 50 MB/s
/// of records per CPU were measured), between 64 and 4096 pages; 32 without root (see
/// [`ring_pages_for`]). 0 without tracepoints. The reader runs ahead of the load
/// ([`crate::priority`]) and drains a ring whenever a quarter of it is filled, so bursts far
/// above these rates fit (45,000 switches/s per CPU were measured at load 30 without a record
/// lost).
pub fn event_ring_pages(tracepoints: &[String]) -> usize {
    if tracepoints.is_empty() {
        return 0;
    }
    let per_s: u64 = tracepoints
        .iter()
        .map(|t| {
            if t == "sched:sched_switch" {
                512 << 10
            } else if crate::syscalls::TRACEPOINTS.contains(&t.as_str()) {
                4 << 20
            } else {
                64 << 10
            }
        })
        .sum();
    pages_for(per_s * RING_SLACK_S, 32)
}

/// Pages of each CPU's process-tracking ring: 128 (512 KiB: a few thousand forks, execs and
/// mappings between two drains); 16 without root.
fn tracking_ring_pages() -> usize {
    if sys::euid() == 0 {
        128
    } else {
        16
    }
}

/// `bytes` as a power of two of pages between [`DEFAULT_RING_PAGES`] and
/// [`MAX_AUTO_RING_PAGES`], or `unprivileged` pages without root.
fn pages_for(bytes: u64, unprivileged: usize) -> usize {
    if sys::euid() != 0 {
        return unprivileged;
    }
    (bytes as usize)
        .div_ceil(sys::page_size())
        .next_power_of_two()
        .clamp(DEFAULT_RING_PAGES, MAX_AUTO_RING_PAGES)
}

fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

fn permission_error(source: io::Error) -> Error {
    Error::Permission {
        paranoid: perf_event_paranoid().map_or_else(|| "unknown".into(), |v| v.to_string()),
        source,
    }
}

/// True for the errors meaning "this event does not exist here" (no PMU in a VM).
fn is_missing_event(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV)
    )
}

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
    /// Validates `config` and opens the events: one sampling event per online CPU, each with
    /// its ring, and the tracepoints (their records go to the same rings).
    pub fn open(config: Config) -> Result<Sampler, Error> {
        if config.interval < Duration::from_millis(10) {
            return Err(Error::Config("the interval must be at least 10 ms".into()));
        }
        if config.ring_pages != 0
            && (!config.ring_pages.is_power_of_two() || config.ring_pages > 1 << 16)
        {
            return Err(Error::Config(format!(
                "ring pages must be a power of two up to 65536 (got {})",
                config.ring_pages
            )));
        }
        if let Scope::Pid(pid) = config.scope {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return Err(Error::Config(format!("--pid {pid}: no such process")));
            }
        }
        let mut nodes = Nodes::new(&config.node, &config.node_rules, config.scope.clone())
            .map_err(Error::Config)?;
        // Pid files there already name their trees from the start; the others are read when
        // they appear.
        let mut pid_files = PidFiles::new(&nodes);
        for (pid, node) in pid_files.poll() {
            nodes.add_pid_rule(pid, node);
        }
        let mut warnings = Vec::new();
        for f in pid_files.waiting() {
            warnings.push(format!(
                "{}: no running process's id in it yet; its process tree joins its node when \
                 it has one (checked every 500 ms)",
                f.display()
            ));
        }
        let cpus = online_cpus();
        let wanted: Vec<String> = config.tracepoints.clone().unwrap_or_else(|| {
            tracefs::DEFAULT_TRACEPOINTS
                .iter()
                .map(|s| s.to_string())
                .collect()
        });

        let sampling = choose_event(&config, cpus[0], 1)?;
        let mut config = config;
        if config.ring_pages == 0 {
            config.ring_pages = ring_pages_for(&sampling, config.call_graph);
        }
        // Three rings per CPU, so that what the kernel drops is known by kind (a LOST record
        // says how many records one ring dropped, not which): samples, kernel events, and
        // process tracking. Each wakes the reader when a quarter of it is filled (besides its
        // 50 ms tick).
        let wakeup = |pages: usize| (pages * sys::page_size() / 4) as u32;
        let mut rings = Vec::with_capacity(cpus.len() * 3);
        let mut streams = Streams::new();
        let mut attr = sampling_attr(&sampling, wakeup(config.ring_pages));
        event::set_call_graph(&mut attr, config.call_graph);
        let sample_layout = Layout {
            sample_type: attr.sample_type,
            sample_id_all: true,
        };
        let tracking_pages = tracking_ring_pages();
        let tracking = event::tracking_attr(nodes.needs_netns(), wakeup(tracking_pages));
        let tracking_layout = Layout {
            sample_type: tracking.sample_type,
            sample_id_all: true,
        };
        let map = |fd: PerfFd, pages: usize, cpu: u32, what: &str| {
            Ring::map(fd, pages).map_err(|e| Error::Io {
                what: format!(
                    "map a {} KiB {what} ring buffer for CPU {cpu} (lower --ring-pages, or raise \
                     kernel.perf_event_mlock_kb)",
                    pages * sys::page_size() / 1024
                ),
                source: e,
            })
        };
        let open_error = |e: io::Error, what: &str, cpu: u32| {
            if is_permission(&e) {
                permission_error(e)
            } else {
                Error::Event {
                    event: what.into(),
                    reason: format!("perf_event_open on CPU {cpu}: {e}"),
                }
            }
        };
        for &cpu in &cpus {
            let fd = PerfFd::open(&attr, -1, cpu as i32, 0)
                .map_err(|e| open_error(e, sampling.event.name, cpu))?;
            let id = fd.id().map_err(io_err("perf event id"))?;
            streams.add(id, sample_layout, Stream::Samples);
            rings.push(map(fd, config.ring_pages, cpu, "samples")?);
            let fd = PerfFd::open(&tracking, -1, cpu as i32, 0)
                .map_err(|e| open_error(e, "dummy (process tracking)", cpu))?;
            let id = fd.id().map_err(io_err("perf event id"))?;
            streams.add(id, tracking_layout, Stream::Tracking);
            rings.push(map(fd, tracking_pages, cpu, "process-tracking")?);
        }

        // Tracepoints: on each CPU the first one's ring takes the others' records too.
        let mut tps = Vec::new();
        let mut tp_fds = Vec::new();
        if !wanted.is_empty() {
            let event_pages = event_ring_pages(&wanted);
            match tracefs::find_or_mount(config.mount_tracefs && sys::euid() == 0) {
                Err(why) => warnings.push(format!("kernel events are not counted: {why}")),
                Ok(root) => {
                    let mut per_cpu: Vec<Option<Ring>> = cpus.iter().map(|_| None).collect();
                    for name in &wanted {
                        match open_tracepoint(
                            &root,
                            name,
                            &cpus,
                            wakeup(event_pages),
                            tps.len() as u16,
                            &mut streams,
                        ) {
                            Ok((spec, fds)) => {
                                tps.push(spec);
                                for ((fd, slot), &cpu) in
                                    fds.into_iter().zip(&mut per_cpu).zip(&cpus)
                                {
                                    match slot {
                                        Some(ring) => {
                                            fd.set_output(ring.fd()).map_err(io_err(
                                                "redirect a tracepoint to its CPU's ring",
                                            ))?;
                                            tp_fds.push(fd);
                                        }
                                        None => {
                                            *slot =
                                                Some(map(fd, event_pages, cpu, "kernel-events")?)
                                        }
                                    }
                                }
                            }
                            Err(why) => warnings.push(format!("not counting {name}: {why}")),
                        }
                    }
                    rings.extend(per_cpu.into_iter().flatten());
                }
            }
        }
        let mut delayacct = None;
        let os = match &config.os_metrics {
            None => None,
            Some(oc) => {
                if oc.interval < Duration::from_millis(100) {
                    return Err(Error::Config(
                        "the OS metrics interval must be at least 100 ms".into(),
                    ));
                }
                if oc.delayacct {
                    match os::delayacct::Guard::enable() {
                        Ok(g) => delayacct = Some(g),
                        Err(w) => warnings.push(w),
                    }
                }
                let mut c = Collector::new(os::node_views(&nodes, &config.node_rules));
                if let Some(g) = &delayacct {
                    c.set_delayacct_since(g.since_boot_ns());
                }
                warnings.extend(c.warnings().iter().map(|w| format!("OS metrics: {w}")));
                Some(c)
            }
        };
        let scheduling = priority::probe(priority::RING_READER);
        match &scheduling {
            priority::Raised::Deadline(_) | priority::Raised::Fifo => {}
            other => warnings.push(format!(
                "the collection threads run at {other}: a loaded host can delay them (samples \
                 and OS-metrics seconds may be lost); run as root for real-time scheduling"
            )),
        }
        Ok(Sampler {
            pid_files,
            scheduling,
            config,
            sampling,
            nodes,
            cpus,
            rings,
            tp_fds,
            streams,
            tps,
            warnings,
            os,
            delayacct,
        })
    }

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

    fn run_inner(self, stop: &AtomicBool) -> Result<Summary, Error> {
        let interval_ns = self.config.interval.as_nanos() as u64;
        let cpu0 = sys::self_cpu_ns();
        let host = procfs::host_name();
        let start_wall = sys::realtime_ns();
        let start_mono = sys::monotonic_ns();
        let info = self.run_info(&host);
        let mut output =
            Output::create(&self.config.data_dir, self.nodes.names(), start_wall, info).map_err(
                io_err(format!("write to {}", self.config.data_dir.display())),
            )?;
        output.set_rotate(self.config.rotate);
        let tracker = Tracker::new(self.nodes.clone(), true);
        let intervals = Intervals::new(
            interval_ns,
            start_wall,
            self.nodes.names().len(),
            self.tps.len(),
        );
        let mut engine = Engine::new(tracker, intervals, measure_clock(), self.tps.clone());
        let mut namer = Namer::default();
        let deadline = self
            .config
            .duration
            .map(|d| start_mono + d.as_nanos() as u64);
        let facts = (self.nodes.needs_cgroups() || self.nodes.needs_netns())
            .then_some((self.nodes.needs_cgroups(), self.nodes.needs_netns()));
        let os_interval = self
            .config
            .os_metrics
            .as_ref()
            .map_or(os::DEFAULT_OS_INTERVAL, |o| o.interval);
        let self_scheduling = self.scheduling.clone();
        let Sampler {
            mut rings,
            mut pid_files,
            tp_fds,
            streams,
            os: collector,
            delayacct: _delayacct, // kept until the run ends, then restored
            ..
        } = self;
        let publish_pids = collector.as_ref().is_some_and(Collector::needs_pids);
        let node_pids: NodePids = NodePids::default();
        let (os_tx, os_rx) = std::sync::mpsc::channel::<OsInterval>();
        let mut os_stats = OsStats::default();

        let (tx, rx) = std::sync::mpsc::channel::<Round>();
        // (record-clock time from which records were not processed, their bytes).
        let mut unprocessed: Option<(u64, u64)> = None;
        let mut reader_cpu_ns = 0u64;
        let abort_flag = AtomicBool::new(false);
        let abort = &abort_flag;
        let result = std::thread::scope(|scope| -> Result<(bool, u64), Error> {
            let reader = std::thread::Builder::new()
                .name("culprit-rings".into())
                .spawn_scoped(scope, move || {
                    read_rings(&mut rings, &tp_fds, &tx, stop, deadline, abort, facts);
                    sys::thread_cpu_ns()
                })
                .map_err(io_err("start the ring reader thread"))?;
            // The OS metrics: their own thread and interval; values come back over a channel
            // and are written here, by the one writer of the node files.
            let os_thread = match collector {
                Some(c) => {
                    let pids = &node_pids;
                    let os_tx = os_tx.clone();
                    Some(
                        std::thread::Builder::new()
                            .name("culprit-os".into())
                            .spawn_scoped(scope, move || {
                                priority::raise(priority::OS_COLLECTOR);
                                os::run(c, os_interval, stop, abort, deadline, pids, &os_tx)
                            })
                            .map_err(io_err("start the OS metrics thread"))?,
                    )
                }
                None => None,
            };
            drop(os_tx);
            let mut last_publish = 0u64;
            let mut last_pid_files = 0u64;
            let mut os_write_ns = 0u64;
            // On an error: stop the reader and let it end (it owns the sending side).
            let finish = || {
                abort.store(true, Ordering::SeqCst);
                while rx.recv().is_ok() {}
            };
            // Processes already running: /proc is read after the events are enabled, so nothing
            // falls in between; records older than the snapshot are applied before it.
            let snap_time = match rx.recv() {
                Ok(Round::Enabled(Ok(()))) => sys::monotonic_ns(),
                Ok(Round::Enabled(Err(e))) => {
                    finish();
                    return Err(io_err("enable the perf events")(e));
                }
                _ => {
                    finish();
                    return Err(Error::Config("the ring reader thread ended early".into()));
                }
            };
            engine.set_snapshot(snap_time, procs::scan_proc(facts));
            let mut prev_round = snap_time;
            let mut gaps = Gaps::default();
            // Once the run is to end (a signal, or --duration passed), what is still queued is
            // done within FINISH_BUDGET; past it the rest is not processed, and the intervals
            // it covered are written MISSED: `--duration` is a deadline, and a signal ends the
            // run within a second.
            let mut finish_by: Option<u64> = None;
            let end = loop {
                let Ok(msg) = rx.recv() else {
                    break (stop.load(Ordering::SeqCst), sys::monotonic_ns());
                };
                let Round::Data {
                    time: round,
                    bufs,
                    lost,
                    last,
                    facts,
                } = msg
                else {
                    continue;
                };
                let now = sys::monotonic_ns();
                if finish_by.is_none()
                    && (stop.load(Ordering::SeqCst) || deadline.is_some_and(|d| now >= d))
                {
                    finish_by = Some(now + FINISH_BUDGET.as_nanos() as u64);
                    namer.set_deadline(Some(std::time::Instant::now() + FINISH_BUDGET));
                }
                if finish_by.is_some_and(|f| now > f) {
                    let u = unprocessed.get_or_insert((prev_round, 0));
                    u.1 += bufs.iter().map(|b| b.len() as u64).sum::<u64>();
                    if let Some(end) = last {
                        break end;
                    }
                    continue;
                }
                engine.provide_facts(facts);
                for b in &bufs {
                    engine.ingest(b, &streams);
                }
                if !pid_files.is_empty() && round.saturating_sub(last_pid_files) >= 500_000_000 {
                    // Up to this round first: the trees are as the records left them.
                    engine.process_until(prev_round);
                    for (pid, node) in pid_files.poll() {
                        engine.tracker.adopt_tree(pid, node);
                    }
                    last_pid_files = round;
                }
                if publish_pids && round.saturating_sub(last_publish) >= 200_000_000 {
                    // Up to this round: the tracker has seen every fork, exec and exit before it.
                    engine.process_until(prev_round);
                    if let Ok(mut p) = node_pids.lock() {
                        *p = engine.tracker.node_pids();
                    }
                    last_publish = round;
                }
                while let Ok(o) = os_rx.try_recv() {
                    let t0 = sys::thread_cpu_ns();
                    if let Err(e) = output.write_os(&o) {
                        finish();
                        return Err(io_err("write OS metrics")(e));
                    }
                    os_write_ns += sys::thread_cpu_ns() - t0;
                }
                if let Some(end) = last {
                    break end;
                }
                // The reader did not run for more than an interval (the process was stopped or
                // starved) and a ring overflowed: the intervals inside the gap were not
                // observed. The kernel writes its LOST record only once there is room again,
                // so the evidence may come a round later.
                let stalled = (round.saturating_sub(prev_round) > interval_ns)
                    .then(|| (engine.clock.wall(prev_round), engine.clock.wall(round)));
                for (a, b) in gaps.round(stalled, lost) {
                    engine.intervals.mark_missed(a, b);
                }
                engine.process_until(prev_round);
                let closed = engine.intervals.close_until(engine.clock.wall(prev_round));
                if !closed.is_empty() {
                    forget_replaced(&mut engine, &mut namer, &mut output);
                    for c in &closed {
                        if let Err(e) = output.write(c, &mut namer, &engine.tracker) {
                            finish();
                            return Err(io_err("write a profile")(e));
                        }
                    }
                    engine.tracker.gc(prev_round.saturating_sub(5_000_000_000));
                    engine.clock = measure_clock();
                }
                prev_round = round;
            };
            reader_cpu_ns = reader.join().unwrap_or(0);
            // However the loop ended, the OS thread ends too (woken now if it sleeps).
            abort.store(true, Ordering::SeqCst);
            if let Some(t) = os_thread {
                t.thread().unpark();
                if let Ok(st) = t.join() {
                    os_stats = st;
                }
            }
            let t0 = sys::thread_cpu_ns();
            for o in os_rx.try_iter() {
                output.write_os(&o).map_err(io_err("write OS metrics"))?;
            }
            os_stats.write_cpu_ns = os_write_ns + sys::thread_cpu_ns() - t0;
            Ok(end)
        });
        let (stopped, end_mono) = result?;

        if let Some((from, _)) = unprocessed {
            engine.intervals.mark_missed_from(engine.clock.wall(from));
        }
        engine.process_until(u64::MAX);
        let end_wall = match deadline {
            // A run of --duration ends at start + duration exactly.
            Some(d) if !stopped => engine.clock.wall(d.min(end_mono)),
            _ => engine.clock.wall(end_mono),
        };
        forget_replaced(&mut engine, &mut namer, &mut output);
        for c in engine.intervals.close_all(end_wall.max(start_wall + 1)) {
            output
                .write(&c, &mut namer, &engine.tracker)
                .map_err(io_err("write a profile"))?;
        }
        let intervals = output.intervals();
        let notes = output.notes().to_vec();
        let nodes = output
            .finish(sys::realtime_ns(), stopped)
            .map_err(io_err("end the profile files"))?;
        let cpu1 = sys::self_cpu_ns();
        let s = engine.stats;
        Ok(Summary {
            nodes,
            samples: s.samples,
            lost: s.lost,
            lost_events: s.lost_events,
            lost_tracking: s.lost_tracking,
            events: s.events,
            out_of_scope: s.out_of_scope,
            throttles: s.throttles,
            intervals,
            named: namer.named,
            elapsed_ns: sys::monotonic_ns() - start_mono,
            cpu_ns: (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1),
            stopped,
            tracking: engine.tracker.stats(),
            os: os_stats,
            notes,
            unprocessed_bytes: unprocessed.map_or(0, |u| u.1),
            reader_cpu_ns,
            scheduling: self_scheduling,
        })
    }
}

/// Drops cached names of images whose files were replaced since the last interval.
fn forget_replaced(engine: &mut Engine, namer: &mut Namer, output: &mut Output) {
    let replaced = engine.tracker.take_replaced();
    if !replaced.is_empty() {
        namer.forget(&replaced);
        output.forget_locations();
    }
}

/// What the ring reader thread sends.
enum Round {
    /// The events were enabled (or could not be).
    Enabled(io::Result<()>),
    /// One drain of every ring.
    Data {
        /// Monotonic time the drain started: every record older than the previous round's
        /// time has been read.
        time: u64,
        /// The records, one buffer per ring with data.
        bufs: Vec<Vec<u8>>,
        /// Records were lost (a LOST record, or a ring found nearly full).
        lost: bool,
        /// Set on the last round (events disabled): (stopped by the flag, end time).
        last: Option<(bool, u64)>,
        /// Cgroups / network namespace of the processes that called `exec`, read right after
        /// the drain (only when node rules or the scope need them).
        facts: Vec<(u32, ProcFacts)>,
    },
}

/// The ring reader: enables the events, drains every ring each tick (or when one is half
/// full), and on stop or deadline disables them, drains once more and says it is the end.
fn read_rings(
    rings: &mut [Ring],
    tp_fds: &[PerfFd],
    tx: &std::sync::mpsc::Sender<Round>,
    stop: &AtomicBool,
    deadline: Option<u64>,
    abort: &AtomicBool,
    facts_needed: Option<(bool, bool)>,
) {
    // Draining must not wait behind the work it samples: on a machine whose CPUs are all
    // busy, a reader at the default priority can be kept off a CPU long enough for the rings
    // to fill. It does little work, so it runs ahead of the load, capped (`crate::priority`).
    priority::raise(priority::RING_READER);
    let enabled = rings
        .iter()
        .map(|r| r.fd())
        .chain(tp_fds.iter())
        .try_for_each(PerfFd::enable);
    let ok = enabled.is_ok();
    if tx.send(Round::Enabled(enabled)).is_err() || !ok {
        return;
    }
    let drain =
        |rings: &mut [Ring]| {
            let mut bufs = Vec::new();
            let mut lost = false;
            let mut facts = Vec::new();
            for r in rings.iter_mut() {
                let mut b = Vec::new();
                let n = r.drain(&mut b);
                if n > 0 {
                    lost |= n * 8 >= r.data_size() * 7 || has_lost_record(&b);
                    if let Some((cg, ns)) = facts_needed {
                        facts.extend(exec_pids(&b).filter_map(|pid| {
                            crate::nodes::read_facts(pid, cg, ns).map(|f| (pid, f))
                        }));
                    }
                    bufs.push(b);
                }
            }
            (bufs, lost, facts)
        };
    loop {
        let now = sys::monotonic_ns();
        let mut wait = TICK.as_millis() as u64;
        if let Some(d) = deadline {
            wait = wait.min(d.saturating_sub(now) / 1_000_000);
        }
        sys::poll_rings(rings, wait as i32);
        let time = sys::monotonic_ns();
        let stopped = stop.load(Ordering::SeqCst);
        let done = stopped || deadline.is_some_and(|d| time >= d) || abort.load(Ordering::SeqCst);
        if done {
            for fd in rings.iter().map(|r| r.fd()).chain(tp_fds.iter()) {
                let _ = fd.disable();
            }
            let end = sys::monotonic_ns();
            let (bufs, lost, facts) = drain(rings);
            let _ = tx.send(Round::Data {
                time: end,
                bufs,
                lost,
                last: Some((stopped, end)),
                facts,
            });
            return;
        }
        let (bufs, lost, facts) = drain(rings);
        if tx
            .send(Round::Data {
                time,
                bufs,
                lost,
                last: None,
                facts,
            })
            .is_err()
        {
            return;
        }
    }
}

/// The pids of the COMM records written by `exec` in a buffer of records.
fn exec_pids(buf: &[u8]) -> impl Iterator<Item = u32> + '_ {
    use perf_event_open_sys::bindings as b;
    crate::record::split(buf)
        .filter(|(k, misc, _)| {
            *k == b::PERF_RECORD_COMM && misc & crate::record::MISC_COMM_EXEC != 0
        })
        .filter_map(|(_, _, rec)| Some(u32::from_le_bytes(rec.get(8..12)?.try_into().ok()?)))
}

/// True when a buffer of records holds a LOST or LOST_SAMPLES record.
fn has_lost_record(buf: &[u8]) -> bool {
    use perf_event_open_sys::bindings as b;
    crate::record::split(buf)
        .any(|(k, _, _)| k == b::PERF_RECORD_LOST || k == b::PERF_RECORD_LOST_SAMPLES)
}

/// realtime − monotonic, read between two monotonic reads; the closest of three tries.
fn measure_clock() -> ClockMap {
    let mut best: Option<(u64, i64)> = None;
    for _ in 0..3 {
        let a = sys::monotonic_ns();
        let w = sys::realtime_ns();
        let b = sys::monotonic_ns();
        let offset = w as i64 - (a / 2 + b / 2) as i64;
        if best.is_none_or(|(gap, _)| b - a < gap) {
            best = Some((b - a, offset));
        }
    }
    ClockMap {
        offset: best.map_or(0, |b| b.1),
    }
}

/// Picks the event and rate: the configured one, or cycles falling back to cpu-clock.
fn choose_event(config: &Config, cpu: u32, wakeup: u32) -> Result<Sampling, Error> {
    let explicit = match &config.event {
        Some(name) => Some(event::event_by_name(name).ok_or_else(|| {
            Error::Config(format!(
                "unknown event {name:?}; known events: {}",
                event::event_names().collect::<Vec<_>>().join(", ")
            ))
        })?),
        None => None,
    };
    let event = explicit.clone().unwrap_or_else(event::default_event);
    let rate = config.rate.unwrap_or_else(|| event.default_rate());
    if let Rate::Period(0) | Rate::Freq(0) = rate {
        return Err(Error::Config(
            "the sampling period or frequency must be positive".into(),
        ));
    }
    let s = Sampling {
        event: event.clone(),
        rate,
        fallback_reason: None,
    };
    match PerfFd::open(&sampling_attr(&s, wakeup), -1, cpu as i32, 0) {
        Ok(_) => Ok(s),
        Err(e) if is_permission(&e) => Err(permission_error(e)),
        Err(e) if is_missing_event(&e) && explicit.is_none() => {
            let fallback = event::fallback_event();
            let rate = match config.rate {
                None => fallback.default_rate(),
                Some(Rate::Freq(f)) => Rate::Freq(f),
                Some(Rate::Period(p)) => {
                    return Err(Error::Event {
                        event: event.name.into(),
                        reason: format!(
                            "hardware cycles do not exist here ({e}); --period {p} counts cycles, \
                             so it does not carry over to the cpu-clock fallback: pass \
                             `--event cpu-clock --period NS` (1000000 ns = 1 kHz) or --freq HZ"
                        ),
                    })
                }
            };
            let fb = Sampling {
                event: fallback,
                rate,
                fallback_reason: Some(format!("hardware cycles are not available here ({e})")),
            };
            PerfFd::open(&sampling_attr(&fb, wakeup), -1, cpu as i32, 0).map_err(|e| {
                if is_permission(&e) {
                    permission_error(e)
                } else {
                    Error::Event {
                        event: fb.event.name.into(),
                        reason: e.to_string(),
                    }
                }
            })?;
            Ok(fb)
        }
        Err(e) => Err(Error::Event {
            event: event.name.into(),
            reason: if is_missing_event(&e) {
                format!("{e}; this machine has no such event (try --event cpu-clock)")
            } else {
                e.to_string()
            },
        }),
    }
}

/// Opens tracepoint `name` on every CPU (one event per CPU, in `cpus` order).
fn open_tracepoint(
    root: &std::path::Path,
    name: &str,
    cpus: &[u32],
    wakeup: u32,
    index: u16,
    streams: &mut Streams,
) -> Result<(TpSpec, Vec<PerfFd>), String> {
    let tp = Tracepoint::load(root, name)?;
    let decoder = Decoder::for_tracepoint(&tp);
    let attr = tracepoint_attr(tp.id, decoder.needs_raw(), wakeup);
    let layout = Layout {
        sample_type: attr.sample_type,
        sample_id_all: true,
    };
    let mut fds = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        let fd = PerfFd::open(&attr, -1, cpu as i32, 0).map_err(|e| {
            if is_permission(&e) {
                format!("{e} (tracepoints need root or CAP_PERFMON)")
            } else {
                e.to_string()
            }
        })?;
        let id = fd.id().map_err(|e| e.to_string())?;
        streams.add(id, layout, Stream::Tracepoint(index));
        fds.push(fd);
    }
    Ok((
        TpSpec {
            name: tp.name,
            decoder,
        },
        fds,
    ))
}
