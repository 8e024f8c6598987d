//! TCP connections: a node's per-connection sums, and what the last listings said.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;

use culprit_format::os_metrics::name;

use super::diag;
use super::read::Out;
use super::view::Endpoint;

/// Per-connection sums of one node.
#[derive(Debug, Default)]
pub(super) struct SockSums {
    pub(super) cwnd: Vec<u32>,
    pub(super) rtt_us: Vec<u32>,
    pub(super) unacked: u64,
    pub(super) retrans: u64,
}

pub(super) fn sock_values(s: &mut SockSums, span: f64, out: &mut Out) {
    out.put(name::TCP_CONNS, None, Some(s.cwnd.len() as f64));
    out.put(name::TCP_RETRANS, None, Some(s.retrans as f64 / span));
    out.put(name::TCP_UNACKED, None, Some(s.unacked as f64));
    if s.cwnd.is_empty() {
        return;
    }
    s.cwnd.sort_unstable();
    s.rtt_us.sort_unstable();
    out.put(name::TCP_CWND_MIN, None, Some(s.cwnd[0] as f64));
    out.put(name::TCP_CWND_MED, None, Some(median(&s.cwnd)));
    out.put(name::TCP_RTT_MED, None, Some(median(&s.rtt_us) / 1000.0));
    out.put(
        name::TCP_RTT_MAX,
        None,
        s.rtt_us.last().map(|&r| r as f64 / 1000.0),
    );
}

pub(super) fn median(sorted: &[u32]) -> f64 {
    let n = sorted.len();
    if n % 2 == 1 {
        sorted[n / 2] as f64
    } else {
        (sorted[n / 2 - 1] as f64 + sorted[n / 2] as f64) / 2.0
    }
}

pub(super) fn endpoint_matches(e: &Endpoint, local: SocketAddr) -> bool {
    e.addr == local.ip() && e.port.is_none_or(|p| p == local.port())
}

/// Full listings of a namespace's connections are a walk of the kernel's whole socket table:
/// between them (at most this many ticks apart), the sockets already known are asked for one by
/// one. A namespace is listed again at once when a node holds a socket not known yet.
pub(super) const FULL_LISTING_EVERY: u64 = 10;

/// What the last listings said: each TCP socket's namespace and identity.
#[derive(Debug, Default)]
pub(super) struct SockCache {
    /// Socket inode → (namespace, identity).
    pub(super) ids: HashMap<u64, (u64, diag::SockId)>,
    /// Inodes the nodes hold that were in no listing (not TCP, listening, not connected).
    pub(super) other: HashSet<u64>,
    /// Sockets a node has by its address, not by a process holding them.
    pub(super) by_endpoint: HashSet<u64>,
    /// Namespace → tick of its last full listing.
    pub(super) listed: HashMap<u64, u64>,
}

impl SockCache {
    pub(super) fn knows(&self, inode: u64) -> bool {
        self.ids.contains_key(&inode) || self.other.contains(&inode)
    }

    /// Records a full listing of namespace `ns`; `held` are the inodes the nodes hold.
    pub(super) fn relist<'a>(
        &mut self,
        ns: u64,
        tick: u64,
        list: &[diag::TcpSock],
        held: impl Iterator<Item = &'a u64>,
    ) {
        self.ids.retain(|_, (n, _)| *n != ns);
        for s in list.iter().filter(|s| s.inode != 0) {
            self.ids.insert(s.inode, (ns, s.id));
            self.other.remove(&s.inode);
        }
        for &ino in held {
            if !self.ids.contains_key(&ino) {
                self.other.insert(ino);
            }
        }
        self.listed.insert(ns, tick);
    }

    pub(super) fn of_ns(&self, ns: u64) -> Vec<(u64, diag::SockId)> {
        self.ids
            .iter()
            .filter(|(_, (n, _))| *n == ns)
            .map(|(&ino, (_, id))| (ino, *id))
            .collect()
    }

    /// Keeps what is still in use: sockets seen this tick, inodes still held.
    pub(super) fn forget_except(&mut self, seen: &HashSet<(u64, u64)>, held: &HashMap<u64, usize>) {
        self.other.retain(|ino| held.contains_key(ino));
        self.by_endpoint
            .retain(|ino| seen.iter().any(|(_, i)| i == ino));
        self.ids
            .retain(|ino, (ns, _)| held.contains_key(ino) || seen.contains(&(*ns, *ino)));
    }
}
