//! The process's `.cul` file: created safely in the node directory (`culprit-datadir`) and
//! written with `pwrite`, reopened for every write.
//!
//! * **No shared mapping.** The hooks write only the runtime's own memory; the flusher copies
//!   it into the file. Truncating, replacing or removing the file cannot fault the program
//!   (a store into a shared mapping of a truncated file raises SIGBUS); the flusher notices at
//!   its next write ([`WriteError::Gone`]) and starts a new file.
//! * **No descriptor kept.** Daemons close descriptors they do not know and reuse the numbers
//!   for their own files; a kept descriptor would then point into one of them. Each write
//!   opens the data root, the node directory and the file (all without following links, and
//!   checking that the file is still the one created), and closes them again.
//! * **Stacks region.** Between the header page and the records, every live thread's innermost
//!   open calls, rewritten in place at every interval ([`TraceOut::stacks`]; two slots
//!   written alternately, see `culprit_format::stacks`).
//! * **Checkpoints.** [`TraceOut::checkpoint`] keeps the interval in progress past the
//!   committed end (header field `pending_end`), rewritten in place; readers use it only when
//!   the process is gone. A crash then loses only the calls since the last checkpoint.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use culprit_datadir::{Dir, FileId};
use culprit_format::stacks::{slot_offset, STACKS_REGION_SIZE};
use culprit_format::{
    file_state, writer::header_page_with_stacks, FileKind, DATA_OFFSET,
    HEADER_COMMITTED_END_OFFSET, HEADER_PENDING_END_OFFSET, HEADER_STATE_OFFSET, MAGIC,
};

/// Why a write did not happen.
#[derive(Debug)]
pub enum WriteError {
    /// The file (or its directory) is gone, was replaced, or was cut short: start a new one.
    Gone(String),
    /// The directory is no longer safe to write into: stop writing.
    Refused(String),
    /// Anything else (a full disk, an I/O error): keep the records and try again later.
    Failed(String),
}

impl From<culprit_datadir::Error> for WriteError {
    fn from(e: culprit_datadir::Error) -> Self {
        use culprit_datadir::Error as E;
        match &e {
            E::Refused { .. } => WriteError::Refused(e.to_string()),
            E::Replaced { .. } => WriteError::Gone(e.to_string()),
            E::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                WriteError::Gone(e.to_string())
            }
            _ => WriteError::Failed(e.to_string()),
        }
    }
}

impl std::fmt::Display for WriteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WriteError::Gone(m) | WriteError::Refused(m) | WriteError::Failed(m) => f.write_str(m),
        }
    }
}

fn failed(path: &Path, e: std::io::Error) -> WriteError {
    WriteError::Failed(format!("cannot write {}: {e}", path.display()))
}

/// A trace file being written.
#[derive(Debug)]
pub struct TraceOut {
    root: PathBuf,
    node: String,
    name: String,
    path: PathBuf,
    id: FileId,
    /// Committed end.
    end: u64,
    /// The header announces a checkpoint.
    pending: bool,
}

impl TraceOut {
    /// Creates `root/<node>/<name_for(seq)>` (root and node directory created or checked) with
    /// its header. Returns it and the node directory (to update `node.info`; drop it soon).
    pub fn create(
        root: &Path,
        node: &str,
        name_for: impl Fn(u32) -> String,
        created_ns: u64,
        pid: u32,
    ) -> Result<(TraceOut, Dir), WriteError> {
        let dir = Dir::open_root(root, true)?.node(node, true)?;
        let (f, name) = dir.create_file(name_for)?;
        let path = dir.path().join(&name);
        let page = header_page_with_stacks(FileKind::Trace, created_ns, pid, STACKS_REGION_SIZE);
        f.write_all_at(&page, 0).map_err(|e| failed(&path, e))?;
        // The stacks region is a hole until the first snapshot (the file is sparse).
        f.set_len(DATA_OFFSET + STACKS_REGION_SIZE)
            .map_err(|e| failed(&path, e))?;
        let id = FileId::of(&f).map_err(|e| failed(&path, e))?;
        Ok((
            TraceOut {
                root: root.to_path_buf(),
                node: node.to_string(),
                name,
                path,
                id,
                end: DATA_OFFSET + STACKS_REGION_SIZE,
                pending: false,
            },
            dir,
        ))
    }

