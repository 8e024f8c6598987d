//! The system-call layer of seed 003's I/O stack (§3: events at layer boundaries): each
//! `pread64` / `pwrite64` a process of a node makes, from the `syscalls:sys_enter_*` /
//! `sys_exit_*` tracepoints, becomes an ISSUE (entry) and a COMPLT (exit) of layer `syscall`
//! (level 200) in the node's samples file (Layers records, kind 14).
//!
//! This reaches what no interposer can: glibc's POSIX AIO helper threads call `pread` inside
//! the C library, so the runtime sees a request enter the AIO emulation (`aio_read`) and come
//! back (`aio_return`), but only these tracepoints show when the library issues it to the
//! kernel and how many it has issued at once (seed 003 §4.2's "concurrency at the OS level").
//!
//! A request is keyed by its thread (a thread has one system call at a time): `req` is the
//! thread id, `obj` the file descriptor (sequential runs are found per descriptor), `offset`
//! the `pos` argument, the bytes asked at entry and done at exit (0 for an error).

use culprit_format::{layer_kind, layer_level, layer_op, LayerEvent};
use rustc_hash::FxHashMap;

/// The tracepoints `culprit sample --layers` adds.
pub const TRACEPOINTS: &[&str] = &[
    "syscalls:sys_enter_pread64",
    "syscalls:sys_exit_pread64",
    "syscalls:sys_enter_pwrite64",
    "syscalls:sys_exit_pwrite64",
];

/// Layer id of the system calls in the samples file's Layers records.
pub const LAYER_ID: u16 = 0;
/// Its name.
pub const LAYER_NAME: &str = layer_level::SYSCALL_NAME;
/// Its level.
pub const LAYER_LEVEL: i32 = layer_level::SYSCALL;

/// Beyond this many threads inside a call, the oldest entries are forgotten (threads that
/// died inside one, or whose exit record was lost).
const PENDING_MAX: usize = 1 << 16;

/// True for `syscalls:sys_enter_pwrite64` and its exit (the call writes).
pub fn writes(tracepoint: &str) -> bool {
    tracepoint.ends_with("pwrite64")
}

/// A call entered: (wall ns, fd, count, pos, write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entered {
    wall: u64,
    fd: u64,
    count: u64,
    pos: u64,
    write: bool,
}

/// Pairs entries with exits, per thread.
#[derive(Debug, Default)]
pub struct Pairing {
    pending: FxHashMap<u32, Entered>,
}

impl Pairing {
    /// `tid` entered a call at `wall`.
    pub fn enter(&mut self, wall: u64, tid: u32, fd: u64, count: u64, pos: u64, write: bool) {
        if self.pending.len() >= PENDING_MAX {
            self.pending.clear();
        }
        self.pending.insert(
            tid,
            Entered {
                wall,
                fd,
                count,
                pos,
                write,
            },
        );
    }

    /// `tid` of `pid` left its call at `wall` with `ret`: the ISSUE and COMPLT events, when its
    /// entry was seen (a call entered before the sampler started is not recorded).
    pub fn exit(&mut self, wall: u64, pid: u32, tid: u32, ret: i64) -> Option<[LayerEvent; 2]> {
        let e = self.pending.remove(&tid)?;
        let ev = |t_ns: u64, kind: u8, bytes: u64| LayerEvent {
            t_ns,
            req: u64::from(tid),
            obj: e.fd,
            offset: e.pos,
            bytes,
            pid,
            tid,
            layer: LAYER_ID,
            kind,
            op: if e.write {
                layer_op::WRITE
            } else {
                layer_op::READ
            },
            fd: e.fd.min(i32::MAX as u64) as i32,
        };
        Some([
            ev(e.wall, layer_kind::ISSUE, e.count),
            ev(wall.max(e.wall), layer_kind::COMPLT, ret.max(0) as u64),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_pair_with_exits_per_thread() {
        let mut p = Pairing::default();
        p.enter(100, 7, 3, 4096, 8192, false);
        p.enter(110, 8, 4, 512, 0, true);
        assert!(p.exit(120, 1, 9, 5).is_none(), "no entry seen");
        let [i, c] = p.exit(150, 1, 7, 4096).unwrap();
        assert_eq!(
            (i.t_ns, i.kind, i.bytes, i.offset),
            (100, layer_kind::ISSUE, 4096, 8192)
        );
        assert_eq!(
            (c.t_ns, c.kind, c.bytes, c.req),
            (150, layer_kind::COMPLT, 4096, 7)
        );
        assert_eq!((c.op, c.obj, c.fd, c.pid), (layer_op::READ, 3, 3, 1));
        let [_, c] = p.exit(160, 1, 8, -5).unwrap();
        assert_eq!((c.op, c.bytes), (layer_op::WRITE, 0));
        assert!(p.exit(170, 1, 7, 1).is_none(), "already paired");
    }
}
