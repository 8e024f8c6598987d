//! The analysis' error type.
//!
//! Messages are complete sentences for people (`culprit: error: …` prints them with their
//! causes); a variant says what kind of problem it is, so that a caller can react to it.

use std::io;

use std::fmt;

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
    Settings(SettingsMessage),
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
    #[error("{}", not_enough_data(*.needed, *.complete, .windows, |s| s))]
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
        what: SettingsMessage,
        /// The error.
        #[source]
        source: Box<Error>,
    },
}

/// The message of [`Error::NotEnoughData`], its settings (`win-size`, `win-shift`:
/// [`crate::options::Setting`]) spelled by `spell`.
fn not_enough_data<S: fmt::Display>(
    needed: usize,
    complete: u64,
    windows: &str,
    spell: impl Fn(&'static str) -> S,
) -> String {
    format!(
        "not enough data ({needed} windows needed, {complete} complete): windows are {windows}; \
         record for longer, or diagnose with shorter windows ({}, {})",
        spell("win-size"),
        spell("win-shift")
    )
}

impl Error {
    /// This error's own message (not its source's) with the settings it names
    /// ([`crate::options::Setting::name`]) spelled by `spell` (the CLI: as its flags);
    /// `Display` spells them by name.
    pub fn render(&self, spell: impl Fn(&'static str) -> String) -> String {
        match self {
            Error::Settings(m) | Error::Context { what: m, .. } => m.render(spell),
            Error::NotEnoughData {
                needed,
                complete,
                windows,
            } => not_enough_data(*needed, *complete, windows, spell),
            e => e.to_string(),
        }
    }

    pub(crate) fn io(what: impl Into<String>, source: io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }

    pub(crate) fn context(self, what: impl Into<SettingsMessage>) -> Self {
        Error::Context {
            what: what.into(),
            source: Box::new(self),
        }
    }
}

/// A message about settings for people: prose and the settings it names
/// ([`crate::options::Setting::name`]), which a front end spells its own way
/// ([`SettingsMessage::render`]: the CLI as its flags); `Display` spells them by name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsMessage(Vec<Part>);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Text(String),
    Setting(&'static str),
}

/// Open and close a setting's name in the text [`SettingsMessage::from_marked`] reads
/// (private-use characters, which no message has otherwise).
const OPEN: char = '\u{e000}';
const CLOSE: char = '\u{e001}';

impl SettingsMessage {
    /// Setting `name` marked in a text for [`SettingsMessage::from_marked`].
    pub(crate) fn mark(name: &str) -> String {
        format!("{OPEN}{name}{CLOSE}")
    }

    /// The message of `text`, where [`SettingsMessage::mark`]s stand for the settings `named`
    /// knows (a mark it does not know stays text).
    pub(crate) fn from_marked(text: &str, named: impl Fn(&str) -> Option<&'static str>) -> Self {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find(OPEN) {
            let after = &rest[open + OPEN.len_utf8()..];
            let Some(name) = after.find(CLOSE).and_then(|close| named(&after[..close])) else {
                break;
            };
            if open > 0 {
                parts.push(Part::Text(rest[..open].to_string()));
            }
            parts.push(Part::Setting(name));
            rest = &after[name.len() + CLOSE.len_utf8()..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        SettingsMessage(parts)
    }

    /// The names of the settings it names.
    pub fn settings(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.0.iter().filter_map(|p| match p {
            Part::Setting(s) => Some(*s),
            Part::Text(_) => None,
        })
    }

    /// The message with each setting spelled by `spell` (the CLI: `--` and the name).
    pub fn render(&self, spell: impl Fn(&'static str) -> String) -> String {
        self.0
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.clone(),
                Part::Setting(s) => spell(s),
            })
            .collect()
    }
}

impl From<String> for SettingsMessage {
    /// A message that names no setting.
    fn from(text: String) -> Self {
        SettingsMessage(vec![Part::Text(text)])
    }
}

impl fmt::Display for SettingsMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(str::to_string))
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

impl fmt::Display for PushError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
