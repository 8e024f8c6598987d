//! The exported C functions: the two `-finstrument-functions` hooks, the C API of
//! `include/culprit.h`, and the constructor. Each is a thin shell over safe code; none lets a
//! Rust panic or error cross the C boundary (the C API returns codes).

use std::ffi::{c_char, c_int, c_void, CStr};

use super::{current_block, tls_word, TLS_NONE};
use crate::runtime;

/// Hook called by code compiled with `-finstrument-functions` on entry to every function.
#[no_mangle]
pub extern "C" fn __cyg_profile_func_enter(func: *mut c_void, _call_site: *mut c_void) {
    match current_block() {
        Some(b) => b.enter(func as usize),
        None if tls_word() == TLS_NONE => runtime::first_enter(func as usize),
        None => {}
    }
}

/// Hook called on exit from every instrumented function.
#[no_mangle]
pub extern "C" fn __cyg_profile_func_exit(func: *mut c_void, _call_site: *mut c_void) {
    if let Some(b) = current_block() {
        b.exit(func as usize);
    }
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

static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// See `culprit_version` in include/culprit.h.
#[no_mangle]
pub extern "C" fn culprit_version() -> *const c_char {
    VERSION.as_ptr() as *const c_char
}

extern "C" fn constructor() {
    if std::panic::catch_unwind(runtime::start).is_err() {
        super::stderr_line("culprit: internal error while starting; running untraced");
    }
}

/// Runs [`constructor`] when the library is loaded (linked, `LD_PRELOAD`, or `dlopen`).
#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = constructor;
