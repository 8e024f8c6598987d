//! The kernel's uprobe PMU, and what can go wrong opening events on it.

use std::io;
use std::path::Path;

use perf_event_open_sys::bindings::perf_event_attr;

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
pub(super) fn open_error(function: &str, image: &Path, e: io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => Error::Permission(e),
        _ => Error::Open {
            function: function.to_string(),
            image: image.display().to_string(),
            source: e,
        },
    }
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
}
