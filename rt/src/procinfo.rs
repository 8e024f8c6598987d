//! What the `Info` record and `node.info` say about the machine beyond what every writer says
//! the same way (`culprit_format::procfs`: process identity, boot id, host name, kernel).

/// The kernel's current clock source.
pub fn clocksource() -> String {
    std::fs::read_to_string("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}
