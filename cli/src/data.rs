//! Loading data directories: every node's trace and sample files, decoded, symbolized and
//! interned, ready for `report` and `diagnose`.
//!
//! Loading is incremental: [`Dataset::refresh`] reads only what was committed since the last
//! call (new files, new records). Offline analysis is one refresh; `--follow` calls it again as
//! records arrive. Both take the same path (STYLE.md §8).
//!
//! Functions are identified across nodes by (image base name, demangled symbol), never by
//! address (DESIGN.md §"Records, time and identity"): trace addresses are mapped through the
//! process's recorded load map (bias, build-id, path) and symbolized with the shared
//! [`Symbolizer`]; sample entries arrive already named by the sampler.
//!
//! Damaged input loses nothing: records before a corrupt or truncated record are kept, the file
//! is marked [`FileStatus::Damaged`] and a warning says which file and where.

use std::collections::HashMap;
use std::fs::File;
use std::hash::Hash;
use std::io::Read as _;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context as _};
use culprit_format::names::{self, NodeInfo};
use culprit_format::{
    file_state, info_keys, interval_flags, object_flags, records_at, samples_flags, FileKind,
    ParsedFile, Record, DATA_OFFSET,
};
use culprit_sampler::symbolize::{read_build_id, unresolved_name, ImageAddr, Symbolizer};

/// Interned id of a [`FuncKey`] (dataset-wide).
pub type FuncId = u32;
/// Interned id of a program name (dataset-wide).
pub type ProgId = u32;
/// Interned id of a kernel event name (dataset-wide).
pub type EventId = u32;
/// Interned id of an [`OsMetricKey`] (dataset-wide).
pub type OsMetricId = u32;

/// A function's identity across nodes: binary image base name and demangled symbol.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FuncKey {
    /// Base name of the executable, shared library, `[kernel.kallsyms]` or kernel module.
    pub image: Arc<str>,
    /// Demangled function name, or `image+0xoffset` when it could not be resolved.
    pub function: Arc<str>,
}

/// Assigns dense `u32` ids to values.
#[derive(Clone, Debug)]
pub struct Interner<T> {
    items: Vec<T>,
    map: HashMap<T, u32>,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            items: Vec::new(),
            map: HashMap::new(),
        }
    }
}

impl<T: Clone + Eq + Hash> Interner<T> {
    /// The id of `v`, assigning the next one if new.
    pub fn intern(&mut self, v: T) -> u32 {
        if let Some(&id) = self.map.get(&v) {
            return id;
        }
        let id = self.items.len() as u32;
        self.items.push(v.clone());
        self.map.insert(v, id);
        id
    }

    /// The id of `v`, if interned.
    pub fn lookup(&self, v: &T) -> Option<u32> {
        self.map.get(v).copied()
    }

    /// The value of `id`.
    pub fn get(&self, id: u32) -> &T {
        &self.items[id as usize]
    }

    /// Number of interned values.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing is interned.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Dataset-wide name tables.
#[derive(Clone, Debug, Default)]
pub struct Names {
    /// Functions.
    pub funcs: Interner<FuncKey>,
    /// Program names.
    pub programs: Interner<Arc<str>>,
    /// Kernel event names.
    pub events: Interner<Arc<str>>,
    /// OS metrics (name, instance, unit).
    pub os_metrics: Interner<OsMetricKey>,
}

/// An OS metric's identity: its name (`disk.await`, see `culprit_format::os_metrics`), the
/// device or interface it is about, and its unit. Compared across nodes by all three.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OsMetricKey {
    /// Metric name, `group.metric`.
    pub name: Arc<str>,
    /// Device or interface name; `None` for node-wide metrics.
    pub instance: Option<Arc<str>>,
    /// Unit (`ms`, `B/s`, …).
    pub unit: Arc<str>,
}

/// One interval of a node's OS metrics. A metric without a value is absent in this interval
/// (the node cannot provide it, or a counter went backwards): never read it as zero.
#[derive(Clone, Debug, PartialEq)]
pub struct OsInterval {
    /// Start, wall-clock ns since the epoch.
    pub start_ns: u64,
    /// Length, ns.
    pub dur_ns: u64,
    /// Time between the two reads the rates come from, ns.
    pub span_ns: u64,
    /// `interval_flags` bits (MISSED: not observed, no values).
    pub flags: u32,
    /// Values present, sorted by metric id.
    pub values: Vec<(OsMetricId, f64)>,
}

impl OsInterval {
    /// True when the collector could not observe this interval.
    pub fn missed(&self) -> bool {
        self.flags & interval_flags::MISSED != 0
    }

