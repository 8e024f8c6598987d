//! Standing differences known for what they are: a node that differed from its peers in the
//! same way through a whole baseline has *another role* (it holds the metadata, it serves the
//! mount, it has another disk). Peer comparison alone cannot tell that from a fault present from
//! the start (seed 002's stated limit for unsupervised data); a baseline can.
//!
//! Training notes, per node and metric, each kept component's level in every baseline window
//! beside the median node's (and, for the report and the baseline's warnings, in how many
//! windows the node stood out from its peers as a whole). A component differs *standingly* when,
//! over the baseline, the node's difference from the median node kept its sign
//! ([`SIGN_CONSISTENCY`]), its level is at least [`MIN_RATIO`] times the median node's (or the
//! other way round) on average and in nearly every window ([`ROLE_SHARE`]), and the difference is [`SPREAD_FACTOR`] times the typical deviation of its
//! peers from the median node in that component. A node with such components has another role
//! on that metric: its [`RoleEntry`] goes into the thresholds file, and diagnosis compares it
//! against *its own* baseline — each of those components is brought to its peers' level by the
//! baseline's ratio before the window is scored ([`Adjust`]), as seed 002's supervised suspect
//! score compares a node with its own normal profiles — so it is convicted only when it changes
//! from its own normal, and it no longer pulls the median node or the pooled threshold. A node
//! whose difference began after the baseline is judged like any other.
//!
//! Components, not the node's whole score: a role shows in a few functions (postmark's io1 on
//! the testbed spends 1.9× its peers' time in `io_pwrite` in every window) while the score is
//! dominated by the loudest, noisiest ones (the idle wait's tens of seconds), so a role node may
//! stand out in only a few windows as a whole (3 of 11 there) though it differs the same way in
//! all of them.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::family::Metric;
use crate::model::{CompIdx, CompLabel};
use crate::score::median_in_place;
use crate::time::{fmt_sig, rfc3339};

/// A component differs standingly only if the node's difference from the median node kept its
/// sign: |Σ (node − median)| ≥ this × Σ |node − median| over the baseline windows (0.8: at
/// least 90 % of the difference on one side). Noise changes sign from window to window.
pub const SIGN_CONSISTENCY: f64 = 0.8;
/// …and if one level is at least this many times the other: the margin at which the resource
/// checklist calls a level different from the peers' (docs/resource-checklist.md). Healthy
/// peers of this machine's testbed differ by 5–17 % in CPU (docs/testbed.md), which training's
/// thresholds absorb.
pub const MIN_RATIO: f64 = 1.25;
/// …and if the node's mean difference is at least this many times its peers' typical deviation
/// from the median node in that component: a difference that stands out of the peers' own
/// spread, not one the spread could make.
pub const SPREAD_FACTOR: f64 = 3.0;
/// …and if it is at least this fraction of the median node's total over the metric's kept
/// components: a function a few samples' work in a window (the keep rule lets functions of
/// 5 ms of CPU in) can be 7× its peers' in every window without being what the node is for.
/// Postmark's io1 on the testbed: its extra `io_pwrite` time is 4 % of a node's time.
pub const MIN_SHARE: f64 = 0.01;
/// …and if the node's level was [`MIN_RATIO`] apart from the median node's, and
/// [`SPREAD_FACTOR`] times the window's typical deviation, on the same side, in at least this
/// share of the baseline windows: "through the whole baseline". A difference
/// that began part-way through (a fault in the baseline's second half keeps its sign as well as
/// a role does) is a change, not a role, and the baseline's warnings say so.
pub const ROLE_SHARE: f64 = 0.8;

/// Training: one node's evidence on one metric (accumulated window by window).
#[derive(Clone, Debug, Default)]
pub struct RoleStats {
    /// Windows the node was scored in.
    pub windows: u64,
    /// Of them, those in which it stood out from its peers.
    pub outstanding: u64,
    /// Per kept component, its levels over those windows.
    pub levels: HashMap<CompIdx, LevelSums>,
    /// Stretches (first and last window start, ns) in which the node stood out in k of 2k − 1
    /// windows: in a baseline, an anomaly unless the node has another role.
    pub stretches: Vec<(u64, u64)>,
    /// The k-of-(2k − 1) state behind `stretches`: the last windows' outcomes.
    recent: std::collections::VecDeque<bool>,
    /// True while the last window was in a stretch.
    flagging: bool,
}

