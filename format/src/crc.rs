//! CRC-32 (IEEE 802.3, reflected, as zlib's `crc32`), table-driven. Records are small and written
//! at most a few times a second, so a simple byte-at-a-time table is fast enough and keeps the
//! crate free of dependencies.

const fn make_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

static TABLE: [u32; 256] = make_table();

/// CRC-32 of `bytes` (same value as zlib's `crc32(0, bytes, len)`).
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut c = Crc32::new();
    c.update(bytes);
    c.finish()
}

/// A CRC-32 computed over several pieces, as if they were one.
#[derive(Clone, Copy, Debug)]
pub struct Crc32(u32);

impl Crc32 {
    /// Nothing yet.
    pub fn new() -> Crc32 {
        Crc32(!0)
    }

    /// Adds `bytes`.
    pub fn update(&mut self, bytes: &[u8]) {
        let mut c = self.0;
        for &b in bytes {
            c = TABLE[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
        }
        self.0 = c;
    }

    /// The CRC of everything added.
    pub fn finish(self) -> u32 {
        !self.0
    }
}

impl Default for Crc32 {
    fn default() -> Self {
        Crc32::new()
    }
}

/// The checksum of a record, started from its 16-byte header `head`: by the rule of format
/// `version`, the header's kind, flags, length and reserved word are covered (from
/// [`HEADER_CRC_SINCE`](crate::HEADER_CRC_SINCE)), or only the payload (older files). Add the
/// payload with [`Crc32::update`].
pub fn record_crc(head: &[u8], version: u16) -> Crc32 {
    let mut c = Crc32::new();
    if version >= crate::layout::HEADER_CRC_SINCE {
        c.update(&head[0..8]);
        c.update(&head[12..16]);
    }
    c
}

#[cfg(test)]
mod tests {
    use super::{crc32, Crc32};

    #[test]
    fn known_values() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(
            crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414F_A339
        );
        let mut c = Crc32::new();
        c.update(b"1234");
        c.update(b"56789");
        assert_eq!(c.finish(), 0xCBF4_3926);
    }
}
