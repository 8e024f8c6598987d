//! Reading the data in bounded steps and handing every selected interval to a format's writer
//! once.
//!
//! Each step reads at most [`crate::request::Request::read_limit`] bytes of every data file
//! (`Dataset::set_read_limit`); what it read is handed out, then forgotten. A stream's last
//! interval is kept back until the stream is read to the end, because the next step may still
//! change it (a dead writer's checkpoint is re-read each step; records that complete an
//! interval, such as the tracer's call edges, follow it). Memory is then one step's intervals
//! plus the writer's own state, whatever the data's size.
//!
//! Intervals a writer could not observe (missed) carry no values and are not handed out.
//! Layer-boundary I/O events (record kind 14) are not exported; they are dropped each step.

use std::collections::HashMap;
use std::path::PathBuf;

use culprit_analysis::data::{
    Dataset, DirSource, EventInterval, LoadOptions, Names, OsInterval, SampleFile, SampleInterval,
    TraceFile, TraceInterval,
};

use crate::error::Result;
use crate::request::Request;
use crate::select::{Range, Selection};

/// The file an interval comes from.
#[derive(Clone, Copy, Debug)]
pub(crate) enum File<'a> {
    /// A traced process's file.
    Trace(&'a TraceFile),
    /// A sampler run's file.
    Samples(&'a SampleFile),
}

/// Where an interval comes from.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cx<'a> {
    /// The dataset's names.
    pub names: &'a Names,
    /// The node.
    pub node: &'a str,
    /// The file's number: unique per file, in the order files were found.
    pub stream: usize,
    /// The file.
    pub file: File<'a>,
    /// The selection (for the program filter on sample entries).
    pub selection: &'a Selection,
}

impl Cx<'_> {
    /// The traced process's file (`None` for a sampler file).
    pub fn trace_file(&self) -> Option<&TraceFile> {
        match self.file {
            File::Trace(t) => Some(t),
            File::Samples(_) => None,
        }
    }

    /// The sampler file (`None` for a trace file).
    pub fn sample_file(&self) -> Option<&SampleFile> {
        match self.file {
            File::Samples(s) => Some(s),
            File::Trace(_) => None,
        }
    }
}

