//! The emulated network: one network namespace per host (each server node, the clients, a third
//! party for network hogs), each joined by a veth pair to a bridge in a "switch" namespace. Real
//! TCP crosses the namespaces. Links can be shaped (tbf) to a node's "NIC" rate, and packet loss
//! is an nftables `numgen random` drop on a receiver's ingress, where a network would drop.
//!
//! Everything lives inside namespaces this module creates, so deleting them removes every veth,
//! qdisc and nft table; the root namespace is never touched.

use std::path::Path;
use std::process::Command;

use crate::error::{Error, Result};

/// Runs a tool, returning its stdout; a non-zero exit is an [`Error::Command`] with its stderr.
pub(crate) fn run_tool(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program).args(args).output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            Error::Missing(format!(
                "`{program}` is not installed (run `bash scripts/install-deps`)"
            ))
        } else {
            Error::io(format!("run {program}"), e)
        }
    })?;
    if !out.status.success() {
        return Err(Error::Command {
            cmd: format!("{program} {}", args.join(" ")),
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `ip -n NS …`.
fn ip_in(ns: &str, args: &[&str]) -> Result<String> {
    let mut v = vec!["-n", ns];
    v.extend_from_slice(args);
    run_tool("ip", &v)
}

/// Runs `program args…` inside namespace `ns` (`ip netns exec`).
pub(crate) fn in_ns(ns: &str, program: &str, args: &[&str]) -> Result<String> {
    let mut v = vec!["netns", "exec", ns, program];
    v.extend_from_slice(args);
    run_tool("ip", &v)
}

/// The first three octets of every address: 198.18.0.0/15 is reserved for benchmarking
/// (RFC 2544) and lives only inside this run's namespaces.
pub const SUBNET: &str = "198.18.0";

/// One host on the emulated network.
#[derive(Clone, Debug)]
pub struct Host {
    /// Short name (`s0`, `cl`, `x`); also the name of its switch port.
    pub name: String,
    /// Its network namespace (`<prefix>-<name>`).
    pub ns: String,
    /// Its IPv4 address.
    pub ip: String,
}

/// The run's namespaces: a switch and the hosts plugged into it.
#[derive(Debug)]
pub struct Network {
    prefix: String,
    switch: String,
    hosts: Vec<Host>,
}

impl Network {
    /// Creates the switch namespace `<prefix>-sw` with bridge `br0`.
    pub fn create(prefix: &str) -> Result<Self> {
        let switch = format!("{prefix}-sw");
        run_tool("ip", &["netns", "add", &switch])?;
        let net = Network {
            prefix: prefix.to_string(),
            switch,
            hosts: Vec::new(),
        };
        ip_in(&net.switch, &["link", "add", "br0", "type", "bridge"])?;
        ip_in(&net.switch, &["link", "set", "br0", "up"])?;
        ip_in(&net.switch, &["link", "set", "lo", "up"])?;
        Ok(net)
    }

    /// Adds host `name` with address `<SUBNET>.<octet>`: its namespace, a veth pair (`eth0`
    /// inside, port `<name>` on the switch).
    pub fn add_host(&mut self, name: &str, octet: u8) -> Result<Host> {
        let ns = format!("{}-{name}", self.prefix);
        run_tool("ip", &["netns", "add", &ns])?;
        let host = Host {
            name: name.to_string(),
            ns: ns.clone(),
            ip: format!("{SUBNET}.{octet}"),
        };
        self.hosts.push(host.clone());
        ip_in(
            &ns,
            &[
                "link",
                "add",
                "eth0",
                "type",
                "veth",
                "peer",
                "name",
                name,
                "netns",
                &self.switch,
            ],
        )?;
        ip_in(&self.switch, &["link", "set", name, "master", "br0"])?;
        ip_in(&self.switch, &["link", "set", name, "up"])?;
        ip_in(
            &ns,
            &["addr", "add", &format!("{}/24", host.ip), "dev", "eth0"],
        )?;
        // Wire-sized packets: without this a veth carries 64 KiB GSO segments, and a "packet"
        // dropped by the loss faults would be 44 wire packets lost at once.
        if std::env::var_os("CULPRIT_TESTBED_GSO").is_none() {
            ip_in(&ns, &["link", "set", "eth0", "gso_max_segs", "1"])?;
            ip_in(&self.switch, &["link", "set", name, "gso_max_segs", "1"])?;
        }
        ip_in(&ns, &["link", "set", "eth0", "up"])?;
        ip_in(&ns, &["link", "set", "lo", "up"])?;
        Ok(host)
    }

    /// Shapes `host`'s link to `mbit` Mbit/s in each direction (tbf on both ends of its veth),
    /// like a NIC of that speed.
    pub fn shape(&self, host: &Host, mbit: u32) -> Result<()> {
        let rate = format!("{mbit}mbit");
        // The burst must hold a whole GSO segment (64 KiB) or tbf drops it.
        let tbf = [
            "root", "tbf", "rate", &rate, "burst", "256kb", "latency", "50ms",
        ];
        let mut a = vec!["qdisc", "replace", "dev", "eth0"];
        a.extend_from_slice(&tbf);
        ip_tc(&host.ns, &a)?;
        let mut b = vec!["qdisc", "replace", "dev", host.name.as_str()];
        b.extend_from_slice(&tbf);
        ip_tc(&self.switch, &b).map(|_| ())
    }

    /// Drops `percent` % of the IPv4 packets arriving at `receiver` (optionally only those from
    /// `from`), at the ingress of its interface: an nftables netdev table named `table` in the
    /// receiver's namespace. Remove it with [`Network::remove_drop`].
    pub fn add_drop(
        &self,
        receiver: &Host,
        from: Option<&Host>,
        percent: u32,
        table: &str,
    ) -> Result<()> {
        let filter = match from {
            Some(h) => format!("ip saddr {} ", h.ip),
            None => "meta protocol ip ".to_string(),
        };
        let script = format!(
            "table netdev {table} {{\n  chain ingress {{\n    type filter hook ingress device \"eth0\" priority 0; policy accept;\n    {filter}numgen random mod 100 < {percent} counter drop\n  }}\n}}\n"
        );
        let file = std::env::temp_dir().join(format!("{table}-{}.nft", std::process::id()));
        std::fs::write(&file, script).map_err(|e| Error::io("write nft script", e))?;
        let r = in_ns(&receiver.ns, "nft", &["-f", path_str(&file)?]);
        let _ = std::fs::remove_file(&file);
        r.map(|_| ())
    }

    /// Removes the table made by [`Network::add_drop`]; returns how many packets it dropped.
    pub fn remove_drop(&self, receiver: &Host, table: &str) -> Result<u64> {
        let listing =
            in_ns(&receiver.ns, "nft", &["list", "table", "netdev", table]).unwrap_or_default();
        in_ns(&receiver.ns, "nft", &["delete", "table", "netdev", table])?;
        Ok(parse_nft_packets(&listing))
    }

    /// The hosts, in the order they were added.
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// Deletes every namespace of the run (hosts, then the switch).
    pub fn destroy(&mut self) -> Result<()> {
        let mut last = Ok(());
        for h in self.hosts.drain(..).rev() {
            if let Err(e) = delete_ns(&h.ns) {
                last = Err(e);
            }
        }
        if let Err(e) = delete_ns(&self.switch) {
            last = Err(e);
        }
        last
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = self.destroy();
    }
}

fn ip_tc(ns: &str, args: &[&str]) -> Result<String> {
    in_ns(ns, "tc", args)
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .ok_or_else(|| Error::Config(format!("path is not UTF-8: {}", p.display())))
}

/// Deletes namespace `ns` if it exists.
pub fn delete_ns(ns: &str) -> Result<()> {
    if !Path::new("/run/netns").join(ns).exists() {
        return Ok(());
    }
    run_tool("ip", &["netns", "del", ns]).map(|_| ())
}

/// Names of network namespaces that start with `stem`.
pub fn list_ns(stem: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/run/netns")
        .into_iter()
        .flat_map(|rd| rd.flatten())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.starts_with(stem))
        .collect();
    v.sort();
    v
}

/// The packet count of an nft `counter packets N bytes M` statement.
fn parse_nft_packets(listing: &str) -> u64 {
    let mut it = listing.split_whitespace();
    while let Some(w) = it.next() {
        if w == "packets" {
            if let Some(n) = it.next().and_then(|n| n.parse().ok()) {
                return n;
            }
        }
    }
    0
}

#[cfg(test)]
mod tests {
    #[test]
    fn nft_counter_is_read() {
        let l = "table netdev t {\n chain ingress {\n ip saddr 1.2.3.4 numgen random mod 100 < 5 counter packets 17 bytes 900 drop\n }\n}";
        assert_eq!(super::parse_nft_packets(l), 17);
        assert_eq!(super::parse_nft_packets("nothing"), 0);
    }
}
