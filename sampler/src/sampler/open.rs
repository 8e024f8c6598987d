//! Opening a sampler: the sampling event and rate chosen, one ring per CPU and kind, the
//! tracepoints, the OS-metrics collector.

use std::io;
use std::time::Duration;

use crate::engine::{Stream, Streams, TpSpec};
use crate::event::{self, sampling_attr, tracepoint_attr, Rate, Sampling};
use crate::nodes::{Nodes, PidFiles, Scope};
use crate::os::{self, Collector};
use crate::priority;
use crate::record::Layout;
use crate::sys::{self, PerfFd, Ring};
use crate::tracefs::{self, Decoder, Tracepoint};

use super::config::{
    event_ring_pages, io_err, is_missing_event, is_permission, online_cpus, permission_error,
    ring_pages_for, tracking_ring_pages, Config, Error,
};
use super::Sampler;

impl Sampler {
    /// Validates `config` and opens the events: one sampling event per online CPU, each with
    /// its ring, and the tracepoints (their records go to the same rings).
    pub fn open(config: Config) -> Result<Sampler, Error> {
        if config.interval < Duration::from_millis(10) {
            return Err(Error::Config("the interval must be at least 10 ms".into()));
        }
        if config.ring_pages != 0
            && (!config.ring_pages.is_power_of_two() || config.ring_pages > 1 << 16)
        {
            return Err(Error::Config(format!(
                "ring pages must be a power of two up to 65536 (got {})",
                config.ring_pages
            )));
        }
        if let Scope::Pid(pid) = config.scope {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return Err(Error::Config(format!("--pid {pid}: no such process")));
            }
        }
        let mut nodes = Nodes::new(&config.node, &config.node_rules, config.scope.clone())
            .map_err(Error::Config)?;
        // Pid files there already name their trees from the start; the others are read when
        // they appear.
        let mut pid_files = PidFiles::new(&nodes);
        for (pid, node) in pid_files.poll() {
            nodes.add_pid_rule(pid, node);
        }
        let mut warnings = Vec::new();
        for f in pid_files.waiting() {
            warnings.push(format!(
                "{}: no running process's id in it yet; its process tree joins its node when \
                 it has one (checked every 500 ms)",
                f.display()
            ));
        }
        let cpus = online_cpus();
        let wanted: Vec<String> = config.tracepoints.clone().unwrap_or_else(|| {
            tracefs::DEFAULT_TRACEPOINTS
                .iter()
                .map(|s| s.to_string())
                .collect()
        });

        let sampling = choose_event(&config, cpus[0], 1)?;
        let mut config = config;
        if config.ring_pages == 0 {
            config.ring_pages = ring_pages_for(&sampling, config.call_graph);
        }
        // Three rings per CPU, so that what the kernel drops is known by kind (a LOST record
        // says how many records one ring dropped, not which): samples, kernel events, and
        // process tracking. Each wakes the reader when a quarter of it is filled (besides its
        // 50 ms tick).
        let wakeup = |pages: usize| (pages * sys::page_size() / 4) as u32;
        let mut rings = Vec::with_capacity(cpus.len() * 3);
        let mut streams = Streams::new();
        let mut attr = sampling_attr(&sampling, wakeup(config.ring_pages));
        event::set_call_graph(&mut attr, config.call_graph);
        let sample_layout = Layout {
            sample_type: attr.sample_type,
            sample_id_all: true,
        };
        let tracking_pages = tracking_ring_pages();
        let tracking = event::tracking_attr(nodes.needs_netns(), wakeup(tracking_pages));
        let tracking_layout = Layout {
            sample_type: tracking.sample_type,
            sample_id_all: true,
        };
        let map = |fd: PerfFd, pages: usize, cpu: u32, what: &str| {
            Ring::map(fd, pages).map_err(|e| Error::Io {
                what: format!(
                    "map a {} KiB {what} ring buffer for CPU {cpu} (lower --ring-pages, or raise \
                     kernel.perf_event_mlock_kb)",
                    pages * sys::page_size() / 1024
                ),
                source: e,
            })
        };
        let open_error = |e: io::Error, what: &str, cpu: u32| {
            if is_permission(&e) {
                permission_error(e)
            } else {
                Error::Event {
                    event: what.into(),
                    reason: format!("perf_event_open on CPU {cpu}: {e}"),
                }
            }
        };
        for &cpu in &cpus {
            let fd = PerfFd::open(&attr, -1, cpu as i32, 0)
                .map_err(|e| open_error(e, sampling.event.name, cpu))?;
            let id = fd.id().map_err(io_err("perf event id"))?;
            streams.add(id, sample_layout, Stream::Samples);
            rings.push(map(fd, config.ring_pages, cpu, "samples")?);
            let fd = PerfFd::open(&tracking, -1, cpu as i32, 0)
                .map_err(|e| open_error(e, "dummy (process tracking)", cpu))?;
            let id = fd.id().map_err(io_err("perf event id"))?;
            streams.add(id, tracking_layout, Stream::Tracking);
            rings.push(map(fd, tracking_pages, cpu, "process-tracking")?);
        }

