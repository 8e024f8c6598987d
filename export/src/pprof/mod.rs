//! pprof: one gzipped `profile.proto` for the whole selection, read by `go tool pprof`.
//!
//! * sample types `calls` (count), `self` (nanoseconds) — the tracer's — and `samples`
//!   (count) — the sampler's; a stack from the tracer has samples 0 and the other way round;
//! * labels `node` and `program` on every sample, `pid` (a number) on the tracer's: `go tool
//!   pprof -tagfocus node=io2` shows one node, `-tags` lists them;
//! * stacks as module `stacks` makes them: the sampler's call chains, the tracer's paths
//!   rebuilt from its call edges (per process), one frame where the data has neither;
//! * one function per (image, function) name and one location per function; one mapping per
//!   image, marked as having function names, so pprof does not try to symbolize;
//! * the default sample type is `self` when the selection has traced calls, else `samples`
//!   (`--value` chooses; `-sample_index=` in pprof too).
//!
//! Values are summed over the selected time range; the profile's time and duration are the
//! range's data.

mod proto;

use std::collections::HashMap;
use std::io::Write as _;

use culprit_analysis::data::{
    EventInterval, FuncId, Names, OsInterval, SampleInterval, TraceInterval,
};
use prost::Message as _;

use crate::error::Result;
use crate::out::Out;
use crate::request::{Request, Summary, Value};
use crate::scan::{Cx, Reader, Sink};
use crate::stacks::{sample_stacks, Depth, TraceCalls};

use proto::{Function, Label, Line, Location, Mapping, Profile, Sample, ValueType};

/// Sample type index of calls, self time, samples.
const CALLS: usize = 0;
const SELF: usize = 1;
const SAMPLES: usize = 2;

