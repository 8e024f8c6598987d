//! The resource at fault: from which metrics are anomalous on a culprit, and in which
//! direction, a checklist names the resource (seed 001 §4.6.2, Kasick's thesis: "an expert
//! derived checklist … maps sets of peer-divergent metrics to the root cause. If we observe
//! peer-divergence at any step of the checklist, we halt at that step").
//!
//! Each OS metric (and kernel event) belongs to a *class* — storage throughput, storage
//! latency, received or sent traffic, network loss, CPU use, CPU wait, CPU limit — with the
//! direction that points at the node ([`SIGNS`]). A metric *diverges* on a node when the node is
//! faulty on it (k of 2k − 1 windows above its threshold) and its level over the culprit's
//! faulty stretch differs from its peers' by at least [`MARGIN`] in that direction. The steps,
//! in order ([`RULES`]; docs/resource-checklist.md gives each one's reason):
//!
//! 1. storage throughput up → **disk hog** (another process's I/O on the node's disk);
//! 2. storage latency up (throughput not up, or step 1 would have fired) → **slow disk**;
//! 3. connections up, or the kernel's or the server's accept path (accept, SYN handling, resets)
//!    busier than its peers' while traffic or loss signs move → **connection flood** (many
//!    short or junk connections: named for what it is, not as loss or a hog);
//! 4. received and sent traffic up, or one of them up without signs of loss → **network hog**;
//! 5. loss signs (retransmits, drops, smaller congestion windows, longer round trips) →
//!    **packet loss**;
//! 6. CPU use up, with run-queue wait or throttling up or another process → **CPU hog**;
//! 7. throttling or run-queue wait up, CPU use not up → **CPU starvation**;
//! 8. every traced function slower per call alike, calls not up → **slowed as a whole** (the
//!    white-box metrics' own evidence: waiting for a CPU or a slower machine, which only a
//!    run-queue or throttling metric can tell apart);
//! 9. none of these → **software**: the top functions.
//!
//! **Magnitude as well as ratio.** A metric diverges only when the node's level is also at
//! least its floor ([`Sign::floor`], in the metric's unit per second) away from its peers' the
//! way that points at the node: one 10 ms wait is 0.04 ms/s of I/O delay against peers' exact
//! 0, an infinite ratio of nothing (docs/resource-checklist.md lists the floors).
//!
//! Two rules keep one view from naming a resource against the rest of the evidence. A kernel
//! event alone (no OS metric of its step diverging) names no resource when the node's own
//! white-box metrics say it is slowed as a whole ([`Slowdown`]): a starved node's peers
//! retransmit to it and the events land where the scheduler runs them, but loss would slow the
//! functions that wait on the network, not every function alike. And signs of loss name no
//! loss while the node's CPU is withheld (throttling or steal diverging, CPU use not up): loss
//! cannot throttle a node, a starved node answers late; step 7 comes first then.
//!
//! The table is written from what each resource does to a server (seed 001 §4.2's observations
//! and §4.8's network-metric ambiguities), not fitted to any experiment: it must hold for a whole
//! machine (`disk.*`, `net.*`, `tcp.*`, `cpu.*`) as for servers sharing a host (`cg.*`,
//! `proc.*`, per-namespace `net.*` and `tcp.*`).

//!
//! The catalogue of signs is `signs.rs`; the levels the directions are read from, `levels.rs`;
//! the checklist itself is here.

mod levels;
mod signs;

pub use levels::{DatasetLevels, FunctionLevel, InstanceMean, Levels, MARGIN};
pub use signs::{sign_of, Class, Direction, Sign, SIGNS};

use serde::{Deserialize, Serialize};

use crate::analyzer::{MetricResult, Outcome};
use crate::combine::Combined;
use crate::family::Metric;
use crate::model::PeerIdx;
use crate::score::median_in_place;
use levels::direction;
use signs::Class::*;
use signs::Direction::{Down, Up};

/// Retransmits are a sign of loss when at least this share of the node's segments are
/// retransmitted. Retransmits grow with traffic (a node flooding a link retransmits what the
/// queues drop), so their count alone cannot tell loss from a hog; their share can: TCP's
/// throughput falls as 1/√loss (Mathis et al., 1997), so at 1 % a connection already runs at a
/// fraction of a clean link's rate, and seed 001's packet-loss faults drop 5 %.
pub const LOSS_SHARE: f64 = 0.01;

/// Words in a function's name that place it on the accept path: accepting connections, the
/// kernel's handling of SYNs and connection requests, resets sent and received.
pub const ACCEPT_PATH: &[&str] = &[
    "accept",
    "syn_recv",
    "synack",
    "conn_request",
    "check_req",
    "reqsk",
    "send_reset",
    "tcp_reset",
    "send_active_reset",
];

/// True when function `name` is on the accept path ([`ACCEPT_PATH`]).
pub fn on_accept_path(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    ACCEPT_PATH.iter().any(|w| n.contains(w))
}

/// Metrics counting retransmits, judged by their share of the node's segments.
const RETRANSMITS: [&str; 3] = ["tcp.retrans", "tcp.retrans_segs", "tcp:tcp_retransmit_skb"];

/// The resources the checklist names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// Another process's I/O on the node's disk.
    DiskHog,
    /// The disk is slow: requests wait longer, throughput flat or down.
    SlowDisk,
    /// Many short or junk connections: the accept path busy (added within version 1).
    ConnectionFlood,
    /// Traffic the server did not ask for.
    NetworkHog,
    /// Packets lost on the way to or from the node.
    PacketLoss,
    /// Another process (or more work) takes the node's CPU.
    CpuHog,
    /// The node gets less CPU than it asks for.
    CpuStarvation,
    /// Every traced function slower per call alike, calls not up, and no OS metric to say why:
    /// waiting for a CPU, or a slower machine (added within version 1 of the report).
    SlowedWhole,
    /// No resource moved: the software itself (its top functions).
    Software,
}

impl Kind {
    /// Words in a verdict.
    pub fn words(self) -> &'static str {
        match self {
            Kind::DiskHog => "disk hog",
            Kind::SlowDisk => "slow disk",
            Kind::ConnectionFlood => "connection flood",
            Kind::NetworkHog => "network hog",
            Kind::PacketLoss => "packet loss",
            Kind::CpuHog => "CPU hog",
            Kind::CpuStarvation => "CPU starvation",
            Kind::SlowedWhole => "slowed as a whole",
            Kind::Software => "software",
        }
    }
}

/// One step of the checklist.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    /// The resource it names.
    pub kind: Kind,
    /// The step in one line.
    pub when: &'static str,
    /// The classes whose metrics are its evidence.
    pub classes: &'static [Class],
}

