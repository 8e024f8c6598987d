//! Chrome trace-event JSON (the JSON Object Format: `{"traceEvents": […]}`), read by Perfetto
//! (ui.perfetto.dev, `trace_processor`) and `chrome://tracing`.
//!
//! Every data file is one trace "process", named `node · program [pid]` (traced processes) or
//! `node · samples (event)` (sampler runs); its counter tracks (`"ph": "C"`) carry, per
//! function, the values of each interval at the interval's start: `calls` and `self_ms` for
//! the tracer, `samples` for the sampler (track `program: function (image)`), `count` for
//! kernel events, `value` for OS metrics (track `metric instance (unit)`). A function absent
//! from an interval drops to 0 there (an absent OS metric is unknown, not 0: its track keeps
//! its value), and every track drops to 0 where its file's data ends or pauses.
//!
//! With a diagnosis (`culprit diagnose --json`), each node gets a `node · diagnosis` process:
//! per metric, its anomalous windows as slices (`"ph": "X"`, score and threshold in `args`;
//! windows overlap when WinShift < WinSize, so they alternate over lanes, one thread each) and
//! its faulty stretches; each node's combined verdict as an instant event (`"ph": "i"`) at the
//! end of the analysis, with its root-cause table; the culprits as one global marker.
//!
//! Timestamps are microseconds since the Unix epoch (so data and diagnosis line up); within a
//! track they never decrease. Events are written as the data is read: the file is never held
//! in memory.

use std::collections::HashMap;
use std::io;

use culprit_analysis::data::{EventInterval, OsInterval, SampleInterval, TraceInterval};
use culprit_analysis::diagnosis::{Diagnosis, MetricStatus};
use culprit_analysis::time::Timestamp;

use crate::error::{Error, Result};
use crate::out::Out;
use crate::request::{Request, Summary};
use crate::scan::{Cx, Reader, Sink};

/// Trace pids of the diagnosis processes start here (data files count from 1).
const DIAGNOSIS_PID: u64 = 1_000_000;

/// `ns` as trace-event microseconds (`123.456`).
fn ts(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".into())
}

/// A counter track: its name and series.
#[derive(Debug)]
struct Track {
    name: String,
    series: &'static [&'static str],
}

/// The counter tracks of one file (its functions, or its kernel events): what the last
/// interval showed (the keys with a non-zero value) and where it ended.
#[derive(Debug, Default)]
struct Group {
    end_ns: u64,
    live: Vec<u64>,
    tracks: HashMap<u64, Track>,
}

/// A group's id: (file number, what: functions, kernel events or OS metrics).
type GroupId = (usize, Kind);

/// What a group's tracks are of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Kind {
    /// Functions: absent from an interval means none (0).
    Functions,
    /// Kernel events: absent means none (0).
    Events,
    /// OS metrics: absent means unknown (the node could not provide it). The trace-event
    /// format has no gaps and a 0 would read as a measurement, so the track keeps its last
    /// value until the next one, or until the file's data ends or pauses.
    Os,
}

/// Writes events, one per line, comma-separated.
struct Writer<'a> {
    out: &'a mut Out,
    events: u64,
    groups: HashMap<GroupId, Group>,
    started: Vec<bool>,
}

