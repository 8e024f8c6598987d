//! The machine-wide sources of a whole-machine node: disks and CPU.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use culprit_format::os_metrics::name;

use super::parse;
use super::read::{delta, Out, Reread};

/// The machine-wide sources of a whole-machine node.
#[derive(Debug)]
pub(super) struct Machine {
    pub(super) diskstats: Option<Reread>,
    pub(super) stat: Option<Reread>,
    pub(super) prev_disks: HashMap<String, parse::DiskStat>,
    pub(super) prev_cpu: Option<parse::CpuStat>,
    pub(super) whole_disk: HashMap<String, bool>,
}

impl Machine {
    pub(super) fn open() -> Machine {
        Machine {
            diskstats: Reread::open(Path::new("/proc/diskstats")).ok(),
            stat: Reread::open(Path::new("/proc/stat")).ok(),
            prev_disks: HashMap::new(),
            prev_cpu: None,
            whole_disk: HashMap::new(),
        }
    }

    pub(super) fn collect(&mut self, span: f64, out: &mut Out) {
        let disks = self
            .diskstats
            .as_mut()
            .and_then(Reread::text)
            .map(parse::diskstats)
            .unwrap_or_default();
        for d in &disks {
            // Whole disks (partitions would count their I/O twice), once they have done I/O.
            let whole = *self
                .whole_disk
                .entry(d.name.clone())
                .or_insert_with(|| Path::new("/sys/block").join(&d.name).exists());
            if !whole || d.rd_ios + d.wr_ios == 0 {
                continue;
            }
            if let Some(p) = self.prev_disks.get(&d.name) {
                disk_values(p, d, span, out);
            }
        }
        self.prev_disks = disks.into_iter().map(|d| (d.name.clone(), d)).collect();

        let cpu = self
            .stat
            .as_mut()
            .and_then(Reread::text)
            .and_then(parse::proc_stat);
        if let Some(c) = cpu {
            // The collector itself is running while it reads.
            out.put(
                name::CPU_RUNNABLE,
                None,
                Some(c.procs_running.saturating_sub(1) as f64),
            );
            out.put(name::CPU_BLOCKED, None, Some(c.procs_blocked as f64));
        }
        if let (Some(p), Some(c)) = (self.prev_cpu, cpu) {
            if let Some(total) = delta(p.total, c.total).filter(|t| *t > 0.0) {
                for (n, a, b) in [
                    (name::CPU_USER, p.user, c.user),
                    (name::CPU_SYS, p.sys, c.sys),
                    (name::CPU_IOWAIT, p.iowait, c.iowait),
                    (name::CPU_STEAL, p.steal, c.steal),
                ] {
                    out.put(n, None, delta(a, b).map(|d| 100.0 * d / total));
                }
            }
            out.put(
                name::CPU_CSWCH,
                None,
                delta(p.ctxt, c.ctxt).map(|d| d / span),
            );
        }
        self.prev_cpu = cpu;
    }
}

/// sysstat's `iostat -x` formulas over one interval (seed 001 Table 3.1).
pub(super) fn disk_values(p: &parse::DiskStat, c: &parse::DiskStat, span: f64, out: &mut Out) {
    let d = |a: u64, b: u64| b.checked_sub(a);
    let (
        Some(rd),
        Some(wr),
        Some(rd_sec),
        Some(wr_sec),
        Some(rd_ticks),
        Some(wr_ticks),
        Some(io_ticks),
        Some(queue),
    ) = (
        d(p.rd_ios, c.rd_ios),
        d(p.wr_ios, c.wr_ios),
        d(p.rd_sectors, c.rd_sectors),
        d(p.wr_sectors, c.wr_sectors),
        d(p.rd_ticks, c.rd_ticks),
        d(p.wr_ticks, c.wr_ticks),
        d(p.io_ticks, c.io_ticks),
        d(p.time_in_queue, c.time_in_queue),
    )
    else {
        return; // a counter went backwards: the device was replaced
    };
    let inst: Arc<str> = Arc::from(c.name.as_str());
    let i = Some(&inst);
    let n = (rd + wr) as f64;
    let per_req = |x: u64| (n > 0.0).then(|| x as f64 / n);
    out.put(name::DISK_TPS, i, Some(n / span));
    out.put(name::DISK_RD_SEC, i, Some(rd_sec as f64 / span));
    out.put(name::DISK_WR_SEC, i, Some(wr_sec as f64 / span));
    out.put(name::DISK_AVGRQ_SZ, i, per_req(rd_sec + wr_sec));
    out.put(name::DISK_AVGQU_SZ, i, Some(queue as f64 / (span * 1000.0)));
    out.put(name::DISK_AWAIT, i, per_req(rd_ticks + wr_ticks));
    out.put(name::DISK_SVCTM, i, per_req(io_ticks));
    out.put(
        name::DISK_UTIL,
        i,
        Some((100.0 * io_ticks as f64 / (span * 1000.0)).min(100.0)),
    );
}
