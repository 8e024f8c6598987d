//! The process's layers: names registered by `culprit_io_layer` (and the runtime's own), ids
//! handed out in order. The hot path only checks that an id exists (one load); names are read
//! by the flusher.

use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::{Mutex, OnceLock};

use culprit_format::{layer_level, MAX_LAYER_NAME};

/// Most layers a process may name (the runtime's two included).
pub const MAX_LAYERS: usize = 64;
/// Id of the C library's synchronous I/O calls (`CULPRIT_IO=1`).
pub const LIBC: u16 = 0;
/// Id of the C library's POSIX AIO emulation (`CULPRIT_IO=1`).
pub const LIBC_AIO: u16 = 1;
const BUILTIN: u32 = 2;

/// A registered layer.
#[derive(Debug)]
pub struct Layer {
    /// Name.
    pub name: Box<str>,
    /// Level (see `culprit_format::layer_level`).
    pub level: i32,
}

static NAMES: [OnceLock<Layer>; MAX_LAYERS] = [const { OnceLock::new() }; MAX_LAYERS];
/// Ids in use (every id below is registered).
static COUNT: AtomicU32 = AtomicU32::new(0);
/// Serialises registrations (never taken by the hot path or the flusher).
static REGISTER: Mutex<()> = Mutex::new(());

/// Why a name cannot be a layer's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerError {
    /// Empty, longer than 64 bytes, or with a control character.
    BadName,
    /// [`MAX_LAYERS`] are registered already.
    Full,
}

fn ensure_builtin() {
    if COUNT.load(Acquire) >= BUILTIN {
        return;
    }
    for (name, id) in [
        (layer_level::LIBC_NAME, LIBC),
        (layer_level::LIBC_AIO_NAME, LIBC_AIO),
    ] {
        let _ = NAMES[id as usize].set(Layer {
            name: name.into(),
            level: layer_level::LIBC,
        });
    }
    COUNT.fetch_max(BUILTIN, Release);
}

/// The id of the layer called `name`, registering it if new. Layers a program registers are
/// ordered top-down: the first is the highest (level [`layer_level::APP`] − 1), each next one
/// lies below the previous.
pub fn register(name: &str) -> Result<u16, LayerError> {
    if name.is_empty() || name.len() > MAX_LAYER_NAME || name.chars().any(char::is_control) {
        return Err(LayerError::BadName);
    }
    let _guard = REGISTER.lock().unwrap_or_else(|p| p.into_inner());
    ensure_builtin();
    let n = COUNT.load(Acquire);
    if let Some(id) = (0..n).find(|&i| get(i as u16).is_some_and(|l| &*l.name == name)) {
        return Ok(id as u16);
    }
    if n as usize >= MAX_LAYERS {
        return Err(LayerError::Full);
    }
    let _ = NAMES[n as usize].set(Layer {
        name: name.into(),
        level: layer_level::APP - (n - BUILTIN + 1) as i32,
    });
    COUNT.store(n + 1, Release);
    Ok(n as u16)
}

/// True when `id` names a layer.
#[inline(always)]
pub fn exists(id: u16) -> bool {
    (id as u32) < COUNT.load(Acquire) || (id as u32) < BUILTIN
}

/// The layer `id`.
pub fn get(id: u16) -> Option<&'static Layer> {
    if (id as u32) < BUILTIN {
        ensure_builtin();
    }
    NAMES.get(id as usize)?.get()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_get_ids_in_order_and_levels_top_down() {
        let a = register("test-top").unwrap();
        let b = register("test-below").unwrap();
        assert_eq!(register("test-top"), Ok(a));
        assert!(a >= 2 && b == a + 1);
        assert!(get(a).unwrap().level > get(b).unwrap().level);
        assert!(get(a).unwrap().level < layer_level::APP);
        assert_eq!(&*get(LIBC).unwrap().name, "libc");
        assert_eq!(&*get(LIBC_AIO).unwrap().name, "libc-aio");
        assert_eq!(register("libc"), Ok(LIBC));
        assert_eq!(register(""), Err(LayerError::BadName));
        assert_eq!(register("a\nb"), Err(LayerError::BadName));
        assert_eq!(register(&"x".repeat(65)), Err(LayerError::BadName));
        assert!(exists(a) && exists(LIBC) && !exists(60));
    }
}
