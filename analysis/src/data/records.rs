//! Reading a writer's stream into the [`Dataset`]: the records committed since the last read
//! (tracer intervals with their unwound calls, edges and histograms, checkpoints, stack
//! snapshots; sampler intervals, call chains, event counts, OS metrics), functions symbolized
//! and names interned as they arrive. Damage ends a stream's reading, keeping what came before.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use culprit_format::read::{OpenError, StreamReader, StreamState};
use culprit_format::{info_keys, object_flags, rotation, samples_flags, IntervalRec, Record};

use super::files::{merge_edges, merge_hists, merge_trace_entries};
use super::symbols::Object;
use super::{
    push_warning, stacks, Dataset, EventCount, EventInterval, FileStatus, FuncId, FuncKey,
    LayerStretch, OpenFrame, OsInterval, OsMetricKey, OsValue, ReadAt, RefreshStats, SampleCount,
    SampleFile, SampleInterval, SampleStack, StackSnapshot, ThreadCalls, TraceDemotions, TraceEdge,
    TraceEntry, TraceFile, TraceHist, TraceInterval,
};

impl Dataset {
    fn trace_func(&mut self, t: &mut TraceFile, addr: u64) -> FuncId {
        if let Some(&id) = t.addr_cache.get(&addr) {
            return id;
        }
        let key = self.symbols.function_at(&t.objects, addr);
        let id = self.names.funcs.intern(key);
        t.addr_cache.insert(addr, id);
        id
    }

    pub(super) fn read_trace(&mut self, t: &mut TraceFile, stats: &mut RefreshStats) {
        if std::mem::take(&mut t.provisional) {
            t.intervals.pop();
        }
        t.checkpoint = None;
        let done = matches!(t.status, FileStatus::Ended | FileStatus::Damaged(_));
        // The stacks region before the records: the writer takes a snapshot after committing
        // the intervals it follows, so every one of them is read below (`stacks::check`). A
        // file done with is read once.
        let region = if !done || (t.stacks.is_none() && t.stacks_damage.is_none()) {
            self.source
                .open(t.current_path())
                .ok()
                .and_then(|f| stacks::read_region(&*f))
        } else {
            None
        };
        if let Some(mut r) = self.read_records(t, stats) {
            // The writer's checkpoint of the interval in progress, right after what was read.
            if t.status == FileStatus::Open {
                if let Ok(Some(p)) = r.checkpoint() {
                    let mut ti = self.trace_interval(t, &p.interval);
                    for rec in &p.extras {
                        self.add_extra(t, &mut ti, rec);
                    }
                    t.checkpoint = Some(ti);
                }
            }
        }
        if let Some(region) = region {
            self.take_stacks(t, region);
        }
    }

    /// Takes the newest snapshot of a read of `t`'s stacks region when it is consistent with
    /// the records read (see `stacks`): else keeps the previous one while the writer runs,
    /// and once the file is done, drops it and records the damage.
    fn take_stacks(&mut self, t: &mut TraceFile, region: stacks::RegionRead) {
        let done = matches!(t.status, FileStatus::Ended | FileStatus::Damaged(_));
        let fit = region.snapshot.as_ref().map(|s| stacks::check(s, t));
        let damage = match &fit {
            Some(Err(stacks::Unfit::Inconsistent(why))) => Some(why.clone()),
            Some(Err(stacks::Unfit::Ahead(why))) if done => Some(why.clone()),
            _ if done => region.damage.clone(),
            _ => None,
        };
        if let Some(why) = damage {
            t.stacks = None;
            t.stacks_damage = Some(why);
            return;
        }
        let (Some(snap), Some(Ok(()))) = (region.snapshot, fit) else {
            return;
        };
        let threads = snap
            .threads
            .iter()
            .map(|th| ThreadCalls {
                tid: th.tid,
                serial: th.serial,
                depth: th.depth,
                flags: th.flags,
                still_ms: th.still_ms,
                frames: th
                    .frames
                    .iter()
                    .map(|fr| OpenFrame {
                        func: self.trace_func(t, fr.addr),
                        entry_ns: fr.entry_ns,
                    })
                    .collect(),
            })
            .collect();
        t.stacks_damage = None;
        t.stacks = Some(StackSnapshot {
            taken_ns: snap.taken_ns,
            omitted: snap.omitted,
            threads,
        });
    }

