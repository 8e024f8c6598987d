//! The vDSO, which has no file: a copy of this process's (the same image the kernel maps into
//! every 64-bit process), kept in memory (a `memfd`, read through `/proc/self/fd/N`).

use std::path::PathBuf;

/// A copy of this process's vDSO in an in-memory file.
#[derive(Debug)]
pub(crate) struct VdsoCopy {
    /// `/proc/self/fd/<fd of file>`.
    pub(crate) path: PathBuf,
    /// Holds the copy alive.
    _file: std::fs::File,
}

impl VdsoCopy {
    pub(crate) fn make() -> Option<VdsoCopy> {
        use std::io::Write as _;
        use std::os::fd::AsRawFd as _;
        use std::os::unix::fs::FileExt as _;
        let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
        let line = maps.lines().find(|l| l.ends_with("[vdso]"))?;
        let (s, e) = line.split_whitespace().next()?.split_once('-')?;
        let (start, end) = (
            u64::from_str_radix(s, 16).ok()?,
            u64::from_str_radix(e, 16).ok()?,
        );
        let mut bytes = vec![0u8; end.checked_sub(start)? as usize];
        std::fs::File::open("/proc/self/mem")
            .ok()?
            .read_exact_at(&mut bytes, start)
            .ok()?;
        let mut file = crate::sys::memfd(c"culprit-vdso").ok()?;
        file.write_all(&bytes).ok()?;
        let path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        Some(VdsoCopy { path, _file: file })
    }
}
