//! `culprit sample`: the system-wide perf_event sampler daemon (library: `culprit_sampler`).
//!
//! Raw flags become a [`culprit_sampler::Config`] here; everything else happens in the library,
//! which the testbed and `culprit record --sample` drive in-process too.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::bail;
use culprit_sampler::flags::RuleKind;
use culprit_sampler::os::OsConfig;
use culprit_sampler::{Config, NodeRule, Rate, Sampler, Scope};

/// Arguments of `culprit sample`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    culprit sample                              # until Ctrl-C, ./culprit-data/<host>/\n  \
    culprit sample -o DATA --duration 60s --interval 1s\n  \
    culprit sample --event cpu-clock --freq 999\n  \
    culprit sample --node-netns io1=/run/netns/io1 --node-netns io2=/run/netns/io2 \\\n      \
    --node-addr io1=10.0.0.1 --node-addr io2=10.0.0.2   # emulated nodes\n  \
    culprit sample --delayacct --node-pid s1=4242 --node-addr s1=127.0.0.1:3001 \\\n      \
    --node-pid s2=4243 --node-addr s2=127.0.0.1:3002   # servers sharing a host\n  \
    culprit sample --delayacct --node-pid s1=/run/s1.pid --node-pid s2=/run/s2.pid  # start it first\n\n\
    The default event is hardware cycles every 100000 (seed 000); where hardware events do not \
    exist (virtual machines) it falls back to cpu-clock at 1 kHz per CPU and says so. \
    Needs root, CAP_PERFMON, or kernel.perf_event_paranoid <= 0 (see `culprit doctor`).")]
