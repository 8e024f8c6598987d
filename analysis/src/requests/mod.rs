//! Seed 004 (CloudDiag): the anomalous *method and replica* from the latencies of the calls
//! made in sampled requests, with no training and on any number of nodes (`culprit diagnose
//! --requests`; docs/requests.md).
//!
//! 1. Requests are assembled from the tracer's request events and grouped into *categories* by
//!    call tree (seed 004 §V.A; [`tree`]).
//! 2. A category is anomalous when its requests' latencies are over-dispersed: coefficient of
//!    variation above [`RequestsOptions::cv_threshold`] (seed 004 §V.A).
//! 3. In each anomalous category the request × method matrix (rows: requests; columns: the
//!    calls of the call tree in depth-first order; entries: their exclusive time) is split by
//!    robust PCA into low-rank and sparse parts, M = L + E ([`rpca`]). A method is anomalous
//!    when the cosine of M(j) and L(j) is below [`RequestsOptions::cos_threshold`] (seed 004
//!    §V.B, equation 1); its *replicas* are the nodes of the rows where E is large — at least
//!    the column's median of M — when E on their rows stands out from the other nodes'
//!    ([`significant`]).
//! 4. Methods (with their replica) are ranked by the number of categories that flag them
//!    (seed 004 §V.B), then by the time E puts on them.
//!
//! Where culprit departs from the seed: entries are *exclusive* time, not a method's whole
//! execution time, so a slow callee does not corrupt its callers' columns as well (with
//! inclusive times every ancestor of the slow method is flagged too, tied with it); and a
//! column is flagged only when its sparse part also carries at least
//! [`RequestsOptions::min_excess`] of the category's time, so that a single preempted call of a
//! microsecond method — far from the low-rank space, but worth nothing — is not reported.
//!
//! Without request marks, [`series`] runs the same decomposition over each node's own
//! interval × function matrix of self time (seed 004's RPCA as a single-node anomaly finder).

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::data::Dataset;

pub mod rpca;
pub mod series;
pub mod tree;

use rpca::{column_cosine, Matrix, RpcaOptions};
use tree::Request;

/// Settings of the request analysis.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestsOptions {
    /// A category is anomalous above this coefficient of variation of its latencies.
    pub cv_threshold: f64,
    /// A method is anomalous below this cosine between its column of M and of L.
    pub cos_threshold: f64,
    /// Categories with fewer requests are not analysed (RPCA needs rows).
    pub min_requests: usize,
    /// A flagged column's sparse part must hold at least this share of its category's time.
    pub min_excess: f64,
}

impl Default for RequestsOptions {
    fn default() -> Self {
        RequestsOptions {
            cv_threshold: 0.3,
            cos_threshold: 0.9,
            min_requests: 10,
            min_excess: 0.05,
        }
    }
}

/// The request analysis' result.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestsReport {
    /// Complete sampled requests found.
    pub requests: usize,
    /// Request parts without an end (left out).
    pub unfinished: usize,
    /// Request events the writers lost.
    pub dropped_events: u64,
    /// One request in this many was recorded (the largest rate found).
    pub sample_every: u32,
    /// Every category, most requests first.
    pub categories: Vec<Category>,
    /// Methods flagged anywhere, with their replica: most categories first.
    pub ranking: Vec<RankedMethod>,
    /// Per node, seed 004's RPCA over its own interval × function self time ([`series`]).
    pub series: Vec<series::NodeSeries>,
    /// Problems worth saying.
    pub notes: Vec<String>,
}

/// One category: requests sharing a call tree.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Category {
    /// Its number in this report (1 for the category with most requests).
    pub id: usize,
    /// The program's request type.
    pub rtype: u64,
    /// Requests in it.
    pub requests: usize,
    /// Calls in its call tree (the matrix's columns).
    pub methods: usize,
    /// Nodes its calls ran on.
    pub nodes: Vec<String>,
    /// Mean latency, ns.
    pub mean_ns: f64,
    /// Coefficient of variation of the latencies.
    pub cv: f64,
    /// Over-dispersed (CV above the threshold) and analysed.
    pub anomalous: bool,
    /// RPCA's iterations and final relative residual, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpca: Option<RpcaRun>,
    /// Methods found anomalous in it.
    pub flagged: Vec<FlaggedMethod>,
}

/// How RPCA ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RpcaRun {
    /// Iterations.
    pub iterations: usize,
    /// ‖M − L − E‖_F / ‖M‖_F.
    pub residual: f64,
    /// Below the tolerance (1e-7).
    pub converged: bool,
}

