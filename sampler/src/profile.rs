//! Per-interval profiles: counting samples per (node, program, location) and kernel events per
//! node, naming locations once per distinct address, and writing one Samples and one Events
//! record per node and interval (seed 000 §"Sample profiling": profiles saved at a fixed
//! interval so faults can be localized to windows of time).
//!
//! Intervals are aligned to multiples of their length since the Unix epoch, so that intervals of
//! different nodes and writers line up without negotiation. Every interval gets records for every node, empty or not; the first and
//! the last are flagged PARTIAL when the sampler started or stopped inside them; an interval the
//! sampler could not observe (it was stopped and the rings overflowed) is flagged MISSED and has
//! no entries.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use culprit_datadir::Dir;
use culprit_format::names::{self, NodeInfo};
use culprit_format::rotation::{self, Rotate};
use culprit_format::vocab::{
    is_culprit_runtime, CULPRIT_RUNTIME, KERNEL_IMAGE, STOPPED_EVENT, STOPPED_NS_EVENT, UNKNOWN,
};
use culprit_format::writer::FileWriter;
use culprit_format::{
    end_reason, info_keys, interval_flags, lost_whose, samples_flags, EventEntry, FileKind,
    IntervalKey, IntervalRef, LayerDesc, LayerEvent, LayersHead, LostRec, OsMetricEntry, RecordBuf,
    SampleEntry, SamplesHead,
};

use rustc_hash::FxHashMap;

use crate::engine::Loss;
use crate::nodes::NodeIdx;
use crate::procs::{ImageKind, Loc, ProgId, Tracker};
use culprit_symbolize::{unresolved_name, ImageAddr, Symbolizer};

/// A call chain as written: program string id, `(image, function)` string ids outermost first.
type NamedStack = (u32, Vec<(u32, u32)>);

#[derive(Debug, Default)]
struct NodeAcc {
    samples: FxHashMap<(ProgId, Loc), u64>,
    /// Samples per (program, call chain outermost first), with `--call-graph`.
    stacks: FxHashMap<(ProgId, Box<[Loc]>), u64>,
    total: u64,
    events: Vec<u64>,
    /// Stops of processes begun, and ns stopped (see [`STOPPED_EVENT`]).
    stopped: u64,
    stopped_ns: u64,
    /// System-call layer events ([`crate::syscalls`]), in the order their calls ended.
    layers: Vec<LayerEvent>,
    /// Those not kept (more than [`LAYER_EVENTS_MAX`] in the interval).
    layers_dropped: u64,
}

/// Most layer events a node keeps per interval (56 bytes each in the file).
pub const LAYER_EVENTS_MAX: usize = 1 << 20;

#[derive(Debug, Default)]
struct Acc {
    nodes: Vec<NodeAcc>,
    lost: u64,
    lost_events: u64,
    lost_tracking: u64,
}

/// One interval, closed and ready to write.
#[derive(Debug)]
pub struct Closed {
    /// Interval start, wall-clock ns.
    pub start_ns: u64,
    /// Length, ns.
    pub dur_ns: u64,
    /// [`interval_flags`] bits.
    pub flags: u32,
    acc: Acc,
}

/// The open intervals.
#[derive(Debug)]
pub struct Intervals {
    dur_ns: u64,
    n_nodes: usize,
    n_events: usize,
    first: u64,
    first_partial: bool,
    next: u64,
    open: BTreeMap<u64, Acc>,
    missed: BTreeSet<u64>,
    /// Intervals ending after this wall time were not observed in full (the run ended
    /// before their records could be processed).
    missed_from: Option<u64>,
    late: u64,
}

/// Which intervals the sampler could not observe: a round of the ring reader that came more
/// than an interval after the previous one (the process was stopped or starved) *and* a ring
/// that overflowed (a LOST record) mean the wall-clock span between the two rounds was not
/// observed. The kernel writes its LOST record only once there is room again, so the evidence
/// may come one round after the stall.
#[derive(Clone, Debug, Default)]
pub struct Gaps {
    pending: Option<(u64, u64)>,
}

impl Gaps {
    /// One round: `stalled` is the wall-clock span since the previous round when it was longer
    /// than an interval, `lost` whether this round brought a LOST record. Returns the spans
    /// now known missed.
    pub fn round(&mut self, stalled: Option<(u64, u64)>, lost: bool) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        if let Some(span) = self.pending.take() {
            if lost {
                out.push(span);
            }
        }
        match stalled {
            Some(span) if lost => out.push(span),
            Some(span) => self.pending = Some(span),
            None => {}
        }
        out
    }
}

impl Intervals {
    /// Intervals of `dur_ns` starting with the one containing `start_wall_ns`.
    pub fn new(dur_ns: u64, start_wall_ns: u64, n_nodes: usize, n_events: usize) -> Intervals {
        let first = start_wall_ns / dur_ns;
        Intervals {
            dur_ns,
            n_nodes,
            n_events,
            first,
            first_partial: start_wall_ns % dur_ns != 0,
            next: first,
            open: BTreeMap::new(),
            missed: BTreeSet::new(),
            missed_from: None,
            late: 0,
        }
    }

