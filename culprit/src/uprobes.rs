//! `culprit record --uprobes`: call counts of a binary that was not built with
//! `-finstrument-functions`, through perf_event uprobes (library: `culprit_sampler::uprobe`).
//!
//! Two ways in: `record --uprobes PATTERN… -- CMD` forks the program held before `exec`, opens
//! the probes on it (enabled by the `exec`), then lets it run; `record --attach PID --uprobes
//! PATTERN…` opens them on every thread of a running process and closes them at `--duration`,
//! on Ctrl-C, or when the process exits, leaving it running as before. `culprit sample
//! --uprobes BINARY:PATTERN…` counts them in every process beside the samples.

use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context as _};
use culprit_sampler::launch::{self, runtime::node_or_default};
use culprit_sampler::uprobe::run::{RunConfig, RunSummary, Session};
use culprit_sampler::uprobe::system::{ring_pages, SystemProbes, SystemSummary};
use culprit_sampler::uprobe::{Error, Plan, ProbeSpec};

use crate::record::{check_node, data_dir, Args};

/// Says what a probe hit costs here, on stderr.
fn print_cost(c: culprit_sampler::uprobe::cost::Cost, note: Option<&str>) {
    let how = match note {
        None => "measured here".to_string(),
        Some(why) => format!("default figures: not measured here, {why}"),
    };
    eprintln!(
        "culprit: a probe hit costs {:.1} µs of CPU ({:.1} µs where the function starts with a \
         push; {how})",
        c.entry_ns / 1000.0,
        c.entry_emulated_ns / 1000.0
    );
}

/// Says what is probed and what is not, on stderr.
pub fn print_plan(plan: &Plan, events: usize, what: &str) {
    let images: Vec<String> = plan
        .images
        .iter()
        .map(|i| i.path.display().to_string())
        .collect();
    eprintln!(
        "culprit: {what}: {} function(s) in {} ({events} perf events)",
        plan.probes.len(),
        images.join(", ")
    );
    for n in plan.notes() {
        eprintln!("culprit: warning: {n}");
    }
}

fn interval_ns(a: &Args) -> anyhow::Result<u64> {
    let ms = a.interval.unwrap_or(1000);
    if !(10..=3_600_000).contains(&ms) {
        bail!("--interval {ms}: give milliseconds between 10 and 3600000");
    }
    Ok(ms * 1_000_000)
}

/// Runs `culprit record --uprobes …` (with CMD or `--attach`).
pub fn record(a: Args) -> anyhow::Result<i32> {
    let specs = ProbeSpec::parse_all(&a.uprobes).map_err(anyhow::Error::msg)?;
    if a.uprobe_budget.is_nan() || a.uprobe_budget <= 0.0 {
        bail!("--uprobe-budget must be a positive percentage");
    }
    let data_dir = data_dir(a.output.clone())?;
    check_node(a.node.as_deref())?;
    let cfg = RunConfig {
        data_dir,
        node: node_or_default(a.node.as_deref()),
        interval_ns: interval_ns(&a)?,
        duration: None,
        budget_percent: a.uprobe_budget,
    };
    match a.attach {
        Some(pid) => attach(pid, &specs, cfg, a.duration.as_deref()),
        None => spawn(&a.command, &specs, cfg),
    }
}

/// A warning of the counting, on stderr.
pub fn warn_line(w: &str) {
    eprintln!("culprit: warning: {w}");
}

fn summarize(s: &RunSummary, plan: &Plan) {
    let total: u64 = s.calls.iter().sum();
    eprintln!(
        "culprit: {total} call(s) of {} function(s) counted in {} interval(s) → {}",
        plan.probes.len(),
        s.intervals,
        s.path.display()
    );
}

fn attach(
    pid: u32,
    specs: &[ProbeSpec],
    mut cfg: RunConfig,
    duration: Option<&str>,
) -> anyhow::Result<i32> {
    if let Some(d) = duration {
        let ns = culprit_analysis::time::parse_duration(d)?;
        cfg.duration = Some(std::time::Duration::from_nanos(ns));
    }
    let session =
        Session::attach(pid, specs).with_context(|| format!("cannot attach to process {pid}"))?;
    print_plan(
        session.plan(),
        session.events(),
        &format!("attached to {pid}"),
    );
    if let Some(why) = session.cost_note() {
        eprintln!("culprit: note: probe cost not measured here ({why}); using the default");
    }
    let plan = session.plan().clone();
    let s = session.run_attached(&cfg, &mut warn_line)?;
    summarize(&s, &plan);
    if s.end != culprit_format::end_reason::EXIT {
        eprintln!("culprit: detached from process {pid}; it runs on");
    }
    Ok(0)
}

/// `record --uprobes -- CMD`: the probes are placed while the program is held before `exec`
/// ([`launch::observe`]); Ctrl-C and SIGTERM go to the program, counting ends when it exits.
fn spawn(
    command: &[std::ffi::OsString],
    specs: &[ProbeSpec],
    cfg: RunConfig,
) -> anyhow::Result<i32> {
    let (path, cmd) = launch::command(command)?;
    let open = |pid| -> anyhow::Result<_> {
        let session =
            Session::for_held_child(pid, &path, specs).context("cannot place the uprobes")?;
        print_plan(session.plan(), session.events(), "counting with uprobes");
        print_cost(session.cost(), session.cost_note());
        Ok(session)
    };
    let watch = |session: Session, exited: &AtomicBool| {
        let plan = session.plan().clone();
        let gone = || exited.load(Ordering::SeqCst);
        (
            session.run(&cfg, &AtomicBool::new(false), &gone, &mut warn_line),
            plan,
        )
    };
    let name = path.display().to_string();
    let (status, (result, plan)) = launch::observe(cmd, &name, open, watch)?;
    match result {
        Ok(s) => summarize(&s, &plan),
        Err(e) => eprintln!("culprit: warning: counting stopped early: {e}"),
    }
    Ok(status)
}

/// `sample --uprobes`: opens the system-wide probes (before the sampler, so a bad pattern is
/// an error before anything runs). `None` when no pattern is given.
pub fn open_system(
    values: &[String],
    cfg: &culprit_sampler::Config,
    quiet: bool,
) -> anyhow::Result<Option<SystemProbes>> {
    if values.is_empty() {
        return Ok(None);
    }
    let specs = ProbeSpec::parse_all(values).map_err(anyhow::Error::msg)?;
    let probes = SystemProbes::open(&specs, ring_pages(cfg.ring_pages))
        .context("cannot place the uprobes")?;
    if !quiet {
        print_plan(probes.plan(), probes.events(), "uprobes, every process");
        print_cost(probes.cost(), probes.cost_note());
    }
    Ok(Some(probes))
}

/// Says what the probes' thread did (its join's result).
pub fn say_system(joined: std::thread::Result<Result<SystemSummary, Error>>, quiet: bool) {
    match joined {
        Ok(Ok(s)) if !quiet => eprintln!(
            "culprit: uprobes: {} hit(s) ({} lost) in {} process file(s)",
            s.hits,
            s.lost,
            s.files.len()
        ),
        Ok(Ok(_)) => {}
        Ok(Err(e)) => eprintln!(
            "culprit: warning: uprobe counting stopped: {:#}",
            anyhow::Error::new(e)
        ),
        Err(_) => eprintln!("culprit: warning: the uprobe thread panicked"),
    }
}
