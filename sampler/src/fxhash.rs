//! A fast, non-cryptographic hasher (the multiply-rotate "Fx" hash rustc uses) for the maps on
//! the per-sample path, keyed by pids, addresses and small ids: SipHash's DoS resistance buys
//! nothing there and costs a measurable share of the sampler's CPU time.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// The hasher.
#[derive(Clone, Copy, Debug, Default)]
pub struct FxHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// A `HashMap` with [`FxHasher`].
pub type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_work_and_hashes_spread() {
        let mut m: FxHashMap<(u32, u64), u32> = FxHashMap::default();
        for i in 0..10_000u32 {
            m.insert((i, u64::from(i) << 12), i);
        }
        assert_eq!(m.len(), 10_000);
        assert_eq!(m[&(77, 77 << 12)], 77);
        let h = |v: u64| {
            let mut x = FxHasher::default();
            x.write_u64(v);
            x.finish()
        };
        assert_ne!(h(1), h(2));
    }
}
