//! The live demo (`culprit demo`): a 4-node emulated cluster with clients, traced and sampled,
//! a fault-free training run, then a run with one real fault in one node, and culprit's
//! diagnosis printed next to the truth.
//!
//! Windows are shortened so it finishes in about two and a half minutes (WinSize 10 s,
//! WinShift 5 s, 1 s tracer and sampler intervals, instead of seed 000's 60 s / 30 s and 10 s
//! profiles); the algorithm is the same.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::cluster::{check_machine, ClusterSpec};
use crate::error::{Error, Result};
use crate::fault::FaultKind;
use crate::programs::Programs;
use crate::run::{run_once, Instrument, Phases, RunPlan, RunRecord};
use crate::tools::{Tools, Verdicts, Windows};
use crate::workload::{Workload, WorkloadSpec};

/// Options of the demo.
#[derive(Clone, Debug)]
pub struct DemoConfig {
    /// The fault to inject.
    pub fault: FaultKind,
    /// The faulty node's index (`None`: chosen at random).
    pub node: Option<usize>,
    /// The workload.
    pub workload: Workload,
    /// Length of the fault-free training run's workload, seconds.
    pub train_s: f64,
    /// Phases of the faulty run.
    pub phases: Phases,
    /// Diagnosis windows.
    pub windows: Windows,
    /// Tracer and sampler record interval, ms.
    pub interval_ms: u32,
    /// Sample the machine too (the samples and events metrics).
    pub sampling: bool,
    /// Where builds, storage and data go (a directory on a real disk).
    pub work_dir: PathBuf,
}

impl DemoConfig {
    /// The demo's defaults: a slow disk on a random node under ddw.
    pub fn new(work_dir: impl Into<PathBuf>) -> Self {
        DemoConfig {
            fault: FaultKind::SlowDisk,
            node: None,
            workload: Workload::Ddw,
            train_s: 60.0,
            phases: Phases {
                settle_s: 2.0,
                before_s: 15.0,
                fault_s: 50.0,
                after_s: 10.0,
            },
            windows: Windows::SHORT,
            interval_ms: 1000,
            sampling: true,
            work_dir: work_dir.into(),
        }
    }
}

/// The demo's outcome.
#[derive(Clone, Debug)]
pub struct DemoOutcome {
    /// The faulty run.
    pub run: RunRecord,
    /// What diagnosis said about it.
    pub verdicts: Verdicts,
    /// True when exactly the faulty node was flagged by the combined verdict.
    pub correct: bool,
}

