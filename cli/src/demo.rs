//! `culprit demo` (work in progress).

/// Arguments of `culprit demo`.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs `culprit demo`.
pub fn run(_args: Args) -> anyhow::Result<i32> {
    anyhow::bail!("`culprit demo` is not built yet")
}
