//! Rotation and retention end to end: a real C program traced with `CULPRIT_ROTATE=1s` for
//! about ten seconds (exact call counts across the pieces, one history in `report`, `export`
//! and while it runs), the sampler rotating every second (every interval exactly once), and
//! `culprit prune` (age, size, dry run; a file being written is never deleted).

mod tracer_util;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use culprit_format::rotation::split_piece;
use culprit_format::{end_reason, ParsedFile, Record};
use culprit_tests::*;
use tracer_util::*;

/// `got` calls of `want`: exact, unless the runtime counted `dropped` calls it could not place
/// in an interval (its flusher starved half an interval on a busy machine): never more, and
/// never lost silently.
fn exact_or_dropped(got: u64, want: u64, dropped: u64, what: &str) {
    if dropped == 0 {
        assert_eq!(got, want, "{what}");
    } else {
        assert!(
            got <= want && got + dropped >= want,
            "{what}: {got} + {dropped} dropped vs {want}"
        );
    }
}

/// One piece of a rotated file, decoded.
#[derive(Debug)]
struct Piece {
    name: String,
    info: BTreeMap<String, String>,
    /// (start, dur, calls of all functions) per Interval record.
    intervals: Vec<(u64, u64, u64)>,
    objects: usize,
    end_reason: Option<u32>,
    /// Calls the runtime counted as dropped (its flusher starved half an interval).
    dropped: u64,
}