/// The checklist, in order: the first step whose condition holds names the resource.
pub const RULES: &[Rule] = &[
    Rule {
        kind: Kind::DiskHog,
        when: "storage throughput up",
        classes: &[StorageThroughput, StorageLatency],
    },
    Rule {
        kind: Kind::SlowDisk,
        when: "storage latency up, throughput not up",
        classes: &[StorageLatency, StorageThroughput],
    },
    Rule {
        kind: Kind::ConnectionFlood,
        when: "connections up, or the accept path (accept, SYN handling, resets) busier with \
               traffic or loss signs moving",
        classes: &[Connections, Received, Sent, Loss],
    },
    Rule {
        kind: Kind::NetworkHog,
        when: "traffic up both ways, or one way without signs of loss",
        classes: &[Received, Sent],
    },
    Rule {
        kind: Kind::PacketLoss,
        when: "signs of loss: retransmits, drops, smaller windows, longer round trips",
        classes: &[Loss, Received, Sent],
    },
    Rule {
        kind: Kind::CpuHog,
        when: "CPU use up, with run-queue wait, throttling or another process",
        classes: &[CpuUse, CpuWait, CpuLimit],
    },
    Rule {
        kind: Kind::CpuStarvation,
        when: "throttling or run-queue wait up, CPU use not up",
        classes: &[CpuLimit, CpuWait, CpuUse, Slowdown],
    },
    Rule {
        kind: Kind::SlowedWhole,
        when: "every traced function slower per call alike, calls not up: waiting for a CPU or \
               a slower machine (no OS metric says which)",
        classes: &[Slowdown],
    },
    Rule {
        kind: Kind::Software,
        when: "no resource diverges: the top functions",
        classes: &[],
    },
];

/// What one metric showed on a culprit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    /// OS metric, or `events: <event>`.
    pub metric: String,
    /// Device or interface.
    #[serde(deserialize_with = "Option::deserialize")]
    pub instance: Option<String>,
    /// Its class.
    pub class: Class,
    /// Where the node's level is against its peers'.
    pub direction: Direction,
    /// Node's mean ÷ the median of its peers' means over the faulty stretch (`None`: the peers'
    /// is 0).
    #[serde(deserialize_with = "Option::deserialize")]
    pub ratio: Option<f64>,
    /// The node's mean over the stretch (metric unit; for events, the sum over the metric's
    /// anomalous windows).
    pub node: f64,
    /// The median of its peers' means (for events, the median node's sum).
    pub peers: f64,
    /// Unit.
    pub unit: String,
    /// The node is faulty on the metric.
    pub faulty: bool,
    /// Its anomalous windows on the metric.
    pub anomalous_windows: u64,
    /// Retransmits: their share of the node's segments (sent, or sent and received for the
    /// retransmit events, which count its peers' retransmits to it too), when known.
    #[serde(deserialize_with = "Option::deserialize")]
    pub share: Option<f64>,
    /// The level moved the way that points at the node, on a metric the node is faulty on, but
    /// by less than the metric's floor ([`Sign::floor`]): too small to name a resource (added
    /// within version 1).
    #[serde(default)]
    pub small: bool,
    /// The direction points at the node, by at least the metric's floor, and the node is faulty on the metric (retransmits:
    /// and they are at least [`LOSS_SHARE`] of its segments; a kernel event: and it persisted
    /// itself, its root-cause persistence at least k).
    pub diverges: bool,
}

/// The resource named for a culprit, with its evidence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    /// What it is.
    pub kind: Kind,
    /// `slow disk`.
    pub name: String,
    /// `I/O delay 4.1× peers, throughput 0.3×`.
    pub summary: String,
    /// The checklist step that named it (1-based) and its condition.
    pub step: usize,
    /// Its condition.
    pub rule: String,
    /// Share of the diverging metrics' anomalous windows that belong to the named resource's
    /// classes (1: everything that diverges points at it; software: share of no resource).
    pub confidence: f64,
    /// The metrics of its classes, diverging ones first.
    pub evidence: Vec<Observation>,
    /// Metrics that diverge but belong to another resource.
    pub also: Vec<Observation>,
    /// Programs or functions only this node runs (samples with no peer running them).
    pub foreign: Vec<String>,
    /// Software: the top functions (of the most anomalous white-box metric).
    pub functions: Vec<String>,
}

/// A function as people read it: `compress_block [server]`, `tcp_sendmsg [kernel.kallsyms]`.
fn function_label(l: &crate::model::CompLabel) -> String {
    let mut s = String::new();
    if let Some(p) = &l.program {
        s.push_str(p);
        s.push_str(": ");
    }
    s.push_str(&l.name);
    match &l.image {
        Some(i) if i.starts_with('[') => s.push_str(&format!(" {i}")),
        Some(i) => s.push_str(&format!(" [{i}]")),
        None => {}
    }
    s
}

/// A function's time per call must be at least this factor above its peers' (the median of
/// theirs) to count as slower: the directions' margin ([`MARGIN`]).
const SLOWER: f64 = MARGIN;
/// "Every function": at least this share of the functions compared are slower per call. A
/// node slowed as a whole (waiting for a CPU in every call) slows each function that computes;
/// a slow disk or a lossy network slows the functions that wait on them, a software fault the
/// functions it touches — a minority of a server's functions.
const SLOWED_SHARE: f64 = 0.75;
/// The fewest functions compared for a slowdown to be "as a whole".
const SLOWED_MIN_FUNCTIONS: usize = 3;
/// A function takes part when it holds at least this share of the node's or its peers' median
/// self time: the rest are too small to measure a time per call.
const SLOWED_MIN_SHARE: f64 = 0.01;

/// The white-box metrics' view of a node's speed over its faulty stretch: each traced function's
/// time per call (self time ÷ calls) against the median of its peers'. *Slowed as a whole* when
/// at least 75 % (`SLOWED_SHARE`) of the functions compared (at least 3: `SLOWED_MIN_FUNCTIONS`)
/// are [`MARGIN`]× slower per call (`SLOWER`) and the node's calls are not up (the median
/// function's calls at most [`MARGIN`]× its peers'): every call takes longer, whichever function it is in, while
/// the node does no more — it waits for a CPU, or its machine is slower. A closed loop does fewer
/// calls, an open one the same: either way, calls are not up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Slowdown {
    /// Functions compared.
    pub functions: usize,
    /// Of them, those `SLOWER`× slower per call.
    pub slower: usize,
    /// The median over the functions of time per call ÷ the peers' median.
    pub per_call: f64,
    /// The median over the functions of calls ÷ the peers' median.
    pub calls: f64,
}

