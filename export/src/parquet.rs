//! Parquet: the per-interval profiles and the node-wide measurements as two tables of Parquet
//! files, partitioned Hive-style by node and day, for DuckDB, Spark or pandas:
//!
//! ```text
//! DIR/profiles/node=io1/day=2026-11-22/part-0.parquet
//! DIR/os/node=io1/day=2026-11-22/part-0.parquet
//! ```
//!
//! `node` and `day` (UTC date of the interval start) are in the paths, not in the files: read
//! with Hive partitioning (DuckDB `hive_partitioning = true`, Spark by default). The schemas
//! ([`PROFILE_SCHEMA`], [`OS_SCHEMA`]) and a query are in docs/export.md.
//!
//! Written with the parquet crate's own column writer (no Arrow), Snappy-compressed, strings
//! dictionary-encoded. Memory is bounded: rows are buffered per partition and a partition's
//! buffer becomes a row group at [`ROW_GROUP_ROWS`] rows, or earlier when all buffers together
//! pass [`BUFFER_BYTES`]; at most [`OPEN_FILES`] files are open (the least recently used is
//! closed, and its partition continues in `part-1`, …). The directory is written beside DIR
//! and renamed to DIR when complete; DIR must not exist or be empty.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::Compression;
use parquet::data_type::{ByteArray, ByteArrayType, DoubleType, Int32Type, Int64Type};
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use parquet::schema::types::Type;

use culprit_analysis::data::{
    EventInterval, FuncId, OsInterval, OsMetricId, ProgramId, SampleInterval, TraceInterval,
};
use culprit_analysis::time::rfc3339;

use crate::error::{Error, Result};
use crate::request::{Request, Summary};
use crate::scan::{Cx, Reader, Sink};

/// Schema of `profiles/`: one row per node (partition), interval and function.
pub const PROFILE_SCHEMA: &str = "message profile {
  required int64 start (TIMESTAMP(MICROS,true));
  required int64 dur_ns;
  required binary source (STRING);
  required binary program (STRING);
  optional int32 pid;
  required binary image (STRING);
  required binary function (STRING);
  optional int64 calls;
  optional int64 self_ns;
  optional int64 total_ns;
  optional int64 samples;
}";

/// Schema of `os/`: one row per node (partition), interval and measurement.
pub const OS_SCHEMA: &str = "message os {
  required int64 start (TIMESTAMP(MICROS,true));
  required int64 dur_ns;
  required binary source (STRING);
  required binary metric (STRING);
  required binary instance (STRING);
  required binary unit (STRING);
  required double value;
}";

/// Rows per row group (at most).
pub const ROW_GROUP_ROWS: usize = 64 * 1024;
/// Bytes of rows buffered over all partitions before the largest buffer is written.
pub const BUFFER_BYTES: usize = 32 << 20;
/// Files open at once.
pub const OPEN_FILES: usize = 64;

/// One table's column buffers.
trait Table: Default {
    /// [`PROFILE_SCHEMA`] or [`OS_SCHEMA`].
    const SCHEMA: &'static str;
    /// Directory under DIR.
    const DIR: &'static str;
    fn rows(&self) -> usize;
    /// Writes the buffered rows as one row group and empties the buffers.
    fn write(&mut self, w: &mut SerializedFileWriter<File>) -> Result<(), ParquetError>;
}

fn req_col<T: parquet::data_type::DataType>(
    rg: &mut parquet::file::writer::SerializedRowGroupWriter<'_, File>,
    values: &[T::T],
    defs: Option<&[i16]>,
) -> Result<(), ParquetError> {
    let mut col = rg
        .next_column()?
        .ok_or_else(|| ParquetError::General("schema has fewer columns than written".into()))?;
    col.typed::<T>().write_batch(values, defs, None)?;
    col.close()
}

/// An optional column's values and definition levels.
#[derive(Debug, Default)]
struct Opt<T> {
    values: Vec<T>,
    defs: Vec<i16>,
}

impl<T> Opt<T> {
    fn push(&mut self, v: Option<T>) {
        match v {
            Some(v) => {
                self.values.push(v);
                self.defs.push(1);
            }
            None => self.defs.push(0),
        }
    }
}

