//! What tracing costs the process, and the cost budget: each interval's cost record, demoting
//! the functions that cost most for what they tell, and rewriting the call sites of untraced
//! functions to NOPs.

use super::*;

impl Flusher {
    /// The interval's Cost record — the process's CPU time since the last one, the runtime's
    /// estimate of its own share (traced calls and quiet calls × what each cost at start-up)
    /// — then the budget's check over the whole interval ([`Self::budget_check`]).
    pub(super) fn cost_and_budget(&mut self, start: u64, flags: u32, t: &Tally) {
        let cpu_now = sys::process_cpu_ns();
        let cpu_ns = cpu_now.saturating_sub(self.cpu_at);
        self.cpu_at = cpu_now;
        // Only the flusher takes a block's quiet count; a block keeps it when its thread exits
        // (free, until another thread claims it) and hands it over when given back.
        let mut quiet = pool::take_quiet_released();
        for b in pool::blocks() {
            let st = b.state.load(Acquire);
            if st == state::LIVE || st == state::DEAD || st == state::FREE {
                quiet += b.take_quiet();
            }
        }
        let calls = t.calls();
        let cost_ns = calls as f64 * self.call.traced_ns + quiet as f64 * self.call.quiet_hook_ns();
        let r = IntervalRef {
            start_ns: start,
            dur_ns: self.cfg.interval_ns,
            flags,
        };
        self.buf.cost(
            &r,
            &CostRec {
                cpu_ns,
                cost_ns: cost_ns as u64,
                calls: calls + quiet,
                ..CostRec::default()
            },
        );
        if !interval_flags::is_missed(flags) {
            self.budget_check(t, cpu_ns, self.cfg.interval_ns);
        }
    }

    /// The budget's check of `t`, the calls of the last `dur_ns` (an interval, or the interval
    /// in progress at a checkpoint), in which the process used `cpu_ns` of CPU: above the
    /// budget, the functions that cost most for what they tell are demoted (`crate::budget`);
    /// functions `CULPRIT_DEMOTE` names are demoted on sight. Calls of functions already
    /// demoted are not counted: they no longer cost what they did.
    pub(super) fn budget_check(&mut self, t: &Tally, cpu_ns: u64, dur_ns: u64) {
        let now = sys::realtime_ns();
        let cal = self.cal;
        // The record says what a function does in an interval: a checkpoint's part scaled.
        let per_interval = self.cfg.interval_ns as f64 / dur_ns.max(1) as f64;
        let decided = |addr: usize, d: &Delta, reason| Decided {
            addr,
            reason,
            calls: (d.calls as f64 * per_interval) as u64,
            self_ns: (cal.to_ns(d.excl) as f64 * per_interval) as u64,
        };
        let cands: Vec<(usize, &Delta)> = t
            .agg
            .iter()
            .filter(|(a, _)| demote::state_of(**a) == demote::state::TRACED)
            .map(|(&a, d)| (a, d))
            .collect();
        let forced: Vec<Decided> = cands
            .iter()
            .filter(|(a, _)| decide::demote_wanted(*a))
            .map(|&(a, d)| decided(a, d, demotion_reason::FORCED))
            .collect();
        if demote::begin(&forced, now) > 0 {
            self.decisions.push((now, 0));
        }
        let Some(budget) = self.cfg.budget else {
            return;
        };
        let funcs: Vec<FuncCost> = cands
            .iter()
            .map(|(_, d)| FuncCost {
                calls: d.calls,
                self_ns: cal.to_ns(d.excl),
            })
            .collect();
        let iv = budget::Interval {
            cpu_ns,
            dur_ns,
            calls: funcs.iter().map(|f| f.calls).sum(),
        };
        let pick = budget::choose(budget, self.call.traced_ns, &iv, &funcs);
        let chosen: Vec<Decided> = pick
            .iter()
            .filter(|&&i| demote::state_of(cands[i].0) == demote::state::TRACED)
            .map(|&i| decided(cands[i].0, cands[i].1, demotion_reason::BUDGET))
            .collect();
        // Its own time: the forced demotions of this pass have theirs.
        let at = now + 1;
        if demote::begin(&chosen, at) > 0 {
            let share = iv.share(self.call.traced_ns).min(1.0);
            self.decisions.push((at, (share * 1e6) as u32));
        }
    }

    /// The Demotions records of the functions whose callers were looked at long enough (half
    /// an interval or more, and until a call was seen, for at most five intervals): one per
    /// decision.
    pub(super) fn write_demotions(&mut self) {
        let now = sys::realtime_ns();
        let done = demote::finish(
            now.saturating_sub(self.cfg.interval_ns / 2),
            now.saturating_sub(self.cfg.interval_ns.saturating_mul(5)),
        );
        let mut k = 0;
        while k < done.len() {
            let at = done[k].at_ns;
            let n = done[k..].iter().take_while(|f| f.at_ns == at).count();
            let group = &done[k..k + n];
            k += n;
            let cost_ppm = self.decisions.iter().find(|d| d.0 == at).map_or(0, |d| d.1);
            let forced = group
                .iter()
                .all(|f| f.decided.reason == demotion_reason::FORCED);
            let head = DemotionsHead {
                at_ns: at,
                budget_ppm: match (forced, self.cfg.budget) {
                    (false, Some(b)) => (b * 1e6) as u32,
                    _ => 0,
                },
                cost_ppm,
                call_cost_ps: (self.call.traced_ns * 1000.0) as u32,
            };
            let entries: Vec<Demotion> = group
                .iter()
                .map(|f| Demotion {
                    func: f.decided.addr as u64,
                    calls: f.decided.calls,
                    self_ns: f.decided.self_ns,
                    observed: f.observed,
                    reason: f.decided.reason,
                    callers: f.callers.iter().map(|c| c.map(|a| a as u64)).collect(),
                })
                .collect();
            self.buf.demotions(&head, &entries);
        }
        let oldest = done.last().map_or(0, |f| f.at_ns);
        self.decisions.retain(|d| d.0 > oldest);
    }

    /// Rewrites the hook call sites of untraced functions noted since the last call to NOPs
    /// (`sys::patch`), and says in the file how many are.
    pub(super) fn patch_sites(&mut self) {
        if !sys::patch::enabled() || !sys::patch::pending() {
            return;
        }
        // The link map now (the tracker's is the last interval's, and its changes are the
        // Object records').
        let objs = crate::objects::scan();
        let mut functions = crate::bodies::Functions {
            bodies: &mut self.bodies,
            objects: &objs,
        };
        sys::patch::apply(&self.hooks, &mut functions);
        let st = sys::patch::stats();
        if st.patched != self.patched {
            self.patched = st.patched;
            self.buf.info([
                (info_keys::PATCHED_SITES, st.patched.to_string().as_str()),
                (info_keys::PATCH_KEPT, st.kept.to_string().as_str()),
                (info_keys::PATCHED_INLINED, st.inlined.to_string().as_str()),
            ]);
        }
    }
}
