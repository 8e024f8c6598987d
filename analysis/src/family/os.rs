//! The black-box OS metrics (seed 001, Kasick's thesis, §3.2.1 and §3.3): each metric of the
//! catalogue (`culprit_format::os_metrics`: `disk.await`, `net.rxbyt`, `proc.blkio_delay`, …)
//! is its own [`MetricFamily`], compared across nodes as the distribution of its per-second
//! values in each window — cumulative histograms on Freedman–Diaconis bins, smoothed by a
//! moving average, under the CDF distance ([`crate::cdf`]) — with its own trained threshold and
//! its own k-of-(2k − 1) filter, as seed 001 analyses "one metric at a time across all
//! components". All of them together are one family, [`Metric::OS`], when metrics corroborate
//! each other.
//!
//! A metric's components are its instances (a block device, a network interface; one component
//! for node-wide metrics), matched across nodes by name. A value the node could not provide is
//! absent, never zero ([`About::absent_is_zero`]). Which metrics exist depends on the
//! data (a whole machine has `disk.*`, servers sharing a host `cg.*` and `proc.*`), so the
//! families are made for a dataset: [`families`].

use std::collections::HashMap;
use std::sync::Arc;

use culprit_format::os_metrics::{self, MetricDef};

use crate::cdf::MAX_BINS;
use crate::data::{Dataset, FileStatus, NodeData, OsMetricId};
use crate::error::Result;
use crate::model::{CompIdx, CompLabel, CompValue};

use super::{
    About, Comparison, Cursors, FamilyReader, IntervalSink, KeepRule, KeepSettings, Metric,
    MetricFamily, Windows, Words,
};

/// OS metrics not compared unless asked for by name (`--metrics cg.wr_ios`), with the reason.
/// Seed 001 §4.3 ("Discussion on Metrics") leaves out the metrics whose behaviour under faults is
/// inconsistent; we follow it.
pub const NOT_COMPARED: &[(&str, &str)] = &[
    // "A lower transfer rate may be compensated by issuing larger-sized requests. Thus, tps is
    // not a reliable metric": on the testbed a fault-free node issued 1.5× its peers' write
    // requests for the same bytes in one run and not in others.
    (
        "disk.tps",
        "request counts follow request sizes, not load (seed 001 §4.3)",
    ),
    (
        "cg.rd_ios",
        "request counts follow request sizes, not load (seed 001 §4.3)",
    ),
    (
        "cg.wr_ios",
        "request counts follow request sizes, not load (seed 001 §4.3)",
    ),
    (
        "disk.avgrq_sz",
        "request sizes vary between peers (seed 001 §4.3)",
    ),
    // "svctm is not guaranteed to exhibit asymmetries for disk-hogs, and therefore is
    // unreliable" (and sysstat itself has deprecated it).
    (
        "disk.svctm",
        "inconsistent under disk faults (seed 001 §4.3)",
    ),
    // "Secondary manifestations ... due to the overall reduction in I/O throughput during the
    // faulty period, and reveal nothing new."
    ("cpu.cswch", "a secondary manifestation (seed 001 §4.3)"),
    ("proc.cswch", "a secondary manifestation (seed 001 §4.3)"),
];

/// True when `metric` is compared unless left out ([`NOT_COMPARED`]).
pub fn compared_by_default(metric: &str) -> bool {
    !NOT_COMPARED.iter().any(|(m, _)| *m == metric)
}

/// How a user gets OS metrics.
pub const HOW: &str = "run `culprit sample` (it records OS metrics unless --no-os-metrics)";

/// One OS metric of one dataset.
#[derive(Clone, Debug)]
pub struct Os {
    about: About,
    /// The dataset's ids of this metric (one per instance), sorted, and each one's label.
    ids: Vec<(OsMetricId, CompLabel)>,
}

/// The OS metrics of `ds` that the catalogue knows, in catalogue order, each with these windows
/// (`None`: the analysis') and moving-average width; those of [`NOT_COMPARED`] only when `named`
/// says they were asked for. Names the catalogue does not know (a newer sampler) are returned
/// apart, for a note.
pub fn families(
    ds: &Dataset,
    windows: Option<Windows>,
    smoothing: usize,
    named: impl Fn(&str) -> bool,
) -> (Vec<Arc<dyn MetricFamily>>, Vec<String>) {
    let names = &ds.names.os_metrics;
    let mut by_name: HashMap<&str, Vec<(OsMetricId, CompLabel)>> = HashMap::new();
    let mut unknown = Vec::new();
    for id in 0..names.len() as u32 {
        let key = names.get(id);
        match os_metrics::def(&key.name) {
            // A unit other than the catalogue's is another quantity: not comparable.
            Some(def) if def.unit == &*key.unit => {
                by_name.entry(def.name).or_default().push((
                    id,
                    CompLabel {
                        program: None,
                        image: key.instance.clone(),
                        name: Arc::from(def.name),
                        bucket: None,
                    },
                ));
            }
            _ => {
                let n = format!("{} ({})", key.name, key.unit);
                if !unknown.contains(&n) {
                    unknown.push(n);
                }
            }
        }
    }
    let fams = os_metrics::CATALOGUE
        .iter()
        .filter(|def| compared_by_default(def.name) || named(def.name))
        .filter_map(|def| {
            let mut ids = by_name.remove(def.name)?;
            ids.sort_by_key(|(id, _)| *id);
            Some(Arc::new(Os {
                about: about(def, windows, smoothing),
                ids,
            }) as Arc<dyn MetricFamily>)
        })
        .collect();
    (fams, unknown)
}

