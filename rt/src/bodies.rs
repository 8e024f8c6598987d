//! Where each function's body lies, from the loaded objects' symbol tables: the call-site
//! patcher rewrites the hook calls inside the body of the function they were made for
//! (`sys::patch`), and those in another function's body (an inlined copy's) only when
//! [`crate::callsite`] proves from that body's code that the call is made for one function
//! alone (gcc may share one call between the inlined copies of two functions). That proof
//! needs the whole function: its body and its `.cold` part (gcc's `F.cold` symbol), which
//! jumps back into the body. Used by the flusher (it reads files and allocates).

use std::collections::HashMap;

use crate::elf::{self, Tables};
use crate::objects::Obj;

/// The function bodies of the objects looked at so far, by object path and load bias.
#[derive(Debug, Default)]
pub struct Bodies {
    objects: HashMap<(String, u64), Object>,
}

/// One object's functions.
#[derive(Debug, Default)]
struct Object {
    /// Its functions' (start, end) runtime addresses, sorted by start.
    ranges: Vec<(u64, u64)>,
    /// The `.cold` parts of functions, by the start of the function(s) of the same name
    /// (local functions of two files may share a name: then the part goes with both, which
    /// only makes the analysis more careful).
    cold: HashMap<u64, Vec<(u64, u64)>>,
    /// The start of the function a `.cold` part belongs to, by the part's start.
    parent: HashMap<u64, Vec<u64>>,
    /// It has exception landing pads (names a personality routine: `__gxx_personality_v0`,
    /// `__gcc_personality_v0`, `rust_eh_personality`…): no proofs there.
    landing_pads: bool,
}

/// A whole function: its body first, then its `.cold` parts, as runtime (start, end).
pub type Unit = Vec<(usize, usize)>;

impl Bodies {
    /// True when `site` lies in the body of the function that starts at `func`, as the symbol
    /// tables of `objects` say (false when they do not know it: a stripped binary).
    pub fn own_body(&mut self, objects: &[Obj], func: usize, site: usize) -> bool {
        self.body(objects, func)
            .is_some_and(|(a, b)| a <= site && site < b)
    }

    /// The body (start, end) of the function that starts at `func`, when the symbol tables of
    /// `objects` know it.
    pub fn body(&mut self, objects: &[Obj], func: usize) -> Option<(usize, usize)> {
        let f = func as u64;
        let o = objects.iter().find(|o| o.contains(f) && o.has_file())?;
        let ranges = self
            .objects
            .entry((o.path.clone(), o.bias))
            .or_insert_with(|| load(o));
        let ranges = &ranges.ranges;
        let i = ranges.binary_search_by_key(&f, |r| r.0).ok()?;
        Some((ranges[i].0 as usize, ranges[i].1 as usize))
    }

    /// The whole function whose body or `.cold` part holds `addr`, when the symbol tables of
    /// `objects` know it and its object has no exception landing pads; the body is the first
    /// range. For a `.cold` part of a name two functions share, the first of them.
    pub fn enclosing(&mut self, objects: &[Obj], addr: usize) -> Option<Unit> {
        let a = addr as u64;
        let o = objects.iter().find(|o| o.contains(a) && o.has_file())?;
        let obj = self
            .objects
            .entry((o.path.clone(), o.bias))
            .or_insert_with(|| load(o));
        if obj.landing_pads {
            return None;
        }
        let i = obj.ranges.partition_point(|r| r.0 <= a).checked_sub(1)?;
        let (start, end) = obj.ranges[i];
        if a >= end {
            return None;
        }
        let body = obj
            .parent
            .get(&start)
            .and_then(|p| p.first())
            .map_or(start, |&p| p);
        let j = obj.ranges.binary_search_by_key(&body, |r| r.0).ok()?;
        let mut unit = vec![(obj.ranges[j].0 as usize, obj.ranges[j].1 as usize)];
        for &(s, e) in obj.cold.get(&body).into_iter().flatten() {
            unit.push((s as usize, e as usize));
        }
        Some(unit)
    }
}

