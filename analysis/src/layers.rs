//! I/O layers (seed 003, Lu & Shen, §3): layer-boundary events (ADMIT, ISSUE, COMPLT,
//! CALLBACK) into requests, per-layer characteristics per one-second slot, and the bottom-up
//! comparison of those characteristics across peer nodes.
//!
//! A *request* is one pass of an I/O request through one layer of one process: its events share
//! (process, layer, request id). It is outstanding from its first event to its last; a layer may
//! mark fewer than four events. An event of a kind not later than the last one seen for the same
//! id, or any event after a CALLBACK, starts a new request (ids are reused once done).
//!
//! Characteristics per layer and slot ([`Characteristics`]), all from the generic events as
//! seed 003 §3 derives them: requests and bytes completed, request latency and the time per stage
//! (ADMIT→ISSUE queueing in the layer, ISSUE→COMPLT below it, COMPLT→CALLBACK handing back),
//! average and largest request, the share of sequential requests (each starting where the
//! previous one of its object ended), average (the integral of outstanding requests over the
//! slot) and largest concurrency, idleness, and throughput over busy time.
//!
//! Bottom-up ([`bottom_up`]): seed 003 starts at the lowest layer, "closer to the raw storage
//! device whose characteristics are relatively well understood", labels anomalous
//! characteristics against a reference, and goes up. Here the reference is the node's peers: in
//! each slot a characteristic is anomalous on a node when it strays from the median of the other
//! nodes' values by [`RATIO`] and by more than its floor; it is anomalous over the run when it is
//! so in at least half of the slots it can be compared in (and in [`MIN_SLOTS`] of them). The
//! lowest layer with an anomalous characteristic is named, with the layers above it that show
//! one too (seed 003: "the range of system layers that exhibit such anomalies").

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use culprit_format::{layer_kind, LayerEvent, NO_OFFSET};
use serde::{Deserialize, Serialize};

use crate::data::{LayerStretch, NodeData};

pub mod report;
pub mod serial;

/// Length of a slot, ns.
pub const SLOT_NS: u64 = 1_000_000_000;
/// How far from the peers' median a characteristic must stray, as a factor.
pub const RATIO: f64 = 3.0;
/// How much longer a request must take than the peers' for a characteristic to count, ms.
pub const FLOOR_MS: f64 = 1.0;
/// Fewest comparable slots before a characteristic can be called anomalous.
pub const MIN_SLOTS: usize = 3;
/// Fewest other nodes with the layer in a slot for the slot to be compared.
pub const MIN_PEERS: usize = 2;

/// One request's pass through one layer.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// Layer name.
    pub layer: Arc<str>,
    /// Process.
    pub pid: u32,
    /// Request id.
    pub req: u64,
    /// `layer_op`.
    pub op: u8,
    /// File or object.
    pub obj: u64,
    /// Offset, [`NO_OFFSET`] when none.
    pub offset: u64,
    /// Bytes: done (the last COMPLT or CALLBACK) or else asked.
    pub bytes: u64,
    /// Times of ADMIT, ISSUE, COMPLT, CALLBACK, ns (those marked).
    pub at: [Option<u64>; 4],
    /// First event, ns.
    pub first: u64,
    /// Last event, ns.
    pub last: u64,
}

impl Request {
    /// True when the layer has seen it complete (a COMPLT or CALLBACK).
    pub fn done(&self) -> bool {
        self.at[2].is_some() || self.at[3].is_some()
    }

    fn stage(&self, from: usize, to: usize) -> Option<u64> {
        Some(self.at[to]?.saturating_sub(self.at[from]?))
    }
}

/// A layer of a node: its name and level (higher is nearer the application).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerId {
    /// Name.
    pub name: Arc<str>,
    /// Level.
    pub level: i32,
}

