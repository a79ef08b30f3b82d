//! What the agent serves from its machine, decided in one place for bulk reads, inline file
//! probes, stat and directory probes, and environment-variable probes. Paths are judged by
//! what they lead to, not by how they are written: the kernel resolves each one into an
//! `O_PATH` descriptor, whose real location `/proc/self/fd` reports and whose identity
//! (device and inode) is checked against that location, so symlinks, `..`,
//! `/proc/self/root`, `/proc/PID/cwd` and hard links all end up where they really point.
//! The file is then read through that same descriptor, never looked up again.
//!
//! Two rules:
//! - **Never served**, in any mode: the agent's own key and token, the state of pincer
//!   hosts and of other agents on this machine (local desktops' home directories aside),
//!   the token files pincer's envs file names, any pincer identity's private key, and the
//!   memory and environment of processes (the agent's own memory holds its token).
//! - **Read-only agents** serve only files under their read roots (the home directory
//!   unless `--read-root` says otherwise), and within those not the places where secrets
//!   live (SSH and GnuPG keys, keyrings, browser profiles, credentials of clouds and
//!   package registries, shell histories) unless a read root names such a place itself;
//!   and of their environment only variables that hold no secrets, unless `--read-env`
//!   adds one.

use pincer_shared::WireError;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};

/// Places under a home directory where secrets live, and what they hold.
const SECRETS: &[(&str, &str)] = &[
    (".ssh", "SSH keys"),
    (".gnupg", "GnuPG keys"),
    (".local/share/keyrings", "the desktop keyring"),
    (".gnome2/keyrings", "the desktop keyring"),
    (".password-store", "a password store"),
    (".pki", "certificates and their keys"),
    (
        ".mozilla",
        "Firefox profiles, with cookies and saved passwords",
    ),
    (".thunderbird", "Thunderbird profiles"),
    (
        ".config/chromium",
        "a Chromium profile, with cookies and saved passwords",
    ),
    (
        ".config/google-chrome",
        "a Chrome profile, with cookies and saved passwords",
    ),
    (
        ".config/google-chrome-beta",
        "a Chrome profile, with cookies and saved passwords",
    ),
    (
        ".config/google-chrome-unstable",
        "a Chrome profile, with cookies and saved passwords",
    ),
    (
        ".config/BraveSoftware",
        "a Brave profile, with cookies and saved passwords",
    ),
    (
        ".config/microsoft-edge",
        "an Edge profile, with cookies and saved passwords",
    ),
    (
        ".config/vivaldi",
        "a Vivaldi profile, with cookies and saved passwords",
    ),
    (
        ".config/opera",
        "an Opera profile, with cookies and saved passwords",
    ),
    (".netrc", "network logins"),
    (".git-credentials", "Git credentials"),
    (".config/git/credentials", "Git credentials"),
    (".config/gh", "GitHub CLI tokens"),
    (".aws", "AWS credentials"),
    (".azure", "Azure credentials"),
    (".config/gcloud", "Google Cloud credentials"),
    (".kube", "Kubernetes credentials"),
    (".docker", "Docker registry credentials"),
    (".npmrc", "npm registry tokens"),
    (".pypirc", "PyPI tokens"),
    (".cargo/credentials", "crates.io tokens"),
    (".cargo/credentials.toml", "crates.io tokens"),
    (".bash_history", "a shell history"),
    (".zsh_history", "a shell history"),
    (".python_history", "a Python history"),
];

/// Environment variables a read-only agent serves: none of them holds a secret.
const PLAIN_ENV: &[&str] = &[
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "PATH",
    "PWD",
    "LANG",
    "LANGUAGE",
    "TERM",
    "TZ",
    "DISPLAY",
    "WAYLAND_DISPLAY",
    "DESKTOP_SESSION",
    "GDMSESSION",
];
/// Prefixes of the same kind (`LC_ALL`, `XDG_CURRENT_DESKTOP`, ...).
const PLAIN_ENV_PREFIXES: &[&str] = &["LC_", "XDG_"];

