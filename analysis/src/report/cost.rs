//! What tracing cost a process, from its file: the process's CPU time and the runtime's
//! estimate of its own share (Cost records), the functions the runtime demoted to stay within
//! its budget (Demotions records), and the functions to leave out of the build so that tracing
//! costs little even without demotions — with the `gcc` flags that do it
//! ([`exclude_flags`], `culprit report --exclude-flags`).

use std::collections::HashMap;

use serde::Serialize;

use crate::data::{Dataset, FuncId, TraceFile};

/// The budget assumed when a file says none (budget off, or written before budgets): the
/// runtime's default, 2 % of the process's CPU time.
pub const DEFAULT_BUDGET: f64 = 0.02;
/// A function whose self time per call is above this does real work: it is suggested for
/// exclusion only when the budget cannot be met without it. The runtime's demotion rule
/// uses the same limit (`rt/src/budget.rs`).
pub const WORK_NS_PER_CALL: f64 = 1_000.0;

/// One process's tracing cost over the report's range.
#[derive(Clone, Debug, Serialize)]
pub struct TracingCost {
    /// The budget in effect as the runtime recorded it (`2%`, `off`); absent in files written
    /// before budgets.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    /// The runtime's estimate of one traced call's CPU cost (enter and exit), ns.
    pub call_ns: f64,
    /// The process's CPU time over the intervals that say it, ns.
    pub cpu_ns: u64,
    /// The runtime's estimate of its own CPU time over them, ns.
    pub cost_ns: u64,
    /// Traced calls per second (the range's calls over its span).
    pub calls_per_s: f64,
    /// The cost is above the budget (or, without one, above [`DEFAULT_BUDGET`]).
    pub expensive: bool,
    /// Functions the runtime stopped tracing, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub demoted: Vec<DemotedRow>,
    /// Functions to leave out of the build: the demoted ones, then those whose calls would
    /// keep the cost above the budget (most calls first, functions doing real work last).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub exclude: Vec<ExcludeRow>,
}

impl TracingCost {
    /// `cost_ns / cpu_ns`.
    pub fn share(&self) -> f64 {
        self.cost_ns as f64 / self.cpu_ns.max(1) as f64
    }
}

/// A function the runtime demoted.
#[derive(Clone, Debug, Serialize)]
pub struct DemotedRow {
    /// Wall-clock ns from which it was untraced.
    pub at_ns: u64,
    /// Function and image.
    pub function: String,
    /// Image base name.
    pub image: String,
    /// `budget` or `forced` (`CULPRIT_DEMOTE`).
    pub reason: &'static str,
    /// Its calls per second when the runtime decided.
    pub calls_per_s: f64,
    /// Its self time per call then, ns.
    pub self_ns_per_call: f64,
    /// The traced functions it was seen called from (`(root)`: none).
    pub callers: Vec<String>,
    /// The runtime's cost estimate when it decided, fraction of the process's CPU time.
    pub cost_share: f64,
}

/// A function worth leaving out of the build.
#[derive(Clone, Debug, Serialize)]
pub struct ExcludeRow {
    /// Function.
    pub function: String,
    /// Image base name.
    pub image: String,
    /// Its traced calls in the range.
    pub calls: u64,
    /// Its self time in the range, ns.
    pub self_ns: u64,
    /// Demoted by the runtime.
    pub demoted: bool,
}

fn budget_fraction(s: Option<&str>) -> Option<f64> {
    let v = s?.trim().strip_suffix('%')?.trim().parse::<f64>().ok()?;
    (v > 0.0 && v.is_finite()).then_some(v / 100.0)
}

