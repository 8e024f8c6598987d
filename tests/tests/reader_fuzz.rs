//! A property test of the readers on damaged data: real files (traces written by the runtime
//! into a program built at test time, one of them with the call graph and histograms —
//! record kinds 9 to 11 —, a sampler run of the synthetic peer group) mutated the
//! way disks and people mutate them — flipped and overwritten bytes, cuts, inserted garbage,
//! header fields and record lengths set to anything — and read by the in-memory decoder, the
//! stream reader, and the whole analysis (`diagnose`, in-process). Nothing may panic, the two
//! readers must agree on every record before the damage, memory stays bounded, and damage is
//! never a culprit: the mutated node is never `faulty` or `stopped`.
//!
//! CI runs 48 cases (about a minute in a debug build). A longer run:
//! `PROPTEST_CASES=5000 cargo test --release -p culprit-tests --test reader_fuzz`.
//!
//! The second property is structural: byte ranges cut, inserted or deleted in each region of
//! a trace file — the header, the rest of the header page, the stacks region, the records —
//! and its committed end moved back to a record, in one node of a healthy traced group (four real processes, run past the stuck rule's
//! 10 s), diagnosed in-process. No panic, no case over 10 s, and no verdict from the damage:
//! the group has no culprit before, so it has none after, and the damaged node is `ok` or
//! `damaged`. CI runs 1,000 cases (about 8 s of diagnoses in a debug build);
//! `CULPRIT_FUZZ_CASES=10000` runs more (docs/security.md has the figures of the last long
//! run).

mod tracer_util;

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use culprit_analysis::combine::Verdict;
use culprit_analysis::plan::Quiet;
use culprit_analysis::session::{self, DiagnoseRequest};
use culprit_analysis::setup::{Overrides, Setup};
use culprit_format::read::{StreamReader, StreamState};
use culprit_format::{ParsedFile, Record, DATA_OFFSET};
use culprit_tests::*;
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use tracer_util::*;

/// The corpus: (name, bytes) of real files.
fn corpus() -> &'static Vec<(String, Vec<u8>)> {
    static CORPUS: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
    CORPUS.get_or_init(|| {
        let tmp = TempDir::new("fuzz-corpus");
        let exe = build(tmp.path(), "tracee.c", "tracee", "-O2", Link::Preload);
        let data = tmp.join("data");
        run(traced(&exe, Link::Preload, &data, "n1").args(["fib", "12"]));
        run(traced(&exe, Link::Preload, &data, "n2")
            .env("CULPRIT_GRAPH", "1")
            .env("CULPRIT_HIST", "1")
            .args(["fib", "12"]));
        write_peer_samples(&tmp.join("peers"), true, false);
        let mut out = Vec::new();
        for dir in [
            data.join("n1"),
            data.join("n2"),
            tmp.join("peers").join("io0"),
        ] {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "cul") {
                    let name = p.file_name().unwrap().to_string_lossy().into_owned();
                    out.push((name, std::fs::read(&p).unwrap()));
                }
            }
        }
        assert!(out.len() >= 3, "{out:?}");
        // The graph trace holds edges and histograms, so damage reaches their decoders.
        let has = |b: &[u8], edges: bool| {
            ParsedFile::parse(b).unwrap().records().flatten().any(|r| {
                if edges {
                    matches!(r, Record::Edges(_))
                } else {
                    matches!(r, Record::Histograms(_))
                }
            })
        };
        assert!(
            out.iter().any(|(_, b)| has(b, true) && has(b, false)),
            "no trace with edges and histograms in the corpus"
        );
        out
    })
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Set(usize, u8),
    Cut(usize),
    Insert(usize, Vec<u8>),
    HeaderField(usize, u64),
    RecordLen(usize, u32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1u8..=255).prop_map(|(a, m)| Mutation::Flip(a, m)),
        (any::<usize>(), any::<u8>()).prop_map(|(a, v)| Mutation::Set(a, v)),
        any::<usize>().prop_map(Mutation::Cut),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..64)
        )
            .prop_map(|(a, b)| Mutation::Insert(a, b)),
        (
            prop::sample::select(vec![8usize, 10, 12, 16, 20, 24, 32, 40, 56]),
            prop_oneof![
                Just(0u64),
                Just(u64::MAX),
                Just(40u64 << 30),
                any::<u64>(),
                0u64..(1 << 20)
            ]
        )
            .prop_map(|(f, v)| Mutation::HeaderField(f, v)),
        (
            any::<usize>(),
            prop_oneof![Just(0u32), Just(u32::MAX), Just(256 << 20), any::<u32>()]
        )
            .prop_map(|(r, v)| Mutation::RecordLen(r, v)),
    ]
}

