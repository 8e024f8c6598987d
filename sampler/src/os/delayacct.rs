//! The kernel's delay accounting switch (`kernel.task_delayacct`, Linux 5.14+). Per-task delays
//! (block I/O wait: field 42 of `/proc/PID/stat`) are only counted while it is on. It is
//! host-wide and costs every task a little, so the sampler turns it on only when asked
//! (`culprit sample --delayacct`) and puts it back as it found it when the last sampler that
//! counts on it ends (below) — also on SIGINT/SIGTERM, which end a run normally; only SIGKILL
//! leaves it on.
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
//!
//! # Samplers that overlap
//!
//! The switch is one for the host, and samplers overlap (a user sampling twice, the testbed
//! running two clusters at once): the first to turn it on must not turn it off while another
//! still counts on it. Each sampler that asked for it joins a bookkeeping in `/run` (root's,
//! emptied at boot): for its run it holds a shared `flock` on [`STATE_FILE`], which says whether
//! culprit turned the switch on, and since when; found on without that mark, the switch is the
//! admin's and is never turned off. Joining and leaving hold an exclusive `flock` on
//! [`MUTEX_FILE`], so they happen one at a time; the sampler that leaves last — the only one
//! that can then lock the state file exclusively — puts the switch back. Both files are opened
//! without following a link (`O_NOFOLLOW`), created with mode 0600, and used only as regular
//! files of the sampler's own user that no one else may write. A sampler killed with SIGKILL
//! drops its share (the kernel releases its lock) and leaves the switch on, marked: the next
//! sampler to leave last turns it off.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::sys::{self, Flock};

/// The sysctl's file.
pub const SYSCTL: &str = "/proc/sys/kernel/task_delayacct";

/// The samplers' bookkeeping: each sampler counting on delay accounting holds a shared lock on
/// it; it says whether culprit turned the switch on, and since when.
pub const STATE_FILE: &str = "/run/culprit-delayacct";

/// Locked exclusively while a sampler joins or leaves the bookkeeping.
pub const MUTEX_FILE: &str = "/run/culprit-delayacct.lock";

/// The longest a sampler waits for another to finish joining or leaving.
const MUTEX_WAIT: Duration = Duration::from_secs(2);

/// The state file's line saying culprit turned the switch on, at CLOCK_BOOTTIME ns.
const MARK: &str = "turned_on_since_boot_ns=";

/// Whether delay accounting is on; `None` when the kernel has no such switch (before 5.14, or
/// built without `CONFIG_TASK_DELAY_ACCT`).
pub fn state() -> Option<bool> {
    Host::real().read()
}

/// Turns delay accounting off again if this process's live [`Guard`]s are the last that count
/// on a switch culprit turned on: for a process about to end without unwinding (`culprit
/// sample` giving up on a run that does not end). Waits at most half a second for another
/// sampler's bookkeeping.
pub fn restore_now() {
    leave_all(|_| true, Duration::from_millis(500));
}

/// Delay accounting kept on for as long as this lives; dropping it turns it off again when it
/// was off before the first sampler that counts on it, and this one is the last.
#[derive(Debug)]
pub struct Guard {
    /// Its entry in [`LIVE`] (`None`: it found the switch on and could not join the
    /// bookkeeping; nothing to put back).
    id: Option<u64>,
    turned_on: bool,
    since_boot_ns: u64,
    warning: Option<String>,
}

impl Guard {
    /// Turns delay accounting on (a no-op when it already is), and joins the samplers that
    /// count on it.
    pub fn enable() -> Result<Guard, String> {
        Guard::enable_on(Host::real())
    }

