//! Black-box OS metrics per node, every second (seed 001, Kasick's thesis, §3.2.1 and Table 3.1):
//! what sysstat's `sadc` records for a file server — per block device `tps rd_sec wr_sec
//! avgrq-sz avgqu-sz await svctm %util`, per interface `rxpck txpck rxbyt txbyt`, TCP `cwnd` per
//! socket — plus CPU, and, for servers that share a host, the same quantities from the node's own
//! view. Names, units and meanings are in [`culprit_format::os_metrics`].
//!
//! # Where each node's values come from
//!
//! * **A whole machine** (no node rules): `/proc/diskstats` (whole disks that have done I/O),
//!   `/proc/stat`, and the sampler's network namespace: `/proc/net/dev`, `/proc/net/snmp`, and
//!   every TCP connection in it (`sock_diag`).
//! * **Emulated nodes or servers sharing a host** (`--node-netns/-cgroup/-pid/-addr`): what
//!   belongs to the node alone. Its network namespace (`--node-netns`): that namespace's
//!   `net/dev` and `net/snmp`. Its cgroup (`--node-cgroup`, or the `--cgroup` scope): blkio
//!   bytes and requests, cpuacct usage, CFS throttling. Its processes (as the sampler attributes
//!   them: the same tree, cgroup and namespace rules as the samples): storage bytes from
//!   `/proc/PID/io`, block-I/O delay (delay accounting) and run-queue wait summed over their
//!   threads, and the TCP connections whose sockets they hold (`/proc/PID/fd`) or whose local
//!   address is the node's (`--node-addr IP[:PORT]`). Several servers on one host share one disk,
//!   one loopback and one kernel: machine-wide disk and CPU counters are nobody's own and are not
//!   written for such nodes; the per-process I/O delay stands in for `await`, the per-socket view
//!   for the shared interfaces.
//!
//! # Rates and absence
//!
//! Every tick (wall-clock multiples of the interval, 1 s by default) reads every source once;
//! a record covers the previous tick to this one and divides counter differences by the span
//! measured between the reads. A counter that went backwards (a device removed, a wrap) makes
//! its metrics absent for that interval, a source that cannot be read makes them absent, an
//! average over no requests is absent: absent is never written as zero. The collector runs ahead
//! of the load ([`crate::priority`]); a read that comes late anyway (the collector stopped or
//! starved) still has exact counter increments since the previous read: their rates, averages
//! over the span between the reads, are written for every interval the span covers (the
//! record's `span_ns` is then longer than its `dur_ns`), so no second is missed.

pub mod delayacct;
pub mod diag;
pub mod parse;

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use culprit_format::os_metrics::{self, name, MetricDef};
use culprit_format::OsMetricsHead;

use crate::nodes::{normalize_cgroup, NodeRule, Nodes, Scope};
use crate::sys::{self, DiagSocket};

/// Default interval of the OS metrics: 1 s, as seed 001's `sadc`.
pub const DEFAULT_OS_INTERVAL: Duration = Duration::from_secs(1);

/// What the OS-metrics collector does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OsConfig {
    /// Interval (default 1 s, independent of the sample profile interval).
    pub interval: Duration,
    /// Turn on the kernel's delay accounting (`kernel.task_delayacct`) for the run, and restore
    /// it afterwards: block-I/O delay per process needs it.
    pub delayacct: bool,
}

impl Default for OsConfig {
    fn default() -> Self {
        OsConfig {
            interval: DEFAULT_OS_INTERVAL,
            delayacct: false,
        }
    }
}

/// A local endpoint that makes a TCP socket a node's: an address, optionally with a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// Address.
    pub addr: IpAddr,
    /// Port; `None` matches any.
    pub port: Option<u16>,
}

/// The sources one node's metrics come from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeView {
    /// The whole machine: disks, CPU, the sampler's network namespace and all its connections.
    pub machine: bool,
    /// The node's network namespace file (`--node-netns`).
    pub netns: Option<PathBuf>,
    /// The node's cgroup, relative to the hierarchy roots (`--node-cgroup`, or the `--cgroup`
    /// scope).
    pub cgroup: Option<String>,
    /// Local endpoints of the node's TCP connections (`--node-addr`).
    pub endpoints: Vec<Endpoint>,
    /// The node's processes (per-process I/O, delays, sockets).
    pub procs: bool,
}

/// Each node's view, by node index; `None` for the directory of unattributed samples.
pub fn node_views(nodes: &Nodes, rules: &[NodeRule]) -> Vec<Option<NodeView>> {
    let names = nodes.names();
    if !nodes.has_rules() {
        let scoped = !matches!(nodes.scope(), Scope::System);
        return vec![Some(NodeView {
            machine: true,
            procs: scoped,
            cgroup: match nodes.scope() {
                Scope::Cgroup(c) => Some(normalize_cgroup(c)),
                _ => None,
            },
            ..NodeView::default()
        })];
    }
    let mut views: Vec<Option<NodeView>> = names
        .iter()
        .enumerate()
        .map(|(i, _)| {
            (i as u16 != nodes.fallback()).then(|| NodeView {
                procs: true,
                ..NodeView::default()
            })
        })
        .collect();
    for r in rules {
        let Some(i) = names.iter().position(|n| n == r.node()) else {
            continue;
        };
        let Some(v) = views[i].as_mut() else { continue };
        match r {
            NodeRule::Netns { path, .. } => v.netns = v.netns.take().or(Some(path.clone())),
            NodeRule::Cgroup { path, .. } => {
                v.cgroup = v.cgroup.take().or(Some(normalize_cgroup(path)))
            }
            NodeRule::Addr { addr, port, .. } => v.endpoints.push(Endpoint {
                addr: *addr,
                port: *port,
            }),
            NodeRule::Pid { .. } | NodeRule::PidFile { .. } => {}
        }
    }
    views
}

/// One metric value of a node.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// The metric (name and unit).
    pub def: &'static MetricDef,
    /// Device or interface name, for per-instance metrics.
    pub instance: Option<Arc<str>>,
    /// The value (finite).
    pub value: f64,
}

/// One interval's values of every node.
#[derive(Clone, Debug)]
pub struct OsInterval {
    /// Interval, measured span, flags.
    pub head: OsMetricsHead,
    /// Per node index: the values, or `None` where no record is written (unattributed samples).
    pub nodes: Vec<Option<Vec<Value>>>,
}

/// The node's processes, published by the sampler's tracking (index: node).
pub type NodePids = Arc<Mutex<Vec<Vec<u32>>>>;

/// What a collector run did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OsStats {
    /// Intervals written (per node).
    pub intervals: u64,
    /// Intervals written from a read that came more than an interval late (their values are
    /// averages over the longer span).
    pub late: u64,
    /// The collector thread's own CPU time, ns.
    pub cpu_ns: u64,
    /// CPU time the sampler's writer spent encoding and writing the records, ns.
    pub write_cpu_ns: u64,
}

fn def(n: &str) -> &'static MetricDef {
    os_metrics::def(n).expect("metric in the catalogue")
}

/// Collects values into a node's list.
#[derive(Default)]
struct Out {
    vals: Vec<Value>,
}

impl Out {
    fn put(&mut self, n: &'static str, instance: Option<&Arc<str>>, v: Option<f64>) {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            self.vals.push(Value {
                def: def(n),
                instance: instance.cloned(),
                value: v,
            });
        }
    }
}

/// A `/proc` or sysfs file kept open and read again from the start every tick (cheaper than
/// opening it by path each time, and for another namespace's `net/*` files the only way: they
/// stay bound to the namespace they were opened in).
#[derive(Debug)]
struct Reread {
    file: File,
    buf: Vec<u8>,
}

