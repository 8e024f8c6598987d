//! The message format: one message carries one chunk of one file's committed bytes.
//!
//! Subject `culprit.<group>.<node>`; headers `Culprit-Ship` (this format's version),
//! `Culprit-Node`, `Culprit-File`, `Culprit-Offset` and `Nats-Msg-Id` =
//! `<node>/<file>/<offset>-<end>` (JetStream drops a message whose id it saw within its duplicate
//! window); payload: the file's 128-byte header as of the chunk (`committed_end` = the chunk's
//! end, no checkpoint, no stacks region), then the bytes `offset..committed_end` of the file.
//! A mirror that writes the bytes at their offset and then the header has a file the reader
//! reads like the original, committed end included (docs/nats.md).

use async_nats::HeaderMap;
use culprit_format::{decode::parse_header, file_state, FileHeader, DATA_OFFSET};

/// This format's version (`Culprit-Ship` header).
pub const VERSION: &str = "1";
/// Most file bytes in one message (NATS' default message size limit is 1 MiB).
pub const MAX_CHUNK: usize = 512 << 10;
/// Largest file offset accepted (1 TiB): past it a message is refused, not written.
pub const MAX_FILE: u64 = 1 << 40;
/// Largest data offset a header may give (the tracer's is 68 KiB: the header page and the
/// stacks region).
pub const MAX_DATA_OFFSET: u64 = 16 << 20;
/// Bytes of the file header at the start of a payload.
pub const HEADER_LEN: usize = 128;
/// Node name the follower's verdicts use (`culprit.<group>.verdicts`): never a shipped node.
pub const VERDICTS: &str = "verdicts";

/// One chunk of a file's committed bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// The node (its directory's name).
    pub node: String,
    /// The file's name in the node directory.
    pub file: String,
    /// File offset of `data`'s first byte.
    pub offset: u64,
    /// The file's header with `committed_end` = `offset + data.len()`.
    pub header: [u8; HEADER_LEN],
    /// The bytes.
    pub data: Vec<u8>,
}

