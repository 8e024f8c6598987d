//! The lab's verbs, `culprit demo` and `culprit experiment` (culprit-testbed: an emulated
//! cluster with real faults). They are linked only when `culprit` is built with the `lab`
//! feature; without it they say how to get them and exit with status 2.

#[cfg(feature = "lab")]
pub use culprit_testbed::verbs::{DemoArgs, ExperimentArgs};

/// Runs `culprit demo`.
#[cfg(feature = "lab")]
pub fn demo(args: DemoArgs) -> anyhow::Result<i32> {
    Ok(culprit_testbed::verbs::demo(args)?)
}

/// Runs `culprit experiment`.
#[cfg(feature = "lab")]
pub fn experiment(args: ExperimentArgs) -> anyhow::Result<i32> {
    Ok(culprit_testbed::verbs::experiment(args)?)
}

/// Options of a lab verb in a build without the lab: taken as they come, not used.
#[cfg(not(feature = "lab"))]
#[derive(Debug, clap::Args)]
#[command(disable_help_flag = true)]
pub struct LabArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    args: Vec<std::ffi::OsString>,
}

/// `culprit demo`'s options (not in this build).
#[cfg(not(feature = "lab"))]
pub type DemoArgs = LabArgs;
/// `culprit experiment`'s options (not in this build).
#[cfg(not(feature = "lab"))]
pub type ExperimentArgs = LabArgs;

/// Runs `culprit demo`: not in this build (one line, exit status 2).
#[cfg(not(feature = "lab"))]
pub fn demo(_args: DemoArgs) -> anyhow::Result<i32> {
    Err(crate::features::missing(crate::features::Part::Lab))
}

/// Runs `culprit experiment`: not in this build (one line, exit status 2).
#[cfg(not(feature = "lab"))]
pub fn experiment(_args: ExperimentArgs) -> anyhow::Result<i32> {
    Err(crate::features::missing(crate::features::Part::Lab))
}
