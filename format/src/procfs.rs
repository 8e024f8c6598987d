//! What writers say about a process and its machine in [`Info`](crate::RecordKind::Info)
//! records, read from `/proc`, and the test readers apply to it: is the process that wrote a
//! file still running?
//!
//! A process is identified by its pid, the boot it runs in ([`info_keys::BOOT_ID`]) and its
//! start time ([`info_keys::PROC_START_NS`]). The tracer runtime and the uprobe counter write
//! them, `culprit report` and `diagnose` compare them with `/proc` now ([`process_alive`]), so
//! both sides compute them here, the same way. The parsers ([`Stat::parse`], [`boot_time_s`])
//! work on borrowed text and do not allocate; the functions that read files do.
//!
//! [`info_keys::BOOT_ID`]: crate::info_keys::BOOT_ID
//! [`info_keys::PROC_START_NS`]: crate::info_keys::PROC_START_NS

use std::sync::OnceLock;

/// A process: this one, or another by pid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proc {
    /// The calling process (`/proc/self`).
    This,
    /// Process `pid` (`/proc/<pid>`).
    Pid(u32),
}

impl Proc {
    /// `/proc/self/<file>` or `/proc/<pid>/<file>`.
    pub fn path(self, file: &str) -> String {
        match self {
            Proc::This => format!("/proc/self/{file}"),
            Proc::Pid(pid) => format!("/proc/{pid}/{file}"),
        }
    }
}

/// A file's text without surrounding white space; empty when it cannot be read.
fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`); empty when unreadable.
pub fn boot_id() -> String {
    read_trim("/proc/sys/kernel/random/boot_id")
}

/// The host name of this machine's UTS namespace, as the kernel has it (not sanitized: see
/// [`crate::names::sanitize_node_name`] for a node name); empty when unreadable.
pub fn host_name() -> String {
    read_trim("/proc/sys/kernel/hostname")
}

/// The kernel release (`uname -r`); empty when unreadable.
pub fn kernel_release() -> String {
    read_trim("/proc/sys/kernel/osrelease")
}

/// The fields of a `/proc/<pid>/stat` (or `task/<tid>/stat`) line. The command name (field 2)
/// may hold spaces and parentheses, so the other fields are counted from its last `)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat<'a> {
    /// The command name (field 2, `comm`), without its parentheses.
    pub comm: &'a str,
    /// The state letter (field 3): `R`, `S`, `D`, `Z`, …
    pub state: u8,
    /// The parent's pid (field 4).
    pub ppid: u32,
    /// Start time, clock ticks after boot (field 22).
    pub starttime: u64,
    rest: &'a str,
}

impl<'a> Stat<'a> {
    /// Parses a stat line. `None` when it is not one.
    pub fn parse(text: &'a str) -> Option<Stat<'a>> {
        let open = text.find('(')?;
        let close = text.rfind(')')?;
        let comm = text.get(open + 1..close)?;
        let rest = text.get(close + 1..)?;
        let mut s = Stat {
            comm,
            state: 0,
            ppid: 0,
            starttime: 0,
            rest,
        };
        s.state = *s.field(3)?.as_bytes().first()?;
        s.ppid = s.field(4)?.parse().ok()?;
        s.starttime = s.field(22)?.parse().ok()?;
        Some(s)
    }

    /// Field `n` (numbered from 1 as in proc(5); `n ≥ 3`), as text.
    pub fn field(&self, n: usize) -> Option<&'a str> {
        self.rest.split_ascii_whitespace().nth(n.checked_sub(3)?)
    }
}

/// The boot time in seconds since the epoch: the `btime` line of `/proc/stat`'s text.
pub fn boot_time_s(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()
}

/// `AT_CLKTCK` in the auxiliary vector.
const AT_CLKTCK: usize = 17;

/// Clock ticks per second (`USER_HZ`, the unit of the start times in `/proc`): the kernel's
/// `AT_CLKTCK` as the process received it (`/proc/self/auxv`, what `sysconf(_SC_CLK_TCK)`
/// returns), else 100, its value on every architecture culprit builds for.
pub fn clock_ticks_per_sec() -> u64 {
    static HZ: OnceLock<u64> = OnceLock::new();
    *HZ.get_or_init(|| {
        let auxv = std::fs::read("/proc/self/auxv").unwrap_or_default();
        let w = size_of::<usize>();
        auxv.chunks_exact(2 * w)
            .find_map(|pair| {
                let word = |b: &[u8]| usize::from_ne_bytes(b.try_into().expect("one word"));
                (word(&pair[..w]) == AT_CLKTCK).then(|| word(&pair[w..]) as u64)
            })
            .filter(|&hz| hz > 0)
            .unwrap_or(100)
    })
}

