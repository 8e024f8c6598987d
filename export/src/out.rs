//! Where an export goes: standard output, or a file written beside its target and renamed over
//! it once complete (an export that fails leaves the target as it was).

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// An output being written.
pub(crate) struct Out {
    w: BufWriter<Box<dyn Write>>,
    /// (partial file, target) for a file output.
    file: Option<(PathBuf, PathBuf)>,
}

impl std::fmt::Debug for Out {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Out").field("file", &self.file).finish()
    }
}

/// `dir/.name.partial-PID`: where `target` is written until complete.
pub(crate) fn partial_path(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "export".into());
    target.with_file_name(format!(".{name}.partial-{}", std::process::id()))
}

impl Out {
    /// `path`, or standard output. `binary` outputs refuse a terminal.
    pub(crate) fn create(path: Option<&Path>, binary: bool) -> Result<Out> {
        match path {
            None => {
                let stdout = io::stdout();
                if binary && stdout.is_terminal() {
                    return Err(Error::Usage(
                        "this format is binary: give -o FILE (or redirect standard output)".into(),
                    ));
                }
                Ok(Out {
                    w: BufWriter::with_capacity(1 << 16, Box::new(stdout)),
                    file: None,
                })
            }
            Some(target) => {
                if target.is_dir() {
                    return Err(Error::Usage(format!(
                        "-o {}: is a directory (this format writes one file)",
                        target.display()
                    )));
                }
                let partial = partial_path(target);
                let f =
                    File::create(&partial).map_err(|e| Error::io("cannot create", &partial, e))?;
                Ok(Out {
                    w: BufWriter::with_capacity(1 << 16, Box::new(f)),
                    file: Some((partial, target.to_path_buf())),
                })
            }
        }
    }

    /// The writer; its errors become [`Out::error`]s.
    pub(crate) fn w(&mut self) -> &mut dyn Write {
        &mut self.w
    }

    /// The error of a failed write to this output.
    pub(crate) fn error(&self, e: io::Error) -> Error {
        match &self.file {
            Some((_, target)) => Error::io("cannot write", target, e),
            None => Error::Output(e),
        }
    }

    /// Flushes, and puts a file output in place. Returns the file written, if any.
    pub(crate) fn finish(mut self) -> Result<Option<PathBuf>> {
        if let Err(e) = self.w.flush() {
            return Err(self.error(e));
        }
        let Some((partial, target)) = self.file.take() else {
            return Ok(None);
        };
        let done = std::fs::rename(&partial, &target);
        if let Err(e) = done {
            let _ = std::fs::remove_file(&partial);
            return Err(Error::io("cannot write", &target, e));
        }
        Ok(Some(target))
    }
}

impl Drop for Out {
    fn drop(&mut self) {
        // Not finished: an error happened; leave the target as it was.
        if let Some((partial, _)) = &self.file {
            let _ = std::fs::remove_file(partial);
        }
    }
}
