//! `libculprit_rt.so`: the `-finstrument-functions` runtime of culprit.
//!
//! Programs compiled with `gcc -finstrument-functions` call `__cyg_profile_func_enter` and
//! `__cyg_profile_func_exit` around every function. This library provides them — linked at
//! build time (`-lculprit_rt`) or injected with `LD_PRELOAD` (it interposes glibc's no-op
//! hooks) — and turns the calls into per-interval profiles (per function: calls, exclusive and
//! inclusive wall-clock ns, calls that did not return) in a file of the node's data
//! directory, in the format of the `culprit-format` crate; on request also caller → callee
//! edges and call-duration histograms. The semantics are seed 000's (§"Function-call
//! tracing"); see [`block`] for the per-thread data and the two paths of the hooks,
//! [`ffi::hooks`] for the fast path, and [`flusher`] for intervals and files.
//!
//! # Environment
//!
//! | variable | meaning | default |
//! | --- | --- | --- |
//! | `CULPRIT_DIR` | data root (made absolute at load: daemons `chdir("/")`) | `./culprit-data` |
//! | `CULPRIT_NODE` | node name (directory under the root) | host name |
//! | `CULPRIT_INTERVAL_MS` | interval length | 1000 |
//! | `CULPRIT_INCLUDE` | comma-separated globs: trace only these functions | all |
//! | `CULPRIT_EXCLUDE` | comma-separated globs: never trace these | none |
//! | `CULPRIT_CLOCK` | `monotonic` forces `clock_gettime` instead of the TSC | TSC if invariant |
//! | `CULPRIT_GRAPH` | `1`: record caller → callee edges | `0` |
//! | `CULPRIT_HIST` | `1`: record call-duration histograms (log2 buckets of ns) | `0` |
//! | `CULPRIT_REQUEST_SAMPLE` | record one request in N ([`requests`]) | `10` |
//!
//! # Design constraints
//!
//! * **Never break the host program.** If set-up fails or is refused (data directory not
//!   writable, or not safe: see the `culprit-datadir` crate) one `culprit:` line goes to stderr
//!   and the program runs untraced; after start-up nothing is printed (trouble goes into the
//!   data). Nothing is ever written to stdout; no signal is used; none of the program's
//!   descriptor numbers is ever taken or held (the flusher has a descriptor table of its own,
//!   [`sys::own_fd_table`]).
//!   A program that calls no hook (not instrumented) is left alone entirely: no file, no
//!   thread. Under secure execution (set-user-id programs) the runtime does nothing, silently.
//! * **Hooks are cheap and async-signal-safe**: no allocation, lock, system call or unwinding;
//!   ~20 instructions of assembly each in the common case, thread-local state reached with one
//!   `%fs:` load, TSC timestamps (see [`clock`]); the modes cost the default path nothing. They
//!   write only memory the runtime owns; the flusher copies it into the file with `pwrite`
//!   ([`output`]), so truncating or removing the file cannot fault the program.
//! * **Exact when starved**: the hooks place every call in its interval themselves (the exit
//!   hook compares its timestamp with the thread's interval boundary; the first exit past it
//!   moves the thread's counts into the ring of intervals, [`intervals`]), so a flusher that
//!   runs late writes each interval late and exactly, never missed or merged, up to
//!   [`intervals::RING_LEN`] intervals behind.
//! * **Crash-safe output**: every 100 ms the interval in progress is checkpointed into the
//!   file; a crash, `abort` or `kill -9` loses at most the calls of the last 100 ms. `exit`
//!   and `_exit` (interposed) write everything.
//! * **Nothing lost silently**: calls left by `longjmp`, exceptions or cancellation are counted
//!   (unwound when the runtime notices); calls that cannot be accounted are counted too
//!   (`lost_frames`, `overflows`, `dropped` in every interval).
//! * **`unsafe` lives in two layers only** (and in the `unsafe impl` markers of the zeroable
//!   types in [`pool`] and [`block`]): [`sys`] at the bottom, which knows no domain type, and
//!   [`ffi`] at the top, the exported C functions — among them [`ffi::hooks`], the fast path in
//!   assembly, which reads and writes the block through the offsets [`block::hot`] gives. No
//!   module names one of a layer above its own (`scripts/check-cycles --layers`).
//! * **Accounting is at exit**: a call counts in the interval in which it returns; calls still
//!   running when the process ends (e.g. `main` when the program calls `exit()`) are not
//!   counted.

#![deny(unsafe_code)]

pub mod block;
pub mod bodies;
pub mod budget;
pub mod calibrate;
pub mod callsite;
pub mod clock;
pub mod config;
pub mod control;
pub mod decide;
pub mod demote;
pub mod elf;
pub mod entry;
pub mod flusher;
pub mod glob;
pub mod intervals;
pub mod io;
pub mod objects;
pub mod output;
pub mod pool;
pub mod procinfo;
pub mod requests;
pub mod runtime;
#[allow(unsafe_code)]
pub mod sys;

// The layer above the runtime: the exported C functions.
#[allow(unsafe_code)]
pub mod ffi;
