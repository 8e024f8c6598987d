//! The process-wide state of the runtime: start-up, `fork`, `exit`, and the C API's requests
//! to the flusher thread.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU32, AtomicU64};

use crate::clock::{self, Calibration};
use crate::config::Config;
use crate::control::{
    self, req, state, CURRENT_FILE, CURRENT_NODE, DONE, FLUSHER_GONE, FLUSHER_TID, NODE_REQUEST,
    PENDING, PROGRESS, REQ, STATE,
};
use crate::entry::Hooks;
use crate::flusher::{Flusher, Origin};
use crate::output::WriteError;
use crate::sys::{self, Publish};
use crate::{block, decide, elf, intervals, io, objects, pool};

static CONFIG: Publish<Config> = Publish::new();

/// Ticks-to-ns calibration start, shared with forked children.
static CALIBRATION: Publish<Calibration> = Publish::new();
/// The hooks the runtime lives behind (given at start; a forked child's flusher needs them).
static HOOKS: Publish<Hooks> = Publish::new();
/// Wall-clock ns at which the runtime started in this process (or forked child).
static START_NS: AtomicU64 = AtomicU64::new(0);
/// Process the flusher thread runs in. A child made without fork's atfork handlers (`vfork`,
/// `_Fork`, a raw `clone`) has another pid: it has no flusher of its own, and with `vfork` it
/// shares this memory, so its requests would reach (and, at `exit`, end) the parent's flusher.
static OWNER_PID: AtomicU32 = AtomicU32::new(0);

/// Environment variable through which a process image tells the next one (after `exec`, or
/// a forked child's `exec`) which file it wrote: `<pid>:<file name>`. Internal.
pub const CHAIN_VAR: &str = "CULPRIT_TRACE_FILE";

/// Is the runtime tracing this process?
pub fn is_active() -> bool {
    control::is_active()
}

/// The configuration (after start-up).
pub fn config() -> Option<&'static Config> {
    CONFIG.get()
}

fn say(msg: &str) {
    sys::stderr_line(&format!("culprit: {msg}"));
}

/// The constructor: reads the configuration, decides whether to trace, creates the file,
/// starts the flusher. Fails open: any problem leaves the program running untraced after one
/// `culprit:` line on stderr — the only time the runtime prints anything.
///
/// Under secure execution (a set-user-id program run by another user, see
/// [`sys::secure_execution`]) the environment (`CULPRIT_DIR`, `CULPRIT_NODE`) comes from the
/// caller and cannot be trusted: the runtime does not trace, silently. `hooks` describes the
/// hooks the runtime lives behind (the constructor's, `crate::ffi`).
pub fn start(hooks: Hooks) {
    if STATE.load(Acquire) != state::UNINIT {
        return;
    }
    if sys::secure_execution() {
        STATE.store(state::OFF, Release);
        return;
    }
    // Files opened here get numbers from 3 on, even if the program starts with 0, 1 or 2
    // closed (the flusher, later, opens files in a table of its own).
    let _std = sys::hold_std_fds();
    let objs = objects::scan();
    // A program (and its libraries) that never calls the hooks is left alone: no file, no
    // thread. This keeps `culprit record -- sh -c …` from writing files for the shell. One that
    // marks layer events, or whose C-library I/O is to be recorded (`CULPRIT_IO=1`), is traced.
    let io_asked = std::env::var_os(crate::config::IO_VAR).is_some_and(|v| v == "1");
    if !io_asked
        && !objs.iter().any(|o| {
            o.has_file()
                && elf::refers_to(
                    o.path.as_ref(),
                    &[b"__cyg_profile_func_enter", b"culprit_io_layer"],
                )
        })
    {
        STATE.store(state::OFF, Release);
        return;
    }
    let mut warnings = Vec::new();
    let cfg = Config::from_env(&mut warnings);
    for w in &warnings {
        say(w);
    }
    let start_ns = sys::realtime_ns();
    START_NS.store(start_ns, Relaxed);
    OWNER_PID.store(std::process::id(), Relaxed);
    let cal = Calibration::start(cfg.hist);
    CALIBRATION.set(cal);
    let mut modes = 0;
    if cfg.graph {
        modes |= block::mode::GRAPH;
    }
    if cfg.hist {
        modes |= block::mode::HIST;
    }
    if !clock::uses_tsc() {
        modes |= block::mode::MONO;
    }
    block::mode::set(modes);
    // What a call costs the hooks, for the cost budget (before the program runs: ~2 ms).
    crate::calibrate::set(crate::calibrate::measure(&hooks));
    HOOKS.set(hooks);
    if !cfg.patch {
        sys::patch::disable();
    }
    if !intervals::setup(cfg.interval_ns, start_ns / cfg.interval_ns) {
        say("cannot map the ring of intervals; running untraced");
        STATE.store(state::OFF, Release);
        return;
    }
    decide::rebuild(&cfg.filters, &objs);
    let origin = chain_origin();
    CONFIG.set(cfg);
    let cfg = CONFIG.get().expect("just set");
    CURRENT_NODE.set(cfg.node.clone());
    let mut flusher = Flusher::new(cfg, cfg.node.clone(), cal, start_ns, origin, hooks);
    if let Err(e) = flusher.open_file() {
        match e {
            WriteError::Refused(why) => say(&format!("{why}; running untraced")),
            e => say(&format!(
                "cannot write trace data under {}: {e}; running untraced",
                cfg.node_dir(&cfg.node).display()
            )),
        }
        STATE.store(state::OFF, Release);
        return;
    }
    if let Some(name) = flusher.file_name() {
        // Constructors run before `main`, normally single-threaded: setenv is safe here.
        std::env::set_var(CHAIN_VAR, format!("{}:{name}", std::process::id()));
    }
    if !(sys::create_exit_key::<block::ThreadBlock>()
        && sys::at_fork_child(after_fork_child)
        && sys::at_exit(at_exit))
    {
        say("cannot register thread/fork/exit handlers; running untraced");
        STATE.store(state::OFF, Release);
        return;
    }
    crate::requests::set_sample_every(cfg.request_sample);
    control::quiet_flusher_panics();
    STATE.store(state::ACTIVE, Release);
    if !io::enable(cfg.io) && cfg.io {
        say("cannot set up I/O layer events; recording function calls only");
    }
    if !sys::spawn_detached::<block::ThreadBlock>(Box::new(move || flusher.run())) {
        say("cannot start the flusher thread; running untraced");
        STATE.store(state::OFF, Release);
    }
}

