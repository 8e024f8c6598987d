//! An emulated PVFS-like cluster on one machine (docs/testbed.md).
//!
//! Each I/O server is a *node*: its own network namespace (veth to a switch namespace, real TCP),
//! its own cgroups (a fixed CPU share, a disk budget on the storage device), its own storage
//! directory and its own `CULPRIT_NODE`. The clients run in a namespace and cgroup of their own,
//! and so does a third party used by the network-hog faults. Everything is named with a per-run
//! prefix, and [`Cluster`]'s `Drop` removes it all (processes, cgroups, namespaces with their
//! veths, qdiscs and nft tables), even after an error or an interrupt; [`cleanup_stale`] removes
//! what a killed run left behind, and only that.

use std::fs;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cgroup::{self, Group};
use crate::error::{Error, Result};
use crate::net::{self, Host, Network};
use crate::programs::Programs;
use crate::sys;

/// Prefix of everything a testbed run creates (namespaces, cgroups): `culprit-tb-<pid>-<seq>`.
pub const PREFIX_STEM: &str = "culprit-tb-";
/// TCP port of the I/O servers.
pub const SERVER_PORT: u16 = 3334;
/// TCP port of the network-hog sink.
pub const HOG_PORT: u16 = 5001;

/// The shape of a cluster: how many nodes and what each node's "hardware" is.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    /// Number of I/O server nodes (seed 000 used 10; 4 here).
    pub nodes: usize,
    /// CPU share of each node, in CPUs (`cpu.cfs_quota_us` / period).
    pub node_cpus: f64,
    /// CPU share of the clients' namespace (`None`: uncapped).
    pub client_cpus: Option<f64>,
    /// Each node's disk bandwidth, bytes/s, for reads and for writes (blkio throttle).
    pub disk_bps: u64,
    /// Each node's disk IOPS budget, reads and writes each (0 = unlimited).
    pub disk_iops: u64,
    /// Each node's link speed in Mbit/s (tbf on its veth), `None` for an unshaped veth.
    pub link_mbit: Option<u32>,
    /// I/O threads per server.
    pub io_threads: u32,
    /// Directory for storage, logs and data (`<run_dir>/storage/<node>`, `logs/`).
    pub run_dir: PathBuf,
}

impl ClusterSpec {
    /// The defaults used by the demo, the experiment and the tests: 4 nodes of a quarter CPU,
    /// 12 MB/s and 300 IOPS of disk and a 300 Mbit/s link each. The disk is the bottleneck of
    /// the large-I/O workloads (4 × 12 MB/s, where the CPU would allow ~60 MB/s), as in seed
    /// 000's testbed.
    pub fn new(run_dir: impl Into<PathBuf>) -> Self {
        ClusterSpec {
            nodes: 4,
            node_cpus: 0.25,
            client_cpus: Some(0.5),
            disk_bps: 12_000_000,
            disk_iops: 300,
            link_mbit: Some(300),
            io_threads: 4,
            run_dir: run_dir.into(),
        }
    }
}

/// How the servers are instrumented.
#[derive(Clone, Debug, Default)]
pub struct Tracing {
    /// `libculprit_rt.so`, injected with `LD_PRELOAD` (`None`: run the servers untraced).
    pub runtime: Option<PathBuf>,
    /// `CULPRIT_DIR` of the servers.
    pub data_dir: PathBuf,
    /// `CULPRIT_INTERVAL_MS` (the tracer's record interval).
    pub interval_ms: u32,
}

/// One I/O server node.
#[derive(Debug)]
pub struct Node {
    /// The node's name: its `CULPRIT_NODE`, the name of its data directory.
    pub name: String,
    /// Its place on the network.
    pub host: Host,
    /// Its cgroups.
    pub group: Group,
    /// Its storage directory (the server's `--dir`).
    pub storage: PathBuf,
    server: Option<Child>,
}

/// Where a process of the cluster runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// Inside node `i` (its namespace and cgroups).
    Node(usize),
    /// With the clients.
    Clients,
    /// On the third-party host (the other end of the network hogs).
    ThirdParty,
}

