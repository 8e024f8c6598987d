//! The two `-finstrument-functions` hooks. Their fast path is assembly: it handles a traced
//! function already at its home slot, with room on the stack and the TSC, and jumps to the
//! general path (`pool::enter_slow` / `pool::exit_slow`, safe Rust) for everything else. The
//! layout it reads and writes, the invariants it keeps and why it is safe against signal
//! handlers are described in `block` (module docs and [`crate::block::hot`]).
//!
//! Why assembly: each hook is ~20 instructions here against ~47 compiled from Rust with the
//! same design (callgrind, `benches/tracer/run`), and the signal-safety argument needs every
//! counter update to be one read-modify-write instruction, which only assembly guarantees.
//!
//! The hooks are `extern "C-unwind"` and carry call-frame information (`.cfi_startproc`):
//! asynchronous cancellation (`PTHREAD_CANCEL_ASYNCHRONOUS`) or an exception thrown from a
//! signal handler can land anywhere in a hook, and the unwinder must be able to step out of it
//! as out of C code (test `async_cancel_inside_hooks` in tests/tests/robust.rs). The fast path
//! never touches the stack pointer, so the default rule (the return address at the top of the
//! stack) holds everywhere in it; the general path is a tail jump.

#[cfg(target_arch = "x86_64")]
use crate::block::hot;
use crate::entry::Hooks;
use crate::pool;

// The fast path's thread-local word (read and written in `crate::sys` by name too). Its initial
// value, copied into every new thread, is the "no block" stand-in (the loader relocates the
// TLS image before any thread copies it).
#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".pushsection .tdata,\"awT\",@progbits",
    ".balign 8",
    ".globl culprit_rt_tls_cur",
    ".hidden culprit_rt_tls_cur",
    ".type culprit_rt_tls_cur,@object",
    ".size culprit_rt_tls_cur,8",
    "culprit_rt_tls_cur:",
    ".quad {no_block}",
    ".popsection",
    no_block = sym hot::NO_BLOCK,
);

/// The general path of the entry hook: `sp` is the hook's stack pointer at its entry.
/// `C-unwind` like the hooks (no abort-on-unwind guard, see the module docs); it does not
/// unwind itself.
extern "C-unwind" fn enter_slow(func: usize, _call_site: usize, sp: usize) {
    pool::enter_slow(func, sp);
}

/// The general path of the exit hook.
extern "C-unwind" fn exit_slow(func: usize, _call_site: usize, sp: usize) {
    pool::exit_slow(func, sp);
}

