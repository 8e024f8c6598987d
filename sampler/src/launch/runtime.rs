//! The tracing runtime `culprit record` launches a program with: where `libculprit_rt.so` is
//! ([`find_runtime`], [`preload`]), whether a binary calls its hooks ([`calls_hooks`]), the
//! node name it will write under ([`node_or_default`]), and which trace files a run wrote
//! ([`trace_files`], [`written_by`], [`node_dirs`]).
//!
//! The runtime is found without the user naming it: `$CULPRIT_RT_LIB` if set (an explicit
//! override wins), else next to the `culprit` executable (where cargo builds both, and where
//! `scripts/install` puts neither), else in `<exe dir>/../lib/` (an installed layout:
//! `PREFIX/bin/culprit`, `PREFIX/lib/libculprit_rt.so`), else in the Debian package's
//! multiarch library directory (`/usr/bin/culprit`, `/usr/lib/x86_64-linux-gnu/` holding
//! `libculprit_rt.so.0`, the name the runtime is loaded by; the unversioned name is the
//! link-time symlink).

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use culprit_format::names;

/// Environment variable naming the runtime library explicitly.
pub const RT_LIB_VAR: &str = "CULPRIT_RT_LIB";
/// File name of the runtime library.
pub const RT_LIB_NAME: &str = "libculprit_rt.so";
/// The runtime's soname, as the Debian package installs it (`scripts/package` links it in).
pub const RT_SONAME: &str = "libculprit_rt.so.0";

/// The Debian multiarch directory name of this build's target (`/usr/lib/<triplet>/`, where
/// the package installs the runtime), for the architectures Debian names this way.
pub const MULTIARCH: Option<&str> = if cfg!(all(target_arch = "x86_64", target_env = "gnu")) {
    Some("x86_64-linux-gnu")
} else if cfg!(all(target_arch = "aarch64", target_env = "gnu")) {
    Some("aarch64-linux-gnu")
} else if cfg!(all(target_arch = "riscv64", target_env = "gnu")) {
    Some("riscv64-linux-gnu")
} else if cfg!(all(
    target_arch = "powerpc64",
    target_endian = "little",
    target_env = "gnu"
)) {
    Some("powerpc64le-linux-gnu")
} else if cfg!(all(target_arch = "s390x", target_env = "gnu")) {
    Some("s390x-linux-gnu")
} else {
    None
};

/// Why the runtime library was not found.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// [`RT_LIB_VAR`] names something that is not a file.
    #[error("{}={} is not a file", RT_LIB_VAR, .path.display())]
    NotAFile {
        /// What the variable names.
        path: PathBuf,
    },
    /// None of the places looked in holds it.
    #[error(
        "cannot find {} (looked in {}); build it with `cargo build -p culprit-rt`, install \
         culprit (the Debian package from scripts/package, or scripts/install), or set \
         {}=/path/to/{}",
        RT_LIB_NAME, .tried.join(", "), RT_LIB_VAR, RT_LIB_NAME
    )]
    NotFound {
        /// The paths tried, in order.
        tried: Vec<String>,
    },
}

/// Where the runtime library is, given the directory of the `culprit` executable and the
/// value of [`RT_LIB_VAR`].
pub fn find_runtime(
    exe_dir: Option<&Path>,
    explicit: Option<&OsStr>,
) -> Result<PathBuf, RuntimeError> {
    if let Some(p) = explicit.filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        return Err(RuntimeError::NotAFile { path: p });
    }
    let mut tried = Vec::new();
    if let Some(d) = exe_dir {
        let mut cands = vec![d.join(RT_LIB_NAME), d.join("../lib").join(RT_LIB_NAME)];
        if let Some(triplet) = MULTIARCH {
            cands.push(d.join("../lib").join(triplet).join(RT_SONAME));
        }
        for cand in cands {
            if cand.is_file() {
                return Ok(cand);
            }
            tried.push(cand.display().to_string());
        }
    }
    Err(RuntimeError::NotFound { tried })
}

/// The runtime for this `culprit` ([`find_runtime`] from the running executable's directory
/// and [`RT_LIB_VAR`]), canonical, and the `LD_PRELOAD` value that injects it ahead of any
/// preload already set.
pub fn preload() -> Result<(PathBuf, OsString), RuntimeError> {
    let exe = std::env::current_exe().ok();
    let runtime = find_runtime(
        exe.as_deref().and_then(Path::parent),
        std::env::var_os(RT_LIB_VAR).as_deref(),
    )?;
    let runtime = runtime.canonicalize().unwrap_or(runtime);
    let mut value = runtime.clone().into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        value.push(":");
        value.push(old);
    }
    Ok((runtime, value))
}

