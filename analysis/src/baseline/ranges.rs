//! The windows a baseline leaves to an analysis: stretches of wall-clock time.

use crate::data::Span;

/// Stretches of wall-clock time, sorted and disjoint: the windows an analysis may close. A
/// window is analysed only when it lies wholly inside one stretch, so a baseline learns no
/// window that reaches past it, and the diagnosis after it judges none that reaches into it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ranges(Vec<Span>);

impl Ranges {
    /// One stretch.
    pub fn one(span: Span) -> Self {
        Ranges::from_spans(vec![span])
    }

    /// Everything from `start_ns` on.
    pub fn from(start_ns: u64) -> Self {
        Ranges::one(Span {
            start_ns,
            end_ns: u64::MAX,
        })
    }

    /// The union of `spans` (empty ones dropped).
    pub fn from_spans(mut spans: Vec<Span>) -> Self {
        spans.retain(|s| s.end_ns > s.start_ns);
        spans.sort_by_key(|s| s.start_ns);
        let mut out: Vec<Span> = Vec::with_capacity(spans.len());
        for s in spans {
            match out.last_mut() {
                Some(l) if s.start_ns <= l.end_ns => l.end_ns = l.end_ns.max(s.end_ns),
                _ => out.push(s),
            }
        }
        Ranges(out)
    }

    /// The stretches.
    pub fn spans(&self) -> &[Span] {
        &self.0
    }

    /// True when the window `[start_ns, end_ns)` lies wholly inside one stretch.
    pub fn holds(&self, start_ns: u64, end_ns: u64) -> bool {
        // The last stretch starting at or before the window's start is the only candidate.
        let i = self.0.partition_point(|s| s.start_ns <= start_ns);
        i > 0 && end_ns <= self.0[i - 1].end_ns
    }

    /// True when `[start_ns, end_ns)` overlaps a stretch (the feeder drops intervals that do
    /// not).
    pub fn touches(&self, start_ns: u64, end_ns: u64) -> bool {
        let i = self.0.partition_point(|s| s.end_ns <= start_ns);
        i < self.0.len() && self.0[i].start_ns < end_ns
    }

    /// These stretches without `cut`.
    pub fn without(&self, cut: &Ranges) -> Ranges {
        let mut out = Vec::new();
        for s in &self.0 {
            let mut from = s.start_ns;
            for c in &cut.0 {
                if c.end_ns <= from || c.start_ns >= s.end_ns {
                    continue;
                }
                if c.start_ns > from {
                    out.push(Span {
                        start_ns: from,
                        end_ns: c.start_ns,
                    });
                }
                from = from.max(c.end_ns);
            }
            if from < s.end_ns {
                out.push(Span {
                    start_ns: from,
                    end_ns: s.end_ns,
                });
            }
        }
        Ranges::from_spans(out)
    }

    /// Total length, ns.
    pub fn total_ns(&self) -> u64 {
        self.0.iter().map(|s| s.end_ns - s.start_ns).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baseline::test_span::{sp, S};

    #[test]
    fn ranges_hold_whole_windows() {
        let r = Ranges::from_spans(vec![sp(30, 40), sp(0, 10), sp(5, 12), sp(50, 50)]);
        assert_eq!(r.spans(), &[sp(0, 12), sp(30, 40)]);
        assert!(r.holds(0, 10 * S));
        assert!(r.holds(2 * S, 12 * S));
        assert!(!r.holds(5 * S, 15 * S), "reaches past the stretch");
        assert!(!r.holds(25 * S, 35 * S), "starts before the stretch");
        assert!(r.holds(30 * S, 40 * S));
        assert!(!r.holds(40 * S, 41 * S));
        assert!(r.touches(11 * S, 31 * S));
        assert!(!r.touches(12 * S, 30 * S));
        let cut = Ranges::from_spans(vec![sp(3, 5), sp(35, 60)]);
        assert_eq!(r.without(&cut).spans(), &[sp(0, 3), sp(5, 12), sp(30, 35)]);
        assert_eq!(r.without(&cut).total_ns(), 15 * S);
        assert!(Ranges::from(7 * S).holds(7 * S, u64::MAX));
    }
}