/// The requests of a set of stretches (one node's, all its writers), ordered by first event, and
/// the layers they pass, lowest first.
pub fn requests<'a>(
    stretches: impl IntoIterator<Item = &'a LayerStretch>,
) -> (Vec<Request>, Vec<LayerId>) {
    let mut events: Vec<(LayerEvent, Arc<str>)> = Vec::new();
    let mut levels: BTreeMap<Arc<str>, i32> = BTreeMap::new();
    for s in stretches {
        let names: HashMap<u16, &Arc<str>> = s.layers.iter().map(|(id, n, _)| (*id, n)).collect();
        for (_, n, level) in &s.layers {
            levels.entry(Arc::clone(n)).or_insert(*level);
        }
        for e in &s.events {
            if let Some(n) = names.get(&e.layer) {
                events.push((*e, Arc::clone(n)));
            }
        }
    }
    events.sort_by_key(|(e, _)| e.t_ns);
    let mut open: HashMap<(u32, Arc<str>, u64), (Request, u8)> = HashMap::new();
    let mut out = Vec::new();
    for (e, layer) in events {
        let k = usize::from(e.kind.clamp(layer_kind::ADMIT, layer_kind::CALLBACK) - 1);
        let key = (e.pid, Arc::clone(&layer), e.req);
        if let Some((r, last)) = open.get_mut(&key) {
            if e.kind > *last && *last != layer_kind::CALLBACK {
                r.at[k] = Some(e.t_ns);
                r.last = e.t_ns;
                *last = e.kind;
                if e.kind >= layer_kind::COMPLT {
                    r.bytes = e.bytes;
                }
                continue;
            }
            if let Some((r, _)) = open.remove(&key) {
                out.push(r);
            }
        }
        let mut at = [None; 4];
        at[k] = Some(e.t_ns);
        let r = Request {
            layer,
            pid: e.pid,
            req: e.req,
            op: e.op,
            obj: e.obj,
            offset: e.offset,
            bytes: e.bytes,
            at,
            first: e.t_ns,
            last: e.t_ns,
        };
        open.insert(key, (r, e.kind));
    }
    out.extend(open.into_values().map(|(r, _)| r));
    out.sort_by_key(|r| (r.first, r.pid, r.req));
    let mut layers: Vec<LayerId> = levels
        .into_iter()
        .map(|(name, level)| LayerId { name, level })
        .collect();
    layers.sort_by(|a, b| a.level.cmp(&b.level).then(a.name.cmp(&b.name)));
    (out, layers)
}

/// One layer's characteristics in one slot.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Characteristics {
    /// Requests completed in the slot.
    pub requests: u64,
    /// Bytes they moved.
    pub bytes: u64,
    /// Mean time from their first event to their last, ms.
    pub latency_ms: Option<f64>,
    /// Mean ADMIT→ISSUE (queued in the layer), ms, of those that marked both.
    pub queue_ms: Option<f64>,
    /// Mean ISSUE→COMPLT (below the layer), ms.
    pub below_ms: Option<f64>,
    /// Mean COMPLT→CALLBACK (handing back), ms.
    pub reply_ms: Option<f64>,
    /// Σ of the completed requests' latencies, ms (by Little's law, ÷ 1000 the average number
    /// outstanding that completed in the slot).
    pub latency_sum_ms: f64,
    /// Σ of their ADMIT→ISSUE times, ms.
    pub queue_sum_ms: f64,
    /// Σ of their ISSUE→COMPLT times, ms.
    pub below_sum_ms: f64,
    /// Mean request size, bytes.
    pub avg_size: Option<f64>,
    /// Largest request, bytes.
    pub max_size: u64,
    /// Share of requests with an offset that began where their object's previous one ended.
    pub sequential: Option<f64>,
    /// Outstanding requests averaged over the slot (their integral over time / slot length).
    pub concurrency: f64,
    /// Most requests outstanding at once.
    pub max_concurrency: u32,
    /// Share of the slot with no request outstanding.
    pub idle: f64,
    /// Bytes completed per second of busy time, MB/s (none when never busy).
    pub throughput_mb_s: Option<f64>,
}

/// The characteristics a layer is compared on across peers, with the direction that is
/// anomalous and the smallest difference that counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Characteristic {
    /// [`Characteristics::latency_ms`]: higher is anomalous, by 1 ms at least.
    Latency,
    /// [`Characteristics::queue_ms`]: higher, by 1 ms.
    Queue,
    /// [`Characteristics::below_ms`]: higher, by 1 ms.
    Below,
    /// [`Characteristics::throughput_mb_s`]: lower, by enough that a request of the node's
    /// mean size takes 1 ms longer at it.
    Throughput,
}

