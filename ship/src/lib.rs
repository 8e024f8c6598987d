//! Records beyond one machine: `culprit ship` publishes a node's committed records to NATS
//! JetStream, `culprit diagnose --follow nats://…` mirrors a group's records back into a local
//! data root that the reader and the live engine read unchanged (docs/nats.md).
//!
//! Design constraints:
//!
//! * **The node's files are the buffer.** The shipper keeps no queue: it remembers, per file,
//!   the offset up to which the broker acknowledged (a small state file in the node directory,
//!   replaced in one step) and resumes from it after a crash, a broker restart or a network cut.
//! * **Idempotent at every step.** A message is one chunk of a file's committed bytes with its
//!   place (node, file, offset); JetStream drops a resend within its duplicate window by
//!   message id, and the mirror drops any chunk it holds already. Nothing is lost, nothing is
//!   counted twice.
//! * **The stream is untrusted.** Names, sizes, offsets and versions are checked before a byte
//!   is written, and nothing is written outside the mirror root (`chunk::Chunk::from_message`,
//!   `culprit-datadir`'s safe creation).
//! * **Blocking callers.** The command line is synchronous: [`ship::run`] and
//!   [`follow::Follower`] each run their own single-threaded tokio runtime.
//! * **The client is optional.** Without the `nats` feature (the NATS client, tokio and
//!   rustls: most of culprit's build) the flags ([`cli`]), their checks and the configs are
//!   the same, so `culprit --help` and the man pages do not change; [`ship::run`] and
//!   [`follow::Follower::start`] then return [`Error::WithoutNats`].

#[cfg(feature = "nats")]
pub mod chunk;
pub mod cli;
pub mod config;
pub mod connect;
mod error;
#[cfg(feature = "nats")]
pub mod follow;
#[cfg(feature = "nats")]
pub mod mirror;
#[cfg(feature = "nats")]
pub mod ship;
#[cfg(not(feature = "nats"))]
mod without_nats;
#[cfg(not(feature = "nats"))]
pub use without_nats::{follow, ship};

use std::time::Duration;

#[cfg(feature = "nats")]
use async_nats::jetstream::{self, stream};

pub use config::{
    StreamLimits, DEFAULT_MIRROR_MAX_BYTES, DEFAULT_STREAM_MAX_AGE, DEFAULT_STREAM_MAX_BYTES,
};
pub use error::Error;

/// How long JetStream remembers message ids to drop resends (its default).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// The least the default is halved to when the broker cannot reserve more.
#[cfg(feature = "nats")]
const MIN_STREAM_MAX_BYTES: u64 = 1 << 20;

/// Creates `group`'s stream when it is missing (subjects `culprit.<group>.>`, stored on disk,
/// [`DUPLICATE_WINDOW`], `limits`); retries with backoff, saying so once on stderr as `who`.
#[cfg(feature = "nats")]
async fn ensure_stream(
    js: &jetstream::Context,
    group: &str,
    limits: StreamLimits,
    who: &str,
) -> Result<stream::Stream, Error> {
    let mut backoff = Backoff::new(who);
    let mut max_bytes = limits.max_bytes.unwrap_or(DEFAULT_STREAM_MAX_BYTES);
    loop {
        let config = stream::Config {
            name: chunk::stream_name(group),
            subjects: vec![format!("culprit.{group}.>")],
            duplicate_window: DUPLICATE_WINDOW,
            max_message_size: (chunk::MAX_CHUNK + 4096) as i32,
            max_bytes: i64::try_from(max_bytes).unwrap_or(i64::MAX),
            max_age: limits.max_age.unwrap_or(DEFAULT_STREAM_MAX_AGE),
            discard: stream::DiscardPolicy::Old,
            ..Default::default()
        };
        match js.get_or_create_stream(config).await {
            Ok(s) => {
                backoff.recovered("the stream is there");
                if max_bytes != limits.max_bytes.unwrap_or(DEFAULT_STREAM_MAX_BYTES) {
                    eprintln!(
                        "{who}: the broker cannot reserve the default stream size: stream {} \
                         created with --stream-max-bytes {}M",
                        chunk::stream_name(group),
                        max_bytes >> 20
                    );
                }
                return Ok(s);
            }
            Err(e) if no_room(&e) => {
                // Retrying cannot help: a smaller default, or one line for a size asked for.
                if limits.max_bytes.is_some() || max_bytes / 2 < MIN_STREAM_MAX_BYTES {
                    return Err(Error::Broker(format!(
                        "the broker cannot store {max_bytes} bytes for stream {}: give a \
                         smaller --stream-max-bytes ({e})",
                        chunk::stream_name(group)
                    )));
                }
                max_bytes /= 2;
            }
            Err(e) => {
                backoff
                    .failed(&format!("cannot create stream {group}: {e}"))
                    .await?
            }
        }
    }
}

/// True when the broker refused a stream for lack of storage it can reserve.
#[cfg(feature = "nats")]
fn no_room(e: &jetstream::context::CreateStreamError) -> bool {
    use jetstream::context::CreateStreamErrorKind;
    matches!(e.kind(), CreateStreamErrorKind::JetStream(j)
        if j.error_code() == jetstream::ErrorCode::STORAGE_RESOURCES_EXCEEDED)
}

/// Retries with exponential backoff (100 ms to 5 s), saying the first failure and the
/// recovery once each; gives up only when the broker refused the credentials.
#[cfg(feature = "nats")]
#[derive(Debug)]
struct Backoff<'a> {
    who: &'a str,
    delay: Duration,
    failing: bool,
}

#[cfg(feature = "nats")]
impl<'a> Backoff<'a> {
    fn new(who: &'a str) -> Self {
        Backoff {
            who,
            delay: Duration::from_millis(100),
            failing: false,
        }
    }

    async fn failed(&mut self, what: &str) -> Result<(), Error> {
        if let Some(why) = connect::refused() {
            return Err(Error::Broker(why));
        }
        if !self.failing {
            eprintln!("{}: {what}; retrying with backoff", self.who);
            self.failing = true;
        }
        tokio::time::sleep(self.delay).await;
        self.delay = (self.delay * 2).min(Duration::from_secs(5));
        Ok(())
    }

    fn recovered(&mut self, what: &str) {
        if self.failing {
            eprintln!("{}: {what} again", self.who);
        }
        self.failing = false;
        self.delay = Duration::from_millis(100);
    }
}

/// A single-threaded tokio runtime for a blocking caller.
#[cfg(feature = "nats")]
fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Io(format!("cannot start the async runtime: {e}")))
}
