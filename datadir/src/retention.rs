//! Retention for data directories (`culprit prune`, `culprit sample --keep / --max-size`, the
//! package's `culprit-prune.timer`): delete the oldest finished data files beyond an age or a
//! total size. The tracing runtime never deletes anything.
//!
//! A file still being written is never deleted: one whose header is not written yet, and one
//! without an end marker whose writer (pid + process start time + boot, from its Info record:
//! `culprit_format::procfs::process_alive`) still runs — a traced process's current piece, the
//! sampler's own file. Rotated pieces (`culprit_format::rotation`) are finished files: the
//! oldest pieces of a long-running process go first, and readers start its history at the
//! oldest piece left. Files are removed through [`Dir::remove_file`] (the name itself, never
//! what a link points to).

use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use culprit_format::read::{OpenError, StreamReader};
use culprit_format::{file_state, info_keys, names, procfs, Record};

use crate::Dir;

/// What went wrong listing or deleting data files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No data directory was given.
    #[error("no data directory given")]
    NoData,
    /// A data directory cannot be opened or read.
    #[error("{}: {what}", path.display())]
    Read {
        /// The directory.
        path: PathBuf,
        /// What could not be done.
        what: &'static str,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A path given is not a directory.
    #[error("{}: not a directory (give a data directory)", path.display())]
    NotADirectory {
        /// The path.
        path: PathBuf,
    },
    /// A path to delete is not a data file in a directory.
    #[error("{}: not a data file name", path.display())]
    NotADataFile {
        /// The path.
        path: PathBuf,
    },
    /// The file's directory refused the removal, or it failed.
    #[error(transparent)]
    Remove(#[from] crate::Error),
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

/// Which rule of the [`Policy`] deletes a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Last written longer ago than [`Policy::keep`].
    Age,
    /// Among the oldest files beyond [`Policy::max_bytes`].
    Size,
}

/// A file deleted (or, dry run, to delete).
#[derive(Clone, Debug)]
pub struct Deleted {
    /// The file.
    pub entry: Entry,
    /// Why.
    pub reason: Reason,
}

/// A file that could not be deleted.
#[derive(Debug)]
pub struct Failed {
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub error: Error,
}

/// What one pass did (or would do).
#[derive(Debug, Default)]
pub struct Outcome {
    /// Files deleted (or, dry run, to delete), oldest first.
    pub deleted: Vec<Deleted>,
    /// Files kept.
    pub kept: usize,
    /// Bytes of the files kept.
    pub kept_bytes: u64,
    /// Files that could not be deleted.
    pub failed: Vec<Failed>,
}

/// The data files under `paths`: each a data root (holding `<node>/` directories,
/// `_unassigned/` included) or one node's directory (holding data files, or `node.info`).
/// Sorted by name within a directory.
pub fn data_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    if paths.is_empty() {
        return Err(Error::NoData);
    }
    let mut dirs = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|source| Error::Read {
            path: p.clone(),
            what: "cannot open data directory (record data with `culprit record` or \
                   `culprit sample` first)",
            source,
        })?;
        if !meta.is_dir() {
            return Err(Error::NotADirectory { path: p.clone() });
        }
        if names::dir_has_data(p) {
            dirs.push(p.clone());
            continue;
        }
        let rd = std::fs::read_dir(p).map_err(|source| Error::Read {
            path: p.clone(),
            what: "cannot read directory",
            source,
        })?;
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let dir = e.path();
            if dir.is_dir() && (names::is_node_name(&name) || name == names::UNASSIGNED_DIR) {
                dirs.push(dir);
            }
        }
    }
    let mut out = Vec::new();
    for dir in dirs {
        // A node directory that cannot be read now holds nothing to delete now.
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| names::is_data_file(p))
            .collect();
        files.sort();
        out.extend(files);
    }
    Ok(out)
}

