//! The follower: a durable JetStream consumer mirrors a group's chunks into a local data root
//! (in a thread of its own), and the verdicts the command line hands it are published on
//! `culprit.<group>.verdicts`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use async_nats::jetstream::{self, consumer, AckKind};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::chunk::{self, Chunk};
use crate::config::FollowConfig;
use crate::error::Error;
use crate::mirror::{Applied, Mirror};
use crate::{ensure_stream, runtime, Backoff};

const WHO: &str = "culprit follow";

/// Counts of what the follower did, and why it stopped if it did.
#[derive(Clone, Debug, Default)]
pub struct FollowStatus {
    /// Nodes mirrored.
    pub nodes: usize,
    /// Chunks written.
    pub written: u64,
    /// Chunks dropped as duplicates.
    pub duplicates: u64,
    /// Messages refused.
    pub refused: u64,
    /// The error that stopped the follower.
    pub failed: Option<String>,
    /// Why mirroring stopped with the mirror full (verdicts are still published).
    pub full: Option<String>,
    /// Mirrored files open now (at most `mirror::MAX_OPEN_FILES`).
    pub open_files: usize,
}

/// A running follower.
#[derive(Debug)]
pub struct Follower {
    root: PathBuf,
    verdicts: mpsc::UnboundedSender<Vec<u8>>,
    status: Arc<Mutex<FollowStatus>>,
    thread: JoinHandle<()>,
}

impl Follower {
    /// Opens the mirror root and starts mirroring.
    pub fn start(cfg: FollowConfig) -> Result<Follower, Error> {
        if !chunk::is_group_name(&cfg.group) {
            return Err(Error::Usage(format!(
                "group {:?}: use 1 to 64 of [A-Za-z0-9_-] (nats://HOST:PORT/GROUP)",
                cfg.group
            )));
        }
        let mirror = Mirror::open(&cfg.mirror, cfg.mirror_max_bytes)?;
        let root = mirror.root();
        let rt = runtime()?;
        let (tx, rx) = mpsc::unbounded_channel();
        let status = Arc::new(Mutex::new(FollowStatus::default()));
        let st = status.clone();
        let thread = std::thread::Builder::new()
            .name("culprit-follow".into())
            .spawn(move || {
                let res = rt.block_on(consume(&cfg, mirror, &st, rx));
                if let Err(e) = res {
                    eprintln!("{WHO}: {e}");
                    st.lock().expect("status").failed = Some(e.to_string());
                }
            })
            .map_err(|e| Error::Io(format!("cannot start the follower: {e}")))?;
        Ok(Follower {
            root,
            verdicts: tx,
            status,
            thread,
        })
    }

    /// The mirror root (the data root to diagnose).
    pub fn root(&self) -> &std::path::Path {
        &self.root
    }

    /// What the follower did so far.
    pub fn status(&self) -> FollowStatus {
        self.status.lock().expect("status").clone()
    }

