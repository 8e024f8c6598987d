//! System-wide uprobe counts per process (`culprit sample --uprobes BINARY:PATTERN`): one
//! sampling event per (function, CPU) with a period of 1, every hit a record carrying its pid,
//! tid and time in the CPU's ring (the first event of a CPU owns the ring, the others write to
//! it, and it also carries the FORK and EXIT records that tell when a process ends).
//!
//! Why sampling and not counting here: a counting event that covers every process cannot tell
//! processes apart, and counting events opened per process as processes appear would miss what
//! a process calls before it is noticed (and the threads it already has). A record per hit is
//! attributed exactly, like the sampler's samples, at the price of a ring write per hit
//! (`benches/uprobes`). A ring that overflows loses records: every file's interval that holds
//! lost records is written MISSED, so inexact counts never pass for exact ones.
//!
//! Each process with hits gets a trace file in its node's directory (node rules as for samples:
//! pid tree, cgroup, network namespace; a forked child inherits its parent's node); the file
//! ends when the process exits.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use culprit_format::{end_reason, interval_flags};
use perf_event_open_sys::bindings::{self as b, perf_event_attr};

use super::cost::{self, Cost};
use super::pmu::{open_error, Error, Pmu};
use super::run::Budget;
use super::target::{self, find_library, Plan, ProbeSpec};
use super::trace::{process_info, ProbeCount, TraceOut};
use crate::nodes::{self, NodeIdx, Nodes, Scope};
use crate::record::{self, Layout, Rec};
use crate::sys::{self, PerfFd, Ring};

const SAMPLE_TYPE: u64 =
    (b::PERF_SAMPLE_IDENTIFIER | b::PERF_SAMPLE_TID | b::PERF_SAMPLE_TIME) as u64;
/// Smallest ring per CPU: 256 pages (1 MiB) hold 32,768 hit records, 0.3 s of a CPU doing
/// nothing but calling a probed function (9 µs per hit on this project's VM), so a reader
/// starved that long by other work loses nothing.
pub const MIN_RING_PAGES: usize = 256;
/// How often the rings are drained (or sooner, when one is half full).
const TICK_MS: u64 = 50;

/// What a system-wide run did.
#[derive(Clone, Debug, Default)]
pub struct SystemSummary {
    /// Hits counted.
    pub hits: u64,
    /// Hit records the kernel dropped (ring full).
    pub lost: u64,
    /// Trace files written.
    pub files: Vec<PathBuf>,
}

/// Where and how a system-wide run writes.
#[derive(Clone, Debug)]
pub struct SystemConfig {
    /// Data root: files go to `DATA/<node>/`.
    pub data_dir: PathBuf,
    /// Node rules and scope, as for the sampler.
    pub nodes: Nodes,
    /// Interval, ns.
    pub interval_ns: u64,
    /// Budget, percent of one CPU per function.
    pub budget_percent: f64,
    /// Stop at this wall-clock time, ns.
    pub until_ns: Option<u64>,
}

impl SystemConfig {
    /// The probes' settings beside a sampler run of `cfg` (`culprit sample --uprobes`): its
    /// data root, nodes and scope, and end; 1 s intervals (the tracer's default), or the
    /// sampler's when shorter (10 ms at least).
    pub fn beside(cfg: &crate::Config, budget_percent: f64) -> Result<SystemConfig, String> {
        let until_ns = cfg
            .duration
            .map(|d| super::run::now_ns() + d.as_nanos() as u64);
        Ok(SystemConfig {
            data_dir: cfg.data_dir.clone(),
            nodes: Nodes::new(&cfg.node, &cfg.node_rules, cfg.scope.clone())?,
            interval_ns: (cfg.interval.as_nanos() as u64).clamp(10_000_000, 1_000_000_000),
            budget_percent,
            until_ns,
        })
    }
}

/// The pages of the uprobe rings beside a sampler configured with `configured` ring pages: as
/// many, or the sampler's smallest default when it sizes its rings itself (0: from its own
/// rate, which says nothing about uprobe hits).
pub fn ring_pages(configured: usize) -> usize {
    if configured == 0 {
        crate::DEFAULT_RING_PAGES
    } else {
        configured
    }
}

/// Opened system-wide probes.
#[derive(Debug)]
pub struct SystemProbes {
    plan: Plan,
    rings: Vec<Ring>,
    fds: Vec<PerfFd>,
    probe_of: HashMap<u64, usize>,
    cost: Cost,
    cost_note: Option<String>,
}

