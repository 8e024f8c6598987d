//! The workloads of seed 000 §"Workloads", run by several clients at once: `ddw` and `ddr`
//! (large sequential striped writes / reads, like dd with 4 MiB per server per request; scaled
//! down here to 1 MiB chunks) and `postmark` (small-file, metadata-heavy transactions).
//! IOzone's write/rewrite and read/reread modes are not reproduced: on this service they would
//! be ddw/ddr again.

use std::fmt;
use std::process::{Child, Command};
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::cluster::{stop_child, Cluster, Place};
use crate::error::{Error, Result};

/// A workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Workload {
    /// Large sequential striped writes (seed 000's ddw).
    Ddw,
    /// Large sequential striped reads of files written beforehand (ddr).
    Ddr,
    /// Small files, metadata-heavy (PostMark).
    Postmark,
}

impl Workload {
    /// Every workload, in table order.
    pub const ALL: [Workload; 3] = [Workload::Ddw, Workload::Ddr, Workload::Postmark];

    /// The workload's name.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Ddw => "ddw",
            Workload::Ddr => "ddr",
            Workload::Postmark => "postmark",
        }
    }

    fn mode(self) -> &'static str {
        match self {
            Workload::Ddw => "write",
            Workload::Ddr => "read",
            Workload::Postmark => "meta",
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Workload {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Workload::ALL
            .into_iter()
            .find(|w| w.name() == s)
            .ok_or_else(|| {
                Error::Config(format!(
                    "unknown workload {s:?}; workloads: ddw, ddr, postmark"
                ))
            })
    }
}

/// How the clients run a workload.
#[derive(Clone, Debug)]
pub struct WorkloadSpec {
    /// Concurrent client processes (seed 000: 10; 4 here).
    pub clients: usize,
    /// Bytes per server per request (seed 000: 4 MiB).
    pub chunk: u64,
    /// Size of each client's file; it wraps around, so storage stays bounded.
    pub file_size: u64,
    /// PostMark: files in each client's pool.
    pub files: u32,
    /// ddw/ddr: each client's cap, payload bytes per second (0: as fast as the servers go,
    /// which saturates every disk).
    pub rate: u64,
}

impl Default for WorkloadSpec {
    fn default() -> Self {
        WorkloadSpec {
            clients: 4,
            chunk: 1 << 20,
            file_size: 64 << 20,
            files: 500,
            rate: 0,
        }
    }
}

/// When the clients stop.
#[derive(Clone, Copy, Debug)]
pub enum Bound {
    /// After this many seconds.
    Duration(f64),
    /// After this much work per client: bytes for ddw/ddr, transactions for postmark.
    Work(u64),
}

/// What one client reported.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientResult {
    /// Bytes moved.
    pub bytes: u64,
    /// Requests made.
    pub ops: u64,
    /// Seconds it ran.
    pub elapsed_s: f64,
}

/// Running clients; dropping them stops them.
#[derive(Debug)]
pub struct Clients {
    children: Vec<Child>,
    logs: Vec<std::path::PathBuf>,
}

impl Cluster {
    fn client_cmd(&self, w: Workload, spec: &WorkloadSpec, i: usize, bound: Bound) -> Command {
        let mut c = Command::new(&self.programs().client);
        c.args(["--servers", &self.server_list()])
            .args(["--mode", w.mode()])
            .args(["--name", &format!("client{i}")])
            .args(["--chunk", &spec.chunk.to_string()])
            .args(["--file-size", &spec.file_size.to_string()])
            .args(["--files", &spec.files.to_string()])
            .args(["--seed", &i.to_string()]);
        if spec.rate > 0 && w != Workload::Postmark {
            c.args(["--rate", &spec.rate.to_string()]);
        }
        match (bound, w) {
            (Bound::Duration(s), _) => c.args(["--duration", &format!("{s}")]),
            (Bound::Work(n), Workload::Postmark) => c.args(["--transactions", &n.to_string()]),
            (Bound::Work(n), _) => c.args(["--total", &n.to_string()]),
        };
        c
    }