/// The cost of the process of `files` over the intervals `in_range` accepts; `funcs` are its
/// functions' (calls, self ns) in the range. `None` for files without Cost records (written
/// before format version 7, or by uprobes).
pub fn tracing_cost(
    ds: &Dataset,
    files: &[&TraceFile],
    funcs: &HashMap<FuncId, (u64, u64)>,
    in_range: &dyn Fn(u64) -> bool,
) -> Option<TracingCost> {
    let first = files.first()?;
    let (mut cpu, mut cost, mut span, mut any) = (0u64, 0u64, 0u64, false);
    for iv in files
        .iter()
        .flat_map(|t| &t.intervals)
        .filter(|iv| in_range(iv.start_ns) && !iv.missed())
    {
        span += iv.dur_ns;
        if let Some(c) = &iv.cost {
            any = true;
            cpu += c.cpu_ns;
            cost += c.cost_ns;
        }
    }
    if !any {
        return None;
    }
    let call_ns = first
        .info(culprit_format::info_keys::CALL_COST_PS)
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1000.0;
    let budget = first
        .info(culprit_format::info_keys::BUDGET)
        .map(String::from);
    let target = budget_fraction(budget.as_deref()).unwrap_or(DEFAULT_BUDGET);
    let name = |f: FuncId| {
        let k = ds.names.funcs.get(f);
        (k.function.to_string(), k.image.to_string())
    };
    let mut demoted = Vec::new();
    let mut exclude: Vec<ExcludeRow> = Vec::new();
    for t in files {
        for d in &t.demotions {
            let dur = t.interval_ns.max(1) as f64 / 1e9;
            for e in &d.entries {
                let (function, image) = name(e.func);
                demoted.push(DemotedRow {
                    at_ns: d.head.at_ns,
                    function: function.clone(),
                    image: image.clone(),
                    reason: if e.reason == culprit_format::demotion_reason::FORCED {
                        "forced"
                    } else {
                        "budget"
                    },
                    calls_per_s: e.calls as f64 / dur,
                    self_ns_per_call: e.self_ns as f64 / e.calls.max(1) as f64,
                    callers: e
                        .callers
                        .iter()
                        .map(|c| c.map_or_else(|| "(root)".to_string(), |c| name(c).0))
                        .collect(),
                    cost_share: d.head.cost_ppm as f64 / 1e6,
                });
                if !exclude.iter().any(|x| x.function == function) {
                    let (calls, self_ns) = funcs.get(&e.func).copied().unwrap_or((0, 0));
                    exclude.push(ExcludeRow {
                        function,
                        image,
                        calls,
                        self_ns,
                        demoted: true,
                    });
                }
            }
        }
    }
    let calls: u64 = funcs.values().map(|v| v.0).sum();
    let share = cost as f64 / cpu.max(1) as f64;
    // What leaving out the functions with the most calls would save, tiny ones first: until
    // the rest costs no more than the budget. The demoted ones go first (their calls in the
    // range, before they were demoted, cost what the rest of theirs no longer does); a
    // function whose calls cost under 0.05 % of the CPU time is not worth a rebuild.
    let demoted_calls: u64 = exclude.iter().filter(|x| x.demoted).map(|x| x.calls).sum();
    let mut rest = (cost as f64 - demoted_calls as f64 * call_ns).max(0.0);
    let goal = target * cpu as f64;
    let negligible = 0.0005 * cpu as f64;
    if call_ns > 0.0 && rest > goal {
        let mut order: Vec<(FuncId, u64, u64)> =
            funcs.iter().map(|(&f, &(c, s))| (f, c, s)).collect();
        let works = |c: u64, s: u64| s as f64 / c.max(1) as f64 > WORK_NS_PER_CALL;
        order.sort_by(|a, b| {
            works(a.1, a.2)
                .cmp(&works(b.1, b.2))
                .then(b.1.cmp(&a.1))
                .then(a.0.cmp(&b.0))
        });
        for (f, c, s) in order {
            if rest <= goal || c == 0 {
                break;
            }
            if (c as f64) * call_ns < negligible {
                continue;
            }
            let (function, image) = name(f);
            if exclude.iter().any(|x| x.function == function) {
                continue;
            }
            rest -= c as f64 * call_ns;
            exclude.push(ExcludeRow {
                function,
                image,
                calls: c,
                self_ns: s,
                demoted: false,
            });
        }
    }
    Some(TracingCost {
        budget,
        call_ns,
        cpu_ns: cpu,
        cost_ns: cost,
        calls_per_s: calls as f64 / (span.max(1) as f64 / 1e9),
        expensive: share > target,
        demoted,
        exclude,
    })
}

