//! culprit's symbolizer, shared by the sampler (its IP samples, on the node) and `culprit report`
//! / `diagnose` / the exports (the tracer's function addresses, anywhere): blazesym's model —
//! normalize on the node, symbolize anywhere — so that the analysis needs no part of the
//! perf_event collector.
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
//! Results are cached per (image, address), so each distinct address is resolved once; images
//! that cannot be opened are remembered and not retried. blazesym keeps every image it parsed
//! open (a descriptor and the parsed tables) until told to evict it, and a sampler runs for
//! days on machines where programs come and go: an image whose file was replaced is evicted
//! ([`Symbolizer::forget_image`]), and at most [`MAX_OPEN_IMAGES`] images stay open, the least
//! recently used going first (their names are looked up again if they come back).
//! Addresses are ELF virtual addresses (what `st_value` holds, i.e. runtime address minus the
//! load bias) or file offsets (what `/proc/<pid>/maps` and perf's MMAP2 records give).
//!
//! # Files other users may have planted
//!
//! Images are opened as [`crate::untrusted`] says — never blocking, never anything but a
//! regular file (a FIFO or a device planted in place of a library is refused with a note,
//! [`Symbolizer::take_notes`]) — and blazesym reads each through `/proc/self/fd/N` of that open
//! file, which stays open while blazesym holds the image. blazesym opens other files on its
//! own only for DWARF, through a binary's debug links (`.gnu_debuglink`, `.gnu_debugaltlink`):
//! those are followed only when every directory blazesym would look in is one no other user can
//! write ([`crate::untrusted::trusted_dir`]); otherwise the image is named from its symbol
//! tables alone.
//!
//! # Kernel and vDSO
//!
//! Kernel addresses are looked up in a table read once from `/proc/kallsyms` (text symbols,
//! sorted; binary search), which also names the module a symbol belongs to, so samples in
//! modules get the module as their image, as OProfile's `--separate=kernel` does. The table is
//! read again, at most every ten minutes, when an address falls outside it (a module loaded
//! later): reading /proc/kallsyms costs the kernel about a tenth of a second.
//! The vDSO has no file: [`Symbolizer::vdso`] resolves offsets in a copy of this process's
//! vDSO (the same image the kernel maps into every 64-bit process), kept in memory (a
//! `memfd`, read through `/proc/self/fd/N`): never in a shared directory such as `/tmp`,
//! where another user could plant a link in its place, and never left behind.

#![deny(unsafe_code)]

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use blazesym::symbolize::evict::{self, Evict};

use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized};

mod addr;
mod elf;
mod kernel;
mod plt;
#[allow(unsafe_code)]
mod sys;
pub mod untrusted;
mod unwind;
mod vdso;

pub use addr::{ImageAddr, Name};
pub use elf::{names_dynamic_symbol, read_build_id};

use elf::debug_links_trusted;
use kernel::KernelSymbols;
use plt::PltStubs;
use unwind::FunctionStarts;
use vdso::VdsoCopy;

/// Most images kept open (parsed, with a descriptor) at once by default.
pub const MAX_OPEN_IMAGES: usize = 256;

/// Resolves addresses to demangled function names, with long-lived caches.
pub struct Symbolizer {
    inner: blazesym::symbolize::Symbolizer,
    symfs: Option<PathBuf>,
    cache: HashMap<(Arc<Path>, ImageAddr), Option<Name>>,
    images: HashMap<PathBuf, Arc<Path>>,
    unreadable: HashSet<Arc<Path>>,
    kernel: HashMap<u64, Option<Name>>,
    kallsyms: Option<KernelSymbols>,
    kallsyms_read_at: Option<std::time::Instant>,
    vdso: Option<Option<VdsoCopy>>,
    starts: HashMap<Arc<Path>, Option<FunctionStarts>>,
    plt: HashMap<Arc<Path>, PltStubs>,
    /// Images handed to blazesym, with the tick of their last use.
    open: HashMap<Arc<Path>, u64>,
    /// The open file of each image being read ([`crate::untrusted`]).
    files: HashMap<Arc<Path>, OpenImage>,
    /// Images refused as unsafe, one line each, until taken.
    notes: Vec<String>,
    tick: u64,
    max_open: usize,
}

