//! A node slowed as a whole: the white-box metrics' evidence for the checklist's step 8 (every
//! traced function slower per call alike, calls not up).

use crate::model::PeerIdx;
use crate::score::median_in_place;

use super::levels::{FunctionLevel, Levels, MARGIN};
use super::observation::Observation;
use super::signs::{Class, Direction};

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
/// function's calls at most [`MARGIN`]× its peers'): every call takes longer, whichever function
/// it is in, while the node does no more — it waits for a CPU, or its machine is slower. A closed
/// loop does fewer calls, an open one the same: either way, calls are not up.
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
    /// diverging when the node is slowed as a whole and `faulty` (a white-box metric finds
    /// it faulty, with `anomalous_windows`).
    pub(super) fn observation(&self, faulty: bool, anomalous_windows: u64) -> Observation {
        Observation {
            metric: "time per call".to_string(),
            instance: Some(format!(
                "{} of {} functions slower, calls {:.2}×",
                self.slower, self.functions, self.calls
            )),
            class: Class::Slowdown,
            direction: if self.per_call >= SLOWER {
                Direction::Up
            } else {
                Direction::Level
            },
            ratio: Some(self.per_call),
            node: self.per_call,
            peers: 1.0,
            unit: "× peers".to_string(),
            faulty,
            anomalous_windows,
            share: None,
            small: false,
            diverges: self.whole() && faulty,
        }
    }
}
