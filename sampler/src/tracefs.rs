//! Tracepoints: finding (or mounting) tracefs, reading an event's id and field layout, and
//! decoding the few fields the sampler uses to attribute an event to a node.
//!
//! Beyond seed 000: its missing piece was kernel-level visibility (send-side packet loss shows
//! only as TCP retransmits in the kernel), so the sampler also counts tracepoints per node and
//! interval.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

/// Where the sampler mounts tracefs when it is not mounted anywhere.
pub const TRACEFS_MOUNT_POINT: &str = "/sys/kernel/tracing";

/// Tracepoints counted by default: TCP retransmits, block I/O queued / issued / completed and
/// context switches.
pub const DEFAULT_TRACEPOINTS: &[&str] = &[
    "tcp:tcp_retransmit_skb",
    "block:block_bio_queue",
    "block:block_rq_issue",
    "block:block_rq_complete",
    "sched:sched_switch",
];

/// The mount point of tracefs, if mounted (from /proc/self/mounts).
pub fn mounted() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mounts").ok()?;
    let mut found: Option<PathBuf> = None;
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let (_src, dir, fstype) = (f.next()?, f.next()?, f.next()?);
        if fstype == "tracefs" {
            let dir = PathBuf::from(unescape_mount(dir));
            // Prefer the canonical place over debugfs's automount.
            if dir == Path::new(TRACEFS_MOUNT_POINT) || found.is_none() {
                found = Some(dir);
            }
        }
    }
    found
}

fn unescape_mount(s: &str) -> String {
    s.replace("\\040", " ").replace("\\011", "\t")
}

/// Finds tracefs, mounting it at [`TRACEFS_MOUNT_POINT`] when `may_mount` and it is not mounted.
/// The error says what to do.
pub fn find_or_mount(may_mount: bool) -> Result<PathBuf, String> {
    if let Some(dir) = mounted() {
        return Ok(dir);
    }
    if !may_mount {
        return Err(format!(
            "tracefs is not mounted (mount it with `mount -t tracefs nodev {TRACEFS_MOUNT_POINT}`)"
        ));
    }
    crate::sys::mount_tracefs(Path::new(TRACEFS_MOUNT_POINT)).map_err(|e| {
        format!(
            "tracefs is not mounted and mounting it at {TRACEFS_MOUNT_POINT} failed ({e}); \
             run as root or mount it with `mount -t tracefs nodev {TRACEFS_MOUNT_POINT}`"
        )
    })?;
    Ok(PathBuf::from(TRACEFS_MOUNT_POINT))
}

/// One field of a tracepoint's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// Field name (without array brackets).
    pub name: String,
    /// Byte offset in the raw record.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
}

/// A tracepoint's id and field layout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tracepoint {
    /// `system:name`.
    pub name: String,
    /// The id to put in `perf_event_attr.config`.
    pub id: u64,
    /// Fields, as the `format` file lists them.
    pub fields: Vec<Field>,
}

impl Tracepoint {
    /// Reads `events/<system>/<name>/{id,format}` under the tracefs root.
    pub fn load(root: &Path, name: &str) -> Result<Tracepoint, String> {
        let (sys, ev) = name
            .split_once(':')
            .ok_or_else(|| format!("{name}: a tracepoint is written system:name"))?;
        let dir = root.join("events").join(sys).join(ev);
        let id = std::fs::read_to_string(dir.join("id"))
            .map_err(|e| format!("{name}: no such tracepoint ({}: {e})", dir.display()))?;
        let id = id
            .trim()
            .parse()
            .map_err(|_| format!("{name}: bad id in {}", dir.display()))?;
        let format = std::fs::read_to_string(dir.join("format")).unwrap_or_default();
        Ok(Tracepoint {
            name: name.to_string(),
            id,
            fields: parse_format(&format),
        })
    }

    /// The field called `name`.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }
}

/// Parses the `field:` lines of a tracepoint `format` file.
pub fn parse_format(text: &str) -> Vec<Field> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        let Some(rest) = line.strip_prefix("field:") else {
            continue;
        };
        let mut parts = rest.split(';').map(str::trim);
        let Some(decl) = parts.next() else { continue };
        let mut offset = None;
        let mut size = None;
        for p in parts {
            if let Some(v) = p.strip_prefix("offset:") {
                offset = v.parse().ok();
            } else if let Some(v) = p.strip_prefix("size:") {
                size = v.parse().ok();
            }
        }
        let last = decl.rsplit(' ').next().unwrap_or(decl);
        let name = last.split('[').next().unwrap_or(last).to_string();
        if let (Some(offset), Some(size)) = (offset, size) {
            out.push(Field { name, offset, size });
        }
    }
    out
}