impl Reread {
    fn open(path: &Path) -> io::Result<Reread> {
        Ok(Reread {
            file: File::open(path)?,
            buf: Vec::with_capacity(4096),
        })
    }

    fn text(&mut self) -> Option<&str> {
        self.buf.clear();
        let mut chunk = [0u8; 8192];
        loop {
            match self.file.read_at(&mut chunk, self.buf.len() as u64) {
                Ok(0) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return None,
            }
            if self.buf.len() > 16 << 20 {
                return None;
            }
        }
        std::str::from_utf8(&self.buf).ok()
    }
}

/// `cur − prev` as a count, `None` when the counter went backwards.
fn delta(prev: u64, cur: u64) -> Option<f64> {
    cur.checked_sub(prev).map(|d| d as f64)
}

/// One per-namespace rate: (interface, metric name, value).
type NsRate = (Option<Arc<str>>, &'static str, f64);

/// A network namespace's files and `sock_diag` socket.
#[derive(Debug)]
struct NetView {
    dev: Option<Reread>,
    snmp: Option<Reread>,
    sockstat: Option<Reread>,
    sockstat6: Option<Reread>,
    diag: Option<DiagSocket>,
    prev_dev: HashMap<String, parse::NetDev>,
    prev_snmp: Option<parse::TcpSnmp>,
    used: u64,
}

impl NetView {
    /// Opens the files and socket of the calling thread's namespace.
    fn here() -> NetView {
        let base = Path::new("/proc/thread-self/net");
        NetView {
            dev: Reread::open(&base.join("dev")).ok(),
            snmp: Reread::open(&base.join("snmp")).ok(),
            sockstat: Reread::open(&base.join("sockstat")).ok(),
            sockstat6: Reread::open(&base.join("sockstat6")).ok(),
            diag: DiagSocket::open().ok(),
            prev_dev: HashMap::new(),
            prev_snmp: None,
            used: 0,
        }
    }

    /// Opens them inside the namespace `ns` (a namespace file), from a short-lived thread that
    /// enters it: the collector thread itself never changes namespace.
    fn enter(ns: &Path) -> io::Result<NetView> {
        let f = File::open(ns)?;
        std::thread::scope(|s| {
            s.spawn(|| -> io::Result<NetView> {
                sys::setns_net(&f)?;
                Ok(NetView::here())
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("namespace helper thread panicked")))
        })
    }

    /// Which families have TCP sockets here (a family whose count cannot be read is dumped).
    fn tcp_families(&mut self) -> (bool, bool) {
        let has = |f: &mut Option<Reread>| {
            f.as_mut()
                .and_then(Reread::text)
                .and_then(parse::sockstat_tcp_inuse)
                .is_none_or(|n| n > 0)
        };
        let v4 = has(&mut self.sockstat);
        // Without IPv6 there is no sockstat6, and nothing to dump.
        let v6 = self.sockstat6.is_some() && has(&mut self.sockstat6);
        (v4, v6)
    }

    /// Interface and SNMP rates of this namespace (updates the previous reading).
    fn counters(&mut self, span: f64, out: &mut Vec<NsRate>) {
        if let Some(text) = self.dev.as_mut().and_then(Reread::text) {
            let now = parse::net_dev(text);
            for d in &now {
                let Some(p) = self.prev_dev.get(&d.name) else {
                    continue;
                };
                let pairs = [
                    (name::NET_RXPCK, p.rx_packets, d.rx_packets),
                    (name::NET_TXPCK, p.tx_packets, d.tx_packets),
                    (name::NET_RXBYT, p.rx_bytes, d.rx_bytes),
                    (name::NET_TXBYT, p.tx_bytes, d.tx_bytes),
                    (name::NET_RXDROP, p.rx_drop, d.rx_drop),
                    (name::NET_TXDROP, p.tx_drop, d.tx_drop),
                    (name::NET_RXERR, p.rx_errs, d.rx_errs),
                    (name::NET_TXERR, p.tx_errs, d.tx_errs),
                ];
                // One counter going backwards means the interface was replaced: all absent.
                let ds: Option<Vec<f64>> = pairs.iter().map(|&(_, a, b)| delta(a, b)).collect();
                if let Some(ds) = ds {
                    let inst: Arc<str> = Arc::from(d.name.as_str());
                    for ((n, _, _), v) in pairs.iter().zip(ds) {
                        out.push((Some(inst.clone()), n, v / span));
                    }
                }
            }
            self.prev_dev = now.into_iter().map(|d| (d.name.clone(), d)).collect();
        } else {
            self.prev_dev.clear();
        }
        let snmp = self
            .snmp
            .as_mut()
            .and_then(Reread::text)
            .and_then(parse::snmp_tcp);
        if let (Some(p), Some(c)) = (self.prev_snmp, snmp) {
            for (n, a, b) in [
                (name::TCP_RETRANS_SEGS, p.retrans_segs, c.retrans_segs),
                (name::TCP_IN_SEGS, p.in_segs, c.in_segs),
                (name::TCP_OUT_SEGS, p.out_segs, c.out_segs),
            ] {
                if let Some(d) = delta(a, b) {
                    out.push((None, n, d / span));
                }
            }
        }
        self.prev_snmp = snmp;
    }
}

/// The machine-wide sources of a whole-machine node.
#[derive(Debug)]
struct Machine {
    diskstats: Option<Reread>,
    stat: Option<Reread>,
    prev_disks: HashMap<String, parse::DiskStat>,
    prev_cpu: Option<parse::CpuStat>,
    whole_disk: HashMap<String, bool>,
}

impl Machine {
    fn open() -> Machine {
        Machine {
            diskstats: Reread::open(Path::new("/proc/diskstats")).ok(),
            stat: Reread::open(Path::new("/proc/stat")).ok(),
            prev_disks: HashMap::new(),
            prev_cpu: None,
            whole_disk: HashMap::new(),
        }
    }

    fn collect(&mut self, span: f64, out: &mut Out) {
        let disks = self
            .diskstats
            .as_mut()
            .and_then(Reread::text)
            .map(parse::diskstats)
            .unwrap_or_default();
        for d in &disks {
            // Whole disks (partitions would count their I/O twice), once they have done I/O.
            let whole = *self
                .whole_disk
                .entry(d.name.clone())
                .or_insert_with(|| Path::new("/sys/block").join(&d.name).exists());
            if !whole || d.rd_ios + d.wr_ios == 0 {
                continue;
            }
            if let Some(p) = self.prev_disks.get(&d.name) {
                disk_values(p, d, span, out);
            }
        }
        self.prev_disks = disks.into_iter().map(|d| (d.name.clone(), d)).collect();

        let cpu = self
            .stat
            .as_mut()
            .and_then(Reread::text)
            .and_then(parse::proc_stat);
        if let Some(c) = cpu {
            // The collector itself is running while it reads.
            out.put(
                name::CPU_RUNNABLE,
                None,
                Some(c.procs_running.saturating_sub(1) as f64),
            );
            out.put(name::CPU_BLOCKED, None, Some(c.procs_blocked as f64));
        }
        if let (Some(p), Some(c)) = (self.prev_cpu, cpu) {
            if let Some(total) = delta(p.total, c.total).filter(|t| *t > 0.0) {
                for (n, a, b) in [
                    (name::CPU_USER, p.user, c.user),
                    (name::CPU_SYS, p.sys, c.sys),
                    (name::CPU_IOWAIT, p.iowait, c.iowait),
                    (name::CPU_STEAL, p.steal, c.steal),
                ] {
                    out.put(n, None, delta(a, b).map(|d| 100.0 * d / total));
                }
            }
            out.put(
                name::CPU_CSWCH,
                None,
                delta(p.ctxt, c.ctxt).map(|d| d / span),
            );
        }
        self.prev_cpu = cpu;
    }
}

/// sysstat's `iostat -x` formulas over one interval (seed 001 Table 3.1).
fn disk_values(p: &parse::DiskStat, c: &parse::DiskStat, span: f64, out: &mut Out) {
    let d = |a: u64, b: u64| b.checked_sub(a);
    let (
        Some(rd),
        Some(wr),
        Some(rd_sec),
        Some(wr_sec),
        Some(rd_ticks),
        Some(wr_ticks),
        Some(io_ticks),
        Some(queue),
    ) = (
        d(p.rd_ios, c.rd_ios),
        d(p.wr_ios, c.wr_ios),
        d(p.rd_sectors, c.rd_sectors),
        d(p.wr_sectors, c.wr_sectors),
        d(p.rd_ticks, c.rd_ticks),
        d(p.wr_ticks, c.wr_ticks),
        d(p.io_ticks, c.io_ticks),
        d(p.time_in_queue, c.time_in_queue),
    )
    else {
        return; // a counter went backwards: the device was replaced
    };
    let inst: Arc<str> = Arc::from(c.name.as_str());
    let i = Some(&inst);
    let n = (rd + wr) as f64;
    let per_req = |x: u64| (n > 0.0).then(|| x as f64 / n);
    out.put(name::DISK_TPS, i, Some(n / span));
    out.put(name::DISK_RD_SEC, i, Some(rd_sec as f64 / span));
    out.put(name::DISK_WR_SEC, i, Some(wr_sec as f64 / span));
    out.put(name::DISK_AVGRQ_SZ, i, per_req(rd_sec + wr_sec));
    out.put(name::DISK_AVGQU_SZ, i, Some(queue as f64 / (span * 1000.0)));
    out.put(name::DISK_AWAIT, i, per_req(rd_ticks + wr_ticks));
    out.put(name::DISK_SVCTM, i, per_req(io_ticks));
    out.put(
        name::DISK_UTIL,
        i,
        Some((100.0 * io_ticks as f64 / (span * 1000.0)).min(100.0)),
    );
}

/// The directory of cgroup `rel` in the v1 hierarchy that has `controller`.
fn v1_dir(mounts: &str, controller: &str, rel: &str) -> Option<PathBuf> {
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 4 && f[2] == "cgroup" && f[3].split(',').any(|o| o == controller) {
            let dir = Path::new(f[1]).join(rel.trim_start_matches('/'));
            return dir.is_dir().then_some(dir);
        }
    }
    None
}