impl Slowdown {
    /// True when the node is slowed as a whole.
    pub fn whole(&self) -> bool {
        self.functions >= SLOWED_MIN_FUNCTIONS
            && self.slower as f64 >= SLOWED_SHARE * self.functions as f64
            && self.per_call >= SLOWER
            && self.calls <= MARGIN
    }

    /// Node `n`'s slowdown over `[from, to)` against its peers `peers`, from `levels`; `None`
    /// without traces.
    pub fn of(
        levels: &dyn Levels,
        names: &[String],
        n: PeerIdx,
        peers: &[PeerIdx],
        (from, to): (u64, u64),
    ) -> Option<Slowdown> {
        let mine = levels.functions(&names[n], from, to);
        if mine.is_empty() {
            return None;
        }
        let theirs: Vec<Vec<FunctionLevel>> = peers
            .iter()
            .map(|&p| levels.functions(&names[p], from, to))
            .filter(|v| !v.is_empty())
            .collect();
        if theirs.is_empty() {
            return None;
        }
        let total = |v: &[FunctionLevel]| v.iter().map(|f| f.self_ns).sum::<f64>();
        let my_total = total(&mine);
        let mut totals: Vec<f64> = theirs.iter().map(|v| total(v)).collect();
        let their_total = median_in_place(&mut totals);
        let (mut per_call, mut calls) = (Vec::new(), Vec::new());
        for f in &mine {
            let others: Vec<&FunctionLevel> = theirs
                .iter()
                .filter_map(|v| v.iter().find(|g| g.function == f.function))
                .filter(|g| g.calls > 0.0 && g.self_ns > 0.0)
                .collect();
            // Known on the node and on at least half of its peers, and big enough to matter.
            if f.calls <= 0.0 || others.len() * 2 < theirs.len() || others.is_empty() {
                continue;
            }
            let mut pc: Vec<f64> = others.iter().map(|g| g.self_ns / g.calls).collect();
            let mut cs: Vec<f64> = others.iter().map(|g| g.calls).collect();
            let mut st: Vec<f64> = others.iter().map(|g| g.self_ns).collect();
            let (their_pc, their_calls, their_self) = (
                median_in_place(&mut pc),
                median_in_place(&mut cs),
                median_in_place(&mut st),
            );
            let big = f.self_ns >= SLOWED_MIN_SHARE * my_total
                || their_self >= SLOWED_MIN_SHARE * their_total;
            if !big || their_pc <= 0.0 || their_calls <= 0.0 {
                continue;
            }
            per_call.push((f.self_ns / f.calls) / their_pc);
            calls.push(f.calls / their_calls);
        }
        if per_call.is_empty() {
            return None;
        }
        let slower = per_call.iter().filter(|&&r| r >= SLOWER).count();
        Some(Slowdown {
            functions: per_call.len(),
            slower,
            per_call: median_in_place(&mut per_call),
            calls: median_in_place(&mut calls),
        })
    }

    /// The observation the checklist shows for it (class [`Slowdown`](Class::Slowdown)):
    /// diverging when the node is slowed as a whole and a white-box metric finds it faulty.
    fn observation(&self, white: Option<&MetricResult>, n: PeerIdx) -> Observation {
        let nm = white.map(|m| &m.nodes[n]);
        let faulty = nm.is_some_and(|r| r.faulty());
        Observation {
            metric: "time per call".to_string(),
            instance: Some(format!(
                "{} of {} functions slower, calls {:.2}×",
                self.slower, self.functions, self.calls
            )),
            class: Slowdown,
            direction: if self.per_call >= SLOWER {
                Up
            } else {
                Direction::Level
            },
            ratio: Some(self.per_call),
            node: self.per_call,
            peers: 1.0,
            unit: "× peers".to_string(),
            faulty,
            anomalous_windows: nm.map_or(0, |r| r.anomalous.len() as u64),
            share: None,
            small: false,
            diverges: self.whole() && faulty,
        }
    }
}

/// What the checklist reads of one culprit.
struct Facts {
    obs: Vec<Observation>,
    foreign: Vec<String>,
    functions: Vec<String>,
    /// Some OS metric was compared on the node.
    has_os: bool,
    /// The white-box metrics say the node is slowed as a whole ([`Slowdown::whole`]).
    slowed: bool,
    /// Accept-path functions ([`ACCEPT_PATH`]) the node runs [`MARGIN`]× more than its peers,
    /// in a white-box metric anomalous on it.
    accept_path: Vec<String>,
}

impl Facts {
    fn diverging(&self, class: Class) -> bool {
        self.obs.iter().any(|o| o.class == class && o.diverges)
    }

    /// Diverging on an OS metric of `class`, not only on a kernel event.
    fn diverging_os(&self, class: Class) -> bool {
        self.obs
            .iter()
            .any(|o| o.class == class && o.diverges && !o.metric.starts_with("events: "))
    }

    fn level(&self, class: Class, d: Direction) -> bool {
        self.obs
            .iter()
            .any(|o| o.class == class && o.direction == d && (o.faulty || o.anomalous_windows > 0))
    }
}

/// The faulty stretch of node `n` over `metrics`: first faulty window's start to the last
/// faulty window's end (every window of a metric that is anomalous on it if it is faulty on none).
fn stretch(metrics: &[&MetricResult], n: PeerIdx) -> Option<(u64, u64)> {
    let see = |span: Option<(u64, u64)>, a: u64, b: u64| {
        Some(span.map_or((a, b), |(x, y)| (x.min(a), y.max(b))))
    };
    let mut span: Option<(u64, u64)> = None;
    for m in metrics {
        let size = m.windows_ns.size_ns;
        for e in &m.nodes[n].episodes {
            span = see(span, e.first_window_ns, e.last_window_ns + size);
        }
    }
    if span.is_none() {
        for m in metrics {
            let size = m.windows_ns.size_ns;
            for a in &m.nodes[n].anomalous {
                span = see(span, a.start_ns, a.start_ns + size);
            }
        }
    }
    span
}

