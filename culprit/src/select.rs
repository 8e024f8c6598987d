//! The data a reading verb works on, declared once: the directories and the selection within
//! them (`culprit report`, `culprit export`), flattened into each verb's arguments.

use std::path::PathBuf;

/// Data directories and which of their data to read.
#[derive(Debug, clap::Args)]
pub struct DataSelection {
    /// Data directories (a root holding NODE/ directories, or node directories).
    #[arg(value_name = "DATA", default_value = "culprit-data")]
    pub data: Vec<PathBuf>,
    /// Only this node (repeatable).
    #[arg(long = "node", value_name = "NAME")]
    pub nodes: Vec<String>,
    /// Only this program (repeatable; traced processes by program name, samples by the
    /// program they ran in).
    #[arg(long = "program", value_name = "NAME")]
    pub programs: Vec<String>,
    /// Only this process id (repeatable).
    #[arg(long = "pid", value_name = "PID")]
    pub pids: Vec<u32>,
    /// Start of the time range: ISO time (2026-11-22T13:05:00Z), epoch seconds, or +DURATION
    /// after the data's start. Intervals starting at or after it are included.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub from: Option<String>,
    /// End of the time range (exclusive): same forms as --from, or -DURATION before the data's
    /// end.
    #[arg(long, value_name = "TIME", allow_hyphen_values = true)]
    pub to: Option<String>,
    /// Also read samples that belong to no node (the `_unassigned` directory).
    #[arg(long)]
    pub all: bool,
    /// Read binaries under this root instead of / (like perf report --symfs).
    #[arg(long, value_name = "DIR")]
    pub symfs: Option<PathBuf>,
}
