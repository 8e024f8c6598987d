//! The HTTP endpoint of `diagnose --follow --metrics-listen ADDR`: `GET /metrics` answers the
//! latest [`LiveStatus`] as OpenMetrics text ([`crate::exposition`]); nothing else is served.
//!
//! Deliberately small, and safe against clients that never finish: one thread running a
//! non-blocking event loop over std's sockets and `poll(2)` (no async runtime), one request
//! per connection. Every connection has a whole-request deadline: its request head (at most
//! [`MAX_REQUEST`] bytes) must arrive within [`IO_TIMEOUT`] of its accept, and the answer be
//! read within [`IO_TIMEOUT`] of the head, or it is closed; at most [`MAX_CONNECTIONS`] are
//! open at once (beyond, the oldest one still sending its head is closed). A slow client
//! (a byte every few seconds) or a thousand idle ones therefore hold nothing: a scrape that
//! sends its request is answered at once beside them. Bound to 127.0.0.1 unless an address
//! names another interface: the metrics name nodes and functions.

use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd as _;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use culprit_analysis::live::LiveStatus;
use culprit_analysis::time::now_ns;

use crate::exposition;
use crate::sys::{poll, PollFd};

/// Longest time a client may take to send its whole request head, and then to read the
/// answer (a whole-request deadline, not a per-read timeout).
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request head read (request line and headers).
pub const MAX_REQUEST: usize = 8192;
/// Connections open at once; a new one beyond closes the oldest still sending its head.
pub const MAX_CONNECTIONS: usize = 64;
/// How long the loop stops accepting after an accept failed (out of descriptors).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The status the endpoint serves, shared with the diagnosis.
pub type Shared = Arc<Mutex<Option<Arc<LiveStatus>>>>;

/// Why the endpoint could not start. The messages name the address as given (`spec`); the
/// command line puts its option's name in front.
#[derive(Debug, thiserror::Error)]
pub enum ListenError {
    /// Not an address.
    #[error("{spec}: not PORT, :PORT or HOST:PORT ({reason})")]
    Address {
        /// The address as given.
        spec: String,
        /// What resolving it said.
        reason: std::io::Error,
    },
    /// A name that resolves to nothing.
    #[error("{spec}: the name resolves to no address")]
    NoAddress {
        /// The address as given.
        spec: String,
    },
    /// The address could not be bound.
    #[error("{spec}: cannot listen on {addr}: {why}")]
    Listen {
        /// The address as given.
        spec: String,
        /// The address resolved.
        addr: SocketAddr,
        /// Why, in words.
        why: String,
    },
    /// The address bound could not be read back.
    #[error("the address bound: {0}")]
    LocalAddr(std::io::Error),
    /// The server's thread could not start.
    #[error("start the server thread: {0}")]
    Thread(std::io::Error),
}

/// A running endpoint.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    status: Shared,
}

impl MetricsServer {
    /// Binds `spec` (`PORT`, `:PORT`, `HOST:PORT`; a bare port binds 127.0.0.1) and serves on
    /// a thread of its own until the process exits.
    pub fn start(spec: &str) -> Result<Self, ListenError> {
        let addr = parse_addr(spec)?;
        let listener = TcpListener::bind(addr).map_err(|e| {
            let why = match e.kind() {
                ErrorKind::AddrInUse => "address already in use".to_string(),
                ErrorKind::AddrNotAvailable => {
                    "no interface of this machine has that address".to_string()
                }
                ErrorKind::PermissionDenied => {
                    "permission denied (ports below 1024 need privileges)".to_string()
                }
                _ => e.to_string(),
            };
            ListenError::Listen {
                spec: spec.to_string(),
                addr,
                why,
            }
        })?;
        let addr = listener.local_addr().map_err(ListenError::LocalAddr)?;
        listener
            .set_nonblocking(true)
            .map_err(ListenError::LocalAddr)?;
        let status: Shared = Arc::new(Mutex::new(None));
        let shared = Arc::clone(&status);
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || serve(&listener, &shared))
            .map_err(ListenError::Thread)?;
        Ok(MetricsServer { addr, status })
    }

    /// The address bound (with the port chosen when `:0` was asked).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves `status` from now on.
    pub fn publish(&self, status: LiveStatus) {
        let mut s = self.status.lock().unwrap_or_else(PoisonError::into_inner);
        *s = Some(Arc::new(status));
    }
}

