//! Layers records (kind 14): round trip, and what the reader does with damaged ones (the CRC is
//! fixed up after the damage, so the payload checks themselves are exercised).

use culprit_format::*;
use proptest::prelude::*;

fn event(t_ns: u64, layer: u16, kind: u8, req: u64) -> LayerEvent {
    LayerEvent {
        t_ns,
        req,
        obj: 0xfeed,
        offset: 65536 * req,
        bytes: 65536,
        pid: 42,
        tid: 43,
        layer,
        kind,
        op: layer_op::READ,
        fd: 7,
    }
}

fn record() -> Vec<u8> {
    let layers = [
        LayerDesc {
            id: 0,
            level: layer_level::LIBC,
            name: "libc-aio".into(),
        },
        LayerDesc {
            id: 5,
            level: layer_level::APP - 1,
            name: "a-layer-name-longer-than-eight".into(),
        },
    ];
    let mut buf = RecordBuf::new();
    let n = buf.layers(
        &LayersHead {
            span_start_ns: 1_000,
            span_end_ns: 2_000,
            dropped: 3,
        },
        &layers,
        [
            event(1_100, 5, layer_kind::ADMIT, 1),
            event(1_200, 0, layer_kind::ISSUE, 1),
            event(1_300, 0, layer_kind::COMPLT, 1),
            event(1_400, 5, layer_kind::CALLBACK, 1),
        ],
    );
    assert_eq!(n, 4);
    buf.as_bytes().to_vec()
}

#[test]
fn layers_round_trip() {
    let bytes = record();
    let recs: Vec<_> = records_at(&bytes, 0).collect();
    assert_eq!(recs.len(), 1);
    let Ok(Record::Layers(r)) = &recs[0] else {
        panic!("not a layers record: {recs:?}");
    };
    assert_eq!(
        (r.span_start_ns, r.span_end_ns, r.dropped),
        (1_000, 2_000, 3)
    );
    let layers: Vec<_> = r.layers().collect();
    assert_eq!(layers.len(), 2);
    assert_eq!(layers[0].name, "libc-aio");
    assert_eq!(layers[0].level, layer_level::LIBC);
    assert_eq!((layers[1].id, layers[1].level), (5, 999));
    assert_eq!(layers[1].name, "a-layer-name-longer-than-eight");
    let events: Vec<_> = r.events().collect();
    assert_eq!(events.len(), 4);
    assert_eq!(events[0], event(1_100, 5, layer_kind::ADMIT, 1));
    assert_eq!(events[3], event(1_400, 5, layer_kind::CALLBACK, 1));
    assert_eq!(events[2].fd, 7);
}

#[test]
fn long_layer_names_are_cut_at_a_character_boundary() {
    let name = "é".repeat(40); // 80 bytes
    let layers = [LayerDesc {
        id: 1,
        level: 0,
        name: name.as_str().into(),
    }];
    let mut buf = RecordBuf::new();
    buf.layers(&LayersHead::default(), &layers, []);
    let Some(Ok(Record::Layers(r))) = records_at(buf.as_bytes(), 0).next() else {
        panic!("no layers record");
    };
    let got = r.layers().next().unwrap().name.into_owned();
    assert_eq!(got, "é".repeat(32));
    assert!(r.is_empty());
}

/// Re-encodes the record's CRC after a change of its payload.
fn fix_crc(bytes: &mut [u8]) {
    let mut crc = record_crc(&bytes[..RECORD_HEADER_SIZE], FORMAT_VERSION);
    crc.update(&bytes[RECORD_HEADER_SIZE..]);
    let crc = crc.finish();
    bytes[8..12].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn counts_beyond_the_record_are_errors() {
    let mut bytes = record();
    // n_events = 5 where 4 are present.
    bytes[RECORD_HEADER_SIZE + 24..RECORD_HEADER_SIZE + 28].copy_from_slice(&5u32.to_le_bytes());
    fix_crc(&mut bytes);
    let err = records_at(&bytes, 0)
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(err.contains("event count exceeds"), "{err}");

    let mut bytes = record();
    // n_layers = 40: the table runs off the end.
    bytes[RECORD_HEADER_SIZE + 20..RECORD_HEADER_SIZE + 24].copy_from_slice(&40u32.to_le_bytes());
    fix_crc(&mut bytes);
    let err = records_at(&bytes, 0)
        .next()
        .unwrap()
        .unwrap_err()
        .to_string();
    assert!(err.contains("exceeds record"), "{err}");
}

proptest! {
    /// Whatever the damage to the payload (CRC fixed up), decoding returns an error or a record
    /// whose iterators stay inside it: never a panic.
    #[test]
    fn damaged_layers_never_panic(flips in proptest::collection::vec((0usize..400, any::<u8>()), 1..8)) {
        let mut bytes = record();
        for (at, v) in flips {
            let i = RECORD_HEADER_SIZE + at % (bytes.len() - RECORD_HEADER_SIZE);
            bytes[i] = v;
        }
        fix_crc(&mut bytes);
        for r in records_at(&bytes, 0).take(4).flatten() {
            if let Record::Layers(l) = r {
                prop_assert!(l.layers().count() <= 64);
                prop_assert!(l.events().count() <= 8);
            }
        }
    }
}
