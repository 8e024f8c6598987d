//! The C programs of the testbed (examples/pvfs-like/), compiled with gcc at run time: the
//! sources are embedded in the crate so `culprit demo` works from an installed binary too. No
//! binaries are committed.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

const PROTO_H: &str = include_str!("../../examples/pvfs-like/proto.h");
const SERVER_C: &str = include_str!("../../examples/pvfs-like/pvfs_server.c");
const CLIENT_C: &str = include_str!("../../examples/pvfs-like/pvfs_client.c");
const ROGUE_C: &str = include_str!("../../examples/pvfs-like/rogue.c");

/// Flags of the traced server: instrumented, optimised, with symbols (the tracer and the sampler
/// name functions from them).
pub const SERVER_CFLAGS: &[&str] = &["-finstrument-functions", "-O2", "-g", "-pthread"];

/// Paths of the built programs.
#[derive(Clone, Debug)]
pub struct Programs {
    /// The I/O server daemon (built with `-finstrument-functions`).
    pub server: PathBuf,
    /// The striping client.
    pub client: PathBuf,
    /// The rogue processes of the fault injector.
    pub rogue: PathBuf,
}

impl Programs {
    /// Compiles the programs into `dir` (skipping those whose source has not changed).
    pub fn build(dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir).map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
        write_if_changed(&dir.join("proto.h"), PROTO_H)?;
        let common = ["-Wall", "-Wextra", "-pthread"];
        let server = compile(dir, "pvfs_server", SERVER_C, SERVER_CFLAGS)?;
        let client = compile(
            dir,
            "pvfs_client",
            CLIENT_C,
            &[&common[..], &["-O2"]].concat(),
        )?;
        let rogue = compile(
            dir,
            "rogue",
            ROGUE_C,
            &[&common[..], &["-O2", "-g"]].concat(),
        )?;
        Ok(Programs {
            server,
            client,
            rogue,
        })
    }
}

fn write_if_changed(path: &Path, text: &str) -> Result<bool> {
    if fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(false);
    }
    fs::write(path, text).map_err(|e| Error::io(format!("write {}", path.display()), e))?;
    Ok(true)
}

fn compile(dir: &Path, name: &str, source: &str, flags: &[&str]) -> Result<PathBuf> {
    let src = dir.join(format!("{name}.c"));
    let out = dir.join(name);
    let stamp = dir.join(format!("{name}.flags"));
    let flags_text = flags.join(" ");
    let changed = write_if_changed(&src, source)? | write_if_changed(&stamp, &flags_text)?;
    if !changed && out.is_file() {
        return Ok(out);
    }
    let o = Command::new("gcc")
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .output()
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                Error::Missing("gcc is not installed (run `bash scripts/install-deps`)".into())
            }
            _ => Error::io("run gcc", e),
        })?;
    if !o.status.success() {
        let _ = fs::remove_file(&stamp);
        return Err(Error::Command {
            cmd: format!("gcc {flags_text} -o {} {}", out.display(), src.display()),
            detail: String::from_utf8_lossy(&o.stderr).into_owned(),
        });
    }
    Ok(out)
}
