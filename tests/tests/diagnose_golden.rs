//! Golden tests of `culprit diagnose`'s two output formats on a fixed, synthetic dataset
//! (synthetic sampler output written with the format crate, deterministic noise): the human
//! report and the JSON report must match tests/golden/ byte for byte, and so must the thresholds
//! files `culprit train` writes from the same dataset. After an intended change,
//! regenerate with `CULPRIT_BLESS=1 cargo test -p culprit-tests --test diagnose_golden` and
//! review the diff.

use std::path::Path;

use culprit_tests::*;

fn check(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(name);
    if std::env::var_os("CULPRIT_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (bless with CULPRIT_BLESS=1)", path.display()));
    assert!(
        got == want,
        "{name} differs from {}; if intended, bless with CULPRIT_BLESS=1.\n--- got:\n{got}",
        path.display()
    );
}

#[test]
fn human_and_json_reports() {
    let dir = TempDir::new("diag-golden");
    write_peer_samples(dir.path(), true, true);
    let data = dir.path().to_str().unwrap();
    let human = culprit().args(["diagnose", data]).output().unwrap();
    assert_eq!(human.status.code(), Some(1));
    check(
        "diagnose-human.txt",
        &String::from_utf8_lossy(&human.stdout),
    );
    let json = culprit()
        .args(["diagnose", data, "--json"])
        .output()
        .unwrap();
    assert_eq!(json.status.code(), Some(1));
    let text = String::from_utf8_lossy(&json.stdout).replace(data, "DATA");
    check("diagnose.json", &text);
}

