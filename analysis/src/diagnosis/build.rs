//! [`Diagnosis::build`]: an analysis' [`Outcome`] into the report — the combination rule
//! ([`crate::combine`]) applied once per node, findings folded into the verdicts, the resource
//! at fault examined, nodes ranked, and each metric's root-cause tables.

use crate::analyzer::{MetricResult, Outcome};
use crate::combine::{combine, evidence, MetricVerdict, Verdict};
use crate::family::{Metric, Words};
use crate::missing::Finding;
use crate::model::PeerIdx;
use crate::options::Setting;
use crate::persistence::Persistence;
use crate::policy::Policy;
use crate::resource;
use crate::score::median_in_place;
use crate::time::Timestamp;

use super::{
    AnomalousWindow, CauseDirection, CauseRow, Diagnosis, EpisodeReport, MetricReport,
    MetricStatus, NodeReport, NodeVerdict, RankedNode, ReportInput, ReportedSettings, Side,
    ThresholdSource, Thresholds, SCHEMA, SCHEMA_VERSION,
};

impl Diagnosis {
    /// Builds the report of an analysis: applies the combination rule, ranks root causes.
    pub fn build(outcome: &Outcome, input: ReportInput<'_>) -> Diagnosis {
        let names = &outcome.names;
        let cfg = &outcome.config;
        let mut order: Vec<usize> = (0..names.len()).collect();
        order.sort_by(|&a, &b| names[a].cmp(&names[b]));
        let metrics: Vec<&MetricResult> = outcome
            .metrics
            .iter()
            .filter(|m| input.reported.contains(&m.metric()))
            .collect();
        // Families analysed (all OS metrics are one).
        let mut analysed_families: Vec<Metric> = metrics
            .iter()
            .filter(|m| m.windows > m.unscored)
            .map(|m| m.config.family.group())
            .collect();
        analysed_families.sort();
        analysed_families.dedup();
        let analysed = analysed_families.len();
        let mut unsupervised = None;
        let mut trained = !metrics.is_empty();
        for m in &metrics {
            match &m.config.policy {
                Policy::Untrained(u) => {
                    unsupervised = Some(*u);
                    trained = false;
                }
                Policy::Training => trained = false,
                Policy::Trained { .. } => {}
            }
        }
        let mut verdicts = Vec::new();
        let mut culprits = Vec::new();
        let mut since_start: Vec<(usize, Metric)> = Vec::new();
        for &n in &order {
            let per: Vec<MetricVerdict> = metrics.iter().map(|m| MetricVerdict::of(m, n)).collect();
            let stopped = input
                .findings
                .iter()
                .any(|f| f.is_stop() && f.node() == names[n]);
            let slack = (2 * cfg.k as u64 - 1) * cfg.windows.shift_ns;
            let mut combined = combine(&per, analysed, stopped, slack);
            let by_metrics = combined.verdict;
            // Stuck and paused say what the deviations are about: they take precedence
            // (paused over stuck: a stopped process's calls all look stuck).
            if let Some((v, why)) = input
                .findings
                .iter()
                .filter(|f| f.node() == names[n])
                .filter_map(|f| f.verdict())
                .max_by_key(|(v, _)| *v)
            {
                combined.verdict = v;
                combined.reason = why;
            }
            // A stopped node's last call (seed 002's last function) belongs in its reason.
            let last_call = input.findings.iter().find_map(|f| match f {
                Finding::Stopped {
                    node, last_call, ..
                } if *node == names[n] => last_call.as_ref(),
                _ => None,
            });
            if let (Verdict::Stopped, Some(c)) = (combined.verdict, last_call) {
                combined.reason = format!("{}; last seen: {}", combined.reason, c.describe());
            }
            let from_start: Vec<Metric> = metrics
                .iter()
                .filter(|m| !input.after_baseline && faulty_from_start(m, n, cfg.k))
                .map(|m| m.metric())
                .collect();
            if combined.verdict.is_culprit() || combined.verdict == Verdict::Suspect {
                if let Some(&m) = from_start.first() {
                    if !stopped {
                        combined.reason.push_str("; different since its data began");
                        since_start.push((n, m));
                    }
                }
            }
            if combined.verdict.is_culprit() || combined.verdict == Verdict::Suspect {
                if let Some(s) = rare_reason(&metrics, n) {
                    combined.reason.push_str(&s);
                }
            }
            let examined = matches!(combined.verdict, Verdict::Faulty | Verdict::Suspect)
                .then(|| resource::examine(outcome, &metrics, n, input.levels));
            if let Some((r, moved)) = &examined {
                resource::demote_shapeless(&mut combined, r, *moved);
            }
            let mut resource = examined.map(|(r, _)| r);
            // A hang or pause verdict keeps the resource beside it: what the metrics found
            // (a slow disk under a stuck writer) is still the resource at fault. "Software"
            // (no resource moved) adds nothing to a stuck or paused node and is left out.
            if matches!(combined.verdict, Verdict::Stuck | Verdict::Paused)
                && matches!(by_metrics, Verdict::Faulty | Verdict::Suspect)
            {
                let (r, _) = resource::examine(outcome, &metrics, n, input.levels);
                if r.kind != resource::Kind::Software {
                    resource = Some(r);
                }
            }
            let damage: Vec<String> = input
                .findings
                .iter()
                .filter_map(|f| match f {
                    Finding::Damaged { node, file, reason } if *node == names[n] => {
                        Some(format!("{file}: {reason}"))
                    }
                    _ => None,
                })
                .collect();
            // Data but no window compared it on any metric: not "ok".
            let statuses: Vec<MetricStatus> = metrics.iter().map(|m| status(m, n)).collect();
            if combined.verdict == Verdict::Ok
                && statuses.contains(&MetricStatus::NotCompared)
                && statuses
                    .iter()
                    .all(|s| matches!(s, MetricStatus::NotCompared | MetricStatus::NoData))
            {
                combined.verdict = Verdict::NotCompared;
                combined.reason = "no window could compare it: its data had gaps throughout (see \
                                   the findings)"
                    .to_string();
            }
            if !damage.is_empty() && matches!(combined.verdict, Verdict::Ok | Verdict::NotCompared)
            {
                combined.verdict = Verdict::Damaged;
                combined.reason = format!(
                    "its data is damaged ({}); the intact part was compared",
                    damage.join("; ")
                );
            }
            if combined.verdict.is_culprit() {
                culprits.push(names[n].clone());
            }
            verdicts.push(NodeVerdict {
                node: names[n].clone(),
                combined,
                resource,
            });
        }
        let suspects: Vec<&str> = verdicts
            .iter()
            .filter(|v| {
                !matches!(
                    v.combined.verdict,
                    Verdict::Ok | Verdict::Damaged | Verdict::NotCompared
                )
            })
            .map(|v| v.node.as_str())
            .collect();
        let mut metrics_out: Vec<MetricReport> = metrics
            .iter()
            .map(|m| metric_report(outcome, m, &order, &suspects, input.top))
            .collect();
        // Each untrained metric says why (issue 31: a metric absent from the thresholds file was
        // diagnosed untrained without a word).
        for m in &mut metrics_out {
            if m.thresholds == Thresholds::Untrained {
                m.untrained = Some(match &input.thresholds_file {
                    Some(f) => format!(
                        "untrained: not in {}",
                        std::path::Path::new(f)
                            .file_name()
                            .map_or(f.clone(), |n| n.to_string_lossy().into_owned())
                    ),
                    None => "untrained: no thresholds file".to_string(),
                });
            }
        }
        let mut notes = input.notes;
        for &(n, m) in &since_start {
            let trained_here = metrics
                .iter()
                .any(|r| r.metric() == m && matches!(r.config.policy, Policy::Trained { .. }));
            let exclude = Setting::ExcludeNode.flag();
            let how = if trained_here {
                format!("leave a node with another role out with {exclude}, or train with it")
            } else {
                format!(
                    "without training, culprit cannot tell these apart: leave a node with \
                     another role out with {exclude}, or train on fault-free runs"
                )
            };
            notes.push(format!(
                "{} has differed from its peers on {m} since its data began: a fault older than \
                 the data, or a node with another role or hardware; {how}",
                names[n]
            ));
        }
        let ranking = rank_nodes(cfg.k, &metrics, names, &order, &verdicts);
        let (mut from, mut to) = (None::<u64>, None::<u64>);
        for m in &metrics {
            if let Some(r) = m.window_range {
                from = Some(from.map_or(r.first_ns, |f| f.min(r.first_ns)));
                let e = r.last_ns + m.windows_ns.size_ns;
                to = Some(to.map_or(e, |t| t.max(e)));
            }
        }
        Diagnosis {
            schema: SCHEMA.to_string(),
            version: SCHEMA_VERSION,
            data: input.data,
            trained,
            thresholds_file: input.thresholds_file,
            settings: ReportedSettings {
                win_size_s: cfg.windows.size_ns as f64 / 1e9,
                win_shift_s: cfg.windows.shift_ns as f64 / 1e9,
                k: cfg.k,
                score: cfg.score,
                distance: cfg.distance,
                peers: input.peers,
                by_program: input.by_program,
                unsupervised,
                os_win_size_s: input.os.windows.size_ns as f64 / 1e9,
                os_win_shift_s: input.os.windows.shift_ns as f64 / 1e9,
                smoothing: input.os.smoothing,
            },
            from: from.map(Timestamp::from_ns),
            to: to.map(Timestamp::from_ns),
            nodes: order.iter().map(|&n| names[n].clone()).collect(),
            culprits,
            verdicts,
            ranking,
            metrics: metrics_out,
            findings: input.findings,
            notes,
            warnings: input.warnings,
            layers: Vec::new(),
            serialised: Vec::new(),
            tracing_cost: Vec::new(),
            roles: Vec::new(),
            baseline: None,
        }
    }
}

