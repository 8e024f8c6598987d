//! The flags of `culprit ship` and of `culprit diagnose --follow nats://…`, and their
//! validation into configs; the command line only calls these.

use std::path::{Path, PathBuf};
use std::time::Duration;

use culprit_format::rotation::{parse_duration_ns, parse_size};

pub use crate::config::{FollowConfig, ShipConfig};
use crate::config::{StreamLimits, DEFAULT_MIRROR_MAX_BYTES};
use crate::connect::{Address, Auth, Broker};
use crate::error::Error;
use crate::follow::Follower;

/// The limits of the group's stream, set by the side that creates it (shared by `ship` and
/// `diagnose`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct StreamArgs {
    /// Most bytes the group's stream keeps when this creates it (the broker drops the oldest
    /// messages beyond) [default: 1G, halved until the broker can reserve it]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub stream_max_bytes: Option<u64>,
    /// Oldest message the group's stream keeps when this creates it (e.g. 12h) [default: 24h]
    #[arg(long, value_name = "AGE", value_parser = parse_age)]
    pub stream_max_age: Option<Duration>,
}

impl StreamArgs {
    fn limits(&self) -> StreamLimits {
        StreamLimits {
            max_bytes: self.stream_max_bytes,
            max_age: self.stream_max_age,
        }
    }
}

fn parse_age(s: &str) -> Result<Duration, String> {
    parse_duration_ns(s).map(Duration::from_nanos)
}

/// How to reach the broker (shared by `ship` and `diagnose`).
#[derive(Clone, Debug, Default, clap::Args)]
pub struct BrokerArgs {
    /// NATS token
    #[arg(
        long,
        env = "CULPRIT_NATS_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
    /// NATS user (with --password)
    #[arg(
        long,
        env = "CULPRIT_NATS_USER",
        requires = "password",
        value_name = "USER"
    )]
    pub user: Option<String>,
    /// NATS password (prefer the environment variable: a flag shows in `ps`)
    #[arg(
        long,
        env = "CULPRIT_NATS_PASSWORD",
        hide_env_values = true,
        requires = "user"
    )]
    pub password: Option<String>,
    /// NATS credentials file (JWT and NKey seed)
    #[arg(long, env = "CULPRIT_NATS_CREDS", value_name = "FILE")]
    pub creds: Option<PathBuf>,
    /// Require TLS (as a tls:// address does)
    #[arg(long)]
    pub tls: bool,
    /// PEM file of the authority that signed the broker's certificate [default: the
    /// system's roots]
    #[arg(long, value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// Send to a broker on another machine without credentials
    #[arg(long)]
    pub insecure: bool,
}

impl BrokerArgs {
    fn broker(&self, address: Address) -> Broker {
        Broker {
            address,
            auth: Auth {
                token: self.token.clone(),
                user: self.user.clone().zip(self.password.clone()),
                creds: self.creds.clone(),
                tls: self.tls,
                ca: self.tls_ca.clone(),
                insecure: self.insecure,
            },
        }
    }
}

/// Arguments of `culprit ship`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  \
    culprit ship --to nats://127.0.0.1:4222 --group web /var/lib/culprit/web-1\n  \
    CULPRIT_NATS_TOKEN=… culprit ship --to tls://broker:4222 --group web DATA/web-1\n\n\
    Publishes the node's committed records to JetStream subject culprit.<group>.<node> and \
    resumes after a crash, a broker restart or a network cut from what the broker \
    acknowledged (.ship-<group>.state in the node directory). Runs until killed. \
    docs/nats.md")]
pub struct ShipArgs {
    /// The node's directory (`DATA/<node>`)
    #[arg(value_name = "NODE_DIR")]
    pub node_dir: PathBuf,
    /// The broker: `nats://HOST[:PORT]` or `tls://HOST[:PORT]`
    #[arg(long, value_name = "URL")]
    pub to: String,
    /// The group of peer nodes diagnosed together
    #[arg(long, value_name = "NAME")]
    pub group: String,
    /// Stop once every file has ended and is shipped
    #[arg(long)]
    pub until_ended: bool,
    #[command(flatten)]
    pub stream: StreamArgs,
    #[command(flatten)]
    pub broker: BrokerArgs,
}

