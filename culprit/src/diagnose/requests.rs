//! `culprit diagnose --requests --json`'s document (docs/diagnose-json.md, "--requests"); the
//! text for people is `culprit_text::requests`. Run by [`super::run_diagnose`].

use culprit_analysis::requests::RequestsReport;

/// The JSON document `--requests --json` prints.
#[derive(Debug, serde::Serialize)]
pub struct Document<'a> {
    /// The analysis' result.
    pub requests: &'a RequestsReport,
}
