//! Requests records (kind 15): round trip of every event kind, unknown kinds skipped, and what
//! the reader does with damaged ones (the CRC is fixed up after the damage, so the payload
//! checks themselves are exercised).

use culprit_format::*;
use proptest::prelude::*;

fn events() -> Vec<RequestEvent> {
    vec![
        RequestEvent::Begin {
            t_ns: 1_100,
            tid: 7,
            id: 1 << 32 | 4,
            parent: 0,
            rtype: 2,
        },
        RequestEvent::Call {
            t_ns: 1_150,
            tid: 7,
            func: 0x40_1234,
            depth: 3,
            incl_ns: 500,
            excl_ns: 120,
        },
        RequestEvent::Begin {
            t_ns: 1_160,
            tid: 8,
            id: 1 << 32 | 5,
            parent: 1 << 32 | 4,
            rtype: 2,
        },
        RequestEvent::End {
            t_ns: 1_900,
            tid: 7,
            id: 1 << 32 | 4,
            lost: true,
        },
    ]
}

fn record() -> Vec<u8> {
    let mut buf = RecordBuf::new();
    let n = buf.requests(
        &RequestsHead {
            span_start_ns: 1_000,
            span_end_ns: 2_000,
            dropped: 3,
            sample_every: 10,
        },
        events(),
    );
    assert_eq!(n, 4);
    buf.as_bytes().to_vec()
}

#[test]
fn requests_round_trip() {
    let bytes = record();
    let recs: Vec<_> = records_at(&bytes, 0).collect();
    assert_eq!(recs.len(), 1);
    let Ok(Record::Requests(r)) = &recs[0] else {
        panic!("not a requests record: {recs:?}");
    };
    assert_eq!(
        (r.span_start_ns, r.span_end_ns, r.dropped, r.sample_every),
        (1_000, 2_000, 3, 10)
    );
    assert_eq!(r.len(), 4);
    assert_eq!(r.events().collect::<Vec<_>>(), events());
}

/// Re-encodes the record's CRC after a change of its payload.
fn fix_crc(bytes: &mut [u8]) {
    let mut crc = record_crc(&bytes[..RECORD_HEADER_SIZE], FORMAT_VERSION);
    crc.update(&bytes[RECORD_HEADER_SIZE..]);
    let crc = crc.finish();
    bytes[8..12].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn unknown_event_kinds_are_skipped_and_counts_beyond_the_record_are_errors() {
    let mut bytes = record();
    // The second event's kind becomes 9 (a later writer's): skipped, the rest read.
    let kind_at = RECORD_HEADER_SIZE + REQUESTS_FIXED_SIZE + REQUEST_EVENT_SIZE + 36;
    bytes[kind_at] = 9;
    fix_crc(&mut bytes);
    let Some(Ok(Record::Requests(r))) = records_at(&bytes, 0).next() else {
        panic!("no requests record");
    };
    assert_eq!(r.len(), 4);
    let mut want = events();
    want.remove(1);
    assert_eq!(r.events().collect::<Vec<_>>(), want);

    let mut bytes = record();
    // n_events = 5 where 4 are present.
    bytes[RECORD_HEADER_SIZE + 20..RECORD_HEADER_SIZE + 24].copy_from_slice(&5u32.to_le_bytes());
    fix_crc(&mut bytes);
    let err = records_at(&bytes, 0)
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(err.contains("event count exceeds"), "{err}");
}

proptest! {
    /// Whatever the damage to the payload (CRC fixed up), decoding returns an error or a record
    /// whose events stay inside it: never a panic.
    #[test]
    fn damaged_requests_never_panic(flips in proptest::collection::vec((0usize..400, any::<u8>()), 1..8)) {
        let mut bytes = record();
        for (at, v) in flips {
            let i = RECORD_HEADER_SIZE + at % (bytes.len() - RECORD_HEADER_SIZE);
            bytes[i] = v;
        }
        fix_crc(&mut bytes);
        for r in records_at(&bytes, 0).take(4).flatten() {
            if let Record::Requests(q) = r {
                prop_assert!(q.events().count() <= 4);
            }
        }
    }
}