/// The symbol tables of the objects loaded now, as the call-site patcher asks for them.
#[derive(Debug)]
pub struct Functions<'a> {
    /// What was read so far.
    pub bodies: &'a mut Bodies,
    /// The link map now.
    pub objects: &'a [Obj],
}

impl crate::sys::patch::Functions for Functions<'_> {
    fn body(&mut self, func: usize) -> Option<(usize, usize)> {
        self.bodies.body(self.objects, func)
    }

    fn enclosing(&mut self, addr: usize) -> Option<Vec<(usize, usize)>> {
        self.bodies.enclosing(self.objects, addr)
    }
}

/// The name a `.cold` part belongs to: `F` for `F.cold` and `F.cold.N`.
fn cold_of(name: &[u8]) -> Option<&[u8]> {
    let at = name.windows(5).position(|w| w == b".cold")?;
    let rest = &name[at + 5..];
    (rest.is_empty() || rest[0] == b'.').then(|| &name[..at])
}

fn load(o: &Obj) -> Object {
    let mut v: Vec<(u64, u64)> = Vec::new();
    let mut by_name: HashMap<Vec<u8>, Vec<u64>> = HashMap::new();
    let mut colds: Vec<(Vec<u8>, (u64, u64))> = Vec::new();
    let mut landing_pads = false;
    let _ = elf::for_each_symbol(o.path.as_ref(), Tables::All, |s| {
        landing_pads |= s.name.windows(11).any(|w| w == b"personality");
        if s.defined && s.is_func && s.value != 0 && s.size > 0 {
            let start = o.bias.wrapping_add(s.value);
            let range = (start, start.wrapping_add(s.size));
            v.push(range);
            match cold_of(s.name) {
                Some(parent) => colds.push((parent.to_vec(), range)),
                None => by_name.entry(s.name.to_vec()).or_default().push(start),
            }
        }
    });
    let mut cold: HashMap<u64, Vec<(u64, u64)>> = HashMap::new();
    let mut parent: HashMap<u64, Vec<u64>> = HashMap::new();
    for (name, range) in colds {
        for &p in by_name.get(&name).into_iter().flatten() {
            cold.entry(p).or_default().push(range);
            parent.entry(range.0).or_default().push(p);
        }
    }
    v.sort_unstable();
    // Aliases share a start: keep the longest body.
    v.dedup_by(|later, kept| {
        if later.0 == kept.0 {
            kept.1 = kept.1.max(later.1);
            true
        } else {
            false
        }
    });
    Object {
        ranges: v,
        cold,
        parent,
        landing_pads,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_s_own_functions() {
        // This test binary's own symbols: `own_body` itself lies within its body, and an
        // address past it does not.
        let objs = crate::objects::scan();
        let f = Bodies::own_body as *const () as usize;
        let mut b = Bodies::default();
        assert!(b.own_body(&objs, f, f + 1), "{objs:#?}");
        assert!(!b.own_body(&objs, f, f + (1 << 20)));
        assert!(!b.own_body(&objs, f + 1, f + 2), "not a function's start");
        // Rust code has landing pads (unwinding): no unit is given for proofs.
        assert_eq!(b.enclosing(&objs, f + 1), None);
    }

    #[test]
    fn cold_part_names() {
        assert_eq!(
            cold_of(b"sqlite3VdbeExec.cold"),
            Some(&b"sqlite3VdbeExec"[..])
        );
        assert_eq!(cold_of(b"f.cold.3"), Some(&b"f"[..]));
        assert_eq!(cold_of(b"f.part.0.cold"), Some(&b"f.part.0"[..]));
        assert_eq!(cold_of(b"coldstart"), None);
        assert_eq!(cold_of(b"f.colder"), None);
    }
}
