//! Starting the program culprit observes, the way `perf record -- CMD` does: forked and held
//! before `exec` until the perf events are open on it, so its first instructions are observed
//! too ([`Held`]); and SIGINT and SIGTERM sent to culprit by another process passed on to it
//! ([`Forward`]). `culprit record --sample` and `record --uprobes` use both; a plain `record`
//! forwards only ([`run`]); [`observe`] is the held start an observer opens on. Where the
//! tracing runtime is and what a traced run wrote: [`runtime`].

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read as _, Write as _};
use std::os::fd::AsRawFd as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::{Handle, SignalsInfo};
use signal_hook::low_level::siginfo::Cause;

use crate::sys;

pub mod runtime;

/// Why a program could not be started or waited for.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LaunchError {
    /// The command line is empty.
    #[error("no program given")]
    NoProgram,
    /// The program is not on `PATH` (nor a path to a file).
    #[error("cannot run {0}: not found")]
    NotFound(String),
    /// Starting the program failed (fork or `exec`).
    #[error("cannot run {0}")]
    Run(String, #[source] io::Error),
    /// SIGINT and SIGTERM could not be set up to be passed on.
    #[error("cannot forward signals")]
    Forward(#[source] io::Error),
    /// Waiting for the program failed.
    #[error("waiting for the program")]
    Wait(#[source] io::Error),
}

/// The program of `argv` found the way `execvp` finds it, and a command running it with
/// `argv[0]` as given and the rest of `argv` as its arguments.
pub fn command(argv: &[OsString]) -> Result<(PathBuf, Command), LaunchError> {
    let program = argv.first().ok_or(LaunchError::NoProgram)?;
    let path = which::which(program)
        .map_err(|_| LaunchError::NotFound(program.to_string_lossy().into_owned()))?;
    let mut cmd = Command::new(&path);
    cmd.arg0(program).args(&argv[1..]);
    Ok((path, cmd))
}

/// Runs `cmd` to its end, SIGINT and SIGTERM passed on to it ([`Forward`]): its pid and exit
/// code ([`exit_code`]). Errors call the program `name`.
pub fn run(mut cmd: Command, name: &str) -> Result<(u32, i32), LaunchError> {
    let mut child = cmd
        .spawn()
        .map_err(|e| LaunchError::Run(name.to_string(), e))?;
    let pid = child.id();
    let forward = Forward::to(pid).map_err(LaunchError::Forward)?;
    let status = child.wait().map_err(LaunchError::Wait)?;
    drop(forward);
    Ok((pid, exit_code(status)))
}

/// Runs `cmd` observed from its first instruction, as `perf record -- CMD` does: the child is
/// held before `exec` while `open` opens the observer on its pid (on an error the held child is
/// dropped: it exits without running anything), then released ([`Held::run`]); `watch` runs
/// on this thread with the flag set once the program has exited. Returns the program's exit
/// code and what `watch` returned. Errors call the program `name`.
pub fn observe<O, R, E: From<LaunchError>>(
    cmd: Command,
    name: &str,
    open: impl FnOnce(u32) -> Result<O, E>,
    watch: impl FnOnce(O, &AtomicBool) -> R,
) -> Result<(i32, R), E> {
    let cannot_run = |e| LaunchError::Run(name.to_string(), e);
    let held = Held::spawn(cmd).map_err(cannot_run)?;
    let observer = open(held.pid())?;
    let running = held.run().map_err(cannot_run)?;
    let watched = watch(observer, running.exited());
    let status = running.wait().map_err(LaunchError::Wait)?;
    Ok((status, watched))
}

/// A child forked by [`Held::spawn`] and waiting before `exec` until [`Held::release`]. Dropped
/// without a release, it exits without running anything.
#[derive(Debug)]
pub struct Held {
    pid: u32,
    go: Option<File>,
    spawner: Option<JoinHandle<io::Result<Child>>>,
}

impl Held {
    /// Forks `cmd`'s child and holds it before `exec`. `Command::spawn` returns only once the
    /// child has called `exec`, so it runs on a thread of its own meanwhile; the child tells its
    /// pid through a pipe and waits on another.
    pub fn spawn(mut cmd: Command) -> io::Result<Held> {
        let (go_r, go_w) = sys::pipe()?;
        let (pid_r, pid_w) = sys::pipe()?;
        sys::hold_before_exec(
            &mut cmd,
            go_r.as_raw_fd(),
            go_w.as_raw_fd(),
            pid_w.as_raw_fd(),
        );
        let spawner = std::thread::spawn(move || {
            let child = cmd.spawn();
            drop((go_r, pid_w));
            child
        });
        let mut pid = [0u8; 4];
        match File::from(pid_r).read_exact(&mut pid) {
            Ok(()) => Ok(Held {
                pid: u32::from_ne_bytes(pid),
                go: Some(File::from(go_w)),
                spawner: Some(spawner),
            }),
            // No pid: the fork failed, or the child failed before it could say.
            Err(e) => {
                drop(go_w);
                match spawner.join() {
                    Ok(Err(spawn_error)) => Err(spawn_error),
                    Ok(Ok(mut child)) => {
                        let _ = child.wait();
                        Err(e)
                    }
                    Err(_) => Err(io::Error::other("the spawning thread panicked")),
                }
            }
        }
    }

    /// The child's pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Lets the child `exec`, forwards its signals and waits for it on a thread of its own:
    /// what an observer watches while the program runs ([`Running::exited`]).
    pub fn run(self) -> io::Result<Running> {
        let mut child = self.release()?;
        let forward = Forward::to(child.id())?;
        let exited = Arc::new(AtomicBool::new(false));
        let waiter = {
            let exited = exited.clone();
            std::thread::spawn(move || {
                let status = child.wait().map(exit_code);
                exited.store(true, Ordering::SeqCst);
                status
            })
        };
        Ok(Running {
            exited,
            waiter,
            _forward: forward,
        })
    }

    /// Lets the child `exec`. Returns it running, or the `exec` error (the child is then
    /// reaped).
    pub fn release(mut self) -> io::Result<Child> {
        if let Some(mut go) = self.go.take() {
            go.write_all(&[1])?;
        }
        self.join()
    }

    fn join(&mut self) -> io::Result<Child> {
        self.go = None;
        match self.spawner.take().map(JoinHandle::join) {
            Some(Ok(child)) => child,
            Some(Err(_)) => Err(io::Error::other("the spawning thread panicked")),
            None => Err(io::Error::other("the child was already released")),
        }
    }
}

impl Drop for Held {
    /// Gives up: the child reads end of file instead of its go, exits without running anything
    /// and is reaped by the spawn.
    fn drop(&mut self) {
        if self.spawner.is_some() {
            let _ = self.join();
        }
    }
}

/// A released program, its signals forwarded, waited for on a thread of its own.
#[derive(Debug)]
pub struct Running {
    exited: Arc<AtomicBool>,
    waiter: JoinHandle<io::Result<i32>>,
    _forward: Forward,
}

impl Running {
    /// Set once the program has exited (and was reaped).
    pub fn exited(&self) -> &AtomicBool {
        &self.exited
    }

    /// Waits for the program; its exit code the shell's way ([`exit_code`]).
    pub fn wait(self) -> io::Result<i32> {
        self.waiter
            .join()
            .map_err(|_| io::Error::other("the waiting thread panicked"))?
    }
}

/// The shell's convention for an exit status: the code, or 128 + the signal that killed the
/// process.
pub fn exit_code(st: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    match (st.code(), st.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        _ => 1,
    }
}

/// Passes SIGINT and SIGTERM sent to this process with `kill` on to a child, until dropped.
/// One typed at the terminal is not passed on: it went to the whole foreground process group,
/// the child included.
#[derive(Debug)]
pub struct Forward {
    handle: Handle,
    thread: Option<JoinHandle<()>>,
}

impl Forward {
    /// Starts forwarding to `pid` (a child not yet reaped).
    pub fn to(pid: u32) -> io::Result<Forward> {
        let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM])?;
        let handle = signals.handle();
        let thread = std::thread::spawn(move || {
            for info in signals.forever() {
                if info.cause != Cause::Kernel {
                    let _ = sys::kill(pid, info.signal);
                }
            }
        });
        Ok(Forward {
            handle,
            thread: Some(thread),
        })
    }
}

