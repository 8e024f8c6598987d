//! Parsers of the `/proc` and cgroup files the OS metrics come from. Each takes the file's text
//! and returns the counters as read (no rates); a line or field it cannot read is left out, never
//! read as zero. Tested on text captured from this machine's kernel (6.x) and older layouts. A
//! process's `stat` line is read by the format crate's [`Stat`] (the writers' process identity
//! comes from it too).

use culprit_format::procfs::Stat;

/// One line of `/proc/diskstats` (Documentation/admin-guide/iostats.rst). Times are ms.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskStat {
    /// Device name (`vda`, `sda1`, `dm-0`).
    pub name: String,
    /// Reads completed.
    pub rd_ios: u64,
    /// Sectors read.
    pub rd_sectors: u64,
    /// ms spent reading (summed over requests).
    pub rd_ticks: u64,
    /// Writes completed.
    pub wr_ios: u64,
    /// Sectors written.
    pub wr_sectors: u64,
    /// ms spent writing.
    pub wr_ticks: u64,
    /// ms the device had I/O in flight.
    pub io_ticks: u64,
    /// Weighted ms of I/O (requests × ms in queue or service).
    pub time_in_queue: u64,
}

/// Parses `/proc/diskstats` (14 fields since 2.6, 18 with discards since 4.18, 20 with flushes
/// since 5.5; the first 14 mean the same in all).
pub fn diskstats(text: &str) -> Vec<DiskStat> {
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 14 {
            continue;
        }
        let n = |i: usize| f[i].parse::<u64>().ok();
        let (
            Some(rd_ios),
            Some(rd_sectors),
            Some(rd_ticks),
            Some(wr_ios),
            Some(wr_sectors),
            Some(wr_ticks),
            Some(io_ticks),
            Some(time_in_queue),
        ) = (n(3), n(5), n(6), n(7), n(9), n(10), n(12), n(13))
        else {
            continue;
        };
        out.push(DiskStat {
            name: f[2].to_string(),
            rd_ios,
            rd_sectors,
            rd_ticks,
            wr_ios,
            wr_sectors,
            wr_ticks,
            io_ticks,
            time_in_queue,
        });
    }
    out
}

/// One interface of `/proc/net/dev`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NetDev {
    /// Interface name.
    pub name: String,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Receive errors.
    pub rx_errs: u64,
    /// Received packets dropped.
    pub rx_drop: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Transmit errors.
    pub tx_errs: u64,
    /// Packets dropped on transmit.
    pub tx_drop: u64,
}

/// Parses `/proc/net/dev` (two header lines, then `name: rx×8 tx×8`).
pub fn net_dev(text: &str) -> Vec<NetDev> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let v: Vec<u64> = rest
            .split_whitespace()
            .map_while(|x| x.parse().ok())
            .collect();
        if v.len() < 12 {
            continue;
        }
        out.push(NetDev {
            name: name.trim().to_string(),
            rx_bytes: v[0],
            rx_packets: v[1],
            rx_errs: v[2],
            rx_drop: v[3],
            tx_bytes: v[8],
            tx_packets: v[9],
            tx_errs: v[10],
            tx_drop: v[11],
        });
    }
    out
}

/// TCP counters of `/proc/net/snmp`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSnmp {
    /// Segments received.
    pub in_segs: u64,
    /// Segments sent.
    pub out_segs: u64,
    /// Segments retransmitted.
    pub retrans_segs: u64,
}

/// Parses the `Tcp:` header and value lines of `/proc/net/snmp`, by column name.
pub fn snmp_tcp(text: &str) -> Option<TcpSnmp> {
    let mut lines = text.lines().filter(|l| l.starts_with("Tcp:"));
    let head: Vec<&str> = lines.next()?.split_whitespace().collect();
    let vals: Vec<&str> = lines.next()?.split_whitespace().collect();
    let get = |name: &str| -> Option<u64> {
        let i = head.iter().position(|h| *h == name)?;
        vals.get(i)?.parse().ok()
    };
    Some(TcpSnmp {
        in_segs: get("InSegs")?,
        out_segs: get("OutSegs")?,
        retrans_segs: get("RetransSegs")?,
    })
}

