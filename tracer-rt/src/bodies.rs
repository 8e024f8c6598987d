//! Where each function's body lies, from the loaded objects' symbol tables: the call-site
//! patcher rewrites only the hook calls inside the body of the function they were made for
//! (`sys::patch`), never one in another function's body, where gcc may share one call between
//! the inlined copies of two functions. Used by the flusher (it reads files and allocates).

use std::collections::HashMap;

use crate::elf::{self, Tables};
use crate::objects::Obj;

/// The function bodies of the objects looked at so far, by object path and load bias.
#[derive(Debug, Default)]
pub struct Bodies {
    /// Per object: its functions' (start, end) runtime addresses, sorted by start.
    objects: HashMap<(String, u64), Vec<(u64, u64)>>,
}

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
        let i = ranges.binary_search_by_key(&f, |r| r.0).ok()?;
        Some((ranges[i].0 as usize, ranges[i].1 as usize))
    }
}

fn load(o: &Obj) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = Vec::new();
    let _ = elf::for_each_symbol(o.path.as_ref(), Tables::All, |s| {
        if s.defined && s.is_func && s.value != 0 && s.size > 0 {
            let start = o.bias.wrapping_add(s.value);
            v.push((start, start.wrapping_add(s.size)));
        }
    });
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
    v
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
    }
}
