//! Replaying a `perf.data` file (from `perf record -a`) through the sampler's own pipeline:
//! same record decoder, process tracker, interval counters, symbolizer and writer as live
//! sampling. It exists so the sampler's attribution and symbolization can be measured against
//! `perf report` on the very same samples (benches/sampler/), and checked against it.
//!
//! Only the parts of the format the pipeline needs are read: the file header, the attributes
//! (sample type, `sample_id_all`, event ids) and the data section. Compressed or piped files
//! are refused.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::engine::{ClockMap, Engine, Stream, Streams};
use crate::nodes::{Nodes, Scope};
use crate::procs::Tracker;
use crate::profile::{Intervals, Namer, NodeSummary, Output, RunInfo};
use crate::record::Layout;

const MAGIC: &[u8; 8] = b"PERFILE2";

/// The parts of a perf.data file the replay uses.
#[derive(Debug)]
pub struct PerfData {
    /// Per attribute: layout and event ids.
    pub attrs: Vec<(Layout, Vec<u64>, u32, u64, u64, bool)>,
    /// The data section's bytes.
    pub data: Vec<u8>,
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, String> {
    b.get(at..at + 8)
        .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
        .ok_or_else(|| format!("perf.data: truncated at byte {at}"))
}

impl PerfData {
    /// Reads `path`.
    pub fn read(path: &Path) -> Result<PerfData, String> {
        let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if bytes.get(0..8) != Some(&MAGIC[..]) {
            return Err(format!(
                "{}: not a perf.data file (or a piped / big-endian one)",
                path.display()
            ));
        }
        let attr_size = u64_at(&bytes, 16)? as usize;
        let (attrs_off, attrs_size) = (u64_at(&bytes, 24)? as usize, u64_at(&bytes, 32)? as usize);
        let (data_off, data_size) = (u64_at(&bytes, 40)? as usize, u64_at(&bytes, 48)? as usize);
        if attr_size < 16 + 64 {
            return Err("perf.data: attribute entries too small".into());
        }
        let mut attrs = Vec::new();
        let mut at = attrs_off;
        while at + attr_size <= attrs_off + attrs_size {
            let a = bytes
                .get(at..at + attr_size)
                .ok_or("perf.data: attributes past the end")?;
            let type_ = u32::from_le_bytes(a[0..4].try_into().expect("4 bytes"));
            let config = u64_at(a, 8)?;
            let period = u64_at(a, 16)?;
            let sample_type = u64_at(a, 24)?;
            let flags = u64_at(a, 40)?;
            let freq = flags & (1 << 10) != 0;
            let sample_id_all = flags & (1 << 18) != 0;
            let (ids_off, ids_size) = (
                u64_at(a, attr_size - 16)? as usize,
                u64_at(a, attr_size - 8)? as usize,
            );
            let ids = bytes
                .get(ids_off..ids_off + ids_size)
                .ok_or("perf.data: event ids past the end")?
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect();
            attrs.push((
                Layout {
                    sample_type,
                    sample_id_all,
                },
                ids,
                type_,
                config,
                period,
                freq,
            ));
            at += attr_size;
        }
        if attrs.is_empty() {
            return Err("perf.data: no event attributes".into());
        }
        let data = bytes
            .get(data_off..data_off + data_size)
            .ok_or("perf.data: data section past the end of the file")?
            .to_vec();
        Ok(PerfData { attrs, data })
    }
}

/// What a replay did, and how long each part took.
#[derive(Debug)]
pub struct Replay {
    /// Samples attributed.
    pub samples: u64,
    /// Distinct locations named.
    pub named: u64,
    /// Decoding, merging, tracking and counting.
    pub attribute: Duration,
    /// Naming and writing the profiles.
    pub symbolize_write: Duration,
    /// The files written.
    pub nodes: Vec<NodeSummary>,
}

/// Replays `path` into `out_dir/<node>/samples-*.cul` with `interval`-long profiles.
pub fn replay(
    path: &Path,
    out_dir: &Path,
    node: &str,
    interval: Duration,
) -> Result<Replay, String> {
    let pd = PerfData::read(path)?;
    let t0 = Instant::now();
    let mut streams = Streams::new();
    for (layout, ids, ..) in &pd.attrs {
        for &id in ids {
            streams.add(id, *layout, Stream::Samples);
        }
    }
    let first = &pd.attrs[0];
    streams.set_default(first.0, Stream::Samples);
    let nodes = Nodes::new(node, &[], Scope::System)?;
    let names: Vec<String> = nodes.names().to_vec();
    let tracker = Tracker::new(nodes, false);
    // perf's clock is not wall time: place the recording so that it ends now.
    let first_time = sample_times(&pd).next().unwrap_or(0);
    let now = crate::sys::realtime_ns();
    let clock = ClockMap {
        offset: now as i64 - first_time as i64,
    };
    let dur = interval.as_nanos() as u64;
    let intervals = Intervals::new(dur, clock.wall(first_time), names.len(), 0);
    let mut engine = Engine::new(tracker, intervals, clock, Vec::new());
    engine.ingest(&pd.data, &streams);
    engine.process_until(u64::MAX);
    let attribute = t0.elapsed();

    let t1 = Instant::now();
    let event = event_name(first.2, first.3);
    let info = RunInfo {
        pairs: vec![("source".into(), path.display().to_string())],
        event: event.into(),
        period: first.4,
        freq: first.5,
        tracepoints: Vec::new(),
        call_graph: first.0.sample_type
            & perf_event_open_sys::bindings::PERF_SAMPLE_CALLCHAIN as u64
            != 0,
        // `perf record -a` writes one node's file from the whole machine.
        own_loss: names.len() == 1,
    };
    let start_wall = clock.wall(first_time);
    let mut output =
        Output::create(out_dir, &names, start_wall, info).map_err(|e| e.to_string())?;
    let mut namer = Namer::default();
    let last = engine.intervals.dur_ns() + start_wall;
    let end = last.max(clock.wall(sample_times(&pd).max().unwrap_or(first_time)) + 1);
    for c in engine.intervals.close_all(end) {
        output
            .write(&c, &mut namer, &engine.tracker)
            .map_err(|e| e.to_string())?;
    }
    let nodes = output.finish(now, false).map_err(|e| e.to_string())?;
    Ok(Replay {
        samples: engine.stats.samples,
        named: namer.named,
        attribute,
        symbolize_write: t1.elapsed(),
        nodes,
    })
}

/// Timestamps of the samples, in file order.
fn sample_times(pd: &PerfData) -> impl Iterator<Item = u64> + '_ {
    let layout = pd.attrs[0].0;
    crate::record::split(&pd.data)
        .filter(|(k, _, _)| *k == perf_event_open_sys::bindings::PERF_RECORD_SAMPLE)
        .filter_map(move |(k, m, r)| crate::record::decode(k, m, r, &layout).time())
}

fn event_name(type_: u32, config: u64) -> &'static str {
    crate::event::event_names()
        .filter_map(crate::event::event_by_name)
        .find(|e| e.type_ == type_ && e.config == config)
        .map_or("unknown", |e| e.name)
}

/// The default output directory of a replay: next to the input, `<file>.culprit`.
pub fn default_out_dir(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".culprit");
    PathBuf::from(p)
}
