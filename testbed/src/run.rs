//! One experimental run, seed 000's protocol (§"Experimental set-up"): a fresh cluster, the
//! servers traced and the machine sampled, settle, the workload fault-free for a while, a fault
//! injected into one node for a while, then fault-free again until the end.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, ClusterSpec, Tracing};
use crate::error::{Error, Result};
use crate::fault::FaultKind;
use crate::programs::Programs;
use crate::tools::{SamplerProcess, Tools};
use crate::workload::{Bound, Workload, WorkloadSpec};

/// Phase durations (seed 000: 15 s settle, 120 s fault-free, 300 s fault, ≥ 180 s after).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    /// Before the workload starts (servers and sampler running).
    pub settle_s: f64,
    /// Workload running, no fault.
    pub before_s: f64,
    /// Workload running with the fault.
    pub fault_s: f64,
    /// Workload running after the fault is removed.
    pub after_s: f64,
}

impl Phases {
    /// Seed 000's protocol.
    pub const SEED: Phases = Phases {
        settle_s: 15.0,
        before_s: 120.0,
        fault_s: 300.0,
        after_s: 180.0,
    };

    /// Seconds the workload runs.
    pub fn workload_s(&self) -> f64 {
        self.before_s + self.fault_s + self.after_s
    }
}

/// What is collected during a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Instrument {
    /// The tracer runtime in every server.
    pub tracing: bool,
    /// The sampler on the machine.
    pub sampling: bool,
    /// Tracer record interval (`CULPRIT_INTERVAL_MS`).
    pub tracer_interval_ms: u32,
    /// Sampler profile interval.
    pub sampler_interval_ms: u32,
}

impl Instrument {
    /// Nothing collected (the baseline of the overhead measurement).
    pub const NONE: Instrument = Instrument {
        tracing: false,
        sampling: false,
        tracer_interval_ms: 1000,
        sampler_interval_ms: 10_000,
    };
}

/// Resource use of one node during one phase.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseUsage {
    /// Node name.
    pub node: String,
    /// CPU seconds.
    pub cpu_s: f64,
    /// Disk bytes read + written.
    pub disk_bytes: u64,
}

/// The record of one run: what was done and what was observed (not yet the diagnosis).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Identifier (also the run directory's name).
    pub id: String,
    /// Workload name.
    pub workload: String,
    /// Fault name, or `none`.
    pub fault: String,
    /// Faulty node's name (empty when fault-free).
    pub faulty_node: String,
    /// Node names.
    pub nodes: Vec<String>,
    /// Data directory (`DATA/<node>/…`).
    pub data_dir: PathBuf,
    /// Wall-clock seconds since the epoch when the workload started / the fault started / the
    /// fault ended / the workload ended.
    pub t_start: f64,
    /// See `t_start`.
    pub t_fault_on: f64,
    /// See `t_start`.
    pub t_fault_off: f64,
    /// See `t_start`.
    pub t_end: f64,
    /// Disk throughput (MB/s, all nodes, rogue processes included) before / during / after the
    /// fault.
    pub disk_mbps: [f64; 3],
    /// Per phase (before, during, after), per node usage.
    pub usage: Vec<Vec<PhaseUsage>>,
    /// Packets dropped by a pktloss fault.
    pub dropped_packets: u64,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Sleeps `secs`, waking early with [`Error::Interrupted`] on SIGINT/SIGTERM.
pub fn sleep_checked(secs: f64) -> Result<()> {
    let end = Instant::now() + Duration::from_secs_f64(secs.max(0.0));
    while Instant::now() < end {
        if crate::sys::interrupted() {
            return Err(Error::Interrupted);
        }
        std::thread::sleep(Duration::from_millis(50).min(end - Instant::now()));
    }
    Ok(())
}

/// Everything one run needs.
#[derive(Clone, Debug)]
pub struct RunPlan {
    /// Run identifier.
    pub id: String,
    /// The workload.
    pub workload: Workload,
    /// The fault and the index of the faulty node, or `None` for a fault-free run.
    pub fault: Option<(FaultKind, usize)>,
    /// Phase durations.
    pub phases: Phases,
    /// What is collected.
    pub instrument: Instrument,
    /// The cluster.
    pub cluster: ClusterSpec,
    /// The clients.
    pub clients: WorkloadSpec,
}

