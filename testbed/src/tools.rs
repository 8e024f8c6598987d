//! culprit's own tools as the testbed runs them: the tracer runtime injected into every server
//! (`LD_PRELOAD`), one system-wide sampler assigning samples to nodes (`culprit sample`), and
//! `culprit train` / `culprit diagnose` on the data directory — through their command-line
//! contracts (../shared/DESIGN.md §"Interface contract"), as a user would run them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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
}

/// The metrics diagnosis reports on, in table order, and the combined verdict.
pub const METRICS: [&str; 5] = ["samples", "count", "time", "events", "combined"];

/// What `culprit diagnose --json` said, reduced to what the experiment scores.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Verdicts {
    /// Exit status (0 nothing flagged, 1 faulty node found).
    pub exit: i32,
    /// Per metric (and `combined`), the nodes flagged faulty.
    pub flagged: BTreeMap<String, BTreeSet<String>>,
    /// Metrics the diagnosis had data for.
    pub metrics: BTreeSet<String>,
    /// The full JSON report.
    pub json: serde_json::Value,
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
        Ok(Tools { culprit, runtime })
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
    ) -> Result<Sampler> {
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
        let mut s = Sampler {
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
            .args(windows.args());
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
        let mut cmd = self.culprit();
        cmd.arg("diagnose")
            .arg(data_dir)
            .arg("--json")
            .args(windows.args());
        if let Some(t) = thresholds {
            cmd.arg("--thresholds").arg(t);
        }
        let o = cmd
            .output()
            .map_err(|e| Error::io("run culprit diagnose", e))?;
        let exit = o.status.code().unwrap_or(2);
        if exit != 0 && exit != 1 {
            return Err(Error::Command {
                cmd: "culprit diagnose".into(),
                detail: String::from_utf8_lossy(&o.stderr).trim().to_string(),
            });
        }
        let json: serde_json::Value = serde_json::from_slice(&o.stdout)
            .map_err(|e| Error::Parse(format!("culprit diagnose --json output ({e})")))?;
        let mut v = parse_verdicts(&json);
        v.exit = exit;
        Ok(v)
    }

    /// `culprit diagnose DATA [--thresholds FILE]`: the human report.
    pub fn diagnose_text(
        &self,
        data_dir: &Path,
        thresholds: Option<&Path>,
        windows: Windows,
    ) -> Result<String> {
        let mut cmd = self.culprit();
        cmd.arg("diagnose").arg(data_dir).args(windows.args());
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

/// The running sampler; dropping it stops it.
#[derive(Debug)]
pub struct Sampler {
    child: Option<Child>,
    log: PathBuf,
}

impl Sampler {
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

impl Drop for Sampler {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = crate::sys::kill(c.id(), libc::SIGINT);
            stop_child(&mut c, Duration::from_secs(5));
        }
    }
}

/// Reads the flagged nodes per metric out of `culprit diagnose --json` (schema
/// `culprit-diagnosis`, docs/diagnose-json.md): `metrics[].{metric, nodes[].{node, verdict}}`
/// per metric, `culprits` (nodes whose combined verdict is faulty or stopped) for the combined
/// verdict.
pub fn parse_verdicts(json: &serde_json::Value) -> Verdicts {
    let mut v = Verdicts {
        json: json.clone(),
        ..Verdicts::default()
    };
    for m in METRICS {
        v.flagged.insert(m.to_string(), BTreeSet::new());
    }
    let flagged = |verdict: Option<&str>| matches!(verdict, Some("faulty") | Some("stopped"));
    for m in json
        .get("metrics")
        .and_then(|x| x.as_array())
        .into_iter()
        .flatten()
    {
        let Some(metric) = m.get("metric").and_then(|x| x.as_str()) else {
            continue;
        };
        v.metrics.insert(metric.to_string());
        let set = v.flagged.entry(metric.to_string()).or_default();
        for n in m
            .get("nodes")
            .and_then(|x| x.as_array())
            .into_iter()
            .flatten()
        {
            if let (Some(node), true) = (
                n.get("node").and_then(|x| x.as_str()),
                flagged(n.get("verdict").and_then(|x| x.as_str())),
            ) {
                set.insert(node.to_string());
            }
        }
    }
    let combined = v.flagged.entry("combined".into()).or_default();
    for c in json
        .get("culprits")
        .and_then(|x| x.as_array())
        .into_iter()
        .flatten()
    {
        if let Some(node) = c.as_str() {
            combined.insert(node.to_string());
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_are_read_per_metric_and_combined() {
        let j = serde_json::json!({
            "schema": "culprit-diagnosis",
            "culprits": ["io2"],
            "metrics": [
                {"metric": "time", "nodes": [
                    {"node": "io1", "verdict": "ok"},
                    {"node": "io2", "verdict": "faulty"}]},
                {"metric": "samples", "nodes": [
                    {"node": "io0", "verdict": "suspect"},
                    {"node": "io2", "verdict": "ok"}]}
            ]
        });
        let v = parse_verdicts(&j);
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
}
