//! Counting-mode uprobes on one process: an event per (function, thread), each inherited by the
//! threads and children that thread creates later, so reading the events gives exact totals
//! for the whole process tree from the moment they were opened.
//!
//! Opening on a process that runs already: a thread created between reading the thread list
//! and opening the events on its creator would be missed, so the list is read again after each
//! round of opening until no thread is new. Closing the events (drop) removes the breakpoints:
//! the process runs on as if never probed.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;

use super::{open_error, tasks, Error, Plan, Pmu};
use crate::sys::{self, PerfFd};

/// Open counting probes.
#[derive(Debug)]
pub struct Counters {
    /// `fds[probe]`: that probe's events, one per task opened on.
    fds: Vec<Vec<PerfFd>>,
    tasks: Vec<u32>,
}

/// Most rounds of reading a process's thread list while opening.
const MAX_ROUNDS: usize = 20;

impl Counters {
    /// Opens every probe of `plan` on task `tid` only (a child held before `exec`: what it
    /// starts later inherits the events). The events start disabled; with `on_exec` the
    /// task's next `exec` enables them (so nothing it runs before is counted).
    pub fn for_task(pmu: &Pmu, plan: &Plan, tid: u32, on_exec: bool) -> Result<Counters, Error> {
        let paths = probe_paths(plan)?;
        let mut c = Counters {
            fds: (0..plan.probes.len()).map(|_| Vec::new()).collect(),
            tasks: Vec::new(),
        };
        if !c.open_on(pmu, plan, &paths, tid, on_exec)? {
            return Err(Error::NoProcess(tid));
        }
        Ok(c)
    }

    /// Opens every probe of `plan` on every thread of process `pid`. The events start
    /// disabled.
    pub fn for_process(pmu: &Pmu, plan: &Plan, pid: u32) -> Result<Counters, Error> {
        let paths = probe_paths(plan)?;
        let mut c = Counters {
            fds: (0..plan.probes.len()).map(|_| Vec::new()).collect(),
            tasks: Vec::new(),
        };
        let limit = sys::raise_nofile_limit();
        for _ in 0..MAX_ROUNDS {
            let new: Vec<u32> = tasks(pid)
                .into_iter()
                .filter(|t| !c.tasks.contains(t))
                .collect();
            if new.is_empty() {
                break;
            }
            let need = (c.tasks.len() + new.len()) as u64 * plan.probes.len() as u64;
            if need + 64 > limit {
                return Err(Error::Plan(format!(
                    "{} threads x {} functions need {need} file descriptors, more than the \
                     limit of {limit} (raise `ulimit -n`, or probe fewer functions)",
                    c.tasks.len() + new.len(),
                    plan.probes.len()
                )));
            }
            for t in new {
                c.open_on(pmu, plan, &paths, t, false)?;
            }
        }
        if c.tasks.is_empty() {
            return Err(Error::NoProcess(pid));
        }
        Ok(c)
    }

    /// Opens the probes on one task; false when the task is gone.
    fn open_on(
        &mut self,
        pmu: &Pmu,
        plan: &Plan,
        paths: &[CString],
        tid: u32,
        on_exec: bool,
    ) -> Result<bool, Error> {
        let mut attr = pmu.counting_attr(false);
        if on_exec {
            attr.set_enable_on_exec(1);
        }
        let mut opened = Vec::with_capacity(plan.probes.len());
        for p in &plan.probes {
            match PerfFd::open_uprobe(&attr, &paths[p.image], p.offset, tid as i32, -1) {
                Ok(fd) => opened.push(fd),
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(false),
                Err(e) => return Err(open_error(&p.name, &plan.images[p.image].path, e)),
            }
        }
        // A task that exited between the list and the open still takes events (a zombie):
        // harmless, they count nothing.
        for (slot, fd) in self.fds.iter_mut().zip(opened) {
            slot.push(fd);
        }
        self.tasks.push(tid);
        Ok(true)
    }

    /// Starts counting.
    pub fn enable(&self) -> Result<(), Error> {
        for fd in self.fds.iter().flatten() {
            fd.enable().map_err(|source| Error::Io {
                what: "enable a uprobe".into(),
                source,
            })?;
        }
        Ok(())
    }

    /// Stops counting (the breakpoints stay until the events are dropped).
    pub fn disable(&self) {
        for fd in self.fds.iter().flatten() {
            let _ = fd.disable();
        }
    }

    /// Calls so far per probe (in [`Plan::probes`] order), summed over the tasks.
    pub fn read(&self) -> Vec<u64> {
        self.fds
            .iter()
            .map(|fds| fds.iter().filter_map(|f| f.read_count().ok()).sum())
            .collect()
    }

    /// The tasks the events were opened on.
    pub fn tasks(&self) -> &[u32] {
        &self.tasks
    }

    /// Number of open events.
    pub fn events(&self) -> usize {
        self.fds.iter().map(Vec::len).sum()
    }
}

/// The probe path of each image as a C string.
fn probe_paths(plan: &Plan) -> Result<Vec<CString>, Error> {
    if plan.probes.is_empty() {
        return Err(Error::Plan("no function to probe".into()));
    }
    plan.images
        .iter()
        .map(|i| {
            CString::new(i.probe_path.as_os_str().as_bytes())
                .map_err(|_| Error::Plan(format!("{}: path holds a NUL byte", i.path.display())))
        })
        .collect()
}
