//! What real programs do that tracers get wrong (tests/c/robust.c): non-local exits that leave
//! the shadow stack behind (siglongjmp out of a signal handler, a server loop that longjmps back
//! on every error, a longjmp from beyond the shadow stack's depth), asynchronous cancellation
//! landing inside a hook, and children made without fork's atfork handlers. The runtime must
//! neither break the program nor silently stop tracing it.

mod tracer_util;

use culprit_tests::*;
use tracer_util::*;

/// Builds tests/c/robust.c at -O2 into `dir`.
fn robust(dir: &std::path::Path, link: Link) -> std::path::PathBuf {
    build(dir, "robust.c", "robust", "-O2", link)
}

fn overflows(p: &Proc) -> u64 {
    p.intervals.iter().map(|i| i.overflows as u64).sum()
}

#[test]
fn siglongjmp_out_of_a_signal_handler_keeps_the_thread_traced() {
    let tmp = TempDir::new("rb-siglj");
    for link in [Link::Linked, Link::Preload] {
        let exe = robust(tmp.path(), link);
        let data = tmp.join(format!("{link:?}"));
        // 100 timeouts of 1 ms in a loop that is mostly hooks: many land inside one.
        let out = run(traced(&exe, link, &data, "n1").args(["siglj", "100"]));
        assert_eq!(stdout(&out), "timeouts=100 s=135300\n");
        let p = load_one(&data.join("n1"));
        assert_well_formed(&p);
        assert_eq!(
            p.func("after").calls,
            20 * fib_calls(20),
            "{link:?}: tracing stopped after a timeout: {:#?}",
            p.functions
        );
        assert_eq!(p.func("twenty_afters").calls, 1);
        assert_eq!(p.func("main").calls, 1);
        assert!(
            p.func("fib").unwound > 0,
            "abandoned fib frames are unwound calls: {:#?}",
            p.functions
        );
        assert_eq!(overflows(&p), 0);
    }
}

#[test]
fn errors_that_longjmp_back_to_a_server_loop_do_not_fill_the_shadow_stack() {
    let tmp = TempDir::new("rb-ljloop");
    let exe = robust(tmp.path(), Link::Preload);
    let data = tmp.join("d");
    // 500 errors x 11 abandoned frames: far more than the shadow stack holds.
    let out = run(traced(&exe, Link::Preload, &data, "n1").args(["ljloop", "500"]));
    assert_eq!(stdout(&out), "s=115950\n");
    let p = load_one(&data.join("n1"));
    assert_well_formed(&p);
    assert_eq!(p.func("handle").calls, 100, "{:#?}", p.functions);
    assert_eq!(p.func("fib").calls, 100 * fib_calls(15));
    assert_eq!(p.func("main").calls, 1);
    assert_eq!(overflows(&p), 0, "no call may be refused for lack of room");
    // 500 errors × 11 frames of fail_below, unwound when the loop's next call enters above
    // them: every one is a call.
    let f = p.func("fail_below");
    assert_eq!((f.calls, f.unwound), (500 * 11, 500 * 11));
    assert_eq!(p.lost_frames(), 0);
}

#[test]
fn longjmp_from_beyond_the_shadow_stack_depth() {
    let tmp = TempDir::new("rb-deeplj");
    let exe = robust(tmp.path(), Link::Linked);
    let data = tmp.join("d");
    let out = run(traced(&exe, Link::Linked, &data, "n1").arg("deeplj"));
    assert_eq!(stdout(&out), "s=135300\n");
    let p = load_one(&data.join("n1"));
    assert_well_formed(&p);
    assert_eq!(
        p.func("after").calls,
        20 * fib_calls(20),
        "{:#?}",
        p.functions
    );
    assert_eq!(p.func("main").calls, 1);
    // The frames beyond the shadow stack were refused (overflows), the ones on it unwound.
    let refused = overflows(&p);
    assert!((1900..3001).contains(&refused), "{refused}");
    let deep = p.func("deep");
    assert_eq!(deep.calls, deep.unwound, "{deep:?}");
    assert_eq!(deep.calls + refused, 3001, "{deep:?}");
}

#[test]
fn async_cancel_inside_hooks() {
    let tmp = TempDir::new("rb-cancel");
    let exe = robust(tmp.path(), Link::Preload);
    // Both clocks: the TSC fast path and the monotonic (out-of-line) path.
    for clock in ["tsc", "monotonic"] {
        let data = tmp.join(clock);
        let out = run(traced(&exe, Link::Preload, &data, "n1")
            .env("CULPRIT_CLOCK", clock)
            .args(["cancel", "100"]));
        assert_eq!(stdout(&out), "r=27060\n", "{clock}");
        let p = load_one(&data.join("n1"));
        assert_well_formed(&p);
        assert_eq!(p.func("fib").calls, 4 * fib_calls(20), "{clock}");
        assert_eq!(p.func("worker").calls, 4);
    }
}

#[test]
fn vfork_child_calling_exit_leaves_the_parent_traced() {
    let tmp = TempDir::new("rb-vfork");
    let exe = robust(tmp.path(), Link::Preload);
    let data = tmp.join("d");
    let out = run(traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_INTERVAL_MS", "100")
        .args(["vforkexit", "5"]));
    assert_eq!(stdout(&out), "s=135300\n");
    let p = load_one(&data.join("n1"));
    // The children's exit() consumed the parent's atexit handlers (glibc's list is in the
    // shared memory), so the parent's file has no end marker; the intervals before are whole.
    assert_contiguous(&p);
    assert_eq!(
        p.func("after").calls,
        20 * fib_calls(20),
        "the parent was still traced after its children's exit: {:#?}",
        p.functions
    );
    assert_eq!(p.func("child_work").calls, 5);
}

#[test]
fn children_made_without_atfork_handlers_exit_at_once() {
    let tmp = TempDir::new("rb-rawfork");
    let exe = robust(tmp.path(), Link::Linked);
    let data = tmp.join("d");
    let out = run(traced(&exe, Link::Linked, &data, "n1").args(["rawfork", "3"]));
    let ms: u64 = stdout(&out)
        .trim()
        .strip_prefix("ms=")
        .and_then(|v| v.parse().ok())
        .expect("ms=N");
    // Untraced they take a few ms; a child waiting for a flusher it does not have took 3 s.
    assert!(ms < 2000, "3 children took {ms} ms to exit");
    let p = load_one(&data.join("n1"));
    assert_well_formed(&p);
    assert_eq!(p.func("main").calls, 1);
}
