//! Which function a hook call site is for, proven from the machine code around it.
//!
//! gcc `-finstrument-functions` passes the function's address in `%rdi` to
//! `__cyg_profile_func_enter/exit`. A `static inline` helper inlined into its callers keeps its
//! hook calls, now in the *callers'* bodies; and gcc may share one call instruction between the
//! inlined copies of two functions (the two paths set `%rdi` differently and join before the
//! call). So a hook call site seen once for an untraced function may be rewritten to a NOP
//! (`sys::patch`) only when every path to it sets `%rdi` to that function: this module proves
//! it, for x86-64, by constant propagation over the registers of the enclosing function.
//!
//! # The analysis
//!
//! The enclosing function's body (and its `.cold` part, which gcc splits off and which jumps
//! back into the body) is decoded from its first byte to its end (linear sweep: gcc puts no
//! data in a function's text). Each of the 16 general registers holds, before each
//! instruction, a known constant or "unknown"; the state is joined where paths meet and
//! iterated to a fixed point. Constants come only from `lea sym(%rip), r64`, `mov $imm, r32` /
//! `r64` and register-to-register `mov`s of 64 bits; any other write of a register makes it
//! unknown. A `call` (and a 5/6-byte NOP, which may be a call already rewritten) makes the
//! caller-saved registers unknown (System V ABI); the callee-saved ones survive it.
//!
//! Conservative choices, so that a proof is never wrong:
//!
//! * An instruction no decoded path reaches (a landing pad, code after a call that does not
//!   return) starts with every register unknown — but for alignment padding (NOPs), which
//!   only its fall-through leaves.
//! * An indirect jump (a `switch` table) may reach any instruction: its state joins them all.
//! * A byte sequence the decoder does not know, or a body that does not decode to its end,
//!   proves nothing.
//! * Objects with exception landing pads (they name a personality routine) are not analysed at
//!   all by the caller: the unwinder enters a landing pad with the callee-saved registers of a
//!   call elsewhere in the body.
//!
//! It assumes what gcc guarantees: the only jumps into a function's body from outside it come
//! from its `.cold` part. Runs in the flusher thread (allocation is fine); never in a hook.

use std::collections::HashMap;

use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic,
    OpAccess, OpKind, Register,
};

/// A register's value before an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Val {
    Known(u64),
    Unknown,
}

/// The 16 general registers, in iced's order of `RAX..=R15`.
type Regs = [Val; 16];

const ALL_UNKNOWN: Regs = [Val::Unknown; 16];

/// Caller-saved registers of the System V x86-64 ABI: rax, rcx, rdx, rsi, rdi, r8–r11.
const CALLER_SAVED: [Register; 9] = [
    Register::RAX,
    Register::RCX,
    Register::RDX,
    Register::RSI,
    Register::RDI,
    Register::R8,
    Register::R9,
    Register::R10,
    Register::R11,
];

/// Most visits of each instruction, on average, before giving up: each of its 16 registers can
/// change twice (nothing → a constant → unknown), so the fixed point comes well within this.
const MAX_VISITS: usize = 64;

/// The index of a 64-bit general register in [`Regs`].
fn gpr(r: Register) -> Option<usize> {
    let f = r.full_register();
    f.is_gpr64().then(|| f.number())
}

fn join(a: &mut Option<Regs>, b: &Regs) -> bool {
    match a {
        None => {
            *a = Some(*b);
            true
        }
        Some(a) => {
            let mut changed = false;
            for (x, y) in a.iter_mut().zip(b) {
                if *x != *y && *x != Val::Unknown {
                    *x = Val::Unknown;
                    changed = true;
                }
            }
            changed
        }
    }
}

/// One decoded instruction and where control goes after it.
struct Step {
    ins: Instruction,
    /// Falls through to the next instruction of its piece.
    falls: bool,
    /// A direct branch target inside the unit (index).
    target: Option<usize>,
    /// An indirect jump: may reach any instruction of the unit, unless it is a jump table's.
    anywhere: bool,
    /// An indirect jump through a jump table gcc laid out, read when the table's address is
    /// known.
    table: Option<Table>,
    /// A call, or a NOP of a call's length: the caller-saved registers are clobbered.
    clobbers: bool,
}