/// Resolves a `BINARY` of a system-wide spec: a path, a program on `PATH`, or a library name.
fn resolve_binary(img: Option<&str>) -> Result<(PathBuf, PathBuf), String> {
    let Some(name) = img else {
        return Err(
            "system-wide probes need BINARY:PATTERN (which binary's functions to count)".into(),
        );
    };
    let found = if name.contains('/') {
        Some(PathBuf::from(name))
    } else {
        which::which(name).ok().or_else(|| find_library(name, None))
    };
    let p = found.ok_or_else(|| format!("{name}: not found on PATH nor among libraries"))?;
    let p = p
        .canonicalize()
        .map_err(|e| format!("{}: {e}", p.display()))?;
    Ok((p.clone(), p))
}

impl SystemProbes {
    /// Opens one sampling event per (function, online CPU), rings of `ring_pages` pages (at
    /// least [`MIN_RING_PAGES`]), and starts counting.
    pub fn open(specs: &[ProbeSpec], ring_pages: usize) -> Result<SystemProbes, Error> {
        let ring_pages = ring_pages.max(MIN_RING_PAGES);
        let pmu = Pmu::detect()?;
        let plan = target::plan(specs, resolve_binary).map_err(Error::Plan)?;
        if plan.probes.is_empty() {
            return Err(Error::Plan(format!(
                "no function to probe: {}",
                plan.notes().join("; ")
            )));
        }
        let paths: Vec<CString> = plan
            .images
            .iter()
            .map(|i| CString::new(i.probe_path.as_os_str().as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| Error::Plan("a path holds a NUL byte".into()))?;
        let wakeup = (ring_pages * sys::page_size() / 2) as u32;
        let limit = sys::raise_nofile_limit();
        let cpus = crate::online_cpus();
        let need = (cpus.len() * plan.probes.len()) as u64;
        if need + 64 > limit {
            return Err(Error::Plan(format!(
                "{} CPUs x {} functions need {need} file descriptors, more than the limit of \
                 {limit}",
                cpus.len(),
                plan.probes.len()
            )));
        }
        let mut rings = Vec::new();
        let mut fds = Vec::new();
        let mut probe_of = HashMap::new();
        for &cpu in &cpus {
            let mut ring: Option<Ring> = None;
            for (i, p) in plan.probes.iter().enumerate() {
                let attr = sampling_attr(&pmu, ring.is_none(), wakeup);
                let fd = PerfFd::open_uprobe(&attr, &paths[p.image], p.offset, -1, cpu as i32)
                    .map_err(|e| open_error(&p.name, &plan.images[p.image].path, e))?;
                let id = fd.id().map_err(|source| Error::Io {
                    what: "perf event id".into(),
                    source,
                })?;
                probe_of.insert(id, i);
                match &ring {
                    None => {
                        ring = Some(Ring::map(fd, ring_pages).map_err(|source| Error::Io {
                            what: format!("map a ring buffer for CPU {cpu}"),
                            source,
                        })?)
                    }
                    Some(r) => {
                        fd.set_output(r.fd()).map_err(|source| Error::Io {
                            what: "redirect a uprobe to its CPU's ring".into(),
                            source,
                        })?;
                        fds.push(fd);
                    }
                }
            }
            rings.extend(ring);
        }
        let (cost, cost_note) = cost::calibrate_or_fallback(&pmu);
        // Counting starts now, so a caller that says "running" after this misses nothing;
        // hits wait in the rings until `run` drains them.
        for fd in rings.iter().map(Ring::fd).chain(fds.iter()) {
            fd.enable().map_err(|source| Error::Io {
                what: "enable a uprobe".into(),
                source,
            })?;
        }
        Ok(SystemProbes {
            plan,
            rings,
            fds,
            probe_of,
            cost,
            cost_note,
        })
    }

    /// What is probed and what could not be.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// Events open.
    pub fn events(&self) -> usize {
        self.rings.len() + self.fds.len()
    }

    /// The cost per hit in use.
    pub fn cost(&self) -> Cost {
        self.cost
    }

    /// Why the cost per hit could not be measured here, when it could not.
    pub fn cost_note(&self) -> Option<&str> {
        self.cost_note.as_deref()
    }

    /// Counts on a thread of its own beside a sampler run of `cfg` ([`SystemConfig::beside`])
    /// until `stop` is set or the sampler's duration ends; warnings go to `warn`.
    pub fn spawn(
        self,
        cfg: &crate::Config,
        budget_percent: f64,
        stop: &'static AtomicBool,
        warn: fn(&str),
    ) -> std::thread::JoinHandle<Result<SystemSummary, Error>> {
        let cfg = SystemConfig::beside(cfg, budget_percent);
        std::thread::spawn(move || {
            // Draining the rings is short work: ahead of the load, capped.
            crate::priority::raise(crate::priority::UPROBE_READER);
            let cfg = cfg.map_err(Error::Plan)?;
            self.run(&cfg, stop, &mut |w| warn(w))
        })
    }

    /// Counts until `stop` is set or `cfg.until_ns` passes, writing one trace file per
    /// process with hits into `data_dir/<node>/`. Warnings go to `warn`.
    pub fn run(
        mut self,
        cfg: &SystemConfig,
        stop: &AtomicBool,
        warn: &mut dyn FnMut(&str),
    ) -> Result<SystemSummary, Error> {
        let (interval_ns, until_ns) = (cfg.interval_ns, cfg.until_ns);
        let layout = Layout {
            sample_type: SAMPLE_TYPE,
            sample_id_all: true,
        };
        let offset = sys::realtime_ns() as i64 - sys::monotonic_ns() as i64;
        let wall = |t: u64| (t as i64 + offset).max(0) as u64;
        let mut acc = Accounts::new(&self.plan, &cfg.data_dir, &cfg.nodes, interval_ns);
        let mut budget = Budget::new(cfg.budget_percent, self.cost, self.plan.probes.len());
        let start = sys::realtime_ns();
        let mut first_check = Some(start + super::run::FIRST_CHECK.as_nanos() as u64);
        let mut prev_round = sys::monotonic_ns();
        let mut buf = Vec::new();
        let mut summary = SystemSummary::default();
        loop {
            sys::poll_rings(&self.rings, TICK_MS as i32);
            let round = sys::monotonic_ns();
            let now = sys::realtime_ns();
            let done = stop.load(Ordering::SeqCst) || until_ns.is_some_and(|u| now >= u);
            if done {
                for r in &self.rings {
                    let _ = r.fd().disable();
                }
                for f in &self.fds {
                    let _ = f.disable();
                }
            }
            for r in &mut self.rings {
                buf.clear();
                r.drain(&mut buf);
                for (kind, misc, rec) in record::split(&buf) {
                    match record::decode(kind, misc, rec, &layout) {
                        Rec::Sample(s) => {
                            if let Some(&p) = s.id.and_then(|id| self.probe_of.get(&id)) {
                                summary.hits += 1;
                                acc.hit(s.pid, s.tid, p, wall(s.time));
                            }
                        }
                        Rec::Fork { pid, ppid, .. } if pid != ppid => acc.fork(pid, ppid),
                        Rec::Exit { pid, tid, time } if pid == tid => acc.exit(pid, wall(time)),
                        Rec::Lost { lost, sid, .. } => {
                            summary.lost += lost;
                            acc.lost(sid.time.map_or(now, wall));
                        }
                        _ => {}
                    }
                }
            }
            if first_check.is_some_and(|t| now >= t) {
                first_check = None;
                let secs = (now - start) as f64 / 1e9;
                for w in budget.check(&self.plan, &acc.totals, secs, false) {
                    warn(&w);
                }
            }
            if done {
                acc.close_all(
                    now,
                    if stop.load(Ordering::SeqCst) {
                        end_reason::SIGNAL
                    } else {
                        end_reason::DONE
                    },
                    warn,
                );
                summary.files = acc.files;
                return Ok(summary);
            }
            // Records older than the previous round are all read (each ring is in time order).
            let closed = acc.close_until(wall(prev_round), warn);
            for calls in closed {
                for w in budget.check(&self.plan, &calls, interval_ns as f64 / 1e9, false) {
                    warn(&w);
                }
            }
            prev_round = round;
        }
    }
}

/// The sampling attr of a uprobe hit record; `leader` (the ring's owner) also asks for the
/// FORK and EXIT records of every task.
fn sampling_attr(pmu: &Pmu, leader: bool, wakeup: u32) -> perf_event_attr {
    let mut a = pmu.counting_attr(false);
    a.set_inherit(0);
    a.__bindgen_anon_1.sample_period = 1;
    a.sample_type = SAMPLE_TYPE;
    a.set_sample_id_all(1);
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
    a.set_watermark(1);
    a.__bindgen_anon_2.wakeup_watermark = wakeup.max(1);
    if leader {
        a.set_task(1);
    }
    a
}

/// One process's file and its counts per open interval.
#[derive(Debug)]
struct ProcAcc {
    out: Option<TraceOut>,
    /// Interval index → (per-probe calls, threads seen).
    open: BTreeMap<u64, (Vec<u64>, BTreeSet<u32>)>,
    /// First interval this process is observed in (flagged PARTIAL).
    first: u64,
    /// Next interval to write.
    next: u64,
    exited: Option<u64>,
}

/// Per-process accounting and files.
struct Accounts<'a> {
    plan: &'a Plan,
    data_dir: &'a Path,
    nodes: &'a Nodes,
    interval_ns: u64,
    procs: HashMap<u32, ProcAcc>,
    node_of: HashMap<u32, Option<NodeIdx>>,
    parent: HashMap<u32, u32>,
    lost: BTreeSet<u64>,
    totals: Vec<u64>,
    files: Vec<PathBuf>,
    failed: bool,
}

