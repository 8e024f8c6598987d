//! `culprit report` (work in progress).

/// Arguments of `culprit report`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `culprit report`.
pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`culprit report` is not built yet")
}