/// The two shapes of gcc's `switch` jump tables.
#[derive(Clone, Copy, Debug)]
enum Table {
    /// Position-independent: `movslq (%B,%I,4),%R; add %B,%R; jmp *%R` — 32-bit entries
    /// relative to the table, whose address register `B` holds (index of B; the `movslq`'s
    /// instruction index, where B's value is read).
    Relative { base: usize, at: usize },
    /// `jmp *T(,%I,8)`: 64-bit absolute entries at `T`.
    Absolute(u64),
}

/// Most entries read from one jump table.
const MAX_TABLE: usize = 4096;

/// Reads `len` bytes at `addr` of the process' memory, when they lie in a readable segment.
pub type ReadMem<'a> = &'a dyn Fn(u64, usize) -> Option<Vec<u8>>;

/// The function whose address `%rdi` holds at each call instruction of a function, where every
/// path sets it to the same constant.
#[derive(Debug, Default)]
pub struct Proven {
    rdi_at_call: HashMap<u64, u64>,
}

impl Proven {
    /// The function address `%rdi` holds whenever the call instruction at `site` runs, if
    /// proven.
    pub fn rdi_at(&self, site: u64) -> Option<u64> {
        self.rdi_at_call.get(&site).copied()
    }
}

/// A call site the runtime already rewrote to a short form that leaves dead bytes after it
/// (`sys::patch`: a 2-byte `jmp` over the rest of a call, a 1-byte `ret` in place of a tail
/// jump): decoding steps over the whole former instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rewritten {
    /// The former instruction's address.
    pub addr: u64,
    /// Its length.
    pub len: usize,
    /// It was a tail jump to the exit hook (now `ret`); else a call (now a jump over it).
    pub tail: bool,
}

/// Analyses a function made of `pieces`: (runtime address, code bytes), the body first, then
/// its `.cold` part(s); `rewritten` lists the sites already rewritten to a short form, `read`
/// reads its jump tables. None when the code does not decode, a branch lands between two
/// decoded instructions, or the analysis does not settle.
pub fn analyse(
    pieces: &[(u64, &[u8])],
    rewritten: &[Rewritten],
    read: ReadMem<'_>,
) -> Option<Proven> {
    let mut ins: Vec<Instruction> = Vec::new();
    // Rewritten sites among them, by index.
    let mut former: HashMap<usize, Rewritten> = HashMap::new();
    // Index of the first instruction of each piece (where linear fall-through restarts).
    let mut starts = Vec::new();
    for &(ip, bytes) in pieces {
        starts.push(ins.len());
        let mut d = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
        while d.can_decode() {
            if let Some(r) = rewritten.iter().find(|r| r.addr == d.ip()) {
                let next = d.position() + r.len;
                if next > bytes.len() {
                    return None;
                }
                let mut i = Instruction::default();
                i.set_len(r.len);
                i.set_next_ip(r.addr + r.len as u64);
                former.insert(ins.len(), *r);
                ins.push(i);
                d.set_position(next).ok()?;
                d.set_ip(r.addr + r.len as u64);
                continue;
            }
            let i = d.decode();
            if i.is_invalid() {
                return None;
            }
            ins.push(i);
        }
        // An instruction running past the piece's end: the bytes are not what we think.
        if ins
            .last()
            .is_some_and(|l| l.next_ip() != ip + bytes.len() as u64)
        {
            return None;
        }
    }
    let index: HashMap<u64, usize> = ins.iter().enumerate().map(|(k, i)| (i.ip(), k)).collect();
    // A direct branch into the function that lands between two decoded instructions: the
    // linear sweep went wrong somewhere (data, or bytes rewritten by someone else).
    let inside = |a: u64| {
        pieces
            .iter()
            .any(|&(ip, b)| (ip..ip + b.len() as u64).contains(&a))
    };
    let misaligned = ins.iter().enumerate().any(|(k, i)| {
        !former.contains_key(&k)
            && matches!(
                i.flow_control(),
                FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch
            )
            && inside(i.near_branch_target())
            && !index.contains_key(&i.near_branch_target())
    });
    if misaligned {
        return None;
    }
    let piece_end: Vec<bool> = (0..ins.len())
        .map(|k| starts.contains(&(k + 1)) || k + 1 == ins.len())
        .collect();
    let steps: Vec<Step> = ins
        .iter()
        .enumerate()
        .map(|(k, i)| match former.get(&k) {
            Some(r) => Step {
                ins: *i,
                falls: !r.tail && !piece_end[k],
                target: None,
                anywhere: false,
                table: None,
                clobbers: true,
            },
            None => Step {
                table: table_shape(&ins, k),
                ..step(*i, piece_end[k], &index)
            },
        })
        .collect();
    let state = settle(&steps, &index, read)?;
    let rdi = gpr(Register::RDI)?;
    let rdi_at_call = steps
        .iter()
        .zip(&state)
        .filter(|(s, _)| {
            matches!(
                s.ins.flow_control(),
                FlowControl::Call | FlowControl::IndirectCall
            )
        })
        .filter_map(|(s, st)| match st.as_ref()?[rdi] {
            Val::Known(v) => Some((s.ins.ip(), v)),
            Val::Unknown => None,
        })
        .collect();
    Some(Proven { rdi_at_call })
}

