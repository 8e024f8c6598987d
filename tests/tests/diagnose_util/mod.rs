//! Shared helpers of the diagnosis tests: run `culprit diagnose --json` and find things in its
//! report (schema: docs/diagnose-json.md).

#![allow(dead_code)]

use culprit_tests::*;
use serde_json::Value;

/// Runs `culprit diagnose ARGS --json`; returns the exit status (0 or 1, anything else fails the
/// test with stderr) and the report.
pub fn diagnose_json(args: &[&str]) -> (i32, Value) {
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
    (code, stdout_json(&o))
}

/// The report's entry for metric `name`.
pub fn metric<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == name)
        .unwrap_or_else(|| panic!("no metric {name} in {r:#}"))
}

/// A metric's entry for node `name`.
pub fn node<'a>(m: &'a Value, name: &str) -> &'a Value {
    m["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == name)
        .unwrap_or_else(|| panic!("no node {name} in {m:#}"))
}

/// The combined verdict on node `name`.
pub fn verdict(r: &Value, name: &str) -> String {
    r["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["node"] == name)
        .map(|v| v["verdict"].as_str().unwrap().to_string())
        .unwrap_or_else(|| panic!("no verdict for {name} in {r:#}"))
}

/// The first finding of `kind`.
pub fn finding<'a>(r: &'a Value, kind: &str) -> &'a Value {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind} finding: {r:#}"))
}