/// What the previous process image left in [`CHAIN_VAR`].
fn chain_origin() -> Origin {
    let Some(v) = std::env::var_os(CHAIN_VAR) else {
        return Origin::Start;
    };
    let v = v.to_string_lossy();
    let Some((pid, name)) = v.split_once(':') else {
        return Origin::Start;
    };
    let pid: u32 = pid.parse().unwrap_or(0);
    if pid == std::process::id() {
        Origin::Exec(name.to_string())
    } else if pid == std::os::unix::process::parent_id() {
        Origin::Forked(name.to_string())
    } else {
        Origin::Start
    }
}

/// How long the exit handler waits for a flusher that makes no progress and sleeps (a lock
/// it cannot get) before the process exits without its last records.
const EXIT_STALL_NS: u64 = 5_000_000_000;
/// How long it waits for a flusher that makes no progress at all, even one that waits for a
/// CPU or for the disk the whole time (thousands of processes creating their files in one
/// directory at once wait for its lock, in uninterruptible sleep; a hung file system too).
const EXIT_STALL_MAX_NS: u64 = 60_000_000_000;

/// How a requester waits for the flusher.
#[derive(Clone, Copy, Debug)]
enum Wait {
    /// At most this long (ns).
    Upto(u64),
    /// As long as the flusher makes progress or waits for a CPU (see [`EXIT_STALL_NS`]).
    WhileProgressing,
}

/// Sends `bits` to the flusher and waits until it has handled them. False at once in a
/// process that is not the flusher's (see [`OWNER_PID`]), and when the wait ends first.
fn request(bits: u32, wait: Wait) -> bool {
    if std::process::id() != OWNER_PID.load(Relaxed) {
        return false;
    }
    PENDING.fetch_or(bits, AcqRel);
    let mine = REQ.fetch_add(1, AcqRel).wrapping_add(1);
    sys::futex_wake_all(&REQ);
    let start = sys::monotonic_ns();
    let mut seen = (PROGRESS.load(Relaxed), start);
    loop {
        let done = DONE.load(Acquire);
        if done.wrapping_sub(mine) as i32 >= 0 {
            return true;
        }
        if FLUSHER_GONE.load(Acquire) {
            return false;
        }
        let now = sys::monotonic_ns();
        let slice = match wait {
            Wait::Upto(ns) if now >= start + ns => return false,
            Wait::Upto(ns) => (start + ns - now).min(100_000_000),
            Wait::WhileProgressing => {
                let p = PROGRESS.load(Relaxed);
                if p != seen.0 {
                    seen = (p, now);
                }
                let still = now - seen.1;
                if still >= EXIT_STALL_MAX_NS || (still >= EXIT_STALL_NS && !flusher_busy()) {
                    return false;
                }
                100_000_000
            }
        };
        sys::futex_wait_for(&DONE, done, slice);
    }
}

