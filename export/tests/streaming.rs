//! Reading in bounded steps changes nothing in the output: every format exported with a tiny
//! read limit (dozens of steps per file) equals the export read in one step, row for row, on
//! synthetic data written with the format crate (trace and sampler files, kernel events). Also
//! the time range and the program filter, and the refusals.

#[path = "../benches/synth/mod.rs"]
mod synth;

#[cfg(feature = "parquet")]
use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use culprit_export::{export, Format, Request, Selection, Value};

struct Dir(PathBuf);

impl Dir {
    fn new(tag: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("culprit-export-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const T0_S: u64 = 1_790_000_000;

fn data(dir: &Path) -> PathBuf {
    let root = dir.join("data");
    synth::write(
        &root,
        synth::Spec {
            nodes: 3,
            secs: 300,
            funcs: 25,
            sample_funcs: 15,
            t0_s: T0_S,
        },
    )
    .unwrap();
    root
}

fn run(data: &Path, format: Format, out: &Path, limit: u64, sel: &Selection) -> Vec<String> {
    let mut req = Request::new(vec![data.to_path_buf()], format);
    req.output = Some(out.to_path_buf());
    req.read_limit = limit;
    req.selection = sel.clone();
    export(&req).unwrap().notes
}

fn lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut v: Vec<String> = text.lines().map(str::to_string).collect();
    v.sort();
    v
}

/// Every Parquet file's rows, as text, by file path relative to `dir`.
#[cfg(feature = "parquet")]
fn parquet_rows(dir: &Path) -> BTreeMap<String, Vec<String>> {
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            let r = SerializedFileReader::new(std::fs::File::open(&p).unwrap()).unwrap();
            let mut rows: Vec<String> = r
                .get_row_iter(None)
                .unwrap()
                .map(|row| row.unwrap().to_string())
                .collect();
            rows.sort();
            out.insert(p.strip_prefix(dir).unwrap().display().to_string(), rows);
        }
    }
    out
}

#[test]
fn small_steps_give_the_same_output() {
    let dir = Dir::new("steps");
    let data = data(&dir.0);
    let all = Selection::default();
    for format in [Format::Folded, Format::Pprof, Format::Chrome, Format::Csv] {
        let one = dir.0.join(format!("one-{format:?}.csv"));
        let many = dir.0.join(format!("many-{format:?}.csv"));
        run(&data, format, &one, u64::MAX, &all);
        run(&data, format, &many, 2048, &all);
        match format {
            // Aggregates are written sorted: equal bytes.
            Format::Folded | Format::Pprof => {
                assert_eq!(std::fs::read(&one).unwrap(), std::fs::read(&many).unwrap());
            }
            // Streams interleave files differently: equal lines.
            _ => {
                let (a, b) = (lines(&one), lines(&many));
                assert!(a.len() > 1000, "{format:?}: {} lines", a.len());
                assert_eq!(a, b, "{format:?}");
            }
        }
    }
    let (one, many) = (dir.0.join("one-Csv.os.csv"), dir.0.join("many-Csv.os.csv"));
    assert_eq!(lines(&one), lines(&many));
    // 3 nodes × (30 sampler intervals × 2 events + 300 s × the OS metrics, less the 60 seconds
    // where the first is absent), and the header.
    let os = synth::OS_METRICS.len();
    assert_eq!(lines(&one).len(), 3 * (30 * 2 + 300 * os - 60) + 1);
    let absent = format!(
        "n00,{},{},1000000000,os,disk.await,sda,ms,",
        "2026-09-21T14:13:20.000Z",
        T0_S * 1_000_000_000
    );
    assert!(
        !lines(&one).iter().any(|l| l.starts_with(&absent)),
        "disk.await at a 5th second"
    );
    assert!(
        lines(&one).iter().any(|l| l.contains(",os,cpu.user,,%,")),
        "{:?}",
        &lines(&one)[..5]
    );
}

#[test]
#[cfg(feature = "parquet")]
fn parquet_small_steps_give_the_same_output() {
    let dir = Dir::new("pq-steps");
    let data = data(&dir.0);
    let all = Selection::default();
    let (one, many) = (dir.0.join("pq-one"), dir.0.join("pq-many"));
    run(&data, Format::Parquet, &one, u64::MAX, &all);
    run(&data, Format::Parquet, &many, 2048, &all);
    let (a, b) = (parquet_rows(&one), parquet_rows(&many));
    assert_eq!(
        a.keys().collect::<Vec<_>>(),
        [
            "os/node=n00/day=2026-09-21/part-0.parquet",
            "os/node=n01/day=2026-09-21/part-0.parquet",
            "os/node=n02/day=2026-09-21/part-0.parquet",
            "profiles/node=n00/day=2026-09-21/part-0.parquet",
            "profiles/node=n01/day=2026-09-21/part-0.parquet",
            "profiles/node=n02/day=2026-09-21/part-0.parquet",
        ]
    );
    // Per node: 300 × 25 traced rows and 30 × 15 sampled rows.
    assert_eq!(
        a["profiles/node=n00/day=2026-09-21/part-0.parquet"].len(),
        300 * 25 + 30 * 15
    );
    assert_eq!(a, b);
}

