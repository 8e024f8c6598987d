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

#[test]
fn sleeping_time_is_exclusive_to_the_sleeper() {
    let tmp = TempDir::new("rt-sleep");
    for (i, (opt, link)) in [("-O0", Link::Preload), ("-O2", Link::Linked)]
        .into_iter()
        .enumerate()
    {
        let exe = build(tmp.path(), "tracee.c", &format!("t{i}"), opt, link);
        let data = tmp.join(format!("d{i}"));
        run(traced(&exe, link, &data, "n1").arg("sleep"));
        let p = load_one(&data.join("n1"));
        assert_well_formed(&p);
        let (sleeper, outer) = (p.func("sleeper"), p.func("sleep_outer"));
        assert_eq!((sleeper.calls, outer.calls), (1, 1));
        // Blocked time counts (wall clock), and stays with the function that blocked.
        assert!(sleeper.self_ns >= 300_000_000, "{sleeper:?}");
        assert!(outer.total_ns >= 320_000_000, "{outer:?}");
        assert!(
            outer.self_ns < 150_000_000,
            "caller keeps the sleep: {outer:?}"
        );
        assert!(outer.total_ns >= sleeper.total_ns + outer.self_ns - 1_000_000);
        let spin = p.func("spin_ms");
        assert!(
            spin.self_ns >= 20_000_000 && outer.self_ns < spin.self_ns,
            "{spin:?} {outer:?}"
        );
    }
}

fn threads_case(n: u32) {
    let tmp = TempDir::new(&format!("rt-threads{n}"));
    for (i, (opt, link)) in VARIANTS.into_iter().enumerate() {
        let exe = build(tmp.path(), "tracee.c", &format!("t{i}"), opt, link);
        let data = tmp.join(format!("d{i}"));
        run(traced(&exe, link, &data, "n1").args(["threads", &n.to_string(), "20000"]));
        let p = load_one(&data.join("n1"));
        assert_well_formed(&p);
        // The threads exited before the process: their last counts are still there.
        assert_eq!(
            p.func("tiny_leaf").calls,
            20_000 * n as u64,
            "{opt} {link:?}"
        );
        assert_eq!(p.func("leaf_loop").calls, n as u64);
        assert_eq!(p.func("thread_body").calls, n as u64);
        assert_eq!(p.func("main").calls, 1);
        let max_threads = p.intervals.iter().map(|i| i.threads).max().unwrap();
        assert!(max_threads >= 1, "{:?}", p.intervals);
    }
}

#[test]
fn eight_threads_each_counted() {
    threads_case(8);
}

#[test]
fn one_thread_counted() {
    threads_case(1);
}

#[test]
fn longjmp_out_of_nested_calls_recovers() {
    let tmp = TempDir::new("rt-longjmp");
    for (i, (opt, link)) in VARIANTS.into_iter().enumerate() {
        let exe = build(tmp.path(), "tracee.c", &format!("t{i}"), opt, link);
        let data = tmp.join(format!("d{i}"));
        let out = run(traced(&exe, link, &data, "n1").args(["longjmp", "100"]));
        assert_eq!(stdout(&out), "jumped 100\n");
        let p = load_one(&data.join("n1"));
        assert_well_formed(&p);
        // Odd rounds return normally; even rounds longjmp out of deep3 → deep2 → deep1: those
        // calls are unwound (ended when the runtime notices: at the next call from jumper)
        // and count like the others.
        for f in ["deep1", "deep2", "deep3"] {
            assert_eq!(
                p.func(f).calls,
                100,
                "{f} {opt} {link:?}: {:#?}",
                p.functions
            );
            assert_eq!(p.func(f).unwound, 50, "{f} {opt} {link:?}");
        }
        assert_eq!(p.func("tiny_leaf").calls, 100);
        assert_eq!(p.func("tiny_leaf").unwound, 0);
        assert_eq!(p.func("jumper").calls, 1);
        assert_eq!(p.func("main").calls, 1);
        assert_eq!(p.lost_frames(), 0, "{opt} {link:?}");
        let (j, m) = (p.func("jumper"), p.func("main"));
        assert!(j.total_ns <= m.total_ns && j.self_ns <= j.total_ns);
    }
}

#[test]
fn signal_handler_calls_nest_on_the_interrupted_frame() {
    let tmp = TempDir::new("rt-signal");
    for (i, (opt, link)) in [("-O0", Link::Preload), ("-O2", Link::Linked)]
        .into_iter()
        .enumerate()
    {
        let exe = build(tmp.path(), "tracee.c", &format!("t{i}"), opt, link);
        let data = tmp.join(format!("d{i}"));
        let out = run(traced(&exe, link, &data, "n1").arg("signal"));
        assert_eq!(stdout(&out), "handled 1\n");
        let p = load_one(&data.join("n1"));
        assert_well_formed(&p);
        let (leaf, loops, handler) = (
            p.func("tiny_leaf").calls,
            p.func("leaf_loop").calls,
            p.func("in_handler").calls,
        );
        // A handler that interrupted a hook is not traced at all (busy flag); one that
        // interrupted instrumented code is traced whole. Either way the counts add up.
        assert!(handler > 0 && loops > 0, "{:#?}", p.functions);
        assert_eq!(leaf, 1000 * loops + handler, "{opt} {link:?}");
        assert_eq!(p.lost_frames(), 0);
    }
}

