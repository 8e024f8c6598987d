//! The record pipeline shared by live sampling and by replaying a `perf.data` file (live and
//! offline share one path, so a replay tests what runs live): decode records, merge them in timestamp order, track
//! processes, attribute samples and tracepoint hits to nodes, count them per interval.
//!
//! Rings are not ordered with each other, so records are buffered and sorted; the caller says up
//! to which timestamp everything has been read (the start of the previous drain round, as perf's
//! "finished round" does), and only records before it are processed.

use std::net::IpAddr;

use rustc_hash::FxHashMap;

use crate::nodes::{NodeIdx, ProcFacts};
use crate::procs::{Loc, ProcInfo, Tracker};
use crate::profile::{Intervals, Loss};
use crate::record::{self, Layout, Rec, MISC_CPUMODE_MASK, MISC_KERNEL};
use crate::tracefs::{self, Decoder};

/// Which event a record belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// The sampling event.
    Samples,
    /// Tracepoint `n` (index into the engine's tracepoint list).
    Tracepoint(u16),
    /// The process-tracking event (COMM, MMAP2, FORK, EXIT, NAMESPACES records).
    Tracking,
}

/// The kind of records lost by the ring of a stream (`None`: not known, as in a replayed
/// `perf.data` file, where everything shares one ring: counted as samples).
fn loss_of(stream: Option<Stream>) -> Loss {
    match stream {
        Some(Stream::Tracepoint(_)) => Loss::Events,
        Some(Stream::Tracking) => Loss::Tracking,
        Some(Stream::Samples) | None => Loss::Samples,
    }
}

/// How to decode the records of a buffer: by event id, or one layout for all.
#[derive(Clone, Debug, Default)]
pub struct Streams {
    by_id: FxHashMap<u64, (Layout, Stream)>,
    default: Option<(Layout, Stream)>,
}

impl Streams {
    /// Streams told apart by id.
    pub fn new() -> Streams {
        Streams::default()
    }

    /// Adds the event with kernel id `id`.
    pub fn add(&mut self, id: u64, layout: Layout, stream: Stream) {
        self.by_id.insert(id, (layout, stream));
    }

    /// Uses `layout` for records whose id is unknown or absent.
    pub fn set_default(&mut self, layout: Layout, stream: Stream) {
        self.default = Some((layout, stream));
    }

    fn any_layout(&self) -> Option<Layout> {
        self.default
            .map(|d| d.0)
            .or_else(|| self.by_id.values().next().map(|v| v.0))
    }

    fn lookup(&self, id: Option<u64>) -> Option<(Layout, Stream)> {
        id.and_then(|id| self.by_id.get(&id).copied())
            .or(self.default)
    }
}

/// Node attribution data decoded from a tracepoint's raw fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TpKey {
    None,
    Block {
        dev: u32,
        sector: u64,
        /// Bytes its sectors cover (0 when the tracepoint has no `nr_sector`).
        bytes: u64,
        /// From `rwbs`: a write, a read, or neither (a flush).
        write: Option<bool>,
        /// A completion with an error.
        error: bool,
    },
    Tcp {
        saddr: IpAddr,
        sport: Option<u16>,
        daddr: IpAddr,
        dport: Option<u16>,
    },
    Switch {
        stopped: bool,
        next: u32,
    },
    SysEnter {
        fd: u64,
        count: u64,
        pos: u64,
        write: bool,
    },
    SysExit {
        ret: i64,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Ev {
    Sample {
        pid: u32,
        ip: u64,
        kernel: bool,
        /// The call chain's entries (`--call-graph`), context markers included.
        chain: Option<Box<[u64]>>,
    },
    Tp {
        tp: u16,
        pid: u32,
        tid: u32,
        key: TpKey,
    },
    Mmap(Box<MmapEv>),
    Comm {
        pid: u32,
        tid: u32,
        comm: Box<[u8]>,
        exec: bool,
        facts: Option<Box<ProcFacts>>,
    },
    Netns {
        pid: u32,
        tid: u32,
        ino: u64,
    },
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
    },
    Exit {
        pid: u32,
        tid: u32,
    },
    Lost {
        what: Loss,
        n: u64,
    },
    Throttle,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct MmapEv {
    pid: u32,
    start: u64,
    len: u64,
    pgoff: u64,
    path: Box<[u8]>,
    dev_ino: Option<(u32, u32, u64)>,
}

#[derive(Clone, Debug)]
struct Timed {
    time: u64,
    ev: Ev,
}

/// A tracepoint the engine counts.
#[derive(Clone, Debug)]
pub struct TpSpec {
    /// `system:name`.
    pub name: String,
    /// How occurrences are attributed.
    pub decoder: Decoder,
}

/// Counters of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Samples counted (in scope).
    pub samples: u64,
    /// Samples outside the scope (`--pid`, `--cgroup`).
    pub out_of_scope: u64,
    /// Samples the kernel reported lost.
    pub lost: u64,
    /// Tracepoint records the kernel reported lost.
    pub lost_events: u64,
    /// Process-tracking records (COMM, MMAP2, FORK, EXIT, NAMESPACES) the kernel reported lost.
    pub lost_tracking: u64,
    /// Tracepoint hits counted.
    pub events: u64,
    /// Throttle records (the kernel slowed sampling down).
    pub throttles: u64,
    /// Records that could not be decoded.
    pub malformed: u64,
    /// Records of streams the engine does not know.
    pub unknown_stream: u64,
}

