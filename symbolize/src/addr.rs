//! What the symbolizer is asked about and answers with: addresses in an image, and names.

use std::sync::Arc;

/// A symbol name shared between caches and results.
pub type Name = Arc<str>;

/// How an address inside an image is expressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ImageAddr {
    /// ELF virtual address (runtime address − load bias).
    Virt(u64),
    /// Offset in the file (as in `/proc/<pid>/maps` and perf MMAP2 records).
    FileOffset(u64),
}