pub struct Args {
    /// Data root: profiles go to `DIR/<node>/samples-<start_ns>.cul` (default: $CULPRIT_DIR,
    /// else ./culprit-data).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Node name (default: $CULPRIT_NODE, else the host name). Ignored with --node-* rules.
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// Profile interval (e.g. 10s, 500ms); profiles start at multiples of it since the epoch.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration, conflicts_with = "interval_ms")]
    pub interval: Duration,
    /// Profile interval in milliseconds (same as --interval Nms).
    #[arg(long, value_name = "MS")]
    pub interval_ms: Option<u64>,
    /// Stop after this long (default: run until SIGINT / SIGTERM).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Event to sample: cycles, instructions, ref-cycles, cache-misses, branch-misses,
    /// cpu-clock, task-clock, page-faults, context-switches (default: cycles, or cpu-clock
    /// where hardware events do not exist).
    #[arg(short = 'e', long, value_name = "EVENT")]
    pub event: Option<String>,
    /// Sample every N events (ns for cpu-clock / task-clock).
    #[arg(short = 'c', long, value_name = "N", conflicts_with = "freq")]
    pub period: Option<u64>,
    /// Sample about HZ times a second per CPU (the kernel adjusts the period).
    #[arg(short = 'F', long, value_name = "HZ")]
    pub freq: Option<u64>,
    /// Only this process and its descendants.
    #[arg(short = 'p', long, value_name = "PID", conflicts_with = "cgroup")]
    pub pid: Option<u32>,
    /// Only processes in this cgroup (or below), e.g. /sys/fs/cgroup/cpu/web or /web.
    #[arg(short = 'G', long, value_name = "PATH")]
    pub cgroup: Option<String>,
    /// Emulated node: processes in this cgroup (path relative to a hierarchy root, or under
    /// `/sys/fs/cgroup/<hierarchy>/`) belong to NODE. Repeatable.
    #[arg(long = "node-cgroup", value_name = "NODE=PATH")]
    pub node_cgroup: Vec<String>,
    /// Emulated node: processes in this network namespace (/run/netns/NAME) belong to NODE.
    #[arg(long = "node-netns", value_name = "NODE=PATH")]
    pub node_netns: Vec<String>,
    /// Emulated node: this process and its descendants belong to NODE. PID may be a pid file's
    /// path (with a `/`: ./srv.pid, /run/srv.pid): read when it appears and whenever it
    /// changes, so the sampler can start before the server (as --delayacct wants). A pid that
    /// does not exist yet is taken when a process gets it. Repeatable.
    #[arg(long = "node-pid", value_name = "NODE=PID|NODE=PIDFILE")]
    pub node_pid: Vec<String>,
    /// Emulated node: TCP events (retransmits) of sockets with this address belong to NODE, and
    /// so do TCP connections with this local address (OS metrics). `IP:PORT` (`[IPv6]:PORT`) tells
    /// servers sharing one address apart by port. Repeatable.
    #[arg(long = "node-addr", value_name = "NODE=IP[:PORT]")]
    pub node_addr: Vec<String>,
    /// Tracepoints to count per node, comma-separated, or `none` (default:
    /// tcp:tcp_retransmit_skb, block:block_bio_queue, block:block_rq_issue,
    /// block:block_rq_complete, sched:sched_switch).
    #[arg(long, value_name = "LIST")]
    pub tracepoints: Option<String>,
    /// Record the system-call and block layers of the I/O stack (seed 003): every
    /// pread64/pwrite64 of a node's processes, entry and exit (adds the
    /// syscalls:sys_enter/exit_pread64 and pwrite64 tracepoints), and the device requests they
    /// queued (from the block tracepoints); `culprit report --layers` shows them as layers
    /// `syscall` and `block`.
    #[arg(long)]
    pub layers: bool,
    /// Data pages of each CPU's samples ring (a power of two; default: 2 s of samples at the
    /// rate, 64 to 4096 pages). Kernel events and process tracking have rings of their own,
    /// sized from the tracepoints (docs/sampler.md).
    #[arg(long, value_name = "N")]
    pub ring_pages: Option<usize>,
    /// Record call chains: `fp` (kernel and user, walked through frame pointers; user code
    /// needs -fno-omit-frame-pointer for whole chains).
    #[arg(short = 'g', long, value_name = "MODE", value_parser = str::parse::<culprit_sampler::CallGraph>)]
    pub call_graph: Option<culprit_sampler::CallGraph>,
    /// Do not mount tracefs when it is not mounted (kernel events are then not counted).
    #[arg(long)]
    pub no_mount: bool,
    /// Do not collect the black-box OS metrics (disk, network, TCP, CPU, cgroup and per-process
    /// counters per node, every second).
    #[arg(long)]
    pub no_os_metrics: bool,
    /// OS metrics interval (default 1s; independent of --interval).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, conflicts_with = "no_os_metrics")]
    pub os_interval: Option<Duration>,
    /// Turn on the kernel's delay accounting (kernel.task_delayacct, host-wide) for the run, so
    /// the OS metrics have each node's block-I/O delay; the previous setting is restored when
    /// the last sampler counting on it ends (also on SIGINT/SIGTERM; overlapping samplers
    /// share it through /run/culprit-delayacct).
    #[arg(long, conflicts_with = "no_os_metrics")]
    pub delayacct: bool,
    /// Convert a perf.data file (from `perf record -a`) into profiles instead of sampling.
    #[arg(long, value_name = "PERF_DATA")]
    pub replay: Option<PathBuf>,
    /// Also count calls of these functions with uprobes, per process, into trace files beside
    /// the samples (`BINARY:GLOB`, comma-separated or repeated; BINARY is a path, a program on
    /// PATH, or a library name such as libc.so.6). For servers that cannot be rebuilt with
    /// -finstrument-functions.
    #[arg(long, value_name = "BINARY:PATTERN", num_args = 1.., conflicts_with = "replay")]
    pub uprobes: Vec<String>,
    /// With --uprobes: warn about a function whose probe takes more than this percentage of a
    /// CPU at the rate it is called.
    #[arg(long, value_name = "PERCENT", default_value_t = 5.0)]
    pub uprobe_budget: f64,
    /// Start a new piece of each node's file every DURATION (on multiples of it since the
    /// epoch, at an interval boundary), e.g. 1h; readers join the pieces.
    #[arg(long, value_name = "DURATION", value_parser = crate::prune::parse_age)]
    pub rotate: Option<Duration>,
    /// Start a new piece of every node's file once the largest holds SIZE (e.g. 100M), at an
    /// interval boundary.
    #[arg(long, value_name = "SIZE", value_parser = culprit_format::rotation::parse_size)]
    pub rotate_size: Option<u64>,
    /// Retention: every minute, delete finished data files of the data root last written
    /// longer ago than AGE (e.g. 7d), as `culprit prune --keep` does.
    #[arg(long, value_name = "AGE", value_parser = crate::prune::parse_age)]
    pub keep: Option<Duration>,
    /// Retention: every minute, delete the oldest finished data files until the data root
    /// takes at most SIZE (e.g. 5G), as `culprit prune --max-size` does.
    #[arg(long, value_name = "SIZE", value_parser = culprit_format::rotation::parse_size)]
    pub max_size: Option<u64>,
    /// Print nothing but errors.
    #[arg(short, long)]
    pub quiet: bool,
}

