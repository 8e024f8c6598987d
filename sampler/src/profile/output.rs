//! Writing the node files: one Samples, Events (and Stacks, Layers, Lost) record per node and
//! closed interval, OS metrics as they come, rotation, the Info record of the run.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use culprit_datadir::Dir;
use culprit_format::names::{self, NodeInfo};
use culprit_format::rotation::{self, Rotate};
use culprit_format::vocab::{STOPPED_EVENT, STOPPED_NS_EVENT};
use culprit_format::writer::FileWriter;
use culprit_format::{
    end_reason, info_keys, interval_flags, lost_whose, samples_flags, EventEntry, FileKind,
    IntervalKey, IntervalRef, LayerDesc, LayersHead, LostRec, OsMetricEntry, RecordBuf,
    SampleEntry, SamplesHead,
};
use rustc_hash::FxHashMap;

use super::intervals::{Closed, NodeAcc};
use super::namer::{Namer, NAMER_CACHE_MAX};
use crate::procs::{Loc, ProgId, Tracker};

/// A call chain as written: program string id, `(image, function)` string ids outermost first.
type NamedStack = (u32, Vec<(u32, u32)>);

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
                // The span covers every event: a system call is kept in the interval it ended
                // in, and its ISSUE (its entry) may be in an earlier one.
                let earliest = n.layers.iter().map(|e| e.t_ns).min();
                self.buf.layers(
                    &LayersHead {
                        span_start_ns: earliest.map_or(c.start_ns, |t| t.min(c.start_ns)),
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
