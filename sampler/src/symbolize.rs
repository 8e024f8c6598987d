//! The symbolizer shared by the sampler (its IP samples) and `culprit report` / `diagnose` (the
//! tracer's function addresses).
//!
//! # Why blazesym
//!
//! Both users need: `.symtab` *and* `.dynsym` (static functions), DWARF when present, separate
//! debug files found through `.gnu_debuglink` and `/usr/lib/debug/.build-id`, C++ and Rust
//! demangling, and the kernel's `/proc/kallsyms`. `blazesym` 0.2 does all of that behind one
//! API and caches parsed ELF files itself; `addr2line` alone (over `object`/`gimli`) does not
//! follow debuglinks and resolved about a third of libc's addresses on these machines. The
//! version is pinned exactly in the workspace (`=0.2.x`) because the crate is pre-1.0.
//!
//! # Caching
//!
//! Results are cached per (image, address) for the life of the [`Symbolizer`], so each distinct
//! address is resolved once; images that cannot be opened are remembered and not retried.
//! Addresses are ELF virtual addresses (what `st_value` holds, i.e. runtime address minus the
//! load bias) or file offsets (what `/proc/<pid>/maps` and perf's MMAP2 records give).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use blazesym::symbolize::source::{Elf, Kernel, Source};
use blazesym::symbolize::{Input, Symbolized};

/// A symbol name shared between caches and results.
pub type Name = Arc<str>;

/// How an address inside an image is expressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ImageAddr {
    /// ELF virtual address (runtime address − load bias).
    Virt(u64),
    /// Offset in the file (as in `/proc/<pid>/maps` and perf MMAP2 records).
    FileOffset(u64),
}

/// Resolves addresses to demangled function names, with long-lived caches.
pub struct Symbolizer {
    inner: blazesym::symbolize::Symbolizer,
    symfs: Option<PathBuf>,
    cache: HashMap<(Arc<Path>, ImageAddr), Option<Name>>,
    images: HashMap<PathBuf, Arc<Path>>,
    unreadable: HashSet<Arc<Path>>,
    kernel: HashMap<u64, Option<Name>>,
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Symbolizer")
            .field("symfs", &self.symfs)
            .field("cached", &self.cache.len())
            .finish_non_exhaustive()
    }
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    /// A symbolizer that reads images at their recorded paths.
    pub fn new() -> Self {
        Symbolizer {
            inner: blazesym::symbolize::Symbolizer::builder()
                .enable_demangling(true)
                .enable_code_info(false)
                .enable_inlined_fns(false)
                .build(),
            symfs: None,
            cache: HashMap::new(),
            images: HashMap::new(),
            unreadable: HashSet::new(),
            kernel: HashMap::new(),
        }
    }

    /// Reads images under `root` instead of `/` (like `perf report --symfs`): an image recorded
    /// as `/usr/bin/x` is read from `root/usr/bin/x` when that exists.
    pub fn with_symfs(mut self, root: impl Into<PathBuf>) -> Self {
        self.symfs = Some(root.into());
        self
    }

    fn image(&mut self, path: &Path) -> Arc<Path> {
        if let Some(p) = self.images.get(path) {
            return p.clone();
        }
        let resolved = match &self.symfs {
            Some(root) => {
                let rel = path.strip_prefix("/").unwrap_or(path);
                let cand = root.join(rel);
                if cand.exists() {
                    cand
                } else {
                    path.to_path_buf()
                }
            }
            None => path.to_path_buf(),
        };
        let arc: Arc<Path> = Arc::from(resolved.as_path());
        self.images.insert(path.to_path_buf(), arc.clone());
        arc
    }

    /// The function containing `addr` in the ELF image at `path`, or `None` when the image
    /// cannot be read or has no symbol there.
    pub fn resolve(&mut self, path: &Path, addr: ImageAddr) -> Option<Name> {
        let image = self.image(path);
        if let Some(hit) = self.cache.get(&(image.clone(), addr)) {
            return hit.clone();
        }
        let out = self.resolve_many(path, &[addr]);
        out.into_iter().next().flatten()
    }

    /// Resolves many addresses of one image at once (faster than one by one for new addresses).
    pub fn resolve_many(&mut self, path: &Path, addrs: &[ImageAddr]) -> Vec<Option<Name>> {
        let image = self.image(path);
        let mut out = vec![None; addrs.len()];
        if self.unreadable.contains(&image) {
            return out;
        }
        let mut virt = Vec::new();
        let mut virt_at = Vec::new();
        let mut file = Vec::new();
        let mut file_at = Vec::new();
        for (i, a) in addrs.iter().enumerate() {
            match self.cache.get(&(image.clone(), *a)) {
                Some(hit) => out[i] = hit.clone(),
                None => match *a {
                    ImageAddr::Virt(v) => {
                        virt.push(v);
                        virt_at.push(i);
                    }
                    ImageAddr::FileOffset(o) => {
                        file.push(o);
                        file_at.push(i);
                    }
                },
            }
        }
        let src = Source::Elf(Elf::new(image.to_path_buf()));
        for (input, list, at, make) in [
            (
                Input::VirtOffset(virt.as_slice()),
                &virt,
                &virt_at,
                ImageAddr::Virt as fn(u64) -> ImageAddr,
            ),
            (
                Input::FileOffset(file.as_slice()),
                &file,
                &file_at,
                ImageAddr::FileOffset as fn(u64) -> ImageAddr,
            ),
        ] {
            if list.is_empty() {
                continue;
            }
            match self.inner.symbolize(&src, input) {
                Ok(results) => {
                    for ((res, &i), &a) in results.iter().zip(at.iter()).zip(list.iter()) {
                        let name = match res {
                            Symbolized::Sym(sym) => Some(Name::from(sym.name.as_ref())),
                            Symbolized::Unknown(_) => None,
                        };
                        self.cache.insert((image.clone(), make(a)), name.clone());
                        out[i] = name;
                    }
                }
                Err(_) => {
                    // Missing, unreadable, or not ELF: degrade to image+offset for good.
                    self.unreadable.insert(image.clone());
                    return out;
                }
            }
        }
        out
    }

    /// The kernel function containing `addr` (from `/proc/kallsyms`; addresses are visible only
    /// to root or with `kernel.kptr_restrict` = 0).
    pub fn kernel(&mut self, addr: u64) -> Option<Name> {
        if let Some(hit) = self.kernel.get(&addr) {
            return hit.clone();
        }
        // vmlinux is rarely present and slow to parse; kallsyms is enough for function names.
        let src = Source::Kernel(Kernel {
            vmlinux: blazesym::MaybeDefault::None,
            ..Kernel::default()
        });
        let name = match self.inner.symbolize_single(&src, Input::AbsAddr(addr)) {
            Ok(Symbolized::Sym(sym)) => Some(Name::from(sym.name.as_ref())),
            _ => None,
        };
        self.kernel.insert(addr, name.clone());
        name
    }

    /// Number of cached (image, address) results.
    pub fn cached(&self) -> usize {
        self.cache.len() + self.kernel.len()
    }
}

/// The GNU build-id of the ELF file at `path`, if it has one and can be read.
pub fn read_build_id(path: &Path) -> Option<Vec<u8>> {
    blazesym::helper::read_elf_build_id(path)
        .ok()
        .flatten()
        .map(|b| b.into_owned())
}

/// Formats an unresolved address the way reports show it: `image+0x1a2b`.
pub fn unresolved_name(image: &Path, offset: u64) -> String {
    let base = image
        .file_name()
        .map(|s| s.to_string_lossy())
        .unwrap_or_else(|| image.to_string_lossy());
    format!("{base}+{offset:#x}")
}