/// Reads an unsigned little-endian field of 1 to 8 bytes.
pub fn read_uint(raw: &[u8], f: &Field) -> Option<u64> {
    let b = raw.get(f.offset..f.offset + f.size)?;
    if b.len() > 8 {
        return None;
    }
    let mut v = [0u8; 8];
    v[..b.len()].copy_from_slice(b);
    Some(u64::from_le_bytes(v))
}

/// How the sampler attributes occurrences of a tracepoint to nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoder {
    /// To the node of the process that was running (the sample's pid).
    Process,
    /// A block I/O request's (device, sector): `block_bio_queue` runs in the submitter's
    /// context and teaches the sampler which node a (device, sector) belongs to; issue and
    /// completion (often in a kworker or an interrupt) are attributed through it.
    Block {
        /// `dev` field.
        dev: Field,
        /// `sector` field.
        sector: Field,
        /// This tracepoint is where requests are queued (learns the owner).
        learns: bool,
        /// This tracepoint is where requests end (forgets the owner).
        forgets: bool,
        /// This tracepoint is where requests go to the device (`block_rq_issue`).
        issues: bool,
        /// `nr_sector` field (the block layer's request size).
        nr_sector: Option<Field>,
        /// `rwbs` field (read, write, flush… flags as letters).
        rwbs: Option<Field>,
        /// `error` field (of completions).
        error: Option<Field>,
    },
    /// A context switch (`sched:sched_switch`), to the node of the task switched out; its
    /// `prev_state` tells a thread stopped by a signal or a tracer (T, t), `next_pid` the
    /// thread that runs next (a stopped one running again ends its stop).
    Switch {
        /// `prev_state` field.
        prev_state: Field,
        /// `next_pid` field.
        next_pid: Field,
    },
    /// Entry of `pread64` / `pwrite64` (`syscalls:sys_enter_*`): to the caller's node, and an
    /// ISSUE of the system-call layer once its exit is seen ([`crate::syscalls`]).
    SysEnter {
        /// `fd` field.
        fd: Field,
        /// `count` field.
        count: Field,
        /// `pos` field.
        pos: Field,
        /// The call writes.
        write: bool,
    },
    /// Exit of `pread64` / `pwrite64` (`syscalls:sys_exit_*`): the COMPLT.
    SysExit {
        /// `ret` field.
        ret: Field,
    },
    /// A TCP retransmit: attributed by the socket's addresses.
    Tcp {
        /// `family` field.
        family: Field,
        /// `saddr` (IPv4).
        saddr: Field,
        /// `daddr` (IPv4).
        daddr: Field,
        /// `saddr_v6`.
        saddr6: Option<Field>,
        /// `daddr_v6`.
        daddr6: Option<Field>,
        /// `sport` (host byte order).
        sport: Option<Field>,
        /// `dport` (host byte order).
        dport: Option<Field>,
    },
}

impl Decoder {
    /// The decoder for a tracepoint (falls back to [`Decoder::Process`] when the fields it
    /// needs are missing).
    pub fn for_tracepoint(tp: &Tracepoint) -> Decoder {
        let f = |n: &str| tp.field(n).cloned();
        if tp.name.starts_with("block:") {
            if let (Some(dev), Some(sector)) = (f("dev"), f("sector")) {
                return Decoder::Block {
                    dev,
                    sector,
                    learns: tp.name == "block:block_bio_queue",
                    forgets: tp.name == "block:block_rq_complete",
                    issues: tp.name == "block:block_rq_issue",
                    nr_sector: f("nr_sector"),
                    rwbs: f("rwbs"),
                    error: f("error"),
                };
            }
        }
        if tp.name == "sched:sched_switch" {
            if let (Some(prev_state), Some(next_pid)) = (f("prev_state"), f("next_pid")) {
                return Decoder::Switch {
                    prev_state,
                    next_pid,
                };
            }
        }
        if crate::syscalls::TRACEPOINTS.contains(&tp.name.as_str()) {
            if tp.name.contains(":sys_enter_") {
                if let (Some(fd), Some(count), Some(pos)) = (f("fd"), f("count"), f("pos")) {
                    return Decoder::SysEnter {
                        fd,
                        count,
                        pos,
                        write: crate::syscalls::writes(&tp.name),
                    };
                }
            } else if let Some(ret) = f("ret") {
                return Decoder::SysExit { ret };
            }
        }
        if tp.name.starts_with("tcp:") {
            if let (Some(family), Some(saddr), Some(daddr)) = (f("family"), f("saddr"), f("daddr"))
            {
                return Decoder::Tcp {
                    family,
                    saddr,
                    daddr,
                    saddr6: f("saddr_v6"),
                    daddr6: f("daddr_v6"),
                    sport: f("sport"),
                    dport: f("dport"),
                };
            }
        }
        Decoder::Process
    }

    /// True when samples of this tracepoint need the raw fields.
    pub fn needs_raw(&self) -> bool {
        !matches!(self, Decoder::Process)
    }
}

