//! Golden tests of `culprit diagnose`'s two output formats on a fixed, synthetic dataset
//! (synthetic sampler output written with the format crate, deterministic noise): the human
//! report and the JSON report must match tests/golden/ byte for byte. After an intended change,
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
