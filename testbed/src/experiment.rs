//! The accuracy experiment (seed 000 §"Experimental set-up", Tables 1 and 2): fault-free runs of
//! every workload, `culprit train` on them, then runs of every workload × fault with the fault in
//! a different node each time, each diagnosed; true and false positives per fault and metric
//! with 95 % Wilson intervals, and the instrumentation overhead per workload.
//!
//! Every result is appended to `OUT/results.jsonl` as it is produced, so an interrupted
//! experiment resumes where it stopped and a finished one can be re-analysed
//! ([`analyze`]) without running anything.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{BufRead as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, ClusterSpec, Tracing};
use crate::error::{Error, Result};
use crate::fault::FaultKind;
use crate::programs::Programs;
use crate::run::{run_once, Instrument, Phases, RunPlan, RunRecord};
use crate::tools::{Tools, Windows, WHITE_BOX};
use crate::workload::{Bound, Workload, WorkloadSpec};

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

    fn windows(&self) -> Windows {
        Windows {
            size_s: self.windows.0,
            shift_s: self.windows.1,
            k: self.windows.2,
        }
    }

    fn parsed(&self) -> Result<(Vec<Workload>, Vec<FaultKind>)> {
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

/// One line of `results.jsonl`.
// A few hundred lines per experiment, read once: the size of the run variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ResultLine {
    /// The configuration of the experiment that wrote the file.
    Config(ExperimentConfig),
    /// A diagnosed run.
    Run {
        /// `train`, `clean` or `faulty`.
        role: String,
        /// What was run and observed.
        record: RunRecord,
        /// Per metric, the nodes flagged (empty for training runs, which are not diagnosed).
        flagged: BTreeMap<String, BTreeSet<String>>,
        /// Metrics the diagnosis had data for.
        metrics: BTreeSet<String>,
        /// `culprit diagnose` exit status.
        exit: i32,
        /// The culprits of an untrained diagnosis of the same data (no thresholds file); absent
        /// from results recorded before it was measured.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        untrained: Option<BTreeSet<String>>,
        /// The replica of `diagnose --requests`' top-ranked method (seed 004, per-request
        /// RPCA); absent from results recorded before it was measured.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        requests: Option<BTreeSet<String>>,
        /// The nodes whose own interval × function RPCA flagged a function (seed 004 without
        /// request ids); absent likewise.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        series: Option<BTreeSet<String>>,
        /// The resource named for each culprit of the combined verdict (results written before
        /// resources were named: none).
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        resources: BTreeMap<String, String>,
        /// `diagnose --baseline` with normal learnt from the run's own first third
        /// ([`BASELINE_SPAN`]); absent from results recorded before it was measured.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        baseline: Option<BaselineColumn>,
    },
    /// One overhead measurement.
    Overhead {
        /// Workload name.
        workload: String,
        /// `none`, `sampling`, `tracing` or `both`.
        setting: String,
        /// Repetition.
        rep: usize,
        /// Seconds the fixed work took (slowest client).
        runtime_s: f64,
    },
}

fn read_results(path: &Path) -> Result<Vec<ResultLine>> {
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(format!("open {}", path.display()), e)),
    };
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line.map_err(|e| Error::io("read results", e))?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(
            serde_json::from_str(&line)
                .map_err(|e| Error::Parse(format!("{} line {}: {e}", path.display(), i + 1)))?,
        );
    }
    Ok(out)
}

fn append(path: &Path, line: &ResultLine) -> Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io(format!("open {}", path.display()), e))?;
    let text = serde_json::to_string(line).map_err(|e| Error::Parse(e.to_string()))?;
    writeln!(f, "{text}").map_err(|e| Error::io("write results", e))?;
    f.sync_data().map_err(|e| Error::io("sync results", e))
}

/// The baseline of the experiment's `baseline` column: each run's own first third. The
/// protocol's fault-free lead must cover it (`--before` ≥ a third of the run).
pub const BASELINE_SPAN: &str = "first 1/3";

/// What `diagnose --baseline` said of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BaselineColumn {
    /// The culprits.
    pub culprits: BTreeSet<String>,
    /// The nodes reported as of another role.
    pub roles: BTreeSet<String>,
    /// The baseline's warnings (an anomaly in it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// Every verdict the experiment records of one scored run.
struct Judged {
    v: crate::tools::Verdicts,
    untrained: BTreeSet<String>,
    req: crate::tools::RequestVerdicts,
    baseline: BaselineColumn,
}

impl Judged {
    /// Diagnoses the run in `data` every way the experiment measures: trained on `thresholds`
    /// ([`diagnose_all`]), untrained, by requests, and with a baseline of its own.
    fn of(tools: &Tools, data: &Path, thresholds: &Path, windows: Windows) -> Result<Self> {
        Ok(Judged {
            v: diagnose_all(tools, data, thresholds, windows)?,
            untrained: untrained_culprits(tools, data, windows)?,
            req: tools.diagnose_requests(data)?,
            baseline: baseline_column(tools, data, windows)?,
        })
    }

    /// The progress line.
    fn say(&self, id: &str, rec: &RunRecord) -> String {
        format!(
            "{id}: truth {} {}; flagged {:?} {:?}; untrained {:?}; baseline {:?} (roles {:?}); \
             requests {:?}, series {:?}",
            rec.fault,
            rec.faulty_node,
            self.v.flagged.get("combined").cloned().unwrap_or_default(),
            self.v.resources,
            self.untrained,
            self.baseline.culprits,
            self.baseline.roles,
            self.req.requests,
            self.req.series
        )
    }

    /// The result line.
    fn line(self, role: String, record: RunRecord) -> ResultLine {
        ResultLine::Run {
            role,
            record,
            flagged: self.v.flagged,
            metrics: self.v.metrics,
            exit: self.v.exit,
            untrained: Some(self.untrained),
            requests: Some(self.req.requests),
            series: Some(self.req.series),
            resources: self.v.resources,
            baseline: Some(self.baseline),
        }
    }
}

