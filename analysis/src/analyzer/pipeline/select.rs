//! Stages 1 and 2 of a window: each node's data over it ([`NodeWindow`]: which of its seconds
//! are present, its sums scaled to the whole window) and which nodes are compared, and the keep
//! rule (components reaching the metric's minimum join the kept set).
//!
//! **Gaps.** A node's second (slot) is *present* when one of its writers covered it with a
//! whole interval and none of them missed it. A node is compared in a window when at least
//! [`MIN_PRESENT`] of the window's slots are present; its sums are then scaled to the whole
//! window, so that a window missing a few seconds is still evidence. Scaling is per writer
//! first: a writer that missed seconds has its sum scaled over the seconds it was alive by the
//! seconds it was observed (alive / present), so a process whose flusher starved is never
//! extrapolated from another process's seconds; then the node's sum is scaled by the window's
//! length over the seconds any of its writers was alive (a late start, an early stop). The
//! values of a writer's partial intervals (it started or stopped inside them, or woke too late
//! to place their first calls) count only where another writer covered those slots whole and
//! the writer missed nothing in the window: elsewhere they are a fraction of a second of
//! unknown length. Missing data is never read as zeros.
//!
//! Distribution families compare the per-slot values of the present slots only.

use crate::analyzer::state::{MetricState, NodeBucket, WindowEvent, MIN_PRESENT};
use crate::family::KeepRule;
use crate::model::{CompIdx, PeerIdx};

use super::window::Rows;

/// A node's data over one window.
#[derive(Clone, Debug, Default)]
pub(in crate::analyzer) struct NodeWindow {
    /// Share of the window's slots present (0 without data).
    pub(in crate::analyzer) present: f64,
    /// Sum of every component over the window, scaled to the whole window (empty when the
    /// node is not compared).
    pub(in crate::analyzer) sums: Vec<f64>,
    /// Per slot of the window (distribution families): present.
    pub(in crate::analyzer) slots: Vec<bool>,
}

impl NodeWindow {
    /// True when the node is compared in the window.
    pub(super) fn compared(&self) -> bool {
        self.present >= MIN_PRESENT
    }
}

/// Ones among the first `n` bits.
fn ones(bits: &[u64], n: usize) -> usize {
    let mut c = 0;
    for (i, &w) in bits.iter().enumerate() {
        let left = n.saturating_sub(i * 64);
        if left == 0 {
            break;
        }
        let w = if left < 64 {
            w & ((1u64 << left) - 1)
        } else {
            w
        };
        c += w.count_ones() as usize;
    }
    c
}

/// What stage 1 knows of one writer over the window.
#[derive(Clone, Copy, Debug)]
struct WriterSpan {
    id: u64,
    missed: bool,
    alive: usize,
    present: usize,
}

/// Stage 1 for one node: its [`NodeWindow`] over the window's buckets `rows` (into `out`,
/// reused). `slots` asks for the per-slot presence (distribution families).
pub(super) fn node_window(
    ms: &MetricState,
    rows: &Rows<'_>,
    node: PeerIdx,
    slots: bool,
    out: &mut NodeWindow,
) {
    let spb = ms.slots_per_bucket;
    let total = rows.len() * spb;
    let n_comps = ms.result.comps.len();
    out.present = 0.0;
    out.sums.clear();
    out.slots.clear();
    let buckets: Vec<Option<&NodeBucket>> = rows
        .iter()
        .map(|r| {
            r.and_then(|r| r.get(node))
                .filter(|nb| !nb.writers.is_empty())
        })
        .collect();
    if buckets.iter().all(Option::is_none) {
        return;
    }
    let words = spb.div_ceil(64);
    // Pass 1: which writers missed something in the window.
    let mut spans: Vec<WriterSpan> = Vec::new();
    for nb in buckets.iter().flatten() {
        for wb in &nb.writers {
            let missed = wb.missed.iter().any(|&w| w != 0);
            match spans.iter_mut().find(|s| s.id == wb.id) {
                Some(s) => s.missed |= missed,
                None => spans.push(WriterSpan {
                    id: wb.id,
                    missed,
                    alive: 0,
                    present: 0,
                }),
            }
        }
    }
    // Pass 2: the node's present and alive slots, each writer's.
    let (mut present, mut alive) = (0usize, 0usize);
    let mut full = vec![0u64; words];
    let mut missed = vec![0u64; words];
    let mut live = vec![0u64; words];
    for nb in &buckets {
        full.fill(0);
        missed.fill(0);
        live.fill(0);
        if let Some(nb) = nb {
            for wb in &nb.writers {
                let span = spans.iter_mut().find(|s| s.id == wb.id).expect("seen");
                let mut w_alive = 0;
                let mut w_present = 0;
                for i in 0..words {
                    full[i] |= wb.full[i];
                    missed[i] |= wb.missed[i];
                    // A writer that missed seconds was alive in its partial intervals too (it
                    // woke late in them); one that did not started or stopped there.
                    let mut a = wb.full[i] | wb.missed[i];
                    if span.missed {
                        a |= wb.partial[i];
                    }
                    live[i] |= a;
                    w_alive += ones(&[a], spb.saturating_sub(i * 64).min(64));
                    w_present += ones(
                        &[wb.full[i] & !wb.missed[i]],
                        spb.saturating_sub(i * 64).min(64),
                    );
                }
                span.alive += w_alive;
                span.present += w_present;
            }
        }
        let here: Vec<u64> = (0..words).map(|i| full[i] & !missed[i]).collect();
        present += ones(&here, spb);
        alive += ones(&live, spb);
        if slots {
            out.slots
                .extend((0..spb).map(|s| here[s / 64] >> (s % 64) & 1 == 1));
        }
    }
    out.present = present as f64 / total as f64;
    if !out.compared() || alive == 0 {
        return;
    }
    // Pass 3: the sums, each writer scaled over its own seconds, then the node over the window.
    out.sums.resize(n_comps, 0.0);
    for nb in buckets.iter().flatten() {
        let node_full: Vec<u64> = (0..words)
            .map(|i| nb.writers.iter().fold(0, |a, w| a | w.full[i]))
            .collect();
        for wb in &nb.writers {
            let span = spans.iter().find(|s| s.id == wb.id).expect("seen");
            if span.present > 0 {
                let f = span.alive as f64 / span.present as f64;
                for (o, &v) in out.sums.iter_mut().zip(&wb.vals) {
                    *o += v * f;
                }
            }
            let part_covered = (0..words).all(|i| wb.partial[i] & !node_full[i] == 0);
            if !span.missed && part_covered {
                for (o, &v) in out.sums.iter_mut().zip(&wb.part) {
                    *o += v;
                }
            }
        }
    }
    if alive < total {
        let f = total as f64 / alive as f64;
        for o in &mut out.sums {
            *o *= f;
        }
    }
}

