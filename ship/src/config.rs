//! What `culprit ship` and the follower are asked to do, and the stream's limits: the types
//! the flags ([`crate::cli`]) are checked into and the shipper, the follower (or, without the
//! `nats` feature, their stand-ins) take. Below both, so neither depends on the other.

use std::path::PathBuf;
use std::time::Duration;

use crate::connect::Broker;

/// What `culprit ship` was asked to do.
#[derive(Clone, Debug)]
pub struct ShipConfig {
    /// The broker.
    pub broker: Broker,
    /// The group (`culprit.<group>.<node>`).
    pub group: String,
    /// The node's directory (`DATA/<node>`); its name is the node's.
    pub node_dir: PathBuf,
    /// Stop once every file has ended and is shipped (else run until killed).
    pub until_ended: bool,
    /// The stream's limits, when this shipper creates it.
    pub stream: StreamLimits,
}

/// What the follower was asked to do.
#[derive(Clone, Debug)]
pub struct FollowConfig {
    /// The broker.
    pub broker: Broker,
    /// The group.
    pub group: String,
    /// The mirror root.
    pub mirror: PathBuf,
    /// The durable consumer's name: the broker remembers what it delivered and acknowledged
    /// to it, so one name goes with one mirror.
    pub durable: String,
    /// Most bytes the mirror holds.
    pub mirror_max_bytes: u64,
    /// The stream's limits, if the follower creates it.
    pub stream: StreamLimits,
}

/// What a group's stream keeps, set by whichever side creates it (`ship`, or the follower when
/// it comes first): the broker drops the oldest messages beyond either limit, so its disk is
/// bounded whatever the publishers send. A stream that exists keeps its own limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamLimits {
    /// Most bytes stored (`max_bytes`); `None`: [`DEFAULT_STREAM_MAX_BYTES`], halved until
    /// the broker can reserve it (an explicit size it cannot is an error).
    pub max_bytes: Option<u64>,
    /// Oldest message kept (`max_age`); `None`: [`DEFAULT_STREAM_MAX_AGE`].
    pub max_age: Option<Duration>,
}

/// `--stream-max-bytes`' default: 1 GiB, about 40 minutes of 20 nodes' records of 765
/// functions a second (docs/nats.md, "Limits"), or less when the broker cannot reserve it.
pub const DEFAULT_STREAM_MAX_BYTES: u64 = 1 << 30;
/// `--stream-max-age`'s default: a day.
pub const DEFAULT_STREAM_MAX_AGE: Duration = Duration::from_secs(24 * 3600);
/// `--mirror-max-size`'s default: 20 GiB.
pub const DEFAULT_MIRROR_MAX_BYTES: u64 = 20 << 30;
