//! End-to-end tests of libculprit_rt.so on real C programs (tests/c/tracee.c), built with gcc
//! at -O0 and -O2, linked with the runtime and with it LD_PRELOADed.

mod tracer_util;

use culprit_tests::*;
use tracer_util::*;

#[test]
fn fib_call_counts_are_exact() {
    let tmp = TempDir::new("rt-fib");
    for (i, (opt, link)) in VARIANTS.into_iter().enumerate() {
        let exe = build(tmp.path(), "tracee.c", &format!("tracee{i}"), opt, link);
        let data = tmp.join(format!("data{i}"));
        let out = run(traced(&exe, link, &data, "n1").args(["fib", "20"]));
        assert_eq!(stdout(&out), "fib(20)=6765\n");
        assert_eq!(stderr(&out), "", "{opt} {link:?}");
        let p = load_one(&data.join("n1"));
        assert_well_formed(&p);
        let fib = p.func("fib");
        assert_eq!(
            fib.calls,
            fib_calls(20),
            "{opt} {link:?}: {:#?}",
            p.functions
        );
        assert_eq!(p.func("main").calls, 1, "{opt} {link:?}");
        // Recursion counted once in total time: fib's total is at most main's total.
        assert!(
            fib.total_ns <= p.func("main").total_ns,
            "{:#?}",
            p.functions
        );
        assert!(fib.self_ns > 0 && fib.self_ns <= fib.total_ns + 1000);
        assert_eq!(p.lost_frames(), 0);
        assert_eq!(p.info["node"], "n1");
        assert_eq!(p.info["program"], format!("tracee{i}"));
        assert!(p
            .objects
            .iter()
            .any(|(_, f, path)| f & 1 != 0 && path.ends_with(&format!("tracee{i}"))));
    }
}
