//! The C API of `include/culprit.h`, `_exit`/`_Exit`, and the constructor (the two
//! `-finstrument-functions` hooks are in [`super::hooks`]). Each is a thin shell over safe code;
//! none lets a Rust panic or error cross the C boundary (the C API returns codes).

use std::ffi::{c_char, c_int, CStr};

use crate::runtime;

/// `_exit(2)` as the program sees it when the runtime is linked or preloaded (it comes before
/// glibc in the symbol lookup order): writes the interval in progress and the end marker
/// (bounded wait), then ends the process as glibc's `_exit` does. Pre-forked workers and
/// children that `_exit` would otherwise lose everything since their last interval boundary.
/// glibc's own internal uses of `_exit` (`exit`, `posix_spawn`, `system`) do not come here.
#[no_mangle]
pub extern "C" fn _exit(status: c_int) -> ! {
    let _ = std::panic::catch_unwind(runtime::before_exit);
    crate::sys::exit_group(status)
}

/// `_Exit(3)`: the same as [`_exit`].
#[no_mangle]
pub extern "C" fn _Exit(status: c_int) -> ! {
    let _ = std::panic::catch_unwind(runtime::before_exit);
    crate::sys::exit_group(status)
}

/// See `culprit_flush` in include/culprit.h.
#[no_mangle]
pub extern "C" fn culprit_flush() -> c_int {
    std::panic::catch_unwind(runtime::flush).unwrap_or(-1)
}

/// See `culprit_pause` in include/culprit.h.
#[no_mangle]
pub extern "C" fn culprit_pause() -> c_int {
    std::panic::catch_unwind(runtime::pause).unwrap_or(-1)
}

/// See `culprit_resume` in include/culprit.h.
#[no_mangle]
pub extern "C" fn culprit_resume() -> c_int {
    std::panic::catch_unwind(runtime::resume).unwrap_or(-1)
}

/// See `culprit_set_node` in include/culprit.h.
///
/// # Safety
///
/// `name` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn culprit_set_node(name: *const c_char) -> c_int {
    if name.is_null() {
        return -2;
    }
    // SAFETY: the caller passes a NUL-terminated string (documented in the header).
    let name = unsafe { CStr::from_ptr(name) };
    let Ok(name) = name.to_str() else {
        return -2;
    };
    std::panic::catch_unwind(|| runtime::set_node(name)).unwrap_or(-1)
}

/// See `culprit_is_active` in include/culprit.h.
#[no_mangle]
pub extern "C" fn culprit_is_active() -> c_int {
    runtime::is_active() as c_int
}

/// See `culprit_request_begin` in include/culprit.h.
#[no_mangle]
pub extern "C" fn culprit_request_begin(id: u64, rtype: u64, parent: u64) -> c_int {
    std::panic::catch_unwind(|| crate::requests::begin(id, rtype, parent)).unwrap_or(-1)
}

/// See `culprit_request_end` in include/culprit.h.
#[no_mangle]
pub extern "C" fn culprit_request_end(id: u64) -> c_int {
    std::panic::catch_unwind(|| crate::requests::end(id)).unwrap_or(-1)
}

static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// See `culprit_version` in include/culprit.h.
#[no_mangle]
pub extern "C" fn culprit_version() -> *const c_char {
    VERSION.as_ptr() as *const c_char
}

extern "C" fn constructor() {
    if std::panic::catch_unwind(|| runtime::start(super::hooks::described())).is_err() {
        crate::sys::stderr_line("culprit: internal error while starting; running untraced");
    }
}

/// Runs [`constructor`] when the library is loaded (linked, `LD_PRELOAD`, or `dlopen`).
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = constructor;
