//! Opening files another user may have planted: the images of other users' processes (the
//! sampler resolves them as root), a traced binary named in a data file (`report`, `diagnose`
//! and the exports read its symbols), the binaries `--uprobes` names.
//!
//! A plain `open()` of such a path can block for ever (a FIFO in place of a mapped library:
//! `open` waits for a writer), wait 45 s (a file leased by its owner), or reach a device whose
//! driver acts on open (a tape that rewinds, a watchdog that arms) — as root, through any link
//! the owner of a directory planted. So every such file is opened in three steps, none of which
//! can block or open anything but a regular file:
//!
//! 1. `open(path, O_PATH)`: a handle to whatever the path names, links followed, *without
//!    opening it* — no driver's open, no FIFO partner to wait for, no lease to break;
//! 2. `fstat` of the handle: a regular file, else refused (one line says what it was);
//! 3. the handle reopened for reading through `/proc/self/fd/N`, with `O_NONBLOCK` and
//!    `O_NOCTTY`: the same inode (it cannot have been swapped meanwhile), and a lease still held
//!    on it makes the open fail at once instead of waiting.
//!
//! Files on a FUSE file system are refused: the user who mounted it answers every open and
//! can stall it. The first step runs on a thread of its own with a deadline ([`OPEN_DEADLINE`]),
//! so that a path lookup that stalls anyway (a file system that does not answer) costs the
//! caller that long and no more; at most [`MAX_STALLED`] stalled openers are left waiting in the
//! kernel, after which further opens are refused without a try.
//!
//! The returned file stays open while the caller uses the image: nobody can take a lease on it
//! meanwhile, so reading it again through `/proc/self/fd/N` (as blazesym does) cannot block
//! either.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How long an open may take before the caller gives up on it.
pub const OPEN_DEADLINE: Duration = Duration::from_millis(500);
/// Most openers left stalled in the kernel at once.
pub const MAX_STALLED: usize = 8;

/// Openers that passed their deadline and have not come back.
static STALLED: AtomicUsize = AtomicUsize::new(0);

/// Why a file was not opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// The path names something other than a regular file (a FIFO, a device, a directory, a
    /// socket).
    #[error("{path}: a {kind}, not a regular file: not opened")]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is.
        kind: &'static str,
    },
    /// The file is on a FUSE file system, whose owner answers (and can stall) every open.
    #[error("{path}: on a FUSE file system: not opened (its owner could stall the open)")]
    Fuse {
        /// The path.
        path: PathBuf,
    },
    /// The open did not come back in time.
    #[error("{path}: opening it took longer than {} ms: given up", OPEN_DEADLINE.as_millis())]
    Stalled {
        /// The path.
        path: PathBuf,
    },
    /// Opening failed (missing, no permission, leased by its owner, …).
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

impl Refused {
    /// True when the file does not exist (the caller may say so in its own words).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Refused::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// True when the path was opened and found unsafe (not a regular file, on FUSE, stalled):
    /// what a planted file gives, worth a line wherever it happens.
    pub fn is_unsafe(&self) -> bool {
        !matches!(self, Refused::Io { .. })
    }
}

/// The name of a file type, for [`Refused::NotRegular`].
fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_fifo() {
        "FIFO"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_dir() {
        "directory"
    } else if t.is_socket() {
        "socket"
    } else if t.is_symlink() {
        "symbolic link"
    } else {
        "special file"
    }
}

/// Opens the regular file at `path` for reading, as the module documentation says: never
/// blocking for longer than [`OPEN_DEADLINE`], never opening anything but a regular file.
pub fn open_regular(path: &Path) -> Result<File, Refused> {
    if STALLED.load(Ordering::SeqCst) >= MAX_STALLED {
        return Err(Refused::Stalled {
            path: path.to_path_buf(),
        });
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let owned = path.to_path_buf();
    let spawned = std::thread::Builder::new()
        .name("culprit-open".into())
        .spawn(move || {
            let r = open_now(&owned);
            if tx.send(r).is_err() {
                // The caller gave up on us: we are back, one stalled opener fewer.
                STALLED.fetch_sub(1, Ordering::SeqCst);
            }
        });
    if let Err(e) = spawned {
        return Err(Refused::Io {
            path: path.to_path_buf(),
            source: e,
        });
    }
    match rx.recv_timeout(OPEN_DEADLINE) {
        Ok(r) => r,
        Err(_) => {
            STALLED.fetch_add(1, Ordering::SeqCst);
            // Dropping `rx` tells the opener, should it ever come back, that it was given up.
            Err(Refused::Stalled {
                path: path.to_path_buf(),
            })
        }
    }
}

/// The three steps, on the calling thread.
fn open_now(path: &Path) -> Result<File, Refused> {
    let io_err = |source| Refused::Io {
        path: path.to_path_buf(),
        source,
    };
    let handle = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_CLOEXEC)
        .open(path)
        .map_err(io_err)?;
    let meta = handle.metadata().map_err(io_err)?;
    if !meta.file_type().is_file() {
        return Err(Refused::NotRegular {
            path: path.to_path_buf(),
            kind: kind_of(meta.file_type()),
        });
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(format!("/proc/self/fd/{}", handle.as_raw_fd()))
        .map_err(io_err)?;
    let again = file.metadata().map_err(io_err)?;
    if (again.dev(), again.ino()) != (meta.dev(), meta.ino()) || !again.file_type().is_file() {
        return Err(io_err(io::Error::other(
            "the file changed while it was opened",
        )));
    }
    if crate::sys::is_fuse(&file) {
        return Err(Refused::Fuse {
            path: path.to_path_buf(),
        });
    }
    Ok(file)
}

/// The path of an open file that reading it again opens that file and nothing else:
/// `/proc/self/fd/N`.
pub fn fd_path(file: &File) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()))
}

