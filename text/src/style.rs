//! Colour for people's output: verdict words stand out on a terminal. Decided once per run
//! ([`init`]) from `--color` and the environment as anstream reads it (`NO_COLOR`,
//! `CLICOLOR`, `CLICOLOR_FORCE`, `TERM=dumb`, whether stdout is a terminal); when it is off the
//! text is exactly as without colour, so piped output and JSON never carry escape codes.

use std::sync::atomic::{AtomicBool, Ordering};

use anstream::ColorChoice;
use anstyle::{AnsiColor, Style};

static ON: AtomicBool = AtomicBool::new(false);

/// `--color`: when to colour people's output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum ColorWhen {
    /// When stdout is a terminal that supports colour and `NO_COLOR` is unset.
    #[default]
    Auto,
    /// Always, even when piped.
    Always,
    /// Never.
    Never,
}

/// Decides for this run whether people's output is coloured.
pub fn init(when: ColorWhen) {
    let choice = match when {
        ColorWhen::Auto => ColorChoice::Auto,
        ColorWhen::Always => ColorChoice::Always,
        ColorWhen::Never => ColorChoice::Never,
    };
    choice.write_global();
    let on = anstream::AutoStream::choice(&std::io::stdout()) != ColorChoice::Never;
    ON.store(on, Ordering::Relaxed);
}

/// The style of a verdict word (`FAULTY`, `STOPPED`, `damaged`, `suspect`, `ok` …); plain for
/// words that are not verdicts.
fn verdict_style(word: &str) -> Style {
    let color = match word.to_ascii_lowercase().as_str() {
        "faulty" | "stopped" => AnsiColor::Red,
        "damaged" | "suspect" | "untrained" | "undecided" | "not compared" => AnsiColor::Yellow,
        "ok" => AnsiColor::Green,
        _ => return Style::new(),
    };
    Style::new().fg_color(Some(color.into())).bold()
}

/// `word` coloured as a verdict when colour is on, left-aligned in `width` columns (the padding
/// stays outside the escape codes, so tables line up either way).
pub fn verdict(word: &str, width: usize) -> String {
    let pad = " ".repeat(width.saturating_sub(word.chars().count()));
    let style = verdict_style(word);
    if ON.load(Ordering::Relaxed) && style != Style::new() {
        format!("{style}{word}{style:#}{pad}")
    } else {
        format!("{word}{pad}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_is_outside_the_colour() {
        ON.store(true, Ordering::Relaxed);
        let s = verdict("FAULTY", 10);
        assert!(s.starts_with("\x1b["), "{s:?}");
        assert!(s.ends_with("\x1b[0m    "), "{s:?}");
        assert_eq!(verdict("-", 3), "-  ");
        ON.store(false, Ordering::Relaxed);
        assert_eq!(verdict("FAULTY", 10), "FAULTY    ");
    }
}
