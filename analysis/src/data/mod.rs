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
//!
//! The dataset and its refresh (nodes, their streams, files opened) are here; reading each
//! stream's records into it is `records.rs`.

use std::path::{Path, PathBuf};

use culprit_format::read::{OpenError, StreamReader};
use culprit_format::{info_keys, FileKind};

mod files;
pub mod names;
mod pieces;
mod records;
mod requests;
pub mod source;
mod stacks;
mod symbols;

use files::{empty_samples, empty_trace};
pub use files::{
    EventCount, EventInterval, FileStatus, LayerStretch, NodeData, OpenFrame, OsInterval, OsValue,
    SampleCount, SampleFile, SampleInterval, SampleStack, StackSnapshot, ThreadCalls,
    TraceDemotions, TraceEdge, TraceEntry, TraceFile, TraceHist, TraceInterval,
};
pub use names::{EventId, FuncId, FuncKey, Interner, Names, OsMetricId, OsMetricKey, ProgramId};
pub use requests::{RequestMark, RequestStretch};
pub use source::{DirSource, NodeListing, ReadAt, Source};
pub use stacks::process_state;
use symbols::Symbols;
pub use symbols::UNMAPPED_IMAGE;

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

/// A stretch of wall-clock time, `[start_ns, end_ns)` in ns since the epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// Start.
    pub start_ns: u64,
    /// End (exclusive).
    pub end_ns: u64,
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
        // A node whose files are all unreadable (a damaged header) stays: it is reported
        // `damaged`, not left out of the group.
        let unreadable = &self.unreadable;
        self.nodes.retain(|n| {
            !n.traces.is_empty()
                || !n.samples.is_empty()
                || unreadable.iter().any(|u| u.node == n.name)
        });
        self.nodes.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(stats)
    }

    /// The earliest interval start and the latest interval end over every node's trace,
    /// sample, event and OS metric intervals; `None` without any.
    pub fn span(&self) -> Option<Span> {
        let mut lo = u64::MAX;
        let mut hi = 0u64;
        for n in &self.nodes {
            if let Some(s) = Self::node_span(n) {
                lo = lo.min(s.start_ns);
                hi = hi.max(s.end_ns);
            }
        }
        (lo <= hi).then_some(Span {
            start_ns: lo,
            end_ns: hi,
        })
    }

    /// When every node's data had begun: the latest of the nodes' first interval starts
    /// (`None` without data).
    pub fn all_begun(&self) -> Option<u64> {
        self.nodes
            .iter()
            .filter_map(|n| Self::node_span(n).map(|s| s.start_ns))
            .max()
    }

    /// One node's span: its earliest interval start to its latest end, over every kind.
    fn node_span(n: &NodeData) -> Option<Span> {
        let mut lo = u64::MAX;
        let mut hi = 0u64;
        let mut see = |start_ns: u64, dur_ns: u64| {
            lo = lo.min(start_ns);
            hi = hi.max(start_ns + dur_ns);
        };
        for t in &n.traces {
            t.intervals
                .iter()
                .for_each(|iv| see(iv.start_ns, iv.dur_ns));
        }
        for s in &n.samples {
            s.intervals
                .iter()
                .for_each(|iv| see(iv.start_ns, iv.dur_ns));
            s.events.iter().for_each(|iv| see(iv.start_ns, iv.dur_ns));
            s.os.iter().for_each(|iv| see(iv.start_ns, iv.dur_ns));
        }
        (lo <= hi).then_some(Span {
            start_ns: lo,
            end_ns: hi,
        })
    }

    fn warn(&mut self, w: String) {
        push_warning(&mut self.warnings, w);
    }

    fn refresh_node(&mut self, idx: usize, streams: &[PathBuf], stats: &mut RefreshStats) {
        for path in streams {
            let path = path.clone();
            // A piece joined into its writer's history is read through it.
            if pieces::joined(&mut self.nodes[idx].traces, &path)
                || pieces::joined(&mut self.nodes[idx].samples, &path)
            {
                continue;
            }
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
        pieces::join(&mut node.traces);
        pieces::join(&mut node.samples);
        node.traces.sort_by_key(|t| (t.created_ns, t.pid));
        // Link exec chains: the successor names its predecessor's file in `exec_from`.
        let links: Vec<(String, PathBuf)> = node
            .traces
            .iter()
            .filter_map(|t| Some((t.info(info_keys::EXEC_FROM)?.to_string(), t.path.clone())))
            .collect();
        for (from, succ) in links {
            if let Some(t) = node.traces.iter_mut().find(|t| {
                t.current_path()
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
                s.version = h.version;
                s.created_ns = h.created_ns;
                s.consumed = h.data_offset;
                Opened::Samples(Box::new(s))
            }
        }))
    }
}

enum Opened {
    Trace(Box<TraceFile>),
    Samples(Box<SampleFile>),
}

/// Adds a warning unless it was given already.
fn push_warning(list: &mut Vec<String>, w: String) {
    if !list.contains(&w) {
        list.push(w);
    }
}
