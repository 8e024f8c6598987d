//! Rewriting the hook call sites of untraced functions to NOPs, as ftrace and uftrace's dynamic
//! tracing do with their `mcount` / `__fentry__` sites: a call that is gone costs nothing.
//!
//! Two halves:
//!
//! * **Noting** ([`note_site`], from a hook's general path): a hook call whose function is not
//!   traced (excluded, or demoted by the cost budget) hands its return address over. It goes
//!   into a process-wide set (lock-free, fixed size, no allocation, no system call); a site
//!   already there costs one hash probe.
//! * **Patching** ([`apply`], from the flusher thread, where system calls and allocation are
//!   fine): every site noted since is checked again and rewritten, while the loader lock is
//!   held (inside `dl_iterate_phdr`), so no `dlclose` can unmap the code meanwhile.
//!
//! # What is patched, and why it is safe while other threads run the code
//!
//! The call site is the instruction that ends at the return address: `e8 rel32` (5 bytes, a
//! call of the hook or of its PLT stub, which is what `gcc -finstrument-functions` emits) or
//! `ff 15 disp32` (6 bytes, a call through the GOT, `-fno-plt`). It is patched only when the
//! bytes say exactly that: the call's target is one of the hooks, or a PLT stub (`jmp
//! *GOT(%rip)`, after an optional `endbr64` and `bnd` prefix) whose GOT slot holds a hook, or
//! (for `ff 15`) the GOT slot itself holds a hook; every byte read lies in an executable
//! segment of a loaded object, every GOT slot in a readable one.
//!
//! The instruction becomes a NOP of the same length (`0f 1f 44 00 00`, `66 0f 1f 44 00 00`) in
//! **one atomic store**: only when it lies within one aligned 8-byte word (`lock cmpxchg`), or
//! within one aligned 16-byte block (`lock cmpxchg16b`, where the CPU has it). Another thread
//! then executes either the whole old call or the whole NOP, never a mix — the rule HotSpot's
//! JIT follows for the call sites it patches while threads run (`NativeCall::
//! set_destination_mt_safe`). The store is a compare-and-swap against the bytes just checked, so
//! code changed meanwhile (by anyone) is left alone. A site that fits neither is left as it is
//! (its calls keep reaching the hooks, which return at once).
//!
//! The page is made writable with `mprotect`, **keeping** its read and execute rights (never
//! removing execute from a page other threads may run), and given back exactly the rights
//! `/proc/self/maps` said it had. When `mprotect` is refused (SELinux `execmod`, PaX), nothing
//! is patched, now or later: the runtime fails open. No signal is used.
//!
//! # Inlined copies
//!
//! A site in another function's body (gcc keeps an inlined copy's hook calls, in its caller) is
//! patched only when [`crate::callsite`] proves, from the caller's whole code decoded under the
//! loader lock, that `%rdi` holds the untraced function whenever that call runs: gcc may share
//! one call instruction between the inlined copies of two functions, and the other may be
//! traced. Sites it cannot prove stay as they are (their calls return at the hook's first
//! check).
//!
//! A thread that already made the call runs the hook as before and returns after the site: the
//! hooks must then accept an entry whose exit is gone, and an exit whose entry is gone (the
//! runtime's general path does: see `block`).

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, AtomicUsize};

/// What the patcher needs of the symbol tables (the flusher gives it).
pub trait Functions {
    /// The body (start, end) of the function that starts at `func`.
    fn body(&mut self, func: usize) -> Option<(usize, usize)>;
    /// The whole function whose code holds `addr` (its body first, then its `.cold` parts),
    /// when its code may be analysed.
    fn enclosing(&mut self, addr: usize) -> Option<Vec<(usize, usize)>>;
}

/// Room for noted sites (return addresses). A program has two or three per instrumented
/// function and inlined copy; only those of untraced functions come here.
const SITES: usize = 1 << 14;
/// Slots probed before a site is given up (counted in [`Stats::full`]).
const PROBES: usize = 16;

