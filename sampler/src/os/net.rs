//! A network namespace's interface and TCP SNMP counters, and its `sock_diag` socket.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use culprit_format::os_metrics::name;

use super::parse;
use super::read::{delta, Reread};
use crate::sys::{self, DiagSocket};

/// One per-namespace rate: (interface, metric name, value).
pub(super) type NsRate = (Option<Arc<str>>, &'static str, f64);

/// A network namespace's files and `sock_diag` socket.
#[derive(Debug)]
pub(super) struct NetView {
    pub(super) dev: Option<Reread>,
    pub(super) snmp: Option<Reread>,
    pub(super) sockstat: Option<Reread>,
    pub(super) sockstat6: Option<Reread>,
    pub(super) diag: Option<DiagSocket>,
    pub(super) prev_dev: HashMap<String, parse::NetDev>,
    pub(super) prev_snmp: Option<parse::TcpSnmp>,
    pub(super) used: u64,
}

impl NetView {
    /// Opens the files and socket of the calling thread's namespace.
    pub(super) fn here() -> NetView {
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
    pub(super) fn enter(ns: &Path) -> io::Result<NetView> {
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
    pub(super) fn tcp_families(&mut self) -> (bool, bool) {
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
    pub(super) fn counters(&mut self, span: f64, out: &mut Vec<NsRate>) {
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