/// `PORT`, `:PORT` (127.0.0.1), or anything `ToSocketAddrs` takes (`HOST:PORT`, `[::1]:PORT`).
fn parse_addr(spec: &str) -> Result<SocketAddr, ListenError> {
    let port_only = spec.strip_prefix(':').unwrap_or(spec);
    if let Ok(port) = port_only.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    let mut addrs = match spec.to_socket_addrs() {
        Ok(a) => a,
        Err(reason) => {
            return Err(ListenError::Address {
                spec: spec.to_string(),
                reason,
            })
        }
    };
    match addrs.next() {
        Some(a) => Ok(a),
        None => Err(ListenError::NoAddress {
            spec: spec.to_string(),
        }),
    }
}

/// One client connection.
#[derive(Debug)]
struct Conn {
    stream: TcpStream,
    /// When it must be done with its current phase (head, then answer).
    deadline: Instant,
    /// Accepted at (the oldest goes first beyond [`MAX_CONNECTIONS`]).
    accepted: Instant,
    /// The request head so far.
    head: Vec<u8>,
    /// The answer and how much of it was written, once the head is in.
    answer: Option<(Vec<u8>, usize)>,
}

/// What a connection is after some I/O.
#[derive(Debug, PartialEq, Eq)]
enum Progress {
    /// Waits for more.
    Pending,
    /// Done (answered, closed by the client, or failed): close it.
    Done,
}

impl Conn {
    fn new(stream: TcpStream, now: Instant) -> Conn {
        Conn {
            stream,
            deadline: now + IO_TIMEOUT,
            accepted: now,
            head: Vec::new(),
            answer: None,
        }
    }

    /// Reads what has arrived; once the head is complete, answers (as much as can be written
    /// now). Never blocks.
    fn progress(&mut self, status: &Shared, now: Instant) -> Progress {
        if self.answer.is_none() {
            let mut buf = [0u8; 1024];
            loop {
                if head_complete(&self.head) {
                    break;
                }
                match self.stream.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => self.head.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::WouldBlock => return Progress::Pending,
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(_) => return Progress::Done,
                }
            }
            let text = String::from_utf8_lossy(&self.head).into_owned();
            self.answer = Some((respond(&text, status), 0));
            self.deadline = now + IO_TIMEOUT;
        }
        let Some((bytes, written)) = self.answer.as_mut() else {
            return Progress::Done;
        };
        while *written < bytes.len() {
            match self.stream.write(&bytes[*written..]) {
                Ok(0) => return Progress::Done,
                Ok(n) => *written += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Progress::Pending,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => return Progress::Done,
            }
        }
        Progress::Done
    }
}

/// True once `head` holds the blank line ending a request head, or [`MAX_REQUEST`] bytes.
fn head_complete(head: &[u8]) -> bool {
    head.len() >= MAX_REQUEST || head.windows(4).any(|w| w == b"\r\n\r\n")
}

