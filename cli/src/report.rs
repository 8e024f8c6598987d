//! `culprit report`: per-node, per-process function profiles (calls, self and total time) from
//! the tracer, sample profiles per (program, image, function) and kernel event counts from the
//! sampler — over the whole run or a time range, as a table or JSON (schema in
//! `docs/report-json.md`).

use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;

use anyhow::bail;
use serde::Serialize;

use culprit_analysis::data::{
    Dataset, FileStatus, FuncId, LoadOptions, NodeData, SampleFile, TraceFile,
};
use culprit_analysis::latency::{self, Buckets};
use culprit_analysis::time;
use culprit_format::HIST_BUCKETS;

/// JSON schema identifier of `culprit report --json`.
pub const SCHEMA: &str = "culprit-report/1";

/// Arguments of `culprit report`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    culprit report                          # ./culprit-data, every node\n  \
    culprit report DATA --node io2 --sort calls\n  \
    culprit report DATA --from +60s --to +120s --program pvfs-server\n  \
    culprit report DATA --graph                # traced with CULPRIT_GRAPH=1\n  \
    culprit report DATA --callers io_pread --callees handle_request\n  \
    culprit report DATA --json | jq '.nodes[0].processes[0].functions[0]'\n\n\
    With CULPRIT_HIST=1 at record time the function tables show p50/p90/p99/max call durations.")]
pub struct Args {
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
    /// Sort functions by: self (exclusive time), total (inclusive time), calls, avg (self time
    /// per call), name.
    #[arg(long, value_enum, default_value_t = SortKey::Self_)]
    pub sort: SortKey,
    /// Rows per table (0 = all).
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
    /// Merge the processes of each node (per program) instead of one table per process.
    #[arg(long)]
    pub merge: bool,
    /// Show only: traces, samples, events or os (OS metrics).
    #[arg(long, value_enum)]
    pub only: Option<Only>,
    /// With --json: also list every OS metric's per-interval values (`series`).
    #[arg(long)]
    pub os_series: bool,
    /// Also show samples that belong to no node (the `_unassigned` directory).
    #[arg(long)]
    pub all: bool,
    /// Read binaries under this root instead of / (like perf report --symfs).
    #[arg(long, value_name = "DIR")]
    pub symfs: Option<PathBuf>,
    /// Show the call graph (processes traced with CULPRIT_GRAPH=1): each caller's callees,
    /// indented, with calls and time (like `uftrace graph`).
    #[arg(long)]
    pub graph: bool,
    /// Show the callers of this function (name or glob; repeatable; needs CULPRIT_GRAPH=1).
    #[arg(long, value_name = "FUNCTION")]
    pub callers: Vec<String>,
    /// Show the callees of this function (name or glob; repeatable; needs CULPRIT_GRAPH=1).
    #[arg(long, value_name = "FUNCTION")]
    pub callees: Vec<String>,
    /// Print JSON (schema culprit-report/1, see docs/report-json.md).
    #[arg(long)]
    pub json: bool,
}

/// Sort order of function tables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SortKey {
    /// Exclusive time.
    #[value(name = "self")]
    Self_,
    /// Inclusive time.
    Total,
    /// Calls.
    Calls,
    /// Exclusive time per call.
    Avg,
    /// Function name.
    Name,
}

/// Which part of the data to show.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Only {
    /// Function-call traces.
    Traces,
    /// IP samples.
    Samples,
    /// Kernel event counts.
    Events,
    /// OS metrics (disk, network, TCP, CPU, cgroup, processes).
    Os,
}

/// The whole report (also the JSON document).
#[derive(Debug, Serialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// Start of the range shown (wall-clock ns), inclusive.
    pub from_ns: u64,
    /// End of the range shown (wall-clock ns), exclusive.
    pub to_ns: u64,
    /// Nodes.
    pub nodes: Vec<NodeReport>,
    /// Problems found while loading.
    pub warnings: Vec<String>,
}

/// One node.
#[derive(Debug, Serialize)]
pub struct NodeReport {
    /// Node name.
    pub node: String,
    /// Traced processes (or per-program merges with --merge).
    pub processes: Vec<ProcessReport>,
    /// Sampler runs.
    pub samples: Vec<SamplesReport>,
    /// Kernel event totals in the range.
    pub events: Vec<EventRow>,
    /// OS metrics in the range (absent when the node has none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub os: Option<OsReport>,
}

/// A node's OS metrics over the range.
#[derive(Debug, Serialize)]
pub struct OsReport {
    /// Interval length, ns.
    pub interval_ns: u64,
    /// Intervals in the range.
    pub intervals: usize,
    /// Intervals the collector could not observe (no values: missing, not zero).
    pub missed_intervals: usize,
    /// One row per (metric, instance), by name.
    pub metrics: Vec<OsMetricRow>,
}

/// One OS metric's statistics over the intervals where it is present.
#[derive(Debug, Serialize)]
pub struct OsMetricRow {
    /// Name (`disk.await`; catalogue in culprit_format::os_metrics).
    pub metric: String,
    /// Device or interface, for per-instance metrics.
    pub instance: Option<String>,
    /// Unit.
    pub unit: String,
    /// Intervals with a value.
    pub present: usize,
    /// Observed intervals without a value (the node could not provide it then).
    pub absent: usize,
    /// Mean of the values present.
    pub mean: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// With --os-series: `[start_ns, value or null]` per observed interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub series: Option<Vec<(u64, Option<f64>)>>,
}

