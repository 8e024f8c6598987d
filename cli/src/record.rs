//! `culprit record`: run a program built with `-finstrument-functions` with the tracing
//! runtime (`libculprit_rt.so`) injected through `LD_PRELOAD`.
//!
//! The runtime is found without the user naming it: `$CULPRIT_RT_LIB` if set (an explicit
//! override wins), else next to the `culprit` executable (where cargo builds both, and where
//! `scripts/install` puts neither), else in `<exe dir>/../lib/` (an installed layout:
//! `PREFIX/bin/culprit`, `PREFIX/lib/libculprit_rt.so`), else in the Debian package's
//! multiarch library directory (`/usr/bin/culprit`, `/usr/lib/x86_64-linux-gnu/` holding
//! `libculprit_rt.so.0`, the name the runtime is loaded by; the unversioned name is the
//! link-time symlink).
//!
//! SIGINT and SIGTERM sent to `culprit` by another process are forwarded to the program (one
//! typed at the terminal already reaches it: same process group). The exit status is the
//! program's, or 128 + the signal that killed it.

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context as _};
use culprit_format::names;
use culprit_sampler::launch::{exit_code, Forward, Held};

/// Arguments of `culprit record`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    gcc -finstrument-functions -g -O2 server.c -o server\n  \
    culprit record -o data --node io1 -- ./server --port 3334\n  \
    culprit record --exclude 'hash_*,list_*' -- ./server\n  \
    culprit report data\n\n\
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

/// Environment variable naming the runtime library explicitly.
pub const RT_LIB_VAR: &str = "CULPRIT_RT_LIB";
/// File name of the runtime library.
pub const RT_LIB_NAME: &str = "libculprit_rt.so";
/// The runtime's soname, as the Debian package installs it (`scripts/package` links it in).
pub const RT_SONAME: &str = "libculprit_rt.so.0";

/// The Debian multiarch directory name of this build's target (`/usr/lib/<triplet>/`, where
/// the package installs the runtime), for the architectures Debian names this way.
const MULTIARCH: Option<&str> = if cfg!(all(target_arch = "x86_64", target_env = "gnu")) {
    Some("x86_64-linux-gnu")
} else if cfg!(all(target_arch = "aarch64", target_env = "gnu")) {
    Some("aarch64-linux-gnu")
} else if cfg!(all(target_arch = "riscv64", target_env = "gnu")) {
    Some("riscv64-linux-gnu")
} else if cfg!(all(
    target_arch = "powerpc64",
    target_endian = "little",
    target_env = "gnu"
)) {
    Some("powerpc64le-linux-gnu")
} else if cfg!(all(target_arch = "s390x", target_env = "gnu")) {
    Some("s390x-linux-gnu")
} else {
    None
};

/// Where the runtime library is, given the directory of the `culprit` executable and the
/// value of [`RT_LIB_VAR`].
pub fn find_runtime(exe_dir: Option<&Path>, explicit: Option<&OsStr>) -> anyhow::Result<PathBuf> {
    if let Some(p) = explicit.filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("{RT_LIB_VAR}={} is not a file", p.display());
    }
    let mut tried = Vec::new();
    if let Some(d) = exe_dir {
        let mut cands = vec![d.join(RT_LIB_NAME), d.join("../lib").join(RT_LIB_NAME)];
        if let Some(triplet) = MULTIARCH {
            cands.push(d.join("../lib").join(triplet).join(RT_SONAME));
        }
        for cand in cands {
            if cand.is_file() {
                return Ok(cand);
            }
            tried.push(cand.display().to_string());
        }
    }
    bail!(
        "cannot find {RT_LIB_NAME} (looked in {}); build it with `cargo build -p culprit-rt`, \
         install culprit (the Debian package from scripts/package, or scripts/install), or \
         set {RT_LIB_VAR}=/path/to/{RT_LIB_NAME}",
        tried.join(", ")
    )
}