/// A string table being built.
#[derive(Debug)]
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Default for Strings {
    fn default() -> Self {
        Strings {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }
}

impl Strings {
    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// What a pprof sample is keyed by.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    /// String index of the node.
    node: i64,
    /// String index of the program.
    program: i64,
    /// The traced process (none for samples).
    pid: Option<u32>,
    /// Root first.
    stack: Vec<FuncId>,
}

#[derive(Debug, Default)]
struct Builder {
    strings: Strings,
    samples: HashMap<Key, [i64; 3]>,
    /// Each traced process's calls, by (node, program, pid): stacks when the pass is done.
    trace: HashMap<(i64, i64, u32), TraceCalls>,
    depth: Depth,
    first_ns: Option<u64>,
    end_ns: u64,
    /// (event, period) of fixed-period sampling, while all intervals agree.
    period: Option<Option<(String, u64)>>,
}

impl Builder {
    /// True when the selection has traced calls.
    fn traced(&self) -> bool {
        self.trace.values().any(|t| !t.is_empty())
    }

    /// The traced processes' stacks as samples; what was one frame deep.
    fn trace_samples(&mut self) -> Depth {
        let mut depth = self.depth;
        for ((node, program, pid), calls) in std::mem::take(&mut self.trace) {
            depth.add(calls.depth());
            calls.stacks(|stack, v| {
                let key = Key {
                    node,
                    program,
                    pid: Some(pid),
                    stack: stack.to_vec(),
                };
                self.add(key.clone(), CALLS, v.calls);
                self.add(key, SELF, v.self_ns);
            });
        }
        depth
    }

    fn span(&mut self, start: u64, dur: u64) {
        self.first_ns = Some(self.first_ns.map_or(start, |f| f.min(start)));
        self.end_ns = self.end_ns.max(start + dur);
    }

    fn add(&mut self, key: Key, idx: usize, v: u64) {
        let v = i64::try_from(v).unwrap_or(i64::MAX);
        let slot = &mut self.samples.entry(key).or_default()[idx];
        *slot = slot.saturating_add(v);
    }
}

impl Sink for Builder {
    fn trace(&mut self, cx: &Cx<'_>, iv: &TraceInterval) -> Result<()> {
        let Some(t) = cx.trace_file() else {
            return Ok(());
        };
        self.span(iv.start_ns, iv.dur_ns);
        let node = self.strings.id(cx.node);
        let program = self.strings.id(cx.names.programs.get(t.program));
        self.trace
            .entry((node, program, t.pid))
            .or_default()
            .add(iv);
        Ok(())
    }

    fn samples(&mut self, cx: &Cx<'_>, iv: &SampleInterval) -> Result<()> {
        self.span(iv.start_ns, iv.dur_ns);
        let this = (!iv.freq).then(|| (iv.event.to_string(), iv.period));
        self.period = Some(match self.period.take() {
            None => this,
            Some(p) if p == this => p,
            Some(_) => None,
        });
        let node = self.strings.id(cx.node);
        let mut found = Vec::new();
        sample_stacks(iv, &mut self.depth, |program, stack, n| {
            if cx.selection.program(cx.names, program) {
                found.push((program, stack.to_vec(), n));
            }
        });
        for (program, stack, n) in found {
            let key = Key {
                node,
                program: self.strings.id(cx.names.programs.get(program)),
                pid: None,
                stack,
            };
            self.add(key, SAMPLES, n);
        }
        Ok(())
    }

    fn events(&mut self, _: &Cx<'_>, _: &EventInterval) -> Result<()> {
        Ok(())
    }

    fn os(&mut self, _: &Cx<'_>, _: &OsInterval) -> Result<()> {
        Ok(())
    }
}

impl Builder {
    /// The profile, with the names of the finished pass; with `origin`, every stack's root
    /// frames are its node and its program.
    fn build(mut self, names: &Names, value: Value, notes: &[String], origin: bool) -> Profile {
        let s = &mut self.strings;
        let sample_type = vec![
            ValueType {
                r#type: s.id("calls"),
                unit: s.id("count"),
            },
            ValueType {
                r#type: s.id("self"),
                unit: s.id("nanoseconds"),
            },
            ValueType {
                r#type: s.id("samples"),
                unit: s.id("count"),
            },
        ];
        let default_sample_type = sample_type[match value {
            Value::Calls => CALLS,
            Value::SelfTime => SELF,
            Value::Samples => SAMPLES,
        }]
        .r#type;
        let (k_node, k_program, k_pid) = (s.id("node"), s.id("program"), s.id("pid"));
        let mut mappings: Vec<Mapping> = Vec::new();
        let mut mapping_of: HashMap<String, u64> = HashMap::new();
        let mut functions: Vec<Function> = Vec::new();
        let mut locations: Vec<Location> = Vec::new();
        let mut location_of: HashMap<FuncId, u64> = HashMap::new();
        let mut origin_of: HashMap<(&str, i64), u64> = HashMap::new();
        let mut samples: Vec<(Key, [i64; 3])> = self.samples.into_iter().collect();
        // Deterministic output: equal data, equal file.
        samples.sort_by(|a, b| {
            (a.0.node, a.0.program, a.0.pid, &a.0.stack).cmp(&(
                b.0.node,
                b.0.program,
                b.0.pid,
                &b.0.stack,
            ))
        });
        let mut sample = Vec::with_capacity(samples.len());
        for (key, value) in samples {
            let mut location_id = Vec::with_capacity(key.stack.len());
            for &f in key.stack.iter().rev() {
                let id = *location_of.entry(f).or_insert_with(|| {
                    let k = names.funcs.get(f);
                    let image = k.image.to_string();
                    let next = mappings.len() as u64 + 1;
                    let mapping_id = *mapping_of.entry(image).or_insert_with(|| {
                        mappings.push(Mapping {
                            id: next,
                            filename: s.id(&k.image),
                            has_functions: true,
                        });
                        next
                    });
                    let name = s.id(&k.function);
                    let id = functions.len() as u64 + 1;
                    functions.push(Function {
                        id,
                        name,
                        system_name: name,
                        filename: s.id(&k.image),
                    });
                    locations.push(Location {
                        id,
                        mapping_id,
                        line: vec![Line { function_id: id }],
                    });
                    id
                });
                location_id.push(id);
            }
            // The node and the program as the stack's first frames (pprof lists the leaf
            // first, the root last): a flame graph keeps nodes apart.
            if origin {
                for (what, name) in [("[program]", key.program), ("[node]", key.node)] {
                    let id = *origin_of.entry((what, name)).or_insert_with(|| {
                        let next = mappings.len() as u64 + 1;
                        let mapping_id = *mapping_of.entry(what.to_string()).or_insert_with(|| {
                            mappings.push(Mapping {
                                id: next,
                                filename: s.id(what),
                                has_functions: true,
                            });
                            next
                        });
                        let id = functions.len() as u64 + 1;
                        functions.push(Function {
                            id,
                            name,
                            system_name: name,
                            filename: s.id(what),
                        });
                        locations.push(Location {
                            id,
                            mapping_id,
                            line: vec![Line { function_id: id }],
                        });
                        id
                    });
                    location_id.push(id);
                }
            }
            let mut label = vec![
                Label {
                    key: k_node,
                    str: key.node,
                    num: 0,
                },
                Label {
                    key: k_program,
                    str: key.program,
                    num: 0,
                },
            ];
            if let Some(pid) = key.pid {
                label.push(Label {
                    key: k_pid,
                    str: 0,
                    num: pid.into(),
                });
            }
            sample.push(Sample {
                location_id,
                value: value.to_vec(),
                label,
            });
        }
        let (period_type, period) = match self.period.flatten() {
            Some((event, period)) => (
                Some(ValueType {
                    r#type: s.id(&event),
                    unit: s.id("count"),
                }),
                i64::try_from(period).unwrap_or(0),
            ),
            None => (None, 0),
        };
        let comment = notes.iter().map(|n| s.id(n)).collect();
        let first = self.first_ns.unwrap_or(0);
        Profile {
            sample_type,
            sample,
            mapping: mappings,
            location: locations,
            function: functions,
            string_table: std::mem::take(&mut s.table),
            time_nanos: i64::try_from(first).unwrap_or(0),
            duration_nanos: i64::try_from(self.end_ns.saturating_sub(first)).unwrap_or(0),
            period_type,
            period,
            comment,
            default_sample_type,
        }
    }
}

pub(crate) fn export(req: &Request, reader: &Reader) -> Result<Summary> {
    let mut out = Out::create(req.output.as_deref(), true)?;
    let mut b = Builder::default();
    let pass = reader.run(&mut b)?;
    let value = req.value.unwrap_or(if b.traced() {
        Value::SelfTime
    } else {
        Value::Samples
    });
    let notes = b.trace_samples().notes();
    let profile = b.build(&pass.names, value, &notes, req.origin_frames);
    let items = profile.sample.len() as u64;
    let bytes = profile.encode_to_vec();
    let mut gz = flate2::write::GzEncoder::new(out.w(), flate2::Compression::default());
    let written = gz.write_all(&bytes).and_then(|()| gz.finish().map(drop));
    written.map_err(|e| out.error(e))?;
    let written = out.finish()?;
    Ok(Summary {
        written: written.into_iter().collect(),
        items,
        notes,
        warnings: pass.warnings,
    })
}
