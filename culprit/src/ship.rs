//! `culprit ship`: a node's records to NATS JetStream. The work is `culprit-ship`'s.

pub use culprit_ship::cli::ShipArgs as Args;

use crate::features::{self, Part};

/// Runs `culprit ship` (until killed, or `--until-ended`). A build without the `ship` feature
/// says so in one line.
pub fn run(args: Args) -> anyhow::Result<i32> {
    features::require(Part::Ship)?;
    culprit_ship::ship::run(&args.config()?)?;
    Ok(0)
}
