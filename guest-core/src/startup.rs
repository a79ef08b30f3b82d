//! Starting a guest: the flags every guest takes (`--listen`, `--connect`, `--name`,
//! `--state-dir`, `--token-file`, `--read-only` and its roots, `--host-fingerprint`,
//! `--ready-file`, `--print-fingerprint`, `--allow-tools`), the identity and token, the confinement, the
//! endpoint, and serving until SIGTERM or Ctrl-C. The Linux agent and the Android shim
//! start the same way, with their own platform and extra flags.

use crate::platform::Platform;
use crate::{Config, Guest, confine, server};
use pincer_shared::identity::{Fingerprint, Identity, Token};
use pincer_shared::transport::{close_code, quic};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The flags every guest takes.
#[derive(Debug, Clone, clap::Args)]
pub struct GuestArgs {
    /// Listen for hosts on this address (default 127.0.0.1:7000; use 0.0.0.0:7000 in a VM),
    /// on UDP and on TCP: hosts behind links that carry only TCP (a VM's restricted port
    /// forward, `adb forward`) tunnel QUIC through the TCP port.
    #[arg(long, value_name = "ADDR", conflicts_with = "connect")]
    pub listen: Option<String>,
    /// Dial a host listening at HOST:PORT instead (`pincer env listen` on the host).
    #[arg(long, value_name = "HOST:PORT")]
    pub connect: Option<String>,
    /// Name reported to hosts (default: the machine's hostname).
    #[arg(long)]
    pub name: Option<String>,
    /// Where the guest keeps its certificate and default token.
    #[arg(long, value_name = "DIR", env = "PINCER_AGENT_STATE")]
    pub state_dir: Option<PathBuf>,
    /// File holding the token hosts must prove (created with a random token if missing;
    /// default: STATE_DIR/token).
    #[arg(long, value_name = "FILE", env = "PINCER_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    #[command(flatten)]
    pub confine: ReadOnly,
    /// With --connect: only talk to a host presenting this certificate fingerprint.
    #[arg(long, value_name = "FINGERPRINT")]
    pub host_fingerprint: Option<Fingerprint>,
    /// Write {"addr", "fingerprint", "pid"} as JSON to this file once serving.
    #[arg(long, value_name = "FILE")]
    pub ready_file: Option<PathBuf>,
    /// Print the certificate fingerprint (creating the certificate if needed) and exit.
    #[arg(long)]
    pub print_fingerprint: bool,
    /// Serve the tool class: run the API tools a task declares, with the agent's typed
    /// arguments, in a bubblewrap sandbox without network as user 65534 (off by default;
    /// --read-only refuses them anyway).
    #[arg(long)]
    pub allow_tools: bool,
}

/// What a read-only guest serves.
#[derive(Debug, Clone, clap::Args)]
pub struct ReadOnly {
    /// Refuse setup requests and command probes, and serve files only under the read
    /// roots, minus where secrets live (for people's own machines and phones).
    #[arg(long)]
    pub read_only: bool,
    /// With --read-only: serve files under DIR (repeatable; default: the home directory).
    /// Naming a place where secrets live (~/.ssh, a browser profile) allows that place.
    #[arg(long, value_name = "DIR", requires = "read_only")]
    pub read_root: Vec<PathBuf>,
    /// With --read-only: also serve the environment variable NAME (repeatable; by default
    /// only ones that hold no secrets: HOME, USER, LANG, LC_*, XDG_*, ...).
    #[arg(long, value_name = "NAME", requires = "read_only")]
    pub read_env: Vec<String>,
}

/// Why a guest cannot start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The certificate or the token cannot be read or made.
    #[error("state directory {}: {source}", dir.display())]
    Identity {
        /// The directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: pincer_shared::identity::IdentityError,
    },
    /// An address that is not one.
    #[error("cannot resolve '{0}': write it as HOST:PORT")]
    Address(String),
    /// The confinement's roots cannot be opened.
    #[error(transparent)]
    Confinement(#[from] confine::PolicyError),
    /// The endpoint cannot be made (a taken port).
    #[error("{0}: is another guest already running there? pick another port with --listen")]
    Endpoint(pincer_shared::transport::TransportError),
    /// Writing the ready file, or listening for signals.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// `$XDG_STATE_HOME/DIR_NAME` or `~/.local/state/DIR_NAME`.
pub fn default_state_dir(dir_name: &str) -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(d).join(dir_name);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".local/state").join(dir_name)
}

/// The machine's hostname (`guest` when it has none).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "guest".into())
}

/// Resolves `HOST:PORT`.
pub fn resolve(addr: &str) -> Result<SocketAddr, StartError> {
    addr.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| StartError::Address(addr.into()))
}

