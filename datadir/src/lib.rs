//! Safe creation of culprit's data directory, node directories and files, shared by both
//! writers: `libculprit_rt.so` (which may run inside a root daemon or beside careless
//! operators) and `culprit sample` (which runs as root).
//!
//! # Rules (docs/security.md has the threat model)
//!
//! * Nothing is created or opened through a symbolic link that someone else could have
//!   planted: the data root, node directories and files are opened relative to their parent
//!   directory's descriptor with `O_NOFOLLOW`, files are created with
//!   `O_CREAT|O_EXCL|O_NOFOLLOW|O_CLOEXEC`, temporary files get random names, and `node.info` is
//!   replaced with `renameat` (which replaces a link, never follows it). The path *above* the
//!   data root is the operator's and is followed as given.
//! * Modes are explicit, not the umask's: directories 0755, files 0644 (`fchmod` after
//!   creation). A directory created inside a group-shared one (set-group-id and group-writable,
//!   e.g. 2770) is group-shared the same way, never writable by others.
//! * An existing data root or node directory is accepted only when it is owned by the
//!   effective user or by root and is not writable by others (group-writable is allowed: that
//!   is how a root sampler and an unprivileged server share one node directory). Anything else
//!   is an [`Error::Refused`] naming the directory and why.
//! * Nothing is copied from a file another user could write: `node.info` keys are carried over
//!   only from a regular file owned by the effective user or root and writable by its owner
//!   only.
//! * No descriptor outlives a [`Dir`] or the [`File`]s handed out: the runtime opens what it
//!   needs for each operation and closes it again (daemons close descriptors they do not know
//!   and reuse the numbers).

#![deny(unsafe_code)]

use std::ffi::{CString, OsStr};
use std::fs::{File, Permissions};
use std::io::{self, Read, Write};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use culprit_format::names::{NodeInfo, NODE_INFO_FILE};

pub mod retention;
#[allow(unsafe_code)]
mod sys;

/// Mode of directories the writers create (outside group-shared directories).
pub const DIR_MODE: u32 = 0o755;
/// Mode of files the writers create.
pub const FILE_MODE: u32 = 0o644;
/// Largest `node.info` read back (it holds a dozen short lines).
const MAX_NODE_INFO: u64 = 64 << 10;

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The directory is not safe to write into (see the crate docs).
    #[error("refusing to write under {}: {why}", path.display())]
    Refused {
        /// The directory.
        path: PathBuf,
        /// Why, in a few words.
        why: String,
    },
    /// A system call failed.
    #[error("cannot {op} {}: {source}", path.display())]
    Io {
        /// What was being done (`create`, `open`, …).
        op: &'static str,
        /// On what.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// A file this writer created is no longer there as it left it.
    #[error("{} {why}", path.display())]
    Replaced {
        /// The file.
        path: PathBuf,
        /// `was removed`, `was replaced`, …
        why: &'static str,
    },
}

fn io_err(op: &'static str, path: &Path, source: io::Error) -> Error {
    Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn refused(path: &Path, why: impl Into<String>) -> Error {
    Error::Refused {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

fn cstr(path: &Path, s: &OsStr) -> Result<CString, Error> {
    CString::new(s.as_bytes()).map_err(|_| refused(path, "the name holds a NUL byte"))
}

/// Identity of a file (device and inode), to tell it from one put in its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    /// The identity of an open file.
    pub fn of(f: &File) -> io::Result<FileId> {
        let m = f.metadata()?;
        Ok(FileId {
            dev: m.dev(),
            ino: m.ino(),
        })
    }
}

/// An open directory that passed the checks: the data root or a node directory.
#[derive(Debug)]
pub struct Dir {
    file: File,
    path: PathBuf,
    /// Set-group-id and group-writable: what is created inside stays group-shared.
    shared_mode: Option<u32>,
}

/// `p` made absolute against the current directory (as it was given when that cannot be
/// read).
pub fn absolute(p: &Path) -> PathBuf {
    if p.is_absolute() {
        return p.to_path_buf();
    }
    match std::env::current_dir() {
        Ok(cwd) => cwd.join(p),
        Err(_) => p.to_path_buf(),
    }
}

/// The parent and last name of `path`, which must end in a plain name.
fn split(path: &Path) -> Result<(&Path, &OsStr), Error> {
    match (path.parent(), path.components().next_back()) {
        (Some(parent), Some(Component::Normal(name))) => Ok((parent, name)),
        _ => Err(refused(path, "the path must end in a directory name")),
    }
}

/// Refuses a file name that is not one plain path component.
fn plain_file_name(path: &Path, name: &str) -> Result<(), Error> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(refused(path, "a file name must be one path component"));
    }
    Ok(())
}

