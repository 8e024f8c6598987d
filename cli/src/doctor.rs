//! `culprit doctor` (work in progress).

/// Arguments of `culprit doctor`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `culprit doctor`.
pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`culprit doctor` is not built yet")
}
