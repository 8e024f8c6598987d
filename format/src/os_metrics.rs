//! The names, units and meanings of the black-box OS metrics in [`RecordKind::OsMetrics`]
//! records: what the sampler writes and the analysis reads.
//!
//! Seed 001 (Kasick's thesis, §3.2.1 and its Table 3.1) diagnoses peer servers from sysstat's
//! per-second OS metrics: per block device `tps rd_sec wr_sec avgrq-sz avgqu-sz await svctm
//! %util`, per interface `rxpck txpck rxbyt txbyt`, per TCP socket `cwnd`. The names here keep
//! sysstat's metric names (with `_` for `-` and without `%`) under a group prefix:
//!
//! * `disk.*` per block device (instance: the device name, e.g. `vda`), `net.*` per interface
//!   (instance: the interface name), `tcp.*`, `cpu.*` for the whole machine or the node's network
//!   namespace (no instance);
//! * `cg.*` for the node's cgroup, `proc.*` for the node's processes (their threads summed), where
//!   several servers share one host.
//!
//! A metric is identified by (name, instance); its unit is written beside it in every entry, so
//! a file describes itself. Values are per-second rates of the counters the kernel keeps (over
//! the measured span between two reads), or gauges read at the end of the interval. A metric a
//! node cannot provide — no such source on this node, a counter that went backwards (a device
//! removed, a wrap), an average over zero requests — has no entry in that record: *absent*,
//! never zero. Writers never write NaN or infinities; readers treat them as absent.
//!
//! [`RecordKind::OsMetrics`]: crate::RecordKind::OsMetrics

/// What an instance of a metric names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instance {
    /// Node-wide: no instance.
    None,
    /// A block device (`/proc/diskstats` name).
    Device,
    /// A network interface (`/proc/net/dev` name).
    Interface,
}

/// One metric of the catalogue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricDef {
    /// Name, `group.metric`.
    pub name: &'static str,
    /// Unit, as written in the records.
    pub unit: &'static str,
    /// What the instance is.
    pub instance: Instance,
    /// Where the value comes from.
    pub source: &'static str,
    /// What it means.
    pub about: &'static str,
}

macro_rules! metrics {
    ($( $konst:ident = $name:literal, $unit:literal, $inst:ident, $source:literal, $about:literal; )*) => {
        /// Metric names, as constants.
        pub mod name {
            $(
                #[doc = $about]
                pub const $konst: &str = $name;
            )*
        }
        /// Every metric the sampler writes, in the order it writes them.
        pub const CATALOGUE: &[MetricDef] = &[
            $( MetricDef { name: $name, unit: $unit, instance: Instance::$inst, source: $source, about: $about }, )*
        ];
    };
}

