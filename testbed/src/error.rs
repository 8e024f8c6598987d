//! The testbed's error type.

use std::io;

/// What went wrong while building, running or tearing down an emulated cluster.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call or file operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A command (ip, nft, tc, gcc, culprit…) failed.
    #[error("{cmd} failed: {detail}")]
    Command {
        /// The command line.
        cmd: String,
        /// Its exit status and stderr.
        detail: String,
    },
    /// The machine lacks something the testbed needs (a privilege, a tool, a kernel feature).
    #[error("{0}")]
    Missing(String),
    /// Output of a tool could not be understood.
    #[error("cannot parse {0}")]
    Parse(String),
    /// Bad options.
    #[error("{0}")]
    Config(String),
    /// SIGINT/SIGTERM arrived; the run was stopped and torn down.
    #[error("interrupted")]
    Interrupted,
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// The testbed's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