/// One traced process.
#[derive(Debug, Serialize)]
pub struct ProcessReport {
    /// Process id (0 for merged rows).
    pub pid: u32,
    /// Program name.
    pub program: String,
    /// Executable path.
    pub exe: String,
    /// Data file(s).
    pub files: Vec<String>,
    /// `ended`, `running`, `stopped` (no end marker: killed or crashed), `exec` (the image
    /// was replaced by `exec`; its successor has its own file), or `damaged`.
    pub status: String,
    /// Why the file is damaged, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub damage: Option<String>,
    /// First interval start in the range (ns), if any.
    pub first_ns: Option<u64>,
    /// End of the last interval in the range (ns), if any.
    pub last_ns: Option<u64>,
    /// Interval length (ns).
    pub interval_ns: u64,
    /// Intervals in the range.
    pub intervals: usize,
    /// Intervals the runtime could not observe (missing data, not zeros).
    pub missed_intervals: usize,
    /// Most threads seen in one interval.
    pub max_threads: u32,
    /// Frames dropped recovering from mismatched exits (longjmp, exceptions, cancellation).
    pub lost_frames: u64,
    /// Calls not accounted for lack of room.
    pub overflows: u64,
    /// Where the counts come from: `instrumentation` (the runtime's hooks) or `uprobes`
    /// (perf_event uprobes on an unmodified binary: calls entered, no time unless measured
    /// with uretprobes).
    pub source: String,
    /// Calls not traced for other reasons: a signal handler's calls made while a hook ran,
    /// calls in a thread the runtime could not give a table, calls it could not place in an
    /// interval (it was stopped).
    pub dropped_calls: u64,
    /// Trouble the runtime met and recorded (`<wall-clock ns>: <what>`): failed writes, a
    /// file that was removed or replaced and continued in a new one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub trouble: Vec<String>,
    /// Functions, sorted as asked.
    pub functions: Vec<FunctionRow>,
    /// Caller → callee edges, when traced with `CULPRIT_GRAPH=1`: calls, the callee's self
    /// and total time in those calls.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edges: Option<Vec<EdgeRow>>,
    /// Calls whose edge the runtime could not record (its edge table was full).
    #[serde(skip_serializing_if = "is_zero")]
    pub edge_drops: u64,
}

/// (caller, callee) of an edge; no caller: a thread's first function.
type EdgeKey = (Option<FuncId>, FuncId);

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// One function's totals in the range.
#[derive(Debug, Serialize, Clone)]
pub struct FunctionRow {
    /// Demangled name.
    pub function: String,
    /// Image base name.
    pub image: String,
    /// Calls.
    pub calls: u64,
    /// Exclusive time, ns.
    pub self_ns: u64,
    /// Inclusive time, ns.
    pub total_ns: u64,
    /// Calls among `calls` that did not return (left by `longjmp`, an exception through code
    /// without cleanups, thread cancellation): ended by the runtime when it noticed.
    pub unwound: u64,
    /// Call durations, when traced with `CULPRIT_HIST=1`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency: Option<Latency>,
}

/// Quantiles of a function's call durations (from log2 histograms: good to a factor of 2).
#[derive(Debug, Serialize, Clone, PartialEq, Eq)]
pub struct Latency {
    /// Calls in the histograms.
    pub calls: u64,
    /// Median, ns.
    pub p50_ns: u64,
    /// 90th percentile, ns.
    pub p90_ns: u64,
    /// 99th percentile, ns.
    pub p99_ns: u64,
    /// 99.9th percentile, ns.
    pub p999_ns: u64,
    /// Upper bound of the longest call, ns.
    pub max_ns: u64,
    /// The histogram: `[k, calls]` for each non-empty bucket `k` (calls of `2^k` to
    /// `2^(k+1) − 1` ns; bucket 0: 0–1 ns).
    pub buckets: Vec<[u64; 2]>,
}

impl Latency {
    fn of(h: &Buckets) -> Option<Latency> {
        Some(Latency {
            buckets: h
                .iter()
                .enumerate()
                .filter(|(_, &c)| c > 0)
                .map(|(k, &c)| [k as u64, c])
                .collect(),
            calls: latency::calls(h),
            p50_ns: latency::quantile_ns(h, 0.5)?,
            p90_ns: latency::quantile_ns(h, 0.9)?,
            p99_ns: latency::quantile_ns(h, 0.99)?,
            p999_ns: latency::quantile_ns(h, 0.999)?,
            max_ns: latency::max_ns(h)?,
        })
    }
}

/// Calls of one function from another in the range.
#[derive(Debug, Serialize, Clone, PartialEq, Eq)]
pub struct EdgeRow {
    /// The caller (`null`: no traced caller, a thread's first function).
    pub caller: Option<String>,
    /// The caller's image.
    pub caller_image: Option<String>,
    /// The callee.
    pub callee: String,
    /// The callee's image.
    pub callee_image: String,
    /// Calls.
    pub calls: u64,
    /// The callee's exclusive time in those calls, ns.
    pub self_ns: u64,
    /// Elapsed time of those calls, ns (each call, recursion included).
    pub total_ns: u64,
}

