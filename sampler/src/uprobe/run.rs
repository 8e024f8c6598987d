//! Counting one process's calls through uprobes, one interval at a time, into a trace file:
//! a program started held before `exec` (`culprit record --uprobes -- CMD`) or a process that
//! runs already (`culprit record --attach PID --uprobes …`).
//!
//! Intervals follow the tracer's rules: aligned to multiples of the interval since the Unix
//! epoch, every interval gets a record, the first and the last are flagged PARTIAL.
//!
//! The counters are cumulative, so no call is ever lost between two reads: the loop reads them
//! at every interval boundary (ahead of the load, [`crate::priority`]), and what one read adds
//! to the previous is spread over the intervals between the two reads in proportion to the
//! time of each ([`spread`]): a read a few ms late moves a few ms' worth of calls, one that
//! came seconds late (the loop was stopped) spreads them evenly, and in every case the
//! intervals add up to the exact total. No interval is written MISSED.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use culprit_format::procfs::{self, Proc, Stat};
use std::collections::BTreeMap;

use culprit_format::{end_reason, interval_flags};

use super::cost::{self, Cost};
use super::counters::Counters;
use super::pmu::{Error, Pmu};
use super::target::{self, find_library, Plan, ProbeSpec};
use super::trace::{process_info, ProbeCount, TraceOut};
use crate::procs::{parse_maps, tasks};
use crate::sys;

/// Default budget: a function whose probe would take more than this share of one CPU at the
/// rate it is called is reported.
pub const DEFAULT_BUDGET_PERCENT: f64 = 5.0;
/// The first rate check comes this long after counting starts.
pub const FIRST_CHECK: Duration = Duration::from_millis(250);

/// Warns (once per function) when a probe costs more than a budget of one CPU.
#[derive(Debug)]
pub struct Budget {
    /// Budget, percent of one CPU per function.
    pub percent: f64,
    /// Cost per hit.
    pub cost: Cost,
    warned: Vec<bool>,
}

impl Budget {
    /// A budget of `percent` of one CPU per function, at `cost` per call.
    pub fn new(percent: f64, cost: Cost, probes: usize) -> Budget {
        Budget {
            percent,
            cost,
            warned: vec![false; probes],
        }
    }

    /// Checks the calls counted over `secs` seconds (per probe, plan order); returns a warning
    /// for each function newly over the budget.
    pub fn check(&mut self, plan: &Plan, calls: &[u64], secs: f64, time: bool) -> Vec<String> {
        let mut out = Vec::new();
        if secs <= 0.0 {
            return out;
        }
        for (i, (&n, p)) in calls.iter().zip(&plan.probes).enumerate() {
            let per_call =
                self.cost.entry_for(&p.entry_bytes) + if time { self.cost.return_ns } else { 0.0 };
            let rate = n as f64 / secs;
            let share = cost::cpu_share(rate, per_call) * 100.0;
            if share > self.percent && !self.warned[i] {
                self.warned[i] = true;
                out.push(format!(
                    "{} ({}) is called {:.0} times/s: at {:.1} µs per probe hit that is {:.0} % \
                     of a CPU, over the {} % budget; its calls are slowed that much (drop it \
                     from the patterns, or rebuild with -finstrument-functions)",
                    p.name,
                    cost::image_name(&plan.images[p.image]),
                    rate,
                    per_call / 1000.0,
                    share,
                    self.percent
                ));
            }
        }
        out
    }
}

/// How to run.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Data root: the file goes to `DATA/<node>/`.
    pub data_dir: PathBuf,
    /// Node name.
    pub node: String,
    /// Interval, ns.
    pub interval_ns: u64,
    /// Stop (detach) after counting this long.
    pub duration: Option<Duration>,
    /// Budget, percent of one CPU per function.
    pub budget_percent: f64,
}

/// What a run did.
#[derive(Clone, Debug)]
pub struct RunSummary {
    /// The file written.
    pub path: PathBuf,
    /// Intervals written.
    pub intervals: u64,
    /// Calls counted per probe over the run (plan order).
    pub calls: Vec<u64>,
    /// The end reason written ([`end_reason`]).
    pub end: u32,
}

/// Probes opened on one process, ready to count.
#[derive(Debug)]
pub struct Session {
    pid: u32,
    /// The attached process's start time: its pid reused is the process gone.
    start_ns: Option<u64>,
    plan: Plan,
    counters: Counters,
    cost: Cost,
    cost_note: Option<String>,
    main: Option<usize>,
    enabled: bool,
}