/// Reads the whole regular file at `path` (opened as [`open_regular`] does), at most
/// `limit` bytes.
pub fn read(path: &Path, limit: u64) -> Result<Vec<u8>, Refused> {
    use std::io::Read as _;
    let f = open_regular(path)?;
    let mut out = Vec::new();
    f.take(limit)
        .read_to_end(&mut out)
        .map_err(|source| Refused::Io {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(out)
}

/// True when every directory from `dir` up to `/` is owned by root or by this process's user
/// and writable by no one else (a sticky ancestor such as `/tmp` excepted: only the owner of
/// the next directory can replace it): no other user can put a file there, or swap one. A
/// link on the way (`/lib` → `usr/lib`) must be owned by root or this user too, and its
/// target's chain trusted.
pub fn trusted_dir(dir: &Path) -> bool {
    trusted_chain(dir, 0)
}

fn trusted_chain(dir: &Path, depth: u32) -> bool {
    if depth > 8 {
        return false;
    }
    let me = crate::sys::euid();
    let mut d = Some(dir);
    while let Some(p) = d {
        let Ok(m) = std::fs::symlink_metadata(p) else {
            return false;
        };
        if m.uid() != 0 && m.uid() != me {
            return false;
        }
        if m.file_type().is_symlink() {
            match std::fs::canonicalize(p) {
                Ok(target) if trusted_chain(&target, depth + 1) => {}
                _ => return false,
            }
        } else {
            if !m.file_type().is_dir() {
                return false;
            }
            let others_write = m.mode() & 0o022 != 0;
            let sticky = m.mode() & 0o1000 != 0;
            if others_write && (p == dir || !sticky) {
                return false;
            }
        }
        d = p.parent();
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("culprit-untrusted-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_fifo_is_refused_at_once() {
        let d = tmp("fifo");
        let p = d.join("libx.so");
        let st = std::process::Command::new("mkfifo")
            .arg(&p)
            .status()
            .unwrap();
        assert!(st.success());
        let t = std::time::Instant::now();
        let e = open_regular(&p).unwrap_err();
        assert!(
            t.elapsed() < Duration::from_millis(400),
            "{:?}",
            t.elapsed()
        );
        assert!(matches!(e, Refused::NotRegular { kind: "FIFO", .. }), "{e}");
        assert!(e.to_string().contains("a FIFO, not a regular file"), "{e}");
        assert!(e.is_unsafe());
        // A link to it is refused the same way.
        let l = d.join("link.so");
        std::os::unix::fs::symlink(&p, &l).unwrap();
        assert!(matches!(
            open_regular(&l),
            Err(Refused::NotRegular { kind: "FIFO", .. })
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn devices_and_directories_are_never_opened() {
        for (p, kind) in [
            ("/dev/null", "character device"),
            ("/dev/tty", "character device"),
            ("/", "directory"),
        ] {
            match open_regular(Path::new(p)) {
                Err(Refused::NotRegular { kind: k, .. }) => assert_eq!(k, kind, "{p}"),
                other => panic!("{p}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_regular_file_reads_and_a_missing_one_says_so() {
        let d = tmp("reg");
        let p = d.join("f");
        std::fs::write(&p, b"hello").unwrap();
        assert_eq!(read(&p, 100).unwrap(), b"hello");
        assert_eq!(read(&p, 2).unwrap(), b"he");
        let f = open_regular(&p).unwrap();
        assert_eq!(std::fs::read(fd_path(&f)).unwrap(), b"hello");
        let e = open_regular(&d.join("nope")).unwrap_err();
        assert!(e.is_not_found() && !e.is_unsafe(), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn trust_needs_a_chain_no_one_else_can_write() {
        assert!(trusted_dir(Path::new("/usr/lib")));
        // Merged /usr: /lib is a link owned by root to usr/lib.
        assert!(trusted_dir(Path::new("/lib/x86_64-linux-gnu")));
        let d = tmp("trust");
        assert!(trusted_dir(&d), "a private directory under the sticky /tmp");
        std::fs::set_permissions(&d, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        assert!(!trusted_dir(&d), "a directory anyone can write");
        assert!(!trusted_dir(Path::new("/tmp")));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