    /// Interval length.
    pub fn dur_ns(&self) -> u64 {
        self.dur_ns
    }

    /// Records that arrived after their interval was written (counted into the oldest open one).
    pub fn late(&self) -> u64 {
        self.late
    }

    fn acc(&mut self, wall_ns: u64) -> &mut Acc {
        let mut idx = wall_ns / self.dur_ns;
        if idx < self.next {
            self.late += 1;
            idx = self.next;
        }
        let (n_nodes, n_events) = (self.n_nodes, self.n_events);
        self.open.entry(idx).or_insert_with(|| Acc {
            nodes: (0..n_nodes)
                .map(|_| NodeAcc {
                    events: vec![0; n_events],
                    ..NodeAcc::default()
                })
                .collect(),
            ..Acc::default()
        })
    }

    /// Counts a sample.
    pub fn sample(&mut self, wall_ns: u64, node: NodeIdx, prog: ProgId, loc: Loc) {
        let n = &mut self.acc(wall_ns).nodes[node as usize];
        n.total += 1;
        *n.samples.entry((prog, loc)).or_insert(0) += 1;
    }

    /// Counts a sample's call chain (outermost frame first).
    pub fn stack(&mut self, wall_ns: u64, node: NodeIdx, prog: ProgId, frames: Box<[Loc]>) {
        let n = &mut self.acc(wall_ns).nodes[node as usize];
        *n.stacks.entry((prog, frames)).or_insert(0) += 1;
    }

    /// Counts one occurrence of tracepoint `event` on `node`.
    pub fn event(&mut self, wall_ns: u64, node: NodeIdx, event: usize) {
        self.acc(wall_ns).nodes[node as usize].events[event] += 1;
    }

    /// Keeps the ISSUE and COMPLT of a system call of `node` that ended at `wall_ns`.
    pub fn layer_events(&mut self, wall_ns: u64, node: NodeIdx, evs: [LayerEvent; 2]) {
        let n = &mut self.acc(wall_ns).nodes[node as usize];
        if n.layers.len() + 2 > LAYER_EVENTS_MAX {
            n.layers_dropped += 2;
        } else {
            n.layers.extend(evs);
        }
    }

    /// Counts a stop of a process of `node` (its first thread switched out stopped).
    pub fn stopped(&mut self, wall_ns: u64, node: NodeIdx) {
        self.acc(wall_ns).nodes[node as usize].stopped += 1;
    }

    /// Adds the time `node`'s process stayed stopped from `from` to `to` (wall-clock ns) to
    /// the intervals it covers (the part before the oldest open interval goes into it).
    pub fn stopped_span(&mut self, node: NodeIdx, from: u64, to: u64) {
        let mut t = from;
        while t < to {
            let end = ((t / self.dur_ns + 1) * self.dur_ns).min(to);
            let dur = self.dur_ns;
            let n = &mut self.acc(t).nodes[node as usize];
            // A node's stopped time is its most stopped process's: at most the interval.
            n.stopped_ns = (n.stopped_ns + (end - t)).min(dur);
            t = end;
        }
    }

    /// Counts records of kind `what` the kernel dropped.
    pub fn lost(&mut self, wall_ns: u64, n: u64, what: Loss) {
        let a = self.acc(wall_ns);
        match what {
            Loss::Samples => a.lost += n,
            Loss::Events => a.lost_events += n,
            Loss::Tracking => a.lost_tracking += n,
        }
    }

    /// Marks the intervals lying wholly inside `(from, to)` (wall ns) as not observed.
    pub fn mark_missed(&mut self, from_wall: u64, to_wall: u64) {
        let first = from_wall.div_ceil(self.dur_ns).max(self.next);
        let end = to_wall / self.dur_ns; // intervals < end end before `to`
        for idx in first..end {
            self.missed.insert(idx);
        }
    }

    /// Marks every interval that ends after `from_wall` (wall ns) as not observed: the records
    /// from then on were not processed.
    pub fn mark_missed_from(&mut self, from_wall: u64) {
        self.missed_from = Some(self.missed_from.map_or(from_wall, |m| m.min(from_wall)));
    }

    /// Closes every interval that ends at or before `wall_ns`.
    pub fn close_until(&mut self, wall_ns: u64) -> Vec<Closed> {
        let mut out = Vec::new();
        while (self.next + 1) * self.dur_ns <= wall_ns {
            out.push(self.close_next(0));
        }
        out
    }

    /// Closes every remaining interval up to the one containing `stop_wall_ns`, the last flagged
    /// PARTIAL unless the run ended exactly on a boundary.
    pub fn close_all(&mut self, stop_wall_ns: u64) -> Vec<Closed> {
        let mut out = Vec::new();
        let last = stop_wall_ns.saturating_sub(1) / self.dur_ns;
        while self.next <= last.max(self.first) {
            let is_last = self.next == last.max(self.first);
            let partial = is_last && stop_wall_ns % self.dur_ns != 0;
            out.push(self.close_next(if partial { interval_flags::PARTIAL } else { 0 }));
        }
        out
    }

