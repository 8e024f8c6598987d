//! Stage 0 of a window: functions a tracer demoted on some node are compared as demoted on
//! every node ([`crate::demoted`]): the window's buckets are rewritten — a demoted function
//! merged with its callers into one component, or left out — before anything else looks at
//! them.

use std::sync::Arc;

use crate::analyzer::state::{MetricState, NodeBucket};
use crate::demoted::{Func, Merge, Rule};
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

/// What one merge does to this metric's components: `from` components are added into `into`
/// (`None`: left out).
struct Plan {
    moves: Vec<(CompIdx, Option<CompIdx>)>,
}

fn is(f: &Func, l: &CompLabel) -> bool {
    l.image.as_ref() == Some(&f.0) && l.name == f.1
}

/// The caller and callee names of an edge component (`caller → callee`).
fn edge_ends(name: &str) -> Option<(&str, &str)> {
    name.split_once(" → ")
}

fn plan(ms: &mut MetricState, rule: Rule, m: &Merge) -> Plan {
    let n = ms.result.comps.len();
    let mut moves = Vec::new();
    for c in 0..n {
        let l = ms.result.comps[c].clone();
        let into = match rule {
            Rule::Unaffected => continue,
            Rule::Drop => {
                if !m.demoted.iter().any(|f| is(f, &l)) {
                    continue;
                }
                None
            }
            Rule::DropEdges => {
                let Some((a, b)) = edge_ends(&l.name) else {
                    continue;
                };
                if !m.members().any(|f| *f.1 == *a || *f.1 == *b) {
                    continue;
                }
                None
            }
            Rule::Merge => {
                if l.bucket.is_some() || !m.members().any(|f| is(f, &l)) {
                    continue;
                }
                // Without a caller seen, the demoted function's time is in no traced
                // function: it is left out.
                (!m.callers.is_empty()).then(|| {
                    ms.component(&CompLabel {
                        program: l.program.clone(),
                        image: Some(Arc::clone(m.image())),
                        name: Arc::clone(&m.name),
                        bucket: None,
                    })
                })
            }
        };
        moves.push((c as CompIdx, into));
    }
    Plan { moves }
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
    let plans: Vec<Plan> = merges
        .iter()
        .filter(|m| m.from_ns < end)
        .map(|m| plan(ms, rule, m))
        .filter(|p| !p.moves.is_empty())
        .collect();
    if plans.is_empty() {
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
                        nb.vals.resize(nb.vals.len().max(n), 0.0);
                        for p in &plans {
                            for &(from, into) in &p.moves {
                                let v = std::mem::take(&mut nb.vals[from as usize]);
                                if let Some(to) = into {
                                    nb.vals[to as usize] += v;
                                }
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
                        for p in &plans {
                            for &(from, into) in &p.moves {
                                for s in 0..spb {
                                    let at = from as usize * spb + s;
                                    let v = std::mem::replace(&mut sv[at], fill);
                                    if let Some(to) = into {
                                        let t = &mut sv[to as usize * spb + s];
                                        *t = match (t.is_nan(), v.is_nan()) {
                                            (true, _) => v,
                                            (false, true) => *t,
                                            (false, false) => *t + v,
                                        };
                                    }
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
