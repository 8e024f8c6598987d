use std::collections::HashMap;
use std::net::SocketAddr;

use culprit_format::os_metrics::name;

use super::machine::disk_values;
use super::parse;
use super::processes::{born_since, proc_values, ProcSums};
use super::read::{delta, Out};
use super::sockets::{endpoint_matches, sock_values, SockSums};
use super::view::node_views;
use crate::nodes::{NodeRule, Nodes, Scope};

fn disk(rd_ios: u64, wr_ios: u64, sectors: u64, ticks: u64, io: u64, q: u64) -> parse::DiskStat {
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
