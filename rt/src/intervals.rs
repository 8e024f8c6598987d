//! The ring of per-interval counters: where the hooks place every call in its interval
//! themselves, so that a flusher that runs late still writes each interval exactly.
//!
//! # The idea
//!
//! A thread counts its calls in its own block (cumulative counters, `block`). The block also
//! holds the interval its counts not yet handed over belong to (`ivs`) and, in its first cache
//! line, the timestamp at which that interval ends (`boundary`). The exit hook compares its
//! timestamp with the boundary (one `cmp`/`jae` on the fast path); the first exit past it
//! takes the general path, which *crosses*: it moves the thread's counts since its last
//! crossing — all of them belong to the interval it recorded then, because every later exit
//! would have crossed first — into this ring's entry of that interval (atomic adds), records
//! the new interval and its boundary, and then accounts the exit. The flusher writes an
//! interval once it has ended: it takes the counts of the threads that have not crossed yet
//! (idle or blocked threads) itself, waits for crossings in flight, then reads the entry and
//! gives its memory back. However late it runs, every call is in the entry of the interval it
//! returned in.
//!
//! # The ring
//!
//! [`RING_LEN`] entries, entry `x % RING_LEN` for interval `x` (the wall-clock ns since the
//! epoch over the interval length). Each entry holds its interval number (`label`, with a
//! `CLOSED` bit while the flusher writes it), per-function counters indexed by a dense
//! process-wide function id ([`Ring::func_id`], assigned when a function first enters any
//! thread's table), the calls not accounted (lost, overflows, dropped), the calls placed late
//! (`moved`) and the threads that exited. The flusher keeps the entries of the `RING_LEN`
//! intervals from the oldest it has not written yet labelled; an entry it has written is
//! relabelled for the interval `RING_LEN` later and its pages given back to the kernel.
//!
//! Memory: the ring is one anonymous mapping of `RING_LEN` × [`MAX_FUNCS`] × 32 B (32 MiB)
//! plus the function ids (384 KiB) of address space (`MAP_NORESERVE`), of which only touched
//! pages are resident: the entries' heads (one page), and per entry in use 32 B per function
//! called in it (765 functions: 6 pages), given back once the interval is written. On time,
//! two or three entries are in use (≈ 75 KiB at 765 functions); a flusher `n` intervals late
//! holds `n + 1`.
//!
//! # Who writes an entry
//!
//! * A thread crossing out of interval `x` (holding its block's crossing lock, see `block`):
//!   into entry `x`, even while the flusher closes it (the flusher waits for crossings in
//!   flight before it reads the entry).
//! * A thread whose block the flusher is taking over that very moment accounts its call
//!   straight into the entry of the interval now (*diverted*); a thread that exits hands its
//!   counts over like a crossing.
//! * The flusher itself, for the threads that have not crossed.
//!
//! Every writer registers in the entry's `writers` count before it reads the label, and the
//! flusher waits for it to drain after closing the entry (both sequentially consistent, so
//! either the writer sees `CLOSED` or the flusher sees the writer). A writer that finds its
//! interval already written (the flusher gave up waiting for it, or its diverted call was
//! made just before the boundary) places the counts in the interval now instead and counts
//! them as `moved`: totals stay exact. A writer whose interval is beyond the ring (the flusher
//! is more than `RING_LEN` intervals behind) cannot place its counts: they are counted as
//! unplaced ([`take_unplaced`]) and the flusher writes that interval `MISSED`.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};

use crate::sys::{self, OnceRef, Zeroable};

/// Intervals the ring holds: the most a flusher may be behind (the oldest interval it has not
/// written and the interval now) and still write every interval exactly.
pub const RING_LEN: u64 = 64;
/// Most distinct functions the ring can count in a process; the calls of further functions
/// are counted as overflows.
pub const MAX_FUNCS: usize = 16384;
const ID_BITS: u32 = 15;
const ID_SLOTS: usize = 1 << ID_BITS;
/// Bits of a function address in an id key (user-space addresses have fewer).
const ADDR_BITS: u32 = 48;
const ADDR_MASK: u64 = (1 << ADDR_BITS) - 1;
/// Label bit: the flusher is writing the entry.
const CLOSED: u64 = 1;

