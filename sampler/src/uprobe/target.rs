//! From what the user asks (`[BINARY:]PATTERN`) to a list of probes: which binaries, which of
//! their functions, at which file offsets, and the functions that cannot be probed with the
//! reason.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::elf::{Image, SymbolSource};

/// One `[BINARY:]PATTERN` as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSpec {
    /// Binary: a path, or a file name looked up where the program would find it; `None` for
    /// the program's own executable.
    pub image: Option<String>,
    /// Glob on symbol names (`*` any run, `?` one character).
    pub pattern: String,
}

impl ProbeSpec {
    /// Parses `PATTERN` or `BINARY:PATTERN`. A `::` (C++ scope) is part of the pattern, not
    /// a separator.
    pub fn parse(s: &str) -> Result<ProbeSpec, String> {
        let s = s.trim();
        let sep = s
            .char_indices()
            .find(|&(i, c)| {
                c == ':'
                    && s.as_bytes().get(i + 1) != Some(&b':')
                    && (i == 0 || s.as_bytes()[i - 1] != b':')
            })
            .map(|(i, _)| i);
        let (image, pattern) = match sep {
            Some(i) => (Some(s[..i].to_string()), &s[i + 1..]),
            None => (None, s),
        };
        if pattern.is_empty() || image.as_deref() == Some("") {
            return Err(format!(
                "{s:?}: give PATTERN or BINARY:PATTERN (e.g. handle_* or libc.so.6:malloc)"
            ));
        }
        Ok(ProbeSpec {
            image,
            pattern: pattern.to_string(),
        })
    }

    /// Parses a comma-separated list of specs.
    pub fn parse_list(s: &str) -> Result<Vec<ProbeSpec>, String> {
        s.split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(ProbeSpec::parse)
            .collect()
    }

    /// Parses every value of a repeatable flag (`--uprobes`), each a comma-separated list; an
    /// error when they hold no spec.
    pub fn parse_all(values: &[String]) -> Result<Vec<ProbeSpec>, String> {
        let mut out = Vec::new();
        for v in values {
            out.extend(ProbeSpec::parse_list(v)?);
        }
        if out.is_empty() {
            return Err("--uprobes: give at least one [BINARY:]PATTERN".into());
        }
        Ok(out)
    }

    /// True when the pattern names one function (no wildcard).
    pub fn is_exact(&self) -> bool {
        !self.pattern.contains(['*', '?'])
    }
}

impl std::fmt::Display for ProbeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.image {
            Some(i) => write!(f, "{i}:{}", self.pattern),
            None => f.write_str(&self.pattern),
        }
    }
}

/// True when `name` matches the glob `pat` as a whole (`*` any run, `?` one byte).
pub use culprit_format::glob::glob_match_bytes as glob;

/// A binary to probe.
#[derive(Clone, Debug)]
pub struct ProbeImage {
    /// Path as the user and reports know it (the binary's path in the target's file system).
    pub path: PathBuf,
    /// Path handed to the kernel (for a running process, through `/proc/<pid>/root`).
    pub probe_path: PathBuf,
    /// Its symbols and segments.
    pub image: Image,
}

/// A function to probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    /// Index into [`Plan::images`].
    pub image: usize,
    /// Symbol name.
    pub name: String,
    /// ELF virtual address of its entry.
    pub vaddr: u64,
    /// File offset of its entry (what the kernel takes).
    pub offset: u64,
    /// Call sites where the compiler inlined it (those calls are not counted); `None` when
    /// the binary has no DWARF to tell.
    pub inlined_sites: Option<u32>,
    /// The first bytes at its entry (what the kernel emulates or single-steps on a hit).
    pub entry_bytes: Vec<u8>,
}

/// A function that matched but cannot be probed, or a pattern that matched nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// The spec as given.
    pub spec: String,
    /// The function, when one matched.
    pub function: Option<String>,
    /// Why it is not probed.
    pub reason: String,
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.function {
            Some(func) => write!(f, "{func} ({}): {}", self.spec, self.reason),
            None => write!(f, "{}: {}", self.spec, self.reason),
        }
    }
}

/// The probes to open, and what could not be probed.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// The binaries.
    pub images: Vec<ProbeImage>,
    /// The functions, one per distinct entry (aliases probed once).
    pub probes: Vec<Probe>,
    /// What was not probed, with the reason.
    pub skipped: Vec<Skipped>,
}

impl Plan {
    /// Lines worth telling the user: what was skipped and why, and probed functions that the
    /// compiler also inlined somewhere (those calls are not counted).
    pub fn notes(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .skipped
            .iter()
            .map(|s| format!("not probed: {s}"))
            .collect();
        for p in &self.probes {
            if let Some(n @ 1..) = p.inlined_sites {
                out.push(format!(
                    "{} is also inlined at {n} call site(s) in {}: calls there are not counted",
                    p.name,
                    self.images[p.image].path.display()
                ));
            }
        }
        out
    }

