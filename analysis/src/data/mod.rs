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

use culprit_format::read::{OpenError, StreamReader, StreamState};
use culprit_format::{info_keys, object_flags, samples_flags, FileKind, IntervalRec, Record};

mod files;
pub mod names;
mod requests;
pub mod source;
mod stacks;
mod symbols;

use files::{empty_samples, empty_trace, merge_edges, merge_hists, merge_trace_entries};
pub use files::{
    EventCount, EventInterval, FileStatus, LayerStretch, NodeData, OpenFrame, OsInterval, OsValue,
    SampleCount, SampleFile, SampleInterval, SampleStack, StackSnapshot, ThreadCalls, TraceEdge,
    TraceEntry, TraceFile, TraceHist, TraceInterval,
};
pub use names::{EventId, FuncId, FuncKey, Interner, Names, OsMetricId, OsMetricKey, ProgramId};
pub use requests::{RequestMark, RequestStretch};
pub use source::{DirSource, NodeListing, ReadAt, Source};
pub use stacks::process_state;
use symbols::{Object, Symbols};

use crate::error::{Error, Result};

/// A data file that could not be read at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unreadable {
    /// The node whose directory holds it.
    pub node: String,
    /// The file.
    pub path: PathBuf,
    /// Why.
    pub reason: String,
}

/// What to load.
#[derive(Clone, Debug, Default)]
pub struct LoadOptions {
    /// Also load directories that are not nodes (`_unassigned`).
    pub include_unassigned: bool,
    /// Read binaries under this root instead of `/` (like `perf report --symfs`).
    pub symfs: Option<PathBuf>,
    /// Only these nodes (all when empty).
    pub nodes: Vec<String>,
    /// Leave these nodes out.
    pub exclude: Vec<String>,
}