/// True when the flusher thread is runnable (running, or waiting for a CPU) or waiting for
/// the disk (uninterruptible sleep), or when that cannot be told.
fn flusher_busy() -> bool {
    let tid = FLUSHER_TID.load(Acquire);
    tid == 0 || sys::thread_state(tid).is_none_or(|s| s == b'R' || s == b'D')
}

/// `culprit_flush()`.
pub fn flush() -> i32 {
    if !is_active() {
        return -1;
    }
    if request(req::FLUSH, Wait::Upto(5_000_000_000)) {
        0
    } else {
        -2
    }
}

/// `culprit_set_node()`.
pub fn set_node(name: &str) -> i32 {
    if !culprit_format::names::is_node_name(name) {
        return -2;
    }
    if !is_active() {
        return -1;
    }
    NODE_REQUEST.set(name.to_string());
    if request(req::NODE, Wait::Upto(5_000_000_000)) {
        0
    } else {
        -3
    }
}

/// `culprit_pause()`.
pub fn pause() -> i32 {
    match pool::ensure_block() {
        Some(b) => {
            b.pause();
            sys::set_tls_cur(b.idle_word());
            0
        }
        None => -1,
    }
}

/// `culprit_resume()`.
pub fn resume() -> i32 {
    match pool::current() {
        Some(b) if b.resume() => {
            sys::set_tls_cur(b.idle_word());
            0
        }
        Some(_) => -2,
        None => -1,
    }
}

extern "C" fn at_exit() {
    before_exit();
}

/// The process exits (`exit`, or `_exit`/`_Exit`, which the runtime interposes): the flusher
/// writes the last interval and the end marker. The exit waits for it as long as it makes
/// progress, or waits for a CPU or the disk: thousands of processes that exit at once on a
/// loaded host each leave their last records, however long their flushers wait (a fixed
/// limit of 3 s ran out there). It gives up on a flusher that sleeps without progress for
/// `EXIT_STALL_NS` (a lock it cannot get), or that makes none for `EXIT_STALL_MAX_NS`, and at
/// once on a flusher that has ended ([`FLUSHER_GONE`]). Does nothing in a child without a
/// flusher (with vfork, ENDED would stop the parent's tracing).
///
/// The flusher does the writing, not the exiting thread (which has the CPU): `_exit` may be
/// called from a signal handler that interrupted `malloc`, and writing the records allocates.
pub fn before_exit() {
    if std::process::id() == OWNER_PID.load(Relaxed)
        && STATE
            .compare_exchange(state::ACTIVE, state::ENDED, AcqRel, Acquire)
            .is_ok()
    {
        request(req::EXIT, Wait::WhileProgressing);
    }
}

/// `fork` child handler: the child is a new process with one thread. Its counts start from
/// zero (the parent reports everything up to the fork), it writes its own file (created at
/// its first write, so a child that `exec`s at once leaves none), with a new flusher thread.
extern "C" fn after_fork_child() {
    if STATE.load(Acquire) != state::ACTIVE {
        return;
    }
    let (Some(cfg), Some(cal), Some(hooks)) = (CONFIG.get(), CALIBRATION.get(), HOOKS.get()) else {
        return;
    };
    let start_ns = sys::realtime_ns();
    pool::after_fork(pool::current(), start_ns / cfg.interval_ns);
    io::after_fork();
    PENDING.store(0, Relaxed);
    REQ.store(0, Relaxed);
    DONE.store(0, Relaxed);
    // The parent's flusher is not this process's: the child's own starts below.
    FLUSHER_TID.store(0, Relaxed);
    FLUSHER_GONE.store(false, Relaxed);
    let node = CURRENT_NODE
        .get()
        .cloned()
        .unwrap_or_else(|| cfg.node.clone());
    let origin = match CURRENT_FILE.get() {
        Some(f) => Origin::Forked(f.clone()),
        None => Origin::Start,
    };
    START_NS.store(start_ns, Relaxed);
    OWNER_PID.store(std::process::id(), Relaxed);
    let flusher = Flusher::new(cfg, node, *cal, start_ns, origin, *hooks);
    if !sys::spawn_detached::<block::ThreadBlock>(Box::new(move || flusher.run())) {
        STATE.store(state::OFF, Release);
    }
}
