//! The unsafe primitives of layer-boundary I/O events (the domain side is `crate::io`): the
//! thread-local word naming the thread's event ring, the pthread key that tells a ring its
//! thread exited, `errno`, `fstat`, the thread id, and the C library's own I/O functions
//! behind the runtime's interposers (resolved with `dlsym(RTLD_NEXT)` when the library loads,
//! never lazily in an interposer; a raw system call stands in until then).
//!
//! Like the rest of `sys`, this knows no domain type: a ring is any [`RingData`].

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

use super::Zeroable;

// ---------------------------------------------------------------------------------------------
// The ring word: 0 (no ring yet), 1 (off: this thread records nothing), or the address of the
// thread's ring. Initial-exec TLS like the hooks' words (one `%fs:` load), zero in every new
// thread.

/// The ring word of a thread that has no ring yet.
pub const RING_NONE: usize = 0;
/// The ring word of a thread that records nothing (the flusher, a thread that exits, one whose
/// ring could not be had).
pub const RING_OFF: usize = 1;
/// The ring word of the flusher: it records nothing, and its descriptors are its own (a
/// descriptor table of its own, see [`super::own_fd_table`]): the numbers it closes are not
/// the program's.
pub const RING_FLUSHER: usize = 2;

#[cfg(target_arch = "x86_64")]
mod tls {
    std::arch::global_asm!(
        ".pushsection .tbss,\"awT\",@nobits",
        ".balign 8",
        ".globl culprit_rt_tls_ring",
        ".hidden culprit_rt_tls_ring",
        ".type culprit_rt_tls_ring,@object",
        ".size culprit_rt_tls_ring,8",
        "culprit_rt_tls_ring:",
        ".zero 8",
        ".popsection",
    );

    #[inline(always)]
    pub fn get() -> usize {
        let v: usize;
        // SAFETY: reads this thread's copy of the 8-byte TLS variable declared above through
        // its initial-exec GOT offset; touches no other memory.
        unsafe {
            std::arch::asm!(
                "mov {off}, qword ptr [rip + culprit_rt_tls_ring@GOTTPOFF]",
                "mov {v}, qword ptr fs:[{off}]",
                off = out(reg) _,
                v = out(reg) v,
                options(nostack, readonly, preserves_flags),
            );
        }
        v
    }