    /// Waits until a node is mirrored, then until no other node has appeared for `settle`:
    /// a window that closes before a peer's first record is judged without that peer.
    pub fn wait_for_nodes(&self, settle: Duration) -> Result<usize, Error> {
        let mut seen = (0, std::time::Instant::now());
        loop {
            let s = self.status();
            if let Some(e) = s.failed {
                return Err(Error::Broker(e));
            }
            if s.nodes != seen.0 {
                seen = (s.nodes, std::time::Instant::now());
            } else if s.nodes > 0 && seen.1.elapsed() >= settle {
                return Ok(s.nodes);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Publishes one verdict line (JSON) on `culprit.<group>.verdicts`.
    pub fn publish_verdict(&self, line: Vec<u8>) {
        let _ = self.verdicts.send(line);
    }

    /// Stops mirroring once the verdicts handed over are published (waiting at most
    /// `timeout` for a broker that is away).
    pub fn finish(self, timeout: Duration) {
        drop(self.verdicts);
        let started = std::time::Instant::now();
        while !self.thread.is_finished() && started.elapsed() < timeout {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

async fn consume(
    cfg: &FollowConfig,
    mut mirror: Mirror,
    status: &Mutex<FollowStatus>,
    mut verdicts: mpsc::UnboundedReceiver<Vec<u8>>,
) -> Result<(), Error> {
    let client = cfg.broker.connect("culprit follow", WHO).await?;
    let js = jetstream::new(client.clone());
    let verdict_subject = chunk::subject(&cfg.group, chunk::VERDICTS);
    let mut mirroring = true;
    loop {
        let stream = ensure_stream(&js, &cfg.group, cfg.stream, WHO).await?;
        let config = consumer::pull::Config {
            durable_name: Some(cfg.durable.clone()),
            ack_policy: consumer::AckPolicy::Explicit,
            deliver_policy: consumer::DeliverPolicy::All,
            ..Default::default()
        };
        let mut backoff = Backoff::new(WHO);
        let mut messages = match stream
            .get_or_create_consumer::<consumer::pull::Config>(&cfg.durable, config)
            .await
        {
            Ok(c) => match c.messages().await {
                Ok(m) => m,
                Err(e) => {
                    backoff.failed(&format!("cannot consume: {e}")).await?;
                    continue;
                }
            },
            Err(e) => {
                backoff
                    .failed(&format!("cannot create consumer: {e}"))
                    .await?;
                continue;
            }
        };
        loop {
            tokio::select! {
                m = messages.next(), if mirroring => match m {
                    Some(Ok(m)) => {
                        let kind = match handle(cfg, &mut mirror, status, &verdict_subject, &m) {
                            Ok(true) => AckKind::Ack,
                            Ok(false) => AckKind::Term,
                            Err(Error::MirrorFull(why)) => {
                                // Not acknowledged: the broker keeps it (and what follows) for
                                // a follower restarted with room. Verdicts still go out.
                                eprintln!("{WHO}: {why}: mirroring stops");
                                status.lock().expect("status").full = Some(why);
                                mirroring = false;
                                continue;
                            }
                            Err(e) => return Err(e),
                        };
                        backoff.recovered("receiving");
                        if let Err(e) = m.ack_with(kind).await {
                            backoff.failed(&format!("acknowledgement lost ({e})")).await?;
                        }
                    }
                    Some(Err(e)) => backoff.failed(&format!("consumer: {e}")).await?,
                    None => break,
                },
                v = verdicts.recv() => match v {
                    Some(line) => {
                        if let Err(e) = client.publish(verdict_subject.clone(), line.into()).await {
                            eprintln!("{WHO}: cannot publish a verdict: {e}");
                        }
                    }
                    // The diagnosis ended (Follower::finish): the verdicts out, then stop.
                    None => {
                        let _ = client.flush().await;
                        return Ok(());
                    }
                },
            }
        }
    }
}

/// Mirrors one message; false when it is refused (said in one line): bad data, or a node or
/// file the mirror cannot hold (a directory refused, a name taken by something else), which
/// costs that node its chunk, never the follower. A full mirror is [`Error::MirrorFull`]; a
/// local write error stops the follower.
fn handle(
    cfg: &FollowConfig,
    mirror: &mut Mirror,
    status: &Mutex<FollowStatus>,
    verdict_subject: &str,
    m: &jetstream::Message,
) -> Result<bool, Error> {
    if m.subject.as_str() == verdict_subject {
        return Ok(true);
    }
    let applied = Chunk::from_message(&cfg.group, &m.subject, m.headers.as_ref(), &m.payload)
        .map_err(Error::Hostile)
        .and_then(|c| mirror.apply(&c));
    let mut s = status.lock().expect("status");
    match applied {
        Ok(Applied::Written) => s.written += 1,
        Ok(Applied::Duplicate) => s.duplicates += 1,
        Err(Error::Hostile(why)) => {
            eprintln!("{WHO}: refused a message on {:.120}: {why}", m.subject);
            s.refused += 1;
            return Ok(false);
        }
        Err(Error::Dir(e)) if concerns_one_node(&e) => {
            eprintln!("{WHO}: refused a message on {:.120}: {e}", m.subject);
            s.refused += 1;
            return Ok(false);
        }
        Err(e) => return Err(e),
    }
    s.nodes = mirror.nodes();
    s.open_files = mirror.open_files();
    Ok(true)
}

/// True when the mirror's directory or file refused a chunk for reasons of that node or file
/// (a directory that fails the ownership checks, a name taken by something else): the chunk
/// is refused and the follower goes on. Not when the mirror as a whole cannot be written (out
/// of descriptors or space, an I/O error, a read-only file system): that stops it.
fn concerns_one_node(e: &culprit_datadir::Error) -> bool {
    match e {
        culprit_datadir::Error::Io { source, .. } => !matches!(
            source.raw_os_error(),
            Some(
                libc::EMFILE
                    | libc::ENFILE
                    | libc::ENOSPC
                    | libc::EDQUOT
                    | libc::EIO
                    | libc::EROFS
                    | libc::ENOMEM
            )
        ),
        _ => true,
    }
}