        // Tracepoints: on each CPU the first one's ring takes the others' records too.
        let mut tps = Vec::new();
        let mut tp_fds = Vec::new();
        if !wanted.is_empty() {
            let event_pages = event_ring_pages(&wanted);
            match tracefs::find_or_mount(config.mount_tracefs && sys::euid() == 0) {
                Err(why) => warnings.push(format!("kernel events are not counted: {why}")),
                Ok(root) => {
                    let mut per_cpu: Vec<Option<Ring>> = cpus.iter().map(|_| None).collect();
                    for name in &wanted {
                        match open_tracepoint(
                            &root,
                            name,
                            &cpus,
                            wakeup(event_pages),
                            tps.len() as u16,
                            &mut streams,
                        ) {
                            Ok((spec, fds)) => {
                                tps.push(spec);
                                for ((fd, slot), &cpu) in
                                    fds.into_iter().zip(&mut per_cpu).zip(&cpus)
                                {
                                    match slot {
                                        Some(ring) => {
                                            fd.set_output(ring.fd()).map_err(io_err(
                                                "redirect a tracepoint to its CPU's ring",
                                            ))?;
                                            tp_fds.push(fd);
                                        }
                                        None => {
                                            *slot =
                                                Some(map(fd, event_pages, cpu, "kernel-events")?)
                                        }
                                    }
                                }
                            }
                            Err(why) => warnings.push(format!("not counting {name}: {why}")),
                        }
                    }
                    rings.extend(per_cpu.into_iter().flatten());
                }
            }
        }
        let mut delayacct = None;
        let os = match &config.os_metrics {
            None => None,
            Some(oc) => {
                if oc.interval < Duration::from_millis(100) {
                    return Err(Error::Config(
                        "the OS metrics interval must be at least 100 ms".into(),
                    ));
                }
                if oc.delayacct {
                    match os::delayacct::Guard::enable() {
                        Ok(g) => {
                            warnings.extend(g.warning().map(String::from));
                            delayacct = Some(g);
                        }
                        Err(w) => warnings.push(w),
                    }
                }
                let mut c = Collector::new(os::node_views(&nodes, &config.node_rules));
                if let Some(g) = &delayacct {
                    c.set_delayacct_since(g.since_boot_ns());
                }
                warnings.extend(c.warnings().iter().map(|w| format!("OS metrics: {w}")));
                Some(c)
            }
        };
        let scheduling = priority::probe(priority::RING_READER);
        match &scheduling {
            priority::Raised::Deadline(_) | priority::Raised::Fifo => {}
            other => warnings.push(format!(
                "the collection threads run at {other}: a loaded host can delay them (samples \
                 and OS-metrics seconds may be lost); run as root for real-time scheduling"
            )),
        }
        Ok(Sampler {
            pid_files,
            scheduling,
            config,
            sampling,
            nodes,
            cpus,
            rings,
            tp_fds,
            streams,
            tps,
            warnings,
            os,
            delayacct,
        })
    }
}

