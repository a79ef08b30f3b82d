//! A desktop's lifeline: how a desktop (or a VM, `vm::supervise`) a program starts for its
//! own use ends with that program, however the program ends (SIGKILL and crashes included).
//!
//! The owning process holds the write end of one pipe for its whole life and never writes
//! to it; every supervisor it starts, of desktops and VMs alike, gets the read end. When the
//! owner is gone, the kernel closes its last write end, the supervisors' read ends report
//! end of file, and each supervisor stops its desktop or VM as `down` would. No process ids are watched, so a reused
//! pid cannot keep a desktop alive. Both ends are close-on-exec, so no other program the
//! owner runs holds the pipe open; the supervisor's end is made inheritable only in the
//! supervisor's own child between fork and exec. A child the owner forks without exec
//! (Python's multiprocessing, Gymnasium's `AsyncVectorEnv`) closes its copy of the write
//! end at once (a fork handler), and the desktops it starts hang on a pipe of its own.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// The owner's read end, and the process it belongs to (a forked child's copy is its
/// parent's lifeline, not its own).
static READ_END: Mutex<Option<(u32, RawFd)>> = Mutex::new(None);

/// The owner's write end (-1: none), where the fork handler can reach it without a lock.
static WRITE_END: AtomicI32 = AtomicI32::new(-1);

/// In a child forked without exec: drop the parent's write end, so the child does not keep
/// the parent's desktops alive after the parent is gone.
extern "C" fn forget_in_child() {
    let fd = WRITE_END.swap(-1, Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: closes this process's copy of the write end; async-signal-safe.
        unsafe {
            libc::close(fd);
        }
    }
}

/// The read end of this process's lifeline, made on first use, for a supervisor to inherit
/// ([`inherit`]). The number is at least 3, so a child's standard streams never replace it.
pub(crate) fn read_end() -> std::io::Result<RawFd> {
    let mut slot = READ_END.lock().unwrap_or_else(|e| e.into_inner());
    let me = std::process::id();
    if let Some((owner, fd)) = *slot
        && owner == me
    {
        return Ok(fd);
    }
    // None yet, or the parent's in a forked child: a lifeline of this process's own (the
    // parent's read end is left open here: its number may no longer be ours to close).
    static HANDLER: std::sync::Once = std::sync::Once::new();
    HANDLER.call_once(|| {
        // SAFETY: registers an async-signal-safe handler that only closes an fd.
        unsafe {
            libc::pthread_atfork(None, None, Some(forget_in_child));
        }
    });
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    WRITE_END.store(fds[1], Ordering::SeqCst);
    // SAFETY: fds[0] is the pipe's read end, ours alone.
    let read = unsafe { libc::fcntl(fds[0], libc::F_DUPFD_CLOEXEC, 3) };
    let err = std::io::Error::last_os_error();
    // SAFETY: the original read end, replaced by its duplicate.
    unsafe {
        libc::close(fds[0]);
    }
    if read < 0 {
        return Err(err);
    }
    *slot = Some((me, read));
    Ok(read)
}

/// Between fork and exec of a supervisor: let it keep `fd`, the lifeline's read end.
/// Async-signal-safe.
pub(crate) fn inherit(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: clears close-on-exec on an fd of the forked child only.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The supervisor's end of its owner's lifeline.
#[derive(Debug)]
pub(crate) struct Owner(OwnedFd);

impl Owner {
    /// Takes the read end the owner handed over as `fd`, close-on-exec from now on, so the
    /// desktop's own processes never hold it.
    ///
    /// # Safety
    /// `fd` must be an open fd nothing else in this process owns.
    pub(crate) unsafe fn adopt(fd: RawFd) -> std::io::Result<Self> {
        // SAFETY: the caller hands over sole ownership of an open fd.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: fcntl on an fd we own.
        if unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Self(owned))
    }

    /// Waits up to `timeout` (less when a signal arrives) and tells whether the owner is
    /// gone: every write end closed.
    pub(crate) fn gone_within(&self, timeout: Duration) -> bool {
        let mut p = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, ms) } <= 0 {
            return false; // the time passed, or a signal came (the caller looks at it)
        }
        if p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            return true;
        }
        // Readable without a hang-up: nobody writes, but drain what came and see if that
        // was the end.
        let mut buf = [0u8; 64];
        // SAFETY: reads into a local buffer of its length.
        let n = unsafe { libc::read(p.fd, buf.as_mut_ptr().cast(), buf.len()) };
        n == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_read_end_hangs_up_when_the_last_write_end_closes() {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two fds into the array.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: fresh fds, owned here alone.
        let owner = unsafe { Owner::adopt(fds[0]) }.unwrap();
        let write = unsafe { OwnedFd::from_raw_fd(fds[1]) };
        assert!(!owner.gone_within(Duration::from_millis(50)));
        drop(write);
        assert!(owner.gone_within(Duration::from_millis(50)));
    }

    #[test]
    fn a_process_has_one_lifeline_at_fd_3_or_above() {
        let fd = read_end().unwrap();
        assert!(fd >= 3);
        assert_eq!(read_end().unwrap(), fd);
        // SAFETY: reads the flags of an open fd.
        let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        assert!(WRITE_END.load(Ordering::SeqCst) >= 0);
    }
}
