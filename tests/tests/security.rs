//! The writers as an attacker and a careless operator would try them (tests/c/security.c;
//! docs/security.md has the threat model):
//!
//! * links planted where the runtime and the sampler create things (node directories,
//!   `node.info`, the old predictable temporary names), directories others control, umask 000;
//! * a set-user-id program linked with the runtime, run by an unprivileged user;
//! * the live data file truncated, removed, replaced; a full disk; descriptor 2 reused by a
//!   forked child that dropped privileges;
//! * loss: pre-forked workers that `_exit`, `abort`, SIGSEGV, the bound of what a crash loses,
//!   a signal handler at 1 kHz, 20,000 short threads.
//!
//! Each attack checks that no victim file changed and that the host exited normally. The
//! tests that need root (chown, setuid, mount) skip with a reason elsewhere and fail in CI.

mod tracer_util;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use culprit_format::names;
use culprit_tests::*;
use tracer_util::*;

const NOBODY: u32 = 65534;

fn security(dir: &Path, link: Link) -> PathBuf {
    build(
        dir,
        "security.c",
        &format!("security-{link:?}"),
        "-O2",
        link,
    )
}

/// A file an attack must not change, and its contents.
struct Victim {
    path: PathBuf,
    text: &'static str,
}

impl Victim {
    fn new(path: PathBuf, text: &'static str) -> Victim {
        std::fs::write(&path, text).unwrap();
        Victim { path, text }
    }

    fn assert_unchanged(&self) {
        let now = std::fs::read_to_string(&self.path)
            .unwrap_or_else(|e| panic!("{}: {e}", self.path.display()));
        assert_eq!(now, self.text, "{} was changed", self.path.display());
    }
}

/// Every file under `dir` with its contents (for "nothing changed here").
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                stack.push(p);
            } else if m.is_file() {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            } else {
                out.insert(p.clone(), b"<link>".to_vec());
            }
        }
    }
    out
}

fn chown(p: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().mode() & 0o7777
}

fn trace_files(node_dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(node_dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("trace-"))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The runtime's environment on `cmd`.
fn rt_env(cmd: &mut Command, link: Link, data: &Path, node: &str) {
    cmd.env("CULPRIT_DIR", data).env("CULPRIT_NODE", node);
    for v in [
        "CULPRIT_INCLUDE",
        "CULPRIT_EXCLUDE",
        "CULPRIT_INTERVAL_MS",
        "CULPRIT_TRACE_FILE",
    ] {
        cmd.env_remove(v);
    }
    if link == Link::Preload {
        cmd.env("LD_PRELOAD", runtime_lib());
    }
}

/// Runs `prog args` through a shell that first prints its pid (the program's, after `exec`)
/// and waits for a line on stdin: `plant(pid)` runs in between. Returns the program's output.
fn run_with_pid(mut cmd: Command, plant: impl FnOnce(u32)) -> std::process::Output {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let pid: u32 = line.trim().parse().unwrap();
    plant(pid);
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut out, &mut rest).unwrap();
    let mut o = child.wait_with_output().unwrap();
    o.stdout = rest;
    o
}

