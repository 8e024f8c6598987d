//! The sites themselves: reading the code from the loaded objects' executable segments,
//! checking that a site is a call of a hook, proving a rewrite inside a function's body (or an
//! inlined copy's), and the atomic stores that turn a call into a NOP (see the parent module
//! for why that is safe while other threads run the code).

use std::ffi::{c_int, c_void};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};

use super::noted::*;

/// A mapping of `/proc/self/maps`: address range and protection.
#[derive(Clone, Copy, Debug)]
pub(super) struct Mapping {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) prot: c_int,
}

pub(super) fn read_maps() -> Vec<Mapping> {
    let Ok(text) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    text.lines().filter_map(parse_maps_line).collect()
}

pub(super) fn parse_maps_line(l: &str) -> Option<Mapping> {
    let mut f = l.split_ascii_whitespace();
    let (a, b) = f.next()?.split_once('-')?;
    let perms = f.next()?.as_bytes();
    let mut prot = 0;
    for (i, bit) in [libc::PROT_READ, libc::PROT_WRITE, libc::PROT_EXEC]
        .into_iter()
        .enumerate()
    {
        if perms.get(i).is_some_and(|&c| c != b'-') {
            prot |= bit;
        }
    }
    Some(Mapping {
        start: usize::from_str_radix(a, 16).ok()?,
        end: usize::from_str_radix(b, 16).ok()?,
        prot,
    })
}

/// A `PT_LOAD` segment of a loaded object.
#[derive(Clone, Copy, Debug)]
pub(super) struct Segment {
    pub(super) start: usize,
    pub(super) end: usize,
    pub(super) exec: bool,
    pub(super) read: bool,
}

/// A checked call site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Site {
    /// Address of the call instruction.
    pub(super) addr: usize,
    /// Its length (5 or 6).
    pub(super) len: usize,
    /// A tail jump to the exit hook (`jmp`, the function's last instruction): becomes a `ret`
    /// (the hook would have returned to the caller) instead of a NOP.
    pub(super) tail: bool,
}

pub(super) const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
pub(super) const NOP6: [u8; 6] = [0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00];
pub(super) const RET5: [u8; 5] = [0xc3, 0x0f, 0x1f, 0x40, 0x00];
pub(super) const RET6: [u8; 6] = [0xc3, 0x0f, 0x1f, 0x44, 0x00, 0x00];

/// Functions whose bodies were scanned for tail jumps to the exit hook.
pub(super) static SCANNED: [AtomicUsize; 1024] = [const { AtomicUsize::new(0) }; 1024];
/// Sites rewritten to a short form that leaves dead bytes after it (a `jmp` over the rest of a
/// call, a 1-byte `ret`): the analysis of a function holding one steps over them. Only the
/// flusher thread touches it.
pub(super) static SHORT: std::sync::Mutex<Vec<crate::callsite::Rewritten>> =
    std::sync::Mutex::new(Vec::new());

/// The memory the checks may read: executable and readable segments of the loaded objects.
pub(super) struct Memory<'a> {
    pub(super) segments: &'a [Segment],
}

impl Memory<'_> {
    fn within(&self, addr: usize, len: usize, exec: bool) -> bool {
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        self.segments
            .iter()
            .any(|s| s.start <= addr && end <= s.end && s.read && (!exec || s.exec))
    }

    /// `len` bytes at `addr`, when they lie in a readable (`exec`: and executable) segment.
    fn bytes(&self, addr: usize, len: usize, exec: bool) -> Option<Vec<u8>> {
        if !self.within(addr, len, exec) {
            return None;
        }
        let mut out = vec![0u8; len];
        // SAFETY: the range lies in a readable PT_LOAD segment of an object that stays loaded
        // while the loader lock is held (we run inside dl_iterate_phdr).
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), len) };
        Some(out)
    }

    /// `len` bytes of code at `addr`, when they lie in an executable segment.
    fn code<const N: usize>(&self, addr: usize) -> Option<[u8; N]> {
        self.bytes(addr, N, true)?.try_into().ok()
    }

    /// The pointer in the GOT slot at `addr`, when it lies in a readable segment.
    fn word(&self, addr: usize) -> Option<usize> {
        if !addr.is_multiple_of(8) || !self.within(addr, 8, false) {
            return None;
        }
        // SAFETY: an aligned word of a readable PT_LOAD segment of a loaded object (loader
        // lock held); the loader may write it concurrently (lazy binding), with aligned 8-byte
        // stores, so an atomic load reads a whole pointer.
        Some(unsafe { &*(addr as *const AtomicUsize) }.load(Acquire))
    }
}

