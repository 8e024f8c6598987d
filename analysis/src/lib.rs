//! culprit's analysis: which node of a group of peers misbehaves, and which functions show it
//! (peer comparison, seed 000: Kasick et al., behaviour-based problem localization for PVFS).
//!
//! ```text
//! Source (data directories) ─► Dataset (loader: records decoded, symbolized, interned)
//!   ─► metric families (samples, count, time, events: records → per-node interval values)
//!   ─► Analyzer: buckets of WinShift ─► each window, top to bottom:
//!        complete nodes → keep rule → feature matrix → weights → scores
//!        → threshold policy per node → k of 2k − 1 → root cause
//!   ─► Outcome ─► Diagnosis (combination rule, findings, root-cause tables) ─► outputs
//! ```
//!
//! * [`data`] — the loader and its [`data::Source`]s;
//! * [`family`] — [`family::MetricFamily`]: what is compared, in which unit, how;
//! * [`analyzer`] — the streaming analyzer and its per-window [pipeline](analyzer);
//! * [`distance`], [`cdf`], [`score`] ([`score::Scorer`]), [`policy`], [`filter`] — the pieces
//!   the pipeline is made of; [`latency`] — quantiles and distances of call-duration
//!   histograms;
//! * [`combine`], [`missing`], [`resource`] — the combined verdict, missing-data findings, and
//!   the resource at fault (seed 001's checklist); [`stacks`] — where each thread is, stuck
//!   calls and a stopped node's last call; [`paused`] — nodes stopped by a signal, not slow;
//! * [`diagnosis`] — the typed [`Diagnosis`], serialised as the JSON report; [`live`] — a
//!   diagnosis in progress at one moment (`--follow`);
//! * [`baseline`] — a baseline learnt from the data itself (`--baseline`), rolling or not;
//!   [`roles`] — nodes of another role, judged against their own baseline;
//! * [`setup`] — options resolved into settings; [`plan`] — what diagnosis and training share
//!   (the metrics to run, the analyzer, [`plan::Progress`]); [`session`] and [`train`] — settings
//!   to a diagnosis or a thresholds file, offline or following a run in progress;
//!   [`thresholds`] — the thresholds file;
//! * [`requests`] — seed 004's request categories and robust PCA (`diagnose --requests`);
//! * [`feed`] — a dataset into the analyzer; `synth` — generated peer groups (tests,
//!   benchmarks: the `synth` feature); [`time`] — times and durations as people read them.
//!
//! The analysis knows nothing of command lines: `culprit` resolves options into a
//! [`setup::Setup`] and renders the [`Diagnosis`]. docs/architecture.md says where to add a
//! metric family, a scorer or an output.

#![deny(unsafe_code)]

pub mod analyzer;
pub mod baseline;
pub mod cdf;
pub mod combine;
pub mod data;
pub mod demoted;
pub mod diagnosis;
pub mod distance;
pub mod error;
pub mod family;
pub mod feed;
pub mod filter;
pub mod latency;
pub mod layers;
pub mod live;
pub mod missing;
pub mod model;
pub mod options;
pub mod paused;
pub mod persistence;
pub mod plan;
pub mod policy;
pub mod rare;
pub mod report;
pub mod requests;
pub mod resource;
pub mod roles;
pub mod score;
pub mod session;
pub mod setup;
pub mod stacks;
#[cfg(any(test, feature = "synth"))]
pub mod synth;
pub mod thresholds;
pub mod time;
pub mod train;

pub use diagnosis::Diagnosis;
pub use error::{Error, Result};
