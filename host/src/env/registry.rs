//! The envs file: named environments and how to reach them (TOML). `pincer desktop up`,
//! `pincer env add` and `pincer env listen --accept-new` write it; every other command reads
//! it. Writes are read-modify-write under an exclusive lock so concurrent `desktop up`s do
//! not lose each other's entries.
//!
//! An entry either dials its guest (`addr`, for `pincer-agent --listen`) or listens for it
//! to dial in (`listen`, for `pincer-agent --connect`); both kinds work with every command.

use super::{ClientError, Deadlines, DialInSpec, EnvSpec, Environment, Transport, listener};
use pincer_shared::Platform;
use pincer_shared::identity::{Fingerprint, Token};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

/// The file's contents.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvsFile {
    /// Environment used when a command names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    /// Environments by name.
    #[serde(default)]
    pub envs: BTreeMap<String, EnvEntry>,
}

/// One environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvEntry {
    /// `HOST:PORT` of its agent, for a guest that listens (`pincer-agent --listen`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// `ADDR:PORT` this host listens on, for a guest that dials in (`pincer-agent
    /// --connect`); instead of `addr`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listen: Option<String>,
    /// How packets reach `addr`: UDP unless `transport = "tcp"`, for links that carry only
    /// TCP (a VM's restricted port forward, `adb forward`). Written only when it is TCP.
    #[serde(default, skip_serializing_if = "udp")]
    pub transport: Option<Transport>,
    /// Pinned certificate fingerprint (`sha256:...`).
    pub fingerprint: Option<String>,
    /// File holding the token the agent expects.
    pub token_file: PathBuf,
    /// The platform its guest runs (linux when the file does not say); a name that is none
    /// is refused as the file is read.
    #[serde(default = "linux")]
    pub platform: Platform,
    /// Set for local desktops made by `pincer desktop up`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desktop: Option<DesktopEntry>,
    /// Set for VMs made by `pincer vm up`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<VmEntry>,
}

fn linux() -> Platform {
    Platform::Linux
}

fn udp(t: &Option<Transport>) -> bool {
    t.unwrap_or_default() == Transport::Udp
}

impl EnvEntry {
    /// Where the guest is, for people: its address (and `over tcp` when tunnelled), or
    /// `listen ADDR` for one that dials in.
    pub fn address(&self) -> String {
        match (&self.addr, &self.listen) {
            (Some(addr), _) if self.transport() == Transport::Tcp => format!("{addr} over tcp"),
            (Some(addr), _) => addr.clone(),
            (None, Some(listen)) => format!("listen {listen}"),
            (None, None) => "-".into(),
        }
    }

    /// How packets reach `addr` (UDP when the file does not say).
    pub fn transport(&self) -> Transport {
        self.transport.unwrap_or_default()
    }
}

/// How to reach an environment.
#[derive(Debug, Clone)]
pub enum Reach {
    /// Dial its agent.
    Dial(EnvSpec),
    /// Listen for its agent to dial in.
    DialIn(DialInSpec),
}

/// A local desktop's processes and files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DesktopEntry {
    /// X display, such as `:101`.
    pub display: String,
    /// Directory with its logs, runtime files and agent state.
    pub state_dir: PathBuf,
    /// Pid of the supervisor that owns all its processes.
    pub supervisor_pid: u32,
}

/// A VM's image and files (`pincer vm up`); runs reset it before every task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmEntry {
    /// The image it runs.
    pub image: String,
    /// Directory with its record, overlay, sockets and logs.
    pub state_dir: PathBuf,
}

