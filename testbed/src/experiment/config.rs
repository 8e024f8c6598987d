//! The experiment's parameters: the seed protocol, a shortened one, and what they parse into.

use serde::{Deserialize, Serialize};

use crate::cluster::ClusterSpec;
use crate::error::{Error, Result};
use crate::fault::FaultKind;
use crate::run::{Instrument, Phases};
use crate::tools::Windows;
use crate::workload::Workload;

/// The experiment's parameters.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ExperimentConfig {
    /// Label of the protocol (`seed` or `shortened`), printed with the table.
    pub protocol: String,
    /// Workloads.
    pub workloads: Vec<String>,
    /// Faults.
    pub faults: Vec<String>,
    /// Faulty runs per workload and fault; the faulty node cycles through the nodes.
    pub repetitions: usize,
    /// Fault-free training runs per workload.
    pub training_runs: usize,
    /// Further fault-free runs per workload, diagnosed to measure false positives without a
    /// fault.
    pub clean_runs: usize,
    /// Phases of every run.
    pub phases: Phases,
    /// Diagnosis windows: WinSize, WinShift, k.
    pub windows: (u32, u32, u32),
    /// Tracer and sampler intervals.
    pub instrument: Instrument,
    /// Overhead runs per workload and instrumentation setting.
    pub overhead_reps: usize,
    /// Fixed work of an overhead run, per client: bytes (ddw, ddr).
    pub overhead_bytes: u64,
    /// Fixed work of an overhead run, per client: transactions (postmark).
    pub overhead_transactions: u64,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Each node's disk bandwidth and IOPS budget (0 = unthrottled: the workloads become
    /// CPU-bound, the worst case for instrumentation overhead).
    #[serde(default = "default_disk")]
    pub disk: (u64, u64),
    /// Run the accuracy part (training, fault-free and faulty runs); false measures only the
    /// overhead.
    #[serde(default = "default_true")]
    pub accuracy: bool,
}

fn default_disk() -> (u64, u64) {
    let s = ClusterSpec::new("");
    (s.disk_bps, s.disk_iops)
}

fn default_true() -> bool {
    true
}

impl ExperimentConfig {
    /// The shortened protocol: 15 s + 40 s + 15 s runs, 10 s / 5 s windows, 1 s intervals, two
    /// faulty runs per workload and fault (six per fault), two training and two fault-free test
    /// runs per workload. About 80 minutes on this machine.
    pub fn shortened() -> Self {
        ExperimentConfig {
            protocol: "shortened".into(),
            workloads: Workload::ALL.iter().map(|w| w.name().to_string()).collect(),
            faults: FaultKind::ALL
                .iter()
                .map(|f| f.name().to_string())
                .collect(),
            repetitions: 2,
            training_runs: 2,
            clean_runs: 2,
            phases: Phases {
                settle_s: 2.0,
                before_s: 15.0,
                fault_s: 40.0,
                after_s: 15.0,
            },
            windows: (
                Windows::SHORT.size_s,
                Windows::SHORT.shift_s,
                Windows::SHORT.k,
            ),
            instrument: Instrument {
                tracing: true,
                sampling: true,
                tracer_interval_ms: 1000,
                sampler_interval_ms: 1000,
            },
            overhead_reps: 3,
            overhead_bytes: 96 << 20,
            overhead_transactions: 300,
            nodes: 4,
            disk: default_disk(),
            accuracy: true,
        }
    }

    /// Seed 000's protocol: 120 s + 300 s + 180 s runs, 60 s / 30 s windows, 1 s tracer and
    /// 10 s sampler intervals, ten runs per workload and fault.
    pub fn seed() -> Self {
        ExperimentConfig {
            protocol: "seed".into(),
            repetitions: 10,
            training_runs: 10,
            clean_runs: 5,
            phases: Phases::SEED,
            windows: (Windows::SEED.size_s, Windows::SEED.shift_s, Windows::SEED.k),
            instrument: Instrument {
                tracing: true,
                sampling: true,
                tracer_interval_ms: 1000,
                sampler_interval_ms: 10_000,
            },
            overhead_reps: 10,
            ..Self::shortened()
        }
    }

    pub(super) fn windows(&self) -> Windows {
        Windows {
            size_s: self.windows.0,
            shift_s: self.windows.1,
            k: self.windows.2,
        }
    }

    pub(super) fn parsed(&self) -> Result<(Vec<Workload>, Vec<FaultKind>)> {
        let w = self
            .workloads
            .iter()
            .map(|s| s.parse())
            .collect::<Result<Vec<Workload>>>()?;
        let f = self
            .faults
            .iter()
            .map(|s| s.parse())
            .collect::<Result<Vec<FaultKind>>>()?;
        if self.nodes < 3 {
            return Err(Error::Config(
                "peer comparison needs at least 3 nodes (4 or more is meant)".into(),
            ));
        }
        Ok((w, f))
    }
}