#[derive(Debug, Default)]
struct Profiles {
    start: Vec<i64>,
    dur_ns: Vec<i64>,
    source: Vec<ByteArray>,
    program: Vec<ByteArray>,
    pid: Opt<i32>,
    image: Vec<ByteArray>,
    function: Vec<ByteArray>,
    calls: Opt<i64>,
    self_ns: Opt<i64>,
    total_ns: Opt<i64>,
    samples: Opt<i64>,
}

impl Table for Profiles {
    const SCHEMA: &'static str = PROFILE_SCHEMA;
    const DIR: &'static str = "profiles";

    fn rows(&self) -> usize {
        self.start.len()
    }

    fn write(&mut self, w: &mut SerializedFileWriter<File>) -> Result<(), ParquetError> {
        let mut rg = w.next_row_group()?;
        req_col::<Int64Type>(&mut rg, &self.start, None)?;
        req_col::<Int64Type>(&mut rg, &self.dur_ns, None)?;
        req_col::<ByteArrayType>(&mut rg, &self.source, None)?;
        req_col::<ByteArrayType>(&mut rg, &self.program, None)?;
        req_col::<Int32Type>(&mut rg, &self.pid.values, Some(&self.pid.defs))?;
        req_col::<ByteArrayType>(&mut rg, &self.image, None)?;
        req_col::<ByteArrayType>(&mut rg, &self.function, None)?;
        for c in [&self.calls, &self.self_ns, &self.total_ns, &self.samples] {
            req_col::<Int64Type>(&mut rg, &c.values, Some(&c.defs))?;
        }
        rg.close()?;
        // Fresh buffers: a partition's capacity must not outlive its row group.
        *self = Profiles::default();
        Ok(())
    }
}

#[derive(Debug, Default)]
struct Os {
    start: Vec<i64>,
    dur_ns: Vec<i64>,
    source: Vec<ByteArray>,
    metric: Vec<ByteArray>,
    instance: Vec<ByteArray>,
    unit: Vec<ByteArray>,
    value: Vec<f64>,
}

impl Table for Os {
    const SCHEMA: &'static str = OS_SCHEMA;
    const DIR: &'static str = "os";

    fn rows(&self) -> usize {
        self.start.len()
    }

    fn write(&mut self, w: &mut SerializedFileWriter<File>) -> Result<(), ParquetError> {
        let mut rg = w.next_row_group()?;
        req_col::<Int64Type>(&mut rg, &self.start, None)?;
        req_col::<Int64Type>(&mut rg, &self.dur_ns, None)?;
        for c in [&self.source, &self.metric, &self.instance, &self.unit] {
            req_col::<ByteArrayType>(&mut rg, c, None)?;
        }
        req_col::<DoubleType>(&mut rg, &self.value, None)?;
        rg.close()?;
        *self = Os::default();
        Ok(())
    }
}

/// One partition (node, day) of a table: its open file, if any, and its buffered rows.
struct Partition<T> {
    dir: PathBuf,
    file: Option<(SerializedFileWriter<File>, PathBuf)>,
    parts: usize,
    rows: T,
    bytes: usize,
    used: u64,
}

/// A table's partitions.
struct Tables<T> {
    schema: Arc<Type>,
    props: Arc<WriterProperties>,
    parts: HashMap<(String, String), Partition<T>>,
    files: Vec<PathBuf>,
    rows: u64,
}

