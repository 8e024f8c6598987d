//! Seed 003's comparison *between* adjacent layers of one process (§3 "generic
//! characteristics … track the evolution of a generic I/O characteristic between two layers",
//! §4.2 its case study): a layer that *serialises* its requests — many outstanding in it, but
//! its layer below never given more than about one at a time, while requests wait in it.
//!
//! Seed 003 found glibc's POSIX AIO emulation ("aiolib") issuing one request at a time per file
//! descriptor under a PVFS2 server: "the *aiio* library never issues more than one I/O request
//! at a time" (concurrency at the OS level), with "unexpectedly long average waiting time for
//! an I/O request to be issued" (ADMIT → ISSUE). Both signs are needed here, slot by slot:
//!
//! * the layer keeps at least [`ABOVE_MIN`] requests outstanding on average;
//! * the layer below it (the nearest lower level in the same process) has at most
//!   [`BELOW_MAX`] outstanding on average while busy and never more than [`BELOW_MOST`] at once;
//! * requests wait in the layer at least as long as they take below it: its queue time
//!   (ADMIT → ISSUE) against its time below (ISSUE → COMPLT) when it marks ISSUE, else its
//!   latency minus the layer below's against the layer below's.
//!
//! A layer is named when at least [`MIN_SLOTS`] slots, and half of those compared (slots where
//! both layers had requests completing), are serialised. No peers are needed: the reference
//! is the layer above's own concurrency.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{characteristics, requests, stretches, Characteristics, LayerId, Request, SLOT_NS};
use crate::data::NodeData;

/// Fewest outstanding requests, on average over a slot, in a layer that serialises.
pub const ABOVE_MIN: f64 = 4.0;
/// Most outstanding, on average while busy, in the layer below a serialising layer.
pub const BELOW_MAX: f64 = 1.5;
/// Most outstanding at once in the layer below (one, and another thread's call now and then).
pub const BELOW_MOST: u32 = 2;
/// Fewest serialised slots for a finding.
pub const MIN_SLOTS: usize = 2;

/// A layer of a process that issues its requests one at a time to the layer below.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Serialisation {
    /// Node.
    pub node: String,
    /// Process.
    pub pid: u32,
    /// The serialising layer.
    pub layer: String,
    /// Its level.
    pub level: i32,
    /// The layer below it.
    pub below: String,
    /// That layer's level.
    pub below_level: i32,
    /// Requests outstanding in the layer, average over a slot (median of the serialised
    /// slots).
    pub outstanding: f64,
    /// Requests outstanding in the layer below while it is busy, average (median of the
    /// serialised slots).
    pub below_concurrency: f64,
    /// Most outstanding at once in the layer below over the serialised slots.
    pub below_max_concurrency: u32,
    /// Time a request waits in the layer, ms (median of the serialised slots' means).
    pub wait_ms: f64,
    /// Time it spends below, ms (median of the serialised slots' means).
    pub below_ms: f64,
    /// Slots that were serialised.
    pub slots_serialised: usize,
    /// Slots both layers could be compared in.
    pub slots_compared: usize,
}

/// One slot of a pair of layers: `Some(values)` when compared, the values telling whether it
/// is serialised.
struct Slot {
    outstanding: f64,
    below_busy: f64,
    below_most: u32,
    wait_ms: f64,
    below_ms: f64,
}

impl Slot {
    fn of(upper: &Characteristics, lower: &Characteristics) -> Option<Slot> {
        if upper.requests == 0 || lower.requests == 0 || lower.idle >= 1.0 {
            return None;
        }
        let (wait_ms, below_ms) = match (upper.queue_ms, upper.below_ms) {
            (Some(q), Some(b)) => (q, b),
            _ => {
                let (u, l) = (upper.latency_ms?, lower.latency_ms?);
                ((u - l).max(0.0), l)
            }
        };
        Some(Slot {
            outstanding: upper.concurrency,
            below_busy: lower.concurrency / (1.0 - lower.idle),
            below_most: lower.max_concurrency,
            wait_ms,
            below_ms,
        })
    }

