//! Where the broker is and how to log in: `nats://HOST[:PORT][/GROUP]` or `tls://…`, a token,
//! a user and password or a `.creds` file, TLS through rustls (connecting needs the `nats`
//! feature; the addresses and their checks do not).

use std::net::IpAddr;
use std::path::PathBuf;
#[cfg(feature = "nats")]
use std::sync::{Arc, Mutex};
#[cfg(feature = "nats")]
use std::time::Duration;

#[cfg(feature = "nats")]
use async_nats::{Client, ConnectOptions, Event};

use crate::error::Error;

/// Set when the broker refused this process's credentials: retrying cannot help, and
/// [`refused`] ends the retries with it.
#[cfg(feature = "nats")]
static REFUSED: Mutex<Option<String>> = Mutex::new(None);

/// Why the broker refused the credentials, once it did.
#[cfg(feature = "nats")]
pub(crate) fn refused() -> Option<String> {
    REFUSED.lock().expect("refused").clone()
}

/// NATS' port when the address names none.
pub const DEFAULT_PORT: u16 = 4222;

/// A broker address as people write it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Address {
    /// Host name or IP address.
    pub host: String,
    /// Port.
    pub port: u16,
    /// `tls://`: the connection must be TLS.
    pub tls: bool,
    /// The path after the port (`/GROUP`), without its slash; empty when none.
    pub path: String,
}

impl Address {
    /// Parses `nats://HOST[:PORT][/PATH]` or `tls://…`.
    pub fn parse(s: &str) -> Result<Address, Error> {
        let bad = |why: &str| Error::Usage(format!("broker address {s:?}: {why}"));
        let (tls, rest) = if let Some(r) = s.strip_prefix("nats://") {
            (false, r)
        } else if let Some(r) = s.strip_prefix("tls://") {
            (true, r)
        } else {
            return Err(bad("give nats://HOST:PORT or tls://HOST:PORT"));
        };
        let (hostport, path) = rest.split_once('/').unwrap_or((rest, ""));
        if hostport.contains('@') {
            return Err(bad(
                "put credentials in --token, --user/--password or --creds (or their \
                 CULPRIT_NATS_* variables), not in the address",
            ));
        }
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(':') || h.starts_with('[') => (
                h,
                p.parse::<u16>()
                    .map_err(|_| bad("the port is not a number"))?,
            ),
            _ => (hostport, DEFAULT_PORT),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad("no host"));
        }
        Ok(Address {
            host: host.to_string(),
            port,
            tls,
            path: path.trim_end_matches('/').to_string(),
        })
    }

    /// True when the broker is on this machine (`localhost`, 127.0.0.0/8, `::1`).
    pub fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.host.parse::<IpAddr>().is_ok_and(|a| a.is_loopback())
    }

    fn server_url(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let scheme = if self.tls { "tls" } else { "nats" };
        format!("{scheme}://{host}:{}", self.port)
    }
}

/// How to log in to the broker and protect the connection.
#[derive(Clone, Debug, Default)]
pub struct Auth {
    /// A token (`--token`, `CULPRIT_NATS_TOKEN`).
    pub token: Option<String>,
    /// User and password (`--user`/`--password`, `CULPRIT_NATS_USER`/`_PASSWORD`).
    pub user: Option<(String, String)>,
    /// A NATS credentials file: JWT and NKey seed (`--creds`).
    pub creds: Option<PathBuf>,
    /// Require TLS even with a `nats://` address (`--tls`).
    pub tls: bool,
    /// PEM file of the certificate authority the broker's certificate is checked against
    /// (default: the system's roots).
    pub ca: Option<PathBuf>,
    /// Allow a broker on another machine without credentials or TLS (`--insecure`).
    pub insecure: bool,
}

impl Auth {
    fn has_credentials(&self) -> bool {
        self.token.is_some() || self.user.is_some() || self.creds.is_some()
    }
}

/// A broker address and how to reach it.
#[derive(Clone, Debug)]
pub struct Broker {
    /// Where.
    pub address: Address,
    /// How.
    pub auth: Auth,
}