    #[inline(always)]
    pub fn set(v: usize) {
        // SAFETY: writes this thread's copy of the TLS variable declared above.
        unsafe {
            std::arch::asm!(
                "mov {off}, qword ptr [rip + culprit_rt_tls_ring@GOTTPOFF]",
                "mov qword ptr fs:[{off}], {v}",
                off = out(reg) _,
                v = in(reg) v,
                options(nostack, preserves_flags),
            );
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod tls {
    use std::cell::Cell;
    thread_local! {
        static RING: Cell<usize> = const { Cell::new(0) };
    }
    pub fn get() -> usize {
        RING.with(|c| c.get())
    }
    pub fn set(v: usize) {
        RING.with(|c| c.set(v))
    }
}

/// What the ring word points at: the runtime's per-thread event ring.
///
/// # Safety
///
/// Implementors guarantee [`Zeroable`]'s conditions and that it is the only type implementing
/// this trait in the crate: [`ring`] reads back as `T` what [`set_ring`] stored.
pub unsafe trait RingData: Zeroable {
    /// Called in a thread that exits while it has a ring (from a pthread key destructor),
    /// after its ring word was set to [`RING_OFF`].
    fn on_thread_exit(&'static self);
}

/// This thread's ring, or the word saying why there is none ([`RING_NONE`], [`RING_OFF`],
/// [`RING_FLUSHER`]).
#[inline(always)]
pub fn ring<T: RingData>() -> Result<&'static T, usize> {
    let w = tls::get();
    if w <= RING_FLUSHER {
        return Err(w);
    }
    // SAFETY: the only values above RING_FLUSHER ever stored are addresses of `&'static T`
    // (set_ring), and T is the crate's only RingData type.
    Ok(unsafe { &*(w as *const T) })
}

/// This thread's ring word, as set (a ring's address, or one of the words above).
pub fn ring_word() -> usize {
    tls::get()
}

/// Makes `r` this thread's ring and arranges for [`RingData::on_thread_exit`] to run when the
/// thread exits. False (and the word left alone) when the exit key does not exist.
pub fn set_ring<T: RingData>(r: &'static T) -> bool {
    let key = RING_KEY.load(Acquire);
    if key == usize::MAX {
        return false;
    }
    // SAFETY: the key was created by create_ring_key; any non-null value makes its destructor
    // run.
    if unsafe { libc::pthread_setspecific(key as libc::pthread_key_t, std::ptr::dangling()) } != 0 {
        return false;
    }
    tls::set(r as *const T as usize);
    true
}

/// Sets this thread's ring word to [`RING_OFF`], [`RING_NONE`] or [`RING_FLUSHER`] (a ring
/// it had is not told).
pub fn set_ring_word(w: usize) {
    debug_assert!(w <= RING_FLUSHER);
    tls::set(w);
}

static RING_KEY: AtomicUsize = AtomicUsize::new(usize::MAX);

extern "C" fn ring_exit<T: RingData>(_: *mut c_void) {
    let r = ring::<T>();
    tls::set(RING_OFF);
    if let Ok(r) = r {
        r.on_thread_exit();
    }
}

/// Creates (once) the pthread key whose destructor runs [`RingData::on_thread_exit`] for `T`.
pub fn create_ring_key<T: RingData>() -> bool {
    if RING_KEY.load(Acquire) != usize::MAX {
        return true;
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: valid out-pointer and an extern "C" destructor that never unwinds.
    if unsafe { libc::pthread_key_create(&mut key, Some(ring_exit::<T>)) } != 0 {
        return false;
    }
    RING_KEY.store(key as usize, Release);
    true
}

// ---------------------------------------------------------------------------------------------
// Small things an interposer needs.

/// The calling thread's `errno`.
#[inline(always)]
pub fn errno() -> c_int {
    // SAFETY: __errno_location returns this thread's errno slot, always valid.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno`.
#[inline(always)]
pub fn set_errno(e: c_int) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = e }
}

/// The calling thread's id (`gettid`).
pub fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

/// What `fstat(fd)` says about a descriptor: `Some((dev, ino))` for a regular file or a block
/// device, `None` for anything else (a socket, a pipe, a closed descriptor). Leaves `errno` as
/// it found it. Async-signal-safe.
pub fn file_identity(fd: c_int) -> Option<(u64, u64)> {
    let saved = errno();
    // SAFETY: a zeroed stat is a valid out-parameter.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer; fstat on any integer is safe (EBADF at worst).
    let rc = unsafe { libc::fstat(fd, &mut st) };
    set_errno(saved);
    if rc != 0 {
        return None;
    }
    let fmt = st.st_mode & libc::S_IFMT;
    (fmt == libc::S_IFREG || fmt == libc::S_IFBLK).then_some((st.st_dev, st.st_ino))
}

// ---------------------------------------------------------------------------------------------
// The C library's own functions behind the interposers.

/// Addresses of the next definitions (`dlsym(RTLD_NEXT)`) of the functions the runtime
/// interposes; 0 until resolved or when absent.
pub mod real {
    use super::*;

    macro_rules! reals {
        ($($name:ident),* $(,)?) => {
            #[allow(non_upper_case_globals)]
            mod slot {
                use std::sync::atomic::AtomicUsize;
                $(pub static $name: AtomicUsize = AtomicUsize::new(0);)*
            }

            /// Resolves every function with `dlsym(RTLD_NEXT)`.
            pub fn resolve() {
                $(
                    let name = concat!(stringify!($name), "\0");
                    let cname = CStr::from_bytes_with_nul(name.as_bytes()).expect("NUL-terminated");
                    // SAFETY: dlsym with a valid NUL-terminated name; RTLD_NEXT searches the
                    // objects after this one.
                    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, cname.as_ptr()) };
                    slot::$name.store(p as usize, Release);
                )*
            }
        };
    }

    reals!(
        read,
        write,
        pread,
        pread64,
        pwrite,
        pwrite64,
        preadv,
        preadv64,
        pwritev,
        pwritev64,
        __read_chk,
        __pread_chk,
        __pread64_chk,
        close,
        dup2,
        dup3,
        aio_read,
        aio_read64,
        aio_write,
        aio_write64,
        aio_return,
        aio_return64,
    );

    #[inline(always)]
    fn addr(slot: &AtomicUsize) -> usize {
        slot.load(Relaxed)
    }

    type ReadFn = unsafe extern "C" fn(c_int, *mut c_void, usize) -> isize;
    type WriteFn = unsafe extern "C" fn(c_int, *const c_void, usize) -> isize;
    type PreadFn = unsafe extern "C" fn(c_int, *mut c_void, usize, i64) -> isize;
    type PwriteFn = unsafe extern "C" fn(c_int, *const c_void, usize, i64) -> isize;
    type PreadvFn = unsafe extern "C" fn(c_int, *const libc::iovec, c_int, i64) -> isize;
    type ReadChkFn = unsafe extern "C" fn(c_int, *mut c_void, usize, usize) -> isize;
    type PreadChkFn = unsafe extern "C" fn(c_int, *mut c_void, usize, i64, usize) -> isize;
    type AioFn = unsafe extern "C" fn(*mut libc::aiocb) -> c_int;
    type AioReturnFn = unsafe extern "C" fn(*mut libc::aiocb) -> isize;

    /// Sets `errno` from a raw system call's result, as the C library does.
    fn from_raw(r: libc::c_long) -> isize {
        if (-4095..0).contains(&r) {
            set_errno(-r as c_int);
            -1
        } else {
            r as isize
        }
    }

    fn raw(nr: libc::c_long, a: [usize; 4]) -> isize {
        // SAFETY: the caller (one of the functions below, itself unsafe with the C
        // function's contract) passes the arguments of that system call.
        from_raw(unsafe { libc::syscall(nr, a[0], a[1], a[2], a[3]) })
    }

    /// The C library's `read` (or the system call before it is resolved).
    ///
    /// # Safety
    ///
    /// That of `read(2)`: `buf` is valid for `n` bytes.
    #[inline(always)]
    pub unsafe fn read(fd: c_int, buf: *mut c_void, n: usize) -> isize {
        match addr(&slot::read) {
            0 => raw(libc::SYS_read, [fd as usize, buf as usize, n, 0]),
            // SAFETY: the address is glibc's `read`, whose type this is.
            f => unsafe { std::mem::transmute::<usize, ReadFn>(f)(fd, buf, n) },
        }
    }

    /// The C library's `write`.
    ///
    /// # Safety
    ///
    /// That of `write(2)`.
    #[inline(always)]
    pub unsafe fn write(fd: c_int, buf: *const c_void, n: usize) -> isize {
        match addr(&slot::write) {
            0 => raw(libc::SYS_write, [fd as usize, buf as usize, n, 0]),
            // SAFETY: as above.
            f => unsafe { std::mem::transmute::<usize, WriteFn>(f)(fd, buf, n) },
        }
    }

    /// The C library's `pread` (`pread64` when `wide`).
    ///
    /// # Safety
    ///
    /// That of `pread(2)`.
    #[inline(always)]
    pub unsafe fn pread(wide: bool, fd: c_int, buf: *mut c_void, n: usize, off: i64) -> isize {
        let s = if wide { &slot::pread64 } else { &slot::pread };
        match addr(s) {
            0 => raw(
                libc::SYS_pread64,
                [fd as usize, buf as usize, n, off as usize],
            ),
            // SAFETY: as above.
            f => unsafe { std::mem::transmute::<usize, PreadFn>(f)(fd, buf, n, off) },
        }
    }

    /// The C library's `pwrite` (`pwrite64` when `wide`).
    ///
    /// # Safety
    ///
    /// That of `pwrite(2)`.
    #[inline(always)]
    pub unsafe fn pwrite(wide: bool, fd: c_int, buf: *const c_void, n: usize, off: i64) -> isize {
        let s = if wide { &slot::pwrite64 } else { &slot::pwrite };
        match addr(s) {
            0 => raw(
                libc::SYS_pwrite64,
                [fd as usize, buf as usize, n, off as usize],
            ),
            // SAFETY: as above.
            f => unsafe { std::mem::transmute::<usize, PwriteFn>(f)(fd, buf, n, off) },
        }
    }

    /// The C library's `preadv` / `pwritev` (their `64` names when `wide`).
    ///
    /// # Safety
    ///
    /// That of `preadv(2)`.
    #[inline(always)]
    pub unsafe fn preadv(
        write: bool,
        wide: bool,
        fd: c_int,
        iov: *const libc::iovec,
        cnt: c_int,
        off: i64,
    ) -> isize {
        let s = match (write, wide) {
            (false, false) => &slot::preadv,
            (false, true) => &slot::preadv64,
            (true, false) => &slot::pwritev,
            (true, true) => &slot::pwritev64,
        };
        match addr(s) {
            0 => {
                // The system call takes the offset as two longs (low, high).
                let nr = if write {
                    libc::SYS_pwritev
                } else {
                    libc::SYS_preadv
                };
                // SAFETY: the arguments of preadv/pwritev, offset split as the kernel wants.
                from_raw(unsafe {
                    libc::syscall(
                        nr,
                        fd,
                        iov,
                        cnt,
                        off as u64 as usize,
                        (off as u64 >> 32) as usize,
                    )
                })
            }
            // SAFETY: as above.
            f => unsafe { std::mem::transmute::<usize, PreadvFn>(f)(fd, iov, cnt, off) },
        }
    }

    /// `__read_chk` (what `read` becomes under `_FORTIFY_SOURCE`).
    ///
    /// # Safety
    ///
    /// That of `read(2)`, with `buflen` the size of `buf`.
    pub unsafe fn read_chk(fd: c_int, buf: *mut c_void, n: usize, buflen: usize) -> isize {
        match addr(&slot::__read_chk) {
            // SAFETY: the caller's contract.
            0 => unsafe { read(fd, buf, n.min(buflen)) },
            // SAFETY: as above.
            f => unsafe { std::mem::transmute::<usize, ReadChkFn>(f)(fd, buf, n, buflen) },
        }
    }

    /// `__pread_chk` (`__pread64_chk` when `wide`).
    ///
    /// # Safety
    ///
    /// That of `pread(2)`, with `buflen` the size of `buf`.
    pub unsafe fn pread_chk(
        wide: bool,
        fd: c_int,
        buf: *mut c_void,
        n: usize,
        off: i64,
        buflen: usize,
    ) -> isize {
        let s = if wide {
            &slot::__pread64_chk
        } else {
            &slot::__pread_chk
        };
        match addr(s) {
            // SAFETY: the caller's contract.
            0 => unsafe { pread(wide, fd, buf, n.min(buflen), off) },
            // SAFETY: as above.
            f => unsafe { std::mem::transmute::<usize, PreadChkFn>(f)(fd, buf, n, off, buflen) },
        }
    }

    /// The C library's `close`.
    pub fn close(fd: c_int) -> c_int {
        match addr(&slot::close) {
            0 => raw(libc::SYS_close, [fd as usize, 0, 0, 0]) as c_int,
            // SAFETY: glibc's close; any integer is a valid argument.
            f => unsafe {
                std::mem::transmute::<usize, unsafe extern "C" fn(c_int) -> c_int>(f)(fd)
            },
        }
    }

    /// The C library's `dup2`.
    pub fn dup2(old: c_int, new: c_int) -> c_int {
        match addr(&slot::dup2) {
            0 => raw(libc::SYS_dup2, [old as usize, new as usize, 0, 0]) as c_int,
            // SAFETY: glibc's dup2; any integers are valid arguments.
            f => unsafe {
                std::mem::transmute::<usize, unsafe extern "C" fn(c_int, c_int) -> c_int>(f)(
                    old, new,
                )
            },
        }
    }

    /// The C library's `dup3`.
    pub fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
        match addr(&slot::dup3) {
            0 => raw(
                libc::SYS_dup3,
                [old as usize, new as usize, flags as usize, 0],
            ) as c_int,
            // SAFETY: glibc's dup3; any integers are valid arguments.
            f => unsafe {
                std::mem::transmute::<usize, unsafe extern "C" fn(c_int, c_int, c_int) -> c_int>(f)(
                    old, new, flags,
                )
            },
        }
    }

