//! `culprit demo`: the live demo on an emulated 4-node PVFS-like cluster (culprit-testbed).

use std::io::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;
use culprit_testbed::demo::{default_work_dir, run_demo, DemoConfig};
use culprit_testbed::tools::Tools;
use culprit_testbed::{FaultKind, Workload};

/// Arguments of `culprit demo`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example (as root):\n  culprit demo --fault receive-pktloss --node 1\n\n\
Faults: disk-hog, slow-disk, write-network-hog, read-network-hog, receive-pktloss, \
send-pktloss, cpu-hog, cpu-quota. Needs root (network namespaces, cgroups, nftables)."
)]
pub struct Args {
    /// The fault to inject.
    #[arg(long, default_value = "slow-disk")]
    fault: String,
    /// The faulty node, 0–3 (default: chosen at random).
    #[arg(long)]
    node: Option<usize>,
    /// The workload: ddw (large writes), ddr (large reads) or postmark (small files).
    #[arg(long, default_value = "ddw")]
    workload: String,
    /// Seconds the fault lasts.
    #[arg(long, default_value_t = 50.0)]
    fault_secs: f64,
    /// Seconds of the fault-free training run.
    #[arg(long, default_value_t = 60.0)]
    train_secs: f64,
    /// Trace only: no sampler (count and time metrics only).
    #[arg(long)]
    no_sample: bool,
    /// Directory for builds, storage and data (on a real disk, not tmpfs).
    #[arg(long)]
    work_dir: Option<PathBuf>,
}

/// Runs `culprit demo`. Exit status 0 when culprit flagged exactly the faulty node, 1 when not.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let fault: FaultKind = args.fault.parse()?;
    let workload: Workload = args.workload.parse()?;
    if !(args.fault_secs >= 20.0 && args.train_secs >= 20.0) {
        anyhow::bail!("--fault-secs and --train-secs must be at least 20 (a few 10 s windows)");
    }
    let exe = std::env::current_exe().context("locate the culprit binary")?;
    let tools = Tools::beside(exe)?;
    let mut cfg = DemoConfig::new(args.work_dir.unwrap_or_else(default_work_dir));
    cfg.fault = fault;
    cfg.node = args.node;
    cfg.workload = workload;
    cfg.phases.fault_s = args.fault_secs;
    cfg.train_s = args.train_secs;
    cfg.sampling = !args.no_sample;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let outcome = run_demo(&cfg, &tools, &mut out)?;
    out.flush()?;
    Ok(if outcome.correct { 0 } else { 1 })
}