/// A noted site's state.
mod st {
    /// Noted, not looked at yet.
    pub const QUEUED: u8 = 0;
    /// Rewritten to a NOP.
    pub const PATCHED: u8 = 1;
    /// Looked at and left as it is (not a hook call site, not patchable atomically, refused).
    pub const KEPT: u8 = 2;
}

static SITE: [AtomicUsize; SITES] = [const { AtomicUsize::new(0) }; SITES];
/// The function each site was noted for.
static FUNC: [AtomicUsize; SITES] = [const { AtomicUsize::new(0) }; SITES];
static STATE: [AtomicU8; SITES] = [const { AtomicU8::new(st::QUEUED) }; SITES];
/// A site was noted since the flusher last looked.
static DIRTY: AtomicBool = AtomicBool::new(false);
/// Sites that found no room.
static FULL: AtomicU32 = AtomicU32::new(0);
/// `mprotect` was refused once: never try again.
static REFUSED: AtomicBool = AtomicBool::new(false);
/// Patching is off (`CULPRIT_PATCH=0`, or not x86-64).
static OFF: AtomicBool = AtomicBool::new(!cfg!(target_arch = "x86_64"));

/// Turns patching off for good (the runtime still filters untraced calls in the hooks).
pub fn disable() {
    OFF.store(true, Relaxed);
}

/// True when sites were noted since the flusher last looked.
pub fn pending() -> bool {
    DIRTY.load(Acquire)
}

/// True while call sites may be patched.
pub fn enabled() -> bool {
    !OFF.load(Relaxed) && !REFUSED.load(Relaxed)
}

#[inline(always)]
fn slot_of(ret: usize) -> usize {
    ((ret as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - SITES.trailing_zeros())) as usize
}

/// A hook's general path: the call that returns to `ret` was made for `func`, which is not
/// traced; remember the site so that the flusher rewrites it. Lock-free, allocation-free,
/// async-signal-safe: one hash probe when the site is known. A site seen for two functions
/// (code the compiler shared between inlined copies) is never patched.
#[inline]
pub fn note_site(ret: usize, func: usize) {
    if ret == 0 || !enabled() {
        return;
    }
    let mut i = slot_of(ret);
    for _ in 0..PROBES {
        let s = &SITE[i];
        let k = s.load(Acquire);
        if k == ret {
            if FUNC[i].load(Acquire) != func && FUNC[i].load(Acquire) != 0 {
                STATE[i].store(st::KEPT, Release);
            }
            return;
        }
        if k == 0 {
            match s.compare_exchange(0, ret, AcqRel, Acquire) {
                Ok(_) => {
                    FUNC[i].store(func, Release);
                    DIRTY.store(true, Release);
                    return;
                }
                Err(other) if other == ret => return,
                Err(_) => {}
            }
        }
        i = (i + 1) & (SITES - 1);
    }
    FULL.fetch_add(1, Relaxed);
}

/// The return address of a hook, from the stack pointer at its entry (the fast path passes it
/// to the general path).
///
/// `sp` must be the hook's stack pointer at its first instruction (as `sys::hooks` passes it):
/// the word there is the hook's return address.
#[inline(always)]
pub fn return_address(sp: usize) -> usize {
    if cfg!(target_arch = "x86_64") && sp != 0 && sp.is_multiple_of(8) {
        // SAFETY: on x86-64 the hooks pass their stack pointer at entry, where the `call` that
        // reached them pushed the return address: the word is on this thread's live stack.
        unsafe { (sp as *const usize).read() }
    } else {
        0
    }
}

/// What patching did so far (cumulative).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Call sites rewritten to NOPs (and tail jumps to the exit hook to `ret`).
    pub patched: u32,
    /// Sites left as they were (not provably a hook call, not within one aligned word, or
    /// `mprotect` refused).
    pub kept: u32,
    /// Sites that found no room in the set (their calls keep reaching the hooks).
    pub full: u32,
    /// Of `patched`, those in another function's body (inlined copies), proven.
    pub inlined: u32,
    /// `mprotect` was refused: patching is off.
    pub refused: bool,
}