/// Runs the experiment (resuming from `out/results.jsonl`), printing progress to `say`.
pub fn run_experiment(
    cfg: &ExperimentConfig,
    tools: &Tools,
    out: &Path,
    say: &mut dyn FnMut(&str),
) -> Result<()> {
    crate::cluster::check_machine()?;
    crate::sys::catch_interrupts();
    let (workloads, faults) = cfg.parsed()?;
    std::fs::create_dir_all(out).map_err(|e| Error::io(format!("create {}", out.display()), e))?;
    let results = out.join("results.jsonl");
    let previous = read_results(&results)?;
    let done: BTreeSet<String> = previous
        .iter()
        .filter_map(|l| match l {
            ResultLine::Run { record, .. } => Some(record.id.clone()),
            _ => None,
        })
        .collect();
    match previous.iter().find_map(|l| match l {
        ResultLine::Config(c) => Some(c),
        _ => None,
    }) {
        None => append(&results, &ResultLine::Config(cfg.clone()))?,
        Some(c) if serde_json::to_value(c).ok() != serde_json::to_value(cfg).ok() => {
            return Err(Error::Config(format!(
                "{} holds an experiment with other parameters; resume it with the same options \
                 or choose another output directory",
                results.display()
            )));
        }
        Some(_) => {}
    }
    let programs = Programs::build(&out.join("bin"))?;
    let mut spec = ClusterSpec::new(out.join("cluster"));
    spec.nodes = cfg.nodes;
    (spec.disk_bps, spec.disk_iops) = cfg.disk;
    let clients = WorkloadSpec::default();
    let windows = cfg.windows();
    let plan = |id: String, w: Workload, fault: Option<(FaultKind, usize)>| RunPlan {
        id,
        workload: w,
        fault,
        phases: cfg.phases,
        instrument: cfg.instrument,
        cluster: spec.clone(),
        clients: clients.clone(),
    };

    if cfg.accuracy {
        // 1. Fault-free training runs, then train.
        let mut train_dirs: Vec<PathBuf> = Vec::new();
        for w in &workloads {
            for r in 0..cfg.training_runs {
                let id = format!("train-{w}-{r}");
                let dir = out.join("runs").join(&id);
                if !done.contains(&id) {
                    let rec = run_once(
                        &plan(id.clone(), *w, None),
                        &programs,
                        Some(tools),
                        &dir,
                        say,
                    )?;
                    append(
                        &results,
                        &ResultLine::Run {
                            role: "train".into(),
                            record: rec,
                            flagged: BTreeMap::new(),
                            metrics: BTreeSet::new(),
                            exit: 0,
                            untrained: None,
                            requests: None,
                            series: None,
                            resources: BTreeMap::new(),
                            baseline: None,
                        },
                    )?;
                }
                train_dirs.push(dir.join("data"));
            }
        }
        let thresholds = out.join("thresholds.json");
        say(&format!("training on {} fault-free runs", train_dirs.len()));
        tools.train(&train_dirs, &thresholds, windows)?;

        // 2. Fault-free test runs and faulty runs, each diagnosed.
        // (run id, role, workload, fault and faulty node)
        type Job = (String, String, Workload, Option<(FaultKind, usize)>);
        let mut jobs: Vec<Job> = Vec::new();
        for w in &workloads {
            for r in 0..cfg.clean_runs {
                jobs.push((format!("clean-{w}-{r}"), "clean".into(), *w, None));
            }
        }
        for r in 0..cfg.repetitions {
            for f in &faults {
                for w in &workloads {
                    let node = r % cfg.nodes;
                    jobs.push((
                        format!("faulty-{w}-{f}-{r}"),
                        "faulty".into(),
                        *w,
                        Some((*f, node)),
                    ));
                }
            }
        }
        let total = jobs.len();
        for (i, (id, role, w, fault)) in jobs.into_iter().enumerate() {
            if done.contains(&id) {
                continue;
            }
            say(&format!("run {}/{total}: {id}", i + 1));
            let dir = out.join("runs").join(&id);
            let rec = run_once(
                &plan(id.clone(), w, fault),
                &programs,
                Some(tools),
                &dir,
                say,
            )?;
            let judged = Judged::of(tools, &rec.data_dir, &thresholds, windows)?;
            say(&format!("  {}", judged.say(&id, &rec)));
            append(&results, &judged.line(role, rec))?;
            // The traces of scored runs are kept (re-analysis needs only the JSON lines; the data
            // lets a changed diagnosis be re-run). Storage is removed by the cluster's teardown.
        }
    }

    // 3. Overhead: fixed work, uninstrumented vs instrumented, interleaved.
    let have: BTreeSet<(String, String, usize)> = read_results(&results)?
        .into_iter()
        .filter_map(|l| match l {
            ResultLine::Overhead {
                workload,
                setting,
                rep,
                ..
            } => Some((workload, setting, rep)),
            _ => None,
        })
        .collect();
    for w in &workloads {
        if (0..cfg.overhead_reps).all(|r| {
            SETTINGS
                .iter()
                .all(|s| have.contains(&(w.name().into(), s.to_string(), r)))
        }) {
            continue;
        }
        let mut cl = Cluster::create(
            ClusterSpec {
                run_dir: out.join("overhead"),
                ..spec.clone()
            },
            programs.clone(),
        )?;
        if *w == Workload::Ddr {
            cl.start_servers(&Tracing::default())?;
            cl.prepare(*w, &clients)?;
            cl.stop_servers(Duration::from_secs(5));
        }
        for rep in 0..cfg.overhead_reps {
            for setting in SETTINGS {
                if have.contains(&(w.name().into(), setting.to_string(), rep)) {
                    continue;
                }
                let t = measure_runtime(
                    &mut cl,
                    tools,
                    *w,
                    &clients,
                    setting,
                    cfg,
                    &out.join("overhead"),
                )?;
                say(&format!("overhead {w} {setting} rep {rep}: {t:.2} s"));
                append(
                    &results,
                    &ResultLine::Overhead {
                        workload: w.name().into(),
                        setting: setting.into(),
                        rep,
                        runtime_s: t,
                    },
                )?;
            }
        }
        cl.teardown()?;
    }
    Ok(())
}