/// Wall-clock ns of a start time in clock ticks after boot, given the boot time.
pub fn ticks_to_wall_ns(boot_time_s: u64, ticks: u64, hz: u64) -> u64 {
    boot_time_s
        .saturating_mul(1_000_000_000)
        .saturating_add(ticks.saturating_mul(1_000_000_000 / hz.max(1)))
}

/// When process `p` started, wall-clock ns (boot time + start ticks): with the pid it
/// identifies the process. Resolution is the clock tick (10 ms); the value is stable for the
/// process, up to the boot time's rounding to a second.
pub fn start_ns(p: Proc) -> Option<u64> {
    let stat = std::fs::read_to_string(p.path("stat")).ok()?;
    let ticks = Stat::parse(&stat)?.starttime;
    let btime = boot_time_s(&std::fs::read_to_string("/proc/stat").ok()?)?;
    Some(ticks_to_wall_ns(btime, ticks, clock_ticks_per_sec()))
}

/// How far a recorded start time may be from the one computed now and still name the same
/// process: the boot time in `/proc/stat` is derived from the clock and moves when it is set.
pub const START_SLACK_NS: u64 = 2_000_000_000;

/// True when `pid` is a live process of this boot that started at `start_ns` (±
/// [`START_SLACK_NS`]). A missing boot id or start time is not checked.
pub fn process_alive(pid: u32, boot_id: Option<&str>, start_ns: Option<u64>) -> bool {
    if boot_id.is_some_and(|b| b != self::boot_id()) {
        return false;
    }
    let Ok(stat) = std::fs::read_to_string(Proc::Pid(pid).path("stat")) else {
        return false;
    };
    let Some(want) = start_ns else {
        return true;
    };
    let btime = std::fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|s| boot_time_s(&s));
    match (Stat::parse(&stat), btime) {
        (Some(st), Some(b)) => {
            ticks_to_wall_ns(b, st.starttime, clock_ticks_per_sec()).abs_diff(want)
                <= START_SLACK_NS
        }
        _ => true,
    }
}

/// The command name (`comm`) of `p`; empty when unreadable.
pub fn program(p: Proc) -> String {
    read_trim(&p.path("comm"))
}

/// The path of `p`'s executable; empty when unreadable.
pub fn exe(p: Proc) -> String {
    std::fs::read_link(p.path("exe"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The command line of `p`, arguments separated by spaces and shell-quoted where needed (the
/// form of [`info_keys::CMDLINE`](crate::info_keys::CMDLINE)); empty when unreadable.
pub fn cmdline(p: Proc) -> String {
    let raw = std::fs::read(p.path("cmdline")).unwrap_or_default();
    raw.split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| shell_quote(&String::from_utf8_lossy(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `a` as a shell word: unchanged when it needs no quotes, else in single quotes.
pub fn shell_quote(a: &str) -> String {
    let plain = !a.is_empty()
        && a.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_last_paren() {
        let line = "42 (a) b (c)) S 7 42 42 0 -1 4194560 0 0 0 0 1 2 0 0 20 0 1 0 12345 0 0";
        let s = Stat::parse(line).unwrap();
        assert_eq!(s.comm, "a) b (c)");
        assert_eq!((s.state, s.ppid, s.starttime), (b'S', 7, 12345));
        assert_eq!(s.field(5), Some("42"));
        assert_eq!(s.field(2), None);
        assert!(Stat::parse("42 (x) S 1").is_none());
        assert!(Stat::parse("garbage").is_none());
    }

    #[test]
    fn boot_time_line() {
        assert_eq!(
            boot_time_s("cpu 1 2\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
        assert_eq!(boot_time_s("cpu 1 2\n"), None);
        assert_eq!(ticks_to_wall_ns(10, 250, 100), 12_500_000_000);
    }

    #[test]
    fn this_process_is_alive_and_a_later_start_is_not() {
        let me = std::process::id();
        let start = start_ns(Proc::This).unwrap();
        assert_eq!(start_ns(Proc::Pid(me)), Some(start));
        let boot = boot_id();
        assert!(process_alive(me, Some(&boot), Some(start)));
        assert!(process_alive(me, None, None));
        assert!(!process_alive(me, Some("another boot"), Some(start)));
        assert!(!process_alive(
            me,
            Some(&boot),
            Some(start + 60_000_000_000)
        ));
        assert_eq!(clock_ticks_per_sec(), 100);
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("a-b/c"), "a-b/c");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
