//! What the process-wide runtime (`runtime`) and the flusher thread (`flusher`) share: the
//! runtime's state, the request channel and the names of the current file and node. Both
//! import this module; the flusher never imports the runtime (the runtime starts the flusher).

use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};

use crate::sys::{self, Publish};

/// Lifecycle of the runtime in this process ([`STATE`]).
pub mod state {
    /// Not started yet (hooks do nothing).
    pub const UNINIT: u32 = 0;
    /// Tracing.
    pub const ACTIVE: u32 = 1;
    /// Not tracing: set-up failed or was refused, or the program calls no hook.
    pub const OFF: u32 = 2;
    /// The process is exiting; the last records are written.
    pub const ENDED: u32 = 3;
}

/// The runtime's [`state`].
pub static STATE: AtomicU32 = AtomicU32::new(state::UNINIT);

/// Is the runtime tracing this process?
pub fn is_active() -> bool {
    STATE.load(Acquire) == state::ACTIVE
}

/// Request bits (see [`PENDING`]).
pub mod req {
    /// Write what the current interval has so far.
    pub const FLUSH: u32 = 1;
    /// Move to the node set by `culprit_set_node`.
    pub const NODE: u32 = 2;
    /// The process exits: write the last interval and the end marker.
    pub const EXIT: u32 = 4;
}

/// Futex word the flusher sleeps on; bumped by every request.
pub static REQ: AtomicU32 = AtomicU32::new(0);
/// Bits of [`req`] not yet handled.
pub static PENDING: AtomicU32 = AtomicU32::new(0);
/// Value of [`REQ`] up to which requests are handled; futex word requesters sleep on.
pub static DONE: AtomicU32 = AtomicU32::new(0);
/// Node requested by `culprit_set_node`.
pub static NODE_REQUEST: Publish<String> = Publish::new();
/// Name of the file this process writes now (for a forked child's `forked_from`).
pub static CURRENT_FILE: Publish<String> = Publish::new();
/// Node this process writes to now (a forked child starts there).
pub static CURRENT_NODE: Publish<String> = Publish::new();

/// Bumped by the flusher at every step of its work: the exit handler waits for it as long as
/// it moves (`runtime::before_exit`).
pub static PROGRESS: AtomicU64 = AtomicU64::new(0);
/// Kernel thread id of the flusher (0 before it runs).
pub static FLUSHER_TID: AtomicU32 = AtomicU32::new(0);

/// Set when the flusher thread has ended: after the exit's records, or after a panic in it (a
/// bug; see `Flusher::run`). From then on nothing writes this process's records: requesters —
/// the exit handler among them — stop waiting for it at once, instead of waiting out
/// `EXIT_STALL_MAX_NS` for progress that will never come (a thread that is gone and a busy one
/// look alike in /proc).
pub static FLUSHER_GONE: AtomicBool = AtomicBool::new(false);

/// Makes a panic on the flusher thread print nothing (the runtime's panics only: this library
/// has a panic hook of its own): its message would go to descriptor 2 — /dev/null in the
/// flusher's own descriptor table, but the program's own stderr, maybe one of its files, where
/// the kernel refused that table. `Flusher::run` notes the panic in the data instead. Called
/// at start-up, before the program runs: installing the hook takes locks that a `fork` made
/// meanwhile by another thread would leave held in the child.
pub fn quiet_flusher_panics() {
    let others = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if sys::gettid() != FLUSHER_TID.load(Acquire) {
            others(info);
        }
    }));
}

/// The flusher made a step.
pub fn progress() {
    PROGRESS.fetch_add(1, Relaxed);
}