/// `sh -c 'echo $$; read x; exec PROG ARGS'`.
fn shell_then(prog: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(r#"echo $$; read x; exec "$0" "$@""#)
        .arg(prog)
        .args(args);
    c
}

// ---------------------------------------------------------------------------------------------
// Links and directories.

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn directories_others_control_are_refused_with_one_line() {
    if !require(is_root(), "root (to give directories to another user)") {
        return;
    }
    let tmp = TempDir::new("sec-refuse");
    let exe = security(tmp.path(), Link::Linked);
    let victim_dir = tmp.join("victim");
    std::fs::create_dir(&victim_dir).unwrap();
    let victim = Victim::new(victim_dir.join(names::NODE_INFO_FILE), "authorized_keys\n");
    type Setup = fn(&Path, &Path);
    let cases: [(&str, Setup, &str); 4] = [
        (
            "a data root owned by another user",
            |data, _| {
                std::fs::create_dir(data).unwrap();
                chown(data, NOBODY, NOBODY);
            },
            "owned by uid 65534",
        ),
        (
            "a world-writable data root",
            |data, _| {
                std::fs::create_dir(data).unwrap();
                chmod(data, 0o777);
            },
            "writable by every user",
        ),
        (
            "a node directory that is a link",
            |data, victim_dir| {
                std::fs::create_dir(data).unwrap();
                std::os::unix::fs::symlink(victim_dir, data.join("n1")).unwrap();
            },
            "symbolic link",
        ),
        (
            "a node directory owned by another user",
            |data, _| {
                std::fs::create_dir_all(data.join("n1")).unwrap();
                chown(&data.join("n1"), NOBODY, NOBODY);
            },
            "owned by uid 65534",
        ),
    ];
    for (i, (what, setup, why)) in cases.into_iter().enumerate() {
        let data = tmp.join(format!("data{i}"));
        setup(&data, &victim_dir);
        let before = snapshot(&data);
        let o = run(traced(&exe, Link::Linked, &data, "n1").args(["work", "1000"]));
        assert_eq!(stdout(&o), "ok\n", "{what}");
        let err = stderr(&o);
        assert_eq!(err.lines().count(), 1, "{what}: one line:\n{err}");
        assert!(
            err.starts_with("culprit: refusing to write under") && err.contains(why),
            "{what}: {err}"
        );
        assert!(err.contains("running untraced"), "{what}: {err}");
        assert_eq!(snapshot(&data), before, "{what}: nothing written");
        victim.assert_unchanged();
        assert_eq!(
            std::fs::read_dir(&victim_dir).unwrap().count(),
            1,
            "{what}: nothing created in the victim directory"
        );
    }
}

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn links_planted_in_a_group_shared_node_dir_are_replaced_not_followed() {
    if !require(
        is_root(),
        "root (to share a directory with another user's group)",
    ) {
        return;
    }
    let tmp = TempDir::new("sec-plant");
    chmod(tmp.path(), 0o755);
    let exe = security(tmp.path(), Link::Linked);
    let data = tmp.join("data");
    let node = data.join("n1");
    std::fs::create_dir_all(&node).unwrap();
    // The documented shared set-up: root-owned, group-writable, set-group-id. Group 65534
    // (nobody's) stands for a group an attacker belongs to.
    chown(&node, 0, NOBODY);
    chmod(&node, 0o2770);
    let info = Victim::new(tmp.join("victim-info"), "ssh-ed25519 AAAA root@host\n");
    let tmp1 = Victim::new(tmp.join("victim-tmp1"), "root only\n");
    let tmp2 = Victim::new(tmp.join("victim-tmp2"), "root only too\n");
    std::os::unix::fs::symlink(&info.path, node.join(names::NODE_INFO_FILE)).unwrap();
    let mut cmd = shell_then(&exe, &["work", "1000"]);
    rt_env(&mut cmd, Link::Linked, &data, "n1");
    let o = run_with_pid(cmd, |pid| {
        // Yesterday's predictable temporary names (runtime, then sampler).
        for (name, v) in [
            (format!(".node.info.tmp.{pid}"), &tmp1),
            (format!(".node.info.tmp-{pid}"), &tmp2),
        ] {
            std::os::unix::fs::symlink(&v.path, node.join(name)).unwrap();
        }
    });
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), "ok\n");
    assert_eq!(stderr(&o), "", "nothing printed");
    for v in [&info, &tmp1, &tmp2] {
        v.assert_unchanged();
    }
    let ni = node.join(names::NODE_INFO_FILE);
    let m = std::fs::symlink_metadata(&ni).unwrap();
    assert!(m.is_file(), "node.info is a regular file now");
    assert_eq!((m.uid(), m.mode() & 0o7777), (0, 0o644));
    let text = std::fs::read_to_string(&ni).unwrap();
    assert!(text.starts_with("culprit-node 1\n"), "{text}");
    assert!(
        !text.contains("ssh-ed25519"),
        "nothing copied through the link: {text}"
    );
    let files = trace_files(&node);
    assert_eq!(files.len(), 1);
    let m = std::fs::metadata(&files[0]).unwrap();
    assert_eq!(
        (m.mode() & 0o7777, m.gid()),
        (0o644, NOBODY),
        "set-group-id kept"
    );
    assert_eq!(load_one(&node).func("leaf").calls, 1000);
}

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn node_info_written_by_another_user_is_not_copied() {
    if !require(is_root(), "root (to own files as another user)") {
        return;
    }
    let tmp = TempDir::new("sec-nocopy");
    let exe = security(tmp.path(), Link::Linked);
    let data = tmp.join("data");
    let node = data.join("n1");
    std::fs::create_dir_all(&node).unwrap();
    chown(&node, 0, NOBODY);
    chmod(&node, 0o2770);
    let ni = node.join(names::NODE_INFO_FILE);
    std::fs::write(&ni, "culprit-node 1\nplanted=yes\n").unwrap();
    chown(&ni, NOBODY, NOBODY);
    run(traced(&exe, Link::Linked, &data, "n1").args(["work", "10"]));
    let text = std::fs::read_to_string(&ni).unwrap();
    assert!(!text.contains("planted"), "{text}");
    assert!(text.contains("trace_interval_ns="), "{text}");
    // A root-owned one is kept.
    std::fs::write(&ni, "culprit-node 1\nmine=yes\n").unwrap();
    run(traced(&exe, Link::Linked, &data, "n1").args(["work", "10"]));
    assert!(std::fs::read_to_string(&ni).unwrap().contains("mine=yes"));
}