    fn close_next(&mut self, extra: u32) -> Closed {
        let idx = self.next;
        self.next += 1;
        let mut flags = extra;
        if idx == self.first && self.first_partial {
            flags |= interval_flags::PARTIAL;
        }
        let mut acc = self.open.remove(&idx).unwrap_or_default();
        if acc.nodes.is_empty() {
            acc.nodes = (0..self.n_nodes)
                .map(|_| NodeAcc {
                    events: vec![0; self.n_events],
                    ..NodeAcc::default()
                })
                .collect();
        }
        if self.missed.remove(&idx)
            || self
                .missed_from
                .is_some_and(|m| (idx + 1) * self.dur_ns > m)
        {
            flags |= interval_flags::MISSED;
        }
        Closed {
            start_ns: idx * self.dur_ns,
            dur_ns: self.dur_ns,
            flags,
            acc,
        }
    }
}

/// Names locations: (image, function), once per distinct location, with a long-lived cache.
#[derive(Debug)]
pub struct Namer {
    symbolizer: Symbolizer,
    /// Past this, new user-space locations are named `image+0xoffset` without reading the
    /// image (the run is ending and must end on time).
    deadline: Option<std::time::Instant>,
    cache: FxHashMap<Loc, (Arc<str>, Arc<str>)>,
    kernel_image: Arc<str>,
    unknown: Arc<str>,
    /// Distinct locations named so far.
    pub named: u64,
}

/// Beyond this many cached locations the cache starts over (a bound for week-long runs).
const NAMER_CACHE_MAX: usize = 1 << 20;

impl Default for Namer {
    fn default() -> Self {
        Self::new(Symbolizer::new())
    }
}

impl Namer {
    /// A namer over `symbolizer`.
    pub fn new(symbolizer: Symbolizer) -> Namer {
        Namer {
            symbolizer,
            deadline: None,
            cache: FxHashMap::default(),
            kernel_image: Arc::from(KERNEL_IMAGE),
            unknown: Arc::from(UNKNOWN),
            named: 0,
        }
    }

    /// After `at`, new user-space locations are named `image+0xoffset` without reading their
    /// images.
    pub fn set_deadline(&mut self, at: Option<std::time::Instant>) {
        self.deadline = at;
    }

    fn out_of_time(&self) -> bool {
        self.deadline
            .is_some_and(|d| std::time::Instant::now() >= d)
    }

    /// Drops what is cached about images whose files were replaced.
    pub fn forget(&mut self, paths: &[Arc<Path>]) {
        if paths.is_empty() {
            return;
        }
        for p in paths {
            self.symbolizer.forget_image(p);
        }
        self.cache.retain(|loc, _| !matches!(loc, Loc::User { .. }));
    }

    /// Names every location in `locs` not yet cached; user addresses are resolved in one batch
    /// per image.
    pub fn prepare<'a>(&mut self, tracker: &Tracker, locs: impl Iterator<Item = &'a Loc>) {
        if self.cache.len() > NAMER_CACHE_MAX {
            self.cache.clear();
        }
        let mut by_image: FxHashMap<u32, Vec<u64>> = FxHashMap::default();
        for loc in locs {
            if self.cache.contains_key(loc) {
                continue;
            }
            match *loc {
                Loc::User { image, offset } if tracker.image(image).kind == ImageKind::File => {
                    by_image.entry(image).or_default().push(offset);
                }
                other => {
                    let names = self.name_one(tracker, other);
                    self.cache.insert(other, names);
                    self.named += 1;
                }
            }
        }
        for (image, mut offsets) in by_image {
            offsets.sort_unstable();
            offsets.dedup();
            let img = tracker.image(image);
            let addrs: Vec<ImageAddr> = offsets.iter().map(|&o| ImageAddr::FileOffset(o)).collect();
            let names = if self.out_of_time() {
                vec![None; addrs.len()]
            } else {
                self.symbolizer.resolve_many(&img.path, &addrs)
            };
            let runtime = is_culprit_runtime(&img.name);
            for (offset, name) in offsets.into_iter().zip(names) {
                let func = match name {
                    _ if runtime => Arc::from(CULPRIT_RUNTIME),
                    Some(f) => f,
                    None => self.unresolved(&img.path, offset),
                };
                self.cache
                    .insert(Loc::User { image, offset }, (img.name.clone(), func));
                self.named += 1;
            }
        }
    }

    fn name_one(&mut self, tracker: &Tracker, loc: Loc) -> (Arc<str>, Arc<str>) {
        match loc {
            Loc::Kernel(addr) => match self.symbolizer.kernel_symbol(addr) {
                Some((func, module)) => (module.unwrap_or_else(|| self.kernel_image.clone()), func),
                None => (self.kernel_image.clone(), self.unknown.clone()),
            },
            Loc::User { image, offset } => {
                let img = tracker.image(image);
                match img.kind {
                    ImageKind::Vdso => {
                        let f = self
                            .symbolizer
                            .vdso(offset)
                            .unwrap_or_else(|| Arc::from(format!("[vdso]+{offset:#x}").as_str()));
                        (img.name.clone(), f)
                    }
                    ImageKind::Anon => (img.name.clone(), img.name.clone()),
                    ImageKind::File if is_culprit_runtime(&img.name) => {
                        (img.name.clone(), Arc::from(CULPRIT_RUNTIME))
                    }
                    ImageKind::File => {
                        let found = if self.out_of_time() {
                            None
                        } else {
                            self.symbolizer
                                .resolve(&img.path, ImageAddr::FileOffset(offset))
                        };
                        let f = match found {
                            Some(f) => f,
                            None => self.unresolved(&img.path, offset),
                        };
                        (img.name.clone(), f)
                    }
                }
            }
            Loc::Unknown => (self.unknown.clone(), self.unknown.clone()),
        }
    }

    /// The name of an address no symbol covers: `image+<offset of its function's start>` when the
    /// image's unwind table knows the function, else `image+<offset>`.
    fn unresolved(&mut self, path: &Path, offset: u64) -> Arc<str> {
        let at = if self.out_of_time() {
            None
        } else {
            self.symbolizer.function_start(path, offset)
        }
        .unwrap_or(offset);
        Arc::from(unresolved_name(path, at).as_str())
    }

    /// Images the symbolizer refused since the last call (one line each).
    pub fn take_notes(&mut self) -> Vec<String> {
        self.symbolizer.take_notes()
    }

    /// The (image, function) of a prepared location.
    pub fn get(&self, loc: &Loc) -> (Arc<str>, Arc<str>) {
        self.cache
            .get(loc)
            .cloned()
            .unwrap_or_else(|| (self.unknown.clone(), self.unknown.clone()))
    }
}