/// The nodes of one or more data directories.
pub struct Dataset {
    /// Nodes, sorted by name.
    pub nodes: Vec<NodeData>,
    /// Dataset-wide name tables.
    pub names: Names,
    /// Problems found while loading (one line each).
    pub warnings: Vec<String>,
    /// Data files that could not be read at all (a damaged header), per node: they cost their
    /// own node its data, nothing else.
    pub unreadable: Vec<Unreadable>,
    source: Box<dyn Source>,
    opts: LoadOptions,
    symbols: Symbols,
    read_limit: Option<u64>,
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
    /// Streams with committed records left unread because of the read limit
    /// ([`Dataset::set_read_limit`]): refresh again to read on.
    pub unread_streams: usize,
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
            unreadable: Vec::new(),
            symbols: Symbols::new(opts.symfs.clone()),
            source,
            opts,
            read_limit: None,
        }
    }

    /// Reads at most about `bytes` of each stream per [`Dataset::refresh`] (whole records: the
    /// record that crosses the limit is read whole), so a consumer can take the intervals read,
    /// forget them and refresh again: memory stays bounded whatever the data's size (exports).
    /// [`RefreshStats::unread_streams`] says whether more is left. `None` (the default) reads
    /// everything committed.
    ///
    /// A stream's last interval read may still change at the next refresh (a dead writer's
    /// checkpoint is re-read; records that complete an interval follow it): a consumer that
    /// forgets intervals keeps each stream's last one until the stream is read to the end.
    pub fn set_read_limit(&mut self, bytes: Option<u64>) {
        self.read_limit = bytes.map(|b| b.max(1));
    }

    /// An error unless some node has data; when nodes were asked for by name, it names those
    /// there are.
    pub fn require_nodes(&mut self) -> Result<()> {
        if !self.nodes.is_empty() {
            return Ok(());
        }
        let asked = &self.opts.nodes;
        if asked
            .iter()
            .any(|n| n == culprit_format::names::UNASSIGNED_DIR)
            && !self.opts.include_unassigned
        {
            return Err(Error::Data(format!(
                "{} is not a node: it holds the samples that belong to no node; show them with \
                 --all",
                culprit_format::names::UNASSIGNED_DIR
            )));
        }
        let mut there: Vec<String> = if asked.is_empty() {
            Vec::new()
        } else {
            self.source
                .scan(&|_| true, &mut |_| {})?
                .into_iter()
                .filter(|l| !l.streams.is_empty())
                .map(|l| l.name)
                .collect()
        };
        there.sort();
        if !there.is_empty() {
            return Err(Error::Data(format!(
                "no node {} in {} (its nodes: {})",
                asked.join(", "),
                self.source.describe(),
                there.join(", ")
            )));
        }
        Err(Error::Data(format!(
            "no node data found in {}: expected one directory per node, DATA/<node>/, holding \
             trace-*.cul files (from `culprit record`) or samples-*.cul files (from `culprit \
             sample`)",
            self.source.describe()
        )))
    }

    /// Reads what was committed since the last call: new nodes, new files, new records.
    pub fn refresh(&mut self) -> Result<RefreshStats> {
        let mut stats = RefreshStats::default();
        let (only, except) = (&self.opts.nodes, &self.opts.exclude);
        let wanted = |name: &str| {
            (only.is_empty() || only.iter().any(|n| n == name)) && !except.iter().any(|n| n == name)
        };
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
                        self.unreadable.retain(|u| u.path != path);
                        stats.new_files += 1;
                        self.read_trace(&mut t, stats);
                        self.nodes[idx].traces.push(*t);
                    }
                    Ok(Some(Opened::Samples(mut s))) => {
                        self.unreadable.retain(|u| u.path != path);
                        stats.new_files += 1;
                        self.read_samples(&mut s, stats);
                        self.nodes[idx].samples.push(*s);
                    }
                    Err(e) => {
                        self.warn(format!("skipping {}: {e}", path.display()));
                        let node = self.nodes[idx].name.clone();
                        if !self.unreadable.iter().any(|u| u.path == *path) {
                            self.unreadable.push(Unreadable {
                                node,
                                path: path.clone(),
                                reason: e,
                            });
                        }
                    }
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
        let f = self
            .source
            .open(path)
            .map_err(|e| format!("cannot open: {e}"))?;
        let r = match StreamReader::open(f) {
            Ok(r) => r,
            // A writer creates the file, then writes its header: read it next time.
            Err(OpenError::NotYet) => return Ok(None),
            Err(e) => return Err(e.to_string()),
        };
        let h = *r.header();
        Ok(Some(match r.kind() {
            FileKind::Trace => {
                let mut t = empty_trace();
                t.path = path.to_path_buf();
                t.pid = h.pid;
                t.created_ns = h.created_ns;
                t.consumed = h.data_offset;
                Opened::Trace(Box::new(t))
            }
            FileKind::Samples => {
                let mut s = empty_samples();
                s.path = path.to_path_buf();
                s.created_ns = h.created_ns;
                s.consumed = h.data_offset;
                Opened::Samples(Box::new(s))
            }
        }))
    }

    fn read_trace(&mut self, t: &mut TraceFile, stats: &mut RefreshStats) {
        if std::mem::take(&mut t.provisional) {
            t.intervals.pop();
        }
        t.checkpoint = None;
        let Some(mut r) = self.read_records(t, stats) else {
            // Ended or damaged: its last snapshot, read once.
            if t.stacks.is_none() {
                self.read_stacks(t);
            }
            return;
        };
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
        self.read_stacks(t);
    }

    /// Re-reads the newest intact stack snapshot of `t` (kept when none can be read now).
    fn read_stacks(&mut self, t: &mut TraceFile) {
        let Ok(f) = self.source.open(&t.path) else {
            return;
        };
        let Some(snap) = stacks::read_snapshot(&*f) else {
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

    /// The file's status from its stream's state, with a warning for damage.
    fn settle(&mut self, path: &Path, state: &StreamState, status: &mut FileStatus) {
        match state {
            StreamState::Open => {}
            StreamState::Ended => *status = FileStatus::Ended,
            StreamState::Damaged(d) => {
                self.warn(format!("{}: {d}; data before it is kept", path.display()));
                *status = FileStatus::Damaged(d.reason.clone());
            }
        }
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
            rec @ (Record::Unwound(_) | Record::Edges(_) | Record::Histograms(_)) => {
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
            Record::End(e) => {
                t.end_ns = Some(e.end_ns);
            }
            Record::Layers(l) => t.layers.push(LayerStretch::of(&l)),
            Record::Requests(r) => {
                let s = requests::stretch(&r, |addr| self.trace_func(t, addr));
                t.requests.push(s);
            }
            _ => {}
        }
    }

    fn read_samples(&mut self, s: &mut SampleFile, stats: &mut RefreshStats) {
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
        let (_, consumed, status) = f.parts();
        *consumed = r.offset();
        self.settle(&path, r.state(), status);
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
                    entries,
                    stacks: None,
                });
                stats.new_intervals += 1;
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
}

impl Stream for TraceFile {
    fn parts(&mut self) -> (&Path, &mut u64, &mut FileStatus) {
        (&self.path, &mut self.consumed, &mut self.status)
    }
    fn record(ds: &mut Dataset, f: &mut Self, rec: Record<'_>, stats: &mut RefreshStats) {
        ds.trace_record(f, rec, stats);
    }
}

impl Stream for SampleFile {
    fn parts(&mut self) -> (&Path, &mut u64, &mut FileStatus) {
        (&self.path, &mut self.consumed, &mut self.status)
    }
    fn record(ds: &mut Dataset, f: &mut Self, rec: Record<'_>, stats: &mut RefreshStats) {
        ds.samples_record(f, rec, stats);
    }
}

enum Opened {
    Trace(Box<TraceFile>),
    Samples(Box<SampleFile>),
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
