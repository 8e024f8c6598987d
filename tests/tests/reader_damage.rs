//! Damaged data and odd command lines never give a wrong verdict or an abort: a damaged file
//! is a finding about its node (`damaged`), never a culprit; every edge of the command line is
//! one error line (exit 2) or a warning. The data is the golden test's synthetic peer group
//! (written with the format crate), damaged the way disks and people damage files.

use std::path::Path;
use std::process::{Command, Output};

use culprit_tests::*;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn flip(path: &Path, at: usize, mask: u8) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= mask;
    std::fs::write(path, bytes).unwrap();
}

fn diagnose(root: &Path, extra: &[&str]) -> Output {
    culprit()
        .arg("diagnose")
        .arg(root)
        .args(extra)
        .output()
        .unwrap()
}

/// The lines of the human report from the verdict to the warnings (the header names the data
/// directory).
fn verdict_lines(o: &Output) -> Vec<String> {
    let mut skipping = false;
    text(&o.stdout)
        .lines()
        .skip_while(|l| !l.starts_with("VERDICT"))
        .take_while(|l| {
            (!l.starts_with("io2 · ") || l.contains(" · resource: ")) && !l.starts_with("warning: ")
        })
        // The ranking of suspects (scores vary with the data) is checked by ranking_rows; the
        // resource blocks (`io2 · resource: …`) by the resource tests.
        .filter(|l| {
            if l.starts_with("suspects, most suspicious first") || l.contains(" · resource: ") {
                skipping = true;
            } else if skipping && l.is_empty() {
                skipping = false;
                return false;
            }
            !skipping
        })
        .map(str::to_string)
        .collect()
}

/// The rows of the ranking of suspects: (node, verdict word).
fn ranking_rows(o: &Output) -> Vec<(String, String)> {
    text(&o.stdout)
        .lines()
        .skip_while(|l| !l.starts_with("suspects, most suspicious first"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w[1].to_string(), w[2].to_string())
        })
        .collect()
}

/// The report's warnings, sorted (files are read in directory order).
fn warnings(o: &Output) -> Vec<String> {
    let mut w: Vec<String> = text(&o.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("warning: "))
        .map(str::to_string)
        .collect();
    w.sort();
    w
}