/// A node's cgroup counters (cgroup v1: blkio, cpuacct, cpu).
#[derive(Debug)]
struct Cgroup {
    bytes: Option<Reread>,
    ios: Option<Reread>,
    usage: Option<Reread>,
    cpu_stat: Option<Reread>,
    prev: [Option<(u64, u64)>; 3],
    prev_usage: Option<u64>,
}

impl Cgroup {
    fn open(rel: &str, mounts: &str) -> Cgroup {
        let file = |ctl: &str, names: &[&str]| {
            let dir = v1_dir(mounts, ctl, rel)?;
            names.iter().find_map(|n| Reread::open(&dir.join(n)).ok())
        };
        Cgroup {
            // The recursive files count the node's subgroups too (a rule covers "the cgroup or
            // below it").
            bytes: file(
                "blkio",
                &[
                    "blkio.throttle.io_service_bytes_recursive",
                    "blkio.throttle.io_service_bytes",
                ],
            ),
            ios: file(
                "blkio",
                &[
                    "blkio.throttle.io_serviced_recursive",
                    "blkio.throttle.io_serviced",
                ],
            ),
            usage: file("cpuacct", &["cpuacct.usage"]),
            cpu_stat: file("cpu", &["cpu.stat"]),
            prev: [None; 3],
            prev_usage: None,
        }
    }

    fn collect(&mut self, span: f64, out: &mut Out) {
        let bytes = self
            .bytes
            .as_mut()
            .and_then(Reread::text)
            .and_then(parse::blkio_rw);
        let ios = self
            .ios
            .as_mut()
            .and_then(Reread::text)
            .and_then(parse::blkio_rw);
        let thr = self
            .cpu_stat
            .as_mut()
            .and_then(Reread::text)
            .and_then(parse::cg_cpu_stat);
        let usage = self
            .usage
            .as_mut()
            .and_then(Reread::text)
            .and_then(|t| t.trim().parse::<u64>().ok());
        let rate = |p: Option<(u64, u64)>, c: Option<(u64, u64)>, k: usize, scale: f64| {
            let (p, c) = (p?, c?);
            let v = if k == 0 { (p.0, c.0) } else { (p.1, c.1) };
            delta(v.0, v.1).map(|d| d * scale / span)
        };
        out.put(name::CG_RD_BYTES, None, rate(self.prev[0], bytes, 0, 1.0));
        out.put(name::CG_WR_BYTES, None, rate(self.prev[0], bytes, 1, 1.0));
        out.put(name::CG_RD_IOS, None, rate(self.prev[1], ios, 0, 1.0));
        out.put(name::CG_WR_IOS, None, rate(self.prev[1], ios, 1, 1.0));
        out.put(name::CG_THROTTLED, None, rate(self.prev[2], thr, 0, 1.0));
        out.put(
            name::CG_THROTTLED_TIME,
            None,
            rate(self.prev[2], thr, 1, 1e-6),
        );
        out.put(
            name::CG_CPU,
            None,
            self.prev_usage
                .zip(usage)
                .and_then(|(p, c)| delta(p, c))
                .map(|d| d / 1e6 / span),
        );
        self.prev = [bytes, ios, thr];
        self.prev_usage = usage;
    }
}

/// A process the collector has read before.
#[derive(Debug)]
struct ProcEntry {
    start: u64,
    io: Option<(u64, u64)>,
    netns: Option<u64>,
    seen: u64,
}

/// A thread the collector has read before.
#[derive(Debug)]
struct ThreadEntry {
    start: u64,
    blkio: u64,
    sched: (u64, u64, u64),
    seen: u64,
    /// Boot-time clock ticks of the first of the consecutive reads that found the thread in
    /// uninterruptible sleep (`D`), up to the last read; `None` when the last read did not.
    blocked_since: Option<u64>,
}

/// Most per-task files kept open (the rest are opened and closed each tick).
const MAX_KEPT_FILES: usize = 256;

/// Which per-task file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum TaskFile {
    Stat,
    Schedstat,
    Io,
}

/// Per-process state across ticks, and the per-node sums of one tick.
#[derive(Debug, Default)]
struct Procs {
    procs: HashMap<u32, ProcEntry>,
    threads: HashMap<u32, ThreadEntry>,
    /// Per-task files kept open and read again each tick: opening them by path was a sixth of
    /// the collector's time. A file of a task that died fails to read (even when its pid has
    /// been reused), is dropped and opened again for the new task.
    files: HashMap<(u32, u32, TaskFile), (Reread, u64)>,
}

/// One node's per-process sums over an interval.
#[derive(Debug, Default)]
struct ProcSums {
    procs: u64,
    threads: u64,
    runnable: u64,
    blocked: u64,
    io_read: u64,
    io: Option<(u64, u64)>,
    blkio_ticks: u64,
    sched: (u64, u64, u64),
    sched_read: u64,
    /// Threads created before delay accounting was on: never accounted (their field 42 stays
    /// 0), so the node's block-I/O delay is unknown.
    unaccounted: u64,
    /// Threads whose block-I/O delay grew by more than the interval: impossible for one thread,
    /// so the node's delay is absent for the interval. Seen once here: a task forked while
    /// delay accounting was being turned on reported a delay equal to the uptime (a wait
    /// whose start the kernel never recorded).
    implausible: u64,
    /// Network namespaces of the node's processes.
    netns: HashSet<u64>,
    /// Socket inodes the node's processes hold.
    sockets: HashSet<u64>,
}