/// What patching did so far.
pub fn stats() -> Stats {
    let mut s = Stats {
        patched: TAILS.load(Relaxed),
        full: FULL.load(Relaxed),
        inlined: INLINED.load(Relaxed),
        refused: REFUSED.load(Relaxed),
        ..Stats::default()
    };
    for (k, st) in SITE.iter().zip(&STATE) {
        if k.load(Relaxed) == 0 {
            continue;
        }
        match st.load(Relaxed) {
            st::PATCHED => s.patched += 1,
            st::KEPT => s.kept += 1,
            _ => {}
        }
    }
    s
}

/// A mapping of `/proc/self/maps`: address range and protection.
#[derive(Clone, Copy, Debug)]
struct Mapping {
    start: usize,
    end: usize,
    prot: c_int,
}

fn read_maps() -> Vec<Mapping> {
    let Ok(text) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    text.lines().filter_map(parse_maps_line).collect()
}

fn parse_maps_line(l: &str) -> Option<Mapping> {
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
struct Segment {
    start: usize,
    end: usize,
    exec: bool,
    read: bool,
}

/// A checked call site.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Site {
    /// Address of the call instruction.
    addr: usize,
    /// Its length (5 or 6).
    len: usize,
    /// A tail jump to the exit hook (`jmp`, the function's last instruction): becomes a `ret`
    /// (the hook would have returned to the caller) instead of a NOP.
    tail: bool,
}

const NOP5: [u8; 5] = [0x0f, 0x1f, 0x44, 0x00, 0x00];
const NOP6: [u8; 6] = [0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00];
const RET5: [u8; 5] = [0xc3, 0x0f, 0x1f, 0x40, 0x00];
const RET6: [u8; 6] = [0xc3, 0x0f, 0x1f, 0x44, 0x00, 0x00];

/// Functions whose bodies were scanned for tail jumps to the exit hook.
static SCANNED: [AtomicUsize; 1024] = [const { AtomicUsize::new(0) }; 1024];
/// Tail jumps rewritten to `ret`.
static TAILS: AtomicU32 = AtomicU32::new(0);
/// Sites in inlined copies rewritten (proven).
static INLINED: AtomicU32 = AtomicU32::new(0);
/// Sites rewritten to a short form that leaves dead bytes after it (a `jmp` over the rest of a
/// call, a 1-byte `ret`): the analysis of a function holding one steps over them. Only the
/// flusher thread touches it.
static SHORT: std::sync::Mutex<Vec<crate::callsite::Rewritten>> = std::sync::Mutex::new(Vec::new());