#[test]
fn modes_do_not_depend_on_the_umask() {
    let tmp = TempDir::new("sec-umask");
    for link in [Link::Linked, Link::Preload] {
        let exe = security(tmp.path(), link);
        for umask in ["000", "077"] {
            let data = tmp.join(format!("data-{link:?}-{umask}/deeper"));
            let mut cmd = Command::new("sh");
            cmd.arg("-c")
                .arg(format!(r#"umask {umask}; exec "$0" "$@""#))
                .arg(&exe)
                .args(["work", "100"]);
            rt_env(&mut cmd, link, &data, "n1");
            let o = run(&mut cmd);
            assert_eq!(stderr(&o), "");
            let node = data.join("n1");
            let files = trace_files(&node);
            assert_eq!(files.len(), 1, "{umask}");
            for (p, want) in [
                (data.parent().unwrap(), 0o755),
                (data.as_path(), 0o755),
                (node.as_path(), 0o755),
                (files[0].as_path(), 0o644),
                (node.join(names::NODE_INFO_FILE).as_path(), 0o644),
            ] {
                assert_eq!(mode(p), want, "umask {umask}: {}", p.display());
            }
        }
    }
}

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn a_setuid_program_run_by_another_user_does_not_trace() {
    if !require(is_root(), "root (to make a set-user-id root program)") {
        return;
    }
    let tmp = TempDir::new("sec-setuid");
    chmod(tmp.path(), 0o755);
    // The runtime and the program where `nobody` can read them.
    let lib_dir = tmp.join("lib");
    std::fs::create_dir(&lib_dir).unwrap();
    chmod(&lib_dir, 0o755);
    std::fs::copy(runtime_lib(), lib_dir.join("libculprit_rt.so")).unwrap();
    chmod(&lib_dir.join("libculprit_rt.so"), 0o755);
    let exe = tmp.join("suid");
    run_ok(
        Command::new("gcc")
            .args(["-O2", "-finstrument-functions", "-pthread", "-o"])
            .arg(&exe)
            .arg(c_source("security.c"))
            .arg(format!("-L{}", lib_dir.display()))
            .arg("-lculprit_rt")
            .arg(format!("-Wl,-rpath,{}", lib_dir.display())),
    );
    // What the attacker controls: a data root with a link where the node directory goes.
    let att = tmp.join("att");
    std::fs::create_dir(&att).unwrap();
    chown(&att, NOBODY, NOBODY);
    let secret = tmp.join("secret");
    std::fs::create_dir(&secret).unwrap();
    let victim = Victim::new(secret.join(names::NODE_INFO_FILE), "root's file\n");
    let data = att.join("data");
    std::fs::create_dir(&data).unwrap();
    chown(&data, NOBODY, NOBODY);
    std::os::unix::fs::symlink(&secret, data.join("n1")).unwrap();
    let as_nobody = |exe: &Path, data: &Path| {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
        ])
        .arg(exe)
        .args(["work", "1000"]);
        rt_env(&mut c, Link::Linked, data, "n1");
        c.output().unwrap()
    };
    // Control: the same program without the set-user-id bit traces into a directory of
    // nobody's (so the runtime is there and obeys the environment).
    chmod(&exe, 0o755);
    let own = att.join("own");
    std::fs::create_dir(&own).unwrap();
    chown(&own, NOBODY, NOBODY);
    let o = as_nobody(&exe, &own);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(trace_files(&own.join("n1")).len(), 1, "control run traced");
    // Set-user-id root, run by nobody: secure execution, nothing written, nothing printed.
    chown(&exe, 0, 0);
    chmod(&exe, 0o4755);
    let before = snapshot(tmp.path());
    let o = as_nobody(&exe, &data);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stdout(&o), "ok\n");
    assert_eq!(stderr(&o), "", "silent");
    victim.assert_unchanged();
    assert_eq!(snapshot(tmp.path()), before, "nothing written anywhere");
    // Even a data directory the program's owner would accept is left alone.
    let root_data = tmp.join("rootdata");
    let o = as_nobody(&exe, &root_data);
    assert!(o.status.success());
    assert!(!root_data.exists(), "not created");
}

