//! `pincer-agent`: the guest agent that runs inside a Linux desktop. It listens for a host
//! (or dials one), authenticates it, and serves input, screenshots, accessibility trees,
//! probes and (unless `--read-only`) setup over QUIC. The platform-independent part (accept
//! loop, authentication, dispatch, files, exec) is `pincer_guest_core`; this crate is the
//! Linux platform under it ([`linux::Linux`]) and the command line.

mod a11y;
mod clipboard;
mod damage;
mod fault;
mod input;
mod install;
mod keysym;
mod linux;
mod memory;
mod screen;
mod session;
mod settings;
#[cfg(test)]
mod testutil;
mod wayland;
mod window;
mod x11;
mod xinput;

use clap::Parser;
use linux::Linux;
use pincer_guest_core::processes;
use pincer_guest_core::startup::{self, GuestArgs, Program};

/// The pincer guest agent.
#[derive(Debug, Parser)]
#[command(name = "pincer-agent", version, about, long_about = None, args_conflicts_with_subcommands = true)]
struct Args {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    guest: GuestArgs,
    /// X display to use (default: $DISPLAY).
    #[arg(long)]
    display: Option<String>,
    /// List only the processes of the agent's own session in process probes (local
    /// desktops share one machine; `pincer desktop up` sets this).
    #[arg(long)]
    own_session_processes: bool,
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
        confine: startup::ReadOnly,
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
            startup::resolve(&listen)?;
            let opts = install::Install {
                listen,
                name,
                read_only: confine.read_only,
                read_roots: confine.read_root,
                read_envs: confine.read_env,
                start: !no_start,
            };
            install::install(
                &opts,
                &places,
                &startup::default_state_dir("pincer-agent"),
                &startup::hostname(),
            )?
        }
        Cmd::Uninstall => install::uninstall(&places)?,
    };
    println!("{said}");
    Ok(())
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
    let display = args
        .display
        .clone()
        .or_else(|| std::env::var("DISPLAY").ok());
    if display.is_none() && !args.guest.print_fingerprint {
        let why = if session::wayland_session() {
            "this is a Wayland session without an X display: screenshots, input and video \
             go through GNOME's remote-desktop API or wlroots' protocols where the session \
             has them (and are refused where it has neither); windows through sway's IPC on \
             sway (refused elsewhere); input recording is refused"
        } else {
            "input, screenshot, window and clipboard requests will fail until one is given"
        };
        eprintln!(
            "pincer-agent: warning: no DISPLAY and no --display: {why}; UI trees need only the \
             D-Bus session"
        );
    }
    let program = Program {
        name: "pincer-agent",
        state_dir_name: "pincer-agent",
        process_session: args
            .own_session_processes
            .then(|| processes::session_of(std::process::id()))
            .flatten(),
    };
    startup::serve(&program, &args.guest, Linux::new(display)).await?;
    Ok(())
}
