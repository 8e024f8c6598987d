//! `culprit ship`: a node's records to NATS JetStream. The work is `culprit-ship`'s.

pub use culprit_ship::cli::ShipArgs as Args;

/// Runs `culprit ship` (until killed, or `--until-ended`).
pub fn run(args: Args) -> anyhow::Result<i32> {
    culprit_ship::ship::run(&args.config()?)?;
    Ok(0)
}
