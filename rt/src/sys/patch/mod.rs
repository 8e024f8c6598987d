//! Rewriting the hook call sites of untraced functions to NOPs, as ftrace and uftrace's dynamic
//! tracing do with their `mcount` / `__fentry__` sites: a call that is gone costs nothing.
//!
//! Two halves:
//!
//! * **Noting** ([`note_site`], from a hook's general path): a hook call whose function is not
//!   traced (excluded, or demoted by the cost budget) hands its return address over. It goes
//!   into a process-wide set (lock-free, fixed size, no allocation, no system call); a site
//!   already there costs one hash probe. The general path sees an untraced function's first
//!   calls in each thread, then one of its quiet calls in `block::QUIET_NOTE_EVERY`.
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
//! code changed meanwhile (by anyone) is left alone. A site that fits neither gets a short form
//! in the word of its first bytes: a 2-byte `jmp` over the rest, or, when only its first byte
//! is in that word, a new opcode that makes the same bytes an instruction of the same length
//! writing only what a call clobbers (`site::short_form`).
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

use std::sync::atomic::Ordering::{AcqRel, Acquire, Release};

mod noted;
mod site;

pub use noted::*;
use site::*;

/// What the patcher needs of the symbol tables (the flusher gives it).
pub trait Functions {
    /// The body (start, end) of the function that starts at `func`.
    fn body(&mut self, func: usize) -> Option<(usize, usize)>;
    /// The whole function whose code holds `addr` (its body first, then its `.cold` parts),
    /// when its code may be analysed.
    fn enclosing(&mut self, addr: usize) -> Option<Vec<(usize, usize)>>;
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
    // Inside the loader lock, once (the first object's call stops the iteration).
    crate::sys::for_each_object(|_, _| {
        locked(&mut job);
        false
    });
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
        let (at, width) = block_of(found[0]);
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
        let (at, width) = block_of(site);
        assert!(swap_in_nop(site, at, width));
        let site6 = Site {
            addr: base + 192,
            len: 6,
            tail: false,
        };
        let (at, width) = block_of(site6);
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
            let (at, width) = block_of(site);
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
        let (at, width) = block_of(site);
        assert_eq!((at, width), (base + off - 4, 8));
        assert!(swap_in_nop(site, at, width));
        let after: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        assert_eq!(after[off..off + 2], [0xeb, 0x03]);
        assert_eq!(after[off + 2..], before[off + 2..]);
        assert_eq!(after[..off], before[..off]);
    }

    /// A call whose first byte is the last of a 16-byte block: its opcode alone changes, and
    /// the bytes then read as one instruction of the call's length that only writes what a
    /// call may clobber (the flags; `%rdx`).
    #[test]
    fn a_call_split_after_its_first_byte_changes_its_opcode_alone() {
        use iced_x86::{Decoder, DecoderOptions, Mnemonic, Register};
        let (words, base) = code(1);
        // Copies of the two calls (`e8` at 128, `ff 15` at 192) with their first byte at
        // offset 15 of a 16-byte block.
        let bytes = |w: &Vec<u64>| -> Vec<u8> { w.iter().flat_map(|w| w.to_le_bytes()).collect() };
        let mut b = bytes(&words);
        let at5 = (320..336).find(|o| (base + o) % 16 == 15).unwrap();
        let at6 = (352..368).find(|o| (base + o) % 16 == 15).unwrap();
        b.copy_within(128..133, at5);
        b.copy_within(192..198, at6);
        let mut words: Vec<u64> = b
            .chunks(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        let base = words.as_mut_ptr() as usize;
        for (off, len, op, mnemonic, writes) in [
            (at5, 5, 0x3d, Mnemonic::Cmp, None),
            (at6, 6, 0x8d, Mnemonic::Lea, Some(Register::EDX)),
        ] {
            let site = Site {
                addr: base + off,
                len,
                tail: false,
            };
            let (at, width) = block_of(site);
            assert_eq!((at, width), (base + off - 7, 8));
            let before = bytes(&words);
            assert!(swap_in_nop(site, at, width));
            let after = bytes(&words);
            assert_eq!(after[off], op);
            assert_eq!(after[..off], before[..off]);
            assert_eq!(after[off + 1..], before[off + 1..]);
            let mut d = Decoder::with_ip(64, &after[off..off + len], 0, DecoderOptions::NONE);
            let i = d.decode();
            assert!(!i.is_invalid());
            assert_eq!((i.len(), i.mnemonic()), (len, mnemonic));
            assert_eq!(i.op0_register(), writes.unwrap_or(Register::EAX));
        }
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

    /// A hook reached by an untraced function's tail jump returns to its caller: the address
    /// noted is that of a call of the function itself (not kept: the tail jump is patched).
    #[test]
    fn returns_from_the_function_itself_are_told_apart() {
        let hook = 0x7f00_1234_5670usize;
        let (_words, base) = code(hook);
        let seg = code_segment(base);
        let mem = Memory { segments: &seg };
        // `call stub` (the stub's GOT slot holds `hook`), `call *GOT`, `call base+32`.
        assert!(returns_from(&mem, base + 133, hook));
        assert!(returns_from(&mem, base + 198, hook));
        assert!(returns_from(&mem, base + 261, base + 32));
        assert!(!returns_from(&mem, base + 261, hook));
        assert!(!returns_from(&mem, base + 133, hook + 16));
        assert!(!returns_from(&mem, base + 140, hook), "no call ends there");
    }

    #[test]
    fn blocks() {
        let s = |addr, len| Site {
            addr,
            len,
            tail: false,
        };
        assert_eq!(block_of(s(0x1000, 5)), (0x1000, 8));
        assert_eq!(block_of(s(0x1003, 5)), (0x1000, 8));
        assert_eq!(block_of(s(0x1002, 6)), (0x1000, 8));
        assert_eq!(block_of(s(0x100b, 5)), (0x1008, 8));
        if has_cx16() {
            assert_eq!(block_of(s(0x1004, 5)), (0x1000, 16));
            assert_eq!(block_of(s(0x1006, 5)), (0x1000, 16));
        }
        // Across both: the word of its first two bytes (a short jmp over the rest).
        assert_eq!(block_of(s(0x100c, 5)), (0x1008, 8));
        assert_eq!(block_of(s(0x100e, 6)), (0x1008, 8));
        // Its first byte alone at the end of a 16-byte block: the word of that byte (its
        // opcode alone changes, see `short_form`).
        assert_eq!(block_of(s(0x100f, 5)), (0x1008, 8));
        assert_eq!(block_of(s(0x100f, 6)), (0x1008, 8));
        // A tail jump needs one byte (`ret`).
        let tail = Site {
            addr: 0x100f,
            len: 5,
            tail: true,
        };
        assert_eq!(block_of(tail), (0x1008, 8));
    }
}