#[test]
fn range_and_program_filters() {
    let dir = Dir::new("filters");
    let data = data(&dir.0);
    // +60s .. +120s: 60 traced intervals and 6 sampler intervals per node.
    let sel = Selection {
        from: Some("+60s".into()),
        to: Some("+120s".into()),
        nodes: vec!["n01".into()],
        ..Default::default()
    };
    let out = dir.0.join("r.csv");
    run(&data, Format::Csv, &out, 4096, &sel);
    let rows = lines(&out);
    let body: Vec<&String> = rows.iter().filter(|l| !l.starts_with("node,")).collect();
    assert_eq!(body.len(), 60 * 25 + 6 * 15);
    for r in &body {
        let f: Vec<&str> = r.split(',').collect();
        assert_eq!(f[0], "n01");
        let start: u64 = f[2].parse().unwrap();
        assert!(
            (T0_S + 60..T0_S + 120).contains(&(start / 1_000_000_000)),
            "{r}"
        );
    }
    // A program that is not there: nothing (and the sampler's entries are filtered too).
    let sel = Selection {
        programs: vec!["other".into()],
        ..Default::default()
    };
    let out = dir.0.join("none.folded");
    let notes = run(&data, Format::Folded, &out, 4096, &sel);
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "");
    assert!(
        notes.iter().any(|n| n.contains("output is empty")),
        "{notes:?}"
    );
}

#[test]
fn folded_and_pprof_values() {
    let dir = Dir::new("values");
    let data = data(&dir.0);
    let sel = Selection::default();
    let out = dir.0.join("samples.folded");
    let mut req = Request::new(vec![data.clone()], Format::Folded);
    req.output = Some(out.clone());
    req.value = Some(Value::Samples);
    req.selection = sel;
    // node;program;root;…;function by default: every node apart (issue 31: traces of several
    // nodes merged into one flame graph).
    export(&req).unwrap();
    let by_node = std::fs::read_to_string(&out).unwrap();
    let nodes: std::collections::BTreeSet<&str> = by_node
        .lines()
        .map(|l| l.split(';').next().unwrap())
        .collect();
    assert!(
        nodes.len() > 1 && nodes.iter().all(|n| n.starts_with('n')),
        "{by_node}"
    );
    assert!(
        by_node
            .lines()
            .any(|l| l.starts_with("n00;synth-server;synth-server;f000 ")),
        "{by_node}"
    );
    assert_eq!(by_node.lines().count(), 15 * nodes.len(), "{by_node}");
    // --no-origin-frames: the nodes merged, as before.
    req.origin_frames = false;
    let summary = export(&req).unwrap();
    let text = std::fs::read_to_string(&out).unwrap();
    // program;root;…;function, the call chains as written (function 0 alone: program;image;
    // function), one line per sampled function.
    assert!(
        text.lines()
            .any(|l| l.starts_with("synth-server;synth-server;f000 ")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("synth-server;f000;f002;f006;f014 ")),
        "{text}"
    );
    assert_eq!(text.lines().count(), 15);
    assert!(
        !summary.notes.iter().any(|n| n.contains("one frame deep")),
        "{:?}",
        summary.notes
    );
    // The tracer's paths, rebuilt from its edges: f000 (function 0) is the root of every one.
    req.value = Some(Value::SelfTime);
    export(&req).unwrap();
    let traced = std::fs::read_to_string(&out).unwrap();
    let deepest = traced.lines().map(|l| l.split(';').count()).max().unwrap();
    assert!(deepest >= 4, "{traced}");
    assert!(
        traced.lines().all(|l| l.starts_with("synth-server+0x1000")),
        "{traced}"
    );
    req.origin_frames = true;
    export(&req).unwrap();
    let traced = std::fs::read_to_string(&out).unwrap();
    assert!(
        traced
            .lines()
            .all(|l| l.starts_with('n') && l.contains(";synth-server;synth-server+0x1000")),
        "{traced}"
    );
    // pprof: gzip of a protobuf message whose string table names the sample types.
    let out = dir.0.join("p.pb.gz");
    req.format = Format::Pprof;
    req.output = Some(out.clone());
    export(&req).unwrap();
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&out).unwrap())
        .read_to_end(&mut raw)
        .unwrap();
    let text = String::from_utf8_lossy(&raw);
    for s in [
        "calls",
        "self",
        "samples",
        "nanoseconds",
        "node",
        "n02",
        "f014",
        "[node]",
        "[program]",
    ] {
        assert!(text.contains(s), "{s} missing");
    }
}

