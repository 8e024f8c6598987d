//! The lab's two verbs, `culprit demo` and `culprit experiment`: their options and what they
//! run. The `culprit` command links them only when built with its `lab` feature.

use std::io::Write as _;
use std::path::PathBuf;

use crate::demo::{default_work_dir, run_demo, DemoConfig};
use crate::error::{Error, Result};
use crate::experiment::{analyze, analyze_file, rediagnose, run_experiment, ExperimentConfig};
use crate::tools::Tools;
use crate::{FaultKind, Workload};

/// Arguments of `culprit demo`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example (as root):\n  culprit demo --fault receive-pktloss --node 1\n\n\
Faults: disk-hog, slow-disk, write-network-hog, read-network-hog, receive-pktloss, \
send-pktloss, cpu-hog, cpu-quota. Needs root (network namespaces, cgroups, nftables)."
)]
pub struct DemoArgs {
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
pub fn demo(args: DemoArgs) -> Result<i32> {
    let fault: FaultKind = args.fault.parse()?;
    let workload: Workload = args.workload.parse()?;
    if !(args.fault_secs >= 20.0 && args.train_secs >= 20.0) {
        return Err(Error::Config(
            "--fault-secs and --train-secs must be at least 20 (a few 10 s windows)".into(),
        ));
    }
    let tools = tools()?;
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
    out.flush().map_err(|e| Error::io("write", e))?;
    Ok(if outcome.correct { 0 } else { 1 })
}

/// Arguments of `culprit experiment`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples (as root):\n  \
culprit experiment --out /var/tmp/exp                  # shortened protocol, all faults\n  \
culprit experiment --protocol seed --out /var/tmp/seed # 120 s + 300 s + 180 s runs\n  \
culprit experiment --analyze --out /var/tmp/exp        # re-print the tables\n\n\
Results are appended to OUT/results.jsonl as they come; running again resumes.")]
pub struct ExperimentArgs {
    /// Directory for results (results.jsonl, table.md), thresholds and run data.
    #[arg(long, default_value = "/var/tmp/culprit-experiment")]
    out: PathBuf,
    /// `shortened` (15 s + 40 s + 15 s runs, 10 s / 5 s windows) or `seed` (120 + 300 + 180 s,
    /// 60 s / 30 s windows, 10 s sampler profiles).
    #[arg(long, default_value = "shortened")]
    protocol: String,
    /// Only print the tables of the results already in OUT (a directory, or a results file such
    /// as docs/accuracy/results-without-postmark.jsonl).
    #[arg(long)]
    analyze: bool,
    /// Re-train on the training runs of these workloads and re-diagnose the runs of
    /// `--workloads` from the data kept in OUT, e.g. `--rediagnose ddw,ddr --workloads ddw,ddr`
    /// (seed 000's "without postmark" columns). Writes `results-<tag>.jsonl`, `.md` and
    /// `thresholds-<tag>.json` to `--results-dir` (default OUT); the kept data is only read.
    #[arg(long, value_delimiter = ',', value_name = "TRAIN_WORKLOADS")]
    rediagnose: Option<Vec<String>>,
    /// With `--rediagnose`: where its results and thresholds go (created if missing), so that
    /// re-diagnosing kept runs writes nothing into the experiment's directory.
    #[arg(long, requires = "rediagnose", value_name = "DIR")]
    results_dir: Option<PathBuf>,
    /// With --rediagnose: name the output `OUT/results-<TAG>.jsonl` (default: from the
    /// workloads), so that re-diagnoses with other options sit side by side.
    #[arg(long, requires = "rediagnose")]
    tag: Option<String>,
    /// Analysis options added to every `culprit train` and `culprit diagnose`, space-separated,
    /// e.g. `--analysis-args="--smoothing 1"` (to measure an option on kept runs).
    #[arg(long, value_name = "ARGS", allow_hyphen_values = true)]
    analysis_args: Option<String>,
    /// Workloads, comma-separated (ddw, ddr, postmark).
    #[arg(long, value_delimiter = ',')]
    workloads: Option<Vec<String>>,
    /// Faults, comma-separated.
    #[arg(long, value_delimiter = ',')]
    faults: Option<Vec<String>>,
    /// Faulty runs per workload and fault (the faulty node cycles through the nodes).
    #[arg(long)]
    repetitions: Option<usize>,
    /// Fault-free training runs per workload.
    #[arg(long)]
    training_runs: Option<usize>,
    /// Fault-free test runs per workload (false positives without a fault).
    #[arg(long)]
    clean_runs: Option<usize>,
    /// Seconds of workload before the fault.
    #[arg(long)]
    before: Option<f64>,
    /// Seconds the fault lasts.
    #[arg(long)]
    fault_secs: Option<f64>,
    /// Seconds of workload after the fault.
    #[arg(long)]
    after: Option<f64>,
    /// WinSize and WinShift in seconds, e.g. `10,5`.
    #[arg(long, value_delimiter = ',', value_name = "SIZE,SHIFT")]
    windows: Option<Vec<u32>>,
    /// Overhead runs per workload and setting (0: skip Table 2).
    #[arg(long)]
    overhead_reps: Option<usize>,
    /// Only measure the overhead (Table 2), no accuracy runs.
    #[arg(long)]
    overhead_only: bool,
    /// Each node's disk bandwidth in MB/s and IOPS, e.g. `12,300`; `0,0` leaves the disks
    /// unthrottled (CPU-bound workloads: the worst case for overhead).
    #[arg(long, value_delimiter = ',', value_name = "MBPS,IOPS")]
    disk: Option<Vec<u64>>,
}

/// Runs `culprit experiment`.
pub fn experiment(args: ExperimentArgs) -> Result<i32> {
    if args.analyze {
        // OUT is the experiment's directory, or one of its results files.
        let table = if args.out.is_file() {
            analyze_file(&args.out)?
        } else {
            analyze(&args.out)?
        };
        print(&table)?;
        return Ok(0);
    }
    if let Some(train) = &args.rediagnose {
        let parse = |v: &[String]| -> Result<Vec<Workload>> {
            v.iter().map(|s| s.parse::<Workload>()).collect()
        };
        let train = parse(train)?;
        let test = match &args.workloads {
            Some(w) => parse(w)?,
            None => train.clone(),
        };
        let tag = args.tag.clone().unwrap_or_else(|| {
            format!(
                "train-{}-test-{}",
                train.iter().map(|w| w.name()).collect::<Vec<_>>().join("+"),
                test.iter().map(|w| w.name()).collect::<Vec<_>>().join("+")
            )
        });
        if tag.contains('/') || tag.is_empty() {
            return Err(Error::Config(format!("--tag {tag:?}: a name, not a path")));
        }
        let mut tools = tools()?;
        tools.analysis_args = analysis_args(&args.analysis_args);
        let mut say = |s: &str| eprintln!("culprit experiment: {s}");
        let dest = args.results_dir.as_deref().unwrap_or(&args.out);
        let path = rediagnose(&args.out, dest, &tools, &train, &test, &tag, &mut say)?;
        let table = analyze_file(&path)?;
        let md = path.with_extension("md");
        std::fs::write(&md, &table).map_err(|e| Error::io(format!("write {}", md.display()), e))?;
        print(&table)?;
        return Ok(0);
    }
    let mut cfg = match args.protocol.as_str() {
        "shortened" => ExperimentConfig::shortened(),
        "seed" => ExperimentConfig::seed(),
        other => {
            return Err(Error::Config(format!(
                "--protocol {other:?}: use `shortened` or `seed`"
            )))
        }
    };
    if let Some(w) = args.workloads {
        cfg.workloads = w;
    }
    if let Some(f) = args.faults {
        cfg.faults = f;
    }
    if let Some(n) = args.repetitions {
        cfg.repetitions = n;
    }
    if let Some(n) = args.training_runs {
        cfg.training_runs = n.max(1);
    }
    if let Some(n) = args.clean_runs {
        cfg.clean_runs = n;
    }
    if let Some(s) = args.before {
        cfg.phases.before_s = s;
    }
    if let Some(s) = args.fault_secs {
        cfg.phases.fault_s = s;
    }
    if let Some(s) = args.after {
        cfg.phases.after_s = s;
    }
    if let Some(w) = args.windows {
        if w.len() != 2 || w[1] == 0 || w[0] < w[1] {
            return Err(Error::Config(
                "--windows SIZE,SHIFT: want SIZE >= SHIFT > 0".into(),
            ));
        }
        cfg.windows = (w[0], w[1], cfg.windows.2);
    }
    if let Some(n) = args.overhead_reps {
        cfg.overhead_reps = n;
    }
    if let Some(d) = args.disk {
        if d.len() != 2 {
            return Err(Error::Config(
                "--disk MBPS,IOPS: two numbers, e.g. 12,300 (0,0: unthrottled)".into(),
            ));
        }
        cfg.disk = (d[0] * 1_000_000, d[1]);
    }
    cfg.accuracy = !args.overhead_only;
    let mut tools = tools()?;
    tools.analysis_args = analysis_args(&args.analysis_args);
    let mut say = |s: &str| eprintln!("culprit experiment: {s}");
    run_experiment(&cfg, &tools, &args.out, &mut say)?;
    let table = analyze(&args.out)?;
    let md = args.out.join("table.md");
    std::fs::write(&md, &table).map_err(|e| Error::io(format!("write {}", md.display()), e))?;
    print(&table)?;
    Ok(0)
}

fn analysis_args(a: &Option<String>) -> Vec<String> {
    a.as_deref()
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// culprit's tools beside the running `culprit` binary.
fn tools() -> Result<Tools> {
    let exe = std::env::current_exe().map_err(|e| Error::io("locate the culprit binary", e))?;
    Tools::beside(exe)
}

fn print(table: &str) -> Result<()> {
    writeln!(std::io::stdout().lock(), "{table}").map_err(|e| Error::io("write", e))
}