/// The GOT slot a PLT stub at `at` jumps through: `jmp *disp32(%rip)`, after an optional
/// `endbr64` and an optional `bnd` prefix.
pub(super) fn plt_slot(mem: &Memory<'_>, at: usize) -> Option<usize> {
    let b: [u8; 11] = mem.code(at)?;
    let mut i = 0;
    if b[..4] == [0xf3, 0x0f, 0x1e, 0xfa] {
        i = 4;
    }
    if b[i] == 0xf2 {
        i += 1;
    }
    if b[i] != 0xff || b[i + 1] != 0x25 {
        return None;
    }
    let disp = i32::from_le_bytes(b[i + 2..i + 6].try_into().ok()?) as isize;
    Some((at + i + 6).wrapping_add_signed(disp))
}

/// The hook call site that returns to `ret`, if the bytes prove it is one.
pub(super) fn check_site(mem: &Memory<'_>, ret: usize, hooks: &[usize]) -> Option<Site> {
    call_returning_to(mem, ret, |a| hooks.contains(&a))
}

/// True when `ret` is the return address of a call *of* `func` (direct, through its PLT stub or
/// through the GOT): a hook noted there for `func` was reached by the tail jump to the exit hook
/// that ends `func`'s body (the hook then returns to `func`'s caller). That jump is what is
/// rewritten, with the body ([`tail_jumps`]); the noted address is no hook call site.
pub(super) fn returns_from(mem: &Memory<'_>, ret: usize, func: usize) -> bool {
    call_returning_to(mem, ret, |a| a == func).is_some()
}

/// The call that returns to `ret`, when the bytes prove it calls a function `is_target`
/// accepts: `call rel32` to it or to its PLT stub, or `call *disp32(%rip)` through a GOT slot
/// holding it.
fn call_returning_to(
    mem: &Memory<'_>,
    ret: usize,
    is_target: impl Fn(usize) -> bool,
) -> Option<Site> {
    let site = ret.checked_sub(5)?;
    if let Some(b) = mem.code::<5>(site) {
        if b[0] == 0xe8 {
            let rel = i32::from_le_bytes(b[1..5].try_into().ok()?) as isize;
            let target = ret.wrapping_add_signed(rel);
            let ok = is_target(target)
                || plt_slot(mem, target)
                    .and_then(|g| mem.word(g))
                    .is_some_and(is_target);
            return ok.then_some(Site {
                addr: site,
                len: 5,
                tail: false,
            });
        }
    }
    let site = ret.checked_sub(6)?;
    let b: [u8; 6] = mem.code(site)?;
    if b[0] == 0xff && b[1] == 0x15 {
        let disp = i32::from_le_bytes(b[2..6].try_into().ok()?) as isize;
        let slot = ret.wrapping_add_signed(disp);
        if mem.word(slot).is_some_and(is_target) {
            return Some(Site {
                addr: site,
                len: 6,
                tail: false,
            });
        }
    }
    None
}

/// True when the bytes at `at` are alignment padding gcc puts after a function's last
/// instruction: `nop` forms (`90`, `0f 1f`, `2e 0f 1f`, after `66` prefixes) or `int3`.
pub(super) fn padding(mem: &Memory<'_>, at: usize) -> bool {
    let Some(b) = mem.code::<8>(at) else {
        return false;
    };
    let i = b.iter().take_while(|&&x| x == 0x66).count().min(6);
    matches!(
        b[i..],
        [0x90, ..] | [0xcc, ..] | [0x0f, 0x1f, ..] | [0x2e, 0x0f, 0x1f, ..]
    )
}

/// The tail jumps to an exit hook that end the body `start..end` of a function: `jmp rel32`
/// to a hook or its PLT stub, or `jmp *GOT(%rip)` through a slot holding a hook, as its last
/// instruction (the body's end, or padding, follows). gcc ends a function that has nothing to
/// do after its exit hook that way (the hook returns to the caller).
pub(super) fn tail_jumps(
    mem: &Memory<'_>,
    (start, end): (usize, usize),
    hooks: &[usize],
) -> Vec<Site> {
    let mut out = Vec::new();
    let is_hook = |a: usize| hooks.contains(&a);
    let mut at = start;
    while at + 5 <= end {
        let Some(b) = mem.code::<6>(at) else { break };
        let (len, target_ok) = match b {
            [0xe9, ..] => {
                let rel = i32::from_le_bytes([b[1], b[2], b[3], b[4]]) as isize;
                let target = (at + 5).wrapping_add_signed(rel);
                let ok = is_hook(target)
                    || plt_slot(mem, target)
                        .and_then(|g| mem.word(g))
                        .is_some_and(is_hook);
                (5, ok)
            }
            [0xff, 0x25, ..] => {
                let disp = i32::from_le_bytes([b[2], b[3], b[4], b[5]]) as isize;
                let slot = (at + 6).wrapping_add_signed(disp);
                (6, mem.word(slot).is_some_and(is_hook))
            }
            _ => (0, false),
        };
        if target_ok && (at + len == end || padding(mem, at + len)) {
            out.push(Site {
                addr: at,
                len,
                tail: true,
            });
        }
        at += 1;
    }
    out
}