/// Offset from the records' clock to wall-clock time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClockMap {
    /// wall ns − record clock ns.
    pub offset: i64,
}

impl ClockMap {
    /// Converts a record timestamp to wall-clock ns.
    pub fn wall(&self, t: u64) -> u64 {
        (t as i64).saturating_add(self.offset).max(0) as u64
    }
}

/// Beyond this many in-flight block requests the owner map starts over.
const BLOCK_OWNERS_MAX: usize = 1 << 16;

/// The pipeline.
#[derive(Debug)]
pub struct Engine {
    /// Process table.
    pub tracker: Tracker,
    /// Open intervals.
    pub intervals: Intervals,
    /// Record clock → wall clock.
    pub clock: ClockMap,
    tps: Vec<TpSpec>,
    pending: Vec<Timed>,
    snapshot: Option<(u64, Vec<ProcInfo>)>,
    /// (device, sector) → the node, process and thread that queued the request.
    block_owner: FxHashMap<(u32, u64), (NodeIdx, u32, u32)>,
    early_facts: FxHashMap<u32, ProcFacts>,
    stops: Stops,
    syscalls: crate::syscalls::Pairing,
    blocks: crate::blocklayer::Pairing,
    /// The system-call and block layers are recorded (`culprit sample --layers`: the
    /// system-call tracepoints are among the engine's).
    io_layers: bool,
    /// Counters.
    pub stats: EngineStats,
}

/// Processes stopped by a signal or a tracer, from `sched_switch` (see
/// [`culprit_format::vocab::STOPPED_EVENT`]).
#[derive(Debug, Default)]
struct Stops {
    /// Threads switched out stopped: tid → (pid, node).
    threads: FxHashMap<u32, (u32, NodeIdx)>,
    /// Processes stopped now: pid → (node, stopped ns accounted up to this wall time).
    procs: FxHashMap<u32, (NodeIdx, u64)>,
}

impl Stops {
    /// A context switch at `wall`: `tid` of `pid` (node `node`) goes off the CPU, `stopped`
    /// when it stopped; `next` runs next.
    #[allow(clippy::too_many_arguments)]
    fn switch(
        &mut self,
        iv: &mut Intervals,
        wall: u64,
        node: Option<NodeIdx>,
        pid: u32,
        tid: u32,
        stopped: bool,
        next: u32,
    ) {
        if stopped {
            if let Some(node) = node {
                self.threads.insert(tid, (pid, node));
                // A stop of the whole process is counted once, not once per thread: its
                // first thread switched out stopped starts it.
                if let std::collections::hash_map::Entry::Vacant(e) = self.procs.entry(pid) {
                    iv.stopped(wall, node);
                    e.insert((node, wall));
                }
            }
        }
        // A stopped thread runs again: its process was continued (the others follow).
        if let Some((p, _)) = self.threads.remove(&next) {
            if let Some((node, from)) = self.procs.remove(&p) {
                iv.stopped_span(node, from, wall);
            }
            self.threads.retain(|_, (q, _)| *q != p);
        }
    }