#[test]
#[cfg(feature = "parquet")]
fn parquet_refusals_leave_nothing_behind() {
    let dir = Dir::new("pq-refuse");
    let data = data(&dir.0);
    // Parquet into a non-empty directory.
    let target = dir.0.join("full");
    std::fs::create_dir_all(&target).unwrap();
    std::fs::write(target.join("keep.txt"), "mine").unwrap();
    let mut req = Request::new(vec![data.clone()], Format::Parquet);
    req.output = Some(target.clone());
    let e = export(&req).unwrap_err().to_string();
    assert!(e.contains("not empty"), "{e}");
    assert_eq!(
        std::fs::read_to_string(target.join("keep.txt")).unwrap(),
        "mine"
    );
    // Parquet to standard output.
    req.output = None;
    assert!(export(&req).unwrap_err().to_string().contains("-o DIR"));
}

/// Without the `parquet` feature `--format parquet` is one usage error, and nothing is written.
#[test]
#[cfg(not(feature = "parquet"))]
fn without_parquet_the_format_is_refused() {
    let dir = Dir::new("no-pq");
    let data = data(&dir.0);
    let target = dir.0.join("pq");
    let mut req = Request::new(vec![data], Format::Parquet);
    req.output = Some(target.clone());
    let e = export(&req).unwrap_err();
    assert!(matches!(e, culprit_export::Error::Usage(_)), "{e:?}");
    assert!(e.to_string().contains("without Parquet"), "{e}");
    assert!(!target.exists());
}

#[test]
fn refusals_leave_nothing_behind() {
    let dir = Dir::new("refuse");
    let data = data(&dir.0);
    // --diagnosis with another format; an empty range.
    let mut req = Request::new(vec![data.clone()], Format::Csv);
    req.diagnosis = Some(dir.0.join("d.json"));
    assert!(export(&req)
        .unwrap_err()
        .to_string()
        .contains("--diagnosis"));
    let mut req = Request::new(vec![data.clone()], Format::Csv);
    req.selection.from = Some("-10s".into());
    req.selection.to = Some("+10s".into());
    assert!(export(&req)
        .unwrap_err()
        .to_string()
        .starts_with("empty time range"));
    // A diagnosis file that is not one: a one-line error, and the target is untouched.
    std::fs::write(dir.0.join("d.json"), "{\"schema\":\"other\"}").unwrap();
    let target = dir.0.join("t.json");
    std::fs::write(&target, "old").unwrap();
    let mut req = Request::new(vec![data], Format::Chrome);
    req.diagnosis = Some(dir.0.join("d.json"));
    req.output = Some(target.clone());
    let e = export(&req).unwrap_err().to_string();
    assert!(e.contains("not a culprit diagnosis"), "{e}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "old");
    let left: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("partial"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A process killed mid-interval (no end marker, writer gone) leaves its checkpoint of the
/// interval in progress past `committed_end`; the loader re-reads it at every step. While other
/// files are still being read, it must still be exported once.
#[test]
fn a_dead_writers_checkpoint_counts_once() {
    use culprit_format::*;
    let dir = Dir::new("checkpoint");
    let data = data(&dir.0);
    let node = data.join("n00");
    let t0 = T0_S * 1_000_000_000;
    let pid = 777;
    let info = [
        (info_keys::PROGRAM, "killed"),
        (info_keys::PID, "777"),
        (info_keys::BOOT_ID, "a-boot-long-gone"),
        (info_keys::INTERVAL_NS, "1000000000"),
    ];
    let mut w = synthetic::trace_file(&node, pid, t0, &info, None).unwrap();
    let mut buf = RecordBuf::new();
    let entry = |calls| IntervalEntry {
        addr: synth::func_addr(0),
        calls,
        excl_ns: 10,
        incl_ns: 10,
    };
    for i in 0..3 {
        buf.clear();
        let head = IntervalHead {
            start_ns: t0 + i * 1_000_000_000,
            dur_ns: 1_000_000_000,
            ..Default::default()
        };
        buf.interval(&head, [entry(1)]);
        w.append(&buf).unwrap();
    }
    // The checkpoint of interval 3 (partial), past committed_end.
    buf.clear();
    let head = IntervalHead {
        start_ns: t0 + 3_000_000_000,
        dur_ns: 1_000_000_000,
        flags: interval_flags::PARTIAL,
        ..Default::default()
    };
    buf.interval(&head, [entry(1000)]);
    let path = w.path().to_path_buf();
    let end = w.committed_end();
    drop(w);
    use std::os::unix::fs::FileExt as _;
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.write_all_at(buf.as_bytes(), end).unwrap();
    let pending = end + buf.len() as u64;
    f.write_all_at(&pending.to_le_bytes(), HEADER_PENDING_END_OFFSET as u64)
        .unwrap();
    drop(f);
    let sel = Selection {
        programs: vec!["killed".into()],
        ..Default::default()
    };
    for limit in [u64::MAX, 2048] {
        let out = dir.0.join(format!("k{limit}.folded"));
        let mut req = Request::new(vec![data.clone()], Format::Folded);
        req.output = Some(out.clone());
        req.read_limit = limit;
        req.value = Some(Value::Calls);
        req.selection = sel.clone();
        req.origin_frames = false;
        export(&req).unwrap();
        // Three intervals of 1 call and the checkpoint's 1000, once.
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            "0x555500001000 1003\n",
            "read limit {limit}"
        );
    }
}