impl Broker {
    /// Refuses to send records in the clear or without credentials to another machine, unless
    /// `--insecure` was given.
    pub fn check_secure(&self) -> Result<(), Error> {
        if self.address.is_loopback() || self.auth.insecure || self.auth.has_credentials() {
            return Ok(());
        }
        Err(Error::Usage(format!(
            "{} is not on this machine and no credentials were given: give --token, \
             --user/--password or --creds (and tls:// or --tls), or --insecure to send \
             anyway",
            self.address.server_url()
        )))
    }
}

#[cfg(feature = "nats")]
impl Broker {
    /// Connects as `name` (shown in the broker's connection list). The client reconnects by
    /// itself with backoff; `who` begins the one line said on stderr when the connection is
    /// lost and when it is back.
    pub async fn connect(&self, name: &str, who: &'static str) -> Result<Client, Error> {
        let a = &self.auth;
        let last = Arc::new(Mutex::new(String::new()));
        let mut o = ConnectOptions::new()
            .name(name)
            .retry_on_initial_connect()
            .max_reconnects(None)
            .connection_timeout(Duration::from_secs(5))
            .reconnect_delay_callback(|tries| {
                Duration::from_millis((100u64 << tries.min(6)).min(5_000))
            })
            .event_callback(move |e| {
                let last = last.clone();
                async move {
                    let line = match e {
                        Event::Disconnected => "lost the broker; reconnecting with backoff".into(),
                        Event::Connected => "connected to the broker".into(),
                        Event::ClientError(e) => {
                            let e = e.to_string();
                            if e.contains("authorization violation") {
                                *REFUSED.lock().expect("refused") =
                                    Some(format!("the broker refused the credentials ({e})"));
                            }
                            format!("broker: {e}")
                        }
                        _ => return,
                    };
                    // Each state said once, not at every retry.
                    let mut last = last.lock().expect("last event");
                    if *last != line {
                        eprintln!("{who}: {line}");
                        *last = line;
                    }
                }
            });
        if let Some(t) = &a.token {
            o = o.token(t.clone());
        }
        if let Some((u, p)) = &a.user {
            o = o.user_and_password(u.clone(), p.clone());
        }
        if let Some(c) = &a.creds {
            o = o
                .credentials_file(c)
                .await
                .map_err(|e| Error::Usage(format!("--creds {}: {e}", c.display())))?;
        }
        if a.tls || self.address.tls {
            o = o.require_tls(true);
        }
        if let Some(ca) = &a.ca {
            o = o.add_root_certificates(ca.clone());
        }
        let url = self.address.server_url();
        o.connect(url.as_str())
            .await
            .map_err(|e| Error::Broker(format!("cannot connect to {url}: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_parse() {
        let a = Address::parse("nats://10.0.0.5:4333/web").unwrap();
        assert_eq!((a.host.as_str(), a.port, a.tls), ("10.0.0.5", 4333, false));
        assert_eq!(a.path, "web");
        assert!(!a.is_loopback());
        let a = Address::parse("tls://localhost").unwrap();
        assert_eq!((a.port, a.tls, a.path.as_str()), (DEFAULT_PORT, true, ""));
        assert!(a.is_loopback());
        let a = Address::parse("nats://[::1]:4222").unwrap();
        assert!(a.is_loopback(), "{a:?}");
        assert!(Address::parse("http://x:1").is_err());
        assert!(Address::parse("nats://u:p@x:1").is_err());
        assert!(Address::parse("nats://x:port").is_err());
    }

    #[test]
    fn a_remote_broker_needs_credentials_or_insecure() {
        let mut b = Broker {
            address: Address::parse("nats://10.0.0.5:4222").unwrap(),
            auth: Auth::default(),
        };
        assert!(b.check_secure().is_err());
        b.auth.token = Some("t".into());
        assert!(b.check_secure().is_ok());
        b.auth = Auth {
            insecure: true,
            ..Auth::default()
        };
        assert!(b.check_secure().is_ok());
    }
}
