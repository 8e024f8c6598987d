//! What a sampler is opened with ([`Config`]), the sizes of its rings, and what can go wrong
//! ([`Error`]).

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use culprit_format::procfs;

use crate::event::{CallGraph, Rate, Sampling};
use crate::nodes::{NodeRule, Scope};
use crate::os::OsConfig;
use crate::sys;

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

pub(super) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> Error {
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
    /// Tracepoints to count (`system:name`); `None` for [`crate::tracefs::DEFAULT_TRACEPOINTS`].
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
pub(super) const MAX_AUTO_RING_PAGES: usize = 4096;
/// Seconds of records a ring sized from the rate holds: the reader drains every 50 ms (or at a
/// quarter full), so this is what a starved reader can fall behind before samples are lost.
pub(super) const RING_SLACK_S: u64 = 2;
/// How long the sampler may take, once a signal or `--duration` ends its run, to process what
/// is still queued, name it and write it; past it the rest is dropped (its intervals written
/// MISSED), so that the run ends within a second.
pub const FINISH_BUDGET: Duration = Duration::from_millis(600);
/// How often the rings are drained when no watermark wakes the sampler earlier.
pub(super) const TICK: Duration = Duration::from_millis(50);

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
pub(super) fn tracking_ring_pages() -> usize {
    if sys::euid() == 0 {
        128
    } else {
        16
    }
}

/// `bytes` as a power of two of pages between [`DEFAULT_RING_PAGES`] and
/// [`MAX_AUTO_RING_PAGES`], or `unprivileged` pages without root.
pub(super) fn pages_for(bytes: u64, unprivileged: usize) -> usize {
    if sys::euid() != 0 {
        return unprivileged;
    }
    (bytes as usize)
        .div_ceil(sys::page_size())
        .next_power_of_two()
        .clamp(DEFAULT_RING_PAGES, MAX_AUTO_RING_PAGES)
}

pub(super) fn is_permission(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
}

pub(super) fn permission_error(source: io::Error) -> Error {
    Error::Permission {
        paranoid: perf_event_paranoid().map_or_else(|| "unknown".into(), |v| v.to_string()),
        source,
    }
}

/// True for the errors meaning "this event does not exist here" (no PMU in a VM).
pub(super) fn is_missing_event(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV)
    )
}