/// Diagnoses a run three times: with every metric (the combined verdict, each metric's, the
/// resources), with the OS metrics alone (`black-box`, seed 001) and with the white-box metrics
/// alone (`white-box`, seed 000) — each a verdict a user with only that data would get.
fn diagnose_all(
    tools: &Tools,
    data: &Path,
    thresholds: &Path,
    windows: Windows,
) -> Result<crate::tools::Verdicts> {
    let mut v = tools.diagnose(data, Some(thresholds), windows)?;
    let white: Vec<&str> = WHITE_BOX
        .iter()
        .copied()
        .filter(|m| v.metrics.contains(*m))
        .collect();
    let parts: [(&str, Vec<&str>); 2] = [("black-box", vec!["os"]), ("white-box", white)];
    for (column, metrics) in parts {
        let has = match column {
            "black-box" => v.metrics.contains("os"),
            _ => !metrics.is_empty(),
        };
        if !has {
            continue;
        }
        // A part with too little data of its own (a sampler that stopped early leaves the OS
        // metrics without a complete window) has no verdict: the column is left out of the
        // run, as when the part has no data at all.
        let part = match tools.diagnose_metrics(data, Some(thresholds), windows, &metrics) {
            Err(e) if not_enough_data(&e) => continue,
            part => part?,
        };
        v.flagged.insert(
            column.to_string(),
            part.diagnosis.culprits.iter().cloned().collect(),
        );
    }
    Ok(v)
}

/// True for `culprit diagnose`'s "not enough data" (exit 2): no verdict, not a failure of the
/// experiment.
fn not_enough_data(e: &Error) -> bool {
    matches!(e, Error::Command { detail, .. } if detail.contains("not enough data"))
}

/// The resource the checklist should name for each fault class.
pub fn expected_resource(fault: &str) -> Option<&'static str> {
    Some(match fault {
        "disk-hog" => "disk-hog",
        "slow-disk" => "slow-disk",
        "write-network-hog" | "read-network-hog" => "network-hog",
        "receive-pktloss" | "send-pktloss" => "packet-loss",
        "cpu-hog" => "cpu-hog",
        "cpu-quota" => "cpu-starvation",
        _ => return None,
    })
}

/// Instrumentation settings of the overhead measurement.
pub const SETTINGS: [&str; 4] = ["none", "sampling", "tracing", "both"];

fn measure_runtime(
    cl: &mut Cluster,
    tools: &Tools,
    w: Workload,
    clients: &WorkloadSpec,
    setting: &str,
    cfg: &ExperimentConfig,
    dir: &Path,
) -> Result<f64> {
    let data = dir.join("data");
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data).map_err(|e| Error::io("create data directory", e))?;
    let tracing = matches!(setting, "tracing" | "both");
    let sampling = matches!(setting, "sampling" | "both");
    let sampler = if sampling {
        Some(tools.start_sampler(cl, &data, cfg.instrument.sampler_interval_ms)?)
    } else {
        None
    };
    cl.start_servers(&Tracing {
        runtime: tracing.then(|| tools.runtime.clone()),
        data_dir: data.clone(),
        interval_ms: cfg.instrument.tracer_interval_ms,
    })?;
    let work = match w {
        Workload::Postmark => cfg.overhead_transactions,
        _ => cfg.overhead_bytes,
    };
    let results = cl
        .start_clients(
            w,
            clients,
            Bound::Work(work),
            &format!("overhead-{setting}"),
        )?
        .wait(Duration::from_secs(900))?;
    cl.stop_servers(Duration::from_secs(5));
    if let Some(s) = sampler {
        s.stop()?;
    }
    let _ = std::fs::remove_dir_all(&data);
    Ok(results.iter().map(|r| r.elapsed_s).fold(0.0, f64::max))
}

/// A proportion with its 95 % Wilson score interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// Successes.
    pub x: usize,
    /// Trials.
    pub n: usize,
}

impl Rate {
    /// The 95 % Wilson score interval, as fractions.
    pub fn wilson(&self) -> (f64, f64) {
        if self.n == 0 {
            return (0.0, 1.0);
        }
        let z = 1.959_963_984_540_054_f64;
        let n = self.n as f64;
        let p = self.x as f64 / n;
        let denom = 1.0 + z * z / n;
        let center = (p + z * z / (2.0 * n)) / denom;
        let half = z / denom * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
        ((center - half).max(0.0), (center + half).min(1.0))
    }

    fn cell(&self) -> String {
        if self.n == 0 {
            return "–".into();
        }
        let (lo, hi) = self.wilson();
        format!(
            "{}/{} ({:.0}–{:.0})",
            self.x,
            self.n,
            lo * 100.0,
            hi * 100.0
        )
    }
}

/// Table 1 and Table 2 from the results of an experiment, as Markdown.
pub fn analyze(out: &Path) -> Result<String> {
    analyze_file(&out.join("results.jsonl"))
}

/// The tables of one results file.
pub fn analyze_file(path: &Path) -> Result<String> {
    let lines = read_results(path)?;
    if lines.is_empty() {
        return Err(Error::Config(format!(
            "{} has no results (run `culprit experiment` first)",
            path.display()
        )));
    }
    Ok(render(&lines))
}