    /// A stream of `path` positioned at `from`; `None` (with `status` saying why, or a warning)
    /// when it cannot be read now.
    fn reader(
        &mut self,
        path: &Path,
        from: u64,
        status: &mut FileStatus,
    ) -> Option<StreamReader<Box<dyn ReadAt>>> {
        let f = match self.source.open(path) {
            Ok(f) => f,
            Err(e) => {
                self.warn(format!("{}: cannot read: {e}", path.display()));
                return None;
            }
        };
        match StreamReader::resume(f, from) {
            Ok(r) => Some(r),
            Err(OpenError::Io(e)) => {
                self.warn(format!("{}: cannot read: {e}", path.display()));
                None
            }
            Err(e) => {
                self.warn(format!("{}: {e}", path.display()));
                *status = FileStatus::Damaged(e.to_string());
                None
            }
        }
    }

    /// The file's status from its stream's state, with a warning for damage. `marked`: an end
    /// marker (End record) was read.
    fn settle(&mut self, path: &Path, state: &StreamState, status: &mut FileStatus, marked: bool) {
        match state {
            StreamState::Open => {}
            StreamState::Ended if marked => *status = FileStatus::Ended,
            StreamState::Ended => {
                // A header that says "ended" over records without an end marker: its committed
                // end was moved back (damage), or the file would look like a node that stopped.
                let why =
                    "the header says the file ended, but its last record is not an end marker";
                self.warn(format!("{}: {why}; data before it is kept", path.display()));
                *status = FileStatus::Damaged(why.to_string());
            }
            StreamState::Damaged(d) => {
                self.warn(format!("{}: {d}; data before it is kept", path.display()));
                *status = FileStatus::Damaged(d.reason.clone());
            }
        }
    }

    /// Adds an Unwound, Edges or Histograms record to its interval `ti` (same start).
    fn add_extra(&mut self, t: &mut TraceFile, ti: &mut TraceInterval, rec: &Record<'_>) {
        match rec {
            Record::Cost(c) => {
                // Two parts of one interval (a flush split it) add up.
                let sum = ti.cost.get_or_insert(culprit_format::CostRec {
                    interval: c.interval,
                    ..Default::default()
                });
                sum.cpu_ns += c.cpu_ns;
                sum.cost_ns += c.cost_ns;
                sum.calls += c.calls;
            }
            Record::Unwound(u) => {
                for e in u.entries() {
                    let func = self.trace_func(t, e.addr);
                    match ti.entries.iter_mut().find(|x| x.func == func) {
                        Some(x) => x.unwound += e.calls,
                        None => self.warn(format!(
                            "{}: unwound calls of a function without calls; ignored",
                            t.path.display()
                        )),
                    }
                }
            }
            Record::Edges(e) => {
                let edges = ti.edges.get_or_insert_with(Vec::new);
                ti.edge_drops = ti.edge_drops.saturating_add(e.dropped);
                for x in e.entries() {
                    let caller = (x.caller != 0).then(|| self.trace_func(t, x.caller));
                    let callee = self.trace_func(t, x.callee);
                    edges.push(TraceEdge {
                        caller,
                        callee,
                        calls: x.calls,
                        excl_ns: x.excl_ns,
                        incl_ns: x.incl_ns,
                    });
                }
                merge_edges(edges);
            }
            Record::Histograms(h) => {
                let hists = ti.hists.get_or_insert_with(Vec::new);
                for x in h.entries() {
                    let func = self.trace_func(t, x.addr);
                    hists.push(TraceHist {
                        func,
                        counts: x.counts,
                    });
                }
                merge_hists(hists);
            }
            _ => {}
        }
    }