/// The registers before each instruction, at the fixed point (a work list: an instruction is
/// looked at again when what flows into it changed). None when it takes too long.
fn settle(
    steps: &[Step],
    index: &HashMap<u64, usize>,
    read: ReadMem<'_>,
) -> Option<Vec<Option<Regs>>> {
    let n = steps.len();
    // Instructions some decoded path reaches (by falling through or a direct branch); the
    // others are entries with nothing known.
    let mut reached = vec![false; n];
    for (k, s) in steps.iter().enumerate() {
        if s.falls && k + 1 < n {
            reached[k + 1] = true;
        }
        if let Some(t) = s.target {
            reached[t] = true;
        }
    }
    // Alignment padding after a jump (NOPs) is not an entry: nothing runs it but what falls
    // out of it, and the code it pads is reached some other way.
    let mut state: Vec<Option<Regs>> = reached
        .iter()
        .zip(steps)
        .map(|(&r, s)| (!r && s.ins.mnemonic() != Mnemonic::Nop).then_some(ALL_UNKNOWN))
        .collect();
    if let Some(first) = state.first_mut() {
        *first = Some(ALL_UNKNOWN);
    }
    let mut tables: HashMap<u64, Vec<usize>> = HashMap::new();
    let mut info = InstructionInfoFactory::new();
    let mut anywhere: Option<Regs> = None;
    let mut queued = vec![true; n];
    let mut work: Vec<usize> = (0..n).rev().collect();
    let mut budget = n.saturating_mul(MAX_VISITS);
    while let Some(k) = work.pop() {
        queued[k] = false;
        budget = budget.checked_sub(1)?;
        let Some(before) = state[k] else { continue };
        let s = &steps[k];
        let after = transfer(&s.ins, &before, s.clobbers, &mut info);
        let mut to: Vec<usize> = Vec::new();
        if s.falls && k + 1 < n {
            to.push(k + 1);
        }
        to.extend(s.target);
        let mut everywhere = false;
        if s.anywhere {
            let entries = match s.table {
                Some(Table::Absolute(t)) => Some(t),
                Some(Table::Relative { base, at }) => match state[at].map(|r| r[base]) {
                    Some(Val::Known(t)) => Some(t),
                    _ => None,
                },
                None => None,
            };
            let targets = entries.map(|t| {
                tables
                    .entry(t)
                    .or_insert_with(|| read_table(t, s.table, index, read))
                    .clone()
            });
            match targets {
                Some(ts) if !ts.is_empty() => to.extend(ts),
                _ => everywhere = join(&mut anywhere, &after),
            }
        }
        for t in to {
            if join(&mut state[t], &after) && !queued[t] {
                queued[t] = true;
                work.push(t);
            }
        }
        if everywhere {
            let a = anywhere.unwrap_or(ALL_UNKNOWN);
            for t in 0..n {
                if join(&mut state[t], &a) && !queued[t] {
                    queued[t] = true;
                    work.push(t);
                }
            }
        }
    }
    Some(state)
}

fn step(i: Instruction, last_of_piece: bool, index: &HashMap<u64, usize>) -> Step {
    let target = || index.get(&i.near_branch_target()).copied();
    let nop_like_call =
        matches!(i.code(), Code::Nopd | Code::Nopw | Code::Nopq) && matches!(i.len(), 5 | 6);
    let (falls, target, anywhere, clobbers) = match i.flow_control() {
        FlowControl::Next => (true, None, false, nop_like_call),
        FlowControl::UnconditionalBranch => (false, target(), false, false),
        FlowControl::ConditionalBranch => (true, target(), false, false),
        FlowControl::IndirectBranch => (false, None, true, false),
        FlowControl::Call | FlowControl::IndirectCall => (true, None, false, true),
        FlowControl::Return | FlowControl::Exception | FlowControl::Interrupt => {
            (false, None, false, false)
        }
        // xbegin/xabort/xend: may go elsewhere; keep nothing across them.
        FlowControl::XbeginXabortXend => (true, None, true, true),
    };
    Step {
        ins: i,
        falls: falls && !last_of_piece,
        target,
        anywhere,
        table: None,
        clobbers,
    }
}

