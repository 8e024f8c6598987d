//! A node's cgroup counters (cgroup v1: blkio, cpuacct, cpu).

use std::path::{Path, PathBuf};

use culprit_format::os_metrics::name;

use super::parse;
use super::read::{delta, Out, Reread};

/// The directory of cgroup `rel` in the v1 hierarchy that has `controller`.
pub(super) fn v1_dir(mounts: &str, controller: &str, rel: &str) -> Option<PathBuf> {
    for line in mounts.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() >= 4 && f[2] == "cgroup" && f[3].split(',').any(|o| o == controller) {
            let dir = Path::new(f[1]).join(rel.trim_start_matches('/'));
            return dir.is_dir().then_some(dir);
        }
    }
    None
}

/// A node's cgroup counters (cgroup v1: blkio, cpuacct, cpu).
#[derive(Debug)]
pub(super) struct Cgroup {
    pub(super) bytes: Option<Reread>,
    pub(super) ios: Option<Reread>,
    pub(super) usage: Option<Reread>,
    pub(super) cpu_stat: Option<Reread>,
    pub(super) prev: [Option<(u64, u64)>; 3],
    pub(super) prev_usage: Option<u64>,
}

impl Cgroup {
    pub(super) fn open(rel: &str, mounts: &str) -> Cgroup {
        let file = |ctl: &str, names: &[&str]| {
            let dir = v1_dir(mounts, ctl, rel)?;
            names.iter().find_map(|n| Reread::open(&dir.join(n)).ok())
        };
        Cgroup {
            // The recursive files count the node's subgroups too (a rule covers "the cgroup or
            // below it").
            bytes: file(
                "blkio",
                &[
                    "blkio.throttle.io_service_bytes_recursive",
                    "blkio.throttle.io_service_bytes",
                ],
            ),
            ios: file(
                "blkio",
                &[
                    "blkio.throttle.io_serviced_recursive",
                    "blkio.throttle.io_serviced",
                ],
            ),
            usage: file("cpuacct", &["cpuacct.usage"]),
            cpu_stat: file("cpu", &["cpu.stat"]),
            prev: [None; 3],
            prev_usage: None,
        }
    }

    pub(super) fn collect(&mut self, span: f64, out: &mut Out) {
        let bytes = self
            .bytes
            .as_mut()
            .and_then(Reread::text)
            .and_then(parse::blkio_rw);
        let ios = self
            .ios
            .as_mut()
            .and_then(Reread::text)
            .and_then(parse::blkio_rw);
        let thr = self
            .cpu_stat
            .as_mut()
            .and_then(Reread::text)
            .and_then(parse::cg_cpu_stat);
        let usage = self
            .usage
            .as_mut()
            .and_then(Reread::text)
            .and_then(|t| t.trim().parse::<u64>().ok());
        let rate = |p: Option<(u64, u64)>, c: Option<(u64, u64)>, k: usize, scale: f64| {
            let (p, c) = (p?, c?);
            let v = if k == 0 { (p.0, c.0) } else { (p.1, c.1) };
            delta(v.0, v.1).map(|d| d * scale / span)
        };
        out.put(name::CG_RD_BYTES, None, rate(self.prev[0], bytes, 0, 1.0));
        out.put(name::CG_WR_BYTES, None, rate(self.prev[0], bytes, 1, 1.0));
        out.put(name::CG_RD_IOS, None, rate(self.prev[1], ios, 0, 1.0));
        out.put(name::CG_WR_IOS, None, rate(self.prev[1], ios, 1, 1.0));
        out.put(name::CG_THROTTLED, None, rate(self.prev[2], thr, 0, 1.0));
        out.put(
            name::CG_THROTTLED_TIME,
            None,
            rate(self.prev[2], thr, 1, 1e-6),
        );
        out.put(
            name::CG_CPU,
            None,
            self.prev_usage
                .zip(usage)
                .and_then(|(p, c)| delta(p, c))
                .map(|d| d / 1e6 / span),
        );
        self.prev = [bytes, ios, thr];
        self.prev_usage = usage;
    }
}
