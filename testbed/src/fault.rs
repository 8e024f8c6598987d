//! Real faults on one node (seed 000 §"Fault injection", and more): rogue processes inside the
//! node, limits on the node's cgroup, packet loss where a network would drop. Nothing in the
//! server pretends to be slow; the node's resources really are contended.

use std::fmt;
use std::process::Command;
use std::str::FromStr;

use crate::cluster::{Cluster, Place, HOG_PORT};
use crate::error::{Error, Result};

/// A kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum FaultKind {
    /// A rogue process in the node's cgroups writing and reading its storage with O_DIRECT,
    /// 1 MiB at a time (seed 000's `dd` disk hog read only; here a node's read and write budgets
    /// are separate throttles, so the hog uses both): it competes for the node's disk.
    DiskHog,
    /// The node's disk made slow: its blkio throttle cut to a quarter (stands in for seed 000's
    /// disk-busy, which used SCSI generic devices these machines do not have).
    SlowDisk,
    /// A third party floods a sink on the node (seed 000's write-network-hog).
    WriteNetHog,
    /// The node floods a third party (seed 000's read-network-hog).
    ReadNetHog,
    /// 5 % of the packets arriving at the node are dropped on its ingress (receive-pktloss).
    RecvPktLoss,
    /// 5 % of the node's packets are dropped on the clients' ingress (send-pktloss).
    SendPktLoss,
    /// A CPU spinner inside the node's cgroup.
    CpuHog,
    /// The node's CPU quota cut to a tenth.
    CpuQuota,
}

impl FaultKind {
    /// Every fault, in table order.
    pub const ALL: [FaultKind; 8] = [
        FaultKind::DiskHog,
        FaultKind::SlowDisk,
        FaultKind::WriteNetHog,
        FaultKind::ReadNetHog,
        FaultKind::RecvPktLoss,
        FaultKind::SendPktLoss,
        FaultKind::CpuHog,
        FaultKind::CpuQuota,
    ];

    /// The fault's name, as seed 000 writes it.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::DiskHog => "disk-hog",
            FaultKind::SlowDisk => "slow-disk",
            FaultKind::WriteNetHog => "write-network-hog",
            FaultKind::ReadNetHog => "read-network-hog",
            FaultKind::RecvPktLoss => "receive-pktloss",
            FaultKind::SendPktLoss => "send-pktloss",
            FaultKind::CpuHog => "cpu-hog",
            FaultKind::CpuQuota => "cpu-quota",
        }
    }

    /// One line saying what the fault does.
    pub fn describe(self) -> &'static str {
        match self {
            FaultKind::DiskHog => {
                "a rogue `diskhog` process on the node writes and reads its disk with O_DIRECT"
            }
            FaultKind::SlowDisk => {
                "the node's disk throttled to a quarter of its bandwidth and IOPS"
            }
            FaultKind::WriteNetHog => "a third party floods a sink on the node over TCP",
            FaultKind::ReadNetHog => "the node floods a third party over TCP",
            FaultKind::RecvPktLoss => {
                "5 % of packets arriving at the node dropped (nftables, node ingress)"
            }
            FaultKind::SendPktLoss => {
                "5 % of the node's packets dropped (nftables, clients' ingress)"
            }
            FaultKind::CpuHog => "a rogue `cpuhog` spinner inside the node's CPU share",
            FaultKind::CpuQuota => "the node's CPU quota cut to a tenth",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FaultKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        FaultKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = FaultKind::ALL.iter().map(|k| k.name()).collect();
                Error::Config(format!("unknown fault {s:?}; faults: {}", names.join(", ")))
            })
    }
}

/// Packet-loss percentage of the pktloss faults (seed 000: 5 %).
pub const PKTLOSS_PERCENT: u32 = 5;

/// An injected fault, to be cleared with [`Cluster::clear`]. If it is never cleared, dropping
/// the cluster removes it anyway (its processes, cgroups and namespaces go).
#[derive(Debug)]
#[must_use = "clear the fault with Cluster::clear"]
pub struct ActiveFault {
    /// The fault.
    pub kind: FaultKind,
    /// Index of the faulty node.
    pub node: usize,
    pids: Vec<u32>,
    nft: Option<(Place, String)>,
}

/// What a cleared fault did.
#[derive(Clone, Debug, Default)]
pub struct FaultReport {
    /// Packets the nftables rule dropped (pktloss faults).
    pub dropped_packets: u64,
}