// ---------------------------------------------------------------------------------------------
// The live file, the disk, descriptor 2.

/// Runs `security slow MS` traced with 200 ms intervals, doing `attack(file)` to the live
/// file once it has data; returns (program output, node dir).
fn slow_with(
    tmp: &TempDir,
    tag: &str,
    attack: impl FnOnce(&Path),
) -> (std::process::Output, PathBuf) {
    let exe = security(tmp.path(), Link::Preload);
    let data = tmp.join(tag);
    let node = data.join("n1");
    let mut cmd = traced(&exe, Link::Preload, &data, "n1");
    cmd.env("CULPRIT_INTERVAL_MS", "200")
        .args(["slow", "1500"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    let t0 = Instant::now();
    let file = loop {
        let f = trace_files(&node);
        if let Some(f) = f.first() {
            if std::fs::metadata(f).unwrap().len() > 4096 {
                break f.clone();
            }
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no trace file");
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(400));
    attack(&file);
    (child.wait_with_output().unwrap(), node)
}

/// The host ran to its end; the runtime continued in a new file that says why.
fn assert_continued(o: &std::process::Output, node: &Path, what: &str) {
    assert!(o.status.success(), "{what}: host died: {o:?}");
    assert!(stdout(o).starts_with("leaf="), "{what}");
    assert_eq!(stderr(o), "", "{what}: nothing printed");
    let procs: Vec<_> = load(node)
        .into_iter()
        .filter(|p| p.info.contains_key("continues"))
        .collect();
    assert_eq!(procs.len(), 1, "{what}: one continuation file");
    let p = &procs[0];
    assert!(p.ended && p.end_record, "{what}: continuation ended");
    let trouble = p.info.get("trouble").cloned().unwrap_or_default();
    assert!(trouble.contains(what), "{what}: trouble note: {trouble:?}");
    assert!(p.func("leaf").calls > 0, "{what}: counts after the attack");
}

#[test]
fn truncating_removing_or_replacing_the_live_file_does_not_kill_the_host() {
    let tmp = TempDir::new("sec-live");
    let (o, node) = slow_with(&tmp, "trunc", |f| {
        std::fs::OpenOptions::new()
            .write(true)
            .open(f)
            .unwrap()
            .set_len(0)
            .unwrap();
    });
    assert_continued(&o, &node, "was cut short");
    let (o, node) = slow_with(&tmp, "rm", |f| std::fs::remove_file(f).unwrap());
    assert_continued(&o, &node, "was removed");
    let (o, node) = slow_with(&tmp, "mv", |f| {
        let other = f.with_extension("planted");
        std::fs::write(&other, b"x").unwrap();
        std::fs::rename(&other, f).unwrap();
    });
    assert_continued(&o, &node, "was replaced");
}

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn a_full_disk_delays_the_records_and_loses_none() {
    if !require(is_root(), "root (to mount a small tmpfs)") {
        return;
    }
    let tmp = TempDir::new("sec-full");
    let mnt = tmp.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    run_ok(
        Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
            .arg(&mnt),
    );
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(mnt.clone());
    let exe = security(tmp.path(), Link::Linked);
    let data = mnt.join("data");
    let node = data.join("n1");
    let mut cmd = traced(&exe, Link::Linked, &data, "n1");
    cmd.env("CULPRIT_INTERVAL_MS", "100")
        .args(["slow", "2500"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = cmd.spawn().unwrap();
    // Once the runtime has started (its file has committed records past the header and the
    // stacks region; the file's length alone counts the sparse stacks region, which exists
    // from creation on): a disk full at start-up would be a start-up failure, reported on
    // stderr.
    let started = |f: &PathBuf| {
        let bytes = std::fs::read(f).unwrap_or_default();
        culprit_format::parse_header(&bytes).is_ok_and(|(h, _)| h.committed_end > h.data_offset)
    };
    let t0 = Instant::now();
    while trace_files(&node).first().is_none_or(|f| !started(f)) {
        assert!(t0.elapsed() < Duration::from_secs(10), "no trace file");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Fill the disk for a second: every interval record (64 functions, ~2 KiB) then fails.
    let filler = mnt.join("filler");
    {
        let mut f = std::fs::File::create(&filler).unwrap();
        let block = vec![0u8; 4096];
        while f.write_all(&block).is_ok() {}
    }
    std::thread::sleep(Duration::from_millis(1000));
    std::fs::remove_file(&filler).unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{o:?}");
    assert_eq!(stderr(&o), "", "nothing printed");
    let leaf: u64 = stdout(&o)
        .trim()
        .strip_prefix("leaf=")
        .unwrap()
        .parse()
        .unwrap();
    let p = load_one(&node);
    assert_well_formed(&p);
    assert_eq!(p.func("leaf").calls, leaf, "no call lost");
    let trouble = p.info.get("trouble").cloned().unwrap_or_default();
    assert!(
        trouble.contains("writes failed") && trouble.contains("No space left"),
        "{trouble:?}"
    );
}

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn a_child_that_reused_fd_2_after_setuid_gets_no_message() {
    if !require(is_root(), "root (to drop privileges in a child)") {
        return;
    }
    let tmp = TempDir::new("sec-fd2");
    chmod(tmp.path(), 0o755);
    for link in [Link::Linked, Link::Preload] {
        let exe = security(tmp.path(), link);
        let victim = tmp.join(format!("victim-{link:?}"));
        std::fs::write(&victim, "").unwrap();
        chmod(&victim, 0o666);
        let data = tmp.join(format!("data-{link:?}"));
        let o = run(traced(&exe, link, &data, "n1")
            .arg("fd2")
            .arg(&victim)
            .arg("5000"));
        assert_eq!(stdout(&o), "ok\n");
        assert_eq!(stderr(&o), "");
        // The child could not write its own trace file (its node directory is root's): it
        // ran untraced, and its descriptor 2 (the victim) got nothing from the runtime.
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "child\n",
            "{link:?}"
        );
        let p = load_one(&data.join("n1"));
        assert_eq!(p.func("leaf").calls, 5000);
    }
}

// ---------------------------------------------------------------------------------------------
// Loss.

#[test]
fn twenty_prefork_workers_that_exit_leave_exact_counts() {
    let tmp = TempDir::new("sec-prefork");
    for link in [Link::Linked, Link::Preload] {
        let exe = security(tmp.path(), link);
        let data = tmp.join(format!("{link:?}"));
        let o = run(traced(&exe, link, &data, "n1").args(["prefork", "20", "5000"]));
        assert_eq!(stdout(&o), "ok\n", "the workers' _exit status is kept");
        let procs = load(&data.join("n1"));
        assert_eq!(procs.len(), 21, "{link:?}: every worker left a file");
        for p in &procs {
            assert_well_formed(p);
            assert_eq!(p.func("leaf").calls, 5000, "{link:?}: {}", p.file.display());
        }
    }
}

#[test]
fn abort_and_sigsegv_keep_the_interval_in_progress() {
    let tmp = TempDir::new("sec-crash");
    for link in [Link::Linked, Link::Preload] {
        let exe = security(tmp.path(), link);
        for (how, sig) in [("abort", libc::SIGABRT), ("segv", libc::SIGSEGV)] {
            let data = tmp.join(format!("{link:?}-{how}"));
            let o = traced(&exe, link, &data, "n1")
                .args(["crash", how, "30000"])
                .output()
                .unwrap();
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(o.status.signal(), Some(sig), "{o:?}");
            let p = load_one(&data.join("n1"));
            assert!(!p.ended);
            assert_eq!(
                p.func("leaf").calls,
                30000,
                "{link:?} {how}: the calls of the last interval are in the checkpoint"
            );
        }
    }
}

#[test]
fn a_crash_loses_at_most_the_last_checkpoint_period() {
    let tmp = TempDir::new("sec-bound");
    let exe = security(tmp.path(), Link::Preload);
    let data = tmp.join("d");
    let k = 1500u64;
    let o = traced(&exe, Link::Preload, &data, "n1")
        .args(["crashbound", &k.to_string()])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let got = load_one(&data.join("n1")).func("leaf").calls;
    // One call per >= 1 ms: the 100 ms bound is <= 100 calls; 300 leaves room for a flusher
    // delayed by a busy machine.
    assert!(
        got <= k && got + 300 >= k,
        "{got} of {k} calls survived the crash"
    );
}

#[test]
fn calls_of_a_signal_handler_inside_a_hook_are_counted_as_dropped() {
    let tmp = TempDir::new("sec-sig");
    // The hooks' fast path is interruptible (a handler that lands in it is traced, nested);
    // the general path is not, and every call takes it with the monotonic clock.
    for (link, clock) in [
        (Link::Linked, "tsc"),
        (Link::Preload, "tsc"),
        (Link::Linked, "monotonic"),
        (Link::Preload, "monotonic"),
    ] {
        let exe = security(tmp.path(), link);
        let data = tmp.join(format!("{link:?}-{clock}"));
        let o = run(traced(&exe, link, &data, "n1")
            .env("CULPRIT_CLOCK", clock)
            .args(["sigalrm", "2000"]));
        let handled: u64 = stdout(&o)
            .trim()
            .strip_prefix("handled=")
            .unwrap()
            .parse()
            .unwrap();
        assert!(handled > 100, "{handled} signals");
        let p = load_one(&data.join("n1"));
        let dropped: u64 = p.intervals.iter().map(|i| i.dropped as u64).sum();
        let traced_ticks = p.func("tick").calls;
        assert_eq!(
            traced_ticks + dropped,
            handled,
            "{link:?} {clock}: every handler call is traced or counted ({traced_ticks} + {dropped})"
        );
        if clock == "tsc" {
            continue;
        }
        assert!(
            dropped > 0,
            "{link:?}: the loop is mostly hooks: some land inside one"
        );
        let report = stdout(&run(culprit().arg("report").arg(&data)));
        assert!(
            report.contains(&format!("{dropped} call(s) not traced")),
            "{report}"
        );
    }
}

#[test]
fn short_threads_give_their_memory_back_and_keep_their_counts() {
    let tmp = TempDir::new("sec-threads");
    let exe = security(tmp.path(), Link::Preload);
    let data = tmp.join("d");
    let o = run(traced(&exe, Link::Preload, &data, "n1").args(["threads", "20000"]));
    let growth: i64 = stdout(&o)
        .trim()
        .strip_prefix("rss_growth_kb=")
        .unwrap()
        .parse()
        .unwrap();
    // Before: ~16 KiB kept per exited thread until the next flush (hundreds of MB here).
    assert!(
        growth < 8 * 1024,
        "RSS grew by {growth} kB over 20,000 threads"
    );
    let p = load_one(&data.join("n1"));
    assert_well_formed(&p);
    assert_eq!(p.func("leaf").calls, 20000);
    assert_eq!(p.func("one_call").calls, 20000);
}

// ---------------------------------------------------------------------------------------------
// The sampler.

mod sampler_util;

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn the_sampler_refuses_links_and_replaces_planted_node_info() {
    if !require(
        can_sample() && is_root(),
        "root (to sample and to share a directory)",
    ) {
        return;
    }
    let tmp = TempDir::new("sec-smp");
    let victim_dir = tmp.join("victim");
    std::fs::create_dir(&victim_dir).unwrap();
    let victim = Victim::new(victim_dir.join("file"), "root's\n");
    // A link in place of the node directory: one clear error, nothing followed.
    let data = tmp.join("data1");
    std::fs::create_dir(&data).unwrap();
    std::os::unix::fs::symlink(&victim_dir, data.join("n1")).unwrap();
    let o = culprit()
        .args(["sample", "--duration", "1s", "--node", "n1", "-o"])
        .arg(&data)
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("refusing to write under"), "{err}");
    victim.assert_unchanged();
    assert_eq!(std::fs::read_dir(&victim_dir).unwrap().count(), 1);
    // A group-shared node directory with planted links: replaced, not followed.
    let data = tmp.join("data2");
    let node = data.join("n1");
    std::fs::create_dir_all(&node).unwrap();
    chown(&node, 0, NOBODY);
    chmod(&node, 0o2770);
    let info = Victim::new(tmp.join("victim-info"), "ssh-ed25519 AAAA\n");
    let tmpv = Victim::new(tmp.join("victim-tmp"), "root only\n");
    std::os::unix::fs::symlink(&info.path, node.join(names::NODE_INFO_FILE)).unwrap();
    let mut cmd = shell_then(
        &culprit_bin(),
        &["sample", "--duration", "1s", "--node", "n1"],
    );
    cmd.arg("-o").arg(&data);
    let o = run_with_pid(cmd, |pid| {
        std::os::unix::fs::symlink(&tmpv.path, node.join(format!(".node.info.tmp-{pid}"))).unwrap();
    });
    assert!(o.status.success(), "{o:?}");
    info.assert_unchanged();
    tmpv.assert_unchanged();
    let m = std::fs::symlink_metadata(node.join(names::NODE_INFO_FILE)).unwrap();
    assert!(m.is_file());
    assert_eq!(m.mode() & 0o7777, 0o644);
}

#[test]
#[ignore = "needs privileges (root or perf access): scripts/test runs it with --include-ignored"]
fn the_sampler_keeps_its_vdso_copy_out_of_tmpdir() {
    if !require(can_sample(), "root or kernel.perf_event_paranoid=-1") {
        return;
    }
    let tmp = TempDir::new("sec-vdso");
    let exe = security(tmp.path(), Link::Preload);
    let tmpdir = tmp.join("tmp");
    std::fs::create_dir(&tmpdir).unwrap();
    let victim = Victim::new(tmp.join("victim"), "keep\n");
    let data = tmp.join("data");
    let mut spin = Command::new(&exe);
    spin.args(["clock", "3000"]).stdout(Stdio::null());
    let mut cmd = shell_then(
        &culprit_bin(),
        &["sample", "--duration", "2s", "--node", "n1"],
    );
    cmd.arg("-o").arg(&data).env("TMPDIR", &tmpdir);
    let mut spinner = spin.spawn().unwrap();
    let o = run_with_pid(cmd, |pid| {
        // Yesterday's predictable name.
        for n in 0..4 {
            std::os::unix::fs::symlink(
                &victim.path,
                tmpdir.join(format!("culprit-vdso-{pid}-{n}.so")),
            )
            .unwrap();
        }
    });
    let _ = spinner.wait();
    assert!(o.status.success(), "{o:?}");
    victim.assert_unchanged();
    assert_eq!(
        std::fs::read_dir(&tmpdir).unwrap().count(),
        4,
        "nothing but the planted links in TMPDIR"
    );
    let run = sampler_util::read_node(&data, "n1");
    let vdso: Vec<String> = run
        .totals()
        .into_keys()
        .filter(|(_, image, _)| image == "[vdso]")
        .map(|(_, _, f)| f)
        .collect();
    assert!(
        vdso.iter().any(|f| f.contains("gettime")),
        "vDSO samples are named from the in-memory copy: {vdso:?}\n{}",
        run.top(15)
    );
}
