//! Every system call of the sampler that needs `unsafe`: `perf_event_open`, the ioctls on its file
//! descriptors, the mapping of the ring buffers, `poll`, `mount`, clocks, `getrusage`, the
//! child held before `exec` and `kill` ([`crate::launch`]), and for the OS metrics a
//! `NETLINK_SOCK_DIAG` socket and `setns`. The
//! rest of the crate only sees the safe owner types [`PerfFd`], [`Ring`] and [`DiagSocket`] and a
//! few plain functions: all the crate's `unsafe` is here, behind them.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use perf_event_open_sys as pes;
use pes::bindings::{perf_event_attr, perf_event_mmap_page};

/// An open perf event (counting or sampling), closed on drop.
#[derive(Debug)]
pub struct PerfFd {
    file: File,
}

impl PerfFd {
    /// `perf_event_open(attr, pid, cpu, -1, flags | FD_CLOEXEC)`.
    pub fn open(attr: &perf_event_attr, pid: i32, cpu: i32, flags: u64) -> io::Result<PerfFd> {
        let mut a = *attr;
        a.size = size_of::<perf_event_attr>() as u32;
        let flags = flags | u64::from(pes::bindings::PERF_FLAG_FD_CLOEXEC);
        // SAFETY: `a` is a complete, initialised perf_event_attr owned by this frame; the kernel
        // only reads it (and may write back `size` on E2BIG). No group fd is passed.
        let fd = unsafe { pes::perf_event_open(&mut a, pid, cpu, -1, flags as libc::c_ulong) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor returned to us alone; `File` takes ownership.
        let file = unsafe { File::from_raw_fd(fd) };
        Ok(PerfFd { file })
    }

    /// Opens a uprobe (`attr.type` is the uprobe PMU's) on the function at file offset
    /// `offset` of the binary at `path`: `perf_event_open(attr, pid, cpu, -1, CLOEXEC)` with
    /// `config1` pointing at the path and `config2` holding the offset.
    pub fn open_uprobe(
        attr: &perf_event_attr,
        path: &std::ffi::CStr,
        offset: u64,
        pid: i32,
        cpu: i32,
    ) -> io::Result<PerfFd> {
        let mut a = *attr;
        // The kernel copies the NUL-terminated path during the call (perf_uprobe_init uses
        // strndup_user); `path` is borrowed for the whole of `open` below, so the pointer stays
        // valid while it is read.
        a.__bindgen_anon_3.config1 = path.as_ptr() as u64;
        a.__bindgen_anon_4.config2 = offset;
        PerfFd::open(&a, pid, cpu, 0)
    }

    /// The value of a counting event (`read_format` 0: one u64; with `inherit`, the sum over
    /// the task and every task that inherited the event, exited ones included).
    pub fn read_count(&self) -> io::Result<u64> {
        use std::io::Read as _;
        let mut b = [0u8; 8];
        (&self.file).read_exact(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Starts counting / sampling.
    pub fn enable(&self) -> io::Result<()> {
        // SAFETY: ENABLE takes an integer argument and only acts on our own descriptor.
        check(unsafe { pes::ioctls::ENABLE(self.file.as_raw_fd(), 0) })
    }

    /// Stops counting / sampling.
    pub fn disable(&self) -> io::Result<()> {
        // SAFETY: as for `enable`.
        check(unsafe { pes::ioctls::DISABLE(self.file.as_raw_fd(), 0) })
    }

    /// The kernel's id of the event (what `PERF_SAMPLE_IDENTIFIER` and `LOST` records carry).
    pub fn id(&self) -> io::Result<u64> {
        let mut id = 0u64;
        // SAFETY: ID writes one u64 through the pointer, which points at `id` on our stack.
        check(unsafe { pes::ioctls::ID(self.file.as_raw_fd(), &mut id) })?;
        Ok(id)
    }

    /// Sends this event's records to the ring buffer of `to` (same CPU, same clock).
    pub fn set_output(&self, to: &PerfFd) -> io::Result<()> {
        // SAFETY: SET_OUTPUT takes another perf descriptor, which `to` keeps open for the call.
        check(unsafe { pes::ioctls::SET_OUTPUT(self.file.as_raw_fd(), to.file.as_raw_fd()) })
    }

    fn raw(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The system's page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
}

/// A perf event with its mapped ring buffer (one metadata page and `2^n` data pages). The kernel
/// writes records at `data_head`; [`Ring::drain`] copies everything up to it out and hands the
/// space back by advancing `data_tail`.
#[derive(Debug)]
pub struct Ring {
    fd: PerfFd,
    base: NonNull<u8>,
    map_len: usize,
    data_offset: usize,
    data_size: usize,
}

// SAFETY: the mapping belongs to this value alone (no aliases are handed out; `drain` copies), so
// moving it to another thread is sound.
unsafe impl Send for Ring {}

impl Ring {
    /// Maps a ring of `data_pages` pages (a power of two) for `fd`.
    pub fn map(fd: PerfFd, data_pages: usize) -> io::Result<Ring> {
        if !data_pages.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "ring pages must be a power of two",
            ));
        }
        let page = page_size();
        let map_len = (data_pages + 1) * page;
        // SAFETY: a fresh shared mapping of the perf descriptor, as perf_event_open(2) documents;
        // the kernel validates the length. We check for MAP_FAILED below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.raw(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(p.cast::<u8>()).ok_or_else(io::Error::last_os_error)?;
        let mut ring = Ring {
            fd,
            base,
            map_len,
            data_offset: page,
            data_size: data_pages * page,
        };
        // Kernels since 4.1 say where the data area is; older ones use the defaults above.
        let meta = ring.meta();
        // SAFETY: `meta` points into our live mapping; these fields are written once by the
        // kernel at mmap time, before we read them.
        let (off, size) = unsafe {
            (
                std::ptr::addr_of!((*meta).data_offset).read_volatile(),
                std::ptr::addr_of!((*meta).data_size).read_volatile(),
            )
        };
        if size != 0 && off as usize + size as usize <= map_len {
            ring.data_offset = off as usize;
            ring.data_size = size as usize;
        }
        Ok(ring)
    }

    fn meta(&self) -> *mut perf_event_mmap_page {
        self.base.as_ptr().cast()
    }

    /// The event this ring belongs to.
    pub fn fd(&self) -> &PerfFd {
        &self.fd
    }

    /// Size of the data area in bytes.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// Appends every complete record the kernel has written to `out` and frees their space in
    /// the ring. Returns the number of bytes copied.
    pub fn drain(&mut self, out: &mut Vec<u8>) -> usize {
        let meta = self.meta();
        // SAFETY: data_head and data_tail are naturally aligned u64 fields of the metadata page,
        // which stays mapped for our lifetime. The kernel stores data_head; we are the only
        // writer of data_tail. Acquire on head pairs with the kernel's release of the records.
        let (head_a, tail_a) = unsafe {
            (
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_head)),
                AtomicU64::from_ptr(std::ptr::addr_of_mut!((*meta).data_tail)),
            )
        };
        let head = head_a.load(Ordering::Acquire);
        let tail = tail_a.load(Ordering::Relaxed);
        let avail = head.wrapping_sub(tail) as usize;
        if avail == 0 {
            return 0;
        }
        // In non-overwrite mode the kernel never writes more than the ring holds.
        let avail = avail.min(self.data_size);
        let start = (tail % self.data_size as u64) as usize;
        let first = avail.min(self.data_size - start);
        // SAFETY: both ranges lie inside the data area of our mapping (start < data_size,
        // first <= data_size - start, avail - first <= start). The kernel does not write the
        // bytes between tail and head until we advance data_tail below.
        unsafe {
            let data = self.base.as_ptr().add(self.data_offset);
            out.extend_from_slice(std::slice::from_raw_parts(data.add(start), first));
            out.extend_from_slice(std::slice::from_raw_parts(data, avail - first));
        }
        // Release: our reads of the records happen before the kernel may reuse the space.
        tail_a.store(tail.wrapping_add(avail as u64), Ordering::Release);
        avail
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; no references into it outlive self.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.map_len);
        }
    }
}