/// One function's counters in one interval.
#[derive(Debug)]
#[repr(C)]
struct Counts {
    calls: AtomicU64,
    excl: AtomicU64,
    incl: AtomicU64,
    unwound: AtomicU64,
}

#[derive(Debug)]
#[repr(C, align(4096))]
struct Funcs([Counts; MAX_FUNCS]);

/// One interval's counters beyond its functions' (one cache line; the 64 of them share one
/// page, so that the labels cost one resident page).
#[derive(Debug)]
#[repr(C, align(64))]
struct EntryHead {
    /// `interval << 1 | CLOSED`.
    label: AtomicU64,
    /// Writers between their registration and their last add.
    writers: AtomicU32,
    lost: AtomicU64,
    overflows: AtomicU64,
    dropped: AtomicU64,
    /// Calls counted here that returned in an earlier interval already written.
    moved: AtomicU64,
    /// Threads that exited in this interval.
    exited: AtomicU64,
}

/// One interval's entry of the ring: its head and its functions' counters.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    head: &'static EntryHead,
    funcs: &'static Funcs,
    index: u32,
}

/// The process-wide function ids.
#[derive(Debug)]
#[repr(C)]
struct Ids {
    /// `addr | (id + 1) << ADDR_BITS`; 0 = empty.
    keys: [AtomicU64; ID_SLOTS],
    /// Address of each id (0: an id given out and not used).
    addrs: [AtomicUsize; MAX_FUNCS],
    /// Ids given out (may exceed [`MAX_FUNCS`]: those failed).
    n: AtomicU32,
}

/// The ring and the function ids, in one mapping.
#[derive(Debug)]
#[repr(C, align(4096))]
pub struct Ring {
    heads: [EntryHead; RING_LEN as usize],
    funcs: [Funcs; RING_LEN as usize],
    ids: Ids,
}

// SAFETY: made only of atomics (and arrays of them), all-zero is a valid value (an empty ring,
// every label interval 0), no drop glue.
#[allow(unsafe_code)]
unsafe impl Zeroable for Ring {}

// SAFETY: as for `Ring` (part of it).
#[allow(unsafe_code)]
unsafe impl Zeroable for Funcs {}

static RING: OnceRef<Ring> = OnceRef::new();
static INTERVAL_NS: AtomicU64 = AtomicU64::new(1_000_000_000);
/// Highest interval a writer could not place (beyond the ring), +1; 0: none.
static OVERFLOW_HIGH: AtomicU64 = AtomicU64::new(0);
/// Counts no entry could take: calls, lost, overflows, dropped.
static UNPLACED: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// Maps the ring (once) and labels its entries from interval `oldest` on. False when the
/// memory cannot be had (the caller runs untraced).
pub fn setup(interval_ns: u64, oldest: u64) -> bool {
    INTERVAL_NS.store(interval_ns.max(1), Relaxed);
    if RING.get().is_none() {
        match sys::alloc_zeroed::<Ring>() {
            Some(r) => RING.set(r),
            None => return false,
        }
    }
    reset(oldest);
    true
}

/// The ring, once set up.
#[inline(always)]
pub fn get() -> Option<&'static Ring> {
    RING.get()
}

/// The interval length, ns.
#[inline(always)]
pub fn interval_ns() -> u64 {
    INTERVAL_NS.load(Relaxed)
}

/// The interval the wall clock is in now.
pub fn current() -> u64 {
    sys::realtime_ns() / interval_ns()
}

/// Empties every entry and labels them from `oldest` on. Only where no other thread writes
/// (start-up, a forked child's handler); the function ids are kept.
pub fn reset(oldest: u64) {
    let Some(r) = get() else { return };
    for h in &r.heads {
        h.writers.store(0, Relaxed);
    }
    r.relabel(oldest);
    OVERFLOW_HIGH.store(0, Relaxed);
    for u in &UNPLACED {
        u.store(0, Relaxed);
    }
}

/// The highest interval whose counts could not be placed (+1; 0 when none ever was).
pub fn overflow_high() -> u64 {
    OVERFLOW_HIGH.load(SeqCst)
}