/// True when node `n` became faulty on `m` within its first 2k − 1 scored windows: it differed
/// from its peers from the start of its data, as far as the k-of-(2k − 1) filter can tell (a
/// change inside its first 2k − 1 windows cannot be told from none). Its first window need not
/// be anomalous: on a loaded machine the first window of every node is noisy (measured: beside
/// `stress-ng --cpu 2` a node doing 15× work from its first second lost that label in 4 of 20
/// runs).
fn faulty_from_start(m: &MetricResult, n: PeerIdx, k: usize) -> bool {
    let nm = &m.nodes[n];
    match (nm.episodes.first(), nm.first_scored_ns) {
        (Some(e), Some(first)) => {
            e.first_window_ns <= first + (2 * k as u64 - 2) * m.windows_ns.shift_ns
        }
        _ => false,
    }
}

/// Node `n`'s verdict on metric `m`: faulty, ok, undecided (not faulty, but the windows it
/// could not be compared in could hide a fault), not compared (data, no window compared), or no
/// data.
pub(crate) fn status(m: &MetricResult, n: PeerIdx) -> MetricStatus {
    let nm = &m.nodes[n];
    if nm.first_ns.is_none() {
        MetricStatus::NoData
    } else if nm.faulty() {
        MetricStatus::Faulty
    } else if nm.scored == 0 {
        MetricStatus::NotCompared
    } else if nm.undecided > 0 {
        MetricStatus::Undecided
    } else {
        MetricStatus::Ok
    }
}

