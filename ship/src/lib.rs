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
//!   is written, and nothing is written outside the mirror root ([`chunk::Chunk::from_message`],
//!   `culprit-datadir`'s safe creation).
//! * **Blocking callers.** The command line is synchronous: [`ship::run`] and
//!   [`follow::Follower`] each run their own single-threaded tokio runtime.

pub mod chunk;
pub mod cli;
pub mod connect;
mod error;
pub mod follow;
pub mod mirror;
pub mod ship;

use std::time::Duration;

use async_nats::jetstream::{self, stream};

pub use error::Error;

/// How long JetStream remembers message ids to drop resends (its default).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// Creates `group`'s stream when it is missing (subjects `culprit.<group>.>`, stored on disk,
/// [`DUPLICATE_WINDOW`]); retries with backoff, saying so once on stderr as `who`.
async fn ensure_stream(
    js: &jetstream::Context,
    group: &str,
    who: &str,
) -> Result<stream::Stream, Error> {
    let mut backoff = Backoff::new(who);
    loop {
        let config = stream::Config {
            name: chunk::stream_name(group),
            subjects: vec![format!("culprit.{group}.>")],
            duplicate_window: DUPLICATE_WINDOW,
            max_message_size: (chunk::MAX_CHUNK + 4096) as i32,
            ..Default::default()
        };
        match js.get_or_create_stream(config).await {
            Ok(s) => {
                backoff.recovered("the stream is there");
                return Ok(s);
            }
            Err(e) => {
                backoff
                    .failed(&format!("cannot create stream {group}: {e}"))
                    .await?
            }
        }
    }
}

/// Retries with exponential backoff (100 ms to 5 s), saying the first failure and the
/// recovery once each; gives up only when the broker refused the credentials.
#[derive(Debug)]
struct Backoff<'a> {
    who: &'a str,
    delay: Duration,
    failing: bool,
}

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
fn runtime() -> Result<tokio::runtime::Runtime, Error> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::Io(format!("cannot start the async runtime: {e}")))
}