    /// Makes what `w` needs before it runs: for ddr, each client's file is written once. The
    /// servers must be running.
    pub fn prepare(&self, w: Workload, spec: &WorkloadSpec) -> Result<()> {
        if w != Workload::Ddr {
            return Ok(());
        }
        let clients =
            self.start_clients(Workload::Ddw, spec, Bound::Work(spec.file_size), "prepare")?;
        clients.wait(Duration::from_secs(600)).map(|_| ())
    }

    /// Starts `spec.clients` clients of workload `w` in the clients' namespace.
    pub fn start_clients(
        &self,
        w: Workload,
        spec: &WorkloadSpec,
        bound: Bound,
        tag: &str,
    ) -> Result<Clients> {
        let mut out = Clients {
            children: Vec::new(),
            logs: Vec::new(),
        };
        for i in 0..spec.clients {
            let log = format!("client-{tag}-{}-{i}", w.name());
            let child = self.spawn(Place::Clients, self.client_cmd(w, spec, i, bound), &log)?;
            out.children.push(child);
            out.logs.push(self.log_path(&log));
        }
        Ok(out)
    }
}

impl Clients {
    /// Waits for every client to finish (at most `limit`; an interrupt stops them) and returns
    /// their results.
    pub fn wait(mut self, limit: Duration) -> Result<Vec<ClientResult>> {
        let start = Instant::now();
        let mut results = Vec::new();
        for i in 0..self.children.len() {
            let st = loop {
                if let Some(st) = self.children[i]
                    .try_wait()
                    .map_err(|e| Error::io("wait for client", e))?
                {
                    break st;
                }
                if crate::sys::interrupted() {
                    return Err(Error::Interrupted);
                }
                if start.elapsed() > limit {
                    return Err(Error::Command {
                        cmd: "pvfs_client".into(),
                        detail: format!("still running after {} s", limit.as_secs()),
                    });
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            let text = std::fs::read_to_string(&self.logs[i]).unwrap_or_default();
            if !st.success() {
                return Err(Error::Command {
                    cmd: "pvfs_client".into(),
                    detail: format!("{st}: {}", crate::cluster::read_tail(&self.logs[i])),
                });
            }
            results.push(
                parse_client_line(&text)
                    .ok_or_else(|| Error::Parse(format!("client output {:?}", text.trim())))?,
            );
        }
        self.children.clear();
        Ok(results)
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        for c in &mut self.children {
            stop_child(c, Duration::from_secs(2));
        }
    }
}

/// Parses the client's summary line `mode=… bytes=N ops=N elapsed_s=F …`.
fn parse_client_line(text: &str) -> Option<ClientResult> {
    let line = text.lines().rev().find(|l| l.starts_with("mode="))?;
    let mut r = ClientResult::default();
    for kv in line.split_whitespace() {
        let (k, v) = kv.split_once('=')?;
        match k {
            "bytes" => r.bytes = v.parse().ok()?,
            "ops" => r.ops = v.parse().ok()?,
            "elapsed_s" => r.elapsed_s = v.parse().ok()?,
            _ => {}
        }
    }
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_summary_is_parsed() {
        let r = parse_client_line("noise\nmode=write bytes=1024 ops=4 elapsed_s=0.500 MBps=0.00\n")
            .unwrap();
        assert_eq!(
            r,
            ClientResult {
                bytes: 1024,
                ops: 4,
                elapsed_s: 0.5
            }
        );
        assert!(parse_client_line("pvfs_client: error").is_none());
    }

    #[test]
    fn names_round_trip() {
        for w in Workload::ALL {
            assert_eq!(w.name().parse::<Workload>().unwrap(), w);
        }
        assert!("iozone".parse::<Workload>().is_err());
    }
}
