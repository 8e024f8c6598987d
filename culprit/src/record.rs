//! `culprit record`: run a program built with `-finstrument-functions` with the tracing
//! runtime (`libculprit_rt.so`) injected through `LD_PRELOAD`.
//!
//! The runtime is found without the user naming it ([`culprit_sampler::launch::runtime`] says
//! where it looks; `$CULPRIT_RT_LIB` overrides).
//!
//! SIGINT and SIGTERM sent to `culprit` by another process are forwarded to the program (one
//! typed at the terminal already reaches it: same process group). The exit status is the
//! program's, or 128 + the signal that killed it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context as _};
use culprit_format::names;
use culprit_sampler::launch::{
    self,
    runtime::{calls_hooks, node_dirs, node_or_default, preload, trace_files, written_by},
};

/// Arguments of `culprit record`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    gcc -finstrument-functions -g -O2 server.c -o server\n  \
    culprit record -o data --node io1 -- ./server --port 3334\n  \
    culprit record --exclude 'hash_*,list_*' -- ./server\n  \
    culprit record --budget off -- ./server   # trace everything, whatever it costs\n  \
    culprit report data\n  \
    culprit report data --exclude-flags       # rebuild without the costliest hooks\n\n\
    A binary that cannot be rebuilt: count calls with uprobes instead (root):\n  \
    culprit record --uprobes 'handle_*,libc.so.6:fsync' -- /usr/sbin/server\n  \
    culprit record --attach 1234 --uprobes 'handle_*' --duration 60s")]
pub struct Args {
    /// Data directory (CULPRIT_DIR); files go to DIR/NODE/ [default: $CULPRIT_DIR or
    /// ./culprit-data]
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Node name (CULPRIT_NODE) [default: $CULPRIT_NODE or the host name]
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
    /// Profile interval in milliseconds (CULPRIT_INTERVAL_MS) [default: 1000]
    #[arg(long, value_name = "MS")]
    pub interval: Option<u64>,
    /// Trace only functions matching these comma-separated globs (CULPRIT_INCLUDE)
    #[arg(long, value_name = "PATTERNS")]
    pub include: Option<String>,
    /// Never trace functions matching these comma-separated globs (CULPRIT_EXCLUDE)
    #[arg(long, value_name = "PATTERNS")]
    pub exclude: Option<String>,
    /// Also record caller → callee edges (CULPRIT_GRAPH=1; `culprit report --graph`)
    #[arg(long)]
    pub graph: bool,
    /// Also record call-duration histograms (CULPRIT_HIST=1; p50/p90/p99/max in reports)
    #[arg(long)]
    pub hist: bool,
    /// The runtime's cost budget, a percentage of the program's CPU time (`2%`, `0.5%`), or
    /// `off` to trace every function whatever it costs (CULPRIT_BUDGET). Above it the runtime
    /// stops tracing the functions that cost most for what they tell [default: 2%]
    #[arg(long, value_name = "PERCENT|off", value_parser = parse_budget)]
    pub budget: Option<String>,
    /// Also sample the program's process tree with perf_event (user and kernel code), into the
    /// same node directory (needs perf access, like `culprit sample`)
    #[arg(long)]
    pub sample: bool,
    /// Sample profile interval with --sample, e.g. 1s, 10s [default: 10s]
    #[arg(long, value_name = "DURATION", requires = "sample")]
    pub sample_interval: Option<String>,
    /// Event to sample with --sample (e.g. cycles, cpu-clock) [default: cycles, else
    /// cpu-clock]
    #[arg(long, value_name = "EVENT", requires = "sample")]
    pub event: Option<String>,
    /// Count calls of these functions with perf_event uprobes instead of injecting the runtime:
    /// the binary needs no rebuild (root or CAP_PERFMON). `[BINARY:]GLOB`, comma-separated or
    /// repeated; BINARY is a path or a library name (`libc.so.6`), the program by default. Put
    /// `--` before CMD.
    #[arg(long, value_name = "[BINARY:]PATTERN", num_args = 1.., conflicts_with_all = ["sample", "include", "exclude"])]
    pub uprobes: Vec<String>,
    /// With --uprobes: count in this running process instead of starting CMD, then detach
    /// (at --duration, on Ctrl-C, or when it exits); it runs on unharmed.
    #[arg(
        long,
        value_name = "PID",
        requires = "uprobes",
        conflicts_with = "command"
    )]
    pub attach: Option<u32>,
    /// With --attach: detach after this long (e.g. 30s, 5m) [default: until Ctrl-C or exit]
    #[arg(long, value_name = "DURATION", requires = "attach")]
    pub duration: Option<String>,
    /// With --uprobes: warn about a function whose probe takes more than this percentage of a
    /// CPU at the rate it is called
    #[arg(
        long,
        value_name = "PERCENT",
        default_value_t = 5.0,
        requires = "uprobes"
    )]
    pub uprobe_budget: f64,
    /// The program to run and its arguments (after `--`)
    #[arg(
        required_unless_present = "attach",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    pub command: Vec<OsString>,
}