/// Hook called by code compiled with `-finstrument-functions` on entry to every function.
///
/// Fast path: the top frame can be the caller (its stack pointer is at or above ours), the
/// function's home slot or the one after holds it (untagged), there is room for a frame: push
/// it. An untraced function whose key is quiet there returns at once (counted in the block's
/// `quiet`; one such call in [`crate::block::QUIET_NOTE_EVERY`] takes the general path, which
/// notes its call site for patching). The new top is committed right after the frame's stack
/// pointer is written, before its slot and times (see `block`, "Signals and re-entrancy").
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub extern "C-unwind" fn __cyg_profile_func_enter(func: *mut u8, call_site: *mut u8) {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "mov rcx, qword ptr [rip + culprit_rt_tls_cur@GOTTPOFF]",
        "mov rcx, qword ptr fs:[rcx]",
        "mov r8, qword ptr [rcx + {top}]",
        "cmp qword ptr [rcx + r8 + {f_sp}], rsp",
        "jb 2f",
        "cmp r8, {last_push}",
        "ja 2f",
        "lea r9, [4 * rdi]",
        "and r9, {home_mask}",
        "cmp qword ptr [rcx + r9 + {table}], rdi",
        "jne 3f",
        "4:",
        "lea r10, [rcx + r8 + {frame}]",
        "mov qword ptr [r10 + {f_sp}], rsp",
        "add qword ptr [rcx + {top}], {frame}",
        "mov qword ptr [r10 + {f_slot}], r9",
        "inc dword ptr [rcx + r9 + {table} + {s_active}]",
        "rdtsc",
        "shl rdx, 32",
        "or rax, rdx",
        "mov qword ptr [r10 + {f_t}], rax",
        "mov qword ptr [r10 + {f_tx}], rax",
        "ret",
        // The second candidate: the slot after the home slot (where a function whose home was
        // taken usually lands; past the last slot lies `NO_SLOT`, whose key is always 0).
        "3:",
        "add r9, 64",
        "cmp qword ptr [rcx + r9 + {table}], rdi",
        "je 4b",
        // An untraced function whose key is quiet in either: return at once.
        "mov r10, rdi",
        "bts r10, {quiet_bit}",
        "cmp qword ptr [rcx + r9 + {table} - 64], r10",
        "je 5f",
        "cmp qword ptr [rcx + r9 + {table}], r10",
        "je 5f",
        "2:",
        "mov rdx, rsp",
        "jmp {slow}",
        // Counted; one in `QUIET_NOTE_EVERY` goes on to the general path, which notes its
        // call site for patching (read back after the `inc`: a signal handler's quiet call in
        // between only moves which call that is).
        "5:",
        "inc qword ptr [rcx + {quiet}]",
        "test dword ptr [rcx + {quiet}], {note_mask}",
        "jz 2b",
        "ret",
        ".cfi_endproc",
        top = const hot::TOP,
        quiet = const hot::QUIET,
        quiet_bit = const hot::QUIET_BIT,
        note_mask = const hot::QUIET_NOTE_MASK,
        f_sp = const hot::F_SP,
        f_slot = const hot::F_SLOT,
        f_t = const hot::F_T,
        f_tx = const hot::F_TX,
        last_push = const hot::LAST_PUSH,
        home_mask = const hot::HOME_MASK,
        table = const hot::TABLE,
        frame = const hot::FRAME,
        s_active = const hot::S_ACTIVE,
        slow = sym enter_slow,
    )
}

/// Hook called on exit from every instrumented function.
///
/// Fast path: the top frame's slot holds this function (so the frame counts, and is not the
/// sentinel; an untraced function whose key is quiet at its home slot or the next returns at
/// once instead) and the thread's interval has not ended (its timestamp is below the block's
/// boundary; the first exit past it takes the general path, which moves the thread's counts
/// into the ring of intervals, see `intervals`): account the call, pass its elapsed time to
/// the parent frame, commit the pop last.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub extern "C-unwind" fn __cyg_profile_func_exit(func: *mut u8, call_site: *mut u8) {
    core::arch::naked_asm!(
        ".cfi_startproc",
        "mov rcx, qword ptr [rip + culprit_rt_tls_cur@GOTTPOFF]",
        "mov rcx, qword ptr fs:[rcx]",
        "mov r8, qword ptr [rcx + {top}]",
        "mov r9, qword ptr [rcx + r8 + {f_slot}]",
        "cmp qword ptr [rcx + r9 + {table}], rdi",
        "jne 3f",
        "rdtsc",
        "shl rdx, 32",
        "or rax, rdx",
        "cmp rax, qword ptr [rcx + {boundary}]",
        "jae 2f",
        "mov rdx, rax",
        "sub rax, qword ptr [rcx + r8 + {f_t}]",
        "sub rdx, qword ptr [rcx + r8 + {f_tx}]",
        "add qword ptr [rcx + r9 + {table} + {s_excl}], rdx",
        "inc qword ptr [rcx + r9 + {table} + {s_calls}]",
        "add qword ptr [rcx + r8 + {f_tx} - {frame}], rax",
        "dec dword ptr [rcx + r9 + {table} + {s_active}]",
        "jne 1f",
        "add qword ptr [rcx + r9 + {table} + {s_incl}], rax",
        "1:",
        "sub qword ptr [rcx + {top}], {frame}",
        "ret",
        // Not the top frame's function: an untraced function whose key is quiet at its home
        // slot or the next returns at once. Not on a stand-in (its `top` is 0): it has no
        // table.
        "3:",
        "test r8, r8",
        "je 2f",
        "lea r9, [4 * rdi]",
        "and r9, {home_mask}",
        "mov r10, rdi",
        "bts r10, {quiet_bit}",
        "cmp qword ptr [rcx + r9 + {table}], r10",
        "je 5f",
        "cmp qword ptr [rcx + r9 + {table} + 64], r10",
        "je 5f",
        "2:",
        "mov rdx, rsp",
        "jmp {slow}",
        // Counted; one in `QUIET_NOTE_EVERY` goes on to the general path, which notes its
        // call site for patching (read back after the `inc`: a signal handler's quiet call in
        // between only moves which call that is).
        "5:",
        "inc qword ptr [rcx + {quiet}]",
        "test dword ptr [rcx + {quiet}], {note_mask}",
        "jz 2b",
        "ret",
        ".cfi_endproc",
        top = const hot::TOP,
        quiet = const hot::QUIET,
        quiet_bit = const hot::QUIET_BIT,
        note_mask = const hot::QUIET_NOTE_MASK,
        home_mask = const hot::HOME_MASK,
        boundary = const hot::BOUNDARY,
        f_slot = const hot::F_SLOT,
        f_t = const hot::F_T,
        f_tx = const hot::F_TX,
        table = const hot::TABLE,
        frame = const hot::FRAME,
        s_excl = const hot::S_EXCL,
        s_calls = const hot::S_CALLS,
        s_incl = const hot::S_INCL,
        s_active = const hot::S_ACTIVE,
        slow = sym exit_slow,
    )
}

