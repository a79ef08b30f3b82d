//! Processes pincer started and finds again later (a desktop's supervisor, a VM's QEMU, the
//! owner of a build directory), known by what they are rather than by a remembered pid:
//! a pid may have been given to any process since it was written down. A [`Process`] is
//! taken only if its command line holds the arguments that name it (`desktop supervise
//! --name NAME`, QEMU's `-qmp` socket), and is then held by a pidfd, so a signal reaches
//! that process or none, and a zombie counts as gone (it holds nothing any more).

use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd, RawFd};

/// A live process that is what its caller looked for, held by a pidfd.
#[derive(Debug)]
pub struct Process {
    /// Its pid.
    pid: u32,
    /// Arguments that, in this order and next to each other, name it on its command line.
    marks: Vec<String>,
    /// The pidfd; none on kernels before 5.3, where the process is looked at again before
    /// each signal instead (a narrow window for pid reuse remains there).
    fd: Option<OwnedFd>,
}

impl Process {
    /// Process `pid` if its command line holds `marks` (next to each other, in order).
    pub fn of(pid: u32, marks: &[&str]) -> Option<Self> {
        let marks: Vec<String> = marks.iter().map(|m| (*m).to_owned()).collect();
        if pid == 0 || marks.is_empty() || !has_args(pid, &marks) {
            return None;
        }
        // SAFETY: pidfd_open with a pid and no flags; returns a new fd or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
        let fd = if fd >= 0 {
            // SAFETY: a fresh fd, ours alone.
            Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
        } else if std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
            None
        } else {
            return None; // gone meanwhile
        };
        // Looked at again, the pidfd's process now: the pid may have changed hands between
        // the first look and the open.
        has_args(pid, &marks).then_some(Self { pid, marks, fd })
    }

    /// The process with `marks` on its command line: process `hint` (a recorded pid) if
    /// that is it, else any process that has them (one started before its pid was
    /// recorded).
    pub fn find(marks: &[&str], hint: Option<u32>) -> Option<Self> {
        if let Some(p) = hint.and_then(|pid| Self::of(pid, marks)) {
            return Some(p);
        }
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .find_map(|pid| Self::of(pid, marks))
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends it `signal` (nothing happens if it has exited).
    pub fn signal(&self, signal: libc::c_int) {
        match &self.fd {
            // SAFETY: pidfd_send_signal on our pidfd, no siginfo, no flags.
            Some(fd) => unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    signal,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                );
            },
            None if has_args(self.pid, &self.marks) => {
                // SAFETY: a plain signal to the process just seen to be this one.
                unsafe {
                    libc::kill(self.pid as libc::pid_t, signal);
                }
            }
            None => {}
        }
    }

    /// Whether it has exited (a zombie counts: it holds nothing any more).
    pub fn exited(&self) -> bool {
        let Some(fd) = &self.fd else {
            return !has_args(self.pid, &self.marks);
        };
        let mut p = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no waiting.
        unsafe { libc::poll(&mut p, 1, 0) > 0 }
    }

    /// Waits up to `within` for it to exit; whether it did.
    pub async fn exited_within(&self, within: std::time::Duration) -> bool {
        let until = std::time::Instant::now() + within;
        while !self.exited() && std::time::Instant::now() < until {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        self.exited()
    }
}

/// Whether process `pid` lives with `marks` next to each other among its arguments (a
/// zombie's command line is empty).
fn has_args(pid: u32, marks: &[String]) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    args.windows(marks.len())
        .any(|w| w.iter().zip(marks).all(|(a, m)| *a == m.as_bytes()))
}

/// Whether process `pid` lives: it exists and is not a zombie (which has exited and only
/// waits to be reaped). For processes known by pid alone, such as the owner named in a
/// work directory's name.
pub fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    pid > 0 && unsafe { libc::kill(pid as libc::pid_t, 0) } == 0 && !is_zombie(pid)
}

/// Whether process `pid` is a zombie.
pub fn is_zombie(pid: u32) -> bool {
    stat_fields(pid).is_some_and(|f| f.first().map(String::as_str) == Some("Z"))
}

/// The fields of `/proc/PID/stat` after the command name: state, ppid, pgrp, session, ...
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = s.get(s.rfind(')')? + 2..)?;
    Some(rest.split(' ').map(str::to_owned).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// Looks until `f` finds something: a process just spawned may still be inside
    /// execve, its command line not readable yet.
    fn soon<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
        (0..500).find_map(|_| {
            f().or_else(|| {
                std::thread::sleep(std::time::Duration::from_millis(10));
                None
            })
        })
    }

    #[test]
    fn a_process_is_taken_only_with_its_arguments_and_a_dead_one_is_not() {
        // A stand-in whose command line holds `supervise --name one` ($0.. of sh).
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30; :", "supervise", "--name", "one"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let marks = ["supervise", "--name", "one"];
        soon(|| Process::of(pid, &marks)).expect("found by its arguments");
        // Other arguments, the same ones apart, or another process: not it.
        assert!(Process::of(pid, &["supervise", "--name", "two"]).is_none());
        assert!(Process::of(pid, &["supervise", "one"]).is_none());
        assert!(Process::of(std::process::id(), &marks).is_none());
        assert!(Process::of(pid, &[]).is_none());
        let found = Process::find(&marks, None).expect("found by looking");
        assert_eq!(found.pid(), pid);
        assert!(found.fd.is_some(), "no pidfd on this kernel");
        assert!(!found.exited());
        // Without a pidfd (kernels before 5.3), the same through a second look.
        let without = Process {
            fd: None,
            ..Process::of(pid, &marks).unwrap()
        };
        assert!(!without.exited());
        // Exited but not yet reaped: a zombie is gone.
        found.signal(libc::SIGKILL);
        soon(|| is_zombie(pid).then_some(())).expect("a zombie");
        assert!(found.exited());
        assert!(without.exited());
        assert!(!alive(pid));
        assert!(Process::find(&marks, Some(pid)).is_none());
        child.wait().unwrap();
        assert!(!alive(pid));
        assert!(alive(std::process::id()));
    }
}