/// The memory the checks may read: executable and readable segments of the loaded objects.
struct Memory<'a> {
    segments: &'a [Segment],
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
fn plt_slot(mem: &Memory<'_>, at: usize) -> Option<usize> {
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
fn check_site(mem: &Memory<'_>, ret: usize, hooks: &[usize]) -> Option<Site> {
    let is_hook = |a: usize| hooks.contains(&a);
    let site = ret.checked_sub(5)?;
    if let Some(b) = mem.code::<5>(site) {
        if b[0] == 0xe8 {
            let rel = i32::from_le_bytes(b[1..5].try_into().ok()?) as isize;
            let target = ret.wrapping_add_signed(rel);
            let ok = is_hook(target)
                || plt_slot(mem, target)
                    .and_then(|g| mem.word(g))
                    .is_some_and(is_hook);
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
        if mem.word(slot).is_some_and(is_hook) {
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
fn padding(mem: &Memory<'_>, at: usize) -> bool {
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
fn tail_jumps(mem: &Memory<'_>, (start, end): (usize, usize), hooks: &[usize]) -> Vec<Site> {
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
/// bytes, which become a short form: a 2-byte `jmp` over the rest of the call (`eb 03` /
/// `eb 04`), or a 1-byte `ret` for a tail jump; the bytes after it are left as they were and
/// never run. Another thread runs the old instruction or the new one, never a mix.
fn block_of(site: Site) -> Option<(usize, usize)> {
    if site.addr % 8 + site.len <= 8 {
        return Some((site.addr & !7, 8));
    }
    if site.addr % 16 + site.len <= 16 && has_cx16() {
        return Some((site.addr & !15, 16));
    }
    let short = if site.tail { 1 } else { 2 };
    (site.addr % 8 + short <= 8).then_some((site.addr & !7, 8))
}

fn has_cx16() -> bool {
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
fn swap_in_nop(site: Site, at: usize, width: usize) -> bool {
    let off = site.addr - at;
    let short_jmp = [0xeb, site.len as u8 - 2];
    let nop: &[u8] = match (site.len, site.tail) {
        _ if off + site.len > width && site.tail => &RET5[..1],
        _ if off + site.len > width => &short_jmp,
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
unsafe fn cas16(p: *mut u128, old: u128, new: u128) -> bool {
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
struct Job<'a> {
    hooks: &'a [usize],
    maps: Vec<Mapping>,
    /// (set index, return address) of the sites to look at.
    todo: Vec<(usize, usize)>,
    /// Bodies of untraced functions to look for tail jumps to the exit hook in.
    bodies: Vec<(usize, usize)>,
    /// Sites in another function's body, patched when proven.
    inlined: Vec<Inlined>,
}

/// A site noted in another function's body than its own.
struct Inlined {
    /// Index in the site set.
    set: usize,
    /// The call's return address.
    ret: usize,
    /// The untraced function it was noted for.
    func: usize,
    /// The whole function holding it (body, then `.cold` parts).
    unit: Vec<(usize, usize)>,
}

/// A site to rewrite: its page, its index in the site set (`usize::MAX` for a tail jump), the
/// instruction, its aligned block (address, width), and whether it lies in an inlined copy.
struct Planned {
    page: usize,
    set: usize,
    site: Site,
    at: usize,
    width: usize,
    inlined: bool,
}

/// Largest function analysed for inlined copies' sites (bytes of code).
const MAX_UNIT: usize = 1 << 20;

/// Analyses the whole function `unit` ([`crate::callsite`]), reading its code and jump tables
/// from `mem`.
fn prove(mem: &Memory<'_>, unit: &[(usize, usize)]) -> Option<crate::callsite::Proven> {
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

unsafe extern "C" fn collect_segments(
    info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: dl_iterate_phdr passes a valid info for the duration of the call; data is the
    // Vec passed by `locked`.
    let (info, out) = unsafe { (&*info, &mut *(data as *mut Vec<Segment>)) };
    if info.dlpi_phdr.is_null() {
        return 0;
    }
    // SAFETY: dlpi_phdr points to dlpi_phnum program headers.
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
    0
}

/// Runs once, inside the outer `dl_iterate_phdr` (the loader lock held throughout, so no
/// object is unloaded meanwhile; the lock is recursive, the inner iteration takes it again).
unsafe extern "C" fn locked(
    _info: *mut libc::dl_phdr_info,
    _size: usize,
    data: *mut c_void,
) -> c_int {
    // SAFETY: data is the Job passed by `apply`.
    let job = unsafe { &mut *(data as *mut Job<'_>) };
    let mut segments: Vec<Segment> = Vec::new();
    // SAFETY: the callback matches dl_iterate_phdr's contract and only touches `segments`.
    unsafe {
        libc::dl_iterate_phdr(
            Some(collect_segments),
            &mut segments as *mut _ as *mut c_void,
        )
    };
    let mem = Memory {
        segments: &segments,
    };
    // Sites by page, each with its block.
    let mut plan: Vec<Planned> = Vec::new();
    for &(i, ret) in &job.todo {
        let planned = check_site(&mem, ret, job.hooks).and_then(|site| {
            let (at, width) = block_of(site)?;
            Some(Planned {
                page: at & !4095,
                set: i,
                site,
                at,
                width,
                inlined: false,
            })
        });
        match planned {
            Some(p) => plan.push(p),
            None => STATE[i].store(st::KEPT, Release),
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
            .and_then(|site| {
                let (at, width) = block_of(site)?;
                Some(Planned {
                    page: at & !4095,
                    set: n.set,
                    site,
                    at,
                    width,
                    inlined: true,
                })
            });
        match planned {
            Some(p) => plan.push(p),
            None => STATE[n.set].store(st::KEPT, Release),
        }
    }
    for &body in &job.bodies {
        for site in tail_jumps(&mem, body, job.hooks) {
            if let Some((at, width)) = block_of(site) {
                plan.push(Planned {
                    page: at & !4095,
                    set: usize::MAX,
                    site,
                    at,
                    width,
                    inlined: false,
                });
            }
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
    1
}

/// Makes `page` writable (keeping `prot`), swaps the NOPs in, gives the page `prot` back.
fn patch_page(page: usize, prot: c_int, group: &[Planned]) -> bool {
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
fn first_scan(func: usize) -> bool {
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

/// The flusher: rewrites every site noted since the last call that proves to be a call of one
/// of `hooks` (see the module docs) and lies in the body of the function it was noted for, or
/// in another function's body where the code proves the call is made for that function alone
/// (an inlined copy: see the module docs), and the tail jumps to the exit hook that end the
/// untraced functions' bodies (to `ret`). `functions` gives bodies from the symbol tables.
/// Returns the sites patched by this call.
pub fn apply(hooks: &[usize], functions: &mut dyn Functions) -> u32 {
    if !DIRTY.swap(false, AcqRel) {
        return 0;
    }
    let mut bodies = Vec::new();
    let mut todo = Vec::new();
    let mut inlined = Vec::new();
    for (i, (k, s)) in SITE.iter().zip(&STATE).enumerate() {
        let ret = k.load(Acquire);
        let func = FUNC[i].load(Acquire);
        if ret == 0 || func == 0 || s.load(Acquire) != st::QUEUED {
            continue;
        }
        if !enabled() {
            s.store(st::KEPT, Release);
            continue;
        }
        if first_scan(func) {
            bodies.extend(functions.body(func));
        }
        let body = functions.body(func);
        let own = |site: usize| body.is_some_and(|(a, b)| a <= site && site < b);
        if own(ret.wrapping_sub(6)) && own(ret - 1) {
            todo.push((i, ret));
            continue;
        }
        match functions.enclosing(ret - 1) {
            Some(unit) if !unit.is_empty() => inlined.push(Inlined {
                set: i,
                ret,
                func,
                unit,
            }),
            _ => s.store(st::KEPT, Release),
        }
    }
    if todo.is_empty() && bodies.is_empty() && inlined.is_empty() {
        return 0;
    }
    let before = stats().patched;
    let mut job = Job {
        hooks,
        maps: read_maps(),
        todo,
        bodies,
        inlined,
    };
    // SAFETY: `locked` matches dl_iterate_phdr's contract and only touches `job`, the site
    // set and the pages it checks; it stops the iteration after its first call.
    unsafe { libc::dl_iterate_phdr(Some(locked), &mut job as *mut _ as *mut c_void) };
    stats().patched.saturating_sub(before)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines() {
        let m =
            parse_maps_line("55d0c1a00000-55d0c1a21000 r-xp 00002000 fd:01 1234   /usr/bin/cat")
                .unwrap();
        assert_eq!(m.start, 0x55d0c1a00000);
        assert_eq!(m.end, 0x55d0c1a21000);
        assert_eq!(m.prot, libc::PROT_READ | libc::PROT_EXEC);
        assert!(parse_maps_line("garbage").is_none());
    }

    /// A buffer laid out like code: a PLT stub (`endbr64; bnd jmp *GOT(%rip)`) at 0, a GOT
    /// word at 64, a `call stub` at 128, a `call *GOT(%rip)` at 192, a call elsewhere at 256.
    fn code(hook: usize) -> (Vec<u64>, usize) {
        let mut words = vec![0u64; 64];
        let base = words.as_mut_ptr() as usize;
        let mut b = vec![0u8; 512];
        let rel = |from: usize, to: usize| ((to as isize - from as isize) as i32).to_le_bytes();
        b[..7].copy_from_slice(&[0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25]);
        b[7..11].copy_from_slice(&rel(11, 64));
        b[64..72].copy_from_slice(&(hook as u64).to_le_bytes());
        b[128] = 0xe8;
        b[129..133].copy_from_slice(&rel(133, 0));
        b[192..194].copy_from_slice(&[0xff, 0x15]);
        b[194..198].copy_from_slice(&rel(198, 64));
        b[256] = 0xe8;
        b[257..261].copy_from_slice(&rel(261, 32));
        for (w, c) in words.iter_mut().zip(b.chunks(8)) {
            *w = u64::from_le_bytes(c.try_into().unwrap());
        }
        (words, base)
    }

    /// The test buffer as one executable segment.
    fn code_segment(base: usize) -> [Segment; 1] {
        [Segment {
            start: base,
            end: base + 512,
            exec: true,
            read: true,
        }]
    }

    #[test]
    fn call_sites_are_proved_by_their_bytes() {
        let hook = 0x7f00_1234_5670usize;
        let (words, base) = code(hook);
        let seg = code_segment(base);
        let mem = Memory { segments: &seg };
        // Through the PLT stub, and through the GOT.
        assert_eq!(
            check_site(&mem, base + 133, &[hook]),
            Some(Site {
                addr: base + 128,
                len: 5,
                tail: false,
            })
        );
        assert_eq!(
            check_site(&mem, base + 198, &[hook]),
            Some(Site {
                addr: base + 192,
                len: 6,
                tail: false,
            })
        );
        // Another target, another hook, or no call at all.
        assert_eq!(check_site(&mem, base + 261, &[hook]), None);
        assert_eq!(check_site(&mem, base + 133, &[hook + 16]), None);
        assert_eq!(check_site(&mem, base + 140, &[hook]), None);
        // Bytes outside the segment are never read.
        let data = [Segment {
            start: base,
            end: base + 512,
            exec: false,
            read: true,
        }];
        let mem = Memory { segments: &data };
        assert_eq!(check_site(&mem, base + 133, &[hook]), None);
        drop(words);
    }

    #[test]
    fn tail_jumps_end_a_body() {
        let hook = 0x7f00_1234_5670usize;
        let (mut words, base) = code(hook);
        // A body at 300..320 ending in `jmp stub` (to the PLT stub at 0), then padding; one at
        // 340..360 whose jmp is followed by code.
        let mut b: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let jmp = |b: &mut Vec<u8>, at: usize| {
            b[at] = 0xe9;
            b[at + 1..at + 5].copy_from_slice(&((0 - (at as i64 + 5)) as i32).to_le_bytes());
        };
        jmp(&mut b, 315);
        b[320..323].copy_from_slice(&[0x66, 0x0f, 0x1f]);
        jmp(&mut b, 345);
        b[350..353].copy_from_slice(&[0x48, 0x89, 0xc7]);
        for (w, c) in words.iter_mut().zip(b.chunks(8)) {
            *w = u64::from_le_bytes(c.try_into().unwrap());
        }
        let seg = code_segment(base);
        let mem = Memory { segments: &seg };
        let found = tail_jumps(&mem, (base + 300, base + 320), &[hook]);
        assert_eq!(
            found,
            vec![Site {
                addr: base + 315,
                len: 5,
                tail: true,
            }]
        );
        assert!(tail_jumps(&mem, (base + 340, base + 360), &[hook]).is_empty());
        assert!(tail_jumps(&mem, (base + 300, base + 320), &[hook + 16]).is_empty());
        // It becomes `ret` and padding.
        let (at, width) = block_of(found[0]).unwrap();
        assert!(swap_in_nop(found[0], at, width));
        let after: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(after[315..320], RET5);
    }

    #[test]
    fn nops_replace_the_call_and_nothing_else() {
        let (mut words, base) = code(1);
        let before: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let site = Site {
            addr: base + 128,
            len: 5,
            tail: false,
        };
        let (at, width) = block_of(site).unwrap();
        assert!(swap_in_nop(site, at, width));
        let site6 = Site {
            addr: base + 192,
            len: 6,
            tail: false,
        };
        let (at, width) = block_of(site6).unwrap();
        assert!(swap_in_nop(site6, at, width));
        words[0] = words[0].wrapping_add(0); // keep the buffer alive and mutable
        let after: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        for (i, (a, b)) in before.iter().zip(&after).enumerate() {
            match i {
                128..=132 => assert_eq!(*b, NOP5[i - 128]),
                192..=197 => assert_eq!(*b, NOP6[i - 192]),
                _ => assert_eq!(a, b, "byte {i} changed"),
            }
        }
        if has_cx16() {
            // An instruction across the two words of a 16-byte block.
            let site = Site {
                addr: base + 260,
                len: 5,
                tail: false,
            };
            let (at, width) = block_of(site).unwrap();
            assert_eq!(width, 16);
            assert!(swap_in_nop(site, at, width));
            let b = words[32].to_le_bytes();
            let c = words[33].to_le_bytes();
            assert_eq!(&b[4..], &NOP5[..4]);
            assert_eq!(c[0], NOP5[4]);
        }
        // Across a 16-byte block (12 bytes into one): the first two bytes become `jmp` over
        // the other three, which are left as they were.
        let off = (300..316).find(|o| (base + o) % 16 == 12).unwrap();
        let site = Site {
            addr: base + off,
            len: 5,
            tail: false,
        };
        let before: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let (at, width) = block_of(site).unwrap();
        assert_eq!((at, width), (base + off - 4, 8));
        assert!(swap_in_nop(site, at, width));
        let after: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(after[off..off + 2], [0xeb, 0x03]);
        assert_eq!(after[off + 2..], before[off + 2..]);
        assert_eq!(after[..off], before[..off]);
    }

    /// `lock cmpxchg16b` stores when the block holds the old value, and not otherwise (in
    /// release builds too: `cargo test --release -p culprit-rt`).
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn cas16_stores_only_over_the_old_value() {
        if !has_cx16() {
            return;
        }
        #[repr(align(16))]
        struct Block(u128);
        let mut b = Block(0x1111_2222_3333_4444_5555_6666_7777_8888);
        let p = &mut b.0 as *mut u128;
        // SAFETY: p is 16-aligned, readable and writable; the CPU has cmpxchg16b.
        assert!(!unsafe { cas16(p, 1, 2) });
        assert_eq!(b.0, 0x1111_2222_3333_4444_5555_6666_7777_8888);
        // SAFETY: as above.
        assert!(unsafe { cas16(p, 0x1111_2222_3333_4444_5555_6666_7777_8888, u128::MAX - 5) });
        assert_eq!(b.0, u128::MAX - 5);
    }

    #[test]
    fn blocks() {
        let s = |addr, len| Site {
            addr,
            len,
            tail: false,
        };
        assert_eq!(block_of(s(0x1000, 5)), Some((0x1000, 8)));
        assert_eq!(block_of(s(0x1003, 5)), Some((0x1000, 8)));
        assert_eq!(block_of(s(0x1002, 6)), Some((0x1000, 8)));
        assert_eq!(block_of(s(0x100b, 5)), Some((0x1008, 8)));
        if has_cx16() {
            assert_eq!(block_of(s(0x1004, 5)), Some((0x1000, 16)));
            assert_eq!(block_of(s(0x1006, 5)), Some((0x1000, 16)));
        }
        // Across both: the word of its first two bytes (a short jmp over the rest).
        assert_eq!(block_of(s(0x100c, 5)), Some((0x1008, 8)));
        assert_eq!(block_of(s(0x100e, 6)), Some((0x1008, 8)));
        // Its first byte alone at the end of a 16-byte block: no atomic store can patch it.
        assert_eq!(block_of(s(0x100f, 5)), None);
        // A tail jump needs one byte (`ret`).
        let tail = Site {
            addr: 0x100f,
            len: 5,
            tail: true,
        };
        assert_eq!(block_of(tail), Some((0x1008, 8)));
    }
}
