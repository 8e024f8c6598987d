//! Call counts of chosen functions of binaries that were not built with
//! `-finstrument-functions`, through perf_event uprobes (the kernel's `uprobe` PMU: a
//! breakpoint at the function's entry, counted by the kernel without a tracefs probe
//! definition).
//!
//! # Two ways to count
//!
//! * **Counting mode, per task** ([`Counters`], `culprit record --uprobes`): one counting event
//!   per (function, thread of the target), with `inherit`, so threads and children created
//!   later are counted too; `read()` gives the exact total. No ring buffer, nothing to lose,
//!   and breakpoints are installed only in the target's address space (the kernel's uprobe
//!   filter), so other processes running the same binary or library pay nothing. These
//!   probes are defined in tracefs ([`defs`]): an inherited uprobe-PMU event breaks `clone`.
//! * **Sampling mode, per CPU, period 1** ([`system`], `culprit sample --uprobes`): one event per
//!   (function, CPU) for every process, each hit a 32-byte record with pid and tid in the CPU's
//!   ring. Counting events system-wide cannot tell processes apart, and per-process counting
//!   events created as processes appear would miss the calls a process makes before the
//!   sampler notices it (and every thread it started before); a record per hit attributes every
//!   call to its process, and so to its node, the way the sampler attributes samples. The cost
//!   is a ring write per hit (measured in `benches/uprobes`) and, past the ring's capacity,
//!   lost records: an interval with lost records is written as missed, never as exact counts.
//!
//! # Records
//!
//! Counts go to the trace kind of file the function-call tracer writes
//! (`DATA/<node>/trace-<pid>-<start_ns>.cul`, one Interval record per interval, Info `source` =
//! `uprobes`), so `report`, `diagnose` and the exports read them unchanged ([`trace`]).
//!
//! # Cost
//!
//! A uprobe hit is a breakpoint trap into the kernel and back: microseconds, not the
//! nanoseconds of an instrumentation hook. [`cost::calibrate`] measures it on this machine at
//! start-up, and [`run::Budget`] warns when a function is called so often that its probe
//! costs more than a budget of one CPU at the observed rate.

pub mod cost;
pub mod counters;
pub mod defs;
pub mod elf;
pub mod run;
pub mod system;
pub mod target;
pub mod trace;

use std::io;
use std::path::Path;

use perf_event_open_sys::bindings::perf_event_attr;

pub use counters::Counters;
pub use target::{Plan, Probe, ProbeImage, ProbeSpec, Skipped};

/// Where the kernel describes its uprobe PMU.
const PMU_DIR: &str = "/sys/bus/event_source/devices/uprobe";

/// What can go wrong probing.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel has no uprobe PMU (built without CONFIG_UPROBE_EVENTS, or older than 4.17).
    #[error(
        "this kernel has no uprobe PMU ({PMU_DIR}: {0}); uprobes need Linux 4.17 or later built \
         with CONFIG_UPROBE_EVENTS"
    )]
    NoPmu(String),
    /// perf_event_open refused for lack of privilege.
    #[error(
        "no permission to place uprobes ({0}): the uprobe PMU needs root or the capability \
         CAP_PERFMON (CAP_SYS_ADMIN before Linux 5.8)"
    )]
    Permission(io::Error),
    /// A probe could not be opened.
    #[error("cannot probe {function} in {image}: {source}")]
    Open {
        /// The function.
        function: String,
        /// The binary.
        image: String,
        /// The system call's error.
        source: io::Error,
    },
    /// The target process is not there.
    #[error("process {0} does not exist (or is not visible here)")]
    NoProcess(u32),
    /// Nothing to probe.
    #[error("{0}")]
    Plan(String),
    /// An I/O error with what was being done.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
}

/// The kernel's uprobe PMU: its type number and the `config` bit that makes a probe a return
/// probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pmu {
    /// `perf_event_attr.type`.
    pub type_: u32,
    /// Bit of `config` selecting a return probe (uretprobe).
    pub retprobe_bit: u32,
}

impl Pmu {
    /// Reads the PMU's type and the `retprobe` format bit from sysfs.
    pub fn detect() -> Result<Pmu, Error> {
        Pmu::detect_in(Path::new(PMU_DIR))
    }

    fn detect_in(dir: &Path) -> Result<Pmu, Error> {
        let type_ = std::fs::read_to_string(dir.join("type"))
            .map_err(|e| Error::NoPmu(e.to_string()))?
            .trim()
            .parse()
            .map_err(|_| Error::NoPmu("unreadable type".into()))?;
        // `config:0` on every kernel so far; read it rather than assume it.
        let retprobe_bit = std::fs::read_to_string(dir.join("format/retprobe"))
            .ok()
            .and_then(|s| s.trim().strip_prefix("config:")?.parse().ok())
            .unwrap_or(0);
        Ok(Pmu {
            type_,
            retprobe_bit,
        })
    }

    /// The attr of a counting probe: disabled until enabled, inherited by threads and children
    /// created later, user space only (a uprobe fires nowhere else).
    pub fn counting_attr(&self, retprobe: bool) -> perf_event_attr {
        let mut a = perf_event_attr {
            type_: self.type_,
            size: size_of::<perf_event_attr>() as u32,
            config: u64::from(retprobe) << self.retprobe_bit,
            ..perf_event_attr::default()
        };
        a.set_disabled(1);
        a.set_inherit(1);
        a
    }
}

/// Turns a perf_event_open error into the error users should see.
fn open_error(function: &str, image: &Path, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => Error::Permission(e),
        _ => Error::Open {
            function: function.to_string(),
            image: image.display().to_string(),
            source: e,
        },
    }
}

/// Wall-clock ns at which process `pid` started (from `/proc/<pid>/stat` and the boot time).
pub fn proc_start_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let ticks: u64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let btime: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // USER_HZ is 100 on every Linux ABI that culprit builds for.
    Some(btime * 1_000_000_000 + ticks * 10_000_000)
}

/// The thread ids of process `pid`.
pub fn tasks(pid: u32) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut v: Vec<u32> = rd
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pmu_from_sysfs_layout() {
        let dir = std::env::temp_dir().join(format!("culprit-pmu-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("format")).unwrap();
        assert!(matches!(Pmu::detect_in(&dir), Err(Error::NoPmu(_))));
        std::fs::write(dir.join("type"), "8\n").unwrap();
        std::fs::write(dir.join("format/retprobe"), "config:3\n").unwrap();
        let p = Pmu::detect_in(&dir).unwrap();
        assert_eq!(
            p,
            Pmu {
                type_: 8,
                retprobe_bit: 3
            }
        );
        assert_eq!(p.counting_attr(true).config, 8);
        assert_eq!(p.counting_attr(false).config, 0);
        assert_eq!(p.counting_attr(false).inherit(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn own_process_facts() {
        let me = std::process::id();
        let start = proc_start_ns(me).unwrap();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(start <= now + 1_000_000_000 && now - start < 3_600_000_000_000);
        assert!(tasks(me).contains(&me));
    }
}
