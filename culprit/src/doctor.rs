//! `culprit doctor`: what this machine allows culprit to do — perf access, hardware vs software
//! events, tracefs, kernel symbol addresses, network namespaces, nftables, cgroup v1 `cpu` and
//! `blkio` controllers, delay accounting, uftrace. The checks are
//! [`culprit_sampler::doctor`]'s; every line says OK or MISSING and, when missing, what to do.
//! Nothing is changed on the machine.

use std::io::Write as _;

use culprit_sampler::doctor::report;

/// Arguments of `culprit doctor`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: 0 when the sampler can run here (perf access), 1 when it \
                        cannot, 2 on error.\n\nExamples:\n  culprit doctor\n  \
                        culprit doctor --json | jq '.checks[] | select(.ok | not)'"
)]
pub struct Args {
    /// Print JSON (schema culprit-doctor/1).
    #[arg(long)]
    pub json: bool,
}

/// Runs `culprit doctor`.
pub fn run(args: Args) -> anyhow::Result<i32> {
    let r = report();
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &r)?;
        writeln!(out)?;
    } else {
        for c in &r.checks {
            let status = if c.ok { "OK     " } else { "MISSING" };
            write!(out, "{status}  {}: {}", c.name, c.detail)?;
            if let Some(fix) = &c.fix {
                write!(out, " — {fix}")?;
            }
            writeln!(out)?;
        }
    }
    Ok(if r.ok { 0 } else { 1 })
}
