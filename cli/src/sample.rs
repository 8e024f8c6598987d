//! `culprit sample` (work in progress).

/// Arguments of `culprit sample`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `culprit sample`.
pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`culprit sample` is not built yet")
}
