//! cgroup v1 groups for emulated nodes: `cpu` (a fixed CPU share), `cpuacct` (to measure it) and
//! `blkio` (the node's "disk": a bandwidth and IOPS budget on the storage device).
//!
//! Every node gets a fixed CPU share so that a rogue process inside one node slows that node and
//! not its peers; server data I/O uses O_DIRECT so that `blkio.throttle.*` on the node's cgroup
//! reaches the server instead of the page cache.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The cgroup v1 hierarchies a node lives in.
pub const HIERARCHIES: [&str; 3] = ["cpu", "cpuacct", "blkio"];
const ROOT: &str = "/sys/fs/cgroup";
const CFS_PERIOD_US: u64 = 100_000;

/// A run's parent group `<hierarchy>/<prefix>` and its node groups `<hierarchy>/<prefix>/<name>`.
#[derive(Debug)]
pub struct Group {
    rel: PathBuf,
}

impl Group {
    /// Creates `<hierarchy>/<rel>` in every hierarchy of [`HIERARCHIES`].
    pub fn create(rel: impl Into<PathBuf>) -> Result<Self> {
        let rel = rel.into();
        for h in HIERARCHIES {
            let dir = Path::new(ROOT).join(h).join(&rel);
            fs::create_dir_all(&dir)
                .map_err(|e| Error::io(format!("create cgroup {}", dir.display()), e))?;
        }
        Ok(Group { rel })
    }

    /// The directory of this group in hierarchy `h`.
    pub fn dir(&self, h: &str) -> PathBuf {
        Path::new(ROOT).join(h).join(&self.rel)
    }

    fn write(&self, h: &str, file: &str, value: &str) -> Result<()> {
        let p = self.dir(h).join(file);
        fs::write(&p, value)
            .map_err(|e| Error::io(format!("write {value:?} to {}", p.display()), e))
    }

    /// Caps the group at `cpus` CPUs (e.g. 0.25 = a quarter of one CPU); `None` removes the cap.
    pub fn set_cpu_quota(&self, cpus: Option<f64>) -> Result<()> {
        self.write("cpu", "cpu.cfs_period_us", &CFS_PERIOD_US.to_string())?;
        let quota = match cpus {
            Some(c) => ((c * CFS_PERIOD_US as f64).round() as i64).max(1000),
            None => -1,
        };
        self.write("cpu", "cpu.cfs_quota_us", &quota.to_string())
    }

    /// Limits the group's reads and writes on block device `dev` to `bps` bytes/s and `iops`
    /// operations/s each (0 = unlimited).
    pub fn set_disk_limits(&self, dev: (u32, u32), bps: u64, iops: u64) -> Result<()> {
        let (maj, min) = dev;
        for (file, v) in [
            ("blkio.throttle.read_bps_device", bps),
            ("blkio.throttle.write_bps_device", bps),
            ("blkio.throttle.read_iops_device", iops),
            ("blkio.throttle.write_iops_device", iops),
        ] {
            self.write("blkio", file, &format!("{maj}:{min} {v}"))?;
        }
        Ok(())
    }

    /// CPU time used by the group's tasks so far, in ns (`cpuacct.usage`).
    pub fn cpu_usage_ns(&self) -> Result<u64> {
        let p = self.dir("cpuacct").join("cpuacct.usage");
        let s =
            fs::read_to_string(&p).map_err(|e| Error::io(format!("read {}", p.display()), e))?;
        s.trim()
            .parse()
            .map_err(|_| Error::Parse(format!("{}: {s:?}", p.display())))
    }

    /// Bytes read and written by the group on any device (`blkio.throttle.io_service_bytes`).
    pub fn disk_bytes(&self) -> Result<(u64, u64)> {
        let p = self.dir("blkio").join("blkio.throttle.io_service_bytes");
        let s =
            fs::read_to_string(&p).map_err(|e| Error::io(format!("read {}", p.display()), e))?;
        let (mut r, mut w) = (0, 0);
        for line in s.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if let [_, op, v] = f[..] {
                let v: u64 = v.parse().unwrap_or(0);
                match op {
                    "Read" => r += v,
                    "Write" => w += v,
                    _ => {}
                }
            }
        }
        Ok((r, w))
    }

    /// Open `cgroup.procs` files of every hierarchy, for a child to join the group.
    pub fn procs_files(&self) -> Result<Vec<fs::File>> {
        HIERARCHIES
            .iter()
            .map(|h| {
                let p = self.dir(h).join("cgroup.procs");
                fs::OpenOptions::new()
                    .write(true)
                    .open(&p)
                    .map_err(|e| Error::io(format!("open {}", p.display()), e))
            })
            .collect()
    }

    /// Kills every process in the group (and its subgroups) and removes the group's directories.
    pub fn destroy(&self) -> Result<()> {
        destroy_tree(&self.rel)
    }
}

/// Pids in a cgroup directory and its subdirectories.
fn pids_under(dir: &Path) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(s) = fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(s.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
    }
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.extend(pids_under(&e.path()));
            }
        }
    }
    out
}

/// Removes empty directories bottom-up.
fn rmdir_tree(dir: &Path) -> io::Result<()> {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                rmdir_tree(&e.path())?;
            }
        }
    }
    match fs::remove_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Kills the processes of `<hierarchy>/<rel>` in all hierarchies, waits for them to go, and
/// removes the directories. Touches nothing outside `rel`.
pub fn destroy_tree(rel: &Path) -> Result<()> {
    let dirs: Vec<PathBuf> = HIERARCHIES
        .iter()
        .map(|h| Path::new(ROOT).join(h).join(rel))
        .filter(|d| d.exists())
        .collect();
    for round in 0..50 {
        let pids: Vec<u32> = dirs.iter().flat_map(|d| pids_under(d)).collect();
        if pids.is_empty() {
            break;
        }
        for &pid in &pids {
            let _ = crate::sys::kill(
                pid,
                if round < 10 {
                    libc::SIGTERM
                } else {
                    libc::SIGKILL
                },
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let mut last = Ok(());
    for d in &dirs {
        // A cgroup directory can be removed only once its last task has been reaped; retry a
        // little while zombies are collected.
        for attempt in 0..30 {
            match rmdir_tree(d) {
                Ok(()) => break,
                Err(e) if attempt == 29 => {
                    last = Err(Error::io(format!("remove cgroup {}", d.display()), e))
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
            }
        }
    }
    last
}

/// Names of run groups (`<prefix>` directories) present in any hierarchy whose names start with
/// `stem`.
pub fn list_groups(stem: &str) -> Vec<String> {
    let mut names: Vec<String> = HIERARCHIES
        .iter()
        .filter_map(|h| fs::read_dir(Path::new(ROOT).join(h)).ok())
        .flat_map(|rd| rd.flatten())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(stem))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// True when the cgroup v1 hierarchies the testbed needs are mounted and writable.
pub fn available() -> bool {
    HIERARCHIES
        .iter()
        .all(|h| Path::new(ROOT).join(h).join("cgroup.procs").exists())
}

/// The whole-disk device that holds `dev` (blkio throttling applies to whole disks): a partition
/// maps to its parent disk through sysfs.
pub fn whole_disk(dev: (u32, u32)) -> (u32, u32) {
    let sys = PathBuf::from(format!("/sys/dev/block/{}:{}", dev.0, dev.1));
    if sys.join("partition").exists() {
        if let Ok(s) = fs::read_to_string(sys.join("../dev")) {
            if let Some((a, b)) = s.trim().split_once(':') {
                if let (Ok(a), Ok(b)) = (a.parse(), b.parse()) {
                    return (a, b);
                }
            }
        }
    }
    dev
}
