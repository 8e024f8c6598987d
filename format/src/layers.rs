//! Layer-boundary I/O events ([`RecordKind::Layers`](crate::RecordKind::Layers), kind 14): seed 003 (Lu & Shen, §3)
//! traces four generic events of an I/O request at the boundaries of the layers it passes
//! through — *admission* from the layer above, *issue* to the layer below, *completion* from the
//! layer below, *callback* to the layer above — and derives every characteristic (request size,
//! sequentiality, concurrency, idleness, throughput, time per stage) from them.
//!
//! A record holds one stretch of events as the writer collected them (the tracer drains its
//! per-thread buffers every 100 ms; the sampler writes one record per profile interval), with
//! a table of the layers it names. Events carry absolute wall-clock times: readers place them in
//! intervals themselves, and records of one writer simply add up.
//!
//! Payload (little-endian):
//!
//! | offset | field |
//! | --- | --- |
//! | 0 | `span_start_ns` u64: wall-clock start of the stretch (≤ every event's time) |
//! | 8 | `span_end_ns` u64: its end |
//! | 16 | `flags` u32 (none defined; zero) |
//! | 20 | `n_layers` u32 |
//! | 24 | `n_events` u32 |
//! | 28 | `dropped` u32: events the writer lost in the stretch (buffer full, nested in a signal handler) |
//! | 32 | `n_layers` × layer: `id` u16, `name_len` u16, `level` i32, name bytes padded to 8 |
//! | … | `n_events` × [`LAYER_EVENT_SIZE`] bytes: see [`LayerEvent`] |

use crate::layout::pad8;

/// Fixed part of a [`RecordKind::Layers`](crate::RecordKind::Layers) payload, in bytes.
pub const LAYERS_FIXED_SIZE: usize = 32;
/// Size of one event of a [`RecordKind::Layers`](crate::RecordKind::Layers) record.
pub const LAYER_EVENT_SIZE: usize = 56;
/// Longest layer name, in bytes.
pub const MAX_LAYER_NAME: usize = 64;

/// The four generic events of seed 003 §3 (the `kind` of a [`LayerEvent`]).
pub mod layer_kind {
    /// The layer receives the request from the layer above.
    pub const ADMIT: u8 = 1;
    /// The layer passes the request to the layer below.
    pub const ISSUE: u8 = 2;
    /// The layer learns from the layer below that the request completed.
    pub const COMPLT: u8 = 3;
    /// The layer tells the layer above that the request completed.
    pub const CALLBACK: u8 = 4;

    /// The event's name as seed 003 writes it (`ADMIT`, `ISSUE`, `COMPLT`, `CALLBACK`).
    pub fn name(kind: u8) -> &'static str {
        match kind {
            ADMIT => "ADMIT",
            ISSUE => "ISSUE",
            COMPLT => "COMPLT",
            CALLBACK => "CALLBACK",
            _ => "?",
        }
    }
}

/// What a request does (the `op` of a [`LayerEvent`]).
pub mod layer_op {
    /// Anything else (a metadata operation, a sync).
    pub const OTHER: u8 = 0;
    /// Reads data.
    pub const READ: u8 = 1;
    /// Writes data.
    pub const WRITE: u8 = 2;

    /// `READ`, `WRITE` or `OTHER`.
    pub fn name(op: u8) -> &'static str {
        match op {
            READ => "READ",
            WRITE => "WRITE",
            _ => "OTHER",
        }
    }
}

/// Names and levels of the layers culprit itself observes. A layer's *level* orders the stack:
/// higher is closer to the application. Layers a program marks itself get levels above
/// [`layer_level::APP`].
pub mod layer_level {
    /// The block layer (the sampler's `block:block_rq_issue` / `block_rq_complete`).
    pub const BLOCK: i32 = 100;
    /// System calls (the sampler's `syscalls:sys_enter/exit_pread64` / `pwrite64`).
    pub const SYSCALL: i32 = 200;
    /// The C library's I/O calls (the runtime's `read`, `write`, `pread`, … with
    /// `CULPRIT_IO=1`), and its POSIX AIO emulation (`aio_read`, `aio_write`).
    pub const LIBC: i32 = 300;
    /// Layers a program marks itself lie above this (the first it registers is the highest).
    pub const APP: i32 = 1000;
    /// Name of the block layer.
    pub const BLOCK_NAME: &str = "block";
    /// Name of the system-call layer.
    pub const SYSCALL_NAME: &str = "syscall";
    /// Name of the C library's synchronous I/O calls.
    pub const LIBC_NAME: &str = "libc";
    /// Name of the C library's POSIX AIO emulation.
    pub const LIBC_AIO_NAME: &str = "libc-aio";
}

/// `offset` of an event whose request has no file position (`read`, `write`).
pub const NO_OFFSET: u64 = u64::MAX;

/// One layer of a [`RecordKind::Layers`](crate::RecordKind::Layers) record's table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerDesc<'a> {
    /// Id the record's events use.
    pub id: u16,
    /// Order in the stack: higher is closer to the application (see [`layer_level`]).
    pub level: i32,
    /// Name (at most [`MAX_LAYER_NAME`] bytes are written).
    pub name: std::borrow::Cow<'a, str>,
}

/// One event at a layer boundary.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayerEvent {
    /// Wall-clock ns since the epoch.
    pub t_ns: u64,
    /// Request id, unique among the layer's outstanding requests of one process.
    pub req: u64,
    /// File or object id (writer-defined; 0 unknown): sequential streams are per object.
    pub obj: u64,
    /// Byte offset in the object, [`NO_OFFSET`] when the request has none.
    pub offset: u64,
    /// Bytes requested (ADMIT, ISSUE) or done (COMPLT, CALLBACK; may be fewer).
    pub bytes: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id (0 unknown).
    pub tid: u32,
    /// Layer id (from the record's table).
    pub layer: u16,
    /// [`layer_kind`].
    pub kind: u8,
    /// [`layer_op`].
    pub op: u8,
    /// The file descriptor, −1 when there is none.
    pub fd: i32,
}