/// Sums of one component's levels over a node's baseline windows.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct LevelSums {
    /// Σ the node's level (window sum; for distributions, the mean per-slot value).
    pub node: f64,
    /// Σ the median node's level in the same windows.
    pub median: f64,
    /// Σ |node − median|.
    pub abs_diff: f64,
    /// Windows summed.
    pub windows: u64,
    /// Of them, those in which the node's level was at least [`MIN_RATIO`] times the median
    /// node's and [`SPREAD_FACTOR`] times the window's typical deviation above it…
    pub over: u64,
    /// …and those in which it was as far below.
    pub under: u64,
}

impl RoleStats {
    /// Records a window in which the node stood out (`outstanding`) or not, for the
    /// k-of-(2k − 1) stretches.
    pub fn window(&mut self, start_ns: u64, outstanding: bool, k: usize) {
        self.windows += 1;
        self.outstanding += u64::from(outstanding);
        if self.recent.len() == 2 * k - 1 {
            self.recent.pop_front();
        }
        self.recent.push_back(outstanding);
        let flagged = self.recent.iter().filter(|&&a| a).count() >= k;
        match (flagged, self.flagging) {
            (true, true) => {
                if let Some(s) = self.stretches.last_mut() {
                    s.1 = start_ns;
                }
            }
            (true, false) => self.stretches.push((start_ns, start_ns)),
            _ => {}
        }
        self.flagging = flagged;
    }

    /// Adds one component's levels of a window: the node's, the median node's, and the nodes'
    /// typical (median absolute) deviation from the median node in that window, `spread`. A
    /// window counts as apart only when the node stands out of that spread too: a component of
    /// a few microseconds is 1.25× the median by chance in half the windows.
    pub fn level(&mut self, c: CompIdx, node: f64, median: f64, spread: f64) {
        let l = self.levels.entry(c).or_default();
        let d = node - median;
        let beyond = d.abs() > SPREAD_FACTOR * spread.max(0.0);
        l.node += node;
        l.median += median;
        l.abs_diff += d.abs();
        l.windows += 1;
        l.over += u64::from(beyond && node > 0.0 && node >= MIN_RATIO * median);
        l.under += u64::from(beyond && median > 0.0 && median >= MIN_RATIO * node);
    }
}

/// One node's evidence on one metric over every baseline (training run) it was scored in,
/// components by label.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    /// Windows the node was scored in.
    pub windows: u64,
    /// Of them, those in which it stood out from its peers.
    pub outstanding: u64,
    /// Per component, its levels over those windows.
    pub levels: HashMap<CompLabel, LevelSums>,
    /// Stretches in which it stood out in k of 2k − 1 windows: (run, first window start, last
    /// window start).
    pub stretches: Vec<(String, u64, u64)>,
}

impl Evidence {
    /// Adds a run's statistics (`labels` names its components).
    pub fn add(&mut self, run: &str, s: &RoleStats, labels: &[CompLabel]) {
        self.windows += s.windows;
        self.outstanding += s.outstanding;
        for (&c, l) in &s.levels {
            let Some(label) = labels.get(c as usize) else {
                continue;
            };
            let e = self.levels.entry(label.clone()).or_default();
            e.node += l.node;
            e.median += l.median;
            e.abs_diff += l.abs_diff;
            e.windows += l.windows;
            e.over += l.over;
            e.under += l.under;
        }
        self.stretches
            .extend(s.stretches.iter().map(|&(a, b)| (run.to_string(), a, b)));
    }
}