fn pieces(node_dir: &Path, prefix: &str) -> Vec<Piece> {
    let mut names: Vec<String> = std::fs::read_dir(node_dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(prefix) && n.ends_with(".cul"))
        .collect();
    names.sort_by_key(|n| split_piece(n).1);
    names
        .into_iter()
        .map(|name| {
            let bytes = std::fs::read(node_dir.join(&name)).unwrap();
            let pf = ParsedFile::parse(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
            let mut p = Piece {
                name: name.clone(),
                info: BTreeMap::new(),
                intervals: Vec::new(),
                objects: 0,
                end_reason: None,
                dropped: 0,
            };
            for rec in pf.records() {
                match rec.unwrap_or_else(|e| panic!("{name}: {e}")) {
                    Record::Interval(iv) => {
                        p.dropped += u64::from(iv.dropped);
                        p.intervals.push((
                            iv.start_ns,
                            iv.dur_ns,
                            iv.entries().map(|e| e.calls).sum(),
                        ));
                    }
                    Record::Info(i) => p.info.extend(i.pairs),
                    Record::Object(_) => p.objects += 1,
                    Record::Samples(s) => p.intervals.push((s.start_ns, s.dur_ns, s.total)),
                    Record::End(e) => p.end_reason = Some(e.reason),
                    _ => {}
                }
            }
            p
        })
        .collect()
}

/// The pieces form one chain: piece n continues piece n − 1, same identity, every piece but
/// the last marked rotated; the intervals of all pieces follow each other without a gap or
/// a repeat. Returns the intervals, in order.
fn assert_chain(ps: &[Piece], identity: &[&str], last_reason: &[u32]) -> Vec<(u64, u64, u64)> {
    for (n, p) in ps.iter().enumerate() {
        assert_eq!(split_piece(&p.name).1 as usize, n, "piece numbers: {ps:#?}");
        if n > 0 {
            assert_eq!(p.info["continues"], ps[n - 1].name, "{p:#?}");
            assert_eq!(p.info["piece"], n.to_string());
            for k in identity {
                assert_eq!(p.info.get(*k), ps[0].info.get(*k), "{k} of {}", p.name);
            }
        }
        if n + 1 < ps.len() {
            assert_eq!(p.end_reason, Some(end_reason::ROTATED), "{}", p.name);
        } else {
            assert!(
                p.end_reason.is_some_and(|r| last_reason.contains(&r)),
                "last piece {}: {:?}",
                p.name,
                p.end_reason
            );
        }
    }
    let all: Vec<(u64, u64, u64)> = ps.iter().flat_map(|p| p.intervals.clone()).collect();
    for w in all.windows(2) {
        assert_eq!(
            w[0].0 + w[0].1,
            w[1].0,
            "gap or repeat between intervals {:?} and {:?}",
            w[0],
            w[1]
        );
    }
    all
}

const ROUNDS: u64 = 100;
const PER: u64 = 1000;

#[test]
fn tracer_rotating_every_second_counts_exactly() {
    let tmp = TempDir::new("rot-tracer");
    let exe = build(tmp.path(), "rotate.c", "rotate", "-O0", Link::Preload);
    let data = tmp.join("data");
    // 100 rounds of 1000 leaf calls, 100 ms apart: about 10 s, a new piece every second.
    let out = run(traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_ROTATE", "1s")
        .args([ROUNDS.to_string(), PER.to_string(), "100".into()]));
    assert_eq!(stdout(&out), format!("done {}\n", ROUNDS * PER));
    assert_eq!(stderr(&out), "");
    let node = data.join("n1");
    let ps = pieces(&node, "trace-");
    assert!(ps.len() >= 8, "about ten pieces expected: {ps:#?}");
    for p in &ps {
        assert!(p.objects > 0, "{}: every piece names its objects", p.name);
    }
    let all = assert_chain(
        &ps,
        &["pid", "proc_start_ns", "boot_id", "program"],
        &[end_reason::EXIT],
    );
    // Every call: leaf, round_ and sleep_ms per round, and main.
    let calls: u64 = all.iter().map(|iv| iv.2).sum();
    let dropped: u64 = ps.iter().map(|p| p.dropped).sum();
    assert_eq!(calls + dropped, ROUNDS * PER + 2 * ROUNDS + 1);

    // `report` sees one process, ended, with the exact counts and every piece as its files.
    let json = stdout_json(&run_ok(culprit().arg("report").arg(&data).arg("--json")));
    let procs = json["nodes"][0]["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "one process: {json}");
    let p = &procs[0];
    assert_eq!(p["status"], "ended", "{p}");
    assert_eq!(p["files"].as_array().unwrap().len(), ps.len(), "{p}");
    assert_eq!(p["intervals"].as_u64().unwrap(), all.len() as u64);
    assert_eq!(p["dropped_calls"].as_u64(), Some(dropped), "{p}");
    let func = |name: &str| {
        p["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["function"] == name)
            .map_or(0, |f| f["calls"].as_u64().unwrap())
    };
    exact_or_dropped(func("leaf"), ROUNDS * PER, dropped, "leaf");
    exact_or_dropped(func("round_"), ROUNDS, dropped, "round_");
    assert_eq!(func("main"), 1);

    // `export` too (read in bounded steps, across the pieces).
    let folded = tmp.join("calls.folded");
    run_ok(
        culprit()
            .arg("export")
            .arg(&data)
            .args(["-f", "folded", "--value", "calls", "-o"])
            .arg(&folded),
    );
    let text = std::fs::read_to_string(&folded).unwrap();
    let leaf: u64 = text
        .lines()
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(stack, _)| stack.rsplit(';').next() == Some("leaf"))
        .map(|(_, v)| v.parse::<u64>().unwrap())
        .sum();
    exact_or_dropped(leaf, ROUNDS * PER, dropped, &text);

    // Without its first pieces (pruned), the rest still reads as one process.
    std::fs::remove_file(node.join(&ps[0].name)).unwrap();
    std::fs::remove_file(node.join(&ps[1].name)).unwrap();
    let json = stdout_json(&run_ok(culprit().arg("report").arg(&data).arg("--json")));
    let procs = json["nodes"][0]["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 1, "{json}");
    assert_eq!(procs[0]["status"], "ended");
    assert_eq!(
        procs[0]["files"].as_array().unwrap().len(),
        ps.len() - 2,
        "{json}"
    );
}

#[test]
fn a_running_rotating_process_reads_as_one_running_process() {
    let tmp = TempDir::new("rot-live");
    let exe = build(tmp.path(), "rotate.c", "rotate", "-O0", Link::Preload);
    let data = tmp.join("data");
    let mut child = traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_ROTATE", "1s")
        .args(["120", "1000", "100"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut last = 0u64;
    let mut seen_pieces = 0usize;
    let mut while_running = 0;
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(1300));
        let json = stdout_json(&run_ok(culprit().arg("report").arg(&data).arg("--json")));
        let procs = json["nodes"][0]["processes"].as_array().unwrap();
        assert_eq!(procs.len(), 1, "one process while it rotates: {json}");
        // A rotated piece is never "ended" nor "stopped" while the process runs. Still running
        // after the report was read means it ran all through the reading (on a loaded machine
        // the reports can outlast the program, which then rightly reads as ended).
        if child.try_wait().unwrap().is_none() {
            assert_eq!(procs[0]["status"], "running", "{json}");
            while_running += 1;
        }
        let leaf = procs[0]["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["function"] == "leaf")
            .map_or(0, |f| f["calls"].as_u64().unwrap());
        assert!(leaf >= last, "calls went backwards: {leaf} < {last}");
        last = leaf;
        seen_pieces = procs[0]["files"].as_array().unwrap().len();
    }
    assert!(seen_pieces >= 3, "pieces while running: {seen_pieces}");
    assert!(
        while_running >= 2,
        "read while running: {while_running} times of 4"
    );
    assert!(child.wait().unwrap().success());
    let json = stdout_json(&run_ok(culprit().arg("report").arg(&data).arg("--json")));
    let p = &json["nodes"][0]["processes"][0];
    assert_eq!(p["status"], "ended");
    let leaf = p["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "leaf")
        .map_or(0, |f| f["calls"].as_u64().unwrap());
    let dropped = p["dropped_calls"].as_u64().unwrap();
    exact_or_dropped(leaf, 120 * 1000, dropped, "leaf");
}

/// Sets a file's modification time `days` days back.
fn age(path: &Path, days: u32) {
    run_ok(
        Command::new("touch")
            .arg("-m")
            .arg("-d")
            .arg(format!("{days} days ago"))
            .arg(path),
    );
}

fn cul_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cul"))
        .collect();
    v.sort();
    v
}

#[test]
fn prune_deletes_old_and_oversized_pieces_never_a_live_one() {
    let tmp = TempDir::new("rot-prune");
    let exe = build(tmp.path(), "rotate.c", "rotate", "-O0", Link::Preload);
    let data = tmp.join("data");
    let node = data.join("n1");
    // A finished process of four-ish pieces.
    run(traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_ROTATE", "1s")
        .args(["35", "100", "100"]));
    let finished = cul_files(&node);
    assert!(finished.len() >= 3, "{finished:?}");
    // A live one, stopped (SIGSTOP) so that it writes nothing while its files are aged.
    let mut child = traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_ROTATE", "1s")
        .args(["600", "100", "100"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let live_prefix = format!("trace-{pid}-");
    let mut waited = 0;
    while cul_files(&node)
        .iter()
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with(&live_prefix)
        })
        .count()
        < 3
    {
        std::thread::sleep(Duration::from_millis(200));
        waited += 1;
        assert!(waited < 150, "the live process made no pieces");
    }
    run_ok(Command::new("kill").args(["-STOP", &pid.to_string()]));
    std::thread::sleep(Duration::from_millis(300));
    let all = cul_files(&node);
    for p in &all {
        age(p, 10);
    }
    let is_live = |p: &Path| {
        p.file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(&live_prefix)
    };
    // The live process's current piece: its highest piece number.
    let current = all
        .iter()
        .filter(|p| is_live(p))
        .max_by_key(|p| split_piece(&p.file_name().unwrap().to_string_lossy()).1)
        .unwrap()
        .clone();

    // Dry run: says what, deletes nothing.
    let out = run_ok(
        culprit()
            .arg("prune")
            .arg(&data)
            .args(["--keep", "7d", "--dry-run"]),
    );
    let text = stdout(&out);
    assert!(text.contains("would delete"), "{text}");
    assert_eq!(cul_files(&node), all);

    let out = run_ok(culprit().arg("prune").arg(&data).args(["--keep", "7d"]));
    let text = stdout(&out);
    let left = cul_files(&node);
    assert_eq!(left, vec![current.clone()], "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.ends_with("older than --keep)"))
            .count(),
        all.len() - 1,
        "{text}"
    );
    assert!(!text.contains(&*current.to_string_lossy()), "{text}");

    // The process goes on and finishes; what is left reads as one process.
    run_ok(Command::new("kill").args(["-CONT", &pid.to_string()]));
    run_ok(Command::new("kill").args(["-TERM", &pid.to_string()]));
    let _ = child.wait();
    // (SIGTERM kills it without an end marker: its files are a dead writer's, finished.)
    let json = stdout_json(&run_ok(culprit().arg("report").arg(&data).arg("--json")));
    assert_eq!(
        json["nodes"][0]["processes"].as_array().unwrap().len(),
        1,
        "{json}"
    );

    // --max-size: a new finished process, then the oldest files go until the rest fit.
    run(traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_ROTATE", "1s")
        .args(["35", "100", "100"]));
    let all = cul_files(&node);
    assert!(all.len() >= 4, "{all:?}");
    let bytes = |p: &Path| {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(p).unwrap().blocks() * 512
    };
    // Oldest first: by modification time, then name (pieces are written in order).
    let mut by_age = all.clone();
    by_age.sort_by_key(|p| (std::fs::metadata(p).unwrap().modified().unwrap(), p.clone()));
    let newest_two: u64 = by_age.iter().rev().take(2).map(|p| bytes(p)).sum();
    let out = run_ok(
        culprit()
            .arg("prune")
            .arg(&data)
            .args(["--max-size", &newest_two.to_string()]),
    );
    let left = cul_files(&node);
    let mut want: Vec<PathBuf> = by_age.iter().rev().take(2).cloned().collect();
    want.sort();
    assert_eq!(left, want, "{}", stdout(&out));

    // Nothing to prune by is an error (exit 2, one line).
    let out = culprit().arg("prune").arg(&data).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}

#[test]
#[ignore = "privileged: perf_event sampling system-wide (CI runs it as root)"]
fn sampler_rotating_every_second_keeps_every_interval_once() {
    if !require(can_sample(), "perf_event sampling") {
        return;
    }
    let _lock = machine_lock();
    let tmp = TempDir::new("rot-sampler");
    let data = tmp.join("data");
    // A finished sampler file of ten days ago: `--keep 7d` deletes it while sampling.
    let old = old_finished_file(&data.join("s1"), 10);
    let out = run_ok(culprit().arg("sample").arg("-o").arg(&data).args([
        "--node",
        "s1",
        "--interval",
        "1s",
        "--rotate",
        "1s",
        "--duration",
        "10s",
        "--event",
        "cpu-clock",
        "--no-os-metrics",
        "--tracepoints",
        "none",
        "--keep",
        "7d",
    ]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!old.exists(), "{stderr}");
    assert!(stderr.contains("older than --keep"), "{stderr}");
    let ps = pieces(&data.join("s1"), "samples-");
    assert!(ps.len() >= 8, "about ten pieces expected: {ps:#?}");
    let all = assert_chain(
        &ps,
        &["pid", "proc_start_ns", "event"],
        &[end_reason::DONE, end_reason::SIGNAL],
    );
    // Every interval once (no repeats, no gaps: checked above), about ten of them.
    assert!((9..=12).contains(&all.len()), "{all:?}");
    let total: u64 = all.iter().map(|iv| iv.2).sum();
    // `report` sees one sampler run with every interval and every sample.
    let json = stdout_json(&run_ok(culprit().arg("report").arg(&data).arg("--json")));
    let node = &json["nodes"][0];
    let samples = node["samples"].as_array().expect("samples in the report");
    assert_eq!(samples.len(), 1, "one sampler run: {node}");
    assert_eq!(samples[0]["intervals"].as_u64().unwrap(), all.len() as u64);
    assert_eq!(samples[0]["total"].as_u64(), Some(total), "{}", samples[0]);
    assert_eq!(samples[0]["status"], "ended");
}

/// `diagnose --follow` over peers that rotate every second sees the same history as an
/// offline `diagnose` afterwards: it follows each process into its new pieces (a rotated piece
/// is not a writer that ended), and ends only when the processes do.
#[test]
fn diagnose_follow_reads_rotating_peers_to_their_end() {
    let tmp = TempDir::new("rot-follow");
    let exe = build(tmp.path(), "rotate.c", "rotate", "-O0", Link::Preload);
    let data = tmp.join("data");
    let start = |node: &str| {
        traced(&exe, Link::Preload, &data, node)
            .env("CULPRIT_ROTATE", "1s")
            .env("CULPRIT_INTERVAL_MS", "100")
            .args(["80", "1000", "100"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap()
    };
    let children: Vec<_> = ["r1", "r2", "r3"].iter().map(|n| start(n)).collect();
    // Until every node has its first file.
    let mut waited = 0;
    while ["r1", "r2", "r3"]
        .iter()
        .any(|n| !data.join(n).is_dir() || cul_files(&data.join(n)).is_empty())
    {
        std::thread::sleep(Duration::from_millis(100));
        waited += 1;
        assert!(waited < 100, "no data after 10 s");
    }
    let follow = culprit()
        .arg("diagnose")
        .arg(&data)
        .args(["--follow", "--for", "120s", "--json"])
        .args(SHORT_WINDOWS)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let t0 = std::time::Instant::now();
    let out = follow.wait_with_output().unwrap();
    // It ended because the writers did, not at --for.
    assert!(
        t0.elapsed() < Duration::from_secs(60),
        "--follow did not end with the processes"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let live: serde_json::Value =
        serde_json::from_str(text.lines().last().expect("the report line")).unwrap();
    let offline = culprit()
        .arg("diagnose")
        .arg(&data)
        .arg("--json")
        .args(SHORT_WINDOWS)
        .output()
        .unwrap();
    let offline: serde_json::Value = serde_json::from_slice(&offline.stdout).unwrap();
    assert_eq!(live["from"], offline["from"], "{live}");
    assert_eq!(live["to"], offline["to"], "{live}");
    let stopped = |d: &serde_json::Value| {
        d["findings"]
            .as_array()
            .unwrap()
            .iter()
            // (Not `gaps`: a flusher starved on this shared machine may miss an interval.)
            .filter(|f| f["kind"] == "stopped")
            .count()
    };
    assert_eq!(stopped(&live), 0, "{live}");
    assert_eq!(stopped(&offline), 0, "{offline}");
    // Each node's history spans the whole run (about 8 s), not its first piece.
    let from = live["from"].as_str().unwrap();
    let to = live["to"].as_str().unwrap();
    assert_ne!(from, to);
    let json = stdout_json(&run_ok(culprit().arg("report").arg(&data).arg("--json")));
    for n in json["nodes"].as_array().unwrap() {
        let p = &n["processes"].as_array().unwrap()[0];
        assert_eq!(n["processes"].as_array().unwrap().len(), 1, "{n}");
        let span_ns = p["last_ns"].as_u64().unwrap() - p["first_ns"].as_u64().unwrap();
        assert!(span_ns >= 7_000_000_000, "{p}");
    }
}

/// `CULPRIT_ROTATE_SIZE` rotates by size (at interval boundaries, counts still exact); a value
/// the runtime cannot read is one warning line and no rotation, never a broken program.
#[test]
fn rotation_by_size_and_a_bad_setting() {
    let tmp = TempDir::new("rot-size");
    let exe = build(tmp.path(), "rotate.c", "rotate", "-O0", Link::Preload);
    let data = tmp.join("data");
    // 100 ms intervals; a piece is 68 KiB before its records (header page, stacks region),
    // so 72K rotates every few kB of records.
    let out = run(traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_INTERVAL_MS", "100")
        .env("CULPRIT_ROTATE_SIZE", "72K")
        .args(["30", "1000", "100"]));
    assert_eq!(stderr(&out), "");
    let ps = pieces(&data.join("n1"), "trace-");
    assert!(ps.len() >= 2, "{ps:#?}");
    let all = assert_chain(&ps, &["pid", "proc_start_ns"], &[end_reason::EXIT]);
    let calls: u64 = all.iter().map(|iv| iv.2).sum();
    let dropped: u64 = ps.iter().map(|p| p.dropped).sum();
    assert_eq!(calls + dropped, 30 * 1000 + 2 * 30 + 1);

    let data = tmp.join("bad");
    let out = run(traced(&exe, Link::Preload, &data, "n1")
        .env("CULPRIT_ROTATE", "often")
        .args(["3", "10", "10"]));
    assert_eq!(stdout(&out), "done 30\n");
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("CULPRIT_ROTATE"), "{err}");
    assert_eq!(cul_files(&data.join("n1")).len(), 1);
}

/// Writes a finished samples file into `dir`, last written `days` ago.
fn old_finished_file(dir: &Path, days: u32) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let p = culprit_format::writer::FileWriter::create_unique(
        dir,
        |seq| culprit_format::names::samples_file_name(1_000_000_000, seq),
        culprit_format::FileKind::Samples,
        1_000_000_000,
        1,
    )
    .unwrap()
    .finish(2_000_000_000, end_reason::DONE)
    .unwrap();
    age(&p, days);
    p
}

/// Issue 30, case 6: `prune --dry-run` lists exactly what the real run deletes. A node
/// directory that is a link (to a directory of old finished files) is refused by the real run;
/// the dry run said "would delete" its files. Now both say the same, verb apart.
#[test]
fn a_dry_run_lists_exactly_what_the_real_run_deletes() {
    let tmp = TempDir::new("prune-dry");
    let data = tmp.join("data");
    let kept = old_finished_file(&data.join("n1"), 10);
    let elsewhere = tmp.join("elsewhere");
    let behind = old_finished_file(&elsewhere, 10);
    std::os::unix::fs::symlink(&elsewhere, data.join("n2")).unwrap();
    let prune = |extra: &[&str]| {
        let o = culprit()
            .arg("prune")
            .arg(&data)
            .args(["--keep", "7d"])
            .args(extra)
            .output()
            .unwrap();
        (o.status.code(), stdout(&o))
    };
    let (dry_status, dry) = prune(&["--dry-run"]);
    assert!(kept.exists() && behind.exists(), "the dry run deleted");
    assert!(
        !dry.contains(&format!("would delete {}/", data.join("n2").display())),
        "{dry}"
    );
    let (status, real) = prune(&[]);
    assert!(!kept.exists(), "{real}");
    assert!(behind.exists(), "the real run followed the link: {real}");
    assert_eq!(
        (dry_status, dry.replace("would delete", "deleted")),
        (status, real.clone())
    );
    assert_eq!(status, Some(2), "{real}");
    assert!(real.contains("culprit: error: cannot delete"), "{real}");
}
