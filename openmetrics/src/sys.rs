//! The crate's one `unsafe` operation: `poll(2)`, which std does not offer, behind a safe
//! wrapper over a slice of [`PollFd`].

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// One descriptor to wait on (`struct pollfd`).
#[derive(Clone, Copy, Debug)]
#[repr(transparent)]
pub struct PollFd(libc::pollfd);

impl PollFd {
    /// Waits on `fd` for input (`read`) and/or room to write (`write`); hang-ups and errors
    /// are always reported.
    pub fn new(fd: RawFd, read: bool, write: bool) -> PollFd {
        let mut events = 0;
        if read {
            events |= libc::POLLIN;
        }
        if write {
            events |= libc::POLLOUT;
        }
        PollFd(libc::pollfd {
            fd,
            events,
            revents: 0,
        })
    }

    /// Something happened on it at the last [`poll`].
    pub fn ready(&self) -> bool {
        self.0.revents != 0
    }
}

/// Waits until one of `fds` is ready or `timeout` passed (`None`: no timeout); the number
/// of descriptors ready.
pub fn poll(fds: &mut [PollFd], timeout: Option<Duration>) -> io::Result<usize> {
    let ms = timeout.map_or(-1, |t| {
        // Rounded up, so a deadline is not polled for in a busy loop of 0 ms waits.
        t.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int
    });
    // SAFETY: `PollFd` is a transparent `struct pollfd`, so `fds` is a valid array of
    // `fds.len()` of them, which poll reads and whose `revents` it writes, for this call only.
    let rc = unsafe {
        libc::poll(
            fds.as_mut_ptr().cast::<libc::pollfd>(),
            fds.len() as libc::nfds_t,
            ms,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc as usize)
    }
}