/// The nodes of another role on one metric, from every node's evidence (by node name): each
/// node's components that differ standingly ([`SIGN_CONSISTENCY`], [`MIN_RATIO`],
/// [`ROLE_SHARE`], [`SPREAD_FACTOR`]) over at least `min_windows` baseline windows (2k − 1: a verdict's own
/// span) and half of the node's, by at least the metric's `resolution` (a difference it cannot
/// measure — a retransmit every few seconds against none — is no role) and [`MIN_SHARE`] of
/// what a typical node does.
pub fn roles_among(
    nodes: &BTreeMap<String, Evidence>,
    min_windows: u64,
    resolution: f64,
) -> Vec<RoleEntry> {
    let mut out = Vec::new();
    for (name, e) in nodes {
        let enough = min_windows.max(1).max(e.windows.div_ceil(2));
        let total: f64 = e
            .levels
            .values()
            .filter(|l| l.windows > 0)
            .map(|l| l.median / l.windows as f64)
            .sum();
        let mut comps: Vec<RoleComponent> = e
            .levels
            .iter()
            .filter(|(_, l)| l.windows >= enough)
            .filter_map(|(label, l)| {
                let w = l.windows as f64;
                let (node, median) = (l.node / w, l.median / w);
                let diff = node - median;
                let consistent = diff.abs() * w >= SIGN_CONSISTENCY * l.abs_diff;
                let (lo, hi) = (node.min(median), node.max(median));
                let large = hi > 0.0 && hi >= MIN_RATIO * lo;
                let side = if diff > 0.0 { l.over } else { l.under };
                let throughout = side as f64 >= ROLE_SHARE * w;
                let mut spread: Vec<f64> = nodes
                    .iter()
                    .filter(|(other, _)| *other != name)
                    .filter_map(|(_, o)| o.levels.get(label))
                    .filter(|o| o.windows > 0)
                    .map(|o| o.abs_diff / o.windows as f64)
                    .collect();
                let apart =
                    spread.is_empty() || diff.abs() >= SPREAD_FACTOR * median_in_place(&mut spread);
                let measurable = diff.abs() >= resolution.max(MIN_SHARE * total) && diff != 0.0;
                (consistent && large && throughout && apart && measurable).then(|| RoleComponent {
                    label: label.clone(),
                    node,
                    peers: median,
                })
            })
            .collect();
        if comps.is_empty() {
            continue;
        }
        comps.sort_by(|a, b| a.label.cmp(&b.label));
        out.push(RoleEntry {
            node: name.clone(),
            windows: e.windows,
            outstanding: e.outstanding,
            components: comps,
        });
    }
    out
}

/// One node's standing difference on one metric, as a thresholds file keeps it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RoleEntry {
    /// The node.
    pub node: String,
    /// Baseline windows it was scored in.
    pub windows: u64,
    /// Of them, those in which it stood out from its peers.
    pub outstanding: u64,
    /// The components that make the difference.
    pub components: Vec<RoleComponent>,
}

/// A component of a role: its typical level on the node and on the median node.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RoleComponent {
    /// The component.
    #[serde(flatten)]
    pub label: CompLabel,
    /// The node's mean level in a baseline window (a window sum; for distributions, the mean
    /// per-second value).
    pub node: f64,
    /// The median node's.
    pub peers: f64,
}

impl RoleComponent {
    /// How the analyzer brings a value of the node to its peers' level.
    pub fn adjust(&self) -> Adjust {
        Adjust {
            node: self.node,
            peers: self.peers,
        }
    }

    /// The difference for people: `2.4× its peers'`, `0.42× its peers'`, or `+3.1 over its
    /// peers'` when one of the levels is zero.
    pub fn describe(&self) -> String {
        if self.node > 0.0 && self.peers > 0.0 {
            format!("{}× its peers'", fmt_sig(self.node / self.peers))
        } else if self.node >= self.peers {
            format!("{} where its peers have none", fmt_sig(self.node))
        } else {
            format!("none where its peers have {}", fmt_sig(self.peers))
        }
    }
}

/// Brings a role node's value of one component to its peers' level: scaled by the baseline's
/// ratio when both levels are positive (a role's difference grows with the load, as the work
/// behind it does), shifted by the baseline's difference otherwise (never below zero).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Adjust {
    /// The node's baseline level.
    pub node: f64,
    /// The median node's baseline level.
    pub peers: f64,
}

impl Adjust {
    /// The value as its peers would show it. NaN (an absent value) stays NaN.
    pub fn apply(&self, v: f64) -> f64 {
        if self.node > 0.0 && self.peers > 0.0 {
            v * (self.peers / self.node)
        } else {
            (v - (self.node - self.peers)).max(0.0)
        }
    }

    /// The inverse of [`Adjust::apply`] (the node's own normal for a peer-level value): root
    /// cause shows a role node's real values against its own normal.
    pub fn unapply(&self, v: f64) -> f64 {
        if self.node > 0.0 && self.peers > 0.0 {
            v * (self.node / self.peers)
        } else {
            (v + (self.node - self.peers)).max(0.0)
        }
    }
}

/// The roles of one metric, by node, as the analyzer applies them.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Roles {
    /// Per node name, its components' adjustments.
    pub by_node: HashMap<String, Vec<(CompLabel, Adjust)>>,
}

