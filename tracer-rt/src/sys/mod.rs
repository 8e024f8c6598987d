//! Every `unsafe` operation of the runtime, behind safe functions and owner types: the
//! thread-local pointer, the TSC, anonymous mappings, futexes, pthread keys, `pthread_atfork`,
//! `atexit`, `dl_iterate_phdr`, and (in [`ffi`]) the exported C functions.
//!
//! This layer knows no domain type: what the thread-local pointer points at is any
//! [`ThreadData`] (the runtime has one, its per-thread block), and the registry of those is a
//! generic [`Registry`]. The one exception is [`hooks`], the fast path of the two hooks in
//! assembly: it reads and writes the per-thread block through the offsets `block::hot` gives
//! (nothing else here depends on it, or on the domain).

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize};

pub mod ffi;
pub mod hooks;
pub mod interpose;
pub mod io;

// ---------------------------------------------------------------------------------------------
// Thread-local words.
//
// Rust's `thread_local!` in a cdylib uses the general-dynamic TLS model: every access calls
// `__tls_get_addr` (26 more instructions per call in callgrind). The runtime declares its own
// 8-byte TLS variables and reads them with the initial-exec model (`%fs:` plus an offset from
// the GOT): one load. The trade-off: initial-exec TLS lives in the static TLS block, which is
// fine when the library is linked or LD_PRELOADed (the supported ways); a `dlopen` of the
// runtime works only while glibc's static-TLS surplus has 24 bytes left (it normally has
// ~1.6 KiB).
//
// * `culprit_rt_tls_cur` — what the fast path (`hooks`) reads: the thread's block, or a
//   stand-in (`block::hot`). Its initial value, copied into every new thread, is the "no
//   block" stand-in (the loader relocates the TLS image before any thread copies it).
// * `culprit_rt_tls_own` — the thread's block, 0 until it has one.
// * `culprit_rt_tls_busy` — stack pointer of the general-path hook running in this thread.

#[cfg(target_arch = "x86_64")]
mod tls {
    // `culprit_rt_tls_cur` itself, with its initial value, is declared in `hooks`: the value is
    // the address of a domain stand-in.
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
mod tls {
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
    /// [`ThreadData::on_thread_exit`] runs, and in threads [`spawn_detached`] starts).
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
// Descriptors: the runtime never takes the program's standard descriptors, or any other.
//
// A program that closes 0, 1 and 2 and opens three files expects them on 0, 1 and 2; one that
// closes every descriptor it does not know (daemons) must not leave the runtime holding a
// number it then reuses. The flusher, which opens and closes the trace file at every write,
// works in a descriptor table of its own ([`own_fd_table`]); the constructor, the only other
// place that opens files, runs before the program and holds closed standard descriptors
// with /dev/null meanwhile ([`hold_std_fds`]).

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

/// Sleeps for `ns` (a short pause of the flusher while it waits for the hooks).
pub fn sleep_ns(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: a valid timespec; an interrupted sleep just returns early.
    unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
}

/// A reference set at most once (then never changed), read lock-free; all-zero is "unset".
#[derive(Debug)]
pub struct OnceRef<T: Zeroable> {
    p: AtomicPtr<T>,
}

impl<T: Zeroable> Default for OnceRef<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Zeroable> OnceRef<T> {
    /// Unset.
    pub const fn new() -> Self {
        OnceRef {
            p: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The reference, once set.
    #[inline(always)]
    pub fn get(&self) -> Option<&'static T> {
        let p = self.p.load(Acquire);
        // SAFETY: non-null pointers stored here come from `&'static T` (set).
        (!p.is_null()).then(|| unsafe { &*p })
    }

    /// Sets it, unless it is set already.
    pub fn set(&self, v: &'static T) {
        let _ = self.p.compare_exchange(
            std::ptr::null_mut(),
            v as *const T as *mut T,
            AcqRel,
            Acquire,
        );
    }
}

/// A lock-free list of `&'static T`, only ever appended to, with room for `N`.
#[derive(Debug)]
pub struct Registry<T: Zeroable, const N: usize> {
    items: [AtomicPtr<T>; N],
    len: AtomicUsize,
}

impl<T: Zeroable, const N: usize> Default for Registry<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Zeroable, const N: usize> Registry<T, N> {
    /// Empty.
    pub const fn new() -> Self {
        Registry {
            items: [const { AtomicPtr::new(std::ptr::null_mut()) }; N],
            len: AtomicUsize::new(0),
        }
    }

