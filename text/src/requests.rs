//! `culprit diagnose --requests` for people: seed 004's request analysis
//! (`culprit_analysis::requests`: categories by call tree, CV, robust PCA) as the ranking of
//! anomalous methods, the categories and the single-node RPCA's strays.

use std::io::Write;

use culprit_analysis::requests::{self, RequestsOptions, RequestsReport};
use culprit_analysis::time::{fmt_sig, fmt_wall};

fn ms(ns: f64) -> String {
    format!("{} ms", fmt_sig(ns / 1e6))
}

/// The report for people: at most `top` methods, categories and strays of each node.
pub fn print_human(
    r: &RequestsReport,
    opts: &RequestsOptions,
    top: usize,
    out: &mut impl Write,
) -> std::io::Result<()> {
    writeln!(
        out,
        "REQUESTS (seed 004): {} sampled request(s), one in {} recorded; {} categories by call \
         tree; anomalous above CV {}, methods below cosine {}",
        r.requests,
        r.sample_every.max(1),
        r.categories.len(),
        fmt_sig(opts.cv_threshold),
        fmt_sig(opts.cos_threshold)
    )?;
    if r.unfinished > 0 || r.dropped_events > 0 {
        writeln!(
            out,
            "  {} request part(s) without an end left out; {} event(s) lost by the writers",
            r.unfinished, r.dropped_events
        )?;
    }
    if r.ranking.is_empty() {
        writeln!(out, "RANKING: no anomalous method")?;
    } else {
        writeln!(
            out,
            "RANKING (categories flagging the method on the node, then time in the sparse part):"
        )?;
        for (i, m) in r.ranking.iter().take(top).enumerate() {
            writeln!(
                out,
                "  {:>2}. {} [{}] on {}: {} categor{}, {} excess, cosine {}",
                i + 1,
                m.function,
                m.image,
                m.node,
                m.categories,
                if m.categories == 1 { "y" } else { "ies" },
                ms(m.excess_ns),
                fmt_sig(m.cosine)
            )?;
        }
    }
    for c in r.categories.iter().take(top) {
        writeln!(
            out,
            "category {} (type {}): {} requests × {} calls on {}; mean {}, CV {}{}",
            c.id,
            c.rtype,
            c.requests,
            c.methods,
            c.nodes.join(", "),
            ms(c.mean_ns),
            fmt_sig(c.cv),
            if c.anomalous { " — ANOMALOUS" } else { "" }
        )?;
        for f in &c.flagged {
            let reps: Vec<String> = requests::significant(&f.replicas)
                .map(|p| format!("{} ({}/{} requests)", p.node, p.large, p.rows))
                .collect();
            let reps = if reps.is_empty() {
                "no node stands out".to_string()
            } else {
                format!("replica {}", reps.join(", "))
            };
            writeln!(
                out,
                "    call {} {} (depth {}): cosine {}, {} excess; {reps}",
                f.position + 1,
                f.function,
                f.depth,
                fmt_sig(f.cosine),
                ms(f.excess_ns),
            )?;
        }
    }
    if r.categories.len() > top {
        writeln!(out, "… {} more categories", r.categories.len() - top)?;
    }
    for s in &r.series {
        if s.flagged.is_empty() {
            writeln!(
                out,
                "SINGLE-NODE RPCA {}: {} intervals × {} functions, none stray",
                s.node, s.intervals, s.functions
            )?;
            continue;
        }
        writeln!(
            out,
            "SINGLE-NODE RPCA {}: {} intervals × {} functions; functions that stray from the \
             node's own pattern:",
            s.node, s.intervals, s.functions
        )?;
        for f in s.flagged.iter().take(top) {
            writeln!(
                out,
                "    {} [{}]: cosine {}, +{} / −{} in {} interval(s) from {} to {}",
                f.function,
                f.image,
                fmt_sig(f.cosine),
                ms(f.excess_ns),
                ms(f.deficit_ns),
                f.large_intervals,
                fmt_wall(f.first_ns),
                fmt_wall(f.last_ns)
            )?;
        }
    }
    for n in &r.notes {
        writeln!(out, "note: {n}")?;
    }
    Ok(())
}
