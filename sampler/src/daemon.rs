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

/// How long the run may go without progress ([`crate::progress`]) after a signal or the end
/// of `--duration`: the sampler ends its run within [`crate::FINISH_BUDGET`] on a host that
/// lets it run, so this is reached only when a thread is stuck where nothing should be (a
/// kernel call that never returns).
pub const GRACE: Duration = Duration::from_millis(850);

/// The most a run that keeps making progress may take to end after a signal or the end of
/// `--duration`: on a host so loaded the sampler gets little CPU, ending it slowly (files ended,
/// uprobes and delay accounting put back) is worth more than ending it on the dot.
pub const HARD_CAP: Duration = Duration::from_secs(10);

/// Ends the process should the run not end after a signal or the end of `--duration`: once it
/// has made no progress for [`GRACE`] (stuck), or [`HARD_CAP`] after (slow beyond reason).
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
                let (mut beats, mut last_beat) = (crate::progress::beats(), from);
                let what = loop {
                    if d.load(Ordering::SeqCst) {
                        return;
                    }
                    let now = Instant::now();
                    let b = crate::progress::beats();
                    if b != beats {
                        (beats, last_beat) = (b, now);
                    }
                    if now - last_beat >= GRACE {
                        break format!("made no progress for {} ms", GRACE.as_millis());
                    }
                    if now - from >= HARD_CAP {
                        break format!("did not end within {} s", HARD_CAP.as_secs());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                };
                eprintln!(
                    "culprit: sample {what} after {why}: exiting now (the data written so far \
                     stays readable; the files have no end marker)"
                );
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
