//! culprit's testbed: an emulated PVFS-like cluster on one machine, real fault injection, the
//! live demo and the accuracy experiment (seed 000 §"Experimental set-up", §"Fault injection").
//!
//! * [`programs`] compiles the C programs of `examples/pvfs-like/` (server, client, rogues);
//! * [`cluster`] builds the nodes: a network namespace, cgroups (fixed CPU share, disk budget)
//!   and a storage directory each, plus the clients and a third party, and tears it all down;
//! * [`fault`] injects real faults into one node; [`workload`] runs seed 000's workloads;
//! * [`tools`] runs culprit's own commands and reads `culprit diagnose --json` as a typed
//!   [`culprit_analysis::Diagnosis`]; [`verbs`] holds `culprit demo` and `culprit experiment`.
//!
//! Everything it creates carries a per-run prefix ([`cluster::PREFIX_STEM`]) and is removed by
//! the cluster's `Drop`, on interrupt ([`sys::catch_interrupts`]), or by [`cluster::cleanup_stale`]
//! at the next start if the process was killed. It needs root; [`cluster::check_machine`] says
//! which privilege or tool is missing.

pub mod cgroup;
pub mod cluster;
pub mod demo;
pub mod error;
pub mod experiment;
pub mod fault;
pub mod net;
pub mod programs;
pub mod run;
pub mod sys;
pub mod tools;
pub mod verbs;
pub mod workload;

pub use cluster::{Cluster, ClusterSpec, Place, Tracing};
pub use error::{Error, Result};
pub use fault::{ActiveFault, FaultKind};
pub use programs::Programs;
pub use workload::{Bound, Workload, WorkloadSpec};