/// How the agent was started, as far as what it serves goes.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The home directory (`~` in paths, the default read root, where secrets are looked
    /// for).
    pub home: PathBuf,
    /// The agent's state directory: its key, certificate and default token.
    pub state_dir: PathBuf,
    /// The token file hosts must prove.
    pub token_file: PathBuf,
    /// Other places holding pincer keys and tokens ([`pincer_places`]).
    pub others: PincerPlaces,
    /// For a read-only agent, its read roots (`Some(vec![])`: the home directory).
    pub read_roots: Option<Vec<PathBuf>>,
    /// For a read-only agent, environment variables served beyond the plain ones.
    pub read_env: Vec<String>,
}

/// Why a policy cannot be put in force.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// A read root is not a directory that exists.
    #[error("--read-root {path}: {source} (read roots are directories that exist)")]
    Root {
        /// The root as given.
        path: PathBuf,
        /// Why it cannot be used.
        #[source]
        source: io::Error,
    },
}

/// Device and inode: which file a path or descriptor is, whatever its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(m: &Metadata) -> Self {
        Self {
            dev: m.dev(),
            ino: m.ino(),
        }
    }
}

/// A place never served, in any mode.
#[derive(Debug)]
struct Guarded {
    /// Where it is (resolved when it existed at start).
    path: PathBuf,
    /// Which file it is, if it was a file at start (catches hard links to it).
    id: Option<FileId>,
    /// A host's state directory, where local desktops' home directories (`desktops/NAME/home`)
    /// are served like any other.
    host_state: bool,
}

impl Guarded {
    fn holds(&self, real: &Path, id: Option<FileId>) -> bool {
        (id.is_some() && id == self.id)
            || real.strip_prefix(&self.path).is_ok_and(|rest| {
                let mut parts = rest.components().map(Component::as_os_str);
                let desktop_home = matches!(
                    (parts.next(), parts.next(), parts.next()),
                    (Some(d), Some(_), Some(h)) if d == "desktops" && h == "home"
                );
                !(self.host_state && desktop_home)
            })
    }
}

/// A place where secrets live.
#[derive(Debug)]
struct Secret {
    path: PathBuf,
    what: &'static str,
}

/// What a read-only agent serves.
#[derive(Debug)]
struct ReadOnly {
    roots: Vec<PathBuf>,
    secrets: Vec<Secret>,
    env: Vec<String>,
}

/// The agent's policy on what it serves.
#[derive(Debug)]
pub struct Confinement {
    never: Vec<Guarded>,
    read_only: Option<ReadOnly>,
}

/// Whether a final symlink is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Follow {
    /// Judge and open what the link points to.
    Yes,
    /// Judge and open the link itself (stat); what it points to is judged too.
    No,
}

/// A path the policy allowed, held open without reading it (`O_PATH`).
#[derive(Debug)]
pub(crate) struct Allowed {
    fd: File,
    meta: Metadata,
    /// For a symlink opened without following it: the metadata of what it points to
    /// (`None`: dangling).
    target: Option<Metadata>,
}

impl Allowed {
    /// Its metadata.
    pub(crate) fn metadata(&self) -> &Metadata {
        &self.meta
    }

    /// For a symlink opened without following it, what it points to (`None`: dangling,
    /// or not a symlink).
    pub(crate) fn target(&self) -> Option<&Metadata> {
        self.target.as_ref()
    }

    /// A path that names exactly the file that was judged, for opening or listing it
    /// without looking its own path up again.
    pub(crate) fn handle_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
    }

    /// Opens the file that was judged for reading, non-blocking (a FIFO that was swapped in
    /// could otherwise block), without looking its path up again.
    pub(crate) fn open_for_reading(&self) -> io::Result<File> {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(self.handle_path())
    }
}

