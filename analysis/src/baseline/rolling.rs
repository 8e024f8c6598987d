//! A rolling baseline (`last:DUR`): learnt again as the diagnosis goes on, without the windows
//! under suspicion.

use std::fmt;

use crate::analyzer::Outcome;
use crate::data::{Source, Span};
use crate::error::{Error, Result};
use crate::plan::Progress;
use crate::setup::Setup;
use crate::train::Rules;

use super::learn::{learn_in, Learned};
use super::ranges::Ranges;
use super::span::BaselineSpan;

/// A rolling baseline: every [`Rolling::every_ns`] of diagnosed data, the last
/// [`Rolling::len_ns`] before it — without the stretches in which a node was flagged or
/// suspected ([`suspect_ranges`]) — is learnt again, so that thresholds follow the fleet as it
/// changes while a fault is never learnt as normal.
pub struct Rolling {
    /// The span as given.
    pub spec: BaselineSpan,
    /// How much data it learns.
    pub len_ns: u64,
    /// How often it is learnt again (diagnosed data between two learnings).
    pub every_ns: u64,
    /// The training setup.
    pub setup: Setup,
    /// Training's rules.
    pub rules: Rules,
    /// The data, opened afresh for each learning.
    pub source: Box<dyn Fn() -> Box<dyn Source> + Send>,
    /// The end of the stretch learnt last.
    pub learnt_to: u64,
}

impl fmt::Debug for Rolling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rolling")
            .field("spec", &self.spec)
            .field("every_ns", &self.every_ns)
            .field("learnt_to", &self.learnt_to)
            .finish_non_exhaustive()
    }
}

/// How often a rolling baseline of `len_ns` is learnt again: every quarter of its length, at
/// least every hour (learning reads the whole baseline again), and never more often than
/// `shift_ns` (a window shift: nothing new to learn before).
pub fn relearn_every(len_ns: u64, shift_ns: u64) -> u64 {
    (len_ns / 4).min(3600 * crate::time::NS_PER_S).max(shift_ns)
}

impl Rolling {
    /// True when the diagnosis has reached `frontier_ns`, far enough past the last learning.
    pub fn due(&self, frontier_ns: u64) -> bool {
        frontier_ns >= self.learnt_to.saturating_add(self.every_ns)
    }

    /// Learns the last [`Rolling::len_ns`] before `frontier_ns` again, without `suspects`.
    pub fn relearn(
        &mut self,
        frontier_ns: u64,
        suspects: &Ranges,
        progress: &mut dyn Progress,
    ) -> Result<Learned> {
        let span = Span {
            start_ns: frontier_ns.saturating_sub(self.len_ns),
            end_ns: frontier_ns,
        };
        let ranges = Ranges::one(span).without(suspects);
        // Marked learnt whatever happens, so that a failure is not retried window after window.
        self.learnt_to = frontier_ns;
        let learned = learn_in(
            &self.setup,
            (self.source)(),
            self.spec,
            span,
            &ranges,
            self.rules,
            progress,
        )?;
        // Too little left once the windows under suspicion are out: fewer windows than a
        // verdict's own span (2k − 1) can neither set thresholds nor tell a role, which would be
        // forgotten; the baseline learnt before stays.
        let least = 2 * self.setup.settings.k as u64 - 1;
        if let Some((m, t)) = learned
            .trained
            .file
            .metrics
            .iter()
            .find(|(_, t)| t.windows < least)
        {
            return Err(Error::Data(format!(
                "too little left to learn from once the windows under suspicion are out ({} \
                 windows on {m}, fewer than {least})",
                t.windows
            )));
        }
        Ok(learned)
    }
}

/// The stretches a rolling baseline must not learn, the windows under suspicion: every window
/// in which some node was anomalous on some metric, and every stretch in which a node was
/// faulty on a metric (flagged, or a suspect: the combined verdict is made of these) from the
/// first window that could have counted towards it — 2k − 2 windows before the filter fired —
/// to the end of its last faulty window.
pub fn suspect_ranges(outcome: &Outcome) -> Ranges {
    let k = outcome.config.k as u64;
    let mut spans = Vec::new();
    for m in &outcome.metrics {
        let w = m.windows_ns;
        let lead = (2 * k).saturating_sub(2) * w.shift_ns;
        for n in &m.nodes {
            for a in &n.anomalous {
                spans.push(Span {
                    start_ns: a.start_ns,
                    end_ns: a.start_ns.saturating_add(w.size_ns),
                });
            }
            for e in &n.episodes {
                spans.push(Span {
                    start_ns: e.first_window_ns.saturating_sub(lead),
                    end_ns: e.last_window_ns.saturating_add(w.size_ns),
                });
            }
        }
    }
    Ranges::from_spans(spans)
}