    /// Accounts the stops still going on up to `wall` (before intervals up to it close).
    fn settle(&mut self, iv: &mut Intervals, wall: u64) {
        for (node, from) in self.procs.values_mut() {
            if wall > *from {
                iv.stopped_span(*node, *from, wall);
                *from = wall;
            }
        }
    }
}

impl Engine {
    /// A pipeline over `tracker` counting into `intervals`.
    pub fn new(
        tracker: Tracker,
        intervals: Intervals,
        clock: ClockMap,
        tps: Vec<TpSpec>,
    ) -> Engine {
        let io_layers = tps
            .iter()
            .any(|t| crate::syscalls::TRACEPOINTS.contains(&t.name.as_str()));
        Engine {
            tracker,
            intervals,
            clock,
            tps,
            pending: Vec::new(),
            snapshot: None,
            block_owner: FxHashMap::default(),
            early_facts: FxHashMap::default(),
            stops: Stops::default(),
            syscalls: crate::syscalls::Pairing::default(),
            blocks: crate::blocklayer::Pairing::default(),
            io_layers,
            stats: EngineStats::default(),
        }
    }

    /// The /proc snapshot taken at record-clock time `time`: applied in timestamp order, after
    /// the records before it.
    pub fn set_snapshot(&mut self, time: u64, snap: Vec<ProcInfo>) {
        self.snapshot = Some((time, snap));
    }

    /// Facts about processes that just called `exec`, read by the ring reader right after the
    /// drain (the earliest moment; a short-lived program may be gone by the time its record is
    /// decoded). Used for the exec records of the next [`Engine::ingest`].
    pub fn provide_facts(&mut self, facts: Vec<(u32, ProcFacts)>) {
        self.early_facts.extend(facts);
    }

    /// Records waiting for the watermark.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Decodes the whole records in `buf` and queues them.
    pub fn ingest(&mut self, buf: &[u8], streams: &Streams) {
        let Some(common) = streams.any_layout() else {
            return;
        };
        for (kind, misc, rec) in record::split(buf) {
            let layout = if kind == perf_event_open_sys::bindings::PERF_RECORD_SAMPLE {
                let id = common
                    .sample_id_pos()
                    .and_then(|pos| rec.get(8 + pos..16 + pos))
                    .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
                match streams.lookup(id) {
                    Some((l, _)) => l,
                    None => {
                        self.stats.unknown_stream += 1;
                        continue;
                    }
                }
            } else {
                common
            };
            let r = record::decode(kind, misc, rec, &layout);
            self.queue(r, streams);
        }
    }

