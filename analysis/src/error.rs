//! The analysis' error type.
//!
//! Messages are complete sentences for people (`culprit: error: …` prints them with their
//! causes); a variant says what kind of problem it is, so that a caller can react to it.

use std::io;

use crate::model::CompIdx;

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
        source: PushError,
    },
    /// Too few windows could be compared for any node to be found faulty: no verdict.
    #[error(
        "not enough data ({needed} windows needed, {complete} complete): windows are {windows}; \
         record for longer, or diagnose with shorter windows (--win-size, --win-shift)"
    )]
    NotEnoughData {
        /// Windows a verdict needs (k of the k-of-(2k − 1) filter).
        needed: usize,
        /// Windows with enough nodes with complete data, in the best-covered metric.
        complete: u64,
        /// The window settings, for people (`60 s every 30 s`).
        windows: String,
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

/// Why an interval was refused.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum PushError {
    /// Interval length or start does not fit the windows.
    Misaligned {
        /// Interval start.
        start_ns: u64,
        /// Interval length.
        dur_ns: u64,
    },
    /// A value is negative or not finite.
    BadValue(f64),
    /// A component index was never registered.
    UnknownComponent(CompIdx),
}

impl std::fmt::Display for PushError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PushError::Misaligned { start_ns, dur_ns } => write!(
                f,
                "interval of {dur_ns} ns at {start_ns} does not fit the windows (WinShift must \
                 be a multiple of the record interval, and intervals aligned to it)"
            ),
            PushError::BadValue(v) => write!(f, "value {v} is not a non-negative number"),
            PushError::UnknownComponent(c) => write!(f, "component {c} was never registered"),
        }
    }
}

impl std::error::Error for PushError {}
