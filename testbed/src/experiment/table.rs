//! Table 1 and Table 2 (and the resource, effect and balance tables) from the results, as
//! Markdown: rates with Wilson intervals, overheads with their standard errors.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use crate::error::{Error, Result};
use crate::fault::FaultKind;
use crate::tools::WHITE_BOX;
use crate::workload::Workload;

use super::results::{expected_resource, read_results, ResultLine, BASELINE_SPAN};

/// A proportion with its 95 % Wilson score interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// Successes.
    pub x: usize,
    /// Trials.
    pub n: usize,
}

impl Rate {
    /// The 95 % Wilson score interval, as fractions.
    pub fn wilson(&self) -> (f64, f64) {
        if self.n == 0 {
            return (0.0, 1.0);
        }
        let z = 1.959_963_984_540_054_f64;
        let n = self.n as f64;
        let p = self.x as f64 / n;
        let denom = 1.0 + z * z / n;
        let center = (p + z * z / (2.0 * n)) / denom;
        let half = z / denom * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt();
        ((center - half).max(0.0), (center + half).min(1.0))
    }

    fn cell(&self) -> String {
        if self.n == 0 {
            return "–".into();
        }
        let (lo, hi) = self.wilson();
        format!(
            "{}/{} ({:.0}–{:.0})",
            self.x,
            self.n,
            lo * 100.0,
            hi * 100.0
        )
    }
}

/// Table 1 and Table 2 from the results of an experiment, as Markdown.
pub fn analyze(out: &Path) -> Result<String> {
    analyze_file(&out.join("results.jsonl"))
}

/// The tables of one results file.
pub fn analyze_file(path: &Path) -> Result<String> {
    let lines = read_results(path)?;
    if lines.is_empty() {
        return Err(Error::Config(format!(
            "{} has no results (run `culprit experiment` first)",
            path.display()
        )));
    }
    Ok(render(&lines))
}

/// Columns of Table 1: each white-box metric, the OS metrics (`os`: faulty on any of them),
/// the verdicts of the white-box metrics alone, of the OS metrics alone (`black-box`) and of all
/// (`combined`), `any` (flagged by at least one metric), and the combined verdict of an
/// untrained diagnosis (when measured).
const COLUMNS: [&str; 13] = [
    "samples",
    "count",
    "time",
    "events",
    "os",
    "white-box",
    "black-box",
    "combined",
    "any",
    "untrained",
    "baseline",
    "requests",
    "series",
];

