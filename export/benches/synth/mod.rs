//! Synthetic data directories for the export benchmark and the streaming tests: each node has
//! one traced server process (1 s intervals, `funcs` functions called in each) and one
//! sampler run (10 s intervals, `sample_funcs` sampled functions, two kernel events; 1 s
//! intervals of [`OS_METRICS`] OS metric values, `disk.await` absent every 5th second as
//! without requests), with the values of `culprit_analysis::synth::Scenario` (a shared
//! Zipf-like profile, per-node differences, noise).
//!
//! Calls have paths: the traced server records call edges (`CULPRIT_GRAPH=1`) where function
//! `i > 0` is called by [`callers`]`(i)` (two callers for most: a graph, not a tree, so paths are
//! split), and the sampler records a call chain per sampled function (its first caller's path).
//!
//! Trace files record their binary at a path that does not exist, so functions are named
//! `synth-server+0x…` (the loader warns once per node); sample files carry names (`f000`, …).

#![allow(dead_code)]

use std::io;
use std::path::Path;

use culprit_analysis::synth::Scenario;
use culprit_format::synthetic::{self, MainObject};
use culprit_format::{
    end_reason, info_keys, EdgeEntry, EventEntry, IntervalEntry, IntervalHead, IntervalRef,
    OsMetricEntry, OsMetricsHead, RecordBuf, SampleEntry, SamplesHead,
};

const NS: u64 = 1_000_000_000;
const BIAS: u64 = 0x5555_0000_0000;

/// What to generate.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// Nodes (`n00`, `n01`, …).
    pub nodes: usize,
    /// Seconds of data.
    pub secs: u64,
    /// Traced functions per interval.
    pub funcs: usize,
    /// Sampled functions per interval.
    pub sample_funcs: usize,
    /// Start, seconds since the epoch.
    pub t0_s: u64,
}

/// OS metrics per node and second: (name, instance, unit); the first is absent every 5th
/// second.
pub const OS_METRICS: &[(&str, Option<&str>, &str)] = &[
    ("disk.await", Some("sda"), "ms"),
    ("disk.await", Some("sdb"), "ms"),
    ("disk.util", Some("sda"), "%"),
    ("disk.util", Some("sdb"), "%"),
    ("disk.tps", Some("sda"), "1/s"),
    ("disk.tps", Some("sdb"), "1/s"),
    ("disk.rd_sec", Some("sda"), "sectors/s"),
    ("disk.wr_sec", Some("sda"), "sectors/s"),
    ("net.rxbyt", Some("eth0"), "B/s"),
    ("net.txbyt", Some("eth0"), "B/s"),
    ("net.rxpck", Some("eth0"), "packets/s"),
    ("net.txpck", Some("eth0"), "packets/s"),
    ("tcp.retrans_segs", None, "segments/s"),
    ("tcp.conns", None, "count"),
    ("tcp.rtt_med", None, "ms"),
    ("cpu.user", None, "%"),
    ("cpu.system", None, "%"),
    ("cpu.iowait", None, "%"),
];

/// String id of OS metric string `s` in the sampler files.
fn os_sid(s: &str) -> u32 {
    let mut all: Vec<&str> = Vec::new();
    for (n, i, u) in OS_METRICS {
        for x in [Some(*n), *i, Some(*u)].into_iter().flatten() {
            if !all.contains(&x) {
                all.push(x);
            }
        }
    }
    1000 + all
        .iter()
        .position(|x| *x == s)
        .expect("an OS metric string") as u32
}

/// The callers of function `i > 0`: `(i - 1) / 2` and, when different, `(i - 1) / 3`; function
/// 0 has none.
pub fn callers(i: usize) -> Vec<usize> {
    match i {
        0 => Vec::new(),
        _ if (i - 1) / 2 == (i - 1) / 3 => vec![(i - 1) / 2],
        _ => vec![(i - 1) / 2, (i - 1) / 3],
    }
}

/// Function `i`'s path from function 0 through its first callers, outermost first.
pub fn first_path(i: usize) -> Vec<usize> {
    let mut p = vec![i];
    while let Some(&c) = callers(*p.last().expect("a frame")).first() {
        p.push(c);
    }
    p.reverse();
    p
}

/// The address of traced function `i`.
pub fn func_addr(i: usize) -> u64 {
    BIAS + 0x1000 + 0x40 * i as u64
}

