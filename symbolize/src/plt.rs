//! PLT stubs named `symbol@plt`, as perf names them: symbol tables do not cover the PLT, and the
//! nearest symbol before it is `_init`.

use std::collections::HashMap;

use crate::addr::{ImageAddr, Name};

/// The PLT stubs of an ELF file that jump through a GOT slot with a dynamic relocation naming
/// a symbol (`jmp *slot(%rip)`, after an optional `endbr64` and `bnd` prefix: the entries of
/// `.plt` without IBT, of `.plt.sec` with it, and of `.plt.got`).
#[derive(Debug, Default)]
pub(crate) struct PltStubs {
    /// (virtual address, file offset, length, `symbol@plt`), by address.
    stubs: Vec<(u64, u64, u64, Name)>,
}

impl PltStubs {
    /// The stubs of an open x86-64 ELF file; `None` when it cannot be read or has none.
    pub(crate) fn read(file: &std::fs::File) -> Option<PltStubs> {
        use object::{
            Architecture, Object as _, ObjectSection as _, ObjectSymbol as _,
            ObjectSymbolTable as _, ReadCache, RelocationTarget,
        };
        let data = ReadCache::new(file.try_clone().ok()?);
        let file = object::File::parse(&data).ok()?;
        if file.architecture() != Architecture::X86_64 {
            return None;
        }
        let dynsym = file.dynamic_symbol_table()?;
        let mut slots: HashMap<u64, Name> = HashMap::new();
        for (slot, rel) in file.dynamic_relocations()? {
            if let RelocationTarget::Symbol(i) = rel.target() {
                if let Some(n) = dynsym.symbol_by_index(i).ok().and_then(|s| s.name().ok()) {
                    if !n.is_empty() {
                        slots.insert(slot, Name::from(format!("{n}@plt").as_str()));
                    }
                }
            }
        }
        let mut stubs = Vec::new();
        for sec in file.sections() {
            if !matches!(sec.name(), Ok(".plt" | ".plt.sec" | ".plt.got")) {
                continue;
            }
            let (Ok(bytes), Some((off, _))) = (sec.data(), sec.file_range()) else {
                continue;
            };
            let addr = sec.address();
            // Entries are 8 or 16 bytes (by section and linker options): each 8-byte boundary
            // is tried, and a stub runs to the next one found, at most 16 bytes.
            let found: Vec<(usize, &Name)> = (0..bytes.len())
                .step_by(8)
                .filter_map(|k| {
                    let slot = plt_jump_slot(&bytes[k..], addr + k as u64)?;
                    Some((k, slots.get(&slot)?))
                })
                .collect();
            for (j, &(k, name)) in found.iter().enumerate() {
                let next = found.get(j + 1).map_or(bytes.len(), |n| n.0);
                let len = (next - k).min(16) as u64;
                stubs.push((addr + k as u64, off + k as u64, len, name.clone()));
            }
        }
        stubs.sort_unstable_by_key(|s| s.0);
        (!stubs.is_empty()).then_some(PltStubs { stubs })
    }

    pub(crate) fn name_of(&self, a: ImageAddr) -> Option<Name> {
        let hit = |(start, len): (u64, u64), x: u64| x >= start && x < start + len;
        self.stubs
            .iter()
            .find(|s| match a {
                ImageAddr::Virt(v) => hit((s.0, s.2), v),
                ImageAddr::FileOffset(o) => hit((s.1, s.2), o),
            })
            .map(|s| s.3.clone())
    }
}

/// The GOT slot a PLT entry at virtual address `at` (bytes `b`) jumps through: `jmp
/// *disp32(%rip)`, after an optional `endbr64` and an optional `bnd` prefix.
fn plt_jump_slot(b: &[u8], at: u64) -> Option<u64> {
    let mut i = 0;
    if b.starts_with(&[0xf3, 0x0f, 0x1e, 0xfa]) {
        i = 4;
    }
    if b.get(i) == Some(&0xf2) {
        i += 1;
    }
    if b.get(i..i + 2)? != [0xff, 0x25] {
        return None;
    }
    let disp = i32::from_le_bytes(b.get(i + 2..i + 6)?.try_into().ok()?);
    Some((at + i as u64 + 6).wrapping_add_signed(disp.into()))
}
