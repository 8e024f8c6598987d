//! The exported functions of layer-boundary I/O events: the C API (`culprit_io_*` in
//! `include/culprit.h`) and the C library's I/O functions the runtime interposes (`read`,
//! `write`, `pread`, `pwrite`, `preadv`, `pwritev` and their `64` and `_chk` names, `aio_read`,
//! `aio_write`, `aio_return`, and `close`, `dup2`, `dup3`, which forget a descriptor). Each is
//! a thin shell: the C library's function (resolved at load, [`crate::sys::io::real`]) does the
//! work, `crate::io` decides what to record (nothing unless `CULPRIT_IO=1`) and keeps `errno`.
//! Nothing here can panic or unwind across the C boundary.

use std::ffi::{c_char, c_int, c_void, CStr};

use culprit_format::{layer_kind, NO_OFFSET};

use crate::io;
use crate::sys::io::real;

/// See `culprit_io_layer` in include/culprit.h.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn culprit_io_layer(name: *const c_char) -> c_int {
    if name.is_null() {
        return io::code::BAD_LAYER;
    }
    // SAFETY: the caller passes a NUL-terminated string (documented in the header).
    let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else {
        return io::code::BAD_LAYER;
    };
    std::panic::catch_unwind(|| io::layer(name)).unwrap_or(io::code::NOT_TRACING)
}

macro_rules! mark_fn {
    ($name:ident, $kind:expr) => {
        /// See include/culprit.h.
        #[no_mangle]
        pub extern "C" fn $name(
            layer: c_int,
            req: u64,
            op: c_int,
            obj: u64,
            offset: u64,
            bytes: u64,
        ) -> c_int {
            io::mark(layer, $kind, req, op, obj, offset, bytes)
        }
    };
}

mark_fn!(culprit_io_admit, layer_kind::ADMIT);
mark_fn!(culprit_io_issue, layer_kind::ISSUE);
mark_fn!(culprit_io_complete, layer_kind::COMPLT);
mark_fn!(culprit_io_callback, layer_kind::CALLBACK);

// ---------------------------------------------------------------------------------------------
// The C library's synchronous I/O.

/// `read(2)`.
///
/// # Safety
///
/// That of `read(2)`.
#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize {
    let Some(c) = io::libc_begin(fd, false) else {
        // SAFETY: the caller's contract.
        return unsafe { real::read(fd, buf, n) };
    };
    // SAFETY: the caller's contract.
    let r = unsafe { real::read(fd, buf, n) };
    io::libc_end(c, r, n as u64, NO_OFFSET);
    r
}

/// `__read_chk` (`read` under `_FORTIFY_SOURCE`).
///
/// # Safety
///
/// That of `read(2)`.
#[no_mangle]
pub unsafe extern "C" fn __read_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize) -> isize {
    let Some(c) = io::libc_begin(fd, false) else {
        // SAFETY: the caller's contract.
        return unsafe { real::read_chk(fd, buf, n, buflen) };
    };
    // SAFETY: the caller's contract.
    let r = unsafe { real::read_chk(fd, buf, n, buflen) };
    io::libc_end(c, r, n as u64, NO_OFFSET);
    r
}

/// `write(2)`.
///
/// # Safety
///
/// That of `write(2)`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: usize) -> isize {
    let Some(c) = io::libc_begin(fd, true) else {
        // SAFETY: the caller's contract.
        return unsafe { real::write(fd, buf, n) };
    };
    // SAFETY: the caller's contract.
    let r = unsafe { real::write(fd, buf, n) };
    io::libc_end(c, r, n as u64, NO_OFFSET);
    r
}

macro_rules! pread_fn {
    ($name:ident, $wide:expr) => {
        /// `pread(2)`.
        ///
        /// # Safety
        ///
        /// That of `pread(2)`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, buf: *mut c_void, n: usize, off: i64) -> isize {
            let Some(c) = io::libc_begin(fd, false) else {
                // SAFETY: the caller's contract.
                return unsafe { real::pread($wide, fd, buf, n, off) };
            };
            // SAFETY: the caller's contract.
            let r = unsafe { real::pread($wide, fd, buf, n, off) };
            io::libc_end(c, r, n as u64, off as u64);
            r
        }
    };
}
pread_fn!(pread, false);
pread_fn!(pread64, true);

macro_rules! pread_chk_fn {
    ($name:ident, $wide:expr) => {
        /// `__pread_chk` (`pread` under `_FORTIFY_SOURCE`).
        ///
        /// # Safety
        ///
        /// That of `pread(2)`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            buf: *mut c_void,
            n: usize,
            off: i64,
            buflen: usize,
        ) -> isize {
            let Some(c) = io::libc_begin(fd, false) else {
                // SAFETY: the caller's contract.
                return unsafe { real::pread_chk($wide, fd, buf, n, off, buflen) };
            };
            // SAFETY: the caller's contract.
            let r = unsafe { real::pread_chk($wide, fd, buf, n, off, buflen) };
            io::libc_end(c, r, n as u64, off as u64);
            r
        }
    };
}
pread_chk_fn!(__pread_chk, false);
pread_chk_fn!(__pread64_chk, true);

