//! The HTTP endpoint of `diagnose --follow --metrics-listen ADDR`: `GET /metrics` answers the
//! latest [`LiveStatus`] as OpenMetrics text ([`crate::exposition`]); nothing else is served.
//!
//! Deliberately small: one thread, std's `TcpListener`, one request per connection, requests
//! read with a size cap and timeouts (a slow or hostile client holds the thread for at most
//! [`IO_TIMEOUT`] and can send no more than [`MAX_REQUEST`] bytes). Bound to 127.0.0.1 unless
//! an address names another interface: the metrics name nodes and functions.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use culprit_analysis::live::LiveStatus;
use culprit_analysis::time::now_ns;

use crate::exposition;

/// Longest time a client may take to send its request or read the answer.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest request head read (request line and headers).
pub const MAX_REQUEST: usize = 8192;

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
                std::io::ErrorKind::AddrInUse => "address already in use".to_string(),
                std::io::ErrorKind::AddrNotAvailable => {
                    "no interface of this machine has that address".to_string()
                }
                std::io::ErrorKind::PermissionDenied => {
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
        let status: Shared = Arc::new(Mutex::new(None));
        let shared = Arc::clone(&status);
        std::thread::Builder::new()
            .name("metrics".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    match conn {
                        // A failed answer concerns that client only.
                        Ok(stream) => {
                            let _ = answer(stream, &shared);
                        }
                        // Out of file descriptors and the like: wait rather than spin.
                        Err(_) => std::thread::sleep(Duration::from_millis(100)),
                    }
                }
            })
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

/// Reads one request and answers it.
fn answer(mut stream: TcpStream, status: &Shared) -> std::io::Result<()> {
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    let head = read_head(&mut stream)?;
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
    write!(
        stream,
        "HTTP/1.1 {code}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{allow}\
         Connection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

/// The request head, up to the blank line (or [`MAX_REQUEST`] bytes, or the end of input).
fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while head.len() < MAX_REQUEST && !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
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