fn is_errno(e: &io::Error, errno: i32) -> bool {
    e.raw_os_error() == Some(errno)
}

/// Opens the directory `path`, following links (the operator's path above the data root),
/// creating missing components with mode [`DIR_MODE`] when `create` is set.
fn open_following(path: &Path, create: bool) -> Result<File, Error> {
    let c = cstr(path, path.as_os_str())?;
    match sys::openat(None, &c, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
        Ok(fd) => Ok(File::from(fd)),
        Err(e) if is_errno(&e, libc::ENOENT) && create => {
            let (parent, name) = split(path)?;
            let p = open_following(parent, true)?;
            let name_c = cstr(path, name)?;
            let made = match sys::mkdirat(p.as_fd(), &name_c, DIR_MODE) {
                Ok(()) => true,
                Err(e) if is_errno(&e, libc::EEXIST) => false,
                Err(e) => return Err(io_err("create directory", path, e)),
            };
            let fd = sys::openat(
                Some(p.as_fd()),
                &name_c,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            )
            .map_err(|e| io_err("open", path, e))?;
            let f = File::from(fd);
            if made {
                f.set_permissions(Permissions::from_mode(DIR_MODE))
                    .map_err(|e| io_err("set the mode of", path, e))?;
            }
            Ok(f)
        }
        Err(e) => Err(io_err("open", path, e)),
    }
}

/// Checks that a directory may be written into: owned by the effective user or root, not
/// writable by others.
fn check_dir(path: &Path, m: &std::fs::Metadata) -> Result<(), Error> {
    let euid = sys::geteuid();
    if m.uid() != euid && m.uid() != 0 {
        return Err(refused(
            path,
            format!(
                "it is owned by uid {}, not by this user (uid {euid}) or root",
                m.uid()
            ),
        ));
    }
    if m.mode() & 0o002 != 0 {
        return Err(refused(
            path,
            format!(
                "it is writable by every user (mode {:o}); a data directory may be writable \
                 by its owner and group only",
                m.mode() & 0o7777
            ),
        ));
    }
    Ok(())
}

/// A set-group-id, group-writable directory's permission bits, `None` otherwise.
fn shared_mode(m: &std::fs::Metadata) -> Option<u32> {
    let mode = m.mode();
    (mode & libc::S_ISGID != 0 && mode & 0o020 != 0).then_some(mode & 0o2775 | 0o700)
}

impl Dir {
    /// Opens the data root `path` (made absolute against the current directory), creating it
    /// and missing parents when `create` is set. The root itself is opened without following
    /// a link and must pass the ownership checks.
    pub fn open_root(path: &Path, create: bool) -> Result<Dir, Error> {
        let path = absolute(path);
        let (parent, name) = split(&path)?;
        let parent_dir = open_following(parent, create)?;
        let parent_meta = parent_dir
            .metadata()
            .map_err(|e| io_err("inspect", parent, e))?;
        Dir::child(&parent_dir, shared_mode(&parent_meta), parent, name, create)
    }

    /// Opens the directory `name` (one path component: a node, or `_unassigned`) inside this
    /// one, creating it when `create` is set; it must pass the ownership checks.
    pub fn node(&self, name: &str, create: bool) -> Result<Dir, Error> {
        let mut comps = Path::new(name).components();
        let ok = matches!(comps.next(), Some(Component::Normal(_))) && comps.next().is_none();
        if !ok || name.contains('/') {
            return Err(refused(
                &self.path.join(name),
                "a node directory name must be one plain path component",
            ));
        }
        Dir::child(
            &self.file,
            self.shared_mode,
            &self.path,
            OsStr::new(name),
            create,
        )
    }