/// The machine-wide lines of `/proc/stat`. CPU times are in clock ticks, summed over CPUs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStat {
    /// user + nice (guest time is already inside user).
    pub user: u64,
    /// system + irq + softirq.
    pub sys: u64,
    /// iowait.
    pub iowait: u64,
    /// steal.
    pub steal: u64,
    /// Every state of the `cpu` line but guest and guest_nice (which are inside user and nice).
    pub total: u64,
    /// Context switches since boot.
    pub ctxt: u64,
    /// Runnable threads now.
    pub procs_running: u64,
    /// Threads blocked on I/O now.
    pub procs_blocked: u64,
}

/// Parses `/proc/stat`: the `cpu` line (user nice system idle iowait irq softirq steal …),
/// `ctxt`, `procs_running`, `procs_blocked`.
pub fn proc_stat(text: &str) -> Option<CpuStat> {
    let mut s = CpuStat::default();
    let mut have = (false, false, false, false);
    for line in text.lines() {
        let mut f = line.split_whitespace();
        match f.next() {
            Some("cpu") => {
                let v: Vec<u64> = f.take(8).map_while(|x| x.parse().ok()).collect();
                if v.len() < 8 {
                    return None;
                }
                s.user = v[0] + v[1];
                s.sys = v[2] + v[5] + v[6];
                s.iowait = v[4];
                s.steal = v[7];
                s.total = v.iter().sum();
                have.0 = true;
            }
            Some("ctxt") => {
                s.ctxt = f.next()?.parse().ok()?;
                have.1 = true;
            }
            Some("procs_running") => {
                s.procs_running = f.next()?.parse().ok()?;
                have.2 = true;
            }
            Some("procs_blocked") => {
                s.procs_blocked = f.next()?.parse().ok()?;
                have.3 = true;
            }
            _ => {}
        }
    }
    (have == (true, true, true, true)).then_some(s)
}

/// The fields of `/proc/PID/task/TID/stat` the per-process metrics use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskStat {
    /// State letter (field 3): `R`, `S`, `D`, …
    pub state: u8,
    /// Start time, clock ticks after boot (field 22).
    pub starttime: u64,
    /// Block I/O delay (and swap-in), clock ticks (field 42, `delayacct_blkio_ticks`): zero
    /// unless delay accounting is on.
    pub blkio_ticks: u64,
}

/// Parses a `stat` line of a process or thread ([`Stat`]).
pub fn task_stat(text: &str) -> Option<TaskStat> {
    let st = Stat::parse(text)?;
    Some(TaskStat {
        state: st.state,
        starttime: st.starttime,
        blkio_ticks: st.field(42)?.parse().ok()?,
    })
}

/// `/proc/PID/task/TID/schedstat`: ns on a CPU, ns waiting on a run queue, times switched in.
pub fn schedstat(text: &str) -> Option<(u64, u64, u64)> {
    let mut f = text.split_whitespace().map(|x| x.parse::<u64>().ok());
    Some((f.next()??, f.next()??, f.next()??))
}

/// `read_bytes` and `write_bytes` of `/proc/PID/io` (bytes the process caused to be fetched from
/// or sent to the storage layer).
pub fn proc_io(text: &str) -> Option<(u64, u64)> {
    let mut r = None;
    let mut w = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("read_bytes:") {
            r = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("write_bytes:") {
            w = v.trim().parse().ok();
        }
    }
    Some((r?, w?))
}

/// Read and write totals over devices of a cgroup v1 `blkio.throttle.io_service_bytes` or
/// `io_serviced` file (`MAJ:MIN Read N` lines; `Total` lines are skipped). A cgroup that has done
/// no I/O has only `Total 0`: zeros.
pub fn blkio_rw(text: &str) -> Option<(u64, u64)> {
    let mut r = 0u64;
    let mut w = 0u64;
    let mut any = false;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f[..] {
            [dev, op, v] if dev.contains(':') => {
                let v: u64 = v.parse().ok()?;
                match op {
                    "Read" => r = r.wrapping_add(v),
                    "Write" => w = w.wrapping_add(v),
                    _ => {}
                }
                any = true;
            }
            ["Total", _] => any = true,
            _ => {}
        }
    }
    any.then_some((r, w))
}