    fn enable_on(host: Host) -> Result<Guard, String> {
        let Some(on) = host.read() else {
            return Err(format!(
                "delay accounting is not available ({} does not exist: Linux 5.14 or later \
                 with CONFIG_TASK_DELAY_ACCT is needed); per-process block-I/O delay stays absent",
                host.sysctl.display()
            ));
        };
        match join(host) {
            Ok((member, joined)) => {
                let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
                live().push((id, member));
                Ok(Guard {
                    id: Some(id),
                    turned_on: joined.turned_on,
                    since_boot_ns: joined.since_boot_ns,
                    warning: None,
                })
            }
            // On already (an unprivileged sampler cannot write /run): nothing to turn on or
            // back, but nothing keeps it on either.
            Err(why) if on => Ok(Guard {
                id: None,
                turned_on: false,
                since_boot_ns: 0,
                warning: Some(format!(
                    "delay accounting is on, but this sampler cannot join the others that \
                     count on it ({why}): one that turned it on may turn it off during this run"
                )),
            }),
            Err(why) => Err(format!(
                "cannot turn on delay accounting ({why}; needs root); per-process block-I/O \
                 delay stays absent"
            )),
        }
    }

    /// True when this guard turned it on (the last sampler to leave turns it off).
    pub fn changed(&self) -> bool {
        self.turned_on
    }

    /// CLOCK_BOOTTIME ns from which new tasks are accounted: when culprit turned it on (this
    /// sampler or one still running), or 0 when it was on already (assumed on since boot).
    pub fn since_boot_ns(&self) -> u64 {
        self.since_boot_ns
    }

    /// What the caller should say about this guard, one line (none: nothing).
    pub fn warning(&self) -> Option<&str> {
        self.warning.as_deref()
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        let member = {
            let mut live = live();
            let at = live.iter().position(|(i, _)| *i == id);
            at.map(|at| live.swap_remove(at).1)
        };
        // `None`: restore_now took it.
        if let Some(Err(e)) = member.map(|m| m.leave(MUTEX_WAIT)) {
            eprintln!("culprit: could not put delay accounting back ({e})");
        }
    }
}

/// Where the switch and the bookkeeping are: the host's, or a test's stand-ins.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Host {
    sysctl: PathBuf,
    state: PathBuf,
    mutex: PathBuf,
}

impl Host {
    fn real() -> Host {
        Host {
            sysctl: SYSCTL.into(),
            state: STATE_FILE.into(),
            mutex: MUTEX_FILE.into(),
        }
    }

    fn read(&self) -> Option<bool> {
        let s = std::fs::read_to_string(&self.sysctl).ok()?;
        Some(s.trim() != "0")
    }

    fn write(&self, on: bool) -> io::Result<()> {
        std::fs::write(&self.sysctl, if on { "1\n" } else { "0\n" })
    }
}

/// A sampler's share of the switch: a shared lock on the state file, held until it leaves
/// (or its process ends).
#[derive(Debug)]
struct Member {
    host: Host,
    state: File,
}

/// What joining found.
#[derive(Debug)]
struct Joined {
    /// This join turned the switch on.
    turned_on: bool,
    /// CLOCK_BOOTTIME ns since which new tasks are accounted (0: found on without a mark).
    since_boot_ns: u64,
}

/// This process's members, by guard id, for [`restore_now`].
static LIVE: Mutex<Vec<(u64, Member)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

fn live() -> std::sync::MutexGuard<'static, Vec<(u64, Member)>> {
    // Nothing panics while holding it; a poisoned list is still right.
    LIVE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Makes every live member of a host `which` accepts leave, waiting at most `wait` each.
fn leave_all(which: impl Fn(&Host) -> bool, wait: Duration) {
    let members: Vec<Member> = {
        let mut live = live();
        let (go, stay): (Vec<_>, Vec<_>) = live.drain(..).partition(|(_, m)| which(&m.host));
        *live = stay;
        go.into_iter().map(|(_, m)| m).collect()
    };
    for m in members {
        let _ = m.leave(wait);
    }
}