/// Re-trains on the fault-free training runs of `train` workloads and re-diagnoses the scored
/// runs of `test` workloads from the data an experiment kept — seed 000's Table 1 has a column
/// set "without postmark training or testing" and one "with". Reads the kept data in `out` and
/// changes nothing there: writes `DEST/thresholds-<tag>.json` and `DEST/results-<tag>.jsonl`
/// (overhead lines copied) and returns the results file's path.
pub fn rediagnose(
    out: &Path,
    dest: &Path,
    tools: &Tools,
    train: &[Workload],
    test: &[Workload],
    tag: &str,
    say: &mut dyn FnMut(&str),
) -> Result<PathBuf> {
    let lines = read_results(&out.join("results.jsonl"))?;
    let Some(cfg) = lines.iter().find_map(|l| match l {
        ResultLine::Config(c) => Some(c.clone()),
        _ => None,
    }) else {
        return Err(Error::Config(format!("no experiment in {}", out.display())));
    };
    let windows = cfg.windows();
    let named = |w: &[Workload], name: &str| w.iter().any(|x| x.name() == name);
    let train_dirs: Vec<PathBuf> = lines
        .iter()
        .filter_map(|l| match l {
            ResultLine::Run { role, record, .. }
                if role == "train" && named(train, &record.workload) =>
            {
                Some(record.data_dir.clone())
            }
            _ => None,
        })
        .collect();
    if train_dirs.is_empty() {
        return Err(Error::Config("no training runs of those workloads".into()));
    }
    std::fs::create_dir_all(dest)
        .map_err(|e| Error::io(format!("create {}", dest.display()), e))?;
    let thresholds = dest.join(format!("thresholds-{tag}.json"));
    say(&format!("training on {} fault-free runs", train_dirs.len()));
    tools.train(&train_dirs, &thresholds, windows)?;
    let path = dest.join(format!("results-{tag}.jsonl"));
    let _ = std::fs::remove_file(&path);
    let mut c2 = cfg.clone();
    c2.protocol = format!("{} ({tag})", cfg.protocol);
    c2.workloads = test.iter().map(|w| w.name().to_string()).collect();
    append(&path, &ResultLine::Config(c2))?;
    for l in &lines {
        match l {
            ResultLine::Run { role, record, .. }
                if role != "train" && named(test, &record.workload) =>
            {
                let judged = Judged::of(tools, &record.data_dir, &thresholds, windows)?;
                say(&judged.say(&record.id, record));
                append(&path, &judged.line(role.clone(), record.clone()))?;
            }
            ResultLine::Overhead { .. } => append(&path, l)?,
            _ => {}
        }
    }
    Ok(path)
}

/// The culprits of an untrained diagnosis (no thresholds file) of `data`: the product as a user
/// without fault-free runs gets it. A run too short to compare ("not enough data") has none.
fn untrained_culprits(tools: &Tools, data: &Path, windows: Windows) -> Result<BTreeSet<String>> {
    match tools.diagnose(data, None, windows) {
        Ok(v) => Ok(v.flagged.get("combined").cloned().unwrap_or_default()),
        Err(e) if not_enough_data(&e) => Ok(BTreeSet::new()),
        Err(e) => Err(e),
    }
}

/// What `diagnose --baseline` ([`BASELINE_SPAN`]) said of the run in `data`. A run too short
/// to compare after its baseline ("not enough data") has no culprit.
fn baseline_column(tools: &Tools, data: &Path, windows: Windows) -> Result<BaselineColumn> {
    match tools.diagnose_baseline(data, BASELINE_SPAN, windows) {
        Err(e) if not_enough_data(&e) => Ok(BaselineColumn::default()),
        Ok(v) => Ok(BaselineColumn {
            culprits: v.flagged.get("combined").cloned().unwrap_or_default(),
            roles: v.diagnosis.roles.iter().map(|r| r.node.clone()).collect(),
            warnings: v.diagnosis.baseline.map(|b| b.warnings).unwrap_or_default(),
        }),
        Err(e) => Err(e),
    }
}

/// Columns of Table 1: each white-box metric, the OS metrics (`os`: faulty on any of them),
/// the verdicts of the white-box metrics alone, of the OS metrics alone (`black-box`) and of all
/// (`combined`), `any` (flagged by at least one metric), and the combined verdict of an
/// untrained diagnosis (when measured).
const COLUMNS: [&str; 13] = [
    "samples",
    "count",
    "time",
    "events",
    "os",
    "white-box",
    "black-box",
    "combined",
    "any",
    "untrained",
    "baseline",
    "requests",
    "series",
];