    fn trace_interval(&mut self, t: &mut TraceFile, iv: &IntervalRec<'_>) -> TraceInterval {
        if t.interval_ns == 0 {
            t.interval_ns = iv.dur_ns;
        }
        let mut entries: Vec<TraceEntry> = Vec::with_capacity(iv.len());
        for e in iv.entries() {
            let func = self.trace_func(t, e.addr);
            entries.push(TraceEntry {
                func,
                calls: e.calls,
                excl_ns: e.excl_ns,
                incl_ns: e.incl_ns,
                unwound: 0,
            });
        }
        merge_trace_entries(&mut entries);
        TraceInterval {
            head: iv.head,
            entries,
            edges: None,
            edge_drops: 0,
            hists: None,
            cost: None,
        }
    }

    /// One record of a trace file.
    fn trace_record(&mut self, t: &mut TraceFile, rec: Record<'_>, stats: &mut RefreshStats) {
        match rec {
            Record::Info(info) => {
                t.info.extend(info.pairs);
                if let Some(v) = t.info(info_keys::INTERVAL_NS).and_then(|v| v.parse().ok()) {
                    t.interval_ns = v;
                }
                let prog = t
                    .info(info_keys::PROGRAM)
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("pid{}", t.pid));
                t.program = self.names.programs.intern(Arc::from(prog.as_str()));
            }
            Record::Object(o) => {
                let path = PathBuf::from(o.path.as_ref());
                if o.flags & object_flags::UNLOADED != 0 {
                    t.objects.retain(|x| x.id != o.id);
                    // Addresses may now belong to something else.
                    t.addr_cache.clear();
                    return;
                }
                let readable = if o.flags & object_flags::VDSO != 0 {
                    None
                } else {
                    let warnings = &mut self.warnings;
                    self.symbols
                        .readable_image(&path, o.build_id, &mut |w| push_warning(warnings, w))
                };
                let image: Arc<str> = if o.flags & object_flags::VDSO != 0 {
                    Arc::from("[vdso]")
                } else {
                    Arc::from(
                        path.file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_else(|| o.path.to_string()),
                    )
                };
                t.objects.retain(|x| x.id != o.id);
                t.objects.push(Object {
                    id: o.id,
                    flags: o.flags,
                    bias: o.bias,
                    start: o.start,
                    end: o.end,
                    readable,
                    path,
                    image,
                });
                t.addr_cache.clear();
            }
            Record::Interval(iv) => {
                let ti = self.trace_interval(t, &iv);
                t.intervals.push(ti);
                stats.new_intervals += 1;
            }
            rec @ (Record::Unwound(_)
            | Record::Edges(_)
            | Record::Histograms(_)
            | Record::Cost(_)) => {
                let start = extra_interval_start(&rec);
                // It follows its Interval record.
                match t.intervals.pop() {
                    Some(mut ti) if Some(ti.start_ns) == start => {
                        self.add_extra(t, &mut ti, &rec);
                        t.intervals.push(ti);
                    }
                    last => {
                        t.intervals.extend(last);
                        self.warn(format!(
                            "{}: a record of interval {} without its Interval record; ignored",
                            t.path.display(),
                            start.unwrap_or(0)
                        ));
                    }
                }
            }
            Record::Wakeups(w) => t.wakeups.push(w),
            Record::Demotions(d) => {
                let entries = d
                    .entries
                    .into_iter()
                    .map(|e| e.map_funcs(|a| self.trace_func(t, a)))
                    .collect();
                t.demotions.push(TraceDemotions {
                    head: d.head,
                    entries,
                });
            }
            Record::End(e) if rotation::is_rotated(e.reason) => t.rotated_end = Some(e.end_ns),
            Record::End(e) => {
                t.end_ns = Some(e.end_ns);
            }
            Record::Layers(l) => t.layers.push(LayerStretch::of(&l)),
            Record::Requests(r) => {
                let s = super::requests::stretch(&r, |addr| self.trace_func(t, addr));
                t.requests.push(s);
            }
            _ => {}
        }
    }

    pub(super) fn read_samples(&mut self, s: &mut SampleFile, stats: &mut RefreshStats) {
        self.read_records(s, stats);
    }

    /// Reads the records of `f` committed since the last read; returns the reader (at the
    /// committed end) unless the file is done with or cannot be read now.
    fn read_records<F: Stream>(
        &mut self,
        f: &mut F,
        stats: &mut RefreshStats,
    ) -> Option<StreamReader<Box<dyn ReadAt>>> {
        let (path, consumed, status) = f.parts();
        if matches!(status, FileStatus::Damaged(_) | FileStatus::Ended) {
            return None;
        }
        let path = path.to_path_buf();
        let mut r = self.reader(&path, *consumed, status)?;
        let start = r.offset();
        loop {
            // The read limit: whole records, then the rest at the next refresh.
            if let Some(limit) = self.read_limit {
                if r.offset() - start >= limit && r.offset() < r.header().committed_end {
                    stats.unread_streams += 1;
                    break;
                }
            }
            let rec = match r.next_record() {
                Ok(Some(rec)) => rec,
                Ok(None) => break,
                Err(e) => {
                    self.warn(format!("{}: read error: {e}", path.display()));
                    break;
                }
            };
            F::record(self, f, rec, stats);
        }
        let marked = f.end_marker();
        let (_, consumed, status) = f.parts();
        *consumed = r.offset();
        self.settle(&path, r.state(), status, marked);
        Some(r)
    }

    /// One record of a sampler file.
    fn samples_record(&mut self, s: &mut SampleFile, rec: Record<'_>, stats: &mut RefreshStats) {
        match rec {
            Record::Info(info) => s.info.extend(info.pairs),
            Record::Strings(st) => {
                for (id, text) in st.items() {
                    s.strings.insert(id, Arc::from(text.as_ref()));
                }
            }
            Record::Samples(rec) => {
                let event = s
                    .strings
                    .get(&rec.event_sid)
                    .cloned()
                    .unwrap_or_else(|| Arc::from("?"));
                let mut entries = Vec::with_capacity(rec.len());
                for e in rec.entries() {
                    let program = self.string_or(&s.strings, e.program);
                    let image = self.string_or(&s.strings, e.image);
                    let function = self.string_or(&s.strings, e.function);
                    entries.push(SampleCount {
                        program: self.names.programs.intern(program),
                        func: self.names.funcs.intern(FuncKey { image, function }),
                        count: e.count,
                    });
                }
                s.intervals.push(SampleInterval {
                    start_ns: rec.start_ns,
                    dur_ns: rec.dur_ns,
                    flags: rec.flags,
                    event,
                    period: rec.period,
                    freq: rec.flags & samples_flags::FREQ != 0,
                    total: rec.total,
                    lost: rec.lost,
                    losses: None,
                    entries,
                    stacks: None,
                });
                stats.new_intervals += 1;
            }
            Record::Lost(rec) => {
                // The sampler writes an interval's losses after its Samples record.
                match s.intervals.last_mut() {
                    Some(iv) if iv.start_ns == rec.interval.start_ns => iv.losses = Some(rec),
                    _ => self.warn(format!(
                        "{}: losses of an interval without samples (start {} ns) ignored",
                        s.path.display(),
                        rec.interval.start_ns
                    )),
                }
            }
            Record::Stacks(rec) => {
                // The sampler writes an interval's chains right after its Samples record.
                let mut stacks = Vec::with_capacity(rec.len());
                for e in rec.entries() {
                    let program = self.string_or(&s.strings, e.program);
                    let frames = e
                        .frames
                        .iter()
                        .map(|&(image, function)| {
                            let image = self.string_or(&s.strings, image);
                            let function = self.string_or(&s.strings, function);
                            self.names.funcs.intern(FuncKey { image, function })
                        })
                        .collect();
                    stacks.push(SampleStack {
                        program: self.names.programs.intern(program),
                        frames,
                        count: e.count,
                    });
                }
                match s.intervals.last_mut() {
                    Some(iv) if iv.start_ns == rec.interval.start_ns => {
                        iv.stacks.get_or_insert_with(Vec::new).extend(stacks);
                    }
                    _ => self.warn(format!(
                        "{}: call chains of an interval without samples (start {} ns) ignored",
                        s.path.display(),
                        rec.interval.start_ns
                    )),
                }
            }
            Record::Events(rec) => {
                let mut counts = Vec::with_capacity(rec.len());
                for e in rec.entries() {
                    let name = self.string_or(&s.strings, e.event);
                    counts.push(EventCount {
                        event: self.names.events.intern(name),
                        count: e.count,
                    });
                }
                s.events.push(EventInterval {
                    start_ns: rec.start_ns,
                    dur_ns: rec.dur_ns,
                    flags: rec.flags,
                    counts,
                });
                stats.new_intervals += 1;
            }
            Record::OsMetrics(rec) => {
                let os = self.read_os(&s.strings, &rec);
                s.os.push(os);
                stats.new_intervals += 1;
            }
            Record::End(e) if rotation::is_rotated(e.reason) => s.rotated_end = Some(e.end_ns),
            Record::End(e) => s.end_ns = Some(e.end_ns),
            Record::Layers(l) => s.layers.push(LayerStretch::of(&l)),
            _ => {}
        }
    }

    fn read_os(
        &mut self,
        strings: &HashMap<u32, Arc<str>>,
        rec: &culprit_format::OsMetricsRec<'_>,
    ) -> OsInterval {
        let mut values: Vec<OsValue> = Vec::with_capacity(rec.len());
        for e in rec.entries() {
            if !e.value.is_finite() {
                continue; // writers never write these; read as absent
            }
            let key = OsMetricKey {
                name: self.string_or(strings, e.metric),
                instance: e.instance.map(|i| self.string_or(strings, i)),
                unit: self.string_or(strings, e.unit),
            };
            values.push(OsValue {
                metric: self.names.os_metrics.intern(key),
                value: e.value,
            });
        }
        values.sort_by_key(|v| v.metric);
        values.dedup_by_key(|v| v.metric);
        OsInterval {
            start_ns: rec.start_ns,
            dur_ns: rec.dur_ns,
            span_ns: rec.span_ns,
            flags: rec.flags,
            values,
        }
    }

    fn string_or(&mut self, strings: &HashMap<u32, Arc<str>>, id: u32) -> Arc<str> {
        strings
            .get(&id)
            .cloned()
            .unwrap_or_else(|| Arc::from(format!("?{id}").as_str()))
    }
}

