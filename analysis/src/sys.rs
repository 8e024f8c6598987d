//! The analysis' only system calls that need `unsafe`.

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`: the unit of /proc's process start times),
/// at least 1.
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions and touches no memory of ours.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    hz.max(1) as u64
}
