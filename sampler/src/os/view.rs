//! What each node's OS metrics are made of ([`NodeView`]), and the values handed on.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use culprit_format::os_metrics::MetricDef;
use culprit_format::OsMetricsHead;

use crate::nodes::{normalize_cgroup, NodeRule, Nodes, Scope};

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
