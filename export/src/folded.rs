//! Folded stacks (Brendan Gregg's format, read by flamegraph.pl, inferno and speedscope): one
//! line per distinct stack, frames root first separated by `;`, a space, and the stack's value.
//!
//! * tracer: `node;program;root;…;function`, paths rebuilt from the call edges
//!   (`CULPRIT_GRAPH=1`; module `stacks` says how), `node;program;function` where there are
//!   none; valued by exclusive time in ns (`--value self`, the default for traced data) or calls
//!   (`--value calls`);
//! * sampler: `node;program;root;…;function`, the sampled call chains (`--call-graph fp`),
//!   `node;program;image;function` where there are none; valued by samples (`--value samples`,
//!   the default when the selection has no traced calls).
//!
//! The node and program frames keep nodes apart in a flame graph; `--no-origin-frames` leaves
//! them out (the sampler's stacks keep their program frame, as before).
//!
//! Lines are sorted by stack, so equal data gives equal files. A `;` inside a name would split
//! a frame and becomes `:`; frames never end a line, so names with spaces are fine.

use std::collections::HashMap;

use culprit_analysis::data::{
    EventInterval, FuncId, Names, OsInterval, ProgramId, SampleInterval, TraceInterval,
};

use crate::error::Result;
use crate::out::Out;
use crate::request::{Request, Summary, Value};
use crate::scan::{Cx, Reader, Sink};
use crate::stacks::{sample_stacks, Depth, TraceCalls, TraceValues};

/// Aggregated stacks.
#[derive(Debug, Default)]
struct Stacks {
    /// Each node's traced programs' calls (their processes' edges summed).
    trace: HashMap<(String, ProgramId), TraceCalls>,
    samples: HashMap<(String, ProgramId, Vec<FuncId>), u64>,
    depth: Depth,
}

impl Sink for Stacks {
    fn trace(&mut self, cx: &Cx<'_>, iv: &TraceInterval) -> Result<()> {
        if let Some(t) = cx.trace_file() {
            self.trace
                .entry((cx.node.to_string(), t.program))
                .or_default()
                .add(iv);
        }
        Ok(())
    }

    fn samples(&mut self, cx: &Cx<'_>, iv: &SampleInterval) -> Result<()> {
        let samples = &mut self.samples;
        sample_stacks(iv, &mut self.depth, |program, stack, n| {
            if cx.selection.program(cx.names, program) {
                *samples
                    .entry((cx.node.to_string(), program, stack.to_vec()))
                    .or_default() += n;
            }
        });
        Ok(())
    }

    fn events(&mut self, _: &Cx<'_>, _: &EventInterval) -> Result<()> {
        Ok(())
    }

    fn os(&mut self, _: &Cx<'_>, _: &OsInterval) -> Result<()> {
        Ok(())
    }
}

fn frame(name: &str) -> String {
    name.replace(';', ":")
}

/// The traced programs' stacks, summed: by (node, program) with `origin`, all together
/// without.
type TraceStacks = HashMap<(Option<(String, ProgramId)>, Vec<FuncId>), TraceValues>;

fn trace_stacks(stacks: &Stacks, origin: bool) -> TraceStacks {
    let mut out: TraceStacks = HashMap::new();
    for (key, calls) in &stacks.trace {
        let key = origin.then(|| key.clone());
        calls.stacks(|stack, v| out.entry((key.clone(), stack.to_vec())).or_default().add(v));
    }
    out
}

/// The folded lines of `stacks` valued by `value`, sorted; with `origin`, each stack starts
/// with its node and program.
fn lines(stacks: &Stacks, names: &Names, value: Value, origin: bool) -> Vec<(String, u64)> {
    let func = |f: FuncId| frame(&names.funcs.get(f).function);
    let mut out: Vec<(String, u64)> = match value {
        Value::SelfTime | Value::Calls => trace_stacks(stacks, origin)
            .iter()
            .map(|((from, stack), v)| {
                let mut s: Vec<String> = Vec::new();
                if let Some((node, program)) = from {
                    s.push(frame(node));
                    s.push(frame(names.programs.get(*program)));
                }
                s.extend(stack.iter().map(|&f| func(f)));
                let n = if value == Value::Calls {
                    v.calls
                } else {
                    v.self_ns
                };
                (s.join(";"), n)
            })
            .collect(),
        Value::Samples => stacks
            .samples
            .iter()
            .map(|((node, program, stack), &n)| {
                let mut s = Vec::new();
                if origin {
                    s.push(frame(node));
                }
                s.push(frame(names.programs.get(*program)));
                if let [leaf] = stack[..] {
                    s.push(frame(&names.funcs.get(leaf).image));
                }
                s.extend(stack.iter().map(|&f| func(f)));
                (s.join(";"), n)
            })
            .collect(),
    };
    // Distinct ids can share a rendered name (`;` replaced): merge them.
    out.sort();
    out.dedup_by(|b, a| {
        if a.0 == b.0 {
            a.1 += b.1;
            true
        } else {
            false
        }
    });
    out.retain(|(_, n)| *n > 0);
    out
}

pub(crate) fn export(req: &Request, reader: &Reader) -> Result<Summary> {
    let mut out = Out::create(req.output.as_deref(), false)?;
    let mut stacks = Stacks::default();
    let pass = reader.run(&mut stacks)?;
    let mut notes = Vec::new();
    let traced = stacks.trace.values().any(|t| !t.is_empty());
    let value = req.value.unwrap_or(if !traced {
        Value::Samples
    } else {
        Value::SelfTime
    });
    if req.value.is_none() && traced && !stacks.samples.is_empty() {
        notes.push(
            "the selection has traced calls and samples: folded stacks show the tracer's self \
             time (--value samples for the sampler's)"
                .to_string(),
        );
    }
    // Only what is written: the tracer's stacks or the sampler's.
    let mut depth = stacks.depth;
    match value {
        Value::Samples => {}
        Value::SelfTime | Value::Calls => {
            depth = Depth::default();
            stacks.trace.values().for_each(|t| depth.add(t.depth()));
        }
    }
    notes.extend(depth.notes());
    let lines = lines(&stacks, &pass.names, value, req.origin_frames);
    if lines.is_empty() {
        notes.push(format!(
            "no {} in the selection: the output is empty",
            match value {
                Value::Samples => "samples",
                _ => "traced calls",
            }
        ));
    }
    for (stack, n) in &lines {
        writeln!(out.w(), "{stack} {n}").map_err(|e| out.error(e))?;
    }
    let written = out.finish()?;
    Ok(Summary {
        written: written.into_iter().collect(),
        items: lines.len() as u64,
        notes,
        warnings: pass.warnings,
    })
}
