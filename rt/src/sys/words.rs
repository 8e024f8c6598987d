//! Thread-local words, the per-thread data they point at, and the memory the runtime maps for
//! it.
//!
//! Rust's `thread_local!` in a cdylib uses the general-dynamic TLS model: every access calls
//! `__tls_get_addr` (26 more instructions per call in callgrind). The runtime declares its own
//! 8-byte TLS variables and reads them with the initial-exec model (`%fs:` plus an offset from
//! the GOT): one load. The trade-off: initial-exec TLS lives in the static TLS block, which is
//! fine when the library is linked or LD_PRELOADed (the supported ways); a `dlopen` of the
//! runtime works only while glibc's static-TLS surplus has 24 bytes left (it normally has
//! ~1.6 KiB).
//!
//! * `culprit_rt_tls_cur` — what the fast path (`crate::ffi::hooks`) reads: the thread's block,
//!   or a stand-in (`block::hot`). Its initial value, copied into every new thread, is the "no
//!   block" stand-in (the loader relocates the TLS image before any thread copies it).
//! * `culprit_rt_tls_own` — the thread's block, 0 until it has one.
//! * `culprit_rt_tls_busy` — stack pointer of the general-path hook running in this thread.

use std::ffi::c_void;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{Acquire, Release};

#[cfg(target_arch = "x86_64")]
pub(super) mod tls {
    // `culprit_rt_tls_cur` itself, with its initial value, is declared in `crate::ffi::hooks`:
    // the value is the address of a domain stand-in.
    std::arch::global_asm!(
        ".pushsection .tbss,\"awT\",@nobits",
        ".balign 8",
        ".globl culprit_rt_tls_own",
        ".hidden culprit_rt_tls_own",
        ".type culprit_rt_tls_own,@object",
        ".size culprit_rt_tls_own,8",
        "culprit_rt_tls_own:",
        ".zero 8",
        ".globl culprit_rt_tls_busy",
        ".hidden culprit_rt_tls_busy",
        ".type culprit_rt_tls_busy,@object",
        ".size culprit_rt_tls_busy,8",
        "culprit_rt_tls_busy:",
        ".zero 8",
        ".popsection",
    );

    macro_rules! word {
        ($get:ident, $set:ident, $sym:literal) => {
            #[inline(always)]
            pub fn $get() -> usize {
                let v: usize;
                // SAFETY: reads this thread's copy of an 8-byte TLS variable declared above
                // through its initial-exec GOT offset; touches no other memory.
                unsafe {
                    std::arch::asm!(
                        concat!("mov {off}, qword ptr [rip + ", $sym, "@GOTTPOFF]"),
                        "mov {v}, qword ptr fs:[{off}]",
                        off = out(reg) _,
                        v = out(reg) v,
                        options(nostack, readonly, preserves_flags),
                    );
                }
                v
            }

            #[inline(always)]
            pub fn $set(v: usize) {
                // SAFETY: writes this thread's copy of a TLS variable declared above.
                unsafe {
                    std::arch::asm!(
                        concat!("mov {off}, qword ptr [rip + ", $sym, "@GOTTPOFF]"),
                        "mov qword ptr fs:[{off}], {v}",
                        off = out(reg) _,
                        v = in(reg) v,
                        options(nostack, preserves_flags),
                    );
                }
            }
        };
    }
    word!(cur, set_cur, "culprit_rt_tls_cur");
    word!(own, set_own, "culprit_rt_tls_own");
    word!(busy, set_busy, "culprit_rt_tls_busy");
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) mod tls {
    use std::cell::Cell;
    thread_local! {
        static CUR: Cell<usize> = const { Cell::new(0) };
        static OWN: Cell<usize> = const { Cell::new(0) };
        static BUSY: Cell<usize> = const { Cell::new(0) };
    }
    /// 0 until set: the hooks read it as "no block yet".
    pub fn cur() -> usize {
        CUR.with(|c| c.get())
    }
    pub fn set_cur(v: usize) {
        CUR.with(|c| c.set(v))
    }
    pub fn own() -> usize {
        OWN.with(|c| c.get())
    }
    pub fn set_own(v: usize) {
        OWN.with(|c| c.set(v))
    }
    pub fn busy() -> usize {
        BUSY.with(|c| c.get())
    }
    pub fn set_busy(v: usize) {
        BUSY.with(|c| c.set(v))
    }
}

/// The word the fast path reads: this thread's block or a stand-in (see `block::hot`).
#[inline(always)]
pub fn tls_cur() -> usize {
    tls::cur()
}