/// What every process read of one tick needs to know.
#[derive(Clone, Copy, Debug)]
struct TickCtx {
    /// Tick number (marks what was seen).
    tick: u64,
    /// Boot-time clock ticks of the previous tick (`None` on the first).
    prev_boot_ticks: Option<u64>,
    /// Boot-time clock ticks of the collector's first tick (`None` on the first).
    first_boot_ticks: Option<u64>,
    /// Boot-time clock ticks since which new tasks have delay accounting.
    delay_since: Option<u64>,
    /// The interval's span in clock ticks.
    span_ticks: f64,
    /// Boot-time clock ticks now.
    boot_ticks: u64,
}

/// True when a task that started at `start` (clock ticks after boot) began at or after `since`
/// (a tick's boot-time clock ticks): all of its counters are new. Older tasks seen for the
/// first time (a process that joined the node, or one found at the first tick) only set a
/// baseline.
fn born_since(start: u64, since: Option<u64>) -> bool {
    since.is_some_and(|p| start >= p)
}

impl Procs {
    /// Reads `/proc/PID/task/TID/<file>` (or `/proc/PID/io`) through a kept-open file.
    fn read<T>(
        &mut self,
        (pid, tid): (u32, u32),
        file: TaskFile,
        tick: u64,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Option<T> {
        let key = (pid, tid, file);
        let path = || match file {
            TaskFile::Stat => format!("/proc/{pid}/task/{tid}/stat"),
            TaskFile::Schedstat => format!("/proc/{pid}/task/{tid}/schedstat"),
            TaskFile::Io => format!("/proc/{pid}/io"),
        };
        if !self.files.contains_key(&key) && self.files.len() >= MAX_KEPT_FILES {
            // Servers with thousands of threads: do not hold thousands of descriptors.
            return parse(&std::fs::read_to_string(path()).ok()?);
        }
        for attempt in 0..2 {
            if let std::collections::hash_map::Entry::Vacant(slot) = self.files.entry(key) {
                slot.insert((Reread::open(Path::new(&path())).ok()?, tick));
            }
            let (f, seen) = self.files.get_mut(&key).expect("inserted above");
            *seen = tick;
            match f.text() {
                Some(t) if !t.is_empty() => return parse(t),
                // Gone (or reused): once more with a fresh file.
                _ if attempt == 0 => {
                    self.files.remove(&key);
                }
                _ => {}
            }
        }
        self.files.remove(&key);
        None
    }

    /// Reads the node's processes and threads, adding this interval's increments to `sums`.
    fn read_node(&mut self, pids: &[u32], cx: &TickCtx, want_sockets: bool, sums: &mut ProcSums) {
        let tick = cx.tick;
        let mut fd_dir = String::new();
        for &pid in pids {
            let Some(lead) = self.read((pid, pid), TaskFile::Stat, tick, parse::task_stat) else {
                continue; // gone
            };
            let known = self
                .procs
                .get(&pid)
                .is_some_and(|p| p.start == lead.starttime);
            if !known {
                self.procs.insert(
                    pid,
                    ProcEntry {
                        start: lead.starttime,
                        io: None,
                        netns: None,
                        seen: tick,
                    },
                );
            }
            // A process started after the collector's first tick counts its I/O from its
            // birth, even when it joins the node's list a tick or two late (its fork seen late
            // by a sampler starved on a busy host): a late baseline lost a second of a new
            // writer's bytes. The bytes before the tick it is found in land in that tick.
            let born = !known && born_since(lead.starttime, cx.first_boot_ticks);
            let io = self.read((pid, pid), TaskFile::Io, tick, parse::proc_io);
            let e = self.procs.get_mut(&pid).expect("inserted above");
            e.seen = tick;
            sums.procs += 1;
            if let Some(cur) = io {
                let base = match (e.io, born) {
                    (Some(p), _) if p.0 <= cur.0 && p.1 <= cur.1 => Some(p),
                    (_, true) => Some((0, 0)),
                    _ => None,
                };
                sums.io_read += 1;
                if let Some(b) = base {
                    let s = sums.io.get_or_insert((0, 0));
                    s.0 += cur.0 - b.0;
                    s.1 += cur.1 - b.1;
                }
            }
            e.io = io;
            if e.netns.is_none() {
                e.netns = std::fs::read_link(format!("/proc/{pid}/ns/net"))
                    .ok()
                    .and_then(|l| parse::netns_inode(&l.to_string_lossy()));
            }
            if let Some(ns) = e.netns {
                sums.netns.insert(ns);
            }
            for tid in crate::procs::tasks(pid) {
                self.read_thread((pid, tid), cx, sums);
            }
            if want_sockets {
                fd_dir.clear();
                fd_dir.push_str(&format!("/proc/{pid}/fd"));
                if let Ok(rd) = std::fs::read_dir(&fd_dir) {
                    for f in rd.flatten() {
                        if let Some(ino) = std::fs::read_link(f.path())
                            .ok()
                            .and_then(|l| parse::socket_inode(l.to_str()?))
                        {
                            sums.sockets.insert(ino);
                        }
                    }
                }
            }
        }
    }

    fn read_thread(&mut self, (pid, tid): (u32, u32), cx: &TickCtx, sums: &mut ProcSums) {
        let (tick, prev_boot_ticks) = (cx.tick, cx.prev_boot_ticks);
        let (delay_since, span_ticks) = (cx.delay_since, cx.span_ticks);
        let Some(st) = self.read((pid, tid), TaskFile::Stat, cx.tick, parse::task_stat) else {
            return;
        };
        let sched = self.read((pid, tid), TaskFile::Schedstat, cx.tick, parse::schedstat);
        sums.threads += 1;
        if delay_since.is_some_and(|since| st.starttime < since) {
            sums.unaccounted += 1;
        }
        match st.state {
            b'R' => sums.runnable += 1,
            b'D' => sums.blocked += 1,
            _ => {}
        }
        let known = self.threads.get(&tid).filter(|t| t.start == st.starttime);
        let blocked_since = known.and_then(|t| t.blocked_since);
        let base = match known {
            Some(t) => Some((t.blkio, t.sched)),
            None if born_since(st.starttime, prev_boot_ticks) => Some((0, (0, 0, 0))),
            None => None,
        };
        let sched_now = sched.unwrap_or((0, 0, 0));
        if let Some((b, s)) = base {
            // The kernel credits a block-I/O wait when it ends, whole: a wait that began before
            // the previous read is credited now. It cannot have begun before the thread was
            // last seen out of `D` state, so more than the span, plus the time the thread has
            // been seen blocked and one more span before it, is not a wait of this thread (6.12+ kernels with EEVDF's
            // delayed dequeue sometimes credit a task with seconds per second, even with hours
            // at once — measured: +814,772 ticks in one second). Such a thread's interval is
            // implausible: the node's value is then absent rather than wrong.
            let d = st.blkio_ticks.saturating_sub(b);
            let carried = blocked_since.map_or(0.0, |since| {
                prev_boot_ticks.unwrap_or(since).saturating_sub(since) as f64 + span_ticks
            });
            if d as f64 > span_ticks + carried + 2.0 {
                sums.implausible += 1;
            } else {
                sums.blkio_ticks += d;
            }
            if sched.is_some() {
                sums.sched_read += 1;
                sums.sched.0 += sched_now.0.saturating_sub(s.0);
                sums.sched.1 += sched_now.1.saturating_sub(s.1);
                sums.sched.2 += sched_now.2.saturating_sub(s.2);
            }
        }
        let blocked_since = (st.state == b'D').then(|| blocked_since.unwrap_or(cx.boot_ticks));
        self.threads.insert(
            tid,
            ThreadEntry {
                start: st.starttime,
                blkio: st.blkio_ticks,
                sched: sched_now,
                seen: tick,
                blocked_since,
            },
        );
    }

    fn gc(&mut self, tick: u64) {
        self.files.retain(|_, (_, seen)| *seen == tick);
        self.procs.retain(|_, p| p.seen == tick);
        self.threads.retain(|_, t| t.seen == tick);
    }
}

fn proc_values(s: &ProcSums, span: f64, ms_per_tick: f64, delayacct: bool, out: &mut Out) {
    out.put(name::PROC_PROCS, None, Some(s.procs as f64));
    if s.procs == 0 {
        return; // no process: nothing of theirs to measure
    }
    out.put(name::PROC_THREADS, None, Some(s.threads as f64));
    out.put(name::PROC_RUNNABLE, None, Some(s.runnable as f64));
    out.put(name::PROC_BLOCKED, None, Some(s.blocked as f64));
    if let Some((r, w)) = s.io {
        out.put(name::PROC_RD_BYTES, None, Some(r as f64 / span));
        out.put(name::PROC_WR_BYTES, None, Some(w as f64 / span));
    }
    if delayacct && s.threads > 0 && s.unaccounted == 0 && s.implausible == 0 {
        out.put(
            name::PROC_BLKIO_DELAY,
            None,
            Some(s.blkio_ticks as f64 * ms_per_tick / span),
        );
    }
    if s.sched_read > 0 {
        out.put(name::PROC_CPU, None, Some(s.sched.0 as f64 / 1e6 / span));
        out.put(
            name::PROC_RUNQ_DELAY,
            None,
            Some(s.sched.1 as f64 / 1e6 / span),
        );
        out.put(name::PROC_CSWCH, None, Some(s.sched.2 as f64 / span));
    }
}

/// Per-connection sums of one node.
#[derive(Debug, Default)]
struct SockSums {
    cwnd: Vec<u32>,
    rtt_us: Vec<u32>,
    unacked: u64,
    retrans: u64,
}

fn sock_values(s: &mut SockSums, span: f64, out: &mut Out) {
    out.put(name::TCP_CONNS, None, Some(s.cwnd.len() as f64));
    out.put(name::TCP_RETRANS, None, Some(s.retrans as f64 / span));
    out.put(name::TCP_UNACKED, None, Some(s.unacked as f64));
    if s.cwnd.is_empty() {
        return;
    }
    s.cwnd.sort_unstable();
    s.rtt_us.sort_unstable();
    out.put(name::TCP_CWND_MIN, None, Some(s.cwnd[0] as f64));
    out.put(name::TCP_CWND_MED, None, Some(median(&s.cwnd)));
    out.put(name::TCP_RTT_MED, None, Some(median(&s.rtt_us) / 1000.0));
    out.put(
        name::TCP_RTT_MAX,
        None,
        s.rtt_us.last().map(|&r| r as f64 / 1000.0),
    );
}

fn median(sorted: &[u32]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2] as f64
    } else {
        (sorted[n / 2 - 1] as f64 + sorted[n / 2] as f64) / 2.0
    }
}

