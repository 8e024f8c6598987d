//! The accuracy experiment (seed 000 §"Experimental set-up", Tables 1 and 2): fault-free runs of
//! every workload, `culprit train` on them, then runs of every workload × fault with the fault in
//! a different node each time, each diagnosed; true and false positives per fault and metric
//! with 95 % Wilson intervals, and the instrumentation overhead per workload.
//!
//! Every result is appended to `OUT/results.jsonl` as it is produced, so an interrupted
//! experiment resumes where it stopped and a finished one can be re-analysed
//! ([`analyze`]) without running anything.
//!
//! In four parts: the parameters (`config.rs`), the results file and the facts about faults it
//! is compared with (`results.rs`), running and diagnosing (`run.rs`: [`run_experiment`],
//! [`rediagnose`]) and the tables (`table.rs`: [`render`]).

mod config;
mod results;
mod run;
mod table;

pub use config::ExperimentConfig;
pub use results::{expected_resource, BaselineColumn, ResultLine, BASELINE_SPAN, SETTINGS};
pub use run::{rediagnose, run_experiment};
pub use table::{analyze, analyze_file, mean_se, ratio_overhead, render, Rate};

#[cfg(test)]
mod tests;
