//! Names of traced functions: trace records carry addresses, mapped here through the process's
//! recorded load map (bias, build-id, path) to (image base name, demangled symbol) with the
//! shared [`Symbolizer`]. A binary that is missing, or differs from the one recorded (another
//! build-id), gives `image+0xoffset` names rather than wrong ones.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use culprit_format::object_flags;
use culprit_symbolize::{read_build_id, unresolved_name, ImageAddr, Symbolizer};

use super::names::FuncKey;

/// The image name of a traced address in no object its process recorded (its function is
/// then named by the address: not comparable across processes).
pub const UNMAPPED_IMAGE: &str = "?";

/// A loaded object as the runtime recorded it.
#[derive(Clone, Debug)]
pub(super) struct Object {
    pub(super) id: u32,
    pub(super) flags: u32,
    pub(super) bias: u64,
    pub(super) start: u64,
    pub(super) end: u64,
    /// Path to read symbols from, or `None` when the file is absent or does not match the
    /// recorded build-id (names then fall back to `image+0xoffset`).
    pub(super) readable: Option<PathBuf>,
    pub(super) path: PathBuf,
    pub(super) image: Arc<str>,
}

/// The symbolizer and what it learned about this machine's binaries.
pub(super) struct Symbols {
    symbolizer: Symbolizer,
    build_ids: HashMap<PathBuf, Option<Vec<u8>>>,
    /// Binaries refused as unsafe to open (not regular files).
    refused: std::collections::HashSet<PathBuf>,
    symfs: Option<PathBuf>,
}

impl Symbols {
    /// Symbols read from binaries under `symfs` (like `perf report --symfs`), else from `/`.
    pub(super) fn new(symfs: Option<PathBuf>) -> Self {
        Symbols {
            symbolizer: Symbolizer::new(),
            build_ids: HashMap::new(),
            refused: std::collections::HashSet::new(),
            symfs,
        }
    }

    /// The path to read symbols of a recorded object from, checking its build-id; `warn` hears
    /// why there is none.
    pub(super) fn readable_image(
        &mut self,
        path: &Path,
        recorded_id: &[u8],
        warn: &mut dyn FnMut(String),
    ) -> Option<PathBuf> {
        let cand = match &self.symfs {
            Some(root) => {
                let c = root.join(path.strip_prefix("/").unwrap_or(path));
                if c.exists() {
                    c
                } else {
                    path.to_path_buf()
                }
            }
            None => path.to_path_buf(),
        };
        if !cand.exists() {
            let by_id = build_id_debug_path(recorded_id).filter(|p| p.exists());
            if by_id.is_none() {
                warn(format!(
                    "{}: not found on this machine; its functions are shown as image+offset \
                     (use --symfs to point at a copy)",
                    path.display()
                ));
            }
            return by_id;
        }
        if !self.build_ids.contains_key(&cand) {
            let id = match read_build_id(&cand) {
                Ok(id) => id,
                // A FIFO or a device where the binary was (planted by another user), a file
                // system that stalls: never opened, said once.
                Err(e) if e.is_unsafe() => {
                    warn(format!("{e}; its functions are shown as image+offset"));
                    self.refused.insert(cand.clone());
                    None
                }
                Err(_) => None,
            };
            self.build_ids.insert(cand.clone(), id);
        }
        if self.refused.contains(&cand) {
            return None;
        }
        if recorded_id.is_empty() {
            return Some(cand);
        }
        let on_disk = self.build_ids[&cand].clone();
        match on_disk {
            Some(id) if id != recorded_id => {
                if let Some(p) = build_id_debug_path(recorded_id).filter(|p| p.exists()) {
                    return Some(p);
                }
                warn(format!(
                    "{}: build-id differs from the recorded one (the binary changed since \
                     recording); its functions are shown as image+offset",
                    cand.display()
                ));
                None
            }
            _ => Some(cand),
        }
    }

    /// The function at `addr` in a process with these objects loaded.
    pub(super) fn function_at(&mut self, objects: &[Object], addr: u64) -> FuncKey {
        let obj = objects
            .iter()
            .filter(|o| addr >= o.start && addr < o.end)
            .max_by_key(|o| o.flags & object_flags::MAIN);
        match obj {
            Some(o) => {
                let vaddr = addr.wrapping_sub(o.bias);
                let name = o
                    .readable
                    .as_ref()
                    .and_then(|p| self.symbolizer.resolve(p, ImageAddr::Virt(vaddr)));
                FuncKey {
                    image: o.image.clone(),
                    function: name
                        .unwrap_or_else(|| Arc::from(unresolved_name(&o.path, vaddr).as_str())),
                }
            }
            None => FuncKey {
                image: Arc::from(UNMAPPED_IMAGE),
                function: Arc::from(format!("{addr:#x}").as_str()),
            },
        }
    }
}

/// `/usr/lib/debug/.build-id/ab/cdef….debug` for a build-id.
fn build_id_debug_path(id: &[u8]) -> Option<PathBuf> {
    if id.len() < 2 {
        return None;
    }
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    Some(PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &hex[..2],
        &hex[2..]
    )))
}
