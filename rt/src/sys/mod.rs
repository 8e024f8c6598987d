//! Every `unsafe` operation of the runtime's own, behind safe functions and owner types: the
//! thread-local pointer, the TSC, anonymous mappings, futexes, pthread keys, `pthread_atfork`,
//! `atexit`, `dl_iterate_phdr`, the C library's I/O functions ([`io`]) and the rewriting of
//! hook call sites ([`patch`]). The exported C functions are the layer above the runtime,
//! `crate::ffi`.
//!
//! This layer knows no domain type: what the thread-local pointer points at is any
//! [`ThreadData`] (the runtime has one, its per-thread block), and the registry of those is a
//! generic [`Registry`]. It names nothing of the crate but the pure call-site analysis
//! `crate::callsite` ([`patch`] proves its rewrites with it); the thread-local word the hooks'
//! fast path reads is named here only as a symbol, `culprit_rt_tls_cur`, which
//! `crate::ffi::hooks` declares with its initial value.

use std::ffi::{c_int, c_void, CStr};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicUsize};

mod fds;
pub mod io;
pub mod patch;
mod words;

pub use fds::*;
pub use words::*;

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

/// CPU time of thread `tid` of this process, ns (`None` when it is gone). The kernel's
/// per-thread CPU clock id: `MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED)`.
pub fn thread_cpu_ns_of(tid: u32) -> Option<u64> {
    let clock = ((!(tid as libc::clockid_t)) << 3) | 6;
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; an invalid clock id only returns an error.
    let r = unsafe { libc::clock_gettime(clock, &mut ts) };
    (r == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// `CLOCK_MONOTONIC` in ns.
#[inline]
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`), ns.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The process's CPU time, every thread (`CLOCK_PROCESS_CPUTIME_ID`), ns.
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
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

/// The object `info` describes (inside [`for_each_object`]); `None` without a loaded segment.
fn loaded_object(info: &libc::dl_phdr_info) -> Option<LoadedObject> {
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
    (o.start < o.end).then_some(o)
}

/// Calls `f` with each loaded object's `dl_phdr_info` (and the size the loader gives it), in
/// link-map order, inside `dl_iterate_phdr` — the loader lock held throughout, so no object
/// is unloaded meanwhile; the lock is recursive, so `f` may iterate again — until `f`
/// returns false. A panic in `f` stops the iteration and goes on once the loader's frames
/// are left: a panic may not unwind through C frames (Rust aborts the process at an
/// `extern "C"` boundary), and the runtime catches its panics above this (the flusher's and
/// the constructor's `catch_unwind`) so that they never end the program.
pub fn for_each_object(mut f: impl FnMut(&libc::dl_phdr_info, usize) -> bool) {
    type Visit<'a> = &'a mut dyn FnMut(&libc::dl_phdr_info, usize) -> bool;
    struct Iteration<'a> {
        visit: Visit<'a>,
        panic: Option<Box<dyn std::any::Any + Send>>,
    }
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: data is the Iteration of for_each_object, alive for the whole iteration;
        // dl_iterate_phdr passes a valid info for the duration of the call.
        let (it, info) = unsafe { (&mut *(data as *mut Iteration<'_>), &*info) };
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (it.visit)(info, size))) {
            Ok(true) => 0,
            Ok(false) => 1,
            Err(p) => {
                it.panic = Some(p);
                1
            }
        }
    }
    let mut it = Iteration {
        visit: &mut f,
        panic: None,
    };
    // SAFETY: `each` matches dl_iterate_phdr's contract and only touches `it`.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut it as *mut _ as *mut c_void) };
    if let Some(p) = it.panic {
        std::panic::resume_unwind(p);
    }
}

/// The process's loaded objects, in link-map order.
pub fn loaded_objects() -> Vec<LoadedObject> {
    let mut v: Vec<LoadedObject> = Vec::new();
    for_each_object(|info, _| {
        if let Some(o) = loaded_object(info) {
            v.push(o);
        }
        true
    });
    v
}

/// The loader's (loads, unloads) counters: they change on `dlopen` / `dlclose`.
pub fn link_map_counts() -> (u64, u64) {
    let mut c = (0u64, 0u64);
    for_each_object(|info, size| {
        // The dlpi_adds/dlpi_subs fields exist when `size` covers them.
        if size >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + 8 {
            c = (info.dlpi_adds, info.dlpi_subs);
        }
        false
    });
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
