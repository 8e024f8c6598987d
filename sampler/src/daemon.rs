//! `culprit sample`'s run as a library: the sampler, and beside it the uprobes counted in every
//! process ([`crate::uprobe::system`]) and the retention of the data directory
//! (`culprit_datadir::retention`), started and ended together; a [`Watchdog`] ends the process
//! should the run not end after a signal or the end of its duration. The command line parses
//! its flags, opens the parts (their plans and errors are its to print), calls [`run`] and says
//! what the run did.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use culprit_datadir::retention::{self, Policy};

use crate::uprobe::system::{SystemProbes, SystemSummary};
use crate::{uprobe, Config, Error, Sampler, Summary};

/// How often retention looks at the data directory during a run.
pub const RETENTION_EVERY: Duration = Duration::from_secs(60);

/// What runs beside the sampler.
#[allow(missing_debug_implementations)] // `Retention` has a closure
pub struct Beside {
    /// Uprobes counted in every process, on a thread of their own.
    pub uprobes: Option<Uprobes>,
    /// Retention of the sampler's data directory.
    pub retention: Option<Retention>,
}

/// Retention of the sampler's data directory beside the run, every [`RETENTION_EVERY`]. It never
/// deletes a file being written (the sampler's own included: its writer runs).
#[allow(missing_debug_implementations)] // `report` is a closure
pub struct Retention {
    /// What to keep (nothing is done when it keeps everything).
    pub policy: Policy,
    /// Where each pass's outcome goes.
    pub report: Box<dyn FnMut(RetentionPass) + Send>,
}

/// One pass of retention beside the run, as `culprit prune` would report it.
pub type RetentionPass = Result<retention::Outcome, retention::Error>;

/// Uprobes opened by the caller ([`SystemProbes::open`]), to count beside the sampler.
#[derive(Debug)]
pub struct Uprobes {
    /// The probes.
    pub probes: SystemProbes,
    /// Most CPU their thread may take, in percent of one CPU.
    pub budget_percent: f64,
    /// Where their warnings go, one line each.
    pub warn: fn(&str),
}

/// How a run ended.
#[derive(Debug)]
pub struct Ended {
    /// The sampler's run.
    pub sampler: Result<Summary, Error>,
    /// The uprobes' thread (`None` without uprobes; `Err` when it panicked).
    pub uprobes: Option<std::thread::Result<Result<SystemSummary, uprobe::Error>>>,
}

/// Runs `sampler` (opened from `cfg`) until `stop` is set or `cfg.duration` passes, with what
/// goes `beside` it; the uprobes end with the sampler, whatever ended it.
pub fn run(sampler: Sampler, cfg: &Config, stop: &'static AtomicBool, beside: Beside) -> Ended {
    let probes: Option<JoinHandle<_>> = beside
        .uprobes
        .map(|u| u.probes.spawn(cfg, u.budget_percent, stop, u.warn));
    let pruner = beside.retention.and_then(|r| {
        r.policy.enabled().then(|| {
            retention::Background::start(
                vec![cfg.data_dir.clone()],
                r.policy,
                RETENTION_EVERY,
                r.report,
            )
        })
    });
    let watchdog = Watchdog::arm(stop, cfg.duration);
    let s = sampler.run(stop);
    drop(watchdog);
    drop(pruner);
    let uprobes = probes.map(|p| {
        // The sampler ended (duration, signal or error): the probes end with it.
        stop.store(true, Ordering::SeqCst);
        p.join()
    });
    Ended {
        sampler: s,
        uprobes,
    }
}

/// How long the run may go without progress after a signal or the end of `--duration`: no
/// beat ([`crate::progress`]) and no [`COMPUTING`] of CPU on the sampler's thread. The sampler
/// ends its run within [`crate::FINISH_BUDGET`] on a host that lets it run, so this is reached
/// only when a thread is stuck where nothing should be (a kernel call that never returns).
/// Not applied while the run gives its perf events back ([`crate::progress::releasing`]: the
/// kernel's grace periods, which an exit would wait for too).
pub const GRACE: Duration = Duration::from_millis(850);

