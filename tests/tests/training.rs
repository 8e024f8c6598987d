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

/// A metric the thresholds file holds nothing for says so, per metric, in the human output,
/// the JSON and the page (issue 31: it was diagnosed untrained without a word, and the page's
/// header said "untrained" although thresholds were given).
#[test]
fn a_metric_missing_from_the_thresholds_is_said_untrained_per_metric() {
    let dir = TempDir::new("train-missing");
    let run = dir.join("run");
    write_peer_samples_with(&run, false, false, 0.05);
    train(dir.path(), &[&run], "t.json");
    // The file as trained on another deployment: its samples thresholds filed under `count`.
    let file = dir.join("t.json");
    let text = std::fs::read_to_string(&file).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let metrics = v["metrics"].as_object_mut().unwrap();
    let samples = metrics.remove("samples").unwrap();
    metrics.insert("count".into(), samples);
    std::fs::write(&file, serde_json::to_string(&v).unwrap()).unwrap();
    let diagnose = |extra: &[&str]| {
        let o = culprit()
            .arg("diagnose")
            .arg(&run)
            .arg("--thresholds")
            .arg(&file)
            .args(extra)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert!(
            matches!(o.status.code(), Some(0 | 1)),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let json: serde_json::Value = serde_json::from_str(&diagnose(&["--json"])).unwrap();
    let m = &json["metrics"][0];
    assert_eq!(m["metric"], "samples", "{json:#}");
    assert_eq!(m["untrained"], "untrained: not in t.json", "{json:#}");
    let human = diagnose(&[]);
    assert!(
        human.contains("UNTRAINED: samples (untrained: not in t.json)"),
        "{human}"
    );
    let page = dir.join("r.html");
    diagnose(&["--html", page.to_str().unwrap()]);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("untrained, not in it: samples"), "{html}");
}