/// Counts that could not be placed in any entry since the last call: calls, lost,
/// overflows, dropped.
pub fn take_unplaced() -> [u64; 4] {
    UNPLACED.each_ref().map(|a| a.swap(0, Relaxed))
}

/// Counts `calls` (and the unaccounted `lost`, `overflows`, `dropped`) that no entry could
/// take.
pub fn unplaced(calls: u64, lost: u64, overflows: u64, dropped: u64) {
    for (a, v) in UNPLACED.iter().zip([calls, lost, overflows, dropped]) {
        if v != 0 {
            a.fetch_add(v, Relaxed);
        }
    }
}

/// Where a writer's counts for an interval go.
#[derive(Debug)]
pub enum Place {
    /// Into this entry (the writer is registered: call [`Entry::leave`] after the adds);
    /// `moved`: not the interval asked for, which was already written, but the one now.
    At(Entry, bool),
    /// Nowhere: the interval is beyond the ring (count them with [`unplaced`]).
    Beyond,
}

impl Ring {
    /// The entry of interval `x`.
    #[inline(always)]
    pub fn entry(&'static self, x: u64) -> Entry {
        let i = (x % RING_LEN) as usize;
        Entry {
            head: &self.heads[i],
            funcs: &self.funcs[i],
            index: i as u32,
        }
    }

    /// Registers a writer of interval `x`'s counts. `crossing`: the writer holds its block's
    /// crossing lock for `x` (the flusher waits for it even once the entry is closed); other
    /// writers never add to a closed entry. An interval already written sends the writer to
    /// the interval now (`moved`).
    pub fn enter(&'static self, mut x: u64, crossing: bool) -> Place {
        let mut moved = false;
        for _ in 0..4 {
            let e = self.entry(x);
            e.head.writers.fetch_add(1, SeqCst);
            let l = e.head.label.load(SeqCst);
            let (lx, closed) = (l >> 1, l & CLOSED != 0);
            if lx == x && (!closed || (crossing && !moved)) {
                return Place::At(e, moved);
            }
            if lx < x {
                // The entry still holds an older interval: the flusher is more than the ring
                // behind. Recorded before leaving, so the flusher, which waits for writers
                // before it decides, sees it.
                OVERFLOW_HIGH.fetch_max(x + 1, SeqCst);
                e.leave();
                return Place::Beyond;
            }
            e.leave();
            // Already written (or being written): the interval now.
            let now = current();
            x = if now > x { now } else { x + 1 };
            moved = true;
        }
        OVERFLOW_HIGH.fetch_max(x + 1, SeqCst);
        Place::Beyond
    }

    /// The function id of `addr` for the counters (1-based; 0: none, the ring counts
    /// [`MAX_FUNCS`] functions). Called on the general path when a thread's table takes a
    /// new function: lock-free, no system call.
    pub fn func_id(&'static self, addr: usize) -> u32 {
        let a = addr as u64;
        if a == 0 || a & !ADDR_MASK != 0 {
            return 0;
        }
        let ids = &self.ids;
        // By address, not hashed: a program's functions lie close together, so their keys
        // take a few pages of the table, not all of them.
        let mut i = (a >> 4) as usize & (ID_SLOTS - 1);
        for _ in 0..ID_SLOTS {
            let slot = &ids.keys[i];
            let k = slot.load(Acquire);
            if k == 0 {
                let id = ids.n.fetch_add(1, Relaxed) as usize;
                if id >= MAX_FUNCS {
                    return 0;
                }
                ids.addrs[id].store(addr, Release);
                let key = a | ((id as u64 + 1) << ADDR_BITS);
                match slot.compare_exchange(0, key, AcqRel, Acquire) {
                    Ok(_) => return id as u32 + 1,
                    Err(other) => {
                        // Another thread took the slot: the id stays unused.
                        ids.addrs[id].store(0, Relaxed);
                        if other & ADDR_MASK == a {
                            return (other >> ADDR_BITS) as u32;
                        }
                    }
                }
            } else if k & ADDR_MASK == a {
                return (k >> ADDR_BITS) as u32;
            }
            i = (i + 1) & (ID_SLOTS - 1);
        }
        0
    }

