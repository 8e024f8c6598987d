//! The checks of `culprit doctor`: what this machine allows culprit to do — perf access,
//! hardware vs software events, tracefs, kernel symbol addresses (through [`crate::probe`]),
//! network namespaces, nftables, cgroup v1 `cpu` and `blkio` controllers, delay accounting,
//! uftrace. Each [`Check`] says whether it passed and, when not, what to do; the command line
//! renders the [`Report`] (people's lines or JSON, schema [`SCHEMA`]). Nothing is changed on
//! the machine.

use std::process::{Command, Stdio};

use serde::Serialize;

use crate::probe::{self, TracefsState};
use crate::tracefs::DEFAULT_TRACEPOINTS;

/// JSON schema identifier of `culprit doctor --json`.
pub const SCHEMA: &str = "culprit-doctor/1";

/// One check's outcome.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct Check {
    /// Stable identifier (`perf_access`, `hardware_events`, …).
    pub name: &'static str,
    /// True when the check passed.
    pub ok: bool,
    /// What was found.
    pub detail: String,
    /// What to do when it did not pass (absent when nothing needs doing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// The sampler cannot run without it.
    pub required: bool,
}

/// The whole report.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// True when every required check passed.
    pub ok: bool,
    /// The checks, in order.
    pub checks: Vec<Check>,
}

fn check(name: &'static str, ok: bool, detail: String, fix: Option<String>) -> Check {
    Check {
        name,
        ok,
        detail,
        fix: if ok { None } else { fix },
        required: false,
    }
}

/// Runs `cmd args` quietly; `Ok(stdout)` when it exits 0, `Err(why)` otherwise.
fn quiet(cmd: &str, args: &[&str]) -> Result<String, String> {
    match Command::new(cmd).args(args).stdin(Stdio::null()).output() {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err(String::from_utf8_lossy(&o.stderr)
            .lines()
            .next()
            .unwrap_or("failed")
            .to_string()),
        Err(e) => Err(format!("{cmd}: {e}")),
    }
}

fn perf_access() -> Check {
    let paranoid = crate::perf_event_paranoid();
    let caps = probe::caps();
    let who = if probe::euid() == 0 {
        "root".to_string()
    } else if caps.perfmon {
        "CAP_PERFMON".to_string()
    } else if caps.sys_admin {
        "CAP_SYS_ADMIN".to_string()
    } else {
        format!("uid {}", probe::euid())
    };
    let sysctl = paranoid.map_or("unknown".into(), |p| p.to_string());
    let mut c = match probe::system_wide_sampling() {
        Ok(()) => check(
            "perf_access",
            true,
            format!("system-wide sampling allowed ({who}; kernel.perf_event_paranoid={sysctl})"),
            None,
        ),
        Err(e) => check(
            "perf_access",
            false,
            format!(
                "system-wide sampling refused: {e} ({who}; kernel.perf_event_paranoid={sysctl})"
            ),
            Some(
                "run as root, or grant CAP_PERFMON (or CAP_SYS_ADMIN), or \
                 `sysctl kernel.perf_event_paranoid=-1`"
                    .into(),
            ),
        ),
    };
    c.required = true;
    c
}

fn hardware_events() -> Check {
    match probe::hardware_cycles() {
        Ok(()) => check(
            "hardware_events",
            true,
            "hardware cycles available: culprit sample uses cycles every 100000 (seed 000)".into(),
            None,
        ),
        Err(e) => check(
            "hardware_events",
            false,
            format!("hardware cycles not available ({e}); software events (cpu-clock) work"),
            Some(
                "nothing to do: culprit sample falls back to cpu-clock at 1 kHz per CPU and \
                 records so (a virtual machine without a PMU)"
                    .into(),
            ),
        ),
    }
}

fn tracefs() -> Check {
    match probe::tracefs() {
        TracefsState::Mounted(p) => {
            let missing: Vec<&str> = DEFAULT_TRACEPOINTS
                .iter()
                .copied()
                .filter(|tp| {
                    let (sys, ev) = tp.split_once(':').unwrap_or((tp, ""));
                    !p.join("events").join(sys).join(ev).join("id").exists()
                })
                .collect();
            if missing.is_empty() {
                check(
                    "tracefs",
                    true,
                    format!(
                        "mounted at {}; tracepoints {} present",
                        p.display(),
                        DEFAULT_TRACEPOINTS.join(", ")
                    ),
                    None,
                )
            } else {
                check(
                    "tracefs",
                    false,
                    format!(
                        "mounted at {}, but this kernel lacks {}",
                        p.display(),
                        missing.join(", ")
                    ),
                    Some(
                        "those kernel events are not counted; the others are (or pick others \
                         with `culprit sample --tracepoints`)"
                            .into(),
                    ),
                )
            }
        }
        TracefsState::Unreadable(p) => check(
            "tracefs",
            false,
            format!("mounted at {}, but not readable by this user", p.display()),
            Some("run culprit sample as root to count kernel events".into()),
        ),
        TracefsState::Mountable => check(
            "tracefs",
            true,
            "not mounted; `culprit sample` mounts it at /sys/kernel/tracing (root)".into(),
            None,
        ),
        TracefsState::Unavailable(why) => check(
            "tracefs",
            false,
            why,
            Some(
                "mount it as root: `mount -t tracefs nodev /sys/kernel/tracing` (kernel event \
                 counts need it; sampling does not)"
                    .into(),
            ),
        ),
    }
}