    /// `image:function` of every probe (for the Info record).
    pub fn describe_probes(&self) -> String {
        self.probes
            .iter()
            .map(|p| {
                let img = &self.images[p.image].path;
                let base = img.file_name().unwrap_or(img.as_os_str());
                format!("{}:{}", base.to_string_lossy(), p.name)
            })
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// Why a matched symbol is not a function entry to probe.
fn not_an_entry(name: &str) -> Option<String> {
    let (base, suffix) = name.split_once('.')?;
    if suffix == "cold" || suffix.starts_with("cold.") {
        return Some(format!(
            "a cold block the compiler split off from {base}, not a function entry"
        ));
    }
    if suffix.starts_with("part.") {
        return Some(format!(
            "a piece of {base} split off by partial inlining: its calls are not calls of {base}"
        ));
    }
    None
}

/// Builds the plan: `resolve` turns a spec's binary (`None`: the program) into (path as
/// known, path for the kernel).
pub fn plan(
    specs: &[ProbeSpec],
    mut resolve: impl FnMut(Option<&str>) -> Result<(PathBuf, PathBuf), String>,
) -> Result<Plan, String> {
    let mut plan = Plan::default();
    let mut seen: HashSet<(usize, u64)> = HashSet::new();
    for spec in specs {
        let (path, probe_path) = resolve(spec.image.as_deref())?;
        let idx = match plan.images.iter().position(|i| i.probe_path == probe_path) {
            Some(i) => i,
            None => {
                let image = Image::load(&probe_path).map_err(|e| e.to_string())?;
                plan.images.push(ProbeImage {
                    path,
                    probe_path,
                    image,
                });
                plan.images.len() - 1
            }
        };
        let img = &plan.images[idx].image;
        let pat = spec.pattern.as_bytes();
        let mut matched = 0usize;
        let mut pieces = 0usize;
        for f in img.funcs.iter().filter(|f| glob(pat, f.name.as_bytes())) {
            matched += 1;
            let reason = if f.ifunc {
                Some(
                    "a GNU indirect function: its symbol is the resolver, run once at load \
                     time; probe the implementation it picks (e.g. __memcpy_avx_unaligned)"
                        .to_string(),
                )
            } else if let Some(r) = not_an_entry(&f.name) {
                pieces += 1;
                Some(r)
            } else if img.file_offset(f.vaddr).is_none() {
                Some("not in an executable segment of the file".to_string())
            } else {
                None
            };
            if let Some(reason) = reason {
                // A glob over many functions would list every cold block: count those instead.
                if spec.is_exact() || !reason.contains("split off") {
                    plan.skipped.push(Skipped {
                        spec: spec.to_string(),
                        function: Some(f.name.clone()),
                        reason,
                    });
                }
                continue;
            }
            let offset = img.file_offset(f.vaddr).expect("checked above");
            if !seen.insert((idx, offset)) {
                continue; // an alias of a function already probed
            }
            let base = f.name.split_once('.').map_or(f.name.as_str(), |(b, _)| b);
            let entry_bytes = read_at(&plan.images[idx].probe_path, offset, 4);
            let img = &plan.images[idx].image;
            plan.probes.push(Probe {
                image: idx,
                name: f.name.clone(),
                vaddr: f.vaddr,
                offset,
                inlined_sites: img.inline.as_ref().map(|i| i.sites(base)),
                entry_bytes,
            });
        }
        if pieces > 0 && !spec.is_exact() {
            plan.skipped.push(Skipped {
                spec: spec.to_string(),
                function: None,
                reason: format!(
                    "{pieces} matching symbol(s) are cold blocks or partial-inlining pieces \
                     (name.cold, name.part.N), not function entries"
                ),
            });
        }
        // Functions the compiler inlined everywhere: no symbol, only DWARF knows them.
        let has_symbol = |n: &str| {
            img.funcs.iter().any(|f| {
                f.name == n
                    || (f.name.starts_with(n) && f.name.as_bytes().get(n.len()) == Some(&b'.'))
            })
        };
        let mut inlined_only = Vec::new();
        if let Some(info) = &img.inline {
            for n in info.names().filter(|n| glob(pat, n.as_bytes())) {
                if !has_symbol(n) {
                    inlined_only.push((n.to_string(), info.sites(n)));
                }
            }
        }
        inlined_only.sort();
        for (n, sites) in &inlined_only {
            plan.skipped.push(Skipped {
                spec: spec.to_string(),
                function: Some(n.clone()),
                reason: format!(
                    "inlined at {sites} call site(s) and never called out of line: there is no \
                     entry to probe (rebuild with -finstrument-functions, or probe its callers)"
                ),
            });
        }
        if matched == 0 && inlined_only.is_empty() {
            let why = match img.symbols_from {
                SymbolSource::Dynsym => {
                    " (the binary is stripped and has no debug file under /usr/lib/debug: only \
                     exported functions can be found)"
                }
                _ => "",
            };
            plan.skipped.push(Skipped {
                spec: spec.to_string(),
                function: None,
                reason: format!(
                    "no function symbol matches in {}{why}",
                    plan.images[idx].path.display()
                ),
            });
        }
    }
    Ok(plan)
}

/// Up to `n` bytes of `path` at `offset` (empty if unreadable).
fn read_at(path: &Path, offset: u64, n: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt as _;
    let mut b = vec![0u8; n];
    let file = culprit_symbolize::untrusted::open_regular(path).map_err(std::io::Error::other);
    match file.and_then(|f| f.read_at(&mut b, offset)) {
        Ok(k) => {
            b.truncate(k);
            b
        }
        Err(_) => Vec::new(),
    }
}

/// Finds a shared library by file name the way the dynamic loader would for `exe`:
/// `LD_LIBRARY_PATH`, the executable's `RUNPATH`/`RPATH` (`$ORIGIN` expanded), the loader
/// cache (`ldconfig -p`), then the default directories.
pub fn find_library(name: &str, exe: Option<&Path>) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(v) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&v).filter(|d| !d.as_os_str().is_empty()));
    }
    if let Some(exe) = exe {
        dirs.extend(run_paths(exe));
    }
    for d in &dirs {
        let c = d.join(name);
        if c.is_file() {
            return Some(c);
        }
    }
    if let Ok(o) = std::process::Command::new("ldconfig").arg("-p").output() {
        let text = String::from_utf8_lossy(&o.stdout);
        for line in text.lines() {
            let l = line.trim();
            if l.starts_with(name) && l.as_bytes().get(name.len()) == Some(&b' ') {
                if let Some((_, p)) = l.rsplit_once("=> ") {
                    let p = PathBuf::from(p.trim());
                    if p.is_file() {
                        return Some(p);
                    }
                }
            }
        }
    }
    [
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib64",
        "/usr/lib64",
        "/lib",
        "/usr/lib",
        "/usr/local/lib",
    ]
    .iter()
    .map(|d| Path::new(d).join(name))
    .find(|c| c.is_file())
}