/// Stage 1: every node's [`NodeWindow`] (into `windows`, reused); returns the nodes compared.
pub(super) fn node_windows(
    ms: &MetricState,
    rows: &Rows<'_>,
    windows: &mut Vec<NodeWindow>,
) -> Vec<PeerIdx> {
    let n = ms.nodes.len();
    windows.resize_with(n, NodeWindow::default);
    let slots = ms.per_slot;
    for (node, w) in windows.iter_mut().enumerate() {
        node_window(ms, rows, node, slots, w);
    }
    (0..n).filter(|&node| windows[node].compared()).collect()
}

/// Stage 2, the keep rule: components reaching the minimum in this window (on some compared
/// node, its sums scaled to the window) join the kept set.
pub(super) fn keep_rule(ms: &mut MetricState, windows: &[NodeWindow], compared: &[PeerIdx]) {
    match ms.result.config.keep {
        KeepRule::AtLeast(min) => {
            let n_comps = ms.result.comps.len();
            for c in 0..n_comps {
                // The parts of a histogram follow their whole.
                if ms.kept[c] || ms.result.comps[c].bucket.is_some() {
                    continue;
                }
                let max = compared
                    .iter()
                    .filter_map(|&n| windows[n].sums.get(c))
                    .fold(0.0f64, |a, &b| a.max(b));
                if max >= min {
                    ms.keep(c as CompIdx);
                }
            }
        }
        KeepRule::All => {
            for c in 0..ms.result.comps.len() {
                if ms.result.comps[c].bucket.is_none() {
                    ms.keep(c as CompIdx);
                }
            }
        }
        KeepRule::SameAs(_) => {}
    }
}

/// What a window was for the nodes not scored in it and those compared on part of it: each
/// one's k-of-(2k − 1) filters, its counts and gap stretches, the window's event. `scored` is
/// false when too few nodes could be compared for anyone to be scored.
pub(super) fn note_gaps(
    ms: &mut MetricState,
    k: usize,
    windows: &[NodeWindow],
    scored: bool,
    start: u64,
    ev: &mut WindowEvent,
) {
    let end = start + ms.result.windows_ns.size_ns;
    let shift = ms.result.windows_ns.shift_ns;
    // Enough nodes were running for the window to be compared: a window lost to gaps, not one
    // before the group began.
    let running = ms
        .result
        .nodes
        .iter()
        .filter(|nr| nr.first_full_ns.is_some_and(|f| f <= start))
        .count();
    let expected = running >= crate::analyzer::MIN_NODES;
    for (node, ns) in ms.nodes.iter_mut().enumerate() {
        let nr = &mut ms.result.nodes[node];
        let w = windows.get(node);
        let present = w.map_or(0.0, |w| w.present);
        let compared = w.is_some_and(NodeWindow::compared);
        let begun = nr.first_ns.is_some_and(|f| f < end);
        // Past the node's first whole interval: a gap here is its own, not its start.
        let inside = nr.first_full_ns.is_some_and(|f| f <= start);
        if compared && present < 1.0 {
            nr.partial += u64::from(scored);
            if scored {
                ev.partial.push((node, present));
            }
            if inside && scored {
                nr.note_gap(start, shift, false, present);
            }
        }
        if compared && scored {
            continue;
        }
        if begun && !compared {
            nr.incomplete += 1;
            ev.incomplete.push(node);
            if inside {
                nr.note_gap(start, shift, true, present);
            }
        }
        // A fault could hide in a window the node's data reached, once its first whole
        // interval was in, if the window could have been compared.
        let could_hide = begun && inside && (expected || !compared);
        ns.gap(k, could_hide);
    }
}