impl Confinement {
    /// The policy for an agent started as `p` describes. Read roots must exist.
    pub fn new(p: &Policy) -> Result<Self, PolicyError> {
        // The key by name and by identity too: a hard link to it is still it.
        let key = p.state_dir.join("key.der");
        let never = [&p.state_dir, &key, &p.token_file]
            .into_iter()
            .chain(&p.others.never)
            .map(|path| guard(path, false))
            .chain(p.others.host_states.iter().map(|path| guard(path, true)))
            .collect();
        let read_only = p
            .read_roots
            .as_ref()
            .map(|roots| {
                let roots = if roots.is_empty() {
                    std::slice::from_ref(&p.home)
                } else {
                    roots
                };
                let roots = roots
                    .iter()
                    .map(|r| {
                        let real =
                            std::fs::canonicalize(r).map_err(|source| PolicyError::Root {
                                path: r.clone(),
                                source,
                            })?;
                        if real.is_dir() {
                            Ok(real)
                        } else {
                            Err(PolicyError::Root {
                                path: r.clone(),
                                source: io::Error::new(
                                    io::ErrorKind::NotADirectory,
                                    "not a directory",
                                ),
                            })
                        }
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let home = real_location(&p.home);
                let secrets = SECRETS
                    .iter()
                    .map(|(rel, what)| Secret {
                        path: home.join(rel),
                        what,
                    })
                    .collect();
                Ok(ReadOnly {
                    roots,
                    secrets,
                    env: p.read_env.clone(),
                })
            })
            .transpose()?;
        Ok(Self { never, read_only })
    }

    /// Opens what `path` leads to (`asked` is the path as the host wrote it) if the policy
    /// allows it: `Ok(None)` if nothing is there, a typed error naming the rule if the
    /// policy refuses it, even when it does not exist.
    pub(crate) fn open(
        &self,
        asked: &str,
        path: &Path,
        follow: Follow,
    ) -> Result<Option<Allowed>, WireError> {
        match open_path(path, follow) {
            Ok(fd) => self.accept(asked, path, follow, fd),
            Err(e) => self.unopened(asked, path, &e),
        }
    }

    /// What a path that could not be opened answers.
    fn unopened(
        &self,
        asked: &str,
        path: &Path,
        e: &io::Error,
    ) -> Result<Option<Allowed>, WireError> {
        // Say nothing about a refused place, not even that it is missing.
        self.judge(asked, &real_location(path), None)?;
        match e.kind() {
            io::ErrorKind::NotFound => Ok(None),
            _ => Err(WireError::from_io(asked, e)),
        }
    }

    /// Judges the file opened from `path`. Editors save by renaming a new file over the old
    /// one: a file opened just before that has lost its path by the time it is judged, and
    /// is refused as pathless. When the path has come to name another file (or none), it is
    /// opened again, a few times, and the file it names now is judged.
    fn accept(
        &self,
        asked: &str,
        path: &Path,
        follow: Follow,
        mut fd: File,
    ) -> Result<Option<Allowed>, WireError> {
        let mut retries = 3;
        loop {
            let mut allowed = held(fd).map_err(|e| WireError::from_io(asked, &e))?;
            match self.judge_opened(asked, &allowed) {
                Ok(()) => {}
                Err(e) if retries > 0 && replaced(path, follow, &allowed.meta) => {
                    retries -= 1;
                    fd = match open_path(path, follow) {
                        Ok(fd) => fd,
                        Err(e) => return self.unopened(asked, path, &e),
                    };
                    tracing::debug!(path = asked, error = %e, "replaced while opened; opening again");
                    continue;
                }
                Err(e) => return Err(e),
            }
            if follow == Follow::No && allowed.meta.file_type().is_symlink() {
                // A link is judged by what it points to as well (if anything).
                if let Some(target) = self.open(asked, path, Follow::Yes)? {
                    allowed.target = Some(target.meta);
                }
            }
            return Ok(Some(allowed));
        }
    }

    /// Refuses an environment variable a read-only agent does not serve.
    pub(crate) fn env_var(&self, name: &str) -> Result<(), WireError> {
        let Some(ro) = &self.read_only else {
            return Ok(());
        };
        let plain =
            PLAIN_ENV.contains(&name) || PLAIN_ENV_PREFIXES.iter().any(|p| name.starts_with(p));
        if plain || ro.env.iter().any(|n| n == name) {
            return Ok(());
        }
        Err(WireError::Denied {
            what: format!("environment variable {name}"),
            reason: format!(
                "a --read-only agent serves only variables that hold no secrets ({}, LC_*, XDG_*); to allow it, start the agent with --read-env {name}",
                PLAIN_ENV.join(", ")
            ),
        })
    }

    /// Judges an opened path by where the kernel says it is, and by which file it is.
    fn judge_opened(&self, asked: &str, a: &Allowed) -> Result<(), WireError> {
        let id = FileId::of(&a.meta);
        let real = std::fs::read_link(a.handle_path()).unwrap_or_default();
        // Only a path of this machine's file system that still names this very file: not a
        // deleted file, a pipe, or a file in another mount namespace.
        let here = real.is_absolute()
            && std::fs::symlink_metadata(&real).is_ok_and(|m| FileId::of(&m) == id);
        if !here {
            return Err(denied(
                asked,
                &real,
                "has no path of its own on this machine (a deleted file, a pipe, a file in another mount namespace): the agent never serves such things",
            ));
        }
        self.judge(asked, &real, Some(id))
    }

    /// Judges a resolved location (and, if it exists, the file there).
    fn judge(&self, asked: &str, real: &Path, id: Option<FileId>) -> Result<(), WireError> {
        let never = |what: &str| {
            denied(
                asked,
                real,
                &format!(
                    "is {what}: the agent never serves it, in any mode, and nothing allows it"
                ),
            )
        };
        for g in &self.never {
            if g.holds(real, id) {
                return Err(never(&format!(
                    "among pincer's keys and tokens ({})",
                    g.path.display()
                )));
            }
        }
        if id.is_some()
            && real.file_name().is_some_and(|n| n == "key.der")
            && real.with_file_name("cert.der").exists()
        {
            return Err(never("the private key of a pincer identity"));
        }
        if process_memory_or_environment(real) {
            // The agent's own memory holds its token and key.
            return Err(never("a process's memory or environment"));
        }
        let Some(ro) = &self.read_only else {
            return Ok(());
        };
        if !ro.roots.iter().any(|r| real.starts_with(r)) {
            let roots: Vec<_> = ro.roots.iter().map(|r| r.display().to_string()).collect();
            return Err(denied(
                asked,
                real,
                &format!(
                    "is outside the read roots of this --read-only agent ({}); to allow it, start the agent with --read-root and a directory that holds it",
                    roots.join(", ")
                ),
            ));
        }
        // A secret place is served only under a root inside it, which names it on purpose.
        let secret = ro.secrets.iter().find(|s| {
            real.starts_with(&s.path)
                && !ro
                    .roots
                    .iter()
                    .any(|r| r.starts_with(&s.path) && real.starts_with(r))
        });
        if let Some(s) = secret {
            return Err(denied(
                asked,
                real,
                &format!(
                    "is in {} ({}): a --read-only agent does not serve it; to allow it, start the agent with --read-root {}",
                    s.path.display(),
                    s.what,
                    s.path.display()
                ),
            ));
        }
        Ok(())
    }
}

/// Whether `real` is `/proc/PID/{mem,environ}` or `/proc/PID/task/TID/{mem,environ}`.
fn process_memory_or_environment(real: &Path) -> bool {
    let parts: Vec<&std::ffi::OsStr> = real.components().map(Component::as_os_str).collect();
    let number = |s: &std::ffi::OsStr| {
        s.to_str()
            .is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
    };
    let private = |s: &std::ffi::OsStr| s == "mem" || s == "environ";
    match parts.as_slice() {
        [_, proc, pid, file] => *proc == "proc" && number(pid) && private(file),
        [_, proc, pid, task, tid, file] => {
            *proc == "proc" && number(pid) && *task == "task" && number(tid) && private(file)
        }
        _ => false,
    }
}

/// An open descriptor with its metadata.
/// Opens `path` as a handle (`O_PATH`) that reads nothing yet, following a final symlink
/// or not.
fn open_path(path: &Path, follow: Follow) -> io::Result<File> {
    let mut flags = libc::O_PATH;
    if follow == Follow::No {
        flags |= libc::O_NOFOLLOW;
    }
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
}

/// Whether `path` now names another file than the one opened from it, or none: it was
/// replaced or removed since.
fn replaced(path: &Path, follow: Follow, opened: &Metadata) -> bool {
    let now = match follow {
        Follow::Yes => std::fs::metadata(path),
        Follow::No => std::fs::symlink_metadata(path),
    };
    now.map_or(true, |m| FileId::of(&m) != FileId::of(opened))
}

fn held(fd: File) -> io::Result<Allowed> {
    let meta = fd.metadata()?;
    Ok(Allowed {
        fd,
        meta,
        target: None,
    })
}

/// The refusal of `asked`, which resolved to `real`, because it `is` what the rule says.
fn denied(asked: &str, real: &Path, is: &str) -> WireError {
    let real = real.display().to_string();
    let reason = if real.is_empty() || real == asked {
        format!("it {is}")
    } else {
        format!("it resolves to {real}, which {is}")
    };
    WireError::Denied {
        what: asked.to_owned(),
        reason,
    }
}

/// A place never served, resolved as far as it exists now.
fn guard(path: &Path, host_state: bool) -> Guarded {
    let path = real_location(path);
    let id = std::fs::metadata(&path)
        .ok()
        .filter(Metadata::is_file)
        .map(|m| FileId::of(&m));
    Guarded {
        path,
        id,
        host_state,
    }
}

/// Where `path` is: its longest existing ancestor resolved by the kernel, with the rest
/// appended as written (it does not exist, so nothing resolves it).
fn real_location(path: &Path) -> PathBuf {
    let mut base = path.to_path_buf();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&base) {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (base.file_name().map(ToOwned::to_owned), base.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                base = parent.to_path_buf();
            }
            // "..", "/" or a relative path with nothing left: keep what was written.
            _ => {
                return base
                    .components()
                    .filter(|c| !matches!(c, Component::CurDir))
                    .collect::<PathBuf>()
                    .join(rest.iter().rev().collect::<PathBuf>());
            }
        }
    }
}

