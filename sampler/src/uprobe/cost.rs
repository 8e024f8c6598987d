//! What one probe hit costs on this machine, measured at start-up: a function of this process
//! is called a few thousand times without a probe, with an entry probe and with entry and
//! return probes, timed in the calling thread's CPU time (which includes the kernel's trap
//! handling and leaves out time spent waiting for a CPU on a busy machine). The best of a few
//! rounds is kept: interruptions only ever add time.

use std::hint::black_box;

use super::{Pmu, ProbeImage};
use crate::procs::parse_maps;
use crate::sys::{self, PerfFd};

/// Cost of probe hits, ns of CPU per call of the probed function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    /// An entry probe (uprobe).
    pub entry_ns: f64,
    /// A return probe on top of the entry probe (uretprobe).
    pub return_ns: f64,
    /// True when measured here; false for the fallback figures.
    pub measured: bool,
}

impl Cost {
    /// Figures measured on the development VM (`benches/uprobes/run`, 2 vCPUs, Linux 6.18:
    /// counting uprobe ≈ 1.7 µs, uretprobe ≈ 1.6 µs more), used when calibration fails.
    pub const FALLBACK: Cost = Cost {
        entry_ns: 1700.0,
        return_ns: 1600.0,
        measured: false,
    };
}

/// Calls per calibration round.
const CALLS: u64 = 4000;
/// Rounds; the least time per call is kept.
const ROUNDS: usize = 3;

#[inline(never)]
fn calibration_target(x: u64) -> u64 {
    black_box(x).wrapping_mul(3).wrapping_add(1)
}

fn time_calls(n: u64) -> u64 {
    let t0 = sys::thread_cpu_ns();
    for i in 0..n {
        black_box(calibration_target(black_box(i)));
    }
    sys::thread_cpu_ns() - t0
}

/// Measures the cost of probe hits here (a few tens of ms). Errors say why it could not.
pub fn calibrate(pmu: &Pmu) -> Result<Cost, String> {
    let f: fn(u64) -> u64 = calibration_target;
    let addr = f as usize as u64;
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|e| e.to_string())?;
    let m = parse_maps(&maps)
        .into_iter()
        .find(|m| (m.start..m.end).contains(&addr) && m.path.starts_with('/'))
        .ok_or("the calibration function is not in a file mapping")?;
    let path = std::ffi::CString::new(m.path.clone()).map_err(|e| e.to_string())?;
    let offset = addr - m.start + m.pgoff;
    let open = |ret: bool| {
        let mut a = pmu.counting_attr(ret);
        a.set_inherit(0);
        PerfFd::open_uprobe(&a, &path, offset, 0, -1).map_err(|e| e.to_string())
    };
    let entry = open(false)?;
    let ret = open(true)?;
    let per_call = |probes: &[&PerfFd]| -> Result<f64, String> {
        let mut best = f64::MAX;
        for _ in 0..ROUNDS {
            let base = time_calls(CALLS);
            let before: Vec<u64> = probes.iter().map(|p| p.read_count().unwrap_or(0)).collect();
            for p in probes {
                p.enable().map_err(|e| e.to_string())?;
            }
            let probed = time_calls(CALLS);
            for p in probes {
                p.disable().map_err(|e| e.to_string())?;
            }
            for (p, b) in probes.iter().zip(before) {
                let n = p.read_count().map_err(|e| e.to_string())? - b;
                if n != CALLS {
                    return Err(format!("the probe counted {n} of {CALLS} calls"));
                }
            }
            best = best.min(probed.saturating_sub(base) as f64 / CALLS as f64);
        }
        Ok(best)
    };
    let entry_ns = per_call(&[&entry])?;
    let both_ns = per_call(&[&entry, &ret])?;
    Ok(Cost {
        entry_ns,
        return_ns: (both_ns - entry_ns).max(0.0),
        measured: true,
    })
}

/// Calibrates, falling back to [`Cost::FALLBACK`] (with the reason) when it cannot.
pub fn calibrate_or_fallback(pmu: &Pmu) -> (Cost, Option<String>) {
    match calibrate(pmu) {
        Ok(c) => (c, None),
        Err(why) => (Cost::FALLBACK, Some(why)),
    }
}

/// Where the per-call figures are used: a probe costing `cost` per call at `rate` calls/s uses
/// this share of one CPU.
pub fn cpu_share(rate: f64, per_call_ns: f64) -> f64 {
    rate * per_call_ns / 1e9
}

/// A short description of an image for messages.
pub fn image_name(i: &ProbeImage) -> String {
    i.path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| i.path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Needs root (the uprobe PMU); in CI a missing privilege fails the test.
    #[test]
    fn calibration_counts_every_call_and_costs_something() {
        if sys::euid() != 0 {
            assert!(
                std::env::var("CI").map_or(true, |v| v != "true"),
                "CI must run this test as root"
            );
            eprintln!("SKIPPED: uprobes need root");
            return;
        }
        let pmu = Pmu::detect().expect("uprobe PMU");
        let c = calibrate(&pmu).expect("calibration");
        eprintln!("calibrated: {c:?}");
        assert!(c.measured);
        // A trap into the kernel and back: more than 50 ns, less than 1 ms, on any machine.
        assert!(c.entry_ns > 50.0 && c.entry_ns < 1e6, "{c:?}");
        assert!(c.return_ns < 1e6, "{c:?}");
    }

    #[test]
    fn shares() {
        assert!((cpu_share(10_000.0, 2000.0) - 0.02).abs() < 1e-12);
    }
}
