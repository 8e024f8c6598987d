//! Uprobe events defined in tracefs (`uprobe_events`), for probes that must be inherited.
//!
//! Why not the uprobe PMU here: a PMU uprobe names its binary by a *pointer* (`config1`) that
//! the kernel reads from user memory whenever it creates the event — and it creates a copy for
//! every thread or child that inherits it, reading the pointer in the address space of the task
//! that forks (Linux 6.18: `perf_uprobe_init` → `strndup_user`). In the probed program the
//! pointer means nothing, so `clone` fails with EFAULT and the program cannot start a thread
//! (measured: `pthread_create` fails in a program probed with an inherited PMU uprobe). An
//! event defined in tracefs is a tracepoint with an id; tracepoint events inherit fine, and the
//! breakpoints are the same uprobes, so the cost per hit is the same.
//!
//! Definitions are global: each set lives in its own group `culprit_<pid>_<n>` and is removed
//! when dropped (after the events using it are closed); a group left by a culprit process that
//! died (`kill -9`) is removed the next time probes are defined.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::pmu::Error;
use super::target::Plan;
use crate::tracefs;

/// Group name prefix of culprit's probe definitions.
const GROUP_PREFIX: &str = "culprit_";

/// A set of uprobe events defined in tracefs, removed on drop.
#[derive(Debug)]
pub struct ProbeDefs {
    root: PathBuf,
    group: String,
    /// Event ids, in plan order (entry probes), then return probes when asked for.
    ids: Vec<u64>,
    names: Vec<String>,
}

impl ProbeDefs {
    /// Defines an entry probe (and, with `returns`, a return probe) for every probe of `plan`.
    pub fn define(plan: &Plan, returns: bool) -> Result<ProbeDefs, Error> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let root = tracefs::find_or_mount(crate::sys::euid() == 0).map_err(Error::Plan)?;
        remove_stale(&root);
        let group = format!(
            "{GROUP_PREFIX}{}_{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let mut defs = ProbeDefs {
            root,
            group,
            ids: Vec::new(),
            names: Vec::new(),
        };
        let kinds: &[char] = if returns { &['p', 'r'] } else { &['p'] };
        for &kind in kinds {
            for (i, p) in plan.probes.iter().enumerate() {
                let img = &plan.images[p.image];
                let path = img.probe_path.to_string_lossy();
                if path.contains(char::is_whitespace) {
                    return Err(Error::Plan(format!(
                        "{}: a path with white space cannot be probed (tracefs splits on it)",
                        img.path.display()
                    )));
                }
                let name = format!("{kind}{i}");
                let line = format!("{kind}:{}/{name} {path}:{:#x}\n", defs.group, p.offset);
                defs.write_events(&line).map_err(|e| Error::Open {
                    function: p.name.clone(),
                    image: img.path.display().to_string(),
                    source: e,
                })?;
                defs.names.push(name.clone());
                let id_path = defs
                    .root
                    .join("events")
                    .join(&defs.group)
                    .join(&name)
                    .join("id");
                let id = std::fs::read_to_string(&id_path)
                    .ok()
                    .and_then(|s| s.trim().parse().ok())
                    .ok_or_else(|| Error::Io {
                        what: format!("read {}", id_path.display()),
                        source: std::io::Error::other("no event id"),
                    })?;
                defs.ids.push(id);
            }
        }
        Ok(defs)
    }

    /// Event id of entry probe `i` (plan order).
    pub fn entry_id(&self, i: usize) -> u64 {
        self.ids[i]
    }

    /// Event id of return probe `i`, when return probes were defined.
    pub fn return_id(&self, i: usize, probes: usize) -> Option<u64> {
        self.ids.get(probes + i).copied()
    }

    fn write_events(&self, line: &str) -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.root.join("uprobe_events"))?;
        f.write_all(line.as_bytes())
    }
}

impl Drop for ProbeDefs {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = self.write_events(&format!("-:{}/{n}\n", self.group));
        }
    }
}

/// Removes the definitions of culprit processes that no longer run.
fn remove_stale(root: &Path) {
    let Ok(text) = std::fs::read_to_string(root.join("uprobe_events")) else {
        return;
    };
    for line in text.lines() {
        // `p:culprit_123_0/p4 /path:0x1139`
        let Some(event) = line
            .split_whitespace()
            .next()
            .and_then(|e| e.split_once(':'))
            .map(|(_, e)| e)
        else {
            continue;
        };
        let Some(rest) = event.strip_prefix(GROUP_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('_').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            if let Ok(mut f) = std::fs::OpenOptions::new()
                .append(true)
                .open(root.join("uprobe_events"))
            {
                let _ = f.write_all(format!("-:{event}\n").as_bytes());
            }
        }
    }
}