/// Renders the tables from result lines.
pub fn render(lines: &[ResultLine]) -> String {
    let mut s = String::new();
    if let Some(ResultLine::Config(c)) = lines.iter().find(|l| matches!(l, ResultLine::Config(_))) {
        let disk = if c.disk.0 == 0 {
            "unthrottled disks".to_string()
        } else {
            format!(
                "disks {} MB/s + {} IOPS per node",
                c.disk.0 / 1_000_000,
                c.disk.1
            )
        };
        let _ = writeln!(
            s,
            "Protocol: {} — {} nodes, {disk}; settle {} s, fault-free {} s, fault {} s, after {} s; \
             WinSize {} s, WinShift {} s, k = {}; tracer {} ms, sampler {} ms intervals; {}.\n",
            c.protocol,
            c.nodes,
            c.phases.settle_s,
            c.phases.before_s,
            c.phases.fault_s,
            c.phases.after_s,
            c.windows.0,
            c.windows.1,
            c.windows.2,
            c.instrument.tracer_interval_ms,
            c.instrument.sampler_interval_ms,
            if c.accuracy {
                format!(
                    "{} training and {} fault-free test runs per workload, {} faulty runs per \
                     workload and fault",
                    c.training_runs, c.clean_runs, c.repetitions
                )
            } else {
                format!("overhead only, {} runs per setting", c.overhead_reps)
            }
        );
    }
    // rows: fault name → metric → (tp, fp)
    let mut rows: BTreeMap<String, BTreeMap<&str, (Rate, Rate)>> = BTreeMap::new();
    // fault name → (resource right among combined TPs, resources named)
    let mut named: BTreeMap<String, (Rate, BTreeMap<String, usize>)> = BTreeMap::new();
    let mut order: Vec<String> = FaultKind::ALL
        .iter()
        .map(|f| f.name().to_string())
        .collect();
    order.push("none".into());
    for l in lines {
        let ResultLine::Run {
            role,
            record,
            flagged,
            metrics,
            untrained,
            requests,
            series,
            resources,
            baseline,
            ..
        } = l
        else {
            continue;
        };
        if role == "train" {
            continue;
        }
        let row = rows.entry(record.fault.clone()).or_default();
        // `any`: flagged by at least one metric — the most a combination rule could find, and
        // the false positives of OR-ing the detectors.
        let any: BTreeSet<String> = flagged
            .iter()
            .filter(|(m, _)| WHITE_BOX.contains(&m.as_str()) || m.as_str() == "os")
            .flat_map(|(_, nodes)| nodes.iter().cloned())
            .collect();
        let combined_tp = !record.faulty_node.is_empty()
            && flagged
                .get("combined")
                .is_some_and(|f| f.contains(&record.faulty_node));
        if combined_tp && !resources.is_empty() {
            let e = named
                .entry(record.fault.clone())
                .or_insert((Rate { x: 0, n: 0 }, BTreeMap::new()));
            let got = resources
                .get(&record.faulty_node)
                .cloned()
                .unwrap_or_else(|| "none".into());
            e.0.n += 1;
            e.0.x += usize::from(expected_resource(&record.fault) == Some(got.as_str()));
            *e.1.entry(got).or_default() += 1;
        }
        for m in COLUMNS {
            let present = match m {
                "combined" | "any" | "untrained" | "baseline" | "requests" | "series" => true,
                "white-box" | "black-box" => flagged.contains_key(m),
                _ => metrics.contains(m),
            };
            if !present {
                continue;
            }
            let f = match m {
                "any" => any.clone(),
                "baseline" => match baseline {
                    Some(b) => b.culprits.clone(),
                    None => continue,
                },
                "untrained" | "requests" | "series" => match match m {
                    "untrained" => untrained,
                    "requests" => requests,
                    _ => series,
                } {
                    Some(u) => u.clone(),
                    None => continue,
                },
                _ => flagged.get(m).cloned().unwrap_or_default(),
            };
            let e = row
                .entry(m)
                .or_insert((Rate { x: 0, n: 0 }, Rate { x: 0, n: 0 }));
            if !record.faulty_node.is_empty() {
                e.0.n += 1;
                e.0.x += usize::from(f.contains(&record.faulty_node));
            }
            e.1.n += 1;
            e.1.x += usize::from(f.iter().any(|n| *n != record.faulty_node));
        }
    }
    let _ = writeln!(s, "Table 1 — diagnosis accuracy: TP = runs where the faulty node was flagged, FP = runs where a");
    let _ = writeln!(
        s,
        "fault-free node was flagged; x/n (95 % Wilson interval, %). `untrained`: the combined verdict"
    );
    let _ = writeln!(
        s,
        "of `culprit diagnose` without a thresholds file (goals: TP ≥ 80 %, FP 0); `baseline`: with\n\
         normal learnt from each run's own first third (`--baseline \"{BASELINE_SPAN}\"`, no training\n\
         runs); `requests`: the\n\
         replica of `diagnose --requests`' top-ranked method (seed 004, sampled requests); `series`:\n\
         nodes whose own interval × function RPCA flagged a function (no request ids, no peers).\n"
    );
    let _ = write!(s, "| fault |");
    for m in COLUMNS {
        let _ = write!(s, " {m} TP | {m} FP |");
    }
    let _ = writeln!(s);
    let _ = writeln!(s, "|---|{}", "---|---|".repeat(COLUMNS.len()));
    for f in &order {
        let Some(row) = rows.get(f) else { continue };
        let _ = write!(s, "| {f} |");
        for m in COLUMNS {
            match row.get(m) {
                Some((tp, fp)) => {
                    let _ = write!(s, " {} | {} |", tp.cell(), fp.cell());
                }
                None => {
                    let _ = write!(s, " – | – |");
                }
            }
        }
        let _ = writeln!(s);
    }
    // Totals over faulty runs.
    let _ = write!(s, "| all faults |");
    for m in COLUMNS {
        let (mut tp, mut fp) = (Rate { x: 0, n: 0 }, Rate { x: 0, n: 0 });
        for (f, row) in &rows {
            if f == "none" {
                continue;
            }
            if let Some((a, b)) = row.get(m) {
                tp.x += a.x;
                tp.n += a.n;
                fp.x += b.x;
                fp.n += b.n;
            }
        }
        let _ = write!(s, " {} | {} |", tp.cell(), fp.cell());
    }
    let _ = writeln!(s);

    render_resources(&order, &named, &mut s);
    render_effects(lines, &mut s);

    // Table 2.
    let mut runtimes: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for l in lines {
        if let ResultLine::Overhead {
            workload,
            setting,
            runtime_s,
            ..
        } = l
        {
            runtimes
                .entry((workload.clone(), setting.clone()))
                .or_default()
                .push(*runtime_s);
        }
    }
    if !runtimes.is_empty() {
        let _ = writeln!(
            s,
            "\nTable 2 — instrumentation overhead: increase of the fixed-work runtime over the"
        );
        let _ = writeln!(
            s,
            "uninstrumented run, mean ± standard error (n runs per setting, interleaved).\n"
        );
        let _ = writeln!(
            s,
            "| workload | uninstrumented (s) | sampling | tracing | tracing + sampling |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|");
        for w in Workload::ALL {
            let Some(base) = runtimes.get(&(w.name().into(), "none".into())) else {
                continue;
            };
            let (bm, bse) = mean_se(base);
            let _ = write!(s, "| {w} | {bm:.2} ± {bse:.2} (n={}) |", base.len());
            for setting in ["sampling", "tracing", "both"] {
                match runtimes.get(&(w.name().into(), setting.into())) {
                    Some(v) => {
                        let (m, se) = mean_se(v);
                        let (o, ose) = ratio_overhead(m, se, bm, bse);
                        let _ = write!(s, " {:+.2} % ± {:.2} % |", o * 100.0, ose * 100.0);
                    }
                    None => {
                        let _ = write!(s, " – |");
                    }
                }
            }
            let _ = writeln!(s);
        }
    }
    s
}

