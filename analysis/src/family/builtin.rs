//! The built-in metric families, in report order ([`Metric::BUILTIN`]).

use std::sync::Arc;

use super::sampler::{Events, Samples};
use super::tracer::{Count, Time};
use super::{Metric, MetricFamily};

/// The built-in families, in report order.
pub fn all() -> Vec<Arc<dyn MetricFamily>> {
    vec![
        Arc::new(Samples),
        Arc::new(Count),
        Arc::new(Time),
        Arc::new(Events),
    ]
}

/// The built-in family of `metric`.
pub fn find(metric: Metric) -> Option<Arc<dyn MetricFamily>> {
    all().into_iter().find(|f| f.metric() == metric)
}