impl Roles {
    /// From a thresholds file's entries; `None` when there are none.
    pub fn from_entries(entries: &[RoleEntry]) -> Option<std::sync::Arc<Roles>> {
        if entries.is_empty() {
            return None;
        }
        let by_node = entries
            .iter()
            .map(|e| {
                let v = e
                    .components
                    .iter()
                    .map(|c| (c.label.clone(), c.adjust()))
                    .collect();
                (e.node.clone(), v)
            })
            .collect();
        Some(std::sync::Arc::new(Roles { by_node }))
    }
}

/// A node of another role, as the report shows it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RoleReport {
    /// The node.
    pub node: String,
    /// The metrics on which it differed from its peers through the baseline.
    pub metrics: Vec<RoleMetric>,
}

/// One metric of a [`RoleReport`].
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RoleMetric {
    /// The metric.
    pub metric: Metric,
    /// Baseline windows the node was scored in.
    pub windows: u64,
    /// Of them, those in which it stood out.
    pub outstanding: u64,
    /// The components that differ most (at most [`ROLE_REPORT_ROWS`]), most different first.
    pub components: Vec<RoleComponent>,
}

/// Components shown per metric of a role.
pub const ROLE_REPORT_ROWS: usize = 3;

/// The report's roles from each metric's entries (nodes in name order, metrics in the order
/// given).
pub fn report<'a>(entries: impl IntoIterator<Item = (Metric, &'a [RoleEntry])>) -> Vec<RoleReport> {
    let mut by_node: BTreeMap<String, Vec<RoleMetric>> = Default::default();
    for (metric, list) in entries {
        for e in list {
            let mut comps = e.components.clone();
            let size = |c: &RoleComponent| {
                let hi = c.node.max(c.peers);
                if hi > 0.0 {
                    (c.node - c.peers).abs() / hi
                } else {
                    0.0
                }
            };
            comps.sort_by(|a, b| size(b).total_cmp(&size(a)).then(a.label.cmp(&b.label)));
            comps.truncate(ROLE_REPORT_ROWS);
            by_node.entry(e.node.clone()).or_default().push(RoleMetric {
                metric,
                windows: e.windows,
                outstanding: e.outstanding,
                components: comps,
            });
        }
    }
    by_node
        .into_iter()
        .map(|(node, metrics)| RoleReport { node, metrics })
        .collect()
}