/// Parses `10s`, `500ms`, `2m`, `1h`, `1.5s`, or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    culprit_analysis::time::parse_duration_ns(s).map(Duration::from_nanos)
}

/// The data root: --output, else $CULPRIT_DIR, else ./culprit-data.
fn output_dir(a: &Args) -> PathBuf {
    a.output
        .clone()
        .or_else(|| {
            std::env::var_os("CULPRIT_DIR")
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("culprit-data"))
}

/// The node name: --node, else $CULPRIT_NODE, else the host name.
fn node_name(a: &Args) -> String {
    a.node
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| std::env::var("CULPRIT_NODE").ok().filter(|n| !n.is_empty()))
        .unwrap_or_else(culprit_sampler::default_node_name)
}

/// Validates the flags into a sampler configuration.
pub fn config(a: &Args) -> anyhow::Result<Config> {
    let mut c = Config::new(output_dir(a), node_name(a));
    c.event = a.event.clone();
    c.rate = match (a.period, a.freq) {
        (Some(p), _) => Some(Rate::Period(p)),
        (None, Some(f)) => Some(Rate::Freq(f)),
        (None, None) => None,
    };
    c.interval = match a.interval_ms {
        Some(ms) => Duration::from_millis(ms),
        None => a.interval,
    };
    c.duration = a.duration;
    c.rotate = culprit_format::rotation::Rotate {
        every_ns: a
            .rotate
            .map(|d| (d.as_nanos() as u64).max(c.interval.as_nanos() as u64)),
        max_bytes: a.rotate_size,
    };
    c.scope = match (a.pid, &a.cgroup) {
        (Some(p), _) => Scope::Pid(p),
        (None, Some(g)) if !culprit_sampler::nodes::cgroup_exists(g) => {
            bail!("--cgroup {g}: no such cgroup (under /sys/fs/cgroup)")
        }
        (None, Some(g)) => Scope::Cgroup(g.clone()),
        (None, None) => Scope::System,
    };
    let rules = [
        (RuleKind::Cgroup, &a.node_cgroup),
        (RuleKind::Netns, &a.node_netns),
        (RuleKind::Pid, &a.node_pid),
        (RuleKind::Addr, &a.node_addr),
    ];
    for (kind, values) in rules {
        for v in values {
            c.node_rules.push(NodeRule::parse(kind, v)?);
        }
    }
    c.tracepoints = a
        .tracepoints
        .as_deref()
        .map(culprit_sampler::flags::tracepoints);
    if a.layers {
        c.tracepoints = Some(culprit_sampler::flags::with_layers(c.tracepoints.take()));
    }
    c.ring_pages = a.ring_pages.unwrap_or(0);
    c.call_graph = a.call_graph.unwrap_or_default();
    c.mount_tracefs = !a.no_mount;
    c.os_metrics = (!a.no_os_metrics).then(|| OsConfig {
        interval: a
            .os_interval
            .unwrap_or(culprit_sampler::os::DEFAULT_OS_INTERVAL),
        delayacct: a.delayacct,
    });
    Ok(c)
}