/// Waits until one of the rings has data past its wake-up watermark, a signal arrives, or
/// `timeout_ms` passes.
pub fn poll_rings(rings: &[Ring], timeout_ms: i32) {
    let mut fds: Vec<libc::pollfd> = rings
        .iter()
        .map(|r| libc::pollfd {
            fd: r.fd.raw(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    if fds.is_empty() {
        std::thread::sleep(std::time::Duration::from_millis(timeout_ms.max(0) as u64));
        return;
    }
    // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs for the duration of the call.
    // Errors (EINTR from our signal handler) just end the wait early.
    unsafe {
        libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms);
    }
}

/// Reads clock `id` in nanoseconds (0 should it not exist).
fn clock_ns(id: libc::clockid_t) -> u64 {
    try_clock_ns(id).unwrap_or(0)
}

/// Reads clock `id` in nanoseconds; `None` when the clock does not exist (a thread's CPU
/// clock once the thread has ended).
fn try_clock_ns(id: libc::clockid_t) -> Option<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(id, &mut ts) };
    (rc == 0).then(|| ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
}

/// The CPU-time clock of one thread, readable from every thread of the process.
#[derive(Clone, Copy, Debug)]
pub struct ThreadClock(libc::clockid_t);

impl ThreadClock {
    /// The calling thread's clock.
    pub fn current() -> Option<ThreadClock> {
        let mut id: libc::clockid_t = 0;
        // SAFETY: pthread_self() names the calling thread, alive during the call;
        // pthread_getcpuclockid writes one clockid_t through a valid pointer.
        let rc = unsafe { libc::pthread_getcpuclockid(libc::pthread_self(), &mut id) };
        (rc == 0).then_some(ThreadClock(id))
    }

    /// The thread's CPU time so far, ns; `None` once it has ended.
    pub fn ns(&self) -> Option<u64> {
        try_clock_ns(self.0)
    }
}

/// CLOCK_MONOTONIC in ns (the clock perf timestamps use with `use_clockid`).
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in ns since the Unix epoch.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// User and system CPU time of this process so far, in ns.
pub fn self_cpu_ns() -> (u64, u64) {
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage through a valid pointer.
    unsafe {
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
    }
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    (ns(ru.ru_utime), ns(ru.ru_stime))
}

/// Raises the soft limit on open files to the hard limit (per-thread uprobe counters take one
/// descriptor per thread and function). Returns the limit now in force.
pub fn raise_nofile_limit() -> u64 {
    // SAFETY: rlimit is plain old data; all-zero is a valid value.
    let mut rl: libc::rlimit = unsafe { std::mem::zeroed() };
    // SAFETY: getrlimit writes one rlimit through a valid pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } != 0 {
        return 1024;
    }
    if rl.rlim_cur < rl.rlim_max {
        let want = libc::rlimit {
            rlim_cur: rl.rlim_max,
            rlim_max: rl.rlim_max,
        };
        // SAFETY: setrlimit reads one rlimit through a valid pointer; raising the soft limit up
        // to the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &want) } == 0 {
            return want.rlim_cur;
        }
    }
    rl.rlim_cur
}

