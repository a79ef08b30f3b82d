//! `pincer desktop ...`: local X11 desktops.

use anyhow::{Context, bail};
use clap::Subcommand;
use pincer::desktop::{self, DesktopOptions, Dial, Session, SuperviseOptions};
use pincer::env::Deadlines;
use pincer::env::registry::Registry;
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub(crate) enum DesktopCmd {
    /// Start a local desktop and register it as an environment.
    Up(UpArgs),
    /// Stop desktops and every process they started.
    Down {
        /// Desktop names.
        #[arg(required_unless_present = "all")]
        names: Vec<String>,
        /// Stop every local desktop.
        #[arg(long)]
        all: bool,
    },
    /// List local desktops.
    List,
    /// Print shell exports to run programs inside a desktop (`eval $(pincer desktop env NAME)`).
    Env {
        /// Desktop name.
        name: String,
    },
    /// Serve a desktop's screen over VNC on localhost (x11vnc, a fresh password each time)
    /// so a person can watch or work on it, e.g. with `--agent human`. Ctrl-C stops it.
    Vnc {
        /// Desktop name.
        name: String,
        /// TCP port on 127.0.0.1.
        #[arg(long, default_value_t = 5900)]
        port: u16,
        /// Let the viewer watch without sending input.
        #[arg(long)]
        view_only: bool,
    },
    /// Internal: the process that owns a desktop (started by `up`).
    #[command(hide = true)]
    Supervise(SuperviseArgs),
}

