//! What `/proc` says about processes: parent, name, executable mappings, threads, and the facts
//! node rules need; read once for the snapshot taken when sampling begins, and for processes
//! the side-band records name before their own records arrived.

use culprit_format::procfs::Stat;

use crate::nodes::{read_facts, ProcFacts};

/// One executable mapping from `/proc/<pid>/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapLine {
    /// Start address.
    pub start: u64,
    /// End address.
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// Device (major << 32 | minor).
    pub dev: u64,
    /// Inode.
    pub ino: u64,
    /// Path (or `[vdso]`, empty for anonymous memory).
    pub path: String,
}

/// A process as read from /proc.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcInfo {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Name (`comm`).
    pub comm: String,
    /// Executable mappings.
    pub maps: Vec<MapLine>,
    /// Facts for node rules, when they need any.
    pub facts: Option<ProcFacts>,
}

/// Reads one process from /proc: parent, name, executable mappings, and the facts node rules
/// need (`facts` = (cgroups, netns)). `None` when it is gone.
pub fn read_proc_info(pid: u32, facts: Option<(bool, bool)>) -> Option<ProcInfo> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let st = Stat::parse(&stat)?;
    let (comm, ppid) = (st.comm.to_string(), st.ppid);
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let facts = match facts {
        Some((cg, ns)) => Some(read_facts(pid, cg, ns)?),
        None => None,
    };
    Some(ProcInfo {
        pid,
        ppid,
        comm,
        maps: parse_maps(&maps),
        facts,
    })
}

/// The parent of process `pid`, from `/proc/<pid>/stat`.
pub fn ppid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(Stat::parse(&stat)?.ppid)
}

/// The thread ids of process `pid`, sorted.
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

/// The executable mappings of `/proc/<pid>/maps` text.
pub fn parse_maps(text: &str) -> Vec<MapLine> {
    let mut out = Vec::new();
    for line in text.lines() {
        let mut f = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(off), Some(dev), Some(ino)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        if perms.as_bytes().get(2) != Some(&b'x') {
            continue;
        }
        let path = f.next().unwrap_or("").trim_start().to_string();
        let Some((s, e)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end), Ok(pgoff)) = (
            u64::from_str_radix(s, 16),
            u64::from_str_radix(e, 16),
            u64::from_str_radix(off, 16),
        ) else {
            continue;
        };
        let dev = dev
            .split_once(':')
            .and_then(|(a, b)| {
                Some((u64::from_str_radix(a, 16).ok()? << 32) | u64::from_str_radix(b, 16).ok()?)
            })
            .unwrap_or(0);
        out.push(MapLine {
            start,
            end,
            pgoff,
            dev,
            ino: ino.parse().unwrap_or(0),
            path,
        });
    }
    out
}

/// Reads every process in /proc (the snapshot taken once sampling is enabled).
pub fn scan_proc(facts: Option<(bool, bool)>) -> Vec<ProcInfo> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| read_proc_info(pid, facts))
        .collect()
}
