//! The typed [`Diagnosis`] and the JSON report (docs/diagnose-json.md): the golden report of
//! `culprit diagnose --json` (tests/golden/diagnose.json, made by the real binary) reads into a
//! `Diagnosis` and writes back byte for byte; a report of another schema, another version or
//! with a field missing is refused — required fields have no defaults. Fields added within
//! version 1 after it was first published ([`ADDED_IN_V1`]) read as empty when absent, so a
//! report of an older culprit still reads.

use culprit_analysis::diagnosis::{MetricStatus, Side, WindowLine};
use culprit_analysis::family::Metric;
use culprit_analysis::Diagnosis;

fn golden() -> String {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/golden/diagnose.json");
    std::fs::read_to_string(p).expect("tests/golden/diagnose.json")
}

#[test]
fn golden_report_round_trips() {
    let text = golden();
    let d: Diagnosis = serde_json::from_str(&text).unwrap();
    assert_eq!(d.culprits, ["io2", "io3"]);
    assert_eq!(d.exit_status(), 1);
    let io2 = d.metric(Metric::SAMPLES).unwrap();
    let io2 = io2.nodes.iter().find(|n| n.node == "io2").unwrap();
    assert_eq!(io2.verdict, MetricStatus::Faulty);
    assert_eq!(io2.top[0].function, "compress_block");
    let again = serde_json::to_string_pretty(&d).unwrap() + "\n";
    assert!(again == text, "re-serialised report differs:\n{again}");
}

/// A root-cause row's direction reads back as a side of the median node, in the family's
/// words it was written with.
#[test]
fn directions_are_sides() {
    let d: Diagnosis = serde_json::from_str(&golden()).unwrap();
    let rows: Vec<_> = d
        .metrics
        .iter()
        .flat_map(|m| &m.nodes)
        .flat_map(|n| &n.top)
        .collect();
    assert!(rows.len() > 3);
    for r in &rows {
        let (side, word) = match r.direction.side() {
            Side::Above => (r.deviation >= 0.0, "more samples"),
            Side::Below => (r.deviation < 0.0, "fewer samples"),
        };
        assert!(side, "{r:#?}");
        assert_eq!(r.direction.word(), word);
        assert_eq!(r.direction.to_string(), word);
    }
    assert!(rows.iter().any(|r| r.direction.side() == Side::Below));
}

/// Fields added within version 1 (docs/diagnose-json.md): the ranking of suspects, the
/// persistence of a root-cause row, a node's windows compared on the seconds present and its
/// late intervals, why a metric is untrained (issue 31). Paths end in these names.
const ADDED_IN_V1: [&[&str]; 6] = [
    &["ranking"],
    &["top", "0", "persistence"],
    &["metrics", "0", "distance_unit"],
    &["metrics", "0", "untrained"],
    &["nodes", "0", "windows_partial"],
    &["nodes", "0", "late_intervals"],
];

fn added_in_v1(path: &[String]) -> bool {
    ADDED_IN_V1.iter().any(|a| {
        if a[0] != "top" && a[0] != "nodes" {
            path.len() == a.len() && path.iter().zip(a.iter()).all(|(p, q)| p == q)
        } else {
            path.len() >= a.len()
                && path[path.len() - a.len()..]
                    .iter()
                    .zip(a.iter())
                    .all(|(p, q)| p == q)
        }
    })
}

/// Every field of a version-1 report is required, at every level, but those added within the
/// version, which read as empty.
#[test]
fn missing_fields_are_refused() {
    let v: serde_json::Value = serde_json::from_str(&golden()).unwrap();
    let mut paths: Vec<Vec<String>> = Vec::new();
    collect(&v, &mut Vec::new(), &mut paths);
    assert!(paths.len() > 50, "{}", paths.len());
    for path in paths {
        let mut w = v.clone();
        remove(&mut w, &path);
        let read = serde_json::from_value::<Diagnosis>(w);
        if path.len() == 1 && path[0] == "ranking" {
            assert!(
                read.unwrap().ranking.is_empty(),
                "a report without a ranking"
            );
        } else if added_in_v1(&path) {
            read.unwrap_or_else(|e| panic!("{path:?} is optional: {e}"));
        } else {
            assert!(read.is_err(), "a report without {path:?} was accepted");
        }
    }
}

/// Paths of every object field (the first element of arrays).
fn collect(v: &serde_json::Value, at: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                at.push(k.clone());
                out.push(at.clone());
                collect(x, at, out);
                at.pop();
            }
        }
        serde_json::Value::Array(a) => {
            if let Some(x) = a.first() {
                at.push("0".into());
                collect(x, at, out);
                at.pop();
            }
        }
        _ => {}
    }
}

fn remove(v: &mut serde_json::Value, path: &[String]) {
    let (last, parents) = path.split_last().unwrap();
    let mut cur = v;
    for p in parents {
        cur = match cur {
            serde_json::Value::Array(a) => &mut a[p.parse::<usize>().unwrap()],
            other => &mut other[p.as_str()],
        };
    }
    cur.as_object_mut().unwrap().remove(last);
}

#[test]
fn other_schemas_and_versions_are_refused() {
    let text = golden();
    let newer = text.replacen("\"version\": 1", "\"version\": 2", 1);
    let e = serde_json::from_str::<Diagnosis>(&newer).unwrap_err();
    assert!(e.to_string().contains("version 2"), "{e}");
    let other = text.replacen("culprit-diagnosis", "culprit-report/1", 1);
    assert!(serde_json::from_str::<Diagnosis>(&other).is_err());
    let metric = text.replacen("\"metric\": \"samples\"", "\"metric\": \"bogus\"", 1);
    assert!(serde_json::from_str::<Diagnosis>(&metric).is_err());
    // Fields added within a version are read past.
    let added = text.replacen("\"trained\"", "\"added_later\": 7,\n  \"trained\"", 1);
    assert!(serde_json::from_str::<Diagnosis>(&added).is_ok());
}

#[test]
fn window_lines_are_typed_too() {
    let line = r#"{"event":"window","metric":"time","start":"2026-11-22T13:05:00.000Z",
        "end":"2026-11-22T13:05:30.250Z","scored":4,"anomalous":["io2"],"newly_faulty":[],
        "incomplete":[]}"#;
    let w: WindowLine = serde_json::from_str(line).unwrap();
    assert_eq!(w.anomalous, ["io2"]);
    assert_eq!(w.end.ns() - w.start.ns(), 30_250_000_000);
    let other = line.replace("\"window\"", "\"report\"");
    assert!(serde_json::from_str::<WindowLine>(&other).is_err());
    // Times are times.
    let other = line.replace("2026-11-22T13:05:00.000Z", "a");
    assert!(serde_json::from_str::<WindowLine>(&other).is_err());
}
