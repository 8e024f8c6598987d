//! The tracer's own cost, and what it did to keep it within its budget (format version 7):
//! [`RecordKind::Cost`] (kind 18), the process's CPU time and the
//! runtime's estimate of its share in each interval, and
//! [`RecordKind::Demotions`] (kind 17), the functions it stopped
//! tracing while the program ran.
//!
//! # Cost (kind 18)
//!
//! One per interval, after its Interval record (payload, little-endian):
//!
//! | offset | field |
//! | --- | --- |
//! | 0 | `start_ns` u64, `dur_ns` u64, `flags` u32: the interval, as its Interval record has it |
//! | 20 | reserved u32 (zero) |
//! | 24 | `cpu_ns` u64: the process's CPU time in the interval, all threads (`CLOCK_PROCESS_CPUTIME_ID`), the runtime's included |
//! | 32 | `cost_ns` u64: the runtime's estimate of its own CPU time in the interval |
//! | 40 | `calls` u64: the hook calls that estimate counts (traced calls, and untraced ones that reached the runtime) |
//!
//! # Demotions (kind 17)
//!
//! The runtime keeps its own cost under a budget (`CULPRIT_BUDGET`, default 2 % of the
//! process's CPU time): when its estimate goes above it, it *demotes* the functions that cost
//! most for what they tell (many calls, little time each) to untraced. From then on a demoted
//! function behaves as if it were excluded: no calls counted, its time stays in the self time
//! of the traced frame it was called from (its *caller*). A demotion is for the rest of the
//! process's life. One record says which functions stopped being traced at `at_ns`, why, what
//! the runtime saw of them, and the callers it saw them called from: a reader comparing peers
//! must treat the function as untraced on every node from then on, and its callers' self time
//! as holding its time (see the analysis' docs, docs/thresholds.md).
//!
//! Payload (little-endian):
//!
//! | offset | field |
//! | --- | --- |
//! | 0 | `at_ns` u64: wall-clock ns from which the functions were no longer traced |
//! | 8 | `budget_ppm` u32: the budget, millionths of the process's CPU time (0: a forced demotion, no budget) |
//! | 12 | `cost_ppm` u32: the runtime's estimate of its cost when it decided, millionths of the process's CPU time |
//! | 16 | `call_cost_ps` u32: its estimate of the CPU cost of one traced call (enter and exit), ps |
//! | 20 | `n` u32: entries |
//! | 24 | `n` × [`DEMOTION_ENTRY_SIZE`] bytes: `func` u64, `calls` u64, `self_ns` u64, `observed` u64, `reason` u32, `n_callers` u32 |
//! | … | the entries' callers, `n_callers` u64 addresses each, in entry order |
//!
//! `calls` and `self_ns` are what the function did in the interval the decision was made on
//! (its calls per second: `calls` / the file's interval); `observed` is how many of its calls
//! the runtime looked at to find its callers. A caller address of 0 stands for calls made with
//! no traced frame below (a thread's first function, or called from untraced code only).

use crate::bytes::{le32, le64};
use crate::encode::RecordBuf;
use crate::interval::{IntervalKey, IntervalRef};
use crate::layout::RecordKind;

/// Size of a [`RecordKind::Cost`] payload.
pub const COST_SIZE: usize = 48;

/// One interval's CPU time of the process and the runtime's share of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CostRec {
    /// The interval.
    pub interval: IntervalKey,
    /// The process's CPU time in it (all threads, the runtime's included), ns.
    pub cpu_ns: u64,
    /// The runtime's estimate of its own CPU time in it, ns.
    pub cost_ns: u64,
    /// Hook calls the estimate counts.
    pub calls: u64,
}

impl RecordBuf {
    /// Appends a [`RecordKind::Cost`] record (the `interval` field of
    /// `c` is ignored: `r` names the interval).
    pub fn cost(&mut self, r: &IntervalRef, c: &CostRec) {
        let start = self.begin(RecordKind::Cost, 0);
        self.interval_ref(r);
        self.u32(0);
        self.u64(c.cpu_ns);
        self.u64(c.cost_ns);
        self.u64(c.calls);
        self.finish(start);
    }
}