/// The aligned block (8 or 16 bytes) stored atomically to patch an instruction: one that holds
/// it whole (it becomes a NOP, or `ret` and padding), or else the 8-byte word holding its first
/// bytes, which become a short form ([`short_form`]); the bytes after it are left as they
/// were. Another thread runs the old instruction or the new one, never a mix.
pub(super) fn block_of(site: Site) -> (usize, usize) {
    if site.addr % 16 + site.len <= 16 && site.addr % 8 + site.len > 8 && has_cx16() {
        (site.addr & !15, 16)
    } else {
        (site.addr & !7, 8)
    }
}

/// What replaces the first bytes of `site` when its block holds only `room` of them:
///
/// * a tail jump to the exit hook: a 1-byte `ret` (the bytes after it never run);
/// * a call, 2 bytes or more of room: a 2-byte `jmp` over the rest (`eb 03` / `eb 04`);
/// * a call whose first byte is the last of its word: its opcode alone, so that the same bytes
///   read as an instruction of the same length that does nothing a call does not already do —
///   `call rel32` (`e8`) becomes `cmp $imm32, %eax` (`3d`: only the flags change, which no
///   call preserves), `call *disp32(%rip)` (`ff 15`) becomes `lea disp32(%rip), %edx` (`8d
///   15`: only `%rdx` changes, which no call preserves either). One byte is always stored
///   whole, so these sites need no wider atomic store (before, they stayed as they were; on
///   SQLite they were 26–29 sites, among the hottest of the untraced calls left).
pub(super) fn short_form(site: Site, room: usize) -> &'static [u8] {
    match (site.tail, site.len) {
        (true, _) => &RET5[..1],
        (false, 5) if room >= 2 => &[0xeb, 3],
        (false, _) if room >= 2 => &[0xeb, 4],
        (false, 5) => &[0x3d],
        (false, _) => &[0x8d],
    }
}