/// A format's writer: gets every selected, observed interval in the range once, in file order
/// per file (files interleave).
pub(crate) trait Sink {
    /// One interval of a traced process.
    fn trace(&mut self, cx: &Cx<'_>, iv: &TraceInterval) -> Result<()>;
    /// One interval of sample counts (entries of unselected programs are the sink's to skip:
    /// [`Selection::program`]).
    fn samples(&mut self, cx: &Cx<'_>, iv: &SampleInterval) -> Result<()>;
    /// One interval of kernel event counts.
    fn events(&mut self, cx: &Cx<'_>, iv: &EventInterval) -> Result<()>;
    /// One interval of OS metrics (a metric without a value in it is absent, not zero).
    fn os(&mut self, cx: &Cx<'_>, iv: &OsInterval) -> Result<()>;
}

/// Reads the requested data in steps.
#[derive(Debug)]
pub(crate) struct Reader {
    paths: Vec<PathBuf>,
    opts: LoadOptions,
    include_unassigned: bool,
    read_limit: u64,
    selection: Selection,
    range: Range,
}

/// What a pass over the data saw besides the intervals.
#[derive(Debug, Default)]
pub(crate) struct Pass {
    /// Loader warnings.
    pub warnings: Vec<String>,
    /// The dataset's names, complete: every id handed out is named here.
    pub names: Names,
}

impl Reader {
    /// The reader of `req`'s data and selection. A relative time bound reads the data once to
    /// find its span.
    pub(crate) fn new(req: &Request) -> Result<Reader> {
        let bounds = req.selection.bounds()?;
        let mut reader = Reader {
            paths: req.data.clone(),
            opts: LoadOptions {
                include_unassigned: req.include_unassigned,
                symfs: req.symfs.clone(),
                nodes: req.selection.nodes.clone(),
                exclude: Vec::new(),
            },
            include_unassigned: req.include_unassigned,
            read_limit: req.read_limit,
            selection: req.selection.clone(),
            range: Range {
                from: 0,
                to: u64::MAX,
            },
        };
        let span = if bounds.relative() {
            reader.span()?
        } else {
            None
        };
        reader.range = bounds.resolve(span)?;
        Ok(reader)
    }

    /// Reads everything, calling `visit` with each step's settled intervals of each file.
    fn steps(
        &self,
        mut visit: impl FnMut(&Names, &str, File<'_>, Settled<'_>) -> Result<()>,
    ) -> Result<Pass> {
        let source = DirSource::new(self.paths.clone(), self.include_unassigned);
        let mut ds = Dataset::new(Box::new(source), self.opts.clone());
        ds.set_read_limit(Some(self.read_limit));
        let mut first = true;
        loop {
            let stats = ds.refresh()?;
            if std::mem::take(&mut first) {
                ds.require_nodes()?;
            }
            let last = stats.unread_streams == 0;
            let names = &ds.names;
            for node in &mut ds.nodes {
                for t in &mut node.traces {
                    let n = settled(t.intervals.len(), last);
                    visit(
                        names,
                        &node.name,
                        File::Trace(t),
                        Settled::Trace(&t.intervals[..n]),
                    )?;
                    t.intervals.drain(..n);
                    // Layer-boundary I/O events (record kind 14) are not exported: forgotten
                    // like what was handed out, so memory stays bounded.
                    t.layers.clear();
                }
                for s in &mut node.samples {
                    let n = settled(s.intervals.len(), last);
                    visit(
                        names,
                        &node.name,
                        File::Samples(s),
                        Settled::Samples(&s.intervals[..n], &s.events, &s.os),
                    )?;
                    s.intervals.drain(..n);
                    s.events.clear();
                    s.os.clear();
                    s.layers.clear();
                }
            }
            if last {
                break;
            }
        }
        Ok(Pass {
            warnings: std::mem::take(&mut ds.warnings),
            names: std::mem::take(&mut ds.names),
        })
    }

    /// Earliest interval start and latest interval end of the nodes read (every interval,
    /// whatever the program and pid filters: `culprit report`'s span).
    fn span(&self) -> Result<Option<(u64, u64)>> {
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        let mut see = |start: u64, dur: u64| {
            lo = lo.min(start);
            hi = hi.max(start + dur);
        };
        self.steps(|_, _, _, settled| {
            match settled {
                Settled::Trace(ivs) => ivs.iter().for_each(|iv| see(iv.start_ns, iv.dur_ns)),
                Settled::Samples(ivs, evs, os) => {
                    ivs.iter().for_each(|iv| see(iv.start_ns, iv.dur_ns));
                    evs.iter().for_each(|iv| see(iv.start_ns, iv.dur_ns));
                    os.iter().for_each(|iv| see(iv.start_ns, iv.dur_ns));
                }
            }
            Ok(())
        })?;
        Ok((lo <= hi).then_some((lo, hi)))
    }

    /// Hands every selected, observed interval in the range to `sink`, once.
    pub(crate) fn run(&self, sink: &mut dyn Sink) -> Result<Pass> {
        let mut streams: HashMap<PathBuf, usize> = HashMap::new();
        let sel = &self.selection;
        let range = self.range;
        self.steps(|names, node, file, settled| {
            let path = match file {
                File::Trace(t) => &t.path,
                File::Samples(s) => &s.path,
            };
            let next = streams.len();
            let stream = *streams.entry(path.clone()).or_insert(next);
            let cx = Cx {
                names,
                node,
                stream,
                file,
                selection: sel,
            };
            match settled {
                Settled::Trace(ivs) => {
                    let File::Trace(t) = file else {
                        return Ok(());
                    };
                    if !sel.trace_file(names, t) {
                        return Ok(());
                    }
                    for iv in ivs
                        .iter()
                        .filter(|iv| !iv.missed() && range.contains(iv.start_ns))
                    {
                        sink.trace(&cx, iv)?;
                    }
                }
                Settled::Samples(ivs, evs, os) => {
                    let kept = |start: u64, missed: bool| !missed && range.contains(start);
                    for iv in ivs.iter().filter(|iv| kept(iv.start_ns, iv.missed())) {
                        sink.samples(&cx, iv)?;
                    }
                    for iv in evs.iter().filter(|iv| kept(iv.start_ns, iv.missed())) {
                        sink.events(&cx, iv)?;
                    }
                    for iv in os.iter().filter(|iv| kept(iv.start_ns, iv.missed())) {
                        sink.os(&cx, iv)?;
                    }
                }
            }
            Ok(())
        })
    }
}

/// The intervals of one file a step hands out.
enum Settled<'a> {
    Trace(&'a [TraceInterval]),
    Samples(&'a [SampleInterval], &'a [EventInterval], &'a [OsInterval]),
}

/// How many of a stream's `len` intervals are settled: all at the end, else all but the last.
fn settled(len: usize, last: bool) -> usize {
    if last {
        len
    } else {
        len.saturating_sub(1)
    }
}