/// What the loader keeps of a writer's stream, as [`Dataset::read_records`] sees it.
trait Stream {
    /// The file, where reading stands, and the file's status.
    fn parts(&mut self) -> (&Path, &mut u64, &mut FileStatus);
    /// Takes in one record.
    fn record(ds: &mut Dataset, f: &mut Self, rec: Record<'_>, stats: &mut RefreshStats);
    /// An end marker (or a rotation's) was read.
    fn end_marker(&self) -> bool;
}

impl Stream for TraceFile {
    fn parts(&mut self) -> (&Path, &mut u64, &mut FileStatus) {
        let current = self.pieces.last().unwrap_or(&self.path);
        (current, &mut self.consumed, &mut self.status)
    }
    fn record(ds: &mut Dataset, f: &mut Self, rec: Record<'_>, stats: &mut RefreshStats) {
        ds.trace_record(f, rec, stats);
    }
    fn end_marker(&self) -> bool {
        self.end_ns.is_some() || self.rotated_end.is_some()
    }
}

impl Stream for SampleFile {
    fn parts(&mut self) -> (&Path, &mut u64, &mut FileStatus) {
        let current = self.pieces.last().unwrap_or(&self.path);
        (current, &mut self.consumed, &mut self.status)
    }
    fn record(ds: &mut Dataset, f: &mut Self, rec: Record<'_>, stats: &mut RefreshStats) {
        ds.samples_record(f, rec, stats);
    }
    fn end_marker(&self) -> bool {
        self.end_ns.is_some() || self.rotated_end.is_some()
    }
}

/// Adds a warning unless it was given already.
/// The interval start of an Unwound, Edges or Histograms record.
fn extra_interval_start(rec: &Record<'_>) -> Option<u64> {
    match rec {
        Record::Unwound(r) => Some(r.interval.start_ns),
        Record::Edges(r) => Some(r.interval.start_ns),
        Record::Histograms(r) => Some(r.interval.start_ns),
        Record::Cost(r) => Some(r.interval.start_ns),
        _ => None,
    }
}