/// One sampler run's totals in the range.
#[derive(Debug, Serialize)]
pub struct SamplesReport {
    /// Data file.
    pub file: String,
    /// `ended`, `running`/`stopped`, or `damaged`.
    pub status: String,
    /// Event sampled.
    pub event: String,
    /// Period (events per sample), when fixed.
    pub period: Option<u64>,
    /// Frequency in Hz, when in frequency mode.
    pub freq_hz: Option<u64>,
    /// Intervals in the range.
    pub intervals: usize,
    /// Intervals the sampler could not observe.
    pub missed_intervals: usize,
    /// Samples taken.
    pub total: u64,
    /// Samples lost.
    pub lost: u64,
    /// Counts per (program, image, function), most first.
    pub entries: Vec<SampleRow>,
}

/// One (program, image, function) sample count.
#[derive(Debug, Serialize)]
pub struct SampleRow {
    /// Program.
    pub program: String,
    /// Image base name.
    pub image: String,
    /// Function.
    pub function: String,
    /// Samples.
    pub samples: u64,
}

/// One kernel event's total.
#[derive(Debug, Serialize)]
pub struct EventRow {
    /// Event name (e.g. `tcp:tcp_retransmit_skb`).
    pub event: String,
    /// Occurrences.
    pub count: u64,
}

/// Runs `culprit report`.
pub fn run(args: Args) -> anyhow::Result<i32> {
    if args.data.is_empty() {
        bail!("no data directory given");
    }
    let ds = Dataset::open(
        &args.data,
        LoadOptions {
            include_unassigned: args.all,
            symfs: args.symfs.clone(),
            nodes: args.nodes.clone(),
        },
    )?;
    let report = build(&ds, &args)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        print_human(&mut out, &report, &args)?;
    }
    for w in &report.warnings {
        eprintln!("culprit: warning: {w}");
    }
    Ok(0)
}

/// Earliest interval start and latest interval end over the whole dataset.
pub fn data_span(ds: &Dataset) -> Option<(u64, u64)> {
    let mut lo = u64::MAX;
    let mut hi = 0u64;
    for n in &ds.nodes {
        for t in &n.traces {
            for iv in &t.intervals {
                lo = lo.min(iv.start_ns);
                hi = hi.max(iv.start_ns + iv.dur_ns);
            }
        }
        for s in &n.samples {
            for iv in &s.intervals {
                lo = lo.min(iv.start_ns);
                hi = hi.max(iv.start_ns + iv.dur_ns);
            }
            for iv in &s.events {
                lo = lo.min(iv.start_ns);
                hi = hi.max(iv.start_ns + iv.dur_ns);
            }
            for iv in &s.os {
                lo = lo.min(iv.start_ns);
                hi = hi.max(iv.start_ns + iv.dur_ns);
            }
        }
    }
    (lo <= hi).then_some((lo, hi))
}

/// Builds the report for `ds` as `args` ask.
pub fn build(ds: &Dataset, args: &Args) -> anyhow::Result<Report> {
    let (lo, hi) = data_span(ds).unwrap_or((0, 0));
    let from = match &args.from {
        Some(s) => time::parse_time(s)?.resolve(lo, hi),
        None => 0,
    };
    let to = match &args.to {
        Some(s) => time::parse_time(s)?.resolve(lo, hi),
        None => u64::MAX,
    };
    if from >= to {
        bail!(
            "empty time range: --from {} is not before --to {}",
            time::iso(from),
            time::iso(to)
        );
    }
    let in_range = |start: u64| start >= from && start < to;
    let mut nodes = Vec::new();
    for node in &ds.nodes {
        let show = |o: Only| args.only.is_none() || args.only == Some(o);
        let processes = if show(Only::Traces) {
            trace_reports(ds, node, args, &in_range)
        } else {
            Vec::new()
        };
        let (samples, events) = sample_reports(ds, node, args, &in_range);
        let os = if show(Only::Os) {
            os_report(ds, node, args, &in_range)
        } else {
            None
        };
        nodes.push(NodeReport {
            node: node.name.clone(),
            processes,
            samples: if show(Only::Samples) {
                samples
            } else {
                Vec::new()
            },
            events: if show(Only::Events) {
                events
            } else {
                Vec::new()
            },
            os,
        });
    }
    Ok(Report {
        schema: SCHEMA,
        from_ns: from.max(lo),
        to_ns: to.min(hi),
        nodes,
        warnings: ds.warnings.clone(),
    })
}

fn status_of(t: &TraceFile) -> (String, Option<String>) {
    match &t.status {
        FileStatus::Ended => ("ended".into(), None),
        FileStatus::Damaged(why) => ("damaged".into(), Some(why.clone())),
        FileStatus::Open if t.exec_successor.is_some() => ("exec".into(), None),
        FileStatus::Open => {
            let alive = t.writer_alive();
            (if alive { "running" } else { "stopped" }.into(), None)
        }
    }
}