/// CPU time of the calling thread, ns (CLOCK_THREAD_CPUTIME_ID): what a uprobe costs the
/// caller, what the OS-metrics collector itself costs.
pub fn thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

// Two functions for calibrating uprobes (`uprobe::cost`): the kernel emulates a `push` at a
// probed address (cheap), and single-steps most other instructions out of line (a second trap,
// very costly in some virtual machines). Written in assembly so their first instruction is
// known.
#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".pushsection .text.culprit_cal,\"ax\",@progbits",
    ".globl culprit_cal_push",
    ".hidden culprit_cal_push",
    ".type culprit_cal_push,@function",
    "culprit_cal_push:",
    "push rbx",
    "pop rbx",
    "lea rax, [rdi + 1]",
    "ret",
    ".size culprit_cal_push, . - culprit_cal_push",
    ".globl culprit_cal_step",
    ".hidden culprit_cal_step",
    ".type culprit_cal_step,@function",
    "culprit_cal_step:",
    "mov rax, rdi",
    "add rax, 1",
    "ret",
    ".size culprit_cal_step, . - culprit_cal_step",
    ".popsection",
);

#[cfg(target_arch = "x86_64")]
extern "C" {
    fn culprit_cal_push(x: u64) -> u64;
    fn culprit_cal_step(x: u64) -> u64;
}

