//! `culprit`: find the misbehaving server among peers, and the functions that show it.
//!
//! The binary is a thin `main.rs` over this library. [`run`] parses the command line into the
//! arguments of one verb and hands them to that verb's module; each module validates its raw
//! flags into a config before doing anything else, so the analysis is testable without the CLI.
//!
//! Verbs (in the manner of perf and uftrace):
//!
//! * `record` — run a program built with `-finstrument-functions` with the runtime injected;
//! * `sample` — the system-wide perf_event sampler daemon;
//! * `report` — per-node, per-process function profiles from a data directory;
//! * `export` — the data as folded stacks, pprof, Chrome trace JSON, CSV or Parquet;
//! * `ship` — a node's records to NATS JetStream (`diagnose --follow nats://…` reads them);
//! * `prune` — retention: delete the oldest finished data files beyond an age or a size;
//! * `train` / `diagnose` — peer-comparison diagnosis;
//! * `doctor` — what this machine allows (perf access, events, tracefs, namespaces…);
//! * `demo`, `experiment` — the live demo and the accuracy experiment on an emulated cluster
//!   (the lab: built with the `lab` feature only, see [`lab`]).
//!
//! The heavy parts are optional cargo features, off by default ([`features`]): `ship` (NATS),
//! `requests` (robust PCA), `parquet`, and `full` for the three. A build without one has the
//! same flags, and the verb or flag that needs it says so in one line (exit status 2).
//!
//! Exit status: 0 success (for `diagnose`: no node flagged), 1 a faulty node found
//! (`diagnose`), 2 an error.

#![deny(unsafe_code)]

use std::ffi::OsString;
use std::io::Write as _;

use clap::{CommandFactory as _, Parser, Subcommand};
use culprit_text::style;

pub mod diagnose;
pub mod doctor;
pub mod export;
pub mod features;
pub mod lab;
pub mod progress;
pub mod prune;
pub mod record;
pub mod report;
pub mod sample;
pub mod select;
pub mod ship;
pub mod uprobes;

/// Exit status for an error (like `diff`).
pub const EXIT_ERROR: i32 = 2;

#[derive(Debug, Parser)]
#[command(
    name = "culprit",
    version,
    long_version = features::long_version(),
    about = "Find the misbehaving server among peers, and the functions that show it",
    long_about = None,
    after_help = "Workflow: build servers with `gcc -finstrument-functions`, run them under \
                  `culprit record` (or with libculprit_rt.so linked in), run `culprit sample` \
                  on every node, then `culprit diagnose DATA`."
)]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
    /// When to colour verdicts: auto (stdout is a terminal that supports colour and NO_COLOR is
    /// unset), always, never.
    #[arg(long, global = true, value_enum, default_value_t, value_name = "WHEN")]
    color: style::ColorWhen,
    /// Show times for people in UTC instead of the local time zone (JSON is always UTC).
    #[arg(long, global = true)]
    utc: bool,
}

#[derive(Debug, Subcommand)]
enum Verb {
    /// Run a program built with -finstrument-functions, tracing its function calls.
    Record(record::Args),
    /// Sample instruction pointers system-wide with perf_event (the sampler daemon).
    Sample(sample::Args),
    /// Show per-node, per-process function profiles from a data directory.
    Report(report::Args),
    /// Export the data as folded stacks, pprof, Chrome trace JSON, CSV or Parquet.
    Export(export::Args),
    /// Delete the oldest finished data files beyond an age or a total size (retention).
    Prune(prune::Args),
    /// Publish a node's records to NATS JetStream for diagnosis on another machine.
    Ship(ship::Args),
    /// Learn per-node anomaly thresholds from fault-free runs.
    Train(diagnose::TrainArgs),
    /// Find the faulty node among peers and the functions that show it.
    Diagnose(diagnose::DiagnoseArgs),
    /// Report what this machine allows: perf access, events, tracefs, namespaces, nftables.
    Doctor(doctor::Args),
    /// Run the live demo: an emulated 4-node cluster, one injected fault, the diagnosis.
    #[cfg_attr(not(feature = "lab"), command(hide = true))]
    Demo(lab::DemoArgs),
    /// Run the accuracy experiment on the emulated cluster (seed 000's Tables 1 and 2).
    #[cfg_attr(not(feature = "lab"), command(hide = true))]
    Experiment(lab::ExperimentArgs),
}

/// The `culprit` command-line interface as a clap [`clap::Command`]: what the man pages and
/// shell completions are generated from (`cargo run -p xtask`), so they cannot drift from the
/// binary's own `--help`.
pub fn command() -> clap::Command {
    Cli::command()
}

/// Runs the command line `args` (including the program name) and returns the exit status.
pub fn run<I, T>(args: I) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_ERROR } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    style::init(cli.color);
    if !cli.utc {
        culprit_analysis::time::show_local_time();
    }
    let result = match cli.verb {
        Verb::Record(a) if !a.uprobes.is_empty() => uprobes::record(a),
        Verb::Record(a) => record::run(a),
        Verb::Sample(a) => sample::run(a),
        Verb::Report(a) => report::run(a),
        Verb::Export(a) => export::run(a),
        Verb::Prune(a) => prune::run(a),
        Verb::Ship(a) => ship::run(a),
        Verb::Train(a) => diagnose::run_train(a),
        Verb::Diagnose(a) => diagnose::run_diagnose(a),
        Verb::Doctor(a) => doctor::run(a),
        Verb::Demo(a) => lab::demo(a),
        Verb::Experiment(a) => lab::experiment(a),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return 0;
            }
            let _ = std::io::stdout().flush();
            eprintln!("culprit: error: {}", message(&err));
            EXIT_ERROR
        }
    }
}

/// `err` and its causes, `: `-separated (as `{err:#}`), the settings the analysis' errors
/// name spelled as this command's flags.
fn message(err: &anyhow::Error) -> String {
    let spelled = |e: &(dyn std::error::Error + 'static)| match e
        .downcast_ref::<culprit_analysis::error::Error>()
    {
        Some(a) => a.render(diagnose::flag),
        None => e.to_string(),
    };
    err.chain().map(spelled).collect::<Vec<_>>().join(": ")
}

/// A closed pipe on stdout (`culprit report | head`) is not an error. `serde_json` wraps the
/// I/O error of its writer and does not expose it as a source, so it is asked separately.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    let pipe = Some(std::io::ErrorKind::BrokenPipe);
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>().map(|io| io.kind()) == pipe
            || e.downcast_ref::<serde_json::Error>()
                .and_then(|j| j.io_error_kind())
                == pipe
    })
}