/// Where pincer keeps keys and tokens on this machine besides an agent's own.
#[derive(Debug, Clone, Default)]
pub struct PincerPlaces {
    /// Other agents' state directories, and the token files the host's envs file names.
    pub never: Vec<PathBuf>,
    /// Hosts' state directories: their identity and tokens, and every local desktop's
    /// agent, token and X cookie, next to the desktops' home directories.
    pub host_states: Vec<PathBuf>,
}

/// Finds [`PincerPlaces`]: named by the environment, and at their default places under
/// `home` and under the user's home in the password database (they differ for local
/// desktops, whose agents get a home of their own).
pub fn pincer_places(home: &Path) -> PincerPlaces {
    let var = |k: &str| std::env::var_os(k).map(PathBuf::from);
    let homes: Vec<PathBuf> = std::iter::once(home.to_path_buf())
        .chain(passwd_home())
        .collect();
    let mut places = PincerPlaces {
        never: var("PINCER_AGENT_STATE").into_iter().collect(),
        host_states: var("PINCER_STATE_DIR").into_iter().collect(),
    };
    for state in var("XDG_STATE_HOME")
        .into_iter()
        .chain(homes.iter().map(|h| h.join(".local/state")))
    {
        places.host_states.push(state.join("pincer"));
        places.never.push(state.join("pincer-agent"));
    }
    let envs_files = var("PINCER_ENVS").into_iter().chain(
        var("XDG_CONFIG_HOME")
            .into_iter()
            .chain(homes.iter().map(|h| h.join(".config")))
            .map(|c| c.join("pincer/envs.toml")),
    );
    for file in envs_files {
        places.never.extend(token_files(&file));
    }
    places
}