    /// Appends `d`; false when full.
    pub fn push(&self, d: &'static T) -> bool {
        let i = self.len.fetch_add(1, AcqRel);
        if i >= N {
            self.len.fetch_sub(1, AcqRel);
            return false;
        }
        self.items[i].store(d as *const T as *mut T, Release);
        true
    }

    /// The items in the order they were added (an item being added right now may be missed).
    pub fn iter(&self) -> impl Iterator<Item = &'static T> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Number of slots handed out so far (an item may still be on its way into the last ones).
    pub fn len(&self) -> usize {
        self.len.load(Acquire).min(N)
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th item, if it is there.
    pub fn get(&self, i: usize) -> Option<&'static T> {
        let p = self.items.get(i)?.load(Acquire);
        // SAFETY: non-null pointers stored here come from `&'static T` (push).
        (!p.is_null()).then(|| unsafe { &*p })
    }
}

/// The stack pointer of the calling function (inlined into the hooks: the hook's own, which,
/// the hooks being frameless, is its caller's stack pointer minus the return address).
/// Always 8-aligned and non-zero.
#[inline(always)]
pub fn stack_pointer() -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        let sp: usize;
        // SAFETY: copies %rsp into a register; reads and writes no memory.
        unsafe {
            std::arch::asm!("mov {}, rsp", out(reg) sp, options(nomem, nostack, preserves_flags));
        }
        sp
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let here = 0u8;
        (std::ptr::addr_of!(here) as usize & !7).max(8)
    }
}

/// True when this thread runs on its alternate signal stack (`sigaltstack`): a signal handler
/// installed with `SA_ONSTACK`. Async-signal-safe.
pub fn on_alt_stack() -> bool {
    // SAFETY: a zeroed stack_t is a valid out-parameter; a null new stack only queries.
    let mut ss: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let rc = unsafe { libc::sigaltstack(std::ptr::null(), &mut ss) };
    rc == 0 && ss.ss_flags & libc::SS_ONSTACK != 0
}

// ---------------------------------------------------------------------------------------------
// Timestamps.

/// The time-stamp counter.
#[inline(always)]
pub fn rdtsc() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions on x86_64.
        #[allow(unused_unsafe)]
        unsafe {
            std::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        monotonic_ns()
    }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; clock_gettime is async-signal-safe.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// `CLOCK_MONOTONIC` in ns.
#[inline]
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The calling thread's kernel thread id.
pub fn gettid() -> u32 {
    // SAFETY: gettid has no arguments and cannot fail.
    unsafe { libc::gettid() as u32 }
}

/// `CLOCK_REALTIME` in ns since the epoch.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
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

// ---------------------------------------------------------------------------------------------
// Process hooks.

/// Registers `child` to run in the child after `fork`.
pub fn at_fork_child(child: extern "C" fn()) -> bool {
    // SAFETY: registers a never-unwinding extern "C" function.
    unsafe { libc::pthread_atfork(None, None, Some(child)) == 0 }
}

/// Registers `f` to run at `exit`.
pub fn at_exit(f: extern "C" fn()) -> bool {
    // SAFETY: registers a never-unwinding extern "C" function.
    unsafe { libc::atexit(f) == 0 }
}

/// Starts a detached thread running `f` with a raw `pthread_create` (safe to call in a
/// `fork` child handler, unlike `std::thread`, which takes process-wide locks). The thread's
/// hooks do nothing, and it blocks every signal from its first instruction on: the program's
/// handlers never run in it (a handler's calls would go untraced there, and one calling
/// `_exit` would wait for the very thread it runs in).
pub fn spawn_detached<T: ThreadData>(f: Box<dyn FnOnce() + Send>) -> bool {
    extern "C" fn start<T: ThreadData>(arg: *mut c_void) -> *mut c_void {
        tls::set_cur(T::ignore_word());
        // SAFETY: arg is the Box<Box<dyn FnOnce>> leaked by spawn_detached, taken once.
        let f = unsafe { Box::from_raw(arg as *mut Box<dyn FnOnce() + Send>) };
        // A panic must not unwind into pthread's frames.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        std::ptr::null_mut()
    }
    let arg = Box::into_raw(Box::new(f)) as *mut c_void;
    let mut tid: libc::pthread_t = 0;
    // The new thread inherits the creator's signal mask: block everything around the create.
    // SAFETY: zeroed sigset_t values are valid out-parameters; sigfillset fills one.
    let (mut all, mut old): (libc::sigset_t, libc::sigset_t) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: valid sigset pointers.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
    }
    // SAFETY: valid out-pointer, default attributes, an extern "C" start routine that takes
    // ownership of arg.
    let rc = unsafe { libc::pthread_create(&mut tid, std::ptr::null(), start::<T>, arg) };
    // SAFETY: restores the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    if rc != 0 {
        // SAFETY: the thread was not created, so arg is still ours.
        drop(unsafe { Box::from_raw(arg as *mut Box<dyn FnOnce() + Send>) });
        return false;
    }
    // SAFETY: tid is a joinable thread we created.
    unsafe { libc::pthread_detach(tid) };
    true
}