/// Resource use of one node over a period (for the balance check).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeUsage {
    /// The node's name.
    pub node: String,
    /// CPU seconds used by the node's processes.
    pub cpu_s: f64,
    /// Bytes the node read from its disk.
    pub disk_read: u64,
    /// Bytes the node wrote to its disk.
    pub disk_write: u64,
}

/// A running emulated cluster. Dropping it tears everything down.
#[derive(Debug)]
pub struct Cluster {
    prefix: String,
    spec: ClusterSpec,
    programs: Programs,
    net: Network,
    root: Group,
    nodes: Vec<Node>,
    clients: Option<(Host, Group)>,
    third: Option<(Host, Group)>,
    /// Other processes the cluster started (rogues, sinks…), killed on drop.
    extra: Vec<Child>,
    dev: (u32, u32),
    log_dir: PathBuf,
}

/// Checks the privileges and tools the testbed needs; the error says which one is missing.
pub fn check_machine() -> Result<()> {
    if sys::euid() != 0 {
        return Err(Error::Missing(
            "the testbed needs root (CAP_SYS_ADMIN for network namespaces and cgroups, \
             CAP_NET_ADMIN for veth, tc and nftables): run it as root or with sudo"
                .into(),
        ));
    }
    if !cgroup::available() {
        return Err(Error::Missing(
            "cgroup v1 `cpu`, `cpuacct` and `blkio` hierarchies must be mounted under \
             /sys/fs/cgroup"
                .into(),
        ));
    }
    for tool in ["ip", "tc", "nft", "gcc"] {
        if which(tool).is_none() {
            return Err(Error::Missing(format!(
                "`{tool}` is not installed (run `bash scripts/install-deps`)"
            )));
        }
    }
    Ok(())
}

/// `tool` on `PATH`, else in the system directories a user's `PATH` may leave out.
fn which(tool: &str) -> Option<PathBuf> {
    which::which(tool)
        .or_else(|_| which::which_in(tool, Some("/usr/sbin:/sbin"), "/"))
        .ok()
}

/// Removes namespaces and cgroups left by testbed runs whose process is gone (killed with
/// SIGKILL, machine crash). Runs of live processes are left alone. Returns what was removed.
pub fn cleanup_stale() -> Vec<String> {
    let mut removed = Vec::new();
    let mut prefixes: Vec<String> = cgroup::list_groups(PREFIX_STEM);
    for ns in net::list_ns(PREFIX_STEM) {
        // `<stem><pid>-<seq>-<host>` → `<stem><pid>-<seq>`
        let rest = &ns[PREFIX_STEM.len()..];
        let parts: Vec<&str> = rest.splitn(3, '-').collect();
        if parts.len() >= 2 {
            prefixes.push(format!("{PREFIX_STEM}{}-{}", parts[0], parts[1]));
        }
    }
    prefixes.sort();
    prefixes.dedup();
    for prefix in prefixes {
        let pid = prefix[PREFIX_STEM.len()..]
            .split('-')
            .next()
            .and_then(|p| p.parse::<u32>().ok());
        let Some(pid) = pid else { continue };
        if sys::process_exists(pid) {
            continue;
        }
        let _ = cgroup::destroy_tree(Path::new(&prefix));
        for ns in net::list_ns(&format!("{prefix}-")) {
            let _ = net::delete_ns(&ns);
        }
        removed.push(prefix);
    }
    removed
}

/// What of this testbed's is present on the machine: namespaces and cgroups whose names start
/// with `prefix` (used by tests to check that nothing is left behind).
pub fn leftovers(prefix: &str) -> Vec<String> {
    let mut v = net::list_ns(prefix);
    v.extend(cgroup::list_groups(prefix));
    v
}

