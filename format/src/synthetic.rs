//! Synthetic `.cul` files for tests and benchmarks (the `test-support` feature): the one place
//! that starts a file as a writer does, so every test and bench that writes data by hand writes
//! the same files as the runtime and the sampler (the right name in the node's directory, the
//! header page, the opening records), and a test that damages a file damages one written so.
//!
//! A file is started here and returned as the [`FileWriter`] it is: the caller appends the
//! records of its scenario (built with [`RecordBuf`]) and ends it with [`FileWriter::finish`],
//! or leaves it open as a writer still running (or killed) would.

use std::io;
use std::path::Path;

use crate::encode::{ObjectDesc, RecordBuf};
use crate::layout::{object_flags, FileKind};
use crate::names::{samples_file_name, trace_file_name};
use crate::writer::FileWriter;

/// The main executable's Object record, which the runtime writes right after its Info record
/// (object id 1, flagged [`object_flags::MAIN`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct MainObject<'a> {
    /// Load bias; the object's addresses start there.
    pub bias: u64,
    /// Bytes of address space the object covers from `bias`.
    pub size: u64,
    /// GNU build-id (empty: none).
    pub build_id: &'a [u8],
    /// Path as the runtime records it (a path that does not exist leaves its functions named
    /// `name+0x…`).
    pub path: &'a str,
}

/// Starts the trace file of process `pid` in `node_dir` (created if missing), started at
/// `start_ns`, as the tracer runtime starts it: an Info record of `info`, then `main`'s Object
/// record when given; both committed.
pub fn trace_file(
    node_dir: &Path,
    pid: u32,
    start_ns: u64,
    info: &[(&str, &str)],
    main: Option<MainObject<'_>>,
) -> io::Result<FileWriter> {
    std::fs::create_dir_all(node_dir)?;
    let mut w = FileWriter::create_unique(
        node_dir,
        |seq| trace_file_name(pid, start_ns, seq),
        FileKind::Trace,
        start_ns,
        pid,
    )?;
    let mut buf = RecordBuf::new();
    buf.info(info.iter().copied());
    if let Some(m) = main {
        buf.object(&ObjectDesc {
            id: 1,
            flags: object_flags::MAIN,
            bias: m.bias,
            start: m.bias,
            end: m.bias + m.size,
            build_id: m.build_id,
            path: m.path,
        });
    }
    w.append(&buf)?;
    Ok(w)
}

/// Starts a sampler's file in `node_dir` (created if missing), started at `start_ns` by
/// process `pid`, as `culprit sample` starts it: an Info record of `info`, then a Strings
/// record of `strings` when there are any; both committed.
pub fn samples_file(
    node_dir: &Path,
    start_ns: u64,
    pid: u32,
    info: &[(&str, &str)],
    strings: &[(u32, &str)],
) -> io::Result<FileWriter> {
    std::fs::create_dir_all(node_dir)?;
    let mut w = FileWriter::create_unique(
        node_dir,
        |seq| samples_file_name(start_ns, seq),
        FileKind::Samples,
        start_ns,
        pid,
    )?;
    let mut buf = RecordBuf::new();
    buf.info(info.iter().copied());
    if !strings.is_empty() {
        buf.strings(strings.iter().copied());
    }
    w.append(&buf)?;
    Ok(w)
}
