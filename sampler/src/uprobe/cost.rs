//! What one probe hit costs on this machine, measured at start-up on two functions of this
//! process: one whose first instruction is a `push` (the kernel *emulates* it at the
//! breakpoint) and one whose first instruction it must *single-step* out of line (a second
//! trap: on this project's VM ~9 µs against ~0.6 µs emulated, measured in
//! `benches/uprobes/run`). Each is called a few thousand times before any probe exists, with an
//! entry probe, and with entry and return probes, timed in the calling thread's CPU time (which
//! includes the kernel's trap handling and leaves out time spent waiting for a CPU). The best of
//! a few rounds is kept: interruptions only ever add time.
//!
//! The base must be timed before the probes are opened: an opened probe traps even while its
//! event is disabled (the kernel installs the breakpoint when the event is created).

use std::hint::black_box;

use super::pmu::Pmu;
use super::target::ProbeImage;
use crate::procs::parse_maps;
use crate::sys::{self, PerfFd};

/// Cost of probe hits, ns of CPU per call of the probed function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cost {
    /// An entry probe on an instruction the kernel single-steps (most).
    pub entry_ns: f64,
    /// An entry probe on an instruction the kernel emulates (`push`, as in a prologue that
    /// saves the frame pointer).
    pub entry_emulated_ns: f64,
    /// A return probe on top of the entry probe (uretprobe).
    pub return_ns: f64,
    /// True when measured here; false for the fallback figures.
    pub measured: bool,
}

impl Cost {
    /// Figures measured on the development VM (`benches/uprobes/run`, 2 vCPUs, Linux 6.18),
    /// used when calibration fails.
    pub const FALLBACK: Cost = Cost {
        entry_ns: 9000.0,
        entry_emulated_ns: 600.0,
        return_ns: 500.0,
        measured: false,
    };

    /// Cost of an entry probe on a function whose entry holds `first_bytes`.
    pub fn entry_for(&self, first_bytes: &[u8]) -> f64 {
        if emulated_push(first_bytes) {
            self.entry_emulated_ns
        } else {
            self.entry_ns
        }
    }
}

/// True when the instruction at `b` is a register `push` (x86-64: 50+r, or REX.B 41 50+r),
/// which the kernel emulates at a uprobe instead of single-stepping.
pub fn emulated_push(b: &[u8]) -> bool {
    cfg!(target_arch = "x86_64") && matches!(b, [0x50..=0x57, ..] | [0x41, 0x50..=0x57, ..])
}

/// Calls per calibration round.
const CALLS: u64 = 2000;
/// Rounds; the least time per call is kept.
const ROUNDS: usize = 3;

fn time_calls(emulated: bool, n: u64) -> u64 {
    let t0 = sys::thread_cpu_ns();
    for i in 0..n {
        black_box(sys::calibration_call(emulated, black_box(i)));
    }
    sys::thread_cpu_ns() - t0
}

fn best_per_call(emulated: bool) -> f64 {
    (0..ROUNDS)
        .map(|_| time_calls(emulated, CALLS) as f64 / CALLS as f64)
        .fold(f64::MAX, f64::min)
}

/// Measures the cost of probe hits here (tens of ms on a VM). Errors say why it could not.
pub fn calibrate(pmu: &Pmu) -> Result<Cost, String> {
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|e| e.to_string())?;
    let maps = parse_maps(&maps);
    let probe = |emulated: bool, ret: bool| -> Result<PerfFd, String> {
        let addr = sys::calibration_addr(emulated).ok_or("not on x86-64")?;
        let m = maps
            .iter()
            .find(|m| (m.start..m.end).contains(&addr) && m.path.starts_with('/'))
            .ok_or("the calibration function is not in a file mapping")?;
        let path = std::ffi::CString::new(m.path.clone()).map_err(|e| e.to_string())?;
        let mut a = pmu.counting_attr(ret);
        a.set_inherit(0);
        a.set_disabled(0);
        PerfFd::open_uprobe(&a, &path, addr - m.start + m.pgoff, 0, -1).map_err(|e| e.to_string())
    };
    let mut out = [0.0f64; 3];
    for (k, emulated) in [false, true].into_iter().enumerate() {
        let base = best_per_call(emulated);
        let entry = probe(emulated, false)?;
        let with_entry = best_per_call(emulated);
        let n = entry.read_count().map_err(|e| e.to_string())?;
        if n != CALLS * ROUNDS as u64 {
            return Err(format!(
                "the probe counted {n} of {} calls",
                CALLS * ROUNDS as u64
            ));
        }
        out[k] = (with_entry - base).max(0.0);
        if emulated {
            let ret = probe(emulated, true)?;
            let with_both = best_per_call(emulated);
            out[2] = (with_both - with_entry).max(0.0);
            drop(ret);
        }
        drop(entry);
    }
    Ok(Cost {
        entry_ns: out[0],
        entry_emulated_ns: out[1],
        return_ns: out[2],
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
        // A trap into the kernel and back: more than 50 ns, less than 1 ms, on any machine;
        // a single-stepped entry costs at least what an emulated one does.
        assert!(c.entry_emulated_ns > 50.0 && c.entry_ns < 1e6, "{c:?}");
        assert!(c.entry_ns + 100.0 > c.entry_emulated_ns, "{c:?}");
        assert!(c.return_ns < 1e6, "{c:?}");
    }

    #[test]
    fn pushes_are_emulated() {
        assert!(emulated_push(&[0x55, 0x48]));
        assert!(emulated_push(&[0x41, 0x57]));
        assert!(!emulated_push(&[0xf3, 0x0f, 0x1e, 0xfa]));
        assert!(!emulated_push(&[0x48, 0x8b]));
        assert!(!emulated_push(&[]));
    }

    #[test]
    fn shares() {
        assert!((cpu_share(10_000.0, 2000.0) - 0.02).abs() < 1e-12);
    }
}