    fn queue(&mut self, r: Rec<'_>, streams: &Streams) {
        let Some(time) = r.time() else {
            self.stats.malformed += 1;
            return;
        };
        let ev = match r {
            Rec::Sample(s) => match streams.lookup(s.id) {
                Some((_, Stream::Samples)) => Ev::Sample {
                    pid: s.pid,
                    ip: s.ip,
                    kernel: s.misc & MISC_CPUMODE_MASK == MISC_KERNEL,
                    chain: (!s.callchain.is_empty()).then(|| s.chain().collect()),
                },
                Some((_, Stream::Tracepoint(tp))) => Ev::Tp {
                    tp,
                    pid: s.pid,
                    tid: s.tid,
                    key: self.tp_key(tp, s.raw),
                },
                // The tracking event counts nothing: it never samples.
                Some((_, Stream::Tracking)) | None => {
                    self.stats.unknown_stream += 1;
                    return;
                }
            },
            Rec::Mmap(m, _) => {
                if !m.exec {
                    return;
                }
                Ev::Mmap(Box::new(MmapEv {
                    pid: m.pid,
                    start: m.start,
                    len: m.len,
                    pgoff: m.pgoff,
                    path: m.filename.into(),
                    dev_ino: m.dev_ino,
                }))
            }
            Rec::Comm {
                pid,
                tid,
                comm,
                exec,
                ..
            } => Ev::Comm {
                pid,
                tid,
                comm: comm.into(),
                exec,
                // Read the new program's cgroup / namespace now, while it surely runs: by the
                // time the record is processed a short-lived program may be gone.
                facts: if exec {
                    self.early_facts
                        .remove(&pid)
                        .or_else(|| self.tracker.read_facts_now(pid))
                        .map(Box::new)
                } else {
                    None
                },
            },
            Rec::Namespaces {
                pid,
                tid,
                netns: Some(ino),
                ..
            } => Ev::Netns { pid, tid, ino },
            Rec::Namespaces { netns: None, .. } => return,
            Rec::Fork { pid, ppid, tid, .. } => Ev::Fork { pid, ppid, tid },
            Rec::Exit { pid, tid, .. } => Ev::Exit { pid, tid },
            Rec::Lost { id, lost, .. } => Ev::Lost {
                what: loss_of(streams.lookup(Some(id)).map(|(_, s)| s)),
                n: lost,
            },
            Rec::LostSamples { lost, sid } => Ev::Lost {
                what: loss_of(streams.lookup(sid.id).map(|(_, s)| s)),
                n: lost,
            },
            Rec::Throttle { on: true, .. } => Ev::Throttle,
            Rec::Throttle { on: false, .. } | Rec::Other { .. } => return,
            Rec::Malformed { .. } => {
                self.stats.malformed += 1;
                return;
            }
        };
        self.pending.push(Timed { time, ev });
    }

    fn tp_key(&self, tp: u16, raw: Option<&[u8]>) -> TpKey {
        let (Some(spec), Some(raw)) = (self.tps.get(tp as usize), raw) else {
            return TpKey::None;
        };
        match &spec.decoder {
            Decoder::Process => TpKey::None,
            Decoder::Switch {
                prev_state,
                next_pid,
            } => TpKey::Switch {
                stopped: tracefs::read_uint(raw, prev_state)
                    .is_some_and(|s| s & tracefs::STOPPED_STATES != 0),
                next: tracefs::read_uint(raw, next_pid).unwrap_or(0) as u32,
            },
            Decoder::SysEnter {
                fd,
                count,
                pos,
                write,
            } => match (
                tracefs::read_uint(raw, fd),
                tracefs::read_uint(raw, count),
                tracefs::read_uint(raw, pos),
            ) {
                (Some(fd), Some(count), Some(pos)) => TpKey::SysEnter {
                    fd,
                    count,
                    pos,
                    write: *write,
                },
                _ => TpKey::None,
            },
            Decoder::SysExit { ret } => match tracefs::read_uint(raw, ret) {
                Some(r) => TpKey::SysExit { ret: r as i64 },
                None => TpKey::None,
            },
            Decoder::Block {
                dev,
                sector,
                nr_sector,
                rwbs,
                error,
                ..
            } => {
                match (
                    tracefs::read_uint(raw, dev),
                    tracefs::read_uint(raw, sector),
                ) {
                    (Some(d), Some(s)) => TpKey::Block {
                        dev: d as u32,
                        sector: s,
                        bytes: nr_sector
                            .as_ref()
                            .and_then(|f| tracefs::read_uint(raw, f))
                            .map_or(0, |n| n * crate::blocklayer::SECTOR),
                        write: rwbs
                            .as_ref()
                            .and_then(|f| raw.get(f.offset..f.offset + f.size))
                            .and_then(crate::blocklayer::rwbs_writes),
                        error: error
                            .as_ref()
                            .and_then(|f| tracefs::read_uint(raw, f))
                            .is_some_and(|e| e as u32 != 0),
                    },
                    _ => TpKey::None,
                }
            }
            Decoder::Tcp {
                family,
                saddr,
                daddr,
                saddr6,
                daddr6,
                sport,
                dport,
            } => match tracefs::tcp_addrs(
                raw,
                family,
                saddr,
                daddr,
                saddr6.as_ref(),
                daddr6.as_ref(),
            ) {
                Some((saddr, daddr)) => {
                    let port = |f: &Option<tracefs::Field>| {
                        Some(tracefs::read_uint(raw, f.as_ref()?)? as u16)
                    };
                    TpKey::Tcp {
                        saddr,
                        sport: port(sport),
                        daddr,
                        dport: port(dport),
                    }
                }
                None => TpKey::None,
            },
        }
    }

