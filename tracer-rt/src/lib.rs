//! `libculprit_rt.so`: the `-finstrument-functions` runtime of culprit.
//!
//! Programs compiled with `gcc -finstrument-functions` call `__cyg_profile_func_enter` and
//! `__cyg_profile_func_exit` around every function. This library provides them — linked at
//! build time (`-lculprit_rt`) or injected with `LD_PRELOAD` (it interposes glibc's no-op
//! hooks) — and turns the calls into per-interval profiles (per function: calls, exclusive and
//! inclusive wall-clock ns) in a file of the node's data directory, in the format of the
//! `culprit-format` crate. The semantics are seed 000's (§"Function-call tracing"); see
//! [`block`] for the hot path and [`flusher`] for intervals and files.
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
//!
//! # Design constraints
//!
//! * **Never break the host program.** If set-up fails (data directory not writable, …) one
//!   `culprit:` line goes to stderr and the program runs untraced. Nothing is ever written to
//!   stdout; no signal is used. A program that calls no hook (not instrumented) is left alone
//!   entirely: no file, no thread.
//! * **Hooks are cheap and async-signal-safe**: no allocation, lock, system call or unwinding;
//!   thread-local state reached with one `%fs:` load; TSC timestamps (see [`clock`]).
//! * **Crash-safe output**: the file is a shared mapping; `kill -9` loses at most the
//!   interval in progress.
//! * **`unsafe` lives in [`sys`] only.**
//! * **Accounting is at exit**: a call counts in the interval in which it returns; calls still
//!   running when the process ends (e.g. `main` when the program calls `exit()`) are not
//!   counted.

#![deny(unsafe_code)]

pub mod block;
pub mod clock;
pub mod config;
pub mod decide;
pub mod elf;
pub mod flusher;
pub mod glob;
pub mod objects;
pub mod procinfo;
pub mod runtime;
#[allow(unsafe_code)]
pub mod sys;
