//! Reading little-endian fields out of a checked payload: the decoders' one set of helpers.
//! Callers have checked the lengths first (the `expect`s cannot fire on a checked payload).

/// The `u16` at byte `at`.
pub(crate) fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

/// The `u32` at byte `at`.
pub(crate) fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// The `u64` at byte `at`.
pub(crate) fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The bytes of `n` fixed-size entries of `size` bytes after a fixed part of `fixed` bytes,
/// or why they do not fit in the payload.
pub(crate) fn entries_slice(
    p: &[u8],
    fixed: usize,
    n: u32,
    size: usize,
) -> Result<&[u8], &'static str> {
    let need = (n as usize)
        .checked_mul(size)
        .and_then(|x| x.checked_add(fixed))
        .ok_or("entry count overflows")?;
    if need > p.len() {
        return Err("entry count exceeds record length");
    }
    Ok(&p[fixed..need])
}
