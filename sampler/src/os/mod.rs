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

//!
//! # Where the code is
//!
//! One module per source: `machine` (`/proc/diskstats`, `/proc/stat`), `cgroup` (a node's
//! cgroup v1 counters), `processes` (the node's process tree: `/proc/PID/…` of every task),
//! `net` (a network namespace's interface and SNMP counters), `sockets` (TCP connections,
//! [`diag`] underneath). `collector` reads them all once per tick and gives each node its
//! values (`view`: what each node is made of, and the values handed on); `read` holds the
//! helpers every source shares.

mod cgroup;
mod collector;
pub mod delayacct;
pub mod diag;
mod machine;
mod net;
pub mod parse;
mod processes;
mod read;
mod sockets;
mod view;

pub use collector::{run, Collector};
pub use view::{
    node_views, Endpoint, NodePids, NodeView, OsConfig, OsInterval, OsStats, Value,
    DEFAULT_OS_INTERVAL,
};

#[cfg(test)]
mod tests;