/// Runs `culprit sample`.
pub fn run(a: Args) -> anyhow::Result<i32> {
    if let Some(perf_data) = &a.replay {
        return replay(&a, perf_data);
    }
    let cfg = config(&a)?;
    let stop = culprit_sampler::stop_on_signals();
    let probes = crate::uprobes::open_system(&a.uprobes, &cfg, a.quiet)?;
    let sampler = Sampler::open(cfg.clone())?;
    let mut err = std::io::stderr().lock();
    if !a.quiet {
        writeln!(err, "culprit: {}", sampler.describe())?;
        for w in sampler.warnings() {
            writeln!(err, "culprit: warning: {w}")?;
        }
    }
    drop(err);
    let beside = culprit_sampler::daemon::Beside {
        uprobes: probes.map(|probes| culprit_sampler::daemon::Uprobes {
            probes,
            budget_percent: a.uprobe_budget,
            warn: crate::uprobes::warn_line,
        }),
        retention: Some(culprit_sampler::daemon::Retention {
            policy: culprit_datadir::retention::Policy {
                keep: a.keep,
                max_bytes: a.max_size,
            },
            report: Box::new(crate::prune::report(a.quiet)),
        }),
    };
    let ended = culprit_sampler::daemon::run(sampler, &cfg, stop, beside);
    if let Some(u) = ended.uprobes {
        crate::uprobes::say_system(u, a.quiet);
    }
    let s = ended.sampler?;
    if !a.quiet {
        let (u, sys) = s.cpu_ns;
        let secs = s.elapsed_ns as f64 / 1e9;
        let mut err = std::io::stderr().lock();
        writeln!(
            err,
            "culprit: {} samples ({} lost), {} kernel events ({} records lost), {} \
             process-tracking records lost, {} intervals in {:.1} s; sampler CPU {:.3} s ({:.2} % \
             of one CPU)",
            s.samples,
            s.lost,
            s.events,
            s.lost_events,
            s.lost_tracking,
            s.intervals,
            secs,
            (u + sys) as f64 / 1e9,
            if secs > 0.0 {
                (u + sys) as f64 / 1e9 / secs * 100.0
            } else {
                0.0
            }
        )?;
        let pct = |ns: u64| {
            if secs > 0.0 {
                ns as f64 / 1e9 / secs * 100.0
            } else {
                0.0
            }
        };
        writeln!(
            err,
            "culprit: ring reader CPU {:.3} s ({:.2} % of one CPU); collection threads: {}",
            s.reader_cpu_ns as f64 / 1e9,
            pct(s.reader_cpu_ns),
            s.scheduling
        )?;
        if s.os.intervals > 0 || s.os.cpu_ns > 0 {
            writeln!(
                err,
                "culprit: OS metrics: {} intervals ({} from reads that came late); collector CPU {:.3} s + writing \
                 {:.3} s ({:.3} % of one CPU)",
                s.os.intervals,
                s.os.late,
                s.os.cpu_ns as f64 / 1e9,
                s.os.write_cpu_ns as f64 / 1e9,
                if secs > 0.0 {
                    (s.os.cpu_ns + s.os.write_cpu_ns) as f64 / 1e9 / secs * 100.0
                } else {
                    0.0
                }
            )?;
        }
        for w in &s.notes {
            writeln!(err, "culprit: warning: {w}")?;
        }
        if s.unprocessed_bytes > 0 {
            writeln!(
                err,
                "culprit: warning: to end on time, {} bytes of records were not processed; the \
                 intervals they covered are written missed",
                s.unprocessed_bytes
            )?;
        }
        for n in &s.nodes {
            writeln!(
                err,
                "culprit:   {}: {} samples, {} bytes → {}",
                n.node,
                n.samples,
                n.bytes,
                n.path.display()
            )?;
        }
    }
    Ok(0)
}

fn replay(a: &Args, perf_data: &std::path::Path) -> anyhow::Result<i32> {
    let interval = a.interval_ms.map_or(a.interval, Duration::from_millis);
    let r = culprit_sampler::perfdata::replay(perf_data, &output_dir(a), &node_name(a), interval)
        .map_err(anyhow::Error::msg)?;
    if !a.quiet {
        let mut err = std::io::stderr().lock();
        writeln!(
            err,
            "culprit: replayed {} samples ({} distinct locations) from {}: attribution {:.3} s, \
             symbolization and writing {:.3} s",
            r.samples,
            r.named,
            perf_data.display(),
            r.attribute.as_secs_f64(),
            r.symbolize_write.as_secs_f64()
        )?;
        for n in &r.nodes {
            writeln!(err, "culprit:   {} → {}", n.node, n.path.display())?;
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-1s").is_err());
    }
}
