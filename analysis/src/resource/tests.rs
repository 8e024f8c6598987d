use super::*;

/// An observation of `metric` in direction `dir`, the node faulty on it or not.
fn o(metric: &str, dir: Direction, faulty: bool) -> Observation {
    let s = sign_of(metric).unwrap();
    Observation {
        metric: metric.to_string(),
        instance: None,
        class: s.class,
        direction: dir,
        ratio: Some(match dir {
            Up => 3.0,
            Down => 0.3,
            Direction::Level => 1.0,
        }),
        node: 1.0,
        peers: 1.0,
        unit: "u".into(),
        faulty,
        anomalous_windows: u64::from(faulty) * 4,
        share: None,
        small: false,
        diverges: faulty && dir == s.trouble,
    }
}

fn facts(obs: Vec<Observation>) -> Facts {
    Facts {
        obs,
        foreign: Vec::new(),
        functions: vec!["handle_io".into()],
        has_os: true,
        slowed: false,
        accept_path: Vec::new(),
    }
}

fn kind(obs: Vec<Observation>) -> Kind {
    RULES[step(&facts(obs))].kind
}

#[test]
fn every_catalogue_sign_is_an_os_metric_or_an_event() {
    for s in SIGNS {
        assert!(
            culprit_format::os_metrics::def(s.metric).is_some() || s.metric.contains(':'),
            "{}",
            s.metric
        );
    }
}

/// Magnitude as well as ratio (issue 31): one 10 ms wait gave a node 0.04 ms/s of I/O
/// delay against its peers' exact 0, an infinite ratio, and named a slow disk.
#[test]
fn a_level_under_its_floor_names_nothing() {
    let delay = sign_of("proc.blkio_delay").unwrap();
    assert!(!delay.beyond_floor(0.04, 0.0));
    assert!(delay.beyond_floor(1313.0, 0.0));
    // A healthy peer of a slow disk waits less: never beyond the floor the way of trouble.
    assert!(!delay.beyond_floor(0.0, 400.0));
    // Down-pointing signs: the window must shrink by the floor.
    let cwnd = sign_of("tcp.cwnd_med").unwrap();
    assert!(cwnd.beyond_floor(5.0, 10.0));
    assert!(!cwnd.beyond_floor(9.5, 10.0));
    // Every sign has a positive floor.
    for s in SIGNS {
        assert!(s.floor > 0.0, "{}", s.metric);
    }
    // A small move is no evidence: nothing is named.
    let mut small = o("proc.blkio_delay", Up, true);
    small.diverges = false;
    small.small = true;
    assert_eq!(kind(vec![small]), Kind::Software);
}

/// A flood of junk connections is a connection flood, not packet loss (issue 31).
#[test]
fn a_connection_flood_is_named_for_what_it_is() {
    // Connections up, with longer round trips.
    assert_eq!(
        kind(vec![o("tcp.conns", Up, true), o("tcp.rtt_med", Up, true)]),
        Kind::ConnectionFlood
    );
    // The accept path busier, with loss signs: the flood, not loss.
    let mut f = facts(vec![o("tcp.rtt_med", Up, true)]);
    f.accept_path = vec!["tcp_v4_send_reset [kernel.kallsyms]".into()];
    assert_eq!(RULES[step(&f)].kind, Kind::ConnectionFlood);
    // Without either, loss signs are loss.
    assert_eq!(kind(vec![o("tcp.rtt_med", Up, true)]), Kind::PacketLoss);
    // An accept-path function busier with no network sign moving names no flood.
    let mut quiet = facts(vec![o("cg.cpu", Up, true), o("proc.runq_delay", Up, true)]);
    quiet.accept_path = vec!["accept_conn [server]".into()];
    assert_eq!(RULES[step(&quiet)].kind, Kind::CpuHog);
    assert!(on_accept_path("inet_csk_accept"));
    assert!(on_accept_path("tcp_v4_conn_request"));
    assert!(!on_accept_path("tcp_sendmsg"));
}