/// Lists the data files of `paths` ([`data_files`]) with their state, oldest first.
pub fn scan(paths: &[PathBuf]) -> Result<Vec<Entry>, Error> {
    let now = SystemTime::now();
    let mut out = Vec::new();
    for path in data_files(paths)? {
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
/// and says what it did. A dry run goes through the same checks as the real one (the
/// directory opened as for the removal, the name checked and there), so it lists exactly
/// what the real run deletes and fails where the real run fails.
pub fn apply(entries: Vec<Entry>, policy: &Policy, dry_run: bool) -> Outcome {
    let mut out = decide(entries, policy);
    let mut done = Vec::new();
    for d in std::mem::take(&mut out.deleted) {
        match remove(&d.entry.path, dry_run) {
            Ok(()) => done.push(d),
            Err(error) => {
                out.failed.push(Failed {
                    path: d.entry.path.clone(),
                    error,
                });
                out.kept += 1;
                out.kept_bytes += d.entry.bytes;
            }
        }
    }
    out.deleted = done;
    out
}

/// What `policy` would delete among `entries` (oldest first), before any removal.
fn decide(entries: Vec<Entry>, policy: &Policy) -> Outcome {
    let now = SystemTime::now();
    let mut out = Outcome::default();
    let mut remaining: Vec<Entry> = Vec::new();
    for entry in entries {
        let old = policy.keep.is_some_and(|keep| {
            now.duration_since(entry.modified)
                .is_ok_and(|age| age > keep)
        });
        if old && entry.live.is_none() {
            out.deleted.push(Deleted {
                entry,
                reason: Reason::Age,
            });
        } else {
            remaining.push(entry);
        }
    }
    if let Some(max) = policy.max_bytes {
        let mut total: u64 = remaining.iter().map(|e| e.bytes).sum();
        let mut keep = Vec::new();
        for entry in remaining {
            if total > max && entry.live.is_none() {
                total -= entry.bytes;
                out.deleted.push(Deleted {
                    entry,
                    reason: Reason::Size,
                });
            } else {
                keep.push(entry);
            }
        }
        remaining = keep;
    }
    out.kept = remaining.len();
    out.kept_bytes = remaining.iter().map(|e| e.bytes).sum();
    out
}

/// Removes a data file without following links ([`Dir`]'s checks on its directory); with
/// `dry_run`, only makes the checks the removal makes.
fn remove(path: &Path, dry_run: bool) -> Result<(), Error> {
    let not_data = || Error::NotADataFile {
        path: path.to_path_buf(),
    };
    let dir = path.parent().ok_or_else(not_data)?;
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(not_data)?;
    let dir = Dir::open_root(dir, false)?;
    if dry_run {
        dir.check_removable(name)?;
    } else {
        dir.remove_file(name)?;
    }
    Ok(())
}

/// One pass over `paths`: [`scan`], then [`apply`]. Errors deleting are in the outcome.
pub fn pass(paths: &[PathBuf], policy: &Policy, dry_run: bool) -> Result<Outcome, Error> {
    Ok(apply(scan(paths)?, policy, dry_run))
}

/// Retention beside a writer (`culprit sample --keep / --max-size`): a thread running
/// [`pass`] over the paths every period (the first at once), handing each pass's result to a
/// report, until the `Background` is dropped.
#[derive(Debug)]
pub struct Background {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Background {
    /// Starts the thread: [`pass`] over `paths` by `policy` every `every`, each result to
    /// `report`.
    pub fn start(
        paths: Vec<PathBuf>,
        policy: Policy,
        every: Duration,
        mut report: impl FnMut(Result<Outcome, Error>) + Send + 'static,
    ) -> Background {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            // Short sleeps: the writer's end is not held up by a minute's wait.
            let tick = Duration::from_millis(200);
            let mut waited = every;
            loop {
                if waited >= every {
                    waited = Duration::ZERO;
                    report(pass(&paths, &policy, false));
                }
                if stopped.load(Ordering::SeqCst) {
                    return;
                }
                std::thread::sleep(tick);
                waited += tick;
            }
        });
        Background {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Background {
    /// Stops the thread and waits for it (a pass under way ends first).
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_passes_at_once_and_stops_when_dropped() {
        let dir = std::env::temp_dir().join(format!("culprit-bg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let policy = Policy {
            keep: Some(Duration::from_secs(3600)),
            max_bytes: None,
        };
        let every = Duration::from_secs(3600);
        let bg = Background::start(vec![dir.clone()], policy, every, move |r| {
            let _ = tx.send(r.map(|o| o.deleted.len()));
        });
        // The first pass runs at once, not after `every`.
        let first = rx.recv_timeout(Duration::from_secs(60)).unwrap();
        assert_eq!(first.unwrap(), 0);
        drop(bg);
        // Dropped: the thread ended, and with it the report's sender.
        assert!(rx.recv().is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn entry(path: &str, bytes: u64, age_s: u64, live: bool) -> Entry {
        Entry {
            path: PathBuf::from(path),
            bytes,
            modified: SystemTime::now() - Duration::from_secs(age_s),
            live: live.then(|| "its writer runs".to_string()),
        }
    }

    #[test]
    fn deletes_old_then_oldest_beyond_size_never_live_ones() {
        // Oldest first, as `scan` sorts them.
        let entries = vec![
            entry("/x/a", 100, 5000, false),
            entry("/x/b", 100, 4000, true),
            entry("/x/c", 100, 300, false),
            entry("/x/d", 100, 200, false),
            entry("/x/e", 100, 100, false),
        ];
        let policy = Policy {
            keep: Some(Duration::from_secs(3600)),
            max_bytes: Some(250),
        };
        let o = decide(entries, &policy);
        let got: Vec<(&str, Reason)> = o
            .deleted
            .iter()
            .map(|d| (d.entry.path.to_str().unwrap(), d.reason))
            .collect();
        // `b` is live: never deleted, though old and counted in the size.
        let want = [
            ("/x/a", Reason::Age),
            ("/x/c", Reason::Size),
            ("/x/d", Reason::Size),
        ];
        assert_eq!(got, want);
        assert_eq!((o.kept, o.kept_bytes), (2, 200));
        assert!(o.failed.is_empty());
        assert!(!Policy::default().enabled());
    }

    #[test]
    fn lists_data_files_of_roots_and_node_dirs_and_deletes_them() {
        let base = std::env::temp_dir().join(format!("culprit-retention-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let node = base.join("n1");
        std::fs::create_dir_all(&node).unwrap();
        std::fs::create_dir_all(base.join(".hidden")).unwrap();
        let file = node.join("trace-1-0.cul");
        assert!(names::parse_data_file_name("trace-1-0.cul").is_some());
        // Not a header (damage), last written two hours ago: finished, deleted by age.
        std::fs::write(&file, [0xffu8; 4096]).unwrap();
        std::fs::File::options()
            .write(true)
            .open(&file)
            .unwrap()
            .set_modified(SystemTime::now() - Duration::from_secs(7200))
            .unwrap();
        std::fs::write(node.join("notes.txt"), b"").unwrap();
        assert_eq!(
            data_files(std::slice::from_ref(&base)).unwrap(),
            vec![file.clone()]
        );
        assert_eq!(
            data_files(std::slice::from_ref(&node)).unwrap(),
            vec![file.clone()]
        );
        assert!(matches!(data_files(&[]), Err(Error::NoData)));
        assert!(matches!(
            data_files(&[base.join("absent")]),
            Err(Error::Read { .. })
        ));
        let entries = scan(std::slice::from_ref(&base)).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].live, None);
        let policy = Policy {
            keep: Some(Duration::from_secs(60)),
            max_bytes: None,
        };
        let o = apply(entries, &policy, false);
        assert_eq!(o.deleted.len(), 1, "{o:?}");
        assert!(!file.exists());
        let _ = std::fs::remove_dir_all(&base);
    }
}
