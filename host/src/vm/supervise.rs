//! The VM supervisor (`pincer vm supervise`, started by `up` and by golden boots; not for
//! people to run): the watcher that ties a QEMU to the lifeline of the program that started
//! it for its own use (`desktop::lifeline`), since QEMU cannot watch a pipe itself.
//!
//! It watches one machine directory, not one QEMU process: a reset replaces the QEMU in the
//! directory and the supervisor stays. When the owner's lifeline reports it gone, the
//! supervisor stops whichever QEMU serves that directory then (found by its QMP socket on
//! its command line and held by a pidfd, never by a remembered pid), removes the directory
//! and, for a VM, its envs entry: what `down` does. When the directory goes away or is
//! replaced (`down`, or a golden state moved into place), there is nothing left to watch and
//! it exits.

use super::{VmError, io};
use crate::desktop::lifeline;
use crate::env::registry::Registry;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The supervisor's log, in the directory it watches.
pub(super) const LOG: &str = "supervisor.log";

/// Starts a supervisor for the machine in `dir` (which exists) on this process's lifeline;
/// `vm` names the VM and its envs file when the machine is a registered VM.
pub(super) fn start(dir: &Path, vm: Option<(&str, &Registry)>) -> Result<(), VmError> {
    let fd = lifeline::read_end().map_err(io("making the VM's lifeline"))?;
    let log_path = dir.join(LOG);
    let log =
        std::fs::File::create(&log_path).map_err(io(format!("creating {}", log_path.display())))?;
    let log2 = log.try_clone().map_err(io("duplicating a file handle"))?;
    let exe = crate::desktop::pincer_exe().map_err(io("locating the pincer binary"))?;
    let mut cmd = Command::new(exe);
    cmd.args(["vm", "supervise", "--dir"])
        .arg(dir)
        .arg("--lifeline")
        .arg(fd.to_string())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    if let Some((name, reg)) = vm {
        cmd.arg("--name").arg(name).env("PINCER_ENVS", reg.path());
    }
    // SAFETY: setsid and fcntl are async-signal-safe. A session of its own: a terminal's
    // Ctrl-C is the owner's to handle (it stops its VMs with `down`), not the supervisor's.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            lifeline::inherit(fd)
        });
    }
    let mut child = cmd.spawn().map_err(io("starting the VM supervisor"))?;
    // It outlives us; reap it from a thread if it exits while we still run.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    Ok(())
}

/// The identity of a directory (device, inode), if it exists.
fn identity(dir: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

/// Runs the supervisor of the machine in `dir` (`name`: the VM's, if it is one) on the
/// lifeline read end `fd`, until the owner is gone (then stops the machine as `down` does)
/// or the directory is (then exits).
pub async fn supervise(
    dir: &Path,
    name: Option<&str>,
    fd: std::os::fd::RawFd,
) -> Result<(), VmError> {
    // SAFETY: the starting process handed this fd to us alone (`--lifeline`).
    let owner = unsafe { lifeline::Owner::adopt(fd) }
        .map_err(io(format!("taking the lifeline (fd {fd})")))?;
    let Some(watched) = identity(dir) else {
        return Ok(());
    };
    let at = dir.to_owned();
    let owner_gone = tokio::task::spawn_blocking(move || {
        loop {
            if owner.gone_within(Duration::from_millis(100)) {
                return true;
            }
            if identity(&at) != Some(watched) {
                return false;
            }
        }
    })
    .await
    .unwrap_or(false);
    // The directory may have gone in the same moment: then it was `down`'s.
    if !owner_gone || identity(dir) != Some(watched) {
        return Ok(());
    }
    eprintln!(
        "supervisor: the process that started {} is gone; stopping it",
        dir.display()
    );
    let hint = super::read_state_in(dir).map(|st| st.pid);
    match name {
        Some(name) => super::remove(&Registry::locate(None), name, dir, hint).await?,
        None => super::discard(dir, hint).await?,
    }
    eprintln!("supervisor: stopped and removed");
    Ok(())
}