fn facts(
    outcome: &Outcome,
    metrics: &[&MetricResult],
    n: PeerIdx,
    levels: Option<&dyn Levels>,
) -> Facts {
    let names = &outcome.names;
    let span = stretch(metrics, n);
    let mut obs = Vec::new();
    let mut has_os = false;
    for m in metrics.iter().filter(|m| m.metric().is_os()) {
        let nm = &m.nodes[n];
        if nm.scored == 0 {
            continue;
        }
        has_os = true;
        let Some(sign) = sign_of(m.metric().name()) else {
            continue;
        };
        let (Some(levels), Some((from, to))) = (levels, span) else {
            continue;
        };
        // Per instance: the node's mean and the median of its peers'; the instance furthest
        // from its peers speaks for the metric.
        let mine = levels.means(&names[n], sign.metric, from, to);
        let mut best: Option<(f64, Option<String>, f64, f64)> = None;
        for InstanceMean {
            instance: inst,
            mean: v,
        } in mine
        {
            let mut peers: Vec<f64> = (0..names.len())
                .filter(|&p| p != n && m.nodes[p].scored > 0)
                .filter_map(|p| {
                    levels
                        .means(&names[p], sign.metric, from, to)
                        .into_iter()
                        .find(|x| x.instance == inst)
                        .map(|x| x.mean)
                })
                .collect();
            if peers.is_empty() {
                continue;
            }
            let med = median_in_place(&mut peers);
            let gap = if med > 0.0 && v > 0.0 {
                (v / med).ln().abs()
            } else if v == med {
                0.0
            } else {
                f64::INFINITY
            };
            if best.as_ref().is_none_or(|b| gap > b.0) {
                best = Some((gap, inst, v, med));
            }
        }
        let Some((_, instance, v, med)) = best else {
            continue;
        };
        let (dir, ratio) = direction(v, med);
        let moved = nm.faulty() && dir == sign.trouble;
        let small = moved && !sign.beyond_floor(v, med);
        obs.push(Observation {
            metric: sign.metric.to_string(),
            instance,
            class: sign.class,
            direction: dir,
            ratio,
            node: v,
            peers: med,
            unit: m.config.family.unit().to_string(),
            faulty: nm.faulty(),
            anomalous_windows: nm.anomalous.len() as u64,
            share: None,
            small,
            diverges: moved && !small,
        });
    }
    let level =
        |obs: &[Observation], metric: &str| obs.iter().find(|o| o.metric == metric).map(|o| o.node);
    let (sent, received) = (level(&obs, "tcp.out_segs"), level(&obs, "tcp.in_segs"));
    // Kernel events: the root-cause sums over the events metric's anomalous windows. The
    // metric is faulty as a whole, so an event speaks for its resource only when it persisted
    // itself: it alone deviated more than a typical node in all events in k windows net of
    // normal ones (seed 001 §3.4's accumulator, the k that convicts a node). A network flood
    // convicted a node on the events metric through its scheduler switches (persistence 6),
    // and its block events, 1.6× its peers' in one window (persistence 1) while its write bytes
    // were its peers' to the byte, named a disk hog at step 1.
    let k = outcome.config.k.max(1) as u32;
    for m in metrics.iter().filter(|m| m.metric() == Metric::EVENTS) {
        let nm = &m.nodes[n];
        if nm.anomalous.is_empty() {
            continue;
        }
        for r in m.top(n, 10) {
            let label = &m.comps[r.comp as usize];
            let Some(sign) = sign_of(&label.name) else {
                continue;
            };
            let (dir, ratio) = direction(r.cause.node, r.cause.reference);
            // Events per second over the anomalous windows, against the segments per second
            // the node sent and received.
            let seconds = nm.anomalous.len() as f64 * m.windows_ns.size_ns as f64 / 1e9;
            let share = match (sent, received) {
                (Some(out), Some(inn)) if out + inn > 0.0 && seconds > 0.0 => {
                    Some(r.cause.node / seconds / (out + inn))
                }
                _ => None,
            };
            let moved = nm.faulty() && dir == sign.trouble && r.persistence.peak >= k;
            let small = moved
                && seconds > 0.0
                && !sign.beyond_floor(r.cause.node / seconds, r.cause.reference / seconds);
            obs.push(Observation {
                metric: format!("events: {}", sign.metric),
                instance: None,
                class: sign.class,
                direction: dir,
                ratio,
                node: r.cause.node,
                peers: r.cause.reference,
                unit: m.config.family.unit().to_string(),
                faulty: nm.faulty(),
                anomalous_windows: nm.anomalous.len() as u64,
                share,
                small,
                diverges: moved && !small,
            });
        }
    }
    judge_retransmits(&mut obs, sent);
    // White-box: is the node slowed as a whole (every function slower per call)?
    let mut slowed = false;
    if let (Some(levels), Some(span)) = (levels, span) {
        let peers: Vec<PeerIdx> = (0..names.len()).filter(|&p| p != n).collect();
        if let Some(sd) = Slowdown::of(levels, names, n, &peers, span) {
            let white = metrics
                .iter()
                .filter(|m| matches!(m.metric(), Metric::TIME | Metric::COUNT))
                .max_by_key(|m| (m.nodes[n].faulty(), m.nodes[n].anomalous.len()))
                .copied();
            slowed = sd.whole();
            obs.push(sd.observation(white, n));
        }
    }
    // White-box: what only this node runs, and the top functions.
    let mut foreign = Vec::new();
    let mut functions = Vec::new();
    let mut accept_path = Vec::new();
    let mut best_white: Option<(usize, &MetricResult)> = None;
    for m in metrics.iter().filter(|m| !m.metric().is_os()) {
        let nm = &m.nodes[n];
        if nm.anomalous.is_empty() || m.metric() == Metric::EVENTS {
            continue;
        }
        let weight = nm.anomalous.len() + if nm.faulty() { 1000 } else { 0 };
        if best_white.is_none_or(|b| weight > b.0) {
            best_white = Some((weight, m));
        }
        for r in m.top(n, 10) {
            let label = &m.comps[r.comp as usize];
            if on_accept_path(&label.name)
                && r.cause.node > 0.0
                && r.cause.node >= MARGIN * r.cause.reference
            {
                let f = function_label(label);
                if !accept_path.contains(&f) {
                    accept_path.push(f);
                }
            }
        }
        if m.metric() == Metric::SAMPLES {
            for r in m.top(n, 3) {
                if r.cause.reference <= 0.0 && r.cause.node > 0.0 {
                    foreign.push(function_label(&m.comps[r.comp as usize]));
                }
            }
        }
    }
    if let Some((_, m)) = best_white {
        functions = m
            .top(n, 3)
            .into_iter()
            .map(|r| function_label(&m.comps[r.comp as usize]))
            .collect();
    }
    // Diverging first, then by anomalous windows.
    obs.sort_by(|a, b| {
        (b.diverges, b.faulty, b.anomalous_windows).cmp(&(
            a.diverges,
            a.faulty,
            a.anomalous_windows,
        ))
    });
    Facts {
        obs,
        foreign,
        functions,
        has_os,
        slowed,
        accept_path,
    }
}