/// The token files an envs file names (`[envs.NAME] token_file = ...`).
fn token_files(envs_file: &Path) -> Vec<PathBuf> {
    let Ok(text) = std::fs::read_to_string(envs_file) else {
        return Vec::new();
    };
    let Ok(table) = text.parse::<toml::Table>() else {
        return Vec::new();
    };
    let dir = envs_file.parent().unwrap_or(Path::new("/"));
    table
        .get("envs")
        .and_then(toml::Value::as_table)
        .into_iter()
        .flat_map(|envs| envs.values())
        .filter_map(|e| e.get("token_file")?.as_str())
        .map(|t| dir.join(t))
        .collect()
}

/// The home directory: `$HOME`, else the user's in the password database, else `/`.
pub fn home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .or_else(passwd_home)
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// The home directory of the user the agent runs as, from the password database.
fn passwd_home() -> Option<PathBuf> {
    use std::ffi::CStr;
    use std::os::unix::ffi::OsStrExt;
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: a zeroed passwd is a valid out-parameter.
    let mut pw: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `buf` outlives the use of `pw`.
    let rc = unsafe {
        libc::getpwuid_r(
            libc::getuid(),
            &raw mut pw,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &raw mut found,
        )
    };
    if rc != 0 || found.is_null() || pw.pw_dir.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded, so pw_dir points to a C string inside `buf`.
    let dir = unsafe { CStr::from_ptr(pw.pw_dir) };
    Some(PathBuf::from(std::ffi::OsStr::from_bytes(dir.to_bytes())))
}