/// Renders the tables from result lines.
pub fn render(lines: &[ResultLine]) -> String {
    let mut s = String::new();
    if let Some(ResultLine::Config(c)) = lines.iter().find(|l| matches!(l, ResultLine::Config(_))) {
        let disk = if c.disk.0 == 0 {
            "unthrottled disks".to_string()
        } else {
            format!(
                "disks {} MB/s + {} IOPS per node",
                c.disk.0 / 1_000_000,
                c.disk.1
            )
        };
        let _ = writeln!(
            s,
            "Protocol: {} — {} nodes, {disk}; settle {} s, fault-free {} s, fault {} s, after {} s; \
             WinSize {} s, WinShift {} s, k = {}; tracer {} ms, sampler {} ms intervals; {}.\n",
            c.protocol,
            c.nodes,
            c.phases.settle_s,
            c.phases.before_s,
            c.phases.fault_s,
            c.phases.after_s,
            c.windows.0,
            c.windows.1,
            c.windows.2,
            c.instrument.tracer_interval_ms,
            c.instrument.sampler_interval_ms,
            if c.accuracy {
                format!(
                    "{} training and {} fault-free test runs per workload, {} faulty runs per \
                     workload and fault",
                    c.training_runs, c.clean_runs, c.repetitions
                )
            } else {
                format!("overhead only, {} runs per setting", c.overhead_reps)
            }
        );
    }
    // rows: fault name → metric → (tp, fp)
    let mut rows: BTreeMap<String, BTreeMap<&str, (Rate, Rate)>> = BTreeMap::new();
    // fault name → (resource right among combined TPs, resources named)
    let mut named: BTreeMap<String, (Rate, BTreeMap<String, usize>)> = BTreeMap::new();
    let mut order: Vec<String> = FaultKind::ALL
        .iter()
        .map(|f| f.name().to_string())
        .collect();
    order.push("none".into());
    for l in lines {
        let ResultLine::Run {
            role,
            record,
            flagged,
            metrics,
            untrained,
            requests,
            series,
            resources,
            baseline,
            ..
        } = l
        else {
            continue;
        };
        if role == "train" {
            continue;
        }
        let row = rows.entry(record.fault.clone()).or_default();
        // `any`: flagged by at least one metric — the most a combination rule could find, and
        // the false positives of OR-ing the detectors.
        let any: BTreeSet<String> = flagged
            .iter()
            .filter(|(m, _)| WHITE_BOX.contains(&m.as_str()) || m.as_str() == "os")
            .flat_map(|(_, nodes)| nodes.iter().cloned())
            .collect();
        let combined_tp = !record.faulty_node.is_empty()
            && flagged
                .get("combined")
                .is_some_and(|f| f.contains(&record.faulty_node));
        if combined_tp && !resources.is_empty() {
            let e = named
                .entry(record.fault.clone())
                .or_insert((Rate { x: 0, n: 0 }, BTreeMap::new()));
            let got = resources
                .get(&record.faulty_node)
                .cloned()
                .unwrap_or_else(|| "none".into());
            e.0.n += 1;
            e.0.x += usize::from(expected_resource(&record.fault) == Some(got.as_str()));
            *e.1.entry(got).or_default() += 1;
        }
        for m in COLUMNS {
            let present = match m {
                "combined" | "any" | "untrained" | "baseline" | "requests" | "series" => true,
                "white-box" | "black-box" => flagged.contains_key(m),
                _ => metrics.contains(m),
            };
            if !present {
                continue;
            }
            let f = match m {
                "any" => any.clone(),
                "baseline" => match baseline {
                    Some(b) => b.culprits.clone(),
                    None => continue,
                },
                "untrained" | "requests" | "series" => match match m {
                    "untrained" => untrained,
                    "requests" => requests,
                    _ => series,
                } {
                    Some(u) => u.clone(),
                    None => continue,
                },
                _ => flagged.get(m).cloned().unwrap_or_default(),
            };
            let e = row
                .entry(m)
                .or_insert((Rate { x: 0, n: 0 }, Rate { x: 0, n: 0 }));
            if !record.faulty_node.is_empty() {
                e.0.n += 1;
                e.0.x += usize::from(f.contains(&record.faulty_node));
            }
            e.1.n += 1;
            e.1.x += usize::from(f.iter().any(|n| *n != record.faulty_node));
        }
    }
    let _ = writeln!(s, "Table 1 — diagnosis accuracy: TP = runs where the faulty node was flagged, FP = runs where a");
    let _ = writeln!(
        s,
        "fault-free node was flagged; x/n (95 % Wilson interval, %). `untrained`: the combined verdict"
    );
    let _ = writeln!(
        s,
        "of `culprit diagnose` without a thresholds file (goals: TP ≥ 80 %, FP 0); `baseline`: with\n\
         normal learnt from each run's own first third (`--baseline \"{BASELINE_SPAN}\"`, no training\n\
         runs); `requests`: the\n\
         replica of `diagnose --requests`' top-ranked method (seed 004, sampled requests); `series`:\n\
         nodes whose own interval × function RPCA flagged a function (no request ids, no peers).\n"
    );
    let _ = write!(s, "| fault |");
    for m in COLUMNS {
        let _ = write!(s, " {m} TP | {m} FP |");
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "|---|{}", "---|---|".repeat(COLUMNS.len()));
    for f in &order {
        let Some(row) = rows.get(f) else { continue };
        let _ = write!(s, "| {f} |");
        for m in COLUMNS {
            match row.get(m) {
                Some((tp, fp)) => {
                    let _ = write!(s, " {} | {} |", tp.cell(), fp.cell());
                }
                None => {
                    let _ = write!(s, " – | – |");
                }
            }
        }
        let _ = writeln!(s);
    }
    // Totals over faulty runs.
    let _ = write!(s, "| all faults |");
    for m in COLUMNS {
        let (mut tp, mut fp) = (Rate { x: 0, n: 0 }, Rate { x: 0, n: 0 });
        for (f, row) in &rows {
            if f == "none" {
                continue;
            }
            if let Some((a, b)) = row.get(m) {
                tp.x += a.x;
                tp.n += a.n;
                fp.x += b.x;
                fp.n += b.n;
            }
        }
        let _ = write!(s, " {} | {} |", tp.cell(), fp.cell());
    }
    let _ = writeln!(s);

    render_resources(&order, &named, &mut s);
    render_effects(lines, &mut s);

    // Table 2.
    let mut runtimes: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for l in lines {
        if let ResultLine::Overhead {
            workload,
            setting,
            runtime_s,
            ..
        } = l
        {
            runtimes
                .entry((workload.clone(), setting.clone()))
                .or_default()
                .push(*runtime_s);
        }
    }
    if !runtimes.is_empty() {
        let _ = writeln!(
            s,
            "\nTable 2 — instrumentation overhead: increase of the fixed-work runtime over the"
        );
        let _ = writeln!(
            s,
            "uninstrumented run, mean ± standard error (n runs per setting, interleaved).\n"
        );
        let _ = writeln!(
            s,
            "| workload | uninstrumented (s) | sampling | tracing | tracing + sampling |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|");
        for w in Workload::ALL {
            let Some(base) = runtimes.get(&(w.name().into(), "none".into())) else {
                continue;
            };
            let (bm, bse) = mean_se(base);
            let _ = write!(s, "| {w} | {bm:.2} ± {bse:.2} (n={}) |", base.len());
            for setting in ["sampling", "tracing", "both"] {
                match runtimes.get(&(w.name().into(), setting.into())) {
                    Some(v) => {
                        let (m, se) = mean_se(v);
                        let (o, ose) = ratio_overhead(m, se, bm, bse);
                        let _ = write!(s, " {:+.2} % ± {:.2} % |", o * 100.0, ose * 100.0);
                    }
                    None => {
                        let _ = write!(s, " – |");
                    }
                }
            }
            let _ = writeln!(s);
        }
    }
    s
}

/// The resource named in the runs where the combined verdict flagged the faulty node.
fn render_resources(
    order: &[String],
    named: &BTreeMap<String, (Rate, BTreeMap<String, usize>)>,
    s: &mut String,
) {
    if named.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nResource named — among the runs whose combined verdict flagged the faulty node, the"
    );
    let _ = writeln!(
        s,
        "runs where the checklist named the fault's resource; x/n (95 % Wilson interval, %).\n"
    );
    let _ = writeln!(s, "| fault | expected | resource correct | named |");
    let _ = writeln!(s, "|---|---|---|---|");
    let mut total = Rate { x: 0, n: 0 };
    for f in order {
        let Some((rate, kinds)) = named.get(f) else {
            continue;
        };
        total.x += rate.x;
        total.n += rate.n;
        let list: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(
            s,
            "| {f} | {} | {} | {} |",
            expected_resource(f).unwrap_or("–"),
            rate.cell(),
            list.join(", ")
        );
    }
    let _ = writeln!(s, "| all faults | | {} | |", total.cell());
}