impl Cluster {
    /// Injects `kind` into node `node`.
    pub fn inject(&mut self, kind: FaultKind, node: usize) -> Result<ActiveFault> {
        if node >= self.nodes().len() {
            return Err(Error::Config(format!(
                "no node {node} (the cluster has {})",
                self.nodes().len()
            )));
        }
        let rogue = self.programs().rogue.clone();
        let node_ip = self.nodes()[node].host.ip.clone();
        let third_ip = self.third_party().ip.clone();
        let tag = format!("{}-{}", kind.name(), self.nodes()[node].name);
        let mut fault = ActiveFault {
            kind,
            node,
            pids: Vec::new(),
            nft: None,
        };
        let spec = self.spec().clone();
        match kind {
            FaultKind::DiskHog => {
                let file = self.nodes()[node].storage.join("diskhog.dat");
                let mut c = Command::new(&rogue);
                c.arg("diskhog").arg(file).arg((1u32 << 20).to_string());
                fault
                    .pids
                    .push(self.spawn_owned(Place::Node(node), c, &tag)?);
            }
            FaultKind::SlowDisk => {
                let dev = self.storage_device();
                self.node_group(node).set_disk_limits(
                    dev,
                    spec.disk_bps / 4,
                    spec.disk_iops / 4,
                )?;
            }
            FaultKind::CpuHog => {
                let mut c = Command::new(&rogue);
                c.arg("cpuhog");
                fault
                    .pids
                    .push(self.spawn_owned(Place::Node(node), c, &tag)?);
            }
            FaultKind::CpuQuota => {
                self.node_group(node)
                    .set_cpu_quota(Some(spec.node_cpus / 10.0))?;
            }
            FaultKind::WriteNetHog => {
                let mut sink = Command::new(&rogue);
                sink.args(["netsink", &HOG_PORT.to_string()]);
                fault.pids.push(self.spawn_owned(
                    Place::Node(node),
                    sink,
                    &format!("{tag}-sink"),
                )?);
                let mut src = Command::new(&rogue);
                src.args(["netsource", &format!("{node_ip}:{HOG_PORT}")]);
                fault.pids.push(self.spawn_owned(
                    Place::ThirdParty,
                    src,
                    &format!("{tag}-source"),
                )?);
            }
            FaultKind::ReadNetHog => {
                let mut sink = Command::new(&rogue);
                sink.args(["netsink", &HOG_PORT.to_string()]);
                fault.pids.push(self.spawn_owned(
                    Place::ThirdParty,
                    sink,
                    &format!("{tag}-sink"),
                )?);
                let mut src = Command::new(&rogue);
                src.args(["netsource", &format!("{third_ip}:{HOG_PORT}")]);
                fault.pids.push(self.spawn_owned(
                    Place::Node(node),
                    src,
                    &format!("{tag}-source"),
                )?);
            }
            FaultKind::RecvPktLoss => {
                let table = table_name(self.prefix());
                let host = self.nodes()[node].host.clone();
                self.network()
                    .add_drop(&host, None, PKTLOSS_PERCENT, &table)?;
                fault.nft = Some((Place::Node(node), table));
            }
            FaultKind::SendPktLoss => {
                let table = table_name(self.prefix());
                let from = self.nodes()[node].host.clone();
                let clients = self.clients_host().clone();
                self.network()
                    .add_drop(&clients, Some(&from), PKTLOSS_PERCENT, &table)?;
                fault.nft = Some((Place::Clients, table));
            }
        }
        Ok(fault)
    }

    /// Removes an injected fault: stops its processes, restores the node's limits, deletes its
    /// nftables table.
    pub fn clear(&mut self, fault: ActiveFault) -> Result<FaultReport> {
        let mut report = FaultReport::default();
        for pid in &fault.pids {
            self.stop_owned(*pid);
        }
        let spec = self.spec().clone();
        match fault.kind {
            FaultKind::SlowDisk => {
                let dev = self.storage_device();
                self.node_group(fault.node)
                    .set_disk_limits(dev, spec.disk_bps, spec.disk_iops)?;
            }
            FaultKind::CpuQuota => {
                self.node_group(fault.node)
                    .set_cpu_quota(Some(spec.node_cpus))?;
            }
            FaultKind::DiskHog => {
                let _ = std::fs::remove_file(self.nodes()[fault.node].storage.join("diskhog.dat"));
            }
            _ => {}
        }
        if let Some((place, table)) = &fault.nft {
            let host = match place {
                Place::Node(i) => self.nodes()[*i].host.clone(),
                _ => self.clients_host().clone(),
            };
            report.dropped_packets = self.network().remove_drop(&host, table)?;
        }
        Ok(report)
    }
}

/// nft table names: short, and unique to the run.
fn table_name(prefix: &str) -> String {
    format!("culprit_{}", prefix.replace('-', "_"))
}
