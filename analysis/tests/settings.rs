//! Settings resolution (`Setup::resolve`): defaults, options given, values taken from a
//! thresholds file, options that contradict it, and the bounds of each option.

use std::collections::BTreeMap;

use culprit_analysis::error::Error;
use culprit_analysis::family::Features;
use culprit_analysis::setup::{
    Overrides, Setup, TrainedThresholds, DEFAULT_K, DEFAULT_WIN_SHIFT, DEFAULT_WIN_SIZE,
};
use culprit_analysis::thresholds::{
    ThresholdsFile, Weighting, THRESHOLDS_FORMAT, THRESHOLDS_VERSION,
};
use culprit_analysis::time::NS_PER_S;

/// The error as the CLI shows it: each setting it names spelled as its flag.
fn err(o: &Overrides, t: Option<&TrainedThresholds>) -> String {
    Setup::resolve(o, t)
        .unwrap_err()
        .render(|s| format!("--{s}"))
}

fn trained(win_size_s: u64, k: usize) -> TrainedThresholds {
    let mut settings = Setup::resolve(&Overrides::default(), None)
        .unwrap()
        .settings;
    settings.win_size_ns = win_size_s * NS_PER_S;
    settings.k = k;
    TrainedThresholds {
        file: ThresholdsFile {
            format: THRESHOLDS_FORMAT.into(),
            version: THRESHOLDS_VERSION,
            runs: vec!["run1".into()],
            settings,
            metrics: BTreeMap::new(),
        },
        name: "t.json".into(),
    }
}

#[test]
fn defaults_and_options_given() {
    let s = Setup::resolve(&Overrides::default(), None)
        .unwrap()
        .settings;
    assert_eq!(
        (s.win_size_ns, s.win_shift_ns, s.k),
        (DEFAULT_WIN_SIZE, DEFAULT_WIN_SHIFT, DEFAULT_K)
    );
    let o = Overrides {
        win_size_ns: Some(120 * NS_PER_S),
        k: Some(5),
        ..Overrides::default()
    };
    let s = Setup::resolve(&o, None).unwrap().settings;
    assert_eq!((s.win_size_ns, s.k), (120 * NS_PER_S, 5));
}

#[test]
fn unset_options_come_from_the_thresholds_file_and_contradictions_are_refused() {
    let t = trained(90, 4);
    let s = Setup::resolve(&Overrides::default(), Some(&t))
        .unwrap()
        .settings;
    assert_eq!((s.win_size_ns, s.k), (90 * NS_PER_S, 4));
    // The same value given again is fine; another one is not.
    let same = Overrides {
        k: Some(4),
        ..Overrides::default()
    };
    assert_eq!(Setup::resolve(&same, Some(&t)).unwrap().settings.k, 4);
    let other = Overrides {
        k: Some(3),
        ..Overrides::default()
    };
    assert_eq!(
        err(&other, Some(&t)),
        "t.json: thresholds were trained with --k 4, not 3; diagnose with the same settings or \
         train again"
    );
    // Each in its unit: the file's ms, a switch's true or false, the windows' durations.
    let other = Overrides {
        min_time_ns: Some(250_000_000),
        ..Overrides::default()
    };
    assert_eq!(
        err(&other, Some(&t)),
        "t.json: thresholds were trained with --min-time 1000 ms, not 250 ms; diagnose with the \
         same settings or train again"
    );
    let other = Overrides {
        by_program: true,
        ..Overrides::default()
    };
    assert_eq!(
        err(&other, Some(&t)),
        "t.json: thresholds were trained with --by-program false, not true; diagnose with the \
         same settings or train again"
    );
    let other = Overrides {
        os_win_shift_ns: Some(10 * NS_PER_S),
        ..Overrides::default()
    };
    assert_eq!(
        err(&other, Some(&t)),
        "t.json: thresholds were trained with --os-win-shift 30 s, not 10 s; diagnose with the \
         same settings or train again"
    );
}

#[test]
fn out_of_range_options_are_one_line_errors() {
    let with = |f: fn(&mut Overrides)| {
        let mut o = Overrides::default();
        f(&mut o);
        err(&o, None)
    };
    assert_eq!(
        with(|o| o.k = Some(0)),
        "--k 0: give 1 to 10000 (faulty when anomalous in k of the last 2k − 1 windows)"
    );
    assert_eq!(
        with(|o| o.k = Some(usize::MAX)),
        format!(
            "--k {}: give 1 to 10000 (faulty when anomalous in k of the last 2k − 1 windows)",
            usize::MAX
        )
    );
    assert_eq!(
        with(|o| o.win_size_ns = Some(45 * NS_PER_S)),
        "--win-size (45 s) must be a multiple of --win-shift (30 s)"
    );
    assert_eq!(
        with(|o| o.win_shift_ns = Some(0)),
        "--win-size and --win-shift must be longer than zero"
    );
    assert_eq!(
        with(|o| o.domain = Some(2)),
        "--domain 2: an analysis domain needs at least 3 nodes (0: all)"
    );
    assert_eq!(
        with(|o| o.min_samples = Some(f64::NAN)),
        "--min-samples must be a non-negative number"
    );
}

#[test]
fn the_library_names_settings_and_leaves_flags_to_its_caller() {
    let o = Overrides {
        win_size_ns: Some(45 * NS_PER_S),
        ..Overrides::default()
    };
    let e = Setup::resolve(&o, None).unwrap_err();
    assert_eq!(
        e.to_string(),
        "win-size (45 s) must be a multiple of win-shift (30 s)"
    );
    let Error::Settings(m) = &e else {
        panic!("{e:?}")
    };
    assert_eq!(m.settings().collect::<Vec<_>>(), ["win-size", "win-shift"]);
    assert_eq!(
        e.render(|s| format!("<{}>", s.to_uppercase())),
        "<WIN-SIZE> (45 s) must be a multiple of <WIN-SHIFT> (30 s)"
    );
}

/// A thresholds file written before `weighting`, the OS metrics' windows, `smoothing` and
/// `features` were recorded still loads, each taking its documented fallback: no weighting,
/// functions, and the defaults of the rest.
#[test]
fn a_file_written_before_the_newer_settings_loads_with_their_fallbacks() {
    let old = r#"{"win_size_ns": 90000000000, "win_shift_ns": 30000000000, "k": 4,
        "score": "median-node", "distance": "manhattan", "by_program": false,
        "min_samples": 100.0, "min_time_ms": 1000.0}"#;
    let mut t = trained(90, 4);
    t.file.settings = serde_json::from_str(old).unwrap();
    let s = Setup::resolve(&Overrides::default(), Some(&t))
        .unwrap()
        .settings;
    assert_eq!(s.weighting, Weighting::None);
    assert_eq!(s.features, Features::Functions);
    assert_eq!(s.smoothing, Some(5));
    assert_eq!(s.os_windows_ns, Some((90 * NS_PER_S, 30 * NS_PER_S)));
    assert_eq!((s.win_size_ns, s.k), (90 * NS_PER_S, 4));
}
