//! The test harness itself: the built binary and runtime are found, gcc works.

use culprit_tests::*;

#[test]
fn binaries_are_built_and_found() {
    assert!(culprit_bin().is_file(), "{}", culprit_bin().display());
    assert!(runtime_lib().is_file(), "{}", runtime_lib().display());
    let o = run_ok(culprit().arg("--version"));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("culprit "));
}
