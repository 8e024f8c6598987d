use super::*;
use crate::nodes::NodeRule;

fn tracker() -> Tracker {
    Tracker::new(Nodes::new("n", &[], Scope::System).unwrap(), false)
}

#[test]
fn maps_parsing() {
    let maps = "55d0a000-55d0b000 r-xp 00001000 08:01 1234   /usr/bin/dd\n\
                55d0b000-55d0c000 r--p 00002000 08:01 1234   /usr/bin/dd\n\
                7ffd1000-7ffd3000 r-xp 00000000 00:00 0      [vdso]\n\
                7f000000-7f001000 rwxp 00000000 00:00 0 \n";
    let m = parse_maps(maps);
    assert_eq!(m.len(), 3);
    assert_eq!(m[0].path, "/usr/bin/dd");
    assert_eq!(m[0].pgoff, 0x1000);
    assert_eq!(m[0].dev, (8 << 32) | 1);
    assert_eq!(m[1].path, "[vdso]");
    assert_eq!(m[2].path, "");
}

#[test]
fn fork_exec_mmap_and_attribution() {
    let mut t = tracker();
    t.on_comm(10, 10, b"shell", false, None);
    t.on_mmap(10, 0x1000, 0x1000, 0, b"/bin/sh", Some((8, 1, 5)));
    // Fork inherits the mappings.
    t.on_fork(11, 10, 11);
    let (_, prog, loc) = t.attribute(11, 0x1010, false).unwrap();
    assert_eq!(&**t.program_name(prog), "shell");
    let Loc::User { image, offset } = loc else {
        panic!("{loc:?}")
    };
    assert_eq!(offset, 0x10);
    assert_eq!(&*t.image(image).name, "sh");
    // Exec drops them and renames.
    t.on_comm(11, 11, b"dd", true, None);
    assert_eq!(t.attribute(11, 0x1010, false).unwrap().2, Loc::Unknown);
    t.on_mmap(11, 0x4000, 0x2000, 0x3000, b"/usr/bin/dd", Some((8, 1, 6)));
    let (_, prog, loc) = t.attribute(11, 0x5000, false).unwrap();
    assert_eq!(&**t.program_name(prog), "dd");
    assert!(matches!(loc, Loc::User { offset: 0x4000, .. }));
    // The parent is untouched.
    assert!(matches!(
        t.attribute(10, 0x1010, false).unwrap().2,
        Loc::User { .. }
    ));
    // Kernel samples keep the program.
    let (_, prog, loc) = t.attribute(11, 0xffff_ffff_8100_0000, true).unwrap();
    assert_eq!(&**t.program_name(prog), "dd");
    assert_eq!(loc, Loc::Kernel(0xffff_ffff_8100_0000));
    // Exit then gc forgets it.
    t.on_exit(11, 11, 100);
    t.gc(50);
    assert_eq!(t.len(), 3);
    t.gc(200);
    assert_eq!(t.len(), 2);
}

#[test]
fn overlapping_mappings_are_trimmed() {
    let mut m = BTreeMap::new();
    insert_mapping(&mut m, 0x1000, 0x5000, 0, 1);
    insert_mapping(&mut m, 0x2000, 0x3000, 0x100, 2);
    let v: Vec<(u64, u64, u64, u32)> = m
        .iter()
        .map(|(&s, x)| (s, x.end, x.pgoff, x.image))
        .collect();
    assert_eq!(
        v,
        vec![
            (0x1000, 0x2000, 0, 1),
            (0x2000, 0x3000, 0x100, 2),
            (0x3000, 0x5000, 0x2000, 1)
        ]
    );
}

#[test]
fn pid_tree_rules_follow_forks_and_scope_filters() {
    let rules = vec![NodeRule::Pid {
        node: "a".into(),
        pid: 50,
    }];
    let nodes = Nodes::new("h", &rules, Scope::Pid(60)).unwrap();
    let mut t = Tracker::new(nodes, false);
    t.apply_snapshot(vec![
        ProcInfo {
            pid: 50,
            ppid: 1,
            comm: "root".into(),
            maps: vec![],
            facts: None,
        },
        ProcInfo {
            pid: 60,
            ppid: 50,
            comm: "child".into(),
            maps: vec![],
            facts: None,
        },
    ]);
    // 60 is under 50's tree (node a) and is the scope root.
    assert_eq!(t.node_of(60), Some(0));
    // 50 is outside the --pid scope.
    assert_eq!(t.node_of(50), None);
    t.on_fork(61, 60, 61);
    assert_eq!(t.node_of(61), Some(0));
    // An unrelated process is out of scope.
    t.on_fork(70, 1, 70);
    assert_eq!(t.node_of(70), None);
}

#[test]
fn a_namespace_record_moves_a_process_to_its_node() {
    use std::os::unix::fs::MetadataExt as _;
    let rules = vec![NodeRule::Netns {
        node: "n".into(),
        path: "/proc/self/ns/net".into(),
    }];
    let ino = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
    let mut t = Tracker::new(Nodes::new("h", &rules, Scope::System).unwrap(), false);
    t.on_fork(500, 400, 500);
    // Unknown parent: unassigned (the fallback, index 1).
    assert_eq!(t.node_of(500), Some(1));
    t.on_netns(500, 500, ino);
    assert_eq!(t.node_of(500), Some(0));
    // A child inherits the node.
    t.on_fork(501, 500, 501);
    assert_eq!(t.node_of(501), Some(0));
    // Another namespace: no node.
    t.on_netns(501, 501, ino + 1);
    assert_eq!(t.node_of(501), Some(1));
}

#[test]
fn kworkers_share_a_name() {
    let mut t = tracker();
    t.on_fork(300, 2, 300);
    t.on_comm(300, 300, b"kworker/u4:2-events_unbound", false, None);
    let (_, prog, _) = t.attribute(300, 0xffff_ffff_8100_0000, true).unwrap();
    assert_eq!(&**t.program_name(prog), "kworker");
}
