//! Training aggregates runs: each run is scored on its own, and a node's threshold is the
//! threshold of its largest fault-free score over all runs (`culprit train` on real files of
//! two synthetic runs, one calmer than the other).

use std::collections::BTreeMap;
use std::path::Path;

use culprit_tests::*;

/// `culprit train RUNS…` → per metric, per node, the threshold.
fn train(dir: &Path, runs: &[&Path], out: &str) -> BTreeMap<String, BTreeMap<String, f64>> {
    let file = dir.join(out);
    let o = culprit()
        .arg("train")
        .args(runs)
        .args(["--weighting", "none", "--out"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    v["metrics"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(m, t)| {
            let per: BTreeMap<String, f64> = t["thresholds"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(n, x)| (n.clone(), x.as_f64().unwrap()))
                .collect();
            (m.clone(), per)
        })
        .collect()
}

#[test]
fn a_nodes_threshold_is_that_of_its_largest_score_over_all_runs() {
    let dir = TempDir::new("train-agg");
    let calm = dir.join("calm");
    let rough = dir.join("rough");
    write_peer_samples_with(&calm, false, false, 0.02);
    write_peer_samples_with(&rough, false, false, 0.15);
    let a = train(dir.path(), &[&calm], "a.json");
    let b = train(dir.path(), &[&rough], "b.json");
    let both = train(dir.path(), &[&calm, &rough], "ab.json");
    assert_eq!(both.keys().collect::<Vec<_>>(), ["samples"]);
    let (ta, tb, tab) = (&a["samples"], &b["samples"], &both["samples"]);
    assert_eq!(tab.len(), 4, "{tab:?}");
    let mut differ = 0;
    for (node, &t) in tab {
        assert_eq!(t, ta[node].max(tb[node]), "{node}: {ta:?} {tb:?} {tab:?}");
        differ += usize::from(ta[node] != tb[node]);
    }
    // The runs differ, so the test can tell a maximum from either run alone.
    assert!(
        differ > 0 && tb.values().sum::<f64>() > ta.values().sum::<f64>(),
        "{ta:?} {tb:?}"
    );
}
