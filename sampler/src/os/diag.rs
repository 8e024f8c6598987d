//! TCP sockets and their `tcp_info` through `sock_diag(7)` (`NETLINK_SOCK_DIAG`,
//! `SOCK_DIAG_BY_FAMILY` with `INET_DIAG_INFO`): congestion window, smoothed RTT, unacknowledged
//! segments and total retransmits per socket, with the socket's inode to match it to the file
//! descriptors of a node's processes (seed 001 §3.2.1: "/proc provides TCP congestion-control
//! data (e.g., cwnd) on a per-socket basis that we can capture with a custom tool").
//!
//! Why our own ~150 lines instead of `netlink-packet-sock-diag` + `netlink-sys`: the request is
//! one fixed 72-byte message and the reply a fixed header plus attributes, an ABI the kernel
//! keeps stable (inet_diag since 2.6.x; `tcp_info` only grows at its end). The crates bring four
//! more dependencies (netlink-packet-core/-utils, byteorder, anyhow) and decode every attribute
//! into owned values, for the five numbers needed here. The socket calls live in `crate::sys`.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::sys::DiagSocket;

const NLMSG_HDR: usize = 16;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `struct inet_diag_req_v2`.
const REQ_SIZE: usize = 56;
/// `struct inet_diag_msg`.
const MSG_SIZE: usize = 72;
/// `INET_DIAG_INFO`: the attribute holding `struct tcp_info`.
const INET_DIAG_INFO: u16 = 2;
/// `tcp_info` must reach `tcpi_total_retrans` (offset 100).
const TCP_INFO_MIN: usize = 104;

/// TCP states (include/net/tcp_states.h).
pub mod state {
    /// Connection established.
    pub const ESTABLISHED: u8 = 1;
    /// Listening.
    pub const LISTEN: u8 = 10;
}

/// Every state a connection can retransmit in: all but LISTEN, TIME_WAIT (no `tcp_info`),
/// CLOSE and the request minisockets.
const STATES: u32 = (1 << 1) // ESTABLISHED
    | (1 << 2) // SYN_SENT
    | (1 << 4) // FIN_WAIT1
    | (1 << 5) // FIN_WAIT2
    | (1 << 8) // CLOSE_WAIT
    | (1 << 9) // LAST_ACK
    | (1 << 11); // CLOSING

/// One TCP socket as `sock_diag` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSock {
    /// Socket inode (what `/proc/PID/fd/N` links to as `socket:[inode]`); 0 for orphans.
    pub inode: u64,
    /// TCP state ([`state`]).
    pub state: u8,
    /// Local address and port.
    pub local: SocketAddr,
    /// Remote address and port.
    pub remote: SocketAddr,
    /// `tcp_info`, when the kernel sent it.
    pub info: Option<TcpInfo>,
    /// Address family and the kernel's `inet_diag_sockid` (ports, addresses, interface,
    /// cookie): what [`lookup`] needs to ask for this socket alone.
    pub id: SockId,
}

/// A socket's identity for an exact `sock_diag` request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockId {
    /// `AF_INET` or `AF_INET6`.
    pub family: u8,
    /// `struct inet_diag_sockid`, as the kernel sent it.
    pub raw: [u8; 48],
}

/// The `tcp_info` fields the OS metrics use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpInfo {
    /// Congestion window, segments (`tcpi_snd_cwnd`).
    pub cwnd: u32,
    /// Smoothed RTT, µs (`tcpi_rtt`).
    pub rtt_us: u32,
    /// Segments sent and not acknowledged (`tcpi_unacked`).
    pub unacked: u32,
    /// Segments retransmitted over the connection's life (`tcpi_total_retrans`).
    pub total_retrans: u32,
}

/// The dump request for one address family, asking for `tcp_info`.
pub fn dump_request(family: u8, seq: u32) -> Vec<u8> {
    request(family, seq, None)
}