/// Decodes a Cost payload.
pub(crate) fn decode_cost(p: &[u8]) -> Result<CostRec, &'static str> {
    if p.len() < COST_SIZE {
        return Err("cost record too short");
    }
    Ok(CostRec {
        interval: IntervalKey::read(p),
        cpu_ns: le64(p, 24),
        cost_ns: le64(p, 32),
        calls: le64(p, 40),
    })
}

/// Fixed part of a [`RecordKind::Demotions`] payload, in bytes.
pub const DEMOTIONS_FIXED_SIZE: usize = 24;
/// Size of one entry of it (the callers follow all entries).
pub const DEMOTION_ENTRY_SIZE: usize = 40;
/// Most callers recorded per demoted function (further ones are not told apart).
pub const MAX_CALLERS: usize = 64;

/// Why a function was demoted (an entry's `reason`).
pub mod demotion_reason {
    /// The runtime's cost was above its budget.
    pub const BUDGET: u32 = 1;
    /// Named in `CULPRIT_DEMOTE` (tests, or a user demoting by hand at run time).
    pub const FORCED: u32 = 2;
}

/// Fixed fields of a Demotions record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DemotionsHead {
    /// Wall-clock ns from which the functions were no longer traced.
    pub at_ns: u64,
    /// The budget, millionths of the process's CPU time (0: none).
    pub budget_ppm: u32,
    /// The runtime's cost estimate when it decided, millionths of the process's CPU time.
    pub cost_ppm: u32,
    /// Estimated CPU cost of one traced call, ps.
    pub call_cost_ps: u32,
}

/// One demoted function. `F` is how functions are named: addresses as the file holds them, or
/// whatever a reader resolves them to ([`Demotion::map_funcs`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Demotion<F = u64> {
    /// The function.
    pub func: F,
    /// Its calls in the interval the decision was made on.
    pub calls: u64,
    /// Its self time in that interval, ns.
    pub self_ns: u64,
    /// Calls looked at to find its callers.
    pub observed: u64,
    /// [`demotion_reason`] value.
    pub reason: u32,
    /// The traced frames it was seen called from (`None`: no traced frame below).
    pub callers: Vec<Option<F>>,
}

impl<F> Demotion<F> {
    /// The same entry with its functions named by `f`.
    pub fn map_funcs<G>(self, mut f: impl FnMut(F) -> G) -> Demotion<G> {
        Demotion {
            func: f(self.func),
            calls: self.calls,
            self_ns: self.self_ns,
            observed: self.observed,
            reason: self.reason,
            callers: self.callers.into_iter().map(|c| c.map(&mut f)).collect(),
        }
    }
}

/// A decoded Demotions record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DemotionsRec {
    /// The fixed fields.
    pub head: DemotionsHead,
    /// The demoted functions.
    pub entries: Vec<Demotion>,
}

impl RecordBuf {
    /// Appends a [`RecordKind::Demotions`] record (at most
    /// [`MAX_CALLERS`] callers per entry are written). Returns the number of entries written.
    pub fn demotions(&mut self, head: &DemotionsHead, entries: &[Demotion]) -> u32 {
        let start = self.begin(RecordKind::Demotions, 0);
        self.u64(head.at_ns);
        self.u32(head.budget_ppm);
        self.u32(head.cost_ppm);
        self.u32(head.call_cost_ps);
        self.u32(entries.len() as u32);
        for e in entries {
            self.u64(e.func);
            self.u64(e.calls);
            self.u64(e.self_ns);
            self.u64(e.observed);
            self.u32(e.reason);
            self.u32(e.callers.len().min(MAX_CALLERS) as u32);
        }
        for e in entries {
            for c in e.callers.iter().take(MAX_CALLERS) {
                self.u64(c.unwrap_or(0));
            }
        }
        self.finish(start);
        entries.len() as u32
    }
}

