//! What went wrong, for the command line to print.

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Bad options (an address, a name, missing credentials).
    #[error("{0}")]
    Usage(String),
    /// The broker refused or could not be reached.
    #[error("{0}")]
    Broker(String),
    /// A message from the stream that is not written (hostile or damaged).
    #[error("{0}")]
    Hostile(String),
    /// Reading or writing local files.
    #[error("{0}")]
    Io(String),
    /// The mirror holds as many bytes as it may: mirroring stops (the messages stay on the
    /// stream for a follower restarted with room).
    #[error("{0}")]
    MirrorFull(String),
    /// This build has no NATS client (the crate's `nats` feature is off): nothing can be sent
    /// or followed. culprit's command line says how to get one before it comes to this.
    #[error("this build of culprit-ship has no NATS client (its `nats` feature)")]
    WithoutNats,
    /// The data directory or the mirror refused a name or a file.
    #[error(transparent)]
    Dir(#[from] culprit_datadir::Error),
}