fn apply(bytes: &mut Vec<u8>, m: &Mutation) {
    let n = bytes.len().max(1);
    match m {
        Mutation::Flip(a, mask) => {
            let i = a % n;
            if let Some(b) = bytes.get_mut(i) {
                *b ^= mask;
            }
        }
        Mutation::Set(a, v) => {
            let i = a % n;
            if let Some(b) = bytes.get_mut(i) {
                *b = *v;
            }
        }
        Mutation::Cut(a) => bytes.truncate(a % n),
        Mutation::Insert(a, b) => {
            let i = a % n;
            bytes.splice(i..i, b.iter().copied());
        }
        Mutation::HeaderField(at, v) => {
            // version, min_reader_version: u16; header_size, kind, state: u32; the rest u64.
            let w = match at {
                8 | 10 => 2,
                12 | 16 | 20 => 4,
                _ => 8,
            };
            if bytes.len() >= at + w {
                bytes[*at..at + w].copy_from_slice(&v.to_le_bytes()[..w]);
            }
        }
        Mutation::RecordLen(r, v) => {
            let offsets = record_offsets(bytes);
            if !offsets.is_empty() {
                let at = offsets[r % offsets.len()] + 4;
                bytes[at..at + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
    }
}

/// Reads `bytes` with both readers; they must agree on every record before the damage.
fn both_readers(bytes: &[u8]) {
    let mut whole = Vec::new();
    let mut complete = false;
    let mut whole_checkpoint = None;
    if let Ok(f) = ParsedFile::parse(bytes) {
        let mut recs = f.records();
        loop {
            let at = recs.offset();
            match recs.next() {
                Some(Ok(r)) => {
                    touch(&r);
                    whole.push((at, format!("{r:?}")));
                }
                Some(Err(_)) => break,
                None => {
                    complete = !f.truncated;
                    whole_checkpoint = f.pending_records().map(|p| format!("{p:?}"));
                    break;
                }
            }
        }
    }
    let mut streamed = Vec::new();
    if let Ok(mut r) = StreamReader::open(bytes) {
        loop {
            let at = r.offset();
            match r.next_record().expect("memory reads do not fail") {
                Some(rec) => {
                    touch(&rec);
                    streamed.push((at, format!("{rec:?}")));
                }
                None => break,
            }
        }
        if complete {
            assert!(
                !matches!(r.state(), StreamState::Damaged(_)),
                "{:?}",
                r.state()
            );
        }
        // An intact stream has the same checkpoint (its interval and its extras).
        let open = r.state() == &StreamState::Open;
        let cp = r.checkpoint().expect("memory reads do not fail");
        if complete && open {
            assert_eq!(cp.map(|p| format!("{p:?}")), whole_checkpoint);
        }
    }
    assert_eq!(streamed, whole, "the two readers disagree");
}

/// Walks every entry, as the loader does.
fn touch(r: &Record<'_>) {
    match r {
        Record::Strings(s) => s.items().for_each(drop),
        Record::Interval(i) => i.entries().for_each(drop),
        Record::Samples(s) => s.entries().for_each(drop),
        Record::Events(e) => e.entries().for_each(drop),
        Record::OsMetrics(o) => o.entries().for_each(drop),
        Record::Unwound(u) => u.entries().for_each(drop),
        Record::Edges(e) => e.entries().for_each(drop),
        Record::Histograms(h) => h.entries().for_each(drop),
        Record::Stacks(s) => s.entries().for_each(drop),
        _ => {}
    }
}

/// Copies the peer group `peers`, replaces io1's file with `bytes`, and diagnoses it in-process.
fn diagnose_with(peers: &Path, bytes: &[u8], dir: &Path) {
    let root = dir.join("data");
    let _ = std::fs::remove_dir_all(&root);
    for n in ["io0", "io1", "io2", "io3"] {
        std::fs::create_dir_all(root.join(n)).unwrap();
        for e in std::fs::read_dir(peers.join(n)).unwrap().flatten() {
            let to = root.join(n).join(e.file_name());
            if n == "io1" {
                std::fs::write(&to, bytes).unwrap();
            } else {
                std::fs::copy(e.path(), to).unwrap();
            }
        }
    }
    let setup = Setup::resolve(&Overrides::default(), None).unwrap();
    let req = DiagnoseRequest::dirs(&[PathBuf::from(&root)], 5);
    if let Ok(d) = session::diagnose(&setup, None, req, &mut Quiet) {
        assert!(
            !d.culprits.iter().any(|c| c == "io1"),
            "damage made io1 a culprit: {:?}",
            d.verdicts
        );
    }
}

fn max_rss_kb() -> i64 {
    // SAFETY: an all-zero rusage is valid; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer to our own struct.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_maxrss
}

#[test]
fn damaged_real_files_never_panic_agree_and_never_convict() {
    let config = ProptestConfig {
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(48),
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    // A synthetic peer group, written once, that each case copies and damages one file of
    // (owned here, not by a static, so it is removed when the test ends).
    let peers = TempDir::new("fuzz-peers");
    write_peer_samples(peers.path(), false, false);
    let strategy = (
        any::<prop::sample::Index>(),
        proptest::collection::vec(mutation(), 1..6),
    );
    let result = TestRunner::new(config).run(&strategy, |(which, muts)| {
        let (_, original) = &corpus()[which.index(corpus().len())];
        let mut bytes = original.clone();
        for m in &muts {
            apply(&mut bytes, m);
        }
        both_readers(&bytes);
        // The sampler file of the peer group goes through the whole analysis.
        let first = std::fs::read_dir(peers.join("io1"))
            .unwrap()
            .flatten()
            .next()
            .unwrap();
        let mut sample = std::fs::read(first.path()).unwrap();
        for m in &muts {
            apply(&mut sample, m);
        }
        let dir = TempDir::new("fuzz-case");
        diagnose_with(peers.path(), &sample, dir.path());
        prop_assert!(bytes.len() < DATA_OFFSET as usize * 1000);
        prop_assert!(max_rss_kb() < 400_000, "max RSS {} KiB", max_rss_kb());
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A region of a trace file.
#[derive(Clone, Copy, Debug)]
enum Region {
    /// The 128-byte header.
    Header,
    /// The rest of the header page.
    HeaderPage,
    /// The stacks region.
    Stacks,
    /// The records.
    Records,
}

/// A structural mutation: where (a region, a place in it), and what.
#[derive(Clone, Debug)]
enum Structural {
    /// The file ends there.
    Cut(Region, prop::sample::Index),
    /// Bytes inserted there.
    Insert(Region, prop::sample::Index, Vec<u8>),
    /// `len` bytes deleted from there.
    Delete(Region, prop::sample::Index, usize),
    /// The header's committed end moved to the start of a record (the end of the data as the
    /// header tells it, the one cut no checksum sees).
    CommittedEnd(prop::sample::Index),
}

fn region() -> impl Strategy<Value = Region> {
    prop_oneof![
        Just(Region::Header),
        Just(Region::HeaderPage),
        Just(Region::Stacks),
        Just(Region::Records),
    ]
}

fn structural() -> impl Strategy<Value = Structural> {
    // Lengths from one byte to past a stacks slot (32 KiB): a byte, a field, a record, a page.
    let len = prop_oneof![1usize..16, 16usize..512, 512usize..40_000];
    let bytes = prop_oneof![
        proptest::collection::vec(any::<u8>(), 1..64),
        (1usize..8192).prop_map(|n| vec![0u8; n]),
        (1usize..4096, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
    ];
    prop_oneof![
        (region(), any::<prop::sample::Index>()).prop_map(|(r, i)| Structural::Cut(r, i)),
        (region(), any::<prop::sample::Index>(), bytes)
            .prop_map(|(r, i, b)| Structural::Insert(r, i, b)),
        (region(), any::<prop::sample::Index>(), len)
            .prop_map(|(r, i, n)| Structural::Delete(r, i, n)),
        any::<prop::sample::Index>().prop_map(Structural::CommittedEnd),
    ]
}

/// The byte range of `r` in a file of `len` bytes laid out as `h` says (the layout of the
/// original file: mutations applied one after the other move what follows).
fn range_of(r: Region, h: &culprit_format::FileHeader, len: usize) -> std::ops::Range<usize> {
    let (region, records) = (h.stacks_offset as usize, h.data_offset as usize);
    let (a, b) = match r {
        Region::Header => (0, 128),
        Region::HeaderPage => (128, region),
        Region::Stacks => (region, records),
        Region::Records => (records, len),
    };
    a.min(len)..b.min(len)
}

fn apply_structural(bytes: &mut Vec<u8>, h: &culprit_format::FileHeader, m: &Structural) {
    let at = |r: Region, i: &prop::sample::Index, len: usize| {
        let range = range_of(r, h, len);
        if range.is_empty() {
            range.start
        } else {
            range.start + i.index(range.len())
        }
    };
    match m {
        Structural::Cut(r, i) => {
            let a = at(*r, i, bytes.len());
            bytes.truncate(a);
        }
        Structural::Insert(r, i, b) => {
            let a = at(*r, i, bytes.len());
            bytes.splice(a..a, b.iter().copied());
        }
        Structural::Delete(r, i, n) => {
            let a = at(*r, i, bytes.len());
            let b = (a + n).min(bytes.len());
            bytes.drain(a..b);
        }
        Structural::CommittedEnd(i) => {
            let recs = record_offsets(bytes);
            if !recs.is_empty() {
                let at = recs[i.index(recs.len())] as u64;
                let field = culprit_format::HEADER_COMMITTED_END_OFFSET;
                bytes[field..field + 8].copy_from_slice(&at.to_le_bytes());
            }
        }
    }
}

/// The nodes of the traced group; the second one's file is damaged.
const GROUP: [&str; 4] = ["io1", "io2", "io3", "io4"];

/// Diagnoses the data root `root` in-process with windows short enough for the group's run.
fn diagnose_group(root: &Path) -> Option<culprit_analysis::Diagnosis> {
    let overrides = Overrides {
        win_size_ns: Some(4_000_000_000),
        win_shift_ns: Some(2_000_000_000),
        ..Overrides::default()
    };
    let setup = Setup::resolve(&overrides, None).unwrap();
    let req = DiagnoseRequest::dirs(&[root.to_path_buf()], 5);
    session::diagnose(&setup, None, req, &mut Quiet).ok()
}

/// Issue 30: damage is never a verdict, whatever range of a trace file is cut, inserted or
/// deleted (module docs).
#[test]
fn structural_damage_never_makes_a_verdict() {
    let cases: u32 = std::env::var("CULPRIT_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let dir = TempDir::new("fuzz-structural");
    // 12 s: main and the workers' loops are open past the stuck rule's 10 s.
    let data = run_traced_group(dir.path(), &GROUP, 12);
    let healthy = diagnose_group(&data).expect("the healthy group is diagnosed");
    assert!(
        healthy.culprits.is_empty(),
        "the healthy group has a culprit: {:?}",
        healthy.verdicts
    );
    let victim = node_file(&data, GROUP[1]);
    let original = std::fs::read(&victim).unwrap();
    let (header, _) = culprit_format::parse_header(&original).unwrap();
    assert!(
        header.stacks_offset > 0 && header.data_offset > header.stacks_offset,
        "a trace file with a stacks region: {header:?}"
    );
    // The case's data root: the healthy peers copied once, the victim's file rewritten in
    // each case.
    let root = dir.join("case");
    for n in GROUP {
        std::fs::create_dir_all(root.join(n)).unwrap();
        for e in std::fs::read_dir(data.join(n)).unwrap().flatten() {
            std::fs::copy(e.path(), root.join(n).join(e.file_name())).unwrap();
        }
    }
    let target = node_file(&root, GROUP[1]);
    // A case that hangs never returns: the watchdog ends the test with what it was doing.
    let started = Instant::now();
    static CASE_START_MS: AtomicU64 = AtomicU64::new(0);
    static DONE: AtomicUsize = AtomicUsize::new(0);
    CASE_START_MS.store(0, Ordering::SeqCst);
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        let at = CASE_START_MS.load(Ordering::SeqCst);
        let now = started.elapsed().as_millis() as u64;
        if at > 0 && now.saturating_sub(at) > 60_000 {
            eprintln!(
                "structural fuzz: case {} hangs (over 60 s)",
                DONE.load(Ordering::SeqCst) + 1
            );
            std::process::abort();
        }
    });
    let (slowest, damaged, runs) = (Cell::new(Duration::ZERO), Cell::new(0usize), Cell::new(0));
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let strategy = proptest::collection::vec(structural(), 1..4);
    let result = TestRunner::new(config).run(&strategy, |muts| {
        let mut bytes = original.clone();
        for m in &muts {
            apply_structural(&mut bytes, &header, m);
        }
        both_readers(&bytes);
        std::fs::write(&target, &bytes).unwrap();
        let t0 = Instant::now();
        CASE_START_MS.store(
            started.elapsed().as_millis().max(1) as u64,
            Ordering::SeqCst,
        );
        let d = diagnose_group(&root);
        CASE_START_MS.store(0, Ordering::SeqCst);
        DONE.fetch_add(1, Ordering::SeqCst);
        let took = t0.elapsed();
        slowest.set(slowest.get().max(took));
        runs.set(runs.get() + 1);
        prop_assert!(took < Duration::from_secs(10), "a case took {took:?}");
        // A group without two complete nodes left may have no diagnosis: not a verdict.
        if let Some(d) = d {
            prop_assert!(
                d.culprits.is_empty(),
                "damage made a culprit: {:?}\n{:?}",
                d.culprits,
                d.verdicts
            );
            let v = d
                .verdicts
                .iter()
                .find(|v| v.node == GROUP[1])
                .map(|v| v.combined.verdict);
            prop_assert!(
                matches!(v, None | Some(Verdict::Ok) | Some(Verdict::Damaged)),
                "the damaged node is {v:?}: {:?}",
                d.verdicts
            );
            if v == Some(Verdict::Damaged) {
                damaged.set(damaged.get() + 1);
            }
        }
        Ok(())
    });
    let total = started.elapsed();
    println!(
        "structural fuzz: {} diagnoses in {total:.1?} (slowest {:.1?}), {} with the node \
         damaged",
        runs.get(),
        slowest.get(),
        damaged.get()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}
