//! culprit's sampler: system-wide perf_event IP sampling, process and mapping tracking, kernel
//! event counts, and the symbolizer shared with `culprit report` (work in progress).

pub mod symbolize;
