//! Writing uprobe counts as the tracer's kind of file: `DATA/<node>/trace-<pid>-<start_ns>.cul`
//! with an Info record (`source=uprobes`), one Object record per probed binary, one Interval
//! record per interval and an End record, so `report`, `diagnose` and the exports read them as
//! they read the runtime's.
//!
//! Addresses: a probe counts at a file offset in whatever process maps the binary, so the file
//! places each binary at a bias of its own choosing (`(index + 1) << 40`, far apart) and writes
//! every function at bias + its ELF virtual address; readers name it through the Object
//! record as they do the runtime's (bias subtracted, symbol looked up in the binary), and never
//! compare addresses across files.

use std::io;
use std::path::{Path, PathBuf};

use culprit_format::procfs::{self, Proc};
use culprit_format::writer::FileWriter;
use culprit_format::{
    info_keys, interval_flags, names, object_flags, FileKind, IntervalEntry, IntervalHead,
    ObjectDesc, RecordBuf,
};

use super::target::Plan;
use crate::profile::datadir_error;
use culprit_datadir::Dir;

/// Value of [`info_keys::SOURCE`] in files written from uprobes.
pub const SOURCE_UPROBES: &str = "uprobes";

/// One probe's counters for one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeCount {
    /// Calls (entries).
    pub calls: u64,
    /// Exclusive ns (0 when time is not measured).
    pub excl_ns: u64,
    /// Inclusive ns (0 when time is not measured).
    pub incl_ns: u64,
}

/// A trace-kind file fed from probes.
#[derive(Debug)]
pub struct TraceOut {
    writer: FileWriter,
    interval_ns: u64,
    addrs: Vec<u64>,
    buf: RecordBuf,
    intervals: u64,
}

/// Bias at which image `i` is placed in the file.
fn bias(i: usize) -> u64 {
    (i as u64 + 1) << 40
}

impl TraceOut {
    /// Creates `data_dir/node/trace-<pid>-<start_ns>.cul` (a free `.<seq>` variant if taken;
    /// never an existing file or a symbolic link; directories and file made the safe way by
    /// `culprit-datadir`, as the sampler's own files) with its Info and Object records. `main`
    /// is the index of the program's own executable among the plan's images, if it is one.
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        data_dir: &Path,
        node: &str,
        pid: u32,
        start_ns: u64,
        interval_ns: u64,
        info: &[(String, String)],
        plan: &Plan,
        main: Option<usize>,
    ) -> io::Result<TraceOut> {
        let dir = Dir::open_root(data_dir, true)
            .and_then(|root| root.node(node, true))
            .map_err(datadir_error)?;
        let (file, name) = dir
            .create_file(|seq| names::trace_file_name(pid, start_ns, seq))
            .map_err(datadir_error)?;
        let mut writer =
            FileWriter::from_file(file, dir.path().join(name), FileKind::Trace, start_ns, pid)?;
        let mut buf = RecordBuf::new();
        buf.info(info.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        for (i, img) in plan.images.iter().enumerate() {
            let b = bias(i);
            let path = img.path.to_string_lossy();
            buf.object(&ObjectDesc {
                id: i as u32 + 1,
                flags: if main == Some(i) {
                    object_flags::MAIN
                } else {
                    0
                },
                bias: b,
                start: b + img.image.lo,
                end: b + img.image.hi,
                build_id: &img.image.build_id,
                path: &path,
            });
        }
        writer.append(&buf)?;
        buf.clear();
        let addrs = plan
            .probes
            .iter()
            .map(|p| bias(p.image) + p.vaddr)
            .collect();
        Ok(TraceOut {
            writer,
            interval_ns,
            addrs,
            buf,
            intervals: 0,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.writer.path()
    }

    /// Interval records written.
    pub fn intervals(&self) -> u64 {
        self.intervals
    }

    /// Appends the interval starting at `start_ns` with per-probe counters (in plan order;
    /// zero rows are left out). `threads` is how many threads were counted.
    pub fn interval(
        &mut self,
        start_ns: u64,
        flags: u32,
        threads: u32,
        counts: &[ProbeCount],
    ) -> io::Result<()> {
        let entries = self
            .addrs
            .iter()
            .zip(counts)
            .filter(|(_, c)| c.calls > 0 || c.incl_ns > 0)
            .map(|(&addr, c)| IntervalEntry {
                addr,
                calls: c.calls,
                excl_ns: c.excl_ns,
                incl_ns: c.incl_ns,
            });
        let head = IntervalHead {
            start_ns,
            dur_ns: self.interval_ns,
            flags,
            threads,
            ..IntervalHead::default()
        };
        self.buf.interval(&head, entries);
        self.commit()?;
        self.intervals += 1;
        Ok(())
    }

    /// Appends a record for intervals that could not be observed (no entries).
    pub fn missed(&mut self, start_ns: u64, dur_ns: u64) -> io::Result<()> {
        let head = IntervalHead {
            start_ns,
            dur_ns,
            flags: interval_flags::MISSED,
            ..IntervalHead::default()
        };
        self.buf.interval(&head, std::iter::empty());
        self.commit()?;
        self.intervals += 1;
        Ok(())
    }

    fn commit(&mut self) -> io::Result<()> {
        let r = self.writer.append(&self.buf);
        self.buf.clear();
        r
    }

    /// Writes the End record and marks the file ended.
    pub fn finish(self, end_ns: u64, reason: u32) -> io::Result<PathBuf> {
        self.writer.finish(end_ns, reason)
    }
}

/// The Info pairs of a probed process: who it is, and how it was counted.
pub fn process_info(
    node: &str,
    pid: u32,
    interval_ns: u64,
    plan: &Plan,
    time: bool,
) -> Vec<(String, String)> {
    let p = Proc::Pid(pid);
    let ppid = crate::procs::ppid(pid)
        .map(|p| p.to_string())
        .unwrap_or_default();
    let mut v: Vec<(String, String)> = vec![
        (info_keys::NODE.into(), node.into()),
        (info_keys::HOST.into(), procfs::host_name()),
        (info_keys::PID.into(), pid.to_string()),
        (info_keys::PPID.into(), ppid),
        (info_keys::PROGRAM.into(), procfs::program(p)),
        (info_keys::EXE.into(), procfs::exe(p)),
        (info_keys::CMDLINE.into(), procfs::cmdline(p)),
        (
            info_keys::PROC_START_NS.into(),
            procfs::start_ns(p).unwrap_or(0).to_string(),
        ),
        (info_keys::INTERVAL_NS.into(), interval_ns.to_string()),
        (info_keys::CLOCK.into(), "realtime".into()),
        (
            info_keys::WRITER_VERSION.into(),
            format!("culprit uprobes {}", env!("CARGO_PKG_VERSION")),
        ),
        (info_keys::KERNEL.into(), procfs::kernel_release()),
        (info_keys::BOOT_ID.into(), procfs::boot_id()),
        (info_keys::SOURCE.into(), SOURCE_UPROBES.into()),
        (info_keys::UPROBES.into(), plan.describe_probes()),
        (
            info_keys::UPROBE_TIME.into(),
            if time { "uretprobes" } else { "none" }.into(),
        ),
    ];
    for s in &plan.skipped {
        v.push(("uprobe_skipped".into(), s.to_string()));
    }
    v
}
