//! The mirror: chunks written into a local data root at their offsets, so that the reader and
//! the engine read the mirror as they read a node's own directory.
//!
//! Each chunk's bytes are written first, then its header (whose committed end is the chunk's
//! end): a reader never trusts bytes the mirror has not written, and a mirror stopped between
//! the two writes still has a valid (shorter) file. A chunk that ends at or before the mirrored
//! end is a duplicate (a redelivery, a shipper that resent after a crash) and is dropped; one
//! that starts past it would leave a hole and is refused.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use culprit_datadir::Dir;
use culprit_format::{decode::parse_header, DATA_OFFSET};

use crate::chunk::{Chunk, HEADER_LEN};
use crate::error::Error;

/// What [`Mirror::apply`] did with a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Its bytes extend the mirrored file.
    Written,
    /// Every byte was mirrored already: dropped.
    Duplicate,
}

/// A data root the chunks of a group's nodes are mirrored into.
#[derive(Debug)]
pub struct Mirror {
    root: Dir,
    nodes: HashMap<String, Dir>,
    /// Per (node, file): the file and its mirrored committed end.
    files: HashMap<(String, String), (File, u64)>,
}

impl Mirror {
    /// Opens (creating) the mirror root `path`.
    pub fn open(path: &Path) -> Result<Mirror, Error> {
        Ok(Mirror {
            root: Dir::open_root(path, true)?,
            nodes: HashMap::new(),
            files: HashMap::new(),
        })
    }

    /// The mirror root.
    pub fn root(&self) -> PathBuf {
        self.root.path().to_path_buf()
    }

    /// Nodes with at least one mirrored file.
    pub fn nodes(&self) -> usize {
        self.nodes.len()
    }

    /// Writes `c` into its file unless it is a duplicate. `c` must come from
    /// [`Chunk::from_message`] (names validated).
    pub fn apply(&mut self, c: &Chunk) -> Result<Applied, Error> {
        let key = (c.node.clone(), c.file.clone());
        if !self.files.contains_key(&key) {
            if !self.nodes.contains_key(&c.node) {
                let dir = self.root.node(&c.node, true)?;
                self.nodes.insert(c.node.clone(), dir);
            }
            // A new file begins at its data offset (after the header page and, for the
            // tracer, the stacks region): a first chunk elsewhere creates nothing.
            let dir = &self.nodes[&c.node];
            let start = data_offset(&c.header);
            if c.offset != start && std::fs::symlink_metadata(dir.path().join(&c.file)).is_err() {
                return Err(Error::Hostile(format!(
                    "{}/{}: first chunk at offset {}, not at the data offset {start}",
                    c.node, c.file, c.offset
                )));
            }
            let f = dir.open_or_create_file(&c.file)?;
            let end = mirrored_end(&f).unwrap_or(start);
            self.files.insert(key.clone(), (f, end));
        }
        let (f, end) = self.files.get_mut(&key).expect("inserted above");
        let chunk_end = c.offset + c.data.len() as u64;
        // A chunk of no bytes at the end carries a header (the file ended): written again.
        if chunk_end < *end || (chunk_end == *end && !c.data.is_empty()) {
            return Ok(Applied::Duplicate);
        }
        if c.offset > *end {
            return Err(Error::Hostile(format!(
                "{}/{}: chunk at offset {} is past the mirrored end {}",
                c.node, c.file, c.offset, end
            )));
        }
        let skip = (*end - c.offset) as usize;
        let path = || format!("{}/{}/{}", self.root.path().display(), c.node, c.file);
        f.write_all_at(&c.data[skip..], *end)
            .and_then(|()| f.write_all_at(&c.header, 0))
            .map_err(|e| Error::Io(format!("write {}: {e}", path())))?;
        *end = chunk_end;
        Ok(Applied::Written)
    }
}

/// The committed end of a mirrored file: its header's; `None` when it has none yet.
fn mirrored_end(f: &File) -> Option<u64> {
    let mut h = [0u8; HEADER_LEN];
    f.read_exact_at(&mut h, 0).ok()?;
    parse_header(&h).ok().map(|(h, _)| h.committed_end)
}

/// The data offset of a validated chunk header.
fn data_offset(header: &[u8; HEADER_LEN]) -> u64 {
    parse_header(header).map_or(DATA_OFFSET, |(h, _)| h.data_offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::chunk_header;
    use culprit_format::{FileHeader, FileKind};

    fn header(end: u64) -> [u8; HEADER_LEN] {
        chunk_header(&FileHeader::new(FileKind::Samples, 1, 7), end)
    }

    fn chunk(offset: u64, data: &[u8]) -> Chunk {
        Chunk {
            node: "n1".into(),
            file: "samples-1.cul".into(),
            offset,
            header: header(offset + data.len() as u64),
            data: data.to_vec(),
        }
    }

    fn tmp(tag: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("culprit-ship-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn chunks_land_at_their_offsets_and_resends_are_dropped() {
        let root = tmp("mirror");
        let mut m = Mirror::open(&root).unwrap();
        let d = DATA_OFFSET;
        assert_eq!(m.apply(&chunk(d, b"abcdefgh")).unwrap(), Applied::Written);
        assert_eq!(m.apply(&chunk(d, b"abcdefgh")).unwrap(), Applied::Duplicate);
        // A resend from the same offset that the file grew past: only the new bytes count.
        assert_eq!(
            m.apply(&chunk(d, b"abcdefghijklmnop")).unwrap(),
            Applied::Written
        );
        // A hole is refused, nothing written.
        assert!(matches!(
            m.apply(&chunk(d + 100, b"zz")),
            Err(Error::Hostile(_))
        ));
        let bytes = std::fs::read(root.join("n1/samples-1.cul")).unwrap();
        assert_eq!(&bytes[d as usize..], b"abcdefghijklmnop");
        let (h, _) = parse_header(&bytes[..HEADER_LEN]).unwrap();
        assert_eq!(h.committed_end, d + 16);
        // Reopened (the follower restarted): the end comes from the header.
        let mut m = Mirror::open(&root).unwrap();
        assert_eq!(m.apply(&chunk(d + 8, b"ijkl")).unwrap(), Applied::Duplicate);
        assert_eq!(m.apply(&chunk(d + 16, b"qr")).unwrap(), Applied::Written);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_link_in_the_mirror_is_not_followed() {
        let root = tmp("link");
        std::fs::create_dir_all(root.join("n1")).unwrap();
        let outside = root.with_extension("outside");
        std::fs::write(&outside, b"keep").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("n1/samples-1.cul")).unwrap();
        let mut m = Mirror::open(&root).unwrap();
        let e = m.apply(&chunk(DATA_OFFSET, b"x")).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        std::fs::remove_dir_all(&root).unwrap();
        std::fs::remove_file(&outside).unwrap();
    }
}
