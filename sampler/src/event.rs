//! Which event to sample and at what rate, and the `perf_event_attr` for it.
//!
//! Seed 000 §"Sample profiling": OProfile's default is CPU_CLK_UNHALTED every 100,000 cycles.
//! Virtual machines often have no hardware PMU (`cycles` fails with ENOENT), so the default
//! falls back to the `cpu-clock` software event at 1 kHz per CPU (a period of 1,000,000 ns),
//! which keeps the overhead near 1 % (100,000 cycles would be about 25 kHz on these machines).
//! The software clock event also fires while a CPU idles; `exclude_idle` drops those samples so
//! that, like unhalted cycles, only work is sampled.

use std::fmt;

use perf_event_open_sys::bindings::{self as b, perf_event_attr};

/// Sampling period of the default hardware event (cycles per sample), seed 000.
pub const DEFAULT_CYCLES_PERIOD: u64 = 100_000;
/// Sampling period of the software fallback: 1,000,000 ns of CPU time = 1 kHz per CPU.
pub const DEFAULT_CPU_CLOCK_PERIOD_NS: u64 = 1_000_000;

/// An event that can be sampled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSpec {
    /// Name as users write it (`cycles`, `cpu-clock`, …).
    pub name: &'static str,
    /// `perf_event_attr.type`.
    pub type_: u32,
    /// `perf_event_attr.config`.
    pub config: u64,
}

impl EventSpec {
    /// True for hardware (PMU) events.
    pub fn is_hardware(&self) -> bool {
        self.type_ == b::PERF_TYPE_HARDWARE
    }

    /// True for events counted in ns of CPU time (`cpu-clock`, `task-clock`).
    pub fn is_clock(&self) -> bool {
        self.type_ == b::PERF_TYPE_SOFTWARE
            && matches!(
                self.config as u32,
                b::PERF_COUNT_SW_CPU_CLOCK | b::PERF_COUNT_SW_TASK_CLOCK
            )
    }

    /// The default rate for this event.
    pub fn default_rate(&self) -> Rate {
        if self.is_clock() {
            Rate::Period(DEFAULT_CPU_CLOCK_PERIOD_NS)
        } else if self.is_hardware() {
            Rate::Period(DEFAULT_CYCLES_PERIOD)
        } else {
            Rate::Freq(1000)
        }
    }
}

const EVENTS: &[(&str, u32, u32)] = &[
    ("cycles", b::PERF_TYPE_HARDWARE, b::PERF_COUNT_HW_CPU_CYCLES),
    (
        "cpu-cycles",
        b::PERF_TYPE_HARDWARE,
        b::PERF_COUNT_HW_CPU_CYCLES,
    ),
    (
        "instructions",
        b::PERF_TYPE_HARDWARE,
        b::PERF_COUNT_HW_INSTRUCTIONS,
    ),
    (
        "ref-cycles",
        b::PERF_TYPE_HARDWARE,
        b::PERF_COUNT_HW_REF_CPU_CYCLES,
    ),
    (
        "cache-misses",
        b::PERF_TYPE_HARDWARE,
        b::PERF_COUNT_HW_CACHE_MISSES,
    ),
    (
        "branch-misses",
        b::PERF_TYPE_HARDWARE,
        b::PERF_COUNT_HW_BRANCH_MISSES,
    ),
    (
        "cpu-clock",
        b::PERF_TYPE_SOFTWARE,
        b::PERF_COUNT_SW_CPU_CLOCK,
    ),
    (
        "task-clock",
        b::PERF_TYPE_SOFTWARE,
        b::PERF_COUNT_SW_TASK_CLOCK,
    ),
    (
        "page-faults",
        b::PERF_TYPE_SOFTWARE,
        b::PERF_COUNT_SW_PAGE_FAULTS,
    ),
    (
        "context-switches",
        b::PERF_TYPE_SOFTWARE,
        b::PERF_COUNT_SW_CONTEXT_SWITCHES,
    ),
];

/// Looks up an event by name; `None` for names the sampler does not know.
pub fn event_by_name(name: &str) -> Option<EventSpec> {
    EVENTS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|&(name, type_, config)| EventSpec {
            name,
            type_,
            config: u64::from(config),
        })
}

/// Names accepted by [`event_by_name`].
pub fn event_names() -> impl Iterator<Item = &'static str> {
    EVENTS.iter().map(|(n, _, _)| *n)
}

/// The default event (hardware cycles) and its fallback (`cpu-clock`).
pub fn default_event() -> EventSpec {
    event_by_name("cycles").expect("cycles is known")
}