/// Table 3: what each fault did to the cluster (the ground truth the metrics had to see):
/// throughput during the fault relative to before it, and the faulty node's CPU and disk bytes
/// during the fault relative to the median of its peers.
fn render_effects(lines: &[ResultLine], s: &mut String) {
    // (fault, workload) → (throughput ratios, cpu ratios, disk ratios)
    type Ratios = (Vec<f64>, Vec<f64>, Vec<f64>);
    let mut by: BTreeMap<(String, String), Ratios> = BTreeMap::new();
    for l in lines {
        let ResultLine::Run {
            role, record: r, ..
        } = l
        else {
            continue;
        };
        if role != "faulty" || r.usage.len() < 2 {
            continue;
        }
        let e = by.entry((r.fault.clone(), r.workload.clone())).or_default();
        if r.disk_mbps[0] > 0.0 {
            e.0.push(r.disk_mbps[1] / r.disk_mbps[0]);
        }
        let during = &r.usage[1];
        let Some(me) = during.iter().find(|u| u.node == r.faulty_node) else {
            continue;
        };
        let peers: Vec<&crate::run::PhaseUsage> =
            during.iter().filter(|u| u.node != r.faulty_node).collect();
        let med = |f: &dyn Fn(&crate::run::PhaseUsage) -> f64| {
            let mut v: Vec<f64> = peers.iter().map(|u| f(u)).collect();
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        };
        let (mc, md) = (med(&|u| u.cpu_s), med(&|u| u.disk_bytes as f64));
        if mc > 0.0 {
            e.1.push(me.cpu_s / mc);
        }
        if md > 0.0 {
            e.2.push(me.disk_bytes as f64 / md);
        }
    }
    render_balance(lines, s);
    if by.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nTable 3 — what the faults did (mean over runs): disk throughput of all nodes during the"
    );
    let _ = writeln!(
        s,
        "fault ÷ before it; the faulty node's CPU seconds and disk bytes during the fault ÷ the"
    );
    let _ = writeln!(s, "median of its peers'.\n");
    let _ = writeln!(
        s,
        "| fault | workload | throughput | faulty CPU ÷ peers | faulty disk ÷ peers |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    let mean = |v: &[f64]| {
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    for f in FaultKind::ALL {
        for w in Workload::ALL {
            if let Some((t, c, d)) = by.get(&(f.name().to_string(), w.name().to_string())) {
                let _ = writeln!(
                    s,
                    "| {f} | {w} | {:.2} | {:.2} | {:.2} |",
                    mean(t),
                    mean(c),
                    mean(d)
                );
            }
        }
    }
}

/// Balance of the fault-free runs (training and test): per run, the spread (max ÷ min − 1) of the
/// nodes' CPU seconds and disk bytes over the whole workload; mean and worst per workload.
fn render_balance(lines: &[ResultLine], s: &mut String) {
    let mut by: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for l in lines {
        let ResultLine::Run { record: r, .. } = l else {
            continue;
        };
        if r.fault != "none" || r.usage.is_empty() {
            continue;
        }
        let mut cpu: BTreeMap<&str, f64> = BTreeMap::new();
        let mut disk: BTreeMap<&str, f64> = BTreeMap::new();
        for phase in &r.usage {
            for u in phase {
                *cpu.entry(&u.node).or_default() += u.cpu_s;
                *disk.entry(&u.node).or_default() += u.disk_bytes as f64;
            }
        }
        let spread = |m: &BTreeMap<&str, f64>| {
            let max = m.values().cloned().fold(f64::MIN, f64::max);
            let min = m.values().cloned().fold(f64::MAX, f64::min);
            if min > 0.0 {
                max / min - 1.0
            } else {
                f64::NAN
            }
        };
        let e = by.entry(r.workload.clone()).or_default();
        e.0.push(spread(&cpu));
        e.1.push(spread(&disk));
    }
    if by.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nBalance of the fault-free runs: spread of the nodes' CPU seconds and disk bytes over a"
    );
    let _ = writeln!(s, "run (max ÷ min − 1), mean and worst over the runs.\n");
    let _ = writeln!(
        s,
        "| workload | runs | CPU spread mean | worst | disk spread mean | worst |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for (w, (c, d)) in &by {
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let worst = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "| {w} | {} | {:.1} % | {:.1} % | {:.1} % | {:.1} % |",
            c.len(),
            mean(c) * 100.0,
            worst(c) * 100.0,
            mean(d) * 100.0,
            worst(d) * 100.0
        );
    }
}

/// Mean and standard error of the mean.
pub fn mean_se(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let m = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (m, 0.0);
    }
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0);
    (m, (var / n).sqrt())
}

