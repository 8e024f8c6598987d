//! Where records come from. A [`Source`] lists the nodes and, per node, one byte stream per
//! writer (a traced process, a sampler run) in the record format of `culprit-format`; the loader
//! reads each stream's committed records past what it has read before. [`DirSource`] reads data
//! directories (`DATA/<node>/*.cul`); a source fed by a message stream (NATS JetStream) keeps
//! each writer's records as a stream of the same bytes.

use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use culprit_format::names::{self, NodeInfo};
pub use culprit_format::read::ReadAt;

use crate::error::{Error, Result};

/// A node and its writers' streams, as a [`Source`] sees them now.
#[derive(Clone, Debug)]
pub struct NodeListing {
    /// Node name.
    pub name: String,
    /// Where its data is (its directory), for messages.
    pub dir: PathBuf,
    /// Its metadata (`node.info`), if present and valid.
    pub info: Option<NodeInfo>,
    /// Its streams, one per writer, sorted.
    pub streams: Vec<PathBuf>,
}

/// Where records come from. See the module documentation.
pub trait Source: fmt::Debug + Send {
    /// What the source reads, for messages (`DATA`, `run1, run2`).
    fn describe(&self) -> String;

    /// The nodes as of now whose names `wanted` accepts, each with its streams; `warn` hears
    /// about what is skipped (one line each).
    fn scan(
        &mut self,
        wanted: &dyn Fn(&str) -> bool,
        warn: &mut dyn FnMut(String),
    ) -> Result<Vec<NodeListing>>;

    /// Opens a stream listed by [`Source::scan`].
    fn open(&mut self, stream: &Path) -> io::Result<Box<dyn ReadAt>>;
}

/// Data directories: each path is a data root (holding `<node>/` directories) or one node's
/// directory (holding `.cul` files).
#[derive(Clone, Debug)]
pub struct DirSource {
    paths: Vec<PathBuf>,
    include_unassigned: bool,
}

impl DirSource {
    /// The directories `paths`; `include_unassigned` also reads `_unassigned/` (samples that
    /// belong to no known node).
    pub fn new(paths: Vec<PathBuf>, include_unassigned: bool) -> Self {
        DirSource {
            paths,
            include_unassigned,
        }
    }

    /// Node directories under the given paths: `(name, directory)`; `skipped` hears about
    /// directories of data whose names cannot be nodes.
    fn node_dirs(&self, skipped: &mut Vec<String>) -> Result<Vec<NodeDir>> {
        if self.paths.is_empty() {
            return Err(Error::Data("no data directory given".into()));
        }
        let mut out = Vec::new();
        for p in &self.paths {
            let meta = std::fs::metadata(p).map_err(|e| {
                Error::io(
                    format!(
                        "{}: cannot open data directory (record data with `culprit record` or \
                         `culprit sample` first)",
                        p.display()
                    ),
                    e,
                )
            })?;
            if !meta.is_dir() {
                return Err(Error::Data(format!(
                    "{}: not a directory (give a data directory)",
                    p.display()
                )));
            }
            if names::dir_has_data(p) {
                let name = p
                    .canonicalize()
                    .ok()
                    .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .unwrap_or_else(|| "node".to_string());
                out.push(NodeDir {
                    name,
                    dir: p.clone(),
                });
                continue;
            }
            let rd = std::fs::read_dir(p)
                .map_err(|e| Error::io(format!("{}: cannot read directory", p.display()), e))?;
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let dir = e.path();
                if !dir.is_dir() {
                    continue;
                }
                if names::is_node_name(&name)
                    || (self.include_unassigned && name == names::UNASSIGNED_DIR)
                {
                    out.push(NodeDir { name, dir });
                } else if !name.starts_with(['.', '_']) && names::dir_has_data(&dir) {
                    // Not `_unassigned` and other non-nodes, nor hidden directories: a
                    // directory of data under a name that cannot be a node.
                    skipped.push(format!(
                        "skipping {}: {name:?} is not a valid node name (1..{} characters of \
                         [A-Za-z0-9._-], not starting with '.' or '_')",
                        dir.display(),
                        names::MAX_NODE_NAME
                    ));
                }
            }
        }
        Ok(out)
    }
}

/// A node's directory.
struct NodeDir {
    name: String,
    dir: PathBuf,
}

impl Source for DirSource {
    fn describe(&self) -> String {
        let list: Vec<String> = self.paths.iter().map(|p| p.display().to_string()).collect();
        list.join(", ")
    }

    fn scan(
        &mut self,
        wanted: &dyn Fn(&str) -> bool,
        warn: &mut dyn FnMut(String),
    ) -> Result<Vec<NodeListing>> {
        let mut out = Vec::new();
        let mut skipped = Vec::new();
        let dirs = self.node_dirs(&mut skipped)?;
        skipped.into_iter().for_each(&mut *warn);
        for NodeDir { name, dir } in dirs {
            if !wanted(&name) {
                continue;
            }
            let info = std::fs::read_to_string(dir.join(names::NODE_INFO_FILE))
                .ok()
                .and_then(|text| NodeInfo::parse(&text));
            let mut streams: Vec<PathBuf> = match std::fs::read_dir(&dir) {
                Ok(rd) => rd
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| names::is_data_file(p))
                    .collect(),
                Err(e) => {
                    warn(format!("{}: cannot read: {e}", dir.display()));
                    Vec::new()
                }
            };
            // Only regular files: opening a FIFO named like a data file would block for ever.
            streams.retain(|p| match std::fs::metadata(p) {
                Ok(m) if !m.is_file() => {
                    warn(format!("skipping {}: not a regular file", p.display()));
                    false
                }
                _ => true,
            });
            streams.sort();
            out.push(NodeListing {
                name,
                dir,
                info,
                streams,
            });
        }
        Ok(out)
    }

    fn open(&mut self, stream: &Path) -> io::Result<Box<dyn ReadAt>> {
        Ok(Box::new(DataFile(File::open(stream)?)))
    }
}

/// A data file.
struct DataFile(File);

impl ReadAt for DataFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        ReadAt::read_at(&self.0, buf, offset)
    }

    fn size(&self) -> io::Result<u64> {
        ReadAt::size(&self.0)
    }

    /// Modified in the last few seconds: a data file whose header is still zero then is being
    /// created, not damaged.
    fn settling(&self) -> bool {
        self.0
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age < std::time::Duration::from_secs(10))
    }
}
