//! Peak memory and time of every export format on a large synthetic dataset (by default 24 h
//! of 4 nodes: one traced server per node with 100 functions called every second, a sampler
//! run per node with 200 sampled functions every 10 s), side by side with the same export
//! read in one step (no read limit: the whole dataset in memory, as `culprit report` holds it).
//!
//! ```text
//! cargo bench -p culprit-export --bench export_scale                  # 24 h, 4 nodes
//! cargo bench -p culprit-export --bench export_scale -- --hours 1     # quicker
//! cargo bench -p culprit-export --bench export_scale -- --data DIR    # keep the data in DIR
//! cargo bench -p culprit-export --bench export_scale -- --format csv  # only these formats
//! ```
//!
//! Each export runs in a child process (this binary again), which reports its peak resident
//! set (`VmHWM`); chrome and csv write to a pipe (counted, not stored: gigabytes a day; csv's
//! second file, the OS metrics, is then not written), the others to a temporary directory,
//! removed after each run.

#[path = "synth/mod.rs"]
mod synth;

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use culprit_export::{export, Format, Request, DEFAULT_READ_LIMIT};

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn format_of(name: &str) -> Format {
    match name {
        "folded" => Format::Folded,
        "pprof" => Format::Pprof,
        "chrome" => Format::Chrome,
        "csv" => Format::Csv,
        "parquet" => Format::Parquet,
        other => panic!("unknown format {other}"),
    }
}

/// The child: one export (to `out`, or to standard output when `out` is `-`), then its peak
/// RSS on stderr.
fn child(format: &str, limit: u64, data: &Path, out: &Path) {
    let mut req = Request::new(vec![data.to_path_buf()], format_of(format));
    req.output = (out != Path::new("-")).then(|| out.to_path_buf());
    req.read_limit = limit;
    let s = export(&req).expect("export");
    eprintln!("peak-rss-kib {} {}", peak_rss_kib(), s.items);
}

fn du(path: &Path) -> u64 {
    let mut total = 0;
    if let Ok(rd) = std::fs::read_dir(path) {
        for e in rd.flatten() {
            let p = e.path();
            total += if p.is_dir() {
                du(&p)
            } else {
                e.metadata().map(|m| m.len()).unwrap_or(0)
            };
        }
    } else if let Ok(m) = std::fs::metadata(path) {
        total = m.len();
    }
    total
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        child(
            &args[2],
            args[3].parse().unwrap(),
            Path::new(&args[4]),
            Path::new(&args[5]),
        );
        return;
    }
    let mut hours = 24u64;
    let mut nodes = 4usize;
    let mut data: Option<PathBuf> = None;
    let mut only: Vec<String> = Vec::new();
    let mut i = 1;
    while i < args.len() {
        match args[i].as_str() {
            "--hours" => {
                hours = args[i + 1].parse().unwrap();
                i += 1;
            }
            "--nodes" => {
                nodes = args[i + 1].parse().unwrap();
                i += 1;
            }
            "--format" => {
                only.push(args[i + 1].clone());
                i += 1;
            }
            "--data" => {
                data = Some(PathBuf::from(&args[i + 1]));
                i += 1;
            }
            _ => {} // cargo bench passes --bench
        }
        i += 1;
    }
    let spec = synth::Spec {
        nodes,
        secs: hours * 3600,
        funcs: 100,
        sample_funcs: 200,
        t0_s: 1_790_000_000,
    };
    let tmp = std::env::temp_dir().join(format!("culprit-export-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let keep = data.is_some();
    let data = data.unwrap_or_else(|| tmp.join("data"));
    let marker = data.join(format!(".synth-os-{nodes}x{hours}h"));
    if !marker.exists() {
        let _ = std::fs::remove_dir_all(&data);
        let t = Instant::now();
        synth::write(&data, spec).unwrap();
        std::fs::write(&marker, "").unwrap();
        eprintln!(
            "generated {} nodes × {hours} h in {:.1} s",
            nodes,
            t.elapsed().as_secs_f64()
        );
    }
    println!(
        "data: {nodes} nodes × {hours} h, {} functions/s traced, {} sampled/10 s: {:.0} MiB of .cul files",
        spec.funcs,
        spec.sample_funcs,
        du(&data) as f64 / (1 << 20) as f64
    );
    println!(
        "{:<8} {:>12} {:>10} {:>12} {:>12}",
        "format", "read step", "time s", "peak RSS MiB", "output MiB"
    );
    let exe = std::env::current_exe().unwrap();
    let runs: Vec<(&str, u64)> = vec![
        ("folded", DEFAULT_READ_LIMIT),
        ("pprof", DEFAULT_READ_LIMIT),
        ("chrome", DEFAULT_READ_LIMIT),
        ("csv", DEFAULT_READ_LIMIT),
        ("parquet", DEFAULT_READ_LIMIT),
        ("csv", u64::MAX),
        ("parquet", u64::MAX),
    ];
    for (format, limit) in runs {
        if !only.is_empty() && !only.iter().any(|f| f == format) {
            continue;
        }
        // The large text outputs (GBs a day) are counted on a pipe, not stored.
        let piped = matches!(format, "chrome" | "csv");
        let out = if piped {
            PathBuf::from("-")
        } else {
            tmp.join(format!("out-{format}"))
        };
        let t = Instant::now();
        let mut c = Command::new(&exe)
            .args(["--child", format, &limit.to_string()])
            .arg(&data)
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut piped_bytes = 0u64;
        let mut stdout = c.stdout.take().unwrap();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            match stdout.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => piped_bytes += n as u64,
                Err(e) => panic!("{format}: {e}"),
            }
        }
        let o = c.wait_with_output().unwrap();
        let secs = t.elapsed().as_secs_f64();
        let text = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{format}: {text}");
        let rss: u64 = text
            .lines()
            .find_map(|l| l.strip_prefix("peak-rss-kib "))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{format}: no peak RSS in {text}"));
        let size = if piped { piped_bytes } else { du(&out) };
        let step = if limit == u64::MAX {
            "whole".to_string()
        } else {
            format!("{} MiB", limit >> 20)
        };
        println!(
            "{format:<8} {step:>12} {secs:>10.1} {:>12.0} {:>12.0}",
            rss as f64 / 1024.0,
            size as f64 / (1 << 20) as f64
        );
        if !piped {
            let _ = std::fs::remove_dir_all(&out);
            let _ = std::fs::remove_file(&out);
        }
    }
    if !keep {
        let _ = std::fs::remove_dir_all(&tmp);
    }
}