fn write_ready(path: &Path, addr: SocketAddr, fp: Fingerprint) -> Result<(), StartError> {
    let json = format!(
        "{{\"addr\":\"{addr}\",\"fingerprint\":\"{fp}\",\"pid\":{}}}\n",
        std::process::id()
    );
    let tmp = path.with_extension("tmp");
    let io = |what: &Path| {
        let what = format!("writing {}", what.display());
        move |source| StartError::Io { what, source }
    };
    std::fs::write(&tmp, json).map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))
}

/// How a guest program is started.
#[derive(Debug, Clone)]
pub struct Program {
    /// Its name in messages (`pincer-agent`, `pincer-shim`).
    pub name: &'static str,
    /// Its state directory's name under `~/.local/state`.
    pub state_dir_name: &'static str,
    /// List only processes of this session in process probes.
    pub process_session: Option<u32>,
}

/// Starts a guest on `platform` as `args` say and serves until SIGTERM or Ctrl-C (or, with
/// `--print-fingerprint`, prints it and returns).
pub async fn serve<P: Platform>(
    program: &Program,
    args: &GuestArgs,
    platform: P,
) -> Result<(), StartError> {
    let state_dir = args
        .state_dir
        .clone()
        .unwrap_or_else(|| default_state_dir(program.state_dir_name));
    let name = args.name.clone().unwrap_or_else(hostname);
    let id_err = |source| StartError::Identity {
        dir: state_dir.clone(),
        source,
    };
    let (identity, created) = Identity::load_or_create(&state_dir, &name).map_err(id_err)?;
    let fp = identity.fingerprint();
    if args.print_fingerprint {
        println!("{fp}");
        return Ok(());
    }
    let tool = program.name;
    if created {
        eprintln!("{tool}: created certificate in {}", state_dir.display());
    }
    let token_file = args
        .token_file
        .clone()
        .unwrap_or_else(|| state_dir.join("token"));
    let token = Token::load_or_create(&token_file).map_err(id_err)?;
    let home = confine::home();
    let policy = confine::Policy {
        others: confine::pincer_places(&home),
        home,
        state_dir: state_dir.clone(),
        token_file: token_file.clone(),
        read_roots: args
            .confine
            .read_only
            .then(|| args.confine.read_root.clone()),
        read_env: args.confine.read_env.clone(),
    };
    let confinement = confine::Confinement::new(&policy)?;
    let config = Config {
        name: name.clone(),
        token,
        read_only: args.confine.read_only,
        allow_tools: args.allow_tools,
        confinement: Arc::new(confinement),
        process_session: program.process_session,
    };
    let guest = Arc::new(Guest::new(config, &platform));
    let mode = match (args.confine.read_only, args.allow_tools) {
        (true, true) => " (read-only: API tools refused despite --allow-tools)",
        (true, false) => " (read-only)",
        (false, true) => " (API tools allowed, sandboxed)",
        (false, false) => "",
    };
    let io = |what: &str| {
        let what = what.to_owned();
        move |source| StartError::Io { what, source }
    };
    let endpoint;
    if let Some(host) = &args.connect {
        let addr = resolve(host)?;
        endpoint = quic::client_endpoint(addr).map_err(StartError::Endpoint)?;
        let pin = args
            .host_fingerprint
            .map_or(quic::ServerPin::Any, quic::ServerPin::Pinned);
        eprintln!(
            "{tool} '{name}'{mode}: dialling host {addr}; fingerprint {fp}; token file {}",
            token_file.display()
        );
        if let Some(p) = &args.ready_file {
            write_ready(p, endpoint.local_addr().map_err(io("local address"))?, fp)?;
        }
        tokio::spawn(server::dial(guest, endpoint.clone(), addr, identity, pin));
    } else {
        let addr = resolve(args.listen.as_deref().unwrap_or("127.0.0.1:7000"))?;
        let cfg = quic::server_config(&identity, false).map_err(StartError::Endpoint)?;
        endpoint = quic::server_endpoint(addr, cfg, &identity).map_err(StartError::Endpoint)?;
        let bound = endpoint.local_addr().map_err(io("local address"))?;
        eprintln!(
            "{tool} '{name}'{mode}: listening on {bound} (udp, tcp); fingerprint {fp}; token file {}",
            token_file.display()
        );
        if let Some(p) = &args.ready_file {
            write_ready(p, bound, fp)?;
        }
        tokio::spawn(server::listen(guest, endpoint.clone()));
    }
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(io("listening for SIGTERM"))?;
        let mut int = signal(SignalKind::interrupt()).map_err(io("listening for Ctrl-C"))?;
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    }
    eprintln!("{tool}: shutting down");
    endpoint.close(close_code::SHUTDOWN.into(), b"guest shutting down");
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), endpoint.wait_idle()).await;
    Ok(())
}