fn endpoint_matches(e: &Endpoint, local: SocketAddr) -> bool {
    e.addr == local.ip() && e.port.is_none_or(|p| p == local.port())
}

/// Full listings of a namespace's connections are a walk of the kernel's whole socket table:
/// between them (at most this many ticks apart), the sockets already known are asked for one by
/// one. A namespace is listed again at once when a node holds a socket not known yet.
const FULL_LISTING_EVERY: u64 = 10;

/// What the last listings said: each TCP socket's namespace and identity.
#[derive(Debug, Default)]
struct SockCache {
    /// Socket inode → (namespace, identity).
    ids: HashMap<u64, (u64, diag::SockId)>,
    /// Inodes the nodes hold that were in no listing (not TCP, listening, not connected).
    other: HashSet<u64>,
    /// Sockets a node has by its address, not by a process holding them.
    by_endpoint: HashSet<u64>,
    /// Namespace → tick of its last full listing.
    listed: HashMap<u64, u64>,
}

impl SockCache {
    fn knows(&self, inode: u64) -> bool {
        self.ids.contains_key(&inode) || self.other.contains(&inode)
    }

    /// Records a full listing of namespace `ns`; `held` are the inodes the nodes hold.
    fn relist<'a>(
        &mut self,
        ns: u64,
        tick: u64,
        list: &[diag::TcpSock],
        held: impl Iterator<Item = &'a u64>,
    ) {
        self.ids.retain(|_, (n, _)| *n != ns);
        for s in list.iter().filter(|s| s.inode != 0) {
            self.ids.insert(s.inode, (ns, s.id));
            self.other.remove(&s.inode);
        }
        for &ino in held {
            if !self.ids.contains_key(&ino) {
                self.other.insert(ino);
            }
        }
        self.listed.insert(ns, tick);
    }

    fn of_ns(&self, ns: u64) -> Vec<(u64, diag::SockId)> {
        self.ids
            .iter()
            .filter(|(_, (n, _))| *n == ns)
            .map(|(&ino, (_, id))| (ino, *id))
            .collect()
    }

    /// Keeps what is still in use: sockets seen this tick, inodes still held.
    fn forget_except(&mut self, seen: &HashSet<(u64, u64)>, held: &HashMap<u64, usize>) {
        self.other.retain(|ino| held.contains_key(ino));
        self.by_endpoint
            .retain(|ino| seen.iter().any(|(_, i)| i == ino));
        self.ids
            .retain(|ino, (ns, _)| held.contains_key(ino) || seen.contains(&(*ns, *ino)));
    }
}

/// Reads every source once per tick and turns the differences into per-node values.
#[derive(Debug)]
pub struct Collector {
    views: Vec<Option<NodeView>>,
    machine: Option<Machine>,
    cgroups: Vec<Option<Cgroup>>,
    own_netns: Option<u64>,
    /// Network namespaces by inode.
    nets: HashMap<u64, NetView>,
    /// The namespace inode of each node's `--node-netns`.
    rule_netns: Vec<Option<u64>>,
    procs: Procs,
    /// Last `tcpi_total_retrans` per (namespace, socket inode).
    retrans: HashMap<(u64, u64), (u32, u64)>,
    /// Socket identities from the last listings.
    socks: SockCache,
    tick: u64,
    prev_boot_ticks: Option<u64>,
    first_boot_ticks: Option<u64>,
    prev_delayacct: bool,
    /// Boot-time clock ticks since which new tasks have delay accounting (`None`: it is off).
    delay_since: Option<u64>,
    ms_per_tick: f64,
    warnings: Vec<String>,
}

