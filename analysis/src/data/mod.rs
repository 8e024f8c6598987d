//! Loading the data: every node's trace and sample files, decoded, symbolized and interned,
//! ready for `report` and the analysis.
//!
//! Records come from a [`Source`] ([`DirSource`]: data directories). Loading is incremental:
//! [`Dataset::refresh`] reads only what was committed since the last call (new nodes, new
//! streams, new records). Offline analysis is one refresh; `--follow` calls it again as records
//! arrive: live and offline analyses take the same path.
//!
//! Functions are identified across nodes by (image base name, demangled symbol), never by
//! address: trace addresses are mapped through the process's recorded load map (`symbols.rs`);
//! sample entries arrive already named by the sampler.
//!
//! Damaged input loses nothing: records before a corrupt or truncated record are kept, the file
//! is marked [`FileStatus::Damaged`] and a warning says which file and where.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use culprit_format::{
    file_state, info_keys, object_flags, pending_records, records_at, samples_flags, FileKind,
    IntervalRec, ParsedFile, Record, MAX_RECORD_LEN,
};

mod files;
pub mod names;
pub mod source;
mod symbols;

use files::{empty_samples, empty_trace, merge_edges, merge_hists, merge_trace_entries};
pub use files::{
    process_alive, EventCount, EventInterval, FileStatus, NodeData, OsInterval, OsValue,
    SampleCount, SampleFile, SampleInterval, TraceEdge, TraceEntry, TraceFile, TraceHist,
    TraceInterval,
};
pub use names::{EventId, FuncId, FuncKey, Interner, Names, OsMetricId, OsMetricKey, ProgramId};
pub use source::{DirSource, NodeListing, ReadAt, Source};
use symbols::{Object, Symbols};

use crate::error::{Error, Result};

/// What to load.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Also load directories that are not nodes (`_unassigned`).
    pub include_unassigned: bool,
    /// Read binaries under this root instead of `/` (like `perf report --symfs`).
    pub symfs: Option<PathBuf>,
    /// Only these nodes (all when empty).
    pub nodes: Vec<String>,
}

/// The nodes of one or more data directories.
pub struct Dataset {
    /// Nodes, sorted by name.
    pub nodes: Vec<NodeData>,
    /// Dataset-wide name tables.
    pub names: Names,
    /// Problems found while loading (one line each).
    pub warnings: Vec<String>,
    source: Box<dyn Source>,
    opts: LoadOptions,
    symbols: Symbols,
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset")
            .field("nodes", &self.nodes.len())
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

/// What changed in one [`Dataset::refresh`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RefreshStats {
    /// New files found.
    pub new_files: usize,
    /// New interval records read (trace + samples + events).
    pub new_intervals: usize,
}

impl Dataset {
    /// Opens data directories: each path is a data root (holding `<node>/` directories) or a
    /// node directory (holding `.cul` files). Reads everything committed so far.
    pub fn open(paths: &[PathBuf], opts: LoadOptions) -> Result<Dataset> {
        let source = DirSource::new(paths.to_vec(), opts.include_unassigned);
        Dataset::open_source(Box::new(source), opts)
    }

    /// Opens a source and reads everything committed so far; an error when it holds no node.
    pub fn open_source(source: Box<dyn Source>, opts: LoadOptions) -> Result<Dataset> {
        let mut ds = Dataset::new(source, opts);
        ds.refresh()?;
        ds.require_nodes()?;
        Ok(ds)
    }

    /// A dataset of `source` with nothing read yet: [`Dataset::refresh`] reads.
    pub fn new(source: Box<dyn Source>, opts: LoadOptions) -> Dataset {
        Dataset {
            nodes: Vec::new(),
            names: Names::default(),
            warnings: Vec::new(),
            symbols: Symbols::new(opts.symfs.clone()),
            source,
            opts,
        }
    }

    /// An error unless some node has data.
    pub fn require_nodes(&self) -> Result<()> {
        if self.nodes.is_empty() {
            return Err(Error::Data(format!(
                "no node data found in {} (expected DATA/<node>/*.cul)",
                self.source.describe()
            )));
        }
        Ok(())
    }

