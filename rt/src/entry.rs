//! What the runtime knows of the entry points it lives behind. The two
//! `-finstrument-functions` hooks are C entry points, in the layer above the runtime
//! (`crate::ffi::hooks`); the constructor gives the runtime this description of them when it
//! starts it ([`crate::runtime::start`]), so that nothing below that layer names an entry point.

/// The hooks, as the runtime needs them.
#[derive(Clone, Copy, Debug)]
pub struct Hooks {
    /// Addresses of `__cyg_profile_func_enter` and `__cyg_profile_func_exit`: the targets of
    /// the call sites the flusher rewrites to NOPs (`crate::sys::patch`).
    pub addresses: [usize; 2],
    /// One enter/exit pair of the hooks for a function, as instrumented code makes it (the
    /// cost budget's calibration, [`crate::calibrate`]).
    pub pair: fn(usize),
    /// The same pair with hooks that do nothing, like glibc's: what the calibration subtracts.
    pub nop_pair: fn(usize),
}
