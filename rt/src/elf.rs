//! A small ELF64 symbol-table reader: the runtime reads `.symtab` and `.dynsym` of loaded
//! objects itself (for `CULPRIT_INCLUDE` / `CULPRIT_EXCLUDE` decisions and to see whether an
//! object calls the hooks), without pulling a big dependency into every traced program.
//! Only the ELF header, the section headers and the symbol and string tables are read.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

const SHT_SYMTAB: u32 = 2;
const SHT_DYNSYM: u32 = 11;
const STT_FUNC: u8 = 2;
const STT_GNU_IFUNC: u8 = 10;
const SYM_SIZE: usize = 24;
const SHDR_SIZE: usize = 64;
/// Tables larger than this are not read (a corrupt header must not make us allocate GiBs).
const MAX_TABLE: u64 = 512 << 20;

/// Which symbol tables to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tables {
    /// `.dynsym` only (what the dynamic linker sees).
    Dynamic,
    /// `.symtab` and `.dynsym` (static functions too).
    All,
}

/// One symbol.
#[derive(Clone, Copy, Debug)]
pub struct Sym<'a> {
    /// Name bytes.
    pub name: &'a [u8],
    /// `st_value` (an ELF virtual address for defined symbols).
    pub value: u64,
    /// `st_size` (a function's length in bytes; 0 when unknown).
    pub size: u64,
    /// Defined in this object (section index not `SHN_UNDEF`).
    pub defined: bool,
    /// A function (`STT_FUNC` or `STT_GNU_IFUNC`).
    pub is_func: bool,
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

fn read_at(f: &File, off: u64, len: u64) -> io::Result<Vec<u8>> {
    if len > MAX_TABLE {
        return Err(io::Error::other("ELF table too large"));
    }
    let mut v = vec![0u8; len as usize];
    f.read_exact_at(&mut v, off)?;
    Ok(v)
}

/// Calls `each` for every symbol of the chosen tables of the ELF64 little-endian file `path`.
pub fn for_each_symbol(
    path: &Path,
    tables: Tables,
    mut each: impl FnMut(Sym<'_>),
) -> io::Result<()> {
    let f = File::open(path)?;
    let eh = read_at(&f, 0, 64)?;
    if eh[0..4] != *b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return Err(io::Error::other("not an ELF64 little-endian file"));
    }
    let shoff = le64(&eh, 0x28);
    let shentsize = le16(&eh, 0x3A) as usize;
    let shnum = le16(&eh, 0x3C) as u64;
    if shoff == 0 || shentsize != SHDR_SIZE {
        return Ok(());
    }
    let sh = read_at(&f, shoff, shnum * SHDR_SIZE as u64)?;
    let section = |i: usize| -> Option<(u32, u64, u64, usize)> {
        let o = i.checked_mul(SHDR_SIZE)?;
        (o + SHDR_SIZE <= sh.len()).then(|| {
            (
                le32(&sh, o + 4),
                le64(&sh, o + 0x18),
                le64(&sh, o + 0x20),
                le32(&sh, o + 0x28) as usize,
            )
        })
    };
    for i in 0..shnum as usize {
        let Some((ty, off, size, link)) = section(i) else {
            break;
        };
        let wanted = ty == SHT_DYNSYM || (ty == SHT_SYMTAB && tables == Tables::All);
        if !wanted {
            continue;
        }
        let Some((_, str_off, str_size, _)) = section(link) else {
            continue;
        };
        let syms = read_at(&f, off, size)?;
        let strs = read_at(&f, str_off, str_size)?;
        for s in syms.chunks_exact(SYM_SIZE).skip(1) {
            let name_at = le32(s, 0) as usize;
            let Some(rest) = strs.get(name_at..) else {
                continue;
            };
            let name = &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())];
            let kind = s[4] & 0xf;
            each(Sym {
                name,
                value: le64(s, 8),
                size: le64(s, 16),
                defined: le16(s, 6) != 0,
                is_func: kind == STT_FUNC || kind == STT_GNU_IFUNC,
            });
        }
    }
    Ok(())
}

/// True when the object at `path` refers to `__cyg_profile_func_enter` without defining it
/// (it was compiled with `-finstrument-functions`).
pub fn calls_hooks(path: &Path) -> bool {
    refers_to(path, &[b"__cyg_profile_func_enter"])
}

/// True when the object at `path` refers to one of `names` without defining it.
pub fn refers_to(path: &Path, names: &[&[u8]]) -> bool {
    let mut found = false;
    let _ = for_each_symbol(path, Tables::Dynamic, |s| {
        found |= !s.defined && names.contains(&s.name);
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_test_binary() {
        let exe = std::env::current_exe().unwrap();
        let mut funcs = 0;
        let mut saw_main = false;
        for_each_symbol(&exe, Tables::All, |s| {
            if s.defined && s.is_func {
                funcs += 1;
                saw_main |= s.name == b"main";
            }
        })
        .unwrap();
        assert!(funcs > 100, "{funcs}");
        assert!(saw_main);
        assert!(!calls_hooks(&exe));
    }

    #[test]
    fn rejects_non_elf() {
        let p = std::env::temp_dir().join(format!("culprit-rt-notelf-{}", std::process::id()));
        std::fs::write(&p, vec![0u8; 100]).unwrap();
        assert!(for_each_symbol(&p, Tables::All, |_| {}).is_err());
        let _ = std::fs::remove_file(&p);
    }
}