impl Cluster {
    /// Builds the cluster: namespaces, veths, cgroups with their limits, storage directories.
    /// No process runs yet.
    pub fn create(spec: ClusterSpec, programs: Programs) -> Result<Self> {
        check_machine()?;
        if spec.nodes < 1 || spec.nodes > 200 {
            return Err(Error::Config(format!(
                "{} nodes: want 1 to 200",
                spec.nodes
            )));
        }
        cleanup_stale();
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let prefix = format!("{PREFIX_STEM}{}-{seq}", std::process::id());
        let log_dir = spec.run_dir.join("logs");
        for d in [&spec.run_dir, &log_dir, &spec.run_dir.join("storage")] {
            fs::create_dir_all(d).map_err(|e| Error::io(format!("create {}", d.display()), e))?;
        }
        let dev = cgroup::whole_disk(
            sys::device_of(&spec.run_dir.join("storage"))
                .map_err(|e| Error::io("stat storage directory", e))?,
        );
        if dev.0 == 0 {
            return Err(Error::Config(format!(
                "{} is not on a block device (tmpfs/overlay?): the servers' O_DIRECT I/O and the \
                 disk faults need a real disk; choose another run directory",
                spec.run_dir.display()
            )));
        }

        // Build in an order where every step's undo is owned by something already constructed:
        // the network (its Drop deletes the namespaces), then the cgroups.
        let net = Network::create(&prefix)?;
        let root = Group::create(&prefix)?;
        let mut cluster = Cluster {
            prefix: prefix.clone(),
            programs,
            net,
            root,
            nodes: Vec::new(),
            clients: None,
            third: None,
            extra: Vec::new(),
            dev,
            log_dir,
            spec,
        };
        cluster.populate()?;
        Ok(cluster)
    }

    fn populate(&mut self) -> Result<()> {
        let spec = self.spec.clone();
        let clients = self.net.add_host("cl", 2)?;
        let cgroup = Group::create(Path::new(&self.prefix).join("clients"))?;
        cgroup.set_cpu_quota(spec.client_cpus)?;
        self.clients = Some((clients, cgroup));
        let third = self.net.add_host("x", 3)?;
        let cgroup = Group::create(Path::new(&self.prefix).join("third"))?;
        cgroup.set_cpu_quota(Some(spec.node_cpus))?;
        self.third = Some((third, cgroup));
        for i in 0..spec.nodes {
            let name = format!("io{i}");
            let host = self.net.add_host(&name, 10 + i as u8)?;
            if let Some(mbit) = spec.link_mbit {
                self.net.shape(&host, mbit)?;
            }
            let group = Group::create(Path::new(&self.prefix).join(&name))?;
            group.set_cpu_quota(Some(spec.node_cpus))?;
            group.set_disk_limits(self.dev, spec.disk_bps, spec.disk_iops)?;
            let storage = spec.run_dir.join("storage").join(&name);
            let _ = fs::remove_dir_all(&storage);
            fs::create_dir_all(&storage)
                .map_err(|e| Error::io(format!("create {}", storage.display()), e))?;
            self.nodes.push(Node {
                name,
                host,
                group,
                storage,
                server: None,
            });
        }
        Ok(())
    }

    /// The run's prefix (names of its namespaces and cgroups start with it).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The nodes.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The spec the cluster was built with.
    pub fn spec(&self) -> &ClusterSpec {
        &self.spec
    }

    /// The built programs.
    pub fn programs(&self) -> &Programs {
        &self.programs
    }

    /// The whole-disk device holding the storage directories.
    pub fn storage_device(&self) -> (u32, u32) {
        self.dev
    }

    /// The emulated network.
    pub fn network(&self) -> &Network {
        &self.net
    }

    /// The clients' host.
    pub fn clients_host(&self) -> &Host {
        &self.clients.as_ref().expect("populated").0
    }

    /// The third party's host.
    pub fn third_party(&self) -> &Host {
        &self.third.as_ref().expect("populated").0
    }

    /// `IP:PORT,…` of all servers, for the clients.
    pub fn server_list(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("{}:{SERVER_PORT}", n.host.ip))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The log file for `name` (`<run_dir>/logs/<name>.log`).
    pub fn log_path(&self, name: &str) -> PathBuf {
        self.log_dir.join(format!("{name}.log"))
    }

