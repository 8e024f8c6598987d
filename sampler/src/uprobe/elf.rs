//! Where to put a uprobe: the function symbols of an unmodified ELF binary, the file offset of
//! each (what the uprobe PMU takes, so PIE executables and shared libraries need no load
//! address), and which functions cannot be probed and why.
//!
//! Symbols come from `.symtab` when the binary has one, else from the build-id debug file
//! (`/usr/lib/debug/.build-id/xx/yyyy.debug`, where distributions put stripped symbols), else
//! from `.dynsym` (exported functions only). DWARF, when present, tells which functions the
//! compiler inlined: a function inlined everywhere has no entry to probe, and one that also has
//! an out-of-line copy is only counted when that copy is called.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use object::elf;
use object::read::elf::{ElfFile64, ProgramHeader as _, Sym as _};
use object::{Endianness, Object as _, ObjectSection as _};

/// Where a binary's function symbols came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SymbolSource {
    /// The binary's own `.symtab` (every function, static ones included).
    Symtab,
    /// The `.symtab` of its build-id debug file.
    DebugFile,
    /// Only `.dynsym`: the binary is stripped, exported functions only.
    Dynsym,
}

/// A function symbol of a binary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FuncSym {
    /// Symbol name as in the symbol table.
    pub name: String,
    /// ELF virtual address.
    pub vaddr: u64,
    /// Size in bytes (0 when the symbol table does not say).
    pub size: u64,
    /// A GNU indirect function (its address is the resolver's).
    pub ifunc: bool,
}

/// A loadable segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Segment {
    vaddr: u64,
    filesz: u64,
    memsz: u64,
    offset: u64,
    exec: bool,
}

/// What the DWARF of a binary says about inlining: per function name, at how many call sites
/// the compiler inlined it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InlineInfo {
    sites: HashMap<String, u32>,
}

impl InlineInfo {
    /// Call sites where `name` was inlined (0 if none, or unknown name).
    pub fn sites(&self, name: &str) -> u32 {
        self.sites.get(name).copied().unwrap_or(0)
    }

    /// Names of functions inlined somewhere.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.sites.keys().map(String::as_str)
    }
}

/// A binary's function symbols, segments and build-id.
#[derive(Clone, Debug)]
pub struct Image {
    /// The file read.
    pub path: PathBuf,
    /// GNU build-id, empty if none.
    pub build_id: Vec<u8>,
    /// Lowest virtual address of the loadable segments.
    pub lo: u64,
    /// One past the highest.
    pub hi: u64,
    /// Where the symbols came from.
    pub symbols_from: SymbolSource,
    /// Function symbols.
    pub funcs: Vec<FuncSym>,
    /// Inlining, when the binary (or its debug file) has DWARF.
    pub inline: Option<InlineInfo>,
    segments: Vec<Segment>,
}

/// Largest image read whole (4 GiB).
const MAX_IMAGE_BYTES: u64 = 4 << 30;

/// Why an image cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// The file cannot be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// Not opened: not a regular file (a FIFO, a device), or its open stalled
    /// ([`culprit_symbolize::untrusted`]).
    #[error("{0}")]
    Refused(#[from] culprit_symbolize::untrusted::Refused),
    /// Not a 64-bit ELF file, or a damaged one.
    #[error("{path}: not a 64-bit ELF file ({why})")]
    NotElf {
        /// The file.
        path: PathBuf,
        /// The parser's word.
        why: String,
    },
}