/// Retransmits diverge only as a share of the traffic: the node's own (`tcp.retrans*`) against
/// the segments it sent (`sent`, per second); the events' share is computed where they are read.
fn judge_retransmits(obs: &mut [Observation], sent: Option<f64>) {
    for o in obs.iter_mut() {
        let base = o.metric.strip_prefix("events: ").unwrap_or(&o.metric);
        if !RETRANSMITS.contains(&base) {
            continue;
        }
        if o.share.is_none() && !o.metric.starts_with("events: ") {
            o.share = sent.filter(|s| *s > 0.0).map(|s| o.node / s);
        }
        if o.share.is_some_and(|s| s < LOSS_SHARE) {
            o.diverges = false;
        }
    }
}

/// The first step of the checklist whose condition holds.
fn step(f: &Facts) -> usize {
    let another = !f.foreign.is_empty()
        || f.obs
            .iter()
            .any(|o| o.metric == "proc.procs" && o.direction == Up);
    // Steps 1–4 read OS metrics and kernel events alike; a kernel event alone names no
    // resource against the node's own white-box evidence of a slowdown as a whole.
    let sees = |class: Class| {
        if f.slowed {
            f.diverging_os(class)
        } else {
            f.diverging(class)
        }
    };
    let storage_up = sees(StorageThroughput);
    let latency_up = sees(StorageLatency);
    let rx = sees(Received);
    let tx = sees(Sent);
    let loss = sees(Loss);
    let cpu_up = f.diverging(CpuUse);
    let withheld = f.diverging(CpuLimit);
    let waiting = f.diverging(CpuWait) || withheld;
    let whole = f.diverging(Slowdown);
    let conns = sees(Connections);
    let network_moved = rx || tx || loss || f.level(Received, Up) || f.level(Loss, Up);
    let flood = conns || (!f.accept_path.is_empty() && network_moved);
    // Every function slower per call with the CPU wait or limit up (anomalous, if not faulty):
    // the white-box metrics' view of starvation.
    let starved_white = whole && (f.level(CpuWait, Up) || f.level(CpuLimit, Up));
    // A node whose CPU is withheld (and that does not use more) answers late: loss signs are
    // then its consequence.
    let starved = withheld && !cpu_up;
    let condition = [
        storage_up,
        latency_up,
        flood,
        (rx && tx) || ((rx || tx) && !loss),
        loss && !starved,
        cpu_up && (waiting || another || f.level(CpuWait, Up) || f.level(CpuLimit, Up)),
        (waiting || starved_white) && !cpu_up,
        whole && !cpu_up,
    ];
    condition.iter().position(|&c| c).unwrap_or(RULES.len() - 1)
}

/// `I/O delay 4.1× peers, throughput 0.3×`: the strongest diverging evidence, and the level of
/// the rule's second class.
fn summary(kind: Kind, evidence: &[Observation], functions: &[String], has_os: bool) -> String {
    if kind == Kind::ConnectionFlood && !evidence.iter().any(|o| o.diverges) {
        let top: Vec<&str> = functions.iter().take(2).map(String::as_str).collect();
        return format!("accept path busier: {}", top.join(", "));
    }
    if kind == Kind::Software {
        let what = if has_os {
            "no resource diverges"
        } else {
            "no OS metrics to name a resource"
        };
        return if functions.is_empty() {
            what.to_string()
        } else {
            let top: Vec<&str> = functions.iter().take(2).map(String::as_str).collect();
            format!("{what}; top functions {}", top.join(", "))
        };
    }
    let ratio = |o: &Observation| match o.ratio {
        Some(r) if r >= 10.0 => format!("{r:.0}×"),
        Some(r) => format!("{r:.1}×"),
        None => "from 0".to_string(),
    };
    fn words(o: &Observation) -> &str {
        let base = o.metric.strip_prefix("events: ").unwrap_or(&o.metric);
        sign_of(base).map_or(o.metric.as_str(), |s| s.words)
    }
    let mut parts = Vec::new();
    if let Some(first) = evidence.iter().find(|o| o.diverges) {
        parts.push(format!("{} {} peers", words(first), ratio(first)));
        // The level of another class of the rule (slow disk: throughput), if known.
        if let Some(other) = evidence
            .iter()
            .find(|o| o.class != first.class && o.ratio.is_some())
        {
            parts.push(format!("{} {}", words(other), ratio(other)));
        }
    }
    parts.join(", ")
}

/// Names the resource at fault on node `n` (a culprit or suspect) from the reported metrics'
/// results; `levels` gives the OS metrics' per-second levels (without it OS metrics give no
/// direction).
pub fn name(
    outcome: &Outcome,
    metrics: &[&MetricResult],
    n: PeerIdx,
    levels: Option<&dyn Levels>,
) -> Resource {
    examine(outcome, metrics, n, levels).0
}

/// [`name`], and whether the level of an OS metric the node is faulty on moved at least
/// [`MARGIN`] from its peers' the way that points at the node: its trouble direction, or down
/// for what measures work done (throughput, traffic, CPU use) — for [`demote_shapeless`]. A
/// throughput that falls 8× is not a change of shape, though only a rise points at a disk hog;
/// a delay or wait *below* its peers' never points at the node (a healthy peer of a slow disk
/// waits less than the median that includes the slow one).
pub fn examine(
    outcome: &Outcome,
    metrics: &[&MetricResult],
    n: PeerIdx,
    levels: Option<&dyn Levels>,
) -> (Resource, bool) {
    let f = facts(outcome, metrics, n, levels);
    let moved = f.obs.iter().any(|o| {
        o.diverges
            || (o.faulty
                && o.direction == Down
                && matches!(o.class, StorageThroughput | Received | Sent | CpuUse))
    });
    let at = step(&f);
    let rule = &RULES[at];
    let (evidence, also): (Vec<Observation>, Vec<Observation>) = f
        .obs
        .iter()
        .cloned()
        .partition(|o| rule.classes.contains(&o.class));
    let weight = |o: &Observation| {
        if o.diverges {
            o.anomalous_windows.max(1)
        } else {
            0
        }
    };
    let total: u64 = f.obs.iter().map(weight).sum();
    let mine: u64 = evidence.iter().map(weight).sum();
    let confidence = if rule.kind == Kind::Software {
        if f.has_os {
            1.0
        } else {
            // Without OS metrics nothing could have shown a resource.
            0.0
        }
    } else if total == 0 {
        0.0
    } else {
        mine as f64 / total as f64
    };
    let also = also.into_iter().filter(|o| o.diverges).collect();
    let evidence: Vec<Observation> = evidence
        .into_iter()
        .filter(|o| o.diverges || o.faulty || o.anomalous_windows > 0 || o.ratio.is_some())
        .collect();
    let resource = Resource {
        kind: rule.kind,
        name: rule.kind.words().to_string(),
        summary: summary(
            rule.kind,
            &evidence,
            if rule.kind == Kind::ConnectionFlood {
                &f.accept_path
            } else {
                &f.functions
            },
            f.has_os,
        ),
        step: at + 1,
        rule: rule.when.to_string(),
        confidence,
        evidence,
        also,
        foreign: f.foreign,
        functions: if rule.kind == Kind::ConnectionFlood {
            f.accept_path
        } else {
            f.functions
        },
    };
    (resource, moved)
}

