//! `results.jsonl`: one line per configuration, diagnosed run or overhead measurement, appended
//! as each is produced, and the facts about faults the tables compare them with.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, Write as _};
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::run::RunRecord;

use super::config::ExperimentConfig;

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

pub(super) fn read_results(path: &Path) -> Result<Vec<ResultLine>> {
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

pub(super) fn append(path: &Path, line: &ResultLine) -> Result<()> {
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