/// A request for one family: a dump of every socket, or with `id` that socket alone (a hash
/// lookup in the kernel instead of a walk of the whole table).
fn request(family: u8, seq: u32, id: Option<&SockId>) -> Vec<u8> {
    let len = (NLMSG_HDR + REQ_SIZE) as u32;
    let mut m = Vec::with_capacity(len as usize);
    m.extend_from_slice(&len.to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let flags = if id.is_some() {
        NLM_F_REQUEST
    } else {
        NLM_F_REQUEST | NLM_F_DUMP
    };
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel fills it in
    m.push(family);
    m.push(libc::IPPROTO_TCP as u8);
    m.push(1 << (INET_DIAG_INFO - 1)); // idiag_ext
    m.push(0);
    m.extend_from_slice(&STATES.to_ne_bytes());
    match id {
        Some(id) => m.extend_from_slice(&id.raw),
        None => m.resize(len as usize, 0), // inet_diag_sockid: all zero = every socket
    }
    m
}

/// What a reply datagram said.
#[derive(Debug, PartialEq, Eq)]
pub enum Reply {
    /// More datagrams follow.
    More,
    /// The dump is complete.
    Done,
    /// The kernel answered with an error (negative errno).
    Error(i32),
}

fn ne16(b: &[u8], at: usize) -> u16 {
    u16::from_ne_bytes([b[at], b[at + 1]])
}

fn ne32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Parses one reply datagram, appending its sockets to `out`. Malformed messages end the
/// datagram (they are not read as sockets).
pub fn parse_reply(buf: &[u8], out: &mut Vec<TcpSock>) -> Reply {
    let mut pos = 0usize;
    while pos + NLMSG_HDR <= buf.len() {
        let len = ne32(buf, pos) as usize;
        let kind = ne16(buf, pos + 4);
        if len < NLMSG_HDR || pos + len > buf.len() {
            return Reply::Done;
        }
        let body = &buf[pos + NLMSG_HDR..pos + len];
        match kind {
            NLMSG_DONE => return Reply::Done,
            NLMSG_ERROR => {
                let errno = if body.len() >= 4 {
                    ne32(body, 0) as i32
                } else {
                    -libc::EIO
                };
                return Reply::Error(errno);
            }
            SOCK_DIAG_BY_FAMILY => {
                if let Some(s) = parse_msg(body) {
                    out.push(s);
                }
            }
            _ => {}
        }
        pos += (len + 3) & !3;
    }
    Reply::More
}

fn parse_msg(b: &[u8]) -> Option<TcpSock> {
    if b.len() < MSG_SIZE {
        return None;
    }
    let family = b[0];
    let port = |at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
    let addr = |at: usize| -> Option<IpAddr> {
        Some(match family as i32 {
            libc::AF_INET => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(&b[at..at + 4]).ok()?)),
            libc::AF_INET6 => {
                let a = Ipv6Addr::from(<[u8; 16]>::try_from(&b[at..at + 16]).ok()?);
                match a.to_ipv4_mapped() {
                    Some(v4) => IpAddr::V4(v4),
                    None => IpAddr::V6(a),
                }
            }
            _ => return None,
        })
    };
    let local = SocketAddr::new(addr(8)?, port(4));
    let remote = SocketAddr::new(addr(24)?, port(6));
    let mut info = None;
    let mut pos = MSG_SIZE;
    while pos + 4 <= b.len() {
        let len = ne16(b, pos) as usize;
        let kind = ne16(b, pos + 2) & 0x3fff;
        if len < 4 || pos + len > b.len() {
            break;
        }
        if kind == INET_DIAG_INFO && len - 4 >= TCP_INFO_MIN {
            let t = &b[pos + 4..pos + len];
            info = Some(TcpInfo {
                unacked: ne32(t, 24),
                rtt_us: ne32(t, 68),
                cwnd: ne32(t, 80),
                total_retrans: ne32(t, 100),
            });
        }
        pos += (len + 3) & !3;
    }
    Some(TcpSock {
        inode: u64::from(ne32(b, 68)),
        state: b[1],
        local,
        remote,
        info,
        id: SockId {
            family,
            raw: b[4..52].try_into().ok()?,
        },
    })
}

/// One socket, asked for by the identity a dump gave; `None` when it is gone.
pub fn lookup(sock: &DiagSocket, id: &SockId) -> io::Result<Option<TcpSock>> {
    sock.send(&request(id.family, 3, Some(id)))?;
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf)?;
    let mut out = Vec::with_capacity(1);
    match parse_reply(&buf[..n], &mut out) {
        Reply::Error(e) if e == -libc::ENOENT => Ok(None),
        Reply::Error(e) => Err(io::Error::from_raw_os_error(-e)),
        _ => Ok(out.pop()),
    }
}

