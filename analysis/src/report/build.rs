//! [`build`]: a loaded [`Dataset`] over a time range into a [`Report`] — the tracer's
//! function, edge and latency totals per process, the sampler's profiles and event counts, the
//! OS metrics' statistics.

use std::collections::{BTreeMap, HashMap};

use crate::data::{Dataset, FileStatus, FuncId, NodeData, OsInterval, SampleFile, TraceFile};
use crate::error::{Error, Result};
use crate::latency::{self, Buckets};
use crate::time;

use super::types::{
    EdgeRow, EventRow, FunctionRow, Latency, MachineLoss, NodeReport, Only, OsMetricRow, OsReport,
    ProcessReport, Report, ReportOptions, SampleRow, SamplesReport, SortKey, SCHEMA,
};

/// (caller, callee) of an edge; no caller: a thread's first function.
type EdgeKey = (Option<FuncId>, FuncId);

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

/// Builds the report for `ds` as `args` ask.
pub fn build(ds: &Dataset, args: &ReportOptions) -> Result<Report> {
    let span = ds.span().unwrap_or_default();
    let (lo, hi) = (span.start_ns, span.end_ns);
    let from = args.from.map_or(0, |t| t.resolve(lo, hi));
    let to = args.to.map_or(u64::MAX, |t| t.resolve(lo, hi));
    if from >= to {
        return Err(Error::Settings(crate::options::settings_message!(
            "empty time range: {} {} is not before {} {}",
            @From,
            time::iso(from),
            @To,
            time::iso(to)
        )));
    }
    let in_range = |start: u64| start >= from && start < to;
    let mut nodes = Vec::new();
    let mut machine = MachineLosses::default();
    for node in &ds.nodes {
        let show = |o: Only| args.only.is_none() || args.only == Some(o);
        let processes = if show(Only::Traces) {
            trace_reports(ds, node, args, &in_range)
        } else {
            Vec::new()
        };
        let (samples, events) = sample_reports(ds, node, args, &in_range, &mut machine);
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
        machine_losses: machine.finish(),
        warnings: ds.warnings.clone(),
    })
}

/// The format version that added the sampler's Lost record.
const LOST_RECORD_SINCE: u16 = 7;

/// Machine-wide losses of the sampler runs, gathered over their node files: every node file
/// of a run carries the same counts, so each interval is taken once.
#[derive(Default)]
struct MachineLosses {
    /// Run identity (host, pid, start) → index.
    runs: HashMap<(String, String, String), usize>,
    losses: Vec<MachineLoss>,
    /// Per run: interval start → (samples, events, tracking, unsorted).
    intervals: Vec<BTreeMap<u64, [u64; 4]>>,
}

impl MachineLosses {
    /// The index of the run that wrote `s` for `node`.
    fn run(&mut self, s: &SampleFile, node: &str) -> usize {
        use culprit_format::info_keys as k;
        let get = |key: &str| s.info(key).unwrap_or("").to_string();
        let mut key = (get(k::HOST), get(k::PID), get(k::PROC_START_NS));
        if key.1.is_empty() {
            // No identity recorded: the file is its own run.
            key.2 = s.path.display().to_string();
        }
        let i = *self.runs.entry(key).or_insert_with(|| {
            self.losses.push(MachineLoss {
                host: get(k::HOST),
                sampler_pid: s.info(k::PID).and_then(|p| p.parse().ok()),
                ..MachineLoss::default()
            });
            self.intervals.push(BTreeMap::new());
            self.losses.len() - 1
        });
        if !self.losses[i].nodes.iter().any(|n| n == node) {
            self.losses[i].nodes.push(node.to_string());
        }
        i
    }

    /// Notes counts of run `run`'s interval at `start_ns`.
    fn add(&mut self, run: usize, start_ns: u64, counts: [u64; 4]) {
        let c = self.intervals[run].entry(start_ns).or_default();
        for (a, b) in c.iter_mut().zip(counts) {
            *a = (*a).max(b);
        }
    }

    /// The runs, in the order first seen (only runs that lost something are entered).
    fn finish(mut self) -> Vec<MachineLoss> {
        for (l, ivs) in self.losses.iter_mut().zip(&self.intervals) {
            for c in ivs.values() {
                l.samples += c[0];
                l.events += c[1];
                l.tracking += c[2];
                l.unsorted += c[3];
            }
        }
        self.losses
    }
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
    args: &ReportOptions,
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
                    let a = hists
                        .entry(h.func)
                        .or_insert([0; culprit_format::HIST_BUCKETS]);
                    for (x, y) in a.iter_mut().zip(&h.counts) {
                        *x += y;
                    }
                }
            }
        }
        let per_func: HashMap<FuncId, (u64, u64)> =
            acc.iter().map(|(&f, v)| (f, (v.0, v.1))).collect();
        let tracing_cost = super::cost::tracing_cost(ds, &files, &per_func, in_range);
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
        if args.limit > 0 {
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
            // A rotated process's pieces, in order, are its files.
            files: files
                .iter()
                .flat_map(|t| std::iter::once(&t.path).chain(&t.pieces))
                .map(|p| {
                    p.file_name()
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
            tracing_cost,
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
    args: &ReportOptions,
    in_range: &dyn Fn(u64) -> bool,
    machine: &mut MachineLosses,
) -> (Vec<SamplesReport>, Vec<EventRow>) {
    let mut reports = Vec::new();
    let mut events: HashMap<u32, u64> = HashMap::new();
    for s in &node.samples {
        let mut acc: HashMap<(u32, FuncId), u64> = HashMap::new();
        let (mut intervals, mut missed, mut total) = (0usize, 0usize, 0u64);
        // This node's own losses: samples, kernel-event records, process-tracking records.
        let mut own = [0u64; 3];
        // The run's entry among the machine-wide losses, once this file shows any.
        let mut run = None;
        let mut event = String::new();
        let (mut period, mut freq) = (None, None);
        for iv in s.intervals.iter().filter(|iv| in_range(iv.start_ns)) {
            intervals += 1;
            match iv.losses {
                Some(l) if l.is_own() => {
                    own[0] += l.samples;
                    own[1] += l.events;
                    own[2] += l.tracking;
                }
                Some(l) => {
                    let r = *run.get_or_insert_with(|| machine.run(s, &node.name));
                    machine.add(r, iv.start_ns, [l.samples, l.events, l.tracking, 0]);
                }
                // A file older than format 7: what the kernel dropped, of any kind, machine-wide.
                // (Since 7 a loss always has its Lost record.)
                None if iv.lost > 0 && s.version < LOST_RECORD_SINCE => {
                    let r = *run.get_or_insert_with(|| machine.run(s, &node.name));
                    machine.add(r, iv.start_ns, [0, 0, 0, iv.lost]);
                }
                None => {}
            }
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
        if args.limit > 0 {
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
            lost: own[0],
            lost_events: own[1],
            lost_tracking: own[2],
            machine_loss: run,
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
    args: &ReportOptions,
    in_range: &dyn Fn(u64) -> bool,
) -> Option<OsReport> {
    let ivs: Vec<&OsInterval> = node
        .samples
        .iter()
        .flat_map(|s| &s.os)
        .filter(|iv| in_range(iv.start_ns))
        .collect();
    if ivs.is_empty() {
        return None;
    }
    let observed: Vec<&&OsInterval> = ivs.iter().filter(|iv| !iv.missed()).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

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
