//! The process's loaded objects (executable, shared libraries, vDSO), as `Object` records
//! need them, and what changed since the last look (`dlopen` / `dlclose`).

use culprit_format::object_flags;

use crate::sys::{self, LoadedObject};

/// A loaded object with its record id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Obj {
    /// Id in the current file's `Object` records.
    pub id: u32,
    /// `object_flags` bits.
    pub flags: u32,
    /// Absolute path (`[vdso]` for the vDSO).
    pub path: String,
    /// Load bias.
    pub bias: u64,
    /// Lowest runtime address.
    pub start: u64,
    /// One past the highest.
    pub end: u64,
    /// GNU build-id.
    pub build_id: Vec<u8>,
}

impl Obj {
    fn same_mapping(&self, o: &Obj) -> bool {
        self.path == o.path && self.bias == o.bias && self.start == o.start
    }

    /// True for an object with a file on disk that can be read for symbols.
    pub fn has_file(&self) -> bool {
        self.flags & object_flags::VDSO == 0 && self.path.starts_with('/')
    }

    /// True when `addr` falls in this object's address range.
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end).contains(&addr)
    }
}

/// Reads the link map now.
pub fn scan() -> Vec<Obj> {
    let vdso = sys::vdso_base();
    let cwd = std::env::current_dir().ok();
    sys::loaded_objects()
        .into_iter()
        .enumerate()
        .map(
            |(
                i,
                LoadedObject {
                    name,
                    bias,
                    start,
                    end,
                    build_id,
                },
            )| {
                let mut flags = 0;
                let path = if i == 0 && name.is_empty() {
                    flags |= object_flags::MAIN;
                    std::fs::read_link("/proc/self/exe")
                        .map(|p| p.to_string_lossy().into_owned())
                        .unwrap_or_default()
                } else if vdso != 0 && start == vdso {
                    flags |= object_flags::VDSO;
                    "[vdso]".to_string()
                } else if !name.starts_with('/') && !name.is_empty() {
                    match &cwd {
                        Some(c) if name.contains('/') => {
                            c.join(&name).to_string_lossy().into_owned()
                        }
                        _ => name,
                    }
                } else {
                    name
                };
                Obj {
                    id: 0,
                    flags,
                    path,
                    bias,
                    start,
                    end,
                    build_id,
                }
            },
        )
        .collect()
}

/// The objects already described in the current file, and the link-map counters seen.
#[derive(Debug, Default)]
pub struct Tracker {
    next_id: u32,
    current: Vec<Obj>,
    counts: Option<(u64, u64)>,
}

/// What changed since the last [`Tracker::refresh`].
#[derive(Debug, Default)]
pub struct Changes {
    /// Newly loaded (to describe before the interval that uses them).
    pub added: Vec<Obj>,
    /// Unloaded (to mark after the interval).
    pub removed: Vec<Obj>,
}

impl Tracker {
    /// Starts over for a new file: every loaded object will be reported as added.
    pub fn reset(&mut self) {
        *self = Tracker::default();
    }

    /// The objects currently loaded, as last seen.
    pub fn current(&self) -> &[Obj] {
        &self.current
    }

    /// Looks at the link map if the loader's counters moved (or on the first call).
    pub fn refresh(&mut self) -> Changes {
        let counts = sys::link_map_counts();
        if self.counts == Some(counts) {
            return Changes::default();
        }
        self.counts = Some(counts);
        let now = scan();
        let mut ch = Changes::default();
        let old = std::mem::take(&mut self.current);
        for o in &old {
            if !now.iter().any(|n| n.same_mapping(o)) {
                ch.removed.push(o.clone());
            }
        }
        for mut n in now {
            if let Some(o) = old.iter().find(|o| o.same_mapping(&n)) {
                self.current.push(o.clone());
            } else {
                self.next_id += 1;
                n.id = self.next_id;
                ch.added.push(n.clone());
                self.current.push(n);
            }
        }
        ch
    }
}
