//! culprit's own tools as the testbed runs them: the tracer runtime injected into every server
//! (`LD_PRELOAD`), one system-wide sampler assigning samples to nodes (`culprit sample`), and
//! `culprit train` / `culprit diagnose` on the data directory — through their command-line
//! contracts (the verbs, their options and exit statuses, `--json`), as a user would run them.
//! The report is read as a typed [`Diagnosis`]: an unknown schema or version, or a missing
//! field, is an error, never "nothing flagged".

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use culprit_analysis::diagnosis::MetricStatus;
use culprit_analysis::requests::RequestsReport;
use culprit_analysis::Diagnosis;

use crate::cluster::{stop_child, Cluster};
use crate::error::{Error, Result};

/// Diagnosis windows (seed 000: WinSize 60 s, WinShift 30 s, k = 3). Shortened runs shorten
/// them; the algorithm stays the same.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Windows {
    /// WinSize, seconds.
    pub size_s: u32,
    /// WinShift, seconds.
    pub shift_s: u32,
    /// Faulty when anomalous in k of the last 2k−1 windows.
    pub k: u32,
}

impl Windows {
    /// Seed 000's windows.
    pub const SEED: Windows = Windows {
        size_s: 60,
        shift_s: 30,
        k: 3,
    };
    /// The shortened windows of the demo, the CI test and the shortened experiment.
    pub const SHORT: Windows = Windows {
        size_s: 10,
        shift_s: 5,
        k: 3,
    };

    fn args(&self) -> Vec<String> {
        // Seed 000's dimensionality rule (100 samples or 1 s of time in a 60 s window) scaled
        // to the window, so shortened windows keep the same functions.
        let scale = f64::from(self.size_s) / 60.0;
        vec![
            "--win-size".into(),
            format!("{}s", self.size_s),
            "--win-shift".into(),
            format!("{}s", self.shift_s),
            "--k".into(),
            self.k.to_string(),
            "--min-time".into(),
            format!("{}ms", (1000.0 * scale).round() as u64),
            "--min-samples".into(),
            format!("{:.1}", 100.0 * scale),
        ]
    }
}

/// Paths of culprit's binaries.
#[derive(Clone, Debug)]
pub struct Tools {
    /// The `culprit` binary.
    pub culprit: PathBuf,
    /// `libculprit_rt.so`.
    pub runtime: PathBuf,
    /// Analysis options added to every `culprit train` and `culprit diagnose` (to measure an
    /// option, e.g. `--smoothing 1`).
    pub analysis_args: Vec<String>,
}

/// The white-box metrics (seed 000, and the tracer's latency histograms), in table order.
pub const WHITE_BOX: [&str; 5] = ["samples", "count", "time", "events", "latency"];
/// The metrics diagnosis reports on, in table order, the OS metrics as one family (`os`: a
/// node faulty on any of them), and the combined verdict.
pub const METRICS: [&str; 6] = ["samples", "count", "time", "events", "os", "combined"];

/// What `culprit diagnose --json` said, reduced to what the experiment scores.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdicts {
    /// Exit status (0 nothing flagged, 1 faulty node found).
    pub exit: i32,
    /// Per metric (every OS metric by name, `os` for any of them) and `combined`, the nodes
    /// flagged faulty.
    pub flagged: BTreeMap<String, BTreeSet<String>>,
    /// Metrics the diagnosis had data for (`os` when it had any OS metric).
    pub metrics: BTreeSet<String>,
    /// The resource named for each culprit (`slow-disk`, `software`…).
    pub resources: BTreeMap<String, String>,
    /// The full report.
    pub diagnosis: Diagnosis,
}