    /// Processes, in timestamp order, every queued record older than `until` (record clock).
    /// Returns true when any records were lost among them.
    pub fn process_until(&mut self, until: u64) -> bool {
        // Each ring's records are already in time order, so the buffer is a few sorted runs: the
        // stable sort merges runs (and keeps a ring's order among equal timestamps).
        self.pending.sort_by_key(|t| t.time);
        let n = self.pending.partition_point(|t| t.time < until);
        let batch: Vec<Timed> = self.pending.drain(..n).collect();
        let mut lost = false;
        for t in batch {
            if self.snapshot.as_ref().is_some_and(|(st, _)| t.time >= *st) {
                self.apply_snapshot();
            }
            lost |= self.handle(t);
        }
        if self.snapshot.as_ref().is_some_and(|(st, _)| until > *st) {
            self.apply_snapshot();
        }
        let wall = self.clock.wall(until);
        self.stops.settle(&mut self.intervals, wall);
        lost
    }

    fn apply_snapshot(&mut self) {
        if let Some((_, snap)) = self.snapshot.take() {
            self.tracker.apply_snapshot(snap);
        }
    }

    fn handle(&mut self, t: Timed) -> bool {
        let wall = self.clock.wall(t.time);
        match t.ev {
            Ev::Sample {
                pid,
                ip,
                kernel,
                chain,
            } => match self.tracker.attribute(pid, ip, kernel) {
                Some((node, prog, loc)) => {
                    self.stats.samples += 1;
                    self.intervals.sample(wall, node, prog, loc);
                    if let Some(chain) = chain {
                        let frames = self.chain_locs(pid, &chain);
                        self.intervals.stack(wall, node, prog, frames);
                    }
                }
                None => self.stats.out_of_scope += 1,
            },
            Ev::Tp { tp, pid, tid, key } => {
                if self.io_layers {
                    self.block_layer(tp, key, wall);
                }
                let node = self.tp_node(tp, pid, tid, key);
                if let Some(node) = node {
                    self.stats.events += 1;
                    self.intervals.event(wall, node, tp as usize);
                }
                match key {
                    TpKey::Switch { stopped, next } => {
                        self.stops
                            .switch(&mut self.intervals, wall, node, pid, tid, stopped, next);
                    }
                    // Seed 003's system-call layer: only the calls of a node's processes.
                    TpKey::SysEnter {
                        fd,
                        count,
                        pos,
                        write,
                    } if node.is_some() => self.syscalls.enter(wall, tid, fd, count, pos, write),
                    TpKey::SysExit { ret } => {
                        if let (Some(node), Some(evs)) =
                            (node, self.syscalls.exit(wall, pid, tid, ret))
                        {
                            self.intervals.layer_events(wall, node, evs);
                        }
                    }
                    _ => {}
                }
            }
            Ev::Mmap(m) => self
                .tracker
                .on_mmap(m.pid, m.start, m.len, m.pgoff, &m.path, m.dev_ino),
            Ev::Comm {
                pid,
                tid,
                comm,
                exec,
                facts,
            } => self
                .tracker
                .on_comm(pid, tid, &comm, exec, facts.map(|f| *f)),
            Ev::Netns { pid, tid, ino } => self.tracker.on_netns(pid, tid, ino),
            Ev::Fork { pid, ppid, tid } => self.tracker.on_fork(pid, ppid, tid),
            Ev::Exit { pid, tid } => self.tracker.on_exit(pid, tid, t.time),
            Ev::Lost { what, n } => {
                match what {
                    Loss::Samples => self.stats.lost += n,
                    Loss::Events => self.stats.lost_events += n,
                    Loss::Tracking => self.stats.lost_tracking += n,
                }
                self.intervals.lost(wall, n, what);
                return true;
            }
            Ev::Throttle => self.stats.throttles += 1,
        }
        false
    }

