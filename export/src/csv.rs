//! CSV (RFC 4180: comma-separated, a header line, fields with `,`, `"` or a line break quoted):
//! one row per node, interval and function, written as the data is read.
//!
//! The profiles (`-o FILE.csv`, or standard output):
//!
//! | column | meaning |
//! | --- | --- |
//! | `node` | node name |
//! | `start` | interval start, RFC 3339 UTC (ms) |
//! | `start_ns` | interval start, ns since the Unix epoch |
//! | `dur_ns` | interval length, ns (tracer 1 s, sampler 10 s by default) |
//! | `source` | `trace` (the tracer) or `samples` (the sampler) |
//! | `program` | program name |
//! | `pid` | traced process id (empty for samples) |
//! | `image` | binary image base name |
//! | `function` | demangled function name |
//! | `calls`, `self_ns`, `total_ns` | the tracer's calls, exclusive and inclusive ns (empty for samples) |
//! | `samples` | the sampler's samples (empty for the tracer) |
//!
//! Node-wide measurements go to their own file, `FILE.os.csv` (not written when the profiles go
//! to standard output): `node,start,start_ns,dur_ns,source,metric,instance,unit,value`, where
//! `source` is `os` for the sampler's OS metrics (metric `disk.await`, instance the device or
//! interface, empty for node-wide ones; catalogue in `culprit_format::os_metrics`) and `events`
//! for its kernel event counts (metric = the tracepoint, unit `events`). A metric without a
//! value in an interval (the node could not provide it) has no row there: absent, not zero.
//!
//! A function without calls or samples in an interval has no row; an interval a writer could
//! not observe has none either (`culprit report` counts them).

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use culprit_analysis::data::{EventInterval, OsInterval, SampleInterval, TraceInterval};
use culprit_analysis::time::rfc3339;

use crate::error::Result;
use crate::out::Out;
use crate::request::{Request, Summary};
use crate::scan::{Cx, Reader, Sink};

/// Header of the profiles file.
pub(crate) const PROFILE_HEADER: &str =
    "node,start,start_ns,dur_ns,source,program,pid,image,function,calls,self_ns,total_ns,samples";
/// Header of the node-wide measurements file.
pub(crate) const OS_HEADER: &str = "node,start,start_ns,dur_ns,source,metric,instance,unit,value";

/// `s` as a CSV field.
fn field(s: &str) -> std::borrow::Cow<'_, str> {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\"")).into()
    } else {
        s.into()
    }
}

/// The node-wide file beside `profiles`: `x.csv` → `x.os.csv`.
pub(crate) fn os_path(profiles: &Path) -> PathBuf {
    let stem = match profiles.extension() {
        Some(e) if e == "csv" => profiles.with_extension(""),
        _ => profiles.to_path_buf(),
    };
    let mut name = stem.file_name().unwrap_or_default().to_os_string();
    name.push(".os.csv");
    stem.with_file_name(name)
}

struct Writer<'a> {
    profiles: &'a mut Out,
    os: Option<&'a mut Out>,
    rows: u64,
    os_rows: u64,
    os_skipped: u64,
}

impl Writer<'_> {
    fn head(cx: &Cx<'_>, start: u64, dur: u64) -> String {
        format!("{},{},{start},{dur}", field(cx.node), rfc3339(start))
    }
}