/// A validated `record` configuration.
#[derive(Debug)]
pub struct Config {
    /// Absolute data root.
    pub dir: PathBuf,
    /// Node name, if set.
    pub node: Option<String>,
    /// Variables to set for the program.
    pub env: Vec<(&'static str, OsString)>,
    /// The runtime library.
    pub runtime: PathBuf,
    /// Program and arguments.
    pub command: Vec<OsString>,
    /// Sampling of the program's process tree, with `--sample`.
    pub sample: Option<SampleOpts>,
}

/// What `--sample` asks for.
#[derive(Debug)]
pub struct SampleOpts {
    /// Profile interval.
    pub interval: std::time::Duration,
    /// Event name, if not the default.
    pub event: Option<String>,
}

/// The data root, absolute: `--output`, else `$CULPRIT_DIR`, else `culprit-data`.
pub(crate) fn data_dir(output: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let dir = output
        .or_else(|| std::env::var_os("CULPRIT_DIR").map(PathBuf::from))
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or_else(|| PathBuf::from("culprit-data"));
    Ok(cwd.join(dir))
}

/// An error unless `--node` (when given) is a valid node name.
pub(crate) fn check_node(node: Option<&str>) -> anyhow::Result<()> {
    match node {
        Some(n) if !names::is_node_name(n) => bail!(
            "--node {n:?} is not a valid node name: use 1..{} characters of [A-Za-z0-9._-], \
             not starting with '.' or '_'",
            names::MAX_NODE_NAME
        ),
        _ => Ok(()),
    }
}

impl Config {
    /// Validates the arguments against the environment.
    pub fn from_args(a: Args) -> anyhow::Result<Config> {
        let dir = data_dir(a.output)?;
        let mut env: Vec<(&'static str, OsString)> = vec![("CULPRIT_DIR", dir.clone().into())];
        check_node(a.node.as_deref())?;
        if let Some(n) = &a.node {
            env.push(("CULPRIT_NODE", n.into()));
        }
        if let Some(ms) = a.interval {
            if !(1..=3_600_000).contains(&ms) {
                bail!("--interval {ms}: give milliseconds between 1 and 3600000");
            }
            env.push(("CULPRIT_INTERVAL_MS", ms.to_string().into()));
        }
        if let Some(p) = a.include {
            env.push(("CULPRIT_INCLUDE", p.into()));
        }
        if let Some(p) = a.exclude {
            env.push(("CULPRIT_EXCLUDE", p.into()));
        }
        if a.graph {
            env.push(("CULPRIT_GRAPH", "1".into()));
        }
        if a.hist {
            env.push(("CULPRIT_HIST", "1".into()));
        }
        if let Some(b) = a.budget {
            env.push(("CULPRIT_BUDGET", b.into()));
        }
        let (runtime, preload) = preload()?;
        env.push(("LD_PRELOAD", preload));
        let sample = if a.sample {
            let interval = match &a.sample_interval {
                Some(s) => culprit_analysis::time::parse_duration(s)?,
                None => culprit_sampler::DEFAULT_INTERVAL.as_nanos() as u64,
            };
            if interval < 100_000_000 {
                bail!("--sample-interval must be at least 100ms");
            }
            Some(SampleOpts {
                interval: std::time::Duration::from_nanos(interval),
                event: a.event,
            })
        } else {
            None
        };
        Ok(Config {
            dir,
            node: a.node,
            env,
            runtime,
            command: a.command,
            sample,
        })
    }
}

/// Runs `culprit record` with the tracing runtime (`--uprobes` is [`crate::uprobes::record`]).
pub fn run(args: Args) -> anyhow::Result<i32> {
    let cfg = Config::from_args(args)?;
    let program = &cfg.command[0];
    if let Ok(path) = which::which(program) {
        if let Some(false) = calls_hooks(&path) {
            eprintln!(
                "culprit: warning: {} has no __cyg_profile_func_enter reference (not built with \
                 -finstrument-functions?): nothing will be traced",
                path.display()
            );
        }
    }
    let before = trace_files(&cfg.dir);
    if cfg.sample.is_some() {
        let status = run_sampled(&cfg)?;
        report_files(&cfg, &before, None);
        return Ok(status);
    }
    let mut cmd = Command::new(program);
    cmd.args(&cfg.command[1..])
        .envs(cfg.env.iter().map(|(k, v)| (k, v)));
    let (pid, status) = launch::run(cmd, &program.to_string_lossy())?;
    report_files(&cfg, &before, Some(pid));
    Ok(status)
}

/// `--budget`: a percentage (`2%`, `2`, `0.5%`) in (0, 100], or `off`.
fn parse_budget(s: &str) -> Result<String, String> {
    let t = s.trim();
    if t.eq_ignore_ascii_case("off") {
        return Ok("off".into());
    }
    match t.trim_end_matches('%').trim().parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 100.0 => Ok(format!("{v}%")),
        _ => Err(format!(
            "{s:?} is not a budget: give a percentage of the program's CPU time (2%, 0.5%) or off"
        )),
    }
}

/// Says on stderr what tracing cost this run's processes, from their files: the cost, what
/// the runtime demoted, and how to leave the costliest hooks out of the build.
fn report_cost(cfg: &Config, new: &[PathBuf]) {
    let pids: Vec<u32> = new
        .iter()
        .filter_map(
            |f| match names::parse_data_file_name(&f.file_name()?.to_string_lossy()) {
                Some(names::DataFileName::Trace { pid, .. }) => Some(pid),
                _ => None,
            },
        )
        .collect();
    let dirs: Vec<PathBuf> = new
        .iter()
        .filter_map(|f| f.parent().map(PathBuf::from))
        .fold(Vec::new(), |mut v, d| {
            if !v.contains(&d) {
                v.push(d);
            }
            v
        });
    if pids.is_empty() {
        return;
    }
    let Ok(ds) = culprit_analysis::data::Dataset::open(
        &dirs,
        culprit_analysis::data::LoadOptions::default(),
    ) else {
        return;
    };
    let opts = culprit_analysis::report::ReportOptions {
        programs: Vec::new(),
        pids,
        from: None,
        to: None,
        sort: culprit_analysis::report::SortKey::Calls,
        limit: 0,
        merge: false,
        only: Some(culprit_analysis::report::Only::Traces),
        os_series: false,
    };
    let Ok(r) = culprit_analysis::report::build(&ds, &opts) else {
        return;
    };
    for p in r.nodes.iter().flat_map(|n| &n.processes) {
        let Some(c) = &p.tracing_cost else { continue };
        let demoted = if c.demoted.is_empty() {
            String::new()
        } else {
            format!(
                "; the runtime stopped tracing {} function(s) to stay within its {} budget",
                c.demoted.len(),
                c.budget.as_deref().unwrap_or("2%")
            )
        };
        if !c.expensive && c.demoted.is_empty() {
            continue;
        }
        let names: Vec<&str> = c
            .exclude
            .iter()
            .take(5)
            .map(|x| x.function.as_str())
            .collect();
        eprintln!(
            "culprit: pid {} ({}): tracing cost about {:.1} % of its CPU time ({:.1} M traced \
             calls/s){demoted}; the call rate makes tracing expensive: rebuild without the hooks \
             of {}{} (flags: culprit report {} --pid {} --exclude-flags)",
            p.pid,
            p.program,
            100.0 * c.share(),
            c.calls_per_s / 1e6,
            names.join(", "),
            if c.exclude.len() > names.len() {
                format!(" and {} more", c.exclude.len() - names.len())
            } else {
                String::new()
            },
            cfg.dir.display(),
            p.pid
        );
    }
}

/// Says on stderr where this run's trace data went: the trace files new since the start that
/// this run wrote ([`written_by`]) under the node the runtime uses (`--node`, else
/// `$CULPRIT_NODE`, else the host name), and what tracing cost them.
fn report_files(cfg: &Config, before: &[PathBuf], pid: Option<u32>) {
    let new = written_by(&cfg.dir, before, &node_or_default(cfg.node.as_deref()), pid);
    report_cost(cfg, &new);
    if new.is_empty() {
        eprintln!(
            "culprit: no trace data written under {} (see any culprit: line above)",
            cfg.dir.display()
        );
    } else {
        eprintln!(
            "culprit: {} trace file{} written to {}; see them with `culprit report {}`",
            new.len(),
            if new.len() == 1 { "" } else { "s" },
            node_dirs(&new).join(", "),
            cfg.dir.display()
        );
    }
}

/// `record --sample`: the sampler opens on the program's process tree while it is held before
/// `exec` ([`launch::observe`]), so its first instructions are sampled too; it runs on this
/// thread until the program exits, then writes its last (partial) interval.
fn run_sampled(cfg: &Config) -> anyhow::Result<i32> {
    let opts = cfg.sample.as_ref().expect("sampling requested");
    let (path, mut cmd) = launch::command(&cfg.command)?;
    cmd.envs(cfg.env.iter().map(|(k, v)| (k, v)));
    let open = |pid| -> anyhow::Result<_> {
        let mut sconf =
            culprit_sampler::Config::new(&cfg.dir, node_or_default(cfg.node.as_deref()));
        sconf.scope = culprit_sampler::Scope::Pid(pid);
        sconf.interval = opts.interval;
        sconf.event = opts.event.clone();
        let sampler = culprit_sampler::Sampler::open(sconf).context("cannot sample (--sample)")?;
        eprintln!("culprit: {}", sampler.describe());
        for w in sampler.warnings() {
            eprintln!("culprit: warning: {w}");
        }
        Ok(sampler)
    };
    let name = path.display().to_string();
    let (status, summary) = launch::observe(cmd, &name, open, |s, exited| s.run(exited))?;
    match summary {
        Ok(s) => eprintln!(
            "culprit: {} samples ({} lost) in {} interval(s) written under {}",
            s.samples,
            s.lost,
            s.intervals,
            cfg.dir.display()
        ),
        Err(e) => eprintln!("culprit: warning: sampling stopped early: {e}"),
    }
    Ok(status)
}