    fn serialised(&self) -> bool {
        self.outstanding >= ABOVE_MIN
            && self.below_busy <= BELOW_MAX
            && self.below_most <= BELOW_MOST
            && self.wait_ms >= self.below_ms
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The serialising layers among one node's requests (all processes), per process, over the
/// slots of [`SLOT_NS`] from `origin`; `end`: the end of the data (requests still outstanding
/// count until then).
pub fn serialisations(
    node: &str,
    reqs: &[Request],
    layers: &[LayerId],
    origin: u64,
    slots: usize,
    end: u64,
) -> Vec<Serialisation> {
    let mut by_pid: BTreeMap<u32, Vec<Request>> = BTreeMap::new();
    for r in reqs {
        by_pid.entry(r.pid).or_default().push(r.clone());
    }
    let mut out = Vec::new();
    for (pid, reqs) in by_pid {
        let mine: Vec<&LayerId> = layers
            .iter()
            .filter(|l| reqs.iter().any(|r| r.layer == l.name))
            .collect();
        let chars: Vec<Vec<Characteristics>> = mine
            .iter()
            .map(|l| characteristics(&reqs, &l.name, origin, slots, end))
            .collect();
        for (u, upper) in mine.iter().enumerate() {
            // The layers at the nearest level below (more than one when several share it).
            let Some(next) = mine
                .iter()
                .map(|l| l.level)
                .filter(|&v| v < upper.level)
                .max()
            else {
                continue;
            };
            for (l, lower) in mine.iter().enumerate() {
                if lower.level != next {
                    continue;
                }
                let compared: Vec<Slot> = chars[u]
                    .iter()
                    .zip(&chars[l])
                    .filter_map(|(a, b)| Slot::of(a, b))
                    .collect();
                let bad: Vec<&Slot> = compared.iter().filter(|s| s.serialised()).collect();
                if bad.len() < MIN_SLOTS || 2 * bad.len() < compared.len() {
                    continue;
                }
                out.push(Serialisation {
                    node: node.to_string(),
                    pid,
                    layer: upper.name.to_string(),
                    level: upper.level,
                    below: lower.name.to_string(),
                    below_level: lower.level,
                    outstanding: median(bad.iter().map(|s| s.outstanding).collect()),
                    below_concurrency: median(bad.iter().map(|s| s.below_busy).collect()),
                    below_max_concurrency: bad.iter().map(|s| s.below_most).max().unwrap_or(0),
                    wait_ms: median(bad.iter().map(|s| s.wait_ms).collect()),
                    below_ms: median(bad.iter().map(|s| s.below_ms).collect()),
                    slots_serialised: bad.len(),
                    slots_compared: compared.len(),
                });
            }
        }
    }
    out
}

/// The serialising layers of every node with layer events, by node and process.
pub fn find(nodes: &[NodeData]) -> Vec<Serialisation> {
    let Some(t) = super::table(nodes) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for n in nodes {
        let (reqs, layers) = requests(stretches(n));
        if reqs.is_empty() {
            continue;
        }
        let end = stretches(n)
            .map(|s| s.span.1)
            .max()
            .unwrap_or(t.origin + t.slots as u64 * SLOT_NS);
        out.extend(serialisations(
            &n.name, &reqs, &layers, t.origin, t.slots, end,
        ));
    }
    out
}

/// One line for people: "libc-aio serialises: 1.0 outstanding in syscall below it (at most 1
/// at once) while 16.0 outstanding in it; requests wait 38 ms in it vs 2.4 ms below (5 of 5 s)".
pub fn describe(s: &Serialisation) -> String {
    format!(
        "{} serialises: {:.1} outstanding in {} below it (at most {} at once) while {:.1} \
         outstanding in it; requests wait {} ms in it vs {} ms below ({} of {} s)",
        s.layer,
        s.below_concurrency,
        s.below,
        s.below_max_concurrency,
        s.outstanding,
        ms(s.wait_ms),
        ms(s.below_ms),
        s.slots_serialised,
        s.slots_compared
    )
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use culprit_format::{layer_kind::*, layer_op, LayerEvent};

    use super::*;
    use crate::data::LayerStretch;

    const S: u64 = SLOT_NS;
    const MS: u64 = 1_000_000;

    fn ev(layer: u16, t: u64, req: u64, kind: u8) -> LayerEvent {
        LayerEvent {
            t_ns: t,
            req,
            obj: 5,
            offset: req * 65536,
            bytes: 65536,
            pid: 42,
            tid: 1,
            layer,
            kind,
            op: layer_op::READ,
            fd: 3,
        }
    }

    /// Seed 003's case, by hand: 16 requests admitted to `aio` (level 300) at once every
    /// 250 ms; its layer below (`os`, 200) serves them one at a time, 10 ms each, with
    /// `serial`, or all 16 at once for 160 ms without. Over 3 s.
    fn run(serial: bool) -> LayerStretch {
        let mut events = Vec::new();
        let mut req = 0;
        for batch in 0..12 {
            let start = 10 * S + batch * 250 * MS;
            for i in 0..16 {
                req += 1;
                let (issue, done) = if serial {
                    (start + i * 10 * MS, start + (i + 1) * 10 * MS)
                } else {
                    (start, start + 160 * MS)
                };
                events.push(ev(0, start, req, ADMIT));
                events.push(ev(1, issue, req, ISSUE));
                events.push(ev(1, done, req, COMPLT));
                events.push(ev(0, done, req, CALLBACK));
            }
        }
        LayerStretch {
            span: (10 * S, 13 * S),
            dropped: 0,
            layers: vec![(0, Arc::from("aio"), 300), (1, Arc::from("os"), 200)],
            events,
        }
    }

    #[test]
    fn a_layer_issuing_one_at_a_time_is_named() {
        let s = run(true);
        let (reqs, layers) = requests([&s]);
        let found = serialisations("n1", &reqs, &layers, 10 * S, 3, 13 * S);
        assert_eq!(found.len(), 1, "{found:?}");
        let f = &found[0];
        assert_eq!(
            (f.layer.as_str(), f.below.as_str(), f.pid),
            ("aio", "os", 42)
        );
        // Each batch's requests are outstanding 10, 20, … 160 ms in the aio layer: 1360 ms,
        // four batches a second: 5.44 on average; below it exactly one while busy (640 ms of
        // each second), never more.
        assert!((f.outstanding - 5.44).abs() < 1e-9, "{f:?}");
        assert!((f.below_concurrency - 1.0).abs() < 1e-9, "{f:?}");
        assert_eq!(f.below_max_concurrency, 1);
        // Latency (10 + 20 + … + 160) / 16 = 85 ms, of which 10 ms below: 75 ms waiting.
        assert!((f.wait_ms - 75.0).abs() < 1e-9, "{f:?}");
        assert!((f.below_ms - 10.0).abs() < 1e-6, "{f:?}");
        assert_eq!((f.slots_serialised, f.slots_compared), (3, 3));
        let line = describe(f);
        assert!(
            line.starts_with("aio serialises: 1.0 outstanding in os below it"),
            "{line}"
        );
    }

    #[test]
    fn a_layer_passing_all_its_requests_down_is_not() {
        let s = run(false);
        let (reqs, layers) = requests([&s]);
        assert!(serialisations("n1", &reqs, &layers, 10 * S, 3, 13 * S).is_empty());
    }
}
