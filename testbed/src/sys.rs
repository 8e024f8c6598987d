//! Every `unsafe` call of the testbed, behind safe functions: entering a node (its network
//! namespace and cgroups) in a child between fork and exec, and signals sent to processes. The
//! interrupt flag is `signal-hook`'s.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Where a child process is placed before it runs: a network namespace and cgroup task files.
#[derive(Debug, Default)]
pub struct Placement {
    /// An open `/run/netns/<name>` (or `None`: stay in the parent's namespace).
    pub netns: Option<OwnedFd>,
    /// Open `cgroup.procs` files (one per hierarchy) the child writes its pid to.
    pub cgroup_procs: Vec<File>,
}

/// Makes `cmd` enter `placement` between fork and exec. The fds are kept open by the closure
/// (and closed in the child on exec: they are opened with `O_CLOEXEC` by std).
pub fn place(cmd: &mut Command, placement: Placement) {
    let netns = placement.netns;
    let procs = placement.cgroup_procs;
    let hook = move || -> io::Result<()> {
        // Cgroups first: a process that cannot join its node must not run outside it.
        // SAFETY: getpid is async-signal-safe and has no preconditions.
        let pid = unsafe { libc::getpid() };
        let mut digits = [0u8; 16];
        let text = format_pid(pid as u32, &mut digits);
        for f in &procs {
            // SAFETY: write(2) on an fd this closure owns, from a stack buffer; write is
            // async-signal-safe.
            let n = unsafe { libc::write(f.as_raw_fd(), text.as_ptr().cast(), text.len()) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        if let Some(ns) = &netns {
            // SAFETY: setns(2) on a namespace fd this closure owns; async-signal-safe.
            if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    };
    // SAFETY: the hook only makes async-signal-safe system calls (getpid, write, setns) and
    // formats into a stack buffer; it allocates nothing and takes no locks.
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Formats `pid` in decimal into `buf` without allocating.
fn format_pid(mut pid: u32, buf: &mut [u8; 16]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (pid % 10) as u8;
        pid /= 10;
        if pid == 0 {
            break;
        }
    }
    &buf[i..]
}

/// Sends `sig` to process `pid`; a process already gone is not an error.
pub fn kill(pid: u32, sig: i32) -> io::Result<()> {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return Ok(());
    };
    if pid <= 0 {
        return Ok(());
    }
    // SAFETY: kill(2) with a positive pid has no memory-safety preconditions.
    if unsafe { libc::kill(pid, sig) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ESRCH) {
            return Err(e);
        }
    }
    Ok(())
}

/// True when a process with this pid exists.
pub fn process_exists(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The effective user id.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn interrupt_flag() -> &'static Arc<AtomicBool> {
    static INTERRUPTED: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    INTERRUPTED.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Installs SIGINT/SIGTERM/SIGHUP handlers (`signal-hook`) that set the interrupt flag, so a
/// run stops at its next check and its guards tear the cluster down. Idempotent.
pub fn catch_interrupts() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            let _ = signal_hook::flag::register(sig, interrupt_flag().clone());
        }
    });
}

/// True once SIGINT/SIGTERM/SIGHUP arrived (after [`catch_interrupts`]).
pub fn interrupted() -> bool {
    interrupt_flag().load(Ordering::SeqCst)
}

/// `(major, minor)` of the device holding `path`'s file system.
pub fn device_of(path: &std::path::Path) -> io::Result<(u32, u32)> {
    use std::os::unix::fs::MetadataExt as _;
    let dev = std::fs::metadata(path)?.dev();
    Ok((libc::major(dev), libc::minor(dev)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_format_without_allocating() {
        let mut b = [0u8; 16];
        assert_eq!(format_pid(0, &mut b), b"0");
        assert_eq!(format_pid(4_194_304, &mut b), b"4194304");
        assert_eq!(format_pid(u32::MAX, &mut b), b"4294967295");
    }
}