/// A column of a category found anomalous.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct FlaggedMethod {
    /// Column (0-based, depth-first order of the call tree).
    pub position: usize,
    /// Function.
    pub function: String,
    /// Its binary image.
    pub image: String,
    /// Depth below its request part's start.
    pub depth: u16,
    /// cos(M(j), L(j)).
    pub cosine: f64,
    /// Σ of the positive entries of E in the column, ns.
    pub excess_ns: f64,
    /// Nodes with large entries of E, most affected first.
    pub replicas: Vec<Replica>,
}

/// A node's share of a flagged column's large entries.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Replica {
    /// Node.
    pub node: String,
    /// Its rows whose entry of E is large (at least the column's median of M).
    pub large: usize,
    /// Its rows in the category.
    pub rows: usize,
    /// Σ of E's positive entries over its rows, ns.
    pub excess_ns: f64,
    /// This node is blamed for the method (see [`significant`]).
    pub blamed: bool,
}

/// A method on a replica, ranked.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RankedMethod {
    /// Function.
    pub function: String,
    /// Image.
    pub image: String,
    /// Node (replica).
    pub node: String,
    /// Categories that flag it on this node.
    pub categories: usize,
    /// Σ of E on its rows over those categories, ns.
    pub excess_ns: f64,
    /// The smallest cosine.
    pub cosine: f64,
}

/// Runs the analysis over every sampled request of `ds`.
pub fn analyze(ds: &Dataset, opts: &RequestsOptions) -> RequestsReport {
    let (requests, stats) = tree::assemble(&ds.nodes);
    let mut report = RequestsReport {
        requests: requests.len(),
        unfinished: stats.unfinished,
        dropped_events: stats.dropped,
        sample_every: stats.sample_every,
        series: series::analyze(
            ds,
            &series::SeriesOptions {
                cos_threshold: opts.cos_threshold,
                min_excess: opts.min_excess,
            },
        ),
        ..Default::default()
    };
    if requests.is_empty() {
        report.notes.push(
            "no sampled requests: mark them with culprit_request_begin/_end (culprit.h) and \
             trace the program"
                .into(),
        );
        return report;
    }
    let mut groups: HashMap<Vec<u64>, Vec<&Request>> = HashMap::new();
    for r in &requests {
        groups.entry(r.signature()).or_default().push(r);
    }
    let mut groups: Vec<Vec<&Request>> = groups.into_values().collect();
    groups.sort_by(|a, b| {
        b.len()
            .cmp(&a.len())
            .then_with(|| a[0].root.cmp(&b[0].root))
    });
    let mut rank: HashMap<(u32, usize), RankedMethod> = HashMap::new();
    for (k, g) in groups.iter().enumerate() {
        let c = category(ds, k + 1, g, opts, &mut report.notes);
        for f in &c.flagged {
            let first = &g[0];
            let func = first.calls().nth(f.position).map(|(_, c)| c.func);
            let Some(func) = func else { continue };
            for rep in significant(&f.replicas) {
                let Some(node) = ds.nodes.iter().position(|n| n.name == rep.node) else {
                    continue;
                };
                let e = rank.entry((func, node)).or_insert_with(|| RankedMethod {
                    function: f.function.clone(),
                    image: f.image.clone(),
                    node: rep.node.clone(),
                    categories: 0,
                    excess_ns: 0.0,
                    cosine: 1.0,
                });
                e.categories += 1;
                e.excess_ns += rep.excess_ns;
                e.cosine = e.cosine.min(f.cosine);
            }
        }
        report.categories.push(c);
    }
    let mut ranking: Vec<RankedMethod> = rank.into_values().collect();
    ranking.sort_by(|a, b| {
        b.categories
            .cmp(&a.categories)
            .then_with(|| b.excess_ns.total_cmp(&a.excess_ns))
            .then_with(|| a.function.cmp(&b.function))
    });
    report.ranking = ranking;
    report
}

/// A replica is blamed for a flagged column when at least this share of its rows are large…
pub const MIN_SHARE: f64 = 0.1;
/// … its sparse part per row is at least this many times the other replicas' median…
pub const EXCESS_RATIO: f64 = 3.0;
// … and its sparse part holds at least `RequestsOptions::min_excess` of the category's time.

/// The replicas a flagged column blames ([`Replica::blamed`]).
pub fn significant(replicas: &[Replica]) -> impl Iterator<Item = &Replica> {
    replicas.iter().filter(|r| r.blamed)
}

