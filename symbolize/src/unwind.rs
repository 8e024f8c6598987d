//! Function starts of stripped binaries, from the unwind table every x86-64 binary keeps
//! (`.eh_frame_hdr`, found through the `PT_GNU_EH_FRAME` program header) even when stripped
//! ([`crate::Symbolizer::function_start`]).

/// Function start addresses of an ELF file, from its `.eh_frame_hdr` search table, and the
/// file-offset ↔ virtual-address map of its loadable segments.
#[derive(Debug)]
pub(crate) struct FunctionStarts {
    /// Sorted virtual addresses of function starts.
    starts: Vec<u64>,
    /// (file offset, virtual address, file size) of each PT_LOAD segment.
    loads: Vec<(u64, u64, u64)>,
}

/// Beyond this distance from the nearest function start an address is not attributed to it.
const MAX_FUNCTION_SIZE: u64 = 1 << 20;

impl FunctionStarts {
    /// Reads the table of an ELF64 file (`object` for the program headers, `gimli` for the
    /// search table, whatever its pointer encoding); `None` when the file has none. Only the
    /// headers and the table are read, not the whole file.
    pub(crate) fn read(file: &std::fs::File) -> Option<FunctionStarts> {
        use object::read::elf::{ElfFile64, ProgramHeader as _};
        use object::{elf, Endian as _, Endianness, ReadCache};
        let data = ReadCache::new(file.try_clone().ok()?);
        let file = ElfFile64::<Endianness, _>::parse(&data).ok()?;
        let e = file.endian();
        let mut loads = Vec::new();
        let mut hdr = None;
        for ph in file.elf_program_headers() {
            match ph.p_type(e) {
                elf::PT_LOAD => loads.push((ph.p_offset(e), ph.p_vaddr(e), ph.p_filesz(e))),
                elf::PT_GNU_EH_FRAME => hdr = Some(ph),
                _ => {}
            }
        }
        let ph = hdr?;
        if ph.p_filesz(e) > 64 << 20 {
            return None;
        }
        let bytes = ph.data(e, &data).ok()?;
        let endian = if e.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let bases = gimli::BaseAddresses::default().set_eh_frame_hdr(ph.p_vaddr(e));
        let parsed = gimli::EhFrameHdr::new(bytes, endian)
            .parse(&bases, 8)
            .ok()?;
        let table = parsed.table()?;
        let mut starts = Vec::new();
        let mut rows = table.iter(&bases);
        while let Ok(Some((start, _fde))) = rows.next() {
            if let gimli::Pointer::Direct(a) = start {
                starts.push(a);
            }
        }
        starts.sort_unstable();
        Some(FunctionStarts { starts, loads })
    }

    pub(crate) fn start_of(&self, file_offset: u64) -> Option<u64> {
        let &(off, vaddr, _) = self
            .loads
            .iter()
            .find(|&&(o, _, n)| file_offset >= o && file_offset < o + n)?;
        let addr = file_offset - off + vaddr;
        let i = self.starts.partition_point(|&s| s <= addr).checked_sub(1)?;
        let start = self.starts[i];
        if addr - start > MAX_FUNCTION_SIZE {
            return None;
        }
        // Back to a file offset (the start lies in the same segment in practice).
        let &(o, v, _) = self
            .loads
            .iter()
            .find(|&&(_, v, n)| start >= v && start < v + n)?;
        Some(start - v + o)
    }
}