/// True for a file name a chunk may carry: a `.cul` file's name, `[A-Za-z0-9._-]`, not
/// starting with `.`, at most 128 bytes.
pub fn is_file_name(name: &str) -> bool {
    name.len() <= 128
        && name.len() > ".cul".len()
        && name.ends_with(".cul")
        && !name.starts_with('.')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// True for a group name: `[A-Za-z0-9_-]`, 1 to 64 bytes (one subject token, one stream name).
pub fn is_group_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

/// The subject a group's node publishes on.
pub fn subject(group: &str, node: &str) -> String {
    format!("culprit.{group}.{node}")
}

/// The JetStream stream holding a group's messages.
pub fn stream_name(group: &str) -> String {
    format!("CULPRIT_{group}")
}

/// The header a chunk ending at `end` carries: the file's as read, its committed end moved to
/// `end` (the file reads as ended only when `end` is where it ended), without the checkpoint
/// and the stacks region, which are not committed data.
pub fn chunk_header(file: &FileHeader, end: u64) -> [u8; HEADER_LEN] {
    let mut h = *file;
    if end < h.committed_end {
        h.state = file_state::OPEN;
    }
    h.committed_end = end;
    h.pending_end = 0;
    h.stacks_offset = 0;
    h.stacks_len = 0;
    h.to_bytes()
}

impl Chunk {
    /// The message id JetStream deduplicates by: `<node>/<file>/<offset>-<end>`. The end is
    /// part of it because a shipper that resumes after a crash may send a longer chunk from
    /// the same offset (the file grew meanwhile): with the offset alone JetStream would drop
    /// it as a resend and its new bytes would be lost.
    pub fn msg_id(&self) -> String {
        let end = self.offset + self.data.len() as u64;
        format!("{}/{}/{}-{end}", self.node, self.file, self.offset)
    }

    /// The message: headers and payload.
    pub fn to_message(&self) -> (HeaderMap, Vec<u8>) {
        let mut h = HeaderMap::new();
        h.insert("Culprit-Ship", VERSION);
        h.insert("Culprit-Node", self.node.as_str());
        h.insert("Culprit-File", self.file.as_str());
        h.insert("Culprit-Offset", self.offset.to_string().as_str());
        h.insert("Nats-Msg-Id", self.msg_id().as_str());
        let mut payload = Vec::with_capacity(HEADER_LEN + self.data.len());
        payload.extend_from_slice(&self.header);
        payload.extend_from_slice(&self.data);
        (h, payload)
    }

    /// Validates a message received on `subject` of `group`'s stream. Anything a hostile
    /// publisher could send wrong is an `Err` of one line: a node or file name that is not
    /// one plain name, a chunk too large, an offset inside the header or past
    /// [`MAX_FILE`], a header that does not parse or disagrees with the chunk, another
    /// format version.
    pub fn from_message(
        group: &str,
        subject: &str,
        headers: Option<&HeaderMap>,
        payload: &[u8],
    ) -> Result<Chunk, String> {
        let get = |k: &str| headers.and_then(|h| h.get(k)).map(|v| v.as_str());
        match get("Culprit-Ship") {
            None => return Err("not a culprit chunk (no Culprit-Ship header)".into()),
            Some(VERSION) => {}
            Some(v) => {
                return Err(format!(
                    "chunk format version {v:.20}; this culprit reads version {VERSION}"
                ))
            }
        }
        let node = get("Culprit-Node").unwrap_or_default();
        if !culprit_format::names::is_node_name(node) || node == VERDICTS {
            return Err(format!("node name {node:.80?} is not one plain name"));
        }
        if subject != self::subject(group, node) {
            return Err(format!("node {node} published on {subject:.120}"));
        }
        let file = get("Culprit-File").unwrap_or_default();
        if !is_file_name(file) {
            return Err(format!("file name {file:.140?} is not a plain .cul name"));
        }
        let offset: u64 = get("Culprit-Offset")
            .and_then(|o| o.parse().ok())
            .ok_or("no valid Culprit-Offset")?;
        if payload.len() < HEADER_LEN {
            return Err(format!("{node}/{file}: payload shorter than a file header"));
        }
        let len = payload.len() - HEADER_LEN;
        if len > MAX_CHUNK {
            return Err(format!(
                "{node}/{file}: chunk of {len} bytes (at most {MAX_CHUNK})"
            ));
        }
        if !(DATA_OFFSET..MAX_FILE).contains(&offset) || offset + len as u64 > MAX_FILE {
            return Err(format!(
                "{node}/{file}: offset {offset} outside {DATA_OFFSET}..{MAX_FILE}"
            ));
        }
        let (h, _) = parse_header(&payload[..HEADER_LEN])
            .map_err(|e| format!("{node}/{file}: file header: {e}"))?;
        if h.committed_end != offset + len as u64 {
            return Err(format!(
                "{node}/{file}: header's committed end {} is not the chunk's end {}",
                h.committed_end,
                offset + len as u64
            ));
        }
        if h.data_offset > offset || h.data_offset > MAX_DATA_OFFSET {
            return Err(format!(
                "{node}/{file}: data offset {} is past the chunk's offset {offset} or {}",
                h.data_offset, MAX_DATA_OFFSET
            ));
        }
        let mut header = [0; HEADER_LEN];
        header.copy_from_slice(&payload[..HEADER_LEN]);
        Ok(Chunk {
            node: node.to_string(),
            file: file.to_string(),
            offset,
            header,
            data: payload[HEADER_LEN..].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use culprit_format::FileKind;

    fn good() -> Chunk {
        let h = FileHeader::new(FileKind::Samples, 1, 7);
        Chunk {
            node: "web-1".into(),
            file: "samples-1.cul".into(),
            offset: DATA_OFFSET,
            header: chunk_header(&h, DATA_OFFSET + 3),
            data: b"abc".to_vec(),
        }
    }

    fn check(c: &Chunk, subject: &str) -> Result<Chunk, String> {
        let (h, p) = c.to_message();
        Chunk::from_message("g", subject, Some(&h), &p)
    }

    #[test]
    fn a_chunk_round_trips() {
        let c = good();
        assert_eq!(check(&c, "culprit.g.web-1").unwrap(), c);
        assert_eq!(c.msg_id(), "web-1/samples-1.cul/4096-4099");
    }

    #[test]
    fn hostile_messages_are_refused_in_one_line() {
        let mut cases: Vec<(Chunk, &str, &str)> = Vec::new();
        let mut c = good();
        c.node = "..".into();
        cases.push((c, "culprit.g...", "node name"));
        let mut c = good();
        c.file = "../../etc/passwd.cul".into();
        cases.push((c, "culprit.g.web-1", "file name"));
        let mut c = good();
        c.file = "a/b.cul".into();
        cases.push((c, "culprit.g.web-1", "file name"));
        cases.push((good(), "culprit.g.other", "published on"));
        let mut c = good();
        c.offset = MAX_FILE + 1;
        c.header = chunk_header(&FileHeader::new(FileKind::Samples, 1, 7), MAX_FILE + 4);
        cases.push((c, "culprit.g.web-1", "offset"));
        let mut c = good();
        c.data = vec![0; MAX_CHUNK + 1];
        cases.push((c, "culprit.g.web-1", "chunk of"));
        let mut c = good();
        c.header[..8].copy_from_slice(b"NOTCULPR");
        cases.push((c, "culprit.g.web-1", "file header"));
        let mut c = good();
        c.header[10] = 99; // min_reader_version
        cases.push((c, "culprit.g.web-1", "file header"));
        let mut c = good();
        c.offset += 1;
        cases.push((c, "culprit.g.web-1", "committed end"));
        for (c, subject, says) in cases {
            let e = check(&c, subject).unwrap_err();
            assert!(e.contains(says), "{e:?} should say {says:?}");
            assert!(!e.contains('\n') && e.len() < 300, "{e:?}");
        }
        let (mut h, p) = good().to_message();
        h.insert("Culprit-Ship", "2");
        let e = Chunk::from_message("g", "culprit.g.web-1", Some(&h), &p).unwrap_err();
        assert!(e.contains("version 2"), "{e}");
        let e = Chunk::from_message("g", "culprit.g.web-1", None, &p).unwrap_err();
        assert!(e.contains("not a culprit chunk"), "{e}");
    }
}
