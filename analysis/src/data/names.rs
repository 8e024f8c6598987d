//! Dataset-wide name tables: functions, programs and kernel events get dense `u32` ids once, so
//! records carry ids and comparisons never hash strings.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

/// Interned id of a [`FuncKey`] (dataset-wide).
pub type FuncId = u32;
/// Interned id of a program name (dataset-wide).
pub type ProgramId = u32;
/// Interned id of a kernel event name (dataset-wide).
pub type EventId = u32;
/// Interned id of an [`OsMetricKey`] (dataset-wide).
pub type OsMetricId = u32;

/// A function's identity across nodes: binary image base name and demangled symbol.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FuncKey {
    /// Base name of the executable, shared library, `[kernel.kallsyms]` or kernel module.
    pub image: Arc<str>,
    /// Demangled function name, or `image+0xoffset` when it could not be resolved.
    pub function: Arc<str>,
}

/// Assigns dense `u32` ids to values.
#[derive(Clone, Debug)]
pub struct Interner<T> {
    items: Vec<T>,
    map: HashMap<T, u32>,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            items: Vec::new(),
            map: HashMap::new(),
        }
    }
}

impl<T: Clone + Eq + Hash> Interner<T> {
    /// The id of `v`, assigning the next one if new.
    pub fn intern(&mut self, v: T) -> u32 {
        if let Some(&id) = self.map.get(&v) {
            return id;
        }
        let id = self.items.len() as u32;
        self.items.push(v.clone());
        self.map.insert(v, id);
        id
    }

    /// The id of `v`, if interned.
    pub fn lookup(&self, v: &T) -> Option<u32> {
        self.map.get(v).copied()
    }

    /// The value of `id`.
    pub fn get(&self, id: u32) -> &T {
        &self.items[id as usize]
    }

    /// Number of interned values.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// True when nothing is interned.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
}

/// Dataset-wide name tables.
#[derive(Clone, Debug, Default)]
pub struct Names {
    /// Functions.
    pub funcs: Interner<FuncKey>,
    /// Program names.
    pub programs: Interner<Arc<str>>,
    /// Kernel event names.
    pub events: Interner<Arc<str>>,
    /// OS metrics (name, instance, unit).
    pub os_metrics: Interner<OsMetricKey>,
}

/// An OS metric's identity: its name (`disk.await`, see `culprit_format::os_metrics`), the
/// device or interface it is about, and its unit. Compared across nodes by all three.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OsMetricKey {
    /// Metric name, `group.metric`.
    pub name: Arc<str>,
    /// Device or interface name; `None` for node-wide metrics.
    pub instance: Option<Arc<str>>,
    /// Unit (`ms`, `B/s`, …).
    pub unit: Arc<str>,
}