/// Picks the event and rate: the configured one, or cycles falling back to cpu-clock.
fn choose_event(config: &Config, cpu: u32, wakeup: u32) -> Result<Sampling, Error> {
    let explicit = match &config.event {
        Some(name) => Some(event::event_by_name(name).ok_or_else(|| {
            Error::Config(format!(
                "unknown event {name:?}; known events: {}",
                event::event_names().collect::<Vec<_>>().join(", ")
            ))
        })?),
        None => None,
    };
    let event = explicit.clone().unwrap_or_else(event::default_event);
    let rate = config.rate.unwrap_or_else(|| event.default_rate());
    if let Rate::Period(0) | Rate::Freq(0) = rate {
        return Err(Error::Config(
            "the sampling period or frequency must be positive".into(),
        ));
    }
    let s = Sampling {
        event: event.clone(),
        rate,
        fallback_reason: None,
    };
    match PerfFd::open(&sampling_attr(&s, wakeup), -1, cpu as i32, 0) {
        Ok(_) => Ok(s),
        Err(e) if is_permission(&e) => Err(permission_error(e)),
        Err(e) if is_missing_event(&e) && explicit.is_none() => {
            let fallback = event::fallback_event();
            let rate = match config.rate {
                None => fallback.default_rate(),
                Some(Rate::Freq(f)) => Rate::Freq(f),
                Some(Rate::Period(p)) => {
                    return Err(Error::Event {
                        event: event.name.into(),
                        reason: format!(
                            "hardware cycles do not exist here ({e}); --period {p} counts cycles, \
                             so it does not carry over to the cpu-clock fallback: pass \
                             `--event cpu-clock --period NS` (1000000 ns = 1 kHz) or --freq HZ"
                        ),
                    })
                }
            };
            let fb = Sampling {
                event: fallback,
                rate,
                fallback_reason: Some(format!("hardware cycles are not available here ({e})")),
            };
            PerfFd::open(&sampling_attr(&fb, wakeup), -1, cpu as i32, 0).map_err(|e| {
                if is_permission(&e) {
                    permission_error(e)
                } else {
                    Error::Event {
                        event: fb.event.name.into(),
                        reason: e.to_string(),
                    }
                }
            })?;
            Ok(fb)
        }
        Err(e) => Err(Error::Event {
            event: event.name.into(),
            reason: if is_missing_event(&e) {
                format!("{e}; this machine has no such event (try --event cpu-clock)")
            } else {
                e.to_string()
            },
        }),
    }
}

/// Opens tracepoint `name` on every CPU (one event per CPU, in `cpus` order).
fn open_tracepoint(
    root: &std::path::Path,
    name: &str,
    cpus: &[u32],
    wakeup: u32,
    index: u16,
    streams: &mut Streams,
) -> Result<(TpSpec, Vec<PerfFd>), String> {
    let tp = Tracepoint::load(root, name)?;
    let decoder = Decoder::for_tracepoint(&tp);
    let attr = tracepoint_attr(tp.id, decoder.needs_raw(), wakeup);
    let layout = Layout {
        sample_type: attr.sample_type,
        sample_id_all: true,
    };
    let mut fds = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        let fd = PerfFd::open(&attr, -1, cpu as i32, 0).map_err(|e| {
            if is_permission(&e) {
                format!("{e} (tracepoints need root or CAP_PERFMON)")
            } else {
                e.to_string()
            }
        })?;
        let id = fd.id().map_err(|e| e.to_string())?;
        streams.add(id, layout, Stream::Tracepoint(index));
        fds.push(fd);
    }
    Ok((
        TpSpec {
            name: tp.name,
            decoder,
        },
        fds,
    ))
}