fn trace_reports(
    ds: &Dataset,
    node: &NodeData,
    args: &Args,
    in_range: &dyn Fn(u64) -> bool,
) -> Vec<ProcessReport> {
    let selected: Vec<&TraceFile> = node
        .traces
        .iter()
        .filter(|t| {
            let prog = ds.names.programs.get(t.program);
            (args.programs.is_empty() || args.programs.iter().any(|p| **p == **prog))
                && (args.pids.is_empty() || args.pids.contains(&t.pid))
        })
        .collect();
    // Group: one group per process, or per program with --merge.
    let mut groups: Vec<(String, Vec<&TraceFile>)> = Vec::new();
    for t in selected {
        let key = if args.merge {
            ds.names.programs.get(t.program).to_string()
        } else {
            format!("{}#{}", t.pid, t.path.display())
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(t),
            None => groups.push((key, vec![t])),
        }
    }
    let mut out = Vec::new();
    for (_, files) in groups {
        let first = files[0];
        let mut acc: HashMap<FuncId, (u64, u64, u64, u64)> = HashMap::new();
        let mut edges: Option<HashMap<EdgeKey, (u64, u64, u64)>> = None;
        let mut edge_drops = 0u64;
        let mut hists: HashMap<FuncId, Buckets> = HashMap::new();
        let (mut intervals, mut missed, mut threads) = (0usize, 0usize, 0u32);
        let (mut lost, mut overflows, mut dropped) = (0u64, 0u64, 0u64);
        let (mut first_ns, mut last_ns) = (None::<u64>, None::<u64>);
        for t in &files {
            for iv in t.intervals.iter().filter(|iv| in_range(iv.start_ns)) {
                intervals += 1;
                first_ns = Some(first_ns.map_or(iv.start_ns, |f| f.min(iv.start_ns)));
                let end = iv.start_ns + iv.dur_ns;
                last_ns = Some(last_ns.map_or(end, |l| l.max(end)));
                dropped += iv.dropped as u64;
                if iv.missed() {
                    missed += 1;
                    continue;
                }
                threads = threads.max(iv.threads);
                lost += iv.lost_frames as u64;
                overflows += iv.overflows as u64;
                for e in &iv.entries {
                    let a = acc.entry(e.func).or_default();
                    a.0 += e.calls;
                    a.1 += e.excl_ns;
                    a.2 += e.incl_ns;
                    a.3 += e.unwound;
                }
                if let Some(ivedges) = &iv.edges {
                    let m = edges.get_or_insert_with(HashMap::new);
                    for e in ivedges {
                        let a = m.entry((e.caller, e.callee)).or_default();
                        a.0 += e.calls;
                        a.1 += e.excl_ns;
                        a.2 += e.incl_ns;
                    }
                }
                edge_drops += iv.edge_drops as u64;
                for h in iv.hists.iter().flatten() {
                    let a = hists.entry(h.func).or_insert([0; HIST_BUCKETS]);
                    for (x, y) in a.iter_mut().zip(&h.counts) {
                        *x += y;
                    }
                }
            }
        }
        let mut functions: Vec<FunctionRow> = acc
            .into_iter()
            .map(|(f, (calls, s, t, unwound))| {
                let k = ds.names.funcs.get(f);
                FunctionRow {
                    function: k.function.to_string(),
                    image: k.image.to_string(),
                    calls,
                    self_ns: s,
                    total_ns: t,
                    unwound,
                    latency: hists.get(&f).and_then(Latency::of),
                }
            })
            .collect();
        let edges = edges.map(|m| {
            let mut rows: Vec<EdgeRow> = m
                .into_iter()
                .map(|((caller, callee), (calls, s, t))| {
                    let caller = caller.map(|c| ds.names.funcs.get(c));
                    let callee = ds.names.funcs.get(callee);
                    EdgeRow {
                        caller: caller.map(|c| c.function.to_string()),
                        caller_image: caller.map(|c| c.image.to_string()),
                        callee: callee.function.to_string(),
                        callee_image: callee.image.to_string(),
                        calls,
                        self_ns: s,
                        total_ns: t,
                    }
                })
                .collect();
            rows.sort_by(|a, b| {
                b.total_ns
                    .cmp(&a.total_ns)
                    .then_with(|| (&a.caller, &a.callee).cmp(&(&b.caller, &b.callee)))
            });
            rows
        });
        sort_functions(&mut functions, args.sort);
        if args.limit > 0 && !args.json {
            functions.truncate(args.limit);
        }
        let (status, damage) = if files.len() == 1 {
            status_of(first)
        } else {
            let all: Vec<String> = files.iter().map(|t| status_of(t).0).collect();
            let s = if all.iter().all(|s| s == "ended") {
                "ended".to_string()
            } else if all.iter().any(|s| s == "running") {
                "running".to_string()
            } else {
                "mixed".to_string()
            };
            (s, None)
        };
        out.push(ProcessReport {
            pid: if args.merge { 0 } else { first.pid },
            program: ds.names.programs.get(first.program).to_string(),
            exe: first
                .info(culprit_format::info_keys::EXE)
                .unwrap_or("")
                .to_string(),
            files: files
                .iter()
                .map(|t| {
                    t.path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default()
                })
                .collect(),
            status,
            damage,
            first_ns,
            last_ns,
            interval_ns: first.interval_ns,
            intervals,
            missed_intervals: missed,
            max_threads: threads,
            lost_frames: lost,
            overflows,
            source: first
                .info(culprit_format::info_keys::SOURCE)
                .unwrap_or("instrumentation")
                .to_string(),
            dropped_calls: dropped,
            trouble: files
                .iter()
                .flat_map(|t| t.info.iter())
                .filter(|(k, _)| k == "trouble")
                .map(|(_, v)| v.clone())
                .collect(),
            functions,
            edges,
            edge_drops,
        });
    }
    out
}