    fn ids_in_use(&self) -> usize {
        (self.ids.n.load(Acquire) as usize).min(MAX_FUNCS)
    }

    // -----------------------------------------------------------------------------------------
    // The flusher's side.

    /// Closes interval `x`'s entry: from now on only crossings of `x` in flight (and the
    /// flusher) add to it.
    pub fn close(&'static self, x: u64) {
        self.entry(x).head.label.store(x << 1 | CLOSED, SeqCst);
    }

    /// Waits until no writer is in `x`'s entry, until `deadline` (monotonic ns). False when
    /// one still is then.
    pub fn wait_writers(&'static self, x: u64, deadline: u64) -> bool {
        let e = self.entry(x);
        loop {
            if e.head.writers.load(SeqCst) == 0 {
                return true;
            }
            if sys::monotonic_ns() >= deadline {
                return false;
            }
            sys::sleep_ns(WAIT_STEP_NS);
        }
    }

    /// Reads interval `x`'s entry: `f(addr, [calls, excl, incl, unwound])` per function with
    /// counts. `take`: the counts are taken (atomic swaps; writers may still add), else only
    /// read.
    pub fn read(&'static self, x: u64, take: bool, mut f: impl FnMut(usize, [u64; 4])) -> Head {
        let e = self.entry(x);
        let get = |a: &AtomicU64| {
            if take {
                a.swap(0, Relaxed)
            } else {
                a.load(Relaxed)
            }
        };
        let h = e.head;
        for id in 0..self.ids_in_use() {
            let c = &e.funcs.0[id];
            // Untouched pages read as the zero page: no memory is used by reading them.
            if c.calls.load(Relaxed) == 0 && c.excl.load(Relaxed) == 0 && c.incl.load(Relaxed) == 0
            {
                continue;
            }
            let v = [get(&c.calls), get(&c.excl), get(&c.incl), get(&c.unwound)];
            let addr = self.ids.addrs[id].load(Acquire);
            if addr != 0 && v != [0; 4] {
                f(addr, v);
            }
        }
        Head {
            lost: get(&h.lost),
            overflows: get(&h.overflows),
            dropped: get(&h.dropped),
            moved: get(&h.moved),
            exited: get(&h.exited),
        }
    }

    /// Empties every entry and labels them from interval `oldest` on (every entry closed and
    /// read first, see the flusher's `skip_gap`).
    pub fn relabel(&'static self, oldest: u64) {
        for k in 0..RING_LEN {
            let x = oldest + k;
            let e = self.entry(x);
            e.head.clear();
            sys::discard_tail(e.funcs, 0);
            e.head.label.store(x << 1, SeqCst);
        }
    }

    /// After interval `x` was read ([`Self::read`]): relabels its entry for interval
    /// `x + RING_LEN`. `quiet` (no writer was left in it, and it was read without taking):
    /// its counters are zeroed and its pages given back to the kernel; otherwise they were
    /// taken by the read and are left alone, so that the adds of a writer still in it count
    /// (in the later interval) rather than vanish.
    pub fn recycle(&'static self, x: u64, quiet: bool) {
        let e = self.entry(x);
        if quiet {
            e.head.clear();
            sys::discard_tail(e.funcs, 0);
        }
        e.head.label.store((x + RING_LEN) << 1, SeqCst);
    }
}

/// What an entry holds beyond its functions' counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Head {
    /// Exits that matched no open call.
    pub lost: u64,
    /// Calls refused for lack of room.
    pub overflows: u64,
    /// Calls not traced.
    pub dropped: u64,
    /// Calls counted here that returned in an earlier interval already written.
    pub moved: u64,
    /// Threads that exited in the interval.
    pub exited: u64,
}

/// The flusher's poll step while it waits for writers and crossings.
pub const WAIT_STEP_NS: u64 = 200_000;

/// A writer adds with locked adds, skipping zeros (the lines are shared with other writers).
#[inline(always)]
fn add(a: &AtomicU64, v: u64) {
    if v != 0 {
        a.fetch_add(v, Relaxed);
    }
}

