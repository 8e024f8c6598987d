//! The exports' error type: complete sentences for people (`culprit: error: …`), a variant per
//! kind of problem.

use std::io;
use std::path::{Path, PathBuf};

/// Why an export could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The request cannot be done as asked (a filter that does not parse, an option the format
    /// does not take, an output the format cannot go to).
    #[error("{0}")]
    Usage(String),
    /// Loading the data failed.
    #[error(transparent)]
    Data(#[from] culprit_analysis::Error),
    /// The `--diagnosis` file is not a culprit diagnosis.
    #[error("{path}: not a culprit diagnosis report (culprit diagnose --json)")]
    Diagnosis {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        #[source]
        source: serde_json::Error,
    },
    /// Reading or writing a file failed.
    #[error("{what} {}", path.display())]
    Io {
        /// What was being done (`cannot write`).
        what: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Writing to standard output failed (a closed pipe is one).
    #[error("cannot write the output")]
    Output(#[source] io::Error),
    /// The Parquet writer refused.
    #[cfg(feature = "parquet")]
    #[error("cannot write Parquet file {}", path.display())]
    Parquet {
        /// The file.
        path: PathBuf,
        /// The writer's error.
        #[source]
        source: parquet::errors::ParquetError,
    },
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An I/O error on `path`.
    pub(crate) fn io(what: &'static str, path: &Path, source: io::Error) -> Self {
        Error::Io {
            what,
            path: path.to_path_buf(),
            source,
        }
    }
}
