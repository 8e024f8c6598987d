//! Every `unsafe` operation of the crate: the `*at` system calls std does not offer, the
//! effective user id, and random bytes. Each is a thin safe wrapper returning `io::Result`.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// `openat(dir, name, flags | O_CLOEXEC, mode)`; `dir` `None` is the current directory (for
/// absolute paths it does not matter).
pub fn openat(
    dir: Option<BorrowedFd<'_>>,
    name: &CStr,
    flags: libc::c_int,
    mode: libc::mode_t,
) -> io::Result<OwnedFd> {
    let d = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    loop {
        // SAFETY: `name` is NUL-terminated; `d` is a live descriptor or AT_FDCWD.
        let rc = unsafe { libc::openat(d, name.as_ptr(), flags | libc::O_CLOEXEC, mode) };
        match check(rc) {
            // SAFETY: openat returned a new descriptor that nothing else owns.
            Ok(fd) => return Ok(unsafe { OwnedFd::from_raw_fd(fd) }),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `mkdirat(dir, name, mode)`.
pub fn mkdirat(dir: BorrowedFd<'_>, name: &CStr, mode: libc::mode_t) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated; `dir` is a live descriptor.
    check(unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode) }).map(drop)
}

/// `renameat(dir, from, dir, to)`: replaces `to` (never following it if it is a link).
pub fn renameat(dir: BorrowedFd<'_>, from: &CStr, to: &CStr) -> io::Result<()> {
    let d = dir.as_raw_fd();
    // SAFETY: both names are NUL-terminated; `dir` is a live descriptor.
    check(unsafe { libc::renameat(d, from.as_ptr(), d, to.as_ptr()) }).map(drop)
}

/// `unlinkat(dir, name, 0)`.
pub fn unlinkat(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated; `dir` is a live descriptor.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) }).map(drop)
}

/// The effective user id.
pub fn geteuid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// 64 random bits from `getrandom(2)`; if the kernel's pool is not ready (early boot), a mix
/// of the time, the pid and an address — temporary names are created with `O_EXCL` anyway,
/// randomness only keeps others from planting them in advance.
pub fn random_u64() -> u64 {
    let mut v = 0u64;
    // SAFETY: writes at most 8 bytes into `v`.
    let n = unsafe { libc::getrandom(std::ptr::addr_of_mut!(v).cast(), 8, libc::GRND_NONBLOCK) };
    if n == 8 {
        return v;
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let a = std::ptr::addr_of!(v) as u64;
    (t ^ (u64::from(std::process::id()) << 32) ^ a.rotate_left(17))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
}