impl Entry {
    /// Adds one function's counts (`fid` from [`Ring::func_id`]; 0 counts the calls as
    /// overflows).
    #[inline]
    pub fn add(&self, fid: u32, calls: u64, excl: u64, incl: u64, unwound: u64) {
        match fid
            .checked_sub(1)
            .and_then(|i| self.funcs.0.get(i as usize))
        {
            Some(c) => {
                add(&c.excl, excl);
                add(&c.incl, incl);
                add(&c.unwound, unwound);
                add(&c.calls, calls);
            }
            None => add(&self.head.overflows, calls),
        }
    }

    /// Adds calls not accounted.
    pub fn add_unaccounted(&self, lost: u64, overflows: u64, dropped: u64) {
        add(&self.head.lost, lost);
        add(&self.head.overflows, overflows);
        add(&self.head.dropped, dropped);
    }

    /// Counts `calls` placed here that returned in an earlier interval.
    pub fn add_moved(&self, calls: u64) {
        add(&self.head.moved, calls);
    }

    /// Counts a thread that exited in this interval.
    pub fn add_exited(&self) {
        self.head.exited.fetch_add(1, Relaxed);
    }

    /// The writer is done with this entry.
    #[inline]
    pub fn leave(&self) {
        self.head.writers.fetch_sub(1, Release);
    }

    /// The position of this entry in the ring (for a writer's repair mark).
    pub fn index(&self) -> u32 {
        self.index
    }
}

impl EntryHead {
    fn clear(&self) {
        for a in [
            &self.lost,
            &self.overflows,
            &self.dropped,
            &self.moved,
            &self.exited,
        ] {
            a.store(0, Relaxed);
        }
    }
}

/// A writer abandoned (a signal handler left the general path with `siglongjmp`) while
/// registered in entry `index`: unregisters it.
pub fn abandoned_writer(index: u32) {
    if let Some(h) = get().and_then(|r| r.heads.get(index as usize)) {
        h.writers.fetch_sub(1, Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ring, labelled from ten intervals ago (1 s intervals).
    fn ring() -> &'static Ring {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| assert!(setup(1_000_000_000, current() - 10)));
        get().unwrap()
    }

    #[test]
    fn writers_find_their_interval_the_interval_now_or_nothing() {
        let r = ring();
        let now = current();
        let x = now - 10;
        let fid = r.func_id(0x3000);
        // An interval the ring holds: its entry.
        let Place::At(e, false) = r.enter(x, false) else {
            panic!("interval {x} is in the ring")
        };
        e.add(fid, 3, 30, 300, 1);
        e.leave();
        // Closed: a crossing of it may still add, another writer goes to the interval now.
        r.close(x);
        let Place::At(e, false) = r.enter(x, true) else {
            panic!("a crossing adds to its closed interval")
        };
        e.add(fid, 1, 10, 100, 0);
        e.leave();
        let Place::At(e, true) = r.enter(x, false) else {
            panic!("moved")
        };
        assert!(e.index() != r.entry(x).index());
        e.leave();
        assert!(r.wait_writers(x, sys::monotonic_ns()));
        let mut got = Vec::new();
        r.read(x, false, |addr, v| got.push((addr, v)));
        assert_eq!(got, vec![(0x3000, [4, 40, 400, 1])]);
        r.recycle(x, true);
        let mut again = Vec::new();
        r.read(x, false, |addr, v| again.push((addr, v)));
        assert!(again.is_empty(), "recycled: {again:?}");
        // Written already (relabelled a ring later): the interval now.
        assert!(matches!(r.enter(x, true), Place::At(e, true) if { e.leave(); true }));
        // Beyond the ring: nowhere, and said.
        assert!(matches!(r.enter(now + 2 * RING_LEN, false), Place::Beyond));
        assert_eq!(overflow_high(), now + 2 * RING_LEN + 1);
    }

    #[test]
    fn ids_are_dense_and_stable() {
        let r = ring();
        let a = r.func_id(0x1000);
        let b = r.func_id(0x2000);
        assert!(a >= 1 && b >= 1 && a != b);
        assert_eq!(r.func_id(0x1000), a);
        assert_eq!(r.func_id(0), 0);
        assert_eq!(r.func_id(1 << 60), 0);
    }
}