/// Joins the samplers counting on the switch of `host`, turning it on when it is off.
fn join(host: Host) -> Result<(Member, Joined), String> {
    let _mutex = lock_mutex(&host.mutex, MUTEX_WAIT)?;
    let state = open_private(&host.state)?;
    // Only a sampler leaving takes it exclusively, under the mutex we hold: no wait.
    sys::flock(&state, Flock::Shared).map_err(|e| format!("{}: {e}", host.state.display()))?;
    let joined = match (host.read(), read_mark(&state)) {
        (None, _) => return Err(format!("{} is gone", host.sysctl.display())),
        // Turned on by culprit, and not turned off since.
        (Some(true), Some(since)) => Joined {
            turned_on: false,
            since_boot_ns: since,
        },
        // The admin's.
        (Some(true), None) => Joined {
            turned_on: false,
            since_boot_ns: 0,
        },
        (Some(false), _) => {
            host.write(true)
                .map_err(|e| format!("{}: {e}", host.sysctl.display()))?;
            let since = sys::boottime_ns();
            if let Err(e) = write_mark(&state, Some(since)) {
                // Unmarked it would never be turned off: not at all, then.
                let _ = host.write(false);
                return Err(format!("{}: {e}", host.state.display()));
            }
            Joined {
                turned_on: true,
                since_boot_ns: since,
            }
        }
    };
    Ok((Member { host, state }, joined))
}

impl Member {
    /// Leaves, waiting at most `wait` for the mutex; the last to leave puts the switch back
    /// when culprit turned it on. Without the mutex the switch stays as it is.
    fn leave(self, wait: Duration) -> Result<(), String> {
        let _mutex = lock_mutex(&self.host.mutex, wait)?;
        let at = |e: io::Error| format!("{}: {e}", self.host.state.display());
        sys::flock(&self.state, Flock::Unlock).map_err(at)?;
        match sys::flock(&self.state, Flock::TryExclusive) {
            Ok(()) => {}
            // Others still count on it.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(at(e)),
        }
        if read_mark(&self.state).is_some() {
            self.host
                .write(false)
                .map_err(|e| format!("{}: {e}", self.host.sysctl.display()))?;
            write_mark(&self.state, None).map_err(at)?;
        }
        Ok(())
    }
}

/// Takes the bookkeeping's mutex at `path`, waiting at most `wait`: locked until the file is
/// dropped.
fn lock_mutex(path: &Path, wait: Duration) -> Result<File, String> {
    let f = open_private(path)?;
    let t0 = Instant::now();
    loop {
        match sys::flock(&f, Flock::TryExclusive) {
            Ok(()) => return Ok(f),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && t0.elapsed() < wait => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(format!(
                    "{}: another culprit sampler held it for {} ms",
                    path.display(),
                    wait.as_millis()
                ))
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
}

/// Opens the bookkeeping file `path` for reading and writing, creating it with mode 0600:
/// never through a link, and only a regular file of this user that no one else may write.
fn open_private(path: &Path) -> Result<File, String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => format!("{}: it is a symbolic link", path.display()),
            _ => format!("{}: {e}", path.display()),
        })?;
    let m = f
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !m.is_file() || m.uid() != sys::euid() || m.mode() & 0o022 != 0 {
        return Err(format!(
            "{}: not a regular file of user {} that only it may write",
            path.display(),
            sys::euid()
        ));
    }
    Ok(f)
}

/// What the state file says: since when culprit has had the switch on (CLOCK_BOOTTIME ns),
/// `None` when culprit did not turn it on.
fn read_mark(f: &File) -> Option<u64> {
    let mut buf = [0u8; 128];
    let n = f.read_at(&mut buf, 0).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(MARK))?
        .trim()
        .parse()
        .ok()
}