impl Image {
    /// Reads `path`'s symbols, segments, build-id and (when present) inlining.
    pub fn load(path: &Path) -> Result<Image, ImageError> {
        let data = match culprit_symbolize::untrusted::read(path, MAX_IMAGE_BYTES) {
            Ok(d) => d,
            Err(culprit_symbolize::untrusted::Refused::Io { source, .. }) => {
                return Err(ImageError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
            Err(e) => return Err(e.into()),
        };
        let not_elf = |why: String| ImageError::NotElf {
            path: path.to_path_buf(),
            why,
        };
        let file = ElfFile64::<Endianness>::parse(&data[..]).map_err(|e| not_elf(e.to_string()))?;
        let e = file.endian();
        let mut segments = Vec::new();
        for ph in file.elf_program_headers() {
            if ph.p_type(e) != elf::PT_LOAD {
                continue;
            }
            segments.push(Segment {
                vaddr: ph.p_vaddr(e),
                filesz: ph.p_filesz(e),
                memsz: ph.p_memsz(e),
                offset: ph.p_offset(e),
                exec: ph.p_flags(e).0 & elf::PF_X.0 != 0,
            });
        }
        if segments.is_empty() {
            return Err(not_elf("no loadable segment".into()));
        }
        let lo = segments.iter().map(|s| s.vaddr).min().unwrap_or(0) & !0xfff;
        let hi = segments
            .iter()
            .map(|s| s.vaddr.saturating_add(s.memsz))
            .max()
            .unwrap_or(0);
        let build_id = file
            .build_id()
            .ok()
            .flatten()
            .map(<[u8]>::to_vec)
            .unwrap_or_default();

        let own = funcs_of(&file, false);
        let debug_data = debug_file(&build_id)
            .and_then(|p| culprit_symbolize::untrusted::read(&p, MAX_IMAGE_BYTES).ok());
        let debug_file = debug_data
            .as_deref()
            .and_then(|d| ElfFile64::<Endianness>::parse(d).ok());
        let (funcs, symbols_from) = if !own.is_empty() {
            (own, SymbolSource::Symtab)
        } else if let Some(f) = debug_file.as_ref().map(|d| funcs_of(d, false)) {
            if f.is_empty() {
                (funcs_of(&file, true), SymbolSource::Dynsym)
            } else {
                (f, SymbolSource::DebugFile)
            }
        } else {
            (funcs_of(&file, true), SymbolSource::Dynsym)
        };
        let inline = inline_info(&file).or_else(|| debug_file.as_ref().and_then(inline_info));
        Ok(Image {
            path: path.to_path_buf(),
            build_id,
            lo,
            hi,
            symbols_from,
            funcs,
            inline,
            segments,
        })
    }

    /// The file offset of virtual address `vaddr` when it lies in an executable segment's
    /// file-backed part (uprobes are placed by file offset).
    pub fn file_offset(&self, vaddr: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| s.exec && vaddr >= s.vaddr && vaddr - s.vaddr < s.filesz)
            .map(|s| vaddr - s.vaddr + s.offset)
    }

    /// The virtual address of file offset `off` in an executable segment (the inverse of
    /// [`Image::file_offset`]).
    pub fn vaddr_of_offset(&self, off: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|s| s.exec && off >= s.offset && off - s.offset < s.filesz)
            .map(|s| off - s.offset + s.vaddr)
    }
}

/// Function symbols of one symbol table (`.symtab`, or `.dynsym` when `dynamic`), defined ones
/// only, sorted by address then name.
fn funcs_of(file: &ElfFile64<'_, Endianness>, dynamic: bool) -> Vec<FuncSym> {
    let e = file.endian();
    let table = if dynamic {
        file.elf_dynamic_symbol_table()
    } else {
        file.elf_symbol_table()
    };
    let strings = table.strings();
    let mut out = Vec::new();
    for sym in table.iter() {
        let ty = sym.st_type();
        let ifunc = ty == elf::STT_GNU_IFUNC;
        if ty != elf::STT_FUNC && !ifunc {
            continue;
        }
        if sym.st_shndx(e).is_special() || sym.st_value(e) == 0 {
            continue;
        }
        let Ok(name) = sym.name(e, strings) else {
            continue;
        };
        let name = String::from_utf8_lossy(name);
        // Versioned .dynsym names carry no `@VERSION` here (the version is elsewhere).
        out.push(FuncSym {
            name: name.into_owned(),
            vaddr: sym.st_value(e),
            size: sym.st_size(e),
            ifunc,
        });
    }
    out.sort_by(|a, b| a.vaddr.cmp(&b.vaddr).then_with(|| a.name.cmp(&b.name)));
    out.dedup();
    out
}

/// `/usr/lib/debug/.build-id/ab/cdef….debug` for a build-id, when it exists.
fn debug_file(build_id: &[u8]) -> Option<PathBuf> {
    if build_id.len() < 2 {
        return None;
    }
    let hex: String = build_id.iter().map(|b| format!("{b:02x}")).collect();
    let p = PathBuf::from(format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &hex[..2],
        &hex[2..]
    ));
    p.is_file().then_some(p)
}