/// `nr_throttled` and `throttled_time` (ns) of a cgroup v1 `cpu.stat`.
pub fn cg_cpu_stat(text: &str) -> Option<(u64, u64)> {
    let mut n = None;
    let mut t = None;
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("nr_throttled", v)) => n = v.trim().parse().ok(),
            Some(("throttled_time", v)) => t = v.trim().parse().ok(),
            _ => {}
        }
    }
    Some((n?, t?))
}

/// TCP sockets in use in a network namespace, from its `net/sockstat` (`TCP: inuse N …`) or
/// `net/sockstat6` (`TCP6: inuse N`).
pub fn sockstat_tcp_inuse(text: &str) -> Option<u64> {
    for line in text.lines() {
        let mut f = line.split_whitespace();
        if matches!(f.next(), Some("TCP:") | Some("TCP6:")) && f.next() == Some("inuse") {
            return f.next()?.parse().ok();
        }
    }
    None
}

/// The inode in a `/proc/PID/fd/N` link to a socket (`socket:[12345]`).
pub fn socket_inode(link: &str) -> Option<u64> {
    link.strip_prefix("socket:[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The inode in a `/proc/PID/ns/net` link (`net:[4026531840]`).
pub fn netns_inode(link: &str) -> Option<u64> {
    link.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured on this machine (kernel 6.18): 20 fields per line.
    const DISKSTATS: &str = "   7       0 loop0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
 254       0 vda 44073 5986 3769906 40346 6903 18662 9386192 17404 0 4928 58179 4723 40 1218000 423 185 5
 253       0 zram0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0
";
    // A 4.x kernel: 14 fields.
    const DISKSTATS_OLD: &str =
        "   8       0 sda 120 3 9000 77 40 5 800 33 2 60 110\n   8       1 sda1 1 2\n";

    #[test]
    fn diskstats_lines() {
        let d = diskstats(DISKSTATS);
        assert_eq!(d.len(), 3);
        assert_eq!(
            d[1],
            DiskStat {
                name: "vda".into(),
                rd_ios: 44073,
                rd_sectors: 3769906,
                rd_ticks: 40346,
                wr_ios: 6903,
                wr_sectors: 9386192,
                wr_ticks: 17404,
                io_ticks: 4928,
                time_in_queue: 58179,
            }
        );
        let old = diskstats(DISKSTATS_OLD);
        assert_eq!(old.len(), 1, "the short line is skipped, not zeros");
        assert_eq!(
            (
                old[0].rd_ios,
                old[0].wr_ticks,
                old[0].io_ticks,
                old[0].time_in_queue
            ),
            (120, 33, 60, 110)
        );
    }

    const NET_DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    3193      29    0    0    0     0          0         0     3193      29    0    0    0     0       0          0
  eth0: 37212791    1532    1    2    0     0          0         0   100673    1082    3    4    0     0       0          0
veth.100: 5 6 0 0 0 0 0 0 7 8 0 0 0 0 0 0
";

    #[test]
    fn net_dev_lines() {
        let n = net_dev(NET_DEV);
        assert_eq!(n.len(), 3);
        assert_eq!(
            n[1],
            NetDev {
                name: "eth0".into(),
                rx_bytes: 37212791,
                rx_packets: 1532,
                rx_errs: 1,
                rx_drop: 2,
                tx_bytes: 100673,
                tx_packets: 1082,
                tx_errs: 3,
                tx_drop: 4,
            }
        );
        // A dotted VLAN name stays one name; the value list starts right after the colon.
        assert_eq!((n[2].name.as_str(), n[2].tx_bytes), ("veth.100", 7));
    }

    const SNMP: &str = "Ip: Forwarding DefaultTTL InReceives
Ip: 2 64 1555
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 16 2 0 4 0 1523 1070 7 0 6 0
Udp: InDatagrams NoPorts
Udp: 31 0
";

    #[test]
    fn snmp_tcp_by_column_name() {
        assert_eq!(
            snmp_tcp(SNMP),
            Some(TcpSnmp {
                in_segs: 1523,
                out_segs: 1070,
                retrans_segs: 7
            })
        );
        assert_eq!(snmp_tcp("Tcp: InSegs\nTcp: 5\n"), None);
        assert_eq!(snmp_tcp(""), None);
    }

    const STAT: &str = "cpu  23978 5 5273 67578 6292 1 2968 8 3 0
cpu0 11641 0 2419 34725 2765 0 1476 3 0 0
intr 1937120 0 0
ctxt 4567890
btime 1700000000
processes 12345
procs_running 3
procs_blocked 1
softirq 1 2 3
";

    #[test]
    fn proc_stat_cpu_line_and_counters() {
        let s = proc_stat(STAT).unwrap();
        assert_eq!(s.user, 23978 + 5);
        assert_eq!(s.sys, 5273 + 1 + 2968);
        assert_eq!(s.iowait, 6292);
        assert_eq!(s.steal, 8);
        assert_eq!(s.total, 23978 + 5 + 5273 + 67578 + 6292 + 1 + 2968 + 8);
        assert_eq!((s.ctxt, s.procs_running, s.procs_blocked), (4567890, 3, 1));
        assert_eq!(proc_stat("cpu 1 2 3\nctxt 5\n"), None);
    }

    #[test]
    fn task_stat_fields_after_the_name() {
        // A name with spaces and parentheses; field 22 = 778899, field 42 = 31.
        let mut fields: Vec<String> = (3..=52).map(|i| i.to_string()).collect();
        fields[0] = "D".into();
        fields[22 - 3] = "778899".into();
        fields[42 - 3] = "31".into();
        let line = format!("4242 (a (b) c) {}\n", fields.join(" "));
        assert_eq!(
            task_stat(&line),
            Some(TaskStat {
                state: b'D',
                starttime: 778899,
                blkio_ticks: 31
            })
        );
        // Captured: python3 on this machine (delay accounting off: field 42 is 0).
        let real = "23659 (python3) R 23657 23657 11295 0 -1 4194304 2193 0 0 0 1 0 0 0 20 0 1 0 \
                    4180311 14422016 2350 18446744073709551615 1 1 0 0 0 0 0 16781312 2 0 0 0 17 \
                    1 0 0 0 0 0 0 0 0 0 0 0 0 0";
        let t = task_stat(real).unwrap();
        assert_eq!((t.state, t.starttime, t.blkio_ticks), (b'R', 4180311, 0));
        assert_eq!(task_stat("1 (x) S 0 1"), None);
    }

    #[test]
    fn small_files() {
        assert_eq!(schedstat("93481 54221 1\n"), Some((93481, 54221, 1)));
        assert_eq!(schedstat("93481 54221\n"), None);
        let io = "rchar: 6976\nwchar: 0\nsyscr: 10\nsyscw: 0\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n";
        assert_eq!(proc_io(io), Some((4096, 8192)));
        assert_eq!(proc_io("rchar: 1\n"), None);
        let blk = "254:0 Read 1048576\n254:0 Write 2097152\n254:0 Sync 0\n254:0 Async 0\n\
                   254:0 Discard 0\n254:0 Total 3145728\n8:0 Read 10\n8:0 Write 0\nTotal 3145738\n";
        assert_eq!(blkio_rw(blk), Some((1048586, 2097152)));
        assert_eq!(blkio_rw("Total 0\n"), Some((0, 0)));
        assert_eq!(blkio_rw(""), None);
        let cpu =
            "nr_periods 120\nnr_throttled 7\nthrottled_time 123456789\nnr_bursts 0\nburst_time 0\n";
        assert_eq!(cg_cpu_stat(cpu), Some((7, 123456789)));
        assert_eq!(cg_cpu_stat("nr_periods 1\n"), None);
        assert_eq!(socket_inode("socket:[12345]"), Some(12345));
        assert_eq!(socket_inode("pipe:[12345]"), None);
        assert_eq!(socket_inode("/dev/null"), None);
        assert_eq!(netns_inode("net:[4026531840]"), Some(4026531840));
        let ss =
            "sockets: used 11\nTCP: inuse 3 orphan 0 tw 0 alloc 1 mem 234\nUDP: inuse 0 mem 0\n";
        assert_eq!(sockstat_tcp_inuse(ss), Some(3));
        assert_eq!(
            sockstat_tcp_inuse("TCP6: inuse 0\nUDP6: inuse 2\n"),
            Some(0)
        );
        assert_eq!(sockstat_tcp_inuse("UDP: inuse 4\n"), None);
    }
}
