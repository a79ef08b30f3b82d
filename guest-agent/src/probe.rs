//! Read-only state of the guest's file system and processes, for evaluators: stat, inline
//! file reads, directory listings and the process table from /proc. Every path goes
//! through the agent's [`Confinement`]; process listings carry no environments. Window and
//! clipboard probes live with their X11 modules.

use crate::budget::Budget;
use crate::confine::{Confinement, Follow};
use pincer_shared::WireError;
use pincer_shared::limits::{MAX_DIR_ENTRIES, MAX_INLINE_FILE};
use pincer_shared::probe::{DirEntry, FileContent, FileKind, FileStat, ProcessInfo};
use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::PathBuf;

/// A path as the host wrote it: `~` and relative paths are taken from the agent user's home,
/// so tasks can say `~/Desktop/a.txt` whatever the user is called.
pub(crate) fn resolve(path: &str) -> PathBuf {
    let home = || std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from);
    if path == "~" {
        home()
    } else if let Some(rest) = path.strip_prefix("~/") {
        home().join(rest)
    } else if path.starts_with('/') {
        PathBuf::from(path)
    } else {
        home().join(path)
    }
}

fn check_path(path: &str) -> Result<PathBuf, WireError> {
    if path.is_empty() {
        return Err(WireError::InvalidArgument {
            message: "path is empty".into(),
        });
    }
    if path.contains('\0') {
        return Err(WireError::InvalidArgument {
            message: "path contains a NUL byte".into(),
        });
    }
    Ok(resolve(path))
}

fn kind_of(ft: std::fs::FileType) -> FileKind {
    if ft.is_symlink() {
        FileKind::Symlink
    } else if ft.is_dir() {
        FileKind::Dir
    } else if ft.is_file() {
        FileKind::File
    } else {
        FileKind::Other
    }
}

/// `path`'s metadata as the protocol carries it.
pub(crate) fn file_stat(path: &str, m: &Metadata) -> FileStat {
    FileStat {
        path: path.to_owned(),
        exists: true,
        kind: Some(kind_of(m.file_type())),
        target: None,
        size: m.len(),
        mode: m.permissions().mode() & 0o7777,
        modified_ms: m.mtime() * 1000 + m.mtime_nsec() / 1_000_000,
    }
}

/// Metadata of a path without following a final symlink, with what a symlink resolves to;
/// a missing path is `exists: false`.
pub(crate) fn stat(c: &Confinement, path: &str) -> Result<FileStat, WireError> {
    let p = check_path(path)?;
    match c.open(path, &p, Follow::No)? {
        Some(a) => {
            let mut s = file_stat(path, a.metadata());
            s.target = a.target().map(|t| kind_of(t.file_type()));
            Ok(s)
        }
        None => Ok(FileStat {
            path: path.to_owned(),
            exists: false,
            kind: None,
            target: None,
            size: 0,
            mode: 0,
            modified_ms: 0,
        }),
    }
}

/// Opens a regular file (following symlinks) for reading, with its metadata; `None` if
/// nothing is there. Directories, FIFOs, sockets and devices are refused before they are
/// opened for reading: opening a FIFO blocks until a writer comes, and a device may never
/// end.
pub(crate) fn open_regular(
    c: &Confinement,
    path: &str,
) -> Result<Option<(File, Metadata)>, WireError> {
    let p = check_path(path)?;
    let Some(allowed) = c.open(path, &p, Follow::Yes)? else {
        return Ok(None);
    };
    refuse_non_regular(path, allowed.metadata())?;
    let f = allowed
        .open_for_reading()
        .map_err(|e| WireError::from_io(path, &e))?;
    let meta = f.metadata().map_err(|e| WireError::from_io(path, &e))?;
    Ok(Some((f, meta)))
}

fn refuse_non_regular(path: &str, m: &Metadata) -> Result<(), WireError> {
    let ft = m.file_type();
    let what = if ft.is_file() {
        return Ok(());
    } else if ft.is_dir() {
        "a directory (list it with a directory probe)"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else if ft.is_char_device() || ft.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    };
    Err(WireError::InvalidArgument {
        message: format!("{path} is {what}: only regular files can be read"),
    })
}

