//! Naming locations: (image, function), once per distinct location, with a long-lived cache.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use culprit_format::vocab::{is_culprit_runtime, CULPRIT_RUNTIME, KERNEL_IMAGE, UNKNOWN};
use culprit_symbolize::{unresolved_name, ImageAddr, Symbolizer};
use rustc_hash::FxHashMap;

use crate::procs::{ImageKind, Loc, Tracker};

/// Names locations: (image, function), once per distinct location, with a long-lived cache.
#[derive(Debug)]
pub struct Namer {
    symbolizer: Symbolizer,
    /// Past this, new user-space locations are named `image+0xoffset` without reading the
    /// image (the run is ending and must end on time).
    deadline: Arc<NamingDeadline>,
    cache: FxHashMap<Loc, (Arc<str>, Arc<str>)>,
    kernel_image: Arc<str>,
    unknown: Arc<str>,
    /// Distinct locations named so far.
    pub named: u64,
}

/// A time past which a [`Namer`] reads no more images, set from any thread.
#[derive(Debug, Default)]
pub struct NamingDeadline {
    /// CLOCK_MONOTONIC ns; 0: none.
    at_ns: AtomicU64,
}

impl NamingDeadline {
    /// Sets the deadline to `mono_ns` (CLOCK_MONOTONIC), unless an earlier one is set.
    pub fn set(&self, mono_ns: u64) {
        let _ = self
            .at_ns
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |d| {
                (d == 0 || mono_ns < d).then_some(mono_ns.max(1))
            });
    }

    /// True once the deadline has passed.
    pub fn passed(&self) -> bool {
        let d = self.at_ns.load(Ordering::SeqCst);
        d != 0 && crate::sys::monotonic_ns() >= d
    }
}

/// Beyond this many cached locations the cache starts over (a bound for week-long runs).
pub(super) const NAMER_CACHE_MAX: usize = 1 << 20;

impl Default for Namer {
    fn default() -> Self {
        Self::new(Symbolizer::new())
    }
}

impl Namer {
    /// A namer over `symbolizer`.
    pub fn new(symbolizer: Symbolizer) -> Namer {
        Namer {
            symbolizer,
            deadline: Arc::default(),
            cache: FxHashMap::default(),
            kernel_image: Arc::from(KERNEL_IMAGE),
            unknown: Arc::from(UNKNOWN),
            named: 0,
        }
    }

    /// The namer's deadline: past it, new user-space locations are named `image+0xoffset`
    /// without reading their images. Another thread may set it (the sampler's ring reader, as
    /// soon as it sees the run end, while this thread names a long interval).
    pub fn deadline(&self) -> Arc<NamingDeadline> {
        self.deadline.clone()
    }

    fn out_of_time(&self) -> bool {
        self.deadline.passed()
    }

    /// Drops what is cached about images whose files were replaced.
    pub fn forget(&mut self, paths: &[Arc<Path>]) {
        if paths.is_empty() {
            return;
        }
        for p in paths {
            self.symbolizer.forget_image(p);
        }
        self.cache.retain(|loc, _| !matches!(loc, Loc::User { .. }));
    }

    /// Names every location in `locs` not yet cached; user addresses are resolved in one batch
    /// per image.
    pub fn prepare<'a>(&mut self, tracker: &Tracker, locs: impl Iterator<Item = &'a Loc>) {
        if self.cache.len() > NAMER_CACHE_MAX {
            self.cache.clear();
        }
        let mut by_image: FxHashMap<u32, Vec<u64>> = FxHashMap::default();
        for loc in locs {
            if self.cache.contains_key(loc) {
                continue;
            }
            match *loc {
                Loc::User { image, offset } if tracker.image(image).kind == ImageKind::File => {
                    by_image.entry(image).or_default().push(offset);
                }
                other => {
                    let names = self.name_one(tracker, other);
                    self.cache.insert(other, names);
                    self.named += 1;
                }
            }
        }
        for (image, mut offsets) in by_image {
            offsets.sort_unstable();
            offsets.dedup();
            let img = tracker.image(image);
            let addrs: Vec<ImageAddr> = offsets.iter().map(|&o| ImageAddr::FileOffset(o)).collect();
            let names = if self.out_of_time() {
                vec![None; addrs.len()]
            } else {
                self.symbolizer.resolve_many(&img.path, &addrs)
            };
            let runtime = is_culprit_runtime(&img.name);
            for (offset, name) in offsets.into_iter().zip(names) {
                let func = match name {
                    _ if runtime => Arc::from(CULPRIT_RUNTIME),
                    Some(f) => f,
                    None => self.unresolved(&img.path, offset),
                };
                self.cache
                    .insert(Loc::User { image, offset }, (img.name.clone(), func));
                self.named += 1;
            }
        }
    }

    fn name_one(&mut self, tracker: &Tracker, loc: Loc) -> (Arc<str>, Arc<str>) {
        match loc {
            Loc::Kernel(addr) => match self.symbolizer.kernel_symbol(addr) {
                Some((func, module)) => (module.unwrap_or_else(|| self.kernel_image.clone()), func),
                None => (self.kernel_image.clone(), self.unknown.clone()),
            },
            Loc::User { image, offset } => {
                let img = tracker.image(image);
                match img.kind {
                    ImageKind::Vdso => {
                        let f = self
                            .symbolizer
                            .vdso(offset)
                            .unwrap_or_else(|| Arc::from(format!("[vdso]+{offset:#x}").as_str()));
                        (img.name.clone(), f)
                    }
                    ImageKind::Anon => (img.name.clone(), img.name.clone()),
                    ImageKind::File if is_culprit_runtime(&img.name) => {
                        (img.name.clone(), Arc::from(CULPRIT_RUNTIME))
                    }
                    ImageKind::File => {
                        let found = if self.out_of_time() {
                            None
                        } else {
                            self.symbolizer
                                .resolve(&img.path, ImageAddr::FileOffset(offset))
                        };
                        let f = match found {
                            Some(f) => f,
                            None => self.unresolved(&img.path, offset),
                        };
                        (img.name.clone(), f)
                    }
                }
            }
            Loc::Unknown => (self.unknown.clone(), self.unknown.clone()),
        }
    }

    /// The name of an address no symbol covers: `image+<offset of its function's start>` when the
    /// image's unwind table knows the function, else `image+<offset>`.
    fn unresolved(&mut self, path: &Path, offset: u64) -> Arc<str> {
        let at = if self.out_of_time() {
            None
        } else {
            self.symbolizer.function_start(path, offset)
        }
        .unwrap_or(offset);
        Arc::from(unresolved_name(path, at).as_str())
    }

    /// Images the symbolizer refused since the last call (one line each).
    pub fn take_notes(&mut self) -> Vec<String> {
        self.symbolizer.take_notes()
    }

    /// The (image, function) of a prepared location.
    pub fn get(&self, loc: &Loc) -> (Arc<str>, Arc<str>) {
        self.cache
            .get(loc)
            .cloned()
            .unwrap_or_else(|| (self.unknown.clone(), self.unknown.clone()))
    }
}