fn sort_functions(rows: &mut [FunctionRow], key: SortKey) {
    let avg = |r: &FunctionRow| r.self_ns.checked_div(r.calls).unwrap_or(0);
    rows.sort_by(|a, b| {
        let primary = match key {
            SortKey::Self_ => b.self_ns.cmp(&a.self_ns),
            SortKey::Total => b.total_ns.cmp(&a.total_ns),
            SortKey::Calls => b.calls.cmp(&a.calls),
            SortKey::Avg => avg(b).cmp(&avg(a)),
            SortKey::Name => a.function.cmp(&b.function),
        };
        primary
            .then_with(|| a.function.cmp(&b.function))
            .then_with(|| a.image.cmp(&b.image))
    });
}

fn sample_status(s: &SampleFile) -> String {
    match &s.status {
        FileStatus::Ended => "ended".into(),
        FileStatus::Damaged(_) => "damaged".into(),
        FileStatus::Open => "running or stopped".into(),
    }
}

fn sample_reports(
    ds: &Dataset,
    node: &NodeData,
    args: &Args,
    in_range: &dyn Fn(u64) -> bool,
) -> (Vec<SamplesReport>, Vec<EventRow>) {
    let mut reports = Vec::new();
    let mut events: HashMap<u32, u64> = HashMap::new();
    for s in &node.samples {
        let mut acc: HashMap<(u32, FuncId), u64> = HashMap::new();
        let (mut intervals, mut missed, mut total, mut lost) = (0usize, 0usize, 0u64, 0u64);
        let mut event = String::new();
        let (mut period, mut freq) = (None, None);
        for iv in s.intervals.iter().filter(|iv| in_range(iv.start_ns)) {
            intervals += 1;
            if iv.missed() {
                missed += 1;
                continue;
            }
            event = iv.event.to_string();
            if iv.freq {
                freq = Some(iv.period);
            } else {
                period = Some(iv.period);
            }
            total += iv.total;
            lost += iv.lost;
            for e in &iv.entries {
                let prog = ds.names.programs.get(e.program);
                if !args.programs.is_empty() && !args.programs.iter().any(|p| **p == **prog) {
                    continue;
                }
                *acc.entry((e.program, e.func)).or_default() += e.count;
            }
        }
        for iv in s.events.iter().filter(|iv| in_range(iv.start_ns)) {
            for c in &iv.counts {
                *events.entry(c.event).or_default() += c.count;
            }
        }
        let mut entries: Vec<SampleRow> = acc
            .into_iter()
            .map(|((p, f), n)| {
                let k = ds.names.funcs.get(f);
                SampleRow {
                    program: ds.names.programs.get(p).to_string(),
                    image: k.image.to_string(),
                    function: k.function.to_string(),
                    samples: n,
                }
            })
            .collect();
        entries.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then_with(|| a.program.cmp(&b.program))
                .then_with(|| a.function.cmp(&b.function))
        });
        if args.limit > 0 && !args.json {
            entries.truncate(args.limit);
        }
        if event.is_empty() {
            event = s
                .info(culprit_format::info_keys::EVENT)
                .unwrap_or("?")
                .to_string();
        }
        reports.push(SamplesReport {
            file: s
                .path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            status: sample_status(s),
            event,
            period,
            freq_hz: freq,
            intervals,
            missed_intervals: missed,
            total,
            lost,
            entries,
        });
    }
    let mut ev: Vec<EventRow> = events
        .into_iter()
        .map(|(e, count)| EventRow {
            event: ds.names.events.get(e).to_string(),
            count,
        })
        .collect();
    ev.sort_by(|a, b| a.event.cmp(&b.event));
    (reports, ev)
}

