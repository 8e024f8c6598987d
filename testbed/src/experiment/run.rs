//! Running the experiment: the training and scored runs, each diagnosed every way the
//! experiment measures, the overhead measurement, and re-diagnosing kept data.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::cluster::{Cluster, ClusterSpec, Tracing};
use crate::error::{Error, Result};
use crate::fault::FaultKind;
use crate::programs::Programs;
use crate::run::{run_once, RunPlan, RunRecord};
use crate::tools::{Tools, Windows, WHITE_BOX};
use crate::workload::{Bound, Workload, WorkloadSpec};

use super::config::ExperimentConfig;
use super::results::{append, read_results, BaselineColumn, ResultLine, BASELINE_SPAN, SETTINGS};

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