    /// The value of `metric`, if present.
    pub fn get(&self, metric: OsMetricId) -> Option<f64> {
        self.values
            .binary_search_by_key(&metric, |v| v.0)
            .ok()
            .map(|i| self.values[i].1)
    }
}

/// What state a file is in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileStatus {
    /// The writer wrote an end marker: the data is complete.
    Ended,
    /// No end marker (yet): the writer is running, or it died (crash, `kill -9`).
    Open,
    /// A record failed validation or the file was cut short; records before it are kept.
    Damaged(String),
}

/// One function's counters in one interval of one traced process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEntry {
    /// The function.
    pub func: FuncId,
    /// Calls that returned in the interval.
    pub calls: u64,
    /// Exclusive (self) wall-clock ns.
    pub excl_ns: u64,
    /// Inclusive (total) wall-clock ns.
    pub incl_ns: u64,
}

/// One interval of a traced process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceInterval {
    /// Start, wall-clock ns since the epoch (aligned to `dur_ns`).
    pub start_ns: u64,
    /// Length, ns.
    pub dur_ns: u64,
    /// `interval_flags` bits (MISSED: no data; PARTIAL: partly covered).
    pub flags: u32,
    /// Threads with a table in the interval.
    pub threads: u32,
    /// Frames dropped recovering from mismatched exits.
    pub lost_frames: u32,
    /// Calls not accounted for lack of room.
    pub overflows: u32,
    /// Per-function counters (functions with the same name are merged).
    pub entries: Vec<TraceEntry>,
}

impl TraceInterval {
    /// True when the writer could not observe this interval (missing data, not zeros).
    pub fn missed(&self) -> bool {
        self.flags & interval_flags::MISSED != 0
    }
}

/// A loaded object as the runtime recorded it.
#[derive(Clone, Debug)]
struct Object {
    id: u32,
    flags: u32,
    bias: u64,
    start: u64,
    end: u64,
    /// Path to read symbols from, or `None` when the file is absent or does not match the
    /// recorded build-id (names then fall back to `image+0xoffset`).
    readable: Option<PathBuf>,
    path: PathBuf,
    image: Arc<str>,
}

/// One traced process's file.
#[derive(Clone, Debug)]
pub struct TraceFile {
    /// The file.
    pub path: PathBuf,
    /// Process id.
    pub pid: u32,
    /// Program name (interned).
    pub program: ProgId,
    /// Info pairs as recorded.
    pub info: Vec<(String, String)>,
    /// Interval length, ns.
    pub interval_ns: u64,
    /// When the file was created (wall-clock ns).
    pub created_ns: u64,
    /// Wall-clock ns of the end marker, if any.
    pub end_ns: Option<u64>,
    /// State of the file.
    pub status: FileStatus,
    /// The file of the program this process image `exec`ed, when there is one: the image
    /// ended by exec (which runs no exit handler, so there is no end marker).
    pub exec_successor: Option<PathBuf>,
    /// Intervals in file order.
    pub intervals: Vec<TraceInterval>,
    consumed: u64,
    objects: Vec<Object>,
    addr_cache: HashMap<u64, FuncId>,
}

impl TraceFile {
    /// The value of an info key.
    pub fn info(&self, key: &str) -> Option<&str> {
        self.info
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// One (program, function) sample count in a sampler interval.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SampleCount {
    /// Program the samples ran in.
    pub program: ProgId,
    /// Function (image + symbol).
    pub func: FuncId,
    /// Samples.
    pub count: u64,
}

/// One interval of a sampler file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SampleInterval {
    /// Start, wall-clock ns since the epoch.
    pub start_ns: u64,
    /// Length, ns.
    pub dur_ns: u64,
    /// `interval_flags` bits.
    pub flags: u32,
    /// Event sampled.
    pub event: Arc<str>,
    /// Period, or frequency in Hz when `freq`.
    pub period: u64,
    /// True when `period` is a frequency.
    pub freq: bool,
    /// Samples taken.
    pub total: u64,
    /// Samples lost.
    pub lost: u64,
    /// Counts per (program, function).
    pub entries: Vec<SampleCount>,
}

impl SampleInterval {
    /// True when the sampler could not observe this interval.
    pub fn missed(&self) -> bool {
        self.flags & interval_flags::MISSED != 0
    }
}

/// One interval of kernel event counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventInterval {
    /// Start, wall-clock ns since the epoch.
    pub start_ns: u64,
    /// Length, ns.
    pub dur_ns: u64,
    /// `interval_flags` bits.
    pub flags: u32,
    /// Counts per event.
    pub counts: Vec<(EventId, u64)>,
}

