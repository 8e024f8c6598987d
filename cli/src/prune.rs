//! `culprit prune`: retention for data directories — delete the oldest finished data files
//! beyond an age (`--keep 7d`) or a total size (`--max-size 5G`). `culprit sample --keep /
//! --max-size` runs the same code every minute; the package's `culprit-prune.timer` runs the
//! verb. The tracing runtime never deletes anything.
//!
//! A file still being written is never deleted: one whose header is not written yet, and one
//! without an end marker whose writer (pid + process start time + boot, from its Info record:
//! `culprit_format::procfs::process_alive`) still runs — a traced process's current piece, the
//! sampler's own file. Rotated pieces (`culprit_format::rotation`) are finished files: the
//! oldest pieces of a long-running process go first, and readers start its history at the
//! oldest piece left.

use std::io::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use culprit_analysis::data::{DirSource, Source as _};
use culprit_format::read::{OpenError, StreamReader};
use culprit_format::{file_state, info_keys, procfs, rotation, Record};

/// Arguments of `culprit prune`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    culprit prune /var/lib/culprit --keep 7d\n  \
    culprit prune DATA --max-size 5G --dry-run\n\n\
    Deletes the oldest finished data files (a process's rotated pieces, ended runs) first; \
    a file still being written (its process runs) is never deleted. Prints one line per file \
    deleted and a summary. Exit status 0, or 2 on an error.")]
pub struct Args {
    /// Data directories: a data root (holding `<node>/`) or one node's directory.
    #[arg(required = true, value_name = "DATA")]
    pub data: Vec<PathBuf>,
    /// Delete finished files last written longer ago than this (e.g. 7d, 12h).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub keep: Option<Duration>,
    /// Delete the oldest finished files until the data take at most this much disk (e.g. 5G,
    /// 500M).
    #[arg(long, value_name = "SIZE", value_parser = rotation::parse_size)]
    pub max_size: Option<u64>,
    /// Say what would be deleted, delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print only the summary, and only when something was deleted (errors always).
    #[arg(short, long)]
    pub quiet: bool,
}

/// `--keep`'s syntax (`rotation::parse_duration_ns`).
pub fn parse_age(s: &str) -> Result<Duration, String> {
    rotation::parse_duration_ns(s).map(Duration::from_nanos)
}

/// What to delete.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// Finished files last written longer ago than this go.
    pub keep: Option<Duration>,
    /// Then the oldest finished files go until the total disk use is at most this.
    pub max_bytes: Option<u64>,
}

impl Policy {
    /// True when the policy deletes anything at all.
    pub fn enabled(&self) -> bool {
        self.keep.is_some() || self.max_bytes.is_some()
    }
}

/// One data file found.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Its path.
    pub path: PathBuf,
    /// Bytes of disk it takes (allocated blocks: trace files are sparse).
    pub bytes: u64,
    /// When it was last written.
    pub modified: SystemTime,
    /// Why it must stay (it is being written), if it must.
    pub live: Option<String>,
}

/// What one pass did (or would do).
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Files deleted (or, dry run, to delete), oldest first, and why.
    pub deleted: Vec<(Entry, &'static str)>,
    /// Files kept and their bytes.
    pub kept: usize,
    /// Bytes of the files kept.
    pub kept_bytes: u64,
    /// Files that could not be deleted, and why.
    pub failed: Vec<(PathBuf, String)>,
}

/// Lists the data files of `paths` (data roots or node directories, `_unassigned` included)
/// with their state.
pub fn scan(paths: &[PathBuf]) -> anyhow::Result<Vec<Entry>> {
    let mut source = DirSource::new(paths.to_vec(), true);
    let listings = source.scan(&|_| true, &mut |_| {})?;
    let now = SystemTime::now();
    let mut out = Vec::new();
    for l in listings {
        for path in l.streams {
            // Never follow a link; only regular files are data.
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if !meta.file_type().is_file() {
                continue;
            }
            let modified = meta.modified().unwrap_or(now);
            let recent = now
                .duration_since(modified)
                .map_or(true, |age| age < Duration::from_secs(60));
            out.push(Entry {
                live: liveness(&path, recent),
                bytes: meta.blocks() * 512,
                modified,
                path,
            });
        }
    }
    out.sort_by(|a, b| a.modified.cmp(&b.modified).then(a.path.cmp(&b.path)));
    Ok(out)
}

