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
//! what one metric showed, `observation.rs`; the white-box view of a node slowed as a whole,
//! `slowdown.rs`; the checklist itself is here.

mod levels;
mod observation;
mod signs;
mod slowdown;

pub use levels::{DatasetLevels, FunctionLevel, InstanceMean, Levels, MARGIN};
pub use observation::Observation;
pub use signs::{sign_of, Class, Direction, Sign, SIGNS};
pub use slowdown::Slowdown;

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
            let nm = white.map(|m| &m.nodes[n]);
            obs.push(sd.observation(
                nm.is_some_and(|r| r.faulty()),
                nm.map_or(0, |r| r.anomalous.len() as u64),
            ));
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
mod tests;