impl Writer<'_> {
    fn event(&mut self, body: &str) -> io::Result<()> {
        let sep = if self.events == 0 { "\n" } else { ",\n" };
        self.events += 1;
        let w = self.out.w();
        w.write_all(sep.as_bytes())?;
        w.write_all(body.as_bytes())
    }

    fn meta(&mut self, pid: u64, tid: u64, what: &str, name: &str) -> io::Result<()> {
        self.event(&format!(
            r#"{{"ph":"M","name":"{what}","pid":{pid},"tid":{tid},"args":{{"name":{}}}}}"#,
            json_str(name)
        ))
    }

    fn counter(&mut self, pid: u64, name: &str, at: u64, args: &str) -> io::Result<()> {
        self.event(&format!(
            r#"{{"ph":"C","name":{},"pid":{pid},"tid":{pid},"ts":{},"args":{{{args}}}}}"#,
            json_str(name),
            ts(at)
        ))
    }

    /// The trace pid of data file `stream`, naming it on first use.
    fn process(&mut self, cx: &Cx<'_>) -> io::Result<u64> {
        let pid = cx.stream as u64 + 1;
        if self.started.len() <= cx.stream {
            self.started.resize(cx.stream + 1, false);
        }
        if !std::mem::replace(&mut self.started[cx.stream], true) {
            let name = match (cx.trace_file(), cx.sample_file()) {
                (Some(t), _) => format!(
                    "{} · {} [{}]",
                    cx.node,
                    cx.names.programs.get(t.program),
                    t.pid
                ),
                (_, Some(s)) => format!(
                    "{} · samples ({})",
                    cx.node,
                    s.info(culprit_format::info_keys::EVENT).unwrap_or("?")
                ),
                _ => cx.node.to_string(),
            };
            self.meta(pid, pid, "process_name", &name)?;
        }
        Ok(pid)
    }

    /// One interval of a track group: `values` are its non-zero counters.
    fn interval(
        &mut self,
        pid: u64,
        id: GroupId,
        start: u64,
        dur: u64,
        values: Vec<Counter>,
    ) -> io::Result<()> {
        let mut g = self.groups.remove(&id).unwrap_or_default();
        let result = self.interval_of(&mut g, id.1, pid, start, dur, values);
        self.groups.insert(id, g);
        result
    }

    fn interval_of(
        &mut self,
        g: &mut Group,
        kind: Kind,
        pid: u64,
        start: u64,
        dur: u64,
        values: Vec<Counter>,
    ) -> io::Result<()> {
        if !g.live.is_empty() && g.end_ns < start {
            for k in &g.live {
                let t = &g.tracks[k];
                self.counter(pid, &t.name, g.end_ns, &zeros(t.series))?;
            }
            g.live.clear();
        }
        let mut now: Vec<u64> = Vec::with_capacity(values.len());
        for (k, name, series, vals) in values {
            let args: Vec<String> = series
                .iter()
                .zip(&vals)
                .map(|(s, v)| format!("\"{s}\":{v}"))
                .collect();
            self.counter(pid, &name, start, &args.join(","))?;
            g.tracks.entry(k).or_insert(Track { name, series });
            now.push(k);
        }
        now.sort_unstable();
        if kind == Kind::Os {
            // Absent values keep their tracks (see Kind::Os).
            now.extend(g.live.iter().copied());
            now.sort_unstable();
            now.dedup();
        } else {
            for k in &g.live {
                if now.binary_search(k).is_err() {
                    let t = &g.tracks[k];
                    self.counter(pid, &t.name, start, &zeros(t.series))?;
                }
            }
        }
        g.live = now;
        g.end_ns = start + dur;
        Ok(())
    }

    /// Every track drops to 0 where its file's data ends.
    fn close_tracks(&mut self) -> io::Result<()> {
        let mut ids: Vec<GroupId> = self.groups.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            let g = self.groups.remove(&id).unwrap_or_default();
            for k in &g.live {
                let t = &g.tracks[k];
                self.counter(id.0 as u64 + 1, &t.name, g.end_ns, &zeros(t.series))?;
            }
        }
        Ok(())
    }
}

fn zeros(series: &[&str]) -> String {
    series
        .iter()
        .map(|s| format!("\"{s}\":0"))
        .collect::<Vec<_>>()
        .join(",")
}

/// One counter of an interval: (key within its track group, track name, series, values).
type Counter = (u64, String, &'static [&'static str], Vec<String>);

const TRACE_SERIES: &[&str] = &["calls", "self_ms"];
const SAMPLE_SERIES: &[&str] = &["samples"];
const EVENT_SERIES: &[&str] = &["count"];
const OS_SERIES: &[&str] = &["value"];

impl Writer<'_> {
    /// Draws one interval's counters of `cx`'s file.
    fn draw(
        &mut self,
        cx: &Cx<'_>,
        kind: Kind,
        start: u64,
        dur: u64,
        values: Vec<Counter>,
    ) -> Result<()> {
        let run = || -> io::Result<()> {
            let pid = self.process(cx)?;
            self.interval(pid, (cx.stream, kind), start, dur, values)
        };
        run().map_err(|e| self.out.error(e))
    }
}

