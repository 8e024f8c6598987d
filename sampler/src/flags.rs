//! Settings as people write them, turned into the sampler's: node rules (`NODE=VALUE`, the
//! `--node-cgroup / --node-netns / --node-pid / --node-addr` flags of `culprit sample`) and the
//! tracepoints of `--tracepoints` and those `--layers` adds (system calls, block layer).

use std::net::{AddrParseError, IpAddr, SocketAddr};
use std::num::ParseIntError;

use crate::nodes::NodeRule;

/// Which kind of [`NodeRule`] a `NODE=VALUE` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuleKind {
    /// A cgroup path ([`NodeRule::Cgroup`]).
    Cgroup,
    /// A network namespace file ([`NodeRule::Netns`]).
    Netns,
    /// A process id ([`NodeRule::Pid`]).
    Pid,
    /// `IP`, `IP:PORT` or `[IPv6]:PORT` ([`NodeRule::Addr`]).
    Addr,
}

impl RuleKind {
    /// The flag that gives rules of this kind, for messages.
    pub fn flag(self) -> &'static str {
        match self {
            RuleKind::Cgroup => "--node-cgroup",
            RuleKind::Netns => "--node-netns",
            RuleKind::Pid => "--node-pid",
            RuleKind::Addr => "--node-addr",
        }
    }
}

/// A rule that does not parse.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RuleError {
    /// Not `NODE=VALUE` with both sides non-empty.
    #[error("{flag} takes NODE=VALUE, got {rule:?}")]
    Syntax {
        /// The flag.
        flag: &'static str,
        /// The rule as given.
        rule: String,
    },
    /// The value of a `--node-pid` rule is not a process id (nor a pid file's path).
    #[error(
        "{flag} {rule}: {value:?} is not a process id (a pid file is given by its path: ./FILE)"
    )]
    Pid {
        /// The flag.
        flag: &'static str,
        /// The rule as given.
        rule: String,
        /// Its value.
        value: String,
        /// Why.
        #[source]
        source: ParseIntError,
    },
    /// The value of a `--node-addr` rule is not an address.
    #[error("{flag} {rule}: {value:?} is not an IP address or IP:PORT")]
    Addr {
        /// The flag.
        flag: &'static str,
        /// The rule as given.
        rule: String,
        /// Its value.
        value: String,
        /// Why.
        #[source]
        source: AddrParseError,
    },
}

impl NodeRule {
    /// Parses `NODE=VALUE` as a rule of `kind`.
    pub fn parse(kind: RuleKind, rule: &str) -> Result<NodeRule, RuleError> {
        let flag = kind.flag();
        let (node, value) = match rule.split_once('=') {
            Some((n, x)) if !n.is_empty() && !x.is_empty() => (n.to_string(), x),
            _ => {
                return Err(RuleError::Syntax {
                    flag,
                    rule: rule.into(),
                })
            }
        };
        Ok(match kind {
            RuleKind::Cgroup => NodeRule::Cgroup {
                node,
                path: value.into(),
            },
            RuleKind::Netns => NodeRule::Netns {
                node,
                path: value.into(),
            },
            // A path (it has a `/`): a pid file, read when it appears.
            RuleKind::Pid if value.contains('/') => NodeRule::PidFile {
                node,
                path: value.into(),
            },
            RuleKind::Pid => NodeRule::Pid {
                node,
                pid: value.parse().map_err(|source| RuleError::Pid {
                    flag,
                    rule: rule.into(),
                    value: value.into(),
                    source,
                })?,
            },
            RuleKind::Addr => {
                let endpoint = Endpoint::parse(value).map_err(|source| RuleError::Addr {
                    flag,
                    rule: rule.into(),
                    value: value.into(),
                    source,
                })?;
                NodeRule::Addr {
                    node,
                    addr: endpoint.addr,
                    port: endpoint.port,
                }
            }
        })
    }
}

/// An address, with or without a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Endpoint {
    addr: IpAddr,
    port: Option<u16>,
}