/// The name to give gcc for `function`: the demangled name without its parameter list (gcc
/// matches the user-visible name, by substring); `None` when it cannot be given (an address,
/// or a comma gcc would split the list at).
pub fn gcc_name(function: &str) -> Option<String> {
    if function.contains("+0x") || function.is_empty() {
        return None;
    }
    // Cut the parameter list: the first '(' outside template brackets.
    let mut depth = 0i32;
    let mut end = function.len();
    for (i, ch) in function.char_indices() {
        match ch {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 && i > 0 => {
                end = i;
                break;
            }
            _ => {}
        }
    }
    let name = function[..end].trim();
    if name.contains(',') {
        // Template arguments: the template's name alone (a broader match).
        let cut = name.find('<')?;
        let base = name[..cut].trim();
        return (!base.is_empty()).then(|| base.to_string());
    }
    Some(name.to_string())
}

/// The flags that leave `functions` out of a `gcc -finstrument-functions` build, and what a
/// reader must know: names gcc also matches (it matches substrings) among `known`, names that
/// cannot be given.
pub fn exclude_flags<'a>(
    functions: impl IntoIterator<Item = &'a str>,
    known: &[&str],
) -> (Option<String>, Vec<String>) {
    let mut names: Vec<String> = Vec::new();
    let mut notes = Vec::new();
    for f in functions {
        match gcc_name(f) {
            Some(n) if !names.contains(&n) => names.push(n),
            Some(_) => {}
            None => notes.push(format!(
                "{f}: no name gcc can match (not symbolized, or its name has a comma); leave \
                 it out with __attribute__((no_instrument_function)) or \
                 -finstrument-functions-exclude-file-list=<its source file>"
            )),
        }
    }
    for n in &names {
        let also: Vec<&str> = known
            .iter()
            .copied()
            .filter(|k| k.contains(n.as_str()) && gcc_name(k).as_deref() != Some(n.as_str()))
            .collect();
        if !also.is_empty() {
            let shown: Vec<&str> = also.iter().take(5).copied().collect();
            notes.push(format!(
                "gcc matches substrings: {n} also leaves out {}{}",
                shown.join(", "),
                if also.len() > 5 {
                    format!(" and {} more", also.len() - 5)
                } else {
                    String::new()
                }
            ));
        }
    }
    let flags = (!names.is_empty()).then(|| {
        format!(
            "-finstrument-functions-exclude-function-list={}",
            names.join(",")
        )
    });
    (flags, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcc_names() {
        assert_eq!(gcc_name("leaf").as_deref(), Some("leaf"));
        assert_eq!(
            gcc_name("ns::C::get(int) const").as_deref(),
            Some("ns::C::get")
        );
        assert_eq!(
            gcc_name("std::vector<int, std::allocator<int> >::size() const").as_deref(),
            Some("std::vector")
        );
        assert_eq!(gcc_name("server+0x1234"), None);
        assert_eq!(gcc_name("operator()").as_deref(), Some("operator"));
    }

    #[test]
    fn flags_and_collateral() {
        let (flags, notes) = exclude_flags(
            ["leaf", "strlen_helper", "server+0x10"],
            &["leaf", "leafy", "main", "strlen_helper"],
        );
        assert_eq!(
            flags.as_deref(),
            Some("-finstrument-functions-exclude-function-list=leaf,strlen_helper")
        );
        assert!(
            notes
                .iter()
                .any(|n| n.contains("leaf also leaves out leafy")),
            "{notes:?}"
        );
        assert!(
            notes.iter().any(|n| n.starts_with("server+0x10:")),
            "{notes:?}"
        );
        assert_eq!(notes.len(), 2, "{notes:?}");
    }

    #[test]
    fn budgets() {
        assert_eq!(budget_fraction(Some("2%")), Some(0.02));
        assert_eq!(budget_fraction(Some(" 0.5 % ")), Some(0.005));
        assert_eq!(budget_fraction(Some("off")), None);
        assert_eq!(budget_fraction(None), None);
    }
}