/// A role in a few words: `time: checksum_payload 2× its peers'; os: disk.await`.
pub fn summary(r: &RoleReport) -> String {
    r.metrics
        .iter()
        .map(|m| match m.components.first() {
            Some(c) if m.metric.is_os() => format!("{} {}", m.metric, c.describe()),
            Some(c) => format!("{}: {} {}", m.metric, c.label.name, c.describe()),
            None => m.metric.to_string(),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The warning for stretches of a baseline in which a node stood out from its peers in k of
/// 2k − 1 windows on `metrics` without having another role there: the baseline probably holds
/// an anomaly. `stretch` is the first and last window start.
pub fn baseline_anomaly(
    metrics: &[Metric],
    node: &str,
    stretch: (u64, u64),
    win_size_ns: u64,
) -> String {
    let names: Vec<String> = metrics.iter().map(|m| m.to_string()).collect();
    format!(
        "baseline: {node} stood out from its peers on {} from {} to {} but not through the \
         whole baseline — if it was not healthy then, its difference was learnt as normal; \
         choose a baseline without it",
        names.join(", "),
        rfc3339(stretch.0),
        rfc3339(stretch.1 + win_size_ns)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn label(n: &str) -> CompLabel {
        CompLabel::func("srv", n)
    }

    fn evidence(windows: u64, outstanding: u64, levels: &[(&str, f64, f64, f64)]) -> Evidence {
        let mut e = Evidence {
            windows,
            outstanding,
            ..Default::default()
        };
        for &(c, node, median, abs) in levels {
            e.levels.insert(
                label(c),
                LevelSums {
                    node: node * windows as f64,
                    median: median * windows as f64,
                    abs_diff: abs * windows as f64,
                    windows,
                    // As if every window were at the mean levels.
                    over: if node >= MIN_RATIO * median {
                        windows
                    } else {
                        0
                    },
                    under: if median >= MIN_RATIO * node {
                        windows
                    } else {
                        0
                    },
                },
            );
        }
        e
    }

    /// Four nodes; `n1` does 2× `a` in every window, peers stray ±0.1 around the median.
    fn group(n1: &[(&str, f64, f64, f64)], windows: u64) -> BTreeMap<String, Evidence> {
        let peer = [
            ("a", 1.05, 1.0, 0.1),
            ("b", 1.0, 1.0, 0.1),
            ("c", 0.95, 1.0, 0.1),
        ];
        let mut g: BTreeMap<String, Evidence> = ["n0", "n2", "n3"]
            .iter()
            .map(|n| (n.to_string(), evidence(windows, 0, &peer)))
            .collect();
        g.insert("n1".into(), evidence(windows, 0, n1));
        g
    }

    #[test]
    fn a_standing_difference_is_a_role() {
        // a: 2× its peers in every window; b: noise around the median; c: 10 % more, always.
        let n1 = [
            ("a", 2.0, 1.0, 1.0),
            ("b", 1.0, 1.0, 0.3),
            ("c", 1.1, 1.0, 0.1),
        ];
        let r = roles_among(&group(&n1, 10), 5, 0.01);
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(r[0].node, "n1");
        assert_eq!(r[0].components.len(), 1, "{r:?}");
        assert_eq!(r[0].components[0].label, label("a"));
        assert_eq!(r[0].components[0].describe(), "2× its peers'");
        // The sign changed in part of the baseline (mean 2×, but |Σd| < 0.8 Σ|d|): a change,
        // not a role.
        assert!(roles_among(&group(&[("a", 2.0, 1.0, 1.5)], 10), 5, 0.01).is_empty());
        // A fault that began half-way through the baseline: 3× in the second half, the sign
        // kept (the node never fell below the median) and 2× on average, but 1.25× apart in
        // only half the windows — a change, not a role.
        let mut g = group(&[("a", 2.0, 1.0, 1.0)], 10);
        g.get_mut("n1")
            .unwrap()
            .levels
            .get_mut(&label("a"))
            .unwrap()
            .over = 5;
        assert!(roles_among(&g, 5, 0.01).is_empty());
        // Too few windows to say "through the whole baseline".
        assert!(roles_among(&group(&[("a", 2.0, 1.0, 1.0)], 4), 5, 0.01).is_empty());
        // Within the peers' own spread (they stray by 0.1; 1.25× of 0.3 is 0.075 apart).
        let mut g = group(&[("a", 0.375, 0.3, 0.075)], 10);
        for p in ["n0", "n2", "n3"] {
            g.insert(p.into(), evidence(10, 0, &[("a", 0.3, 0.3, 0.1)]));
        }
        assert!(roles_among(&g, 5, 0.01).is_empty());
        // Below what the metric can measure.
        assert!(roles_among(&group(&[("a", 2.0, 1.0, 1.0)], 10), 5, 1.5).is_empty());
    }

    #[test]
    fn evidence_adds_runs_by_label() {
        let mut s = RoleStats::default();
        for i in 0..5 {
            s.window(i * 10, true, 3);
            // 2× the median, beyond its peers' spread in the first three windows only.
            s.level(1, 4.0, 2.0, if i < 3 { 0.5 } else { 1.0 });
        }
        let mut e = Evidence::default();
        e.add("r0", &s, &[label("x"), label("y")]);
        e.add("r1", &s, &[label("y"), label("x")]);
        assert_eq!(e.windows, 10);
        assert_eq!(e.levels[&label("y")].windows, 5);
        assert_eq!(e.levels[&label("x")].windows, 5);
        assert_eq!(e.levels[&label("x")].over, 3);
        assert_eq!(e.levels[&label("x")].under, 0);
        assert_eq!(e.stretches.len(), 2);
        assert_eq!(e.stretches[1], ("r1".to_string(), 20, 40));
    }

    #[test]
    fn adjustment_and_its_inverse() {
        let a = Adjust {
            node: 20.0,
            peers: 10.0,
        };
        assert_eq!(a.apply(30.0), 15.0);
        assert_eq!(a.unapply(15.0), 30.0);
        assert!(a.apply(f64::NAN).is_nan());
        let only_node = Adjust {
            node: 4.0,
            peers: 0.0,
        };
        assert_eq!(only_node.apply(5.0), 1.0);
        assert_eq!(only_node.apply(1.0), 0.0);
        assert_eq!(only_node.unapply(1.0), 5.0);
    }

    #[test]
    fn stretches_of_k_in_2k_minus_1() {
        let mut s = RoleStats::default();
        let seq = [
            true, true, false, true, true, false, false, false, false, false,
        ];
        for (i, &o) in seq.iter().enumerate() {
            s.window(i as u64 * 10, o, 3);
        }
        assert_eq!(s.stretches, [(30, 50)]);
        assert_eq!(s.outstanding, 4);
    }
}
