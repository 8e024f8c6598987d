//! Helpers for culprit's end-to-end tests: finding the built `culprit` binary and
//! `libculprit_rt.so`, compiling C programs with gcc at test time, temporary directories, and
//! the privilege rule (in CI, `CI=true`, a missing privilege fails the test; elsewhere the test
//! skips with a printed reason).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The workspace root (the directory holding the root `Cargo.toml`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The cargo profile directory the test binary was built into (`target/debug` or
/// `target/release`), where `culprit` and `libculprit_rt.so` are built too.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test-binary>
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// Builds the `culprit` binary (with the lab: `culprit demo`, `culprit experiment`) and
/// `libculprit_rt.so` (once per test process) in the same profile as the tests, so `cargo test`
/// alone is enough. Under scripts/test (`CULPRIT_TESTS_PREBUILT` set) they were built first,
/// with the tests' features, and are only checked for.
///
/// It also makes every process the tests start trace every function (`CULPRIT_BUDGET=off`,
/// unless the environment or a test's own `Command` says otherwise): the exact counts the
/// tests check must not depend on the runtime's cost budget, which would demote the hot
/// functions of their small programs on a slow machine. tests/tests/budget.rs tests the
/// budget, setting it on the commands it starts.
pub fn ensure_built() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        if std::env::var_os("CULPRIT_BUDGET").is_none() {
            // Before any traced process is started (they all go through here first); std's
            // environment lock orders it with other threads' spawns.
            std::env::set_var("CULPRIT_BUDGET", "off");
        }
        if std::env::var_os("CULPRIT_TESTS_PREBUILT").is_some() {
            // scripts/test built them first, with the tests' features; building here would
            // build the binary's dependencies a second time with the binary's own.
            for f in ["culprit", "libculprit_rt.so"] {
                let p = profile_dir().join(f);
                assert!(
                    p.exists(),
                    "CULPRIT_TESTS_PREBUILT is set but {} is missing: run \
                     `cargo build --workspace --all-targets` first (scripts/test does)",
                    p.display()
                );
            }
            return;
        }
        let release = profile_dir().file_name().is_some_and(|n| n == "release");
        let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
        cmd.current_dir(workspace_root()).args([
            "build",
            "-q",
            "-p",
            "culprit",
            "-p",
            "culprit-rt",
            "--features",
            "culprit/lab,culprit/full",
        ]);
        if release {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("run cargo build");
        assert!(st.success(), "cargo build of culprit and culprit-rt failed");
    });
}

/// Path of the built `culprit` binary.
pub fn culprit_bin() -> PathBuf {
    ensure_built();
    profile_dir().join("culprit")
}

/// Path of the built `libculprit_rt.so`.
pub fn runtime_lib() -> PathBuf {
    ensure_built();
    profile_dir().join("libculprit_rt.so")
}

/// A `Command` for the built `culprit` binary, with times for people in UTC (`TZ=UTC`) so
/// tests that compare text do not depend on the machine's zone.
pub fn culprit() -> Command {
    let mut cmd = Command::new(culprit_bin());
    cmd.env("TZ", "UTC");
    cmd
}