/// Marks the blamed replicas: at least [`MIN_SHARE`] of their rows large, a sparse part per
/// row at least [`EXCESS_RATIO`] × the other replicas' median, and at least `floor_ns` in all.
/// On a busy machine every node has its slow calls, spread alike and small; a slow replica's
/// rows carry the sparse part where the others' do not.
fn blame(replicas: &mut [Replica], floor_ns: f64) {
    let per_row = |r: &Replica| r.excess_ns / r.rows.max(1) as f64;
    let rates: Vec<f64> = replicas.iter().map(per_row).collect();
    for (k, r) in replicas.iter_mut().enumerate() {
        let others: Vec<f64> = rates
            .iter()
            .enumerate()
            .filter(|&(q, _)| q != k)
            .map(|(_, &v)| v)
            .collect();
        let share = r.large as f64 / r.rows.max(1) as f64;
        r.blamed = share >= MIN_SHARE
            && rates[k] > EXCESS_RATIO * median(others)
            && r.excess_ns >= floor_ns;
    }
}

fn mean_cv(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    if n < 2.0 || mean <= 0.0 {
        return (mean, 0.0);
    }
    let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt() / mean)
}

fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    xs.sort_by(f64::total_cmp);
    let m = xs.len() / 2;
    if xs.len() % 2 == 1 {
        xs[m]
    } else {
        (xs[m - 1] + xs[m]) / 2.0
    }
}

/// One category's statistics, and its RPCA when it is anomalous.
fn category(
    ds: &Dataset,
    id: usize,
    reqs: &[&Request],
    opts: &RequestsOptions,
    notes: &mut Vec<String>,
) -> Category {
    let first = reqs[0];
    let cols = first.calls().count();
    let lat: Vec<f64> = reqs.iter().map(|r| r.latency_ns() as f64).collect();
    let (mean_ns, cv) = mean_cv(&lat);
    let mut nodes: Vec<usize> = reqs
        .iter()
        .flat_map(|r| r.parts.iter().map(|p| p.node))
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    let mut c = Category {
        id,
        rtype: first.rtype,
        requests: reqs.len(),
        methods: cols,
        nodes: nodes.iter().map(|&n| ds.nodes[n].name.clone()).collect(),
        mean_ns,
        cv,
        anomalous: false,
        rpca: None,
        flagged: Vec::new(),
    };
    if cv <= opts.cv_threshold || reqs.len() < opts.min_requests || cols == 0 {
        return c;
    }
    c.anomalous = true;
    // Rows: requests; columns: the call tree's calls; entries: exclusive ns (module docs).
    let rows: Vec<Vec<(usize, u64)>> = reqs
        .iter()
        .map(|r| r.calls().map(|(n, c)| (n, c.excl_ns)).collect())
        .collect();
    let m = Matrix::from_fn(reqs.len(), cols, |i, j| rows[i][j].1 as f64);
    let out = match rpca::rpca(&m, &RpcaOptions::default()) {
        Ok(o) => o,
        Err(e) => {
            notes.push(format!("category {id}: robust PCA failed: {e}"));
            return c;
        }
    };
    c.rpca = Some(RpcaRun {
        iterations: out.iterations,
        residual: out.residual,
        converged: out.converged,
    });
    let total: f64 = lat.iter().sum();
    let calls: Vec<_> = first.calls().map(|(_, c)| *c).collect();
    for (j, call) in calls.iter().enumerate() {
        let cosine = column_cosine(&m, &out.low_rank, j);
        if cosine >= opts.cos_threshold {
            continue;
        }
        let excess_ns: f64 = (0..reqs.len()).map(|i| out.sparse.get(i, j).max(0.0)).sum();
        if excess_ns < opts.min_excess * total {
            continue;
        }
        let med = median(m.col(j).collect());
        let mut per: HashMap<usize, Replica> = HashMap::new();
        for (i, row) in rows.iter().enumerate() {
            let node = row[j].0;
            let e = out.sparse.get(i, j);
            let r = per.entry(node).or_insert_with(|| Replica {
                node: ds.nodes[node].name.clone(),
                ..Default::default()
            });
            r.rows += 1;
            r.excess_ns += e.max(0.0);
            if e > 0.0 && e >= med {
                r.large += 1;
            }
        }
        let mut replicas: Vec<Replica> = per.into_values().collect();
        blame(&mut replicas, opts.min_excess * total);
        replicas.sort_by(|a, b| {
            let ra = a.excess_ns / a.rows.max(1) as f64;
            let rb = b.excess_ns / b.rows.max(1) as f64;
            b.blamed
                .cmp(&a.blamed)
                .then_with(|| rb.total_cmp(&ra))
                .then_with(|| a.node.cmp(&b.node))
        });
        let key = ds.names.funcs.get(call.func);
        c.flagged.push(FlaggedMethod {
            position: j,
            function: key.function.to_string(),
            image: key.image.to_string(),
            depth: call.depth,
            cosine,
            excess_ns,
            replicas,
        });
    }
    c
}
