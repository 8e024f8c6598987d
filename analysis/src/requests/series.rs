//! Without request marks: seed 004's robust PCA over one node's own interval × function matrix
//! of self time (rows: the tracer's intervals, one a second by default; columns: the functions
//! with the most self time; entries: self ns per interval). Functions that follow the node's
//! workload lie in the low-rank space; one that changes on its own — a method that became slow
//! for a stretch — is a column far from it (cosine of M(j) and L(j) below the threshold, seed
//! 004 equation 1), with its sparse part in the intervals where it strayed. Needs no peers and
//! no training: a single-node anomaly finder, reported per node.

use std::collections::{BTreeMap, HashMap};

use culprit_format::interval_flags;
use serde::{Deserialize, Serialize};

use super::rpca::{self, column_cosine, Matrix, RpcaOptions};
use crate::data::{Dataset, FuncId, NodeData};

/// Thresholds of the single-node analysis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SeriesOptions {
    /// A function strays below this cosine between its column of M and of L.
    pub cos_threshold: f64,
    /// … when its sparse part holds at least this share of the node's time.
    pub min_excess: f64,
}

/// Most functions (columns) per node: those with the most self time.
pub const MAX_FUNCTIONS: usize = 64;
/// Fewest intervals (rows) worth a decomposition.
pub const MIN_INTERVALS: usize = 10;

/// One node's single-node RPCA.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeSeries {
    /// Node.
    pub node: String,
    /// Intervals (rows).
    pub intervals: usize,
    /// Functions (columns).
    pub functions: usize,
    /// Iterations of RPCA.
    pub iterations: usize,
    /// Functions far from the low-rank space, lowest cosine first.
    pub flagged: Vec<SeriesFunction>,
}

/// A function whose self time strays from the node's own pattern.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SeriesFunction {
    /// Function.
    pub function: String,
    /// Image.
    pub image: String,
    /// cos(M(j), L(j)).
    pub cosine: f64,
    /// Σ of the positive entries of E, ns.
    pub excess_ns: f64,
    /// Σ of the negative entries of E (time missing from the pattern), ns, as a positive
    /// number.
    pub deficit_ns: f64,
    /// Intervals where |E| is at least the column's median of M.
    pub large_intervals: usize,
    /// Start of the first such interval, wall-clock ns.
    pub first_ns: u64,
    /// Start of the last one.
    pub last_ns: u64,
}

/// Every node with enough intervals, in dataset order.
pub fn analyze(ds: &Dataset, opts: &SeriesOptions) -> Vec<NodeSeries> {
    ds.nodes
        .iter()
        .filter_map(|n| node_series(ds, n, opts))
        .collect()
}

fn node_series(ds: &Dataset, node: &NodeData, opts: &SeriesOptions) -> Option<NodeSeries> {
    // Self time per interval start and function, all the node's processes added up.
    let mut rows: BTreeMap<u64, HashMap<FuncId, u64>> = BTreeMap::new();
    for t in &node.traces {
        for iv in &t.intervals {
            if iv.flags & (interval_flags::MISSED | interval_flags::PARTIAL) != 0 {
                continue;
            }
            let row = rows.entry(iv.start_ns).or_default();
            for e in &iv.entries {
                *row.entry(e.func).or_default() += e.excl_ns;
            }
        }
    }
    if rows.len() < MIN_INTERVALS {
        return None;
    }
    let mut totals: HashMap<FuncId, u64> = HashMap::new();
    for r in rows.values() {
        for (&f, &v) in r {
            *totals.entry(f).or_default() += v;
        }
    }
    let mut funcs: Vec<(FuncId, u64)> = totals.into_iter().filter(|&(_, v)| v > 0).collect();
    funcs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    funcs.truncate(MAX_FUNCTIONS);
    if funcs.is_empty() {
        return None;
    }
    let starts: Vec<u64> = rows.keys().copied().collect();
    let m = Matrix::from_fn(starts.len(), funcs.len(), |i, j| {
        rows[&starts[i]].get(&funcs[j].0).copied().unwrap_or(0) as f64
    });
    let out = rpca::rpca(&m, &RpcaOptions::default()).ok()?;
    let total: f64 = funcs.iter().map(|f| f.1 as f64).sum();
    let mut flagged = Vec::new();
    for (j, &(func, _)) in funcs.iter().enumerate() {
        let cosine = column_cosine(&m, &out.low_rank, j);
        if cosine >= opts.cos_threshold {
            continue;
        }
        let col: Vec<f64> = (0..starts.len()).map(|i| out.sparse.get(i, j)).collect();
        let excess_ns: f64 = col.iter().map(|v| v.max(0.0)).sum();
        let deficit_ns: f64 = col.iter().map(|v| (-v).max(0.0)).sum();
        if excess_ns + deficit_ns < opts.min_excess * total {
            continue;
        }
        let mut med: Vec<f64> = m.col(j).collect();
        med.sort_by(f64::total_cmp);
        let med = med[med.len() / 2];
        let large: Vec<usize> = (0..starts.len())
            .filter(|&i| col[i].abs() > 0.0 && col[i].abs() >= med)
            .collect();
        let key = ds.names.funcs.get(func);
        flagged.push(SeriesFunction {
            function: key.function.to_string(),
            image: key.image.to_string(),
            cosine,
            excess_ns,
            deficit_ns,
            large_intervals: large.len(),
            first_ns: large.first().map(|&i| starts[i]).unwrap_or(0),
            last_ns: large.last().map(|&i| starts[i]).unwrap_or(0),
        });
    }
    flagged.sort_by(|a, b| a.cosine.total_cmp(&b.cosine));
    Some(NodeSeries {
        node: node.name.clone(),
        intervals: starts.len(),
        functions: funcs.len(),
        iterations: out.iterations,
        flagged,
    })
}