impl Sink for Writer<'_> {
    fn trace(&mut self, cx: &Cx<'_>, iv: &TraceInterval) -> Result<()> {
        let values = iv
            .entries
            .iter()
            .filter(|e| e.calls > 0 || e.excl_ns > 0)
            .map(|e| {
                let k = cx.names.funcs.get(e.func);
                (
                    u64::from(e.func),
                    format!("{} ({})", k.function, k.image),
                    TRACE_SERIES,
                    vec![e.calls.to_string(), ms(e.excl_ns)],
                )
            })
            .collect();
        self.draw(cx, Kind::Functions, iv.start_ns, iv.dur_ns, values)
    }

    fn samples(&mut self, cx: &Cx<'_>, iv: &SampleInterval) -> Result<()> {
        let values = iv
            .entries
            .iter()
            .filter(|e| e.count > 0 && cx.selection.program(cx.names, e.program))
            .map(|e| {
                let k = cx.names.funcs.get(e.func);
                let program = cx.names.programs.get(e.program);
                (
                    (u64::from(e.program) << 32) | u64::from(e.func),
                    format!("{program}: {} ({})", k.function, k.image),
                    SAMPLE_SERIES,
                    vec![e.count.to_string()],
                )
            })
            .collect();
        self.draw(cx, Kind::Functions, iv.start_ns, iv.dur_ns, values)
    }

    fn events(&mut self, cx: &Cx<'_>, iv: &EventInterval) -> Result<()> {
        let values = iv
            .counts
            .iter()
            .filter(|c| c.count > 0)
            .map(|c| {
                (
                    u64::from(c.event),
                    cx.names.events.get(c.event).to_string(),
                    EVENT_SERIES,
                    vec![c.count.to_string()],
                )
            })
            .collect();
        self.draw(cx, Kind::Events, iv.start_ns, iv.dur_ns, values)
    }

    fn os(&mut self, cx: &Cx<'_>, iv: &OsInterval) -> Result<()> {
        // Zero is a value here: every present value is drawn, and an absent one leaves its
        // track as it was (see Kind::Os).
        let values = iv
            .values
            .iter()
            .map(|v| {
                let k = cx.names.os_metrics.get(v.metric);
                let name = match &k.instance {
                    Some(i) => format!("{} {i} ({})", k.name, k.unit),
                    None => format!("{} ({})", k.name, k.unit),
                };
                (u64::from(v.metric), name, OS_SERIES, vec![num(v.value)])
            })
            .collect();
        self.draw(cx, Kind::Os, iv.start_ns, iv.dur_ns, values)
    }
}

fn ms(ns: u64) -> String {
    format!("{}.{:06}", ns / 1_000_000, ns % 1_000_000)
}

