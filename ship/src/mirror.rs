//! The mirror: chunks written into a local data root at their offsets, so that the reader and
//! the engine read the mirror as they read a node's own directory.
//!
//! Each chunk's bytes are written first, then its header (whose committed end is the chunk's
//! end): a reader never trusts bytes the mirror has not written, and a mirror stopped between
//! the two writes still has a valid (shorter) file. A chunk that ends at or before the mirrored
//! end is a duplicate (a redelivery, a shipper that resent after a crash) and is dropped; one
//! that starts past it would leave a hole and is refused.
//!
//! **Bounded, whatever the publishers send.** At most [`MAX_OPEN_FILES`] files are open at once
//! (the least recently written is closed, and reopened at its next chunk, its mirrored end read
//! back from its header); node directories are opened only to open a file in them. A new node
//! or file is created only by a chunk that is written: a refused first chunk leaves nothing
//! behind. At most [`MAX_NODES`] nodes, and at most the mirror's byte limit (each file counted
//! for its data and a header page): a chunk that would pass it is [`Error::MirrorFull`].

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt as _};
use std::path::{Path, PathBuf};

use culprit_datadir::Dir;
use culprit_format::{decode::parse_header, names, DATA_OFFSET};

use crate::chunk::{Chunk, HEADER_LEN};
use crate::error::Error;

/// Most mirrored files open at once.
pub const MAX_OPEN_FILES: usize = 32;
/// Most nodes one mirror holds (one follower diagnoses one group of peers).
pub const MAX_NODES: usize = 10_000;
/// Bytes a file counts for besides its data: its header page.
const FILE_OVERHEAD: u64 = DATA_OFFSET;

/// What [`Mirror::apply`] did with a chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Its bytes extend the mirrored file.
    Written,
    /// Every byte was mirrored already: dropped.
    Duplicate,
}

/// An open mirrored file.
#[derive(Debug)]
struct OpenFile {
    node: String,
    file: String,
    f: File,
    /// Its mirrored committed end.
    end: u64,
    /// When it was last written (the mirror's chunk count): the least recent is closed first.
    used_at: u64,
}

/// A data root the chunks of a group's nodes are mirrored into.
#[derive(Debug)]
pub struct Mirror {
    root: Dir,
    /// Nodes with a directory in the mirror.
    nodes: HashSet<String>,
    /// The files open now (at most [`MAX_OPEN_FILES`]).
    open: Vec<OpenFile>,
    /// Chunks applied (the clock of `OpenFile::used_at`).
    tick: u64,
    /// Bytes the mirror holds (disk use of its files when opened, then what was written).
    used: u64,
    /// Most bytes it may hold.
    limit: u64,
}

