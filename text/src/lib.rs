//! culprit's output for people: the text the command prints, rendered from the typed results
//! of the analysis library ([`culprit_analysis`]), nothing recomputed. Each renderer writes to
//! an `impl Write`; the command line parses the options, calls the analysis and hands the
//! result here (or to serde, for JSON).
//!
//! * [`diagnose`] — `culprit diagnose`'s report and `--follow`'s line per closed window;
//! * [`requests`] — `culprit diagnose --requests` (seed 004);
//! * [`report`] — `culprit report`'s function, sample, event and OS tables, call graph,
//!   callers and callees;
//! * [`layers`] — `culprit report --layers` (seed 003);
//! * [`stacks`] — `culprit report --stacks`;
//! * [`style`] — colour for verdict words (`--color`), decided once per run.

#![deny(unsafe_code)]

pub mod diagnose;
pub mod layers;
pub mod report;
pub mod requests;
pub mod stacks;
pub mod style;