/// The event loop: accepts, reads heads, answers, and closes what is done or late (module
/// docs). Runs until the process exits.
fn serve(listener: &TcpListener, status: &Shared) {
    let mut conns: Vec<Conn> = Vec::new();
    let mut accept_after = Instant::now();
    let mut fds: Vec<PollFd> = Vec::new();
    loop {
        let now = Instant::now();
        let accepting = now >= accept_after;
        fds.clear();
        fds.push(PollFd::new(listener.as_raw_fd(), accepting, false));
        for c in &conns {
            fds.push(PollFd::new(
                c.stream.as_raw_fd(),
                c.answer.is_none(),
                c.answer.is_some(),
            ));
        }
        // Wake for the nearest deadline (or the end of an accept back-off).
        let mut wake = conns.iter().map(|c| c.deadline).min();
        if !accepting {
            wake = Some(wake.map_or(accept_after, |w| w.min(accept_after)));
        }
        let timeout = wake.map(|w| w.saturating_duration_since(now));
        if poll(&mut fds, timeout).is_err() {
            // EINTR, or ENOMEM: try again shortly rather than spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        let now = Instant::now();
        // Connections with something to do; a new one is read at once (a scraper's request
        // is usually there with it), so a flood of connections cannot push it out first.
        let ready: Vec<bool> = fds[1..].iter().map(PollFd::ready).collect();
        let mut i = 0;
        conns.retain_mut(|c| {
            let r = ready[i];
            i += 1;
            !(r && c.progress(status, now) == Progress::Done) && c.deadline > now
        });
        if fds[0].ready() {
            accept_all(listener, &mut conns, status, now, &mut accept_after);
        }
    }
}

/// Accepts every pending connection, reading each at once; beyond [`MAX_CONNECTIONS`] the
/// oldest connection still sending its head is closed.
fn accept_all(
    listener: &TcpListener,
    conns: &mut Vec<Conn>,
    status: &Shared,
    now: Instant,
    accept_after: &mut Instant,
) {
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                let mut c = Conn::new(stream, now);
                if c.progress(status, now) == Progress::Done {
                    continue;
                }
                if conns.len() >= MAX_CONNECTIONS {
                    let oldest = conns
                        .iter()
                        .enumerate()
                        .filter(|(_, c)| c.answer.is_none())
                        .min_by_key(|(_, c)| c.accepted)
                        .map(|(i, _)| i)
                        .unwrap_or(0);
                    conns.swap_remove(oldest);
                }
                conns.push(c);
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                // Out of descriptors and the like: stop accepting a moment rather than spin.
                *accept_after = now + ACCEPT_BACKOFF;
                return;
            }
        }
    }
}

/// The whole HTTP answer to a request head.
fn respond(head: &str, status: &Shared) -> Vec<u8> {
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (code, content_type, body) = match (method, path) {
        ("GET", "/metrics") => {
            let current = status
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone();
            (
                "200 OK",
                exposition::CONTENT_TYPE,
                exposition::render(current.as_deref(), now_ns()),
            )
        }
        (_, "/metrics") => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "only GET\n".to_string(),
        ),
        _ => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "culprit serves /metrics only\n".to_string(),
        ),
    };
    let allow = if code.starts_with("405") {
        "Allow: GET\r\n"
    } else {
        ""
    };
    format!(
        "HTTP/1.1 {code}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        let local = |p| SocketAddr::from(([127, 0, 0, 1], p));
        assert_eq!(parse_addr("9464").unwrap(), local(9464));
        assert_eq!(parse_addr(":9464").unwrap(), local(9464));
        assert_eq!(
            parse_addr("0.0.0.0:9464").unwrap(),
            SocketAddr::from(([0, 0, 0, 0], 9464))
        );
        assert!(parse_addr("[::1]:9464").unwrap().is_ipv6());
        let e = parse_addr("nonsense").unwrap_err().to_string();
        assert!(e.starts_with("nonsense: "), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    /// A busy port is one line naming the address; the server answers GET /metrics with the
    /// OpenMetrics content type and `# EOF`, and nothing else.
    #[test]
    fn serves_metrics_only() {
        let server = MetricsServer::start("127.0.0.1:0").unwrap();
        let addr = server.addr();
        let e = MetricsServer::start(&addr.to_string())
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!("{addr}: cannot listen on {addr}: address already in use")
        );
        let get = |req: &str| {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(req.as_bytes()).unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let ok = get("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
        assert!(ok.contains(&format!("Content-Type: {}\r\n", exposition::CONTENT_TYPE)));
        assert!(ok.ends_with("# EOF\n"), "{ok}");
        assert!(ok.contains("culprit_build_info{version="), "{ok}");
        let other = get("GET / HTTP/1.1\r\n\r\n");
        assert!(other.starts_with("HTTP/1.1 404 "), "{other}");
        let post = get("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
        assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
        // A client that sends a huge head is cut off, and the server goes on.
        let big = format!(
            "GET /metrics HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(100_000)
        );
        let mut s = TcpStream::connect(addr).unwrap();
        let _ = s.write_all(big.as_bytes());
        drop(s);
        assert!(get("GET /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200 OK"));
    }
}
