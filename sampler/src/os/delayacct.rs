//! The kernel's delay accounting switch (`kernel.task_delayacct`, Linux 5.14+). Per-task delays
//! (block I/O wait: field 42 of `/proc/PID/stat`) are only counted while it is on. It is
//! host-wide and costs every task a little, so the sampler turns it on only when asked
//! (`culprit sample --delayacct`) and puts it back as it found it when the run ends — also on
//! SIGINT/SIGTERM, which end a run normally; only SIGKILL leaves it on.
//!
//! A task gets its delay record when it is created, and only if delay accounting is on then
//! (kernel/delayacct.c, `delayacct_tsk_init`): a server started before the switch was turned on
//! shows 0 for ever. Measured here: a throttled O_DIRECT writer started before `--delayacct`
//! stayed at 0 ticks, one started after gained ~100 ticks/s. So start the sampler before the
//! servers (the testbed does), and the collector leaves the delay of a node with such older
//! threads absent rather than zero.
//!
//! Also measured on this 6.18 kernel: three rate-limited O_DIRECT writers on a fast disk, started
//! after the switch, read 1 162 682, 3 and 5 042 ticks after 5 s (the first and last
//! impossible for one thread). With EEVDF's delayed dequeue the start of a short wait appears to
//! be recorded on another task, and the end then counts from a stale start. The collector drops
//! an interval in which one thread's delay grew by more than the interval (absent); smaller
//! errors of that kind cannot be told apart. Long waits (a throttled disk) read right.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set while a [`Guard`] that turned delay accounting on lives.
static TURNED_ON: AtomicBool = AtomicBool::new(false);

/// Turns delay accounting off again if a live [`Guard`] turned it on: for a process about to
/// end without unwinding (`culprit sample` giving up on a run that does not end).
pub fn restore_now() {
    if TURNED_ON.swap(false, Ordering::SeqCst) {
        let _ = write(false);
    }
}

/// The sysctl's file.
pub const SYSCTL: &str = "/proc/sys/kernel/task_delayacct";

/// Whether delay accounting is on; `None` when the kernel has no such switch (before 5.14, or
/// built without `CONFIG_TASK_DELAY_ACCT`).
pub fn state() -> Option<bool> {
    let s = std::fs::read_to_string(SYSCTL).ok()?;
    Some(s.trim() != "0")
}

/// Delay accounting turned on for as long as this lives; dropping it turns it off again if it
/// was off before.
#[derive(Debug)]
pub struct Guard {
    restore: bool,
    since_boot_ns: u64,
}

impl Guard {
    /// Turns delay accounting on (a no-op when it already is).
    pub fn enable() -> Result<Guard, String> {
        match state() {
            None => Err(format!(
                "delay accounting is not available ({SYSCTL} does not exist: Linux 5.14 or later \
                 with CONFIG_TASK_DELAY_ACCT is needed); per-process block-I/O delay stays absent"
            )),
            Some(true) => Ok(Guard {
                restore: false,
                since_boot_ns: 0,
            }),
            Some(false) => {
                TURNED_ON.store(true, Ordering::SeqCst);
                write(true).map_err(|e| {
                    TURNED_ON.store(false, Ordering::SeqCst);
                    format!(
                        "cannot turn on delay accounting ({SYSCTL}: {e}; needs root); \
                         per-process block-I/O delay stays absent"
                    )
                })?;
                Ok(Guard {
                    restore: true,
                    since_boot_ns: crate::sys::boottime_ns(),
                })
            }
        }
    }

    /// True when this guard turned it on (and will turn it off).
    pub fn changed(&self) -> bool {
        self.restore
    }

    /// CLOCK_BOOTTIME ns from which new tasks are accounted: when this guard turned it on, or
    /// 0 when it was on already (assumed on since boot).
    pub fn since_boot_ns(&self) -> u64 {
        self.since_boot_ns
    }
}

fn write(on: bool) -> io::Result<()> {
    std::fs::write(SYSCTL, if on { "1\n" } else { "0\n" })
}

impl Drop for Guard {
    fn drop(&mut self) {
        if self.restore && TURNED_ON.swap(false, Ordering::SeqCst) {
            if let Err(e) = write(false) {
                eprintln!("culprit: could not turn delay accounting off again ({SYSCTL}: {e})");
            }
        }
    }
}