impl Tools {
    /// Finds `libculprit_rt.so` next to the `culprit` binary (cargo puts both in
    /// `target/<profile>/`) or in `../lib/`.
    pub fn beside(culprit: PathBuf) -> Result<Self> {
        let dir = culprit.parent().map(Path::to_path_buf).unwrap_or_default();
        let candidates = [
            dir.join("libculprit_rt.so"),
            dir.join("../lib/libculprit_rt.so"),
            dir.join("../lib/culprit/libculprit_rt.so"),
        ];
        let runtime = candidates.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
            Error::Missing(format!(
                "libculprit_rt.so not found beside {} (build it: `cargo build --release -p culprit-rt`)",
                culprit.display()
            ))
        })?;
        Ok(Tools {
            culprit,
            runtime,
            analysis_args: Vec::new(),
        })
    }

    fn culprit(&self) -> Command {
        Command::new(&self.culprit)
    }

    /// Starts the sampler for the whole machine, writing `data_dir/<node>/samples-*.cul`, with
    /// one rule per node: its cgroup, its network namespace and its address (for TCP events and
    /// the OS metrics' per-connection view), and delay accounting on for the run.
    pub fn start_sampler(
        &self,
        cluster: &Cluster,
        data_dir: &Path,
        interval_ms: u32,
    ) -> Result<SamplerProcess> {
        let mut cmd = self.culprit();
        cmd.arg("sample")
            .arg("--output")
            .arg(data_dir)
            .args(["--interval-ms", &interval_ms.to_string()])
            // Per-node block-I/O delay in the OS metrics. The sampler starts before the
            // servers, as it must: the kernel accounts only tasks created after this is on.
            .arg("--delayacct");
        for (i, n) in cluster.nodes().iter().enumerate() {
            let (name, cg) = &cluster.node_cgroups()[i];
            cmd.arg("--node-cgroup")
                .arg(format!("{name}=/{}", cg.display()));
            cmd.arg("--node-netns")
                .arg(format!("{name}=/run/netns/{}", n.host.ns));
            cmd.arg("--node-addr").arg(format!("{name}={}", n.host.ip));
        }
        let log = cluster.log_path("sampler");
        let out = std::fs::File::create(&log).map_err(|e| Error::io("create sampler log", e))?;
        let err = out.try_clone().map_err(|e| Error::io("dup log", e))?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        let child = cmd
            .spawn()
            .map_err(|e| Error::io("start culprit sample", e))?;
        let mut s = SamplerProcess {
            child: Some(child),
            log,
        };
        // A sampler that cannot start (no permission, bad flags) says so at once.
        std::thread::sleep(Duration::from_millis(500));
        s.check()?;
        Ok(s)
    }

    /// `culprit train DATA… --out FILE`.
    pub fn train(&self, data_dirs: &[PathBuf], out: &Path, windows: Windows) -> Result<()> {
        let mut cmd = self.culprit();
        cmd.arg("train")
            .args(data_dirs)
            .arg("--out")
            .arg(out)
            .args(windows.args())
            .args(&self.analysis_args);
        let o = cmd
            .output()
            .map_err(|e| Error::io("run culprit train", e))?;
        if !o.status.success() {
            return Err(Error::Command {
                cmd: "culprit train".into(),
                detail: String::from_utf8_lossy(&o.stderr).trim().to_string(),
            });
        }
        Ok(())
    }

    /// `culprit diagnose DATA [--thresholds FILE] --json`.
    pub fn diagnose(
        &self,
        data_dir: &Path,
        thresholds: Option<&Path>,
        windows: Windows,
    ) -> Result<Verdicts> {
        self.diagnose_metrics(data_dir, thresholds, windows, &[])
    }

    /// `culprit diagnose DATA [--thresholds FILE] --json [--metrics LIST]` (`metrics` empty:
    /// all with data).
    pub fn diagnose_metrics(
        &self,
        data_dir: &Path,
        thresholds: Option<&Path>,
        windows: Windows,
        metrics: &[&str],
    ) -> Result<Verdicts> {
        let judged: Vec<&OsStr> = match thresholds {
            Some(t) => vec!["--thresholds".as_ref(), t.as_os_str()],
            None => Vec::new(),
        };
        self.diagnose_json(data_dir, windows, metrics, &judged)
    }

    /// `culprit diagnose DATA --baseline SPAN --json`: normal learnt from the data itself.
    pub fn diagnose_baseline(
        &self,
        data_dir: &Path,
        span: &str,
        windows: Windows,
    ) -> Result<Verdicts> {
        self.diagnose_json(
            data_dir,
            windows,
            &[],
            &["--baseline".as_ref(), span.as_ref()],
        )
    }

    /// `culprit diagnose DATA --json` with the windows, the analysis options, `--metrics LIST`
    /// (`metrics` empty: all with data) and `judged` (how thresholds come about).
    fn diagnose_json(
        &self,
        data_dir: &Path,
        windows: Windows,
        metrics: &[&str],
        judged: &[&OsStr],
    ) -> Result<Verdicts> {
        let mut cmd = self.culprit();
        cmd.arg("diagnose")
            .arg(data_dir)
            .arg("--json")
            .args(windows.args())
            .args(&self.analysis_args)
            .args(judged);
        if !metrics.is_empty() {
            cmd.arg("--metrics").arg(metrics.join(","));
        }
        let (o, exit) = run_verdict(&mut cmd, "culprit diagnose")?;
        let diagnosis: Diagnosis = serde_json::from_slice(&o.stdout)
            .map_err(|e| Error::Parse(format!("culprit diagnose --json output ({e})")))?;
        let mut v = verdicts(diagnosis);
        v.exit = exit;
        Ok(v)
    }

    /// `culprit diagnose DATA --requests --json`: seed 004's analyses, which need no
    /// thresholds and no windows.
    pub fn diagnose_requests(&self, data_dir: &Path) -> Result<RequestVerdicts> {
        let mut cmd = self.culprit();
        cmd.arg("diagnose")
            .arg(data_dir)
            .args(["--requests", "--json"]);
        let (o, _) = run_verdict(&mut cmd, "culprit diagnose --requests")?;
        #[derive(serde::Deserialize)]
        struct Document {
            requests: RequestsReport,
        }
        let d: Document = serde_json::from_slice(&o.stdout).map_err(|e| {
            Error::Parse(format!("culprit diagnose --requests --json output ({e})"))
        })?;
        Ok(RequestVerdicts::of(&d.requests))
    }

    /// `culprit diagnose DATA [--thresholds FILE]`: the human report.
    pub fn diagnose_text(
        &self,
        data_dir: &Path,
        thresholds: Option<&Path>,
        windows: Windows,
    ) -> Result<String> {
        let mut cmd = self.culprit();
        cmd.arg("diagnose")
            .arg(data_dir)
            .args(windows.args())
            .args(&self.analysis_args);
        if let Some(t) = thresholds {
            cmd.arg("--thresholds").arg(t);
        }
        let o = cmd
            .output()
            .map_err(|e| Error::io("run culprit diagnose", e))?;
        let mut s = String::from_utf8_lossy(&o.stdout).into_owned();
        s.push_str(&String::from_utf8_lossy(&o.stderr));
        Ok(s)
    }
}