impl Collector {
    /// Opens every source the views need; what cannot be opened is reported in
    /// [`Collector::warnings`] and its metrics stay absent.
    pub fn new(views: Vec<Option<NodeView>>) -> Collector {
        let mut warnings = Vec::new();
        let own_netns = std::fs::metadata("/proc/thread-self/ns/net")
            .ok()
            .map(|m| m.ino());
        let mut nets = HashMap::new();
        if let Some(ino) = own_netns {
            nets.insert(ino, NetView::here());
        }
        let mut rule_netns = Vec::with_capacity(views.len());
        let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
        let mut cgroups = Vec::with_capacity(views.len());
        for v in &views {
            let ns = v.as_ref().and_then(|v| v.netns.as_ref()).and_then(|p| {
                let ino = match std::fs::metadata(p) {
                    Ok(m) => m.ino(),
                    Err(e) => {
                        warnings.push(format!("network namespace {}: {e}", p.display()));
                        return None;
                    }
                };
                if let std::collections::hash_map::Entry::Vacant(slot) = nets.entry(ino) {
                    match NetView::enter(p) {
                        Ok(n) => {
                            slot.insert(n);
                        }
                        Err(e) => {
                            warnings.push(format!(
                                "network namespace {}: cannot enter it ({e}); its interface \
                                 and TCP counters are not collected",
                                p.display()
                            ));
                            return None;
                        }
                    }
                }
                Some(ino)
            });
            rule_netns.push(ns);
            cgroups.push(v.as_ref().and_then(|v| v.cgroup.as_ref()).map(|rel| {
                let c = Cgroup::open(rel, &mounts);
                if c.bytes.is_none() && c.usage.is_none() && c.cpu_stat.is_none() {
                    warnings.push(format!(
                        "cgroup {rel}: no cgroup v1 blkio, cpuacct or cpu directory; its \
                         counters are not collected"
                    ));
                }
                c
            }));
        }
        let machine = views
            .iter()
            .flatten()
            .any(|v| v.machine)
            .then(Machine::open);
        Collector {
            views,
            machine,
            cgroups,
            own_netns,
            nets,
            rule_netns,
            procs: Procs::default(),
            retrans: HashMap::new(),
            socks: SockCache::default(),
            tick: 0,
            prev_boot_ticks: None,
            first_boot_ticks: None,
            prev_delayacct: false,
            delay_since: None,
            ms_per_tick: 1000.0 / culprit_format::procfs::clock_ticks_per_sec() as f64,
            warnings,
        }
    }

    /// Says since when (CLOCK_BOOTTIME ns) delay accounting has been on: threads created
    /// earlier are never accounted. Without this call, delay accounting found on is assumed
    /// on since boot, and one turned on during the run counts from the tick that sees it.
    pub fn set_delayacct_since(&mut self, boot_ns: u64) {
        self.delay_since = Some((boot_ns as f64 / (self.ms_per_tick * 1e6)).ceil() as u64);
    }

    /// What could not be opened, one line each.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// True when some node's values come from its processes (the caller then publishes them).
    pub fn needs_pids(&self) -> bool {
        self.views.iter().flatten().any(|v| v.procs)
    }

    /// Reads everything once. `span` is the time since the previous call in seconds (rates are
    /// over it); the first call only sets the baselines (its result holds gauges only and is
    /// meant to be dropped). `pids[i]` are node `i`'s processes.
    pub fn collect(&mut self, span: f64, pids: &[Vec<u32>]) -> Vec<Option<Vec<Value>>> {
        self.tick += 1;
        let tick = self.tick;
        let span = span.max(1e-3);
        let delayacct = delayacct::state() == Some(true);
        let delay_ok = delayacct && self.prev_delayacct;
        let boot_ticks = sys::boottime_ns() / (self.ms_per_tick * 1e6) as u64;
        self.delay_since = match (delayacct, self.delay_since) {
            (false, _) => None,
            (true, Some(s)) => Some(s),
            // Found on at the first tick: assumed on since boot; turned on later: from now.
            (true, None) if self.prev_boot_ticks.is_none() => Some(0),
            (true, None) => Some(boot_ticks),
        };
        let mut outs: Vec<Option<Out>> = self
            .views
            .iter()
            .map(|v| v.as_ref().map(|_| Out::default()))
            .collect();

        let cx = TickCtx {
            tick,
            prev_boot_ticks: self.prev_boot_ticks,
            first_boot_ticks: self.first_boot_ticks,
            delay_since: self.delay_since,
            span_ticks: span * 1000.0 / self.ms_per_tick,
            boot_ticks,
        };
        // Processes first: they say which sockets and namespaces are the nodes'.
        let mut sums: Vec<ProcSums> = (0..self.views.len()).map(|_| ProcSums::default()).collect();
        for (i, v) in self.views.iter().enumerate() {
            let Some(v) = v.as_ref().filter(|v| v.procs) else {
                continue;
            };
            let node_pids = pids.get(i).map_or(&[][..], |p| &p[..]);
            self.procs
                .read_node(node_pids, &cx, !v.machine, &mut sums[i]);
        }
        self.procs.gc(tick);

        // Network namespaces: each node's own, and every namespace its processes live in.
        let mut wanted: HashSet<u64> = self.rule_netns.iter().flatten().copied().collect();
        wanted.extend(self.own_netns);
        for s in &sums {
            wanted.extend(s.netns.iter().copied());
        }
        for &ns in &wanted {
            if !self.nets.contains_key(&ns) {
                if let Some(v) = self.open_netns_of(ns, &sums, pids) {
                    self.nets.insert(ns, v);
                }
            }
            if let Some(v) = self.nets.get_mut(&ns) {
                v.used = tick;
            }
        }
        // Forget namespaces no one uses any more (their sockets and files go with them).
        self.nets.retain(|_, v| v.used == tick);

        let mut ns_counters: HashMap<u64, Vec<NsRate>> = HashMap::new();
        for (i, v) in self.views.iter().enumerate() {
            let Some(v) = v else { continue };
            let ns = if v.machine {
                self.own_netns
            } else {
                self.rule_netns[i]
            };
            if let Some(ns) = ns {
                if let std::collections::hash_map::Entry::Vacant(slot) = ns_counters.entry(ns) {
                    let mut counters = Vec::new();
                    if let Some(view) = self.nets.get_mut(&ns) {
                        view.counters(span, &mut counters);
                    }
                    slot.insert(counters);
                }
            }
        }
        for (i, v) in self.views.iter().enumerate() {
            let (Some(v), Some(out)) = (v, outs[i].as_mut()) else {
                continue;
            };
            let ns = if v.machine {
                self.own_netns
            } else {
                self.rule_netns[i]
            };
            if let Some(list) = ns.and_then(|ns| ns_counters.get(&ns)) {
                for (inst, n, val) in list {
                    out.put(n, inst.as_ref(), Some(*val));
                }
            }
        }

        // TCP connections: dump every namespace that holds some node's sockets, give each
        // socket to the node whose process holds it, else whose address it has.
        let mut socks: Vec<SockSums> = (0..self.views.len()).map(|_| SockSums::default()).collect();
        let mut owner: HashMap<u64, usize> = HashMap::new();
        for (i, s) in sums.iter().enumerate() {
            for &ino in &s.sockets {
                owner.entry(ino).or_insert(i);
            }
        }
        // Namespaces to list connections in: where some node's processes live, the sampler's
        // own for a whole machine, and for nodes known by address their own namespace (or the
        // sampler's, when they have none).
        let mut d: HashSet<u64> = sums.iter().flat_map(|s| s.netns.iter().copied()).collect();
        for (i, v) in self.views.iter().enumerate() {
            let Some(v) = v else { continue };
            if v.machine || (!v.endpoints.is_empty() && self.rule_netns[i].is_none()) {
                d.extend(self.own_netns);
            } else if !v.endpoints.is_empty() {
                d.extend(self.rule_netns[i]);
            }
        }
        let mut dump_ns: Vec<u64> = d.into_iter().collect();
        dump_ns.sort_unstable();
        let mut dumped = Vec::new();
        let mut seen_socks: HashSet<(u64, u64)> = HashSet::new();
        // A namespace whose nodes hold a socket not seen in a listing yet is listed again.
        let mut stale: HashSet<u64> = HashSet::new();
        for s in &sums {
            if s.sockets.iter().any(|ino| !self.socks.knows(*ino)) {
                stale.extend(s.netns.iter().copied());
            }
        }
        let machine_ns = self
            .views
            .iter()
            .flatten()
            .any(|v| v.machine)
            .then_some(self.own_netns)
            .flatten();
        {
            for ns in dump_ns {
                dumped.clear();
                let Some(view) = self.nets.get_mut(&ns) else {
                    continue;
                };
                let full = Some(ns) == machine_ns
                    || stale.contains(&ns)
                    || self
                        .socks
                        .listed
                        .get(&ns)
                        .is_none_or(|&t| tick >= t + FULL_LISTING_EVERY);
                if full {
                    let (v4, v6) = view.tcp_families();
                    let Some(diag) = view.diag.as_ref().filter(|_| v4 || v6) else {
                        continue;
                    };
                    if diag::dump(diag, v4, v6, &mut dumped).is_err() {
                        continue;
                    }
                    self.socks
                        .relist(ns, tick, &dumped, sums.iter().flat_map(|s| &s.sockets));
                } else {
                    // Between listings: only the sockets some node had, each by its identity.
                    let Some(diag) = view.diag.as_ref() else {
                        continue;
                    };
                    for (ino, id) in self.socks.of_ns(ns) {
                        if owner.contains_key(&ino) || self.socks.by_endpoint.contains(&ino) {
                            if let Ok(Some(s)) = diag::lookup(diag, &id) {
                                dumped.push(s);
                            }
                        }
                    }
                }
                for s in &dumped {
                    let node = if let Some(&n) = owner.get(&s.inode) {
                        Some(n)
                    } else {
                        let by_addr = self.node_by_endpoint(s.local);
                        if by_addr.is_some() {
                            self.socks.by_endpoint.insert(s.inode);
                        }
                        by_addr.or_else(|| {
                            (Some(ns) == self.own_netns)
                                .then(|| {
                                    self.views
                                        .iter()
                                        .position(|v| v.as_ref().is_some_and(|v| v.machine))
                                })
                                .flatten()
                        })
                    };
                    let Some(node) = node else { continue };
                    let Some(info) = s.info else { continue };
                    let acc = &mut socks[node];
                    if s.state == diag::state::ESTABLISHED {
                        acc.cwnd.push(info.cwnd);
                        acc.rtt_us.push(info.rtt_us);
                    }
                    acc.unacked += u64::from(info.unacked);
                    if s.inode != 0 {
                        let key = (ns, s.inode);
                        seen_socks.insert(key);
                        let prev = self.retrans.insert(key, (info.total_retrans, tick));
                        acc.retrans += u64::from(match prev {
                            Some((p, _)) => info.total_retrans.saturating_sub(p),
                            // A connection first seen: all of its retransmits are new, except
                            // on the first tick (the baseline).
                            None if self.prev_boot_ticks.is_some() => info.total_retrans,
                            None => 0,
                        });
                    }
                }
            }
        }
        self.retrans.retain(|k, _| seen_socks.contains(k));
        self.socks.forget_except(&seen_socks, &owner);

        for (i, v) in self.views.iter().enumerate() {
            let (Some(v), Some(out)) = (v, outs[i].as_mut()) else {
                continue;
            };
            if v.machine {
                if let Some(m) = self.machine.as_mut() {
                    m.collect(span, out);
                }
            }
            if let Some(c) = self.cgroups[i].as_mut() {
                c.collect(span, out);
            }
            if v.procs {
                proc_values(&sums[i], span, self.ms_per_tick, delay_ok, out);
            }
            if v.machine || v.procs || !v.endpoints.is_empty() {
                sock_values(&mut socks[i], span, out);
            }
        }
        self.prev_boot_ticks = Some(boot_ticks);
        self.first_boot_ticks.get_or_insert(boot_ticks);
        self.prev_delayacct = delayacct;
        outs.into_iter().map(|o| o.map(|o| o.vals)).collect()
    }