/// What every node file records about the run (its Info record).
#[derive(Clone, Debug, Default)]
pub struct RunInfo {
    /// `key=value` pairs common to all nodes (node name is added per file).
    pub pairs: Vec<(String, String)>,
    /// Event name.
    pub event: String,
    /// Period or frequency.
    pub period: u64,
    /// Frequency mode.
    pub freq: bool,
    /// Tracepoints counted, in entry order.
    pub tracepoints: Vec<String>,
    /// Call chains are sampled: every interval gets a Stacks record.
    pub call_graph: bool,
    /// The kernel's losses are the node's own ([`lost_whose::NODE`]): it is the only node and
    /// the whole machine is sampled. Otherwise they are the machine's.
    pub own_loss: bool,
}

#[derive(Debug)]
struct NodeFile {
    writer: FileWriter,
    /// The name of the run's first file for this node, once rotated.
    first: Option<String>,
    strings: HashMap<Arc<str>, u32>,
    new_strings: Vec<(u32, Arc<str>)>,
    event_sid: u32,
    tp_sids: Vec<u32>,
    /// String ids of each location's (image, function), so that naming an entry needs no
    /// string hashing once a location has been written.
    loc_sids: FxHashMap<Loc, (u32, u32)>,
    /// String id of each program, by [`ProgId`] (`u32::MAX` when not yet written).
    prog_sids: Vec<u32>,
    bytes: u64,
    samples: u64,
}

impl NodeFile {
    /// Creates `dir/<name_for(seq)>` with its Info record (the run's pairs, the node, then
    /// `extra`) and a fresh string table holding the event and tracepoint names.
    fn create(
        dir: &Dir,
        node: &str,
        info: &RunInfo,
        name_for: impl Fn(u32) -> String,
        created_ns: u64,
        extra: &[(&str, String)],
    ) -> io::Result<NodeFile> {
        let (file, name) = dir.create_file(name_for).map_err(datadir_error)?;
        let path = dir.path().join(name);
        let mut writer = FileWriter::from_file(
            file,
            path.clone(),
            FileKind::Samples,
            created_ns,
            std::process::id(),
        )
        .map_err(|e| io::Error::new(e.kind(), format!("write {}: {e}", path.display())))?;
        let mut buf = RecordBuf::new();
        let mut pairs: Vec<(&str, &str)> = vec![(info_keys::NODE, node)];
        pairs.extend(info.pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        pairs.extend(extra.iter().map(|(k, v)| (*k, v.as_str())));
        buf.info(pairs);
        writer.append(&buf)?;
        let mut f = NodeFile {
            writer,
            first: None,
            strings: HashMap::new(),
            new_strings: Vec::new(),
            event_sid: 0,
            tp_sids: Vec::new(),
            loc_sids: FxHashMap::default(),
            prog_sids: Vec::new(),
            bytes: 0,
            samples: 0,
        };
        f.event_sid = f.sid(&Arc::from(info.event.as_str()));
        f.tp_sids = info
            .tracepoints
            .iter()
            .map(|t| f.sid(&Arc::from(t.as_str())))
            .collect();
        Ok(f)
    }

    fn prog_sid(&mut self, prog: ProgId, tracker: &Tracker) -> u32 {
        let i = prog as usize;
        if i >= self.prog_sids.len() {
            self.prog_sids.resize(i + 1, u32::MAX);
        }
        if self.prog_sids[i] == u32::MAX {
            self.prog_sids[i] = self.sid(tracker.program_name(prog));
        }
        self.prog_sids[i]
    }

    fn loc_sids(&mut self, loc: Loc, namer: &Namer) -> (u32, u32) {
        if let Some(&v) = self.loc_sids.get(&loc) {
            return v;
        }
        if self.loc_sids.len() > NAMER_CACHE_MAX {
            self.loc_sids.clear();
        }
        let (image, func) = namer.get(&loc);
        let v = (self.sid(&image), self.sid(&func));
        self.loc_sids.insert(loc, v);
        v
    }

    /// The string id of `s`, allocating only for a new string.
    fn sid_str(&mut self, s: &str) -> u32 {
        match self.strings.get(s) {
            Some(&id) => id,
            None => self.sid(&Arc::from(s)),
        }
    }

    fn sid(&mut self, s: &Arc<str>) -> u32 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let id = self.strings.len() as u32;
        self.strings.insert(s.clone(), id);
        self.new_strings.push((id, s.clone()));
        id
    }
}