#[test]
fn the_checklist_in_order() {
    // Disk hog: throughput up (latency up too: it halts at step 1).
    assert_eq!(
        kind(vec![
            o("cg.rd_bytes", Up, true),
            o("proc.blkio_delay", Up, true)
        ]),
        Kind::DiskHog
    );
    // Slow disk: latency up, throughput level or down.
    assert_eq!(
        kind(vec![
            o("disk.await", Up, true),
            o("disk.rd_sec", Down, false)
        ]),
        Kind::SlowDisk
    );
    // Network hog: both ways, even with loss signs (seed 001 §4.8).
    assert_eq!(
        kind(vec![
            o("net.rxbyt", Up, true),
            o("net.txpck", Up, true),
            o("tcp.retrans", Up, true)
        ]),
        Kind::NetworkHog
    );
    // One way without loss: a hog; one way with loss: packet loss (delayed ACKs).
    assert_eq!(kind(vec![o("net.txbyt", Up, true)]), Kind::NetworkHog);
    assert_eq!(
        kind(vec![
            o("net.txpck", Up, true),
            o("tcp.cwnd_med", Down, true)
        ]),
        Kind::PacketLoss
    );
    // A loss sign in the wrong direction does not count.
    assert_eq!(kind(vec![o("tcp.cwnd_med", Up, false)]), Kind::Software);
    // CPU hog: more CPU with run-queue wait; starvation: throttled, CPU not up.
    assert_eq!(
        kind(vec![
            o("proc.cpu", Up, true),
            o("proc.runq_delay", Up, true)
        ]),
        Kind::CpuHog
    );
    assert_eq!(
        kind(vec![o("cg.throttled", Up, true), o("cg.cpu", Down, true)]),
        Kind::CpuStarvation
    );
    // More CPU alone is not a hog without wait, throttling or another process.
    assert_eq!(kind(vec![o("cg.cpu", Up, true)]), Kind::Software);
    let mut f = facts(vec![o("cg.cpu", Up, true)]);
    f.foreign.push("spin [rogue]".into());
    assert_eq!(RULES[step(&f)].kind, Kind::CpuHog);
    assert_eq!(kind(vec![]), Kind::Software);
}

/// A node that sends 40× more retransmits a little too: 3 of 11,700 segments per second is
/// no loss, and the hog is a hog. At 5 % it is loss.
#[test]
fn retransmits_count_by_their_share() {
    let mut retrans = o("tcp.retrans_segs", Up, true);
    retrans.node = 3.0;
    let mut obs = vec![o("net.txbyt", Up, true), retrans];
    judge_retransmits(&mut obs, Some(11_700.0));
    assert!(!obs[1].diverges);
    assert!((obs[1].share.unwrap() - 3.0 / 11_700.0).abs() < 1e-12);
    assert_eq!(RULES[step(&facts(obs.clone()))].kind, Kind::NetworkHog);
    obs[1].diverges = true;
    obs[1].share = None;
    obs[1].node = 600.0;
    judge_retransmits(&mut obs, Some(12_000.0));
    assert!(obs[1].diverges);
    assert_eq!(RULES[step(&facts(obs))].kind, Kind::PacketLoss);
}