/// CPU time of the sampler's thread that counts as progress, as a beat does: a thread blocked
/// in the kernel takes microseconds (its wake-ups), one that computes (naming every location of
/// a last 10 s interval, a large image among them) takes this within the grace even where the
/// host gives it one percent of a CPU.
pub const COMPUTING: Duration = Duration::from_millis(5);

/// The most a run that keeps making progress may take to end after a signal or the end of
/// `--duration`: on a host so loaded the sampler gets little CPU, ending it slowly (files ended,
/// uprobes and delay accounting put back) is worth more than ending it on the dot.
pub const HARD_CAP: Duration = Duration::from_secs(10);

/// Ends the process should the run not end after a signal or the end of `--duration`: once it
/// has made no progress for [`GRACE`] (stuck), or [`HARD_CAP`] after (slow beyond reason) —
/// unless its files are ended and it is giving its perf events back (see `overdue`).
/// Armed on the thread that runs the sampler, whose CPU time counts as progress.
/// SIGTERM and SIGINT end `culprit sample` within a second on a host that lets it run, and
/// `--duration` is then a deadline, whatever a thread is doing. The files keep what was
/// committed (readers see a writer that stopped); delay accounting is put back as it was.
/// Disarmed when dropped.
#[derive(Debug)]
pub struct Watchdog {
    done: Arc<AtomicBool>,
}

impl Watchdog {
    /// Starts watching `stop` and the `duration` from now.
    pub fn arm(stop: &'static AtomicBool, duration: Option<Duration>) -> Watchdog {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let deadline = duration.map(|t| Instant::now() + t);
        let runner = crate::sys::ThreadClock::current();
        let cpu = move || runner.and_then(|c| c.ns());
        let _ = std::thread::Builder::new()
            .name("culprit-watchdog".into())
            .spawn(move || {
                // It must run when its time comes, on a host however busy.
                crate::priority::raise(crate::priority::WATCHDOG);
                // Polled every 50 ms: the signal handler only sets a flag.
                let why = loop {
                    if d.load(Ordering::SeqCst) {
                        return;
                    }
                    if stop.load(Ordering::SeqCst) {
                        break "the signal";
                    }
                    if deadline.is_some_and(|t| Instant::now() >= t) {
                        break "the end of --duration";
                    }
                    std::thread::sleep(Duration::from_millis(50));
                };
                let from = Instant::now();
                let mut seen = Seen {
                    beats: crate::progress::beats(),
                    cpu: cpu(),
                    at: from,
                };
                let mut said_slow_release = false;
                // Once the release began the files are ended; what follows it is the run's
                // summary, microseconds before this watchdog is disarmed.
                let mut released = false;
                let what = loop {
                    if d.load(Ordering::SeqCst) {
                        return;
                    }
                    let now = Instant::now();
                    seen.note(now, crate::progress::beats(), cpu());
                    released |= crate::progress::is_releasing();
                    if let Some(what) = overdue(now - from, now - seen.at, released) {
                        break what;
                    }
                    if released && now - from >= HARD_CAP && !said_slow_release {
                        said_slow_release = true;
                        eprintln!(
                            "culprit: sample: the files are ended; the kernel is still taking \
                             its perf events back ({} s after {why}: its grace periods on a \
                             busy host), which an exit would wait for too",
                            HARD_CAP.as_secs()
                        );
                    }
                    std::thread::sleep(Duration::from_millis(10));
                };
                eprintln!(
                    "culprit: sample {what} after {why}: exiting now (the data written so far \
                     stays readable; the files have no end marker)"
                );
                eprintln!("culprit: where its threads were: {}", thread_states());
                crate::os::delayacct::restore_now();
                std::process::exit(2);
            });
        Watchdog { done }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
    }
}

/// The last progress the watchdog saw.
#[derive(Debug)]
struct Seen {
    /// Beats then.
    beats: u64,
    /// CPU time of the sampler's thread then, ns (`None`: unknown).
    cpu: Option<u64>,
    /// When.
    at: Instant,
}

