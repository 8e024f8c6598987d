//! The built-in metric families, in report order ([`Metric::BUILTIN`]).

use std::sync::Arc;

use super::layers::Layers;
use super::sampler::{Events, Samples};
use super::tracer::{Count, EdgeCount, EdgeTime, Latency, Time};
use super::{Features, Metric, MetricFamily};

/// The built-in families, in report order.
pub fn all() -> Vec<Arc<dyn MetricFamily>> {
    for_features(Features::Functions)
}

/// The built-in families with the tracer's components as `features` says (functions, or
/// caller → callee edges), in report order.
pub fn for_features(features: Features) -> Vec<Arc<dyn MetricFamily>> {
    let (count, time): (Arc<dyn MetricFamily>, Arc<dyn MetricFamily>) = match features {
        Features::Functions => (Arc::new(Count), Arc::new(Time)),
        Features::Edges => (Arc::new(EdgeCount), Arc::new(EdgeTime)),
    };
    vec![
        Arc::new(Samples),
        count,
        time,
        Arc::new(Events),
        Arc::new(Latency),
        Arc::new(Layers),
    ]
}

/// The built-in family of `metric`.
pub fn find(metric: Metric) -> Option<Arc<dyn MetricFamily>> {
    all().into_iter().find(|f| f.metric() == metric)
}
