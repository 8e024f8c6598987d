//! The content of `culprit report --layers`: per node and process, each I/O layer's
//! characteristics (seed 003 §3) over the range shown, side by side from the highest layer
//! down, with the serialising layers of [`super::serial`]. JSON schema in
//! docs/report-json.md (`layers`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::serial::{self, Serialisation};
use super::{characteristics, characteristics_in, requests, stretches, Characteristics, SLOT_NS};
use crate::data::Dataset;
use crate::time::TimeSpec;

/// Schema name of the JSON report.
pub const SCHEMA: &str = "culprit-layers/1";

/// One layer of a process over the range.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayerSummary {
    /// Layer.
    pub layer: String,
    /// Level (higher is nearer the application).
    pub level: i32,
    /// Its characteristics over the whole range as one interval (concurrency and idleness
    /// over the range's length).
    pub total: Characteristics,
    /// Average outstanding while busy (`total.concurrency / (1 − total.idle)`).
    pub busy_concurrency: Option<f64>,
    /// Mean length of a sequential run, requests (`1 / (1 − sequential)`), when some request
    /// broke a run.
    pub run_requests: Option<f64>,
    /// Per second from `LayersReport::origin_ns` (with `--layer-series`; empty otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub series: Vec<Characteristics>,
}

/// The layers of one process.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProcessLayers {
    /// Process id.
    pub pid: u32,
    /// Program name, when a trace file of the process names it.
    pub program: Option<String>,
    /// Layers, highest first.
    pub layers: Vec<LayerSummary>,
    /// Serialising layers of the process (seed 003 §4.2).
    pub serialised: Vec<Serialisation>,
    /// Marks the runtime dropped in the process (a thread's ring full, a signal handler
    /// inside a mark): a request missing its closing event stays outstanding until the data
    /// ends.
    pub dropped_events: u64,
}

/// One node's processes with layer events.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeLayersReport {
    /// Node.
    pub node: String,
    /// Processes by id.
    pub processes: Vec<ProcessLayers>,
}

/// `culprit report --layers`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayersReport {
    /// `culprit-layers/1`.
    pub schema: &'static str,
    /// Start of the range shown, wall-clock ns (inclusive; the first second's start).
    pub from_ns: u64,
    /// End of it (exclusive).
    pub to_ns: u64,
    /// Length of a `series` entry, ns.
    pub slot_ns: u64,
    /// Nodes with layer events, by name.
    pub nodes: Vec<NodeLayersReport>,
}

/// What to show.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LayersOptions {
    /// Only these processes (all when empty).
    pub pids: Vec<u32>,
    /// Only these programs (all when empty).
    pub programs: Vec<String>,
    /// Requests whose last event is at or after this, wall-clock ns.
    pub from: Option<u64>,
    /// … and before this.
    pub to: Option<u64>,
    /// Keep the per-second characteristics.
    pub series: bool,
}

/// The first and last layer-event times of the dataset, ns (`None` without layer events).
pub fn span(ds: &Dataset) -> Option<(u64, u64)> {
    let mut lo_hi: Option<(u64, u64)> = None;
    for e in ds.nodes.iter().flat_map(stretches).flat_map(|s| &s.events) {
        let (lo, hi) = lo_hi.get_or_insert((e.t_ns, e.t_ns));
        *lo = (*lo).min(e.t_ns);
        *hi = (*hi).max(e.t_ns);
    }
    lo_hi
}

/// The report over the range people gave ([`TimeSpec`]s resolved against the layer events'
/// [`span`]) into `opts.from` / `opts.to`; without layer events in range, one without nodes.
pub fn build_in(
    ds: &Dataset,
    mut opts: LayersOptions,
    from: Option<TimeSpec>,
    to: Option<TimeSpec>,
) -> LayersReport {
    let (lo, hi) = span(ds).unwrap_or((0, 0));
    opts.from = from.map(|t| t.resolve(lo, hi));
    opts.to = to.map(|t| t.resolve(lo, hi));
    build(ds, &opts).unwrap_or(LayersReport {
        schema: SCHEMA,
        from_ns: opts.from.unwrap_or(lo),
        to_ns: opts.to.unwrap_or(hi),
        slot_ns: SLOT_NS,
        nodes: Vec::new(),
    })
}

/// The report; `None` when no node has layer events (in range).
pub fn build(ds: &Dataset, opts: &LayersOptions) -> Option<LayersReport> {
    let (lo, hi) = span(ds)?;
    let from = opts.from.unwrap_or(lo).max(lo) / SLOT_NS * SLOT_NS;
    let to = opts.to.unwrap_or(u64::MAX).min(hi.saturating_add(1));
    if from >= to {
        return None;
    }
    let slots = (to - from).div_ceil(SLOT_NS) as usize;
    let mut nodes = Vec::new();
    for n in &ds.nodes {
        let programs: BTreeMap<u32, String> = n
            .traces
            .iter()
            .map(|t| (t.pid, ds.names.programs.get(t.program).to_string()))
            .collect();
        let (reqs, layers) = requests(stretches(n));
        let reqs: Vec<_> = reqs
            .into_iter()
            .filter(|r| r.last >= from && r.last < to)
            .filter(|r| opts.pids.is_empty() || opts.pids.contains(&r.pid))
            .filter(|r| {
                opts.programs.is_empty()
                    || programs
                        .get(&r.pid)
                        .is_some_and(|p| opts.programs.contains(p))
            })
            .collect();
        let mut by_pid: BTreeMap<u32, Vec<_>> = BTreeMap::new();
        for r in &reqs {
            by_pid.entry(r.pid).or_default().push(r.clone());
        }
        let end = stretches(n).map(|s| s.span.1).max().unwrap_or(to).min(to);
        let found = serial::serialisations(&n.name, &reqs, &layers, from, slots, end);
        let mut processes = Vec::new();
        for (pid, reqs) in by_pid {
            let mut out = Vec::new();
            for l in layers.iter().rev() {
                if !reqs.iter().any(|r| r.layer == l.name) {
                    continue;
                }
                let total = characteristics_in(&reqs, &l.name, from, to - from, 1, end)
                    .pop()
                    .unwrap_or_default();
                let busy = 1.0 - total.idle;
                out.push(LayerSummary {
                    layer: l.name.to_string(),
                    level: l.level,
                    busy_concurrency: (busy > 0.0).then(|| total.concurrency / busy),
                    run_requests: total
                        .sequential
                        .filter(|&s| s < 1.0)
                        .map(|s| 1.0 / (1.0 - s)),
                    series: if opts.series {
                        characteristics(&reqs, &l.name, from, slots, end)
                    } else {
                        Vec::new()
                    },
                    total,
                });
            }
            let dropped_events = n
                .traces
                .iter()
                .filter(|t| t.pid == pid)
                .flat_map(|t| &t.layers)
                .map(|s| u64::from(s.dropped))
                .sum();
            processes.push(ProcessLayers {
                dropped_events,
                pid,
                program: programs.get(&pid).cloned(),
                layers: out,
                serialised: found.iter().filter(|s| s.pid == pid).cloned().collect(),
            });
        }
        if !processes.is_empty() {
            nodes.push(NodeLayersReport {
                node: n.name.clone(),
                processes,
            });
        }
    }
    Some(LayersReport {
        schema: SCHEMA,
        from_ns: from,
        to_ns: to,
        slot_ns: SLOT_NS,
        nodes,
    })
}