/// One traced function: (function, calls/s, self ns/s).
type Func = (&'static str, f64, f64);

/// Levels of traced functions only, per node.
#[derive(Debug)]
struct Funcs(Vec<(&'static str, Vec<Func>)>);

impl Levels for Funcs {
    fn means(&self, _: &str, _: &str, _: u64, _: u64) -> Vec<InstanceMean> {
        Vec::new()
    }
    fn functions(&self, node: &str, _: u64, _: u64) -> Vec<FunctionLevel> {
        self.0
            .iter()
            .find(|(n, _)| *n == node)
            .map(|(_, v)| {
                v.iter()
                    .map(|&(f, calls, self_ns)| FunctionLevel {
                        function: f.to_string(),
                        calls,
                        self_ns,
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Four peers running parse (1 µs a call), hash (3 µs), reply (2 µs) and wait (blocked,
/// 100 µs); node d as `d`.
fn slowdown(d: Vec<Func>) -> Slowdown {
    let healthy = vec![
        ("parse", 1000.0, 1e6),
        ("hash", 1000.0, 3e6),
        ("reply", 1000.0, 2e6),
        ("wait", 1000.0, 1e8),
    ];
    let levels = Funcs(vec![
        ("a", healthy.clone()),
        ("b", healthy.clone()),
        ("c", healthy),
        ("d", d),
    ]);
    let names: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
    Slowdown::of(&levels, &names, 3, &[0, 1, 2], (0, 1)).unwrap()
}

/// Every computing function slower per call alike, calls down (a closed loop) or level (an
/// open one), the wait unchanged: slowed as a whole. One function 20× slower, or every one
/// slower with more calls, is not.
#[test]
fn a_node_slowed_as_a_whole() {
    let starved = slowdown(vec![
        ("parse", 300.0, 300.0 * 4e3),
        ("hash", 300.0, 300.0 * 12e3),
        ("reply", 300.0, 300.0 * 8e3),
        ("wait", 300.0, 300.0 * 1e5),
    ]);
    assert!(starved.whole(), "{starved:?}");
    assert_eq!((starved.functions, starved.slower), (4, 3));
    let open_loop = slowdown(vec![
        ("parse", 1000.0, 4e6),
        ("hash", 1000.0, 12e6),
        ("reply", 1000.0, 8e6),
        ("wait", 1000.0, 0.9e8),
    ]);
    assert!(open_loop.whole(), "{open_loop:?}");
    let one = slowdown(vec![
        ("parse", 1000.0, 1e6),
        ("hash", 1000.0, 60e6),
        ("reply", 1000.0, 2e6),
        ("wait", 1000.0, 0.4e8),
    ]);
    assert!(!one.whole(), "{one:?}");
    let busier = slowdown(vec![
        ("parse", 3000.0, 3000.0 * 4e3),
        ("hash", 3000.0, 3000.0 * 12e3),
        ("reply", 3000.0, 3000.0 * 8e3),
        ("wait", 3000.0, 3000.0 * 1e5),
    ]);
    assert!(!busier.whole(), "more calls: {busier:?}");
}

/// A slowdown observation as the checklist sees it.
fn slowed(diverges: bool) -> Observation {
    Observation {
        metric: "time per call".into(),
        instance: None,
        class: Slowdown,
        direction: Up,
        ratio: Some(4.0),
        node: 4.0,
        peers: 1.0,
        unit: "× peers".into(),
        faulty: diverges,
        anomalous_windows: 4,
        share: None,
        small: false,
        diverges,
    }
}

fn event(name: &str) -> Observation {
    let mut e = o(name, Up, true);
    e.metric = format!("events: {name}");
    e
}

/// A kernel event alone names no resource against a slowdown as a whole; loss signs name
/// no loss while the CPU is withheld; the white-box slowdown with the CPU wait up is
/// starvation, and alone "slowed as a whole".
#[test]
fn one_event_against_the_white_box_evidence() {
    let kind_of = |obs: Vec<Observation>, slowed_whole: bool| {
        let mut f = facts(obs);
        f.slowed = slowed_whole;
        RULES[step(&f)].kind
    };
    let retrans = event("tcp:tcp_retransmit_skb");
    // Without a slowdown the event speaks (as before).
    assert_eq!(kind_of(vec![retrans.clone()], false), Kind::PacketLoss);
    // Against a slowdown as a whole it does not; with the CPU wait anomalous: starvation.
    let mut wait = o("proc.runq_delay", Up, false);
    wait.anomalous_windows = 2;
    assert_eq!(
        kind_of(vec![retrans.clone(), slowed(true), wait.clone()], true),
        Kind::CpuStarvation
    );
    assert_eq!(
        kind_of(vec![retrans.clone(), slowed(true)], true),
        Kind::SlowedWhole
    );
    // An OS metric of loss diverging still names loss.
    assert_eq!(
        kind_of(
            vec![retrans.clone(), o("tcp.cwnd_med", Down, true), slowed(true)],
            true
        ),
        Kind::PacketLoss
    );
    // Throttled, CPU use not up: loss signs are its consequence.
    assert_eq!(
        kind_of(
            vec![o("tcp.cwnd_med", Down, true), o("cg.throttled", Up, true)],
            false
        ),
        Kind::CpuStarvation
    );
    // Slowed with more CPU: not a slowdown of the machine.
    assert_eq!(
        kind_of(vec![slowed(true), o("cg.cpu", Up, true)], true),
        Kind::Software
    );
}

#[test]
fn directions_need_the_margin() {
    assert_eq!(direction(1.3, 1.0), (Up, Some(1.3)));
    assert_eq!(direction(1.2, 1.0).0, Direction::Level);
    assert_eq!(direction(0.7, 1.0).0, Down);
    assert_eq!(direction(5.0, 0.0), (Up, None));
    assert_eq!(direction(0.0, 0.0).0, Direction::Level);
}

/// A combined verdict from (family, role) pairs.
fn combined(
    verdict: crate::combine::Verdict,
    roles: &[(Metric, crate::combine::Role)],
) -> Combined {
    Combined {
        verdict,
        metrics: Vec::new(),
        reason: "decisive on os: 3.5× its threshold".into(),
        families: roles
            .iter()
            .map(|&(family, role)| crate::combine::Contribution {
                family,
                role,
                faulty: Vec::new(),
                anomalous: Vec::new(),
                evidence: None,
            })
            .collect(),
    }
}

fn resource(kind: Kind) -> Resource {
    Resource {
        kind,
        name: kind.words().into(),
        summary: String::new(),
        step: 1,
        rule: String::new(),
        confidence: 1.0,
        evidence: Vec::new(),
        also: Vec::new(),
        foreign: Vec::new(),
        functions: Vec::new(),
    }
}

#[test]
fn an_os_only_finding_without_a_direction_is_a_suspect() {
    use crate::combine::{Role, Verdict};
    // OS faulty, nothing else: a change of shape only → suspect, with the reason.
    let mut c = combined(
        Verdict::Faulty,
        &[(Metric::OS, Role::Faulty), (Metric::TIME, Role::Anomalous)],
    );
    assert!(demote_shapeless(&mut c, &resource(Kind::Software), false));
    assert_eq!(c.verdict, Verdict::Suspect);
    assert!(c.reason.contains("change of shape only"), "{}", c.reason);
    // A named resource keeps the verdict.
    let mut c = combined(Verdict::Faulty, &[(Metric::OS, Role::Faulty)]);
    assert!(!demote_shapeless(&mut c, &resource(Kind::SlowDisk), false));
    assert_eq!(c.verdict, Verdict::Faulty);
    // Another family faulty keeps it: the software's own metrics convicted it too.
    let mut c = combined(
        Verdict::Faulty,
        &[(Metric::OS, Role::Faulty), (Metric::EVENTS, Role::Faulty)],
    );
    assert!(!demote_shapeless(&mut c, &resource(Kind::Software), false));
    assert_eq!(c.verdict, Verdict::Faulty);
    // One that only corroborates (anomalous windows nearby, not faulty) does not: a shape
    // and a transient white-box window are what busy fault-free runs show.
    let mut c = combined(
        Verdict::Faulty,
        &[
            (Metric::OS, Role::Faulty),
            (Metric::EVENTS, Role::Corroborates),
        ],
    );
    assert!(demote_shapeless(&mut c, &resource(Kind::Software), false));
    assert_eq!(c.verdict, Verdict::Suspect);
    // A level that moved the "wrong" way (a throttled disk's throughput 8× down, its delay
    // absent) is more than a shape: the node stays faulty.
    let mut c = combined(Verdict::Faulty, &[(Metric::OS, Role::Faulty)]);
    assert!(!demote_shapeless(&mut c, &resource(Kind::Software), true));
    assert_eq!(c.verdict, Verdict::Faulty);
    // A white-box finding named software is what step 9 is for.
    let mut c = combined(Verdict::Faulty, &[(Metric::SAMPLES, Role::Faulty)]);
    assert!(!demote_shapeless(&mut c, &resource(Kind::Software), false));
}

#[test]
fn summary_names_the_strongest_evidence_and_the_other_class() {
    let mut delay = o("proc.blkio_delay", Up, true);
    delay.ratio = Some(4.1);
    let mut tput = o("cg.rd_bytes", Down, false);
    tput.ratio = Some(0.3);
    assert_eq!(
        summary(Kind::SlowDisk, &[delay, tput], &[], true),
        "I/O delay 4.1× peers, read throughput 0.3×"
    );
    assert_eq!(
        summary(Kind::Software, &[], &["f".into(), "g".into()], true),
        "no resource diverges; top functions f, g"
    );
    assert_eq!(
        summary(Kind::Software, &[], &["f".into()], false),
        "no OS metrics to name a resource; top functions f"
    );
}
