//! Peers stay comparable when a tracer demotes functions (record kind 17).
//!
//! The runtime keeps its cost within a budget by *demoting* functions — tiny ones called very
//! often — to untraced while the program runs (docs/tracer.md, "Cost budget"). On the node
//! that demoted `f`, from then on `f` has no calls and its time sits in the self time of the
//! traced frames it was called from (its callers); on its peers `f` is still traced. Compared
//! as they are, that node would look different in `f`'s count and time and in its callers'
//! time although nothing is wrong with it.
//!
//! So a function demoted on *any* node is treated as demoted on *every* node, from the
//! earliest demotion on (every window that ends after it):
//!
//! * `time` (and every family whose values are self times): `f` and the callers the runtime
//!   saw it called from are compared as **one component**, their self times summed — the sum
//!   is the same whether `f` was traced or not ([`Rule::Merge`]);
//! * `count`, `latency`: `f`'s components are left out on every node; its callers' calls and
//!   durations do not change when `f` is demoted, and stay ([`Rule::Drop`]);
//! * caller → callee edges: every edge that names `f` or one of those callers is left out
//!   ([`Rule::DropEdges`]: a demoted `f` moves its callees' edges to its callers);
//! * samples and OS metrics do not depend on tracing and are left alone.
//!
//! Merges chain: when a caller is demoted in turn, its own callers join the same component.
//! The analyzer applies this at each window's close (stage 0 of the pipeline), so a demotion
//! recorded by one node after its peers' intervals were read still applies to them (`--follow`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use crate::data::{Dataset, FuncId};

/// How a family's components are compared once functions were demoted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    /// The family does not read the tracer's function calls.
    Unaffected,
    /// Self times: a demoted function and its callers become one component.
    Merge,
    /// Calls, call durations: a demoted function's components are left out.
    Drop,
    /// Caller → callee edges: edges that name a demoted function or one of its callers are
    /// left out.
    DropEdges,
}

/// A function as components name it: image and name.
pub type Func = (Arc<str>, Arc<str>);

/// Functions compared together from a time on, because a tracer demoted some of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Merge {
    /// The earliest demotion among them on any node (wall-clock ns): windows that end after it
    /// are compared merged.
    pub from_ns: u64,
    /// The demoted functions.
    pub demoted: Vec<Func>,
    /// The callers they were seen called from (not demoted themselves).
    pub callers: Vec<Func>,
    /// Name of the merged component (`caller, caller + demoted f`); its image is the first
    /// demoted function's.
    pub name: Arc<str>,
}

impl Merge {
    /// The merged component's image.
    pub fn image(&self) -> &Arc<str> {
        &self.demoted[0].0
    }

    /// Every function of the merge.
    pub fn members(&self) -> impl Iterator<Item = &Func> {
        self.demoted.iter().chain(&self.callers)
    }
}

/// Union-find over function ids.
struct Sets(HashMap<FuncId, FuncId>);

impl Sets {
    fn root(&mut self, f: FuncId) -> FuncId {
        let p = *self.0.entry(f).or_insert(f);
        if p == f {
            return f;
        }
        let r = self.root(p);
        self.0.insert(f, r);
        r
    }

    fn join(&mut self, a: FuncId, b: FuncId) {
        let (ra, rb) = (self.root(a), self.root(b));
        if ra != rb {
            self.0.insert(ra.max(rb), ra.min(rb));
        }
    }
}

/// The merges every node's demotions call for (see the module docs), in a stable order.
pub fn merges(ds: &Dataset) -> Vec<Merge> {
    let mut first: BTreeMap<FuncId, u64> = BTreeMap::new();
    let mut sets = Sets(HashMap::new());
    for t in ds.nodes.iter().flat_map(|n| &n.traces) {
        for d in &t.demotions {
            for e in &d.entries {
                let at = first.entry(e.func).or_insert(d.head.at_ns);
                *at = (*at).min(d.head.at_ns);
                sets.root(e.func);
                for &c in e.callers.iter().flatten() {
                    sets.join(e.func, c);
                }
            }
        }
    }
    let mut groups: BTreeMap<FuncId, (u64, BTreeSet<FuncId>, BTreeSet<FuncId>)> = BTreeMap::new();
    let all: Vec<FuncId> = sets.0.keys().copied().collect();
    for f in all {
        let r = sets.root(f);
        let g = groups
            .entry(r)
            .or_insert((u64::MAX, BTreeSet::new(), BTreeSet::new()));
        match first.get(&f) {
            Some(&at) => {
                g.0 = g.0.min(at);
                g.1.insert(f);
            }
            None => {
                g.2.insert(f);
            }
        }
    }
    let func = |f: FuncId| {
        let k = ds.names.funcs.get(f);
        (k.image.clone(), k.function.clone())
    };
    let mut out: Vec<Merge> = groups
        .into_values()
        .map(|(from_ns, demoted, callers)| {
            let demoted: Vec<Func> = demoted.into_iter().map(func).collect();
            let callers: Vec<Func> = callers.into_iter().map(func).collect();
            let name = merged_name(&demoted, &callers);
            Merge {
                from_ns,
                demoted,
                callers,
                name: Arc::from(name),
            }
        })
        .collect();
    out.sort_by(|a, b| (a.from_ns, &a.name).cmp(&(b.from_ns, &b.name)));
    out
}