#[cfg(test)]
impl Confinement {
    /// The policy of an agent that is not read-only and keeps its state in `state_dir`.
    pub(crate) fn normal(state_dir: &Path) -> Self {
        Self::new(&Policy {
            home: state_dir.to_path_buf(),
            state_dir: state_dir.to_path_buf(),
            token_file: state_dir.join("token"),
            others: PincerPlaces::default(),
            read_roots: None,
            read_env: Vec::new(),
        })
        .expect("a policy without read roots")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs as probe;
    use std::os::unix::fs::symlink;

    /// A home directory with a real file in every place where secrets live, the agent's
    /// state in it, and a plain file and directory next to them.
    struct Machine {
        dir: tempfile::TempDir,
        home: PathBuf,
        state: PathBuf,
    }

    impl Machine {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let home = dir.path().join("home");
            let state = home.join(".local/state/pincer-agent");
            std::fs::create_dir_all(&state).unwrap();
            for name in ["key.der", "cert.der", "token"] {
                std::fs::write(state.join(name), name).unwrap();
            }
            for (rel, _) in SECRETS {
                let place = home.join(rel);
                std::fs::create_dir_all(&place).unwrap();
                std::fs::write(place.join("secret"), "s3cret").unwrap();
            }
            std::fs::create_dir_all(home.join("Desktop")).unwrap();
            std::fs::write(home.join("notes.txt"), "hello").unwrap();
            Self {
                home: std::fs::canonicalize(&home).unwrap(),
                state: std::fs::canonicalize(&state).unwrap(),
                dir,
            }
        }

        fn policy(&self, read_roots: Option<Vec<PathBuf>>) -> Confinement {
            Confinement::new(&Policy {
                home: self.home.clone(),
                state_dir: self.state.clone(),
                token_file: self.state.join("token"),
                others: PincerPlaces {
                    never: vec![self.dir.path().join("vm1.token")],
                    host_states: vec![self.dir.path().join("pincer")],
                },
                read_roots,
                read_env: vec!["MY_SETTING".into()],
            })
            .unwrap()
        }

        fn path(&self, rel: &str) -> String {
            self.home.join(rel).display().to_string()
        }
    }

