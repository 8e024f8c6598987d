//! The catalogue of signs the resource checklist reads: each OS metric's (and kernel event's)
//! [`Class`] and the [`Direction`] that points at the node.

use serde::{Deserialize, Serialize};

use Class::*;
use Direction::{Down, Up};

/// What a metric tells about a resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// Bytes or requests to and from block devices.
    StorageThroughput,
    /// Time requests take, queues, time blocked on I/O.
    StorageLatency,
    /// Connections open: many at once, or many short ones (added within version 1).
    Connections,
    /// Traffic received.
    Received,
    /// Traffic sent.
    Sent,
    /// Signs of lost packets: retransmits, drops, smaller windows, longer round trips.
    Loss,
    /// CPU time used.
    CpuUse,
    /// Time runnable but waiting for a CPU.
    CpuWait,
    /// CPU withheld: CFS throttling, hypervisor steal.
    CpuLimit,
    /// White-box: every traced function slower per call alike, calls not up — the node slowed
    /// as a whole ([`super::Slowdown`]; added within version 1 of the report).
    Slowdown,
}

/// Which way of a metric points at the node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Above its peers.
    Up,
    /// Below its peers.
    Down,
    /// Within [`MARGIN`](super::MARGIN) of its peers.
    Level,
}

/// One line of the table: a metric, its class, the direction that points at the node, and the
/// words for it in a verdict.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sign {
    /// OS metric or kernel event name.
    pub metric: &'static str,
    /// Its class.
    pub class: Class,
    /// The direction that points at the node.
    pub trouble: Direction,
    /// Words in a verdict ("I/O delay").
    pub words: &'static str,
    /// The least difference from its peers', in the metric's unit per second (a kernel event:
    /// events per second), that matters: a level under it never names a resource, however
    /// large its ratio (one 10 ms wait is 0.04 ms/s of I/O delay against peers' exact 0).
    /// docs/resource-checklist.md gives each floor's reason.
    pub floor: f64,
}

const fn sign(
    metric: &'static str,
    class: Class,
    trouble: Direction,
    words: &'static str,
    floor: f64,
) -> Sign {
    Sign {
        metric,
        class,
        trouble,
        words,
        floor,
    }
}

impl Sign {
    /// True when a node's level `node` is at least the floor away from its peers' `peers`, the
    /// way that points at the node.
    pub fn beyond_floor(&self, node: f64, peers: f64) -> bool {
        let gap = match self.trouble {
            Down => peers - node,
            _ => node - peers,
        };
        gap >= self.floor
    }
}

/// The metrics the checklist reads. Anything else (thread and process counts, context
/// switches, request counts and sizes: [`crate::family::os::NOT_COMPARED`]) is context, never a
/// step's evidence — so is the *smallest* congestion window, which also falls when the node
/// opens a connection that has not sent yet (a new connection starts at 10 segments, and a
/// network hog's sink never sends): the median window speaks for loss.
pub const SIGNS: &[Sign] = &[
    // A whole machine's block devices (sysstat's names).
    sign(
        "disk.rd_sec",
        StorageThroughput,
        Up,
        "read throughput",
        512.0,
    ),
    sign(
        "disk.wr_sec",
        StorageThroughput,
        Up,
        "write throughput",
        512.0,
    ),
    sign("disk.await", StorageLatency, Up, "await", 1.0),
    sign("disk.avgqu_sz", StorageLatency, Up, "I/O queue", 0.1),
    sign("disk.util", StorageLatency, Up, "disk busy time", 5.0),
    sign("cpu.iowait", StorageLatency, Up, "iowait", 1.0),
    sign(
        "cpu.blocked",
        StorageLatency,
        Up,
        "threads blocked on I/O",
        0.1,
    ),
    // A node's cgroup and processes on a shared host.
    sign(
        "cg.rd_bytes",
        StorageThroughput,
        Up,
        "read throughput",
        262_144.0,
    ),
    sign(
        "cg.wr_bytes",
        StorageThroughput,
        Up,
        "write throughput",
        262_144.0,
    ),
    sign(
        "proc.rd_bytes",
        StorageThroughput,
        Up,
        "read throughput",
        262_144.0,
    ),
    sign(
        "proc.wr_bytes",
        StorageThroughput,
        Up,
        "write throughput",
        262_144.0,
    ),
    sign("proc.blkio_delay", StorageLatency, Up, "I/O delay", 10.0),
    sign(
        "proc.blocked",
        StorageLatency,
        Up,
        "threads blocked on I/O",
        0.1,
    ),
    // Network: the node's interfaces and TCP.
    sign("tcp.conns", Connections, Up, "connections", 10.0),
    sign("net.rxbyt", Received, Up, "received bytes", 131_072.0),
    sign("net.rxpck", Received, Up, "received packets", 100.0),
    sign("tcp.in_segs", Received, Up, "received segments", 100.0),
    sign("net.txbyt", Sent, Up, "sent bytes", 131_072.0),
    sign("net.txpck", Sent, Up, "sent packets", 100.0),
    sign("tcp.out_segs", Sent, Up, "sent segments", 100.0),
    sign("tcp.retrans", Loss, Up, "retransmits", 1.0),
    sign("tcp.retrans_segs", Loss, Up, "retransmits", 1.0),
    sign("tcp.cwnd_med", Loss, Down, "cwnd", 2.0),
    sign("tcp.rtt_med", Loss, Up, "round trip", 1.0),
    sign("tcp.rtt_max", Loss, Up, "longest round trip", 5.0),
    sign("net.rxdrop", Loss, Up, "receive drops", 1.0),
    sign("net.txdrop", Loss, Up, "send drops", 1.0),
    sign("net.rxerr", Loss, Up, "receive errors", 1.0),
    sign("net.txerr", Loss, Up, "send errors", 1.0),
    // CPU.
    sign("cg.cpu", CpuUse, Up, "CPU", 50.0),
    sign("proc.cpu", CpuUse, Up, "CPU", 50.0),
    sign("cpu.user", CpuUse, Up, "user CPU", 5.0),
    sign("cpu.sys", CpuUse, Up, "system CPU", 5.0),
    sign("proc.runq_delay", CpuWait, Up, "run-queue wait", 10.0),
    sign("proc.runnable", CpuWait, Up, "runnable threads", 0.2),
    sign("cpu.runnable", CpuWait, Up, "runnable threads", 0.2),
    sign("cg.throttled", CpuLimit, Up, "throttled periods", 1.0),
    sign("cg.throttled_time", CpuLimit, Up, "throttled time", 10.0),
    sign("cpu.steal", CpuLimit, Up, "steal", 1.0),
    // Kernel events (the `events` metric).
    sign("tcp:tcp_retransmit_skb", Loss, Up, "retransmit events", 1.0),
    sign(
        "block:block_rq_issue",
        StorageThroughput,
        Up,
        "block requests",
        10.0,
    ),
    sign(
        "block:block_bio_queue",
        StorageThroughput,
        Up,
        "block I/O",
        10.0,
    ),
    sign(
        "block:block_rq_complete",
        StorageThroughput,
        Up,
        "block requests",
        10.0,
    ),
];

/// The sign of `metric`, if the checklist reads it.
pub fn sign_of(metric: &str) -> Option<&'static Sign> {
    SIGNS.iter().find(|s| s.metric == metric)
}