/// Why `path` is being written (`None`: finished, whether ended, rotated, or left by a writer
/// that is gone). `recent`: written in the last minute.
fn liveness(path: &Path, recent: bool) -> Option<String> {
    let Ok(f) = std::fs::File::open(path) else {
        return Some("cannot be read now".into());
    };
    let mut r = match StreamReader::open(f) {
        Ok(r) => r,
        Err(OpenError::NotYet) => return Some("its header is being written".into()),
        // A header of zeros or damage: being created if recent; else damage that ages out.
        Err(_) if recent => return Some("its header is not valid yet".into()),
        Err(_) => return None,
    };
    let h = *r.header();
    if h.state == file_state::ENDED {
        return None;
    }
    let info = match r.next_record() {
        Ok(Some(Record::Info(i))) => Some(i.pairs),
        _ => None,
    };
    let Some(info) = info else {
        return recent.then(|| "its first record is not written yet".into());
    };
    let get = |k: &str| {
        info.iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    let pid = get(info_keys::PID)
        .and_then(|v| v.parse().ok())
        .unwrap_or(h.pid);
    let start = get(info_keys::PROC_START_NS).and_then(|v| v.parse().ok());
    procfs::process_alive(pid, get(info_keys::BOOT_ID), start)
        .then(|| format!("its writer (pid {pid}) runs"))
}

/// Decides what `policy` deletes among `entries` (oldest first), deletes it unless `dry_run`,
/// and says what it did.
pub fn apply(entries: Vec<Entry>, policy: &Policy, dry_run: bool) -> Outcome {
    let now = SystemTime::now();
    let mut out = Outcome::default();
    let mut remaining: Vec<Entry> = Vec::new();
    for e in entries {
        let old = policy
            .keep
            .is_some_and(|keep| now.duration_since(e.modified).is_ok_and(|age| age > keep));
        if old && e.live.is_none() {
            out.deleted.push((e, "older than --keep"));
        } else {
            remaining.push(e);
        }
    }
    if let Some(max) = policy.max_bytes {
        let mut total: u64 = remaining.iter().map(|e| e.bytes).sum();
        let mut keep = Vec::new();
        for e in remaining {
            if total > max && e.live.is_none() {
                total -= e.bytes;
                out.deleted.push((e, "beyond --max-size"));
            } else {
                keep.push(e);
            }
        }
        remaining = keep;
    }
    if !dry_run {
        let mut done = Vec::new();
        for (e, why) in std::mem::take(&mut out.deleted) {
            match remove(&e.path) {
                Ok(()) => done.push((e, why)),
                Err(err) => {
                    out.failed.push((e.path.clone(), format!("{err:#}")));
                    remaining.push(e);
                }
            }
        }
        out.deleted = done;
    }
    out.kept = remaining.len();
    out.kept_bytes = remaining.iter().map(|e| e.bytes).sum();
    out
}

/// Removes a data file without following links (`culprit-datadir`'s checks on its directory).
fn remove(path: &Path) -> anyhow::Result<()> {
    let dir = path.parent().context("no directory")?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .context("not a data file name")?;
    let d = culprit_datadir::Dir::open_root(dir, false)?;
    d.remove_file(name)?;
    Ok(())
}

/// One pass over `paths`: scan, apply, and one line per file deleted (unless `quiet`) plus a
/// summary, to `w`. Errors deleting are reported in the outcome.
pub fn pass(
    paths: &[PathBuf],
    policy: &Policy,
    dry_run: bool,
    quiet: bool,
    w: &mut dyn std::io::Write,
) -> anyhow::Result<Outcome> {
    let entries = scan(paths)?;
    let out = apply(entries, policy, dry_run);
    let verb = if dry_run { "would delete" } else { "deleted" };
    if !quiet {
        for (e, why) in &out.deleted {
            writeln!(
                w,
                "culprit: {verb} {} ({}, {why})",
                e.path.display(),
                human_bytes(e.bytes)
            )?;
        }
    }
    for (p, err) in &out.failed {
        writeln!(w, "culprit: error: cannot delete {}: {err}", p.display())?;
    }
    let freed: u64 = out.deleted.iter().map(|(e, _)| e.bytes).sum();
    if !quiet || !out.deleted.is_empty() {
        writeln!(
            w,
            "culprit: {verb} {} file{} ({}); kept {} file{} ({})",
            out.deleted.len(),
            if out.deleted.len() == 1 { "" } else { "s" },
            human_bytes(freed),
            out.kept,
            if out.kept == 1 { "" } else { "s" },
            human_bytes(out.kept_bytes)
        )?;
    }
    Ok(out)
}

fn human_bytes(b: u64) -> String {
    let f = b as f64;
    if f >= 1e9 {
        format!("{:.2} GB", f / 1e9)
    } else if f >= 1e6 {
        format!("{:.1} MB", f / 1e6)
    } else if f >= 1e3 {
        format!("{:.1} kB", f / 1e3)
    } else {
        format!("{b} B")
    }
}

/// Runs `culprit prune`.
pub fn run(a: Args) -> anyhow::Result<i32> {
    let policy = Policy {
        keep: a.keep,
        max_bytes: a.max_size,
    };
    if !policy.enabled() {
        anyhow::bail!("give --keep AGE and/or --max-size SIZE (nothing to prune by)");
    }
    let mut out = std::io::stdout().lock();
    let o = pass(&a.data, &policy, a.dry_run, a.quiet, &mut out)?;
    // A file that could not be deleted is an error: the crate's exit status 2.
    Ok(if o.failed.is_empty() { 0 } else { 2 })
}

/// `culprit sample --keep / --max-size`: a thread pruning `paths` every `every` until `stop`,
/// lines go to stderr (only when something was deleted).
pub fn spawn(
    paths: Vec<PathBuf>,
    policy: Policy,
    every: Duration,
    stop: &'static std::sync::atomic::AtomicBool,
    quiet: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let tick = Duration::from_millis(200);
        let mut waited = every;
        loop {
            if waited >= every {
                waited = Duration::ZERO;
                // Lines only when something was deleted (or failed): no summary every minute.
                let mut buf = Vec::new();
                match pass(&paths, &policy, false, quiet, &mut buf) {
                    Ok(o) if o.deleted.is_empty() && o.failed.is_empty() => {}
                    Ok(_) => {
                        let _ = std::io::stderr().write_all(&buf);
                    }
                    Err(e) => eprintln!("culprit: warning: pruning: {e:#}"),
                }
            }
            if stop.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(tick);
            waited += tick;
        }
    })
}