impl Characteristic {
    /// All, in report order.
    pub const ALL: [Characteristic; 4] = [
        Characteristic::Latency,
        Characteristic::Queue,
        Characteristic::Below,
        Characteristic::Throughput,
    ];

    /// Its name as reports write it.
    pub fn name(self) -> &'static str {
        match self {
            Characteristic::Latency => "latency",
            Characteristic::Queue => "queue time",
            Characteristic::Below => "time below",
            Characteristic::Throughput => "throughput",
        }
    }

    /// Unit of its values.
    pub fn unit(self) -> &'static str {
        match self {
            Characteristic::Throughput => "MB/s",
            _ => "ms",
        }
    }

    /// Its value in `c`, if the slot has one.
    pub fn of(self, c: &Characteristics) -> Option<f64> {
        match self {
            Characteristic::Latency => c.latency_ms,
            Characteristic::Queue => c.queue_ms,
            Characteristic::Below => c.below_ms,
            Characteristic::Throughput => c.throughput_mb_s,
        }
    }

    /// True when `v` strays from the reference `r` in the anomalous direction, by [`RATIO`]
    /// and by [`FLOOR_MS`] per request. Throughput's floor is in time too: a request of the
    /// node's mean size `avg_size` (bytes) must take [`FLOOR_MS`] longer at `v` than at `r`, so
    /// a layer that moves its small requests in 10 µs instead of 2 µs (a process whose caches
    /// went cold while it slept on a slow disk below) is not the layer a 15 ms stall broke in.
    pub fn anomalous(self, v: f64, r: f64, avg_size: Option<f64>) -> bool {
        match self {
            Characteristic::Throughput => {
                let per_request_ms = |mb_s: f64| avg_size.unwrap_or(0.0) / 1e3 / mb_s.max(1e-12);
                v * RATIO <= r && per_request_ms(v) - per_request_ms(r) >= FLOOR_MS
            }
            _ => v >= r * RATIO && v - r >= FLOOR_MS,
        }
    }
}

/// The characteristics of `layer`'s requests among `reqs`, per slot of [`SLOT_NS`] from
/// `origin` (a multiple of it) for `slots` slots. A request still outstanding at the end of the
/// data counts as outstanding until `end`.
pub fn characteristics(
    reqs: &[Request],
    layer: &str,
    origin: u64,
    slots: usize,
    end: u64,
) -> Vec<Characteristics> {
    characteristics_in(reqs, layer, origin, SLOT_NS, slots, end)
}