/// Makes an OS-only finding without a level a suspect. When the OS metrics are the only family
/// that finds a node faulty (no other family is faulty on its own), the checklist named no
/// resource (step 9, "software") and `level_moved` is false — the node's distributions changed
/// shape, but no faulty metric's level moved [`MARGIN`] from its peers' the way that points at
/// the node ([`examine`]) — the software's own metrics did not convict and the OS metrics show
/// no more than a shape. Peers that wait on a faulty node show exactly this: their I/O delay or
/// run-queue wait changes shape in step with the fault without differing in level (seed 001
/// §4.6.2 halts only "if we observe peer-divergence"). Such a node is reported as a suspect,
/// with the reason, not as a culprit.
///
/// A white-box family that merely *corroborates* (an anomalous window near the OS metrics'
/// faulty stretch, not faulty itself) does not lift the demotion: on a busy host such windows
/// come and go on every node, and fault-free runs of the testbed convicted healthy nodes on
/// exactly this pair — a shape in `proc.blocked` or `cg.cpu` and one anomalous count or time
/// window (docs/accuracy.md, "Shape-only OS findings").
/// Returns true when it demoted the verdict.
pub fn demote_shapeless(combined: &mut Combined, resource: &Resource, level_moved: bool) -> bool {
    use crate::combine::{Role, Verdict};
    let os_only = combined.families.iter().all(|f| match f.role {
        Role::Faulty => f.family == Metric::OS,
        Role::Corroborates | Role::Anomalous | Role::Ok => true,
    });
    if combined.verdict != Verdict::Faulty
        || resource.kind != Kind::Software
        || level_moved
        || !os_only
    {
        return false;
    }
    combined.verdict = Verdict::Suspect;
    combined.reason = format!(
        "{}, but no OS metric's level differs {MARGIN}× from its peers' (a change of shape only, \
         as peers waiting on a faulty node show)",
        combined.reason
    );
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An observation of `metric` in direction `dir`, the node faulty on it or not.
    fn o(metric: &str, dir: Direction, faulty: bool) -> Observation {
        let s = sign_of(metric).unwrap();
        Observation {
            metric: metric.to_string(),
            instance: None,
            class: s.class,
            direction: dir,
            ratio: Some(match dir {
                Up => 3.0,
                Down => 0.3,
                Direction::Level => 1.0,
            }),
            node: 1.0,
            peers: 1.0,
            unit: "u".into(),
            faulty,
            anomalous_windows: u64::from(faulty) * 4,
            share: None,
            small: false,
            diverges: faulty && dir == s.trouble,
        }
    }

    fn facts(obs: Vec<Observation>) -> Facts {
        Facts {
            obs,
            foreign: Vec::new(),
            functions: vec!["handle_io".into()],
            has_os: true,
            slowed: false,
            accept_path: Vec::new(),
        }
    }

    fn kind(obs: Vec<Observation>) -> Kind {
        RULES[step(&facts(obs))].kind
    }

    #[test]
    fn every_catalogue_sign_is_an_os_metric_or_an_event() {
        for s in SIGNS {
            assert!(
                culprit_format::os_metrics::def(s.metric).is_some() || s.metric.contains(':'),
                "{}",
                s.metric
            );
        }
    }

    /// Magnitude as well as ratio (issue 31): one 10 ms wait gave a node 0.04 ms/s of I/O
    /// delay against its peers' exact 0, an infinite ratio, and named a slow disk.
    #[test]
    fn a_level_under_its_floor_names_nothing() {
        let delay = sign_of("proc.blkio_delay").unwrap();
        assert!(!delay.beyond_floor(0.04, 0.0));
        assert!(delay.beyond_floor(1313.0, 0.0));
        // A healthy peer of a slow disk waits less: never beyond the floor the way of trouble.
        assert!(!delay.beyond_floor(0.0, 400.0));
        // Down-pointing signs: the window must shrink by the floor.
        let cwnd = sign_of("tcp.cwnd_med").unwrap();
        assert!(cwnd.beyond_floor(5.0, 10.0));
        assert!(!cwnd.beyond_floor(9.5, 10.0));
        // Every sign has a positive floor.
        for s in SIGNS {
            assert!(s.floor > 0.0, "{}", s.metric);
        }
        // A small move is no evidence: nothing is named.
        let mut small = o("proc.blkio_delay", Up, true);
        small.diverges = false;
        small.small = true;
        assert_eq!(kind(vec![small]), Kind::Software);
    }

    /// A flood of junk connections is a connection flood, not packet loss (issue 31).
    #[test]
    fn a_connection_flood_is_named_for_what_it_is() {
        // Connections up, with longer round trips.
        assert_eq!(
            kind(vec![o("tcp.conns", Up, true), o("tcp.rtt_med", Up, true)]),
            Kind::ConnectionFlood
        );
        // The accept path busier, with loss signs: the flood, not loss.
        let mut f = facts(vec![o("tcp.rtt_med", Up, true)]);
        f.accept_path = vec!["tcp_v4_send_reset [kernel.kallsyms]".into()];
        assert_eq!(RULES[step(&f)].kind, Kind::ConnectionFlood);
        // Without either, loss signs are loss.
        assert_eq!(kind(vec![o("tcp.rtt_med", Up, true)]), Kind::PacketLoss);
        // An accept-path function busier with no network sign moving names no flood.
        let mut quiet = facts(vec![o("cg.cpu", Up, true), o("proc.runq_delay", Up, true)]);
        quiet.accept_path = vec!["accept_conn [server]".into()];
        assert_eq!(RULES[step(&quiet)].kind, Kind::CpuHog);
        assert!(on_accept_path("inet_csk_accept"));
        assert!(on_accept_path("tcp_v4_conn_request"));
        assert!(!on_accept_path("tcp_sendmsg"));
    }

    #[test]
    fn the_checklist_in_order() {
        // Disk hog: throughput up (latency up too: it halts at step 1).
        assert_eq!(
            kind(vec![
                o("cg.rd_bytes", Up, true),
                o("proc.blkio_delay", Up, true)
            ]),
            Kind::DiskHog
        );
        // Slow disk: latency up, throughput level or down.
        assert_eq!(
            kind(vec![
                o("disk.await", Up, true),
                o("disk.rd_sec", Down, false)
            ]),
            Kind::SlowDisk
        );
        // Network hog: both ways, even with loss signs (seed 001 §4.8).
        assert_eq!(
            kind(vec![
                o("net.rxbyt", Up, true),
                o("net.txpck", Up, true),
                o("tcp.retrans", Up, true)
            ]),
            Kind::NetworkHog
        );
        // One way without loss: a hog; one way with loss: packet loss (delayed ACKs).
        assert_eq!(kind(vec![o("net.txbyt", Up, true)]), Kind::NetworkHog);
        assert_eq!(
            kind(vec![
                o("net.txpck", Up, true),
                o("tcp.cwnd_med", Down, true)
            ]),
            Kind::PacketLoss
        );
        // A loss sign in the wrong direction does not count.
        assert_eq!(kind(vec![o("tcp.cwnd_med", Up, false)]), Kind::Software);
        // CPU hog: more CPU with run-queue wait; starvation: throttled, CPU not up.
        assert_eq!(
            kind(vec![
                o("proc.cpu", Up, true),
                o("proc.runq_delay", Up, true)
            ]),
            Kind::CpuHog
        );
        assert_eq!(
            kind(vec![o("cg.throttled", Up, true), o("cg.cpu", Down, true)]),
            Kind::CpuStarvation
        );
        // More CPU alone is not a hog without wait, throttling or another process.
        assert_eq!(kind(vec![o("cg.cpu", Up, true)]), Kind::Software);
        let mut f = facts(vec![o("cg.cpu", Up, true)]);
        f.foreign.push("spin [rogue]".into());
        assert_eq!(RULES[step(&f)].kind, Kind::CpuHog);
        assert_eq!(kind(vec![]), Kind::Software);
    }

    /// A node that sends 40× more retransmits a little too: 3 of 11,700 segments per second is
    /// no loss, and the hog is a hog. At 5 % it is loss.
    #[test]
    fn retransmits_count_by_their_share() {
        let mut retrans = o("tcp.retrans_segs", Up, true);
        retrans.node = 3.0;
        let mut obs = vec![o("net.txbyt", Up, true), retrans];
        judge_retransmits(&mut obs, Some(11_700.0));
        assert!(!obs[1].diverges);
        assert!((obs[1].share.unwrap() - 3.0 / 11_700.0).abs() < 1e-12);
        assert_eq!(RULES[step(&facts(obs.clone()))].kind, Kind::NetworkHog);
        obs[1].diverges = true;
        obs[1].share = None;
        obs[1].node = 600.0;
        judge_retransmits(&mut obs, Some(12_000.0));
        assert!(obs[1].diverges);
        assert_eq!(RULES[step(&facts(obs))].kind, Kind::PacketLoss);
    }

    /// One traced function: (function, calls/s, self ns/s).
    type Func = (&'static str, f64, f64);

    /// Levels of traced functions only, per node.
    #[derive(Debug)]
    struct Funcs(Vec<(&'static str, Vec<Func>)>);

    impl Levels for Funcs {
        fn means(&self, _: &str, _: &str, _: u64, _: u64) -> Vec<InstanceMean> {
            Vec::new()
        }
        fn functions(&self, node: &str, _: u64, _: u64) -> Vec<FunctionLevel> {
            self.0
                .iter()
                .find(|(n, _)| *n == node)
                .map(|(_, v)| {
                    v.iter()
                        .map(|&(f, calls, self_ns)| FunctionLevel {
                            function: f.to_string(),
                            calls,
                            self_ns,
                        })
                        .collect()
                })
                .unwrap_or_default()
        }
    }

    /// Four peers running parse (1 µs a call), hash (3 µs), reply (2 µs) and wait (blocked,
    /// 100 µs); node d as `d`.
    fn slowdown(d: Vec<Func>) -> Slowdown {
        let healthy = vec![
            ("parse", 1000.0, 1e6),
            ("hash", 1000.0, 3e6),
            ("reply", 1000.0, 2e6),
            ("wait", 1000.0, 1e8),
        ];
        let levels = Funcs(vec![
            ("a", healthy.clone()),
            ("b", healthy.clone()),
            ("c", healthy),
            ("d", d),
        ]);
        let names: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        Slowdown::of(&levels, &names, 3, &[0, 1, 2], (0, 1)).unwrap()
    }

    /// Every computing function slower per call alike, calls down (a closed loop) or level (an
    /// open one), the wait unchanged: slowed as a whole. One function 20× slower, or every one
    /// slower with more calls, is not.
    #[test]
    fn a_node_slowed_as_a_whole() {
        let starved = slowdown(vec![
            ("parse", 300.0, 300.0 * 4e3),
            ("hash", 300.0, 300.0 * 12e3),
            ("reply", 300.0, 300.0 * 8e3),
            ("wait", 300.0, 300.0 * 1e5),
        ]);
        assert!(starved.whole(), "{starved:?}");
        assert_eq!((starved.functions, starved.slower), (4, 3));
        let open_loop = slowdown(vec![
            ("parse", 1000.0, 4e6),
            ("hash", 1000.0, 12e6),
            ("reply", 1000.0, 8e6),
            ("wait", 1000.0, 0.9e8),
        ]);
        assert!(open_loop.whole(), "{open_loop:?}");
        let one = slowdown(vec![
            ("parse", 1000.0, 1e6),
            ("hash", 1000.0, 60e6),
            ("reply", 1000.0, 2e6),
            ("wait", 1000.0, 0.4e8),
        ]);
        assert!(!one.whole(), "{one:?}");
        let busier = slowdown(vec![
            ("parse", 3000.0, 3000.0 * 4e3),
            ("hash", 3000.0, 3000.0 * 12e3),
            ("reply", 3000.0, 3000.0 * 8e3),
            ("wait", 3000.0, 3000.0 * 1e5),
        ]);
        assert!(!busier.whole(), "more calls: {busier:?}");
    }

    /// A slowdown observation as the checklist sees it.
    fn slowed(diverges: bool) -> Observation {
        Observation {
            metric: "time per call".into(),
            instance: None,
            class: Slowdown,
            direction: Up,
            ratio: Some(4.0),
            node: 4.0,
            peers: 1.0,
            unit: "× peers".into(),
            faulty: diverges,
            anomalous_windows: 4,
            share: None,
            small: false,
            diverges,
        }
    }

    fn event(name: &str) -> Observation {
        let mut e = o(name, Up, true);
        e.metric = format!("events: {name}");
        e
    }

    /// A kernel event alone names no resource against a slowdown as a whole; loss signs name
    /// no loss while the CPU is withheld; the white-box slowdown with the CPU wait up is
    /// starvation, and alone "slowed as a whole".
    #[test]
    fn one_event_against_the_white_box_evidence() {
        let kind_of = |obs: Vec<Observation>, slowed_whole: bool| {
            let mut f = facts(obs);
            f.slowed = slowed_whole;
            RULES[step(&f)].kind
        };
        let retrans = event("tcp:tcp_retransmit_skb");
        // Without a slowdown the event speaks (as before).
        assert_eq!(kind_of(vec![retrans.clone()], false), Kind::PacketLoss);
        // Against a slowdown as a whole it does not; with the CPU wait anomalous: starvation.
        let mut wait = o("proc.runq_delay", Up, false);
        wait.anomalous_windows = 2;
        assert_eq!(
            kind_of(vec![retrans.clone(), slowed(true), wait.clone()], true),
            Kind::CpuStarvation
        );
        assert_eq!(
            kind_of(vec![retrans.clone(), slowed(true)], true),
            Kind::SlowedWhole
        );
        // An OS metric of loss diverging still names loss.
        assert_eq!(
            kind_of(
                vec![retrans.clone(), o("tcp.cwnd_med", Down, true), slowed(true)],
                true
            ),
            Kind::PacketLoss
        );
        // Throttled, CPU use not up: loss signs are its consequence.
        assert_eq!(
            kind_of(
                vec![o("tcp.cwnd_med", Down, true), o("cg.throttled", Up, true)],
                false
            ),
            Kind::CpuStarvation
        );
        // Slowed with more CPU: not a slowdown of the machine.
        assert_eq!(
            kind_of(vec![slowed(true), o("cg.cpu", Up, true)], true),
            Kind::Software
        );
    }

    #[test]
    fn directions_need_the_margin() {
        assert_eq!(direction(1.3, 1.0), (Up, Some(1.3)));
        assert_eq!(direction(1.2, 1.0).0, Direction::Level);
        assert_eq!(direction(0.7, 1.0).0, Down);
        assert_eq!(direction(5.0, 0.0), (Up, None));
        assert_eq!(direction(0.0, 0.0).0, Direction::Level);
    }

    /// A combined verdict from (family, role) pairs.
    fn combined(
        verdict: crate::combine::Verdict,
        roles: &[(Metric, crate::combine::Role)],
    ) -> Combined {
        Combined {
            verdict,
            metrics: Vec::new(),
            reason: "decisive on os: 3.5× its threshold".into(),
            families: roles
                .iter()
                .map(|&(family, role)| crate::combine::Contribution {
                    family,
                    role,
                    faulty: Vec::new(),
                    anomalous: Vec::new(),
                    evidence: None,
                })
                .collect(),
        }
    }

    fn resource(kind: Kind) -> Resource {
        Resource {
            kind,
            name: kind.words().into(),
            summary: String::new(),
            step: 1,
            rule: String::new(),
            confidence: 1.0,
            evidence: Vec::new(),
            also: Vec::new(),
            foreign: Vec::new(),
            functions: Vec::new(),
        }
    }

    #[test]
    fn an_os_only_finding_without_a_direction_is_a_suspect() {
        use crate::combine::{Role, Verdict};
        // OS faulty, nothing else: a change of shape only → suspect, with the reason.
        let mut c = combined(
            Verdict::Faulty,
            &[(Metric::OS, Role::Faulty), (Metric::TIME, Role::Anomalous)],
        );
        assert!(demote_shapeless(&mut c, &resource(Kind::Software), false));
        assert_eq!(c.verdict, Verdict::Suspect);
        assert!(c.reason.contains("change of shape only"), "{}", c.reason);
        // A named resource keeps the verdict.
        let mut c = combined(Verdict::Faulty, &[(Metric::OS, Role::Faulty)]);
        assert!(!demote_shapeless(&mut c, &resource(Kind::SlowDisk), false));
        assert_eq!(c.verdict, Verdict::Faulty);
        // Another family faulty keeps it: the software's own metrics convicted it too.
        let mut c = combined(
            Verdict::Faulty,
            &[(Metric::OS, Role::Faulty), (Metric::EVENTS, Role::Faulty)],
        );
        assert!(!demote_shapeless(&mut c, &resource(Kind::Software), false));
        assert_eq!(c.verdict, Verdict::Faulty);
        // One that only corroborates (anomalous windows nearby, not faulty) does not: a shape
        // and a transient white-box window are what busy fault-free runs show.
        let mut c = combined(
            Verdict::Faulty,
            &[
                (Metric::OS, Role::Faulty),
                (Metric::EVENTS, Role::Corroborates),
            ],
        );
        assert!(demote_shapeless(&mut c, &resource(Kind::Software), false));
        assert_eq!(c.verdict, Verdict::Suspect);
        // A level that moved the "wrong" way (a throttled disk's throughput 8× down, its delay
        // absent) is more than a shape: the node stays faulty.
        let mut c = combined(Verdict::Faulty, &[(Metric::OS, Role::Faulty)]);
        assert!(!demote_shapeless(&mut c, &resource(Kind::Software), true));
        assert_eq!(c.verdict, Verdict::Faulty);
        // A white-box finding named software is what step 9 is for.
        let mut c = combined(Verdict::Faulty, &[(Metric::SAMPLES, Role::Faulty)]);
        assert!(!demote_shapeless(&mut c, &resource(Kind::Software), false));
    }

    #[test]
    fn summary_names_the_strongest_evidence_and_the_other_class() {
        let mut delay = o("proc.blkio_delay", Up, true);
        delay.ratio = Some(4.1);
        let mut tput = o("cg.rd_bytes", Down, false);
        tput.ratio = Some(0.3);
        assert_eq!(
            summary(Kind::SlowDisk, &[delay, tput], &[], true),
            "I/O delay 4.1× peers, read throughput 0.3×"
        );
        assert_eq!(
            summary(Kind::Software, &[], &["f".into(), "g".into()], true),
            "no resource diverges; top functions f, g"
        );
        assert_eq!(
            summary(Kind::Software, &[], &["f".into()], false),
            "no OS metrics to name a resource; top functions f"
        );
    }
}
