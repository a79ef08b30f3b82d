//! The guest's file system as requests see it: stat, inline reads, directory listings and
//! bulk reads for probes; uploads, removal and new directories for setup. Every path a
//! request reads goes through the guest's [`Confinement`]. Bulk reads stream from the open
//! file ([`Reply::Stream`]); uploads arrive in a temporary sibling and are renamed into
//! place, so nobody ever reads half a file.

use crate::body::{FileStream, Reply, RequestBody};
use crate::budget::{Budget, batch_full};
use crate::confine::{Confinement, Follow};
use pincer_shared::limits::{MAX_DIR_ENTRIES, MAX_INLINE_FILE};
use pincer_shared::probe::{DirEntry, FileContent, FileKind, FileStat};
use pincer_shared::{Response, WireError};
use std::fs::{File, Metadata};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::AsyncWriteExt;

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
fn file_stat(path: &str, m: &Metadata) -> FileStat {
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
fn open_regular(c: &Confinement, path: &str) -> Result<Option<(File, Metadata)>, WireError> {
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
        return Err(batch_full(path, expected));
    }
    let mut bytes = Vec::with_capacity(expected as usize);
    f.take(cap)
        .read_to_end(&mut bytes)
        .map_err(|e| WireError::from_io(path, &e))?;
    // A file that grew, or reports no size (/proc), takes what it needs beyond that.
    let more = (bytes.len() as u64).saturating_sub(expected);
    if budget.is_some_and(|b| !b.reserve(more)) {
        return Err(batch_full(path, bytes.len() as u64));
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

/// Most bytes read from a file that reports no size (`/proc`, `/sys`): such files are
/// read to their end before the reply, whose header must give the length.
const MAX_UNSIZED_READ: u64 = MAX_INLINE_FILE;

/// Opens (part of) a regular file for a bulk read, as the reply that carries it. Files
/// whose size is known are streamed; files that report size 0 (`/proc`, `/sys`) are read
/// to their end, up to [`MAX_UNSIZED_READ`].
pub(crate) fn bulk_read(
    confinement: &Confinement,
    path: &str,
    offset: u64,
    max_len: Option<u64>,
) -> Result<Reply, WireError> {
    use std::io::Seek;
    let (mut f, meta) = open_regular(confinement, path)?
        .ok_or_else(|| WireError::NotFound { path: path.into() })?;
    let stat = file_stat(path, &meta);
    if offset > 0 {
        f.seek(std::io::SeekFrom::Start(offset))
            .map_err(|e| WireError::from_io(path, &e))?;
    }
    let want = max_len.unwrap_or(u64::MAX);
    if meta.len() > 0 {
        let len = meta.len().saturating_sub(offset).min(want);
        return Ok(Reply::Stream(
            Response::File { stat, len },
            FileStream::new(f, len),
        ));
    }
    let cap = want.min(MAX_UNSIZED_READ);
    let mut bytes = Vec::new();
    f.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| WireError::from_io(path, &e))?;
    if bytes.len() as u64 > cap {
        if cap < want {
            return Err(WireError::TooLarge {
                what: format!(
                    "{path} (it reports no size, so it is read whole before sending; read it in parts with an offset and a length)"
                ),
                limit: cap,
                got: bytes.len() as u64,
            });
        }
        bytes.truncate(cap as usize);
    }
    let len = bytes.len() as u64;
    Ok(Reply::Bytes(Response::File { stat, len }, bytes))
}

/// Receives an uploaded file into a temporary sibling and renames it into place, so a
/// reader never sees half a file (unless appending).
pub(crate) async fn receive(
    body: RequestBody<'_>,
    path: &str,
    mode: u32,
    create_dirs: bool,
    append: bool,
) -> Result<(), WireError> {
    let dest = resolve(path);
    if let Some(dir) = dest.parent()
        && create_dirs
    {
        tokio::fs::create_dir_all(dir)
            .await
            .map_err(|e| WireError::from_io(&dir.display().to_string(), &e))?;
    }
    let target = if append {
        dest.clone()
    } else {
        // One temporary file per upload: two uploads to the same path at once must not
        // write into each other's file.
        static UPLOADS: AtomicU64 = AtomicU64::new(0);
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let n = UPLOADS.fetch_add(1, Ordering::Relaxed);
        dest.with_file_name(format!(".{name}.pincer-{}-{n}", std::process::id()))
    };
    let mut f = tokio::fs::OpenOptions::new()
        .write(true)
        .create(append)
        .create_new(!append)
        .append(append)
        .mode(mode & 0o7777)
        .open(&target)
        .await
        .map_err(|e| WireError::from_io(path, &e))?;
    let len = body.len();
    let done = match body.copy_to(&mut f).await {
        Ok(n) if n == len => f.flush().await.map_err(|e| WireError::from_io(path, &e)),
        Ok(n) => Err(WireError::Malformed {
            reason: format!("upload ended after {n} of {len} bytes"),
        }),
        Err(e) => Err(WireError::from_io(path, &e)),
    };
    drop(f);
    if append {
        return done;
    }
    match done {
        Ok(()) => tokio::fs::rename(&target, &dest)
            .await
            .map_err(|e| WireError::from_io(path, &e)),
        Err(e) => {
            let _ = tokio::fs::remove_file(&target).await;
            Err(e)
        }
    }
}

/// Removes a file, or a directory (with what is in it when `recursive`); a path that is
/// not there is already removed.
pub(crate) fn remove(path: &str, recursive: bool) -> Result<(), WireError> {
    let p = resolve(path);
    let meta = match std::fs::symlink_metadata(&p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(WireError::from_io(path, &e)),
    };
    let r = if meta.is_dir() {
        if recursive {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_dir(&p)
        }
    } else {
        std::fs::remove_file(&p)
    };
    r.map_err(|e| WireError::from_io(path, &e))
}

/// Makes a directory and its missing parents.
pub(crate) fn make_dir(path: &str) -> Result<(), WireError> {
    std::fs::create_dir_all(resolve(path)).map_err(|e| WireError::from_io(path, &e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::body::FILE_CHUNK;
    use pincer_shared::codec::{self, Frame};
    use pincer_shared::limits::{MAX_DOWNLOAD, MAX_RESPONSE_HEADER};
    use pincer_shared::transport::stream::{read_body, read_header};
    use pincer_shared::transport::{RecvHalf, SendHalf};
    use std::time::Duration;

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
    fn home_relative_paths_resolve() {
        let home = PathBuf::from(std::env::var("HOME").unwrap());
        assert_eq!(resolve("~/x"), home.join("x"));
        assert_eq!(resolve("x/y"), home.join("x/y"));
        assert_eq!(resolve("/abs"), PathBuf::from("/abs"));
    }

    /// A bulk read as the host sees it: the reply and its body.
    async fn read(path: &str, offset: u64, max_len: Option<u64>) -> (Response, Vec<u8>) {
        let (ours, mut theirs) = tokio::io::duplex(64 * 1024);
        let path = path.to_owned();
        let sender = tokio::spawn(async move {
            let mut send: SendHalf = Box::new(ours);
            let normal = Confinement::normal(std::path::Path::new("/nonexistent"));
            bulk_read(&normal, &path, offset, max_len)
                .unwrap_or_else(|e| Reply::Msg(Response::Error(e)))
                .send(&mut send)
                .await
        });
        let header = tokio::time::timeout(
            Duration::from_secs(5),
            read_header(&mut theirs, MAX_RESPONSE_HEADER),
        )
        .await
        .expect("the guest answers at once")
        .unwrap()
        .unwrap();
        let frame: Frame<Response> = codec::decode(&header, MAX_DOWNLOAD).unwrap();
        let body = read_body(&mut theirs, frame.body_len).await.unwrap();
        sender.await.unwrap().unwrap();
        (frame.msg, body)
    }

    fn refused(reply: &Response, what: &str) {
        match reply {
            Response::Error(WireError::InvalidArgument { message }) => {
                assert!(message.contains(what), "{message}");
            }
            other => panic!("expected a refusal naming {what}, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn bulk_reads_refuse_what_is_not_a_regular_file() {
        let dir = tempfile::tempdir().unwrap();
        refused(
            &read(dir.path().to_str().unwrap(), 0, None).await.0,
            "directory",
        );
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a plain syscall with a valid C string.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        refused(&read(fifo.to_str().unwrap(), 0, None).await.0, "FIFO");
        refused(&read("/dev/zero", 0, None).await.0, "device");
        // The inline probe refuses the same, without blocking on the FIFO either.
        let normal = Confinement::normal(std::path::Path::new("/nonexistent"));
        assert!(matches!(
            read_file(&normal, fifo.to_str().unwrap(), 10, None),
            Err(WireError::InvalidArgument { .. })
        ));
    }

    #[tokio::test]
    async fn files_without_a_size_are_read_to_their_end() {
        let (reply, body) = read("/proc/self/status", 0, None).await;
        let Response::File { stat, len } = reply else {
            panic!("{reply:?}");
        };
        assert_eq!(stat.size, 0, "procfs reports no size");
        assert_eq!(len, body.len() as u64);
        let text = String::from_utf8(body).unwrap();
        assert!(
            text.starts_with("Name:") && text.contains("VmRSS"),
            "{text}"
        );
        let (_, part) = read("/proc/self/status", 2, Some(3)).await;
        assert_eq!(part, b"me:");
    }

    #[tokio::test]
    async fn bulk_reads_follow_symlinks_and_honour_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data.txt");
        std::fs::write(&file, "0123456789").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let (reply, body) = read(link.to_str().unwrap(), 0, None).await;
        assert_eq!(body, b"0123456789");
        assert!(matches!(reply, Response::File { stat, len: 10 } if stat.size == 10));
        assert_eq!(read(link.to_str().unwrap(), 3, Some(4)).await.1, b"3456");
        let missing = dir.path().join("missing");
        assert!(matches!(
            read(missing.to_str().unwrap(), 0, None).await.0,
            Response::Error(WireError::NotFound { .. })
        ));
    }

    #[tokio::test]
    async fn files_of_many_chunks_arrive_whole() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("big.bin");
        // Every chunk different, so a reused buffer that kept old bytes would show.
        let bytes: Vec<u8> = (0..(3 * FILE_CHUNK + 12_345))
            .map(|i| (i % 251) as u8)
            .collect();
        std::fs::write(&file, &bytes).unwrap();
        let (reply, body) = read(file.to_str().unwrap(), 0, None).await;
        assert!(matches!(reply, Response::File { len, .. } if len == bytes.len() as u64));
        assert!(body == bytes, "the body differs from the file");
    }

    #[tokio::test]
    async fn concurrent_uploads_to_one_path_do_not_mix() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("target.bin");
        let bodies = [vec![b'a'; 200_000], vec![b'b'; 200_000]];
        let mut writers = Vec::new();
        let mut uploads = Vec::new();
        for body in &bodies {
            let (w, r) = tokio::io::duplex(8 * 1024);
            writers.push(w);
            let dest = dest.to_str().unwrap().to_owned();
            let len = body.len() as u64;
            uploads.push(tokio::spawn(async move {
                let mut recv: RecvHalf = Box::new(r);
                receive(RequestBody::new(&mut recv, len), &dest, 0o644, false, false).await
            }));
        }
        // Both uploads are under way before either ends.
        let half = bodies[0].len() / 2;
        for (w, body) in writers.iter_mut().zip(&bodies) {
            w.write_all(&body[..half]).await.unwrap();
        }
        for (w, body) in writers.iter_mut().zip(&bodies) {
            w.write_all(&body[half..]).await.unwrap();
        }
        for upload in uploads {
            upload.await.unwrap().expect("each upload succeeds");
        }
        let got = std::fs::read(&dest).unwrap();
        assert!(
            got == bodies[0] || got == bodies[1],
            "the file mixes both uploads"
        );
        let mut names = Vec::new();
        let mut rd = tokio::fs::read_dir(dir.path()).await.unwrap();
        while let Some(e) = rd.next_entry().await.unwrap() {
            names.push(e.file_name().to_string_lossy().into_owned());
        }
        assert_eq!(names, ["target.bin"], "temporary files left behind");
        // A short upload fails and leaves nothing behind.
        let (mut w, r) = tokio::io::duplex(1024);
        w.write_all(b"abc").await.unwrap();
        drop(w);
        let mut recv: RecvHalf = Box::new(r);
        let short = receive(
            RequestBody::new(&mut recv, 10),
            dest.to_str().unwrap(),
            0o644,
            false,
            false,
        )
        .await;
        assert!(
            matches!(short, Err(WireError::Malformed { .. })),
            "{short:?}"
        );
        assert_eq!(
            std::fs::read(&dest).unwrap(),
            got,
            "a failed upload replaced the file"
        );
    }
}
