//! The collector: every source read once per tick, differences turned into per-node values.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use culprit_format::OsMetricsHead;

use super::cgroup::Cgroup;
use super::delayacct;
use super::diag;
use super::machine::Machine;
use super::net::{NetView, NsRate};
use super::processes::{proc_values, ProcSums, Procs, TickCtx};
use super::read::Out;
use super::sockets::{endpoint_matches, sock_values, SockCache, SockSums, FULL_LISTING_EVERY};
use super::view::{NodePids, NodeView, OsInterval, OsStats, Value};
use crate::sys;

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
        let span = span.max(1e-3);
        let delayacct = delayacct::state() == Some(true);
        let delay_ok = delayacct && self.prev_delayacct;
        let cx = self.tick_context(span, delayacct);
        let mut outs: Vec<Option<Out>> = self
            .views
            .iter()
            .map(|v| v.as_ref().map(|_| Out::default()))
            .collect();
        // Processes first: they say which sockets and namespaces are the nodes'.
        let sums = self.read_processes(&cx, pids);
        self.open_namespaces(&sums, pids);
        self.interface_counters(span, &mut outs);
        let mut socks = self.connections(&sums);
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
        self.prev_boot_ticks = Some(cx.boot_ticks);
        self.first_boot_ticks.get_or_insert(cx.boot_ticks);
        self.prev_delayacct = delayacct;
        outs.into_iter().map(|o| o.map(|o| o.vals)).collect()
    }

    /// This tick's clocks, and since when new tasks have delay accounting (`delayacct`: it is
    /// on now).
    fn tick_context(&mut self, span: f64, delayacct: bool) -> TickCtx {
        let boot_ticks = sys::boottime_ns() / (self.ms_per_tick * 1e6) as u64;
        self.delay_since = match (delayacct, self.delay_since) {
            (false, _) => None,
            (true, Some(s)) => Some(s),
            // Found on at the first tick: assumed on since boot; turned on later: from now.
            (true, None) if self.prev_boot_ticks.is_none() => Some(0),
            (true, None) => Some(boot_ticks),
        };
        TickCtx {
            tick: self.tick,
            prev_boot_ticks: self.prev_boot_ticks,
            first_boot_ticks: self.first_boot_ticks,
            delay_since: self.delay_since,
            span_ticks: span * 1000.0 / self.ms_per_tick,
            boot_ticks,
        }
    }

    /// Each node's per-process sums (empty for nodes not measured by their processes).
    fn read_processes(&mut self, cx: &TickCtx, pids: &[Vec<u32>]) -> Vec<ProcSums> {
        let mut sums: Vec<ProcSums> = (0..self.views.len()).map(|_| ProcSums::default()).collect();
        for (i, v) in self.views.iter().enumerate() {
            let Some(v) = v.as_ref().filter(|v| v.procs) else {
                continue;
            };
            let node_pids = pids.get(i).map_or(&[][..], |p| &p[..]);
            self.procs
                .read_node(node_pids, cx, !v.machine, &mut sums[i]);
        }
        self.procs.gc(cx.tick);
        sums
    }

    /// Opens the network namespaces this tick needs — each node's own, and every namespace its
    /// processes live in — and forgets those no one uses any more (their sockets and files go
    /// with them).
    fn open_namespaces(&mut self, sums: &[ProcSums], pids: &[Vec<u32>]) {
        let mut wanted: HashSet<u64> = self.rule_netns.iter().flatten().copied().collect();
        wanted.extend(self.own_netns);
        for s in sums {
            wanted.extend(s.netns.iter().copied());
        }
        for &ns in &wanted {
            if !self.nets.contains_key(&ns) {
                if let Some(v) = self.open_netns_of(ns, sums, pids) {
                    self.nets.insert(ns, v);
                }
            }
            if let Some(v) = self.nets.get_mut(&ns) {
                v.used = self.tick;
            }
        }
        self.nets.retain(|_, v| v.used == self.tick);
    }

    /// The namespace whose interfaces and SNMP counters are node `i`'s: the sampler's own for
    /// a whole machine, else its `--node-netns`.
    fn counters_netns(&self, i: usize) -> Option<u64> {
        match &self.views[i] {
            Some(v) if v.machine => self.own_netns,
            Some(_) => self.rule_netns[i],
            None => None,
        }
    }

    /// Interface and SNMP rates, read once per namespace, put into the values of every node
    /// whose namespace it is.
    fn interface_counters(&mut self, span: f64, outs: &mut [Option<Out>]) {
        let netns: Vec<Option<u64>> = (0..self.views.len())
            .map(|i| self.counters_netns(i))
            .collect();
        let mut rates: HashMap<u64, Vec<NsRate>> = HashMap::new();
        for &ns in netns.iter().flatten() {
            rates.entry(ns).or_insert_with(|| {
                let mut counters = Vec::new();
                if let Some(view) = self.nets.get_mut(&ns) {
                    view.counters(span, &mut counters);
                }
                counters
            });
        }
        for (ns, out) in netns.iter().zip(outs.iter_mut()) {
            let (Some(list), Some(out)) = (ns.and_then(|ns| rates.get(&ns)), out.as_mut()) else {
                continue;
            };
            for (inst, n, val) in list {
                out.put(n, inst.as_ref(), Some(*val));
            }
        }
    }

    /// TCP connections: lists every namespace that holds some node's sockets and gives each
    /// socket to the node whose process holds it, else whose address it has; each node's sums.
    fn connections(&mut self, sums: &[ProcSums]) -> Vec<SockSums> {
        let mut socks: Vec<SockSums> = (0..self.views.len()).map(|_| SockSums::default()).collect();
        let mut owner: HashMap<u64, usize> = HashMap::new();
        for (i, s) in sums.iter().enumerate() {
            for &ino in &s.sockets {
                owner.entry(ino).or_insert(i);
            }
        }
        // A namespace whose nodes hold a socket not seen in a listing yet is listed again.
        let mut stale: HashSet<u64> = HashSet::new();
        for s in sums {
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
        let mut seen: HashSet<(u64, u64)> = HashSet::new();
        let mut listed = Vec::new();
        for ns in self.namespaces_to_list(sums) {
            let full = Some(ns) == machine_ns
                || stale.contains(&ns)
                || self
                    .socks
                    .listed
                    .get(&ns)
                    .is_none_or(|&t| self.tick >= t + FULL_LISTING_EVERY);
            listed.clear();
            if !self.list_connections(ns, full, sums, &owner, &mut listed) {
                continue;
            }
            for s in &listed {
                if let Some(node) = self.socket_node(ns, s, &owner) {
                    self.count_socket(ns, s, &mut socks[node], &mut seen);
                }
            }
        }
        self.retrans.retain(|k, _| seen.contains(k));
        self.socks.forget_except(&seen, &owner);
        socks
    }

    /// Namespaces to list connections in, in order: where some node's processes live, the
    /// sampler's own for a whole machine, and for nodes known by address their own namespace
    /// (or the sampler's, when they have none).
    fn namespaces_to_list(&self, sums: &[ProcSums]) -> Vec<u64> {
        let mut d: HashSet<u64> = sums.iter().flat_map(|s| s.netns.iter().copied()).collect();
        for (i, v) in self.views.iter().enumerate() {
            let Some(v) = v else { continue };
            if v.machine || (!v.endpoints.is_empty() && self.rule_netns[i].is_none()) {
                d.extend(self.own_netns);
            } else if !v.endpoints.is_empty() {
                d.extend(self.rule_netns[i]);
            }
        }
        let mut list: Vec<u64> = d.into_iter().collect();
        list.sort_unstable();
        list
    }

    /// The connections of namespace `ns` into `out`: all of them (a `full` listing, which the
    /// socket cache then remembers), or between listings only the sockets some node had, each
    /// asked for by its identity. False when the namespace cannot be listed.
    fn list_connections(
        &mut self,
        ns: u64,
        full: bool,
        sums: &[ProcSums],
        owner: &HashMap<u64, usize>,
        out: &mut Vec<diag::TcpSock>,
    ) -> bool {
        let Some(view) = self.nets.get_mut(&ns) else {
            return false;
        };
        if full {
            let (v4, v6) = view.tcp_families();
            let Some(diag) = view.diag.as_ref().filter(|_| v4 || v6) else {
                return false;
            };
            if diag::dump(diag, v4, v6, out).is_err() {
                return false;
            }
            self.socks
                .relist(ns, self.tick, out, sums.iter().flat_map(|s| &s.sockets));
        } else {
            let Some(diag) = view.diag.as_ref() else {
                return false;
            };
            for (ino, id) in self.socks.of_ns(ns) {
                if owner.contains_key(&ino) || self.socks.by_endpoint.contains(&ino) {
                    if let Ok(Some(s)) = diag::lookup(diag, &id) {
                        out.push(s);
                    }
                }
            }
        }
        true
    }

    /// The node a connection of namespace `ns` belongs to: the one whose process holds its
    /// socket, else the one whose address it has (remembered), else a whole machine's in the
    /// sampler's own namespace.
    fn socket_node(
        &mut self,
        ns: u64,
        s: &diag::TcpSock,
        owner: &HashMap<u64, usize>,
    ) -> Option<usize> {
        if let Some(&n) = owner.get(&s.inode) {
            return Some(n);
        }
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
    }

    /// Adds a connection to its node's sums: window and round trip of an established one,
    /// unacknowledged segments, and retransmits since it was last seen (`seen` gets it).
    fn count_socket(
        &mut self,
        ns: u64,
        s: &diag::TcpSock,
        acc: &mut SockSums,
        seen: &mut HashSet<(u64, u64)>,
    ) {
        let Some(info) = s.info else { return };
        if s.state == diag::state::ESTABLISHED {
            acc.cwnd.push(info.cwnd);
            acc.rtt_us.push(info.rtt_us);
        }
        acc.unacked += u64::from(info.unacked);
        if s.inode != 0 {
            let key = (ns, s.inode);
            seen.insert(key);
            let prev = self.retrans.insert(key, (info.total_retrans, self.tick));
            acc.retrans += u64::from(match prev {
                Some((p, _)) => info.total_retrans.saturating_sub(p),
                // A connection first seen: all of its retransmits are new, except on the first
                // tick (the baseline).
                None if self.prev_boot_ticks.is_some() => info.total_retrans,
                None => 0,
            });
        }
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
