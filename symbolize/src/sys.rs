//! The symbolizer's system calls that need `unsafe`: an in-memory file for the vDSO's copy, the
//! file system type of an open file, the effective user id. The rest of the crate only sees
//! these plain functions.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd as _, FromRawFd as _};

/// An anonymous in-memory file (`memfd_create`, close-on-exec), freed when the last descriptor
/// to it is closed: for copies that must not live in a shared directory such as `/tmp`.
pub fn memfd(name: &std::ffi::CStr) -> io::Result<File> {
    // SAFETY: `name` is NUL-terminated; the flags are valid.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new descriptor returned to us alone; `File` takes ownership.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// The effective user id of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// True when `file` lives on a FUSE file system (`fstatfs`: FUSE_SUPER_MAGIC); false when
/// that cannot be told.
pub fn is_fuse(file: &File) -> bool {
    const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;
    // SAFETY: statfs is plain old data; all-zero is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes one statfs through a valid pointer; the descriptor is open.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) };
    rc == 0 && st.f_type as i64 == FUSE_SUPER_MAGIC
}
