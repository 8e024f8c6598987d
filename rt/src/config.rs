//! The runtime's configuration, from the environment (see the crate docs for the variables).

use std::path::{Path, PathBuf};

use culprit_datadir::absolute;
use culprit_format::names;
use culprit_format::rotation::{self, Rotate};

use crate::decide::Filters;
use crate::glob::parse_list;

/// Default `CULPRIT_DIR`.
pub const DEFAULT_DIR: &str = "culprit-data";
/// Default `CULPRIT_INTERVAL_MS`.
pub const DEFAULT_INTERVAL_MS: u64 = 1000;
const MAX_INTERVAL_MS: u64 = 3_600_000;
/// The variable that turns on the C library's I/O events.
pub const IO_VAR: &str = "CULPRIT_IO";

/// Validated configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Absolute data root.
    pub root: PathBuf,
    /// Node name (valid per [`names::is_node_name`]).
    pub node: String,
    /// Interval length in ns.
    pub interval_ns: u64,
    /// Function-name filters.
    pub filters: Filters,
    /// `CULPRIT_INCLUDE` as given.
    pub include_raw: String,
    /// `CULPRIT_EXCLUDE` as given.
    pub exclude_raw: String,
    /// `CULPRIT_GRAPH=1`: record caller → callee edges.
    pub graph: bool,
    /// `CULPRIT_HIST=1`: record call-duration histograms.
    pub hist: bool,
    /// `CULPRIT_IO=1`: record the C library's I/O calls on files as layer events (`io`).
    pub io: bool,
    /// `CULPRIT_REQUEST_SAMPLE`: one request in this many is recorded (`requests`).
    pub request_sample: u32,
    /// `CULPRIT_ROTATE` / `CULPRIT_ROTATE_SIZE`: when the flusher moves to a new piece
    /// (`culprit_format::rotation`).
    pub rotate: Rotate,
    /// `CULPRIT_BUDGET`: the runtime's cost budget, a fraction of the process's CPU time;
    /// `None` (`off`): trace everything ([`crate::budget`]).
    pub budget: Option<f64>,
    /// `CULPRIT_BUDGET` as given (normalised: `2%`, `off`), for the file's Info.
    pub budget_raw: String,
    /// `CULPRIT_DEMOTE` as given (its patterns are in `filters`): functions demoted as soon as
    /// they are seen, like `CULPRIT_EXCLUDE` but recorded as demotions (for tests, and for a
    /// user who wants a function untraced without breaking the comparison with its peers).
    pub demote_raw: String,
    /// `CULPRIT_PATCH=0` turns off rewriting untraced functions' hook call sites to NOPs.
    pub patch: bool,
    /// [`STALL_VAR`] (tests only): what the flusher does once `.0` ms have passed since it
    /// started.
    pub test_stall_ms: Option<(u64, TestStall)>,
}

/// What [`STALL_VAR`] makes the flusher do (tests only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestStall {
    /// Stop working for this many ms, as a starved flusher would (the hooks go on).
    Sleep(u64),
    /// Panic, as a bug in it would: the thread ends, and the program must not notice.
    Panic,
}

/// The default `CULPRIT_BUDGET`: 2 % of the process's CPU time.
pub const DEFAULT_BUDGET: f64 = 0.02;

/// `CULPRIT_BUDGET`: `off`, or a percentage in (0, 100] (`2%`, `0.5`); anything else warns
/// and keeps the default.
fn budget(warnings: &mut Vec<String>) -> (Option<f64>, String) {
    let default = (Some(DEFAULT_BUDGET), "2%".to_string());
    let Some(v) = var("CULPRIT_BUDGET").filter(|v| !v.trim().is_empty()) else {
        return default;
    };
    let t = v.trim();
    if t.eq_ignore_ascii_case("off") {
        return (None, "off".into());
    }
    match t.trim_end_matches('%').trim().parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => (Some(p / 100.0), format!("{p}%")),
        _ => {
            warnings.push(format!(
                "CULPRIT_BUDGET={v:?} is neither `off` nor a percentage of the CPU time in \
                 (0, 100]; using 2%"
            ));
            default
        }
    }
}

/// For tests of a late flusher without cgroups: `AFTER_MS,FOR_MS` makes the flusher sleep
/// for `FOR_MS` once `AFTER_MS` have passed (the hooks go on meanwhile); `AFTER_MS,panic`
/// makes it panic then. Not for users.
pub const STALL_VAR: &str = "CULPRIT_TEST_FLUSHER_STALL_MS";