impl Session {
    /// Opens the probes on a child held before `exec`ing `exe`: they are enabled by the
    /// `exec` itself, so every call of the new program is counted and none of the child's
    /// before it. A spec without a binary names `exe`; a library name is looked up the way
    /// the loader would.
    pub fn for_held_child(pid: u32, exe: &Path, specs: &[ProbeSpec]) -> Result<Session, Error> {
        let pmu = Pmu::detect()?;
        let exe = exe.canonicalize().unwrap_or_else(|_| exe.to_path_buf());
        let plan = target::plan(specs, |img| {
            let p = match img {
                None => exe.clone(),
                Some(n) if n.contains('/') => PathBuf::from(n),
                Some(n) if exe.file_name().is_some_and(|b| b.to_string_lossy() == n) => exe.clone(),
                Some(n) => find_library(n, Some(&exe)).ok_or_else(|| {
                    format!(
                        "{n}: no such library where {} would find it (give its path)",
                        exe.display()
                    )
                })?,
            };
            let p = p
                .canonicalize()
                .map_err(|e| format!("{}: {e}", p.display()))?;
            Ok((p.clone(), p))
        })
        .map_err(Error::Plan)?;
        let main = plan.images.iter().position(|i| i.path == exe);
        let counters = Counters::for_task(&plan, pid, true)?;
        let (cost, cost_note) = cost::calibrate_or_fallback(&pmu);
        Ok(Session {
            pid,
            start_ns: None,
            plan,
            counters,
            cost,
            cost_note,
            main,
            enabled: true,
        })
    }

    /// Opens the probes on every thread of running process `pid`. Binaries are found among its
    /// mappings (a spec without a binary names its executable; a name matches a mapped file's
    /// base name, with or without its version suffix) and probed through
    /// `/proc/<pid>/map_files/`, so a binary replaced on disk since it started, or one in
    /// another mount namespace, is still the one probed.
    pub fn attach(pid: u32, specs: &[ProbeSpec]) -> Result<Session, Error> {
        let start_ns = procfs::start_ns(Proc::Pid(pid));
        let pmu = Pmu::detect()?;
        let maps_text = std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .map_err(|_| Error::NoProcess(pid))?;
        let maps = parse_maps(&maps_text);
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .map_err(|_| Error::NoProcess(pid))?
            .to_string_lossy()
            .trim_end_matches(" (deleted)")
            .to_string();
        let mapped = |path: &str| -> Option<(PathBuf, PathBuf)> {
            let m = maps
                .iter()
                .find(|m| m.path.trim_end_matches(" (deleted)") == path)?;
            Some((
                PathBuf::from(path),
                PathBuf::from(format!("/proc/{pid}/map_files/{:x}-{:x}", m.start, m.end)),
            ))
        };
        let plan = target::plan(specs, |img| {
            let want = img.unwrap_or(&exe);
            let mut names: Vec<&str> = maps
                .iter()
                .map(|m| m.path.trim_end_matches(" (deleted)"))
                .filter(|p| p.starts_with('/'))
                .filter(|p| {
                    *p == want || {
                        let base = Path::new(p)
                            .file_name()
                            .map(|b| b.to_string_lossy().into_owned())
                            .unwrap_or_default();
                        base == want
                            || (base.starts_with(want)
                                && matches!(base.as_bytes().get(want.len()), Some(b'.' | b'-')))
                    }
                })
                .collect();
            names.sort_unstable();
            names.dedup();
            match names.as_slice() {
                [one] => mapped(one).ok_or_else(|| format!("{one}: not mapped")),
                [] => Err(format!(
                    "{want} is not mapped in process {pid} (see /proc/{pid}/maps; a library it \
                     loads later with dlopen cannot be probed before it is loaded)"
                )),
                many => Err(format!(
                    "{want} matches several binaries mapped in process {pid}: {}; give the \
                     path",
                    many.join(", ")
                )),
            }
        })
        .map_err(Error::Plan)?;
        let main = plan.images.iter().position(|i| i.path == Path::new(&exe));
        let counters = Counters::for_process(&plan, pid)?;
        let (cost, cost_note) = cost::calibrate_or_fallback(&pmu);
        Ok(Session {
            pid,
            start_ns,
            plan,
            counters,
            cost,
            cost_note,
            main,
            enabled: false,
        })
    }

    /// What is probed and what could not be.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The cost per hit in use.
    pub fn cost(&self) -> Cost {
        self.cost
    }

    /// Why the cost could not be measured here, when it could not.
    pub fn cost_note(&self) -> Option<&str> {
        self.cost_note.as_deref()
    }

    /// Events open (functions × threads).
    pub fn events(&self) -> usize {
        self.counters.events()
    }