/// Problems with the envs file or a name in it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// Reading or writing failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not valid.
    #[error("{}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said (with line and column).
        message: String,
    },
    /// No environment by that name.
    #[error("no environment named '{name}' in {}{}", path.display(), known_list(known))]
    Unknown {
        /// The name asked for.
        name: String,
        /// The file.
        path: PathBuf,
        /// Names that exist.
        known: Vec<String>,
    },
    /// No name given and no unambiguous default.
    #[error("no environment given and {} has {}: pass --env NAME{}", path.display(), if known.is_empty() { "none (start one with `pincer desktop up`)".to_owned() } else { format!("{} and no default", known.len()) }, known_list(known))]
    NoDefault {
        /// The file.
        path: PathBuf,
        /// Names that exist.
        known: Vec<String>,
    },
    /// An entry has a bad field.
    #[error("environment '{name}' in {}: {message}", path.display())]
    BadEntry {
        /// The environment.
        name: String,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Why an environment could not be connected to: its entry, or the connection.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The envs file or its entry for the environment.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// Dialling, listening or the handshake.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// An address that is not one.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AddrError {
    /// Not `HOST:PORT`, or the host is unknown.
    #[error("address '{addr}': {source} (write it as HOST:PORT)")]
    Invalid {
        /// The address as written.
        addr: String,
        /// What the resolver said.
        #[source]
        source: std::io::Error,
    },
    /// The host has no address.
    #[error("address '{0}' resolves to nothing")]
    Nothing(String),
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        String::new()
    } else {
        format!(" (known: {})", known.join(", "))
    }
}

/// The envs file at a path.
#[derive(Debug, Clone)]
pub struct Registry {
    path: PathBuf,
}

impl Registry {
    /// The file named by `--envs`, else `$PINCER_ENVS`, else `~/.config/pincer/envs.toml`.
    pub fn locate(explicit: Option<&Path>) -> Self {
        let path = explicit
            .map(Path::to_path_buf)
            .or_else(|| std::env::var_os("PINCER_ENVS").map(PathBuf::from))
            .unwrap_or_else(|| crate::paths::config_dir().join("envs.toml"));
        Self { path }
    }

