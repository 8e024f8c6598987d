//! `culprit prune`: the flags, and the lines saying what retention
//! (`culprit_datadir::retention`) deleted. `culprit sample --keep / --max-size` runs the same
//! pass every minute (`culprit_sampler::daemon`, with [`report`] saying what it deleted); the
//! package's `culprit-prune.timer` runs the verb.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use culprit_datadir::retention::{self, Outcome, Policy, Reason};
use culprit_format::rotation;

/// Arguments of `culprit prune`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    culprit prune /var/lib/culprit --keep 7d\n  \
    culprit prune DATA --max-size 5G --dry-run\n\n\
    Deletes the oldest finished data files (a process's rotated pieces, ended runs) first; \
    a file still being written (its process runs) is never deleted. Prints one line per file \
    deleted and a summary. Exit status 0, or 2 on an error.")]
pub struct Args {
    /// Data directories: a data root (holding `<node>/`) or one node's directory.
    #[arg(required = true, value_name = "DATA")]
    pub data: Vec<PathBuf>,
    /// Delete finished files last written longer ago than this (e.g. 7d, 12h).
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub keep: Option<Duration>,
    /// Delete the oldest finished files until the data take at most this much disk (e.g. 5G,
    /// 500M).
    #[arg(long, value_name = "SIZE", value_parser = rotation::parse_size)]
    pub max_size: Option<u64>,
    /// Say what would be deleted, delete nothing: the real run's checks are made, so the
    /// files listed are exactly those it deletes and its errors are shown (exit 2).
    #[arg(long)]
    pub dry_run: bool,
    /// Print only the summary, and only when something was deleted (errors always).
    #[arg(short, long)]
    pub quiet: bool,
}

/// `--keep`'s syntax (`rotation::parse_duration_ns`).
pub fn parse_age(s: &str) -> Result<Duration, String> {
    rotation::parse_duration_ns(s).map(Duration::from_nanos)
}

/// One line per file deleted (unless `quiet`), one per failure, and a summary (unless `quiet`
/// and nothing was deleted), to `w`.
fn render(
    out: &Outcome,
    dry_run: bool,
    quiet: bool,
    w: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    let verb = if dry_run { "would delete" } else { "deleted" };
    if !quiet {
        for d in &out.deleted {
            let why = match d.reason {
                Reason::Age => "older than --keep",
                Reason::Size => "beyond --max-size",
            };
            let (path, bytes) = (d.entry.path.display(), human_bytes(d.entry.bytes));
            writeln!(w, "culprit: {verb} {path} ({bytes}, {why})")?;
        }
    }
    for f in &out.failed {
        // The error's whole chain, as the command line prints errors (`{:#}`).
        writeln!(
            w,
            "culprit: error: cannot delete {}: {}",
            f.path.display(),
            chain(&f.error)
        )?;
    }
    let freed: u64 = out.deleted.iter().map(|d| d.entry.bytes).sum();
    if !quiet || !out.deleted.is_empty() {
        let plural = |n: usize| if n == 1 { "" } else { "s" };
        writeln!(
            w,
            "culprit: {verb} {} file{} ({}); kept {} file{} ({})",
            out.deleted.len(),
            plural(out.deleted.len()),
            human_bytes(freed),
            out.kept,
            plural(out.kept),
            human_bytes(out.kept_bytes)
        )?;
    }
    Ok(())
}

/// An error and its sources, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(&format!(": {c}"));
        cur = c.source();
    }
    s
}

fn human_bytes(b: u64) -> String {
    let f = b as f64;
    if f >= 1e9 {
        format!("{:.2} GB", f / 1e9)
    } else if f >= 1e6 {
        format!("{:.1} MB", f / 1e6)
    } else if f >= 1e3 {
        format!("{:.1} kB", f / 1e3)
    } else {
        format!("{b} B")
    }
}

/// Runs `culprit prune`.
pub fn run(a: Args) -> anyhow::Result<i32> {
    let policy = Policy {
        keep: a.keep,
        max_bytes: a.max_size,
    };
    if !policy.enabled() {
        anyhow::bail!("give --keep AGE and/or --max-size SIZE (nothing to prune by)");
    }
    let o = retention::pass(&a.data, &policy, a.dry_run)?;
    render(&o, a.dry_run, a.quiet, &mut std::io::stdout().lock())?;
    // A file that could not be deleted is an error: the crate's exit status 2.
    Ok(if o.failed.is_empty() { 0 } else { 2 })
}

/// What `culprit sample` does with each pass of retention beside it: the deletions and
/// failures as `culprit prune` prints them, nothing when there were none.
pub fn report(quiet: bool) -> impl FnMut(Result<Outcome, retention::Error>) + Send + 'static {
    move |r| match r {
        Ok(o) if o.deleted.is_empty() && o.failed.is_empty() => {}
        Ok(o) => {
            let mut buf = Vec::new();
            let _ = render(&o, false, quiet, &mut buf);
            let _ = std::io::stderr().write_all(&buf);
        }
        Err(e) => eprintln!("culprit: warning: pruning: {}", chain(&e)),
    }
}