    /// Counts on the process [attached](Session::attach) to until it exits, SIGINT or SIGTERM
    /// ([`crate::stop_on_signals`]) or `cfg.duration`; dropping the session then detaches,
    /// leaving the process running as before.
    pub fn run_attached(
        self,
        cfg: &RunConfig,
        warn: &mut dyn FnMut(&str),
    ) -> Result<RunSummary, Error> {
        let (pid, start_ns) = (self.pid, self.start_ns);
        let gone = move || process_gone(pid, start_ns);
        self.run(cfg, crate::stop_on_signals(), &gone, warn)
    }

    /// Counts until the process exits (`exited` returns true), `stop` is set, or
    /// after `cfg.duration`; writes one record per interval and the end marker. Warnings (functions
    /// over the budget) go to `warn` as they are found. Dropping the session afterwards
    /// removes the probes.
    pub fn run(
        mut self,
        cfg: &RunConfig,
        stop: &AtomicBool,
        exited: &dyn Fn() -> bool,
        warn: &mut dyn FnMut(&str),
    ) -> Result<RunSummary, Error> {
        let io = |what: &str| {
            let what = what.to_string();
            move |source| Error::Io { what, source }
        };
        let start_ns = sys::realtime_ns();
        let until_ns = cfg.duration.map(|d| start_ns + d.as_nanos() as u64);
        if !self.enabled {
            self.counters.enable()?;
            self.enabled = true;
        }
        let info = process_info(&cfg.node, self.pid, cfg.interval_ns, &self.plan, false);
        let dir = cfg.data_dir.join(&cfg.node);
        let mut out = TraceOut::create(
            &cfg.data_dir,
            &cfg.node,
            self.pid,
            start_ns,
            cfg.interval_ns,
            &info,
            &self.plan,
            self.main,
        )
        .map_err(io(&format!("create a trace file in {}", dir.display())))?;
        let mut budget = Budget::new(cfg.budget_percent, self.cost, self.plan.probes.len());
        // The counting loop is short work every interval: ahead of the load, capped.
        let _raised = crate::priority::raise_scoped(crate::priority::UPROBE_READER);
        let i = cfg.interval_ns;
        let mut open_start = start_ns / i * i;
        let n = self.plan.probes.len();
        // The counters were zero when enabled, at `start_ns`.
        let (mut prev, mut prev_ns) = (vec![0u64; n], start_ns);
        let mut pending: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        let mut totals = vec![0u64; n];
        let mut first_check = Some(start_ns + FIRST_CHECK.as_nanos() as u64);
        let threads = |pid: u32| tasks(pid).len() as u32;
        let counts = |d: &[u64]| -> Vec<ProbeCount> {
            d.iter()
                .map(|&calls| ProbeCount {
                    calls,
                    ..ProbeCount::default()
                })
                .collect()
        };
        // Reads the counters at `now` and spreads what they added over the intervals since
        // the previous read.
        let mut read = |now: u64, pending: &mut BTreeMap<u64, Vec<u64>>| {
            let cur = self.counters.read();
            let d: Vec<u64> = cur
                .iter()
                .zip(&prev)
                .map(|(c, p)| c.saturating_sub(*p))
                .collect();
            for (start, part) in spread(prev_ns, now, i, &d) {
                let slot = pending.entry(start).or_insert_with(|| vec![0; n]);
                for (s, x) in slot.iter_mut().zip(part) {
                    *s += x;
                }
            }
            (prev, prev_ns) = (cur, now.max(prev_ns));
        };
        loop {
            let now = sys::realtime_ns();
            if now >= open_start + i {
                read(now, &mut pending);
                // Every interval that ended by now is complete.
                while open_start + i <= now {
                    let d = pending.remove(&open_start).unwrap_or_else(|| vec![0; n]);
                    let observed = open_start.max(start_ns);
                    let flags = if observed > open_start {
                        interval_flags::PARTIAL
                    } else {
                        0
                    };
                    out.interval(open_start, flags, threads(self.pid), &counts(&d))
                        .map_err(io("write an interval"))?;
                    for (t, x) in totals.iter_mut().zip(&d) {
                        *t += x;
                    }
                    let secs = (open_start + i - observed) as f64 / 1e9;
                    for w in budget.check(&self.plan, &d, secs, false) {
                        warn(&w);
                    }
                    open_start += i;
                }
                continue;
            }
            if first_check.is_some_and(|t| now >= t) {
                first_check = None;
                let cur = self.counters.read();
                let secs = (now - start_ns) as f64 / 1e9;
                for w in budget.check(&self.plan, &cur, secs, false) {
                    warn(&w);
                }
            }
            let end = if exited() {
                Some(end_reason::EXIT)
            } else if stop.load(Ordering::SeqCst) {
                Some(end_reason::SIGNAL)
            } else if until_ns.is_some_and(|u| now >= u) {
                Some(end_reason::DONE)
            } else {
                None
            };
            if let Some(reason) = end {
                read(now, &mut pending);
                // The interval in progress (and any a late read reached into) is the last.
                let d =
                    pending
                        .split_off(&open_start)
                        .into_values()
                        .fold(vec![0u64; n], |mut a, p| {
                            for (s, x) in a.iter_mut().zip(p) {
                                *s += x;
                            }
                            a
                        });
                let secs = now.saturating_sub(open_start.max(start_ns)) as f64 / 1e9;
                if secs > 0.01 {
                    for w in budget.check(&self.plan, &d, secs, false) {
                        warn(&w);
                    }
                }
                for (t, x) in totals.iter_mut().zip(&d) {
                    *t += x;
                }
                out.interval(
                    open_start,
                    interval_flags::PARTIAL,
                    threads(self.pid),
                    &counts(&d),
                )
                .map_err(io("write an interval"))?;
                self.counters.disable();
                let intervals = out.intervals();
                let path = out
                    .finish(sys::realtime_ns(), reason)
                    .map_err(io("end the trace file"))?;
                return Ok(RunSummary {
                    path,
                    intervals,
                    calls: totals,
                    end: reason,
                });
            }
            let mut wait = (open_start + i).saturating_sub(now).min(50_000_000);
            if let Some(t) = first_check {
                wait = wait.min(t.saturating_sub(now));
            }
            if let Some(u) = until_ns {
                wait = wait.min(u.saturating_sub(now));
            }
            std::thread::sleep(Duration::from_nanos(wait.max(1_000_000)));
        }
    }
}