/// The resource named in the runs where the combined verdict flagged the faulty node.
fn render_resources(
    order: &[String],
    named: &BTreeMap<String, (Rate, BTreeMap<String, usize>)>,
    s: &mut String,
) {
    if named.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nResource named — among the runs whose combined verdict flagged the faulty node, the"
    );
    let _ = writeln!(
        s,
        "runs where the checklist named the fault's resource; x/n (95 % Wilson interval, %).\n"
    );
    let _ = writeln!(s, "| fault | expected | resource correct | named |");
    let _ = writeln!(s, "|---|---|---|---|");
    let mut total = Rate { x: 0, n: 0 };
    for f in order {
        let Some((rate, kinds)) = named.get(f) else {
            continue;
        };
        total.x += rate.x;
        total.n += rate.n;
        let list: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(
            s,
            "| {f} | {} | {} | {} |",
            expected_resource(f).unwrap_or("–"),
            rate.cell(),
            list.join(", ")
        );
    }
    let _ = writeln!(s, "| all faults | | {} | |", total.cell());
}

/// Table 3: what each fault did to the cluster (the ground truth the metrics had to see):
/// throughput during the fault relative to before it, and the faulty node's CPU and disk bytes
/// during the fault relative to the median of its peers.
fn render_effects(lines: &[ResultLine], s: &mut String) {
    // (fault, workload) → (throughput ratios, cpu ratios, disk ratios)
    type Ratios = (Vec<f64>, Vec<f64>, Vec<f64>);
    let mut by: BTreeMap<(String, String), Ratios> = BTreeMap::new();
    for l in lines {
        let ResultLine::Run {
            role, record: r, ..
        } = l
        else {
            continue;
        };
        if role != "faulty" || r.usage.len() < 2 {
            continue;
        }
        let e = by.entry((r.fault.clone(), r.workload.clone())).or_default();
        if r.disk_mbps[0] > 0.0 {
            e.0.push(r.disk_mbps[1] / r.disk_mbps[0]);
        }
        let during = &r.usage[1];
        let Some(me) = during.iter().find(|u| u.node == r.faulty_node) else {
            continue;
        };
        let peers: Vec<&crate::run::PhaseUsage> =
            during.iter().filter(|u| u.node != r.faulty_node).collect();
        let med = |f: &dyn Fn(&crate::run::PhaseUsage) -> f64| {
            let mut v: Vec<f64> = peers.iter().map(|u| f(u)).collect();
            v.sort_by(f64::total_cmp);
            v.get(v.len() / 2).copied().unwrap_or(0.0)
        };
        let (mc, md) = (med(&|u| u.cpu_s), med(&|u| u.disk_bytes as f64));
        if mc > 0.0 {
            e.1.push(me.cpu_s / mc);
        }
        if md > 0.0 {
            e.2.push(me.disk_bytes as f64 / md);
        }
    }
    render_balance(lines, s);
    if by.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nTable 3 — what the faults did (mean over runs): disk throughput of all nodes during the"
    );
    let _ = writeln!(
        s,
        "fault ÷ before it; the faulty node's CPU seconds and disk bytes during the fault ÷ the"
    );
    let _ = writeln!(s, "median of its peers'.\n");
    let _ = writeln!(
        s,
        "| fault | workload | throughput | faulty CPU ÷ peers | faulty disk ÷ peers |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|");
    let mean = |v: &[f64]| {
        if v.is_empty() {
            f64::NAN
        } else {
            v.iter().sum::<f64>() / v.len() as f64
        }
    };
    for f in FaultKind::ALL {
        for w in Workload::ALL {
            if let Some((t, c, d)) = by.get(&(f.name().to_string(), w.name().to_string())) {
                let _ = writeln!(
                    s,
                    "| {f} | {w} | {:.2} | {:.2} | {:.2} |",
                    mean(t),
                    mean(c),
                    mean(d)
                );
            }
        }
    }
}