impl<T: Table> Tables<T> {
    fn new() -> Result<Self> {
        let schema = parse_message_type(T::SCHEMA).map_err(|source| Error::Parquet {
            path: PathBuf::from(T::DIR),
            source,
        })?;
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_created_by(format!("culprit export {}", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Tables {
            schema: Arc::new(schema),
            props: Arc::new(props),
            parts: HashMap::new(),
            files: Vec::new(),
            rows: 0,
        })
    }

    /// The partition `key` (node, day).
    fn part(&mut self, root: &Path, key: &(String, String), tick: u64) -> &mut Partition<T> {
        let p = self
            .parts
            .entry(key.clone())
            .or_insert_with(|| Self::partition(root, key));
        p.used = tick;
        p
    }

    fn partition(root: &Path, (node, day): &(String, String)) -> Partition<T> {
        Partition {
            dir: root
                .join(T::DIR)
                .join(format!("node={node}"))
                .join(format!("day={day}")),
            file: None,
            parts: 0,
            rows: T::default(),
            bytes: 0,
            used: 0,
        }
    }

    /// Writes `p`'s buffered rows as a row group, opening its next file if needed.
    fn flush(
        schema: &Arc<Type>,
        props: &Arc<WriterProperties>,
        p: &mut Partition<T>,
    ) -> Result<()> {
        if p.rows.rows() == 0 {
            return Ok(());
        }
        if p.file.is_none() {
            std::fs::create_dir_all(&p.dir).map_err(|e| Error::io("cannot create", &p.dir, e))?;
            let path = p.dir.join(format!("part-{}.parquet", p.parts));
            p.parts += 1;
            let f = File::create(&path).map_err(|e| Error::io("cannot create", &path, e))?;
            let w =
                SerializedFileWriter::new(f, schema.clone(), props.clone()).map_err(|source| {
                    Error::Parquet {
                        path: path.clone(),
                        source,
                    }
                })?;
            p.file = Some((w, path));
        }
        if let Some((w, path)) = p.file.as_mut() {
            p.rows.write(w).map_err(|source| Error::Parquet {
                path: path.clone(),
                source,
            })?;
        }
        p.bytes = 0;
        Ok(())
    }

    /// Closes `p`'s file, if open. Returns its path.
    fn close(p: &mut Partition<T>) -> Result<Option<PathBuf>> {
        let Some((w, path)) = p.file.take() else {
            return Ok(None);
        };
        w.close().map_err(|source| Error::Parquet {
            path: path.clone(),
            source,
        })?;
        Ok(Some(path))
    }

    /// After `added` rows went to partition `key`: keeps memory and open files bounded.
    fn settle(&mut self, key: &(String, String), added: usize) -> Result<()> {
        self.rows += added as u64;
        let Tables {
            schema,
            props,
            parts,
            files,
            ..
        } = self;
        if let Some(p) = parts.get_mut(key) {
            if p.rows.rows() >= ROW_GROUP_ROWS {
                Self::flush(schema, props, p)?;
            }
        }
        if parts.values().map(|p| p.bytes).sum::<usize>() > BUFFER_BYTES {
            if let Some(p) = parts.values_mut().max_by_key(|p| p.bytes) {
                Self::flush(schema, props, p)?;
            }
        }
        while parts.values().filter(|p| p.file.is_some()).count() > OPEN_FILES {
            let Some(p) = parts
                .values_mut()
                .filter(|p| p.file.is_some())
                .min_by_key(|p| p.used)
            else {
                break;
            };
            Self::flush(schema, props, p)?;
            files.extend(Self::close(p)?);
        }
        Ok(())
    }

    /// Writes everything left and closes every file.
    fn finish(mut self) -> Result<(Vec<PathBuf>, u64)> {
        let mut keys: Vec<(String, String)> = self.parts.keys().cloned().collect();
        keys.sort();
        for k in keys {
            if let Some(p) = self.parts.get_mut(&k) {
                Self::flush(&self.schema, &self.props, p)?;
                self.files.extend(Self::close(p)?);
            }
        }
        self.files.sort();
        Ok((self.files, self.rows))
    }
}

/// Strings of the rows, made once per name.
#[derive(Default)]
struct Names {
    funcs: HashMap<FuncId, (ByteArray, ByteArray)>,
    programs: HashMap<ProgramId, ByteArray>,
    events: HashMap<u32, ByteArray>,
    /// (metric, instance, unit) of each OS metric.
    os: HashMap<OsMetricId, (ByteArray, ByteArray, ByteArray)>,
    trace: ByteArray,
    samples: ByteArray,
    events_source: ByteArray,
    events_unit: ByteArray,
    os_source: ByteArray,
    empty: ByteArray,
}

impl Names {
    fn new() -> Self {
        Names {
            trace: "trace".into(),
            samples: "samples".into(),
            events_source: "events".into(),
            events_unit: "events".into(),
            os_source: "os".into(),
            empty: "".into(),
            ..Default::default()
        }
    }