impl Endpoint {
    /// `IP`, `IP:PORT` or `[IPv6]:PORT`.
    fn parse(s: &str) -> Result<Endpoint, AddrParseError> {
        if let Ok(addr) = s.parse::<IpAddr>() {
            return Ok(Endpoint { addr, port: None });
        }
        let sa: SocketAddr = s.parse()?;
        Ok(Endpoint {
            addr: sa.ip(),
            port: Some(sa.port()),
        })
    }
}

/// A `--tracepoints` list: comma-separated names, or `none` for no tracepoint.
pub fn tracepoints(list: &str) -> Vec<String> {
    if list.trim() == "none" {
        return Vec::new();
    }
    list.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// The tracepoints to open with `--layers`: `base` (the default set when `None`) and those of
/// the system-call and block layers ([`crate::syscalls`], [`crate::blocklayer`]), each once.
pub fn with_layers(base: Option<Vec<String>>) -> Vec<String> {
    let mut tps = base.unwrap_or_else(|| {
        crate::tracefs::DEFAULT_TRACEPOINTS
            .iter()
            .map(|s| s.to_string())
            .collect()
    });
    let wanted = crate::syscalls::TRACEPOINTS
        .iter()
        .chain(crate::blocklayer::TRACEPOINTS);
    for t in wanted {
        if !tps.iter().any(|x| x == t) {
            tps.push(t.to_string());
        }
    }
    tps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracepoint_lists() {
        assert_eq!(tracepoints(" a:b , c:d,,"), vec!["a:b", "c:d"]);
        assert!(tracepoints(" none ").is_empty());
    }

    #[test]
    fn endpoints() {
        let ep = |s: &str| Endpoint::parse(s).map(|e| (e.addr, e.port));
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(ep("127.0.0.1").unwrap(), (lo, None));
        assert_eq!(ep("127.0.0.1:3001").unwrap(), (lo, Some(3001)));
        let v6: IpAddr = "::1".parse().unwrap();
        assert_eq!(ep("::1").unwrap(), (v6, None));
        assert_eq!(ep("[::1]:80").unwrap(), (v6, Some(80)));
        assert!(ep("127.0.0.1:99999").is_err());
        assert!(ep("host:80").is_err());
    }

    #[test]
    fn rules() {
        assert_eq!(
            NodeRule::parse(RuleKind::Pid, "n1=42").unwrap(),
            NodeRule::Pid {
                node: "n1".into(),
                pid: 42
            }
        );
        let e = NodeRule::parse(RuleKind::Pid, "n1=x").unwrap_err();
        assert_eq!(
            e.to_string(),
            "--node-pid n1=x: \"x\" is not a process id (a pid file is given by its path: ./FILE)"
        );
        assert_eq!(
            NodeRule::parse(RuleKind::Pid, "n1=./run/x.pid").unwrap(),
            NodeRule::PidFile {
                node: "n1".into(),
                path: "./run/x.pid".into()
            }
        );
        let e = NodeRule::parse(RuleKind::Cgroup, "=/a").unwrap_err();
        assert_eq!(e.to_string(), "--node-cgroup takes NODE=VALUE, got \"=/a\"");
        assert!(matches!(
            NodeRule::parse(RuleKind::Addr, "n2=[::1]:80"),
            Ok(NodeRule::Addr { port: Some(80), .. })
        ));
    }

    #[test]
    fn layers_add_their_tracepoints_once() {
        let base = vec![crate::syscalls::TRACEPOINTS[0].to_string()];
        let tps = with_layers(Some(base));
        let wanted = crate::syscalls::TRACEPOINTS
            .iter()
            .chain(crate::blocklayer::TRACEPOINTS);
        for t in wanted {
            assert_eq!(tps.iter().filter(|x| x == t).count(), 1, "{t}: {tps:?}");
        }
        let all = with_layers(None);
        for t in crate::tracefs::DEFAULT_TRACEPOINTS {
            assert!(all.iter().any(|x| x == t), "{t}");
        }
    }
}