/// Totals per node, for the run summary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeSummary {
    /// Node name.
    pub node: String,
    /// The node's file.
    pub path: PathBuf,
    /// Samples written.
    pub samples: u64,
    /// Bytes written.
    pub bytes: u64,
}

/// The node files of one run.
#[derive(Debug)]
pub struct Output {
    files: Vec<NodeFile>,
    nodes: Vec<String>,
    info: RunInfo,
    buf: RecordBuf,
    intervals: u64,
    data_dir: PathBuf,
    rotate: Rotate,
    piece_start_ns: u64,
    piece: u32,
    rotations: u64,
    /// Notes written into the files so far (images refused as unsafe to open).
    notes: Vec<String>,
}

impl Output {
    /// Creates `DATA/<node>/samples-<start_ns>.cul` for every node with its Info record, and
    /// updates each real node's `node.info`.
    pub fn create(
        data_dir: &Path,
        nodes: &[String],
        start_ns: u64,
        info: RunInfo,
    ) -> io::Result<Output> {
        let mut files = Vec::with_capacity(nodes.len());
        // The sampler runs as root: directories and files are made the safe way (no link
        // followed, explicit modes, only directories owned by us or root; culprit-datadir).
        let root = Dir::open_root(data_dir, true).map_err(datadir_error)?;
        for node in nodes {
            let dir = root.node(node, true).map_err(datadir_error)?;
            let f = NodeFile::create(
                &dir,
                node,
                &info,
                |seq| names::samples_file_name(start_ns, seq),
                start_ns,
                &[],
            )?;
            files.push(f);
            if names::is_node_name(node) {
                write_node_info(&dir, &info).map_err(datadir_error)?;
            }
        }
        Ok(Output {
            files,
            nodes: nodes.to_vec(),
            info,
            buf: RecordBuf::with_capacity(64 << 10),
            intervals: 0,
            data_dir: data_dir.to_path_buf(),
            rotate: Rotate::default(),
            piece_start_ns: start_ns,
            piece: 0,
            rotations: 0,
            notes: Vec::new(),
        })
    }

    /// Moves every node's file to a new piece at interval boundaries as `rotate` says
    /// (`culprit sample --rotate / --rotate-size`; `culprit_format::rotation`).
    pub fn set_rotate(&mut self, rotate: Rotate) {
        self.rotate = rotate;
    }

    /// Pieces started so far (rotations of all nodes' files together).
    pub fn rotations(&self) -> u64 {
        self.rotations
    }

    /// The files being written now.
    pub fn current_paths(&self) -> Vec<PathBuf> {
        self.files
            .iter()
            .map(|f| f.writer.path().to_path_buf())
            .collect()
    }