/// The smallest difference worth counting in an OS metric's unit: the narrowest histogram bin
/// ([`crate::cdf`]: Σ|P − Q| counts bins, so a bin finer than anything meaningful would make
/// noise count).
pub fn resolution(unit: &str) -> f64 {
    match unit {
        // One 4 KiB page per second.
        "B/s" => 4096.0,
        "sectors/s" => 8.0,
        // A tenth of a millisecond of latency; a millisecond of waiting or CPU per second
        // (0.1 % of a CPU).
        "ms" => 0.1,
        "ms/s" => 1.0,
        // A tenth of a percentage point; a tenth of a queued request.
        "%" => 0.1,
        "requests" => 0.1,
        // Counts and counts per second: one.
        _ => 1.0,
    }
}

/// What the OS metric `def` is, in these windows and with this moving-average width.
fn about(def: &'static MetricDef, windows: Option<Windows>, smoothing: usize) -> About {
    About {
        metric: Metric::new(def.name),
        group: Some(Metric::OS),
        unit: def.unit,
        words: Words {
            more: "higher",
            less: "lower",
        },
        how_to_record: HOW,
        comparison: Comparison::Cdf { max_bins: MAX_BINS },
        resolution: resolution(def.unit),
        windows,
        smoothing,
        absent_is_zero: false,
        rare: false,
        sampled: false,
        demoted: crate::demoted::Rule::Unaffected,
    }
}

impl Os {
    fn position(&self, id: OsMetricId) -> Option<usize> {
        self.ids.binary_search_by_key(&id, |(i, _)| *i).ok()
    }

    /// True when some interval of `node` has a value of this metric.
    fn present(&self, node: &NodeData) -> bool {
        node.samples.iter().any(|f| {
            f.os.iter()
                .any(|iv| iv.values.iter().any(|v| self.position(v.metric).is_some()))
        })
    }
}

impl MetricFamily for Os {
    fn about(&self) -> &About {
        &self.about
    }
    fn keep_rule(&self, _keep: &KeepSettings) -> KeepRule {
        KeepRule::All
    }
    fn has_data(&self, node: &NodeData) -> bool {
        self.present(node)
    }
    fn interval_lengths(&self, node: &NodeData, see: &mut dyn FnMut(u64)) {
        if !self.present(node) {
            return;
        }
        for f in &node.samples {
            for iv in &f.os {
                see(iv.dur_ns);
            }
        }
    }
    fn reader(&self, _by_program: bool) -> Box<dyn FamilyReader> {
        Box::new(OsReader {
            family: self.clone(),
            cursors: Cursors::default(),
            comps: vec![None; self.ids.len()],
            present: HashMap::new(),
        })
    }
}

#[derive(Debug)]
struct OsReader {
    family: Os,
    cursors: Cursors,
    /// The sink's component of each id, once registered.
    comps: Vec<Option<CompIdx>>,
    /// Nodes known to have values of the metric (a node without any is not compared on it).
    present: HashMap<String, bool>,
}

impl FamilyReader for OsReader {
    fn feed(
        &mut self,
        _ds: &Dataset,
        node: &NodeData,
        until_ns: u64,
        sink: &mut dyn IntervalSink,
    ) -> Result<()> {
        // Only a positive answer is kept: a node may start writing the metric later.
        if !self.present.get(&node.name).copied().unwrap_or(false) {
            let p = self.family.present(node);
            self.present.insert(node.name.clone(), p);
            if !p {
                return Ok(());
            }
        }
        let fam = &self.family;
        for f in &node.samples {
            let comps = &mut self.comps;
            let open = f.status == FileStatus::Open;
            self.cursors
                .feed(&f.path, &f.os, open, until_ns, sink, |iv, sink, out| {
                    for v in &iv.values {
                        // Writers never write negative or non-finite values; read as absent.
                        if !(v.value.is_finite() && v.value >= 0.0) {
                            continue;
                        }
                        let Some(at) = fam.position(v.metric) else {
                            continue;
                        };
                        let comp =
                            *comps[at].get_or_insert_with(|| sink.component(fam.ids[at].1.clone()));
                        out.push(CompValue {
                            comp,
                            value: v.value,
                        });
                    }
                })?;
        }
        Ok(())
    }

    fn next_start(&self, node: &NodeData) -> Option<u64> {
        if !self.present.get(&node.name).copied().unwrap_or(true) {
            return None;
        }
        node.samples
            .iter()
            .filter_map(|f| self.cursors.next_start(&f.path, &f.os))
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_catalogue_unit_has_a_resolution() {
        for d in os_metrics::CATALOGUE {
            let r = resolution(d.unit);
            assert!(r > 0.0 && r.is_finite(), "{}", d.name);
        }
        assert_eq!(resolution("B/s"), 4096.0);
    }

    #[test]
    fn os_metric_names_parse_and_belong_to_the_os_family() {
        let m = Metric::from_name("disk.await").unwrap();
        assert!(m.is_os() && m.name() == "disk.await");
        assert!(!Metric::SAMPLES.is_os());
        assert!(Metric::from_name("disk.nope").is_none());
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<Metric>(&json).unwrap(), m);
    }
}