    /// The registry at `path`.
    pub fn at(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file; a missing file is an empty registry.
    pub fn load(&self) -> Result<EnvsFile, RegistryError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(EnvsFile::default()),
            Err(source) => {
                return Err(RegistryError::Io {
                    path: self.path.clone(),
                    source,
                });
            }
        };
        toml::from_str(&text).map_err(|e| RegistryError::Parse {
            path: self.path.clone(),
            message: e.to_string(),
        })
    }

    /// Changes the file under an exclusive lock and writes it back atomically.
    pub fn update<T>(&self, f: impl FnOnce(&mut EnvsFile) -> T) -> Result<T, RegistryError> {
        let io = |source| RegistryError::Io {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let lock_path = self.path.with_extension("lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io)?;
        lock.lock().map_err(io)?;
        let mut file = self.load()?;
        let out = f(&mut file);
        let text = toml::to_string_pretty(&file).map_err(|e| RegistryError::Parse {
            path: self.path.clone(),
            message: e.to_string(),
        })?;
        let tmp = self.path.with_extension("tmp");
        std::fs::write(&tmp, text).map_err(io)?;
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        drop(lock);
        Ok(out)
    }

    /// The entry for `name`, or the default one when `name` is `None` (the `default` key,
    /// or the only entry).
    pub fn entry(&self, name: Option<&str>) -> Result<(String, EnvEntry), RegistryError> {
        let file = self.load()?;
        let known: Vec<String> = file.envs.keys().cloned().collect();
        let name = match name {
            Some(n) => n.to_owned(),
            None => match (&file.default, known.as_slice()) {
                (Some(d), _) => d.clone(),
                (None, [only]) => only.clone(),
                _ => {
                    return Err(RegistryError::NoDefault {
                        path: self.path.clone(),
                        known,
                    });
                }
            },
        };
        match file.envs.get(&name) {
            Some(e) => Ok((name, e.clone())),
            None => Err(RegistryError::Unknown {
                name,
                path: self.path.clone(),
                known,
            }),
        }
    }

    /// How to connect to `name` (or the default).
    pub fn spec(&self, name: Option<&str>) -> Result<EnvSpec, RegistryError> {
        let (name, e) = self.entry(name)?;
        self.spec_of(&name, &e)
    }

    /// How to dial an entry's guest; an error for guests that dial in.
    pub fn spec_of(&self, name: &str, e: &EnvEntry) -> Result<EnvSpec, RegistryError> {
        match self.reach_of(name, e)? {
            Reach::Dial(spec) => Ok(spec),
            Reach::DialIn(spec) => Err(RegistryError::BadEntry {
                name: name.to_owned(),
                path: self.path.clone(),
                message: format!(
                    "its guest dials in (listen = \"{}\"); there is no address to dial",
                    spec.listen
                ),
            }),
        }
    }

    /// How to reach an entry's guest.
    pub fn reach_of(&self, name: &str, e: &EnvEntry) -> Result<Reach, RegistryError> {
        let bad = |message: String| RegistryError::BadEntry {
            name: name.to_owned(),
            path: self.path.clone(),
            message,
        };
        // Checked in this order so the first problem of an entry is the one reported.
        let fingerprint = || {
            e.fingerprint
                .as_deref()
                .map(str::parse::<Fingerprint>)
                .transpose()
                .map_err(|err| bad(err.to_string()))
        };
        let token = || Token::load(&e.token_file).map_err(|err| bad(format!("token: {err}")));
        match (&e.addr, &e.listen) {
            (Some(addr), None) => Ok(Reach::Dial(EnvSpec {
                name: name.to_owned(),
                addr: resolve(addr).map_err(|e| bad(e.to_string()))?,
                transport: e.transport(),
                fingerprint: fingerprint()?,
                token: token()?,
            })),
            (None, Some(_)) if e.transport() == Transport::Tcp => Err(bad(
                "transport = \"tcp\" is for guests this host dials (addr); guests that dial in (listen) use UDP".into(),
            )),
            (None, Some(listen)) => {
                let listen = resolve(listen).map_err(|e| bad(e.to_string()))?;
                let fingerprint = fingerprint()?.ok_or_else(|| {
                    bad(format!(
                        "a guest that dials in needs its pinned fingerprint: run `pincer env listen {listen} --accept-new` once while it dials in, or set fingerprint to what `pincer-agent --print-fingerprint` prints on the guest"
                    ))
                })?;
                Ok(Reach::DialIn(DialInSpec {
                    name: name.to_owned(),
                    listen,
                    fingerprint,
                    token: token()?,
                    token_file: e.token_file.clone(),
                }))
            }
            (Some(_), Some(_)) => Err(bad(
                "has both addr and listen: keep addr for a guest that listens (`pincer-agent --listen`), listen for one that dials in (`pincer-agent --connect`)".into(),
            )),
            (None, None) => Err(bad(
                "has neither addr (a guest that listens) nor listen (a guest that dials in)"
                    .into(),
            )),
        }
    }

    /// Connects to `name` (or the default): dials its guest, or listens for it to dial in.
    pub async fn connect(
        &self,
        name: Option<&str>,
        deadlines: Deadlines,
    ) -> Result<Environment, ConnectError> {
        let (name, entry) = self.entry(name)?;
        let spec = match self.reach_of(&name, &entry)? {
            Reach::Dial(spec) => spec,
            Reach::DialIn(spec) => {
                let neighbours = self.dialling(spec.listen, &name)?;
                return Ok(listener::connect(&spec, neighbours, deadlines).await?);
            }
        };
        if spec.fingerprint.is_none() {
            return Err(RegistryError::BadEntry {
                message: format!(
                    "no pinned fingerprint: run `pincer env add {} {}{} --token-file ... --trust` once to pin it",
                    spec.name,
                    spec.addr,
                    match spec.transport {
                        Transport::Udp => "",
                        Transport::Tcp => " --transport tcp",
                    },
                ),
                name: spec.name,
                path: self.path.clone(),
            }
            .into());
        }
        Ok(Environment::connect(spec, deadlines).await?)
    }

    /// The other guests pinned to dial in at `listen`, by name.
    fn dialling(
        &self,
        listen: SocketAddr,
        except: &str,
    ) -> Result<Vec<(String, Fingerprint)>, RegistryError> {
        Ok(self
            .load()?
            .envs
            .iter()
            .filter(|(name, _)| name.as_str() != except)
            .filter_map(|(name, e)| match self.reach_of(name, e) {
                Ok(Reach::DialIn(spec)) if spec.listen == listen => {
                    Some((name.clone(), spec.fingerprint))
                }
                _ => None,
            })
            .collect())
    }
}

/// Resolves `HOST:PORT`.
pub fn resolve(addr: &str) -> Result<SocketAddr, AddrError> {
    addr.to_socket_addrs()
        .map_err(|source| AddrError::Invalid {
            addr: addr.to_owned(),
            source,
        })?
        .next()
        .ok_or_else(|| AddrError::Nothing(addr.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(addr: &str, token_file: &Path) -> EnvEntry {
        EnvEntry {
            addr: Some(addr.into()),
            listen: None,
            transport: None,
            fingerprint: Some(Fingerprint::of(b"x").to_string()),
            token_file: token_file.into(),
            platform: Platform::Linux,
            desktop: None,
            vm: None,
        }
    }

    #[test]
    fn updates_round_trip_and_default_resolution() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        Token::load_or_create(&token).unwrap();
        let reg = Registry::at(dir.path().join("envs.toml"));
        assert!(matches!(
            reg.entry(None),
            Err(RegistryError::NoDefault { .. })
        ));
        reg.update(|f| f.envs.insert("a".into(), entry("127.0.0.1:7000", &token)))
            .unwrap();
        // One entry: it is the default.
        assert_eq!(reg.entry(None).unwrap().0, "a");
        reg.update(|f| f.envs.insert("b".into(), entry("127.0.0.1:7001", &token)))
            .unwrap();
        assert!(matches!(
            reg.entry(None),
            Err(RegistryError::NoDefault { .. })
        ));
        reg.update(|f| f.default = Some("b".into())).unwrap();
        let spec = reg.spec(None).unwrap();
        assert_eq!(spec.name, "b");
        assert_eq!(spec.addr.port(), 7001);
        let err = reg.entry(Some("c")).unwrap_err().to_string();
        assert!(err.contains("known: a, b"), "{err}");
    }

    #[test]
    fn the_transport_is_written_only_when_it_is_tcp() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        Token::load_or_create(&token).unwrap();
        let reg = Registry::at(dir.path().join("envs.toml"));
        reg.update(|f| {
            f.envs.insert("udp".into(), entry("127.0.0.1:7000", &token));
            let mut tcp = entry("127.0.0.1:7000", &token);
            tcp.transport = Some(Transport::Tcp);
            f.envs.insert("tcp".into(), tcp)
        })
        .unwrap();
        let text = std::fs::read_to_string(reg.path()).unwrap();
        assert_eq!(text.matches("transport").count(), 1, "{text}");
        assert!(text.contains("transport = \"tcp\""), "{text}");
        let file = reg.load().unwrap();
        assert_eq!(file.envs["tcp"].transport(), Transport::Tcp);
        assert_eq!(file.envs["udp"].transport, None);
        assert_eq!(reg.spec(Some("tcp")).unwrap().transport, Transport::Tcp);
        assert_eq!(reg.spec(Some("udp")).unwrap().transport, Transport::Udp);
        assert_eq!(file.envs["tcp"].address(), "127.0.0.1:7000 over tcp");
        assert_eq!(file.envs["udp"].address(), "127.0.0.1:7000");

        // Written by hand: udp spelled out is the default; other words are refused with
        // the line; a guest that dials in cannot tunnel.
        let fp = Fingerprint::of(b"guest");
        std::fs::write(
            reg.path(),
            format!(
                "[envs.a]\naddr = \"127.0.0.1:7000\"\ntransport = \"udp\"\nfingerprint = \"{fp}\"\ntoken_file = {token:?}\n\n\
                 [envs.b]\nlisten = \"127.0.0.1:7100\"\ntransport = \"tcp\"\nfingerprint = \"{fp}\"\ntoken_file = {token:?}\n"
            ),
        )
        .unwrap();
        let file = reg.load().unwrap();
        assert_eq!(file.envs["a"].transport(), Transport::Udp);
        let err = reg.reach_of("b", &file.envs["b"]).unwrap_err().to_string();
        assert!(err.contains("dial in"), "{err}");
        std::fs::write(
            reg.path(),
            format!("[envs.a]\naddr = \"127.0.0.1:7000\"\ntransport = \"quic\"\ntoken_file = {token:?}\n"),
        )
        .unwrap();
        let err = reg.load().unwrap_err().to_string();
        assert!(err.contains("quic") && err.contains("line"), "{err}");
    }

    #[test]
    fn bad_files_and_entries_say_where() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("envs.toml");
        std::fs::write(&path, "[envs.a]\naddr = 5\n").unwrap();
        let err = Registry::at(&path).load().unwrap_err().to_string();
        assert!(err.contains("envs.toml") && err.contains("line"), "{err}");

        let token = dir.path().join("token");
        Token::load_or_create(&token).unwrap();
        let reg = Registry::at(&path);
        std::fs::remove_file(&path).unwrap();
        reg.update(|f| {
            let mut e = entry("not an address", &token);
            e.fingerprint = Some("sha256:nope".into());
            f.envs.insert("a".into(), e)
        })
        .unwrap();
        let err = reg.spec(Some("a")).unwrap_err().to_string();
        assert!(
            err.contains("environment 'a'") && err.contains("HOST:PORT"),
            "{err}"
        );
    }

    #[test]
    fn a_platform_that_is_none_is_refused_as_the_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("envs.toml");
        let token = dir.path().join("token");
        let entry = |platform: &str| {
            format!("[envs.a]\naddr = \"127.0.0.1:7000\"\ntoken_file = {token:?}\n{platform}\n")
        };
        let reg = Registry::at(&path);
        std::fs::write(&path, entry("platform = \"andriod\"")).unwrap();
        let err = reg.load().unwrap_err().to_string();
        assert!(
            err.contains("envs.toml")
                && err.contains("line")
                && err.contains("andriod")
                && err.contains("`linux`")
                && err.contains("`android`"),
            "{err}"
        );
        // Both names are read, and an entry that does not say is Linux.
        for (written, read) in [
            ("platform = \"android\"", "android"),
            ("platform = \"linux\"", "linux"),
            ("", "linux"),
        ] {
            std::fs::write(&path, entry(written)).unwrap();
            assert_eq!(reg.load().unwrap().envs["a"].platform.to_string(), read);
        }
    }

    #[test]
    fn entries_either_dial_or_listen() {
        let dir = tempfile::tempdir().unwrap();
        let token = dir.path().join("token");
        Token::load_or_create(&token).unwrap();
        let path = dir.path().join("envs.toml");
        let fp = Fingerprint::of(b"guest");
        std::fs::write(
            &path,
            format!(
                "[envs.vm]\nlisten = \"127.0.0.1:7100\"\nfingerprint = \"{fp}\"\ntoken_file = {token:?}\n\n\
                 [envs.both]\naddr = \"127.0.0.1:7000\"\nlisten = \"127.0.0.1:7100\"\ntoken_file = {token:?}\n\n\
                 [envs.neither]\ntoken_file = {token:?}\n\n\
                 [envs.unpinned]\nlisten = \"127.0.0.1:7100\"\ntoken_file = {token:?}\n"
            ),
        )
        .unwrap();
        let reg = Registry::at(&path);
        let file = reg.load().unwrap();
        match reg.reach_of("vm", &file.envs["vm"]).unwrap() {
            Reach::DialIn(spec) => {
                assert_eq!(spec.listen, "127.0.0.1:7100".parse().unwrap());
                assert_eq!(spec.fingerprint, fp);
                assert_eq!(spec.token_file, token);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(file.envs["vm"].address(), "listen 127.0.0.1:7100");
        let err = reg.spec(Some("vm")).unwrap_err().to_string();
        assert!(err.contains("dials in"), "{err}");
        for (name, says) in [
            ("both", "both addr and listen"),
            ("neither", "neither addr"),
            ("unpinned", "pincer env listen 127.0.0.1:7100 --accept-new"),
        ] {
            let err = reg
                .reach_of(name, &file.envs[name])
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{name}: {err}");
        }
    }
}
