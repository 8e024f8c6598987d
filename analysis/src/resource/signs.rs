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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sign {
    /// OS metric or kernel event name.
    pub metric: &'static str,
    /// Its class.
    pub class: Class,
    /// The direction that points at the node.
    pub trouble: Direction,
    /// Words in a verdict ("I/O delay").
    pub words: &'static str,
}

const fn sign(metric: &'static str, class: Class, trouble: Direction, words: &'static str) -> Sign {
    Sign {
        metric,
        class,
        trouble,
        words,
    }
}

/// The metrics the checklist reads. Anything else (thread and process counts, context
/// switches, request counts and sizes: [`crate::family::os::NOT_COMPARED`]) is context, never a
/// step's evidence — so is the *smallest* congestion window, which also falls when the node
/// opens a connection that has not sent yet (a new connection starts at 10 segments, and a
/// network hog's sink never sends): the median window speaks for loss.
pub const SIGNS: &[Sign] = &[
    // A whole machine's block devices (sysstat's names).
    sign("disk.rd_sec", StorageThroughput, Up, "read throughput"),
    sign("disk.wr_sec", StorageThroughput, Up, "write throughput"),
    sign("disk.await", StorageLatency, Up, "await"),
    sign("disk.avgqu_sz", StorageLatency, Up, "I/O queue"),
    sign("disk.util", StorageLatency, Up, "disk busy time"),
    sign("cpu.iowait", StorageLatency, Up, "iowait"),
    sign("cpu.blocked", StorageLatency, Up, "threads blocked on I/O"),
    // A node's cgroup and processes on a shared host.
    sign("cg.rd_bytes", StorageThroughput, Up, "read throughput"),
    sign("cg.wr_bytes", StorageThroughput, Up, "write throughput"),
    sign("proc.rd_bytes", StorageThroughput, Up, "read throughput"),
    sign("proc.wr_bytes", StorageThroughput, Up, "write throughput"),
    sign("proc.blkio_delay", StorageLatency, Up, "I/O delay"),
    sign("proc.blocked", StorageLatency, Up, "threads blocked on I/O"),
    // Network: the node's interfaces and TCP.
    sign("net.rxbyt", Received, Up, "received bytes"),
    sign("net.rxpck", Received, Up, "received packets"),
    sign("tcp.in_segs", Received, Up, "received segments"),
    sign("net.txbyt", Sent, Up, "sent bytes"),
    sign("net.txpck", Sent, Up, "sent packets"),
    sign("tcp.out_segs", Sent, Up, "sent segments"),
    sign("tcp.retrans", Loss, Up, "retransmits"),
    sign("tcp.retrans_segs", Loss, Up, "retransmits"),
    sign("tcp.cwnd_med", Loss, Down, "cwnd"),
    sign("tcp.rtt_med", Loss, Up, "round trip"),
    sign("tcp.rtt_max", Loss, Up, "longest round trip"),
    sign("net.rxdrop", Loss, Up, "receive drops"),
    sign("net.txdrop", Loss, Up, "send drops"),
    sign("net.rxerr", Loss, Up, "receive errors"),
    sign("net.txerr", Loss, Up, "send errors"),
    // CPU.
    sign("cg.cpu", CpuUse, Up, "CPU"),
    sign("proc.cpu", CpuUse, Up, "CPU"),
    sign("cpu.user", CpuUse, Up, "user CPU"),
    sign("cpu.sys", CpuUse, Up, "system CPU"),
    sign("proc.runq_delay", CpuWait, Up, "run-queue wait"),
    sign("proc.runnable", CpuWait, Up, "runnable threads"),
    sign("cpu.runnable", CpuWait, Up, "runnable threads"),
    sign("cg.throttled", CpuLimit, Up, "throttled periods"),
    sign("cg.throttled_time", CpuLimit, Up, "throttled time"),
    sign("cpu.steal", CpuLimit, Up, "steal"),
    // Kernel events (the `events` metric).
    sign("tcp:tcp_retransmit_skb", Loss, Up, "retransmit events"),
    sign(
        "block:block_rq_issue",
        StorageThroughput,
        Up,
        "block requests",
    ),
    sign("block:block_bio_queue", StorageThroughput, Up, "block I/O"),
    sign(
        "block:block_rq_complete",
        StorageThroughput,
        Up,
        "block requests",
    ),
];

/// The sign of `metric`, if the checklist reads it.
pub fn sign_of(metric: &str) -> Option<&'static Sign> {
    SIGNS.iter().find(|s| s.metric == metric)
}
