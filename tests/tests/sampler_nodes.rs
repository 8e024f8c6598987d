//! Emulated nodes on one host (docs/testbed.md): the sampler assigns each
//! process to a node by its network namespace, cgroup or process tree, and TCP retransmits by
//! socket address. A lossy path (an nftables `numgen random` drop rule on the receiving side's
//! input, in a namespace this test creates) must show retransmits for the receiving node only.
//!
//! Needs root (namespaces, nft, cgroups, perf). Everything is created under a per-run prefix
//! and removed on drop, even when the test fails. Budget: ~4 s.

mod sampler_util;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use culprit_format::names;
use culprit_tests::*;
use sampler_util::*;

/// Namespaces, veth pairs (inside them), an nft table (inside the lossy namespace) and a
/// cgroup, removed on drop.
struct Testbed {
    prefix: String,
    cgroup: PathBuf,
    children: Vec<Child>,
}

impl Testbed {
    fn ns(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    fn ip(&self, args: &[&str]) {
        run_ok(Command::new("ip").args(args));
    }

    fn in_ns(&self, ns: &str, program: &PathBuf) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns(ns)]).arg(program);
        c
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in ["cli", "lossy", "clean"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(ns)])
                .status();
        }
        let _ = std::fs::remove_dir(&self.cgroup);
    }
}