/// The diagnosis, drawn: see the module documentation.
fn diagnosis(w: &mut Writer<'_>, d: &Diagnosis, nodes: &[String]) -> io::Result<()> {
    let size_ns = (d.settings.win_size_s * 1e9).round() as u64;
    let shift_ns = ((d.settings.win_shift_s * 1e9).round() as u64).max(1);
    let lanes = size_ns.div_ceil(shift_ns).max(1);
    let end_ns = d.to.map(Timestamp::ns);
    let wanted = |n: &str| nodes.is_empty() || nodes.iter().any(|x| x == n);
    let mut first_pid = None;
    for (i, node) in d.nodes.iter().enumerate().filter(|(_, n)| wanted(n)) {
        let pid = DIAGNOSIS_PID + i as u64;
        first_pid.get_or_insert(pid);
        w.meta(pid, 0, "process_name", &format!("{node} · diagnosis"))?;
        w.meta(pid, 0, "thread_name", "verdict")?;
        for (mi, m) in d.metrics.iter().enumerate() {
            let Some(nr) = m.nodes.iter().find(|r| &r.node == node) else {
                continue;
            };
            let base = 1 + mi as u64 * (lanes + 1);
            let faulty_tid = base + lanes;
            w.meta(
                pid,
                faulty_tid,
                "thread_name",
                &format!("{}: faulty", m.metric),
            )?;
            for lane in 0..lanes {
                w.meta(
                    pid,
                    base + lane,
                    "thread_name",
                    &format!("{}: anomalous windows ({}/{lanes})", m.metric, lane + 1),
                )?;
            }
            let mut windows = nr.anomalous_windows.clone();
            windows.sort_by_key(|a| a.start_ns);
            for a in &windows {
                let lane = (a.start_ns / shift_ns) % lanes;
                w.event(&format!(
                    r#"{{"ph":"X","cat":"diagnosis","name":"anomalous","pid":{pid},"tid":{},"ts":{},"dur":{},"args":{{"score":{},"threshold":{},"unit":{}}}}}"#,
                    base + lane,
                    ts(a.start_ns),
                    ts(size_ns),
                    num(a.score),
                    num(a.threshold),
                    json_str(&m.score_unit)
                ))?;
            }
            for e in &nr.episodes {
                let (from, to) = (e.from.ns(), e.to.ns());
                w.event(&format!(
                    r#"{{"ph":"X","cat":"diagnosis","name":"faulty","pid":{pid},"tid":{faulty_tid},"ts":{},"dur":{},"args":{{"verdict":{}}}}}"#,
                    ts(from),
                    ts(to.saturating_sub(from)),
                    json_str(match nr.verdict {
                        MetricStatus::Faulty => "faulty",
                        MetricStatus::Ok => "ok",
                        MetricStatus::NoData => "no-data",
                        MetricStatus::NotCompared => "not-compared",
                        MetricStatus::Undecided => "undecided",
                    })
                ))?;
            }
        }
        if let (Some(at), Some(v)) = (end_ns, d.verdict(node)) {
            let verdict = serde_json::to_value(v.combined.verdict)
                .ok()
                .and_then(|x| x.as_str().map(str::to_string))
                .unwrap_or_default();
            let top: Vec<String> = d
                .metrics
                .iter()
                .filter_map(|m| m.nodes.iter().find(|r| &r.node == node).map(|r| (m, r)))
                .flat_map(|(m, r)| {
                    r.top.iter().map(move |c| {
                        format!(
                            "{}: {} {} ({})",
                            m.metric,
                            c.function,
                            c.direction,
                            num(c.deviation)
                        )
                    })
                })
                .collect();
            w.event(&format!(
                r#"{{"ph":"i","s":"p","cat":"diagnosis","name":{},"pid":{pid},"tid":0,"ts":{},"args":{{"reason":{},"metrics":{},"top":{}}}}}"#,
                json_str(&format!("{node}: {verdict}")),
                ts(at),
                json_str(&v.combined.reason),
                serde_json::to_string(&v.combined.metrics).unwrap_or_else(|_| "[]".into()),
                serde_json::to_string(&top).unwrap_or_else(|_| "[]".into()),
            ))?;
        }
    }
    if let (Some(at), Some(pid)) = (end_ns, first_pid) {
        let what = if d.culprits.is_empty() {
            "no culprit".to_string()
        } else {
            format!("culprit: {}", d.culprits.join(", "))
        };
        w.event(&format!(
            r#"{{"ph":"i","s":"g","cat":"diagnosis","name":{},"pid":{pid},"tid":0,"ts":{}}}"#,
            json_str(&what),
            ts(at)
        ))?;
    }
    Ok(())
}

/// A finite JSON number.
fn num(x: f64) -> String {
    if x.is_finite() {
        format!("{x}")
    } else {
        "null".into()
    }
}

pub(crate) fn export(req: &Request, reader: &Reader) -> Result<Summary> {
    let diag = match &req.diagnosis {
        Some(path) => {
            let text =
                std::fs::read_to_string(path).map_err(|e| Error::io("cannot read", path, e))?;
            let d: Diagnosis = serde_json::from_str(&text).map_err(|source| Error::Diagnosis {
                path: path.clone(),
                source,
            })?;
            Some(d)
        }
        None => None,
    };
    let mut out = Out::create(req.output.as_deref(), false)?;
    let head = concat!(
        r#"{"displayTimeUnit":"ms","otherData":{"producer":"culprit export","#,
        r#""timestamps":"microseconds since the Unix epoch"},"traceEvents":["#
    );
    out.w()
        .write_all(head.as_bytes())
        .map_err(|e| out.error(e))?;
    let mut w = Writer {
        out: &mut out,
        events: 0,
        groups: HashMap::new(),
        started: Vec::new(),
    };
    let pass = reader.run(&mut w)?;
    let mut tail = || -> io::Result<()> {
        w.close_tracks()?;
        if let Some(d) = &diag {
            diagnosis(&mut w, d, &req.selection.nodes)?;
        }
        Ok(())
    };
    tail().map_err(|e| w.out.error(e))?;
    let items = w.events;
    out.w().write_all(b"\n]}\n").map_err(|e| out.error(e))?;
    let written = out.finish()?;
    let mut notes = Vec::new();
    if items == 0 {
        notes.push("nothing in the selection: the trace has no events".to_string());
    }
    Ok(Summary {
        written: written.into_iter().collect(),
        items,
        notes,
        warnings: pass.warnings,
    })
}
