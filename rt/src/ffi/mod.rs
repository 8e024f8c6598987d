//! The exported C functions: the layer above the runtime. The two `-finstrument-functions`
//! hooks ([`hooks`]: the fast path in assembly, the general path in `crate::pool`); the C API of
//! `include/culprit.h`, `_exit`/`_Exit` and the constructor ([`api`]); the C library's I/O
//! functions the runtime interposes ([`interpose`]). Each is a thin shell over the safe code of
//! the layers below, and nothing below names them: the constructor gives the runtime what it
//! needs of the hooks ([`crate::entry::Hooks`]).

pub mod api;
pub mod hooks;
pub mod interpose;