/// Every TCP connection in the socket's network namespace, of the families asked for. Each
/// family is one walk of the kernel's whole established-socket table (shared by all
/// namespaces, sized by memory): the main cost of the OS metrics, so callers skip a family the
/// namespace has no socket of (`sockstat`).
pub fn dump(sock: &DiagSocket, v4: bool, v6: bool, out: &mut Vec<TcpSock>) -> io::Result<()> {
    let mut buf = vec![0u8; 64 << 10];
    let families = [(v4, 1, libc::AF_INET as u8), (v6, 2, libc::AF_INET6 as u8)];
    for (_, seq, family) in families.into_iter().filter(|f| f.0) {
        sock.send(&dump_request(family, seq))?;
        loop {
            let n = sock.recv(&mut buf)?;
            if n == 0 {
                break;
            }
            match parse_reply(&buf[..n], out) {
                Reply::More => {}
                Reply::Done => break,
                // No IPv6 in this kernel or namespace: nothing to list.
                Reply::Error(e) if e == -libc::ENOENT || e == -libc::EAFNOSUPPORT => break,
                Reply::Error(e) => return Err(io::Error::from_raw_os_error(-e)),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read as _, Write as _};
    use std::os::unix::fs::MetadataExt as _;

    #[test]
    fn request_layout() {
        let r = dump_request(libc::AF_INET as u8, 7);
        assert_eq!(r.len(), 72);
        assert_eq!(ne32(&r, 0), 72);
        assert_eq!(ne16(&r, 4), SOCK_DIAG_BY_FAMILY);
        assert_eq!(ne32(&r, 8), 7);
        assert_eq!(r[16], libc::AF_INET as u8);
        assert_eq!(r[17], libc::IPPROTO_TCP as u8);
        assert_eq!(r[18], 2);
    }

    #[test]
    fn malformed_replies_are_not_sockets() {
        let mut out = Vec::new();
        // A message whose length runs past the datagram.
        let mut b = vec![0u8; 40];
        b[0..4].copy_from_slice(&200u32.to_ne_bytes());
        b[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        assert_eq!(parse_reply(&b, &mut out), Reply::Done);
        // A socket message too short for inet_diag_msg.
        b[0..4].copy_from_slice(&40u32.to_ne_bytes());
        assert_eq!(parse_reply(&b, &mut out), Reply::More);
        assert!(out.is_empty());
        // An error message.
        b[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        b[16..20].copy_from_slice(&(-libc::EPERM).to_ne_bytes());
        assert_eq!(parse_reply(&b, &mut out), Reply::Error(-libc::EPERM));
    }

    /// A real connection on loopback: the dump lists it with the inode its fd links to, a
    /// congestion window and an RTT.
    #[test]
    fn a_real_connection_is_listed_with_tcp_info() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(&[7u8; 100_000]).unwrap();
        let mut got = vec![0u8; 100_000];
        s.read_exact(&mut got).unwrap();
        let inode = {
            use std::os::fd::AsRawFd as _;
            let link = std::fs::read_link(format!("/proc/self/fd/{}", c.as_raw_fd())).unwrap();
            crate::os::parse::socket_inode(&link.to_string_lossy()).unwrap()
        };
        // The same inode through fstat of the socket.
        {
            use std::os::fd::AsRawFd as _;
            let m = std::fs::metadata(format!("/proc/self/fd/{}", c.as_raw_fd())).unwrap();
            assert_eq!(m.ino(), inode);
        }
        let sock = DiagSocket::open().unwrap();
        let mut all = Vec::new();
        dump(&sock, true, true, &mut all).unwrap();
        let mine = all
            .iter()
            .find(|t| t.inode == inode)
            .unwrap_or_else(|| panic!("inode {inode} not in {all:?}"));
        assert_eq!(mine.state, state::ESTABLISHED);
        assert_eq!(mine.remote, addr);
        assert_eq!(mine.local, c.local_addr().unwrap());
        let info = mine.info.expect("tcp_info");
        assert!(info.cwnd >= 1, "{info:?}");
        assert!(info.rtt_us > 0, "{info:?}");
        // No listening sockets are asked for.
        assert!(all.iter().all(|t| t.state != state::LISTEN));
        // The same socket alone, by the identity the dump gave.
        let one = lookup(&sock, &mine.id).unwrap().expect("found by id");
        assert_eq!(
            (one.inode, one.local, one.remote),
            (inode, mine.local, mine.remote)
        );
        assert!(one.info.is_some());
        // Gone: not found, not an error.
        let id = mine.id;
        drop(c);
        drop(s);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let gone = lookup(&sock, &id).unwrap();
        assert!(
            gone.is_none_or(|g| g.state != state::ESTABLISHED),
            "{gone:?}"
        );
    }
}