    /// Bytes committed so far (header page and stacks region included).
    pub fn size(&self) -> u64 {
        self.end
    }

    /// The file's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Opens the file again, checking it is still the one created and not cut short.
    fn open(&self) -> Result<File, WriteError> {
        let f = Dir::open_root(&self.root, false)?
            .node(&self.node, false)?
            .open_file(&self.name, self.id)?;
        let len = f.metadata().map_err(|e| failed(&self.path, e))?.len();
        if len < self.end {
            return Err(WriteError::Gone(format!(
                "{} was cut short ({len} of {} bytes)",
                self.path.display(),
                self.end
            )));
        }
        // Cut short and written again since (our own write may have refilled it with zeros).
        let mut magic = [0u8; 8];
        match f.read_exact_at(&mut magic, 0) {
            Ok(()) if magic == MAGIC => Ok(f),
            _ => Err(WriteError::Gone(format!(
                "{} was overwritten",
                self.path.display()
            ))),
        }
    }

    fn drop_pending(&mut self, f: &File) -> Result<(), WriteError> {
        if self.pending {
            f.write_all_at(&0u64.to_le_bytes(), HEADER_PENDING_END_OFFSET as u64)
                .map_err(|e| failed(&self.path, e))?;
            self.pending = false;
        }
        Ok(())
    }

    fn commit_in(&mut self, f: &File, records: &[u8]) -> Result<(), WriteError> {
        self.drop_pending(f)?;
        if records.is_empty() {
            return Ok(());
        }
        f.write_all_at(records, self.end)
            .map_err(|e| failed(&self.path, e))?;
        let end = self.end + records.len() as u64;
        f.write_all_at(&end.to_le_bytes(), HEADER_COMMITTED_END_OFFSET as u64)
            .map_err(|e| failed(&self.path, e))?;
        self.end = end;
        Ok(())
    }

    /// Appends encoded records and commits them (any checkpoint is dropped first: the records
    /// hold its counts). On error nothing new is committed.
    pub fn commit(&mut self, records: &[u8]) -> Result<(), WriteError> {
        let f = self.open()?;
        self.commit_in(&f, records)
    }

    /// Writes `record` (one PARTIAL Interval record: the interval in progress) past the
    /// committed end and announces it in the header, replacing the previous checkpoint.
    pub fn checkpoint(&mut self, record: &[u8]) -> Result<(), WriteError> {
        let f = self.open()?;
        self.drop_pending(&f)?;
        f.write_all_at(record, self.end)
            .map_err(|e| failed(&self.path, e))?;
        let pend = self.end + record.len() as u64;
        f.write_all_at(&pend.to_le_bytes(), HEADER_PENDING_END_OFFSET as u64)
            .map_err(|e| failed(&self.path, e))?;
        self.pending = true;
        Ok(())
    }

    /// Writes stack snapshot number `seq` (an encoded slot) into its slot of the stacks region.
    pub fn stacks(&mut self, seq: u64, slot: &[u8]) -> Result<(), WriteError> {
        let f = self.open()?;
        f.write_all_at(slot, slot_offset(DATA_OFFSET, seq))
            .map_err(|e| failed(&self.path, e))
    }

    /// Commits the last records, marks the file ended and cuts off anything past them.
    pub fn finish(mut self, records: &[u8]) -> Result<(), WriteError> {
        let f = self.open()?;
        self.commit_in(&f, records)?;
        f.write_all_at(&file_state::ENDED.to_le_bytes(), HEADER_STATE_OFFSET as u64)
            .map_err(|e| failed(&self.path, e))?;
        f.set_len(self.end).map_err(|e| failed(&self.path, e))
    }
}