impl<'a> Accounts<'a> {
    fn new(plan: &'a Plan, data_dir: &'a Path, nodes: &'a Nodes, interval_ns: u64) -> Self {
        Accounts {
            plan,
            data_dir,
            nodes,
            interval_ns,
            procs: HashMap::new(),
            node_of: HashMap::new(),
            parent: HashMap::new(),
            lost: BTreeSet::new(),
            totals: vec![0; plan.probes.len()],
            files: Vec::new(),
            failed: false,
        }
    }

    fn fork(&mut self, pid: u32, ppid: u32) {
        self.parent.insert(pid, ppid);
        if let Some(n) = self.node_of.get(&ppid).copied() {
            self.node_of.entry(pid).or_insert(n);
        }
    }

    fn exit(&mut self, pid: u32, wall: u64) {
        if let Some(p) = self.procs.get_mut(&pid) {
            p.exited = Some(wall);
        }
    }

    fn lost(&mut self, wall: u64) {
        self.lost.insert(wall / self.interval_ns);
    }

    /// The node of `pid`, or `None` when it is out of scope.
    fn classify(&mut self, pid: u32) -> Option<NodeIdx> {
        if let Some(n) = self.node_of.get(&pid) {
            return *n;
        }
        let n = classify_pid(self.nodes, pid, &self.parent);
        self.node_of.insert(pid, n);
        n
    }

