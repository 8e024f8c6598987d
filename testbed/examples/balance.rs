//! Measures whether the emulated servers behave as peers under a balanced load: per-node CPU
//! seconds and disk bytes over a run of each workload, and their spread (max/min − 1).
//!
//! `cargo run --release -p culprit-testbed --example balance -- [SECONDS] [REPEATS] [FAULT NODE]`
//! (as root). With a fault, it is injected into node NODE for the whole run, to see its effect.

use std::time::Duration;

use culprit_testbed::*;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let secs: f64 = args.first().and_then(|s| s.parse().ok()).unwrap_or(20.0);
    let repeats: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
    let fault: Option<(FaultKind, usize)> = match (args.get(2), args.get(3)) {
        (Some(f), Some(n)) => Some((
            f.parse()?,
            n.parse().map_err(|_| Error::Config("node".into()))?,
        )),
        _ => None,
    };
    sys::catch_interrupts();
    let run_dir = std::env::temp_dir().join(format!("culprit-balance-{}", std::process::id()));
    let programs = Programs::build(&run_dir.join("bin"))?;
    let mut cluster = Cluster::create(ClusterSpec::new(&run_dir), programs)?;
    cluster.start_servers(&Tracing::default())?;
    let wspec = WorkloadSpec::default();
    for w in Workload::ALL {
        cluster.prepare(w, &wspec)?;
        for rep in 0..repeats {
            let active = match fault {
                Some((k, n)) => Some(cluster.inject(k, n)?),
                None => None,
            };
            let before = cluster.usage()?;
            let clients = cluster.start_clients(w, &wspec, Bound::Duration(secs), "balance")?;
            let results = clients.wait(Duration::from_secs_f64(secs + 60.0))?;
            let after = cluster.usage()?;
            if let Some(a) = active {
                let r = cluster.clear(a)?;
                println!("  fault cleared, dropped packets {}", r.dropped_packets);
            }
            let mb: f64 = results.iter().map(|r| r.bytes as f64).sum::<f64>() / 1e6;
            println!(
                "{w} rep {rep}: clients moved {mb:.0} MB in {secs} s ({:.1} MB/s)",
                mb / secs
            );
            let mut cpus = Vec::new();
            let mut bytes = Vec::new();
            for (a, b) in after.iter().zip(&before) {
                let cpu = a.cpu_s - b.cpu_s;
                let rd = a.disk_read - b.disk_read;
                let wr = a.disk_write - b.disk_write;
                println!(
                    "  {}: cpu {cpu:.2} s  disk read {:.1} MB  write {:.1} MB",
                    a.node,
                    rd as f64 / 1e6,
                    wr as f64 / 1e6
                );
                cpus.push(cpu);
                bytes.push((rd + wr) as f64);
            }
            println!(
                "  spread: cpu {:.1} %  disk bytes {:.1} %",
                spread(&cpus),
                spread(&bytes)
            );
        }
    }
    drop(cluster);
    let _ = std::fs::remove_dir_all(&run_dir);
    println!("leftovers: {:?}", cluster::leftovers(cluster::PREFIX_STEM));
    Ok(())
}

fn spread(v: &[f64]) -> f64 {
    let max = v.iter().cloned().fold(f64::MIN, f64::max);
    let min = v.iter().cloned().fold(f64::MAX, f64::min);
    if min > 0.0 {
        (max / min - 1.0) * 100.0
    } else {
        f64::NAN
    }
}