/// Writes the data directory `root` (`root/<node>/…`).
pub fn write(root: &Path, spec: Spec) -> io::Result<()> {
    let t0 = spec.t0_s * NS;
    let mut traces = Vec::new();
    let mut samples = Vec::new();
    for n in 0..spec.nodes {
        let node = Scenario::node_name(n);
        let dir = root.join(&node);
        let pid = 1000 + n as u32;
        let pid_s = pid.to_string();
        let info = [
            (info_keys::NODE, node.as_str()),
            (info_keys::PROGRAM, "synth-server"),
            (info_keys::PID, pid_s.as_str()),
            (info_keys::INTERVAL_NS, "1000000000"),
        ];
        let main = MainObject {
            bias: BIAS,
            size: 0x100_0000,
            build_id: &[],
            path: "/nonexistent/culprit-synth/synth-server",
        };
        traces.push(synthetic::trace_file(&dir, pid, t0, &info, Some(main))?);
        let names: Vec<String> = (0..spec.sample_funcs).map(|i| format!("f{i:03}")).collect();
        let strings: Vec<(u32, &str)> = [
            (1, "cpu-clock"),
            (2, "synth-server"),
            (3, "tcp:tcp_retransmit_skb"),
            (4, "block:block_rq_issue"),
        ]
        .into_iter()
        .chain(
            names
                .iter()
                .enumerate()
                .map(|(i, s)| (10 + i as u32, s.as_str())),
        )
        .chain(
            OS_METRICS
                .iter()
                .flat_map(|(n, i, u)| [Some(*n), *i, Some(*u)])
                .flatten()
                .map(|x| (os_sid(x), x)),
        )
        .collect();
        let info = [
            (info_keys::EVENT, "cpu-clock"),
            (info_keys::PERIOD, "1000000"),
        ];
        samples.push(synthetic::samples_file(
            &dir,
            t0,
            2000 + n as u32,
            &info,
            &strings,
        )?);
    }
    let trace_run = Scenario {
        nodes: spec.nodes,
        funcs: spec.funcs,
        secs: spec.secs,
        interval_s: 1,
        t0_s: spec.t0_s,
        scale: 5000.0,
        ..Scenario::default()
    };
    let mut buf = RecordBuf::with_capacity(64 + 32 * spec.funcs);
    let mut err = None;
    trace_run.generate(|n, start, v| {
        buf.clear();
        let entry = |i: usize, x: f64| IntervalEntry {
            addr: func_addr(i),
            calls: x.round() as u64 + 1,
            excl_ns: (x * 1000.0) as u64,
            incl_ns: (x * 1500.0) as u64,
        };
        buf.interval(
            &IntervalHead {
                start_ns: start,
                dur_ns: NS,
                threads: 4,
                ..Default::default()
            },
            v.iter().enumerate().map(|(i, &x)| entry(i, x)),
        );
        // Each function's calls and times over its callers (the first gets the remainder).
        let mut edges = Vec::new();
        for (i, &x) in v.iter().enumerate() {
            let e = entry(i, x);
            let from = callers(i);
            let k = from.len().max(1) as u64;
            let callers = if from.is_empty() {
                vec![None]
            } else {
                from.into_iter().map(Some).collect()
            };
            for (j, c) in callers.into_iter().enumerate() {
                let part = |v: u64| if j == 0 { v - v / k * (k - 1) } else { v / k };
                edges.push(EdgeEntry {
                    caller: c.map_or(0, func_addr),
                    callee: e.addr,
                    calls: part(e.calls),
                    excl_ns: part(e.excl_ns),
                    incl_ns: part(e.incl_ns),
                });
            }
        }
        buf.edges(
            &IntervalRef {
                start_ns: start,
                dur_ns: NS,
                flags: 0,
            },
            0,
            edges,
        );
        if let Err(e) = traces[n].append(&buf) {
            err.get_or_insert(e);
        }
    });
    let sample_run = Scenario {
        funcs: spec.sample_funcs,
        interval_s: 10,
        seed: 7,
        ..trace_run.clone()
    };
    sample_run.generate(|n, start, v| {
        buf.clear();
        let entries: Vec<SampleEntry> = v
            .iter()
            .enumerate()
            .map(|(i, &x)| SampleEntry {
                program: 2,
                image: 2,
                function: 10 + i as u32,
                count: x.round() as u64 / 10 + 1,
            })
            .collect();
        // One chain per sampled function: its first callers' path.
        let chains: Vec<(u64, Vec<(u32, u32)>)> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let frames = first_path(i)
                    .into_iter()
                    .map(|f| (2, 10 + f as u32))
                    .collect();
                (e.count, frames)
            })
            .collect();
        let total = entries.iter().map(|e| e.count).sum();
        buf.samples(
            &SamplesHead {
                start_ns: start,
                dur_ns: 10 * NS,
                event_sid: 1,
                period: 1_000_000,
                total,
                ..Default::default()
            },
            entries,
        );
        buf.events(
            start,
            10 * NS,
            0,
            [
                EventEntry {
                    event: 3,
                    count: (v[0] as u64) % 7,
                },
                EventEntry {
                    event: 4,
                    count: v[0] as u64,
                },
            ],
        );
        buf.stacks(
            &IntervalRef {
                start_ns: start,
                dur_ns: 10 * NS,
                flags: 0,
            },
            chains.iter().map(|(n, f)| (2, *n, f.as_slice())),
        );
        if let Err(e) = samples[n].append(&buf) {
            err.get_or_insert(e);
        }
    });
    let os_run = Scenario {
        funcs: OS_METRICS.len(),
        interval_s: 1,
        seed: 11,
        ..trace_run.clone()
    };
    os_run.generate(|n, start, v| {
        buf.clear();
        let absent = (start / NS) % 5 == 0;
        buf.os_metrics(
            &OsMetricsHead {
                start_ns: start,
                dur_ns: NS,
                span_ns: NS,
                flags: 0,
            },
            OS_METRICS
                .iter()
                .zip(v)
                .enumerate()
                .filter(|(i, _)| !(absent && *i == 0))
                .map(|(_, ((name, inst, unit), x))| OsMetricEntry {
                    metric: os_sid(name),
                    instance: inst.map(os_sid),
                    unit: os_sid(unit),
                    value: (x / 100.0 * 8.0).round() / 8.0,
                }),
        );
        if let Err(e) = samples[n].append(&buf) {
            err.get_or_insert(e);
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    let end = t0 + spec.secs * NS;
    for t in traces {
        t.finish(end, end_reason::EXIT)?;
    }
    for s in samples {
        s.finish(end, end_reason::DONE)?;
    }
    Ok(())
}