/// What the runtime needs of these hooks, given to it at start.
pub fn described() -> Hooks {
    Hooks {
        addresses: [
            __cyg_profile_func_enter as *const () as usize,
            __cyg_profile_func_exit as *const () as usize,
        ],
        pair: enter_exit,
        nop_pair: enter_exit_nop,
    }
}

/// One enter/exit pair of the hooks for `func`, as instrumented code makes it (the cost
/// budget's calibration, `crate::calibrate`).
#[inline(never)]
pub fn enter_exit(func: usize) {
    let f = std::hint::black_box(func) as *mut u8;
    __cyg_profile_func_enter(f, std::ptr::null_mut());
    __cyg_profile_func_exit(f, std::ptr::null_mut());
}

/// A hook that does nothing, like glibc's: what the calibration subtracts (the calls
/// themselves are the instrumentation's cost, not the runtime's).
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
extern "C" fn nop_hook(_func: *mut u8, _call_site: *mut u8) {
    core::arch::naked_asm!("ret")
}

#[cfg(not(target_arch = "x86_64"))]
extern "C" fn nop_hook(_func: *mut u8, _call_site: *mut u8) {}

/// [`enter_exit`] with hooks that do nothing.
#[inline(never)]
pub fn enter_exit_nop(func: usize) {
    let f = std::hint::black_box(func) as *mut u8;
    nop_hook(f, std::ptr::null_mut());
    nop_hook(f, std::ptr::null_mut());
}

/// Entry hook where there is no fast path: always the general path.
#[cfg(not(target_arch = "x86_64"))]
#[no_mangle]
pub extern "C-unwind" fn __cyg_profile_func_enter(func: *mut u8, _call_site: *mut u8) {
    pool::enter_slow(func as usize, crate::sys::stack_pointer());
}

/// Exit hook where there is no fast path: always the general path.
#[cfg(not(target_arch = "x86_64"))]
#[no_mangle]
pub extern "C-unwind" fn __cyg_profile_func_exit(func: *mut u8, _call_site: *mut u8) {
    pool::exit_slow(func as usize, crate::sys::stack_pointer());
}