/// The jump table the indirect jump `ins[k]` goes through, when it has one of gcc's shapes.
fn table_shape(ins: &[Instruction], k: usize) -> Option<Table> {
    let j = &ins[k];
    if j.flow_control() != FlowControl::IndirectBranch || j.code() != Code::Jmp_rm64 {
        return None;
    }
    if j.op0_kind() == OpKind::Memory {
        let absolute = j.memory_base() == Register::None
            && j.memory_index() != Register::None
            && j.memory_index_scale() == 8;
        return absolute.then(|| Table::Absolute(j.memory_displacement64()));
    }
    let r = j.op0_register();
    let (mov, add) = (ins.get(k.checked_sub(2)?)?, ins.get(k - 1)?);
    let b = mov.memory_base();
    let regs = |i: &Instruction| {
        (i.op0_kind() == OpKind::Register && i.op1_kind() == OpKind::Register)
            .then(|| (i.op0_register(), i.op1_register()))
    };
    let shape = mov.code() == Code::Movsxd_r64_rm32
        && mov.op0_register() == r
        && mov.op1_kind() == OpKind::Memory
        && mov.memory_index_scale() == 4
        && mov.memory_index() != Register::None
        && b.is_gpr64()
        && b != r
        && matches!(add.code(), Code::Add_r64_rm64 | Code::Add_rm64_r64)
        && regs(add) == Some((r, b))
        && mov.memory_displacement64() == 0;
    shape.then(|| Table::Relative {
        base: gpr(b).unwrap_or(0),
        at: k - 2,
    })
}

/// The instructions a jump table at `t` sends control to: its entries, read until the first
/// that is not an instruction of the function (a table's entries all are, so the real ones are
/// all read; reading past the end adds targets, which only makes the analysis more careful).
fn read_table(
    t: u64,
    shape: Option<Table>,
    index: &HashMap<u64, usize>,
    read: ReadMem<'_>,
) -> Vec<usize> {
    let width = match shape {
        Some(Table::Absolute(_)) => 8,
        _ => 4,
    };
    let mut out = Vec::new();
    for n in 0..MAX_TABLE as u64 {
        let Some(b) = read(t.wrapping_add(n * width), width as usize) else {
            break;
        };
        let to = if width == 8 {
            u64::from_le_bytes(b[..8].try_into().unwrap_or_default())
        } else {
            let e = i32::from_le_bytes(b[..4].try_into().unwrap_or_default());
            t.wrapping_add_signed(e as i64)
        };
        match index.get(&to) {
            Some(&k) => out.push(k),
            None => break,
        }
    }
    out
}

/// The registers after `i`, given those before it.
fn transfer(
    i: &Instruction,
    before: &Regs,
    clobbers: bool,
    info: &mut InstructionInfoFactory,
) -> Regs {
    let mut r = *before;
    for u in info.info(i).used_registers() {
        let writes = !matches!(
            u.access(),
            OpAccess::Read | OpAccess::CondRead | OpAccess::NoMemAccess | OpAccess::None
        );
        if writes {
            if let Some(k) = gpr(u.register()) {
                r[k] = Val::Unknown;
            }
        }
    }
    if clobbers {
        for c in CALLER_SAVED {
            if let Some(k) = gpr(c) {
                r[k] = Val::Unknown;
            }
        }
    }
    if let Some((dst, v)) = constant(i, before) {
        r[dst] = v;
    }
    r
}