/// Up to `max_len` bytes of a file (capped at the inline limit); `None` if it does not exist.
/// The bytes come out of `budget` when given (a batch's), reserved before the file is read.
pub(crate) fn read_file(
    c: &Confinement,
    path: &str,
    max_len: u64,
    budget: Option<&Budget>,
) -> Result<Option<FileContent>, WireError> {
    let Some((f, meta)) = open_regular(c, path)? else {
        return Ok(None);
    };
    let cap = max_len.min(MAX_INLINE_FILE);
    let expected = meta.len().min(cap);
    if budget.is_some_and(|b| !b.reserve(expected)) {
        return Err(crate::guest::batch_full(path, expected));
    }
    let mut bytes = Vec::with_capacity(expected as usize);
    f.take(cap)
        .read_to_end(&mut bytes)
        .map_err(|e| WireError::from_io(path, &e))?;
    // A file that grew, or reports no size (/proc), takes what it needs beyond that.
    let more = (bytes.len() as u64).saturating_sub(expected);
    if budget.is_some_and(|b| !b.reserve(more)) {
        return Err(crate::guest::batch_full(path, bytes.len() as u64));
    }
    Ok(Some(FileContent {
        path: path.to_owned(),
        bytes,
        total_size: meta.len(),
    }))
}

/// Entries of a directory sorted by name; `None` if it does not exist.
pub(crate) fn list_dir(c: &Confinement, path: &str) -> Result<Option<Vec<DirEntry>>, WireError> {
    let p = check_path(path)?;
    let Some(allowed) = c.open(path, &p, Follow::Yes)? else {
        return Ok(None);
    };
    let rd = std::fs::read_dir(allowed.handle_path()).map_err(|e| WireError::from_io(path, &e))?;
    let mut out = Vec::new();
    for entry in rd {
        let entry = entry.map_err(|e| WireError::from_io(path, &e))?;
        if out.len() >= MAX_DIR_ENTRIES {
            return Err(WireError::TooLarge {
                what: format!("directory {path}"),
                limit: MAX_DIR_ENTRIES as u64,
                got: out.len() as u64 + 1,
            });
        }
        // An entry deleted between readdir and stat is simply skipped.
        let Ok(meta) = entry.path().symlink_metadata() else {
            continue;
        };
        out.push(DirEntry {
            name: entry.file_name().to_string_lossy().into_owned(),
            kind: kind_of(meta.file_type()),
            size: meta.len(),
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Some(out))
}

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
pub(crate) fn session_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    // state, ppid, pgrp, session
    rest.split(' ').nth(3)?.parse().ok()
}

/// One live process, or `None` if it is gone or a zombie.
pub(crate) fn process(pid: u32) -> Option<ProcessInfo> {
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

    /// The policy of an agent whose state is somewhere else.
    fn normal() -> Confinement {
        Confinement::normal(std::path::Path::new("/nonexistent-pincer-state"))
    }

    #[test]
    fn stat_reports_files_dirs_and_absence() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.txt");
        std::fs::write(&f, "hello").unwrap();
        let s = stat(&normal(), f.to_str().unwrap()).unwrap();
        assert!(s.exists);
        assert_eq!(s.kind, Some(FileKind::File));
        assert_eq!(s.size, 5);
        let d = stat(&normal(), dir.path().to_str().unwrap()).unwrap();
        assert_eq!(d.kind, Some(FileKind::Dir));
        let missing = stat(&normal(), dir.path().join("nope").to_str().unwrap()).unwrap();
        assert!(!missing.exists);
        assert!(matches!(
            stat(&normal(), ""),
            Err(WireError::InvalidArgument { .. })
        ));
    }

    #[test]
    fn reads_are_capped_and_missing_files_are_none() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a.txt");
        std::fs::write(&f, "hello world").unwrap();
        let c = read_file(&normal(), f.to_str().unwrap(), 5, None)
            .unwrap()
            .unwrap();
        assert_eq!(c.bytes, b"hello");
        assert_eq!(c.total_size, 11);
        assert!(
            read_file(&normal(), dir.path().join("x").to_str().unwrap(), 5, None)
                .unwrap()
                .is_none()
        );
        assert!(matches!(
            read_file(&normal(), dir.path().to_str().unwrap(), 5, None),
            Err(WireError::InvalidArgument { .. })
        ));
    }

    #[test]
    fn lists_directories_sorted() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b"), "1").unwrap();
        std::fs::create_dir(dir.path().join("a")).unwrap();
        let l = list_dir(&normal(), dir.path().to_str().unwrap())
            .unwrap()
            .unwrap();
        let names: Vec<_> = l.iter().map(|e| (e.name.as_str(), e.kind)).collect();
        assert_eq!(names, vec![("a", FileKind::Dir), ("b", FileKind::File)]);
        assert!(
            list_dir(&normal(), "/nonexistent-pincer")
                .unwrap()
                .is_none()
        );
    }

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

    #[test]
    fn home_relative_paths_resolve() {
        let home = PathBuf::from(std::env::var("HOME").unwrap());
        assert_eq!(resolve("~/x"), home.join("x"));
        assert_eq!(resolve("x/y"), home.join("x/y"));
        assert_eq!(resolve("/abs"), PathBuf::from("/abs"));
    }
}
