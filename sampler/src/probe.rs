//! What this machine allows the sampler to do (for `culprit doctor`): perf access, hardware vs
//! software events, tracefs, kernel symbol addresses. Each probe opens and closes what it tests;
//! none changes the machine.

use crate::event::{self, sampling_attr, Sampling};
use crate::sys::{self, PerfFd};

/// Effective capabilities relevant to perf (from `/proc/self/status`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Caps {
    /// CAP_PERFMON (38).
    pub perfmon: bool,
    /// CAP_SYS_ADMIN (21).
    pub sys_admin: bool,
}

/// The effective capabilities of this process.
pub fn caps() -> Caps {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    Caps {
        perfmon: eff & (1 << 38) != 0,
        sys_admin: eff & (1 << 21) != 0,
    }
}

/// Effective user id.
pub fn euid() -> u32 {
    sys::euid()
}

fn try_open(name: &str) -> Result<(), std::io::Error> {
    let ev = event::event_by_name(name).expect("known event");
    let s = Sampling {
        rate: ev.default_rate(),
        event: ev,
        fallback_reason: None,
    };
    PerfFd::open(&sampling_attr(&s, 4096), -1, 0, 0).map(drop)
}

/// Can this process sample system-wide (cpu-clock on CPU 0, all processes)?
pub fn system_wide_sampling() -> Result<(), std::io::Error> {
    try_open("cpu-clock")
}

/// Do hardware cycles exist (a PMU, not a VM without one)? Asked with a user-space counter on
/// this process, which needs no privilege.
pub fn hardware_cycles() -> Result<(), std::io::Error> {
    let ev = event::event_by_name("cycles").expect("known event");
    PerfFd::open(&event::self_counting_attr(&ev), 0, -1, 0).map(drop)
}

/// Where tracefs is, or whether it could be mounted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TracefsState {
    /// Mounted at this path.
    Mounted(std::path::PathBuf),
    /// Mounted at this path, but its events are not readable by this process.
    Unreadable(std::path::PathBuf),
    /// Not mounted; the kernel has tracefs and we are root, so the sampler mounts it.
    Mountable,
    /// Not mounted and not mountable by this process (why).
    Unavailable(String),
}

/// The state of tracefs.
pub fn tracefs() -> TracefsState {
    if let Some(p) = crate::tracefs::mounted() {
        return match std::fs::read_dir(p.join("events")) {
            Ok(_) => TracefsState::Mounted(p),
            Err(_) => TracefsState::Unreadable(p),
        };
    }
    let known = std::fs::read_to_string("/proc/filesystems")
        .map(|t| t.lines().any(|l| l.trim_end().ends_with("tracefs")))
        .unwrap_or(false);
    if !known {
        return TracefsState::Unavailable("this kernel has no tracefs".into());
    }
    if sys::euid() != 0 {
        return TracefsState::Unavailable("not mounted, and mounting it needs root".into());
    }
    TracefsState::Mountable
}

/// True when `/proc/kallsyms` shows real addresses to this process.
pub fn kallsyms_addresses_visible() -> bool {
    use std::io::BufRead as _;
    let Ok(f) = std::fs::File::open("/proc/kallsyms") else {
        return false;
    };
    std::io::BufReader::new(f)
        .lines()
        .take(1000)
        .map_while(Result::ok)
        .any(|l| {
            l.split_whitespace()
                .next()
                .and_then(|a| u64::from_str_radix(a, 16).ok())
                .is_some_and(|a| a != 0)
        })
}