/// A temporary directory removed on drop (kept when `CULPRIT_KEEP_TEST_DIRS` is set).
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates a fresh directory named after `tag`.
    pub fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("culprit-test-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `self.path().join(p)`.
    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("CULPRIT_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Compiles C `sources` into the executable or shared object `out` with gcc and `flags`.
/// Panics with gcc's output on failure.
///
/// A compile of committed sources with flags that name no temporary path is done once per
/// build directory: the result is kept under `target/<profile>/c-fixtures/`, keyed by the
/// flags, the output's name and the bytes of the sources and of every committed header, and
/// copied to `out` the next time (many tests compile the same fixture).
pub fn gcc(sources: &[&Path], out: &Path, flags: &[&str]) {
    let cached = fixture_key(sources, out, flags).map(|k| profile_dir().join("c-fixtures").join(k));
    if let Some(c) = &cached {
        if c.exists() && cp(c, out) {
            return;
        }
    }
    compile(sources, out, flags);
    if let Some(c) = &cached {
        // Written aside and renamed: test processes running side by side never see half a file.
        let dir = c.parent().expect("cache file has a directory");
        let tmp = dir.join(format!(".{}.{}", std::process::id(), unique()));
        let kept = std::fs::create_dir_all(dir).is_ok() && cp(out, &tmp) && {
            std::fs::rename(&tmp, c).is_ok()
        };
        if !kept {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// Copies `from` to `to` with cp(1). Not `std::fs::copy`: a descriptor this process opens to
/// write an executable is inherited by any child another test thread forks meanwhile, and
/// until that child execs, running the executable fails with ETXTBSY ("Text file busy").
fn cp(from: &Path, to: &Path) -> bool {
    Command::new("cp")
        .arg(from)
        .arg(to)
        .status()
        .is_ok_and(|s| s.success())
}

/// A number no other call in this process gets.
fn unique() -> u32 {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// The cache key of a compile, or None when it must not be cached (a source or flag under the
/// temporary directory: generated sources, libraries linked from a test's own directory).
fn fixture_key(sources: &[&Path], out: &Path, flags: &[&str]) -> Option<String> {
    use std::hash::{Hash, Hasher};
    let tmp = std::env::temp_dir();
    let tmp = tmp.to_str()?;
    if flags.iter().any(|f| f.contains(tmp)) || sources.iter().any(|s| s.starts_with(tmp)) {
        return None;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    flags.hash(&mut h);
    out.file_name()?.hash(&mut h);
    for s in sources {
        std::fs::read(s).ok()?.hash(&mut h);
    }
    for dir in [c_source(""), include_dir()] {
        let mut headers: Vec<PathBuf> = std::fs::read_dir(&dir)
            .ok()?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "h"))
            .collect();
        headers.sort();
        for p in headers {
            std::fs::read(&p).ok()?.hash(&mut h);
        }
    }
    Some(format!(
        "{:016x}-{}",
        h.finish(),
        out.file_name()?.to_string_lossy()
    ))
}

fn compile(sources: &[&Path], out: &Path, flags: &[&str]) {
    let mut cmd = Command::new("gcc");
    cmd.args(flags).arg("-o").arg(out);
    for s in sources {
        cmd.arg(s);
    }
    let o = cmd.output().expect("run gcc");
    assert!(
        o.status.success(),
        "gcc {:?} failed:\n{}",
        cmd,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Path of a C source under `tests/c/`.
pub fn c_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("c").join(name)
}

/// Path of the committed C header directory (`include/`).
pub fn include_dir() -> PathBuf {
    workspace_root().join("include")
}

/// True when running in CI (`CI=true`), where missing privileges fail tests instead of
/// skipping them.
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// True when running as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// True when this process may sample system-wide: the sampler's own probe opens a system-wide
/// event, so the answer is the kernel's (root, CAP_PERFMON, or `kernel.perf_event_paranoid`).
pub fn can_sample() -> bool {
    culprit_sampler::probe::system_wide_sampling().is_ok()
}

/// Sets `kernel.perf_event_paranoid` to at least 1 (an unprivileged user may then not sample
/// system-wide) until the guard is dropped, when it is lower; `None` when it cannot be read or
/// set (not root). The tests of one binary that hold a guard run one after the other.
pub fn refuse_unprivileged_sampling() -> Option<ParanoidGuard> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let lock = ONE.lock().unwrap_or_else(|e| e.into_inner());
    let old = culprit_sampler::perf_event_paranoid()?;
    if old >= 1 {
        return Some(ParanoidGuard {
            restore: None,
            _lock: lock,
        });
    }
    std::fs::write("/proc/sys/kernel/perf_event_paranoid", "2").ok()?;
    Some(ParanoidGuard {
        restore: Some(old),
        _lock: lock,
    })
}

/// Restores `kernel.perf_event_paranoid` on drop (see [`refuse_unprivileged_sampling`]).
#[derive(Debug)]
pub struct ParanoidGuard {
    restore: Option<i32>,
    _lock: std::sync::MutexGuard<'static, ()>,
}

impl Drop for ParanoidGuard {
    fn drop(&mut self) {
        if let Some(v) = self.restore {
            let _ = std::fs::write("/proc/sys/kernel/perf_event_paranoid", v.to_string());
        }
    }
}

/// Cross-checks the tests' own decoding of a data file (the format crate's in-memory decoder
/// over the whole file, [`culprit_format::ParsedFile`]) with the reader `culprit report` and
/// `diagnose` use ([`culprit_format::read::StreamReader`], record by record, on the same
/// bytes: a file still being written may have grown since): the same records at the same
/// offsets, the same end. Panics when they disagree.
pub fn reader_agrees(path: &Path, bytes: &[u8]) {
    use culprit_format::read::{StreamReader, StreamState};
    use culprit_format::ParsedFile;
    let whole = ParsedFile::parse(bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut expect = Vec::new();
    let mut recs = whole.records();
    loop {
        let at = recs.offset();
        match recs.next() {
            Some(Ok(r)) => expect.push((at, format!("{r:?}"))),
            Some(Err(_)) | None => break,
        }
    }
    let mut stream =
        StreamReader::open(bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut got = Vec::new();
    loop {
        let at = stream.offset();
        match stream.next_record().expect("read") {
            Some(r) => got.push((at, format!("{r:?}"))),
            None => break,
        }
    }
    assert_eq!(
        got,
        expect,
        "{}: the stream reader disagrees",
        path.display()
    );
    let damaged = recs.failed() || whole.truncated;
    assert_eq!(
        matches!(stream.state(), StreamState::Damaged(_)),
        damaged,
        "{}: {:?}",
        path.display(),
        stream.state()
    );
    if !damaged {
        assert_eq!(
            stream.state() == &StreamState::Ended,
            whole.ended(),
            "{}",
            path.display()
        );
    }
}

/// Writes a synthetic sampler run of a peer group under `root` (the golden test's data): four
/// nodes `io0`..`io3`, 10 s cpu-clock samples at period 1,000,000 ns for 6 minutes from
/// 2024-01-01T00:00:00Z, deterministic ±5 % wobble. With `fault`, `io2` does 4× its
/// `compress_block` from minute 2; with `stop`, `io3` is killed after 5 minutes (no end marker).
pub fn write_peer_samples(root: &Path, fault: bool, stop: bool) {
    write_peer_samples_with(root, fault, stop, 0.05)
}

/// Peer `n`'s samples file under `root` (`root/io<n>/`, sampler pid 100 + n), started at
/// `start_ns` with cpu-clock sampling at 1 ms and `strings` (id 1 must be `cpu-clock`).
pub fn peer_samples_file(
    root: &Path,
    n: u64,
    start_ns: u64,
    strings: &[(u32, &str)],
) -> culprit_format::writer::FileWriter {
    let info = [("event", "cpu-clock"), ("period", "1000000")];
    let dir = root.join(format!("io{n}"));
    culprit_format::synthetic::samples_file(&dir, start_ns, 100 + n as u32, &info, strings).unwrap()
}

/// [`write_peer_samples`] with a wobble of ±`wobble` (a fraction) instead of ±5 %.
pub fn write_peer_samples_with(root: &Path, fault: bool, stop: bool, wobble: f64) {
    use culprit_format::{end_reason, RecordBuf, SampleEntry, SamplesHead};
    const NS: u64 = 1_000_000_000;
    const T0: u64 = 1_704_067_200;
    let funcs = [
        ("server", "server", "handle_io", 300u64),
        ("server", "server", "compress_block", 120),
        ("server", "[kernel.kallsyms]", "blk_mq_submit_bio", 80),
        ("server", "libc.so.6", "memcpy", 60),
    ];
    for n in 0..4u64 {
        let strings = [
            (1, "cpu-clock"),
            (2, "server"),
            (3, "[kernel.kallsyms]"),
            (4, "libc.so.6"),
            (5, "handle_io"),
            (6, "compress_block"),
            (7, "blk_mq_submit_bio"),
            (8, "memcpy"),
        ];
        let sid = |s: &str| strings.iter().find(|x| x.1 == s).unwrap().0;
        let mut w = peer_samples_file(root, n, T0 * NS, &strings);
        let mut buf = RecordBuf::new();
        let stopped = stop && n == 3;
        let intervals = if stopped { 30 } else { 36 };
        for i in 0..intervals {
            buf.clear();
            let entries: Vec<SampleEntry> = funcs
                .iter()
                .enumerate()
                .map(|(fi, (prog, image, func, base))| {
                    // Deterministic ±5 % wobble.
                    let w = ((n * 7 + i * 13 + fi as u64 * 5) % 11) as f64 / 100.0 - 0.05;
                    let mut v = *base as f64 * (1.0 + w * (wobble / 0.05));
                    if fault && n == 2 && *func == "compress_block" && i >= 12 {
                        v *= 4.0;
                    }
                    SampleEntry {
                        program: sid(prog),
                        image: sid(image),
                        function: sid(func),
                        count: v.round() as u64,
                    }
                })
                .collect();
            let total = entries.iter().map(|e| e.count).sum();
            buf.samples(
                &SamplesHead {
                    start_ns: (T0 + 10 * i) * NS,
                    dur_ns: 10 * NS,
                    flags: 0,
                    event_sid: 1,
                    period: 1_000_000,
                    total,
                    lost: 0,
                },
                entries,
            );
            w.append(&buf).unwrap();
        }
        if !stopped {
            w.finish((T0 + 10 * intervals) * NS, end_reason::SIGNAL)
                .unwrap();
        }
    }
}

/// The one data file of `node` under the data root `root`.
pub fn node_file(root: &Path, node: &str) -> PathBuf {
    std::fs::read_dir(root.join(node))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "cul"))
        .expect("a data file")
}

/// File offsets of the valid records of a data file's bytes (empty when its header is bad).
pub fn record_offsets(bytes: &[u8]) -> Vec<usize> {
    let Ok(f) = culprit_format::ParsedFile::parse(bytes) else {
        return Vec::new();
    };
    let mut recs = f.records();
    let mut out = Vec::new();
    loop {
        let at = recs.offset() as usize;
        match recs.next() {
            Some(Ok(_)) => out.push(at),
            _ => return out,
        }
    }
}

/// Decides whether a test needing a privilege can run: returns true when `have` is true;
/// otherwise panics in CI and prints a visible skip reason elsewhere, returning false.
pub fn require(have: bool, what: &str) -> bool {
    if have {
        return true;
    }
    if in_ci() {
        panic!("this test needs {what}, which CI must provide");
    }
    eprintln!("SKIPPED: this test needs {what}");
    false
}

/// Serializes tests that change machine state (namespaces, nft tables, cgroups, system-wide
/// perf sessions) across test processes with an advisory lock on a file in /tmp.
pub fn machine_lock() -> MachineLock {
    flock("culprit-tests.machine.lock")
}

/// Serializes the tests that pin a group of peer servers to one CPU (diagnose_util's
/// `pinned`), across threads and test processes: two such groups on one CPU starve each other
/// unevenly, and a peer that got less CPU than its peers looks slow. Taken before
/// [`machine_lock`] by a test that takes both.
pub fn pinned_turn() -> MachineLock {
    flock("culprit-tests.pinned.lock")
}

/// The turn of a test that loads the machine on purpose (`stress-ng`, CPU hogs, a starved
/// cgroup): the pinned peers' turn ([`pinned_turn`]), so that no group of pinned peers runs
/// beside it. scripts/run-tests runs these tests last in its lock lane, after the free lane's
/// tests are done, so that no other test runs beside the load either.
pub fn loading_turn() -> MachineLock {
    pinned_turn()
}

/// An exclusive `flock` on `name` in the temporary directory; each call opens the file anew,
/// so the lock excludes other threads of this process too.
fn flock(name: &'static str) -> MachineLock {
    let path = std::env::temp_dir().join(name);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .expect("open machine lock");
    use std::os::fd::AsRawFd;
    let asked = std::time::Instant::now();
    // SAFETY: flock on a file descriptor we own; blocks until the lock is ours.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(rc, 0, "flock {}", path.display());
    MachineLock {
        _file: f,
        name,
        asked,
        got: std::time::Instant::now(),
    }
}

/// Held while a test changes machine state; released on drop.
#[derive(Debug)]
pub struct MachineLock {
    _file: std::fs::File,
    name: &'static str,
    asked: std::time::Instant,
    got: std::time::Instant,
}

impl Drop for MachineLock {
    /// With `CULPRIT_TESTS_LOCK_LOG` set (scripts/run-tests sets it), appends how long the test
    /// waited for the lock and held it: the runner sums them, so a run shows how much of a
    /// lane was waiting rather than testing.
    fn drop(&mut self) {
        let Some(log) = std::env::var_os("CULPRIT_TESTS_LOCK_LOG") else {
            return;
        };
        let binary = std::env::current_exe()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default();
        let binary = binary.rsplit_once('-').map_or(binary.as_str(), |(b, _)| b);
        let test = std::thread::current().name().unwrap_or("?").to_string();
        let line = format!(
            "{binary}\t{test}\t{}\t{:.1}\t{:.1}\n",
            self.name
                .trim_start_matches("culprit-tests.")
                .trim_end_matches(".lock"),
            (self.got - self.asked).as_secs_f64(),
            self.got.elapsed().as_secs_f64()
        );
        use std::io::Write as _;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// Analysis options for the tests' short runs: 1 s windows every 500 ms (multiples of their
/// 100 or 200 ms records), and the time rule at 1 ms per window (the default 1 s suits 60 s
/// windows of real servers, not 1 s windows of a small test server). Count uses the time rule
/// (seed 000), so faults are injected into functions that pass it.
pub const SHORT_WINDOWS: [&str; 6] = [
    "--win-size",
    "1s",
    "--win-shift",
    "500ms",
    "--min-time",
    "1ms",
];

/// Runs `cmd`, panicking with its stderr unless it succeeds; returns the output.
pub fn run_ok(cmd: &mut Command) -> Output {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    // A panic in one of a tool's threads can leave the command's status 0: a bug all the
    // same. (The runtime's flusher notes its own in the data: `assert_well_formed`.)
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !err.contains("panicked at"),
        "{cmd:?} succeeded, but something in it panicked:\n{err}"
    );
    o
}

/// Parses a command's stdout as JSON, panicking with the text on failure.
pub fn stdout_json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

/// Runs a healthy traced peer group for `secs` seconds and returns its data root: `nodes`
/// each run one process of `c/stuck.c` (three workers serving ~1 ms requests, `main` and the
/// workers' loops open for the whole run), built at -O0 with `-finstrument-functions` and the
/// runtime preloaded, into `dir/data`. Every process exits cleanly (end markers), so the files
/// are final: tests damage copies of them. A run of 12 s or more has open calls past the
/// stuck rule's 10 s, which a damaged stacks region could turn into a wrong "stuck".
pub fn run_traced_group(dir: &Path, nodes: &[&str], secs: u32) -> PathBuf {
    let exe = dir.join("stuck-server");
    gcc(
        &[&c_source("stuck.c")],
        &exe,
        &["-finstrument-functions", "-O0", "-g", "-pthread"],
    );
    let data = dir.join("data");
    let mut kids: Vec<std::process::Child> = nodes
        .iter()
        .map(|n| {
            Command::new(&exe)
                .arg(secs.to_string())
                .env("CULPRIT_DIR", &data)
                .env("CULPRIT_NODE", n)
                .env("LD_PRELOAD", runtime_lib())
                .spawn()
                .expect("start the traced server")
        })
        .collect();
    for k in &mut kids {
        let st = k.wait().expect("wait for the traced server");
        assert!(st.success(), "the traced server failed: {st}");
    }
    data
}

/// `stress-ng --cpu N` running beside a test, in a process group of its own, killed (the
/// whole group) when dropped: a host whose CPUs are all busy, on which the collectors must
/// still be exact. `None`, after [`require`] said why, when stress-ng is not installed
/// (`scripts/install-deps` installs it).
#[derive(Debug)]
pub struct CpuLoad {
    child: std::process::Child,
}

impl CpuLoad {
    /// Starts `n` CPU hogs for at most `limit` (a backstop should the test die unwound).
    pub fn start(n: u32, limit: std::time::Duration) -> Option<CpuLoad> {
        use std::os::unix::process::CommandExt as _;
        let spawned = Command::new("stress-ng")
            .args(["--cpu", &n.to_string(), "--timeout"])
            .arg(format!("{}s", limit.as_secs().max(1)))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .spawn();
        match spawned {
            Ok(child) => {
                // Let the hogs start before the measurement does.
                std::thread::sleep(std::time::Duration::from_millis(500));
                Some(CpuLoad { child })
            }
            Err(e) => {
                require(
                    false,
                    &format!("stress-ng ({e}; scripts/install-deps installs it)"),
                );
                None
            }
        }
    }
}

impl Drop for CpuLoad {
    fn drop(&mut self) {
        // SAFETY: kill takes plain integers; the negative pid names the group made above.
        unsafe {
            libc::kill(-(self.child.id() as libc::pid_t), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}