#[derive(Debug, clap::Args)]
pub(crate) struct UpArgs {
    /// Environment name.
    #[arg(long, default_value = "desk")]
    name: String,
    /// Screen size.
    #[arg(long, default_value = "1920x1080", value_parser = parse_size)]
    size: (u32, u32),
    /// Agent UDP port on 127.0.0.1 (default: a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Do not start a window manager.
    #[arg(long)]
    no_wm: bool,
    /// The graphical session: x11 (Xvfb and a window manager) or wayland (a headless GNOME:
    /// GNOME Shell, or mutter alone, with Xwayland, PipeWire and WirePlumber; the agent
    /// drives it through Mutter's remote-desktop API and pincer's Shell extension).
    #[arg(long, default_value = "x11", value_parser = parse_session)]
    session: Session,
    /// Start the agent read-only (no setup, exec or command probes).
    #[arg(long)]
    read_only: bool,
    /// Let the agent run the API tools tasks declare (typed calls, sandboxed by
    /// bubblewrap without network; refused anyway with --read-only).
    #[arg(long)]
    allow_tools: bool,
    /// Home directory for the desktop's programs (default: a private one in its state dir).
    #[arg(long, value_name = "DIR")]
    home: Option<PathBuf>,
    /// Make this the default environment.
    #[arg(long, conflicts_with = "connect")]
    default: bool,
    /// Make the agent dial a host listening at HOST:PORT (`pincer env listen` there)
    /// instead of listening: a desktop on a cluster node serving one central runner.
    #[arg(long, value_name = "HOST:PORT", requires = "host_token_file")]
    connect: Option<String>,
    /// With --connect: a copy of the host's token file.
    #[arg(long, value_name = "FILE", requires = "connect")]
    host_token_file: Option<PathBuf>,
    /// With --connect: only talk to a host presenting this certificate fingerprint.
    #[arg(long, value_name = "FINGERPRINT", requires = "connect")]
    host_fingerprint: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct SuperviseArgs {
    #[arg(long)]
    name: String,
    #[arg(long, value_parser = parse_size)]
    size: (u32, u32),
    #[arg(long)]
    port: u16,
    #[arg(long)]
    agent: PathBuf,
    #[arg(long)]
    no_wm: bool,
    #[arg(long, default_value = "x11", value_parser = parse_session)]
    session: Session,
    #[arg(long)]
    read_only: bool,
    #[arg(long)]
    allow_tools: bool,
    #[arg(long)]
    home: Option<PathBuf>,
    #[arg(long)]
    connect: Option<String>,
    #[arg(long)]
    host_token_file: Option<PathBuf>,
    #[arg(long)]
    host_fingerprint: Option<String>,
    /// The read end of the lifeline of the process that started the desktop for its own use.
    #[arg(long, value_name = "FD")]
    lifeline: Option<i32>,
}

/// The dialling part of a desktop's options.
fn dial(
    connect: Option<&String>,
    token_file: Option<&PathBuf>,
    fingerprint: Option<&String>,
) -> Option<Dial> {
    Some(Dial {
        host: connect?.clone(),
        host_fingerprint: fingerprint.cloned(),
        token_file: token_file?.clone(),
    })
}

pub(crate) fn parse_session(s: &str) -> Result<Session, String> {
    s.parse()
}

pub(crate) fn parse_size(s: &str) -> Result<(u32, u32), String> {
    let (w, h) = s
        .split_once(['x', 'X'])
        .ok_or_else(|| format!("'{s}' is not a size: write WIDTHxHEIGHT, e.g. 1920x1080"))?;
    let parse = |v: &str| {
        v.trim()
            .parse::<u32>()
            .map_err(|_| format!("'{s}' is not a size: write WIDTHxHEIGHT, e.g. 1920x1080"))
    };
    let (w, h) = (parse(w)?, parse(h)?);
    if !(64..=16384).contains(&w) || !(64..=16384).contains(&h) {
        return Err(format!("size {w}x{h} is out of range (64..16384 per side)"));
    }
    Ok((w, h))
}

pub(crate) fn supervise(a: &SuperviseArgs) -> anyhow::Result<()> {
    Ok(desktop::supervise(&SuperviseOptions {
        desktop: DesktopOptions {
            name: a.name.clone(),
            size: a.size,
            window_manager: !a.no_wm,
            read_only: a.read_only,
            allow_tools: a.allow_tools,
            port: a.port,
            home: a.home.clone(),
            dial: dial(
                a.connect.as_ref(),
                a.host_token_file.as_ref(),
                a.host_fingerprint.as_ref(),
            ),
            lifeline: a.lifeline.is_some(),
            session: a.session,
        },
        agent: a.agent.clone(),
        lifeline: a.lifeline,
    })?)
}

pub(crate) async fn run(cmd: DesktopCmd, reg: &Registry) -> anyhow::Result<()> {
    match cmd {
        DesktopCmd::Up(a) => up(a, reg).await,
        DesktopCmd::Down { names, all } => {
            let names = if all { local_names(reg)? } else { names };
            if names.is_empty() {
                println!("no local desktops are up");
            }
            for n in names {
                let stopped = desktop::down(reg, &n).await?;
                println!("desktop '{n}' stopped ({stopped} processes)");
            }
            Ok(())
        }
        DesktopCmd::List => {
            let names = local_names(reg)?;
            if names.is_empty() {
                println!("no local desktops are up (start one with `pincer desktop up`)");
            }
            for n in names {
                match desktop::read_state(&n) {
                    Some(s) => println!(
                        "{n:<12} display {:<6} {}x{}  agent {}  wm {}",
                        s.display,
                        s.size.0,
                        s.size.1,
                        s.agent_addr,
                        s.window_manager.as_deref().unwrap_or("none")
                    ),
                    None => println!(
                        "{n:<12} registered but not running (`pincer desktop down {n}` cleans up)"
                    ),
                }
            }
            Ok(())
        }
        DesktopCmd::Env { name } => {
            let s = desktop::read_state(&name)
                .with_context(|| format!("desktop '{name}' is not running"))?;
            // The shell's own variables that would reach outside the desktop go, so what
            // runs by hand sees what the desktop's processes see.
            for (k, _) in std::env::vars_os() {
                if let Some(k) = k.to_str()
                    && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    && !s.env.contains_key(k)
                    && desktop::leaks_outside(k)
                {
                    println!("unset {k}");
                }
            }
            for (k, v) in &s.env {
                println!("export {k}='{}'", v.replace('\'', "'\\''"));
            }
            Ok(())
        }
        DesktopCmd::Vnc {
            name,
            port,
            view_only,
        } => vnc(&name, port, view_only).await,
        DesktopCmd::Supervise(_) => bail!("internal command"),
    }
}

/// Runs x11vnc on the desktop's display until it exits or Ctrl-C.
async fn vnc(name: &str, port: u16, view_only: bool) -> anyhow::Result<()> {
    let s =
        desktop::read_state(name).with_context(|| format!("desktop '{name}' is not running"))?;
    let dir = desktop::dir_of(name);
    let passwd_file = dir.join("vnc.passwd");
    // VNC passwords are at most 8 characters; a fresh one per session.
    let password = {
        use ring::rand::SecureRandom;
        const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzACDEFGHJKLMNPQRTUVWXY34679";
        let mut raw = [0u8; 8];
        ring::rand::SystemRandom::new()
            .fill(&mut raw)
            .map_err(|_| anyhow::anyhow!("the OS random source failed"))?;
        raw.iter()
            .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
            .collect::<String>()
    };
    let missing = |e: std::io::Error| {
        if e.kind() == std::io::ErrorKind::NotFound {
            anyhow::anyhow!(
                "x11vnc is not installed: `apt-get install x11vnc` (`./run.sh deps` installs it)"
            )
        } else {
            anyhow::anyhow!("cannot run x11vnc: {e}")
        }
    };
    // The password goes through a file only its owner can read, never through argv
    // (which every user on the machine can see).
    {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let _ = std::fs::remove_file(&passwd_file);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&passwd_file)
            .and_then(|mut f| writeln!(f, "{password}"))
            .with_context(|| format!("cannot write {}", passwd_file.display()))?;
    }
    let mut cmd = tokio::process::Command::new("x11vnc");
    cmd.envs(&s.env)
        .args(["-display", &s.display, "-localhost", "-forever", "-shared"])
        .args(["-rfbport", &port.to_string()])
        .arg("-passwdfile")
        .arg(&passwd_file)
        .args(["-quiet", "-nowf", "-noxdamage"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(dir.join("vnc.log"))?)
        .kill_on_drop(true);
    if view_only {
        cmd.arg("-viewonly");
    }
    // Listen for Ctrl-C (and kill, hang-up) before saying we are up, so that an early one
    // stops x11vnc cleanly.
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut child = cmd.spawn().map_err(missing)?;
    println!(
        "desktop '{name}' ({}) on VNC at 127.0.0.1:{port}, password {password}{}",
        s.display,
        if view_only { ", view only" } else { "" }
    );
    println!(
        "  connect: vncviewer 127.0.0.1:{port}   (from another machine: ssh -L {port}:127.0.0.1:{port} THIS-HOST)"
    );
    println!(
        "  Ctrl-C stops it; the log is {}",
        dir.join("vnc.log").display()
    );
    tokio::select! {
        status = child.wait() => {
            let status = status?;
            bail!("x11vnc ended with {status}; see {}", dir.join("vnc.log").display())
        }
        _ = interrupt.recv() => stop_vnc(child, &passwd_file).await,
        _ = terminate.recv() => stop_vnc(child, &passwd_file).await,
        _ = hangup.recv() => stop_vnc(child, &passwd_file).await,
    }
}

/// Stops x11vnc and removes its password.
async fn stop_vnc(
    mut child: tokio::process::Child,
    passwd_file: &std::path::Path,
) -> anyhow::Result<()> {
    let _ = child.kill().await;
    let _ = std::fs::remove_file(passwd_file);
    Ok(())
}

fn local_names(reg: &Registry) -> anyhow::Result<Vec<String>> {
    Ok(reg
        .load()?
        .envs
        .into_iter()
        .filter(|(_, e)| e.desktop.is_some())
        .map(|(n, _)| n)
        .collect())
}

async fn up(a: UpArgs, reg: &Registry) -> anyhow::Result<()> {
    let opts = DesktopOptions {
        name: a.name.clone(),
        size: a.size,
        window_manager: !a.no_wm,
        read_only: a.read_only,
        allow_tools: a.allow_tools,
        port: a.port,
        home: a.home,
        dial: dial(
            a.connect.as_ref(),
            a.host_token_file.as_ref(),
            a.host_fingerprint.as_ref(),
        ),
        // The desktop outlives this command: that is what it is for.
        lifeline: false,
        session: a.session,
    };
    eprintln!(
        "starting desktop '{}' ({}x{})...",
        a.name, a.size.0, a.size.1
    );
    let t = std::time::Instant::now();
    let st = desktop::up(reg, &opts).await?;
    if let Some(d) = &opts.dial {
        println!(
            "desktop '{}' is up in {:.1} s: display {} ({}x{}); its agent dials {} (fingerprint {})",
            st.name,
            t.elapsed().as_secs_f64(),
            st.display,
            st.size.0,
            st.size.1,
            d.host,
            st.fingerprint
        );
        println!("  on the host: pincer run --set desktop={} ...", st.name);
        println!("  stop:        pincer desktop down {}", st.name);
        return Ok(());
    }
    if a.default {
        reg.update(|f| f.default = Some(a.name.clone()))?;
    }
    // Prove the agent answers through the registry before saying it is up.
    let env = reg.connect(Some(&a.name), Deadlines::default()).await?;
    let rtt = env.ping().await?;
    println!(
        "desktop '{}' is up in {:.1} s: display {} ({}x{}), window manager {}, agent at {} (ping {:.2} ms)",
        st.name,
        t.elapsed().as_secs_f64(),
        st.display,
        st.size.0,
        st.size.1,
        st.window_manager.as_deref().unwrap_or("none"),
        st.agent_addr,
        rtt.as_secs_f64() * 1000.0
    );
    println!("  fingerprint {}", st.fingerprint);
    println!("  try:   pincer screenshot --env {} -o shot.png", st.name);
    println!("         pincer tree --env {} --format text", st.name);
    println!(
        "  apps:  pincer launch --env {} -- gtk3-widget-factory",
        st.name
    );
    println!("  shell: eval \"$(pincer desktop env {})\"", st.name);
    println!("  stop:  pincer desktop down {}", st.name);
    Ok(())
}