impl Config {
    /// Validates the arguments against the environment.
    pub fn from_args(a: Args) -> anyhow::Result<Config> {
        let cwd = std::env::current_dir().context("cannot read the current directory")?;
        let dir = a
            .output
            .or_else(|| std::env::var_os("CULPRIT_DIR").map(PathBuf::from))
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or_else(|| PathBuf::from("culprit-data"));
        let dir = cwd.join(dir);
        let mut env: Vec<(&'static str, OsString)> = vec![("CULPRIT_DIR", dir.clone().into())];
        if let Some(n) = &a.node {
            if !names::is_node_name(n) {
                bail!(
                    "--node {n:?} is not a valid node name: use 1..{} characters of \
                     [A-Za-z0-9._-], not starting with '.' or '_'",
                    names::MAX_NODE_NAME
                );
            }
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
        let exe = std::env::current_exe().ok();
        let runtime = find_runtime(
            exe.as_deref().and_then(Path::parent),
            std::env::var_os(RT_LIB_VAR).as_deref(),
        )?;
        let runtime = runtime.canonicalize().unwrap_or(runtime);
        let mut preload = runtime.clone().into_os_string();
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
            preload.push(":");
            preload.push(old);
        }
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
    if let Some(path) = which(program) {
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
    cmd.args(&cfg.command[1..]);
    for (k, v) in &cfg.env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}", program.to_string_lossy()))?;
    let pid = child.id();
    let forward = Forward::to(pid).context("cannot forward signals")?;
    let status = child.wait().context("waiting for the program")?;
    drop(forward);
    report_files(&cfg, &before, Some(pid));
    Ok(exit_code(status))
}

/// Says on stderr where this run's trace data went. A data root may be shared (several
/// `record`s with other node names, the sampler, other programs linked with the runtime), so
/// of the trace files new since the start only those count that this run wrote: the ones in
/// its node's directory, and the program's own (`pid`) wherever it moved (`culprit_set_node`).
/// A descendant that changed its node is not counted; another program recording under the same
/// node name at the same time is.
fn report_files(cfg: &Config, before: &[PathBuf], pid: Option<u32>) {
    let node = effective_node(cfg);
    let ours = |f: &Path| {
        let in_node = f.parent().and_then(Path::file_name) == Some(OsStr::new(&node));
        let own = match (pid, f.file_name().map(|n| n.to_string_lossy())) {
            (Some(p), Some(n)) => matches!(
                names::parse_data_file_name(&n),
                Some(names::DataFileName::Trace { pid, .. }) if pid == p
            ),
            _ => false,
        };
        in_node || own
    };
    let after = trace_files(&cfg.dir);
    let new: Vec<_> = after
        .iter()
        .filter(|f| !before.contains(f) && ours(f))
        .collect();
    let mut nodes: Vec<String> = new
        .iter()
        .filter_map(|f| f.parent().map(|p| p.display().to_string()))
        .collect();
    nodes.sort();
    nodes.dedup();
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
            nodes.join(", "),
            cfg.dir.display()
        );
    }
}

/// The node name the runtime will use: `--node`, else `$CULPRIT_NODE`, else the host name.
fn effective_node(cfg: &Config) -> String {
    node_or_default(cfg.node.as_deref())
}

/// `node` if given, else `$CULPRIT_NODE`, else the host name, as a valid node name.
pub(crate) fn node_or_default(node: Option<&str>) -> String {
    node.map(str::to_string)
        .or_else(|| std::env::var("CULPRIT_NODE").ok().filter(|n| !n.is_empty()))
        .map(|n| names::sanitize_node_name(&n))
        .unwrap_or_else(culprit_sampler::default_node_name)
}