// ---------------------------------------------------------------------------------------------
// Futexes: the flusher sleeps on one until its deadline or a request.

const FUTEX_WAIT: c_int = 0;
const FUTEX_WAKE: c_int = 1;
const FUTEX_WAIT_BITSET: c_int = 9;
const FUTEX_PRIVATE: c_int = 128;
const FUTEX_CLOCK_REALTIME: c_int = 256;

/// Sleeps while `word == expected`, until the wall-clock time `deadline_ns` at the latest.
pub fn futex_wait_until_realtime(word: &AtomicU32, expected: u32, deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: the futex word is a live AtomicU32; ts is valid for the call.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            FUTEX_WAIT_BITSET | FUTEX_PRIVATE | FUTEX_CLOCK_REALTIME,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            u32::MAX,
        )
    };
}

/// Sleeps while `word == expected`, for at most `timeout_ns`.
pub fn futex_wait_for(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (timeout_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: as above (FUTEX_WAIT takes a relative timeout).
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            FUTEX_WAIT | FUTEX_PRIVATE,
            expected,
            &ts as *const libc::timespec,
        )
    };
}

/// Wakes every thread sleeping on `word`.
pub fn futex_wake_all(word: &AtomicU32) {
    // SAFETY: the futex word is a live AtomicU32.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            FUTEX_WAKE | FUTEX_PRIVATE,
            i32::MAX,
        )
    };
}

// ---------------------------------------------------------------------------------------------
// Small things.

/// Writes `msg` and a newline to stderr with one `write(2)`, bypassing any buffering.
pub fn stderr_line(msg: &str) {
    let mut line = Vec::with_capacity(msg.len() + 1);
    line.extend_from_slice(msg.as_bytes());
    line.push(b'\n');
    // SAFETY: writes a valid buffer to fd 2; errors are ignored on purpose.
    unsafe { libc::write(2, line.as_ptr() as *const c_void, line.len()) };
}

/// True under secure execution (`AT_SECURE`: a set-user-id or set-group-id program, or one
/// with file capabilities, run by someone else): the environment is the caller's, not the
/// program owner's.
pub fn secure_execution() -> bool {
    // SAFETY: getauxval has no preconditions.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// Ends the process at once with `status`, as glibc's `_exit` does.
pub fn exit_group(status: c_int) -> ! {
    loop {
        // SAFETY: exit_group does not return; the loop satisfies the type if it ever did.
        unsafe { libc::syscall(libc::SYS_exit_group, status) };
    }
}

/// Start address of the vDSO, 0 if none.
pub fn vdso_base() -> u64 {
    // SAFETY: getauxval has no preconditions.
    unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) as u64 }
}

/// A value published once and read lock-free by any thread; replaced values are leaked, so a
/// reader's reference stays valid forever (replacement is rare: a `dlopen`).
#[derive(Debug)]
pub struct Publish<T> {
    p: AtomicPtr<T>,
}

impl<T: Send + Sync> Default for Publish<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Send + Sync> Publish<T> {
    /// Nothing published yet.
    pub const fn new() -> Self {
        Publish {
            p: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// Publishes `v`, leaking any previous value.
    pub fn set(&self, v: T) {
        self.p.store(Box::into_raw(Box::new(v)), Release);
    }

    /// The latest published value.
    pub fn get(&self) -> Option<&'static T> {
        let p = self.p.load(Acquire);
        // SAFETY: non-null pointers stored here come from Box::into_raw and are never freed.
        (!p.is_null()).then(|| unsafe { &*p })
    }
}

// ---------------------------------------------------------------------------------------------
// Loaded objects.

/// One object of the process's link map.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadedObject {
    /// Name as the loader has it ("" for the main executable).
    pub name: String,
    /// Load bias (`dlpi_addr`).
    pub bias: u64,
    /// Lowest runtime address of its `PT_LOAD` segments.
    pub start: u64,
    /// One past the highest.
    pub end: u64,
    /// GNU build-id, empty if none.
    pub build_id: Vec<u8>,
}