/// This test's copy of `smp_ratio` (see where it is made).
const BURNER: &str = "nodes_ratio";

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn processes_and_tcp_retransmits_are_attributed_to_emulated_nodes() {
    if !require(
        is_root(),
        "root (network namespaces, nftables, cgroups, perf)",
    ) {
        return;
    }
    let progs = build_programs();
    gcc(&[&c_source("smp_tcp.c")], &progs.path("smp_tcp"), &["-O2"]);
    // The burners under a name of their own: the sampler is system-wide, and the free lane's
    // tests run their own `smp_ratio` meanwhile (865 of their samples were counted as this
    // test's "smp_ratio outside lossy" in a CI run).
    std::fs::copy(progs.path("smp_ratio"), progs.path(BURNER)).unwrap();
    let _lock = machine_lock();
    let id = std::process::id();
    let net = 16 + (id % 200);
    let mut tb = Testbed {
        prefix: format!("cs{}", id % 100_000),
        cgroup: PathBuf::from(format!("/sys/fs/cgroup/cpu/culprit-smp-{id}")),
        children: Vec::new(),
    };
    let (cli, lossy, clean) = (tb.ns("cli"), tb.ns("lossy"), tb.ns("clean"));
    for ns in [&cli, &lossy, &clean] {
        tb.ip(&["netns", "add", ns]);
        tb.ip(&["-n", ns, "link", "set", "lo", "up"]);
    }
    let addr = |side: u32, host: u32| format!("172.31.{}.{host}", net + side);
    for (i, (ns, dev)) in [(&lossy, "va"), (&clean, "vb")].into_iter().enumerate() {
        let i = i as u32;
        tb.ip(&[
            "-n", &cli, "link", "add", dev, "type", "veth", "peer", "name", dev, "netns", ns,
        ]);
        tb.ip(&[
            "-n",
            &cli,
            "addr",
            "add",
            &format!("{}/24", addr(i, 1)),
            "dev",
            dev,
        ]);
        tb.ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{}/24", addr(i, 2)),
            "dev",
            dev,
        ]);
        tb.ip(&["-n", &cli, "link", "set", dev, "up"]);
        tb.ip(&["-n", ns, "link", "set", dev, "up"]);
    }
    // Loss where a network would drop: on the receiving side's input, not the sender's output.
    // Only segments without SYN: a dropped SYN stalls the sender's connect for a 1 s (then 2 s)
    // timeout, which in a 2.5 s run left as few as 3 data retransmits.
    let mut nft = Command::new("ip")
        .args(["netns", "exec", &lossy, "nft", "-f", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    nft.stdin
        .take()
        .unwrap()
        .write_all(
            b"table inet culprit_loss {\n chain input {\n  type filter hook input priority 0; \
              policy accept;\n  tcp dport 5001 tcp flags & syn == 0 numgen random mod 100 < 20 drop\n }\n}\n",
        )
        .unwrap();
    assert!(nft.wait().unwrap().success(), "nft rule");
    std::fs::create_dir_all(&tb.cgroup).expect("create a cpu cgroup");

    // Servers in both namespaces, running before the sampler starts (found in its snapshot).
    let tcp = progs.path("smp_tcp");
    for ns in ["lossy", "clean"] {
        let c = tb.in_ns(ns, &tcp).args(["sink", "5001"]).spawn().unwrap();
        tb.children.push(c);
    }
    // A process tree node: a shell waiting on stdin, then exec'ing a spawner of short processes.
    let spawn_cmd = format!(
        "read go; exec {} 20 {} 2000000",
        progs.path("smp_spawn").display(),
        progs.path("smp_short").display()
    );
    let mut tree = Command::new("sh")
        .args(["-c", &spawn_cmd])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let tree_pid = tree.id();

    let data = TempDir::new("smp-nodes");
    let cg = tb.cgroup.display().to_string();
    let sampler = SamplerProc::start(
        data.path(),
        &[
            "--interval",
            "1s",
            "--event",
            "cpu-clock",
            "--period",
            "250000",
            "--tracepoints",
            "tcp:tcp_retransmit_skb,sched:sched_switch,block:block_bio_queue,\
             block:block_rq_issue,block:block_rq_complete",
            "--node-netns",
            &format!("lossy=/run/netns/{lossy}"),
            "--node-netns",
            &format!("clean=/run/netns/{clean}"),
            "--node-addr",
            &format!("lossy={}", addr(0, 2)),
            "--node-addr",
            &format!("clean={}", addr(1, 2)),
            "--node-cgroup",
            &format!("grp={cg}"),
            "--node-pid",
            &format!("tree={tree_pid}"),
        ],
        "lossy",
    );
    // Work in every node: burners by netns (started after the sampler: classified at exec),
    // a library user in the cgroup, the spawner in the tree, and the TCP sender in a
    // namespace that is no node.
    let mut work = vec![
        tb.in_ns("lossy", &progs.path(BURNER))
            .arg("200")
            .spawn()
            .unwrap(),
        tb.in_ns("clean", &progs.path(BURNER))
            .arg("200")
            .spawn()
            .unwrap(),
        Command::new("sh")
            .args([
                "-c",
                &format!(
                    "echo $$ > {cg}/cgroup.procs && exec {} 150",
                    progs.path("smp_libuser").display()
                ),
            ])
            .spawn()
            .unwrap(),
        Command::new("ip")
            .args(["netns", "exec", &cli])
            .arg(&tcp)
            .args(["send", "2500", &addr(0, 2), "5001", &addr(1, 2), "5001"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    ];
    // Direct I/O from the cgroup node: queued in its context, issued and completed wherever
    // (a kworker, an interrupt), all three attributed to it through the request's sector.
    let io_file = data.join("io.bin");
    work.push(
        Command::new("sh")
            .args([
                "-c",
                &format!(
                    "echo $$ > {cg}/cgroup.procs && exec dd if=/dev/zero of={} bs=64k \
                     count=400 oflag=direct",
                    io_file.display()
                ),
            ])
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    tree.stdin.take().unwrap().write_all(b"go\n").unwrap();
    work.push(tree);
    for mut w in work {
        assert!(w.wait().unwrap().success(), "a workload failed");
    }
    let (code, err) = sampler.stop();
    assert_eq!(code, 0, "sampler exit; stderr:\n{err}");

    let runs: Vec<(&str, SampleRun)> = ["lossy", "clean", "grp", "tree", names::UNASSIGNED_DIR]
        .into_iter()
        .map(|n| (n, read_node(data.path(), n)))
        .collect();
    let get = |n: &str| &runs.iter().find(|(x, _)| *x == n).unwrap().1;
    for (n, r) in &runs {
        assert_well_formed(r, 1_000_000_000);
        assert_eq!(r.info.get("node").map(String::as_str), Some(*n));
        // Real nodes get node.info; the unassigned directory does not.
        assert_eq!(
            data.join(n).join(names::NODE_INFO_FILE).exists(),
            *n != names::UNASSIGNED_DIR
        );
    }
    let summary: String = runs
        .iter()
        .map(|(n, r)| format!("== {n}\n{}", r.top(8)))
        .collect();

    // Samples follow their process's node.
    for (node, program, min) in [
        ("lossy", BURNER, 50),
        ("clean", BURNER, 50),
        ("grp", "smp_libuser", 50),
        ("tree", "smp_short", 30),
    ] {
        let here = get(node).program_total(program);
        let elsewhere: u64 = runs
            .iter()
            .filter(|(n, _)| *n != node && !(program == BURNER && matches!(*n, "lossy" | "clean")))
            .map(|(_, r)| r.program_total(program))
            .sum();
        assert!(
            here >= min,
            "{program}: {here} samples on {node}\n{summary}"
        );
        assert!(
            elsewhere * 20 <= here,
            "{program}: {elsewhere} samples outside {node} ({here} on it)\n{summary}"
        );
    }
    // The sender is in a namespace that is no node: its samples are unassigned.
    assert!(
        get(names::UNASSIGNED_DIR).program_total("smp_tcp") > 0,
        "no unassigned sender samples\n{summary}"
    );

    // Retransmits: data sent to the lossy node is dropped on its input, the sender retransmits;
    // the socket's destination address names the lossy node.
    let rt = "tcp:tcp_retransmit_skb";
    let (l, c) = (get("lossy").event_total(rt), get("clean").event_total(rt));
    assert!(l >= 5, "retransmits on the lossy node: {l} (clean {c})");
    // The clean path retransmits too when the machine is overloaded (tail-loss probes and
    // spurious timeouts while the receiver waits for a CPU): only ask for a clear majority.
    assert!(c * 2 < l, "retransmits on the clean node: {c} (lossy {l})");
    // Block I/O follows the request to the node that queued it.
    for ev in [
        "block:block_bio_queue",
        "block:block_rq_issue",
        "block:block_rq_complete",
    ] {
        let g = get("grp").event_total(ev);
        let others: u64 = ["lossy", "clean", "tree"]
            .iter()
            .map(|n| get(n).event_total(ev))
            .sum();
        assert!(g >= 100, "{ev} on the node doing direct I/O: {g}");
        assert!(
            others * 10 <= g,
            "{ev}: {others} on nodes doing no I/O ({g} on grp)"
        );
    }
    // Context switches are counted per node too.
    for n in ["lossy", "clean", "grp", "tree"] {
        assert!(
            get(n).event_total("sched:sched_switch") > 0,
            "no context switches on {n}"
        );
    }
}