impl Mirror {
    /// Opens (creating) the mirror root `path`, holding at most `limit` bytes (what is there
    /// already counts).
    pub fn open(path: &Path, limit: u64) -> Result<Mirror, Error> {
        let root = Dir::open_root(path, true)?;
        let (mut nodes, mut used) = (HashSet::new(), 0);
        if let Ok(rd) = std::fs::read_dir(root.path()) {
            for node in rd.flatten() {
                let name = node.file_name().to_string_lossy().into_owned();
                let is_dir = node.file_type().is_ok_and(|t| t.is_dir());
                if !is_dir || !names::is_node_name(&name) {
                    continue;
                }
                for f in std::fs::read_dir(node.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    used += f.metadata().map_or(0, |m| m.blocks() * 512);
                }
                nodes.insert(name);
            }
        }
        Ok(Mirror {
            root,
            nodes,
            open: Vec::new(),
            tick: 0,
            used,
            limit,
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

    /// Bytes the mirror holds.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Files open now.
    pub fn open_files(&self) -> usize {
        self.open.len()
    }

    /// Writes `c` into its file unless it is a duplicate. `c` must come from
    /// [`Chunk::from_message`] (names validated).
    pub fn apply(&mut self, c: &Chunk) -> Result<Applied, Error> {
        self.tick += 1;
        let i = match self
            .open
            .iter()
            .position(|o| o.node == c.node && o.file == c.file)
        {
            Some(i) => i,
            None => self.open_file(c)?,
        };
        let o = &mut self.open[i];
        o.used_at = self.tick;
        let chunk_end = c.offset + c.data.len() as u64;
        // A chunk of no bytes at the end carries a header (the file ended): written again.
        if chunk_end < o.end || (chunk_end == o.end && !c.data.is_empty()) {
            return Ok(Applied::Duplicate);
        }
        if c.offset > o.end {
            return Err(Error::Hostile(format!(
                "{}/{}: chunk at offset {} is past the mirrored end {}",
                c.node, c.file, c.offset, o.end
            )));
        }
        let grows = chunk_end - o.end;
        if self.used.saturating_add(grows) > self.limit {
            return Err(self.full());
        }
        let skip = (o.end - c.offset) as usize;
        let path = || format!("{}/{}/{}", self.root.path().display(), c.node, c.file);
        o.f.write_all_at(&c.data[skip..], o.end)
            .and_then(|()| o.f.write_all_at(&c.header, 0))
            .map_err(|e| Error::Io(format!("write {}: {e}", path())))?;
        o.end = chunk_end;
        self.used += grows;
        Ok(Applied::Written)
    }

    /// Opens (creating: the node's directory too) the file of `c`, closing the least recently
    /// written one beyond [`MAX_OPEN_FILES`]; its index in `open`. Nothing is created for a
    /// chunk that is refused.
    fn open_file(&mut self, c: &Chunk) -> Result<usize, Error> {
        // A new file begins at its data offset (after the header page and, for the tracer,
        // the stacks region): a first chunk elsewhere creates nothing.
        let start = data_offset(&c.header);
        let first = |what: &str| {
            Error::Hostile(format!(
                "{}/{}: first chunk of a new {what} at offset {}, not at the data offset {start}",
                c.node, c.file, c.offset
            ))
        };
        let new_node = !self.nodes.contains(&c.node);
        let dir = if new_node {
            if c.offset != start {
                return Err(first("node"));
            }
            if self.nodes.len() >= MAX_NODES {
                return Err(Error::Hostile(format!(
                    "{}: the mirror holds {MAX_NODES} nodes already",
                    c.node
                )));
            }
            self.check_room(FILE_OVERHEAD + c.data.len() as u64)?;
            let dir = self.root.node(&c.node, true)?;
            self.nodes.insert(c.node.clone());
            dir
        } else {
            self.root.node(&c.node, false)?
        };
        let exists = std::fs::symlink_metadata(dir.path().join(&c.file)).is_ok();
        if !exists {
            if c.offset != start {
                return Err(first("file"));
            }
            self.check_room(FILE_OVERHEAD + c.data.len() as u64)?;
        }
        let f = dir.open_or_create_file(&c.file)?;
        if !exists {
            self.used += FILE_OVERHEAD;
        }
        let end = mirrored_end(&f).unwrap_or(start);
        if self.open.len() >= MAX_OPEN_FILES {
            let lru = (0..self.open.len())
                .min_by_key(|&i| self.open[i].used_at)
                .expect("files are open");
            self.open.swap_remove(lru);
        }
        self.open.push(OpenFile {
            node: c.node.clone(),
            file: c.file.clone(),
            f,
            end,
            used_at: self.tick,
        });
        Ok(self.open.len() - 1)
    }

    /// An error unless `bytes` more fit under the limit.
    fn check_room(&self, bytes: u64) -> Result<(), Error> {
        if self.used.saturating_add(bytes) > self.limit {
            return Err(self.full());
        }
        Ok(())
    }

    fn full(&self) -> Error {
        Error::MirrorFull(format!(
            "the mirror {} holds {} bytes, and its limit is {} (--mirror-max-size)",
            self.root.path().display(),
            self.used,
            self.limit
        ))
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
        let mut m = Mirror::open(&root, u64::MAX).unwrap();
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
        let mut m = Mirror::open(&root, u64::MAX).unwrap();
        assert_eq!(m.apply(&chunk(d + 8, b"ijkl")).unwrap(), Applied::Duplicate);
        assert_eq!(m.apply(&chunk(d + 16, b"qr")).unwrap(), Applied::Written);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn open_files_are_bounded_and_reopened_and_the_limit_holds() {
        let root = tmp("lru");
        let mut m = Mirror::open(&root, u64::MAX).unwrap();
        let d = DATA_OFFSET;
        let named = |i: usize, offset: u64, data: &[u8]| Chunk {
            file: format!("samples-{i}.cul"),
            ..chunk(offset, data)
        };
        for i in 0..100 {
            assert_eq!(m.apply(&named(i, d, b"abcd")).unwrap(), Applied::Written);
            assert!(m.open_files() <= MAX_OPEN_FILES);
        }
        // File 0 was closed long ago: reopened, its end read back from its header.
        assert_eq!(m.apply(&named(0, d, b"abcd")).unwrap(), Applied::Duplicate);
        assert_eq!(m.apply(&named(0, d + 4, b"ef")).unwrap(), Applied::Written);
        let bytes = std::fs::read(root.join("n1/samples-0.cul")).unwrap();
        assert_eq!(&bytes[d as usize..], b"abcdef");
        // A mirror reopened counts what it holds: one more byte does not fit.
        let used = Mirror::open(&root, u64::MAX).unwrap().used();
        assert!(used >= 100 * d, "{used}");
        let mut m = Mirror::open(&root, used).unwrap();
        assert!(matches!(
            m.apply(&named(0, d + 6, b"g")),
            Err(Error::MirrorFull(_))
        ));
        // Nor does a new node, and nothing is created for it.
        let other = Chunk {
            node: "n2".into(),
            ..chunk(d, b"x")
        };
        assert!(matches!(m.apply(&other), Err(Error::MirrorFull(_))));
        assert!(!root.join("n2").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_link_in_the_mirror_is_not_followed() {
        let root = tmp("link");
        std::fs::create_dir_all(root.join("n1")).unwrap();
        let outside = root.with_extension("outside");
        std::fs::write(&outside, b"keep").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("n1/samples-1.cul")).unwrap();
        let mut m = Mirror::open(&root, u64::MAX).unwrap();
        let e = m.apply(&chunk(DATA_OFFSET, b"x")).unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        std::fs::remove_dir_all(&root).unwrap();
        std::fs::remove_file(&outside).unwrap();
    }
}
