//! What the OS-metrics collector costs on the emulated 4-node cluster: `culprit sample` as the
//! testbed starts it (four nodes by cgroup, namespace and address, delay accounting on, OS
//! metrics every second), a `ddw` workload for SECONDS, then the sampler's own accounting of
//! the collector thread's CPU time (CLOCK_THREAD_CPUTIME_ID) and of the writer's time spent
//! encoding and writing the OS records, from its log.
//!
//! `cargo build --release -p culprit -p culprit-rt &&
//!  cargo run --release -p culprit-testbed --example os_cost -- [SECONDS] [REPEATS]` (as root).

use std::time::Duration;

use culprit_testbed::*;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(60.0);
    let repeats: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    sys::catch_interrupts();
    let exe = std::env::current_exe().map_err(|e| Error::Config(format!("current exe: {e}")))?;
    // target/release/examples/os_cost → target/release/culprit
    let culprit = exe
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("culprit"))
        .ok_or_else(|| Error::Config("where is culprit?".into()))?;
    let tools = tools::Tools::beside(culprit)?;
    let run_dir = std::env::temp_dir().join(format!("culprit-os-cost-{}", std::process::id()));
    let programs = Programs::build(&run_dir.join("bin"))?;
    for rep in 0..repeats {
        let mut spec = ClusterSpec::new(&run_dir);
        spec.run_dir = run_dir.join(format!("rep{rep}"));
        let mut cluster = Cluster::create(spec, programs.clone())?;
        let data = run_dir.join(format!("data{rep}"));
        std::fs::create_dir_all(&data).map_err(|e| Error::Config(format!("data dir: {e}")))?;
        let sampler = tools.start_sampler(&cluster, &data, 10_000)?;
        cluster.start_servers(&Tracing::default())?;
        let wspec = WorkloadSpec::default();
        cluster.prepare(Workload::Ddw, &wspec)?;
        let clients =
            cluster.start_clients(Workload::Ddw, &wspec, Bound::Duration(secs), "os-cost")?;
        clients.wait(Duration::from_secs_f64(secs + 60.0))?;
        cluster.stop_servers(Duration::from_secs(5));
        sampler.stop()?;
        let log = std::fs::read_to_string(cluster.log_path("sampler")).unwrap_or_default();
        println!("rep {rep} ({secs} s of ddw, 4 nodes):");
        for l in log.lines().filter(|l| {
            l.contains("OS metrics:") || l.contains("sampler CPU") || l.contains("warning")
        }) {
            println!("  {l}");
        }
        drop(cluster);
    }
    let _ = std::fs::remove_dir_all(&run_dir);
    println!("leftovers: {:?}", cluster::leftovers(cluster::PREFIX_STEM));
    Ok(())
}