/// Whether the ELF file at `path` refers to `__cyg_profile_func_enter` (as every object built
/// with `-finstrument-functions` does); `None` when it is not an ELF file or cannot be read.
pub fn calls_hooks(path: &Path) -> Option<bool> {
    culprit_symbolize::names_dynamic_symbol(path, "__cyg_profile_func_enter")
}

/// `node` if given, else `$CULPRIT_NODE`, else the host name, as a valid node name: the node
/// the runtime (and the sampler) will write under.
pub fn node_or_default(node: Option<&str>) -> String {
    node.map(str::to_string)
        .or_else(|| std::env::var("CULPRIT_NODE").ok().filter(|n| !n.is_empty()))
        .map(|n| names::sanitize_node_name(&n))
        .unwrap_or_else(crate::default_node_name)
}

/// Every `trace-*.cul` under `dir/<node>/`.
pub fn trace_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(nodes) = std::fs::read_dir(dir) else {
        return out;
    };
    for n in nodes.flatten() {
        let Ok(files) = std::fs::read_dir(n.path()) else {
            continue;
        };
        for f in files.flatten() {
            let name = f.file_name();
            if matches!(
                names::parse_data_file_name(&name.to_string_lossy()),
                Some(names::DataFileName::Trace { .. })
            ) {
                out.push(f.path());
            }
        }
    }
    out
}

/// The trace files under `dir` that a run wrote, of those new since `before` (the
/// [`trace_files`] at its start). A data root may be shared (several `record`s with other node
/// names, the sampler, other programs linked with the runtime), so only those count that are in
/// the run's `node` directory, and the program's own (`pid`) wherever it moved
/// (`culprit_set_node`). A descendant that changed its node is not counted; another program
/// recording under the same node name at the same time is.
pub fn written_by(dir: &Path, before: &[PathBuf], node: &str, pid: Option<u32>) -> Vec<PathBuf> {
    let ours = |f: &Path| {
        let in_node = f.parent().and_then(Path::file_name) == Some(OsStr::new(node));
        let own = match (pid, f.file_name().map(|n| n.to_string_lossy())) {
            (Some(p), Some(n)) => matches!(
                names::parse_data_file_name(&n),
                Some(names::DataFileName::Trace { pid, .. }) if pid == p
            ),
            _ => false,
        };
        in_node || own
    };
    trace_files(dir)
        .into_iter()
        .filter(|f| !before.contains(f) && ours(f))
        .collect()
}

/// The directories holding `files` ([`written_by`]'s), each once, in order.
pub fn node_dirs(files: &[PathBuf]) -> Vec<String> {
    let mut dirs: Vec<String> = files
        .iter()
        .filter_map(|f| f.parent().map(|p| p.display().to_string()))
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_search_order() {
        let tmp = std::env::temp_dir().join(format!("culprit-rec-{}", std::process::id()));
        let bin = tmp.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(tmp.join("lib")).unwrap();
        let err = find_runtime(Some(&bin), None).unwrap_err().to_string();
        assert!(err.contains(RT_LIB_VAR), "{err}");
        if let Some(triplet) = MULTIARCH {
            // The Debian package's layout: the soname in the multiarch directory.
            let multi = tmp.join("lib").join(triplet);
            std::fs::create_dir_all(&multi).unwrap();
            std::fs::write(multi.join(RT_SONAME), b"x").unwrap();
            assert_eq!(
                find_runtime(Some(&bin), None).unwrap(),
                bin.join("../lib").join(triplet).join(RT_SONAME)
            );
        }
        std::fs::write(tmp.join("lib").join(RT_LIB_NAME), b"x").unwrap();
        assert!(find_runtime(Some(&bin), None)
            .unwrap()
            .ends_with("lib/libculprit_rt.so"));
        std::fs::write(bin.join(RT_LIB_NAME), b"x").unwrap();
        assert_eq!(
            find_runtime(Some(&bin), None).unwrap(),
            bin.join(RT_LIB_NAME)
        );
        let other = tmp.join("other.so");
        std::fs::write(&other, b"x").unwrap();
        assert_eq!(
            find_runtime(Some(&bin), Some(other.as_os_str())).unwrap(),
            other
        );
        assert!(find_runtime(Some(&bin), Some(OsStr::new("/nonexistent.so"))).is_err());
        let _ = std::fs::remove_dir_all(&tmp);
    }

    #[test]
    fn hook_reference_check() {
        // The test binary itself is ELF and not instrumented; a text file is not ELF.
        let exe = std::env::current_exe().unwrap();
        assert_eq!(calls_hooks(&exe), Some(false));
        assert_eq!(calls_hooks(Path::new("/etc/hostname")), None);
    }
}
