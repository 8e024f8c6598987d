//! Every verb that reads a data directory, given one without culprit data (empty, or holding
//! other files), says in one line what it expected to find and exits with status 2, writing
//! nothing.

use culprit_tests::*;

#[test]
fn verbs_say_what_they_expected() {
    let tmp = TempDir::new("no-data");
    let empty = tmp.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let other = tmp.join("other");
    std::fs::create_dir_all(other.join("sub")).unwrap();
    std::fs::write(other.join("notes.txt"), "not culprit data\n").unwrap();
    std::fs::write(other.join("sub/readme"), "nor this\n").unwrap();
    let out = tmp.join("thresholds.json");
    for dir in [&empty, &other] {
        let d = dir.to_str().unwrap();
        let o = out.to_str().unwrap();
        for args in [
            vec!["report", d],
            vec!["report", d, "--json"],
            vec!["diagnose", d],
            vec!["diagnose", d, "--follow", "--for", "1s"],
            vec!["train", d, "-o", o],
        ] {
            let r = culprit().args(&args).output().unwrap();
            let err = String::from_utf8_lossy(&r.stderr);
            assert_eq!(r.status.code(), Some(2), "{args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
            assert!(
                err.starts_with("culprit: error: ")
                    && err.contains(d)
                    && err.contains("expected one directory per node, DATA/<node>/"),
                "{args:?}: {err}"
            );
            assert!(r.stdout.is_empty(), "{args:?}");
            assert!(!out.exists(), "{args:?} wrote {}", out.display());
        }
    }
}