    fn hit(&mut self, pid: u32, tid: u32, probe: usize, wall: u64) {
        let idx = wall / self.interval_ns;
        // A process that exited and a new one with the same pid: the old file ends first.
        if self
            .procs
            .get(&pid)
            .is_some_and(|p| p.exited.is_some_and(|e| e < wall))
        {
            self.node_of.remove(&pid);
            if let Some(p) = self.procs.remove(&pid) {
                self.finish(p, u64::MAX, end_reason::EXIT);
            }
        }
        if self.classify(pid).is_none() {
            return;
        }
        self.totals[probe] += 1;
        let n = self.plan.probes.len();
        let p = self.procs.entry(pid).or_insert_with(|| ProcAcc {
            out: None,
            open: BTreeMap::new(),
            first: idx,
            next: idx,
            exited: None,
        });
        let idx = idx.max(p.next); // late record: count it in the oldest open interval
        let e = p
            .open
            .entry(idx)
            .or_insert_with(|| (vec![0; n], BTreeSet::new()));
        e.0[probe] += 1;
        e.1.insert(tid);
    }

    /// Writes every interval that ended before `wall`; returns the calls per probe of each
    /// closed interval (all processes), for the budget.
    fn close_until(&mut self, wall: u64, warn: &mut dyn FnMut(&str)) -> Vec<Vec<u64>> {
        let end_idx = wall / self.interval_ns; // intervals < end_idx are over
        let mut per_interval: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        let pids: Vec<u32> = self.procs.keys().copied().collect();
        for pid in pids {
            let mut p = self.procs.remove(&pid).expect("listed");
            while p.next < end_idx {
                let idx = p.next;
                let (calls, threads) = p.open.remove(&idx).unwrap_or_default();
                if !calls.is_empty() {
                    let t = per_interval
                        .entry(idx)
                        .or_insert_with(|| vec![0; calls.len()]);
                    for (a, c) in t.iter_mut().zip(&calls) {
                        *a += c;
                    }
                }
                self.write(pid, &mut p, idx, &calls, threads.len() as u32, 0, warn);
                p.next += 1;
                if p.exited.is_some_and(|e| e < p.next * self.interval_ns) {
                    break;
                }
            }
            match p.exited {
                Some(e) if e < p.next * self.interval_ns => self.finish(p, e, end_reason::EXIT),
                _ => {
                    self.procs.insert(pid, p);
                }
            }
        }
        self.lost.retain(|&i| i >= end_idx);
        per_interval.into_values().collect()
    }