/// The fallback when hardware events do not exist.
pub fn fallback_event() -> EventSpec {
    event_by_name("cpu-clock").expect("cpu-clock is known")
}

/// How often to sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rate {
    /// One sample every this many events (ns for clock events).
    Period(u64),
    /// About this many samples per second per CPU; the kernel adjusts the period.
    Freq(u64),
}

impl Rate {
    /// The value recorded in Samples records (`period`, or Hz with the FREQ flag).
    pub fn value(&self) -> u64 {
        match *self {
            Rate::Period(p) | Rate::Freq(p) => p,
        }
    }

    /// True in frequency mode.
    pub fn is_freq(&self) -> bool {
        matches!(self, Rate::Freq(_))
    }
}

/// The event in use and its rate, as the sampler reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sampling {
    /// The event.
    pub event: EventSpec,
    /// The rate.
    pub rate: Rate,
    /// Why the default event was replaced, when it was.
    pub fallback_reason: Option<String>,
}

impl Sampling {
    /// Samples per second per busy CPU, when known from the rate (clock events in period
    /// mode, or frequency mode).
    pub fn hz(&self) -> Option<u64> {
        match self.rate {
            Rate::Freq(f) => Some(f),
            Rate::Period(p) if self.event.is_clock() && p > 0 => Some(1_000_000_000 / p),
            Rate::Period(_) => None,
        }
    }
}

impl fmt::Display for Sampling {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rate {
            Rate::Freq(hz) => write!(f, "{} at {hz} Hz per CPU", self.event.name)?,
            Rate::Period(p) if self.event.is_clock() => write!(
                f,
                "{} every {p} ns ({} Hz per busy CPU)",
                self.event.name,
                self.hz().unwrap_or(0)
            )?,
            Rate::Period(p) => write!(f, "{} every {p} events", self.event.name)?,
        }
        if let Some(why) = &self.fallback_reason {
            write!(f, "; {why}")?;
        }
        Ok(())
    }
}

/// Every sample and every side-band record carries these, so that records of all events of a
/// CPU can share one ring and be merged in time order across CPUs.
pub const SAMPLE_ID_TYPE: u64 =
    (b::PERF_SAMPLE_IDENTIFIER | b::PERF_SAMPLE_TID | b::PERF_SAMPLE_TIME) as u64;

/// The attr of the sampling event (one per CPU, alone in its ring, so that the samples it
/// loses are told apart from other records lost). `wakeup_bytes` wakes `poll` when that much
/// is waiting in the ring.
pub fn sampling_attr(s: &Sampling, wakeup_bytes: u32) -> perf_event_attr {
    let mut a = base_attr(s.event.type_, s.event.config, wakeup_bytes);
    match s.rate {
        Rate::Period(p) => a.__bindgen_anon_1.sample_period = p,
        Rate::Freq(f) => {
            a.__bindgen_anon_1.sample_freq = f;
            a.set_freq(1);
        }
    }
    a.sample_type = SAMPLE_ID_TYPE | b::PERF_SAMPLE_IP as u64;
    if s.event.type_ == b::PERF_TYPE_SOFTWARE {
        a.set_exclude_idle(1);
    }
    a
}

/// The attr of the process-tracking event (one per CPU, with a ring of its own): a software
/// `dummy` event that counts nothing and asks for the COMM, MMAP2 and FORK/EXIT records
/// process tracking needs, and with `namespaces` the NAMESPACES records (a task's network
/// namespace, for `--node-netns`). perf does the same (`--sideband` / its dummy event).
pub fn tracking_attr(namespaces: bool, wakeup_bytes: u32) -> perf_event_attr {
    let mut a = base_attr(
        b::PERF_TYPE_SOFTWARE,
        u64::from(b::PERF_COUNT_SW_DUMMY),
        wakeup_bytes,
    );
    a.sample_type = SAMPLE_ID_TYPE;
    // The kernel only emits mapping records while some event has `mmap` set (it counts those
    // alone); with `mmap2` set too they come in the MMAP2 format, as perf does it.
    a.set_mmap(1);
    a.set_mmap2(1);
    a.set_comm(1);
    a.set_comm_exec(1);
    a.set_task(1);
    if namespaces {
        a.set_namespaces(1);
    }
    a
}

/// How call chains are sampled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CallGraph {
    /// Only the sampled address.
    #[default]
    None,
    /// Kernel and user call chains walked by the kernel through frame pointers
    /// (`PERF_SAMPLE_CALLCHAIN`): complete for code built with `-fno-omit-frame-pointer` (and
    /// the kernel), cut short or wrong above a function that does not keep one.
    Fp,
}