/// Statistics of each OS metric over the node's intervals in the range (all sampler runs).
fn os_report(
    ds: &Dataset,
    node: &NodeData,
    args: &Args,
    in_range: &dyn Fn(u64) -> bool,
) -> Option<OsReport> {
    let ivs: Vec<&culprit_analysis::data::OsInterval> = node
        .samples
        .iter()
        .flat_map(|s| &s.os)
        .filter(|iv| in_range(iv.start_ns))
        .collect();
    if ivs.is_empty() {
        return None;
    }
    let observed: Vec<&&culprit_analysis::data::OsInterval> =
        ivs.iter().filter(|iv| !iv.missed()).collect();
    let mut ids: Vec<u32> = observed
        .iter()
        .flat_map(|iv| iv.values.iter().map(|v| v.metric))
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let mut metrics: Vec<OsMetricRow> = ids
        .into_iter()
        .map(|id| {
            let key = ds.names.os_metrics.get(id);
            let vals: Vec<Option<f64>> = observed.iter().map(|iv| iv.get(id)).collect();
            let present: Vec<f64> = vals.iter().flatten().copied().collect();
            OsMetricRow {
                metric: key.name.to_string(),
                instance: key.instance.as_ref().map(|i| i.to_string()),
                unit: key.unit.to_string(),
                present: present.len(),
                absent: vals.len() - present.len(),
                mean: present.iter().sum::<f64>() / present.len().max(1) as f64,
                min: present.iter().copied().fold(f64::INFINITY, f64::min),
                max: present.iter().copied().fold(f64::NEG_INFINITY, f64::max),
                series: args.os_series.then(|| {
                    observed
                        .iter()
                        .zip(&vals)
                        .map(|(iv, v)| (iv.start_ns, *v))
                        .collect()
                }),
            }
        })
        .collect();
    // In the catalogue's order (disk, net, tcp, cpu, cg, proc; sysstat's order inside a
    // group), one device or interface after the other; names it does not know last.
    let rank = |m: &str| {
        let cat = culprit_format::os_metrics::CATALOGUE;
        let i = cat.iter().position(|d| d.name == m).unwrap_or(cat.len());
        let group = m.split('.').next().unwrap_or("");
        let g = cat
            .iter()
            .position(|d| d.name.split('.').next() == Some(group))
            .unwrap_or(cat.len());
        (g, i)
    };
    metrics.sort_by(|a, b| {
        let (ra, rb) = (rank(&a.metric), rank(&b.metric));
        (ra.0, &a.instance, ra.1, &a.metric).cmp(&(rb.0, &b.instance, rb.1, &b.metric))
    });
    Some(OsReport {
        interval_ns: ivs[0].dur_ns,
        intervals: ivs.len(),
        missed_intervals: ivs.len() - observed.len(),
        metrics,
    })
}

