//! The block layer of seed 003's I/O stack (§3: "the block device layer" at the bottom): each
//! request a node's process had queued (`block:block_bio_queue` names the process), from its
//! dispatch to the device (`block:block_rq_issue`, ISSUE) to its completion
//! (`block:block_rq_complete`, COMPLT), as layer `block` (level 100) in the node's samples file
//! (with `culprit sample --layers`).
//!
//! A request is keyed by (device, first sector): `req` is the sector, `obj` the device,
//! `offset` the sector × 512, the bytes its sectors cover. Requests without data (flushes) and
//! requests not seen queued by a node's process (before the sampler started, or another
//! program's) are not recorded. A request the block layer merged into another one completes as
//! part of it.

use culprit_format::{layer_kind, layer_level, layer_op, LayerEvent};
use rustc_hash::FxHashMap;

use crate::nodes::NodeIdx;

/// The tracepoints the block layer needs (`culprit sample --layers` adds those missing).
pub const TRACEPOINTS: &[&str] = &[
    "block:block_bio_queue",
    "block:block_rq_issue",
    "block:block_rq_complete",
];

/// Layer id of the block layer in the samples file's Layers records.
pub const LAYER_ID: u16 = 1;
/// Its name.
pub const LAYER_NAME: &str = layer_level::BLOCK_NAME;
/// Its level.
pub const LAYER_LEVEL: i32 = layer_level::BLOCK;

/// Beyond this many requests at the device, the oldest are forgotten (completions lost).
const PENDING_MAX: usize = 1 << 16;

/// Sector size of the block tracepoints' `sector` and `nr_sector`.
pub const SECTOR: u64 = 512;

/// True when a tracepoint's `rwbs` (e.g. `WS`, `R`, `FWS`) names a write.
pub fn rwbs_writes(rwbs: &[u8]) -> Option<bool> {
    let s = rwbs.split(|&b| b == 0).next().unwrap_or(&[]);
    if s.contains(&b'W') {
        Some(true)
    } else if s.contains(&b'R') {
        Some(false)
    } else {
        None
    }
}

#[derive(Clone, Copy, Debug)]
struct Issued {
    wall: u64,
    node: NodeIdx,
    pid: u32,
    tid: u32,
    bytes: u64,
    write: bool,
}

/// Pairs dispatches with completions, per (device, sector).
#[derive(Debug, Default)]
pub struct Pairing {
    pending: FxHashMap<(u32, u64), Issued>,
}

impl Pairing {
    /// A request of `node`'s process `pid` (thread `tid`, which queued it) went to the
    /// device at `wall`.
    #[allow(clippy::too_many_arguments)]
    pub fn issue(
        &mut self,
        wall: u64,
        dev: u32,
        sector: u64,
        node: NodeIdx,
        pid: u32,
        tid: u32,
        bytes: u64,
        write: bool,
    ) {
        if bytes == 0 {
            return;
        }
        if self.pending.len() >= PENDING_MAX {
            self.pending.clear();
        }
        self.pending.insert(
            (dev, sector),
            Issued {
                wall,
                node,
                pid,
                tid,
                bytes,
                write,
            },
        );
    }

    /// The request at (`dev`, `sector`) completed at `wall`: its node and ISSUE and COMPLT
    /// events, when its dispatch was seen.
    pub fn complete(
        &mut self,
        wall: u64,
        dev: u32,
        sector: u64,
        error: bool,
    ) -> Option<(NodeIdx, [LayerEvent; 2])> {
        let i = self.pending.remove(&(dev, sector))?;
        let ev = |t_ns: u64, kind: u8, bytes: u64| LayerEvent {
            t_ns,
            req: sector,
            obj: u64::from(dev),
            offset: sector.saturating_mul(SECTOR),
            bytes,
            pid: i.pid,
            tid: i.tid,
            layer: LAYER_ID,
            kind,
            op: if i.write {
                layer_op::WRITE
            } else {
                layer_op::READ
            },
            fd: -1,
        };
        let done = if error { 0 } else { i.bytes };
        Some((
            i.node,
            [
                ev(i.wall, layer_kind::ISSUE, i.bytes),
                ev(wall.max(i.wall), layer_kind::COMPLT, done),
            ],
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatches_pair_with_completions_by_device_and_sector() {
        let mut p = Pairing::default();
        p.issue(100, 8, 2048, 1, 40, 41, 65536, false);
        p.issue(110, 8, 4096, 2, 50, 50, 0, true); // a flush: not recorded
        assert!(p.complete(120, 8, 4096, false).is_none());
        assert!(p.complete(120, 9, 2048, false).is_none(), "another device");
        let (node, [i, c]) = p.complete(150, 8, 2048, false).unwrap();
        assert_eq!(node, 1);
        assert_eq!(
            (i.t_ns, i.kind, i.bytes, i.offset),
            (100, layer_kind::ISSUE, 65536, 2048 * 512)
        );
        assert_eq!(
            (c.t_ns, c.kind, c.bytes, c.pid, c.obj),
            (150, layer_kind::COMPLT, 65536, 40, 8)
        );
        assert!(
            p.complete(160, 8, 2048, false).is_none(),
            "already completed"
        );
        assert_eq!(rwbs_writes(b"WS\0\0"), Some(true));
        assert_eq!(rwbs_writes(b"RA\0"), Some(false));
        assert_eq!(rwbs_writes(b"FF\0"), None);
    }
}