/// Runs a `culprit diagnose` command (`what`, for errors) whose exit status is a verdict: 0 (no
/// node flagged) or 1 (flagged); any other status is an error with its stderr.
fn run_verdict(cmd: &mut Command, what: &str) -> Result<(std::process::Output, i32)> {
    let o = cmd
        .output()
        .map_err(|e| Error::io(format!("run {what}"), e))?;
    let exit = o.status.code().unwrap_or(2);
    if exit != 0 && exit != 1 {
        return Err(Error::Command {
            cmd: what.into(),
            detail: String::from_utf8_lossy(&o.stderr).trim().to_string(),
        });
    }
    Ok((o, exit))
}

/// The running `culprit sample`; dropping it stops it.
#[derive(Debug)]
pub struct SamplerProcess {
    child: Option<Child>,
    log: PathBuf,
}

impl SamplerProcess {
    /// An error if the sampler has exited.
    pub fn check(&mut self) -> Result<()> {
        if let Some(c) = self.child.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                self.child = None;
                return Err(Error::Command {
                    cmd: "culprit sample".into(),
                    detail: format!("exited with {st}: {}", crate::cluster::read_tail(&self.log)),
                });
            }
        }
        Ok(())
    }

    /// Stops the sampler (SIGINT: it flushes its last interval).
    pub fn stop(mut self) -> Result<()> {
        self.check()?;
        if let Some(mut c) = self.child.take() {
            let _ = crate::sys::kill(c.id(), libc::SIGINT);
            stop_child(&mut c, Duration::from_secs(10));
        }
        Ok(())
    }
}

impl Drop for SamplerProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = crate::sys::kill(c.id(), libc::SIGINT);
            stop_child(&mut c, Duration::from_secs(5));
        }
    }
}

/// The nodes seed 004's two analyses blame in a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequestVerdicts {
    /// The replica of the top-ranked method of `--requests` (per-request RPCA over the
    /// request × method matrices): none when no method is ranked. The top one only, as a
    /// user acts on it.
    pub requests: BTreeSet<String>,
    /// Nodes whose own interval × function RPCA flagged a function (seed 004 without request
    /// ids: a single-node anomaly finder).
    pub series: BTreeSet<String>,
}

impl RequestVerdicts {
    /// The verdicts of one report.
    pub fn of(r: &RequestsReport) -> RequestVerdicts {
        RequestVerdicts {
            requests: r
                .ranking
                .first()
                .map(|m| m.node.clone())
                .into_iter()
                .collect(),
            series: r
                .series
                .iter()
                .filter(|n| !n.flagged.is_empty())
                .map(|n| n.node.clone())
                .collect(),
        }
    }
}

