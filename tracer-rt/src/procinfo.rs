//! What the `Info` record and `node.info` say about the process and the machine, from /proc.

use crate::sys;

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Short program name (`comm`).
pub fn program() -> String {
    read_trim("/proc/self/comm")
}

/// Path of the executable.
pub fn exe() -> String {
    std::fs::read_link("/proc/self/exe")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The command line, arguments separated by spaces, shell-quoted where needed.
pub fn cmdline() -> String {
    let raw = std::fs::read("/proc/self/cmdline").unwrap_or_default();
    raw.split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| quote(&String::from_utf8_lossy(a)))
        .collect::<Vec<_>>()
        .join(" ")
}

fn quote(a: &str) -> String {
    let plain = a
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b));
    if plain {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', r"'\''"))
    }
}

/// Kernel release.
pub fn kernel() -> String {
    read_trim("/proc/sys/kernel/osrelease")
}

/// Boot id.
pub fn boot_id() -> String {
    read_trim("/proc/sys/kernel/random/boot_id")
}

/// The kernel's current clock source.
pub fn clocksource() -> String {
    read_trim("/sys/devices/system/clocksource/clocksource0/current_clocksource")
}

/// Process start time, wall-clock ns (boot time + start ticks): with the pid it identifies
/// the process. Resolution is the clock tick (10 ms); the value is stable for the process.
pub fn proc_start_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = &stat[stat.rfind(')')? + 2..];
    let start_ticks: u64 = rest.split(' ').nth(19)?.parse().ok()?;
    let btime: u64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let hz = sys::clock_ticks_per_sec();
    Some(btime * 1_000_000_000 + start_ticks * (1_000_000_000 / hz))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote("a-b/c"), "a-b/c");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn start_time_is_plausible() {
        let s = proc_start_ns().unwrap();
        assert!(s > 1_500_000_000_000_000_000 && s <= sys::realtime_ns() + 2_000_000_000);
    }
}