/// Counts, per function name, the `DW_TAG_inlined_subroutine` entries that refer to it;
/// `None` without `.debug_info` (or with compressed debug sections, which are not read).
fn inline_info(file: &ElfFile64<'_, Endianness>) -> Option<InlineInfo> {
    let info = file.section_by_name(".debug_info")?;
    if info.compressed_file_range().ok()?.format != object::CompressionFormat::None {
        return None;
    }
    let load = |id: gimli::SectionId| -> Result<gimli::EndianSlice<'_, gimli::LittleEndian>, ()> {
        let data = file
            .section_by_name(id.name())
            .and_then(|s| s.data().ok())
            .unwrap_or(&[]);
        Ok(gimli::EndianSlice::new(data, gimli::LittleEndian))
    };
    let dwarf = gimli::Dwarf::load(load).ok()?;
    // Global .debug_info offset → (name, the entry it takes its name from).
    let mut subprograms: HashMap<usize, (Option<String>, Option<usize>)> = HashMap::new();
    let mut inlined: HashMap<usize, u32> = HashMap::new();
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(unit) = dwarf.unit(header) else {
            continue;
        };
        let global = |r: gimli::AttributeValue<_>| -> Option<usize> {
            match r {
                gimli::AttributeValue::UnitRef(o) => {
                    o.to_debug_info_offset(&unit.header).map(|o| o.0)
                }
                gimli::AttributeValue::DebugInfoRef(o) => Some(o.0),
                _ => None,
            }
        };
        let mut entries = unit.entries();
        while let Ok(Some(entry)) = entries.next_dfs() {
            let tag = entry.tag();
            if tag == gimli::DW_TAG_subprogram {
                let Some(off) = entry.offset().to_debug_info_offset(&unit.header) else {
                    continue;
                };
                let name = entry
                    .attr_value(gimli::DW_AT_linkage_name)
                    .or_else(|| entry.attr_value(gimli::DW_AT_name))
                    .and_then(|v| dwarf.attr_string(&unit, v).ok())
                    .map(|s| String::from_utf8_lossy(s.slice()).into_owned());
                let origin = entry
                    .attr_value(gimli::DW_AT_abstract_origin)
                    .or_else(|| entry.attr_value(gimli::DW_AT_specification))
                    .and_then(global);
                subprograms.insert(off.0, (name, origin));
            } else if tag == gimli::DW_TAG_inlined_subroutine {
                if let Some(o) = entry
                    .attr_value(gimli::DW_AT_abstract_origin)
                    .and_then(global)
                {
                    *inlined.entry(o).or_insert(0) += 1;
                }
            }
        }
    }
    let name_of = |mut off: usize| -> Option<String> {
        for _ in 0..8 {
            let (name, origin) = subprograms.get(&off)?;
            if let Some(n) = name {
                return Some(n.clone());
            }
            off = (*origin)?;
        }
        None
    };
    let mut sites: HashMap<String, u32> = HashMap::new();
    for (off, n) in inlined {
        if let Some(name) = name_of(off) {
            *sites.entry(name).or_insert(0) += n;
        }
    }
    Some(InlineInfo { sites })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_test_binary_has_functions_at_executable_offsets() {
        let exe = std::env::current_exe().unwrap();
        let img = Image::load(&exe).unwrap();
        assert!(!img.funcs.is_empty());
        assert!(img.lo < img.hi);
        let f = img
            .funcs
            .iter()
            .find(|f| f.name == "main")
            .expect("a main symbol");
        let off = img
            .file_offset(f.vaddr)
            .expect("main is in an executable segment");
        assert_eq!(img.vaddr_of_offset(off), Some(f.vaddr));
    }

    #[test]
    fn not_elf_is_a_clear_error() {
        let e = Image::load(Path::new("/etc/hostname")).unwrap_err();
        assert!(e.to_string().contains("not a 64-bit ELF"), "{e}");
        let e = Image::load(Path::new("/nonexistent/x")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/x"), "{e}");
    }
}