    fn placement(&self, place: Place) -> Result<sys::Placement> {
        let (ns, group) = match place {
            Place::Node(i) => {
                let n = self
                    .nodes
                    .get(i)
                    .ok_or_else(|| Error::Config(format!("no node {i}")))?;
                (&n.host.ns, &n.group)
            }
            Place::Clients => pair_parts(&self.clients)?,
            Place::ThirdParty => pair_parts(&self.third)?,
        };
        let f = fs::File::open(Path::new("/run/netns").join(ns))
            .map_err(|e| Error::io(format!("open namespace {ns}"), e))?;
        Ok(sys::Placement {
            netns: Some(OwnedFd::from(f)),
            cgroup_procs: group.procs_files()?,
        })
    }

    /// Starts `cmd` at `place`, its stdout and stderr going to the log `log`.
    pub fn spawn(&self, place: Place, mut cmd: Command, log: &str) -> Result<Child> {
        sys::place(&mut cmd, self.placement(place)?);
        let out = fs::File::create(self.log_path(log))
            .map_err(|e| Error::io(format!("create log {log}"), e))?;
        let err = out.try_clone().map_err(|e| Error::io("dup log", e))?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        cmd.spawn()
            .map_err(|e| Error::io(format!("start {:?}", cmd.get_program()), e))
    }

    /// Starts a process the cluster owns until it is dropped (rogues, sinks).
    pub fn spawn_owned(&mut self, place: Place, cmd: Command, log: &str) -> Result<u32> {
        let child = self.spawn(place, cmd, log)?;
        let pid = child.id();
        self.extra.push(child);
        Ok(pid)
    }

    /// Stops (SIGTERM, then SIGKILL after 3 s) and reaps an owned process started with
    /// [`Cluster::spawn_owned`].
    pub fn stop_owned(&mut self, pid: u32) {
        if let Some(pos) = self.extra.iter().position(|c| c.id() == pid) {
            let mut c = self.extra.swap_remove(pos);
            stop_child(&mut c, Duration::from_secs(3));
        }
    }

    /// Starts one I/O server per node, traced when `tracing.runtime` is set, and waits until
    /// every server accepts connections.
    pub fn start_servers(&mut self, tracing: &Tracing) -> Result<()> {
        for i in 0..self.nodes.len() {
            let node = &self.nodes[i];
            let mut cmd = Command::new(&self.programs.server);
            cmd.args(["--dir".as_ref(), node.storage.as_os_str()])
                .args(["--port", &SERVER_PORT.to_string()])
                .args(["--threads", &self.spec.io_threads.to_string()]);
            if let Some(rt) = &tracing.runtime {
                cmd.env("LD_PRELOAD", rt)
                    .env("CULPRIT_DIR", &tracing.data_dir)
                    .env("CULPRIT_NODE", &node.name)
                    .env("CULPRIT_INTERVAL_MS", tracing.interval_ms.to_string());
            }
            let child = self.spawn(Place::Node(i), cmd, &format!("server-{}", node.name))?;
            self.nodes[i].server = Some(child);
        }
        self.wait_servers_listening(Duration::from_secs(10))
    }

