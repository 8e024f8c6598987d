//! The runtime's cost budget, demotions, quiet untraced calls and call-site patching, on a
//! real C program (tests/c/budget.c: threads calling `mid`, which calls the tiny `leaf` 50
//! times and an inlined helper `inl` once), built with gcc -finstrument-functions at -O0 and
//! -O2, linked with the runtime or with it preloaded; and four peers of its server mode, one
//! of which demotes, diagnosed side by side.
//!
//! The harness makes every process trace everything (`CULPRIT_BUDGET=off`, see
//! `culprit_tests::ensure_built`); these tests set the budget on the commands they start.
//!
//! The tests of this file run one at a time ([`one_at_a_time`]): the peers' test compares four
//! servers that must share the machine alike, and the other tests' busy threads beside them
//! made one peer slower than the rest (seen beside `stress-ng --cpu 2`: "more time in parse").

mod diagnose_util;
mod tracer_util;

use std::path::Path;
use std::process::{Child, Stdio};

use culprit_analysis::combine::Verdict;
use culprit_format::demotion_reason;
use culprit_tests::*;
use diagnose_util::*;
use tracer_util::*;

/// Held for the whole of each test of this file: they run one after the other.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// What `budget hot THREADS ROUNDS` calls: (round_, mid, leaf).
fn hot_calls(threads: u64, rounds: u64) -> (u64, u64, u64) {
    let r = threads * rounds;
    (r, r * 100, r * 100 * 50)
}

/// The tracing cost `culprit report --json` gives for the only process of `node` under `root`.
fn tracing_cost(root: &Path, node: &str) -> serde_json::Value {
    let out = run_ok(
        culprit()
            .arg("report")
            .arg(root)
            .args(["--node", node, "--json"]),
    );
    let j = stdout_json(&out);
    j["nodes"][0]["processes"][0]["tracing_cost"].clone()
}