    /// The C library's `aio_read` / `aio_write` (`…64` when `wide`); `ENOSYS` when absent.
    ///
    /// # Safety
    ///
    /// That of `aio_read(3)`: `cb` is a valid control block that stays valid until the
    /// request completes.
    pub unsafe fn aio_submit(write: bool, wide: bool, cb: *mut libc::aiocb) -> c_int {
        let s = match (write, wide) {
            (false, false) => &slot::aio_read,
            (false, true) => &slot::aio_read64,
            (true, false) => &slot::aio_write,
            (true, true) => &slot::aio_write64,
        };
        match addr(s) {
            0 => {
                set_errno(libc::ENOSYS);
                -1
            }
            // SAFETY: glibc's aio_read/aio_write; the caller's contract.
            f => unsafe { std::mem::transmute::<usize, AioFn>(f)(cb) },
        }
    }

    /// The C library's `aio_return` (`aio_return64` when `wide`); `ENOSYS` when absent.
    ///
    /// # Safety
    ///
    /// That of `aio_return(3)`.
    pub unsafe fn aio_return(wide: bool, cb: *mut libc::aiocb) -> isize {
        let s = if wide {
            &slot::aio_return64
        } else {
            &slot::aio_return
        };
        match addr(s) {
            0 => {
                set_errno(libc::ENOSYS);
                -1
            }
            // SAFETY: as above.
            f => unsafe { std::mem::transmute::<usize, AioReturnFn>(f)(cb) },
        }
    }

