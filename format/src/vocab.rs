//! The record vocabulary: names the sampler writes into its Samples and Events records and the
//! analysis reads back — image and function names with a meaning of their own, and the Events
//! entries that are not kernel tracepoints. Writers and readers take them from here, so that a
//! reader never needs the writer's crate to know what a name means.

/// Image name of kernel samples outside modules (as perf and OProfile call it).
pub const KERNEL_IMAGE: &str = "[kernel.kallsyms]";
/// Function (and image) name of samples that cannot be placed at all.
pub const UNKNOWN: &str = "[unknown]";
/// Function name of every sample in the tracer's runtime (`libculprit_rt.so`): its hooks and
/// flusher are one cost of tracing, never a root cause to rank among the program's functions.
pub const CULPRIT_RUNTIME: &str = "culprit runtime";

/// True for the image names of the tracer's runtime (`libculprit_rt.so`, `libculprit_rt.so.0`).
pub fn is_culprit_runtime(image: &str) -> bool {
    image
        .strip_prefix("libculprit_rt.so")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
}
/// The PLT stubs through which code built with `-finstrument-functions` calls the hooks, as the
/// symbolizer names them (`symbol@plt`): part of what tracing costs, like the runtime itself.
pub const HOOK_PLT_STUBS: [&str; 2] = [
    "__cyg_profile_func_enter@plt",
    "__cyg_profile_func_exit@plt",
];

/// True for a sample that is the cost of tracing, never the program's own work: in the tracer's
/// runtime ([`CULPRIT_RUNTIME`] in `libculprit_rt.so`), or in the PLT stubs of the hooks in
/// any image ([`HOOK_PLT_STUBS`]).
pub fn is_tracing_cost(image: &str, function: &str) -> bool {
    (function == CULPRIT_RUNTIME && is_culprit_runtime(image)) || HOOK_PLT_STUBS.contains(&function)
}

/// Events entry that counted tracepoint occurrences the kernel dropped, in files of format
/// versions up to 6; since version 7 they are in the interval's Lost record, with samples and
/// process-tracking records apart (a loss is not an event of the node).
pub const LOST_EVENTS: &str = "culprit:lost_events";
/// Events entry: stops of the node's processes that began in the interval (`sched_switch`
/// with `prev_state` T or t: SIGSTOP, or a tracer): a stop of a whole process is counted once,
/// at its first thread switched out stopped, however many threads it has (files of samplers
/// before this counted every thread). Written with `sched:sched_switch`.
pub const STOPPED_EVENT: &str = "culprit:stopped";
/// Events entry: ns the node's processes spent stopped in the interval (of each process, from
/// its first thread switched out stopped to the first of them that ran again; a node's is its
/// most stopped process's). Not a count: the `events` metric leaves both stop entries out.
pub const STOPPED_NS_EVENT: &str = "culprit:stopped_ns";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracing_cost_is_the_runtime_and_the_hook_stubs_only() {
        assert!(is_tracing_cost("libculprit_rt.so", CULPRIT_RUNTIME));
        assert!(is_tracing_cost("libculprit_rt.so.0", CULPRIT_RUNTIME));
        assert!(is_tracing_cost("server", "__cyg_profile_func_exit@plt"));
        assert!(!is_tracing_cost("libculprit_rt.so.old", "main"));
        assert!(!is_tracing_cost("libculprit_rt.sox", CULPRIT_RUNTIME));
        assert!(!is_tracing_cost("server", "__cyg_profile_func_exit"));
    }
}