    fn child(
        parent: &File,
        parent_shared: Option<u32>,
        parent_path: &Path,
        name: &OsStr,
        create: bool,
    ) -> Result<Dir, Error> {
        let path = parent_path.join(name);
        let c = cstr(&path, name)?;
        let new_mode = parent_shared.unwrap_or(DIR_MODE);
        let mut created = false;
        let mut tries = 0;
        let fd = loop {
            tries += 1;
            match sys::openat(
                Some(parent.as_fd()),
                &c,
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
                0,
            ) {
                Ok(fd) => break fd,
                Err(e) if is_errno(&e, libc::ENOENT) && create && tries < 4 => {
                    match sys::mkdirat(parent.as_fd(), &c, new_mode & 0o777) {
                        Ok(()) => created = true,
                        Err(e) if is_errno(&e, libc::EEXIST) => {}
                        Err(e) => return Err(io_err("create directory", &path, e)),
                    }
                }
                Err(e) if is_errno(&e, libc::ELOOP) || is_errno(&e, libc::ENOTDIR) => {
                    return Err(refused(&path, "it is a symbolic link or not a directory"));
                }
                Err(e) => return Err(io_err("open", &path, e)),
            }
        };
        let file = File::from(fd);
        let meta = file.metadata().map_err(|e| io_err("inspect", &path, e))?;
        check_dir(&path, &meta)?;
        if created {
            file.set_permissions(Permissions::from_mode(new_mode))
                .map_err(|e| io_err("set the mode of", &path, e))?;
        }
        let meta = file.metadata().map_err(|e| io_err("inspect", &path, e))?;
        Ok(Dir {
            file,
            shared_mode: shared_mode(&meta),
            path,
        })
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Creates a new file named `name_for(seq)` for the first `seq` in `0..1000` whose name is
    /// free (`O_EXCL|O_NOFOLLOW`: an existing file or link is skipped, never opened), with
    /// mode [`FILE_MODE`], open for reading and writing. Returns it and its name.
    pub fn create_file(&self, name_for: impl Fn(u32) -> String) -> Result<(File, String), Error> {
        for seq in 0..1000 {
            let name = name_for(seq);
            let path = self.path.join(&name);
            if name.contains('/') {
                return Err(refused(&path, "a file name must be one path component"));
            }
            let c = cstr(&path, OsStr::new(&name))?;
            match sys::openat(
                Some(self.file.as_fd()),
                &c,
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
                FILE_MODE,
            ) {
                Ok(fd) => {
                    let f = File::from(fd);
                    f.set_permissions(Permissions::from_mode(FILE_MODE))
                        .map_err(|e| io_err("set the mode of", &path, e))?;
                    return Ok((f, name));
                }
                Err(e) if is_errno(&e, libc::EEXIST) => continue,
                Err(e) => return Err(io_err("create", &path, e)),
            }
        }
        Err(io_err(
            "find a free file name in",
            &self.path,
            io::Error::from(io::ErrorKind::AlreadyExists),
        ))
    }

    /// Opens for reading and writing the file `name` this writer created earlier, checking that it is
    /// still that file ([`FileId`]), a regular file, not a link.
    pub fn open_file(&self, name: &str, id: FileId) -> Result<File, Error> {
        let path = self.path.join(name);
        let c = cstr(&path, OsStr::new(name))?;
        let fd = match sys::openat(
            Some(self.file.as_fd()),
            &c,
            libc::O_RDWR | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        ) {
            Ok(fd) => fd,
            Err(e) if is_errno(&e, libc::ENOENT) => {
                return Err(Error::Replaced {
                    path,
                    why: "was removed",
                })
            }
            Err(e) if is_errno(&e, libc::ELOOP) || is_errno(&e, libc::ENXIO) => {
                return Err(Error::Replaced {
                    path,
                    why: "was replaced",
                })
            }
            Err(e) => return Err(io_err("open", &path, e)),
        };
        let f = File::from(fd);
        let m = f.metadata().map_err(|e| io_err("inspect", &path, e))?;
        if !m.is_file() || FileId::of(&f).ok() != Some(id) {
            return Err(Error::Replaced {
                path,
                why: "was replaced",
            });
        }
        Ok(f)
    }

    /// Removes the file `name` (one path component) from this directory: the name itself,
    /// never what a link points to (`unlinkat`). For retention (`culprit prune`).
    pub fn remove_file(&self, name: &str) -> Result<(), Error> {
        let path = self.path.join(name);
        plain_file_name(&path, name)?;
        let c = cstr(&path, OsStr::new(name))?;
        sys::unlinkat(self.file.as_fd(), &c).map_err(|e| io_err("remove", &path, e))
    }

    /// The checks [`Dir::remove_file`] makes before it removes `name`, without removing it
    /// (`culprit prune --dry-run`): a plain name that exists in this directory (as itself: a
    /// link is looked at, never followed).
    pub fn check_removable(&self, name: &str) -> Result<(), Error> {
        let path = self.path.join(name);
        plain_file_name(&path, name)?;
        let c = cstr(&path, OsStr::new(name))?;
        sys::openat(
            Some(self.file.as_fd()),
            &c,
            libc::O_PATH | libc::O_NOFOLLOW,
            0,
        )
        .map(drop)
        .map_err(|e| io_err("remove", &path, e))
    }

    /// This directory's `node.info`, when it is a regular file (not a link) owned by the
    /// effective user or root and writable by its owner only; `None` otherwise (or when it is
    /// absent, too large or not a node metadata file). Keys that are not `[a-z0-9_]+` are
    /// left out.
    pub fn read_node_info(&self) -> Option<NodeInfo> {
        let c = CString::new(NODE_INFO_FILE).ok()?;
        let fd = sys::openat(
            Some(self.file.as_fd()),
            &c,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        )
        .ok()?;
        let f = File::from(fd);
        let m = f.metadata().ok()?;
        let euid = sys::geteuid();
        if !m.is_file()
            || m.len() > MAX_NODE_INFO
            || (m.uid() != euid && m.uid() != 0)
            || m.mode() & 0o022 != 0
        {
            return None;
        }
        let mut text = String::new();
        f.take(MAX_NODE_INFO).read_to_string(&mut text).ok()?;
        let mut info = NodeInfo::parse(&text)?;
        info.pairs.retain(|(k, _)| {
            !k.is_empty()
                && k.len() <= 64
                && k.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        });
        Some(info)
    }

    /// Replaces this directory's `node.info` with what `update` makes of the current one
    /// ([`Self::read_node_info`], or an empty one): written to a new file with a random name,
    /// then renamed over `node.info`.
    pub fn update_node_info(&self, update: impl FnOnce(&mut NodeInfo)) -> Result<(), Error> {
        let mut info = self.read_node_info().unwrap_or_default();
        update(&mut info);
        self.replace_file(NODE_INFO_FILE, info.to_text().as_bytes())
    }

    /// Replaces the file `name` (one path component) with `bytes` as one step: written to a new
    /// file with a random name, then renamed over `name` (which replaces a link, never follows
    /// it). A reader sees the old content or the new, never a mix.
    pub fn replace_file(&self, name: &str, bytes: &[u8]) -> Result<(), Error> {
        let path = self.path.join(name);
        plain_file_name(&path, name)?;
        let tmp = format!(".{name}.{:016x}.tmp", sys::random_u64());
        let tmp_path = self.path.join(&tmp);
        let tmp_c = cstr(&tmp_path, OsStr::new(&tmp))?;
        let fd = sys::openat(
            Some(self.file.as_fd()),
            &tmp_c,
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
            FILE_MODE,
        )
        .map_err(|e| io_err("create", &tmp_path, e))?;
        let mut f = File::from(fd);
        let written = f
            .set_permissions(Permissions::from_mode(FILE_MODE))
            .and_then(|()| f.write_all(bytes));
        drop(f);
        let dest = cstr(&path, OsStr::new(name))?;
        let res = written.and_then(|()| sys::renameat(self.file.as_fd(), &tmp_c, &dest));
        if let Err(e) = res {
            let _ = sys::unlinkat(self.file.as_fd(), &tmp_c);
            return Err(io_err("replace", &path, e));
        }
        Ok(())
    }

    /// The content of the regular file `name` (one path component, not a link), `None` when it
    /// does not exist; refused when it is larger than `max` bytes.
    pub fn read_small_file(&self, name: &str, max: u64) -> Result<Option<Vec<u8>>, Error> {
        let path = self.path.join(name);
        plain_file_name(&path, name)?;
        let c = cstr(&path, OsStr::new(name))?;
        let fd = match sys::openat(
            Some(self.file.as_fd()),
            &c,
            libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            0,
        ) {
            Ok(fd) => fd,
            Err(e) if is_errno(&e, libc::ENOENT) => return Ok(None),
            Err(e) if is_errno(&e, libc::ELOOP) => {
                return Err(refused(&path, "it is a symbolic link"))
            }
            Err(e) => return Err(io_err("open", &path, e)),
        };
        let f = File::from(fd);
        let m = f.metadata().map_err(|e| io_err("inspect", &path, e))?;
        if !m.is_file() || m.len() > max {
            return Err(refused(
                &path,
                format!("it is not a regular file of at most {max} bytes"),
            ));
        }
        let mut bytes = Vec::new();
        f.take(max)
            .read_to_end(&mut bytes)
            .map_err(|e| io_err("read", &path, e))?;
        Ok(Some(bytes))
    }

    /// Opens the regular file `name` (one path component) for reading and writing, creating it
    /// with mode [`FILE_MODE`] when it does not exist; never through a link, never a device or
    /// a FIFO. For copies of files written elsewhere (`culprit-ship`'s mirror).
    pub fn open_or_create_file(&self, name: &str) -> Result<File, Error> {
        let path = self.path.join(name);
        plain_file_name(&path, name)?;
        let c = cstr(&path, OsStr::new(name))?;
        let fd = sys::openat(
            Some(self.file.as_fd()),
            &c,
            libc::O_RDWR | libc::O_CREAT | libc::O_NOFOLLOW | libc::O_NONBLOCK,
            FILE_MODE,
        )
        .map_err(|e| {
            if is_errno(&e, libc::ELOOP) {
                refused(&path, "it is a symbolic link")
            } else {
                io_err("open", &path, e)
            }
        })?;
        let f = File::from(fd);
        let m = f.metadata().map_err(|e| io_err("inspect", &path, e))?;
        if !m.is_file() {
            return Err(refused(&path, "it is not a regular file"));
        }
        if m.mode() & 0o7777 != FILE_MODE && m.uid() == sys::geteuid() {
            f.set_permissions(Permissions::from_mode(FILE_MODE))
                .map_err(|e| io_err("set the mode of", &path, e))?;
        }
        Ok(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("culprit-datadir-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn creates_with_explicit_modes_and_refuses_links() {
        let base = tmp("modes");
        let root = Dir::open_root(&base.join("a/data"), true).unwrap();
        let m = std::fs::metadata(root.path()).unwrap();
        assert_eq!(m.mode() & 0o7777, DIR_MODE);
        let node = root.node("n1", true).unwrap();
        let (f, name) = node.create_file(|s| format!("f{s}")).unwrap();
        assert_eq!(name, "f0");
        assert_eq!(f.metadata().unwrap().mode() & 0o7777, FILE_MODE);
        let (_, name) = node.create_file(|s| format!("f{s}")).unwrap();
        assert_eq!(name, "f1");
        // A link in place of a node directory is refused, not followed.
        std::os::unix::fs::symlink(&base, root.path().join("n2")).unwrap();
        assert!(matches!(root.node("n2", true), Err(Error::Refused { .. })));
        // A world-writable node directory is refused.
        std::fs::create_dir(root.path().join("n3")).unwrap();
        std::fs::set_permissions(root.path().join("n3"), Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(root.node("n3", false), Err(Error::Refused { .. })));
        assert!(root.node("../x", true).is_err());
        // A removed file is told apart.
        let id = FileId::of(&f).unwrap();
        assert!(node.open_file("f0", id).is_ok());
        std::fs::remove_file(node.path().join("f0")).unwrap();
        assert!(matches!(
            node.open_file("f0", id),
            Err(Error::Replaced { .. })
        ));
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn node_info_is_replaced_not_followed() {
        let base = tmp("info");
        let root = Dir::open_root(&base, true).unwrap();
        let node = root.node("n1", true).unwrap();
        let victim = base.join("victim");
        std::fs::write(&victim, "culprit-node 1\nssh=key\n").unwrap();
        std::os::unix::fs::symlink(&victim, node.path().join(NODE_INFO_FILE)).unwrap();
        node.update_node_info(|i| i.pairs.push(("host".into(), "h".into())))
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "culprit-node 1\nssh=key\n"
        );
        let text = std::fs::read_to_string(node.path().join(NODE_INFO_FILE)).unwrap();
        assert_eq!(text, "culprit-node 1\nhost=h\n");
        node.update_node_info(|i| i.pairs.push(("kernel".into(), "k".into())))
            .unwrap();
        let text = std::fs::read_to_string(node.path().join(NODE_INFO_FILE)).unwrap();
        assert_eq!(text, "culprit-node 1\nhost=h\nkernel=k\n");
        let left: Vec<_> = std::fs::read_dir(node.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 1, "no temporary file left: {left:?}");
        let _ = std::fs::remove_dir_all(&base);
    }
}