/// Runs the demo, printing progress and the result to `out`.
pub fn run_demo(cfg: &DemoConfig, tools: &Tools, out: &mut dyn Write) -> Result<DemoOutcome> {
    check_machine()?;
    crate::sys::catch_interrupts();
    let mut say = |s: &str| {
        let _ = writeln!(out, "{s}");
        let _ = out.flush();
    };
    let spec = ClusterSpec::new(cfg.work_dir.join("cluster"));
    let node = cfg.node.unwrap_or_else(|| random_below(spec.nodes));
    if node >= spec.nodes {
        return Err(Error::Config(format!(
            "--node {node}: the demo cluster has nodes 0 to {}",
            spec.nodes - 1
        )));
    }
    say(&format!(
        "culprit demo: {} emulated PVFS-like I/O servers (io0..io{}), {} clients, workload {}",
        spec.nodes,
        spec.nodes - 1,
        WorkloadSpec::default().clients,
        cfg.workload
    ));
    say(&format!(
        "  each node: own network namespace, {:.2} CPU, {} MB/s + {} IOPS of disk, {} Mbit/s link",
        spec.node_cpus,
        spec.disk_bps / 1_000_000,
        spec.disk_iops,
        spec.link_mbit.unwrap_or(0)
    ));
    say(&format!(
        "  shortened for the demo: WinSize {} s, WinShift {} s, k = {} (seed 000: 60 s, 30 s, 3); \
         {} ms tracer{} intervals",
        cfg.windows.size_s,
        cfg.windows.shift_s,
        cfg.windows.k,
        cfg.interval_ms,
        if cfg.sampling { " and sampler" } else { "" }
    ));
    if !cfg.sampling {
        say("  sampling off: only the count and time metrics (function-call tracing)");
    }

    say("[1/4] building the C programs (gcc -finstrument-functions -O2 -g)");
    let programs = Programs::build(&cfg.work_dir.join("bin"))?;
    let instrument = Instrument {
        tracing: true,
        sampling: cfg.sampling,
        tracer_interval_ms: cfg.interval_ms,
        sampler_interval_ms: cfg.interval_ms,
    };

    let train_plan = RunPlan {
        id: "training".into(),
        workload: cfg.workload,
        fault: None,
        phases: Phases {
            settle_s: cfg.phases.settle_s,
            before_s: cfg.train_s,
            fault_s: 0.0,
            after_s: 0.0,
        },
        instrument,
        cluster: spec.clone(),
        clients: WorkloadSpec::default(),
    };
    say(&format!(
        "[2/4] fault-free training run ({} s)",
        cfg.train_s
    ));
    let train = run_once(
        &train_plan,
        &programs,
        Some(tools),
        &cfg.work_dir.join("training"),
        &mut |s| say(&format!("      {s}")),
    )?;
    let thresholds = cfg.work_dir.join("thresholds.json");
    tools.train(
        std::slice::from_ref(&train.data_dir),
        &thresholds,
        cfg.windows,
    )?;
    say(&format!(
        "      thresholds learnt: {}",
        thresholds.display()
    ));

    let plan = RunPlan {
        id: "faulty".into(),
        workload: cfg.workload,
        fault: Some((cfg.fault, node)),
        phases: cfg.phases,
        instrument,
        cluster: spec,
        clients: WorkloadSpec::default(),
    };
    say(&format!(
        "[3/4] run with a fault: {} s fault-free, {} on io{node} for {} s, {} s after",
        cfg.phases.before_s, cfg.fault, cfg.phases.fault_s, cfg.phases.after_s
    ));
    let run = run_once(
        &plan,
        &programs,
        Some(tools),
        &cfg.work_dir.join("faulty"),
        &mut |s| say(&format!("      {s}")),
    )?;

    say(&format!(
        "[4/4] culprit diagnose {} --thresholds {}",
        run.data_dir.display(),
        thresholds.display()
    ));
    say("");
    let text = tools.diagnose_text(&run.data_dir, Some(&thresholds), cfg.windows)?;
    say(text.trim_end());
    let verdicts = tools.diagnose(&run.data_dir, Some(&thresholds), cfg.windows)?;
    let flagged = verdicts
        .flagged
        .get("combined")
        .cloned()
        .unwrap_or_default();
    let correct = flagged.len() == 1 && flagged.contains(&run.faulty_node);
    say("");
    say(&format!(
        "truth:   {} on {} from {} to {} — {}",
        cfg.fault,
        run.faulty_node,
        clock(run.t_fault_on),
        clock(run.t_fault_off),
        cfg.fault.describe()
    ));
    let by: Vec<String> = verdicts
        .flagged
        .iter()
        .filter(|(m, nodes)| m.as_str() != "combined" && nodes.contains(&run.faulty_node))
        .map(|(m, _)| m.clone())
        .collect();
    let verdict = if flagged.is_empty() {
        "no node flagged by the combined verdict".to_string()
    } else {
        format!(
            "flagged {}",
            flagged.iter().cloned().collect::<Vec<_>>().join(", ")
        )
    };
    let metrics = if by.is_empty() {
        String::new()
    } else if flagged.contains(&run.faulty_node) {
        format!(" (by {})", by.join(", "))
    } else {
        format!(" ({} flagged by {} alone)", run.faulty_node, by.join(", "))
    };
    say(&format!("culprit: {verdict}{metrics}"));
    say(if correct {
        "         correct"
    } else {
        "         NOT correct"
    });
    say(&format!(
        "data kept in {} (try `culprit report {}`)",
        cfg.work_dir.display(),
        run.data_dir.display()
    ));
    Ok(DemoOutcome {
        run,
        verdicts,
        correct,
    })
}

/// `HH:MM:SS UTC` (or in the local zone `culprit` shows) of a Unix time.
pub fn clock(t: f64) -> String {
    culprit_analysis::time::clock_zoned((t * 1e9) as u64)
}

fn random_below(n: usize) -> usize {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as usize ^ std::process::id() as usize)
        .unwrap_or(0);
    t % n.max(1)
}

/// A work directory for the demo on a real disk: `/var/tmp/culprit-demo`.
pub fn default_work_dir() -> PathBuf {
    Path::new("/var/tmp/culprit-demo").to_path_buf()
}