/// Address of the calibration function whose first instruction is a `push` (`emulated`), or
/// a `mov`; `None` on other architectures.
pub fn calibration_addr(emulated: bool) -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        let f: unsafe extern "C" fn(u64) -> u64 = if emulated {
            culprit_cal_push
        } else {
            culprit_cal_step
        };
        Some(f as usize as u64)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = emulated;
        None
    }
}

/// Calls the calibration function (see [`calibration_addr`]): returns `x + 1`.
#[inline(never)]
pub fn calibration_call(emulated: bool, x: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: both functions (global_asm above) follow the C ABI, touch only rax and rbx
        // (saved and restored) and the stack, and return x + 1.
        unsafe {
            if emulated {
                culprit_cal_push(x)
            } else {
                culprit_cal_step(x)
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = emulated;
        x + 1
    }
}

/// A pipe, both ends close-on-exec: `(read end, write end)`.
pub fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    check(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: two new descriptors returned to us alone; each `OwnedFd` takes one.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Makes the child of `cmd` hold between `fork` and `exec`: it closes its copy of `go_w`, writes
/// its pid (4 bytes, native order) to `pid_w`, then waits for one byte on `go_r`; at end of file
/// (the parent closed `go_w`: abandoned) it fails, and `Command::spawn` reports `ECANCELED`. The
/// parent keeps the three descriptors open until the spawn returns.
pub fn hold_before_exec(cmd: &mut std::process::Command, go_r: RawFd, go_w: RawFd, pid_w: RawFd) {
    use std::os::unix::process::CommandExt as _;
    let hold = move || -> io::Result<()> {
        // Between fork and exec only async-signal-safe functions (close, getpid, write, read),
        // on descriptors the parent keeps open during the spawn; the buffers are locals of this
        // frame, and no memory is allocated.
        // SAFETY: see above.
        unsafe { libc::close(go_w) };
        // SAFETY: see above.
        let pid = unsafe { libc::getpid() }.to_ne_bytes();
        // SAFETY: see above.
        if unsafe { libc::write(pid_w, pid.as_ptr().cast(), pid.len()) } != pid.len() as isize {
            return Err(io::Error::last_os_error());
        }
        let mut b = 0u8;
        loop {
            // SAFETY: see above.
            let n = unsafe { libc::read(go_r, (&mut b as *mut u8).cast(), 1) };
            match n {
                1 => return Ok(()),
                n if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
                _ => return Err(io::Error::from_raw_os_error(libc::ECANCELED)),
            }
        }
    };
    // SAFETY: `hold` runs in the forked child before exec and is async-signal-safe (above).
    unsafe { cmd.pre_exec(hold) };
}

/// Sends signal `sig` to process `pid`.
pub fn kill(pid: u32, sig: i32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: kill has no memory arguments.
    check(unsafe { libc::kill(pid, sig) })
}

/// Effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// A `flock(2)` operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flock {
    /// `LOCK_SH`, waiting for it.
    Shared,
    /// `LOCK_EX | LOCK_NB`: `Err(WouldBlock)` when another open description holds a lock.
    TryExclusive,
    /// `LOCK_UN`.
    Unlock,
}

/// `flock(2)` on `f` (locks belong to the open file description: two opens of one file in one
/// process conflict like two processes).
pub fn flock(f: &File, op: Flock) -> io::Result<()> {
    let op = match op {
        Flock::Shared => libc::LOCK_SH,
        Flock::TryExclusive => libc::LOCK_EX | libc::LOCK_NB,
        Flock::Unlock => libc::LOCK_UN,
    };
    loop {
        // SAFETY: flock on a descriptor `f` keeps open for the call.
        if unsafe { libc::flock(f.as_raw_fd(), op) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// `mount -t tracefs nodev <target>`.
pub fn mount_tracefs(target: &std::path::Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = |s: &[u8]| std::ffi::CString::new(s).map_err(|_| io::ErrorKind::InvalidInput);
    let target = c(target.as_os_str().as_bytes())?;
    let fstype = c(b"tracefs")?;
    let source = c(b"nodev")?;
    // SAFETY: all pointers are valid NUL-terminated strings living across the call; no data
    // argument is passed.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    check(rc)
}

/// `SCHED_DEADLINE` (linux/sched.h; not in the libc crate).
const SCHED_DEADLINE: u32 = 6;
/// `SCHED_FLAG_RESET_ON_FORK`: threads and processes the caller creates start at the normal
/// policy (without it a deadline thread cannot even create a thread: `clone` fails EAGAIN).
const SCHED_FLAG_RESET_ON_FORK: u64 = 1;

/// `struct sched_attr` of `sched_setattr(2)` (its first version, 48 bytes).
#[repr(C)]
struct SchedAttr {
    size: u32,
    policy: u32,
    flags: u64,
    nice: i32,
    priority: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
}

/// Puts the *calling thread* under `SCHED_DEADLINE`: at most `runtime_ns` of CPU in every
/// `period_ns` (the kernel throttles it past that until its next period), ahead of every
/// normal and real-time thread while within it. Needs CAP_SYS_NICE; the kernel refuses
/// (EBUSY) when the deadline bandwidth of the CPUs is taken, and (EPERM) when the thread may
/// not run on every CPU.
pub fn set_thread_deadline(runtime_ns: u64, period_ns: u64) -> io::Result<()> {
    let attr = SchedAttr {
        size: size_of::<SchedAttr>() as u32,
        policy: SCHED_DEADLINE,
        flags: SCHED_FLAG_RESET_ON_FORK,
        nice: 0,
        priority: 0,
        runtime: runtime_ns,
        deadline: period_ns,
        period: period_ns,
    };
    // SAFETY: sched_setattr reads one sched_attr of `size` bytes through a pointer to a local
    // that lives across the call; pid 0 is the calling thread; flags 0.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, std::ptr::addr_of!(attr), 0) };
    check(rc as libc::c_int)
}

/// Puts the *calling thread* back under the normal policy (`SCHED_OTHER`) at `nice`.
pub fn set_thread_normal(nice: i32) -> io::Result<()> {
    let attr = SchedAttr {
        size: size_of::<SchedAttr>() as u32,
        policy: libc::SCHED_OTHER as u32,
        flags: 0,
        nice,
        priority: 0,
        runtime: 0,
        deadline: 0,
        period: 0,
    };
    // SAFETY: as in `set_thread_deadline`.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, std::ptr::addr_of!(attr), 0) };
    check(rc as libc::c_int)
}

/// Puts the *calling thread* under `SCHED_FIFO` at `priority` (1 is the lowest real-time
/// priority), reset to the normal policy in threads and processes it creates. Needs
/// CAP_SYS_NICE (or RLIMIT_RTPRIO), and a cgroup with real-time runtime when the kernel has
/// real-time group scheduling.
pub fn set_thread_fifo(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: sched_setscheduler reads one sched_param through a pointer to a local; pid 0 is
    // the calling thread.
    check(unsafe {
        libc::sched_setscheduler(
            0,
            libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK,
            std::ptr::addr_of!(param),
        )
    })
}

/// Sets the *calling thread*'s nice value (normal policy). Lowering it below 0 needs
/// CAP_SYS_NICE (or RLIMIT_NICE).
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: gettid and setpriority take plain integers.
    let rc = unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, nice)
    };
    check(rc)
}

/// The *calling thread*'s nice value (0 when it cannot be read).
pub fn thread_nice() -> i32 {
    // SAFETY: gettid and getpriority take plain integers. getpriority may return −1 as a
    // value, so errno is cleared first and checked after.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        *libc::__errno_location() = 0;
        let n = libc::getpriority(libc::PRIO_PROCESS, tid);
        if n == -1 && *libc::__errno_location() != 0 {
            0
        } else {
            n
        }
    }
}