/// Median score ÷ threshold of node `n` on `m`: over its anomalous windows, or over all its
/// windows when none was anomalous.
fn score_ratio(m: &MetricResult, n: PeerIdx) -> Option<f64> {
    let nm = &m.nodes[n];
    if let Some(e) = evidence(nm) {
        return Some(e);
    }
    let mut r: Vec<f64> = nm
        .scores
        .iter()
        .filter(|w| w.threshold > 0.0 && w.threshold.is_finite())
        .map(|w| w.score / w.threshold)
        .collect();
    (!r.is_empty()).then(|| median_in_place(&mut r))
}

/// The ranking of suspects: every node, most suspicious first.
fn rank_nodes(
    k: usize,
    metrics: &[&MetricResult],
    names: &[String],
    order: &[usize],
    verdicts: &[NodeVerdict],
) -> Vec<RankedNode> {
    struct Row<'a> {
        n: usize,
        verdict: &'a NodeVerdict,
        persistence: Persistence,
        metric: Option<&'a MetricResult>,
        score: Option<f64>,
    }
    let mut rows: Vec<Row<'_>> = order
        .iter()
        .zip(verdicts)
        .map(|(&n, v)| {
            // The metric on which the node is most persistently anomalous (then: highest score).
            let best = metrics
                .iter()
                .filter(|m| m.nodes[n].scored > 0)
                .map(|m| (*m, m.nodes[n].persistence, score_ratio(m, n)))
                .min_by(|a, b| {
                    a.1.order(&b.1)
                        .then_with(|| b.2.unwrap_or(0.0).total_cmp(&a.2.unwrap_or(0.0)))
                });
            Row {
                n,
                verdict: v,
                persistence: best.map(|b| b.1).unwrap_or_default(),
                metric: best.map(|b| b.0),
                score: best.and_then(|b| b.2),
            }
        })
        .collect();
    // Damage is a finding, not a verdict: a damaged node ranks by its evidence, like an ok one.
    let suspicion = |v: Verdict| match v {
        Verdict::Ok | Verdict::Damaged | Verdict::NotCompared => 0,
        Verdict::Suspect => 1,
        Verdict::Faulty => 2,
        Verdict::Stuck | Verdict::Paused => 3,
        Verdict::Stopped => 4,
    };
    rows.sort_by(|a, b| {
        suspicion(b.verdict.combined.verdict)
            .cmp(&suspicion(a.verdict.combined.verdict))
            .then_with(|| a.persistence.order(&b.persistence))
            .then_with(|| b.score.unwrap_or(0.0).total_cmp(&a.score.unwrap_or(0.0)))
            .then_with(|| names[a.n].cmp(&names[b.n]))
    });
    rows.iter()
        .enumerate()
        .map(|(i, r)| RankedNode {
            rank: i + 1,
            node: names[r.n].clone(),
            verdict: r.verdict.combined.verdict,
            persistence: r.persistence.peak,
            metric: r.metric.map(|m| m.metric()),
            score: r.score,
            reason: rank_reason(
                k,
                r.verdict,
                r.metric,
                r.n,
                r.persistence,
                r.score,
                &undecided_on(metrics, r.n),
            ),
        })
        .collect()
}

