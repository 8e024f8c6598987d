//! Which descriptors are files: the C-library layer records I/O on regular files and block
//! devices only (a socket's or a pipe's reads say nothing about storage, and a server's
//! blocking socket reads would drown its disk requests). One `fstat` per descriptor, cached:
//! `close`, `dup2` and `dup3` (interposed) forget a descriptor, and every entry is checked
//! again after the flusher's next drain (≤ 100 ms), which bounds what a close the runtime does
//! not see (inside the C library: `fclose`) can confuse.

use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU32, AtomicU64};

use crate::sys;

/// Descriptors below this are cached (16 bytes each, in `.bss`: pages are used as descriptors
/// appear); higher ones are checked at every call.
const CACHED: usize = 65536;

struct Entry {
    /// Object id of the file, 0 when not a file.
    ident: AtomicU64,
    /// [`GEN`] when `ident` was found, 0 never.
    gen: AtomicU32,
}

static CACHE: [Entry; CACHED] = [const {
    Entry {
        ident: AtomicU64::new(0),
        gen: AtomicU32::new(0),
    }
}; CACHED];
static GEN: AtomicU32 = AtomicU32::new(1);

/// The object id of a file (device and inode mixed), never 0.
pub fn object_id(dev: u64, ino: u64) -> u64 {
    let h = ino ^ dev.rotate_left(40).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h | 1 << 63
}

/// The object id of what `fd` refers to, `None` when it is not a regular file or a block
/// device. Leaves `errno` alone; async-signal-safe.
#[inline]
pub fn file_of(fd: i32) -> Option<u64> {
    let e = usize::try_from(fd).ok().and_then(|i| CACHE.get(i));
    let gen = GEN.load(Relaxed);
    if let Some(e) = e {
        if e.gen.load(Acquire) == gen {
            let id = e.ident.load(Relaxed);
            return (id != 0).then_some(id);
        }
    }
    let id = sys::io::file_identity(fd).map(|(dev, ino)| object_id(dev, ino));
    if let Some(e) = e {
        e.ident.store(id.unwrap_or(0), Relaxed);
        e.gen.store(gen, Release);
    }
    id
}

/// `fd` was closed or replaced.
#[inline]
pub fn forget(fd: i32) {
    if let Some(e) = usize::try_from(fd).ok().and_then(|i| CACHE.get(i)) {
        e.gen.store(0, Release);
    }
}

/// Every entry is checked again at its next use (the flusher calls this at every drain).
pub fn age() {
    let g = GEN.load(Relaxed).wrapping_add(1);
    GEN.store(if g == 0 { 1 } else { g }, Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn files_are_files_and_pipes_are_not() {
        let f = std::fs::File::open("/proc/self/exe").unwrap();
        let id = file_of(f.as_raw_fd()).unwrap();
        assert_eq!(file_of(f.as_raw_fd()), Some(id));
        let (r, _w) = std::io::pipe().unwrap();
        assert_eq!(file_of(r.as_raw_fd()), None);
        assert_eq!(file_of(-1), None);
        forget(f.as_raw_fd());
        age();
        assert_eq!(file_of(f.as_raw_fd()), Some(id));
        assert_ne!(object_id(1, 2), object_id(2, 1));
    }
}