impl Seen {
    /// Notes a reading at `now`: progress when the beats moved, or the sampler's thread took
    /// [`COMPUTING`] of CPU since the last progress.
    fn note(&mut self, now: Instant, beats: u64, cpu: Option<u64>) {
        let computed = cpu
            .zip(self.cpu)
            .is_some_and(|(c, then)| c.saturating_sub(then) >= COMPUTING.as_nanos() as u64);
        if beats != self.beats || computed {
            *self = Seen {
                beats,
                cpu,
                at: now,
            };
        }
    }
}

/// Why the watchdog ends the run, `since_stop` after the signal or the end of `--duration` and
/// `since_progress` after its last progress, `releasing` its perf events; `None` while it may
/// go on. A run giving its events back (or done with that) is never ended: its files are ended, and an exit would
/// wait for the kernel's grace periods just the same (and turn a complete run into a failure:
/// beside `stress-ng --cpu 2`, the release of `--layers`' syscall tracepoints once took over
/// 10 s).
fn overdue(since_stop: Duration, since_progress: Duration, releasing: bool) -> Option<String> {
    if releasing {
        return None;
    }
    if since_progress >= GRACE {
        return Some(format!("made no progress for {} ms", GRACE.as_millis()));
    }
    (since_stop >= HARD_CAP).then(|| format!("did not end within {} s", HARD_CAP.as_secs()))
}

/// Each thread of this process as `name (state in kernel function)`, from `/proc/self/task`
/// (`R` running, `S` sleeping, `D` in a kernel call that cannot be interrupted), for the
/// watchdog's last words: which thread held the run up, and where.
fn thread_states() -> String {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return "unknown (/proc/self/task cannot be read)".into();
    };
    let mut out = Vec::new();
    for t in tasks.flatten() {
        let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default();
        let stat = read("stat");
        // The state follows the name, which is in parentheses and may hold any byte.
        let state = stat.rsplit_once(')').map_or("?", |(_, rest)| {
            rest.split_whitespace().next().unwrap_or("?")
        });
        let wchan = read("wchan");
        let at = match wchan.trim() {
            "" | "0" => String::new(),
            w => format!(" in {w}"),
        };
        out.push(format!("{} ({state}{at})", read("comm").trim()));
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn a_run_without_progress_is_ended_after_the_grace() {
        assert_eq!(overdue(MS(300), MS(300), false), None);
        let why = overdue(MS(900), GRACE, false).expect("stuck");
        assert_eq!(why, "made no progress for 850 ms");
    }

    /// Giving the perf events back waits for the kernel's grace periods (more than 850 ms at
    /// times beside `stress-ng --hdd 1`, more than 10 s beside `stress-ng --cpu 2`); an exit
    /// would wait for them too, so neither the grace nor the hard cap applies then. Before the
    /// release, the hard cap does.
    #[test]
    fn releasing_the_events_is_not_called_stuck() {
        assert_eq!(overdue(MS(2_400), MS(1_500), true), None);
        assert_eq!(overdue(HARD_CAP * 3, MS(1_500), true), None);
        assert_eq!(
            overdue(HARD_CAP, MS(10), false).as_deref(),
            Some("did not end within 10 s")
        );
    }

    #[test]
    fn a_beat_or_computing_is_progress_and_waiting_is_not() {
        let t0 = Instant::now();
        let mut seen = Seen {
            beats: 7,
            cpu: Some(1_000_000),
            at: t0,
        };
        // Blocked: a wake-up's microseconds of CPU.
        let t1 = t0 + MS(400);
        seen.note(t1, 7, Some(1_050_000));
        assert_eq!(seen.at, t0);
        // Computing.
        seen.note(t1, 7, Some(1_000_000 + COMPUTING.as_nanos() as u64));
        assert_eq!(seen.at, t1);
        // The thread's CPU time unknown (it ended): only beats count.
        let t2 = t1 + MS(400);
        seen.note(t2, 7, None);
        assert_eq!(seen.at, t1);
        seen.note(t2, 8, None);
        assert_eq!(seen.at, t2);
    }

    #[test]
    fn the_threads_are_named_with_their_state() {
        let s = thread_states();
        // This test's own thread is running while it reads.
        assert!(s.contains("(R"), "{s}");
        assert!(!s.starts_with("unknown"), "{s}");
    }
}