/// The metrics on which node `n` is undecided or not compared although it has data.
fn undecided_on(metrics: &[&MetricResult], n: PeerIdx) -> Vec<Metric> {
    metrics
        .iter()
        .filter(|m| {
            matches!(
                status(m, n),
                MetricStatus::Undecided | MetricStatus::NotCompared
            )
        })
        .map(|m| m.metric())
        .collect()
}

/// One line on why a node is where it is in the ranking; `undecided`: the metrics on which it
/// is undecided or not compared.
fn rank_reason(
    k: usize,
    v: &NodeVerdict,
    m: Option<&MetricResult>,
    n: PeerIdx,
    p: Persistence,
    score: Option<f64>,
    undecided: &[Metric],
) -> String {
    let Some(m) = m else {
        return if matches!(v.combined.verdict, Verdict::Ok | Verdict::NotCompared) {
            "not compared (no window with enough of its data present)".to_string()
        } else {
            v.combined.reason.clone()
        };
    };
    let doubt = if undecided.is_empty() {
        String::new()
    } else {
        let names: Vec<&str> = undecided.iter().map(|m| m.name()).collect();
        format!(
            "; not enough comparable windows on {} to tell (its data had gaps)",
            names.join(", ")
        )
    };
    let metric = m.metric();
    let words = m.config.family.words();
    let lead = m
        .top(n, 1)
        .into_iter()
        .next()
        .filter(|r| r.persistence.peak > 0)
        .map(|r| {
            let dir = CauseDirection::new(Side::of(r.cause.node - r.cause.reference), words);
            format!("{dir} in {}", m.comps[r.comp as usize].name)
        });
    let anomalous = format!(
        "anomalous in {} of {} {metric} windows",
        p.anomalous, p.windows
    );
    match v.combined.verdict {
        Verdict::Ok if p.anomalous == 0 => format!(
            "like its peers: typically {}× its {metric} threshold{doubt}",
            score.map_or("?".to_string(), |s| format!("{s:.2}"))
        ),
        // Anomalous briefly, where the windows it could not be compared in could not have
        // hidden more: transient. Otherwise it is not known.
        Verdict::Ok if undecided.contains(&metric) => {
            format!("{anomalous} compared{doubt}")
        }
        Verdict::Ok => format!(
            "{anomalous}, never {k} of {} in a row: transient{doubt}",
            2 * k - 1
        ),
        _ => {
            let mut s = v.combined.reason.clone();
            if p.anomalous > 0 {
                s.push_str(&format!("; {anomalous}"));
            }
            if let Some(l) = lead {
                s.push_str(&format!("; {l}"));
            }
            s
        }
    }
}