impl ShipArgs {
    /// The validated config.
    pub fn config(&self) -> Result<ShipConfig, Error> {
        let address = Address::parse(&self.to)?;
        if !address.path.is_empty() {
            return Err(Error::Usage(format!(
                "--to {}: give the group with --group, not in the address",
                self.to
            )));
        }
        Ok(ShipConfig {
            broker: self.broker.broker(address),
            group: self.group.clone(),
            node_dir: self.node_dir.clone(),
            until_ended: self.until_ended,
            stream: self.stream.limits(),
        })
    }
}

/// The flags `diagnose` adds for `--follow nats://HOST:PORT/GROUP`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct FollowArgs {
    /// With nats://…: the local data root the group's records are mirrored into [default:
    /// ~/.cache/culprit/nats/HOST-PORT-GROUP]
    #[arg(long, value_name = "DIR")]
    pub mirror: Option<PathBuf>,
    /// With nats://…: the durable consumer's name [default: one per mirror directory]
    #[arg(long, value_name = "NAME")]
    pub durable: Option<String>,
    /// With nats://…: most bytes the mirror holds; past it mirroring stops, and the records
    /// stay on the stream for a follower restarted with room [default: 20G]
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub mirror_max_size: Option<u64>,
    #[command(flatten)]
    pub stream: StreamArgs,
    #[command(flatten)]
    pub broker: BrokerArgs,
}

/// True for a `DATA` argument that names a broker.
pub fn is_broker(data: &Path) -> bool {
    data.to_str()
        .is_some_and(|s| s.starts_with("nats://") || s.starts_with("tls://"))
}

impl FollowArgs {
    /// When `data` is one broker address with a group (`nats://HOST:PORT/GROUP`): starts
    /// mirroring, waits for the first node and its peers (until none is new for two seconds)
    /// and returns the
    /// follower, whose [`Follower::root`] is the data root to diagnose.
    pub fn start(&self, data: &[PathBuf], follow: bool) -> Result<Option<Follower>, Error> {
        if !data.iter().any(|d| is_broker(d)) {
            return Ok(None);
        }
        let url = data[0].to_string_lossy();
        if data.len() != 1 || !follow {
            return Err(Error::Usage(format!(
                "{url}: a broker is read with --follow, alone (diagnose the mirror \
                 directory afterwards)"
            )));
        }
        let address = Address::parse(&url)?;
        let group = address.path.clone();
        let mirror = match &self.mirror {
            Some(m) => m.clone(),
            None => cache_dir().join(format!("{}-{}-{group}", address.host, address.port)),
        };
        let durable = match &self.durable {
            Some(d) => d.clone(),
            None => format!(
                "culprit-{:016x}",
                fnv1a(
                    culprit_datadir::absolute(&mirror)
                        .as_os_str()
                        .as_encoded_bytes()
                )
            ),
        };
        let f = Follower::start(FollowConfig {
            broker: self.broker.broker(address),
            group: group.clone(),
            mirror,
            durable,
            mirror_max_bytes: self.mirror_max_size.unwrap_or(DEFAULT_MIRROR_MAX_BYTES),
            stream: self.stream.limits(),
        })?;
        eprintln!(
            "culprit: mirroring culprit.{group}.> into {}; waiting for records",
            f.root().display()
        );
        let nodes = f.wait_for_nodes(Duration::from_secs(2))?;
        eprintln!("culprit: {nodes} node(s) so far; following");
        Ok(Some(f))
    }
}

/// `$XDG_CACHE_HOME/culprit/nats`, else `~/.cache/culprit/nats`.
fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("culprit").join("nats")
}

/// FNV-1a: a stable short name for a path.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
