//! Unit tests of the experiment's tables and result lines.

use std::collections::{BTreeMap, BTreeSet};

use super::*;
use crate::run::RunRecord;

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
    let cells = |l: &str| -> Vec<String> { l.split('|').map(|c| c.trim().to_string()).collect() };
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