/// A value for the table: enough digits to read, not more.
fn os_number(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e6 {
        format!("{v:.3e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

fn print_os(out: &mut dyn std::io::Write, os: &OsReport) -> std::io::Result<()> {
    writeln!(
        out,
        "
OS metrics  ·  {} interval(s) of {}{}",
        os.intervals,
        time::duration(os.interval_ns),
        if os.missed_intervals > 0 {
            format!("  ·  {} missed", os.missed_intervals)
        } else {
            String::new()
        }
    )?;
    writeln!(
        out,
        "  {:<22} {:<10} {:>11} {:>11} {:>11}  {:<10} absent",
        "metric", "instance", "mean", "min", "max", "unit"
    )?;
    for m in &os.metrics {
        writeln!(
            out,
            "  {:<22} {:<10} {:>11} {:>11} {:>11}  {:<10} {}",
            m.metric,
            m.instance.as_deref().unwrap_or("-"),
            os_number(m.mean),
            os_number(m.min),
            os_number(m.max),
            m.unit,
            m.absent
        )?;
    }
    Ok(())
}

fn group_digits(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn print_human(out: &mut dyn std::io::Write, r: &Report, args: &Args) -> std::io::Result<()> {
    if r.to_ns > r.from_ns {
        writeln!(
            out,
            "culprit report: {} node(s), {} – {} ({})",
            r.nodes.len(),
            time::iso(r.from_ns),
            time::iso(r.to_ns),
            time::duration(r.to_ns - r.from_ns)
        )?;
    } else {
        writeln!(
            out,
            "culprit report: {} node(s), no intervals in range",
            r.nodes.len()
        )?;
    }
    for n in &r.nodes {
        writeln!(out)?;
        writeln!(out, "== node {} ==", n.node)?;
        for p in &n.processes {
            let who = if args.merge {
                format!("{} (merged: {} process files)", p.program, p.files.len())
            } else {
                format!("pid {} {}", p.pid, p.program)
            };
            let span = match (p.first_ns, p.last_ns) {
                (Some(a), Some(b)) => {
                    format!("{}–{}", time::clock(a), time::clock(b))
                }
                _ => "no intervals in range".to_string(),
            };
            let mut status = p.status.clone();
            if let Some(d) = &p.damage {
                status = format!("damaged ({d})");
            } else if status == "stopped" {
                status = "stopped without end marker (killed or crashed)".to_string();
            } else if status == "exec" {
                status = "replaced by exec (continues in the next file)".to_string();
            }
            let source = if p.source == "instrumentation" {
                String::new()
            } else {
                format!("  ·  counts from {}", p.source)
            };
            writeln!(
                out,
                "\n{who}  ·  {} interval(s) of {}  ·  {span}  ·  {status}{source}",
                p.intervals,
                time::duration(p.interval_ns)
            )?;
            let mut notes = Vec::new();
            if p.missed_intervals > 0 {
                notes.push(format!("{} interval(s) missed", p.missed_intervals));
            }
            if p.lost_frames > 0 {
                notes.push(format!(
                    "{} exit(s) matched no open call (the runtime lost track of them)",
                    p.lost_frames
                ));
            }
            let unwound: u64 = p.functions.iter().map(|f| f.unwound).sum();
            if unwound > 0 {
                notes.push(format!(
                    "{} call(s) did not return (left by longjmp, an exception or \
                     cancellation): counted as ending when the runtime noticed (column unwound)",
                    unwound
                ));
            }
            if p.overflows > 0 {
                notes.push(format!(
                    "{} call(s) not accounted (a call stack too deep, or too many distinct \
                     functions in one thread: see the limits in docs/tracer.md)",
                    p.overflows
                ));
            }
            if p.dropped_calls > 0 {
                notes.push(format!(
                    "{} call(s) not traced (a signal handler's calls while a hook ran, a \
                     thread without a table, or calls made while the runtime was stopped)",
                    p.dropped_calls
                ));
            }
            if !notes.is_empty() {
                writeln!(out, "  note: {}", notes.join("; "))?;
            }
            for t in &p.trouble {
                let (at, what) = t.split_once(": ").unwrap_or(("", t));
                let when = at
                    .parse::<u64>()
                    .map(time::clock)
                    .unwrap_or_else(|_| at.to_string());
                writeln!(out, "  trouble at {when}: {what}")?;
            }
            if p.functions.is_empty() {
                writeln!(out, "  (no calls in range)")?;
                continue;
            }
            print_functions(out, p)?;
            if args.graph {
                print_graph(out, p)?;
            }
            for f in &args.callers {
                print_neighbours(out, p, f, Side::Callers)?;
            }
            for f in &args.callees {
                print_neighbours(out, p, f, Side::Callees)?;
            }
        }
        for s in &n.samples {
            let rate = match (s.freq_hz, s.period) {
                (Some(f), _) => format!("{f} Hz"),
                (None, Some(p)) => format!("period {}", group_digits(p)),
                _ => "?".to_string(),
            };
            writeln!(
                out,
                "\nsamples  ·  {} at {rate}  ·  {} interval(s)  ·  {} samples  ·  {} lost  ·  {}",
                s.event,
                s.intervals,
                group_digits(s.total),
                group_digits(s.lost),
                s.status
            )?;
            if s.missed_intervals > 0 {
                writeln!(out, "  note: {} interval(s) missed", s.missed_intervals)?;
            }
            writeln!(
                out,
                "  {:>10}  {:>6}  {:<16}  function (image)",
                "samples", "%", "program"
            )?;
            for e in &s.entries {
                let pct = if s.total > 0 {
                    100.0 * e.samples as f64 / s.total as f64
                } else {
                    0.0
                };
                writeln!(
                    out,
                    "  {:>10}  {:>5.1}%  {:<16}  {} ({})",
                    group_digits(e.samples),
                    pct,
                    e.program,
                    e.function,
                    e.image
                )?;
            }
        }
        if !n.events.is_empty() {
            writeln!(out, "\nkernel events")?;
            for e in &n.events {
                writeln!(out, "  {:>12}  {}", group_digits(e.count), e.event)?;
            }
        }
        if let Some(os) = &n.os {
            print_os(out, os)?;
        }
    }
    Ok(())
}

/// The function table: calls, self, total, self per call; the unwound calls when any; the
/// call-duration quantiles when histograms were recorded.
fn print_functions(out: &mut dyn std::io::Write, p: &ProcessReport) -> std::io::Result<()> {
    let unwound = p.functions.iter().any(|f| f.unwound > 0);
    let lat = p.functions.iter().any(|f| f.latency.is_some());
    let mut head = format!(
        "  {:>12}  {:>10}  {:>10}  {:>10}",
        "calls", "self", "total", "self/call"
    );
    if unwound {
        head += &format!("  {:>10}", "unwound");
    }
    if lat {
        head += &format!("  {:>9}  {:>9}  {:>9}  {:>9}", "p50", "p90", "p99", "max");
    }
    writeln!(out, "{head}  function (image)")?;
    for f in &p.functions {
        let avg = f.self_ns.checked_div(f.calls).unwrap_or(0);
        let mut row = format!(
            "  {:>12}  {:>10}  {:>10}  {:>10}",
            group_digits(f.calls),
            time::duration(f.self_ns),
            time::duration(f.total_ns),
            time::duration(avg)
        );
        if unwound {
            row += &format!("  {:>10}", group_digits(f.unwound));
        }
        if lat {
            match &f.latency {
                Some(l) => {
                    row += &format!(
                        "  {:>9}  {:>9}  {:>9}  {:>9}",
                        time::duration(l.p50_ns),
                        time::duration(l.p90_ns),
                        time::duration(l.p99_ns),
                        if l.max_ns == u64::MAX {
                            "long".to_string()
                        } else {
                            time::duration(l.max_ns)
                        }
                    )
                }
                None => row += &format!("  {:>9}  {:>9}  {:>9}  {:>9}", "", "", "", ""),
            }
        }
        writeln!(out, "{row}  {} ({})", f.function, f.image)?;
    }
    Ok(())
}

fn no_graph(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(
        out,
        "  (no call graph: trace with CULPRIT_GRAPH=1, or `culprit record --graph`)"
    )
}

/// The call graph: from each function without a traced caller, its callees, indented. Edges
/// are caller → callee pairs (as gprof's), so a function's subtree is the same under every
/// caller: it is expanded once, later occurrences end in `…`; recursion ends in `(recursive)`.
fn print_graph(out: &mut dyn std::io::Write, p: &ProcessReport) -> std::io::Result<()> {
    let Some(edges) = &p.edges else {
        return no_graph(out);
    };
    writeln!(
        out,
        "\n  call graph (calls and time of each callee when called by the function above it)"
    )?;
    writeln!(
        out,
        "  {:>12}  {:>10}  {:>10}  function",
        "calls", "total", "self"
    )?;
    let mut expanded: std::collections::HashSet<&str> = std::collections::HashSet::new();
    let mut roots: Vec<&EdgeRow> = edges.iter().filter(|e| e.caller.is_none()).collect();
    roots.sort_by_key(|e| std::cmp::Reverse(e.total_ns));
    let mut path: Vec<&str> = Vec::new();
    for r in roots {
        graph_node(out, edges, r, 0, &mut path, &mut expanded)?;
    }
    if p.edge_drops > 0 {
        writeln!(
            out,
            "  note: {} call(s) have no edge (the runtime's edge table was full)",
            group_digits(p.edge_drops)
        )?;
    }
    Ok(())
}

fn graph_node<'a>(
    out: &mut dyn std::io::Write,
    edges: &'a [EdgeRow],
    e: &'a EdgeRow,
    depth: usize,
    path: &mut Vec<&'a str>,
    expanded: &mut std::collections::HashSet<&'a str>,
) -> std::io::Result<()> {
    let name = e.callee.as_str();
    let recursive = path.contains(&name);
    let again = !recursive && expanded.contains(name);
    let has_children = edges
        .iter()
        .any(|x| x.caller.as_deref() == Some(name) && x.callee != name);
    let mark = if recursive {
        " (recursive)"
    } else if again && has_children {
        " …"
    } else {
        ""
    };
    writeln!(
        out,
        "  {:>12}  {:>10}  {:>10}  {}{}{}",
        group_digits(e.calls),
        time::duration(e.total_ns),
        time::duration(e.self_ns),
        "  ".repeat(depth),
        name,
        mark
    )?;
    if recursive || again || depth >= 64 {
        return Ok(());
    }
    expanded.insert(name);
    path.push(name);
    let mut children: Vec<&EdgeRow> = edges
        .iter()
        .filter(|x| x.caller.as_deref() == Some(name))
        .collect();
    children.sort_by_key(|e| std::cmp::Reverse(e.total_ns));
    for c in children {
        graph_node(out, edges, c, depth + 1, path, expanded)?;
    }
    path.pop();
    Ok(())
}

/// Which neighbours `print_neighbours` lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Callers,
    Callees,
}

/// The callers (or callees) of the functions matching `pattern` (a name or a glob).
fn print_neighbours(
    out: &mut dyn std::io::Write,
    p: &ProcessReport,
    pattern: &str,
    side: Side,
) -> std::io::Result<()> {
    let Some(edges) = &p.edges else {
        return no_graph(out);
    };
    let matches = |f: &str| glob(pattern, f);
    let rows: Vec<&EdgeRow> = edges
        .iter()
        .filter(|e| match side {
            Side::Callers => matches(&e.callee),
            Side::Callees => e.caller.as_deref().is_some_and(matches),
        })
        .collect();
    let what = match side {
        Side::Callers => "callers",
        Side::Callees => "callees",
    };
    writeln!(out, "\n  {what} of {pattern}")?;
    if rows.is_empty() {
        writeln!(out, "  (none in range)")?;
        return Ok(());
    }
    writeln!(
        out,
        "  {:>12}  {:>10}  {:>10}  {}",
        "calls",
        "total",
        "self",
        match side {
            Side::Callers => "caller → function",
            Side::Callees => "function → callee",
        }
    )?;
    for e in rows {
        writeln!(
            out,
            "  {:>12}  {:>10}  {:>10}  {} → {}",
            group_digits(e.calls),
            time::duration(e.total_ns),
            time::duration(e.self_ns),
            e.caller.as_deref().unwrap_or("(no traced caller)"),
            e.callee
        )?;
    }
    Ok(())
}

/// `*` and `?` globs (a name without them matches itself).
fn glob(pattern: &str, name: &str) -> bool {
    fn go(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => go(&p[1..], n) || (!n.is_empty() && go(p, &n[1..])),
            (Some(b'?'), Some(_)) => go(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => go(&p[1..], &n[1..]),
            _ => false,
        }
    }
    go(pattern.as_bytes(), name.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digits_are_grouped() {
        assert_eq!(group_digits(0), "0");
        assert_eq!(group_digits(999), "999");
        assert_eq!(group_digits(1000), "1,000");
        assert_eq!(group_digits(1234567), "1,234,567");
    }

    #[test]
    fn sort_orders() {
        let row = |f: &str, calls, s, t| FunctionRow {
            function: f.into(),
            image: "x".into(),
            calls,
            self_ns: s,
            total_ns: t,
            unwound: 0,
            latency: None,
        };
        let mut rows = vec![
            row("a", 1, 10, 100),
            row("b", 5, 20, 30),
            row("c", 2, 20, 40),
        ];
        sort_functions(&mut rows, SortKey::Self_);
        assert_eq!(
            rows.iter().map(|r| &r.function[..]).collect::<Vec<_>>(),
            ["b", "c", "a"]
        );
        sort_functions(&mut rows, SortKey::Calls);
        assert_eq!(rows[0].function, "b");
        sort_functions(&mut rows, SortKey::Total);
        assert_eq!(rows[0].function, "a");
        sort_functions(&mut rows, SortKey::Avg);
        assert_eq!(rows[0].function, "a");
        sort_functions(&mut rows, SortKey::Name);
        assert_eq!(rows[0].function, "a");
    }
}