/// What the report says of each demotion: which node's tracer demoted what, when and why, and
/// how the functions are compared.
pub fn notes(ds: &Dataset) -> Vec<String> {
    let mut out = Vec::new();
    for node in &ds.nodes {
        for t in &node.traces {
            for d in &t.demotions {
                let names: Vec<&str> = d
                    .entries
                    .iter()
                    .map(|e| ds.names.funcs.get(e.func).function.as_ref())
                    .collect();
                if names.is_empty() {
                    continue;
                }
                let why = if d.head.budget_ppm == 0 {
                    "named in CULPRIT_DEMOTE".to_string()
                } else {
                    format!(
                        "its cost, about {} of the program's CPU time, was above its budget of {}",
                        percent(d.head.cost_ppm),
                        percent(d.head.budget_ppm)
                    )
                };
                out.push(format!(
                    "{}: the tracer of pid {} stopped tracing {} at {} ({why}); every node's \
                     data is compared as if they were untraced from then on (left out of count \
                     and latency, merged with their callers in time)",
                    node.name,
                    t.pid,
                    list(&names),
                    crate::time::rfc3339(d.head.at_ns),
                ));
            }
        }
    }
    out
}

fn percent(ppm: u32) -> String {
    let p = ppm as f64 / 1e4;
    if p >= 10.0 {
        format!("{p:.0} %")
    } else {
        format!("{p:.1} %")
    }
}

fn list(names: &[&str]) -> String {
    if names.len() <= 5 {
        names.join(", ")
    } else {
        format!("{} and {} more", names[..5].join(", "), names.len() - 5)
    }
}

/// The earliest demotion of each function demoted on some node (wall-clock ns).
pub fn first_demotions(ds: &Dataset) -> HashMap<FuncId, u64> {
    let mut out: HashMap<FuncId, u64> = HashMap::new();
    for t in ds.nodes.iter().flat_map(|n| &n.traces) {
        for d in &t.demotions {
            for e in &d.entries {
                let at = out.entry(e.func).or_insert(d.head.at_ns);
                *at = (*at).min(d.head.at_ns);
            }
        }
    }
    out
}

/// The CPU cost of one traced call in the process of `t`, ns, as its runtime measured it
/// (Info `call_cost_ps`; 0 when unknown).
pub fn call_ns(t: &crate::data::TraceFile) -> f64 {
    t.info(culprit_format::info_keys::CALL_COST_PS)
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v > 0.0)
        .map_or(0.0, |ps| ps / 1000.0)
}

/// What names the tracing overhead of a demoted function's calls on a node that traced them
/// (`time` only: never compared, taken out of the function's merged component).
pub const OVERHEAD_PREFIX: &str = "\u{1}tracing overhead of ";

/// The label of the tracing overhead of `function`'s calls.
pub fn overhead_label(
    program: Option<Arc<str>>,
    image: &Arc<str>,
    function: &str,
) -> crate::model::CompLabel {
    crate::model::CompLabel {
        program,
        image: Some(Arc::clone(image)),
        name: Arc::from(format!("{OVERHEAD_PREFIX}{function}")),
        bucket: None,
    }
}

/// `c1, c2 + demoted f` (the callers first: their self time holds the demoted functions'),
/// at most three names of each kind.
fn merged_name(demoted: &[Func], callers: &[Func]) -> String {
    let list = |v: &[Func]| {
        let mut s = v
            .iter()
            .take(3)
            .map(|f| f.1.as_ref())
            .collect::<Vec<_>>()
            .join(", ");
        if v.len() > 3 {
            s.push_str(&format!(" and {} more", v.len() - 3));
        }
        s
    };
    if callers.is_empty() {
        format!("demoted {}", list(demoted))
    } else {
        format!("{} + demoted {}", list(callers), list(demoted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(name: &str) -> Func {
        (Arc::from("prog"), Arc::from(name))
    }

    #[test]
    fn names() {
        assert_eq!(
            merged_name(&[f("leaf")], &[f("a"), f("b")]),
            "a, b + demoted leaf"
        );
        assert_eq!(merged_name(&[f("leaf")], &[]), "demoted leaf");
        let many: Vec<Func> = ["a", "b", "c", "d", "e"].iter().map(|n| f(n)).collect();
        assert_eq!(
            merged_name(&[f("x")], &many),
            "a, b, c and 2 more + demoted x"
        );
    }

    #[test]
    fn sets_chain() {
        let mut s = Sets(HashMap::new());
        s.join(3, 5);
        s.join(5, 9);
        s.join(1, 2);
        assert_eq!(s.root(9), s.root(3));
        assert_ne!(s.root(1), s.root(3));
    }
}