/// The functions demoted in the process of `node`, by name, with their reasons and callers.
fn demoted(root: &Path, node: &str) -> Vec<(String, String, Vec<String>)> {
    let c = tracing_cost(root, node);
    c["demoted"]
        .as_array()
        .map(|v| {
            v.iter()
                .map(|d| {
                    (
                        d["function"].as_str().unwrap().to_string(),
                        d["reason"].as_str().unwrap().to_string(),
                        d["callers"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .map(|c| c.as_str().unwrap().to_string())
                            .collect(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn patched(p: &Proc) -> u64 {
    p.info
        .get("patched_sites")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Hook calls that reached the runtime and were not traced calls: the untraced ("quiet")
/// entries and exits it counted, from the Cost records (each counts the traced calls and the
/// quiet hook calls of its interval) less the traced calls of the Interval records.
fn quiet_hook_calls(p: &Proc) -> u64 {
    let hooks: u64 = p.costs.iter().map(|c| c.calls).sum();
    let traced: u64 = p.functions.values().map(|f| f.calls).sum();
    hooks.saturating_sub(traced)
}

/// Per interval, in time order: (traced calls, untraced hook calls the runtime saw).
fn quiet_by_interval(p: &Proc) -> Vec<(u64, u64)> {
    let mut m: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    for iv in &p.intervals {
        m.entry(iv.start_ns).or_default().0 += iv.calls;
    }
    for c in &p.costs {
        m.entry(c.interval.start_ns).or_default().1 += c.calls;
    }
    m.into_values()
        .map(|(traced, hooks)| (traced, hooks.saturating_sub(traced)))
        .collect()
}

/// No call counted as unwound or lost: the demotion's and the patching's asymmetries (an
/// entry without its exit, an exit without its entry) are absorbed.
fn assert_nothing_lost(p: &Proc) {
    assert_eq!(p.lost_frames(), 0, "{:#?}", p.functions);
    for (name, f) in &p.functions {
        assert_eq!(f.unwound, 0, "{name} counted as unwound: {f:?}");
    }
}

/// An excluded function's hooks return at once, and its call sites in its own body are
/// rewritten to NOPs (its tail jump to the exit hook to `ret`) while four threads keep
/// calling it: every other count stays exact, nothing crashes, nothing is lost.
#[test]
fn excluded_calls_cost_nothing_and_their_sites_are_patched_while_threads_run() {
    let _turn = one_at_a_time();
    let tmp = TempDir::new("budget-excl");
    for (i, (opt, link)) in VARIANTS.into_iter().enumerate() {
        let exe = build(tmp.path(), "budget.c", &format!("b{i}"), opt, link);
        let data = tmp.join(format!("d{i}"));
        let (rounds, mids, leaves) = hot_calls(4, 3000);
        let out = run(traced(&exe, link, &data, "n1")
            .env("CULPRIT_EXCLUDE", "leaf")
            .env("CULPRIT_BUDGET", "off")
            .env("CULPRIT_INTERVAL_MS", "100")
            .args(["hot", "4", "3000"]));
        assert_eq!(
            stdout(&out),
            format!("round={rounds} mid={mids} leaf={leaves}\n"),
            "{opt} {link:?}"
        );
        let p = load_one(&data.join("n1"));
        assert_well_formed(&p);
        assert_eq!(p.func("leaf").calls, 0, "{opt} {link:?}: excluded");
        assert_eq!(p.func("mid").calls, mids, "{opt} {link:?}");
        assert_eq!(p.func("round_").calls, rounds, "{opt} {link:?}");
        // The inlined helper (-O2) or its calls (-O0): traced, once per mid.
        assert_eq!(p.func("inl").calls, mids, "{opt} {link:?}");
        assert_eq!(p.func("worker").calls, 4);
        assert_nothing_lost(&p);
        assert!(
            patched(&p) >= 1,
            "{opt} {link:?}: no call site of leaf patched: {:?}",
            p.info
        );
        assert!(p.demotions.is_empty(), "exclusion is not a demotion");
        // Patched: leaf's calls no longer reach the hooks (the runtime's own count of the
        // untraced hook calls it saw). Those made before the flusher rewrote its sites (at its
        // next wake-up, within 100 ms, once it gets a CPU) did; in an interval after that, a
        // mid's 50 leaf calls would make 100 hook calls for its 2 traced ones (mid, inl).
        let quiet = quiet_hook_calls(&p);
        assert!(quiet < 2 * leaves, "{opt} {link:?}: {quiet}");
        let by_interval = quiet_by_interval(&p);
        assert!(
            by_interval
                .iter()
                .any(|&(traced, quiet)| traced >= 20_000 && quiet <= traced / 10),
            "{opt} {link:?}: (traced, untraced hook calls) by interval: {by_interval:?}"
        );
    }
}

/// An inlined helper's hook calls sit in its caller's body (`inl`, inlined into `mid` at -O2):
/// excluded, they are rewritten too, each once the runtime proves from `mid`'s code that the
/// call is made for `inl` alone — while four threads run `mid`. Every other count stays exact.
#[test]
fn an_inlined_copy_s_hook_calls_are_patched_when_the_code_proves_them() {
    let _turn = one_at_a_time();
    let tmp = TempDir::new("budget-inlined");
    for (i, link) in [Link::Linked, Link::Preload].into_iter().enumerate() {
        let exe = build(tmp.path(), "budget.c", &format!("b{i}"), "-O2", link);
        let data = tmp.join(format!("d{i}"));
        let (rounds, mids, leaves) = hot_calls(4, 1000);
        let out = run(traced(&exe, link, &data, "n1")
            .env("CULPRIT_EXCLUDE", "inl")
            .env("CULPRIT_BUDGET", "off")
            .env("CULPRIT_INTERVAL_MS", "100")
            .args(["hot", "4", "1000"]));
        assert_eq!(
            stdout(&out),
            format!("round={rounds} mid={mids} leaf={leaves}\n"),
            "{link:?}"
        );
        let p = load_one(&data.join("n1"));
        assert_well_formed(&p);
        assert_eq!(p.func("inl").calls, 0, "{link:?}: excluded");
        assert_eq!(p.func("mid").calls, mids, "{link:?}");
        assert_eq!(p.func("leaf").calls, leaves, "{link:?}");
        assert_eq!(p.func("round_").calls, rounds, "{link:?}");
        assert_nothing_lost(&p);
        let inlined: u64 = p
            .info
            .get("patched_inlined")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        assert!(
            inlined >= 1,
            "{link:?}: no inlined site patched: {:?}",
            p.info
        );
        // Once patched, `inl`'s two hook calls per `mid` no longer reach the runtime: an
        // interval after that has (nearly) none for its 51 traced calls per `mid`.
        let by_interval = quiet_by_interval(&p);
        assert!(
            by_interval
                .iter()
                .any(|&(traced, quiet)| traced >= 50_000 && quiet * 51 * 10 <= traced * 2),
            "{link:?}: (traced, untraced hook calls) by interval: {by_interval:?}"
        );
    }
}

/// An inlined copy whose hook calls first run after the function's calls turned quiet (the
/// hooks then return at their first check and no longer take the general path, where sites
/// are noted): `late_mid`'s copy of `inl` runs only after `early` made 1000 calls of it. One
/// quiet call in 4,096 still takes the general path, so that copy's sites are noted and
/// patched too: an interval after that has (nearly) no untraced hook call for its traced ones
/// (before, 100 for each `late_mid`, for as long as the program ran).
#[test]
fn sites_first_run_after_the_calls_turned_quiet_are_patched_too() {
    let _turn = one_at_a_time();
    let tmp = TempDir::new("budget-late");
    let exe = build(tmp.path(), "budget.c", "b", "-O2", Link::Preload);
    let data = tmp.join("d");
    let rounds = 20_000;
    let out = run(traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_EXCLUDE", "inl")
        .env("CULPRIT_BUDGET", "off")
        .env("CULPRIT_INTERVAL_MS", "100")
        .args(["late", &rounds.to_string()]));
    assert_eq!(
        stdout(&out),
        format!("late_round={rounds} late_mid={}\n", rounds * 100)
    );
    let p = load_one(&data.join("n1"));
    assert_well_formed(&p);
    assert_eq!(p.func("inl").calls, 0, "excluded");
    assert_eq!(p.func("late_mid").calls, rounds * 100);
    assert_eq!(p.func("early").calls, 1);
    assert_nothing_lost(&p);
    let by_interval = quiet_by_interval(&p);
    assert!(
        by_interval
            .iter()
            .any(|&(traced, quiet)| traced >= 20_000 && quiet <= traced),
        "(traced, untraced hook calls) by interval: {by_interval:?}"
    );
}

/// `CULPRIT_PATCH=0`: nothing is patched, the calls are still untraced (quiet) and the counts
/// the same.
#[test]
fn without_patching_untraced_calls_are_still_filtered() {
    let _turn = one_at_a_time();
    let tmp = TempDir::new("budget-nopatch");
    let exe = build(tmp.path(), "budget.c", "b", "-O2", Link::Preload);
    let data = tmp.join("d");
    let (rounds, mids, leaves) = hot_calls(2, 500);
    run(traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_EXCLUDE", "leaf")
        .env("CULPRIT_BUDGET", "off")
        .env("CULPRIT_PATCH", "0")
        .args(["hot", "2", "500"]));
    let p = load_one(&data.join("n1"));
    assert_well_formed(&p);
    assert_eq!(patched(&p), 0, "{:?}", p.info);
    assert_eq!((p.func("leaf").calls, p.func("mid").calls), (0, mids));
    assert_eq!(p.func("round_").calls, rounds);
    assert_nothing_lost(&p);
    // Not patched: every entry and exit of leaf reaches the runtime and is counted as quiet,
    // but for the first calls of each thread, which take the general path until its key
    // turns quiet (QUIET_AFTER = 256 in the runtime).
    let quiet = quiet_hook_calls(&p);
    assert!(
        quiet <= 2 * leaves && quiet >= 2 * leaves - 2 * 256,
        "{quiet} of {}: {:#?}",
        2 * leaves,
        p.costs
    );
}

/// A function demoted while four threads call it (`CULPRIT_DEMOTE`): its calls before the
/// demotion are counted, none after; calls of it open at that moment count nothing (no
/// unwound, no lost); every other count is exact; the Demotions record names it, forced, with
/// the caller it was seen called from; its sites are patched.
#[test]
fn a_demotion_while_threads_call_the_function_keeps_every_other_count_exact() {
    let _turn = one_at_a_time();
    let tmp = TempDir::new("budget-demote");
    for (i, opt) in ["-O0", "-O2"].into_iter().enumerate() {
        let exe = build(tmp.path(), "budget.c", &format!("b{i}"), opt, Link::Preload);
        let data = tmp.join(format!("d{i}"));
        let (rounds, mids, leaves) = hot_calls(4, 3000);
        run(traced(&exe, Link::Preload, &data, "n1")
            .env("CULPRIT_DEMOTE", "leaf")
            .env("CULPRIT_BUDGET", "off")
            .env("CULPRIT_INTERVAL_MS", "200")
            .args(["hot", "4", "3000"]));
        let p = load_one(&data.join("n1"));
        assert_well_formed(&p);
        assert_eq!(p.func("mid").calls, mids, "{opt}");
        assert_eq!(p.func("round_").calls, rounds, "{opt}");
        assert_eq!(p.func("inl").calls, mids, "{opt}");
        let leaf = p.func("leaf").calls;
        assert!(
            leaf < leaves,
            "{opt}: leaf still traced after its demotion ({leaf})"
        );
        assert_nothing_lost(&p);
        assert_eq!(p.demotions.len(), 1, "{opt}: {:#?}", p.demotions);
        let d = &p.demotions[0];
        assert_eq!(d.head.budget_ppm, 0, "forced: no budget");
        assert_eq!(d.entries.len(), 1);
        assert_eq!(d.entries[0].reason, demotion_reason::FORCED);
        assert!(d.entries[0].observed > 0, "{d:#?}");
        assert_eq!(
            demoted(&data, "n1"),
            [(
                "leaf".to_string(),
                "forced".to_string(),
                vec!["mid".to_string()]
            )],
            "{opt}"
        );
        assert!(patched(&p) >= 1, "{opt}: {:?}", p.info);
    }
}

/// The budget (2 %): `leaf`, called millions of times a second for a few ns each, costs most
/// for what it tells and is demoted within the first second; the functions not demoted keep
/// exact counts; the Cost records show the cost coming down under the budget.
#[test]
fn the_budget_demotes_the_hot_leaf_and_leaves_the_rest_exact() {
    let _turn = one_at_a_time();
    let tmp = TempDir::new("budget-budget");
    let exe = build(tmp.path(), "budget.c", "b", "-O2", Link::Preload);
    let data = tmp.join("d");
    let (rounds, mids, _) = hot_calls(2, 30000);
    run(traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_BUDGET", "2%")
        .env("CULPRIT_INTERVAL_MS", "200")
        .args(["hot", "2", "30000"]));
    let p = load_one(&data.join("n1"));
    assert_well_formed(&p);
    assert_eq!(p.info["budget"], "2%");
    assert!(
        p.info["call_cost_ps"].parse::<u64>().unwrap() > 100,
        "{:?}",
        p.info
    );
    let d = demoted(&data, "n1");
    assert!(
        d.iter().any(|(f, r, _)| f == "leaf" && r == "budget"),
        "{d:#?}"
    );
    let gone: Vec<&str> = d.iter().map(|(f, _, _)| f.as_str()).collect();
    for (f, want) in [("mid", mids), ("round_", rounds), ("inl", mids)] {
        if !gone.contains(&f) {
            assert_eq!(p.func(f).calls, want, "{f}, demoted: {gone:?}");
        }
    }
    assert_eq!(p.func("worker").calls, 2);
    assert_nothing_lost(&p);
    assert!(!p.costs.is_empty());
    assert!(
        p.costs.iter().all(|c| c.cpu_ns > 0 || c.calls == 0),
        "{:#?}",
        p.costs
    );
    // Once the demotions are done, a whole interval costs at most twice the budget (the
    // estimate of one interval is rough: calls are placed by when they return, CPU time by
    // when the flusher reads it).
    let full: Vec<_> = p
        .costs
        .iter()
        .filter(|c| c.interval.flags & culprit_format::interval_flags::PARTIAL == 0)
        .collect();
    assert!(
        full.iter()
            .any(|c| (c.cost_ns as f64) <= 0.04 * c.cpu_ns as f64 && c.cpu_ns > 10_000_000),
        "{:#?}",
        p.costs
    );
    // Reports say so, and the flags leave the leaf out of a rebuild.
    let text = stdout(&run_ok(culprit().arg("report").arg(&data)));
    assert!(
        text.contains("demoted at") && text.contains("leaf"),
        "{text}"
    );
    assert!(text.contains("tracing cost: about"), "{text}");
    let flags = stdout(&run_ok(
        culprit().arg("report").arg(&data).arg("--exclude-flags"),
    ));
    let line = flags
        .lines()
        .find(|l| l.starts_with("-finstrument-functions-exclude-function-list="))
        .unwrap_or_else(|| panic!("{flags}"));
    let list = line.split_once('=').unwrap().1;
    assert!(list.split(',').any(|n| n == "leaf"), "{flags}");
    // Rebuilt with the flags: leaf has no hooks at all, mid has.
    let rebuilt = tmp.join("rebuilt");
    gcc(
        &[&c_source("budget.c")],
        &rebuilt,
        &["-O2", "-finstrument-functions", "-pthread", line],
    );
    let data2 = tmp.join("d2");
    run(traced(&rebuilt, Link::Preload, &data2, "n1")
        .env("CULPRIT_BUDGET", "off")
        .args(["hot", "1", "200"]));
    let p2 = load_one(&data2.join("n1"));
    assert_eq!(p2.func("leaf").calls, 0, "{:#?}", p2.functions);
    assert_eq!(patched(&p2), 0, "nothing left to patch: {:?}", p2.info);
}

/// `CULPRIT_BUDGET=off` traces everything, whatever it costs.
#[test]
fn budget_off_traces_everything() {
    let _turn = one_at_a_time();
    let tmp = TempDir::new("budget-off");
    let exe = build(tmp.path(), "budget.c", "b", "-O2", Link::Preload);
    let data = tmp.join("d");
    let (rounds, mids, leaves) = hot_calls(2, 1500);
    run(traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_BUDGET", "off")
        .args(["hot", "2", "1500"]));
    let p = load_one(&data.join("n1"));
    assert_well_formed(&p);
    assert_eq!(p.info["budget"], "off");
    assert_eq!(
        (
            p.func("leaf").calls,
            p.func("mid").calls,
            p.func("round_").calls
        ),
        (leaves, mids, rounds)
    );
    assert!(p.demotions.is_empty());
    let c = tracing_cost(&data, "n1");
    assert_eq!(c["expensive"], true, "{c}");
    // The runtime's estimate: most of this program's CPU is the hooks'.
    let share = c["cost_ns"].as_f64().unwrap() / c["cpu_ns"].as_f64().unwrap();
    assert!(share > 0.1, "{c}");
}

const SERVE_S: &str = "14";
/// Requests per 10 ms tick (3,000 a second, each ~10 µs of work and 53 traced calls, 50 of
/// them `leaf`): tracing everything costs a node ~10 % of its CPU, over the 2 % budget; with
/// `leaf` demoted, ~0.6 %, under it — so the budget demotes `leaf` and only `leaf`.
const RATE: &str = "30";

/// One peer of `budget serve`, pinned to one CPU with the others at real-time priority as
/// root (`pinned_realtime`: four light peers waking at the same 10 ms ticks preempted one
/// another at normal priority, and a healthy one was flagged).
fn peer(exe: &Path, data: &Path, node: &str, budget: &str) -> Child {
    let mut cmd = pinned_realtime(exe);
    cmd.args(["serve", SERVE_S, RATE])
        .env("CULPRIT_DIR", data)
        .env("CULPRIT_NODE", node)
        .env("CULPRIT_INTERVAL_MS", "200")
        .env("CULPRIT_BUDGET", budget)
        .env("LD_PRELOAD", runtime_lib())
        .env_remove("CULPRIT_EXCLUDE")
        .env_remove("CULPRIT_INCLUDE")
        .stdout(Stdio::null())
        .spawn()
        .expect("start budget serve")
}

/// Four peers doing the same work; one has the default budget and demotes the hot leaf, the
/// others trace everything. No node is flagged: the leaf is compared as demoted on every
/// node (merged with its caller in time, left out of count), and the report says why.
#[test]
fn peers_stay_comparable_when_one_node_demotes() {
    let _turn = one_at_a_time();
    // No other group of pinned peers on their CPU, and nothing else of the suite's privileged
    // work beside them.
    let _pinned = pinned_turn();
    let _lock = machine_lock();
    let tmp = TempDir::new("budget-peers");
    let exe = build(tmp.path(), "budget.c", "srv", "-O2", Link::Preload);
    let data = tmp.join("data");
    let nodes = [("p0", "2%"), ("p1", "off"), ("p2", "off"), ("p3", "off")];
    let children: Vec<Child> = nodes.iter().map(|(n, b)| peer(&exe, &data, n, b)).collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    // The budget demotes the leaf (its callers as recorded depend on what else it demoted in
    // the same pass: beside `stress-ng`, `mid` went with it and the leaf's caller was the
    // nearest frame still traced; which functions go is the_budget_demotes_the_hot_leaf's test).
    let d = demoted(&data, "p0");
    assert!(
        d.iter().any(|(f, r, _)| f == "leaf" && r == "budget"),
        "p0 demoted: {d:#?}"
    );
    for n in ["p1", "p2", "p3"] {
        assert!(demoted(&data, n).is_empty(), "{n} traces everything");
    }
    let (code, r) = diagnose_json(&[
        data.to_str().unwrap(),
        "--win-size",
        "2s",
        "--win-shift",
        "1s",
        "--min-time",
        "2ms",
        "--k",
        "4",
    ]);
    // No node flagged. (Beside `stress-ng --cpu 2`, with the four peers sharing one CPU, a
    // node was once left `suspect` in a window: a suspect is not a verdict of fault.)
    let verdicts: Vec<(&str, Verdict)> = nodes.iter().map(|(n, _)| (*n, verdict(&r, n))).collect();
    assert!(
        verdicts
            .iter()
            .all(|(_, v)| matches!(v, Verdict::Ok | Verdict::Suspect)),
        "{verdicts:?}: {r:#?}"
    );
    assert_eq!(code, 0, "{verdicts:?}: {r:#?}");
    assert!(
        r.notes
            .iter()
            .any(|n| n.starts_with("p0: the tracer of pid") && n.contains("leaf")),
        "{:#?}",
        r.notes
    );
    // The comparison ran on the merged component, and on counts without the leaf.
    let t = metric(&r, "time");
    assert!(t.nodes.iter().all(|n| n.max_score.is_finite()), "{t:#?}");
}

/// `culprit record --budget`: `off` traces everything and `record` says the call rate makes
/// tracing expensive and names the function to leave out, with the command that prints the
/// flags; a percentage goes to the runtime; a bad value is refused before anything runs.
#[test]
fn record_budget_flag() {
    let _turn = one_at_a_time();
    let tmp = TempDir::new("budget-record");
    let exe = build(tmp.path(), "budget.c", "b", "-O2", Link::Preload);
    let data = tmp.join("data");
    let (rounds, mids, leaves) = hot_calls(2, 1500);
    let out = run(culprit()
        .args(["record", "-o"])
        .arg(&data)
        .args(["--node", "r1", "--budget", "off", "--"])
        .arg(&exe)
        .args(["hot", "2", "1500"]));
    assert_eq!(
        stdout(&out),
        format!("round={rounds} mid={mids} leaf={leaves}\n")
    );
    let err = stderr(&out);
    let line = err
        .lines()
        .find(|l| l.contains("the call rate makes tracing expensive"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        line.contains("rebuild without the hooks of leaf") && line.contains("--exclude-flags"),
        "{line}"
    );
    let p = load_one(&data.join("r1"));
    assert_eq!(p.info["budget"], "off");
    assert_eq!(p.func("leaf").calls, leaves);

    // A percentage reaches the runtime as given (the harness's CULPRIT_BUDGET=off is
    // overridden).
    let data2 = tmp.join("data2");
    run(culprit()
        .args(["record", "-o"])
        .arg(&data2)
        .args(["--node", "r2", "--budget", "0.5%", "--"])
        .arg(&exe)
        .args(["hot", "1", "10"]));
    assert_eq!(load_one(&data2.join("r2")).info["budget"], "0.5%");

    for bad in ["0", "150%", "two"] {
        let o = culprit()
            .args(["record", "-o"])
            .arg(&data2)
            .args(["--budget", bad, "--"])
            .arg(&exe)
            .args(["hot", "1", "1"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{bad}");
        let e = stderr(&o);
        assert!(e.contains("is not a budget"), "{bad}: {e}");
        assert!(stdout(&o).is_empty(), "{bad}: the program ran");
    }
}