fn metric_report(
    outcome: &Outcome,
    m: &MetricResult,
    order: &[usize],
    suspects: &[&str],
    top: usize,
) -> MetricReport {
    let names = &outcome.names;
    let size = m.windows_ns.size_ns;
    let family = &m.config.family;
    let words = family.words();
    let nodes = order
        .iter()
        .map(|&n| {
            let nm = &m.nodes[n];
            let verdict = status(m, n);
            let (threshold, threshold_source) = match (&m.config.policy, nm.threshold) {
                (Policy::Trained { .. }, Some(t)) => (
                    Some(t.value),
                    Some(if t.own {
                        ThresholdSource::Own
                    } else {
                        ThresholdSource::Largest
                    }),
                ),
                (Policy::Untrained(_), _) => (None, Some(ThresholdSource::Unsupervised)),
                _ => (None, None),
            };
            let show_top = nm.faulty() || suspects.contains(&names[n].as_str());
            let top = if show_top && !nm.anomalous.is_empty() {
                cause_rows(m, n, top, words)
            } else {
                Vec::new()
            };
            NodeReport {
                node: names[n].clone(),
                verdict,
                threshold,
                threshold_source,
                windows_scored: nm.scored,
                windows_incomplete: nm.incomplete,
                windows_partial: nm.partial,
                late_intervals: nm.late,
                windows_different: nm.different,
                max_score: nm.max_score,
                evidence: evidence(nm),
                episodes: nm
                    .episodes
                    .iter()
                    .map(|e| EpisodeReport {
                        from: Timestamp::from_ns(e.first_window_ns),
                        to: Timestamp::from_ns(e.last_window_ns + size),
                    })
                    .collect(),
                anomalous_windows: nm
                    .anomalous
                    .iter()
                    .map(|a| AnomalousWindow {
                        start: Timestamp::from_ns(a.start_ns),
                        end: Timestamp::from_ns(a.start_ns + size),
                        start_ns: a.start_ns,
                        score: a.score,
                        threshold: a.threshold,
                        rare: a.rare,
                    })
                    .collect(),
                top,
                scores: nm.scores.clone(),
            }
        })
        .collect();
    let weighted = m.config.weights.is_some();
    MetricReport {
        metric: m.metric(),
        family: family.group(),
        unit: family.unit().to_string(),
        score_unit: family
            .score_unit(
                outcome.config.distance,
                weighted,
                outcome.config.score.profiles(),
            )
            .to_string(),
        distance_unit: family
            .cause_unit(outcome.config.distance, weighted)
            .to_string(),
        thresholds: match m.config.policy {
            Policy::Trained { .. } => Thresholds::Trained,
            _ => Thresholds::Untrained,
        },
        untrained: None,
        windows: m.windows,
        unscored_windows: m.unscored,
        kept: m.kept_list.len(),
        nodes,
        windows_ns: (m.windows_ns != outcome.config.windows).then_some(m.windows_ns),
    }
}

/// "; rare calls: serverLogRaw 120,412 calls against its peers' median 301 (400×) in 5 count
/// windows" — the rare functions ([`crate::rare`]) that made node `n`'s windows anomalous, the
/// three called most.
fn rare_reason(metrics: &[&MetricResult], n: PeerIdx) -> Option<String> {
    let mut parts = Vec::new();
    for m in metrics {
        let mut v: Vec<_> = m.nodes[n].rare.iter().collect();
        v.sort_by(|a, b| {
            b.1.node
                .total_cmp(&a.1.node)
                .then_with(|| m.comps[*a.0 as usize].cmp(&m.comps[*b.0 as usize]))
        });
        for (&c, f) in v.into_iter().take(3) {
            let name = &m.comps[c as usize].name;
            let against = if f.peers > 0.0 {
                format!(
                    "its peers' median {} ({:.0}×)",
                    group(f.peers),
                    f.node / f.peers
                )
            } else {
                "none on its peers".to_string()
            };
            parts.push(format!(
                "{name} {} calls against {against} in {} {} window{}",
                group(f.node),
                f.windows,
                m.metric(),
                if f.windows == 1 { "" } else { "s" }
            ));
        }
    }
    (!parts.is_empty()).then(|| format!("; rare calls: {}", parts.join(", ")))
}

/// A count with thousands separators (`120,412`).
fn group(x: f64) -> String {
    crate::time::group_digits(x.max(0.0).round() as i128)
}

/// The root-cause table of node `n`.
fn cause_rows(m: &MetricResult, n: PeerIdx, top: usize, words: Words) -> Vec<CauseRow> {
    m.top(n, top)
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            let label = &m.comps[r.comp as usize];
            let rc = r.cause;
            let deviation = rc.node - rc.reference;
            CauseRow {
                rank: i + 1,
                function: label.name.to_string(),
                image: label.image.as_ref().map(|s| s.to_string()),
                program: label.program.as_ref().map(|s| s.to_string()),
                distance: rc.distance,
                node_total: rc.node,
                median_total: rc.reference,
                deviation,
                relative: (rc.reference > 0.0).then(|| deviation / rc.reference),
                direction: CauseDirection::new(Side::of(deviation), words),
                persistence: r.persistence.peak,
                rare: m.nodes[n].rare.contains_key(&r.comp),
            }
        })
        .collect()
}
