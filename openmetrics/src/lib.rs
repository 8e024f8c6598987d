//! culprit's OpenMetrics output: `culprit diagnose --follow --metrics-listen ADDR` serves the
//! diagnosis as it stands ([`culprit_analysis::live::LiveStatus`]) for Prometheus to scrape.
//!
//! * [`exposition`] — a `LiveStatus` rendered as OpenMetrics 1.0 text, nothing recomputed;
//!   the families are [`FAMILIES`] (documented in docs/alerting.md);
//! * [`serve`] — the HTTP endpoint: `GET /metrics`, one thread running a non-blocking event
//!   loop over std's sockets and `poll(2)` (`sys`, the crate's only `unsafe`), with a
//!   whole-request deadline and a cap on open connections.
//!
//! The command line binds the endpoint before anything else and publishes each interim report
//! the analysis hands its `Progress` hooks ([`MetricsServer::publish`]).

#![deny(unsafe_code)]

pub mod exposition;
pub mod serve;
#[allow(unsafe_code)]
mod sys;

pub use exposition::{render, FamilyDoc, CONTENT_TYPE, FAMILIES};
pub use serve::{ListenError, MetricsServer};