fn kallsyms() -> Check {
    let ok = probe::kallsyms_addresses_visible();
    check(
        "kallsyms",
        ok,
        if ok {
            "kernel symbol addresses visible: kernel samples get function names".into()
        } else {
            "kernel symbol addresses hidden (all zero in /proc/kallsyms)".into()
        },
        Some(
            "run as root, or `sysctl kernel.kptr_restrict=0`; otherwise kernel samples show as \
             [unknown]"
                .into(),
        ),
    )
}

fn namespaces() -> Check {
    let ip = quiet("ip", &["-V"]);
    let unshare = quiet("unshare", &["--net", "true"]);
    match (ip, unshare) {
        (Ok(_), Ok(_)) => check(
            "namespaces",
            true,
            "network namespaces usable (`unshare --net` works, iproute2 present)".into(),
            None,
        ),
        (Err(e), _) => check(
            "namespaces",
            false,
            format!("iproute2 missing ({e})"),
            Some("install iproute2 (scripts/install-deps)".into()),
        ),
        (_, Err(e)) => check(
            "namespaces",
            false,
            format!("cannot create a network namespace: {e}"),
            Some("run as root (CAP_SYS_ADMIN) to emulate nodes in network namespaces".into()),
        ),
    }
}

fn nftables() -> Check {
    match quiet("nft", &["--version"]) {
        Err(e) => check(
            "nftables",
            false,
            format!("nft missing ({e})"),
            Some("install nftables (scripts/install-deps)".into()),
        ),
        Ok(v) => match quiet("nft", &["list", "tables"]) {
            Ok(_) => check("nftables", true, format!("{} usable", v.trim()), None),
            Err(e) => check(
                "nftables",
                false,
                format!("{} present but not usable: {e}", v.trim()),
                Some("run as root (CAP_NET_ADMIN) to inject packet loss".into()),
            ),
        },
    }
}

fn cgroups() -> Check {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let v1 = |ctl: &str| {
        mounts.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[2] == "cgroup" && f[3].split(',').any(|o| o == ctl)
        })
    };
    let (cpu, blkio) = (v1("cpu"), v1("blkio"));
    let missing: Vec<&str> = [("cpu", cpu), ("blkio", blkio)]
        .iter()
        .filter(|(_, have)| !have)
        .map(|(n, _)| *n)
        .collect();
    check(
        "cgroups",
        missing.is_empty(),
        if missing.is_empty() {
            "cgroup v1 cpu and blkio controllers mounted".into()
        } else {
            format!("cgroup v1 controllers not mounted: {}", missing.join(", "))
        },
        Some(
            "mount them (e.g. `mount -t cgroup -o cpu cgroup /sys/fs/cgroup/cpu`) to give \
             emulated nodes CPU shares and disk throttles"
                .into(),
        ),
    )
}

fn delayacct() -> Check {
    use crate::os::delayacct::{state, SYSCTL};
    match state() {
        Some(true) => check(
            "delay_accounting",
            true,
            "kernel.task_delayacct is on: the OS metrics have per-process block-I/O delay (of \
             tasks started since it was turned on)"
                .into(),
            None,
        ),
        Some(false) => check(
            "delay_accounting",
            true,
            "kernel.task_delayacct is off; `culprit sample --delayacct` turns it on for its run \
             (host-wide) and restores it after; start the sampler before the servers: tasks \
             created while it is off are never accounted"
                .into(),
            None,
        ),
        None => check(
            "delay_accounting",
            false,
            format!("{SYSCTL} does not exist"),
            Some(
                "a kernel 5.14 or later with CONFIG_TASK_DELAY_ACCT; without it the OS metrics \
                 have no per-process block-I/O delay"
                    .into(),
            ),
        ),
    }
}

fn uftrace() -> Check {
    match quiet("uftrace", &["--version"]) {
        Ok(v) => check(
            "uftrace",
            true,
            format!(
                "{} present (for side-by-side comparisons)",
                v.lines().next().unwrap_or("uftrace").trim()
            ),
            None,
        ),
        Err(e) => check(
            "uftrace",
            false,
            format!("uftrace missing ({e})"),
            Some("install uftrace (scripts/install-deps); only benchmarks use it".into()),
        ),
    }
}

/// Runs every check.
pub fn report() -> Report {
    let checks = vec![
        perf_access(),
        hardware_events(),
        tracefs(),
        kallsyms(),
        namespaces(),
        nftables(),
        cgroups(),
        delayacct(),
        uftrace(),
    ];
    Report {
        schema: SCHEMA,
        ok: checks.iter().all(|c| c.ok || !c.required),
        checks,
    }
}