impl LayerEvent {
    /// Encodes the event into its [`LAYER_EVENT_SIZE`] bytes.
    pub fn to_bytes(&self) -> [u8; LAYER_EVENT_SIZE] {
        let mut b = [0u8; LAYER_EVENT_SIZE];
        b[0..8].copy_from_slice(&self.t_ns.to_le_bytes());
        b[8..16].copy_from_slice(&self.req.to_le_bytes());
        b[16..24].copy_from_slice(&self.obj.to_le_bytes());
        b[24..32].copy_from_slice(&self.offset.to_le_bytes());
        b[32..40].copy_from_slice(&self.bytes.to_le_bytes());
        b[40..44].copy_from_slice(&self.pid.to_le_bytes());
        b[44..48].copy_from_slice(&self.tid.to_le_bytes());
        b[48..50].copy_from_slice(&self.layer.to_le_bytes());
        b[50] = self.kind;
        b[51] = self.op;
        b[52..56].copy_from_slice(&self.fd.to_le_bytes());
        b
    }

    fn from_bytes(b: &[u8]) -> LayerEvent {
        let u64at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let u32at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        LayerEvent {
            t_ns: u64at(0),
            req: u64at(8),
            obj: u64at(16),
            offset: u64at(24),
            bytes: u64at(32),
            pid: u32at(40),
            tid: u32at(44),
            layer: u16::from_le_bytes([b[48], b[49]]),
            kind: b[50],
            op: b[51],
            fd: u32at(52) as i32,
        }
    }
}

/// Fixed fields of a [`RecordKind::Layers`](crate::RecordKind::Layers) record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayersHead {
    /// Wall-clock start of the stretch the events were collected over, at or before every
    /// event's time: where the writer's previous stretch ended, or its earliest event when an
    /// event was stamped before it was collected (a call's start, pushed at its return).
    pub span_start_ns: u64,
    /// Its end, at or after every event's time.
    pub span_end_ns: u64,
    /// Events the writer lost in the stretch.
    pub dropped: u32,
}

/// A decoded [`RecordKind::Layers`](crate::RecordKind::Layers) record.
#[derive(Clone, Debug)]
pub struct LayersRec<'a> {
    /// Wall-clock start of the stretch.
    pub span_start_ns: u64,
    /// Its end.
    pub span_end_ns: u64,
    /// Flags (none defined).
    pub flags: u32,
    /// Events the writer lost in the stretch.
    pub dropped: u32,
    n_layers: u32,
    layers: &'a [u8],
    n_events: u32,
    events: &'a [u8],
}

impl<'a> LayersRec<'a> {
    /// The layer table.
    pub fn layers(&self) -> impl Iterator<Item = LayerDesc<'a>> + 'a {
        let b = self.layers;
        let mut pos = 0usize;
        (0..self.n_layers).map(move |_| {
            let len = u16::from_le_bytes([b[pos + 2], b[pos + 3]]) as usize;
            let d = LayerDesc {
                id: u16::from_le_bytes([b[pos], b[pos + 1]]),
                level: i32::from_le_bytes(b[pos + 4..pos + 8].try_into().expect("4 bytes")),
                name: String::from_utf8_lossy(&b[pos + 8..pos + 8 + len]),
            };
            pos += 8 + pad8(len);
            d
        })
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.n_events as usize
    }

    /// True without events.
    pub fn is_empty(&self) -> bool {
        self.n_events == 0
    }

    /// The events, in the order the writer collected them (per thread in time order; not
    /// sorted across threads).
    pub fn events(&self) -> impl ExactSizeIterator<Item = LayerEvent> + 'a {
        let b = self.events;
        (0..self.n_events as usize)
            .map(move |i| LayerEvent::from_bytes(&b[i * LAYER_EVENT_SIZE..][..LAYER_EVENT_SIZE]))
    }
}

/// Decodes a [`RecordKind::Layers`](crate::RecordKind::Layers) payload, checking every length.
pub(crate) fn decode(p: &[u8]) -> Result<LayersRec<'_>, &'static str> {
    if p.len() < LAYERS_FIXED_SIZE {
        return Err("layers record too short");
    }
    let le32 = |o: usize| u32::from_le_bytes(p[o..o + 4].try_into().expect("4 bytes"));
    let le64 = |o: usize| u64::from_le_bytes(p[o..o + 8].try_into().expect("8 bytes"));
    let n_layers = le32(20);
    let n_events = le32(24);
    let mut pos = LAYERS_FIXED_SIZE;
    for _ in 0..n_layers {
        if pos + 8 > p.len() {
            return Err("layer entry exceeds record");
        }
        let len = u16::from_le_bytes([p[pos + 2], p[pos + 3]]) as usize;
        pos += 8 + pad8(len);
        if pos > p.len() {
            return Err("layer name exceeds record");
        }
    }
    let layers = &p[LAYERS_FIXED_SIZE..pos];
    let need = (n_events as usize)
        .checked_mul(LAYER_EVENT_SIZE)
        .and_then(|n| n.checked_add(pos))
        .ok_or("event count overflows")?;
    if need > p.len() {
        return Err("event count exceeds record length");
    }
    Ok(LayersRec {
        span_start_ns: le64(0),
        span_end_ns: le64(8),
        flags: le32(16),
        dropped: le32(28),
        n_layers,
        layers,
        n_events,
        events: &p[pos..need],
    })
}