metrics! {
    DISK_TPS = "disk.tps", "1/s", Device, "/proc/diskstats",
        "Reads and writes completed per second (sysstat tps).";
    DISK_RD_SEC = "disk.rd_sec", "sectors/s", Device, "/proc/diskstats",
        "512-byte sectors read per second.";
    DISK_WR_SEC = "disk.wr_sec", "sectors/s", Device, "/proc/diskstats",
        "512-byte sectors written per second.";
    DISK_AVGRQ_SZ = "disk.avgrq_sz", "sectors", Device, "/proc/diskstats",
        "Average size of the requests completed (sysstat avgrq-sz); absent without requests.";
    DISK_AVGQU_SZ = "disk.avgqu_sz", "requests", Device, "/proc/diskstats",
        "Average number of requests queued or in service (sysstat avgqu-sz).";
    DISK_AWAIT = "disk.await", "ms", Device, "/proc/diskstats",
        "Average time a request took, queueing included (sysstat await); absent without requests.";
    DISK_SVCTM = "disk.svctm", "ms", Device, "/proc/diskstats",
        "Average busy time per request, no queueing (sysstat svctm); absent without requests.";
    DISK_UTIL = "disk.util", "%", Device, "/proc/diskstats",
        "Share of the time the device had requests in service (sysstat %util).";
    NET_RXPCK = "net.rxpck", "packets/s", Interface, "/proc/net/dev",
        "Packets received per second.";
    NET_TXPCK = "net.txpck", "packets/s", Interface, "/proc/net/dev",
        "Packets transmitted per second.";
    NET_RXBYT = "net.rxbyt", "B/s", Interface, "/proc/net/dev",
        "Bytes received per second.";
    NET_TXBYT = "net.txbyt", "B/s", Interface, "/proc/net/dev",
        "Bytes transmitted per second.";
    NET_RXDROP = "net.rxdrop", "packets/s", Interface, "/proc/net/dev",
        "Received packets dropped per second.";
    NET_TXDROP = "net.txdrop", "packets/s", Interface, "/proc/net/dev",
        "Packets dropped on transmit per second.";
    NET_RXERR = "net.rxerr", "packets/s", Interface, "/proc/net/dev",
        "Receive errors per second.";
    NET_TXERR = "net.txerr", "packets/s", Interface, "/proc/net/dev",
        "Transmit errors per second.";
    TCP_RETRANS_SEGS = "tcp.retrans_segs", "segments/s", None, "/proc/net/snmp",
        "TCP segments retransmitted per second in the network namespace (RetransSegs).";
    TCP_IN_SEGS = "tcp.in_segs", "segments/s", None, "/proc/net/snmp",
        "TCP segments received per second in the network namespace (InSegs).";
    TCP_OUT_SEGS = "tcp.out_segs", "segments/s", None, "/proc/net/snmp",
        "TCP segments sent per second in the network namespace (OutSegs).";
    TCP_CONNS = "tcp.conns", "count", None, "sock_diag",
        "The node's established TCP connections at the end of the interval.";
    TCP_CWND_MIN = "tcp.cwnd_min", "segments", None, "sock_diag",
        "Smallest congestion window among the node's connections; absent without connections.";
    TCP_CWND_MED = "tcp.cwnd_med", "segments", None, "sock_diag",
        "Median congestion window of the node's connections; absent without connections.";
    TCP_RTT_MED = "tcp.rtt_med", "ms", None, "sock_diag",
        "Median smoothed round-trip time of the node's connections; absent without connections.";
    TCP_RTT_MAX = "tcp.rtt_max", "ms", None, "sock_diag",
        "Largest smoothed round-trip time of the node's connections; absent without connections.";
    TCP_UNACKED = "tcp.unacked", "segments", None, "sock_diag",
        "Segments sent and not yet acknowledged, summed over the node's connections.";
    TCP_RETRANS = "tcp.retrans", "segments/s", None, "sock_diag",
        "Retransmitted segments per second on the node's own connections (tcpi_total_retrans).";
    CPU_USER = "cpu.user", "%", None, "/proc/stat",
        "Share of all CPUs' time in user mode, nice included (sar %user).";
    CPU_SYS = "cpu.sys", "%", None, "/proc/stat",
        "Share of all CPUs' time in the kernel, interrupts included (sar %system).";
    CPU_IOWAIT = "cpu.iowait", "%", None, "/proc/stat",
        "Share of all CPUs' time idle with I/O outstanding (sar %iowait).";
    CPU_STEAL = "cpu.steal", "%", None, "/proc/stat",
        "Share of all CPUs' time taken by the hypervisor (sar %steal).";
    CPU_CSWCH = "cpu.cswch", "1/s", None, "/proc/stat",
        "Context switches per second.";
    CPU_RUNNABLE = "cpu.runnable", "count", None, "/proc/stat",
        "Runnable threads at the end of the interval (procs_running).";
    CPU_BLOCKED = "cpu.blocked", "count", None, "/proc/stat",
        "Threads blocked on I/O at the end of the interval (procs_blocked).";
    CG_RD_BYTES = "cg.rd_bytes", "B/s", None, "blkio.throttle.io_service_bytes",
        "Bytes the node's cgroup read from block devices per second.";
    CG_WR_BYTES = "cg.wr_bytes", "B/s", None, "blkio.throttle.io_service_bytes",
        "Bytes the node's cgroup wrote to block devices per second.";
    CG_RD_IOS = "cg.rd_ios", "1/s", None, "blkio.throttle.io_serviced",
        "Block read requests of the node's cgroup per second.";
    CG_WR_IOS = "cg.wr_ios", "1/s", None, "blkio.throttle.io_serviced",
        "Block write requests of the node's cgroup per second.";
    CG_CPU = "cg.cpu", "ms/s", None, "cpuacct.usage",
        "CPU time of the node's cgroup per second (1000 = one CPU).";
    CG_THROTTLED = "cg.throttled", "1/s", None, "cpu.stat",
        "CFS periods per second in which the node's cgroup was throttled (nr_throttled).";
    CG_THROTTLED_TIME = "cg.throttled_time", "ms/s", None, "cpu.stat",
        "Time per second the node's cgroup was throttled (throttled_time).";
    PROC_RD_BYTES = "proc.rd_bytes", "B/s", None, "/proc/PID/io",
        "Bytes the node's processes caused to be read from storage per second (read_bytes).";
    PROC_WR_BYTES = "proc.wr_bytes", "B/s", None, "/proc/PID/io",
        "Bytes the node's processes caused to be written to storage per second (write_bytes).";
    PROC_BLKIO_DELAY = "proc.blkio_delay", "ms/s", None, "/proc/PID/task/TID/stat",
        "Time per second the node's threads waited for block I/O (delay accounting, field 42; \
         needs kernel.task_delayacct=1, else absent).";
    PROC_RUNQ_DELAY = "proc.runq_delay", "ms/s", None, "/proc/PID/task/TID/schedstat",
        "Time per second the node's threads waited on a run queue.";
    PROC_CPU = "proc.cpu", "ms/s", None, "/proc/PID/task/TID/schedstat",
        "CPU time of the node's threads per second (1000 = one CPU).";
    PROC_CSWCH = "proc.cswch", "1/s", None, "/proc/PID/task/TID/schedstat",
        "Times per second the node's threads were switched in.";
    PROC_RUNNABLE = "proc.runnable", "count", None, "/proc/PID/task/TID/stat",
        "The node's threads runnable (state R) at the end of the interval.";
    PROC_BLOCKED = "proc.blocked", "count", None, "/proc/PID/task/TID/stat",
        "The node's threads in uninterruptible sleep (state D, mostly I/O) at the end of the interval.";
    PROC_THREADS = "proc.threads", "count", None, "/proc/PID/task",
        "The node's threads at the end of the interval.";
    PROC_PROCS = "proc.procs", "count", None, "the sampler's process tracking",
        "The node's processes at the end of the interval.";
}

/// The catalogue entry of metric `name`.
pub fn def(name: &str) -> Option<&'static MetricDef> {
    CATALOGUE.iter().find(|d| d.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_grouped() {
        for (i, d) in CATALOGUE.iter().enumerate() {
            assert!(
                CATALOGUE[..i].iter().all(|e| e.name != d.name),
                "{} twice",
                d.name
            );
            let group = d.name.split('.').next().unwrap();
            assert!(["disk", "net", "tcp", "cpu", "cg", "proc"].contains(&group));
            assert_eq!(
                d.instance != Instance::None,
                matches!(group, "disk" | "net"),
                "{}",
                d.name
            );
        }
        assert_eq!(def(name::DISK_AWAIT).unwrap().unit, "ms");
        assert!(def("disk.nope").is_none());
    }
}
