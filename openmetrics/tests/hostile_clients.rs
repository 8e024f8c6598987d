//! The metrics endpoint against clients that never finish (issue 30, case 5): a slow-loris
//! client sending a byte every 4 s, and 1,000 idle connections, while Prometheus scrapes.
//! Real sockets on 127.0.0.1, the real server ([`MetricsServer`]) in this process.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use culprit_openmetrics::serve::{IO_TIMEOUT, MAX_CONNECTIONS};
use culprit_openmetrics::MetricsServer;

/// A scrape: its answer's status line, and how long it took.
fn scrape(addr: SocketAddr) -> (String, Duration) {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    let status = out.lines().next().unwrap_or("").to_string();
    assert!(out.ends_with("# EOF\n"), "{out}");
    (status, t0.elapsed())
}

/// A scrape answered in under a second (two on a loaded machine would still be prompt; the
/// old single-threaded server took minutes).
fn prompt(addr: SocketAddr, what: &str) {
    let (status, took) = scrape(addr);
    assert_eq!(status, "HTTP/1.1 200 OK", "{what}");
    assert!(
        took < Duration::from_secs(2),
        "{what}: the scrape took {took:?}"
    );
}

/// Raises this process's descriptor limit to its hard limit (1,000 client sockets here and the
/// server's beside them: more than the usual soft limit of 1,024).
fn raise_fd_limit() {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to our own struct.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut r);
        r.rlim_cur = r.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &r);
    }
}

/// The tests count this process's descriptors: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// A client sending one byte of its request every 4 s (each read of the old server's timed out
/// after 5 s, so it held the one thread for ever): scrapes are answered meanwhile, and the
/// server closes the slow client once the whole-request deadline has passed.
#[test]
fn a_slow_loris_client_holds_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let server = MetricsServer::start("127.0.0.1:0").unwrap();
    let addr = server.addr();
    let t0 = Instant::now();
    let loris = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        // Between bytes it waits 4 s for the server: an answer, or the server hanging up.
        s.set_read_timeout(Some(Duration::from_secs(4))).unwrap();
        let mut out = Vec::new();
        let mut buf = [0u8; 256];
        for b in b"GET /metrics HTTP/1.1\r\n\r\n" {
            if s.write_all(&[*b]).is_err() {
                break;
            }
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break,
            }
            if t0.elapsed() > Duration::from_secs(30) {
                break;
            }
        }
        (t0.elapsed(), out)
    });
    std::thread::sleep(Duration::from_millis(500));
    for i in 0..3 {
        prompt(addr, &format!("scrape {i} beside the slow client"));
        std::thread::sleep(Duration::from_secs(2));
    }
    let (gone_after, answer) = loris.join().unwrap();
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    // Closed at the deadline (give or take a loaded machine), not when it finished.
    assert!(
        gone_after >= IO_TIMEOUT && gone_after < IO_TIMEOUT + Duration::from_secs(3),
        "closed after {gone_after:?}"
    );
}

/// 1,000 connections that send nothing (before: each held the thread for 5 s, so a scrape
/// waited about 80 minutes, or 11 when the kernel dropped some): a scrape is answered at once,
/// and the server keeps at most MAX_CONNECTIONS of them open.
#[test]
fn a_thousand_idle_connections_do_not_block_a_scrape() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    raise_fd_limit();
    let server = MetricsServer::start("127.0.0.1:0").unwrap();
    let addr = server.addr();
    prompt(addr, "the first scrape");
    let before = open_fds();
    let idle: Vec<TcpStream> = (0..1000)
        .map(|_| TcpStream::connect(addr).expect("connect an idle client"))
        .collect();
    prompt(addr, "a scrape beside 1,000 idle connections");
    prompt(addr, "a second scrape");
    // This process holds the 1,000 client sockets; the server's side of them is capped.
    let server_side = open_fds().saturating_sub(before + idle.len());
    assert!(
        server_side <= MAX_CONNECTIONS + 2,
        "the server holds {server_side} connections (cap {MAX_CONNECTIONS})"
    );
    // Past the deadline every idle connection is closed.
    std::thread::sleep(IO_TIMEOUT + Duration::from_secs(2));
    let server_side = open_fds().saturating_sub(before + idle.len());
    assert!(
        server_side <= 2,
        "{server_side} idle connections still open"
    );
    prompt(addr, "a scrape after the deadline");
    drop(idle);
}