/// [`characteristics`] over slots of `slot_ns` (`culprit report --layers` takes the whole range
/// as one slot).
pub fn characteristics_in(
    reqs: &[Request],
    layer: &str,
    origin: u64,
    slot_ns: u64,
    slots: usize,
    end: u64,
) -> Vec<Characteristics> {
    let slot_ns = slot_ns.max(1);
    let mut out = vec![Characteristics::default(); slots];
    let slot_of = |t: u64| (t.saturating_sub(origin) / slot_ns) as usize;
    #[derive(Default)]
    struct Acc {
        lat: (f64, u64),
        queue: (f64, u64),
        below: (f64, u64),
        reply: (f64, u64),
        seq: (u64, u64),
    }
    let mut acc: Vec<Acc> = (0..slots).map(|_| Acc::default()).collect();
    let mut ends: HashMap<(u32, u64), u64> = HashMap::new();
    let mut bounds: Vec<(u64, i32)> = Vec::new();
    let add = |a: &mut (f64, u64), v: Option<u64>| {
        if let Some(v) = v {
            a.0 += v as f64 / 1e6;
            a.1 += 1;
        }
    };
    for r in reqs.iter().filter(|r| &*r.layer == layer) {
        let until = if r.done() { r.last } else { end.max(r.last) };
        bounds.push((r.first, 1));
        bounds.push((until, -1));
        let sequential = (r.offset != NO_OFFSET).then(|| {
            let prev = ends.insert((r.pid, r.obj), r.offset.saturating_add(r.bytes));
            prev == Some(r.offset)
        });
        if !r.done() {
            continue;
        }
        let s = slot_of(r.last);
        let (Some(c), Some(a)) = (out.get_mut(s), acc.get_mut(s)) else {
            continue;
        };
        c.requests += 1;
        c.bytes += r.bytes;
        c.max_size = c.max_size.max(r.bytes);
        add(&mut a.lat, Some(r.last - r.first));
        add(&mut a.queue, r.stage(0, 1));
        add(&mut a.below, r.stage(1, 2));
        add(&mut a.reply, r.stage(2, 3));
        if let Some(seq) = sequential {
            a.seq.0 += u64::from(seq);
            a.seq.1 += 1;
        }
    }
    // Sweep the outstanding count over time: its integral and busy time per slot.
    bounds.sort_by_key(|&(t, d)| (t, d));
    let mut busy = vec![0u64; slots];
    let mut integral = vec![0f64; slots];
    let mut most = vec![0u32; slots];
    let (mut n, mut prev) = (0i64, origin);
    let spread =
        |from: u64, to: u64, n: i64, busy: &mut [u64], integral: &mut [f64], most: &mut [u32]| {
            let mut t = from.max(origin);
            while t < to {
                let s = slot_of(t);
                if s >= slots {
                    break;
                }
                let slot_end = origin + (s as u64 + 1) * slot_ns;
                let stop = to.min(slot_end);
                if n > 0 {
                    most[s] = most[s].max(n as u32);
                    busy[s] += stop - t;
                    integral[s] += n as f64 * (stop - t) as f64;
                }
                t = stop;
            }
        };
    for &(t, d) in &bounds {
        spread(prev, t, n, &mut busy, &mut integral, &mut most);
        n += i64::from(d);
        prev = prev.max(t);
        if let Some(m) = most.get_mut(slot_of(t)) {
            *m = (*m).max(n.max(0) as u32);
        }
    }
    for (s, c) in out.iter_mut().enumerate() {
        let a = &acc[s];
        let mean = |a: (f64, u64)| (a.1 > 0).then(|| a.0 / a.1 as f64);
        c.latency_ms = mean(a.lat);
        (c.latency_sum_ms, c.queue_sum_ms, c.below_sum_ms) = (a.lat.0, a.queue.0, a.below.0);
        c.queue_ms = mean(a.queue);
        c.below_ms = mean(a.below);
        c.reply_ms = mean(a.reply);
        c.avg_size = (c.requests > 0).then(|| c.bytes as f64 / c.requests as f64);
        c.sequential = (a.seq.1 > 0).then(|| a.seq.0 as f64 / a.seq.1 as f64);
        c.concurrency = integral[s] / slot_ns as f64;
        c.max_concurrency = most[s];
        c.idle = 1.0 - busy[s] as f64 / slot_ns as f64;
        c.throughput_mb_s = (busy[s] > 0).then(|| c.bytes as f64 / 1e6 / (busy[s] as f64 / 1e9));
    }
    out
}

/// One node's layers and their characteristics per slot.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeLayers {
    /// Node.
    pub node: String,
    /// Layers, lowest first, each with one [`Characteristics`] per slot.
    pub layers: Vec<(LayerId, Vec<Characteristics>)>,
}

/// Every node's layers over the slots from `origin`, `slots` of them.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerTable {
    /// Start of the first slot, ns.
    pub origin: u64,
    /// Slots.
    pub slots: usize,
    /// Per node with layer events, by name.
    pub nodes: Vec<NodeLayers>,
}

/// The layer-event stretches of a node, all its writers'.
pub fn stretches(node: &NodeData) -> impl Iterator<Item = &LayerStretch> {
    node.traces
        .iter()
        .flat_map(|t| t.layers.iter())
        .chain(node.samples.iter().flat_map(|s| s.layers.iter()))
}

/// The layer characteristics of `nodes`, on slots shared by all of them; `None` when no node has
/// layer events.
pub fn table(nodes: &[NodeData]) -> Option<LayerTable> {
    let (mut lo, mut hi) = (u64::MAX, 0u64);
    for n in nodes {
        for s in stretches(n) {
            for e in &s.events {
                lo = lo.min(e.t_ns);
                hi = hi.max(e.t_ns);
            }
            if !s.events.is_empty() {
                hi = hi.max(s.span.1);
            }
        }
    }
    if lo > hi {
        return None;
    }
    let origin = lo / SLOT_NS * SLOT_NS;
    let slots = ((hi - origin) / SLOT_NS + 1) as usize;
    let mut out = Vec::new();
    for n in nodes {
        let (reqs, layers) = requests(stretches(n));
        if reqs.is_empty() {
            continue;
        }
        let end = stretches(n).map(|s| s.span.1).max().unwrap_or(hi);
        let layers = layers
            .into_iter()
            .map(|l| {
                let c = characteristics(&reqs, &l.name, origin, slots, end);
                (l, c)
            })
            .collect();
        out.push(NodeLayers {
            node: n.name.clone(),
            layers,
        });
    }
    out.sort_by(|a, b| a.node.cmp(&b.node));
    Some(LayerTable {
        origin,
        slots,
        nodes: out,
    })
}