/// `prev_state` bits of a task stopped by a signal (`__TASK_STOPPED`, printed T) or a tracer
/// (`__TASK_TRACED`, t), as `sched_switch` reports them (a preempted task reports
/// `TASK_REPORT_MAX`, which has neither).
pub const STOPPED_STATES: u64 = 0x4 | 0x8;

/// The (source, destination) addresses of a TCP tracepoint record.
pub fn tcp_addrs(
    raw: &[u8],
    family: &Field,
    saddr: &Field,
    daddr: &Field,
    saddr6: Option<&Field>,
    daddr6: Option<&Field>,
) -> Option<(IpAddr, IpAddr)> {
    let fam = read_uint(raw, family)? as i32;
    let v4 = |f: &Field| -> Option<IpAddr> {
        let b: [u8; 4] = raw.get(f.offset..f.offset + 4)?.try_into().ok()?;
        Some(IpAddr::V4(Ipv4Addr::from(b)))
    };
    if fam == libc::AF_INET6 {
        if let (Some(s6), Some(d6)) = (saddr6, daddr6) {
            let v6 = |f: &Field| -> Option<IpAddr> {
                let b: [u8; 16] = raw.get(f.offset..f.offset + 16)?.try_into().ok()?;
                let a = Ipv6Addr::from(b);
                Some(match a.to_ipv4_mapped() {
                    Some(v4) => IpAddr::V4(v4),
                    None => IpAddr::V6(a),
                })
            };
            return Some((v6(s6)?, v6(d6)?));
        }
    }
    Some((v4(saddr)?, v4(daddr)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP_FORMAT: &str = "name: tcp_retransmit_skb\nID: 2281\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:const void * skbaddr;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:__u16 sport;\toffset:28;\tsize:2;\tsigned:0;\n\
\tfield:__u16 dport;\toffset:30;\tsize:2;\tsigned:0;\n\
\tfield:__u16 family;\toffset:32;\tsize:2;\tsigned:0;\n\
\tfield:__u8 saddr[4];\toffset:34;\tsize:4;\tsigned:0;\n\
\tfield:__u8 daddr[4];\toffset:38;\tsize:4;\tsigned:0;\n\
\tfield:__u8 saddr_v6[16];\toffset:42;\tsize:16;\tsigned:0;\n\
\tfield:__u8 daddr_v6[16];\toffset:58;\tsize:16;\tsigned:0;\n";

    #[test]
    fn format_fields_and_tcp_addresses() {
        let fields = parse_format(TCP_FORMAT);
        let tp = Tracepoint {
            name: "tcp:tcp_retransmit_skb".into(),
            id: 2281,
            fields,
        };
        assert_eq!(tp.field("saddr").unwrap().offset, 34);
        assert_eq!(tp.field("common_pid").unwrap().size, 4);
        let Decoder::Tcp {
            family,
            saddr,
            daddr,
            saddr6,
            daddr6,
            sport,
            dport,
        } = Decoder::for_tracepoint(&tp)
        else {
            panic!("not a tcp decoder");
        };
        let mut raw = vec![0u8; 80];
        raw[32..34].copy_from_slice(&(libc::AF_INET as u16).to_le_bytes());
        raw[34..38].copy_from_slice(&[10, 1, 0, 1]);
        raw[38..42].copy_from_slice(&[10, 1, 0, 2]);
        raw[28..30].copy_from_slice(&3001u16.to_le_bytes());
        raw[30..32].copy_from_slice(&40000u16.to_le_bytes());
        assert_eq!(read_uint(&raw, sport.as_ref().unwrap()), Some(3001));
        assert_eq!(read_uint(&raw, dport.as_ref().unwrap()), Some(40000));
        let (s, d) = tcp_addrs(
            &raw,
            &family,
            &saddr,
            &daddr,
            saddr6.as_ref(),
            daddr6.as_ref(),
        )
        .unwrap();
        assert_eq!(s.to_string(), "10.1.0.1");
        assert_eq!(d.to_string(), "10.1.0.2");
        // IPv4-mapped IPv6 addresses come out as IPv4.
        raw[32..34].copy_from_slice(&(libc::AF_INET6 as u16).to_le_bytes());
        let mapped: Ipv6Addr = "::ffff:10.9.0.7".parse().unwrap();
        raw[42..58].copy_from_slice(&mapped.octets());
        raw[58..74].copy_from_slice(&mapped.octets());
        let (s, _) = tcp_addrs(
            &raw,
            &family,
            &saddr,
            &daddr,
            saddr6.as_ref(),
            daddr6.as_ref(),
        )
        .unwrap();
        assert_eq!(s.to_string(), "10.9.0.7");
        // Short records decode to None, not a panic.
        assert!(tcp_addrs(&raw[..20], &family, &saddr, &daddr, None, None).is_none());
    }
}
