//! `pincer-agent`: the guest agent that runs inside a Linux desktop. It listens for a host
//! (or dials one), authenticates it, and serves input, screenshots, accessibility trees,
//! probes and (unless `--read-only`) setup over QUIC. The platform-independent part (accept
//! loop, authentication, dispatch, files, exec) is `pincer_guest_core`; this crate is the
//! Linux platform under it ([`linux::Linux`]) and the command line.

mod a11y;
mod clipboard;
mod input;
mod install;
mod linux;
mod memory;
mod screen;
mod settings;
#[cfg(test)]
mod testutil;
mod window;
mod x11;

use anyhow::Context;
use clap::Parser;
use linux::Linux;
use pincer_guest_core::{Config, Guest, confine, processes, server};
use pincer_shared::identity::{Fingerprint, Identity, Token};
use pincer_shared::transport::{close_code, quic};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The pincer guest agent.
#[derive(Debug, Parser)]
#[command(name = "pincer-agent", version, about, long_about = None, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Cmd>,
    /// Listen for hosts on this address (default 127.0.0.1:7000; use 0.0.0.0:7000 in a VM),
    /// on UDP and on TCP: hosts behind links that carry only TCP (a VM's restricted port
    /// forward, `adb forward`) tunnel QUIC through the TCP port.
    #[arg(long, value_name = "ADDR", conflicts_with = "connect")]
    listen: Option<String>,
    /// Dial a host listening at HOST:PORT instead (`pincer env listen` on the host).
    #[arg(long, value_name = "HOST:PORT")]
    connect: Option<String>,
    /// Name reported to hosts (default: the machine's hostname).
    #[arg(long)]
    name: Option<String>,
    /// Where the agent keeps its certificate and default token.
    #[arg(long, value_name = "DIR", env = "PINCER_AGENT_STATE")]
    state_dir: Option<PathBuf>,
    /// File holding the token hosts must prove (created with a random token if missing;
    /// default: STATE_DIR/token).
    #[arg(long, value_name = "FILE", env = "PINCER_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    #[command(flatten)]
    confine: ReadOnly,
    /// X display to use (default: $DISPLAY).
    #[arg(long)]
    display: Option<String>,
    /// With --connect: only talk to a host presenting this certificate fingerprint.
    #[arg(long, value_name = "FINGERPRINT")]
    host_fingerprint: Option<Fingerprint>,
    /// Write {"addr", "fingerprint", "pid"} as JSON to this file once serving.
    #[arg(long, value_name = "FILE")]
    ready_file: Option<PathBuf>,
    /// List only the processes of the agent's own session in process probes (local
    /// desktops share one machine; `pincer desktop up` sets this).
    #[arg(long)]
    own_session_processes: bool,
    /// Print the certificate fingerprint (creating the certificate if needed) and exit.
    #[arg(long)]
    print_fingerprint: bool,
}

/// What a read-only agent serves (the daemon's flags, and `install`'s for its service).
#[derive(Debug, Clone, clap::Args)]
struct ReadOnly {
    /// Refuse setup requests and command probes, and serve files only under the read
    /// roots, minus where secrets live (for people's own machines).
    #[arg(long)]
    read_only: bool,
    /// With --read-only: serve files under DIR (repeatable; default: the home directory).
    /// Naming a place where secrets live (~/.ssh, a browser profile) allows that place.
    #[arg(long, value_name = "DIR", requires = "read_only")]
    read_root: Vec<PathBuf>,
    /// With --read-only: also serve the environment variable NAME (repeatable; by default
    /// only ones that hold no secrets: HOME, USER, LANG, LC_*, XDG_*, ...).
    #[arg(long, value_name = "NAME", requires = "read_only")]
    read_env: Vec<String>,
}

/// Setting the agent up on a physical machine.
#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// Install the agent as a systemd user service started with your graphical session
    /// (the unit VM images use) and print what the host needs to reach it.
    Install {
        /// Where it listens (UDP and TCP).
        #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:7000")]
        listen: String,
        /// Name reported to hosts (default: the machine's hostname).
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        confine: ReadOnly,
        /// Install without starting it now.
        #[arg(long)]
        no_start: bool,
    },
    /// Stop and remove the service (the agent's certificate and token stay).
    Uninstall,
}

/// Runs `install` or `uninstall`.
fn setup_command(cmd: Cmd) -> anyhow::Result<()> {
    let places = install::Places::from_env();
    let said = match cmd {
        Cmd::Install {
            listen,
            name,
            confine,
            no_start,
        } => {
            resolve(&listen)?;
            let opts = install::Install {
                listen,
                name,
                read_only: confine.read_only,
                read_roots: confine.read_root,
                read_envs: confine.read_env,
                start: !no_start,
            };
            install::install(&opts, &places, &default_state_dir(), &hostname())?
        }
        Cmd::Uninstall => install::uninstall(&places)?,
    };
    println!("{said}");
    Ok(())
}