impl EventInterval {
    /// True when the sampler could not observe this interval.
    pub fn missed(&self) -> bool {
        self.flags & interval_flags::MISSED != 0
    }
}

/// One sampler run's file for a node.
#[derive(Clone, Debug)]
pub struct SampleFile {
    /// The file.
    pub path: PathBuf,
    /// Info pairs as recorded.
    pub info: Vec<(String, String)>,
    /// When the file was created (wall-clock ns).
    pub created_ns: u64,
    /// Wall-clock ns of the end marker, if any.
    pub end_ns: Option<u64>,
    /// State of the file.
    pub status: FileStatus,
    /// Sample intervals in file order.
    pub intervals: Vec<SampleInterval>,
    /// Kernel event intervals in file order.
    pub events: Vec<EventInterval>,
    /// OS metric intervals in file order (their interval is independent of the samples').
    pub os: Vec<OsInterval>,
    consumed: u64,
    strings: HashMap<u32, Arc<str>>,
}

impl SampleFile {
    /// The value of an info key.
    pub fn info(&self, key: &str) -> Option<&str> {
        self.info
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Everything recorded for one node.
#[derive(Clone, Debug)]
pub struct NodeData {
    /// Node name (its directory's name).
    pub name: String,
    /// The node's directory.
    pub dir: PathBuf,
    /// Contents of `node.info`, if present and valid.
    pub info: Option<NodeInfo>,
    /// Traced processes, ordered by file creation time.
    pub traces: Vec<TraceFile>,
    /// Sampler runs, ordered by file creation time.
    pub samples: Vec<SampleFile>,
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
}

/// The nodes of one or more data directories.
pub struct Dataset {
    /// Nodes, sorted by name.
    pub nodes: Vec<NodeData>,
    /// Dataset-wide name tables.
    pub names: Names,
    /// Problems found while loading (one line each).
    pub warnings: Vec<String>,
    sources: Vec<Source>,
    opts: LoadOptions,
    symbolizer: Symbolizer,
    build_ids: HashMap<PathBuf, Option<Vec<u8>>>,
}

impl std::fmt::Debug for Dataset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dataset")
            .field("nodes", &self.nodes.len())
            .field("warnings", &self.warnings)
            .finish_non_exhaustive()
    }
}

/// A path the user gave: a data root holding node directories, or one node directory.
#[derive(Clone, Debug)]
enum Source {
    Root(PathBuf),
    Node(PathBuf),
}

fn is_data_file(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| names::parse_data_file_name(n).is_some())
}