    /// Reads what was committed since the last call: new nodes, new files, new records.
    pub fn refresh(&mut self) -> Result<RefreshStats> {
        let mut stats = RefreshStats::default();
        let only = &self.opts.nodes;
        let wanted = |name: &str| only.is_empty() || only.iter().any(|n| n == name);
        let mut warnings = Vec::new();
        let listings = self.source.scan(&wanted, &mut |w| warnings.push(w))?;
        for w in warnings {
            self.warn(w);
        }
        for listing in listings {
            let idx = match self.nodes.iter().position(|n| n.name == listing.name) {
                Some(i) => {
                    if self.nodes[i].dir != listing.dir {
                        self.warn(format!(
                            "node {} appears in both {} and {}; using the first",
                            listing.name,
                            self.nodes[i].dir.display(),
                            listing.dir.display()
                        ));
                        continue;
                    }
                    i
                }
                None => {
                    self.nodes.push(NodeData {
                        name: listing.name.clone(),
                        dir: listing.dir.clone(),
                        info: None,
                        traces: Vec::new(),
                        samples: Vec::new(),
                    });
                    self.nodes.len() - 1
                }
            };
            self.nodes[idx].info = listing.info;
            self.refresh_node(idx, &listing.streams, &mut stats);
        }
        self.nodes
            .retain(|n| !n.traces.is_empty() || !n.samples.is_empty());
        self.nodes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(stats)
    }

    fn warn(&mut self, w: String) {
        push_warning(&mut self.warnings, w);
    }

    fn trace_func(&mut self, t: &mut TraceFile, addr: u64) -> FuncId {
        if let Some(&id) = t.addr_cache.get(&addr) {
            return id;
        }
        let key = self.symbols.function_at(&t.objects, addr);
        let id = self.names.funcs.intern(key);
        t.addr_cache.insert(addr, id);
        id
    }