/// Decodes a Demotions payload, checking every length.
pub(crate) fn decode_demotions(p: &[u8]) -> Result<DemotionsRec, &'static str> {
    if p.len() < DEMOTIONS_FIXED_SIZE {
        return Err("demotions record too short");
    }
    let n = le32(p, 20) as usize;
    let mut callers_at = n
        .checked_mul(DEMOTION_ENTRY_SIZE)
        .and_then(|b| b.checked_add(DEMOTIONS_FIXED_SIZE))
        .filter(|&end| end <= p.len())
        .ok_or("demotion count exceeds record length")?;
    let mut entries = Vec::with_capacity(n);
    for i in 0..n {
        let o = DEMOTIONS_FIXED_SIZE + i * DEMOTION_ENTRY_SIZE;
        let nc = le32(p, o + 36) as usize;
        let end = nc
            .checked_mul(8)
            .and_then(|b| b.checked_add(callers_at))
            .filter(|&end| end <= p.len() && nc <= MAX_CALLERS)
            .ok_or("demotion callers exceed record length")?;
        let callers = (callers_at..end)
            .step_by(8)
            .map(|c| Some(le64(p, c)).filter(|&a| a != 0))
            .collect();
        callers_at = end;
        entries.push(Demotion {
            func: le64(p, o),
            calls: le64(p, o + 8),
            self_ns: le64(p, o + 16),
            observed: le64(p, o + 24),
            reason: le32(p, o + 32),
            callers,
        });
    }
    Ok(DemotionsRec {
        head: DemotionsHead {
            at_ns: le64(p, 0),
            budget_ppm: le32(p, 8),
            cost_ppm: le32(p, 12),
            call_cost_ps: le32(p, 16),
        },
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::{records_at, Record};

    #[test]
    fn round_trip() {
        let head = DemotionsHead {
            at_ns: 1_700_000_000_000_000_000,
            budget_ppm: 20_000,
            cost_ppm: 310_000,
            call_cost_ps: 17_500,
        };
        let entries = vec![
            Demotion {
                func: 0x5555_0000_1230,
                calls: 7_000_000,
                self_ns: 70_000_000,
                observed: 10_000,
                reason: demotion_reason::BUDGET,
                callers: vec![Some(0x5555_0000_2000), None],
            },
            Demotion {
                func: 0x5555_0000_4560,
                calls: 10,
                self_ns: 5,
                observed: 0,
                reason: demotion_reason::FORCED,
                callers: vec![],
            },
        ];
        let mut buf = RecordBuf::new();
        assert_eq!(buf.demotions(&head, &entries), 2);
        let recs: Vec<_> = records_at(buf.as_bytes(), 0).collect();
        assert_eq!(recs.len(), 1);
        match &recs[0] {
            Ok(Record::Demotions(r)) => {
                assert_eq!(r.head, head);
                assert_eq!(r.entries, entries);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn cost_round_trip() {
        let r = IntervalRef {
            start_ns: 5_000_000_000,
            dur_ns: 1_000_000_000,
            flags: 2,
        };
        let c = CostRec {
            interval: IntervalKey {
                start_ns: 5_000_000_000,
                dur_ns: 1_000_000_000,
                flags: 2,
            },
            cpu_ns: 987_654_321,
            cost_ns: 12_345_678,
            calls: 700_000,
        };
        let mut buf = RecordBuf::new();
        buf.cost(&r, &c);
        match records_at(buf.as_bytes(), 0).next() {
            Some(Ok(Record::Cost(got))) => assert_eq!(got, c),
            other => panic!("{other:?}"),
        }
        let payload = &buf.as_bytes()[crate::RECORD_HEADER_SIZE..];
        assert!(decode_cost(&payload[..40]).is_err());
    }

    #[test]
    fn lengths_are_checked() {
        let mut buf = RecordBuf::new();
        buf.demotions(
            &DemotionsHead::default(),
            &[Demotion {
                callers: vec![Some(1), Some(2)],
                ..Demotion::default()
            }],
        );
        let payload = &buf.as_bytes()[crate::RECORD_HEADER_SIZE..];
        assert!(decode_demotions(payload).is_ok());
        // Cut the callers short, or claim more entries than there are.
        assert!(decode_demotions(&payload[..payload.len() - 8]).is_err());
        let mut more = payload.to_vec();
        more[20] = 9;
        assert!(decode_demotions(&more).is_err());
        assert!(decode_demotions(&payload[..16]).is_err());
    }
}
