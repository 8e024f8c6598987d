//! Stage 0 of a window: functions a tracer demoted on some node are compared as demoted on
//! every node ([`crate::demoted`]): the window's buckets are rewritten — a demoted function
//! merged with its callers into one component, or left out — before anything else looks at
//! them.

use std::sync::Arc;

use crate::analyzer::state::{MetricState, NodeBucket};
use crate::demoted::{Func, Merge, Rule, OVERHEAD_PREFIX};
use crate::model::{CompIdx, CompLabel};

use super::window::{Rows, SlotRows};

/// A window's buckets rewritten by the merges in effect.
pub(super) struct Merged {
    rows: Vec<Option<Vec<NodeBucket>>>,
    slots: Vec<Option<Vec<Vec<f64>>>>,
}

impl Merged {
    pub(super) fn rows(&self) -> Rows<'_> {
        self.rows.iter().map(Option::as_ref).collect()
    }

    pub(super) fn slots(&self) -> SlotRows<'_> {
        self.slots.iter().map(Option::as_ref).collect()
    }
}

/// What the merges do to one component: its values are added, times `factor`, into `into`
/// (`None`: left out).
#[derive(Clone, Copy)]
struct Move {
    from: CompIdx,
    into: Option<CompIdx>,
    factor: f64,
}

fn is(f: &Func, l: &CompLabel) -> bool {
    l.image.as_ref() == Some(&f.0) && l.name == f.1
}

/// The caller and callee names of an edge component (`caller → callee`).
fn edge_ends(name: &str) -> Option<(&str, &str)> {
    name.split_once(" → ")
}

/// The moves of merge `m` under `rule`.
fn plan(ms: &mut MetricState, rule: Rule, m: &Merge, moves: &mut Vec<Move>) {
    let n = ms.result.comps.len();
    let merged = |ms: &mut MetricState, l: &CompLabel| {
        ms.component(&CompLabel {
            program: l.program.clone(),
            image: Some(Arc::clone(m.image())),
            name: Arc::clone(&m.name),
            bucket: None,
        })
    };
    for c in 0..n {
        let l = ms.result.comps[c].clone();
        let (into, factor) = match rule {
            Rule::Unaffected => continue,
            Rule::Drop => {
                if !m.demoted.iter().any(|f| is(f, &l)) {
                    continue;
                }
                (None, 0.0)
            }
            Rule::DropEdges => {
                let Some((a, b)) = edge_ends(&l.name) else {
                    continue;
                };
                if !m.members().any(|f| *f.1 == *a || *f.1 == *b) {
                    continue;
                }
                (None, 0.0)
            }
            Rule::Merge => {
                if l.bucket.is_some() {
                    continue;
                }
                // The hooks' time the demoted functions' calls cost a node that still traced
                // them, in them and their callers: taken out of the merged component.
                let overhead = l.name.strip_prefix(OVERHEAD_PREFIX).is_some_and(|f| {
                    m.demoted
                        .iter()
                        .any(|d| *d.1 == *f && l.image.as_ref() == Some(&d.0))
                });
                if !overhead && !m.members().any(|f| is(f, &l)) {
                    continue;
                }
                // Without a caller seen, the demoted functions' time is in no traced
                // function: they are left out.
                let into = (!m.callers.is_empty()).then(|| merged(ms, &l));
                (into, if overhead { -1.0 } else { 1.0 })
            }
        };
        moves.push(Move {
            from: c as CompIdx,
            into,
            factor,
        });
    }
}

/// The window's buckets with the merges in effect before `end` applied, or `None` when none
/// applies to this metric.
pub(super) fn apply(
    ms: &mut MetricState,
    merges: &[Merge],
    rows: &Rows<'_>,
    slots: &SlotRows<'_>,
    end: u64,
) -> Option<Merged> {
    let rule = ms.result.config.family.demoted();
    if rule == Rule::Unaffected {
        return None;
    }
    let mut moves = Vec::new();
    for m in merges.iter().filter(|m| m.from_ns < end) {
        plan(ms, rule, m, &mut moves);
    }
    // An overhead no merge took (there should be none) is never compared.
    for (c, l) in ms.result.comps.iter().enumerate() {
        if l.name.starts_with(OVERHEAD_PREFIX) && !moves.iter().any(|m| m.from as usize == c) {
            moves.push(Move {
                from: c as CompIdx,
                into: None,
                factor: 0.0,
            });
        }
    }
    if moves.is_empty() {
        return None;
    }
    let n = ms.result.comps.len();
    let spb = ms.slots_per_bucket;
    let fill = ms.slot_fill;
    let rows = rows
        .iter()
        .map(|r| {
            r.map(|nodes| {
                nodes
                    .iter()
                    .map(|nb| {
                        let mut nb = nb.clone();
                        // Each writer's sums, over its whole and its partial intervals alike.
                        for wb in &mut nb.writers {
                            for vals in [&mut wb.vals, &mut wb.part] {
                                move_values(vals, n, &moves);
                            }
                        }
                        nb
                    })
                    .collect()
            })
        })
        .collect();
    let slots = slots
        .iter()
        .map(|r| {
            r.map(|nodes| {
                nodes
                    .iter()
                    .map(|sv| {
                        let mut sv = sv.clone();
                        if sv.is_empty() {
                            return sv;
                        }
                        sv.resize(sv.len().max(n * spb), fill);
                        for m in &moves {
                            for s in 0..spb {
                                let at = m.from as usize * spb + s;
                                let v = m.factor * std::mem::replace(&mut sv[at], fill);
                                if let Some(to) = m.into {
                                    let t = &mut sv[to as usize * spb + s];
                                    *t = match (t.is_nan(), v.is_nan()) {
                                        (true, _) => v,
                                        (false, true) => *t,
                                        (false, false) => *t + v,
                                    };
                                }
                            }
                        }
                        sv
                    })
                    .collect()
            })
        })
        .collect();
    Some(Merged { rows, slots })
}

/// Applies `moves` to one set of sums over `n` components (padded with zeros to `n`).
fn move_values(vals: &mut Vec<f64>, n: usize, moves: &[Move]) {
    if vals.is_empty() {
        return;
    }
    vals.resize(vals.len().max(n), 0.0);
    for m in moves {
        let v = std::mem::take(&mut vals[m.from as usize]);
        if let Some(to) = m.into {
            vals[to as usize] += m.factor * v;
        }
    }
    // An overhead estimated above what was measured leaves nothing.
    for m in moves {
        if let Some(to) = m.into {
            vals[to as usize] = vals[to as usize].max(0.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edge_names() {
        assert_eq!(edge_ends("a → b"), Some(("a", "b")));
        assert_eq!(edge_ends("(root) → b"), Some(("(root)", "b")));
        assert_eq!(edge_ends("plain"), None);
    }
}