pub(super) fn has_cx16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("cmpxchg16b")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Replaces the instruction `site` in its aligned block `(at, width)` with a NOP (or its short
/// form, when the block holds only its first bytes: see [`block_of`]), in one atomic
/// compare-and-swap against the bytes read just before. False when the bytes changed.
pub(super) fn swap_in_nop(site: Site, at: usize, width: usize) -> bool {
    let off = site.addr - at;
    let nop: &[u8] = match (site.len, site.tail) {
        _ if off + site.len > width => short_form(site, width - off),
        (5, false) => &NOP5,
        (_, false) => &NOP6,
        (5, true) => &RET5,
        (_, true) => &RET6,
    };
    if width == 8 {
        // SAFETY: `at` is 8-aligned, inside a code page made writable by the caller, in an
        // object kept loaded by the loader lock; an AtomicU64 may alias it (plain memory).
        let word = unsafe { &*(at as *const std::sync::atomic::AtomicU64) };
        let old = word.load(Acquire);
        let mut b = old.to_le_bytes();
        b[off..off + nop.len()].copy_from_slice(nop);
        return word
            .compare_exchange(old, u64::from_le_bytes(b), AcqRel, Acquire)
            .is_ok();
    }
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `at` is 16-aligned, inside a code page made writable by the caller; the two
        // halves are read separately, and the CAS only succeeds if both are as read.
        let old = unsafe { (at as *const u128).read_volatile() };
        let mut b = old.to_le_bytes();
        b[off..off + nop.len()].copy_from_slice(nop);
        // SAFETY: the CPU has cmpxchg16b (block_of checked); the address is 16-aligned and
        // writable (see above).
        unsafe { cas16(at as *mut u128, old, u128::from_le_bytes(b)) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `lock cmpxchg16b`: stores `new` at `p` if it holds `old`.
///
/// # Safety
///
/// The CPU has `cmpxchg16b`; `p` is 16-aligned, readable and writable.
#[cfg(target_arch = "x86_64")]
pub(super) unsafe fn cas16(p: *mut u128, old: u128, new: u128) -> bool {
    let ok: u64;
    // SAFETY: guaranteed by the caller. `rbx` may not be named as an operand (LLVM uses it),
    // so the new low half goes in through r8 and `rbx` is restored after. Every operand has
    // an explicit register: a `reg` operand may be given `rbx` itself (it was, in a release
    // build: the address then became the new low half).
    unsafe {
        std::arch::asm!(
            "xchg r8, rbx",
            "xor r9d, r9d",
            "lock cmpxchg16b xmmword ptr [rsi]",
            "sete r9b",
            "mov rbx, r8",
            in("rsi") p,
            inout("r8") new as u64 => _,
            out("r9") ok,
            in("rcx") (new >> 64) as u64,
            inout("rax") old as u64 => _,
            inout("rdx") (old >> 64) as u64 => _,
            options(nostack),
        );
    }
    ok != 0
}

/// What [`apply`] does under the loader lock.
pub(super) struct Job<'a> {
    pub(super) hooks: &'a [usize],
    pub(super) maps: Vec<Mapping>,
    /// (set index, return address) of the sites to look at.
    pub(super) todo: Vec<(usize, usize)>,
    /// Bodies of untraced functions to look for tail jumps to the exit hook in.
    pub(super) bodies: Vec<(usize, usize)>,
    /// Sites in another function's body, patched when proven.
    pub(super) inlined: Vec<Inlined>,
}

/// A site noted in another function's body than its own.
pub(super) struct Inlined {
    /// Index in the site set.
    pub(super) set: usize,
    /// The call's return address.
    pub(super) ret: usize,
    /// The untraced function it was noted for.
    pub(super) func: usize,
    /// The whole function holding it (body, then `.cold` parts).
    pub(super) unit: Vec<(usize, usize)>,
}

/// A site to rewrite: its page, its index in the site set (`usize::MAX` for a tail jump), the
/// instruction, its aligned block (address, width), and whether it lies in an inlined copy.
pub(super) struct Planned {
    pub(super) page: usize,
    pub(super) set: usize,
    pub(super) site: Site,
    pub(super) at: usize,
    pub(super) width: usize,
    pub(super) inlined: bool,
}

/// The state of a noted site that is not patched: a return from `func` itself
/// ([`returns_from`]), or kept.
fn not_patched(mem: &Memory<'_>, ret: usize, func: usize) -> u8 {
    if returns_from(mem, ret, func) {
        st::RETURN
    } else {
        st::KEPT
    }
}

impl Planned {
    /// `site`, with the block it is patched in ([`block_of`]); `set` is its index in the set of
    /// noted sites (`usize::MAX`: a tail jump found in a body), `inlined` whether it lies in
    /// another function's body.
    pub(super) fn new(site: Site, set: usize, inlined: bool) -> Self {
        let (at, width) = block_of(site);
        Planned {
            page: at & !4095,
            set,
            site,
            at,
            width,
            inlined,
        }
    }
}

/// Largest function analysed for inlined copies' sites (bytes of code).
pub(super) const MAX_UNIT: usize = 1 << 20;

/// Analyses the whole function `unit` ([`crate::callsite`]), reading its code and jump tables
/// from `mem`.
pub(super) fn prove(mem: &Memory<'_>, unit: &[(usize, usize)]) -> Option<crate::callsite::Proven> {
    let mut code = Vec::new();
    let mut total = 0;
    for &(start, end) in unit {
        let len = end.checked_sub(start)?;
        total += len;
        if total > MAX_UNIT {
            return None;
        }
        code.push((start as u64, mem.bytes(start, len, true)?));
    }
    let pieces: Vec<(u64, &[u8])> = code.iter().map(|(a, b)| (*a, b.as_slice())).collect();
    let read = |at: u64, len: usize| mem.bytes(at as usize, len, false);
    let short = SHORT.lock().unwrap_or_else(|e| e.into_inner());
    crate::callsite::analyse(&pieces, &short, &read)
}

/// The `PT_LOAD` segments of the object `info` describes (inside `for_each_object`).
fn segments_of(info: &libc::dl_phdr_info, out: &mut Vec<Segment>) {
    if info.dlpi_phdr.is_null() {
        return;
    }
    // SAFETY: dlpi_phdr points to dlpi_phnum program headers, valid while the loader lock is
    // held (inside for_each_object).
    let phdrs = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    for ph in phdrs.iter().filter(|p| p.p_type == libc::PT_LOAD) {
        let start = info.dlpi_addr.wrapping_add(ph.p_vaddr) as usize;
        out.push(Segment {
            start,
            end: start.wrapping_add(ph.p_memsz as usize),
            exec: ph.p_flags & libc::PF_X != 0,
            read: ph.p_flags & libc::PF_R != 0,
        });
    }
}

/// Runs once, inside the outer iteration over the loaded objects (`for_each_object`: the
/// loader lock held throughout, so no object is unloaded meanwhile; the lock is recursive,
/// the inner iteration takes it again).
pub(super) fn locked(job: &mut Job<'_>) {
    let mut segments: Vec<Segment> = Vec::new();
    crate::sys::for_each_object(|info, _| {
        segments_of(info, &mut segments);
        true
    });
    let mem = Memory {
        segments: &segments,
    };
    // Sites by page, each with its block.
    let mut plan: Vec<Planned> = Vec::new();
    for &(i, ret) in &job.todo {
        let planned = check_site(&mem, ret, job.hooks).map(|site| Planned::new(site, i, false));
        match planned {
            Some(p) => plan.push(p),
            None => STATE[i].store(not_patched(&mem, ret, FUNC[i].load(Relaxed)), Release),
        }
    }
    let mut proofs: std::collections::HashMap<usize, Option<crate::callsite::Proven>> =
        Default::default();
    for n in &job.inlined {
        let proof = proofs
            .entry(n.unit[0].0)
            .or_insert_with(|| prove(&mem, &n.unit));
        let planned = check_site(&mem, n.ret, job.hooks)
            .filter(|site| {
                proof
                    .as_ref()
                    .and_then(|p| p.rdi_at(site.addr as u64))
                    .is_some_and(|f| f == n.func as u64)
            })
            .map(|site| Planned::new(site, n.set, true));
        match planned {
            Some(p) => plan.push(p),
            None => STATE[n.set].store(not_patched(&mem, n.ret, n.func), Release),
        }
    }
    for &body in &job.bodies {
        for site in tail_jumps(&mem, body, job.hooks) {
            plan.push(Planned::new(site, usize::MAX, false));
        }
    }
    plan.sort_unstable_by_key(|p| p.page);
    let mut k = 0;
    while k < plan.len() {
        let page = plan[k].page;
        let n = plan[k..].iter().take_while(|p| p.page == page).count();
        let group = &plan[k..k + n];
        k += n;
        let prot = job
            .maps
            .iter()
            .find(|m| m.start <= page && page < m.end)
            .map(|m| m.prot);
        let done = match prot {
            Some(p) if p & libc::PROT_EXEC != 0 && !REFUSED.load(Relaxed) => {
                patch_page(page, p, group)
            }
            _ => false,
        };
        if !done {
            for p in group.iter().filter(|p| p.set != usize::MAX) {
                STATE[p.set].store(st::KEPT, Release);
            }
        }
    }
}

/// Makes `page` writable (keeping `prot`), swaps the NOPs in, gives the page `prot` back.
pub(super) fn patch_page(page: usize, prot: c_int, group: &[Planned]) -> bool {
    let writable = prot & libc::PROT_WRITE != 0;
    if !writable {
        // SAFETY: `page` is a page of a loaded object's executable segment (loader lock held);
        // adding write access changes no byte and keeps read and execute.
        let rc = unsafe { libc::mprotect(page as *mut c_void, 4096, prot | libc::PROT_WRITE) };
        if rc != 0 {
            REFUSED.store(true, Relaxed);
            return false;
        }
    }
    for p in group {
        let ok = swap_in_nop(p.site, p.at, p.width);
        if ok && p.site.addr + p.site.len > p.at + p.width {
            SHORT
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(crate::callsite::Rewritten {
                    addr: p.site.addr as u64,
                    len: p.site.len,
                    tail: p.site.tail,
                });
        }
        if p.set == usize::MAX {
            if ok {
                TAILS.fetch_add(1, Relaxed);
            }
        } else {
            STATE[p.set].store(if ok { st::PATCHED } else { st::KEPT }, Release);
            if ok && p.inlined {
                INLINED.fetch_add(1, Relaxed);
            }
        }
    }
    if !writable {
        // SAFETY: as above: the page gets back exactly the rights it had.
        unsafe { libc::mprotect(page as *mut c_void, 4096, prot) };
    }
    true
}

/// True the first time `func` is asked about (its body is then scanned for tail jumps).
pub(super) fn first_scan(func: usize) -> bool {
    let mut i = slot_of(func) & (SCANNED.len() - 1);
    for _ in 0..SCANNED.len() {
        match SCANNED[i].load(Relaxed) {
            f if f == func => return false,
            0 => {
                SCANNED[i].store(func, Relaxed);
                return true;
            }
            _ => i = (i + 1) & (SCANNED.len() - 1),
        }
    }
    false
}