/// `record --sample`: like `perf record -- CMD`, the program is forked but held before `exec`
/// until the sampler's events are open and scoped to its process tree, so its first
/// instructions are sampled too. The sampler runs on this thread; a waiter thread reaps the
/// program and stops the sampler, which then writes its last (partial) interval.
fn run_sampled(cfg: &Config) -> anyhow::Result<i32> {
    let opts = cfg.sample.as_ref().expect("sampling requested");
    let program = &cfg.command[0];
    let path = which(program)
        .with_context(|| format!("cannot run {}: not found", program.to_string_lossy()))?;
    let mut cmd = Command::new(&path);
    cmd.arg0(program).args(&cfg.command[1..]);
    cmd.envs(cfg.env.iter().map(|(k, v)| (k, v)));
    let held = Held::spawn(cmd).with_context(|| format!("cannot run {}", path.display()))?;
    let node = effective_node(cfg);
    let mut sconf = culprit_sampler::Config::new(&cfg.dir, node);
    sconf.scope = culprit_sampler::Scope::Pid(held.pid());
    sconf.interval = opts.interval;
    sconf.event = opts.event.clone();
    // On an error the held child is dropped: it exits without running anything.
    let sampler = culprit_sampler::Sampler::open(sconf).context("cannot sample (--sample)")?;
    eprintln!("culprit: {}", sampler.describe());
    for w in sampler.warnings() {
        eprintln!("culprit: warning: {w}");
    }
    let running = held
        .run()
        .with_context(|| format!("cannot run {}", path.display()))?;
    let summary = sampler.run(running.exited());
    let status = running.wait().context("waiting for the program")?;
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

/// Every `trace-*.cul` under `dir/<node>/`.
fn trace_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(nodes) = std::fs::read_dir(dir) else {
        return out;
    };
    for n in nodes.flatten() {
        let Ok(files) = std::fs::read_dir(n.path()) else {
            continue;
        };
        for f in files.flatten() {
            let name = f.file_name();
            if matches!(
                names::parse_data_file_name(&name.to_string_lossy()),
                Some(names::DataFileName::Trace { .. })
            ) {
                out.push(f.path());
            }
        }
    }
    out
}

/// Resolves a program name the way `execvp` does.
pub(crate) fn which(program: &OsStr) -> Option<PathBuf> {
    which::which(program).ok()
}

/// Whether the ELF file at `path` refers to `__cyg_profile_func_enter` (as every object built
/// with `-finstrument-functions` does); `None` when it is not an ELF file or cannot be read.
pub fn calls_hooks(path: &Path) -> Option<bool> {
    culprit_sampler::symbolize::names_dynamic_symbol(path, "__cyg_profile_func_enter")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_search_order() {
        let tmp = std::env::temp_dir().join(format!("culprit-rec-{}", std::process::id()));
        let bin = tmp.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(tmp.join("lib")).unwrap();
        let err = find_runtime(Some(&bin), None).unwrap_err().to_string();
        assert!(err.contains(RT_LIB_VAR), "{err}");
        if let Some(triplet) = MULTIARCH {
            // The Debian package's layout: the soname in the multiarch directory.
            let multi = tmp.join("lib").join(triplet);
            std::fs::create_dir_all(&multi).unwrap();
            std::fs::write(multi.join(RT_SONAME), b"x").unwrap();
            assert_eq!(
                find_runtime(Some(&bin), None).unwrap(),
                bin.join("../lib").join(triplet).join(RT_SONAME)
            );
        }
        std::fs::write(tmp.join("lib").join(RT_LIB_NAME), b"x").unwrap();
        assert!(find_runtime(Some(&bin), None)
            .unwrap()
            .ends_with("lib/libculprit_rt.so"));
        std::fs::write(bin.join(RT_LIB_NAME), b"x").unwrap();
        assert_eq!(
            find_runtime(Some(&bin), None).unwrap(),
            bin.join(RT_LIB_NAME)
        );
        let other = tmp.join("other.so");
        std::fs::write(&other, b"x").unwrap();
        assert_eq!(
            find_runtime(Some(&bin), Some(other.as_os_str())).unwrap(),
            other
        );
        assert!(find_runtime(Some(&bin), Some(OsStr::new("/nonexistent.so"))).is_err());
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn hook_reference_check() {
        // The test binary itself is ELF and not instrumented; a text file is not ELF.
        let exe = std::env::current_exe().unwrap();
        assert_eq!(calls_hooks(&exe), Some(false));
        assert_eq!(calls_hooks(Path::new("/etc/hostname")), None);
    }
}
