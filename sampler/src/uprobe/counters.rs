//! Counting-mode uprobes on one process: an event per (function, thread), each inherited by the
//! threads and children that thread creates later, so reading the events gives exact totals
//! for the whole process tree from the moment they were opened.
//!
//! The events are tracepoints of uprobes defined in tracefs ([`super::defs`]): inherited uprobe
//! PMU events break `clone` in the probed program.
//!
//! Opening on a process that runs already: a thread created between reading the thread list
//! and opening the events on its creator would be missed, so the list is read again after each
//! round of opening until no thread is new. Closing the events (drop) removes the breakpoints:
//! the process runs on as if never probed.

use perf_event_open_sys::bindings::{self as b, perf_event_attr};

use super::defs::ProbeDefs;
use super::pmu::{open_error, Error};
use super::target::Plan;
use crate::procs::tasks;
use crate::sys::{self, PerfFd};

/// Open counting probes.
#[derive(Debug)]
pub struct Counters {
    /// `fds[probe]`: that probe's events, one per task opened on.
    fds: Vec<Vec<PerfFd>>,
    tasks: Vec<u32>,
    /// Declared last: dropped after the events, which must be closed before their
    /// definitions can be removed.
    defs: ProbeDefs,
}

/// Most rounds of reading a process's thread list while opening.
const MAX_ROUNDS: usize = 20;

impl Counters {
    /// Opens every probe of `plan` on task `tid` only (a child held before `exec`: what it
    /// starts later inherits the events). The events start disabled; with `on_exec` the
    /// task's next `exec` enables them (so nothing it runs before is counted).
    pub fn for_task(plan: &Plan, tid: u32, on_exec: bool) -> Result<Counters, Error> {
        let mut c = Counters::new(plan)?;
        if !c.open_on(plan, tid, on_exec)? {
            return Err(Error::NoProcess(tid));
        }
        Ok(c)
    }

    /// Opens every probe of `plan` on every thread of process `pid`. The events start
    /// disabled.
    pub fn for_process(plan: &Plan, pid: u32) -> Result<Counters, Error> {
        let mut c = Counters::new(plan)?;
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
                c.open_on(plan, t, false)?;
            }
        }
        if c.tasks.is_empty() {
            return Err(Error::NoProcess(pid));
        }
        Ok(c)
    }

    fn new(plan: &Plan) -> Result<Counters, Error> {
        if plan.probes.is_empty() {
            return Err(Error::Plan("no function to probe".into()));
        }
        Ok(Counters {
            fds: (0..plan.probes.len()).map(|_| Vec::new()).collect(),
            tasks: Vec::new(),
            defs: ProbeDefs::define(plan, false)?,
        })
    }

    /// Opens the probes on one task; false when the task is gone.
    fn open_on(&mut self, plan: &Plan, tid: u32, on_exec: bool) -> Result<bool, Error> {
        let mut opened = Vec::with_capacity(plan.probes.len());
        for (i, p) in plan.probes.iter().enumerate() {
            let attr = counting_attr(self.defs.entry_id(i), on_exec);
            match PerfFd::open(&attr, tid as i32, -1, 0) {
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

/// A counting tracepoint event, disabled, inherited by threads and children created later.
fn counting_attr(id: u64, on_exec: bool) -> perf_event_attr {
    let mut a = perf_event_attr {
        type_: b::PERF_TYPE_TRACEPOINT,
        size: size_of::<perf_event_attr>() as u32,
        config: id,
        ..perf_event_attr::default()
    };
    a.set_disabled(1);
    a.set_inherit(1);
    if on_exec {
        a.set_enable_on_exec(1);
    }
    a
}
