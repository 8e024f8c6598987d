//! Progress of long analyses on a terminal: an indicatif bar on stderr driven by the analysis
//! library's [`Progress`] hooks. When stderr is not a terminal nothing is drawn, so piped and
//! logged output is exactly as without it.

use std::io::IsTerminal as _;

use culprit_analysis::plan::Progress;
use culprit_analysis::time;
use indicatif::{ProgressBar, ProgressStyle};

/// A bar (data time analysed out of the data's span) or, when the span is not known, a spinner
/// with the data time reached; cleared when dropped.
#[derive(Debug)]
pub struct Bar {
    bar: ProgressBar,
    spinner: bool,
}

impl Bar {
    /// Progress of `what` ("diagnosing", "training"), drawn only when stderr is a terminal.
    pub fn new(what: &'static str) -> Bar {
        let bar = if std::io::stderr().is_terminal() {
            ProgressBar::new_spinner()
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{spinner} {prefix}: {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_prefix(what);
        Bar { bar, spinner: true }
    }
}

impl Progress for Bar {
    fn analysed(&mut self, at_ns: u64, from_ns: u64, to_ns: u64) {
        if self.bar.is_hidden() {
            return;
        }
        if to_ns > from_ns {
            self.bar.set_message(time::clock(at_ns));
            if self.spinner {
                self.spinner = false;
                let style = ProgressStyle::with_template(
                    "{prefix} [{bar:30}] {percent:>3}% of the data, up to {msg}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> ");
                self.bar.set_style(style);
                self.bar.set_length((to_ns - from_ns) / time::NS_PER_S + 1);
            }
            self.bar
                .set_position(at_ns.saturating_sub(from_ns) / time::NS_PER_S);
        } else {
            self.bar
                .set_message(format!("data up to {}", time::clock(at_ns)));
            self.bar.tick();
        }
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}