fn dir_has_data(dir: &Path) -> bool {
    dir.join(names::NODE_INFO_FILE).is_file()
        || std::fs::read_dir(dir)
            .map(|rd| rd.flatten().any(|e| is_data_file(&e.path())))
            .unwrap_or(false)
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
    pub fn open(paths: &[PathBuf], opts: LoadOptions) -> anyhow::Result<Dataset> {
        if paths.is_empty() {
            bail!("no data directory given");
        }
        let mut sources = Vec::new();
        for p in paths {
            let meta = std::fs::metadata(p).with_context(|| {
                format!(
                    "{}: cannot open data directory (record data with `culprit record` or \
                     `culprit sample` first)",
                    p.display()
                )
            })?;
            if !meta.is_dir() {
                bail!("{}: not a directory (give a data directory)", p.display());
            }
            if dir_has_data(p) {
                sources.push(Source::Node(p.clone()));
            } else {
                sources.push(Source::Root(p.clone()));
            }
        }
        let symbolizer = Symbolizer::new();
        let mut ds = Dataset {
            nodes: Vec::new(),
            names: Names::default(),
            warnings: Vec::new(),
            sources,
            opts,
            symbolizer,
            build_ids: HashMap::new(),
        };
        ds.refresh()?;
        if ds.nodes.is_empty() {
            let list: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
            bail!(
                "no node data found in {} (expected DATA/<node>/*.cul)",
                list.join(", ")
            );
        }
        Ok(ds)
    }

    /// Reads what was committed since the last call: new nodes, new files, new records.
    pub fn refresh(&mut self) -> anyhow::Result<RefreshStats> {
        let mut stats = RefreshStats::default();
        let mut node_dirs: Vec<(String, PathBuf)> = Vec::new();
        for s in &self.sources {
            match s {
                Source::Node(dir) => {
                    let name = dir
                        .canonicalize()
                        .ok()
                        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                        .unwrap_or_else(|| "node".to_string());
                    node_dirs.push((name, dir.clone()));
                }
                Source::Root(root) => {
                    let rd = std::fs::read_dir(root)
                        .with_context(|| format!("{}: cannot read directory", root.display()))?;
                    for e in rd.flatten() {
                        let name = e.file_name().to_string_lossy().into_owned();
                        let path = e.path();
                        if !path.is_dir() {
                            continue;
                        }
                        let ok = names::is_node_name(&name)
                            || (self.opts.include_unassigned && name == names::UNASSIGNED_DIR);
                        if ok {
                            node_dirs.push((name, path));
                        }
                    }
                }
            }
        }
        for (name, dir) in node_dirs {
            if !self.opts.nodes.is_empty() && !self.opts.nodes.contains(&name) {
                continue;
            }
            let idx = match self.nodes.iter().position(|n| n.name == name) {
                Some(i) => {
                    if self.nodes[i].dir != dir {
                        self.warn(format!(
                            "node {name} appears in both {} and {}; using the first",
                            self.nodes[i].dir.display(),
                            dir.display()
                        ));
                        continue;
                    }
                    i
                }
                None => {
                    self.nodes.push(NodeData {
                        name: name.clone(),
                        dir: dir.clone(),
                        info: None,
                        traces: Vec::new(),
                        samples: Vec::new(),
                    });
                    self.nodes.len() - 1
                }
            };
            self.refresh_node(idx, &mut stats);
        }
        self.nodes
            .retain(|n| !n.traces.is_empty() || !n.samples.is_empty());
        self.nodes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(stats)
    }

    fn warn(&mut self, w: String) {
        if !self.warnings.contains(&w) {
            self.warnings.push(w);
        }
    }

    fn refresh_node(&mut self, idx: usize, stats: &mut RefreshStats) {
        let dir = self.nodes[idx].dir.clone();
        if let Ok(text) = std::fs::read_to_string(dir.join(names::NODE_INFO_FILE)) {
            self.nodes[idx].info = NodeInfo::parse(&text);
        }
        let mut files: Vec<PathBuf> = match std::fs::read_dir(&dir) {
            Ok(rd) => rd
                .flatten()
                .map(|e| e.path())
                .filter(|p| is_data_file(p))
                .collect(),
            Err(e) => {
                self.warn(format!("{}: cannot read: {e}", dir.display()));
                return;
            }
        };
        // Only regular files: opening a FIFO named like a data file would block for ever.
        files.retain(|p| match std::fs::metadata(p) {
            Ok(m) if !m.is_file() => {
                self.warn(format!("skipping {}: not a regular file", p.display()));
                false
            }
            _ => true,
        });
        files.sort();
        for path in files {
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
                    Err(e) => self.warn(format!("skipping {}: {e:#}", path.display())),
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
        node.samples.sort_by_key(|s| s.created_ns);
    }

    fn open_file(&mut self, path: &Path) -> anyhow::Result<Option<Opened>> {
        let mut head = vec![0u8; 128];
        let mut f = File::open(path).context("cannot open")?;
        let n = read_up_to(&mut f, &mut head)?;
        head.truncate(n);
        if head.iter().all(|&b| b == 0) && just_created(&f) {
            // A writer creates the file, then writes its header: read it next time.
            return Ok(None);
        }
        let parsed = ParsedFile::parse(&head)?;
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
        if matches!(t.status, FileStatus::Damaged(_) | FileStatus::Ended) {
            return;
        }
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
                        self.readable_image(&path, o.build_id)
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
                        });
                    }
                    merge_trace_entries(&mut entries);
                    t.intervals.push(TraceInterval {
                        start_ns: iv.start_ns,
                        dur_ns: iv.dur_ns,
                        flags: iv.flags,
                        threads: iv.threads,
                        lost_frames: iv.lost_frames,
                        overflows: iv.overflows,
                        entries,
                    });
                    stats.new_intervals += 1;
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
                        counts.push((self.names.events.intern(name), e.count));
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
        let mut values: Vec<(OsMetricId, f64)> = Vec::with_capacity(rec.len());
        for e in rec.entries() {
            if !e.value.is_finite() {
                continue; // writers never write these; read as absent
            }
            let key = OsMetricKey {
                name: self.string_or(strings, e.metric),
                instance: e.instance.map(|i| self.string_or(strings, i)),
                unit: self.string_or(strings, e.unit),
            };
            values.push((self.names.os_metrics.intern(key), e.value));
        }
        values.sort_by_key(|v| v.0);
        values.dedup_by_key(|v| v.0);
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
        let f = match File::open(path) {
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
        let size = f.metadata().map(|m| m.len()).unwrap_or(u64::MAX);
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

    /// The path to read symbols of a recorded object from, checking its build-id.
    fn readable_image(&mut self, path: &Path, recorded_id: &[u8]) -> Option<PathBuf> {
        let cand = match &self.opts.symfs {
            Some(root) => {
                let c = root.join(path.strip_prefix("/").unwrap_or(path));
                if c.exists() {
                    c
                } else {
                    path.to_path_buf()
                }
            }
            None => path.to_path_buf(),
        };
        if !cand.exists() {
            let by_id = build_id_debug_path(recorded_id).filter(|p| p.exists());
            if by_id.is_none() {
                self.warn(format!(
                    "{}: not found on this machine; its functions are shown as image+offset \
                     (use --symfs to point at a copy)",
                    path.display()
                ));
            }
            return by_id;
        }
        if recorded_id.is_empty() {
            return Some(cand);
        }
        let on_disk = self
            .build_ids
            .entry(cand.clone())
            .or_insert_with(|| read_build_id(&cand))
            .clone();
        match on_disk {
            Some(id) if id != recorded_id => {
                if let Some(p) = build_id_debug_path(recorded_id).filter(|p| p.exists()) {
                    return Some(p);
                }
                self.warn(format!(
                    "{}: build-id differs from the recorded one (the binary changed since \
                     recording); its functions are shown as image+offset",
                    cand.display()
                ));
                None
            }
            _ => Some(cand),
        }
    }

    fn trace_func(&mut self, t: &mut TraceFile, addr: u64) -> FuncId {
        if let Some(&id) = t.addr_cache.get(&addr) {
            return id;
        }
        let obj = t
            .objects
            .iter()
            .filter(|o| addr >= o.start && addr < o.end)
            .max_by_key(|o| o.flags & object_flags::MAIN);
        let key = match obj {
            Some(o) => {
                let vaddr = addr.wrapping_sub(o.bias);
                let name = o
                    .readable
                    .as_ref()
                    .and_then(|p| self.symbolizer.resolve(p, ImageAddr::Virt(vaddr)));
                FuncKey {
                    image: o.image.clone(),
                    function: name
                        .unwrap_or_else(|| Arc::from(unresolved_name(&o.path, vaddr).as_str())),
                }
            }
            None => FuncKey {
                image: Arc::from("?"),
                function: Arc::from(format!("{addr:#x}").as_str()),
            },
        };
        let id = self.names.funcs.intern(key);
        t.addr_cache.insert(addr, id);
        id
    }
}