    /// The node whose `--node-addr` endpoint a socket's local address matches: a rule with a
    /// port first, then one without.
    fn node_by_endpoint(&self, local: SocketAddr) -> Option<usize> {
        for with_port in [true, false] {
            for (i, v) in self.views.iter().enumerate() {
                if v.as_ref().is_some_and(|v| {
                    v.endpoints
                        .iter()
                        .any(|e| e.port.is_some() == with_port && endpoint_matches(e, local))
                }) {
                    return Some(i);
                }
            }
        }
        None
    }

    /// Opens namespace `ns` through `/proc/PID/ns/net` of one of the processes living in it.
    fn open_netns_of(&self, ns: u64, sums: &[ProcSums], pids: &[Vec<u32>]) -> Option<NetView> {
        for (i, s) in sums.iter().enumerate() {
            if !s.netns.contains(&ns) {
                continue;
            }
            for &pid in pids.get(i).map_or(&[][..], |p| &p[..]) {
                if self.procs.procs.get(&pid).and_then(|p| p.netns) == Some(ns) {
                    if let Ok(v) = NetView::enter(Path::new(&format!("/proc/{pid}/ns/net"))) {
                        return Some(v);
                    }
                }
            }
        }
        None
    }
}

/// Runs a collector on the calling thread until `stop` or `abort` is set or the monotonic
/// `deadline` passes: ticks at wall-clock multiples of `interval`, sends one [`OsInterval`] per
/// interval (the first tick is the baseline), reads `pids` for the nodes' processes.
pub fn run(
    mut c: Collector,
    interval: Duration,
    stop: &AtomicBool,
    abort: &AtomicBool,
    deadline: Option<u64>,
    pids: &NodePids,
    tx: &std::sync::mpsc::Sender<OsInterval>,
) -> OsStats {
    let cpu0 = sys::thread_cpu_ns();
    let iv = (interval.as_nanos() as u64).max(10_000_000);
    let mut stats = OsStats::default();
    let mut prev: Option<(u64, u64)> = None; // (tick wall, read monotonic)
    let done = || {
        stop.load(Ordering::SeqCst)
            || abort.load(Ordering::SeqCst)
            || deadline.is_some_and(|d| sys::monotonic_ns() >= d)
    };
    'run: loop {
        // Sleep to the next multiple of the interval, waking twice a second to see a stop
        // (each wake-up costs a context switch: 100 ms slices were a tenth of the cost); the
        // sampler unparks this thread when its run ends, so an end is seen at once.
        let next = (sys::realtime_ns() / iv + 1) * iv;
        loop {
            if done() {
                break 'run;
            }
            let now = sys::realtime_ns();
            if now >= next {
                break;
            }
            std::thread::park_timeout(Duration::from_nanos((next - now).min(500_000_000)));
        }
        let mono = sys::monotonic_ns();
        let tick = sys::realtime_ns() / iv * iv;
        let node_pids = pids.lock().map(|p| p.clone()).unwrap_or_default();
        let span = prev.map_or(0.0, |(_, m)| (mono - m) as f64 / 1e9);
        let values = c.collect(span, &node_pids);
        if let Some((pt, pm)) = prev.filter(|&(pt, _)| tick > pt) {
            // The counters are cumulative: a read that comes late (the collector was starved
            // or stopped) still gives exact increments since the previous read, over the span
            // measured between the two. Its rates are averages over that span, written for
            // every interval it covers (`span_ns` > `dur_ns` says so): a late read misses no
            // second.
            let mut start = pt;
            while start < tick {
                let msg = OsInterval {
                    head: OsMetricsHead {
                        start_ns: start,
                        dur_ns: iv,
                        span_ns: mono - pm,
                        flags: 0,
                    },
                    nodes: values.clone(),
                };
                stats.intervals += 1;
                stats.late += u64::from(tick - pt > iv);
                if tx.send(msg).is_err() {
                    break 'run;
                }
                start += iv;
            }
        }
        prev = Some((tick, mono));
    }
    stats.cpu_ns = sys::thread_cpu_ns() - cpu0;
    stats
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(
        rd_ios: u64,
        wr_ios: u64,
        sectors: u64,
        ticks: u64,
        io: u64,
        q: u64,
    ) -> parse::DiskStat {
        parse::DiskStat {
            name: "vda".into(),
            rd_ios,
            rd_sectors: sectors,
            rd_ticks: ticks,
            wr_ios,
            wr_sectors: 2 * sectors,
            wr_ticks: ticks,
            io_ticks: io,
            time_in_queue: q,
        }
    }

    fn vals(out: &Out) -> HashMap<&'static str, f64> {
        out.vals.iter().map(|v| (v.def.name, v.value)).collect()
    }

    #[test]
    fn iostat_formulas_over_an_interval() {
        // 2 s: 30 reads + 10 writes, 800 + 1600 sectors, 200 + 200 ms of request time, 500 ms
        // busy, 1200 weighted ms.
        let p = disk(100, 50, 1000, 1000, 1000, 5000);
        let c = disk(130, 60, 1800, 1200, 1500, 6200);
        let mut out = Out::default();
        disk_values(&p, &c, 2.0, &mut out);
        let v = vals(&out);
        assert_eq!(v[name::DISK_TPS], 20.0);
        assert_eq!(v[name::DISK_RD_SEC], 400.0);
        assert_eq!(v[name::DISK_WR_SEC], 800.0);
        assert_eq!(v[name::DISK_AVGRQ_SZ], 2400.0 / 40.0);
        assert_eq!(v[name::DISK_AVGQU_SZ], 0.6);
        assert_eq!(v[name::DISK_AWAIT], 400.0 / 40.0);
        assert_eq!(v[name::DISK_SVCTM], 500.0 / 40.0);
        assert_eq!(v[name::DISK_UTIL], 25.0);
        assert!(out
            .vals
            .iter()
            .all(|x| x.instance.as_deref() == Some("vda")));
        // A tps × avgrq-sz = rd_sec + wr_sec (seed 001 §4.2).
        assert_eq!(
            v[name::DISK_TPS] * v[name::DISK_AVGRQ_SZ],
            v[name::DISK_RD_SEC] + v[name::DISK_WR_SEC]
        );
    }

    #[test]
    fn idle_and_replaced_devices() {
        // No requests: the averages per request are absent, the rates zero.
        let p = disk(100, 50, 1000, 1000, 1000, 5000);
        let mut out = Out::default();
        disk_values(&p, &p, 1.0, &mut out);
        let v = vals(&out);
        assert_eq!(v[name::DISK_TPS], 0.0);
        assert_eq!(v[name::DISK_UTIL], 0.0);
        for n in [name::DISK_AWAIT, name::DISK_SVCTM, name::DISK_AVGRQ_SZ] {
            assert!(!v.contains_key(n), "{n} over zero requests");
        }
        // A counter went backwards (the device was replaced): nothing, not a huge value.
        let mut out = Out::default();
        disk_values(&p, &disk(99, 60, 2000, 1100, 1100, 5100), 1.0, &mut out);
        assert!(out.vals.is_empty());
        assert_eq!(delta(5, 3), None);
        assert_eq!(delta(3, 5), Some(2.0));
    }

    #[test]
    fn non_finite_values_are_never_put() {
        let mut out = Out::default();
        out.put(name::CPU_USER, None, Some(f64::NAN));
        out.put(name::CPU_USER, None, Some(f64::INFINITY));
        out.put(name::CPU_USER, None, None);
        assert!(out.vals.is_empty());
    }

    #[test]
    fn sockets_aggregate_and_absent_without_connections() {
        let mut s = SockSums {
            cwnd: vec![10, 2, 40, 7],
            rtt_us: vec![300, 100, 2000, 500],
            unacked: 5,
            retrans: 3,
        };
        let mut out = Out::default();
        sock_values(&mut s, 1.5, &mut out);
        let v = vals(&out);
        assert_eq!(v[name::TCP_CONNS], 4.0);
        assert_eq!(v[name::TCP_CWND_MIN], 2.0);
        assert_eq!(v[name::TCP_CWND_MED], 8.5);
        assert_eq!(v[name::TCP_RTT_MED], 0.4);
        assert_eq!(v[name::TCP_RTT_MAX], 2.0);
        assert_eq!(v[name::TCP_RETRANS], 2.0);
        let mut none = SockSums::default();
        let mut out = Out::default();
        sock_values(&mut none, 1.0, &mut out);
        let v = vals(&out);
        assert_eq!(v[name::TCP_CONNS], 0.0);
        assert!(!v.contains_key(name::TCP_CWND_MED) && !v.contains_key(name::TCP_RTT_MED));
    }

    #[test]
    fn process_values_need_processes_and_delay_accounting() {
        let s = ProcSums {
            procs: 2,
            threads: 3,
            io: Some((1000, 3000)),
            blkio_ticks: 50,
            sched: (400_000_000, 100_000_000, 30),
            sched_read: 3,
            ..ProcSums::default()
        };
        let mut out = Out::default();
        proc_values(&s, 2.0, 10.0, true, &mut out);
        let v = vals(&out);
        assert_eq!(v[name::PROC_WR_BYTES], 1500.0);
        assert_eq!(v[name::PROC_BLKIO_DELAY], 250.0);
        assert_eq!(v[name::PROC_CPU], 200.0);
        assert_eq!(v[name::PROC_RUNQ_DELAY], 50.0);
        assert_eq!(v[name::PROC_CSWCH], 15.0);
        // Delay accounting off, or a thread older than it: the delay is absent.
        for (on, unaccounted) in [(false, 0), (true, 1)] {
            let mut out = Out::default();
            proc_values(
                &ProcSums {
                    unaccounted,
                    ..ProcSums {
                        procs: 1,
                        threads: 1,
                        ..ProcSums::default()
                    }
                },
                1.0,
                10.0,
                on,
                &mut out,
            );
            assert!(!vals(&out).contains_key(name::PROC_BLKIO_DELAY));
        }
        // No process: only the count.
        let mut out = Out::default();
        proc_values(&ProcSums::default(), 1.0, 10.0, true, &mut out);
        assert_eq!(vals(&out).len(), 1);
        assert!(born_since(500, Some(400)));
        assert!(!born_since(300, Some(400)));
        assert!(!born_since(500, None));
    }

    #[test]
    fn views_from_rules() {
        let rules = vec![
            NodeRule::Netns {
                node: "a".into(),
                path: "/proc/self/ns/net".into(),
            },
            NodeRule::Cgroup {
                node: "a".into(),
                path: "/sys/fs/cgroup/blkio/t/a".into(),
            },
            NodeRule::Addr {
                node: "b".into(),
                addr: "127.0.0.1".parse().unwrap(),
                port: Some(3001),
            },
        ];
        let nodes = Nodes::new("host", &rules, Scope::System).unwrap();
        let v = node_views(&nodes, &rules);
        assert_eq!(v.len(), 3);
        let a = v[0].as_ref().unwrap();
        assert!(!a.machine && a.procs);
        assert_eq!(a.cgroup.as_deref(), Some("/t/a"));
        assert!(a.netns.is_some());
        let b = v[1].as_ref().unwrap();
        assert_eq!(b.endpoints.len(), 1);
        assert!(v[2].is_none(), "no record for unattributed samples");
        let lo = |p| SocketAddr::new("127.0.0.1".parse().unwrap(), p);
        assert!(endpoint_matches(&b.endpoints[0], lo(3001)));
        assert!(!endpoint_matches(&b.endpoints[0], lo(3002)));
        // One machine.
        let one = Nodes::new("host", &[], Scope::System).unwrap();
        let v = node_views(&one, &[]);
        assert!(v[0].as_ref().is_some_and(|v| v.machine && !v.procs));
        let scoped = Nodes::new("host", &[], Scope::Pid(1)).unwrap();
        assert!(node_views(&scoped, &[])[0].as_ref().unwrap().procs);
    }
}
