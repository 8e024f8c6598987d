//! The analyzer's vocabulary: components (what a feature-vector coordinate stands for) and one
//! interval of input.
//!
//! Everything here is independent of files: the [`crate::analyzer::Analyzer`] is fed per-node,
//! per-metric intervals (sparse or dense per-component values on aligned interval starts, or an
//! explicit "missed" marker) by the metric families' readers ([`crate::feed`] for data
//! directories) or by generated data (`crate::synth`, the `synth` feature: tests and benchmarks).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// Index of a node among the peers an [`crate::analyzer::Analyzer`] compares (registration
/// order; never shown to users, who see names).
pub type PeerIdx = usize;
/// Index of a component (function, event…) within one metric of an analyzer.
pub type CompIdx = u32;

/// What one coordinate of a metric's feature vector stands for. Components are compared across
/// nodes by these names, never by address: the same binary loads at different addresses on
/// different nodes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "LabelRepr", from = "LabelRepr")]
pub struct CompLabel {
    /// Program the function ran in, when comparing per program (`--by-program`).
    pub program: Option<Arc<str>>,
    /// Binary image (executable, library, `[kernel.kallsyms]`); `None` for kernel events.
    pub image: Option<Arc<str>>,
    /// Function (demangled) or event name.
    pub name: Arc<str>,
    /// For the parts of a histogram ([`crate::family::Comparison::Histograms`]): the bucket
    /// this component counts; `None` for the component that stands for the whole.
    pub bucket: Option<u8>,
}

/// [`CompLabel`] as stored in a thresholds file.
#[derive(Serialize, Deserialize)]
struct LabelRepr {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    program: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    image: Option<String>,
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bucket: Option<u8>,
}

impl From<CompLabel> for LabelRepr {
    fn from(l: CompLabel) -> Self {
        LabelRepr {
            program: l.program.map(|s| s.to_string()),
            image: l.image.map(|s| s.to_string()),
            name: l.name.to_string(),
            bucket: l.bucket,
        }
    }
}

impl From<LabelRepr> for CompLabel {
    fn from(l: LabelRepr) -> Self {
        CompLabel {
            program: l.program.map(Arc::from),
            image: l.image.map(Arc::from),
            name: Arc::from(l.name),
            bucket: l.bucket,
        }
    }
}

impl CompLabel {
    /// A function in an image.
    pub fn func(image: &str, name: &str) -> Self {
        CompLabel {
            program: None,
            image: Some(Arc::from(image)),
            name: Arc::from(name),
            bucket: None,
        }
    }
}

impl fmt::Display for CompLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = &self.program {
            write!(f, "{p}: ")?;
        }
        f.write_str(&self.name)?;
        if let Some(i) = &self.image {
            write!(f, " [{i}]")?;
        }
        if let Some(b) = self.bucket {
            write!(f, " (bucket {b})")?;
        }
        Ok(())
    }
}

/// One component's value in an interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompValue {
    /// The component.
    pub comp: CompIdx,
    /// Its value, in the metric's unit (finite, not negative).
    pub value: f64,
}

/// The values of one interval of one node and metric.
#[derive(Clone, Copy, Debug)]
pub enum IntervalData<'a> {
    /// Values of some components; components may repeat (values add up).
    Sparse(&'a [CompValue]),
    /// Values of components `0..len`.
    Dense(&'a [f64]),
    /// The writer could not observe the interval: missing data, never zeros.
    Missed,
}

/// One interval of input.
#[derive(Clone, Copy, Debug)]
pub struct Interval<'a> {
    /// Start, wall-clock ns since the epoch, a multiple of `dur_ns`.
    pub start_ns: u64,
    /// Length, ns.
    pub dur_ns: u64,
    /// True when the writer started or stopped inside the interval: its values count, but it
    /// does not make the interval covered (another process of the node may cover it).
    pub partial: bool,
    /// The values.
    pub data: IntervalData<'a>,
}