enum Opened {
    Trace(TraceFile),
    Samples(SampleFile),
}

fn empty_trace() -> TraceFile {
    TraceFile {
        path: PathBuf::new(),
        pid: 0,
        program: 0,
        info: Vec::new(),
        interval_ns: 0,
        created_ns: 0,
        end_ns: None,
        status: FileStatus::Open,
        exec_successor: None,
        intervals: Vec::new(),
        consumed: DATA_OFFSET,
        objects: Vec::new(),
        addr_cache: HashMap::new(),
    }
}

fn empty_samples() -> SampleFile {
    SampleFile {
        path: PathBuf::new(),
        info: Vec::new(),
        created_ns: 0,
        end_ns: None,
        status: FileStatus::Open,
        intervals: Vec::new(),
        events: Vec::new(),
        os: Vec::new(),
        consumed: DATA_OFFSET,
        strings: HashMap::new(),
    }
}

/// Two addresses can resolve to one name (aliases, identical static functions in two files of a
/// program): merge their counters.
fn merge_trace_entries(entries: &mut Vec<TraceEntry>) {
    if entries.len() < 2 {
        return;
    }
    entries.sort_by_key(|e| e.func);
    let mut out: Vec<TraceEntry> = Vec::with_capacity(entries.len());
    for e in entries.drain(..) {
        match out.last_mut() {
            Some(last) if last.func == e.func => {
                last.calls += e.calls;
                last.excl_ns += e.excl_ns;
                last.incl_ns += e.incl_ns;
            }
            _ => out.push(e),
        }
    }
    *entries = out;
}

/// `/usr/lib/debug/.build-id/ab/cdef….debug` for a build-id.
fn build_id_debug_path(id: &[u8]) -> Option<PathBuf> {
    if id.len() < 2 {
        return None;
    }
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    Some(PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &hex[..2],
        &hex[2..]
    )))
}

/// True when `f` was modified in the last few seconds: a data file whose header is still zero
/// then is being created, not damaged.
fn just_created(f: &File) -> bool {
    f.metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age < std::time::Duration::from_secs(10))
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match f.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}
