//! Kernel symbols: the text symbols of `/proc/kallsyms`, with the module each belongs to.

use std::collections::HashMap;

use crate::addr::Name;

/// Text symbols of `/proc/kallsyms`, sorted by address.
#[derive(Debug)]
pub(crate) struct KernelSymbols {
    addrs: Vec<u64>,
    names: Vec<Name>,
    modules: Vec<Option<Name>>,
}

/// Addresses further than this past the nearest symbol are not attributed to it.
const KERNEL_MAX_SYMBOL_DISTANCE: u64 = 1 << 20;

impl KernelSymbols {
    /// Parses kallsyms text; `None` when it has no usable addresses (all zero: hidden by
    /// `kernel.kptr_restrict`).
    pub(crate) fn parse(text: &str) -> Option<KernelSymbols> {
        let mut rows: Vec<(u64, Name, Option<Name>)> = Vec::new();
        let mut modules: HashMap<&str, Name> = HashMap::new();
        for line in text.lines() {
            let mut f = line.split_ascii_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            if !matches!(kind, "t" | "T" | "w" | "W") {
                continue;
            }
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if addr == 0 {
                continue;
            }
            let module = f
                .next()
                .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'))
                .map(|m| {
                    modules
                        .entry(m)
                        .or_insert_with(|| Name::from(format!("[{m}]").as_str()))
                        .clone()
                });
            rows.push((addr, Name::from(name), module));
        }
        if rows.is_empty() {
            return None;
        }
        rows.sort_by_key(|r| r.0);
        let mut k = KernelSymbols {
            addrs: Vec::with_capacity(rows.len()),
            names: Vec::with_capacity(rows.len()),
            modules: Vec::with_capacity(rows.len()),
        };
        for (a, n, m) in rows {
            k.addrs.push(a);
            k.names.push(n);
            k.modules.push(m);
        }
        Some(k)
    }

    pub(crate) fn lookup(&self, addr: u64) -> Option<(Name, Option<Name>)> {
        let i = self.addrs.partition_point(|&a| a <= addr).checked_sub(1)?;
        if addr - self.addrs[i] > KERNEL_MAX_SYMBOL_DISTANCE {
            return None;
        }
        Some((self.names[i].clone(), self.modules[i].clone()))
    }
}