/// The register `i` sets to a value this analysis follows, and that value.
fn constant(i: &Instruction, before: &Regs) -> Option<(usize, Val)> {
    let reg_op = |n: u32| (i.op_kind(n) == OpKind::Register).then(|| i.op_register(n));
    match i.code() {
        Code::Lea_r64_m if i.is_ip_rel_memory_operand() => Some((
            gpr(i.op0_register())?,
            Val::Known(i.ip_rel_memory_address()),
        )),
        // `mov $imm32, %r32` zero-extends into the whole register.
        Code::Mov_r32_imm32 | Code::Mov_rm32_imm32 => {
            let dst = reg_op(0)?;
            if !dst.is_gpr32() {
                return None;
            }
            Some((gpr(dst)?, Val::Known(i.immediate32() as u64)))
        }
        Code::Mov_r64_imm64 => Some((gpr(i.op0_register())?, Val::Known(i.immediate64()))),
        Code::Mov_rm64_imm32 => {
            let dst = reg_op(0)?;
            Some((gpr(dst)?, Val::Known(i.immediate32to64() as u64)))
        }
        Code::Mov_r64_rm64 | Code::Mov_rm64_r64 => {
            let (dst, src) = (reg_op(0)?, reg_op(1)?);
            Some((gpr(dst)?, before[gpr(src)?]))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: u64 = 0x40_1000;

    /// `lea disp(%rip), %reg64` for rdi (0x3d) / rbx (0x1d) modrm bytes, at `at`, to `to`.
    fn lea_rip(code: &mut Vec<u8>, modrm: u8, to: u64) {
        let at = BASE + code.len() as u64;
        let disp = (to as i64 - (at as i64 + 7)) as i32;
        code.extend([0x48, 0x8d, modrm]);
        code.extend(disp.to_le_bytes());
    }

    /// `call rel32` to `to`; returns the call's address.
    fn call(code: &mut Vec<u8>, to: u64) -> u64 {
        let at = BASE + code.len() as u64;
        let rel = (to as i64 - (at as i64 + 5)) as i32;
        code.push(0xe8);
        code.extend(rel.to_le_bytes());
        at
    }

    const HOOK: u64 = 0x50_0000;
    const F1: u64 = 0x40_0100;
    const F2: u64 = 0x40_0200;
    const MOV_RDI_RBX: [u8; 3] = [0x48, 0x89, 0xdf];
    const RET: u8 = 0xc3;

    fn no_memory(_: u64, _: usize) -> Option<Vec<u8>> {
        None
    }

    fn proven(code: &[u8]) -> Proven {
        analyse(&[(BASE, code)], &[], &no_memory).expect("decodes")
    }

    #[test]
    fn lea_then_call() {
        let mut c = Vec::new();
        lea_rip(&mut c, 0x3d, F1);
        let site = call(&mut c, HOOK);
        c.push(RET);
        assert_eq!(proven(&c).rdi_at(site), Some(F1));
    }

    #[test]
    fn a_callee_saved_copy_survives_calls_and_loops() {
        // lea f1, %rbx; loop: call other; dec %ecx... jne loop; mov %rbx,%rdi; call hook
        let mut c = Vec::new();
        lea_rip(&mut c, 0x1d, F1);
        let top = c.len();
        call(&mut c, 0x60_0000);
        c.extend([0x83, 0xe9, 0x01]); // sub $1, %ecx
        let back = (top as i64 - (c.len() as i64 + 2)) as i8;
        c.extend([0x75, back as u8]); // jne top
        c.extend(MOV_RDI_RBX);
        let site = call(&mut c, HOOK);
        c.push(RET);
        assert_eq!(proven(&c).rdi_at(site), Some(F1));
    }

    #[test]
    fn a_call_clobbers_rdi() {
        let mut c = Vec::new();
        lea_rip(&mut c, 0x3d, F1);
        call(&mut c, 0x60_0000);
        let site = call(&mut c, HOOK);
        c.push(RET);
        assert_eq!(proven(&c).rdi_at(site), None);
    }

    /// test %esi,%esi; je L2; lea fa,%rdi; jmp J; L2: lea fb,%rdi; J: call hook; ret
    fn two_paths(fa: u64, fb: u64) -> (Vec<u8>, u64) {
        let mut c = vec![0x85, 0xf6, 0x74, 0x09];
        lea_rip(&mut c, 0x3d, fa);
        c.extend([0xeb, 0x07]);
        lea_rip(&mut c, 0x3d, fb);
        let site = call(&mut c, HOOK);
        c.push(RET);
        (c, site)
    }

    #[test]
    fn two_paths_with_two_functions_prove_nothing() {
        let (c, site) = two_paths(F1, F2);
        let p = proven(&c);
        assert_eq!(p.rdi_at(site), None, "{p:?}");
        // The same function on both paths is proven.
        let (c, site) = two_paths(F2, F2);
        assert_eq!(proven(&c).rdi_at(site), Some(F2));
    }

    #[test]
    fn code_no_path_reaches_knows_nothing() {
        // ret; mov %rbx,%rdi; call hook — the mov/call are reached by no decoded path (as a
        // landing pad is): rbx is unknown there although nothing wrote it.
        let mut c = Vec::new();
        lea_rip(&mut c, 0x1d, F1);
        c.push(RET);
        c.extend(MOV_RDI_RBX);
        let site = call(&mut c, HOOK);
        c.push(RET);
        assert_eq!(proven(&c).rdi_at(site), None);
    }

    /// gcc's loop alignment: `jmp L; nopl (pad); top: … L: … jcc top` — the padding is not an
    /// entry, so %rbx, set before the jump, is known in the loop.
    #[test]
    fn padding_after_a_jump_is_not_an_entry() {
        let mut c = Vec::new();
        lea_rip(&mut c, 0x1d, F1);
        c.extend([0xeb, 0x05]); // jmp L
        c.extend([0x0f, 0x1f, 0x44, 0x00, 0x00]); // nopl 0(%rax,%rax,1)
        let top = c.len();
        call(&mut c, 0x60_0000); // top: call other
        c.extend(MOV_RDI_RBX); // L: mov %rbx,%rdi
        let site = call(&mut c, HOOK);
        c.extend([0x83, 0xe9, 0x01]); // sub $1,%ecx
        let back = (top as i64 - (c.len() as i64 + 2)) as i8;
        c.extend([0x75, back as u8]); // jne top
        c.push(RET);
        // The jmp lands on the mov (after the 5-byte call at top).
        c[8] = 0x0a;
        assert_eq!(proven(&c).rdi_at(site), Some(F1));
    }

    #[test]
    fn an_unknown_indirect_jump_may_reach_anything() {
        // lea f1,%rdi; test; je J; jmp *%rax; J: call hook; ret — the jump may land on the
        // call with %rdi as it was before it: f1 (proven), then, with `mov %rbx,%rdi` before
        // the jump, unknown.
        let mut c = Vec::new();
        lea_rip(&mut c, 0x3d, F1);
        c.extend([0x85, 0xf6, 0x74, 0x02]); // test %esi,%esi; je J
        c.extend([0xff, 0xe0]); // jmp *%rax
        let site = call(&mut c, HOOK);
        c.push(RET);
        assert_eq!(proven(&c).rdi_at(site), Some(F1));
        let mut c2 = c.clone();
        c2.splice(11..11, MOV_RDI_RBX);
        c2[10] = 0x05; // je over the mov and the jump
        let site2 = site + 3;
        assert_eq!(proven(&c2).rdi_at(site2), None);
    }

    /// A position-independent jump table (gcc's `switch`): `lea T(%rip),%rdx; movslq
    /// (%rdx,%rax,4),%rax; add %rdx,%rax; jmp *%rax` with two cases, one setting %rdi to f1
    /// and calling the hook, the other to f2 and returning; the table lies in "memory".
    #[test]
    fn a_jump_table_s_targets_are_read() {
        const TABLE: u64 = 0x48_0000;
        let mut c = Vec::new();
        lea_rip(&mut c, 0x15, TABLE); // lea T(%rip),%rdx
        c.extend([0x48, 0x63, 0x04, 0x82]); // movslq (%rdx,%rax,4),%rax
        c.extend([0x48, 0x01, 0xd0]); // add %rdx,%rax
        c.extend([0x3e, 0xff, 0xe0]); // notrack jmp *%rax
        let case1 = BASE + c.len() as u64;
        lea_rip(&mut c, 0x3d, F1);
        let site = call(&mut c, HOOK);
        c.push(RET);
        let case2 = BASE + c.len() as u64;
        lea_rip(&mut c, 0x3d, F2);
        c.push(RET);
        let entries: Vec<u8> = [case1, case2, 0x1234]
            .iter()
            .flat_map(|&to| ((to as i64 - TABLE as i64) as i32).to_le_bytes())
            .collect();
        let memory = |at: u64, len: usize| {
            let off = at.checked_sub(TABLE)? as usize;
            entries.get(off..off + len).map(|b| b.to_vec())
        };
        let p = analyse(&[(BASE, &c)], &[], &memory).unwrap();
        assert_eq!(p.rdi_at(site), Some(F1));
        // Without the table (not readable), the jump may reach the call directly.
        assert_eq!(proven(&c).rdi_at(site), None);
    }

    #[test]
    fn non_pie_immediates_and_partial_writes() {
        // mov $f1,%edi; call hook; mov $f1,%edi; mov $0,%dil; call hook
        let mut c = vec![0xbf];
        c.extend((F1 as u32).to_le_bytes());
        let a = call(&mut c, HOOK);
        c.push(0xbf);
        c.extend((F1 as u32).to_le_bytes());
        c.extend([0x40, 0xb7, 0x00]); // mov $0, %dil
        let b = call(&mut c, HOOK);
        c.push(RET);
        let p = proven(&c);
        assert_eq!(p.rdi_at(a), Some(F1));
        assert_eq!(p.rdi_at(b), None);
    }

    #[test]
    fn a_cold_part_jumping_back_joins_the_body() {
        // body: lea f1,%rbx; je cold; J: mov %rbx,%rdi; call hook; ret
        // cold: lea f2,%rbx; jmp J
        let cold_at = BASE + 0x100;
        let mut c = Vec::new();
        lea_rip(&mut c, 0x1d, F1);
        let je_at = BASE + c.len() as u64;
        c.extend([0x0f, 0x84]);
        c.extend(((cold_at as i64 - (je_at as i64 + 6)) as i32).to_le_bytes());
        let join_at = BASE + c.len() as u64;
        c.extend(MOV_RDI_RBX);
        let site = call(&mut c, HOOK);
        c.push(RET);
        let mut cold = Vec::new();
        let disp = (F2 as i64 - (cold_at as i64 + 7)) as i32;
        cold.extend([0x48, 0x8d, 0x1d]);
        cold.extend(disp.to_le_bytes());
        let jmp_at = cold_at + cold.len() as u64;
        cold.push(0xe9);
        cold.extend(((join_at as i64 - (jmp_at as i64 + 5)) as i32).to_le_bytes());
        let body_only = analyse(&[(BASE, &c)], &[], &no_memory).unwrap();
        assert_eq!(body_only.rdi_at(site), Some(F1));
        let both = analyse(&[(BASE, &c), (cold_at, &cold)], &[], &no_memory).unwrap();
        assert_eq!(both.rdi_at(site), None);
    }

    /// A call already rewritten to `jmp +3` leaves three dead bytes (here the start of a `lea`
    /// that would swallow the next instruction): decoding steps over the former call.
    #[test]
    fn rewritten_sites_are_stepped_over() {
        let mut c = Vec::new();
        lea_rip(&mut c, 0x1d, F1); // lea f1,%rbx
        let old = BASE + c.len() as u64;
        c.extend([0xeb, 0x03, 0x48, 0x8d, 0x3d]); // jmp +3; dead bytes
        c.extend(MOV_RDI_RBX);
        let site = call(&mut c, HOOK);
        c.push(RET);
        let r = Rewritten {
            addr: old,
            len: 5,
            tail: false,
        };
        let p = analyse(&[(BASE, &c)], &[r], &no_memory).unwrap();
        assert_eq!(p.rdi_at(site), Some(F1));
        // Not told: the dead bytes decode as a `lea` over the `mov`, and the call is no longer
        // reached the way it runs; nothing is proven for it.
        let blind = analyse(&[(BASE, &c)], &[], &no_memory);
        assert_eq!(blind.and_then(|p| p.rdi_at(site)), None);
    }

    #[test]
    fn a_branch_between_two_instructions_proves_nothing() {
        // jmp into the middle of the lea: the linear sweep cannot be what runs.
        let mut c = vec![0xeb, 0x02];
        lea_rip(&mut c, 0x3d, F1);
        call(&mut c, HOOK);
        c.push(RET);
        assert!(analyse(&[(BASE, &c)], &[], &no_memory).is_none());
    }

    #[test]
    fn bytes_that_do_not_decode_prove_nothing() {
        assert!(
            analyse(&[(BASE, &[0x48, 0x8d])], &[], &no_memory).is_none(),
            "cut short"
        );
        assert!(
            analyse(&[(BASE, &[0x06])], &[], &no_memory).is_none(),
            "invalid in 64-bit mode"
        );
    }
}