/// The flagged nodes per metric of a diagnosis: per metric, the nodes whose verdict on it is
/// faulty (`os`: on any OS metric); for the combined verdict, the culprits (nodes found faulty
/// or stopped), and the resource named for each.
pub fn verdicts(diagnosis: Diagnosis) -> Verdicts {
    let mut flagged: BTreeMap<String, BTreeSet<String>> = METRICS
        .iter()
        .map(|m| (m.to_string(), BTreeSet::new()))
        .collect();
    let mut metrics = BTreeSet::new();
    for m in &diagnosis.metrics {
        let faulty = m
            .nodes
            .iter()
            .filter(|n| n.verdict == MetricStatus::Faulty)
            .map(|n| n.node.clone());
        let names = if m.family.name() == m.metric.name() {
            vec![m.metric.to_string()]
        } else {
            vec![m.metric.to_string(), m.family.to_string()]
        };
        for name in names {
            metrics.insert(name.clone());
            flagged.entry(name).or_default().extend(faulty.clone());
        }
    }
    let combined = flagged.entry("combined".into()).or_default();
    combined.extend(diagnosis.culprits.iter().cloned());
    let resources = diagnosis
        .verdicts
        .iter()
        .filter(|v| diagnosis.culprits.contains(&v.node))
        .filter_map(|v| {
            let r = v.resource.as_ref()?;
            let kind = serde_json::to_value(r.kind).ok()?;
            Some((v.node.clone(), kind.as_str()?.to_string()))
        })
        .collect();
    Verdicts {
        exit: diagnosis.exit_status(),
        flagged,
        metrics,
        resources,
        diagnosis,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report as `culprit diagnose --json` prints it (schema culprit-diagnosis, version 1).
    fn report(metrics: &str) -> String {
        format!(
            r#"{{"schema": "culprit-diagnosis", "version": 1, "data": ["DATA"], "trained": false,
            "thresholds_file": null,
            "settings": {{"win_size_s": 10.0, "win_shift_s": 5.0, "k": 3, "score": "median-node",
              "distance": "manhattan", "peers": "n/a", "by_program": false, "unsupervised": null,
              "os_win_size_s": 30.0, "os_win_shift_s": 5.0, "smoothing": 5}},
            "from": null, "to": null, "nodes": ["io0", "io1", "io2"], "culprits": ["io2"],
            "verdicts": [], "metrics": [{metrics}], "findings": [], "notes": [], "warnings": []}}"#
        )
    }

    fn node(name: &str, verdict: &str) -> String {
        format!(
            r#"{{"node": "{name}", "verdict": "{verdict}", "threshold": null,
            "threshold_source": "unsupervised", "windows_scored": 9, "windows_incomplete": 0,
            "windows_different": 0, "max_score": 1.0, "evidence": null, "episodes": [],
            "anomalous_windows": [], "top": []}}"#
        )
    }

    fn metric(name: &str, nodes: &[String]) -> String {
        format!(
            r#"{{"metric": "{name}", "family": "{name}", "unit": "u", "score_unit": "u", "thresholds": "untrained",
            "windows": 9, "unscored_windows": 0, "kept": 3, "nodes": [{}]}}"#,
            nodes.join(",")
        )
    }

    #[test]
    fn verdicts_are_read_per_metric_and_combined() {
        let time = metric("time", &[node("io1", "ok"), node("io2", "faulty")]);
        let samples = metric("samples", &[node("io0", "ok"), node("io2", "no-data")]);
        let d: Diagnosis = serde_json::from_str(&report(&format!("{time},{samples}"))).unwrap();
        let v = verdicts(d);
        assert_eq!(v.exit, 1);
        assert_eq!(v.flagged["time"], ["io2".to_string()].into_iter().collect());
        assert!(v.flagged["samples"].is_empty());
        assert!(v.flagged["count"].is_empty());
        assert_eq!(
            v.flagged["combined"],
            ["io2".to_string()].into_iter().collect()
        );
        assert_eq!(
            v.metrics,
            ["samples".to_string(), "time".to_string()]
                .into_iter()
                .collect()
        );
    }

    /// A renamed field must not read as "nothing flagged".
    #[test]
    fn a_report_of_another_shape_is_an_error() {
        let good = report(&metric("time", &[node("io2", "faulty")]));
        assert!(serde_json::from_str::<Diagnosis>(&good).is_ok());
        let renamed = good.replace("\"culprits\"", "\"suspects\"");
        assert!(serde_json::from_str::<Diagnosis>(&renamed).is_err());
        let newer = good.replace("\"version\": 1", "\"version\": 2");
        let e = serde_json::from_str::<Diagnosis>(&newer).unwrap_err();
        assert!(e.to_string().contains("version 2"), "{e}");
        let other = good.replace("culprit-diagnosis", "culprit-thresholds");
        assert!(serde_json::from_str::<Diagnosis>(&other).is_err());
    }
}