/// Splits `counts`, the calls counted between the reads at `from` and `to` (wall ns), over the
/// intervals of `interval_ns` the span covers, in proportion to the span's time in each:
/// `(interval start, calls per probe)`, oldest first. The parts add up to `counts` exactly
/// (cumulative rounding). A span of no time (the clock stepped back) goes whole to the
/// interval of `to`.
pub fn spread(from: u64, to: u64, interval_ns: u64, counts: &[u64]) -> Vec<(u64, Vec<u64>)> {
    let i = interval_ns.max(1);
    if to <= from {
        return vec![(to / i * i, counts.to_vec())];
    }
    let span = u128::from(to - from);
    let mut out = Vec::new();
    let mut t = from;
    let mut given = vec![0u64; counts.len()];
    while t < to {
        let end = ((t / i + 1) * i).min(to);
        let upto = u128::from(end - from);
        let part: Vec<u64> = counts
            .iter()
            .zip(&mut given)
            .map(|(&c, g)| {
                // Calls of the span up to `end`, rounded; this interval's are what is new.
                let cum = ((u128::from(c) * upto + span / 2) / span) as u64;
                let p = cum - *g;
                *g = cum;
                p
            })
            .collect();
        out.push((t / i * i, part));
        t = end;
    }
    out
}

/// True when process `pid` that started at `start_ns` (wall ns, from
/// [`procfs::start_ns`]) has exited: gone, a zombie, or a new process under the same pid.
pub fn process_gone(pid: u32, start_ns: Option<u64>) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    if Stat::parse(&stat).is_none_or(|s| matches!(s.state, b'Z' | b'X' | b'x')) {
        return true;
    }
    match (start_ns, procfs::start_ns(Proc::Pid(pid))) {
        (Some(a), Some(b)) => a.abs_diff(b) > 20_000_000,
        _ => false,
    }
}

/// Wall-clock now, ns since the Unix epoch (the clock intervals are aligned to).
pub fn now_ns() -> u64 {
    sys::realtime_ns()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn a_read_on_time_goes_to_its_interval() {
        assert_eq!(
            spread(10 * S, 11 * S, S, &[7, 0]),
            vec![(10 * S, vec![7, 0])]
        );
    }

    #[test]
    fn a_late_read_is_spread_by_time_and_adds_up() {
        // The previous read at 10.5 s, this one at 13.25 s: 0.5 + 1 + 1 + 0.25 s.
        let parts = spread(10 * S + S / 2, 13 * S + S / 4, S, &[1_100, 3]);
        let starts: Vec<u64> = parts.iter().map(|p| p.0).collect();
        assert_eq!(starts, vec![10 * S, 11 * S, 12 * S, 13 * S]);
        let first: Vec<u64> = parts.iter().map(|p| p.1[0]).collect();
        assert_eq!(first, vec![200, 400, 400, 100]);
        for probe in 0..2 {
            let sum: u64 = parts.iter().map(|p| p.1[probe]).sum();
            assert_eq!(sum, [1_100, 3][probe], "probe {probe}: {parts:?}");
        }
    }

    #[test]
    fn a_clock_step_back_keeps_every_call() {
        assert_eq!(spread(12 * S, 11 * S, S, &[5]), vec![(11 * S, vec![5])]);
    }
}