    /// At the interval boundary `boundary_ns` (every interval before it written): a new piece
    /// for every node when one is due. The new piece is made first (Info with `continues` and
    /// `piece`, its own string table), then the old one gets its End record
    /// (`end_reason::ROTATED`). A node whose new piece cannot be made goes on in its old file,
    /// with the failure noted in it (Info `trouble`), and tries again at the next rotation.
    fn maybe_rotate(&mut self, boundary_ns: u64) -> io::Result<()> {
        let biggest = self.files.iter().map(|f| f.writer.committed_end()).max();
        if !self.rotate.enabled()
            || !self
                .rotate
                .due(self.piece_start_ns, boundary_ns, biggest.unwrap_or(0))
        {
            return Ok(());
        }
        self.piece += 1;
        self.piece_start_ns = boundary_ns;
        let root = Dir::open_root(&self.data_dir, true).map_err(datadir_error);
        for (f, node) in self.files.iter_mut().zip(&self.nodes) {
            let dir = match &root {
                Ok(root) => root.node(node, true).map_err(datadir_error),
                Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
            };
            let made = dir.and_then(|dir| {
                let old = f
                    .writer
                    .path()
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let first = f.first.clone().unwrap_or_else(|| old.clone());
                let piece = self.piece;
                let mut next = NodeFile::create(
                    &dir,
                    node,
                    &self.info,
                    |seq| rotation::piece_name(&first, piece + seq),
                    boundary_ns,
                    &[
                        (info_keys::CONTINUES, old),
                        (info_keys::PIECE, piece.to_string()),
                    ],
                )?;
                next.first = Some(first);
                next.bytes = f.bytes;
                next.samples = f.samples;
                Ok(next)
            });
            match made {
                Ok(next) => {
                    let old = std::mem::replace(f, next);
                    old.writer.finish(boundary_ns, end_reason::ROTATED)?;
                    self.rotations += 1;
                }
                Err(e) => {
                    let mut b = RecordBuf::new();
                    let note =
                        format!("{boundary_ns}: cannot start a new piece ({e}); this file goes on");
                    b.info([("trouble", note.as_str())]);
                    f.writer.append(&b)?;
                }
            }
        }
        Ok(())
    }

    /// Writes one closed interval for every node: new strings, the Samples record, the Events
    /// record, committed together.
    pub fn write(&mut self, c: &Closed, namer: &mut Namer, tracker: &Tracker) -> io::Result<()> {
        let missed = interval_flags::is_missed(c.flags);
        if !missed {
            namer.prepare(
                tracker,
                c.acc.nodes.iter().flat_map(|n| {
                    n.samples
                        .keys()
                        .map(|(_, loc)| loc)
                        .chain(n.stacks.keys().flat_map(|(_, frames)| frames.iter()))
                }),
            );
        }
        let notes = namer.take_notes();
        if !notes.is_empty() {
            // One line each in every node's data: what was not read, and why.
            self.buf.clear();
            self.buf
                .info(notes.iter().map(|n| (info_keys::WARNING, n.as_str())));
            for f in &mut self.files {
                f.writer.append(&self.buf)?;
            }
            self.notes.extend(notes);
        }
        let mut flags = c.flags;
        if self.info.freq {
            flags |= samples_flags::FREQ;
        }
        for (i, f) in self.files.iter_mut().enumerate() {
            let empty = NodeAcc::default();
            let n = c.acc.nodes.get(i).unwrap_or(&empty);
            let mut counts: FxHashMap<(u32, u32, u32), u64> = FxHashMap::default();
            if !missed {
                for (&(prog, loc), &count) in &n.samples {
                    let (image, func) = f.loc_sids(loc, namer);
                    let key = (f.prog_sid(prog, tracker), image, func);
                    *counts.entry(key).or_insert(0) += count;
                }
            }
            // Call chains, named before the new strings are written.
            let mut stacks: FxHashMap<NamedStack, u64> = FxHashMap::default();
            if !missed && self.info.call_graph {
                for ((prog, frames), &count) in &n.stacks {
                    let named: Vec<(u32, u32)> =
                        frames.iter().map(|&loc| f.loc_sids(loc, namer)).collect();
                    *stacks
                        .entry((f.prog_sid(*prog, tracker), named))
                        .or_insert(0) += count;
                }
            }
            // Stops are counted where context switches are (named before the strings go out).
            let stop_sids = self
                .info
                .tracepoints
                .iter()
                .any(|t| t == "sched:sched_switch")
                .then(|| {
                    (
                        f.sid(&Arc::from(STOPPED_EVENT)),
                        f.sid(&Arc::from(STOPPED_NS_EVENT)),
                    )
                });
            self.buf.clear();
            if !f.new_strings.is_empty() {
                self.buf
                    .strings(f.new_strings.iter().map(|(id, s)| (*id, &**s)));
                f.new_strings.clear();
            }
            let mut entries: Vec<SampleEntry> = counts
                .into_iter()
                .map(|((program, image, function), count)| SampleEntry {
                    program,
                    image,
                    function,
                    count,
                })
                .collect();
            entries.sort_by(|a, b| {
                b.count
                    .cmp(&a.count)
                    .then((a.program, a.image, a.function).cmp(&(b.program, b.image, b.function)))
            });
            let total = if missed { 0 } else { n.total };
            self.buf.samples(
                &SamplesHead {
                    start_ns: c.start_ns,
                    dur_ns: c.dur_ns,
                    flags,
                    event_sid: f.event_sid,
                    period: self.info.period,
                    total,
                    lost: c.acc.lost,
                },
                entries,
            );
            let mut events: Vec<EventEntry> = Vec::new();
            if !missed {
                events.extend(
                    f.tp_sids
                        .iter()
                        .zip(n.events.iter().chain(std::iter::repeat(&0)))
                        .map(|(&event, &count)| EventEntry { event, count }),
                );
                if let Some((a, b)) = stop_sids {
                    events.push(EventEntry {
                        event: a,
                        count: n.stopped,
                    });
                    events.push(EventEntry {
                        event: b,
                        count: n.stopped_ns,
                    });
                }
            }
            self.buf.events(c.start_ns, c.dur_ns, c.flags, events);
            let a = &c.acc;
            if a.lost + a.lost_events + a.lost_tracking > 0 {
                self.buf.lost(
                    &IntervalRef {
                        start_ns: c.start_ns,
                        dur_ns: c.dur_ns,
                        flags: c.flags,
                    },
                    &LostRec {
                        interval: IntervalKey::default(),
                        whose: if self.info.own_loss {
                            lost_whose::NODE
                        } else {
                            lost_whose::MACHINE
                        },
                        samples: a.lost,
                        events: a.lost_events,
                        tracking: a.lost_tracking,
                    },
                );
            }
            if self.info.call_graph {
                let mut stacks: Vec<(NamedStack, u64)> = stacks.into_iter().collect();
                stacks.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
                self.buf.stacks(
                    &IntervalRef {
                        start_ns: c.start_ns,
                        dur_ns: c.dur_ns,
                        flags: c.flags,
                    },
                    stacks
                        .iter()
                        .map(|((prog, frames), count)| (*prog, *count, frames.as_slice())),
                );
            }
            if !missed && (!n.layers.is_empty() || n.layers_dropped > 0) {
                self.buf.layers(
                    &LayersHead {
                        span_start_ns: c.start_ns,
                        span_end_ns: c.start_ns + c.dur_ns,
                        dropped: n.layers_dropped.min(u64::from(u32::MAX)) as u32,
                    },
                    &[
                        LayerDesc {
                            id: crate::syscalls::LAYER_ID,
                            level: crate::syscalls::LAYER_LEVEL,
                            name: crate::syscalls::LAYER_NAME.into(),
                        },
                        LayerDesc {
                            id: crate::blocklayer::LAYER_ID,
                            level: crate::blocklayer::LAYER_LEVEL,
                            name: crate::blocklayer::LAYER_NAME.into(),
                        },
                    ]
                    .into_iter()
                    .filter(|d| n.layers.iter().any(|e| e.layer == d.id))
                    .collect::<Vec<_>>(),
                    n.layers.iter().copied(),
                );
            }
            f.writer.append(&self.buf)?;
            f.bytes += self.buf.len() as u64;
            f.samples += total;
        }
        self.intervals += 1;
        self.maybe_rotate(c.start_ns + c.dur_ns)
    }