/// An image opened for reading: blazesym reads it through `fd_path`, which names this open file
/// and nothing else.
#[derive(Debug)]
struct OpenImage {
    file: std::fs::File,
    fd_path: PathBuf,
    /// Its DWARF may be read (its debug links, if any, lead only into trusted directories).
    dwarf: bool,
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
            kallsyms: None,
            kallsyms_read_at: None,
            vdso: None,
            starts: HashMap::new(),
            plt: HashMap::new(),
            open: HashMap::new(),
            files: HashMap::new(),
            notes: Vec::new(),
            tick: 0,
            max_open: MAX_OPEN_IMAGES,
        }
    }

    /// Keeps at most `n` (≥ 1) images open instead of [`MAX_OPEN_IMAGES`].
    pub fn with_max_open_images(mut self, n: usize) -> Self {
        self.max_open = n.max(1);
        self
    }

    /// Number of images open in blazesym now.
    pub fn open_images(&self) -> usize {
        self.open.len()
    }

    /// Notes that `image` is about to be read by blazesym; closes the least recently used
    /// image when too many are open.
    fn touch(&mut self, image: &Arc<Path>) {
        self.tick += 1;
        self.open.insert(image.clone(), self.tick);
        if self.open.len() <= self.max_open {
            return;
        }
        let oldest = self
            .open
            .iter()
            .filter(|(p, _)| *p != image)
            .min_by_key(|(_, &t)| t)
            .map(|(p, _)| p.clone());
        if let Some(old) = oldest {
            self.evict(&old);
        }
    }

    /// Drops everything cached for `image`, blazesym's parsed file and descriptor included,
    /// then our open file (blazesym first: its cache is keyed by the `/proc/self/fd/N` path,
    /// which names another file once the descriptor is closed).
    fn evict(&mut self, image: &Arc<Path>) {
        self.open.remove(image);
        if let Some(f) = self.files.remove(image) {
            let _ = self
                .inner
                .evict(&Evict::Elf(evict::Elf::new(f.fd_path.clone())));
        }
        self.cache.retain(|(p, _), _| p != image);
        self.starts.remove(image);
        self.plt.remove(image);
    }

    /// The open file of `image`, opened now if need be; `None` (noted when unsafe) when it
    /// cannot be read.
    fn source(&mut self, image: &Arc<Path>) -> Option<&OpenImage> {
        if self.unreadable.contains(image) {
            return None;
        }
        if !self.files.contains_key(image) {
            match untrusted::open_regular(image) {
                Ok(file) => {
                    let fd_path = untrusted::fd_path(&file);
                    let dwarf = debug_links_trusted(&file, &fd_path);
                    self.files.insert(
                        image.clone(),
                        OpenImage {
                            file,
                            fd_path,
                            dwarf,
                        },
                    );
                }
                Err(e) => {
                    if e.is_unsafe() {
                        self.notes.push(e.to_string());
                    }
                    self.unreadable.insert(image.clone());
                    return None;
                }
            }
        }
        self.files.get(image)
    }

    /// Images refused since the last call, one line each (a FIFO or a device in place of a
    /// binary, a file system that stalls): for the caller's log or data.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
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
        if !self.plt.contains_key(&image) {
            // Read through the image's open file (never a FIFO or a device planted in its
            // place: `source`); an image that cannot be read has no stubs.
            let stubs = self
                .source(&image)
                .and_then(|f| PltStubs::read(&f.file))
                .unwrap_or_default();
            self.plt.insert(image.clone(), stubs);
        }
        if self.unreadable.contains(&image) {
            return out;
        }
        let plt = &self.plt[&image];
        for (i, a) in addrs.iter().enumerate() {
            // A PLT stub is named `symbol@plt`, as perf names it: symbol tables do not cover
            // the PLT, and the nearest symbol before it is `_init`.
            if let Some(name) = plt.name_of(*a) {
                out[i] = Some(name);
                continue;
            }
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
        for (list, at, make) in [
            (&virt, &virt_at, ImageAddr::Virt as fn(u64) -> ImageAddr),
            (
                &file,
                &file_at,
                ImageAddr::FileOffset as fn(u64) -> ImageAddr,
            ),
        ] {
            if list.is_empty() {
                continue;
            }
            let is_virt = make(0) == ImageAddr::Virt(0);
            let Some((fd_path, dwarf)) = self.source(&image).map(|f| (f.fd_path.clone(), f.dwarf))
            else {
                self.unreadable.insert(image.clone());
                return out;
            };
            self.touch(&image);
            // ELF symbol tables first: cheap, and enough for nearly every address. DWARF (and
            // debug files found through debug links) only for what they leave unresolved: parsing
            // DWARF costs far more than reading .symtab.
            let mut names = match self.lookup(&fd_path, false, is_virt, list) {
                Ok(n) => n,
                Err(()) => {
                    // Missing, unreadable, or not ELF: degrade to image+offset for good.
                    self.unreadable.insert(image.clone());
                    return out;
                }
            };
            let missing: Vec<usize> = (0..names.len()).filter(|&j| names[j].is_none()).collect();
            if !missing.is_empty() && dwarf {
                let retry: Vec<u64> = missing.iter().map(|&j| list[j]).collect();
                if let Ok(found) = self.lookup(&fd_path, true, is_virt, &retry) {
                    for (j, name) in missing.into_iter().zip(found) {
                        names[j] = name;
                    }
                }
            }
            for ((name, &i), &a) in names.into_iter().zip(at.iter()).zip(list.iter()) {
                self.cache.insert((image.clone(), make(a)), name.clone());
                out[i] = name;
            }
        }
        out
    }

    /// One blazesym call: the names of `addrs` (virtual addresses or file offsets) in the image
    /// opened at `image` (a `/proc/self/fd/N` path), with or without debug symbols. `Err` when
    /// the image cannot be read.
    fn lookup(
        &mut self,
        image: &Path,
        debug_syms: bool,
        virt: bool,
        addrs: &[u64],
    ) -> Result<Vec<Option<Name>>, ()> {
        let mut elf = Elf::new(image.to_path_buf());
        elf.debug_syms = debug_syms;
        let src = Source::Elf(elf);
        let input = if virt {
            Input::VirtOffset(addrs)
        } else {
            Input::FileOffset(addrs)
        };
        let results = self.inner.symbolize(&src, input).map_err(|_| ())?;
        Ok(results
            .iter()
            .map(|res| match res {
                Symbolized::Sym(sym) => Some(Name::from(sym.name.as_ref())),
                Symbolized::Unknown(_) => None,
            })
            .collect())
    }

    /// The kernel function containing `addr` (from `/proc/kallsyms`; addresses are visible only
    /// to root or with `kernel.kptr_restrict` = 0).
    pub fn kernel(&mut self, addr: u64) -> Option<Name> {
        if let Some(hit) = self.kernel.get(&addr) {
            return hit.clone();
        }
        let name = self.kernel_symbol(addr).map(|(name, _)| name);
        self.kernel.insert(addr, name.clone());
        name
    }

    /// The kernel function containing `addr` and the module it belongs to (`None` for the
    /// kernel image itself). Not cached per address: the table lookup is a binary search.
    pub fn kernel_symbol(&mut self, addr: u64) -> Option<(Name, Option<Name>)> {
        let fresh = |at: Option<std::time::Instant>| {
            at.is_some_and(|t| t.elapsed() < std::time::Duration::from_secs(600))
        };
        if self.kallsyms.is_none() && !fresh(self.kallsyms_read_at) {
            self.reload_kallsyms();
        }
        if let Some(hit) = self.kallsyms.as_ref().and_then(|k| k.lookup(addr)) {
            return Some(hit);
        }
        // Maybe a module loaded since the table was read.
        if !fresh(self.kallsyms_read_at) {
            self.reload_kallsyms();
            return self.kallsyms.as_ref().and_then(|k| k.lookup(addr));
        }
        None
    }

    fn reload_kallsyms(&mut self) {
        self.kallsyms_read_at = Some(std::time::Instant::now());
        self.kallsyms = std::fs::read_to_string("/proc/kallsyms")
            .ok()
            .and_then(|t| KernelSymbols::parse(&t));
    }

    /// The function containing `offset` in the vDSO, resolved in a copy of this process's
    /// vDSO (made once, in memory, freed when the symbolizer is dropped).
    pub fn vdso(&mut self, offset: u64) -> Option<Name> {
        if self.vdso.is_none() {
            self.vdso = Some(VdsoCopy::make());
        }
        let path = self.vdso.as_ref()?.as_ref()?.path.clone();
        self.resolve(&path, ImageAddr::FileOffset(offset))
    }

    /// Forgets what is cached for the image at `path` (its file was replaced): the old file's
    /// names, and blazesym's parsed copy and open descriptor of it.
    pub fn forget_image(&mut self, path: &Path) {
        if let Some(image) = self.images.get(path).cloned() {
            self.evict(&image);
            self.unreadable.remove(&image);
        }
    }

    /// For an address no symbol covers (a stripped binary's static function): the file offset
    /// of the start of the function containing `file_offset`, from the unwind table every x86-64
    /// binary keeps (`.eh_frame_hdr`, found through the `PT_GNU_EH_FRAME` program header) even
    /// when stripped. Naming unresolved samples `image+<function start>` keeps them at function
    /// granularity, so they add up as a function would instead of scattering over addresses.
    pub fn function_start(&mut self, path: &Path, file_offset: u64) -> Option<u64> {
        let image = self.image(path);
        if !self.starts.contains_key(&image) {
            let table = self
                .source(&image)
                .and_then(|f| FunctionStarts::read(&f.file));
            self.starts.insert(image.clone(), table);
        }
        self.starts.get(&image)?.as_ref()?.start_of(file_offset)
    }

    /// Number of cached (image, address) results.
    pub fn cached(&self) -> usize {
        self.cache.len() + self.kernel.len()
    }
}

/// Formats an unresolved address the way reports show it: `image+0x1a2b`.
pub fn unresolved_name(image: &Path, offset: u64) -> String {
    let base = image
        .file_name()
        .map(|s| s.to_string_lossy())
        .unwrap_or_else(|| image.to_string_lossy());
    format!("{base}+{offset:#x}")
}