/// A rotation setting: `None` when unset or empty; an invalid value is warned about and
/// ignored (no rotation rather than a wrong one).
fn spec(
    name: &str,
    parse: fn(&str) -> Result<u64, String>,
    warnings: &mut Vec<String>,
) -> Option<u64> {
    let v = var(name).filter(|v| !v.trim().is_empty())?;
    match parse(&v) {
        Ok(x) => Some(x),
        Err(e) => {
            warnings.push(format!("{name}: {e}; not rotating by it"));
            None
        }
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

impl Config {
    /// Reads the environment. Problems that have a safe default push a warning and use it.
    pub fn from_env(warnings: &mut Vec<String>) -> Config {
        let dir = var("CULPRIT_DIR")
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| DEFAULT_DIR.to_string());
        // Absolute now: daemons `chdir("/")` later.
        let root = absolute(Path::new(&dir));
        let node = match var("CULPRIT_NODE").filter(|n| !n.is_empty()) {
            Some(n) => {
                let s = names::sanitize_node_name(&n);
                if s != n {
                    warnings.push(format!(
                        "CULPRIT_NODE={n:?} is not a valid node name; using {s:?}"
                    ));
                }
                s
            }
            None => names::sanitize_node_name(&culprit_format::procfs::host_name()),
        };
        let interval_ms = match var("CULPRIT_INTERVAL_MS") {
            None => DEFAULT_INTERVAL_MS,
            Some(v) => match v.trim().parse::<u64>() {
                Ok(ms) if (1..=MAX_INTERVAL_MS).contains(&ms) => ms,
                _ => {
                    warnings.push(format!(
                        "CULPRIT_INTERVAL_MS={v:?} is not a number of milliseconds in \
                         1..={MAX_INTERVAL_MS}; using {DEFAULT_INTERVAL_MS}"
                    ));
                    DEFAULT_INTERVAL_MS
                }
            },
        };
        let graph = flag("CULPRIT_GRAPH", warnings);
        let hist = flag("CULPRIT_HIST", warnings);
        let io = flag(IO_VAR, warnings);
        let rotate = Rotate {
            every_ns: spec("CULPRIT_ROTATE", rotation::parse_duration_ns, warnings)
                .map(|ns| ns.max(interval_ms * 1_000_000)),
            max_bytes: spec("CULPRIT_ROTATE_SIZE", rotation::parse_size, warnings),
        };
        let request_sample = match var("CULPRIT_REQUEST_SAMPLE") {
            None => crate::requests::DEFAULT_SAMPLE_EVERY,
            Some(v) => match v.trim().parse::<u32>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    warnings.push(format!(
                        "CULPRIT_REQUEST_SAMPLE={v:?} is not a whole number ≥ 1; using {}",
                        crate::requests::DEFAULT_SAMPLE_EVERY
                    ));
                    crate::requests::DEFAULT_SAMPLE_EVERY
                }
            },
        };
        let (budget, budget_raw) = budget(warnings);
        let demote_raw = var("CULPRIT_DEMOTE").unwrap_or_default();
        let patch = !matches!(var("CULPRIT_PATCH").as_deref().map(str::trim), Some("0"));
        let test_stall_ms = var(STALL_VAR).and_then(|v| {
            let (a, b) = v.split_once(',')?;
            let then = match b.trim() {
                "panic" => TestStall::Panic,
                ms => TestStall::Sleep(ms.parse().ok()?),
            };
            Some((a.trim().parse().ok()?, then))
        });
        let include_raw = var("CULPRIT_INCLUDE").unwrap_or_default();
        let exclude_raw = var("CULPRIT_EXCLUDE").unwrap_or_default();
        Config {
            root,
            node,
            interval_ns: interval_ms * 1_000_000,
            filters: Filters {
                include: parse_list(&include_raw),
                exclude: parse_list(&exclude_raw),
                demote: parse_list(&demote_raw),
            },
            include_raw,
            exclude_raw,
            graph,
            hist,
            io,
            rotate,
            request_sample,
            budget,
            budget_raw,
            demote_raw,
            patch,
            test_stall_ms,
        }
    }

    /// `root/<node>`.
    pub fn node_dir(&self, node: &str) -> PathBuf {
        self.root.join(node)
    }
}

/// A boolean variable: unset, empty or `0` is off, `1` on; anything else is off with a warning.
fn flag(name: &str, warnings: &mut Vec<String>) -> bool {
    match var(name).as_deref().map(str::trim) {
        None | Some("") | Some("0") => false,
        Some("1") => true,
        Some(v) => {
            warnings.push(format!("{name}={v:?} is neither 0 nor 1; using 0"));
            false
        }
    }
}
