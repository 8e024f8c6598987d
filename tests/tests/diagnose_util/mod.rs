//! Shared helpers of the diagnosis tests: run `culprit diagnose --json` and find things in its
//! report, read as the typed [`Diagnosis`] (schema: docs/diagnose-json.md) — a report of another
//! shape fails the test instead of reading as "nothing flagged".

#![allow(dead_code)]

use culprit_analysis::combine::Verdict;
use culprit_analysis::diagnosis::{MetricReport, NodeReport};
use culprit_analysis::family::Metric;
use culprit_analysis::missing::Finding;
use culprit_analysis::Diagnosis;
use culprit_tests::*;
use std::path::Path;
use std::process::Command;

/// A command running `exe` pinned to the first CPU this process may run on, at nice −10 when
/// root: what the machine's other work does to one server of a group it then does to all
/// (diagnose_real.rs says what happened without).
pub fn pinned(exe: &Path) -> Command {
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", &first_cpu()]);
    if is_root() {
        cmd.args(["nice", "-n", "-10"]);
    }
    cmd.arg(exe);
    cmd
}

/// [`pinned`] at real-time priority as root (`chrt --fifo 1`), for a group of *light* peers
/// none of which a fault makes CPU-bound.
///
/// Why real-time there: peers on one CPU at normal priority are preempted in the middle of
/// their functions by the machine's other work and by one another, and which one loses most
/// depends on the scheduler's order of them, which can hold for a whole run: a healthy peer's
/// wall-clock times came out 10–13 % longer in most windows and it was flagged (budget.rs, 3 of
/// 6 runs beside `stress-ng`). FIFO peers at one priority never preempt one another, and the
/// machine's other work preempts none of them, so each request's functions run as on a server
/// of its own. Why not for every group: a FIFO peer that stays runnable is never preempted by
/// its peers either. A faulty server doing 16× the work of its peers kept the CPU, its healthy
/// peers ran in bursts when it let go, and one of them was flagged for "more samples" in 4 of
/// 14 windows (diagnose_real.rs's samples_from_the_real_sampler, in CI).
pub fn pinned_realtime(exe: &Path) -> Command {
    if !(is_root() && fifo_allowed()) {
        return pinned(exe);
    }
    let mut cmd = Command::new("taskset");
    cmd.args(["-c", &first_cpu(), "chrt", "--fifo", "1"])
        .arg(exe);
    cmd
}

/// True when this machine lets a process run at real-time priority (a container may not).
fn fifo_allowed() -> bool {
    Command::new("chrt")
        .args(["--fifo", "1", "true"])
        .status()
        .is_ok_and(|s| s.success())
}

/// The first CPU this process may run on (`Cpus_allowed_list` of /proc/self/status).
fn first_cpu() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .and_then(|v| {
            let v = v.trim();
            let end = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
            (end > 0).then(|| v[..end].to_string())
        })
        .unwrap_or_else(|| "0".into())
}

/// Runs `culprit diagnose ARGS --json`; returns the exit status (0 or 1, anything else fails the
/// test with stderr) and the report.
pub fn diagnose_json(args: &[&str]) -> (i32, Diagnosis) {
    let o = culprit()
        .arg("diagnose")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let code = o.status.code().unwrap_or(-1);
    assert!(
        code == 0 || code == 1,
        "culprit diagnose {args:?} failed ({code}):\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    (code, report(&o))
}

/// A command's stdout as a diagnosis report.
pub fn report(o: &std::process::Output) -> Diagnosis {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not a diagnosis report ({e}):\n{}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

/// The report's entry for metric `name`.
pub fn metric<'a>(r: &'a Diagnosis, name: &str) -> &'a MetricReport {
    let m = Metric::from_name(name).unwrap_or_else(|| panic!("no metric called {name}"));
    r.metric(m)
        .unwrap_or_else(|| panic!("no metric {name} in {r:#?}"))
}

/// A metric's entry for node `name`.
pub fn node<'a>(m: &'a MetricReport, name: &str) -> &'a NodeReport {
    m.nodes
        .iter()
        .find(|n| n.node == name)
        .unwrap_or_else(|| panic!("no node {name} in {m:#?}"))
}

/// The combined verdict on node `name`.
pub fn verdict(r: &Diagnosis, name: &str) -> Verdict {
    r.verdict(name)
        .map(|v| v.combined.verdict)
        .unwrap_or_else(|| panic!("no verdict for {name} in {r:#?}"))
}

/// The first finding that `is` accepts.
pub fn finding(r: &Diagnosis, is: impl Fn(&Finding) -> bool) -> &Finding {
    r.findings
        .iter()
        .find(|f| is(f))
        .unwrap_or_else(|| panic!("no such finding: {:#?}", r.findings))
}