#[test]
fn one_flipped_byte_is_damage_not_a_stopped_node() {
    let dir = TempDir::new("dmg-flip");
    write_peer_samples(dir.path(), false, false);
    let f1 = node_file(dir.path(), "io1");
    let recs = record_offsets(&std::fs::read(&f1).unwrap());
    // A byte in the payload of the 12th interval of io1 (2 minutes in), and the kind of the
    // 20th interval of io3: what follows each is lost.
    let at1 = recs[12];
    flip(&f1, at1 + 40, 0x10);
    let f3 = node_file(dir.path(), "io3");
    let at3 = record_offsets(&std::fs::read(&f3).unwrap())[20];
    flip(&f3, at3, 0x02);
    let o = diagnose(dir.path(), &[]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let n1 = f1.file_name().unwrap().to_string_lossy().into_owned();
    let n3 = f3.file_name().unwrap().to_string_lossy().into_owned();
    let want = vec![
        "VERDICT: no node flagged".to_string(),
        format!(
            "damaged: io1 — its data is damaged ({n1}: corrupt record at byte {at1}: checksum \
             mismatch); the intact part was compared"
        ),
        format!(
            "damaged: io3 — its data is damaged ({n3}: corrupt record at byte {at3}: checksum \
             mismatch); the intact part was compared"
        ),
        String::new(),
        "node  samples       combined".into(),
        "io0   ok            ok".into(),
        "io1   ok            damaged".into(),
        "io2   ok            ok".into(),
        "io3   ok            damaged".into(),
        String::new(),
        "findings:".into(),
        format!(
            "  io1: {n1} is damaged (corrupt record at byte {at1}: checksum mismatch); its data \
             before the damage is compared, the rest is missing (damage is not a verdict)"
        ),
        format!(
            "  io3: {n3} is damaged (corrupt record at byte {at3}: checksum mismatch); its data \
             before the damage is compared, the rest is missing (damage is not a verdict)"
        ),
    ];
    assert_eq!(verdict_lines(&o), want, "{}", text(&o.stdout));
    // Every node ranked once; damage alone makes no node more suspicious than an ok one (no
    // fault here: all four rank on their evidence, whatever their order).
    let mut ranked = ranking_rows(&o);
    ranked.sort();
    assert_eq!(
        ranked,
        [
            ("io0".to_string(), "ok".to_string()),
            ("io1".into(), "damaged".into()),
            ("io2".into(), "ok".into()),
            ("io3".into(), "damaged".into()),
        ],
        "{}",
        text(&o.stdout)
    );
    assert_eq!(
        warnings(&o),
        [
            format!(
                "{}: corrupt record at byte {at1}: checksum mismatch; data before it is kept",
                f1.display()
            ),
            format!(
                "{}: corrupt record at byte {at3}: checksum mismatch; data before it is kept",
                f3.display()
            ),
        ]
    );
    // JSON: the verdict and the finding.
    let o = diagnose(dir.path(), &["--json"]);
    assert_eq!(o.status.code(), Some(0));
    let v = stdout_json(&o);
    assert_eq!(v["culprits"], serde_json::json!([]));
    let verdict = |n: &str| {
        v["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["node"] == n)
            .unwrap()["verdict"]
            .clone()
    };
    assert_eq!(verdict("io1"), "damaged");
    assert_eq!(verdict("io0"), "ok");
    let finding = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["node"] == "io1")
        .unwrap()
        .clone();
    assert_eq!(
        finding,
        serde_json::json!({
            "kind": "damaged",
            "node": "io1",
            "file": n1,
            "reason": format!("corrupt record at byte {at1}: checksum mismatch"),
        })
    );
}

#[test]
fn a_culprit_is_still_found_beside_a_damaged_node() {
    let dir = TempDir::new("dmg-culprit");
    write_peer_samples(dir.path(), true, false);
    let f0 = node_file(dir.path(), "io0");
    let at = record_offsets(&std::fs::read(&f0).unwrap())[25];
    flip(&f0, at + 100, 0x01);
    let o = diagnose(dir.path(), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    let lines = verdict_lines(&o);
    assert!(
        lines[0].starts_with("VERDICT: io2 is FAULTY — "),
        "{lines:?}"
    );
    assert!(lines[1].starts_with("damaged: io0 — "), "{lines:?}");
    let v = stdout_json(&diagnose(dir.path(), &["--json"]));
    assert_eq!(v["culprits"], serde_json::json!(["io2"]));
}

#[test]
fn an_unreadable_file_costs_its_own_node_only() {
    let dir = TempDir::new("dmg-header");
    write_peer_samples(dir.path(), true, false);
    let f1 = node_file(dir.path(), "io1");
    flip(&f1, 0, 0xff); // the magic
    let o = diagnose(dir.path(), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stderr));
    let lines = verdict_lines(&o);
    assert!(
        lines[0].starts_with("VERDICT: io2 is FAULTY — "),
        "{lines:?}"
    );
    let name = f1.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        lines.contains(&format!(
            "  io1: {name} is damaged (not a culprit data file (bad magic)); its data before \
             the damage is compared, the rest is missing (damage is not a verdict)"
        )),
        "{lines:?}"
    );
    assert_eq!(
        warnings(&o),
        [format!(
            "skipping {}: not a culprit data file (bad magic)",
            f1.display()
        )]
    );
}

/// Runs culprit, expecting exactly one error line and exit status 2.
fn one_error(args: &[&std::ffi::OsStr]) -> String {
    let o = culprit().args(args).output().unwrap();
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    assert!(o.stdout.is_empty(), "{args:?}");
    err.trim_end().to_string()
}

fn os(s: &str) -> &std::ffi::OsStr {
    std::ffi::OsStr::new(s)
}