/// `DT_RUNPATH` / `DT_RPATH` directories of an executable, `$ORIGIN` expanded.
fn run_paths(exe: &Path) -> Vec<PathBuf> {
    use object::read::elf::{Dyn as _, ElfFile64, FileHeader as _};
    let Ok(data) = culprit_symbolize::untrusted::read(exe, 4 << 30) else {
        return Vec::new();
    };
    let Ok(file) = ElfFile64::<object::Endianness>::parse(&data[..]) else {
        return Vec::new();
    };
    let e = file.endian();
    let origin = exe
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out = Vec::new();
    let Ok(Some((dyns, link))) = file
        .elf_header()
        .sections(e, file.data())
        .map(|s| s.dynamic(e, file.data()).ok().flatten())
    else {
        return out;
    };
    let Ok(sections) = file.elf_header().sections(e, file.data()) else {
        return out;
    };
    let Ok(strings) = sections.strings(e, file.data(), link) else {
        return out;
    };
    for d in dyns {
        let tag = d.d_tag(e);
        if tag != object::elf::DT_RUNPATH && tag != object::elf::DT_RPATH {
            continue;
        }
        if let Ok(s) = strings.get(d.d_val(e) as u32) {
            for part in String::from_utf8_lossy(s).split(':') {
                let p = part
                    .replace("${ORIGIN}", &origin)
                    .replace("$ORIGIN", &origin);
                if !p.is_empty() {
                    out.push(PathBuf::from(p));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs() {
        let s = ProbeSpec::parse("handle_*").unwrap();
        assert_eq!(s.image, None);
        assert_eq!(s.pattern, "handle_*");
        let s = ProbeSpec::parse("libc.so.6:malloc").unwrap();
        assert_eq!(s.image.as_deref(), Some("libc.so.6"));
        assert_eq!(s.pattern, "malloc");
        let s = ProbeSpec::parse("ns::f*").unwrap();
        assert_eq!(s.image, None);
        assert_eq!(s.pattern, "ns::f*");
        let s = ProbeSpec::parse("/usr/bin/srv:ns::f").unwrap();
        assert_eq!(s.image.as_deref(), Some("/usr/bin/srv"));
        assert_eq!(s.pattern, "ns::f");
        assert!(ProbeSpec::parse("x:").is_err());
        assert!(ProbeSpec::parse(":f").is_err());
        assert_eq!(ProbeSpec::parse_list("a, b:c,,").unwrap().len(), 2);
        assert_eq!(s.to_string(), "/usr/bin/srv:ns::f");
    }

    #[test]
    fn pieces_are_not_entries() {
        assert!(not_an_entry("f.cold").is_some());
        assert!(not_an_entry("f.part.0").is_some());
        assert!(not_an_entry("f.constprop.0").is_none());
        assert!(not_an_entry("f").is_none());
    }

    #[test]
    fn libc_is_found() {
        let p = find_library("libc.so.6", None).expect("libc.so.6 on this machine");
        assert!(p.is_file());
    }
}