impl Sink for Writer<'_> {
    fn trace(&mut self, cx: &Cx<'_>, iv: &TraceInterval) -> Result<()> {
        let Some(t) = cx.trace_file() else {
            return Ok(());
        };
        let head = Self::head(cx, iv.start_ns, iv.dur_ns);
        let program = field(cx.names.programs.get(t.program));
        let write = |w: &mut dyn Write| -> io::Result<u64> {
            let mut n = 0;
            for e in iv.entries.iter().filter(|e| e.calls > 0 || e.excl_ns > 0) {
                let k = cx.names.funcs.get(e.func);
                writeln!(
                    w,
                    "{head},trace,{program},{},{},{},{},{},{},",
                    t.pid,
                    field(&k.image),
                    field(&k.function),
                    e.calls,
                    e.excl_ns,
                    e.incl_ns
                )?;
                n += 1;
            }
            Ok(n)
        };
        let n = write(self.profiles.w()).map_err(|e| self.profiles.error(e))?;
        self.rows += n;
        Ok(())
    }

    fn samples(&mut self, cx: &Cx<'_>, iv: &SampleInterval) -> Result<()> {
        let head = Self::head(cx, iv.start_ns, iv.dur_ns);
        let write = |w: &mut dyn Write| -> io::Result<u64> {
            let mut n = 0;
            for e in &iv.entries {
                if e.count == 0 || !cx.selection.program(cx.names, e.program) {
                    continue;
                }
                let k = cx.names.funcs.get(e.func);
                writeln!(
                    w,
                    "{head},samples,{},,{},{},,,,{}",
                    field(cx.names.programs.get(e.program)),
                    field(&k.image),
                    field(&k.function),
                    e.count
                )?;
                n += 1;
            }
            Ok(n)
        };
        let n = write(self.profiles.w()).map_err(|e| self.profiles.error(e))?;
        self.rows += n;
        Ok(())
    }

    fn events(&mut self, cx: &Cx<'_>, iv: &EventInterval) -> Result<()> {
        let Some(os) = self.os.as_deref_mut() else {
            self.os_skipped += iv.counts.len() as u64;
            return Ok(());
        };
        let head = Self::head(cx, iv.start_ns, iv.dur_ns);
        let write = |w: &mut dyn Write| -> io::Result<u64> {
            for c in &iv.counts {
                writeln!(
                    w,
                    "{head},events,{},,events,{}",
                    field(cx.names.events.get(c.event)),
                    c.count
                )?;
            }
            Ok(iv.counts.len() as u64)
        };
        let n = write(os.w()).map_err(|e| os.error(e))?;
        self.os_rows += n;
        Ok(())
    }

    fn os(&mut self, cx: &Cx<'_>, iv: &OsInterval) -> Result<()> {
        let Some(os) = self.os.as_deref_mut() else {
            self.os_skipped += iv.values.len() as u64;
            return Ok(());
        };
        let head = Self::head(cx, iv.start_ns, iv.dur_ns);
        let write = |w: &mut dyn Write| -> io::Result<u64> {
            for v in &iv.values {
                let k = cx.names.os_metrics.get(v.metric);
                writeln!(
                    w,
                    "{head},os,{},{},{},{}",
                    field(&k.name),
                    field(k.instance.as_deref().unwrap_or("")),
                    field(&k.unit),
                    v.value
                )?;
            }
            Ok(iv.values.len() as u64)
        };
        let n = write(os.w()).map_err(|e| os.error(e))?;
        self.os_rows += n;
        Ok(())
    }
}

pub(crate) fn export(req: &Request, reader: &Reader) -> Result<Summary> {
    let mut profiles = Out::create(req.output.as_deref(), false)?;
    let os_target = req.output.as_deref().map(os_path);
    let mut os = match &os_target {
        Some(p) => Some(Out::create(Some(p), false)?),
        None => None,
    };
    writeln!(profiles.w(), "{PROFILE_HEADER}").map_err(|e| profiles.error(e))?;
    if let Some(os) = os.as_mut() {
        writeln!(os.w(), "{OS_HEADER}").map_err(|e| os.error(e))?;
    }
    let mut w = Writer {
        profiles: &mut profiles,
        os: os.as_mut(),
        rows: 0,
        os_rows: 0,
        os_skipped: 0,
    };
    let pass = reader.run(&mut w)?;
    let (rows, os_rows, skipped) = (w.rows, w.os_rows, w.os_skipped);
    let mut notes = Vec::new();
    if skipped > 0 {
        notes.push(format!(
            "{skipped} kernel event count(s) and OS metric value(s) not written: node-wide \
             measurements go to FILE.os.csv beside -o FILE.csv"
        ));
    }
    let mut written: Vec<PathBuf> = profiles.finish()?.into_iter().collect();
    if let Some(os) = os {
        written.extend(os.finish()?);
    }
    Ok(Summary {
        written,
        items: rows + os_rows,
        notes,
        warnings: pass.warnings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_quoted_when_needed() {
        assert_eq!(field("plain"), "plain");
        assert_eq!(
            field("std::map<int, int>::find"),
            "\"std::map<int, int>::find\""
        );
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
    }

    #[test]
    fn os_file_beside_profiles() {
        assert_eq!(os_path(Path::new("/x/p.csv")), Path::new("/x/p.os.csv"));
        assert_eq!(os_path(Path::new("p")), Path::new("p.os.csv"));
        assert_eq!(os_path(Path::new("p.txt")), Path::new("p.txt.os.csv"));
    }
}