/// The *calling thread*'s scheduling policy (`SCHED_*`, without the reset-on-fork bit).
pub fn thread_policy() -> i32 {
    // SAFETY: sched_getscheduler takes a pid (0: the calling thread) and returns an integer.
    let p = unsafe { libc::sched_getscheduler(0) };
    p & !libc::SCHED_RESET_ON_FORK
}

/// CLOCK_BOOTTIME in ns: the clock `/proc/PID/stat`'s start times count from.
pub fn boottime_ns() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME)
}

/// Moves the *calling thread* into the network namespace `ns` (an open `/run/netns/NAME` or
/// `/proc/PID/ns/net`). Call it only on a thread made for the purpose: everything that thread
/// opens afterwards (sockets, `/proc/thread-self/net/*`) belongs to that namespace for good.
pub fn setns_net(ns: &File) -> io::Result<()> {
    // SAFETY: setns takes a descriptor we keep open for the call and a namespace type; it only
    // changes the calling thread's namespace.
    check(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) })
}

/// A `NETLINK_SOCK_DIAG` socket (`sock_diag(7)`), bound to the network namespace of the thread
/// that opened it; closed on drop.
#[derive(Debug)]
pub struct DiagSocket {
    fd: OwnedFd,
}

impl DiagSocket {
    /// Opens the socket, with a one-second receive timeout so a lost reply cannot block the
    /// caller for long.
    pub fn open() -> io::Result<DiagSocket> {
        // SAFETY: socket takes plain integers and returns a new descriptor or -1.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                libc::NETLINK_SOCK_DIAG,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor returned to us alone; OwnedFd takes ownership.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let tv = libc::timeval {
            tv_sec: 1,
            tv_usec: 0,
        };
        // SAFETY: SO_RCVTIMEO reads one timeval through a valid pointer of the given size.
        check(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                std::ptr::addr_of!(tv).cast(),
                size_of::<libc::timeval>() as libc::socklen_t,
            )
        })?;
        Ok(DiagSocket { fd })
    }

    /// Sends one request (a complete netlink message) to the kernel.
    pub fn send(&self, msg: &[u8]) -> io::Result<()> {
        // SAFETY: an all-zero sockaddr_nl is valid; nl_family is set below (pid 0 = kernel).
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `msg` and `addr` are valid for the lengths passed during the call.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                0,
                std::ptr::addr_of!(addr).cast(),
                size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one datagram (one or more netlink messages) into `buf`; returns its length.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // SAFETY: `buf` is valid for writes of its length during the call.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Another thread reads a thread's CPU clock: it grows while the thread computes, and is
    /// gone once the thread has ended.
    #[test]
    fn a_thread_s_cpu_clock_is_read_from_another_thread() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(ThreadClock::current().expect("a clock")).unwrap();
            while wait.try_recv().is_err() {
                std::hint::spin_loop();
            }
        });
        let clock = rx.recv().unwrap();
        let first = clock.ns().expect("the thread runs");
        while clock.ns().unwrap() - first < 10_000_000 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        go.send(()).unwrap();
        t.join().unwrap();
        assert_eq!(clock.ns(), None, "the clock of an ended thread");
    }
}