    fn wait_servers_listening(&mut self, limit: Duration) -> Result<()> {
        let start = Instant::now();
        for i in 0..self.nodes.len() {
            loop {
                let node = &mut self.nodes[i];
                if let Some(c) = node.server.as_mut() {
                    if let Ok(Some(st)) = c.try_wait() {
                        return Err(Error::Command {
                            cmd: format!("pvfs_server on {}", node.name),
                            detail: format!(
                                "exited with {st}: {}",
                                read_tail(&self.log_dir.join(format!("server-{}.log", node.name)))
                            ),
                        });
                    }
                }
                let ss = net::in_ns(&node.host.ns, "ss", &["-Htln"]).unwrap_or_default();
                if ss.contains(&format!(":{SERVER_PORT}")) {
                    break;
                }
                if start.elapsed() > limit {
                    return Err(Error::Command {
                        cmd: format!("pvfs_server on {}", node.name),
                        detail: "not listening after 10 s".into(),
                    });
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// Pids of the running servers, by node.
    pub fn server_pids(&self) -> Vec<(String, u32)> {
        self.nodes
            .iter()
            .filter_map(|n| n.server.as_ref().map(|c| (n.name.clone(), c.id())))
            .collect()
    }

    /// Stops the servers cleanly (SIGTERM: the tracer writes its end records), SIGKILL after
    /// `grace`.
    pub fn stop_servers(&mut self, grace: Duration) {
        for n in &mut self.nodes {
            if let Some(c) = n.server.as_ref() {
                let _ = sys::kill(c.id(), libc::SIGTERM);
            }
        }
        for n in &mut self.nodes {
            if let Some(mut c) = n.server.take() {
                stop_child(&mut c, grace);
            }
        }
    }

    /// True when every server is still running.
    pub fn servers_alive(&mut self) -> bool {
        self.nodes.iter_mut().all(|n| {
            n.server
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
        })
    }

    /// CPU time and disk bytes used by each node so far (cumulative counters: subtract two
    /// readings for a period).
    pub fn usage(&self) -> Result<Vec<NodeUsage>> {
        self.nodes
            .iter()
            .map(|n| {
                let (r, w) = n.group.disk_bytes()?;
                Ok(NodeUsage {
                    node: n.name.clone(),
                    cpu_s: n.group.cpu_usage_ns()? as f64 / 1e9,
                    disk_read: r,
                    disk_write: w,
                })
            })
            .collect()
    }

    /// Bytes received and sent on node `i`'s link so far.
    pub fn link_bytes(&self, i: usize) -> Result<(u64, u64)> {
        let ns = &self
            .nodes
            .get(i)
            .ok_or_else(|| Error::Config(format!("no node {i}")))?
            .host
            .ns;
        let read = |what: &str| -> Result<u64> {
            let s = net::in_ns(
                ns,
                "cat",
                &[&format!("/sys/class/net/eth0/statistics/{what}")],
            )?;
            s.trim()
                .parse()
                .map_err(|_| Error::Parse(format!("{what} of {ns}: {s:?}")))
        };
        Ok((read("rx_bytes")?, read("tx_bytes")?))
    }

    /// The cgroup of node `i`.
    pub fn node_group(&self, i: usize) -> &Group {
        &self.nodes[i].group
    }

    /// The node-name → cgroup-path (relative to a hierarchy root) map, for a sampler that
    /// attributes samples by cgroup.
    pub fn node_cgroups(&self) -> Vec<(String, PathBuf)> {
        self.nodes
            .iter()
            .map(|n| (n.name.clone(), Path::new(&self.prefix).join(&n.name)))
            .collect()
    }

    /// Tears everything down now (also done on drop). Errors are collected, not fatal: every
    /// step is tried.
    pub fn teardown(&mut self) -> Result<()> {
        self.stop_servers(Duration::from_secs(3));
        for mut c in self.extra.drain(..) {
            stop_child(&mut c, Duration::from_millis(500));
        }
        let mut last = self.root.destroy();
        if let Err(e) = self.net.destroy() {
            last = Err(e);
        }
        for n in &self.nodes {
            let _ = fs::remove_dir_all(&n.storage);
        }
        last
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Err(e) = self.teardown() {
            eprintln!("culprit testbed: teardown of {}: {e}", self.prefix);
        }
    }
}

fn pair_parts(p: &Option<(Host, Group)>) -> Result<(&String, &Group)> {
    p.as_ref()
        .map(|(h, g)| (&h.ns, g))
        .ok_or_else(|| Error::Config("cluster is not fully built".into()))
}

/// SIGTERM, wait up to `grace`, then SIGKILL; always reaps.
pub(crate) fn stop_child(c: &mut Child, grace: Duration) {
    if matches!(c.try_wait(), Ok(Some(_))) {
        return;
    }
    let _ = sys::kill(c.id(), libc::SIGTERM);
    let start = Instant::now();
    while start.elapsed() < grace {
        if matches!(c.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// The last lines of a log file, for error messages.
pub(crate) fn read_tail(p: &Path) -> String {
    let s = fs::read_to_string(p).unwrap_or_default();
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" | ")
}