    /// Writes one interval of OS metrics: for every node with values, its new strings and an
    /// OsMetrics record, committed together. Independent of the sample intervals (the OS
    /// metrics have their own, shorter interval).
    pub fn write_os(&mut self, os: &crate::os::OsInterval) -> io::Result<()> {
        for (f, vals) in self.files.iter_mut().zip(&os.nodes) {
            let Some(vals) = vals else { continue };
            let entries: Vec<OsMetricEntry> = vals
                .iter()
                .map(|v| OsMetricEntry {
                    metric: f.sid_str(v.def.name),
                    instance: v.instance.as_deref().map(|i| f.sid_str(i)),
                    unit: f.sid_str(v.def.unit),
                    value: v.value,
                })
                .collect();
            self.buf.clear();
            if !f.new_strings.is_empty() {
                self.buf
                    .strings(f.new_strings.iter().map(|(id, s)| (*id, &**s)));
                f.new_strings.clear();
            }
            self.buf.os_metrics(&os.head, entries);
            f.writer.append(&self.buf)?;
            f.bytes += self.buf.len() as u64;
        }
        Ok(())
    }

    /// Forgets which string ids locations were written with (their names may change: an
    /// image's file was replaced).
    pub fn forget_locations(&mut self) {
        for f in &mut self.files {
            f.loc_sids.clear();
        }
    }

    /// Writes the End record of every file.
    pub fn finish(self, end_ns: u64, by_signal: bool) -> io::Result<Vec<NodeSummary>> {
        let reason = if by_signal {
            end_reason::SIGNAL
        } else {
            end_reason::DONE
        };
        let mut out = Vec::new();
        for (f, node) in self.files.into_iter().zip(self.nodes) {
            crate::progress::beat();
            let bytes = f.bytes;
            let samples = f.samples;
            let path = f.writer.finish(end_ns, reason)?;
            out.push(NodeSummary {
                node,
                path,
                samples,
                bytes,
            });
        }
        Ok(out)
    }

    /// The notes written into the files so far (images refused as unsafe to open).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Intervals written so far.
    pub fn intervals(&self) -> u64 {
        self.intervals
    }
}

/// Keys the sampler owns in `node.info`.
const NODE_INFO_SAMPLER_KEYS: &[&str] = &[
    "host",
    "kernel",
    "clocksource",
    "sampler_interval_ns",
    "sampler_event",
    "sampler_period",
    "sampler_freq",
];

