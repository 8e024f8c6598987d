//! `culprit ship` and `culprit diagnose --follow nats://…` through a real `nats-server -js`
//! (started on a free port in a temporary directory): four traced processes of
//! tests/c/diag_server.c, one doing extra work in one function, ship their records; the
//! follower mirrors them and names the faulty node, while a shipper and the broker are killed
//! with SIGKILL and restarted. Afterwards every mirrored file is byte for byte the local file's
//! committed part: nothing lost, nothing written twice. And hostile messages on the stream are
//! refused, each in one line, and nothing is written outside the mirror.

use std::io::{BufRead, BufReader};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use culprit_analysis::time::Timestamp;
use culprit_format::decode::parse_header;
use culprit_tests::*;
use serde::Deserialize;

const NODES: [&str; 4] = ["srv0", "srv1", "srv2", "srv3"];
const GROUP: &str = "e2e";
/// The token of the broker that needs one.
const TOKEN: &str = "t0ken-for-culprit-tests";

/// The tests of this file take turns: four traced servers beside another test's work on two
/// cores blur who is slow.
static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn turn() -> std::sync::MutexGuard<'static, ()> {
    TURN.lock().unwrap_or_else(|e| e.into_inner())
}

/// This test's turn and temporary directory; `None` (skipped, said) without nats-server.
fn start(tag: &str) -> Option<(std::sync::MutexGuard<'static, ()>, TempDir)> {
    let have = Command::new("nats-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !require(have, "nats-server (scripts/install-deps)") {
        return None;
    }
    Some((turn(), TempDir::new(tag)))
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `nats-server -js` on 127.0.0.1:`port`, its store in `dir`, clients authenticated by
/// `token` when there is one, `extra` flags (TLS) after.
struct Broker {
    child: Child,
    port: u16,
    dir: PathBuf,
    token: Option<&'static str>,
}

impl Broker {
    fn start(dir: &Path, port: u16, token: Option<&'static str>) -> Broker {
        Broker::start_with(dir, port, token, &[])
    }

    fn start_with(dir: &Path, port: u16, token: Option<&'static str>, extra: &[&Path]) -> Broker {
        let mut cmd = Command::new("nats-server");
        cmd.args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(dir);
        if let Some(t) = token {
            cmd.args(["--auth", t]);
        }
        if let [cert, key] = extra {
            cmd.arg("--tls")
                .arg("--tlscert")
                .arg(cert)
                .arg("--tlskey")
                .arg(key);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "nats-server did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Broker {
            child,
            port,
            dir: dir.to_path_buf(),
            token,
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// SIGKILL, and a new server on the same port and store.
    fn crash_and_restart(&mut self, down: Duration) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
        std::thread::sleep(down);
        let b = Broker::start(&self.dir, self.port, self.token);
        let old = std::mem::replace(self, b);
        std::mem::forget(old);
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `culprit` with the broker's token (if any) in the environment.
fn culprit_for(broker: &Broker) -> Command {
    let mut c = culprit();
    c.env_remove("CULPRIT_NATS_TOKEN");
    if let Some(t) = broker.token {
        c.env("CULPRIT_NATS_TOKEN", t);
    }
    c
}

fn ship(broker: &Broker, node_dir: &Path) -> Child {
    culprit_for(broker)
        .args([
            "ship",
            "--to",
            &broker.url(),
            "--group",
            GROUP,
            "--until-ended",
        ])
        .arg(node_dir)
        .stderr(Stdio::null())
        .spawn()
        .expect("start culprit ship")
}

/// Waits for `c` at most `limit`; kills it and fails past that.
fn wait_for(c: &mut Child, what: &str, limit: Duration) -> std::process::ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            return st;
        }
        if t0.elapsed() > limit {
            let _ = c.kill();
            panic!("{what} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Asserts that every `.cul` file under `local/<node>/` is in `mirror/<node>/` with the same
/// committed end and state and the same bytes from its data offset to its committed end, and
/// that the mirror holds no other file.
fn assert_mirrored(local: &Path, mirror: &Path) {
    for node in NODES {
        let names = |d: &Path| -> Vec<String> {
            let mut v: Vec<String> = std::fs::read_dir(d)
                .unwrap_or_else(|e| panic!("{}: {e}", d.display()))
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|n| n.ends_with(".cul"))
                .collect();
            v.sort();
            v
        };
        let files = names(&local.join(node));
        assert!(!files.is_empty(), "{node} wrote nothing");
        assert_eq!(files, names(&mirror.join(node)), "{node}: files");
        for f in files {
            let a = std::fs::read(local.join(node).join(&f)).unwrap();
            let b = std::fs::read(mirror.join(node).join(&f)).unwrap();
            let (ha, _) = parse_header(&a).unwrap();
            let (hb, _) = parse_header(&b).unwrap();
            assert_eq!(
                ha.committed_end, hb.committed_end,
                "{node}/{f}: committed end"
            );
            assert_eq!(ha.state, hb.state, "{node}/{f}: state");
            let range = ha.data_offset as usize..ha.committed_end as usize;
            assert!(
                a[range.clone()] == b[range.clone()],
                "{node}/{f}: mirrored bytes differ"
            );
        }
    }
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The verdict lines stored on `culprit.<group>.verdicts`.
fn stored_verdicts(url: &str) -> Vec<serde_json::Value> {
    use async_nats::jetstream::{self, consumer};
    use futures_util::StreamExt;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = async_nats::connect(url).await.unwrap();
        let js = jetstream::new(client);
        let stream = js.get_stream(format!("CULPRIT_{GROUP}")).await.unwrap();
        let c = stream
            .create_consumer(consumer::pull::OrderedConfig {
                filter_subject: format!("culprit.{GROUP}.verdicts"),
                ..Default::default()
            })
            .await
            .unwrap();
        let mut msgs = c.messages().await.unwrap();
        let mut out = Vec::new();
        while let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_secs(2), msgs.next()).await
        {
            out.push(serde_json::from_slice(&m.payload).unwrap());
        }
        out
    })
}

/// Four nodes ship through a broker that is killed and restarted, one shipper killed and
/// restarted; the follower names srv2 (extra work in checksum_payload from 3 s), publishes each
/// window's verdict, and its mirror is byte-identical to the nodes' committed data. ~25 s.
#[test]
fn ships_and_follows_through_crashes() {
    let Some((_turn, dir)) = start("nats-e2e") else {
        return;
    };
    let exe = dir.join("srv");
    gcc(
        &[&c_source("diag_server.c")],
        &exe,
        &["-O0", "-g", "-finstrument-functions"],
    );
    let (data, mirror) = (dir.join("data"), dir.join("mirror"));
    let mut broker = Broker::start(&dir.join("js"), free_port(), None);
    let url = broker.url();
    let mut servers: Vec<Child> = NODES
        .iter()
        .map(|n| {
            // As root at nice −10, as tests/tests/diagnose_real.rs does: a server waiting
            // for a CPU this shared machine gives to other work looks slow.
            let mut c = if is_root() {
                let mut c = Command::new("nice");
                c.args(["-n", "-10"]).arg(&exe);
                c
            } else {
                Command::new(&exe)
            };
            c.arg("12")
                .env("CULPRIT_DIR", &data)
                .env("CULPRIT_NODE", n)
                .env("CULPRIT_INTERVAL_MS", "100")
                .env("LD_PRELOAD", runtime_lib())
                .stdout(Stdio::null());
            if *n == "srv2" {
                c.args(["work", "checksum_payload", "16", "3"]);
            }
            c.spawn().unwrap()
        })
        .collect();
    let t0 = Instant::now();
    while NODES.iter().any(|n| !data.join(n).exists()) {
        assert!(t0.elapsed() < Duration::from_secs(10), "no data appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut shippers: Vec<Child> = NODES.iter().map(|n| ship(&broker, &data.join(n))).collect();
    // The follower starts once every node shipped (a window closed before a node's first
    // record is judged without it, which the offline diagnosis below would not do).
    let t0 = Instant::now();
    while NODES
        .iter()
        .any(|n| !data.join(n).join(format!(".ship-{GROUP}.state")).exists())
    {
        assert!(t0.elapsed() < Duration::from_secs(20), "nothing shipped");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut follow = culprit()
        .arg("diagnose")
        .arg(format!("{url}/{GROUP}"))
        .arg("--mirror")
        .arg(&mirror)
        .args(SHORT_WINDOWS)
        .args(["--follow", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = follow.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        BufReader::new(out)
            .lines()
            .map(|l| (l.unwrap(), now_ns()))
            .collect::<Vec<_>>()
    });
    let err = follow.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        BufReader::new(err)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<_>>()
    });

    // A shipper dies mid-run and comes back; then the broker does.
    std::thread::sleep(Duration::from_secs(3));
    shippers[1].kill().unwrap();
    shippers[1].wait().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    shippers[1] = ship(&broker, &data.join("srv1"));
    std::thread::sleep(Duration::from_secs(2));
    broker.crash_and_restart(Duration::from_secs(1));

    for mut s in servers.drain(..) {
        assert!(s.wait().unwrap().success());
    }
    for (i, s) in shippers.iter_mut().enumerate() {
        let st = wait_for(
            s,
            &format!("culprit ship {}", NODES[i]),
            Duration::from_secs(30),
        );
        assert!(st.success(), "culprit ship {}: {st}", NODES[i]);
    }
    let st = wait_for(&mut follow, "diagnose --follow", Duration::from_secs(30));
    let lines = reader.join().unwrap();
    let stderr = err_reader.join().unwrap().join("\n");
    assert_eq!(st.code(), Some(1), "{lines:#?}\n{stderr}");
    assert!(!stderr.contains("refused"), "{stderr}");

    let json: Vec<(serde_json::Value, u128)> = lines
        .iter()
        .map(|(l, at)| (serde_json::from_str(l).unwrap(), *at))
        .collect();
    let (report, _) = json.last().unwrap();
    // The faulty node is flagged and ranked first; the diagnosis from the stream is the one
    // of the nodes' own files.
    let culprits = report["culprits"].as_array().unwrap();
    assert!(culprits.iter().any(|n| n == "srv2"), "{report:#}");
    assert_eq!(report["ranking"][0]["node"], "srv2", "{report:#}");
    let offline = culprit()
        .arg("diagnose")
        .arg(&data)
        .args(SHORT_WINDOWS)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(offline.status.code(), Some(1));
    let offline = stdout_json(&offline);
    assert_eq!(report["culprits"], offline["culprits"]);
    // Intervals that reached the follower after their window closed (a shipper down, a broker
    // restarting, on a loaded machine for longer than the windows wait) were judged without,
    // and are counted and said in the report (`late_intervals`); the offline diagnosis compares
    // them. The verdicts are the same whenever none came late.
    let late: Vec<(String, u64)> = report["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["nodes"].as_array().unwrap())
        .filter(|n| n["late_intervals"].as_u64().unwrap_or(0) > 0)
        .map(|n| {
            (
                n["node"].as_str().unwrap().to_string(),
                n["late_intervals"].as_u64().unwrap(),
            )
        })
        .collect();
    if report["verdicts"] != offline["verdicts"] {
        assert!(
            !late.is_empty(),
            "live and offline verdicts differ, and no interval came late:\n{:#}\n{:#}",
            report["verdicts"],
            offline["verdicts"]
        );
        eprintln!(
            "nats: intervals came late ({late:?}): the live verdicts differ in detail from the \
             offline ones:\n{:#}\n{:#}",
            report["verdicts"], offline["verdicts"]
        );
    }
    let windows: Vec<&(serde_json::Value, u128)> = json
        .iter()
        .filter(|(v, _)| v["event"] == "window")
        .collect();
    let (fired, seen) = windows
        .iter()
        .find(|(v, _)| {
            v["newly_faulty"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n == "srv2")
        })
        .unwrap_or_else(|| panic!("no window made srv2 faulty: {lines:#?}"));
    let end = window_end(fired);
    eprintln!(
        "nats: srv2 reported {} ms after the end of its window",
        (*seen as i128 - end as i128) / 1_000_000
    );
    let lat: Vec<i128> = windows
        .iter()
        .map(|(v, at)| *at as i128 - window_end(v) as i128)
        .collect();
    eprintln!(
        "nats: window end → verdict published, over {} windows: median {} ms, max {} ms",
        lat.len(),
        median(&lat) / 1_000_000,
        lat.iter().max().unwrap() / 1_000_000
    );

    // Every window's verdict is on the stream, in order.
    let stored = stored_verdicts(&url);
    let printed: Vec<&serde_json::Value> = windows.iter().map(|(v, _)| v).collect();
    assert_eq!(stored.iter().collect::<Vec<_>>(), printed);

    assert_mirrored(&data, &mirror);
}

/// The end of a window line (`diagnose --follow --json`), ns since the epoch, read with the
/// report's own time type.
fn window_end(line: &serde_json::Value) -> u64 {
    let end = Timestamp::deserialize(&line["end"]);
    end.unwrap_or_else(|e| panic!("window end: {e}: {line}"))
        .ns()
}

fn median(v: &[i128]) -> i128 {
    let mut s = v.to_vec();
    s.sort();
    s[s.len() / 2]
}

/// A message as published: subject, headers, payload.
type Raw = (String, Vec<(&'static str, String)>, Vec<u8>);

/// Publishes messages on the group's stream, retrying until the stream exists (the follower
/// creates it).
fn publish_raw(url: &str, token: Option<&str>, msgs: Vec<Raw>) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut o = async_nats::ConnectOptions::new();
        if let Some(t) = token {
            o = o.token(t.into());
        }
        let client = o.connect(url).await.unwrap();
        let js = async_nats::jetstream::new(client);
        for (subject, headers, payload) in msgs {
            let t0 = Instant::now();
            loop {
                let mut h = async_nats::HeaderMap::new();
                for (k, v) in &headers {
                    h.insert(*k, v.as_str());
                }
                let sent = match js
                    .publish_with_headers(subject.clone(), h, payload.clone().into())
                    .await
                {
                    Ok(ack) => ack.await.map(|_| ()).map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                match sent {
                    Ok(()) => break,
                    Err(e) if t0.elapsed() > Duration::from_secs(20) => panic!("publish: {e}"),
                    Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                }
            }
        }
    })
}

/// Without credentials, `ship` refuses a broker on another machine (before any connection);
/// `--insecure` sends anyway.
#[test]
fn a_remote_broker_needs_credentials() {
    let dir = TempDir::new("nats-remote");
    std::fs::create_dir_all(dir.join("n1")).unwrap();
    let out = culprit()
        .env_remove("CULPRIT_NATS_TOKEN")
        .args(["ship", "--to", "nats://192.0.2.1:4222", "--group", "g"])
        .arg(dir.join("n1"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("no credentials") && err.contains("--insecure"),
        "{err}"
    );
}

/// Messages on the stream with a node or file name that is a path, an offset far past the
/// file's end, a foreign format version or no culprit headers at all are refused, one line
/// each, and nothing is written outside the mirror root; the real nodes' records shipped
/// beside them are mirrored whole. A node the mirror cannot hold (a file planted where its
/// directory goes) costs its own chunks only (before: the follower stopped), and a refused
/// first chunk leaves no empty node directory (before: it did). The broker wants a token, which every client gets from
/// CULPRIT_NATS_TOKEN. ~5 s.
#[test]
fn hostile_messages_are_refused() {
    let Some((_turn, dir)) = start("nats-hostile") else {
        return;
    };
    let (data, mirror) = (dir.join("data"), dir.join("mirror"));
    write_peer_samples(&data, true, false);
    let broker = Broker::start(&dir.join("js"), free_port(), Some(TOKEN));
    let url = broker.url();
    let mut follow = culprit_for(&broker)
        .arg("diagnose")
        .arg(format!("{url}/{GROUP}"))
        .arg("--mirror")
        .arg(&mirror)
        .args(["--follow", "--for", "60s", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A valid file header whose committed end is the chunk's end.
    let local = std::fs::read(node_file(&data, "io0")).unwrap();
    let header = |end: u64| {
        let mut h = local[..128].to_vec();
        h[32..40].copy_from_slice(&end.to_le_bytes());
        h
    };
    let msg = |node: &str, file: &str, offset: u64, version: &str| {
        let mut payload = header(offset + 8);
        payload.extend_from_slice(&[0; 8]);
        let headers = vec![
            ("Culprit-Ship", version.to_string()),
            ("Culprit-Node", node.to_string()),
            ("Culprit-File", file.to_string()),
            ("Culprit-Offset", offset.to_string()),
        ];
        (format!("culprit.{GROUP}.io0"), headers, payload)
    };
    // A node the mirror cannot hold (a regular file planted where its directory would go):
    // that node's chunks are refused, the follower goes on.
    std::fs::create_dir_all(&mirror).unwrap();
    std::fs::write(mirror.join("planted"), b"not a directory").unwrap();
    let mut planted = msg("planted", "samples-1.cul", 4096, "1");
    planted.0 = format!("culprit.{GROUP}.planted");
    // A first chunk of a new node that is refused leaves no directory behind.
    let mut ghost = msg("ghost", "samples-1.cul", 4096 + 8, "1");
    ghost.0 = format!("culprit.{GROUP}.ghost");
    let hostile = vec![
        planted,
        ghost,
        msg("../evil", "samples-1.cul", 4096, "1"),
        msg("io0", "../../escape.cul", 4096, "1"),
        msg("io0", "far.cul", 4096 + (1 << 30), "1"),
        msg("io0", "samples-9.cul", 4096, "9"),
        (
            format!("culprit.{GROUP}.io0"),
            Vec::new(),
            b"hello".to_vec(),
        ),
    ];
    let n_hostile = hostile.len();
    publish_raw(&url, Some(TOKEN), hostile);
    let mut shippers: Vec<Child> = (0..4)
        .map(|n| ship(&broker, &data.join(format!("io{n}"))))
        .collect();
    for s in &mut shippers {
        assert!(wait_for(s, "culprit ship", Duration::from_secs(30)).success());
    }
    let st = wait_for(&mut follow, "diagnose --follow", Duration::from_secs(60));
    let o = follow.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(st.code().is_some_and(|c| c < 2), "{st}: {stderr}");
    let refused: Vec<&str> = stderr.lines().filter(|l| l.contains("refused")).collect();
    assert_eq!(refused.len(), n_hostile, "{stderr}");
    for (line, says) in refused.iter().zip([
        "planted",
        "not at the data offset",
        "node name",
        "file name",
        "not at the data offset",
        "version 9",
        "not a culprit chunk",
    ]) {
        assert!(line.contains(says), "{line:?} should say {says:?}");
    }
    assert!(!dir.join("evil").exists() && !dir.join("escape.cul").exists());
    assert!(!mirror.join("io0/far.cul").exists());
    let mut nodes: Vec<String> = std::fs::read_dir(&mirror)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    nodes.sort();
    assert_eq!(nodes, ["io0", "io1", "io2", "io3", "planted"]);
    assert_eq!(
        std::fs::read(mirror.join("planted")).unwrap(),
        b"not a directory"
    );
    for n in 0..4 {
        let node = format!("io{n}");
        let a = std::fs::read(node_file(&data, &node)).unwrap();
        let b = std::fs::read(node_file(&mirror, &node)).unwrap();
        assert_eq!(a, b, "{node}: the mirror differs");
    }
}

/// Runs openssl with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    run_ok(Command::new("openssl").current_dir(dir).args(args));
}

/// Over TLS (a certificate authority made here, the broker's certificate signed by it, given
/// with --tls-ca) with the right token, a node is shipped whole; with a wrong token `ship`
/// stops at once with one line saying the broker refused the credentials. ~5 s.
#[test]
fn tls_and_token() {
    let Some((_turn, dir)) = start("nats-tls") else {
        return;
    };
    let d = dir.path();
    openssl(
        d,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=culprit test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign",
        ],
    );
    openssl(
        d,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "srv.key",
            "-out",
            "srv.csr",
            "-subj",
            "/CN=localhost",
        ],
    );
    std::fs::write(
        d.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "srv.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "srv.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
    let data = dir.join("data");
    write_peer_samples(&data, false, false);
    let broker = Broker::start_with(
        &dir.join("js"),
        free_port(),
        Some(TOKEN),
        &[&dir.join("srv.pem"), &dir.join("srv.key")],
    );
    let url = format!("tls://127.0.0.1:{}", broker.port);
    let ship_with = |token: &str| {
        culprit()
            .env("CULPRIT_NATS_TOKEN", token)
            .args([
                "ship",
                "--to",
                &url,
                "--group",
                GROUP,
                "--until-ended",
                "--tls-ca",
            ])
            .arg(dir.join("ca.pem"))
            .arg(data.join("io0"))
            .output()
            .unwrap()
    };
    let o = ship_with(TOKEN);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let state = std::fs::read_to_string(data.join("io0").join(format!(".ship-{GROUP}.state")));
    let len = std::fs::metadata(node_file(&data, "io0")).unwrap().len();
    assert!(
        state.unwrap().ends_with(&format!(" {len} ended\n")),
        "{err}"
    );
    std::fs::remove_file(data.join("io0").join(format!(".ship-{GROUP}.state"))).unwrap();
    let o = ship_with("not-the-token");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let last = err.lines().last().unwrap();
    assert!(last.contains("refused the credentials"), "{err}");
}

/// The first chunk of a new file named `file` of `node`: the header of the samples file
/// `local` with its committed end at the end of its first record, and that record (an Info
/// record: a valid, tiny file).
fn first_chunk(local: &[u8], node: &str, file: &str) -> Raw {
    let (h, _) = parse_header(local).unwrap();
    let recs = record_offsets(local);
    let (from, to) = (h.data_offset as usize, recs[1]);
    let mut payload = local[..128].to_vec();
    payload[32..40].copy_from_slice(&(to as u64).to_le_bytes());
    payload[20..24].copy_from_slice(&0u32.to_le_bytes()); // open
    payload.extend_from_slice(&local[from..to]);
    let headers = vec![
        ("Culprit-Ship", "1".to_string()),
        ("Culprit-Node", node.to_string()),
        ("Culprit-File", file.to_string()),
        ("Culprit-Offset", from.to_string()),
        ("Nats-Msg-Id", format!("{node}/{file}/{from}-{to}")),
    ];
    (format!("culprit.{GROUP}.{node}"), headers, payload)
}

/// Issue 30, case 4: ~1,000 tiny messages naming new files (and new nodes) used to end the
/// follower under the usual `ulimit -n 1024` ("Too many open files": it kept a descriptor per
/// mirrored file and per node). With 1,200 new files on 600 nodes under that limit, the
/// follower's descriptors stay bounded, it goes on, and the real nodes shipped after the flood
/// are mirrored whole. ~20 s.
#[test]
fn a_flood_of_new_files_keeps_the_follower_within_its_descriptors() {
    let Some((_turn, dir)) = start("nats-flood") else {
        return;
    };
    let (data, mirror) = (dir.join("data"), dir.join("mirror"));
    write_peer_samples(&data, true, false);
    let broker = Broker::start(&dir.join("js"), free_port(), None);
    let url = broker.url();
    let mut follow = Command::new("sh")
        .args(["-c", "ulimit -n 1024 && exec \"$0\" \"$@\""])
        .arg(culprit_bin())
        .arg("diagnose")
        .arg(format!("{url}/{GROUP}"))
        .arg("--mirror")
        .arg(&mirror)
        .args(["--follow", "--for", "40s", "--json"])
        .env_remove("CULPRIT_NATS_TOKEN")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = follow.id();
    // The follower's open descriptors, sampled while it runs.
    let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sampler = {
        let most = most.clone();
        std::thread::spawn(move || {
            while let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
                most.fetch_max(rd.count(), std::sync::atomic::Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let local = std::fs::read(node_file(&data, "io0")).unwrap();
    let mut flood: Vec<Raw> = (0..600)
        .map(|i| first_chunk(&local, "flood", &format!("samples-{i}.cul")))
        .collect();
    flood.extend((0..600).map(|i| first_chunk(&local, &format!("f{i}"), "samples-1.cul")));
    publish_raw(&url, None, flood);
    let mut shippers: Vec<Child> = (0..4)
        .map(|n| ship(&broker, &data.join(format!("io{n}"))))
        .collect();
    for s in &mut shippers {
        assert!(wait_for(s, "culprit ship", Duration::from_secs(30)).success());
    }
    // The real nodes' records reach the mirror whole.
    let t0 = Instant::now();
    let whole = |n: u32| {
        let node = format!("io{n}");
        let a = std::fs::read(node_file(&data, &node)).unwrap();
        let has_file = std::fs::read_dir(mirror.join(&node))
            .is_ok_and(|mut d| d.any(|e| e.is_ok_and(|e| e.path().extension().is_some())));
        has_file && std::fs::read(node_file(&mirror, &node)).is_ok_and(|b| b == a)
    };
    while !(0..4).all(whole) {
        if t0.elapsed() > Duration::from_secs(30) || follow.try_wait().unwrap().is_some() {
            let _ = follow.kill();
            let o = follow.wait_with_output().unwrap();
            panic!(
                "the real nodes were not mirrored whole; the follower said:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = follow.kill();
    let o = follow.wait_with_output().unwrap();
    sampler.join().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("Too many open files"), "{stderr}");
    assert_eq!(
        std::fs::read_dir(mirror.join("flood")).unwrap().count(),
        600,
        "{stderr}"
    );
    let most = most.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!("nats flood: the follower held at most {most} descriptors");
    assert!(most <= 200, "the follower held {most} descriptors");
}

/// The limits of group `group`'s stream as the broker has them: (max_bytes, max_age); `None`
/// while there is no such stream.
fn stream_limits(url: &str, group: &str) -> Option<(i64, Duration)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let client = async_nats::connect(url).await.unwrap();
        let js = async_nats::jetstream::new(client);
        let mut s = js.get_stream(format!("CULPRIT_{group}")).await.ok()?;
        let c = &s.info().await.ok()?.config;
        Some((c.max_bytes, c.max_age))
    })
}

/// Issue 30, case 4: neither the stream nor the mirror grows without bound. `ship` creates the
/// stream with `--stream-max-bytes` / `--stream-max-age` (the follower, when it comes first,
/// with the defaults: 1 GiB, a day); a follower whose mirror reaches `--mirror-max-size` stops
/// mirroring with one line (the records stay on the stream) and its mirror stays within the
/// limit. ~15 s.
#[test]
fn the_stream_and_the_mirror_are_bounded() {
    let Some((_turn, dir)) = start("nats-limits") else {
        return;
    };
    let (data, mirror) = (dir.join("data"), dir.join("mirror"));
    write_peer_samples(&data, true, false);
    let broker = Broker::start(&dir.join("js"), free_port(), None);
    let url = broker.url();
    // `ship` creates its group's stream with the limits it is given.
    let o = culprit_for(&broker)
        .args(["ship", "--to", &url, "--group", "shipped", "--until-ended"])
        .args(["--stream-max-bytes", "64M", "--stream-max-age", "2h"])
        .arg(data.join("io0"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        stream_limits(&url, "shipped"),
        Some((64 << 20, Duration::from_secs(7200)))
    );
    // The follower comes first on its group: the defaults. Its mirror may hold 20 KiB: the
    // four nodes' files need more.
    let limit: u64 = 20 << 10;
    let mut follow = culprit_for(&broker)
        .arg("diagnose")
        .arg(format!("{url}/{GROUP}"))
        .arg("--mirror")
        .arg(&mirror)
        .args(["--mirror-max-size", "20K", "--follow", "--for", "15s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while stream_limits(&url, GROUP).is_none() {
        assert!(t0.elapsed() < Duration::from_secs(20), "no stream");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(
        stream_limits(&url, GROUP),
        Some((1 << 30, Duration::from_secs(24 * 3600)))
    );
    let mut shippers: Vec<Child> = (0..4)
        .map(|n| ship(&broker, &data.join(format!("io{n}"))))
        .collect();
    for s in &mut shippers {
        assert!(wait_for(s, "culprit ship", Duration::from_secs(30)).success());
    }
    let st = wait_for(&mut follow, "diagnose --follow", Duration::from_secs(60));
    let o = follow.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    let full: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("mirroring stops"))
        .collect();
    assert_eq!(full.len(), 1, "{st}: {stderr}");
    assert!(full[0].contains("--mirror-max-size"), "{stderr}");
    // The mirror's disk use: its files' blocks, within the limit (each file's last block
    // rounded up to the file system's 4 KiB).
    let mut used = 0;
    let mut files = 0;
    for node in std::fs::read_dir(&mirror).unwrap().flatten() {
        for f in std::fs::read_dir(node.path()).unwrap().flatten() {
            use std::os::unix::fs::MetadataExt;
            used += f.metadata().unwrap().blocks() * 512;
            files += 1;
        }
    }
    assert!(files > 0, "{stderr}");
    assert!(
        used <= limit + 4096 * files,
        "the mirror holds {used} bytes in {files} files (limit {limit}): {stderr}"
    );
}
