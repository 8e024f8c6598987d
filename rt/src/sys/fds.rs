//! Descriptors: the runtime never takes the program's standard descriptors, or any other.
//!
//! A program that closes 0, 1 and 2 and opens three files expects them on 0, 1 and 2; one that
//! closes every descriptor it does not know (daemons) must not leave the runtime holding a
//! number it then reuses. The flusher, which opens and closes the trace file at every write,
//! works in a descriptor table of its own ([`own_fd_table`]); the constructor, the only other
//! place that opens files, runs before the program and holds closed standard descriptors
//! with /dev/null meanwhile ([`hold_std_fds`]).

use std::ffi::{c_int, c_void};

/// Gives the calling thread (the flusher) a descriptor table of its own, with nothing open
/// in it but /dev/null on 0, 1 and 2: the files it opens are then invisible to the program,
/// which can neither get their numbers taken nor have them closed or reused under it, and
/// none of the program's files stays open through it (a pipe the program closes reaches its
/// end). False when the kernel refuses (`unshare` filtered by a sandbox): the thread keeps
/// sharing the process's table.
pub fn own_fd_table() -> bool {
    // SAFETY: unshare(CLONE_FILES) gives the calling task a private copy of its descriptor
    // table; nothing else changes.
    if unsafe { libc::unshare(libc::CLONE_FILES) } != 0 {
        return false;
    }
    // The copy holds every descriptor of the program: close them all (in the copy only).
    // SAFETY: close_range on the private table; no memory is touched.
    let rc = unsafe { libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) };
    if rc != 0 {
        // Kernels before 5.9: close what the table lists.
        let fds: Vec<c_int> = std::fs::read_dir("/proc/thread-self/fd")
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        for fd in fds {
            // SAFETY: closes a descriptor of the private table.
            unsafe { libc::syscall(libc::SYS_close, fd) };
        }
    }
    for _ in 0..3 {
        open_dev_null();
    }
    true
}

fn open_dev_null() -> c_int {
    // SAFETY: a NUL-terminated path; the descriptor returned is the caller's.
    unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) }
}

/// While it lives, standard descriptors (0, 1, 2) that were closed hold /dev/null, so that
/// what the runtime opens meanwhile gets a number from 3 on; dropped, they are closed again.
/// For the constructor, which runs before the program (nothing of the program can open a
/// file meanwhile).
#[derive(Debug)]
pub struct StdFdsHeld([bool; 3]);

/// See [`StdFdsHeld`].
pub fn hold_std_fds() -> StdFdsHeld {
    let mut held = [false; 3];
    for (fd, h) in held.iter_mut().enumerate() {
        let fd = fd as c_int;
        // SAFETY: F_GETFD on any number only reads the flags (EBADF when closed).
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1 {
            continue;
        }
        let got = open_dev_null();
        if got == fd {
            *h = true;
        } else if got >= 0 {
            // SAFETY: a descriptor we just opened.
            unsafe { libc::syscall(libc::SYS_close, got) };
        }
    }
    StdFdsHeld(held)
}

impl Drop for StdFdsHeld {
    fn drop(&mut self) {
        for (fd, &h) in self.0.iter().enumerate() {
            if h {
                // SAFETY: a descriptor this guard opened.
                unsafe { libc::syscall(libc::SYS_close, fd as c_int) };
            }
        }
    }
}

/// The scheduler state of thread `tid` of this process (`R` running or runnable, `S`
/// sleeping, `D` in uninterruptible wait…: the field after the name in
/// `/proc/self/task/<tid>/stat`); `None` when it cannot be read. Called from a thread of the
/// program (the exit handler): the descriptor it opens is moved to a number from 3 on at
/// once. Allocates nothing (the exit handler may run in a signal handler).
pub fn thread_state(tid: u32) -> Option<u8> {
    let mut path = [0u8; 48];
    let mut n = 0;
    let mut push = |b: &[u8]| {
        path[n..n + b.len()].copy_from_slice(b);
        n += b.len();
    };
    push(b"/proc/self/task/");
    let mut digits = [0u8; 10];
    let mut k = digits.len();
    let mut t = tid;
    loop {
        k -= 1;
        digits[k] = b'0' + (t % 10) as u8;
        t /= 10;
        if t == 0 {
            break;
        }
    }
    push(&digits[k..]);
    push(b"/stat\0");
    // SAFETY: a NUL-terminated path in a buffer we own; the descriptor returned is ours.
    let fd = unsafe {
        libc::open(
            path.as_ptr() as *const libc::c_char,
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    let fd = above_std(fd)?;
    let mut buf = [0u8; 512];
    // SAFETY: reads into a buffer we own from our descriptor, then closes it.
    let n = unsafe {
        let n = libc::read(fd, buf.as_mut_ptr() as *mut c_void, buf.len());
        libc::syscall(libc::SYS_close, fd);
        n
    };
    let text = buf.get(..usize::try_from(n).ok()?)?;
    let close = text.iter().rposition(|&b| b == b')')?;
    text.get(close + 2).copied()
}

/// `fd` moved to a number from 3 on (`F_DUPFD_CLOEXEC`), the original closed; `None` (and
/// closed) when that fails.
fn above_std(fd: c_int) -> Option<c_int> {
    if fd > 2 {
        return Some(fd);
    }
    // SAFETY: duplicates and closes a descriptor we own.
    unsafe {
        let moved = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3);
        libc::syscall(libc::SYS_close, fd);
        (moved >= 0).then_some(moved)
    }
}