/// Runs one plan on a fresh cluster in `run_dir`; data goes to `run_dir/data`. Progress lines
/// go to `progress`.
pub fn run_once(
    plan: &RunPlan,
    programs: &Programs,
    tools: Option<&Tools>,
    run_dir: &Path,
    progress: &mut dyn FnMut(&str),
) -> Result<RunRecord> {
    let data_dir = run_dir.join("data");
    let _ = std::fs::remove_dir_all(&data_dir);
    std::fs::create_dir_all(&data_dir).map_err(|e| Error::io("create data directory", e))?;
    let mut spec = plan.cluster.clone();
    spec.run_dir = run_dir.to_path_buf();
    let mut cluster = Cluster::create(spec, programs.clone())?;
    let nodes: Vec<String> = cluster.nodes().iter().map(|n| n.name.clone()).collect();
    let tracing = Tracing {
        runtime: match (plan.instrument.tracing, tools) {
            (true, Some(t)) => Some(t.runtime.clone()),
            (true, None) => return Err(Error::Config("tracing needs culprit's runtime".into())),
            _ => None,
        },
        data_dir: data_dir.clone(),
        interval_ms: plan.instrument.tracer_interval_ms,
    };
    if plan.workload == Workload::Ddr {
        // ddr reads files written beforehand, by untraced servers outside the sampled period.
        cluster.start_servers(&Tracing::default())?;
        cluster.prepare(plan.workload, &plan.clients)?;
        cluster.stop_servers(Duration::from_secs(5));
    }
    let mut sampler: Option<SamplerProcess> = match (plan.instrument.sampling, tools) {
        (true, Some(t)) => {
            Some(t.start_sampler(&cluster, &data_dir, plan.instrument.sampler_interval_ms)?)
        }
        (true, None) => return Err(Error::Config("sampling needs culprit".into())),
        _ => None,
    };
    cluster.start_servers(&tracing)?;
    progress(&format!(
        "{}: {} nodes up ({}), workload {}, settling {} s",
        plan.id,
        nodes.len(),
        cluster.prefix(),
        plan.workload,
        plan.phases.settle_s
    ));
    sleep_checked(plan.phases.settle_s)?;

    let p = plan.phases;
    let clients = cluster.start_clients(
        plan.workload,
        &plan.clients,
        Bound::Duration(p.workload_s()),
        &plan.id,
    )?;
    let mut rec = RunRecord {
        id: plan.id.clone(),
        workload: plan.workload.name().into(),
        fault: plan.fault.map_or("none".into(), |(k, _)| k.name().into()),
        faulty_node: plan.fault.map_or(String::new(), |(_, n)| nodes[n].clone()),
        nodes: nodes.clone(),
        data_dir: data_dir.clone(),
        t_start: unix_now(),
        ..RunRecord::default()
    };
    let mut snapshots = vec![cluster.usage()?];
    sleep_checked(p.before_s)?;
    snapshots.push(cluster.usage()?);
    rec.t_fault_on = unix_now();
    let active = match plan.fault {
        Some((kind, node)) => {
            progress(&format!(
                "{}: injecting {kind} into {} for {} s",
                plan.id, nodes[node], p.fault_s
            ));
            Some(cluster.inject(kind, node)?)
        }
        None => None,
    };
    sleep_checked(p.fault_s)?;
    if let Some(f) = active {
        rec.dropped_packets = cluster.clear(f)?.dropped_packets;
    }
    rec.t_fault_off = unix_now();
    snapshots.push(cluster.usage()?);
    if plan.fault.is_some() {
        progress(&format!(
            "{}: fault removed, running {} s more",
            plan.id, p.after_s
        ));
    }
    let results = clients.wait(Duration::from_secs_f64(p.after_s + 120.0))?;
    rec.t_end = unix_now();
    snapshots.push(cluster.usage()?);
    let _ = results;
    if !cluster.servers_alive() {
        return Err(Error::Command {
            cmd: "pvfs_server".into(),
            detail: "a server died during the run (see its log)".into(),
        });
    }
    cluster.stop_servers(Duration::from_secs(5));
    if let Some(s) = sampler.take() {
        s.stop()?;
    }
    for (i, w) in snapshots.windows(2).enumerate() {
        let (a, b) = (&w[0], &w[1]);
        rec.usage.push(
            a.iter()
                .zip(b)
                .map(|(x, y)| PhaseUsage {
                    node: x.node.clone(),
                    cpu_s: y.cpu_s - x.cpu_s,
                    disk_bytes: (y.disk_read + y.disk_write) - (x.disk_read + x.disk_write),
                })
                .collect(),
        );
        let secs = [p.before_s, p.fault_s, p.after_s][i];
        let bytes: u64 = rec.usage[i].iter().map(|u| u.disk_bytes).sum();
        rec.disk_mbps[i] = bytes as f64 / 1e6 / secs.max(1e-9);
    }
    cluster.teardown()?;
    Ok(rec)
}