/// Sets the word the fast path reads (a block of this thread, or a stand-in).
#[inline(always)]
pub fn set_tls_cur(v: usize) {
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    tls::set_cur(v);
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

/// The stack pointer kept aside by the running general-path hook.
#[inline(always)]
pub fn busy_sp() -> usize {
    tls::busy()
}

/// Keeps `sp` aside as the running general-path hook's stack pointer.
#[inline(always)]
pub fn set_busy_sp(sp: usize) {
    tls::set_busy(sp);
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
}

/// Types whose all-zero bytes are a valid value, that are made only of atomics and have no drop
/// glue, so that memory the runtime maps itself can hold them, and the kernel may zero their
/// pages ([`discard_tail`]) while they are shared.
///
/// # Safety
///
/// Implementors guarantee exactly that: all-zero bytes are a valid value, every field is an
/// atomic or made of atomics, and the type has no drop glue.
pub unsafe trait Zeroable: Sync + 'static {}

/// What the thread-local pointer points at: the runtime's per-thread data.
///
/// # Safety
///
/// Implementors guarantee [`Zeroable`]'s conditions and that it is the only type implementing
/// this trait in the crate: [`own_data`] reads back as `T` what [`set_own_data`] stored.
pub unsafe trait ThreadData: Zeroable {
    /// The fast-path word of a thread whose hooks must do nothing (set before
    /// [`ThreadData::on_thread_exit`] runs, and in threads [`super::spawn_detached`] starts).
    fn ignore_word() -> usize;

    /// Called in a thread that exits while it has data (from a pthread key destructor), after
    /// the thread's hooks have been switched off (the fast-path word set to
    /// [`ThreadData::ignore_word`]).
    fn on_thread_exit(&'static self);
}

/// This thread's data, if it has any.
#[inline(always)]
pub fn own_data<T: ThreadData>() -> Option<&'static T> {
    let w = tls::own();
    // SAFETY: the only non-zero values ever stored are addresses of `&'static T`
    // (set_own_data), and T is the crate's only ThreadData type.
    (w != 0).then(|| unsafe { &*(w as *const T) })
}

/// Makes `d` this thread's data, and arranges for [`ThreadData::on_thread_exit`] to run when
/// the thread exits (see [`create_exit_key`]).
pub fn set_own_data<T: ThreadData>(d: &'static T) {
    let key = KEY.load(Acquire);
    if key != u32::MAX {
        // SAFETY: the key was created by create_exit_key; any non-null value makes its
        // destructor run.
        unsafe { libc::pthread_setspecific(key, std::ptr::dangling::<c_void>()) };
    }
    tls::set_own(d as *const T as usize);
}

/// A fresh zeroed `T` in its own anonymous mapping, never unmapped; `None` when memory cannot
/// be mapped.
pub fn alloc_zeroed<T: Zeroable>() -> Option<&'static T> {
    let size = size_of::<T>();
    // SAFETY: anonymous private mapping; the result is checked.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return None;
    }
    const { assert!(align_of::<T>() <= 4096) };
    // SAFETY: zeroed memory is a valid T (Zeroable), page alignment satisfies T's, and the
    // mapping is never unmapped, so 'static holds.
    Some(unsafe { &*(p as *const T) })
}

/// Gives the pages of `d` from byte `from` (rounded up to a page) to its end back to the
/// kernel: they read as zeros afterwards, and use no memory until written again. The caller
/// makes sure no other thread uses `d` meanwhile.
pub fn discard_tail<T: Zeroable>(d: &'static T, from: usize) {
    let start = (d as *const T as usize) + from.next_multiple_of(4096);
    let end = (d as *const T as usize) + size_of::<T>();
    if start < end {
        // SAFETY: the range is whole pages inside d's own mapping (alloc_zeroed maps every T
        // on its own, page-aligned); zeroing them is valid for a Zeroable (all atomics,
        // all-zero valid).
        unsafe { libc::madvise(start as *mut c_void, end - start, libc::MADV_DONTNEED) };
    }
}

// ---------------------------------------------------------------------------------------------
// Thread exit: a pthread key whose destructor runs `ThreadData::on_thread_exit`.

static KEY: AtomicU32 = AtomicU32::new(u32::MAX);

extern "C" fn exit_destructor<T: ThreadData>(_: *mut c_void) {
    tls::set_cur(T::ignore_word());
    if let Some(d) = own_data::<T>() {
        d.on_thread_exit();
    }
}

/// Creates the pthread key whose destructor runs [`ThreadData::on_thread_exit`] for `T` in
/// every exiting thread that has data.
pub fn create_exit_key<T: ThreadData>() -> bool {
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: valid out-pointer and an extern "C" destructor that never unwinds.
    if unsafe { libc::pthread_key_create(&mut key, Some(exit_destructor::<T>)) } != 0 {
        return false;
    }
    KEY.store(key, Release);
    true
}