#[test]
fn every_command_line_edge_is_one_error_line() {
    let dir = TempDir::new("dmg-cli");
    write_peer_samples(dir.path(), false, false);
    let data = dir.path().as_os_str();
    assert_eq!(
        one_error(&[os("diagnose"), data, os("--k"), os("4294967295")]),
        "culprit: error: --k 4294967295: give 1 to 10000 (faulty when anomalous in k of the \
         last 2k − 1 windows)"
    );
    assert_eq!(
        one_error(&[os("diagnose"), data, os("--for"), os("10s")]),
        "culprit: error: --for limits --follow: give both, or neither"
    );
    // Thresholds files: only regular files, of a bounded size.
    let fifo = dir.join("fifo.json");
    run_ok(Command::new("mkfifo").arg(&fifo));
    for (path, why) in [
        (fifo.as_path(), "not a regular file"),
        (Path::new("/dev/zero"), "not a regular file"),
    ] {
        assert_eq!(
            one_error(&[os("diagnose"), data, os("--thresholds"), path.as_os_str()]),
            format!(
                "culprit: error: {}: cannot read thresholds file: {why}",
                path.display()
            )
        );
    }
    let big = dir.join("big.json");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(65 << 20).unwrap();
    assert_eq!(
        one_error(&[os("diagnose"), data, os("--thresholds"), big.as_os_str()]),
        format!(
            "culprit: error: {}: cannot read thresholds file: larger than 64 MiB",
            big.display()
        )
    );
    // A thresholds file with empty maps would flag every node.
    let train = culprit()
        .args(["train"])
        .arg(data)
        .arg("--out")
        .arg(dir.join("t.json"))
        .output()
        .unwrap();
    assert!(train.status.success(), "{}", text(&train.stderr));
    let mut t: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("t.json")).unwrap()).unwrap();
    t["metrics"]["samples"]["thresholds"] = serde_json::json!({});
    let empty = dir.join("empty.json");
    std::fs::write(&empty, t.to_string()).unwrap();
    assert_eq!(
        one_error(&[os("diagnose"), data, os("--thresholds"), empty.as_os_str()]),
        format!(
            "culprit: error: {}: no node has a threshold for samples; retrain with `culprit \
             train`",
            empty.display()
        )
    );
    t["metrics"] = serde_json::json!({});
    std::fs::write(&empty, t.to_string()).unwrap();
    assert_eq!(
        one_error(&[os("diagnose"), data, os("--thresholds"), empty.as_os_str()]),
        format!(
            "culprit: error: {}: no metric has thresholds; retrain with `culprit train`",
            empty.display()
        )
    );
    // Nodes asked for by name.
    assert_eq!(
        one_error(&[os("report"), data, os("--node"), os("nope")]),
        format!(
            "culprit: error: no node nope in {} (its nodes: io0, io1, io2, io3)",
            dir.path().display()
        )
    );
    std::fs::create_dir(dir.join("_unassigned")).unwrap();
    assert_eq!(
        one_error(&[os("report"), data, os("--node"), os("_unassigned")]),
        "culprit: error: _unassigned is not a node: it holds the samples that belong to no \
         node; show them with --all"
    );
    // A sampler scope that does not exist samples nothing: an error before anything runs.
    assert_eq!(
        one_error(&[
            os("sample"),
            os("--cgroup"),
            os("/nonexistent"),
            os("--duration"),
            os("1s"),
            os("-o"),
            dir.join("smp").as_os_str()
        ]),
        "culprit: error: --cgroup /nonexistent: no such cgroup (under /sys/fs/cgroup)"
    );
}

#[test]
fn a_data_directory_that_cannot_be_a_node_is_named() {
    let dir = TempDir::new("dmg-name");
    write_peer_samples(dir.path(), false, false);
    std::fs::rename(dir.join("io3"), dir.join("io 3")).unwrap();
    let o = culprit().arg("report").arg(dir.path()).output().unwrap();
    assert!(o.status.success());
    assert_eq!(
        text(&o.stderr),
        format!(
            "culprit: warning: skipping {}: \"io 3\" is not a valid node name (1..64 characters \
             of [A-Za-z0-9._-], not starting with '.' or '_')\n",
            dir.join("io 3").display()
        )
    );
}