    /// The locations of a call chain, outermost first. The kernel writes the sampled address
    /// first, then return addresses, each context (kernel, user) after its marker; a return
    /// address is named by the byte before it (the call instruction), as perf does, so that a
    /// call at the very end of a function is not charged to the next one.
    fn chain_locs(&mut self, pid: u32, chain: &[u64]) -> Box<[Loc]> {
        use perf_event_open_sys::bindings as b;
        let mut locs = Vec::with_capacity(chain.len());
        let (mut kernel, mut first) = (true, true);
        for &e in chain {
            if e >= b::PERF_CONTEXT_MAX {
                kernel = e == b::PERF_CONTEXT_KERNEL;
                first = true;
                if e != b::PERF_CONTEXT_KERNEL && e != b::PERF_CONTEXT_USER {
                    break; // guest or hypervisor frames: not ours to name
                }
                continue;
            }
            let ip = if first { e } else { e.saturating_sub(1) };
            first = false;
            let loc = if kernel {
                Loc::Kernel(ip)
            } else {
                match self.tracker.attribute(pid, ip, false) {
                    Some((_, _, loc)) => loc,
                    None => Loc::Unknown,
                }
            };
            locs.push(loc);
        }
        locs.reverse();
        locs.into_boxed_slice()
    }

    /// Seed 003's block layer ([`crate::blocklayer`]): a request of a node's process goes to
    /// the device or completes. Called before [`Engine::tp_node`] forgets its owner.
    fn block_layer(&mut self, tp: u16, key: TpKey, wall: u64) {
        let TpKey::Block {
            dev,
            sector,
            bytes,
            write,
            error,
        } = key
        else {
            return;
        };
        let (issues, forgets) = match self.tps.get(tp as usize).map(|s| &s.decoder) {
            Some(Decoder::Block {
                issues, forgets, ..
            }) => (*issues, *forgets),
            _ => return,
        };
        if issues {
            if let (Some(&(node, pid, tid)), Some(write)) =
                (self.block_owner.get(&(dev, sector)), write)
            {
                self.blocks
                    .issue(wall, dev, sector, node, pid, tid, bytes, write);
            }
        } else if forgets {
            if let Some((node, evs)) = self.blocks.complete(wall, dev, sector, error) {
                self.intervals.layer_events(wall, node, evs);
            }
        }
    }

    /// The node a tracepoint hit belongs to (see [`crate::nodes`] and [`Decoder`]).
    fn tp_node(&mut self, tp: u16, pid: u32, tid: u32, key: TpKey) -> Option<NodeIdx> {
        match key {
            TpKey::None | TpKey::Switch { .. } | TpKey::SysEnter { .. } | TpKey::SysExit { .. } => {
                self.tracker.node_of(pid)
            }
            TpKey::Tcp {
                saddr,
                sport,
                daddr,
                dport,
            } => self
                .tracker
                .nodes()
                .by_endpoints(saddr, sport, daddr, dport)
                .or_else(|| self.tracker.node_of(pid)),
            TpKey::Block { dev, sector, .. } => {
                let (learns, forgets) = match self.tps.get(tp as usize).map(|s| &s.decoder) {
                    Some(Decoder::Block {
                        learns, forgets, ..
                    }) => (*learns, *forgets),
                    _ => (false, false),
                };
                if learns {
                    let node = self.tracker.node_of(pid)?;
                    if self.block_owner.len() >= BLOCK_OWNERS_MAX {
                        self.block_owner.clear();
                    }
                    self.block_owner.insert((dev, sector), (node, pid, tid));
                    return Some(node);
                }
                if forgets {
                    // Completions run in interrupt context: the interrupted process says
                    // nothing about who asked for the I/O. One whose request was not seen
                    // queued (before the sampler started, or by a process out of scope) is
                    // not counted rather than charged to a bystander.
                    return self.block_owner.remove(&(dev, sector)).map(|o| o.0);
                }
                // Issue runs in whichever context dispatches the queue: a kworker, or any
                // process that submits to the same device (on one host with emulated nodes, a
                // peer's server). Like completions, a request not seen queued is not counted
                // rather than charged to that bystander: with all nodes on one disk, issues
                // charged by context made a healthy node's block events double its peers'.
                self.block_owner.get(&(dev, sector)).map(|o| o.0)
            }
        }
    }
}