    fn refresh_node(&mut self, idx: usize, streams: &[PathBuf], stats: &mut RefreshStats) {
        for path in streams {
            let path = path.clone();
            let known_t = self.nodes[idx].traces.iter().position(|t| t.path == path);
            let known_s = self.nodes[idx].samples.iter().position(|t| t.path == path);
            match (known_t, known_s) {
                (Some(i), _) => {
                    let mut t = std::mem::replace(&mut self.nodes[idx].traces[i], empty_trace());
                    self.read_trace(&mut t, stats);
                    self.nodes[idx].traces[i] = t;
                }
                (_, Some(i)) => {
                    let mut s = std::mem::replace(&mut self.nodes[idx].samples[i], empty_samples());
                    self.read_samples(&mut s, stats);
                    self.nodes[idx].samples[i] = s;
                }
                (None, None) => match self.open_file(&path) {
                    Ok(None) => {}
                    Ok(Some(Opened::Trace(mut t))) => {
                        stats.new_files += 1;
                        self.read_trace(&mut t, stats);
                        self.nodes[idx].traces.push(t);
                    }
                    Ok(Some(Opened::Samples(mut s))) => {
                        stats.new_files += 1;
                        self.read_samples(&mut s, stats);
                        self.nodes[idx].samples.push(s);
                    }
                    Err(e) => self.warn(format!("skipping {}: {e}", path.display())),
                },
            }
        }
        let node = &mut self.nodes[idx];
        node.traces.sort_by_key(|t| (t.created_ns, t.pid));
        // Link exec chains: the successor names its predecessor's file in `exec_from`.
        let links: Vec<(String, PathBuf)> = node
            .traces
            .iter()
            .filter_map(|t| Some((t.info(info_keys::EXEC_FROM)?.to_string(), t.path.clone())))
            .collect();
        for (from, succ) in links {
            if let Some(t) = node.traces.iter_mut().find(|t| {
                t.path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy() == from)
            }) {
                t.exec_successor = Some(succ);
            }
        }
        // A checkpoint counts once its writer is gone (see `TraceFile::intervals`).
        for t in &mut node.traces {
            if let Some(cp) = t.checkpoint.take() {
                if t.exec_successor.is_some() || !t.writer_alive() {
                    t.intervals.push(cp);
                    t.provisional = true;
                }
            }
        }
        node.samples.sort_by_key(|s| s.created_ns);
    }

    fn open_file(&mut self, path: &Path) -> std::result::Result<Option<Opened>, String> {
        let mut head = vec![0u8; 128];
        let f = self
            .source
            .open(path)
            .map_err(|e| format!("cannot open: {e}"))?;
        let n = read_fully(&*f, &mut head, 0).map_err(|e| e.to_string())?;
        head.truncate(n);
        if head.iter().all(|&b| b == 0) && f.settling() {
            // A writer creates the file, then writes its header: read it next time.
            return Ok(None);
        }
        let parsed = ParsedFile::parse(&head).map_err(|e| e.to_string())?;
        let h = parsed.header;
        Ok(Some(match parsed.kind {
            FileKind::Trace => {
                let mut t = empty_trace();
                t.path = path.to_path_buf();
                t.pid = h.pid;
                t.created_ns = h.created_ns;
                t.consumed = h.data_offset;
                Opened::Trace(t)
            }
            FileKind::Samples => {
                let mut s = empty_samples();
                s.path = path.to_path_buf();
                s.created_ns = h.created_ns;
                s.consumed = h.data_offset;
                Opened::Samples(s)
            }
        }))
    }

    fn read_trace(&mut self, t: &mut TraceFile, stats: &mut RefreshStats) {
        if std::mem::take(&mut t.provisional) {
            t.intervals.pop();
        }
        t.checkpoint = None;
        if matches!(t.status, FileStatus::Damaged(_) | FileStatus::Ended) {
            return;
        }
        self.read_committed(t, stats);
        if t.status == FileStatus::Open {
            t.checkpoint = self.read_checkpoint(t);
        }
    }

    /// The writer's checkpoint of the interval in progress, when the stream has an intact one
    /// right after what was read.
    fn read_checkpoint(&mut self, t: &mut TraceFile) -> Option<TraceInterval> {
        let f = self.source.open(&t.path).ok()?;
        let mut head = [0u8; 128];
        let n = read_fully(&*f, &mut head, 0).ok()?;
        let h = ParsedFile::parse(&head[..n]).ok()?.header;
        if h.committed_end != t.consumed
            || h.pending_end <= h.committed_end
            || h.pending_end - h.committed_end > MAX_RECORD_LEN as u64
        {
            return None;
        }
        let mut bytes = vec![0u8; (h.pending_end - h.committed_end) as usize];
        if read_fully(&*f, &mut bytes, h.committed_end).ok()? != bytes.len() {
            return None;
        }
        let p = pending_records(&bytes)?;
        let mut ti = self.trace_interval(t, &p.interval);
        for rec in &p.extras {
            self.add_extra(t, &mut ti, rec);
        }
        Some(ti)
    }

    /// Adds an Unwound, Edges or Histograms record to its interval `ti` (same start).
    fn add_extra(&mut self, t: &mut TraceFile, ti: &mut TraceInterval, rec: &Record<'_>) {
        match rec {
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
            start_ns: iv.start_ns,
            dur_ns: iv.dur_ns,
            flags: iv.flags,
            threads: iv.threads,
            lost_frames: iv.lost_frames,
            overflows: iv.overflows,
            dropped: iv.dropped,
            entries,
            edges: None,
            edge_drops: 0,
            hists: None,
        }
    }

    fn read_committed(&mut self, t: &mut TraceFile, stats: &mut RefreshStats) {
        let Some(chunk) = self.read_new(&t.path, t.consumed, &mut t.status) else {
            return;
        };
        let (bytes, ended) = chunk;
        let mut recs = records_at(&bytes, t.consumed);
        let mut consumed = t.consumed;
        while let Some(r) = recs.next() {
            match r {
                Ok(Record::Info(info)) => {
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
                Ok(Record::Object(o)) => {
                    let path = PathBuf::from(o.path.as_ref());
                    if o.flags & object_flags::UNLOADED != 0 {
                        t.objects.retain(|x| x.id != o.id);
                        // Addresses may now belong to something else.
                        t.addr_cache.clear();
                        continue;
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
                Ok(Record::Interval(iv)) => {
                    let ti = self.trace_interval(t, &iv);
                    t.intervals.push(ti);
                    stats.new_intervals += 1;
                }
                Ok(rec @ (Record::Unwound(_) | Record::Edges(_) | Record::Histograms(_))) => {
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
                                "{}: a record of interval {} without its Interval record; \
                                 ignored",
                                t.path.display(),
                                start.unwrap_or(0)
                            ));
                        }
                    }
                }
                Ok(Record::End(e)) => {
                    t.end_ns = Some(e.end_ns);
                }
                Ok(_) => {}
                Err(e) => {
                    let msg = format!("{}: {e}; data before it is kept", t.path.display());
                    self.warn(msg.clone());
                    t.status = FileStatus::Damaged(e.to_string());
                    break;
                }
            }
            consumed = recs.offset();
        }
        t.consumed = consumed;
        if ended && t.status == FileStatus::Open {
            t.status = FileStatus::Ended;
        }
    }

    fn read_samples(&mut self, s: &mut SampleFile, stats: &mut RefreshStats) {
        if matches!(s.status, FileStatus::Damaged(_) | FileStatus::Ended) {
            return;
        }
        let Some((bytes, ended)) = self.read_new(&s.path, s.consumed, &mut s.status) else {
            return;
        };
        let mut recs = records_at(&bytes, s.consumed);
        let mut consumed = s.consumed;
        while let Some(r) = recs.next() {
            match r {
                Ok(Record::Info(info)) => s.info.extend(info.pairs),
                Ok(Record::Strings(st)) => {
                    for (id, text) in st.items() {
                        s.strings.insert(id, Arc::from(text.as_ref()));
                    }
                }
                Ok(Record::Samples(rec)) => {
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
                        entries,
                    });
                    stats.new_intervals += 1;
                }
                Ok(Record::Events(rec)) => {
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
                Ok(Record::OsMetrics(rec)) => {
                    let os = self.read_os(&s.strings, &rec);
                    s.os.push(os);
                    stats.new_intervals += 1;
                }
                Ok(Record::End(e)) => s.end_ns = Some(e.end_ns),
                Ok(_) => {}
                Err(e) => {
                    self.warn(format!("{}: {e}; data before it is kept", s.path.display()));
                    s.status = FileStatus::Damaged(e.to_string());
                    break;
                }
            }
            consumed = recs.offset();
        }
        s.consumed = consumed;
        if ended && s.status == FileStatus::Open {
            s.status = FileStatus::Ended;
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

    /// Reads the committed bytes of `path` past `from`. Returns them and whether the file is
    /// marked ended; `None` when there is nothing new or the file cannot be read (then the
    /// status says why).
    fn read_new(
        &mut self,
        path: &Path,
        from: u64,
        status: &mut FileStatus,
    ) -> Option<(Vec<u8>, bool)> {
        let f = match self.source.open(path) {
            Ok(f) => f,
            Err(e) => {
                self.warn(format!("{}: cannot read: {e}", path.display()));
                return None;
            }
        };
        let mut head = [0u8; 128];
        let n = f.read_at(&mut head, 0).unwrap_or(0);
        let parsed = match ParsedFile::parse(&head[..n]) {
            Ok(p) => p,
            Err(e) => {
                self.warn(format!("{}: {e}", path.display()));
                *status = FileStatus::Damaged(e.to_string());
                return None;
            }
        };
        let ended = parsed.header.state == file_state::ENDED;
        // A corrupt committed_end must not make us allocate it: read at most what the file
        // holds (and say it is cut short, below).
        let size = f.size().unwrap_or(u64::MAX);
        let committed = parsed.header.committed_end;
        let present = committed.min(size.max(from));
        if committed <= from {
            if ended && *status == FileStatus::Open {
                *status = FileStatus::Ended;
            }
            return None;
        }
        let len = (present - from) as usize;
        let mut buf = vec![0u8; len];
        let mut got = 0usize;
        while got < len {
            match f.read_at(&mut buf[got..], from + got as u64) {
                Ok(0) => break,
                Ok(k) => got += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.warn(format!("{}: read error: {e}", path.display()));
                    break;
                }
            }
        }
        let complete = from + got as u64 == committed;
        if !complete {
            self.warn(format!(
                "{}: file cut short ({} of {} committed bytes present); data before the cut \
                 is kept",
                path.display(),
                from + got as u64,
                committed
            ));
            buf.truncate(got);
            *status = FileStatus::Damaged("file cut short".to_string());
        }
        Some((buf, ended && complete))
    }
}

enum Opened {
    Trace(TraceFile),
    Samples(SampleFile),
}

/// Adds a warning unless it was given already.
/// The interval start of an Unwound, Edges or Histograms record.
fn extra_interval_start(rec: &Record<'_>) -> Option<u64> {
    match rec {
        Record::Unwound(r) => Some(r.interval.start_ns),
        Record::Edges(r) => Some(r.interval.start_ns),
        Record::Histograms(r) => Some(r.interval.start_ns),
        _ => None,
    }
}

fn push_warning(list: &mut Vec<String>, w: String) {
    if !list.contains(&w) {
        list.push(w);
    }
}

/// Reads up to `buf.len()` bytes at `offset`, fewer only at the end of the stream.
fn read_fully(f: &dyn ReadAt, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