    /// The reason of a refusal, failing the test on anything else.
    fn refused<T: std::fmt::Debug>(r: Result<T, WireError>) -> String {
        match r {
            Err(WireError::Denied { reason, .. }) => reason,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    fn read(c: &Confinement, path: &str) -> Result<Vec<u8>, WireError> {
        Ok(probe::read_file(c, path, 1024, None)?
            .expect("the file exists")
            .bytes)
    }

    #[test]
    fn read_only_agents_refuse_every_place_of_secrets_and_say_how_to_allow_it() {
        let m = Machine::new();
        let c = m.policy(Some(vec![]));
        for (rel, what) in SECRETS {
            let place = m.home.join(rel);
            let file = m.path(&format!("{rel}/secret"));
            let why = refused(read(&c, &file));
            assert!(
                why.contains(&format!("is in {} ({what})", place.display()))
                    && why.contains(&format!("--read-root {}", place.display())),
                "{why}"
            );
            refused(probe::stat(&c, &file));
            refused(probe::list_dir(&c, &place.display().to_string()));
            // Even whether something is there stays unsaid.
            refused(probe::stat(&c, &m.path(&format!("{rel}/missing"))));
        }
        // What evaluation needs is still served: the home directory and what is in it.
        assert_eq!(read(&c, &m.path("notes.txt")).unwrap(), b"hello");
        let listed = probe::list_dir(&c, &m.home.display().to_string())
            .unwrap()
            .unwrap();
        assert!(listed.iter().any(|e| e.name == "notes.txt"));
        assert!(!probe::stat(&c, &m.path("missing.txt")).unwrap().exists);
        // Outside the read roots nothing is.
        let why = refused(read(&c, "/etc/hostname"));
        assert!(
            why.contains("outside the read roots") && why.contains("--read-root"),
            "{why}"
        );
        refused(read(&c, "/proc/self/environ"));
        refused(probe::list_dir(&c, "/proc/1"));
    }

    #[test]
    fn read_roots_that_name_a_secret_place_allow_that_place_only() {
        let m = Machine::new();
        let data = m.dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("x.csv"), "1,2").unwrap();
        let c = m.policy(Some(vec![
            m.home.clone(),
            m.home.join(".mozilla"),
            data.clone(),
        ]));
        assert_eq!(read(&c, &m.path(".mozilla/secret")).unwrap(), b"s3cret");
        assert_eq!(read(&c, &m.path("notes.txt")).unwrap(), b"hello");
        assert_eq!(
            read(&c, &data.join("x.csv").display().to_string()).unwrap(),
            b"1,2"
        );
        // Other secrets stay refused.
        assert!(refused(read(&c, &m.path(".ssh/secret"))).contains("SSH keys"));
        // Given roots replace the home directory.
        let c = m.policy(Some(vec![data]));
        assert!(refused(read(&c, &m.path("notes.txt"))).contains("outside the read roots"));
        // A root that is not there is an error at start, not an agent that serves nothing.
        let missing = Confinement::new(&Policy {
            home: m.home.clone(),
            state_dir: m.state.clone(),
            token_file: m.state.join("token"),
            others: PincerPlaces::default(),
            read_roots: Some(vec![m.home.join("no-such-dir")]),
            read_env: Vec::new(),
        });
        let err = missing
            .expect_err("a missing read root is refused")
            .to_string();
        assert!(
            err.contains("--read-root") && err.contains("no-such-dir"),
            "{err}"
        );
    }

    #[test]
    fn escapes_by_symlink_dot_dot_and_proc_are_judged_where_they_lead() {
        let m = Machine::new();
        let c = m.policy(Some(vec![]));
        symlink(m.home.join(".ssh/secret"), m.home.join("Desktop/innocent")).unwrap();
        let why = refused(read(&c, &m.path("Desktop/innocent")));
        assert!(
            why.contains(&format!(
                "resolves to {}",
                m.home.join(".ssh/secret").display()
            )) && why.contains("SSH keys"),
            "{why}"
        );
        // A link is refused even by stat, which does not follow it.
        refused(probe::stat(&c, &m.path("Desktop/innocent")));
        symlink(m.home.join(".gnupg"), m.home.join("Desktop/keys")).unwrap();
        refused(probe::list_dir(&c, &m.path("Desktop/keys")));
        refused(read(&c, &m.path("Desktop/../.ssh/secret")));
        refused(read(
            &c,
            &format!("/proc/self/root{}", m.path(".ssh/secret")),
        ));
        refused(read(
            &c,
            &format!("/proc/{}/root{}", std::process::id(), m.path(".aws/secret")),
        ));
        symlink("/etc/hostname", m.home.join("Desktop/out")).unwrap();
        assert!(refused(read(&c, &m.path("Desktop/out"))).contains("outside the read roots"));
        // And the other way round: a path outside that leads into the home is served.
        let outside = m.dir.path().join("to-notes");
        symlink(m.home.join("notes.txt"), &outside).unwrap();
        assert_eq!(read(&c, &outside.display().to_string()).unwrap(), b"hello");
    }

    #[test]
    fn the_agents_keys_and_tokens_are_refused_in_every_mode() {
        let m = Machine::new();
        let other = m.dir.path().join("other-agent");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("key.der"), "k").unwrap();
        std::fs::write(other.join("cert.der"), "c").unwrap();
        std::fs::write(m.dir.path().join("vm1.token"), "t").unwrap();
        std::fs::hard_link(m.state.join("key.der"), m.dir.path().join("hard")).unwrap();
        symlink(m.state.join("token"), m.dir.path().join("soft")).unwrap();
        for c in [m.policy(None), m.policy(Some(vec![m.dir.path().into()]))] {
            for path in [
                m.state.join("key.der"),
                m.state.join("token"),
                m.dir.path().join("hard"),
                m.dir.path().join("soft"),
                m.dir.path().join("vm1.token"),
                other.join("key.der"),
                PathBuf::from(format!(
                    "/proc/self/root{}",
                    m.state.join("key.der").display()
                )),
            ] {
                let why = refused(read(&c, &path.display().to_string()));
                assert!(
                    why.contains("never serves it, in any mode"),
                    "{path:?}: {why}"
                );
            }
            refused(probe::list_dir(&c, &m.state.display().to_string()));
            refused(probe::stat(
                &c,
                &m.state.join("token").display().to_string(),
            ));
        }
        // A host's state: everything but local desktops' home directories.
        let host = m.dir.path().join("pincer");
        for (rel, served) in [
            ("host/token", false),
            ("desktops/a/token", false),
            ("desktops/a/runtime/Xauthority", false),
            ("desktops/a/home/Desktop/report.txt", true),
        ] {
            let file = host.join(rel);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, "x").unwrap();
            let got = read(&m.policy(None), &file.display().to_string());
            assert_eq!(got.is_ok(), served, "{rel}: {got:?}");
        }
        // Nor the memory and environment of processes, its own included.
        for proc in [
            "/proc/self/mem",
            "/proc/self/environ",
            "/proc/thread-self/environ",
        ] {
            let why = refused(read(&m.policy(None), proc));
            assert!(why.contains("a process's memory or environment"), "{why}");
        }
        // Everything else is served by an agent that is not read-only.
        let c = m.policy(None);
        assert_eq!(read(&c, &m.path(".ssh/secret")).unwrap(), b"s3cret");
        assert_eq!(
            read(&c, &other.join("cert.der").display().to_string()).unwrap(),
            b"c"
        );
        assert!(read(&c, "/proc/self/status").is_ok());
    }

    /// An editor saving by renaming a new file over the old one between the agent's open
    /// and its judgement: the new file is judged and served; a file that is gone for good
    /// (only a descriptor holds it) is still refused.
    #[test]
    fn a_file_replaced_while_opened_is_opened_again() {
        let m = Machine::new();
        for c in [m.policy(None), m.policy(Some(vec![]))] {
            let path = m.home.join("notes.txt");
            let asked = path.display().to_string();
            let old = open_path(&path, Follow::Yes).unwrap();
            let fresh = m.home.join(".notes.txt.new");
            std::fs::write(&fresh, "saved").unwrap();
            std::fs::rename(&fresh, &path).unwrap();
            let allowed = c
                .accept(&asked, &path, Follow::Yes, old)
                .unwrap()
                .expect("the new file");
            let mut text = String::new();
            io::Read::read_to_string(&mut allowed.open_for_reading().unwrap(), &mut text).unwrap();
            assert_eq!(text, "saved");
            std::fs::write(&path, "hello").unwrap();

            // Removed for good: it is missing, not refused.
            let gone = m.home.join("gone.txt");
            std::fs::write(&gone, "x").unwrap();
            let held_open = open_path(&gone, Follow::Yes).unwrap();
            std::fs::remove_file(&gone).unwrap();
            let judged = c.accept(&gone.display().to_string(), &gone, Follow::Yes, held_open);
            assert!(matches!(judged, Ok(None)), "{judged:?}");

            // A deleted file reached through a descriptor's link is no path of its own.
            let kept = File::create(m.home.join("kept.txt")).unwrap();
            std::fs::remove_file(m.home.join("kept.txt")).unwrap();
            let via = format!("/proc/self/fd/{}", kept.as_raw_fd());
            let why = refused(read(&c, &via));
            assert!(
                why.contains("no path of its own") || why.contains("process"),
                "{why}"
            );
        }
    }

    #[test]
    fn read_only_agents_serve_only_plain_environment_variables_unless_allowed() {
        let m = Machine::new();
        let c = m.policy(Some(vec![]));
        for plain in [
            "HOME",
            "LANG",
            "LC_ALL",
            "XDG_CURRENT_DESKTOP",
            "MY_SETTING",
        ] {
            assert_eq!(c.env_var(plain), Ok(()), "{plain}");
        }
        let why = refused(c.env_var("AWS_SECRET_ACCESS_KEY"));
        assert!(why.contains("--read-env AWS_SECRET_ACCESS_KEY"), "{why}");
        assert_eq!(m.policy(None).env_var("AWS_SECRET_ACCESS_KEY"), Ok(()));
    }

    #[test]
    fn the_envs_file_names_token_files() {
        let dir = tempfile::tempdir().unwrap();
        let envs = dir.path().join("envs.toml");
        std::fs::write(
            &envs,
            "[envs.vm1]\naddr = \"10.0.0.1:7000\"\ntoken_file = \"/keys/vm1.token\"\n\n\
             [envs.vm2]\nlisten = \"0.0.0.0:7100\"\ntoken_file = \"vm2.token\"\n",
        )
        .unwrap();
        assert_eq!(
            token_files(&envs),
            [
                PathBuf::from("/keys/vm1.token"),
                dir.path().join("vm2.token")
            ]
        );
        assert!(token_files(&dir.path().join("missing.toml")).is_empty());
    }
}
