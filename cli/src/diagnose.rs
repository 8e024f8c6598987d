//! `culprit train` and `culprit diagnose` (work in progress).

/// Arguments of `culprit train`.
#[derive(Debug, clap::Args)]
pub struct TrainArgs {}

/// Arguments of `culprit diagnose`.
#[derive(Debug, clap::Args)]
pub struct DiagnoseArgs {}

/// Runs `culprit train`.
pub fn run_train(_args: TrainArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`culprit train` is not built yet")
}

/// Runs `culprit diagnose`.
pub fn run_diagnose(_args: DiagnoseArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`culprit diagnose` is not built yet")
}