    /// Writes the last (partial) interval of every process and ends the files.
    fn close_all(&mut self, now: u64, reason: u32, warn: &mut dyn FnMut(&str)) {
        self.close_until(now, warn);
        let pids: Vec<u32> = self.procs.keys().copied().collect();
        for pid in pids {
            let mut p = self.procs.remove(&pid).expect("listed");
            let next = p.next;
            let keys: Vec<u64> = p.open.keys().copied().filter(|&k| k >= next).collect();
            for idx in keys {
                while p.next < idx {
                    let i = p.next;
                    self.write(pid, &mut p, i, &[], 0, 0, warn);
                    p.next += 1;
                }
                let (calls, threads) = p.open.remove(&idx).unwrap_or_default();
                self.write(
                    pid,
                    &mut p,
                    idx,
                    &calls,
                    threads.len() as u32,
                    interval_flags::PARTIAL,
                    warn,
                );
                p.next = idx + 1;
            }
            if p.next * self.interval_ns <= now {
                let i = p.next;
                self.write(pid, &mut p, i, &[], 0, interval_flags::PARTIAL, warn);
            }
            self.finish(p, now, reason);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &mut self,
        pid: u32,
        p: &mut ProcAcc,
        idx: u64,
        calls: &[u64],
        threads: u32,
        extra: u32,
        warn: &mut dyn FnMut(&str),
    ) {
        if self.failed {
            return;
        }
        if p.out.is_none() {
            let node = self.node_of.get(&pid).copied().flatten().unwrap_or(0);
            let name = &self.nodes.names()[node as usize];
            let dir = self.data_dir.join(name);
            let info = process_info(name, pid, self.interval_ns, self.plan, false);
            let start = (p.first * self.interval_ns).max(1);
            match TraceOut::create(
                self.data_dir,
                name,
                pid,
                start,
                self.interval_ns,
                &info,
                self.plan,
                None,
            ) {
                Ok(o) => p.out = Some(o),
                Err(e) => {
                    warn(&format!(
                        "cannot write uprobe counts under {}: {e}; uprobe counting stopped",
                        dir.display()
                    ));
                    self.failed = true;
                    return;
                }
            }
        }
        let out = p.out.as_mut().expect("created above");
        let r = if self.lost.contains(&idx) {
            out.missed(idx * self.interval_ns, self.interval_ns)
        } else {
            let mut flags = extra;
            if idx == p.first {
                flags |= interval_flags::PARTIAL;
            }
            let counts: Vec<ProbeCount> = (0..self.plan.probes.len())
                .map(|i| ProbeCount {
                    calls: calls.get(i).copied().unwrap_or(0),
                    ..ProbeCount::default()
                })
                .collect();
            out.interval(idx * self.interval_ns, flags, threads, &counts)
        };
        if let Err(e) = r {
            warn(&format!("cannot write {}: {e}", out.path().display()));
        }
    }

    fn finish(&mut self, p: ProcAcc, end: u64, reason: u32) {
        if let Some(out) = p.out {
            let end = if end == u64::MAX {
                sys::realtime_ns()
            } else {
                end
            };
            if let Ok(path) = out.finish(end, reason) {
                self.files.push(path);
            }
        }
    }
}

/// The node of a process by the sampler's rules, read from /proc now: a pid rule on it or an
/// ancestor, then its cgroup / network namespace; a process already gone takes its parent's
/// node when its FORK was seen. `None` when it is outside the scope.
fn classify_pid(nodes: &Nodes, pid: u32, parent: &HashMap<u32, u32>) -> Option<NodeIdx> {
    let mut ancestors = Vec::new();
    let mut cur = pid;
    for _ in 0..64 {
        ancestors.push(cur);
        let ppid = crate::procs::ppid(cur).or_else(|| parent.get(&cur).copied());
        match ppid {
            Some(p) if p > 1 && p != cur => cur = p,
            _ => break,
        }
    }
    if let Scope::Pid(root) = nodes.scope() {
        if !ancestors.contains(root) {
            return None;
        }
    }
    let facts = nodes::read_facts(pid, nodes.needs_cgroups(), nodes.needs_netns());
    if let Some(f) = &facts {
        if !nodes.cgroup_scope_matches(f) {
            return None;
        }
    }
    if let Some(n) = ancestors.iter().find_map(|&a| nodes.pid_rule(a)) {
        return Some(n);
    }
    if let Some(n) = facts.as_ref().and_then(|f| nodes.by_facts(f)) {
        return Some(n);
    }
    Some(nodes.fallback())
}
