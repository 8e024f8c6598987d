//! The analysis' error type.
//!
//! Messages are complete sentences for people (`culprit: error: …` prints them with their
//! causes); a variant says what kind of problem it is, so that a caller can react to it.

use std::io;

/// Why an analysis could not be done.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The data cannot be analysed as asked: too few nodes, nodes sampled differently, nothing
    /// to compare, no data where data was expected.
    #[error("{0}")]
    Data(String),
    /// Settings are invalid, or contradict the thresholds file.
    #[error("{0}")]
    Settings(String),
    /// A thresholds file cannot be used with this data or these settings.
    #[error("{0}")]
    Thresholds(String),
    /// A file or directory could not be read or written.
    #[error("{what}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A JSON document (thresholds file, report) is malformed.
    #[error("{what}")]
    Json {
        /// Which document, and what it should be.
        what: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// A record does not fit the analysis (misaligned interval, bad value).
    #[error("{what}")]
    Record {
        /// Which file and record.
        what: String,
        /// Why it was refused.
        #[source]
        source: crate::analyzer::PushError,
    },
    /// Writing output (a progress callback) failed.
    #[error("cannot write output")]
    Output(#[source] io::Error),
    /// Another error, with what was being done when it happened.
    #[error("{what}")]
    Context {
        /// What was being done (`training run DATA`).
        what: String,
        /// The error.
        #[source]
        source: Box<Error>,
    },
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn context(self, what: impl Into<String>) -> Self {
        Error::Context {
            what: what.into(),
            source: Box::new(self),
        }
    }
}

/// The analysis' result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