fn default_state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_STATE_HOME") {
        return PathBuf::from(d).join("pincer-agent");
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".local/state/pincer-agent")
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "guest".into())
}

fn resolve(addr: &str) -> anyhow::Result<SocketAddr> {
    addr.to_socket_addrs()
        .with_context(|| format!("cannot resolve '{addr}': write it as HOST:PORT"))?
        .next()
        .with_context(|| format!("'{addr}' resolves to no address"))
}

/// What works without an X display, for the warning at start.
fn no_display_warning() -> &'static str {
    if cfg!(feature = "xcap") {
        "no DISPLAY and no --display: input, window and clipboard requests will fail until one is given; screenshots will try xcap (Wayland); UI trees need only the D-Bus session"
    } else {
        "no DISPLAY and no --display: input, screenshots, window and clipboard requests will fail until one is given (this build has no xcap fallback); UI trees need only the D-Bus session"
    }
}

fn write_ready(path: &Path, addr: SocketAddr, fp: Fingerprint) -> anyhow::Result<()> {
    let json = format!(
        "{{\"addr\":\"{addr}\",\"fingerprint\":\"{fp}\",\"pid\":{}}}\n",
        std::process::id()
    );
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, json).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(cmd) = args.command {
        return setup_command(cmd);
    }
    // Before the runtime's threads exist: arenas made before stay.
    memory::tune();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(args))
}

async fn serve(args: Args) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PINCER_LOG")
                // pincer_guest_core: connections and requests; pincer_shared: the
                // transport's summaries of refused connections.
                .unwrap_or_else(|_| {
                    "pincer_agent=info,pincer_guest_core=info,pincer_shared=info".into()
                }),
        )
        .with_writer(std::io::stderr)
        .init();
    let state_dir = args.state_dir.clone().unwrap_or_else(default_state_dir);
    let name = args.name.clone().unwrap_or_else(hostname);
    let (identity, created) = Identity::load_or_create(&state_dir, &name)
        .with_context(|| format!("state directory {}", state_dir.display()))?;
    let fp = identity.fingerprint();
    if args.print_fingerprint {
        println!("{fp}");
        return Ok(());
    }
    if created {
        eprintln!(
            "pincer-agent: created certificate in {}",
            state_dir.display()
        );
    }
    let token_file = args
        .token_file
        .clone()
        .unwrap_or_else(|| state_dir.join("token"));
    let token = Token::load_or_create(&token_file)?;
    let display = args
        .display
        .clone()
        .or_else(|| std::env::var("DISPLAY").ok());
    if display.is_none() {
        eprintln!("pincer-agent: warning: {}", no_display_warning());
    }
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
        confinement: Arc::new(confinement),
        process_session: args
            .own_session_processes
            .then(|| processes::session_of(std::process::id()))
            .flatten(),
    };
    let guest = Arc::new(Guest::new(config, &Linux::new(display)));

    let mode = if args.confine.read_only {
        " (read-only)"
    } else {
        ""
    };
    let endpoint;
    if let Some(host) = &args.connect {
        let addr = resolve(host)?;
        endpoint = quic::client_endpoint(addr)?;
        let pin = args
            .host_fingerprint
            .map_or(quic::ServerPin::Any, quic::ServerPin::Pinned);
        eprintln!(
            "pincer-agent '{name}'{mode}: dialling host {addr}; fingerprint {fp}; token file {}",
            token_file.display()
        );
        if let Some(p) = &args.ready_file {
            write_ready(p, endpoint.local_addr()?, fp)?;
        }
        tokio::spawn(server::dial(guest, endpoint.clone(), addr, identity, pin));
    } else {
        let addr = resolve(args.listen.as_deref().unwrap_or("127.0.0.1:7000"))?;
        let cfg = quic::server_config(&identity, false)?;
        endpoint = quic::server_endpoint(addr, cfg, &identity).map_err(|e| {
            anyhow::anyhow!("{e}: is another pincer-agent already running there? pick another port with --listen")
        })?;
        let bound = endpoint.local_addr()?;
        eprintln!(
            "pincer-agent '{name}'{mode}: listening on {bound} (udp, tcp); fingerprint {fp}; token file {}",
            token_file.display()
        );
        if let Some(p) = &args.ready_file {
            write_ready(p, bound, fp)?;
        }
        tokio::spawn(server::listen(guest, endpoint.clone()));
    }

    shutdown_signal().await?;
    eprintln!("pincer-agent: shutting down");
    endpoint.close(close_code::SHUTDOWN.into(), b"guest shutting down");
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), endpoint.wait_idle()).await;
    Ok(())
}

async fn shutdown_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