impl Drop for Forward {
    /// Stops forwarding (before the child is reaped: its pid may be reused after).
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_child_runs_only_when_released() {
        let dir = std::env::temp_dir().join(format!("culprit-held-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let mark = dir.join("ran");
        let mut cmd = Command::new("sh");
        cmd.arg("-c").arg(format!("echo $$ > {}", mark.display()));
        let held = Held::spawn(cmd).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert!(!mark.exists(), "the child ran before it was released");
        let pid = held.pid();
        let mut child = held.release().unwrap();
        assert_eq!(child.id(), pid);
        assert_eq!(exit_code(child.wait().unwrap()), 0);
        let ran: u32 = std::fs::read_to_string(&mark)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(ran, pid, "the shell runs in the held child itself");

        // Abandoned: nothing runs, nothing is left (the spawn reaps the child).
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("touch {}/abandoned", dir.display()));
        let held = Held::spawn(cmd).unwrap();
        let pid = held.pid();
        drop(held);
        assert!(!dir.join("abandoned").exists());
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());

        // A program that does not exist: the exec error, at release.
        let held = Held::spawn(Command::new(dir.join("missing"))).unwrap();
        let e = held.release().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn observed_and_plain_runs_give_the_exit_code() {
        let argv: Vec<OsString> = ["sh", "-c", "exit 4"].iter().map(Into::into).collect();
        let (path, cmd) = command(&argv).unwrap();
        assert!(path.is_absolute(), "{}", path.display());
        let mut opened = None;
        let open = |pid| {
            opened = Some(pid);
            Ok::<_, LaunchError>(pid)
        };
        let watch = |pid, exited: &AtomicBool| {
            while !exited.load(Ordering::SeqCst) {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            pid
        };
        let (status, watched) = observe(cmd, "sh", open, watch).unwrap();
        assert_eq!((status, Some(watched)), (4, opened));

        let mut cmd = Command::new("sh");
        cmd.args(["-c", "exit 3"]);
        assert_eq!(run(cmd, "sh").unwrap().1, 3);
        let missing = run(Command::new("/nonexistent/culprit-test"), "missing").unwrap_err();
        assert_eq!(missing.to_string(), "cannot run missing");
        let argv = [OsString::from("culprit-no-such-program")];
        let e = command(&argv).unwrap_err();
        assert_eq!(
            e.to_string(),
            "cannot run culprit-no-such-program: not found"
        );
        assert!(matches!(command(&[]), Err(LaunchError::NoProgram)));
    }

    #[test]
    fn exit_codes() {
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }
}