    fn func(&mut self, cx: &Cx<'_>, f: FuncId) -> (ByteArray, ByteArray) {
        self.funcs
            .entry(f)
            .or_insert_with(|| {
                let k = cx.names.funcs.get(f);
                (k.image.as_ref().into(), k.function.as_ref().into())
            })
            .clone()
    }

    fn program(&mut self, cx: &Cx<'_>, p: ProgramId) -> ByteArray {
        self.programs
            .entry(p)
            .or_insert_with(|| cx.names.programs.get(p).as_ref().into())
            .clone()
    }
}

struct Writer<'a> {
    root: &'a Path,
    profiles: Tables<Profiles>,
    os: Tables<Os>,
    names: Names,
    tick: u64,
}

/// Bytes a row holds in the buffers besides its strings (which are shared): eight integer
/// columns and their definition levels, four string handles of 32 bytes.
const ROW_BYTES: usize = 200;

fn micros(ns: u64) -> i64 {
    i64::try_from(ns / 1000).unwrap_or(i64::MAX)
}

fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// The partition key of an interval: (node, UTC day of its start).
fn key(cx: &Cx<'_>, start_ns: u64) -> (String, String) {
    (cx.node.to_string(), rfc3339(start_ns)[..10].to_string())
}

impl Sink for Writer<'_> {
    fn trace(&mut self, cx: &Cx<'_>, iv: &TraceInterval) -> Result<()> {
        let Some(t) = cx.trace_file() else {
            return Ok(());
        };
        self.tick += 1;
        let key = key(cx, iv.start_ns);
        let program = self.names.program(cx, t.program);
        let pid = i32::try_from(t.pid).ok();
        let names = &mut self.names;
        let p = self.profiles.part(self.root, &key, self.tick);
        let before = p.rows.rows();
        for e in iv
            .entries
            .iter()
            .filter(|e| e.calls > 0 || e.excl_ns > 0 || e.incl_ns > 0)
        {
            let (image, function) = names.func(cx, e.func);
            let r = &mut p.rows;
            r.start.push(micros(iv.start_ns));
            r.dur_ns.push(int(iv.dur_ns));
            r.source.push(names.trace.clone());
            r.program.push(program.clone());
            r.pid.push(pid);
            r.image.push(image);
            r.function.push(function);
            r.calls.push(Some(int(e.calls)));
            r.self_ns.push(Some(int(e.excl_ns)));
            r.total_ns.push(Some(int(e.incl_ns)));
            r.samples.push(None);
            p.bytes += ROW_BYTES;
        }
        let added = p.rows.rows() - before;
        self.profiles.settle(&key, added)
    }

    fn samples(&mut self, cx: &Cx<'_>, iv: &SampleInterval) -> Result<()> {
        self.tick += 1;
        let key = key(cx, iv.start_ns);
        let names = &mut self.names;
        let p = self.profiles.part(self.root, &key, self.tick);
        let before = p.rows.rows();
        for e in &iv.entries {
            if e.count == 0 || !cx.selection.program(cx.names, e.program) {
                continue;
            }
            let program = names.program(cx, e.program);
            let (image, function) = names.func(cx, e.func);
            let r = &mut p.rows;
            r.start.push(micros(iv.start_ns));
            r.dur_ns.push(int(iv.dur_ns));
            r.source.push(names.samples.clone());
            r.program.push(program);
            r.pid.push(None);
            r.image.push(image);
            r.function.push(function);
            r.calls.push(None);
            r.self_ns.push(None);
            r.total_ns.push(None);
            r.samples.push(Some(int(e.count)));
            p.bytes += ROW_BYTES;
        }
        let added = p.rows.rows() - before;
        self.profiles.settle(&key, added)
    }

    fn events(&mut self, cx: &Cx<'_>, iv: &EventInterval) -> Result<()> {
        self.tick += 1;
        let key = key(cx, iv.start_ns);
        let names = &mut self.names;
        let p = self.os.part(self.root, &key, self.tick);
        for c in &iv.counts {
            let metric = names
                .events
                .entry(c.event)
                .or_insert_with(|| cx.names.events.get(c.event).as_ref().into())
                .clone();
            let r = &mut p.rows;
            r.start.push(micros(iv.start_ns));
            r.dur_ns.push(int(iv.dur_ns));
            r.source.push(names.events_source.clone());
            r.metric.push(metric);
            r.instance.push(names.empty.clone());
            r.unit.push(names.events_unit.clone());
            r.value.push(c.count as f64);
            p.bytes += ROW_BYTES;
        }
        self.os.settle(&key, iv.counts.len())
    }

    fn os(&mut self, cx: &Cx<'_>, iv: &OsInterval) -> Result<()> {
        self.tick += 1;
        let key = key(cx, iv.start_ns);
        let names = &mut self.names;
        let p = self.os.part(self.root, &key, self.tick);
        for v in &iv.values {
            let (metric, instance, unit) = names
                .os
                .entry(v.metric)
                .or_insert_with(|| {
                    let k = cx.names.os_metrics.get(v.metric);
                    (
                        k.name.as_ref().into(),
                        k.instance.as_deref().unwrap_or("").into(),
                        k.unit.as_ref().into(),
                    )
                })
                .clone();
            let r = &mut p.rows;
            r.start.push(micros(iv.start_ns));
            r.dur_ns.push(int(iv.dur_ns));
            r.source.push(names.os_source.clone());
            r.metric.push(metric);
            r.instance.push(instance);
            r.unit.push(unit);
            r.value.push(v.value);
            p.bytes += ROW_BYTES;
        }
        self.os.settle(&key, iv.values.len())
    }
}