fn read_golden(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("golden")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The golden dataset in a new directory, and the golden file `name`.
fn golden_dataset(dir: &str, name: &str) -> (TempDir, String) {
    let dir = TempDir::new(dir);
    write_peer_samples(dir.path(), true, true);
    (dir, read_golden(name))
}

/// `s` without ANSI SGR escape codes (`ESC [ … m`).
fn strip_sgr(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("\x1b[") {
        out.push_str(&rest[..i]);
        match rest[i..].find('m') {
            Some(j) => rest = &rest[i + j + 1..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

#[test]
fn colour_only_when_asked_or_on_a_terminal() {
    let (dir, golden) = golden_dataset("diag-colour", "diagnose-human.txt");
    let data = dir.path().to_str().unwrap();
    // Forced: escape codes around the verdict words, and nothing else changed.
    let always = culprit()
        .args(["diagnose", data, "--color", "always"])
        .output()
        .unwrap();
    assert_eq!(always.status.code(), Some(1));
    let text = String::from_utf8_lossy(&always.stdout);
    assert!(text.contains("\x1b["), "no escape codes:\n{text}");
    assert!(
        text.contains("FAULTY\x1b[0m"),
        "verdict not coloured:\n{text}"
    );
    assert_eq!(strip_sgr(&text), golden);
    // CLICOLOR_FORCE forces colour when piped ...
    let forced = culprit()
        .args(["diagnose", data])
        .env("CLICOLOR_FORCE", "1")
        .env_remove("NO_COLOR")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&forced.stdout).contains("FAULTY\x1b[0m"));
    // ... but piped (auto), NO_COLOR (even with CLICOLOR_FORCE) and never are plain text.
    for (args, force, no_color) in [
        (vec!["diagnose", data], false, false),
        (vec!["diagnose", data], true, true),
        (vec!["diagnose", data, "--color=never"], true, false),
        (vec!["--color", "auto", "diagnose", data], true, true),
    ] {
        let mut cmd = culprit();
        cmd.args(&args)
            .env_remove("CLICOLOR_FORCE")
            .env_remove("NO_COLOR");
        if force {
            cmd.env("CLICOLOR_FORCE", "1");
        }
        if no_color {
            cmd.env("NO_COLOR", "1");
        }
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(!text.contains('\x1b'), "{args:?}: escape codes:\n{text}");
        // No progress drawn either: stderr is not a terminal.
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "{args:?}");
        assert_eq!(text, golden, "{args:?}");
    }
}

#[test]
fn times_for_people_are_local_unless_utc() {
    let (dir, golden) = golden_dataset("diag-zone", "diagnose-human.txt");
    let data = dir.path().to_str().unwrap();
    let golden_json = read_golden("diagnose.json");
    let run = |zone: &str, extra: &[&str]| {
        let out = culprit()
            .args(["diagnose", data])
            .args(extra)
            .env("TZ", zone)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{zone} {extra:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // Paris is UTC+1 on 2024-01-01: the data's 00:00:00Z is 01:00:00+01:00.
    let paris = run("Europe/Paris", &[]);
    assert!(
        paris.starts_with(
            "culprit diagnose: 4 nodes (io0, io1, io2, io3); 2024-01-01 01:00:00+01:00 – \
             2024-01-01 01:06:00+01:00\n"
        ),
        "{paris}"
    );
    assert_ne!(paris, golden);
    assert_eq!(run("Europe/Paris", &["--utc"]), golden);
    // JSON stays UTC whatever the zone.
    let json = run("Europe/Paris", &["--json"]).replace(data, "DATA");
    assert_eq!(json, golden_json);
}

/// On a terminal (a pseudo-terminal from util-linux's `script`), `diagnose` draws its progress
/// on stderr and clears it; the report itself is unchanged.
#[test]
fn progress_on_a_terminal() {
    let have = std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !require(have, "`script` (util-linux) for a pseudo-terminal") {
        return;
    }
    let (dir, _) = golden_dataset("diag-progress", "diagnose-human.txt");
    let cmd = format!(
        "{} diagnose {} --color never >/dev/null",
        culprit_bin().display(),
        dir.path().display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .env("TZ", "UTC")
        .output()
        .unwrap();
    // The exit status of culprit (1: a faulty node) comes back through script -e.
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let tty = String::from_utf8_lossy(&out.stdout);
    assert!(tty.contains("diagnosing"), "no progress drawn: {tty:?}");
    assert!(tty.contains("% of the data"), "{tty:?}");
}

/// Too short a run for the windows: "not enough data" and exit status 2, never "no node
/// flagged" (a stopped node needs no window, so it is left out here with --exclude-node).
#[test]
fn not_enough_data_is_an_error() {
    let dir = TempDir::new("diag-short");
    write_peer_samples(dir.path(), true, true);
    let data = dir.path().to_str().unwrap();
    let o = culprit()
        .args([
            "diagnose",
            data,
            "--exclude-node",
            "io3",
            "--win-size",
            "4m",
        ])
        .args(["--win-shift", "2m", "--json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(o.stdout.is_empty());
    assert!(
        err.contains("not enough data (3 windows needed, 2 complete)"),
        "{err}"
    );
    // With the stopped node (its data ends 1 min before its peers', more than the grace of
    // one 30 s WinShift), the verdict needs no window: 12 complete of 13 needed.
    let o = culprit()
        .args([
            "diagnose",
            data,
            "--win-size",
            "30s",
            "--win-shift",
            "30s",
            "--k",
            "13",
        ])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `culprit train` on the golden dataset writes tests/golden/thresholds*.json byte for byte,
/// with the default settings and with every recorded option given; a file read back and written
/// again has the same bytes up to its metrics (whose floats serde_json reads back to the last
/// digit or so), and `diagnose` reads it. The files were written by the culprit that
/// declared each option in four places (issue 34), so they pin the format it wrote.
#[test]
fn thresholds_files_are_written_and_read_back_byte_for_byte() {
    use culprit_analysis::thresholds::ThresholdsFile;
    let dir = TempDir::new("train-golden");
    let data_dir = dir.path().join("data");
    write_peer_samples(&data_dir, false, false);
    let data = data_dir.to_str().unwrap();
    let given: &[&str] = &[
        "--win-size=40s",
        "--win-shift=20s",
        "--k=2",
        "--score=pairwise",
        "--distance=cdf",
        "--by-program",
        "--min-samples=50",
        "--min-time=250ms",
        "--weighting=none",
        "--os-win-size=60s",
        "--os-win-shift=20s",
        "--smoothing=3",
    ];
    for (name, args) in [
        ("thresholds.json", &[][..]),
        ("thresholds-given.json", given),
    ] {
        let out = dir.path().join(name);
        let o = culprit()
            .args(["train", data, "--out", out.to_str().unwrap()])
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let written = std::fs::read_to_string(&out).unwrap();
        check(name, &written.replace(data, "DATA"));
        let file = ThresholdsFile::load(&out).unwrap();
        let again = dir.path().join(format!("again-{name}"));
        file.save(&again).unwrap();
        let head = |s: &str| s.split("\"metrics\"").next().unwrap().to_string();
        let again = std::fs::read_to_string(&again).unwrap();
        assert_eq!(head(&again), head(&written), "{name}");
        let o = culprit()
            .args([
                "diagnose",
                data,
                "--json",
                "--thresholds",
                out.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