/// A data-directory error as an I/O error (`PermissionDenied` for a refusal).
pub(crate) fn datadir_error(e: culprit_datadir::Error) -> io::Error {
    let kind = match &e {
        culprit_datadir::Error::Refused { .. } => io::ErrorKind::PermissionDenied,
        culprit_datadir::Error::Io { source, .. } => source.kind(),
        _ => io::ErrorKind::Other,
    };
    io::Error::new(kind, e.to_string())
}

/// Updates `dir/node.info` with what the sampler knows (host, kernel, clock source, its interval
/// and event), keeping other writers' keys when their file is trustworthy; replaced atomically
/// (a new file with a random name, renamed over it).
fn write_node_info(dir: &Dir, info: &RunInfo) -> Result<(), culprit_datadir::Error> {
    dir.update_node_info(|ni| set_sampler_keys(ni, info))
}

fn set_sampler_keys(ni: &mut NodeInfo, info: &RunInfo) {
    ni.pairs
        .retain(|(k, _)| !NODE_INFO_SAMPLER_KEYS.contains(&k.as_str()));
    let get = |k: &str| {
        info.pairs
            .iter()
            .find(|(kk, _)| kk == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    ni.pairs.push(("host".into(), get("host")));
    ni.pairs.push(("kernel".into(), get("kernel")));
    ni.pairs.push(("clocksource".into(), clocksource()));
    ni.pairs
        .push(("sampler_interval_ns".into(), get("interval_ns")));
    ni.pairs.push(("sampler_event".into(), info.event.clone()));
    ni.pairs.push((
        if info.freq {
            "sampler_freq"
        } else {
            "sampler_period"
        }
        .into(),
        info.period.to_string(),
    ));
}

/// The kernel's current clock source (`tsc`, `kvm-clock`, …).
pub fn clocksource() -> String {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_aligned_partial_and_contiguous() {
        let s = 1_000_000_000u64;
        let mut iv = Intervals::new(s, 10 * s + s / 2, 1, 0);
        iv.sample(10 * s + s / 2 + 1, 0, 0, Loc::Unknown);
        iv.sample(12 * s + 5, 0, 0, Loc::Unknown);
        let closed = iv.close_until(12 * s + 10);
        assert_eq!(closed.len(), 2);
        assert_eq!(closed[0].start_ns, 10 * s);
        assert_eq!(closed[0].flags, interval_flags::PARTIAL);
        assert_eq!(closed[0].acc.nodes[0].total, 1);
        // An interval without samples still gets a record.
        assert_eq!(closed[1].start_ns, 11 * s);
        assert_eq!(closed[1].flags, 0);
        assert_eq!(closed[1].acc.nodes[0].total, 0);
        // A late record lands in the oldest open interval.
        iv.sample(10 * s + 7, 0, 0, Loc::Unknown);
        assert_eq!(iv.late(), 1);
        let rest = iv.close_all(13 * s + 1);
        assert_eq!(rest.len(), 2);
        assert_eq!(rest[0].start_ns, 12 * s);
        assert_eq!(rest[0].acc.nodes[0].total, 2);
        assert_eq!(rest[1].flags, interval_flags::PARTIAL);
    }

    #[test]
    fn a_stall_is_missed_only_with_lost_records_in_that_round_or_the_next() {
        let mut g = Gaps::default();
        assert_eq!(g.round(None, false), vec![]);
        assert_eq!(g.round(None, true), vec![], "lost records without a stall");
        assert_eq!(g.round(Some((10, 20)), true), vec![(10, 20)]);
        // The LOST record comes a round late.
        assert_eq!(g.round(Some((30, 40)), false), vec![]);
        assert_eq!(g.round(None, true), vec![(30, 40)]);
        // A stall without any loss is not missing data.
        assert_eq!(g.round(Some((50, 60)), false), vec![]);
        assert_eq!(g.round(None, false), vec![]);
        assert_eq!(g.round(None, true), vec![]);
        // Two stalls in a row, the loss seen at the second.
        assert_eq!(g.round(Some((70, 80)), false), vec![]);
        assert_eq!(g.round(Some((80, 95)), true), vec![(70, 80), (80, 95)]);
    }

    #[test]
    fn missed_intervals_are_those_wholly_inside_the_gap() {
        let s = 10u64;
        let mut iv = Intervals::new(s, 0, 1, 1);
        iv.mark_missed(5, 42);
        let c = iv.close_all(50);
        let flags: Vec<u32> = c.iter().map(|c| c.flags & interval_flags::MISSED).collect();
        assert_eq!(flags, vec![0, 1, 1, 1, 0]);
        // A run stopped exactly on a boundary ends without a partial interval.
        let mut iv = Intervals::new(s, 0, 1, 1);
        let c = iv.close_all(30);
        assert_eq!(c.len(), 3);
        assert_eq!(c[2].flags, 0);
    }
}
