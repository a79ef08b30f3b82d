//! The process table from `/proc`, for process probes: pid, parent, name, command line and
//! owner of every live process, never their environments. Generic Linux, so Android's shim
//! serves it too.

use pincer_shared::WireError;
use pincer_shared::probe::ProcessInfo;
use std::os::unix::fs::MetadataExt;

/// The process table from /proc. Processes that exit while being read, and zombies (dead,
/// waiting to be reaped), are skipped: neither is running. With `session`, only processes
/// of that session are listed (local desktops share one machine, and each must see only
/// its own programs).
pub(crate) fn processes(session: Option<u32>) -> Result<Vec<ProcessInfo>, WireError> {
    let rd = std::fs::read_dir("/proc").map_err(|e| WireError::from_io("/proc", &e))?;
    let mut out = Vec::new();
    for entry in rd.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if session.is_some() && session_of(pid) != session {
            continue;
        }
        if let Some(p) = process(pid) {
            out.push(p);
        }
    }
    out.sort_by_key(|p| p.pid);
    Ok(out)
}

/// The session id of a process.
pub fn session_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    // state, ppid, pgrp, session
    rest.split(' ').nth(3)?.parse().ok()
}

/// One live process, or `None` if it is gone or a zombie.
fn process(pid: u32) -> Option<ProcessInfo> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm is in parentheses and may itself contain ") ", so split at the last one.
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let name = stat.get(open + 1..close)?.to_owned();
    let mut fields = stat.get(close + 2..)?.split(' ');
    if matches!(fields.next(), Some("Z" | "X")) {
        return None;
    }
    let ppid = fields.next().and_then(|s| s.parse().ok()).unwrap_or(0);
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|raw| {
            raw.split(|b| *b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default();
    let uid = std::fs::metadata(format!("/proc/{pid}"))
        .map(|m| m.uid())
        .unwrap_or(u32::MAX);
    Some(ProcessInfo {
        pid,
        ppid,
        name,
        cmdline,
        uid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_this_process() {
        let me = std::process::id();
        let all = processes(None).unwrap();
        let p = all.iter().find(|p| p.pid == me).expect("own pid listed");
        assert_eq!(p.ppid, std::os::unix::process::parent_id());
        assert!(!p.cmdline.is_empty());
        let mine = session_of(me);
        assert!(mine.is_some());
        let same = processes(mine).unwrap();
        assert!(same.iter().any(|p| p.pid == me));
        assert!(same.iter().all(|p| session_of(p.pid) == mine));

        // A process in a session of its own is on the machine's list but not on ours.
        let mut other = std::process::Command::new("setsid")
            .args(["sleep", "30"])
            .spawn()
            .unwrap();
        let theirs = (0..100)
            .find_map(|_| {
                let s = session_of(other.id()).filter(|s| Some(*s) != mine);
                if s.is_none() {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                s
            })
            .expect("setsid gave the child a session of its own");
        let all = processes(None).unwrap();
        let same = processes(mine).unwrap();
        let in_theirs = processes(Some(theirs)).unwrap();
        let _ = other.kill();
        let _ = other.wait();
        assert!(all.iter().any(|p| p.pid == other.id()));
        assert!(!same.iter().any(|p| p.pid == other.id()));
        assert!(in_theirs.iter().any(|p| p.pid == other.id()));
    }
}
