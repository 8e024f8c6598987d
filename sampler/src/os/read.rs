//! What every source shares: files read again each tick, counter differences, a node's values.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::Arc;

use culprit_format::os_metrics::{self, MetricDef};

use super::view::Value;

pub(super) fn def(n: &str) -> &'static MetricDef {
    os_metrics::def(n).expect("metric in the catalogue")
}

/// Collects values into a node's list.
#[derive(Default)]
pub(super) struct Out {
    pub(super) vals: Vec<Value>,
}

impl Out {
    pub(super) fn put(&mut self, n: &'static str, instance: Option<&Arc<str>>, v: Option<f64>) {
        if let Some(v) = v.filter(|v| v.is_finite()) {
            self.vals.push(Value {
                def: def(n),
                instance: instance.cloned(),
                value: v,
            });
        }
    }
}

/// A `/proc` or sysfs file kept open and read again from the start every tick (cheaper than
/// opening it by path each time, and for another namespace's `net/*` files the only way: they
/// stay bound to the namespace they were opened in).
#[derive(Debug)]
pub(super) struct Reread {
    pub(super) file: File,
    pub(super) buf: Vec<u8>,
}

impl Reread {
    pub(super) fn open(path: &Path) -> io::Result<Reread> {
        Ok(Reread {
            file: File::open(path)?,
            buf: Vec::with_capacity(4096),
        })
    }

    pub(super) fn text(&mut self) -> Option<&str> {
        self.buf.clear();
        let mut chunk = [0u8; 8192];
        loop {
            match self.file.read_at(&mut chunk, self.buf.len() as u64) {
                Ok(0) => break,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return None,
            }
            if self.buf.len() > 16 << 20 {
                return None;
            }
        }
        std::str::from_utf8(&self.buf).ok()
    }
}

/// `cur − prev` as a count, `None` when the counter went backwards.
pub(super) fn delta(prev: u64, cur: u64) -> Option<f64> {
    cur.checked_sub(prev).map(|d| d as f64)
}
