//! `CULPRIT_INCLUDE` / `CULPRIT_EXCLUDE`: which functions are traced.
//!
//! Patterns are globs on the symbol name as the ELF symbol table has it (so C++ names are
//! matched in their mangled form). An address is traced when one of its names is included
//! (no include list = everything) and not excluded. The decision for each function address is
//! made once per thread, when the address first shows up, from a process-wide table built from
//! the `.symtab` and `.dynsym` of the loaded objects (rebuilt when objects are loaded), and
//! cached in the thread's slot ([`decision`]).
//!
//! An address with no symbol in the table (an object loaded less than an interval ago, or a
//! stripped one) gets a *provisional* decision: traced unless an include list is set (a name
//! that is not known cannot match it), and decided again when the table is rebuilt.

use std::sync::atomic::{AtomicU32, Ordering::Acquire, Ordering::Release};

use crate::elf::{self, Tables};
use crate::glob::glob_match;
use crate::objects::Obj;
use crate::sys::Publish;

/// Include/exclude decision cached in a slot: low two bits, the decision table generation above.
pub mod decision {
    /// Traced.
    pub const INCLUDE: u32 = 0;
    /// Excluded by `CULPRIT_INCLUDE` / `CULPRIT_EXCLUDE`: behaves as if not instrumented.
    pub const EXCLUDE: u32 = 1;
    /// The address had no known symbol when decided: re-decide when the table changes.
    pub const PROVISIONAL: u32 = 2;
    /// Mask of the decision bits.
    pub const MASK: u32 = 3;
}

/// The patterns in effect.
#[derive(Clone, Debug, Default)]
pub struct Filters {
    /// Trace only names matching one of these (empty: all).
    pub include: Vec<String>,
    /// Never trace names matching one of these.
    pub exclude: Vec<String>,
    /// Demote names matching one of these as soon as they are seen (`CULPRIT_DEMOTE`).
    pub demote: Vec<String>,
}

impl Filters {
    /// True when no pattern is set (everything is traced, no table is needed).
    pub fn is_empty(&self) -> bool {
        self.include.is_empty() && self.exclude.is_empty() && self.demote.is_empty()
    }

    /// Whether a function named `name` is traced.
    pub fn wants(&self, name: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|p| glob_match(p, name)))
            && !self.exclude.iter().any(|p| glob_match(p, name))
    }
}

#[derive(Debug)]
struct Table {
    filters: Filters,
    /// (address, traced), sorted by address, one entry per address.
    entries: Vec<(u64, bool)>,
    /// Addresses `CULPRIT_DEMOTE` names, sorted.
    demote: Vec<u64>,
    generation: u32,
}

static TABLE: Publish<Table> = Publish::new();
static GENERATION: AtomicU32 = AtomicU32::new(0);

/// Generation of the current table (changes when it is rebuilt).
pub fn generation() -> u32 {
    GENERATION.load(Acquire)
}

/// The decision for a function address ([`decision`] bits | generation << 2). Called by the
/// hooks when an address first shows up in a thread: no allocation, no lock.
pub fn decide(addr: usize) -> u32 {
    let Some(t) = TABLE.get() else {
        return decision::INCLUDE;
    };
    let g = t.generation << 2;
    match t.entries.binary_search_by_key(&(addr as u64), |e| e.0) {
        Ok(i) if t.entries[i].1 => decision::INCLUDE | g,
        Ok(_) => decision::EXCLUDE | g,
        Err(_) if t.filters.include.is_empty() => decision::PROVISIONAL | g,
        Err(_) => decision::PROVISIONAL | decision::EXCLUDE | g,
    }
}

/// True when `CULPRIT_DEMOTE` names the function at `addr` (the flusher demotes it).
pub fn demote_wanted(addr: usize) -> bool {
    TABLE
        .get()
        .is_some_and(|t| t.demote.binary_search(&(addr as u64)).is_ok())
}

/// Builds the decision table for `objects` and publishes it (does nothing without patterns).
pub fn rebuild(filters: &Filters, objects: &[Obj]) {
    if filters.is_empty() {
        return;
    }
    let mut entries: Vec<(u64, bool)> = Vec::new();
    let mut demote: Vec<u64> = Vec::new();
    for o in objects.iter().filter(|o| o.has_file()) {
        let _ = elf::for_each_symbol(o.path.as_ref(), Tables::All, |s| {
            if s.defined && s.is_func && s.value != 0 {
                let name = String::from_utf8_lossy(s.name);
                let at = o.bias.wrapping_add(s.value);
                entries.push((at, filters.wants(&name)));
                if filters.demote.iter().any(|p| glob_match(p, &name)) {
                    demote.push(at);
                }
            }
        });
    }
    demote.sort_unstable();
    demote.dedup();
    entries.sort_unstable();
    // One entry per address: traced if any of its names is.
    entries.dedup_by(|later, kept| {
        if later.0 == kept.0 {
            kept.1 |= later.1;
            true
        } else {
            false
        }
    });
    let generation = (GENERATION.load(Acquire) + 1) & (u32::MAX >> 2);
    TABLE.set(Table {
        filters: filters.clone(),
        entries,
        demote,
        generation,
    });
    GENERATION.store(generation, Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn include_and_exclude() {
        let f = Filters {
            include: vec!["fib*".into(), "work".into()],
            exclude: vec!["fib_slow".into()],
            demote: Vec::new(),
        };
        assert!(f.wants("fib"));
        assert!(f.wants("work"));
        assert!(!f.wants("fib_slow"));
        assert!(!f.wants("main"));
        let f = Filters {
            include: vec![],
            exclude: vec!["leaf".into()],
            demote: Vec::new(),
        };
        assert!(f.wants("main"));
        assert!(!f.wants("leaf"));
    }
}
