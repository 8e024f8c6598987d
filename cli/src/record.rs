//! `culprit record` (work in progress).

/// Arguments of `culprit record`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `culprit record`.
pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`culprit record` is not built yet")
}
