//! Facts read from ELF files opened as [`crate::untrusted`] says: build ids, dynamic symbols,
//! and whether blazesym may follow an image's debug links.

use std::path::{Path, PathBuf};

use crate::untrusted::{self, Refused};

/// The GNU build-id of the ELF file at `path` (`None` when it has none or is not ELF); `Err`
/// when the file cannot be read, or was refused as unsafe ([`crate::untrusted`]: say so).
pub fn read_build_id(path: &Path) -> Result<Option<Vec<u8>>, Refused> {
    use object::{Object as _, ReadCache};
    let f = untrusted::open_regular(path)?;
    let data = ReadCache::new(f);
    let Ok(file) = object::File::parse(&data) else {
        return Ok(None);
    };
    Ok(file.build_id().ok().flatten().map(<[u8]>::to_vec))
}

/// Whether the ELF file at `path` names `symbol` in its dynamic symbol table (as every object
/// built with `-finstrument-functions` names `__cyg_profile_func_enter`); `None` when it is not
/// an ELF file (a script) or cannot be read. Only the headers and the table are read.
pub fn names_dynamic_symbol(path: &Path, symbol: &str) -> Option<bool> {
    use object::{Object as _, ObjectSymbol as _, ReadCache};
    let data = ReadCache::new(untrusted::open_regular(path).ok()?);
    let file = object::File::parse(&data).ok()?;
    let found = file
        .dynamic_symbols()
        .any(|s| s.name_bytes().is_ok_and(|n| n == symbol.as_bytes()));
    Some(found)
}

/// Directories blazesym looks for separate debug files in, besides the binary's own.
const DEBUG_DIRS: &[&str] = &["/usr/lib/debug", "/lib/debug"];

/// Whether blazesym may follow the debug links of the image open as `file` (`fd_path`, its
/// `/proc/self/fd/N`): true when it has none, or when every directory blazesym would look in
/// — the binary's own (blazesym canonicalizes `fd_path` to the file's real path), the one an
/// absolute `.gnu_debugaltlink` names, and [`DEBUG_DIRS`] — is one no other user can write.
pub(crate) fn debug_links_trusted(file: &std::fs::File, fd_path: &Path) -> bool {
    use object::{Object as _, ObjectSection as _, ReadCache};
    let Ok(f) = file.try_clone() else {
        return false;
    };
    let data = ReadCache::new(f);
    let Ok(elf) = object::File::parse(&data) else {
        return true; // not ELF: blazesym reads nothing more
    };
    let link = elf.section_by_name(".gnu_debuglink").is_some();
    let alt = elf.section_by_name(".gnu_debugaltlink").and_then(|s| {
        let d = s.data().ok()?;
        let end = d.iter().position(|&b| b == 0)?;
        Some(PathBuf::from(
            String::from_utf8_lossy(&d[..end]).into_owned(),
        ))
    });
    if !link && alt.is_none() {
        return true;
    }
    // The nearest existing directory: one that does not exist yet can be made only by whoever
    // may write its existing parent.
    let trusted = |dir: &Path| {
        let mut d = Some(dir);
        while let Some(p) = d {
            if p.exists() {
                return untrusted::trusted_dir(p);
            }
            d = p.parent();
        }
        false
    };
    let own_dir = std::fs::read_link(fd_path)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf));
    own_dir.is_some_and(|d| trusted(&d))
        && DEBUG_DIRS.iter().all(|d| trusted(Path::new(d)))
        && alt.is_none_or(|a| !a.is_absolute() || a.parent().is_some_and(trusted))
}