/// Balance of the fault-free runs (training and test): per run, the spread (max ÷ min − 1) of the
/// nodes' CPU seconds and disk bytes over the whole workload; mean and worst per workload.
fn render_balance(lines: &[ResultLine], s: &mut String) {
    let mut by: BTreeMap<String, (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for l in lines {
        let ResultLine::Run { record: r, .. } = l else {
            continue;
        };
        if r.fault != "none" || r.usage.is_empty() {
            continue;
        }
        let mut cpu: BTreeMap<&str, f64> = BTreeMap::new();
        let mut disk: BTreeMap<&str, f64> = BTreeMap::new();
        for phase in &r.usage {
            for u in phase {
                *cpu.entry(&u.node).or_default() += u.cpu_s;
                *disk.entry(&u.node).or_default() += u.disk_bytes as f64;
            }
        }
        let spread = |m: &BTreeMap<&str, f64>| {
            let max = m.values().cloned().fold(f64::MIN, f64::max);
            let min = m.values().cloned().fold(f64::MAX, f64::min);
            if min > 0.0 {
                max / min - 1.0
            } else {
                f64::NAN
            }
        };
        let e = by.entry(r.workload.clone()).or_default();
        e.0.push(spread(&cpu));
        e.1.push(spread(&disk));
    }
    if by.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\nBalance of the fault-free runs: spread of the nodes' CPU seconds and disk bytes over a"
    );
    let _ = writeln!(s, "run (max ÷ min − 1), mean and worst over the runs.\n");
    let _ = writeln!(
        s,
        "| workload | runs | CPU spread mean | worst | disk spread mean | worst |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for (w, (c, d)) in &by {
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        let worst = |v: &[f64]| v.iter().cloned().fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "| {w} | {} | {:.1} % | {:.1} % | {:.1} % | {:.1} % |",
            c.len(),
            mean(c) * 100.0,
            worst(c) * 100.0,
            mean(d) * 100.0,
            worst(d) * 100.0
        );
    }
}

/// Mean and standard error of the mean.
pub fn mean_se(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    if v.is_empty() {
        return (0.0, 0.0);
    }
    let m = v.iter().sum::<f64>() / n;
    if v.len() < 2 {
        return (m, 0.0);
    }
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1.0);
    (m, (var / n).sqrt())
}

/// `m/b − 1` with its standard error by error propagation (delta method).
pub fn ratio_overhead(m: f64, se_m: f64, b: f64, se_b: f64) -> (f64, f64) {
    if b <= 0.0 {
        return (0.0, 0.0);
    }
    let r = m / b;
    let se = r * ((se_m / m.max(1e-12)).powi(2) + (se_b / b).powi(2)).sqrt();
    (r - 1.0, se)
}