/// One anomalous characteristic of a layer of a node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Anomaly {
    /// Characteristic.
    pub characteristic: Characteristic,
    /// Unit of the values.
    pub unit: String,
    /// The node's median over the slots compared.
    pub node_value: f64,
    /// The median over those slots of the other nodes' median.
    pub peers_value: f64,
    /// Slots in which it was anomalous.
    pub slots_anomalous: usize,
    /// Slots in which it could be compared.
    pub slots_compared: usize,
}

/// A layer of a node with its anomalous characteristics.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerAnomalies {
    /// Layer.
    pub layer: String,
    /// Its level (higher is nearer the application).
    pub level: i32,
    /// Anomalous characteristics.
    pub anomalies: Vec<Anomaly>,
}

/// The bottom-up verdict on one node: the lowest layer with an anomalous characteristic.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LayerFinding {
    /// Node.
    pub node: String,
    /// The lowest anomalous layer's name.
    pub layer: String,
    /// Every anomalous layer of the node, lowest first (the named one is the first).
    pub layers: Vec<LayerAnomalies>,
}

fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

/// The bottom-up comparison of every node's layers with its peers' (see the module
/// documentation): one finding per node with an anomalous layer, by node name. `since(node)`
/// limits a node's comparison to the slots from then on (the diagnosis passes the start of its
/// first anomalous window on the `layers` metric: a fault that began late is not diluted by the
/// healthy time before it).
pub fn bottom_up(t: &LayerTable, since: &dyn Fn(&str) -> Option<u64>) -> Vec<LayerFinding> {
    let mut out = Vec::new();
    for (i, n) in t.nodes.iter().enumerate() {
        let first = since(&n.node).map_or(0, |ns| (ns.saturating_sub(t.origin) / SLOT_NS) as usize);
        let mut layers = Vec::new();
        for (id, mine) in &n.layers {
            let peers: Vec<&Vec<Characteristics>> = t
                .nodes
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .filter_map(|(_, p)| {
                    p.layers
                        .iter()
                        .find(|(l, _)| l.name == id.name)
                        .map(|(_, c)| c)
                })
                .collect();
            let mut anomalies = Vec::new();
            for ch in Characteristic::ALL {
                let (mut vals, mut refs, mut bad) = (Vec::new(), Vec::new(), 0);
                for (s, c) in mine.iter().enumerate().skip(first) {
                    let Some(v) = ch.of(c) else { continue };
                    let mut others: Vec<f64> = peers.iter().filter_map(|p| ch.of(&p[s])).collect();
                    if others.len() < MIN_PEERS {
                        continue;
                    }
                    let r = median(&mut others).unwrap_or(0.0);
                    bad += usize::from(ch.anomalous(v, r, c.avg_size));
                    vals.push(v);
                    refs.push(r);
                }
                let compared = vals.len();
                if compared >= MIN_SLOTS && 2 * bad >= compared {
                    anomalies.push(Anomaly {
                        characteristic: ch,
                        unit: ch.unit().to_string(),
                        node_value: median(&mut vals).unwrap_or(0.0),
                        peers_value: median(&mut refs).unwrap_or(0.0),
                        slots_anomalous: bad,
                        slots_compared: compared,
                    });
                }
            }
            if !anomalies.is_empty() {
                layers.push(LayerAnomalies {
                    layer: id.name.to_string(),
                    level: id.level,
                    anomalies,
                });
            }
        }
        if let Some(lowest) = layers.first() {
            out.push(LayerFinding {
                node: n.node.clone(),
                layer: lowest.layer.clone(),
                layers,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use culprit_format::layer_op;

    const S: u64 = SLOT_NS;
    const MS: u64 = 1_000_000;

    fn ev(t: u64, req: u64, kind: u8, offset: u64, bytes: u64) -> LayerEvent {
        LayerEvent {
            t_ns: t,
            req,
            obj: 7,
            offset,
            bytes,
            pid: 1,
            tid: 1,
            layer: 0,
            kind,
            op: layer_op::READ,
            fd: 3,
        }
    }

    fn stretch(events: Vec<LayerEvent>) -> LayerStretch {
        LayerStretch {
            span: (10 * S, 12 * S),
            dropped: 0,
            layers: vec![(0, Arc::from("disk"), 500)],
            events,
        }
    }

    #[test]
    fn characteristics_of_a_hand_built_sequence() {
        use layer_kind::*;
        // Slot [10 s, 11 s): request 1 ADMIT 10.0, ISSUE 10.1, COMPLT 10.3, CALLBACK 10.4
        // (4096 bytes at 0); request 2 ADMIT 10.2, ISSUE 10.3, COMPLT 10.6, CALLBACK 10.6 (4096
        // at 4096: sequential); request 3 (id 1 reused) ISSUE 10.8 … COMPLT 11.2 (8192 at 100000).
        let t = |ms: u64| 10 * S + ms * MS;
        let events = vec![
            ev(t(0), 1, ADMIT, 0, 4096),
            ev(t(100), 1, ISSUE, 0, 4096),
            ev(t(200), 2, ADMIT, 4096, 4096),
            ev(t(300), 1, COMPLT, 0, 4096),
            ev(t(300), 2, ISSUE, 4096, 4096),
            ev(t(400), 1, CALLBACK, 0, 4096),
            ev(t(600), 2, COMPLT, 4096, 4096),
            ev(t(600), 2, CALLBACK, 4096, 4096),
            ev(t(800), 1, ISSUE, 100_000, 8192),
            ev(t(1200), 1, COMPLT, 100_000, 8192),
        ];
        let s = stretch(events);
        let (reqs, layers) = requests([&s]);
        assert_eq!(layers.len(), 1);
        assert_eq!(reqs.len(), 3);
        assert_eq!(reqs[2].at, [None, Some(t(800)), Some(t(1200)), None]);
        let c = characteristics(&reqs, "disk", 10 * S, 2, 12 * S);
        let a = &c[0];
        assert_eq!(a.requests, 2);
        assert_eq!(a.bytes, 8192);
        // Latencies 400 and 400 ms; queue 100, 100; below 200, 300; reply 100, 0.
        assert_eq!(a.latency_ms, Some(400.0));
        assert_eq!(a.queue_ms, Some(100.0));
        assert_eq!(a.below_ms, Some(250.0));
        assert_eq!(a.reply_ms, Some(50.0));
        assert_eq!(
            (a.latency_sum_ms, a.queue_sum_ms, a.below_sum_ms),
            (800.0, 200.0, 500.0)
        );
        assert_eq!(a.avg_size, Some(4096.0));
        assert_eq!(a.max_size, 4096);
        // Request 1 has no predecessor (not sequential), request 2 follows it, request 3 does not
        // (it completes in the next slot).
        assert_eq!(a.sequential, Some(0.5));
        // Outstanding: 1 over 0–200, 2 over 200–400, 1 over 400–600, 0 over 600–800, 1 over
        // 800–1000: integral 200·1 + 200·2 + 200·1 + 200·1 = 1000 ms → 1.0.
        assert!((a.concurrency - 1.0).abs() < 1e-9, "{}", a.concurrency);
        assert_eq!(a.max_concurrency, 2);
        assert!((a.idle - 0.2).abs() < 1e-9, "{}", a.idle);
        // 8192 bytes over 0.8 s busy.
        assert!((a.throughput_mb_s.unwrap() - 8192e-6 / 0.8).abs() < 1e-9);
        let b = &c[1];
        assert_eq!(b.requests, 1);
        assert_eq!(b.latency_ms, Some(400.0));
        assert_eq!(b.below_ms, Some(400.0));
        assert_eq!(b.queue_ms, None);
        assert_eq!(b.sequential, Some(0.0));
        assert!((b.concurrency - 0.2).abs() < 1e-9);
        assert!((b.idle - 0.8).abs() < 1e-9);
    }

    #[test]
    fn an_unfinished_request_stays_outstanding() {
        use layer_kind::*;
        let s = stretch(vec![ev(10 * S + 500 * MS, 9, ISSUE, 0, 10)]);
        let (reqs, _) = requests([&s]);
        let c = characteristics(&reqs, "disk", 10 * S, 2, 12 * S);
        assert_eq!(c[0].requests, 0);
        assert!((c[0].concurrency - 0.5).abs() < 1e-9);
        assert!((c[1].concurrency - 1.0).abs() < 1e-9);
        assert_eq!(c[1].idle, 0.0);
    }

    fn node(name: &str, layers: &[(&str, i32, f64)]) -> NodeLayers {
        NodeLayers {
            node: name.into(),
            layers: layers
                .iter()
                .map(|&(l, level, lat)| {
                    let c = Characteristics {
                        requests: 10,
                        latency_ms: Some(lat),
                        ..Characteristics::default()
                    };
                    (
                        LayerId {
                            name: l.into(),
                            level,
                        },
                        vec![c; 5],
                    )
                })
                .collect(),
        }
    }

    #[test]
    fn bottom_up_names_the_lowest_anomalous_layer() {
        let healthy = [("disk", 1, 0.2), ("queue", 2, 0.5), ("net", 3, 1.0)];
        let t = LayerTable {
            origin: 0,
            slots: 5,
            nodes: vec![
                node("a", &healthy),
                node("b", &healthy),
                node(
                    "c",
                    &[("disk", 1, 20.0), ("queue", 2, 40.0), ("net", 3, 41.0)],
                ),
                node("d", &healthy),
            ],
        };
        let f = bottom_up(&t, &|_| None);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].node, "c");
        assert_eq!(f[0].layer, "disk");
        let names: Vec<&str> = f[0].layers.iter().map(|l| l.layer.as_str()).collect();
        assert_eq!(names, ["disk", "queue", "net"]);
        let a = &f[0].layers[0].anomalies[0];
        assert_eq!(a.characteristic, Characteristic::Latency);
        assert_eq!((a.node_value, a.peers_value), (20.0, 0.2));
        assert_eq!((a.slots_anomalous, a.slots_compared), (5, 5));
        // A slow middle layer: the disk is fine, the queue is named.
        let t2 = LayerTable {
            nodes: vec![
                node("a", &healthy),
                node("b", &healthy),
                node("c", &[("disk", 1, 0.3), ("queue", 2, 9.0), ("net", 3, 9.5)]),
            ],
            ..t.clone()
        };
        assert_eq!(bottom_up(&t2, &|_| None)[0].layer, "queue");
        // Within the ratio or the floor: nothing.
        let t3 = LayerTable {
            nodes: vec![
                node("a", &healthy),
                node("b", &healthy),
                node("c", &[("disk", 1, 0.9), ("queue", 2, 1.4), ("net", 3, 2.9)]),
            ],
            ..t
        };
        assert!(bottom_up(&t3, &|_| None).is_empty());
        // Compared from slot 3 on only: two slots are too few.
        assert!(bottom_up(&t, &|_| Some(3 * SLOT_NS)).is_empty());
    }

    #[test]
    fn throughput_counts_when_a_request_of_the_mean_size_takes_a_millisecond_longer() {
        let t = Characteristic::Throughput;
        // 4 KiB at 400 vs 2000 MB/s: 10 µs vs 2 µs a request, 5× slower but not by 1 ms.
        assert!(!t.anomalous(400.0, 2000.0, Some(4096.0)));
        // 4 KiB at 0.27 MB/s: 15 ms a request.
        assert!(t.anomalous(0.27, 1000.0, Some(4096.0)));
        // 64 KiB at 32.7 vs 555 MB/s: 2.0 ms vs 0.12 ms.
        assert!(t.anomalous(32.7, 555.0, Some(65536.0)));
        // 1 MiB at 400 vs 1000 MB/s: 2.6 ms vs 1.0 ms, but within the ratio.
        assert!(!t.anomalous(400.0, 1000.0, Some(1048576.0)));
        // No size (nothing completed): no time difference to speak of.
        assert!(!t.anomalous(0.27, 1000.0, None));
    }
}
