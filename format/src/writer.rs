//! A plain-file writer: append records with `pwrite`, then advance `committed_end`.
//!
//! The sampler (an ordinary process) and tests use this. The tracer runtime writes the same
//! layout with `pwrite` too, but reopens its file for every write (it keeps no descriptor in
//! the program it is loaded into). Where a file is created is the caller's business: the
//! writers create theirs safely with the `culprit-datadir` crate and hand them to
//! [`FileWriter::from_file`].

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::encode::RecordBuf;
use crate::layout::*;

/// An open `.cul` file being appended to.
#[derive(Debug)]
pub struct FileWriter {
    file: File,
    path: PathBuf,
    end: u64,
}

impl FileWriter {
    /// Creates `dir/<name_for(seq)>` for the first `seq` in `0..1000` whose name is free
    /// (`O_EXCL`), and writes an empty header. For tests and tools: `dir` is trusted as given
    /// (the writers create their files with `culprit-datadir` and [`Self::from_file`]).
    pub fn create_unique(
        dir: &Path,
        name_for: impl Fn(u32) -> String,
        kind: FileKind,
        created_ns: u64,
        pid: u32,
    ) -> io::Result<Self> {
        for seq in 0..1000 {
            let path = dir.join(name_for(seq));
            match OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o644)
                .open(&path)
            {
                Ok(file) => return Self::from_file(file, path, kind, created_ns, pid),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("no free file name in {}", dir.display()),
        ))
    }

    /// Starts a new, empty `.cul` file in `file` (just created, open for writing, at `path`):
    /// writes its header page.
    pub fn from_file(
        file: File,
        path: PathBuf,
        kind: FileKind,
        created_ns: u64,
        pid: u32,
    ) -> io::Result<Self> {
        file.write_all_at(&header_page(kind, created_ns, pid), 0)?;
        Ok(FileWriter {
            file,
            path,
            end: DATA_OFFSET,
        })
    }

    /// Path of the file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Offset up to which records are committed.
    pub fn committed_end(&self) -> u64 {
        self.end
    }

    /// Appends the records in `buf` and commits them. On error nothing is committed (the bytes
    /// past `committed_end` are ignored by readers) and the buffer can be retried.
    pub fn append(&mut self, buf: &RecordBuf) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        self.file.write_all_at(buf.as_bytes(), self.end)?;
        let new_end = self.end + buf.len() as u64;
        self.file
            .write_all_at(&new_end.to_le_bytes(), HEADER_COMMITTED_END_OFFSET as u64)?;
        self.end = new_end;
        Ok(())
    }

    /// Appends an [`End`](RecordKind::End) record and marks the file ended.
    pub fn finish(mut self, end_ns: u64, reason: u32) -> io::Result<PathBuf> {
        let mut buf = RecordBuf::new();
        buf.end(end_ns, reason);
        self.append(&buf)?;
        self.file
            .write_all_at(&file_state::ENDED.to_le_bytes(), HEADER_STATE_OFFSET as u64)?;
        Ok(self.path)
    }

    /// Asks the kernel to write the file to disk (`fdatasync`).
    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// The first [`DATA_OFFSET`] bytes of a new, empty file: its header, zero-padded.
pub fn header_page(kind: FileKind, created_ns: u64, pid: u32) -> Vec<u8> {
    page_of(&FileHeader::new(kind, created_ns, pid))
}

/// The header page of a new, empty file with a stacks region of `stacks_len` bytes after it
/// (see [`FileHeader::with_stacks`]); the region reads as zeros (no snapshot) until written.
pub fn header_page_with_stacks(
    kind: FileKind,
    created_ns: u64,
    pid: u32,
    stacks_len: u64,
) -> Vec<u8> {
    page_of(&FileHeader::with_stacks(kind, created_ns, pid, stacks_len))
}

fn page_of(header: &FileHeader) -> Vec<u8> {
    let mut page = vec![0u8; DATA_OFFSET as usize];
    page[..128].copy_from_slice(&header.to_bytes());
    page
}