/// Refuses a non-empty DIR; returns the directory to write into until complete.
fn partial_dir(dir: &Path) -> Result<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(Error::Usage(format!(
                    "-o {}: the directory is not empty (an export goes to a new or empty \
                     directory, so nothing there is overwritten)",
                    dir.display()
                )));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            return Err(Error::Usage(format!(
                "-o {}: not a directory (Parquet exports are directories of files)",
                dir.display()
            )))
        }
        Err(e) => return Err(Error::io("cannot read", dir, e)),
    }
    let partial = crate::out::partial_path(dir);
    let _ = std::fs::remove_dir_all(&partial);
    std::fs::create_dir_all(&partial).map_err(|e| Error::io("cannot create", &partial, e))?;
    Ok(partial)
}

pub(crate) fn export(req: &Request, reader: &Reader) -> Result<Summary> {
    let Some(dir) = req.output.as_deref() else {
        return Err(Error::Usage(
            "--format parquet writes a directory: give -o DIR".into(),
        ));
    };
    let partial = partial_dir(dir)?;
    let result = (|| {
        let mut w = Writer {
            root: &partial,
            profiles: Tables::new()?,
            os: Tables::new()?,
            names: Names::new(),
            tick: 0,
        };
        let pass = reader.run(&mut w)?;
        let (mut files, rows) = w.profiles.finish()?;
        let (os_files, os_rows) = w.os.finish()?;
        files.extend(os_files);
        Ok::<_, Error>((pass, files, rows + os_rows))
    })();
    let (pass, files, rows) = match result {
        Ok(r) => r,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&partial);
            return Err(e);
        }
    };
    std::fs::create_dir_all(&partial).map_err(|e| Error::io("cannot create", &partial, e))?;
    if let Err(e) = std::fs::rename(&partial, dir) {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(Error::io("cannot write", dir, e));
    }
    let written = files
        .iter()
        .filter_map(|f| f.strip_prefix(&partial).ok().map(|r| dir.join(r)))
        .collect();
    let mut notes = Vec::new();
    if rows == 0 {
        notes.push("nothing in the selection: the directory is empty".to_string());
    }
    Ok(Summary {
        written,
        items: rows,
        notes,
        warnings: pass.warnings,
    })
}