#[test]
fn include_and_exclude_filters() {
    let tmp = TempDir::new("rt-filter");
    for (i, (opt, link)) in [("-O0", Link::Preload), ("-O2", Link::Linked)]
        .into_iter()
        .enumerate()
    {
        let exe = build(tmp.path(), "tracee.c", &format!("t{i}"), opt, link);
        let data = tmp.join(format!("inc{i}"));
        run(traced(&exe, link, &data, "n1")
            .env("CULPRIT_INCLUDE", "fi?")
            .args(["fib", "15"]));
        let p = load_one(&data.join("n1"));
        assert_eq!(p.info["include"], "fi?");
        assert_eq!(
            p.functions.keys().collect::<Vec<_>>(),
            ["fib"],
            "{opt} {link:?}"
        );
        assert_eq!(p.func("fib").calls, fib_calls(15));

        let data = tmp.join(format!("exc{i}"));
        run(traced(&exe, link, &data, "n1")
            .env("CULPRIT_EXCLUDE", "tiny_*, printf")
            .args(["leaf", "50000"]));
        let p = load_one(&data.join("n1"));
        assert!(!p.functions.contains_key("tiny_leaf"), "{:#?}", p.functions);
        let lp = p.func("leaf_loop");
        assert_eq!(lp.calls, 1);
        // The excluded leaf's time stays in its caller's exclusive time.
        assert!(lp.self_ns * 10 >= lp.total_ns * 9, "{lp:?}");
        assert_eq!(p.func("main").calls, 1);
    }
}

#[test]
fn function_in_dlopened_library_is_named() {
    let tmp = TempDir::new("rt-dlopen");
    for (i, (opt, link)) in [("-O0", Link::Preload), ("-O2", Link::Linked)]
        .into_iter()
        .enumerate()
    {
        let exe = build(tmp.path(), "tracee.c", &format!("t{i}"), opt, link);
        let lib = build_lib(tmp.path(), "plugin.c", &format!("libplugin{i}.so"), opt);
        let data = tmp.join(format!("d{i}"));
        let out = run(traced(&exe, link, &data, "n1").arg("dlopen").arg(&lib));
        assert_eq!(stdout(&out), "plugin 2500\n");
        let p = load_one(&data.join("n1"));
        assert_well_formed(&p);
        assert_eq!(p.func("plugin_work").calls, 50, "{:#?}", p.functions);
        let lib_path = lib.to_string_lossy().into_owned();
        assert!(
            p.objects.iter().any(|(_, _, path)| *path == lib_path),
            "{:?}",
            p.objects
        );
    }
}

#[test]
fn monotonic_clock_fallback_gives_the_same_counts() {
    // Machines without an invariant TSC use clock_gettime(CLOCK_MONOTONIC); force that path.
    let tmp = TempDir::new("rt-mono");
    let exe = build(tmp.path(), "tracee.c", "t", "-O2", Link::Preload);
    let data = tmp.join("d");
    run(traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_CLOCK", "monotonic")
        .arg("sleep"));
    let p = load_one(&data.join("n1"));
    assert_well_formed(&p);
    assert_eq!(p.info["clock"], "monotonic");
    let s = p.func("sleeper");
    assert_eq!(s.calls, 1);
    assert!(
        s.self_ns >= 300_000_000 && s.self_ns < 2_000_000_000,
        "{s:?}"
    );
    assert_eq!(p.func("spin_ms").calls, 1);
}

#[test]
fn recursion_deeper_than_the_stack_counts_overflows() {
    let tmp = TempDir::new("rt-deep");
    for (i, (opt, link)) in [("-O0", Link::Preload), ("-O2", Link::Linked)]
        .into_iter()
        .enumerate()
    {
        let exe = build(tmp.path(), "tracee.c", &format!("t{i}"), opt, link);
        let data = tmp.join(format!("d{i}"));
        let out = run(traced(&exe, link, &data, "n1").args(["deep", "3000"]));
        assert_eq!(stdout(&out), "depth 3000\n");
        let p = load_one(&data.join("n1"));
        assert_well_formed(&p);
        let overflows: u64 = p.intervals.iter().map(|i| i.overflows as u64).sum();
        let down = p.func("down");
        // The calls that fit on the shadow stack are counted, the others are overflows.
        assert!(overflows > 0 && down.calls > 0, "{down:?} {overflows}");
        assert_eq!(down.calls + overflows, 3001, "{opt} {link:?}");
        assert_eq!(p.lost_frames(), 0);
        assert_eq!(p.func("main").calls, 1);
    }
}