/// Reads a GNU build-id note from the note segment at `addr..addr+len` (mapped memory).
fn build_id_in_notes(addr: usize, len: usize) -> Option<Vec<u8>> {
    // SAFETY: the range is a PT_NOTE segment of a loaded object, inside one of its PT_LOAD
    // segments, so it is mapped and readable while the object stays loaded (we are inside
    // dl_iterate_phdr, which holds the loader lock).
    let notes = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
    let mut pos = 0usize;
    let u32at = |p: usize| u32::from_le_bytes(notes[p..p + 4].try_into().expect("4 bytes"));
    while pos + 12 <= notes.len() {
        let namesz = u32at(pos) as usize;
        let descsz = u32at(pos + 4) as usize;
        let ty = u32at(pos + 8);
        let name_at = pos + 12;
        let desc_at = name_at + namesz.div_ceil(4) * 4;
        let next = desc_at + descsz.div_ceil(4) * 4;
        if next > notes.len() {
            return None;
        }
        if ty == 3 && namesz == 4 && &notes[name_at..name_at + 4] == b"GNU\0" {
            return Some(notes[desc_at..desc_at + descsz].to_vec());
        }
        pos = next;
    }
    None
}

unsafe extern "C" fn collect_object(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info for the duration of the call; data is the
    // Vec passed by loaded_objects.
    let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<LoadedObject>)) };
    let name = if info.dlpi_name.is_null() {
        String::new()
    } else {
        // SAFETY: dlpi_name is a NUL-terminated string owned by the loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_string_lossy()
            .into_owned()
    };
    let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
        &[]
    } else {
        // SAFETY: dlpi_phdr points to dlpi_phnum program headers.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) }
    };
    let mut o = LoadedObject {
        name,
        bias: info.dlpi_addr,
        start: u64::MAX,
        end: 0,
        build_id: Vec::new(),
    };
    for ph in phdrs {
        match ph.p_type {
            libc::PT_LOAD => {
                o.start = o.start.min(info.dlpi_addr.wrapping_add(ph.p_vaddr));
                o.end = o
                    .end
                    .max(info.dlpi_addr.wrapping_add(ph.p_vaddr + ph.p_memsz));
            }
            libc::PT_NOTE if o.build_id.is_empty() => {
                let addr = info.dlpi_addr.wrapping_add(ph.p_vaddr) as usize;
                if let Some(id) = build_id_in_notes(addr, ph.p_memsz as usize) {
                    o.build_id = id;
                }
            }
            _ => {}
        }
    }
    if o.start < o.end {
        out.push(o);
    }
    0
}

/// The process's loaded objects, in link-map order.
pub fn loaded_objects() -> Vec<LoadedObject> {
    let mut v: Vec<LoadedObject> = Vec::new();
    // SAFETY: the callback matches dl_iterate_phdr's contract and only touches `v`.
    unsafe { libc::dl_iterate_phdr(Some(collect_object), &mut v as *mut _ as *mut c_void) };
    v
}

unsafe extern "C" fn read_counts(
    info: *mut libc::dl_phdr_info,
    size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: as in collect_object; data is the (u64, u64) of link_map_counts. The
    // dlpi_adds/dlpi_subs fields exist when `size` covers them.
    unsafe {
        let out = &mut *(data as *mut (u64, u64));
        if size >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8 {
            *out = ((*info).dlpi_adds, (*info).dlpi_subs);
        }
    }
    1
}

/// The loader's (loads, unloads) counters: they change on `dlopen` / `dlclose`.
pub fn link_map_counts() -> (u64, u64) {
    let mut c = (0u64, 0u64);
    // SAFETY: the callback matches dl_iterate_phdr's contract and only touches `c`.
    unsafe { libc::dl_iterate_phdr(Some(read_counts), &mut c as *mut _ as *mut c_void) };
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_thread_reads_as_running() {
        assert_eq!(thread_state(gettid()), Some(b'R'));
        assert_eq!(thread_state(u32::MAX), None);
    }
}
