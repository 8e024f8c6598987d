use super::*;

/// With a baseline learnt from the data: where the thresholds came from, what learning
/// warned of, the stretches a rolling baseline left out, and each node of another role.
#[test]
fn baseline_and_roles_for_people() {
    use culprit_analysis::baseline::{BaselineReport, Stretch};
    use culprit_analysis::model::CompLabel;
    use culprit_analysis::roles::{RoleComponent, RoleMetric, RoleReport};
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/golden/diagnose.json");
    let mut d: Diagnosis = serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap();
    let at = |s: &str| format!("2026-11-22T13:{s}.000Z").parse().unwrap();
    d.baseline = Some(BaselineReport {
        span: "rolling, the last 60 s".into(),
        learnt: Stretch {
            from: at("01:00"),
            to: at("02:00"),
        },
        times: 3,
        left_out: vec![Stretch {
            from: at("01:30"),
            to: at("01:40"),
        }],
        warnings: vec!["baseline: io3 stood out".into()],
    });
    d.roles = vec![RoleReport {
        node: "io1".into(),
        metrics: vec![RoleMetric {
            metric: Metric::TIME,
            windows: 9,
            outstanding: 9,
            components: vec![RoleComponent {
                label: CompLabel::func("srv", "io_pwrite"),
                node: 2.5,
                peers: 1.0,
            }],
        }],
    }];
    let mut out = Vec::new();
    print_human(&d, &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains(
            "thresholds: learnt from the data itself — baseline rolling, the last 60 s; \
             learnt 3 times, last"
        ),
        "{text}"
    );
    assert!(
        text.contains("  not learnt (a node was flagged or suspected): "),
        "{text}"
    );
    assert!(text.contains("warning: baseline: io3 stood out"), "{text}");
    assert!(
        text.contains(
            "another role: io1 — time: io_pwrite 2.5× its peers'; judged against its own \
             baseline"
        ),
        "{text}"
    );
    assert!(!text.contains("thresholds: trained"), "{text}");
}

#[test]
fn values_for_people() {
    assert_eq!(fmt_value("ms", 5210.0), "5.21 s");
    assert_eq!(fmt_value("ms", 12.34), "12.3 ms");
    assert_eq!(fmt_value("calls", 1234567.0), "1,234,567 calls");
    assert_eq!(fmt_value("samples", -42.0), "-42 samples");
    assert_eq!(fmt_value("ms", 0.25), "250 µs");
    assert_eq!(fmt_number("calls", 15148.4), "15,148");
    assert_eq!(fmt_number("ms", 2500.0), "2.50 s");
}

#[test]
fn levels_and_ratios() {
    assert_eq!(fmt_level("B/s", 4_287_266.4), "4,287,266 B/s");
    assert_eq!(fmt_level("count", 3.84), "3.8 count");
    assert_eq!(fmt_level("count", 0.15625), "0.156 count");
    assert_eq!(fmt_level("ms", 231.0), "231.0 ms");
    assert_eq!(fmt_ratio(Some(23.4)), "23×");
    assert_eq!(fmt_ratio(Some(1.554)), "1.55×");
    assert_eq!(fmt_ratio(None), "peers 0");
    assert_eq!(num(763.4), "763");
    assert_eq!(num(2.84), "2.8");
    assert_eq!(num(0.7481), "0.748");
}

fn obs(faulty: bool, anomalous_windows: u64, ratio: Option<f64>) -> Observation {
    use culprit_analysis::resource::Class;
    Observation {
        metric: "proc.blkio_delay".into(),
        instance: None,
        class: Class::StorageLatency,
        direction: Direction::Up,
        ratio,
        node: 4214.0,
        peers: 185.0,
        unit: "ms".into(),
        faulty,
        anomalous_windows,
        share: None,
        small: false,
        diverges: faulty,
    }
}

/// An evidence line says the node's level, its peers', the ratio and how anomalous it was.
#[test]
fn observation_lines() {
    assert_eq!(
        observation(&obs(true, 6, Some(22.8))),
        "proc.blkio_delay 4.21 s vs 185.0 ms (23×; faulty, 6 anomalous windows)"
    );
    assert_eq!(
        observation(&obs(false, 2, Some(1.06))),
        "proc.blkio_delay 4.21 s vs 185.0 ms (1.06×; 2 anomalous windows)"
    );
    let mut o = obs(false, 0, None);
    o.instance = Some("vda".into());
    assert_eq!(
        observation(&o),
        "proc.blkio_delay [vda] 4.21 s vs 185.0 ms (peers 0; not anomalous)"
    );
}

/// A range within one day prints the end's time of day only; across days, the whole end.
#[test]
fn window_range_text() {
    let s = 1_795_000_000 * 1_000_000_000u64;
    let same_day = s + 40 * 1_000_000_000;
    let a = fmt_wall(s);
    let b = fmt_wall(same_day);
    let expected = if a[..10] == b[..10] {
        format!("{a}–{} (9 windows)", &b[11..])
    } else {
        // Local midnight fell inside the 40 s.
        format!("{a}–{b} (9 windows)")
    };
    assert_eq!(range_text(s, same_day, 9), expected);
    let later = s + 3 * 86_400 * 1_000_000_000;
    assert_eq!(range_text(s, later, 1), format!("{a}–{}", fmt_wall(later)));
}
