//! Layer-boundary I/O events in the runtime: the C API (`culprit_io_*`) from a real program,
//! the C library's calls with `CULPRIT_IO=1` (files only, `errno` kept, AIO), many threads,
//! a full buffer and signal handlers: every mark is either in the data or counted as dropped.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use culprit_format::{layer_kind, layer_op, LayerEvent, ParsedFile, Record, NO_OFFSET};
use culprit_tests::*;

/// `tests/c/layers.c`, linked with the runtime (or built plain, for `LD_PRELOAD`), at `opt`.
fn build(dir: &Path, opt: &str, linked: bool) -> PathBuf {
    let rt = runtime_lib();
    let rt_dir = rt.parent().unwrap();
    let exe = dir.join(format!("layers{opt}{}", if linked { "-l" } else { "-p" }));
    let mut cmd = Command::new("gcc");
    cmd.args([opt, "-g", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(include_dir())
        .arg("-o")
        .arg(&exe)
        .arg(c_source("layers.c"))
        .arg("-pthread");
    if linked {
        cmd.arg("-L")
            .arg(rt_dir)
            .arg("-lculprit_rt")
            .arg(format!("-Wl,-rpath,{}", rt_dir.display()));
    } else {
        // Declared weak: the program runs with or without the runtime.
        cmd.arg("-DLAYERS_WEAK");
    }
    run_ok(&mut cmd);
    exe
}

/// What a node's trace files hold of layer events: per (layer name, kind), the events; the
/// dropped count; each layer's level.
#[derive(Debug, Default)]
struct Seen {
    events: BTreeMap<(String, u8), Vec<LayerEvent>>,
    dropped: u64,
    levels: BTreeMap<String, i32>,
    files: usize,
}

impl Seen {
    /// The events of `kind` at `layer` (none: a panic naming them).
    fn of(&self, layer: &str, kind: u8) -> &[LayerEvent] {
        self.events
            .get(&(layer.to_string(), kind))
            .unwrap_or_else(|| panic!("no {layer} events of kind {kind}: {self:?}"))
    }

    fn count(&self, layer: &str, kind: u8) -> usize {
        self.events
            .get(&(layer.to_string(), kind))
            .map_or(0, Vec::len)
    }
}

fn seen(node_dir: &Path) -> Seen {
    let mut s = Seen::default();
    for entry in std::fs::read_dir(node_dir).unwrap() {
        let p = entry.unwrap().path();
        if !p
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("trace-")
        {
            continue;
        }
        s.files += 1;
        let bytes = std::fs::read(&p).unwrap();
        let pf = ParsedFile::parse(&bytes).unwrap();
        assert!(pf.ended(), "{} not ended", p.display());
        for rec in pf.records() {
            if let Record::Layers(l) = rec.unwrap() {
                assert!(l.span_start_ns <= l.span_end_ns);
                let names: BTreeMap<u16, String> = l
                    .layers()
                    .map(|d| {
                        s.levels.insert(d.name.to_string(), d.level);
                        (d.id, d.name.to_string())
                    })
                    .collect();
                s.dropped += l.dropped as u64;
                for e in l.events() {
                    // The record's span covers every event it carries (one stamped before
                    // it was pushed included).
                    assert!(
                        l.span_start_ns <= e.t_ns && e.t_ns <= l.span_end_ns,
                        "{e:?} outside {}..{}",
                        l.span_start_ns,
                        l.span_end_ns
                    );
                    let name = names.get(&e.layer).expect("layer in the table").clone();
                    s.events.entry((name, e.kind)).or_default().push(e);
                }
            }
        }
    }
    s
}

/// Runs `layers ARGS` (built at -O2, linked with the runtime) with `CULPRIT_IO=1` in a fresh
/// directory named after `tag`: what it printed and what it wrote.
fn run_with_libc(tag: &str, args: &[&str]) -> (String, Seen) {
    let tmp = TempDir::new(tag);
    let exe = build(tmp.path(), "-O2", true);
    let data = tmp.join("d");
    let out = run_layers(&exe, &data, "n1", args, &[("CULPRIT_IO", "1")]);
    (out, seen(&data.join("n1")))
}

fn run_layers(exe: &Path, data: &Path, node: &str, args: &[&str], envs: &[(&str, &str)]) -> String {
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env("CULPRIT_DIR", data)
        .env("CULPRIT_NODE", node)
        .env("LAYERS_FILE", data.join(format!("{node}.dat")))
        .env_remove("CULPRIT_IO")
        .env_remove("LD_PRELOAD");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = run_ok(&mut cmd);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn marks_from_many_threads_are_all_recorded() {
    let tmp = TempDir::new("layers-marks");
    for (opt, linked) in [("-O0", true), ("-O2", true), ("-O2", false)] {
        let exe = build(tmp.path(), opt, linked);
        let data = tmp.join(format!("d{opt}{linked}"));
        let rt = runtime_lib();
        let preload = [("LD_PRELOAD", rt.to_str().unwrap())];
        let envs: &[(&str, &str)] = if linked { &[] } else { &preload };
        let out = run_layers(&exe, &data, "n1", &["marks", "8", "1000"], envs);
        let first = out.lines().next().unwrap();
        assert_eq!(first, "layers 2 3 again 2 bad -2 -2", "{out}");
        assert!(out.contains("marked 48000 bad-layer -2 -2"), "{out}");
        let s = seen(&data.join("n1"));
        assert_eq!(s.files, 1);
        assert_eq!(s.dropped, 0);
        for kind in [
            layer_kind::ADMIT,
            layer_kind::ISSUE,
            layer_kind::COMPLT,
            layer_kind::CALLBACK,
        ] {
            assert_eq!(s.count("top", kind), 8000, "top {kind}");
        }
        assert_eq!(s.count("bottom", layer_kind::ISSUE), 8000);
        assert_eq!(s.count("bottom", layer_kind::COMPLT), 8000);
        assert_eq!(s.count("bottom", layer_kind::ADMIT), 0);
        // Registered top-down: "top" lies above "bottom", both above the C library.
        assert!(s.levels["top"] > s.levels["bottom"] && s.levels["bottom"] > 300);
        // Each request's events are in order, with its fields as marked.
        let admits = &s.events[&("top".to_string(), layer_kind::ADMIT)];
        let cbs = &s.events[&("top".to_string(), layer_kind::CALLBACK)];
        let by_req: BTreeMap<u64, &LayerEvent> = cbs.iter().map(|e| (e.req, e)).collect();
        for a in admits {
            let c = by_req[&a.req];
            assert!(c.t_ns >= a.t_ns);
            assert_eq!((a.op, a.obj, a.bytes), (layer_op::READ, 9, 65536));
            assert_eq!(a.offset, (a.req % 1_000_000) * 65536);
            assert_eq!((a.pid, a.tid), (c.pid, c.tid));
            assert!(a.tid != 0);
        }
        let tids: std::collections::BTreeSet<u32> = admits.iter().map(|e| e.tid).collect();
        assert_eq!(tids.len(), 8);
    }
}

#[test]
fn the_c_library_boundary_records_files_only_and_keeps_errno() {
    let tmp = TempDir::new("layers-libc");
    let exe = build(tmp.path(), "-O2", true);
    // Off by default: the C library's calls are not recorded.
    let data = tmp.join("off");
    let out = run_layers(&exe, &data, "n1", &["libc", "-"], &[]);
    assert!(out.contains("libc ok"), "{out}");
    let s = seen(&data.join("n1"));
    assert_eq!(s.count("libc", layer_kind::ISSUE), 0, "{s:?}");

    let data = tmp.join("on");
    let out = run_layers(&exe, &data, "n1", &["libc", "-"], &[("CULPRIT_IO", "1")]);
    assert!(out.contains("libc ok"), "{out}");
    let s = seen(&data.join("n1"));
    let issues = &s.events[&("libc".to_string(), layer_kind::ISSUE)];
    let complts = &s.events[&("libc".to_string(), layer_kind::COMPLT)];
    // 3 pwrite, 4 pread, preadv, pwritev, 2 read, the failing pread and the pread through the
    // dup2'ed descriptor: 13; the pipe's 10 calls and the calls on bad descriptors are not.
    assert_eq!(issues.len(), 13, "{issues:#?}");
    assert_eq!(complts.len(), 13);
    let writes = issues.iter().filter(|e| e.op == layer_op::WRITE).count();
    assert_eq!(writes, 4);
    let no_offset = issues.iter().filter(|e| e.offset == NO_OFFSET).count();
    // read() has no offset, and the failing pread's offset −1 reads as none.
    assert_eq!(no_offset, 3);
    // The vector calls know their size once they succeeded.
    assert!(complts.iter().filter(|e| e.bytes == 2000).count() == 2);
    // Nothing done: the failing pread, and the pread at the end of the file.
    let nothing = complts.iter().filter(|e| e.bytes == 0).count();
    assert_eq!(nothing, 2);
    // ISSUE and COMPLT pair up by request, in time order, on one object.
    let objs: std::collections::BTreeSet<u64> = issues.iter().map(|e| e.obj).collect();
    assert_eq!(objs.len(), 1, "one file");
    for i in issues {
        let c = complts.iter().find(|c| c.req == i.req).unwrap();
        assert!(c.t_ns >= i.t_ns && c.fd == i.fd);
    }
    assert!(s.levels["libc"] < s.levels.get("top").copied().unwrap_or(i32::MAX));
}

#[test]
fn posix_aio_is_admitted_and_called_back() {
    let (out, s) = run_with_libc("layers-aio", &["aio", "16"]);
    assert!(out.contains("aio done 16"), "{out}");
    let admits = s.of("libc-aio", layer_kind::ADMIT);
    let cbs = s.of("libc-aio", layer_kind::CALLBACK);
    assert_eq!((admits.len(), cbs.len()), (16, 16));
    for a in admits {
        assert_eq!(
            (a.op, a.bytes, a.offset % 65536),
            (layer_op::READ, 65536, 0)
        );
        let c = cbs
            .iter()
            .find(|c| c.req == a.req)
            .expect("callback of each request");
        assert!(c.t_ns >= a.t_ns && c.bytes == 65536 && c.fd == a.fd);
    }
    // The 16 pwrites that wrote the file went through the libc layer.
    assert_eq!(s.count("libc", layer_kind::ISSUE), 16);
}

/// A C-library call's ISSUE is stamped when the call starts and pushed when it returns: a call
/// held by a signal handler for 300 ms (the flusher drains every 100 ms in between) is carried
/// by a record whose span starts after it — unless the span reaches back to it, as it must
/// (`seen` checks every event against its record's span). Under load, an AIO request's ADMIT
/// was seen 94 ms before its record's span.
#[test]
fn a_call_held_across_drains_is_inside_its_record_s_span() {
    let (out, s) = run_with_libc("layers-held", &["held", "3"]);
    assert!(out.contains("held 3"), "{out}");
    let complts = s.of("libc", layer_kind::COMPLT);
    let by_req: BTreeMap<u64, &LayerEvent> = complts.iter().map(|e| (e.req, e)).collect();
    // The case was made: some call lasted across drains from its ISSUE to its COMPLT.
    let longest = s
        .of("libc", layer_kind::ISSUE)
        .iter()
        .map(|i| by_req[&i.req].t_ns - i.t_ns)
        .max()
        .unwrap();
    assert!(longest >= 250_000_000, "longest call {longest} ns");
}

#[test]
fn a_full_buffer_and_signal_handlers_lose_nothing_silently() {
    let tmp = TempDir::new("layers-burst");
    let exe = build(tmp.path(), "-O2", true);
    let data = tmp.join("burst");
    let out = run_layers(&exe, &data, "n1", &["burst", "50000"], &[]);
    let nums: Vec<u64> = out
        .lines()
        .find(|l| l.starts_with("burst"))
        .unwrap()
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (ok, dropped) = (nums[0], nums[1]);
    assert_eq!(ok + dropped, 50000);
    let s = seen(&data.join("n1"));
    assert_eq!(s.count("bottom", layer_kind::ISSUE) as u64, ok);
    assert_eq!(s.dropped, dropped, "{out}");

    let data = tmp.join("signals");
    let out = run_layers(&exe, &data, "n1", &["signals", "2"], &[]);
    let line = out.lines().find(|l| l.starts_with("signals")).unwrap();
    let nums: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let (ok, dropped, h_ok, h_dropped) = (nums[0], nums[1], nums[2], nums[3]);
    assert!(h_ok > 100, "{line}");
    let s = seen(&data.join("n1"));
    assert_eq!(s.count("bottom", layer_kind::COMPLT) as u64, ok, "{line}");
    assert_eq!(s.count("top", layer_kind::ADMIT) as u64, h_ok, "{line}");
    assert_eq!(s.dropped, dropped + h_dropped, "{line}");
}