/// Copies the data root `from` to `to` (node directories and their files).
fn copy_root(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    for node in std::fs::read_dir(from).unwrap().flatten() {
        let dest = to.join(node.file_name());
        std::fs::create_dir_all(&dest).unwrap();
        for f in std::fs::read_dir(node.path()).unwrap().flatten() {
            std::fs::copy(f.path(), dest.join(f.file_name())).unwrap();
        }
    }
}

/// The combined verdict of `node` in a JSON report.
fn verdict_of(v: &serde_json::Value, node: &str) -> String {
    v["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["node"] == node)
        .unwrap_or_else(|| panic!("no verdict for {node}: {v:#}"))["verdict"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Issue 30, case 3: cutting, inserting or deleting bytes in a healthy node's trace file —
/// its stacks region included — never makes it stuck, paused or a culprit: a snapshot that is
/// torn, beyond the file's intact records or cut short is not evidence, and the node is
/// `damaged`. (Before: `truncate -s 8192` made a healthy node "STUCK … for 12 s", exit 1.) Nor
/// does a header whose committed end was moved back to a record boundary (before: "STOPPED").
#[test]
fn damage_to_a_healthy_trace_file_is_never_a_verdict() {
    use culprit_format::stacks::STACKS_SLOT_SIZE;
    let dir = TempDir::new("dmg-stacks");
    // 13 s: main and the workers' loops are open for 13 s, past the stuck rule's 10 s.
    let data = run_traced_group(dir.path(), &["io1", "io2", "io3", "io4"], 13);
    let windows = ["--win-size", "4s", "--win-shift", "2s", "--json"];
    let healthy = diagnose(&data, &windows);
    assert_eq!(healthy.status.code(), Some(0), "{}", text(&healthy.stdout));
    let f = node_file(&data, "io2");
    let original = std::fs::read(&f).unwrap();
    let (h, _) = culprit_format::parse_header(&original).unwrap();
    let (region, records) = (h.stacks_offset as usize, h.data_offset as usize);
    assert!(region > 0 && records > region, "{h:?}");
    let slot1 = region + STACKS_SLOT_SIZE;
    let mid = records + (original.len() - records) / 2;
    type Cut = Box<dyn Fn(&mut Vec<u8>)>;
    let cases: Vec<(&str, Cut)> = vec![
        ("truncate -s 8192", Box::new(|b| b.truncate(8192))),
        ("cut in slot 1", Box::new(move |b| b.truncate(slot1 + 100))),
        ("cut at the records", Box::new(move |b| b.truncate(records))),
        ("cut in the records", Box::new(move |b| b.truncate(mid))),
        (
            "64 bytes inserted in slot 0",
            Box::new(move |b| {
                b.splice(region + 100..region + 100, [0x5a; 64]);
            }),
        ),
        (
            "a page inserted before the region",
            Box::new(move |b| {
                b.splice(region..region, [0u8; 4096]);
            }),
        ),
        (
            "64 bytes deleted from slot 1",
            Box::new(move |b| {
                b.drain(slot1 + 8..slot1 + 72);
            }),
        ),
        (
            "the region's first page deleted",
            Box::new(move |b| {
                b.drain(region..region + 4096);
            }),
        ),
        (
            "a range of records deleted",
            Box::new(move |b| {
                b.drain(mid..mid + 200);
            }),
        ),
        (
            "the committed end moved back to a record",
            Box::new(|b| {
                let recs = record_offsets(b);
                let at = recs[recs.len() / 2] as u64;
                let field = culprit_format::HEADER_COMMITTED_END_OFFSET;
                b[field..field + 8].copy_from_slice(&at.to_le_bytes());
            }),
        ),
    ];
    let copy = dir.join("copy");
    for (what, cut) in cases {
        copy_root(&data, &copy);
        let mut bytes = original.clone();
        cut(&mut bytes);
        std::fs::write(node_file(&copy, "io2"), &bytes).unwrap();
        let o = diagnose(&copy, &windows);
        let v = stdout_json(&o);
        assert_eq!(
            (o.status.code(), &v["culprits"]),
            (Some(0), &serde_json::json!([])),
            "{what}: {v:#}"
        );
        assert_eq!(verdict_of(&v, "io2"), "damaged", "{what}: {v:#}");
        let stuck: Vec<&serde_json::Value> = v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "stuck" || f["kind"] == "paused")
            .collect();
        assert!(stuck.is_empty(), "{what}: {stuck:#?}");
    }
}

/// Issue 30, case 3: a node whose only file has a damaged header (a junk kind, header size or
/// version) stays in the report — in `nodes`, the headline and the verdicts, as `damaged` —
/// instead of vanishing ("3 nodes").
#[test]
fn a_node_with_a_damaged_header_stays_in_the_verdicts() {
    // (offset, bytes): kind, header size, the reader version it needs. (A junk `version` alone
    // is a newer writer's file, read as far as this reader can.)
    let junk: [(usize, &[u8]); 3] = [(16, &[0xee; 4]), (12, &[0xff; 4]), (10, &[0x7f, 0x7f])];
    for (at, bytes) in junk {
        let dir = TempDir::new("dmg-head");
        write_peer_samples(dir.path(), false, false);
        let f1 = node_file(dir.path(), "io1");
        let mut b = std::fs::read(&f1).unwrap();
        b[at..at + bytes.len()].copy_from_slice(bytes);
        std::fs::write(&f1, b).unwrap();
        let o = diagnose(dir.path(), &[]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
        let out = text(&o.stdout);
        assert!(
            out.starts_with("culprit diagnose: 4 nodes (io0, io1, io2, io3)"),
            "header byte {at}: {out}"
        );
        assert!(
            out.lines()
                .any(|l| l.starts_with("io1 ") && l.ends_with("damaged")),
            "header byte {at}: {out}"
        );
        let v = stdout_json(&diagnose(dir.path(), &["--json"]));
        assert_eq!(
            v["nodes"],
            serde_json::json!(["io0", "io1", "io2", "io3"]),
            "{v:#}"
        );
        assert_eq!(verdict_of(&v, "io1"), "damaged", "{v:#}");
        assert_eq!(v["culprits"], serde_json::json!([]), "{v:#}");
    }
}

/// Issue 30, case 6: a thresholds file whose thresholds are zero (or negative) would flag every
/// node; training never writes one (its least threshold is two grid steps), so it is refused in
/// one line. (Before: accepted, every node FAULTY, exit 1.)
#[test]
fn a_thresholds_file_of_zero_thresholds_is_refused() {
    let dir = TempDir::new("dmg-zero");
    write_peer_samples(dir.path(), false, false);
    let data = dir.path().as_os_str();
    let trained = dir.join("t.json");
    run_ok(
        culprit()
            .args(["train"])
            .arg(data)
            .arg("--out")
            .arg(&trained),
    );
    let t: serde_json::Value = serde_json::from_slice(&std::fs::read(&trained).unwrap()).unwrap();
    for (what, value) in [("all zero", 0.0), ("all negative", -2.0)] {
        let mut z = t.clone();
        for th in z["metrics"]["samples"]["thresholds"]
            .as_object_mut()
            .unwrap()
            .values_mut()
        {
            *th = serde_json::json!(value);
        }
        let path = dir.join("zero.json");
        std::fs::write(&path, z.to_string()).unwrap();
        let err = one_error(&[os("diagnose"), data, os("--thresholds"), path.as_os_str()]);
        assert_eq!(
            err,
            format!(
                "culprit: error: {}: threshold of node io0 for samples is {value}, not a \
                 positive number (training never writes one); retrain with `culprit train`",
                path.display()
            ),
            "{what}"
        );
    }
    // The trained file itself is taken: no node flagged.
    let o = diagnose(dir.path(), &["--thresholds", trained.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
}