/// `m/b − 1` with its standard error by error propagation (delta method).
pub fn ratio_overhead(m: f64, se_m: f64, b: f64, se_b: f64) -> (f64, f64) {
    if b <= 0.0 {
        return (0.0, 0.0);
    }
    let r = m / b;
    let se = r * ((se_m / m.max(1e-12)).powi(2) + (se_b / b).powi(2)).sqrt();
    (r - 1.0, se)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_intervals_match_known_values() {
        // 9/10: 59.6 %–98.2 %; 0/10: 0 %–27.8 %; 10/10: 72.2 %–100 % (standard tables).
        let (lo, hi) = Rate { x: 9, n: 10 }.wilson();
        assert!(
            (lo - 0.5958).abs() < 1e-3 && (hi - 0.9821).abs() < 1e-3,
            "{lo} {hi}"
        );
        let (lo, hi) = Rate { x: 0, n: 10 }.wilson();
        assert!(lo.abs() < 1e-12 && (hi - 0.2775).abs() < 1e-3, "{lo} {hi}");
        let (lo, hi) = Rate { x: 10, n: 10 }.wilson();
        assert!(
            (lo - 0.7225).abs() < 1e-3 && (hi - 1.0).abs() < 1e-12,
            "{lo} {hi}"
        );
    }

    #[test]
    fn mean_and_overhead() {
        let (m, se) = mean_se(&[1.0, 2.0, 3.0]);
        assert!((m - 2.0).abs() < 1e-12 && (se - (1.0f64 / 3.0).sqrt()).abs() < 1e-12);
        let (o, _) = ratio_overhead(10.3, 0.0, 10.0, 0.0);
        assert!((o - 0.03).abs() < 1e-9);
    }

    fn run_line(
        role: &str,
        fault: &str,
        node: &str,
        combined: &[&str],
        samples: &[&str],
    ) -> ResultLine {
        let mut flagged = BTreeMap::new();
        flagged.insert(
            "combined".to_string(),
            combined.iter().map(|s| s.to_string()).collect(),
        );
        flagged.insert(
            "samples".to_string(),
            samples.iter().map(|s| s.to_string()).collect(),
        );
        ResultLine::Run {
            role: role.into(),
            record: RunRecord {
                id: format!("{fault}-{node}"),
                fault: fault.into(),
                faulty_node: node.into(),
                ..RunRecord::default()
            },
            flagged,
            metrics: ["samples".to_string()].into_iter().collect(),
            exit: 1,
            untrained: None,
            requests: None,
            series: None,
            resources: BTreeMap::new(),
            baseline: None,
        }
    }

    #[test]
    fn table_counts_true_and_false_positives() {
        let lines = vec![
            run_line("faulty", "disk-hog", "io1", &["io1"], &[]),
            run_line("faulty", "disk-hog", "io2", &["io2", "io0"], &["io2"]),
            run_line("faulty", "disk-hog", "io3", &[], &[]),
            run_line("clean", "none", "", &["io0"], &[]),
            run_line("clean", "none", "", &[], &[]),
            run_line("train", "none", "", &["io0"], &["io0"]),
        ];
        let t = render(&lines);
        let disk = t.lines().find(|l| l.starts_with("| disk-hog")).unwrap();
        // samples TP 1/3, FP 0/3; count/time/events absent; combined TP 2/3, FP 1/3.
        assert!(
            disk.contains("| 1/3 (") && disk.contains("| 0/3 ("),
            "{disk}"
        );
        assert!(
            disk.contains("| 2/3 (") && disk.contains("| 1/3 ("),
            "{disk}"
        );
        let none = t.lines().find(|l| l.starts_with("| none")).unwrap();
        assert!(!t.contains("Resource named"), "no resources recorded: {t}");
        assert!(
            none.contains("| 1/2 ("),
            "training runs are not scored: {none}"
        );
        let cells: Vec<&str> = none.split('|').map(str::trim).collect();
        assert_eq!(cells[2], "–", "no TP without a fault: {none}");
    }

    /// The TP and FP cells of column `name` in `row` of the accuracy table `t`.
    fn cells_of(t: &str, row: &str, name: &str) -> (String, String) {
        let cells =
            |l: &str| -> Vec<String> { l.split('|').map(|c| c.trim().to_string()).collect() };
        let head = t.lines().find(|l| l.starts_with("| fault |")).unwrap();
        let i = cells(head)
            .iter()
            .position(|c| *c == format!("{name} TP"))
            .unwrap_or_else(|| panic!("no column {name}: {head}"));
        let r = cells(row);
        (r[i].clone(), r[i + 1].clone())
    }

    /// `l` with the columns measured beside the peer comparison set (names as strings).
    fn with_columns(
        l: ResultLine,
        untrained: Option<&[&str]>,
        requests: Option<&[&str]>,
        series: Option<&[&str]>,
    ) -> ResultLine {
        let set = |v: Option<&[&str]>| v.map(|v| v.iter().map(|s| s.to_string()).collect());
        match l {
            ResultLine::Run {
                role,
                record,
                flagged,
                metrics,
                exit,
                resources,
                ..
            } => ResultLine::Run {
                role,
                record,
                flagged,
                metrics,
                exit,
                untrained: set(untrained),
                requests: set(requests),
                series: set(series),
                resources,
                baseline: None,
            },
            other => other,
        }
    }

    /// Seed 004's columns: the top-ranked replica of `--requests` and the nodes the
    /// single-node RPCA flags, counted like the others.
    #[test]
    fn request_columns() {
        let with = |l, req: &[&str], ser: &[&str]| with_columns(l, None, Some(req), Some(ser));
        let lines = vec![
            with(
                run_line("faulty", "disk-hog", "io1", &[], &[]),
                &["io1"],
                &["io1", "io2"],
            ),
            with(run_line("faulty", "disk-hog", "io2", &[], &[]), &[], &[]),
            with(run_line("clean", "none", "", &[], &[]), &["io3"], &[]),
        ];
        let t = render(&lines);
        let row = t.lines().find(|l| l.starts_with("| disk-hog")).unwrap();
        let (tp, fp) = cells_of(&t, row, "requests");
        assert!(tp.starts_with("1/2 (") && fp.starts_with("0/2 ("), "{row}");
        let (tp, fp) = cells_of(&t, row, "series");
        assert!(tp.starts_with("1/2 (") && fp.starts_with("1/2 ("), "{row}");
        let none = t.lines().find(|l| l.starts_with("| none")).unwrap();
        assert!(
            cells_of(&t, none, "requests").1.starts_with("1/1 ("),
            "{none}"
        );
        let json = serde_json::to_string(&lines[0]).unwrap();
        assert!(json.contains("\"series\":[\"io1\",\"io2\"]"), "{json}");
    }

    /// The untrained columns count runs that measured them; older result lines have none.
    #[test]
    fn untrained_columns() {
        let with = |l, u: &[&str]| with_columns(l, Some(u), None, None);
        let lines = vec![
            with(run_line("faulty", "cpu-hog", "io1", &[], &[]), &["io1"]),
            with(run_line("faulty", "cpu-hog", "io2", &[], &[]), &["io0"]),
            run_line("faulty", "cpu-hog", "io3", &[], &[]),
            with(run_line("clean", "none", "", &[], &[]), &[]),
        ];
        let t = render(&lines);
        let row = t.lines().find(|l| l.starts_with("| cpu-hog")).unwrap();
        let (tp, fp) = cells_of(&t, row, "untrained");
        assert!(tp.starts_with("1/2 ("), "{row}");
        assert!(fp.starts_with("1/2 ("), "{row}");
        let none = t.lines().find(|l| l.starts_with("| none")).unwrap();
        assert!(
            cells_of(&t, none, "untrained").1.starts_with("0/1 ("),
            "{none}"
        );
        // No run measured seed 004's columns: they say so.
        assert_eq!(cells_of(&t, row, "requests").0, "–", "{t}");
        let json = serde_json::to_string(&lines[0]).unwrap();
        assert!(json.contains("\"untrained\":[\"io1\"]"), "{json}");
        let old = serde_json::to_string(&lines[2]).unwrap();
        assert!(!old.contains("untrained"), "{old}");
    }

    /// The baseline column counts runs that measured it, by their culprits (a node of another
    /// role is not one); older result lines have none.
    #[test]
    fn baseline_column() {
        let with = |l, culprits: &[&str], roles: &[&str]| match l {
            ResultLine::Run {
                role,
                record,
                flagged,
                metrics,
                exit,
                resources,
                ..
            } => ResultLine::Run {
                role,
                record,
                flagged,
                metrics,
                exit,
                untrained: None,
                requests: None,
                series: None,
                resources,
                baseline: Some(BaselineColumn {
                    culprits: culprits.iter().map(|s| s.to_string()).collect(),
                    roles: roles.iter().map(|s| s.to_string()).collect(),
                    warnings: Vec::new(),
                }),
            },
            other => other,
        };
        let lines = vec![
            with(
                run_line("faulty", "slow-disk", "io1", &[], &[]),
                &["io1"],
                &["io3"],
            ),
            with(run_line("faulty", "slow-disk", "io2", &[], &[]), &[], &[]),
            run_line("faulty", "slow-disk", "io3", &[], &[]),
            with(run_line("clean", "none", "", &[], &[]), &["io0"], &[]),
        ];
        let t = render(&lines);
        assert!(t.contains("--baseline \"first 1/3\""), "{t}");
        let row = t.lines().find(|l| l.starts_with("| slow-disk")).unwrap();
        let (tp, fp) = cells_of(&t, row, "baseline");
        assert!(tp.starts_with("1/2 (") && fp.starts_with("0/2 ("), "{row}");
        let none = t.lines().find(|l| l.starts_with("| none")).unwrap();
        assert!(
            cells_of(&t, none, "baseline").1.starts_with("1/1 ("),
            "{none}"
        );
        let json = serde_json::to_string(&lines[0]).unwrap();
        assert!(json.contains("\"roles\":[\"io3\"]"), "{json}");
        let back: ResultLine = serde_json::from_str(&json).unwrap();
        assert!(matches!(
            back,
            ResultLine::Run {
                baseline: Some(_),
                ..
            }
        ));
    }

    /// Black-box and white-box verdicts are columns when recorded; the resource is scored among
    /// the runs whose combined verdict flagged the faulty node.
    #[test]
    fn resource_correct_among_the_combined_true_positives() {
        let mut lines = vec![
            run_line("faulty", "slow-disk", "io1", &["io1"], &[]),
            run_line("faulty", "slow-disk", "io2", &["io2"], &[]),
            run_line("faulty", "slow-disk", "io3", &[], &[]),
        ];
        for (l, kind) in lines.iter_mut().zip(["slow-disk", "disk-hog", "slow-disk"]) {
            if let ResultLine::Run {
                flagged,
                resources,
                record,
                ..
            } = l
            {
                flagged.insert("black-box".into(), flagged["combined"].clone());
                resources.insert(record.faulty_node.clone(), kind.into());
            }
        }
        let t = render(&lines);
        let header = t.lines().find(|l| l.starts_with("| fault |")).unwrap();
        assert!(
            header.contains("black-box TP") && header.contains("os TP"),
            "{header}"
        );
        let row = t
            .lines()
            .find(|l| l.starts_with("| slow-disk | slow-disk |"))
            .unwrap_or_else(|| panic!("{t}"));
        assert!(
            row.contains("| 1/2 (") && row.contains("disk-hog 1, slow-disk 1"),
            "{row}"
        );
        assert_eq!(expected_resource("send-pktloss"), Some("packet-loss"));
        assert_eq!(expected_resource("none"), None);
    }

    #[test]
    fn fault_effects_compare_the_faulty_node_with_its_peers() {
        let u = |node: &str, cpu_s: f64, disk_bytes: u64| crate::run::PhaseUsage {
            node: node.into(),
            cpu_s,
            disk_bytes,
        };
        let before = vec![u("io0", 1.0, 100), u("io1", 1.0, 100), u("io2", 1.0, 100)];
        let during = vec![u("io0", 1.0, 50), u("io1", 3.0, 150), u("io2", 1.0, 50)];
        let line = ResultLine::Run {
            role: "faulty".into(),
            record: RunRecord {
                fault: "cpu-hog".into(),
                workload: "ddw".into(),
                faulty_node: "io1".into(),
                disk_mbps: [10.0, 5.0, 10.0],
                usage: vec![before, during],
                ..RunRecord::default()
            },
            flagged: BTreeMap::new(),
            metrics: BTreeSet::new(),
            exit: 0,
            untrained: None,
            requests: None,
            series: None,
            resources: BTreeMap::new(),
            baseline: None,
        };
        let t = render(&[line]);
        assert!(t.contains("| cpu-hog | ddw | 0.50 | 3.00 | 3.00 |"), "{t}");
    }

    #[test]
    fn result_lines_round_trip_as_json() {
        let l = ResultLine::Overhead {
            workload: "ddw".into(),
            setting: "both".into(),
            rep: 2,
            runtime_s: 9.5,
        };
        let s = serde_json::to_string(&l).unwrap();
        assert!(s.contains("\"kind\":\"overhead\""), "{s}");
        let back: ResultLine = serde_json::from_str(&s).unwrap();
        assert!(matches!(back, ResultLine::Overhead { rep: 2, .. }));
        let c = serde_json::to_string(&ResultLine::Config(ExperimentConfig::shortened())).unwrap();
        assert!(matches!(
            serde_json::from_str::<ResultLine>(&c).unwrap(),
            ResultLine::Config(_)
        ));
    }
}