    /// What an interposer may read of an AIO control block: (descriptor, offset, bytes).
    ///
    /// # Safety
    ///
    /// `cb` points to a valid `struct aiocb` (the C library reads it the same way).
    pub unsafe fn aiocb_fields(cb: *const libc::aiocb) -> (c_int, i64, usize) {
        // SAFETY: the caller's contract.
        let cb = unsafe { &*cb };
        (cb.aio_fildes, cb.aio_offset, cb.aio_nbytes)
    }

    /// The total length of an I/O vector whose call succeeded (the kernel read it, so it is
    /// valid). Saturates.
    ///
    /// # Safety
    ///
    /// `iov` points to `cnt` valid `iovec`s.
    pub unsafe fn iov_len(iov: *const libc::iovec, cnt: c_int) -> u64 {
        if iov.is_null() || cnt <= 0 {
            return 0;
        }
        // SAFETY: the caller's contract.
        let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
        v.iter()
            .fold(0u64, |a, x| a.saturating_add(x.iov_len as u64))
    }
}

/// Resolves the C library's functions when the library loads (before `main`, before the
/// runtime's own constructor needs them; the interposers use raw system calls until then).
extern "C" fn resolve_at_load() {
    real::resolve();
}

#[used]
#[link_section = ".init_array"]
static RESOLVE: extern "C" fn() = resolve_at_load;
