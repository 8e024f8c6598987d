use culprit_format::interval_flags;

use super::intervals::{Gaps, Intervals};
use crate::procs::Loc;

#[test]
fn intervals_are_aligned_partial_and_contiguous() {
    let s = 1_000_000_000u64;
    let mut iv = Intervals::new(s, 10 * s + s / 2, 1, 0);
    iv.sample(10 * s + s / 2 + 1, 0, 0, Loc::Unknown);
    iv.sample(12 * s + 5, 0, 0, Loc::Unknown);
    let closed = iv.close_until(12 * s + 10);
    assert_eq!(closed.len(), 2);
    assert_eq!(closed[0].start_ns, 10 * s);
    assert_eq!(closed[0].flags, interval_flags::PARTIAL);
    assert_eq!(closed[0].acc.nodes[0].total, 1);
    // An interval without samples still gets a record.
    assert_eq!(closed[1].start_ns, 11 * s);
    assert_eq!(closed[1].flags, 0);
    assert_eq!(closed[1].acc.nodes[0].total, 0);
    // A late record lands in the oldest open interval.
    iv.sample(10 * s + 7, 0, 0, Loc::Unknown);
    assert_eq!(iv.late(), 1);
    let rest = iv.close_all(13 * s + 1);
    assert_eq!(rest.len(), 2);
    assert_eq!(rest[0].start_ns, 12 * s);
    assert_eq!(rest[0].acc.nodes[0].total, 2);
    assert_eq!(rest[1].flags, interval_flags::PARTIAL);
}

#[test]
fn a_stall_is_missed_only_with_lost_records_in_that_round_or_the_next() {
    let mut g = Gaps::default();
    assert_eq!(g.round(None, false), vec![]);
    assert_eq!(g.round(None, true), vec![], "lost records without a stall");
    assert_eq!(g.round(Some((10, 20)), true), vec![(10, 20)]);
    // The LOST record comes a round late.
    assert_eq!(g.round(Some((30, 40)), false), vec![]);
    assert_eq!(g.round(None, true), vec![(30, 40)]);
    // A stall without any loss is not missing data.
    assert_eq!(g.round(Some((50, 60)), false), vec![]);
    assert_eq!(g.round(None, false), vec![]);
    assert_eq!(g.round(None, true), vec![]);
    // Two stalls in a row, the loss seen at the second.
    assert_eq!(g.round(Some((70, 80)), false), vec![]);
    assert_eq!(g.round(Some((80, 95)), true), vec![(70, 80), (80, 95)]);
}

#[test]
fn missed_intervals_are_those_wholly_inside_the_gap() {
    let s = 10u64;
    let mut iv = Intervals::new(s, 0, 1, 1);
    iv.mark_missed(5, 42);
    let c = iv.close_all(50);
    let flags: Vec<u32> = c.iter().map(|c| c.flags & interval_flags::MISSED).collect();
    assert_eq!(flags, vec![0, 1, 1, 1, 0]);
    // A run stopped exactly on a boundary ends without a partial interval.
    let mut iv = Intervals::new(s, 0, 1, 1);
    let c = iv.close_all(30);
    assert_eq!(c.len(), 3);
    assert_eq!(c[2].flags, 0);
}

/// The ring reader sets the namer's deadline while the main thread names: the earliest holds.
#[test]
fn a_naming_deadline_set_from_another_thread_keeps_the_earliest() {
    let d = std::sync::Arc::new(super::NamingDeadline::default());
    assert!(!d.passed());
    let far = crate::sys::monotonic_ns() + 3_600_000_000_000;
    d.set(far);
    assert!(!d.passed());
    let other = d.clone();
    std::thread::spawn(move || other.set(crate::sys::monotonic_ns()))
        .join()
        .unwrap();
    assert!(d.passed());
    d.set(far);
    assert!(d.passed(), "a later deadline replaced an earlier one");
}
