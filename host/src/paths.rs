//! Where the host keeps things: configuration (the envs file) and state (local desktops,
//! the host's own certificate), following the XDG base-directory conventions.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

fn home() -> PathBuf {
    std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from)
}

/// `$XDG_CONFIG_HOME/pincer` or `~/.config/pincer`.
pub fn config_dir() -> PathBuf {
    std::env::var_os("XDG_CONFIG_HOME")
        .map_or_else(|| home().join(".config"), PathBuf::from)
        .join("pincer")
}

/// `$PINCER_STATE_DIR`, else `$XDG_STATE_HOME/pincer`, else `~/.local/state/pincer`.
pub fn state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PINCER_STATE_DIR") {
        return PathBuf::from(d);
    }
    std::env::var_os("XDG_STATE_HOME")
        .map_or_else(|| home().join(".local/state"), PathBuf::from)
        .join("pincer")
}

/// `$PINCER_IMAGE_CACHE`, else `$XDG_CACHE_HOME/pincer/images`, else
/// `~/.cache/pincer/images`: built VM images and their golden states.
pub fn image_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PINCER_IMAGE_CACHE") {
        return PathBuf::from(d);
    }
    cache_dir().join("images")
}

/// `$XDG_CACHE_HOME/pincer` or `~/.cache/pincer`: what pincer can build or fetch again
/// (images, OSWorld's files, the OSWorld scorer's environment).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map_or_else(|| home().join(".cache"), PathBuf::from)
        .join("pincer")
}

/// The longest base [`socket_dir`] takes from `$XDG_RUNTIME_DIR`: with the hash and the
/// longest socket name pincer uses, a path stays far below the 108 bytes of `sun_path`.
const RUNTIME_BASE_MAX: usize = 60;

/// A short private directory for the unix sockets of what lives in `dir` (a VM's QMP and
/// clock sockets): a socket's path must fit in 108 bytes, and `dir`, under a user's cache
/// or state directory, can be far longer. `$XDG_RUNTIME_DIR/pincer/<hash of dir>` when that
/// base is short, else `/tmp/pincer-<uid>/<hash>`; the same `dir` always gives the same
/// place. [`make_socket_dir`] creates it.
pub fn socket_dir(dir: &Path) -> PathBuf {
    let digest = ring::digest::digest(&ring::digest::SHA256, dir.as_os_str().as_bytes());
    let key: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    socket_base().join(key)
}

fn socket_base() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(run) if run.is_absolute() && run.as_os_str().len() <= RUNTIME_BASE_MAX => {
            run.join("pincer")
        }
        // SAFETY: geteuid cannot fail.
        _ => PathBuf::from(format!("/tmp/pincer-{}", unsafe { libc::geteuid() })),
    }
}

/// Creates [`socket_dir`] for `dir`, private (mode 0700), and gives it. A base that is not
/// a directory of this user's, or that others can enter, is refused rather than used: the
/// sockets control the VM.
pub fn make_socket_dir(dir: &Path) -> std::io::Result<PathBuf> {
    let sockets = socket_dir(dir);
    let base = sockets.parent().unwrap_or(Path::new("/"));
    for d in [base, &sockets] {
        match std::fs::create_dir(d) {
            Ok(()) => std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o700))?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let m = std::fs::symlink_metadata(d)?;
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        if !m.is_dir() || m.uid() != me || m.mode() & 0o077 != 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "{} is not a private directory of this user (uid {me}): remove it, or set XDG_RUNTIME_DIR to a short private directory",
                    d.display()
                ),
            ));
        }
    }
    Ok(sockets)
}

/// Whether `program` is a file in a directory of `PATH`, or in /usr/sbin or /sbin, which a
/// user's `PATH` often leaves out.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| {
        std::env::split_paths(&paths)
            .chain(["/usr/sbin".into(), "/sbin".into()])
            .any(|d| d.join(program).is_file())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_of_a_long_directory_fit_and_are_private() {
        let tmp = tempfile::tempdir().unwrap();
        let long = tmp
            .path()
            .join("home/firstname.lastname with spaces é/.cache/pincer/images")
            .join("debian-12-minimal/golden/.new-m1024-c2-tcg-f91301d1a248b74f-r-16579")
            .join("x".repeat(120));
        let sockets = socket_dir(&long);
        assert!(
            sockets.join("clock.sock").as_os_str().len() < 108,
            "{}",
            sockets.display()
        );
        assert_eq!(
            socket_dir(&long),
            sockets,
            "the same directory, the same place"
        );
        assert_ne!(socket_dir(&long.join("other")), sockets);
        let made = make_socket_dir(&long).unwrap();
        assert_eq!(made, sockets);
        let mode = std::fs::metadata(&made).unwrap().mode();
        assert_eq!(mode & 0o777, 0o700);
        // A socket binds there.
        let path = made.join("clock.sock");
        let _ = std::fs::remove_file(&path);
        std::os::unix::net::UnixListener::bind(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        // Created again: the same directory, still fine.
        assert_eq!(make_socket_dir(&long).unwrap(), sockets);
        std::fs::remove_dir(&made).unwrap();
    }

    #[test]
    fn a_socket_directory_others_can_enter_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("vm");
        let made = make_socket_dir(&dir).unwrap();
        std::fs::set_permissions(&made, std::fs::Permissions::from_mode(0o755)).unwrap();
        let e = make_socket_dir(&dir).unwrap_err();
        assert!(e.to_string().contains("not a private directory"), "{e}");
        std::fs::remove_dir(&made).unwrap();
    }
}