impl std::str::FromStr for CallGraph {
    type Err = String;

    /// `fp` or `none`. DWARF unwinding (copying user stacks into the ring and unwinding them
    /// with CFI, as `perf record --call-graph dwarf` does) is not offered: it multiplies the
    /// ring traffic by the stack copy (8 KiB per sample by default).
    fn from_str(s: &str) -> Result<CallGraph, String> {
        match s {
            "fp" => Ok(CallGraph::Fp),
            "none" => Ok(CallGraph::None),
            "dwarf" | "lbr" => Err(format!(
                "{s} call graphs are not supported; use fp (build with -fno-omit-frame-pointer)"
            )),
            _ => Err(format!("unknown call graph mode {s:?}; use fp")),
        }
    }
}

/// Deepest call chain asked for (the kernel's default `kernel.perf_event_max_stack`).
pub const MAX_STACK: u16 = 127;

/// Asks `a` for call chains as `g` says.
pub fn set_call_graph(a: &mut perf_event_attr, g: CallGraph) {
    if g == CallGraph::Fp {
        a.sample_type |= b::PERF_SAMPLE_CALLCHAIN as u64;
        a.sample_max_stack = MAX_STACK;
    }
}

/// The attr of a tracepoint event sampled on every occurrence; `raw` adds the tracepoint's
/// fields to each sample.
pub fn tracepoint_attr(id: u64, raw: bool, wakeup_bytes: u32) -> perf_event_attr {
    let mut a = base_attr(b::PERF_TYPE_TRACEPOINT, id, wakeup_bytes);
    a.__bindgen_anon_1.sample_period = 1;
    a.sample_type = SAMPLE_ID_TYPE;
    if raw {
        a.sample_type |= b::PERF_SAMPLE_RAW as u64;
    }
    a
}

/// A user-space-only counting event for the calling process: what even an unprivileged process
/// may open, so it tells whether an event exists here at all.
pub fn self_counting_attr(e: &EventSpec) -> perf_event_attr {
    let mut a = perf_event_attr {
        type_: e.type_,
        size: size_of::<perf_event_attr>() as u32,
        config: e.config,
        ..perf_event_attr::default()
    };
    a.set_disabled(1);
    a.set_exclude_kernel(1);
    a.set_exclude_hv(1);
    a
}

fn base_attr(type_: u32, config: u64, wakeup_bytes: u32) -> perf_event_attr {
    let mut a = perf_event_attr {
        type_,
        size: size_of::<perf_event_attr>() as u32,
        config,
        ..perf_event_attr::default()
    };
    a.set_disabled(1);
    a.set_sample_id_all(1);
    a.set_exclude_hv(1);
    a.set_use_clockid(1);
    a.clockid = libc::CLOCK_MONOTONIC;
    a.set_watermark(1);
    a.__bindgen_anon_2.wakeup_watermark = wakeup_bytes.max(1);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_defaults() {
        let c = default_event();
        assert!(c.is_hardware());
        assert_eq!(c.default_rate(), Rate::Period(100_000));
        let f = fallback_event();
        assert!(f.is_clock());
        assert_eq!(f.default_rate(), Rate::Period(1_000_000));
        assert!(event_by_name("nope").is_none());
        let s = Sampling {
            event: f,
            rate: Rate::Period(1_000_000),
            fallback_reason: None,
        };
        assert_eq!(s.hz(), Some(1000));
        assert_eq!(
            s.to_string(),
            "cpu-clock every 1000000 ns (1000 Hz per busy CPU)"
        );
    }

    #[test]
    fn attrs() {
        let s = Sampling {
            event: default_event(),
            rate: Rate::Freq(99),
            fallback_reason: None,
        };
        let a = sampling_attr(&s, 4096);
        assert_eq!(a.freq(), 1);
        assert_eq!(a.mmap2(), 0, "the samples' ring holds samples only");
        assert_eq!(a.use_clockid(), 1);
        assert_eq!(a.exclude_idle(), 0);
        let k = tracking_attr(true, 4096);
        assert_eq!(
            (k.mmap2(), k.comm_exec(), k.task(), k.namespaces()),
            (1, 1, 1, 1)
        );
        assert_eq!(k.sample_type, SAMPLE_ID_TYPE);
        let t = tracepoint_attr(5, true, 4096);
        assert_eq!(t.mmap2(), 0);
        assert_eq!(
            t.sample_type & b::PERF_SAMPLE_RAW as u64,
            b::PERF_SAMPLE_RAW as u64
        );
    }
}