macro_rules! pwrite_fn {
    ($name:ident, $wide:expr) => {
        /// `pwrite(2)`.
        ///
        /// # Safety
        ///
        /// That of `pwrite(2)`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, buf: *const c_void, n: usize, off: i64) -> isize {
            let Some(c) = io::libc_begin(fd, true) else {
                // SAFETY: the caller's contract.
                return unsafe { real::pwrite($wide, fd, buf, n, off) };
            };
            // SAFETY: the caller's contract.
            let r = unsafe { real::pwrite($wide, fd, buf, n, off) };
            io::libc_end(c, r, n as u64, off as u64);
            r
        }
    };
}
pwrite_fn!(pwrite, false);
pwrite_fn!(pwrite64, true);

macro_rules! preadv_fn {
    ($name:ident, $write:expr, $wide:expr) => {
        /// `preadv(2)` / `pwritev(2)`.
        ///
        /// # Safety
        ///
        /// That of `preadv(2)`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            iov: *const libc::iovec,
            cnt: c_int,
            off: i64,
        ) -> isize {
            let Some(c) = io::libc_begin(fd, $write) else {
                // SAFETY: the caller's contract.
                return unsafe { real::preadv($write, $wide, fd, iov, cnt, off) };
            };
            // SAFETY: the caller's contract.
            let r = unsafe { real::preadv($write, $wide, fd, iov, cnt, off) };
            // The vector is read only after the call succeeded (the kernel read it: it is
            // valid); a bad one makes the call fail with EFAULT, not the interposer crash.
            let asked = if r >= 0 {
                // SAFETY: see above.
                unsafe { real::iov_len(iov, cnt) }
            } else {
                0
            };
            io::libc_end(c, r, asked, off as u64);
            r
        }
    };
}
preadv_fn!(preadv, false, false);
preadv_fn!(preadv64, false, true);
preadv_fn!(pwritev, true, false);
preadv_fn!(pwritev64, true, true);

/// `close(2)`: forgets what the runtime knew of `fd`.
#[no_mangle]
pub extern "C" fn close(fd: c_int) -> c_int {
    io::fd_closed(fd);
    real::close(fd)
}

/// `dup2(2)`.
#[no_mangle]
pub extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    io::fd_closed(new);
    real::dup2(old, new)
}

/// `dup3(2)`.
#[no_mangle]
pub extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    io::fd_closed(new);
    real::dup3(old, new, flags)
}

// ---------------------------------------------------------------------------------------------
// POSIX AIO.

/// `aio_read` / `aio_write`: the request's ADMIT at layer `libc-aio`.
///
/// # Safety
///
/// That of `aio_read(3)`.
unsafe fn aio_submit(write: bool, wide: bool, cb: *mut libc::aiocb) -> c_int {
    if cb.is_null() || !io::libc_on() {
        // SAFETY: the caller's contract.
        return unsafe { real::aio_submit(write, wide, cb) };
    }
    // SAFETY: cb is a valid control block (the caller's contract; the C library reads it too).
    let (fd, off, n) = unsafe { real::aiocb_fields(cb) };
    let admit = io::aio_begin(cb as usize, fd, off, n, write);
    // SAFETY: the caller's contract.
    let rc = unsafe { real::aio_submit(write, wide, cb) };
    if let Some(a) = admit {
        let saved = crate::sys::io::errno();
        io::aio_submitted(a, rc);
        crate::sys::io::set_errno(saved);
    }
    rc
}

macro_rules! aio_submit_fn {
    ($name:ident, $write:expr, $wide:expr) => {
        /// `aio_read(3)` / `aio_write(3)`.
        ///
        /// # Safety
        ///
        /// That of `aio_read(3)`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(cb: *mut libc::aiocb) -> c_int {
            // SAFETY: the caller's contract.
            unsafe { aio_submit($write, $wide, cb) }
        }
    };
}
aio_submit_fn!(aio_read, false, false);
aio_submit_fn!(aio_read64, false, true);
aio_submit_fn!(aio_write, true, false);
aio_submit_fn!(aio_write64, true, true);

/// `aio_return`: the request's CALLBACK at layer `libc-aio`.
///
/// # Safety
///
/// That of `aio_return(3)`.
unsafe fn aio_ret(wide: bool, cb: *mut libc::aiocb) -> isize {
    if cb.is_null() || !io::libc_on() {
        // SAFETY: the caller's contract.
        return unsafe { real::aio_return(wide, cb) };
    }
    // SAFETY: cb is a valid control block (the caller's contract).
    let (fd, off, _) = unsafe { real::aiocb_fields(cb) };
    // SAFETY: the caller's contract.
    let is_write = unsafe { (*cb).aio_lio_opcode } == libc::LIO_WRITE;
    // SAFETY: the caller's contract.
    let r = unsafe { real::aio_return(wide, cb) };
    let saved = crate::sys::io::errno();
    io::aio_returned(cb as usize, fd, off, is_write, r);
    crate::sys::io::set_errno(saved);
    r
}

/// `aio_return(3)`.
///
/// # Safety
///
/// That of `aio_return(3)`.
#[no_mangle]
pub unsafe extern "C" fn aio_return(cb: *mut libc::aiocb) -> isize {
    // SAFETY: the caller's contract.
    unsafe { aio_ret(false, cb) }
}

/// `aio_return64(3)`.
///
/// # Safety
///
/// That of `aio_return(3)`.
#[no_mangle]
pub unsafe extern "C" fn aio_return64(cb: *mut libc::aiocb) -> isize {
    // SAFETY: the caller's contract.
    unsafe { aio_ret(true, cb) }
}
