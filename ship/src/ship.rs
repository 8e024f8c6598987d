//! `culprit ship`: a node directory's committed bytes published to JetStream, resumed from the
//! last acknowledged position of each file.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;
use std::time::Duration;

use async_nats::jetstream::{self, context::Context};
use culprit_datadir::Dir;
use culprit_format::{decode::parse_header, file_state, FileHeader, DATA_OFFSET};

use crate::chunk::{self, Chunk, HEADER_LEN, MAX_CHUNK};
use crate::config::ShipConfig;
use crate::error::Error;
use crate::{ensure_stream, runtime, Backoff};

/// Largest state file read back.
const MAX_STATE: u64 = 1 << 20;
/// How often the files are looked at when nothing was new.
const POLL: Duration = Duration::from_millis(100);
const WHO: &str = "culprit ship";

/// What the broker acknowledged of one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Shipped {
    /// The file's bytes up to here.
    end: u64,
    /// The header saying the file ended.
    ended: bool,
}

/// The state file of `group` in a node directory: `<file> <acknowledged end>[ ended]` lines.
pub fn state_file_name(group: &str) -> String {
    format!(".ship-{group}.state")
}

/// Ships until killed (or, with `until_ended`, until every file ended and is acknowledged).
pub fn run(cfg: &ShipConfig) -> Result<(), Error> {
    if !chunk::is_group_name(&cfg.group) {
        return Err(Error::Usage(format!(
            "--group {:?}: use 1 to 64 of [A-Za-z0-9_-]",
            cfg.group
        )));
    }
    cfg.broker.check_secure()?;
    let node = cfg
        .node_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !culprit_format::names::is_node_name(&node) || node == chunk::VERDICTS {
        return Err(Error::Usage(format!(
            "{}: give a node's directory (DATA/<node>), its name a node name",
            cfg.node_dir.display()
        )));
    }
    let dir = Dir::open_root(&cfg.node_dir, false)?;
    runtime()?.block_on(ship(cfg, &node, &dir))
}

async fn ship(cfg: &ShipConfig, node: &str, dir: &Dir) -> Result<(), Error> {
    let state_name = state_file_name(&cfg.group);
    let mut acked = load_state(dir, &state_name)?;
    let client = cfg
        .broker
        .connect(&format!("culprit ship {node}"), WHO)
        .await?;
    let js = jetstream::new(client);
    ensure_stream(&js, &cfg.group, cfg.stream, WHO).await?;
    let subject = chunk::subject(&cfg.group, node);
    eprintln!(
        "{WHO}: shipping {} to {subject} ({} file(s) resumed)",
        cfg.node_dir.display(),
        acked.len()
    );
    loop {
        let names = cul_files(dir.path())?;
        acked.retain(|name, _| names.contains(name));
        let mut shipped = false;
        let mut all_ended = !names.is_empty();
        for name in &names {
            let Some((file, header)) = open(dir.path(), name) else {
                all_ended = false;
                continue;
            };
            let ended = header.state == file_state::ENDED;
            let from = acked.get(name).copied().unwrap_or(Shipped {
                end: header.data_offset,
                ended: false,
            });
            // Nothing new, unless the file ended after its last bytes were shipped: then a
            // chunk of no bytes carries the header that says so.
            if header.committed_end <= from.end && (from.ended || !ended) {
                all_ended &= from.ended;
                continue;
            }
            all_ended = false;
            let end = header.committed_end.min(from.end + MAX_CHUNK as u64);
            let mut data = vec![0; end.saturating_sub(from.end) as usize];
            if file.read_exact_at(&mut data, from.end).is_err() {
                continue; // cut short under us (pruned): listed again next time
            }
            let c = Chunk {
                node: node.to_string(),
                file: name.clone(),
                offset: from.end,
                header: chunk::chunk_header(&header, end),
                data,
            };
            publish(&js, cfg, &subject, &c).await?;
            let ended = ended && end == header.committed_end;
            acked.insert(name.clone(), Shipped { end, ended });
            save_state(dir, &state_name, &acked)?;
            shipped = true;
        }
        if all_ended && cfg.until_ended {
            eprintln!("{WHO}: every file ended and is shipped");
            return Ok(());
        }
        if !shipped {
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Publishes `c` until the broker acknowledges it (a resend after a lost acknowledgement has
/// the same message id, which JetStream drops within its duplicate window).
async fn publish(js: &Context, cfg: &ShipConfig, subject: &str, c: &Chunk) -> Result<(), Error> {
    let mut backoff = Backoff::new(WHO);
    loop {
        let (headers, payload) = c.to_message();
        let sent = match js
            .publish_with_headers(subject.to_string(), headers, payload.into())
            .await
        {
            Ok(ack) => ack.await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match sent {
            Ok(_) => {
                backoff.recovered("the broker acknowledges");
                return Ok(());
            }
            Err(e) => {
                backoff.failed(&format!("not acknowledged ({e})")).await?;
                if e.contains("no responders") {
                    // The broker lost the stream (a new store): create it again.
                    ensure_stream(js, &cfg.group, cfg.stream, WHO).await?;
                }
            }
        }
    }
}

/// The node directory's `.cul` files, sorted.
fn cul_files(dir: &Path) -> Result<Vec<String>, Error> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::Io(format!("{}: {e}", dir.display())))?;
    let mut names: Vec<String> = rd
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| chunk::is_file_name(n))
        .collect();
    names.sort();
    Ok(names)
}

/// The file (a regular file, not a link) and its header; `None` while it has none yet.
fn open(dir: &Path, name: &str) -> Option<(File, FileHeader)> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(dir.join(name))
        .ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    let mut h = [0u8; HEADER_LEN];
    f.read_exact_at(&mut h, 0).ok()?;
    let (header, _) = parse_header(&h).ok()?;
    Some((f, header))
}

fn load_state(dir: &Dir, name: &str) -> Result<BTreeMap<String, Shipped>, Error> {
    let Some(bytes) = dir.read_small_file(name, MAX_STATE)? else {
        return Ok(BTreeMap::new());
    };
    let text = String::from_utf8_lossy(&bytes);
    let mut acked = BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        let mut words = line.split(' ');
        let file = words.next().filter(|f| chunk::is_file_name(f));
        let end = words
            .next()
            .and_then(|o| o.parse::<u64>().ok())
            .filter(|o| *o >= DATA_OFFSET);
        let ended = match words.next() {
            None => Some(false),
            Some("ended") => Some(true),
            Some(_) => None,
        };
        let (Some(file), Some(end), Some(ended), None) = (file, end, ended, words.next()) else {
            return Err(Error::Io(format!(
                "{}/{name}: not a ship state line: {line:.100?} (remove the file to ship \
                 everything again; the mirror drops what it has)",
                dir.path().display()
            )));
        };
        acked.insert(file.to_string(), Shipped { end, ended });
    }
    Ok(acked)
}

fn save_state(dir: &Dir, name: &str, acked: &BTreeMap<String, Shipped>) -> Result<(), Error> {
    let text: String = acked
        .iter()
        .map(|(f, s)| format!("{f} {}{}\n", s.end, if s.ended { " ended" } else { "" }))
        .collect();
    Ok(dir.replace_file(name, text.as_bytes())?)
}