/// Writes (or with `None` clears) the state file's mark.
fn write_mark(f: &File, since: Option<u64>) -> io::Result<()> {
    f.set_len(0)?;
    match since {
        Some(t) => f.write_all_at(format!("{MARK}{t}\n").as_bytes(), 0),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in host in a fresh directory: the switch is a plain file (the protocol is what
    /// is tested here; tests/tests/os_metrics.rs runs two real samplers on the real switch).
    fn host(tag: &str, on: bool) -> Host {
        let dir =
            std::env::temp_dir().join(format!("culprit-delayacct-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let h = Host {
            sysctl: dir.join("task_delayacct"),
            state: dir.join("state"),
            mutex: dir.join("state.lock"),
        };
        h.write(on).unwrap();
        h
    }

    fn done(h: &Host) {
        let _ = std::fs::remove_dir_all(h.sysctl.parent().unwrap());
    }

    #[test]
    fn the_last_sampler_to_leave_turns_it_off() {
        let h = host("last", false);
        let a = Guard::enable_on(h.clone()).unwrap();
        assert!(a.changed() && a.since_boot_ns() > 0);
        assert_eq!(h.read(), Some(true));
        let b = Guard::enable_on(h.clone()).unwrap();
        assert!(!b.changed());
        // Accounted since the first turned it on, not since boot.
        assert_eq!(b.since_boot_ns(), a.since_boot_ns());
        drop(a);
        assert_eq!(h.read(), Some(true), "turned off while another sampler ran");
        drop(b);
        assert_eq!(h.read(), Some(false));
        // A third, later, finds it off again and starts afresh.
        let c = Guard::enable_on(h.clone()).unwrap();
        assert!(c.changed());
        drop(c);
        assert_eq!(h.read(), Some(false));
        done(&h);
    }

    #[test]
    fn the_admin_s_switch_stays_on() {
        let h = host("admin", true);
        let a = Guard::enable_on(h.clone()).unwrap();
        let b = Guard::enable_on(h.clone()).unwrap();
        assert!(!a.changed() && !b.changed());
        assert_eq!((a.since_boot_ns(), b.since_boot_ns()), (0, 0));
        drop(b);
        drop(a);
        assert_eq!(h.read(), Some(true));
        done(&h);
    }

    /// A sampler killed with SIGKILL leaves the switch on and marked: the next sampler to
    /// leave last turns it off.
    #[test]
    fn a_switch_left_on_by_a_killed_sampler_is_turned_off_by_the_next() {
        let h = host("killed", false);
        let a = Guard::enable_on(h.clone()).unwrap();
        // What SIGKILL does: the lock goes with the process, the switch and the mark stay.
        let id = a.id.unwrap();
        let m = {
            let mut live = live();
            let at = live.iter().position(|(i, _)| *i == id).unwrap();
            live.swap_remove(at).1
        };
        drop(m);
        std::mem::forget(a);
        assert_eq!(h.read(), Some(true));
        let b = Guard::enable_on(h.clone()).unwrap();
        assert!(!b.changed() && b.since_boot_ns() > 0);
        drop(b);
        assert_eq!(h.read(), Some(false));
        done(&h);
    }

    #[test]
    fn restore_now_puts_it_back_and_the_guard_then_does_nothing() {
        let h = host("now", false);
        let a = Guard::enable_on(h.clone()).unwrap();
        leave_all(|x| *x == h, Duration::from_millis(500));
        assert_eq!(h.read(), Some(false));
        // Turned on by hand meanwhile: the guard, already out, leaves it alone.
        h.write(true).unwrap();
        drop(a);
        assert_eq!(h.read(), Some(true));
        done(&h);
    }

    #[test]
    fn a_planted_link_or_a_shared_file_is_refused_and_the_switch_untouched() {
        let h = host("planted", false);
        let victim = h.sysctl.with_file_name("victim");
        std::fs::write(&victim, "x").unwrap();
        std::os::unix::fs::symlink(&victim, &h.state).unwrap();
        let e = Guard::enable_on(h.clone()).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(h.read(), Some(false));
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "x");
        std::fs::remove_file(&h.state).unwrap();
        std::fs::write(&h.state, "").unwrap();
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&h.state, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = Guard::enable_on(h.clone()).unwrap_err();
        assert!(e.contains("only it may write"), "{e}");
        assert_eq!(h.read(), Some(false));
        // Found on, a sampler that cannot join says so and goes on.
        h.write(true).unwrap();
        let g = Guard::enable_on(h.clone()).unwrap();
        assert!(g.warning().is_some_and(|w| w.contains("cannot join")));
        drop(g);
        assert_eq!(h.read(), Some(true));
        done(&h);
    }

    #[test]
    fn created_files_are_private() {
        let h = host("modes", false);
        drop(Guard::enable_on(h.clone()).unwrap());
        for f in [&h.state, &h.mutex] {
            let m = std::fs::metadata(f).unwrap();
            assert_eq!(m.mode() & 0o777, 0o600, "{}", f.display());
        }
        done(&h);
    }
}
