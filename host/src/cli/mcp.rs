//! `pincer mcp`: environments and tasks for an MCP client, over stdio.

use pincer::agent::ObservationConfig;
use pincer::env::registry::Registry;
use pincer::mcp::{MAX_IMAGE_SIDE, Server};
use pincer::run::episode::{Session, SessionConfig};
use std::path::PathBuf;

/// `pincer mcp ...`.
#[derive(Debug, clap::Args)]
pub(crate) struct McpArgs {
    /// Task file, directory or bundled suite whose tasks clients can start.
    #[arg(long, default_value = "demo")]
    tasks: String,
    /// Only these task ids (repeatable).
    #[arg(long = "task")]
    only: Vec<String>,
    /// Registered environments as ROLE=ENV,... (without it, a local desktop is started for
    /// the session and stopped when the client goes).
    #[arg(long = "set", value_name = "ROLE=ENV,...", conflicts_with = "vm")]
    set: Option<String>,
    /// Serve VMs of this image (`pincer image list`) instead, each reset to the image's
    /// golden state before every task.
    #[arg(long, value_name = "IMAGE")]
    vm: Option<String>,
    /// List and carry out the agent actions (click, type, ...); without it the server only
    /// observes.
    #[arg(long)]
    allow_actions: bool,
    /// Offer the API tools tasks declare, through the `api` tool (local desktops then serve
    /// them, as with `pincer run --tools`); without it they are refused.
    #[arg(long)]
    tools: bool,
    /// What the tools show: `screenshot`, `marks` and `tree` (each off makes its tool
    /// answer that it is off), and `video=2s@5fps` for the screen's last moments with a
    /// running task's `screenshot` and `observe`.
    #[arg(long, default_value = "screenshot,marks,tree")]
    observe: String,
    /// Run directory for results, trajectories, the call log and the report (default
    /// runs/mcp-TIMESTAMP).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Screen size of the local desktop.
    #[arg(long, default_value = "1920x1080", value_parser = super::desktop::parse_size)]
    size: (u32, u32),
    /// The local desktop's graphical session: x11 (Xvfb) or wayland (headless GNOME Shell).
    #[arg(long, default_value = "x11", value_parser = super::desktop::parse_session)]
    session: pincer::run::launch::DesktopSession,
}

pub(crate) async fn run(a: McpArgs, reg: &Registry) -> anyhow::Result<()> {
    let tasks = pincer::task::select(&a.tasks, &a.only, &[])?;
    let observation = ObservationConfig {
        tools: a.tools,
        ..ObservationConfig::parse(&a.observe, Some((MAX_IMAGE_SIDE, MAX_IMAGE_SIDE)))
            .map_err(|e| anyhow::anyhow!("--observe: {e}"))?
    };
    let out = a
        .out
        .unwrap_or_else(|| PathBuf::from("runs").join(format!("mcp-{}", pincer::clock::unix_ms())));
    // Stdout carries the protocol alone: everything else goes to stderr.
    eprintln!(
        "pincer mcp: {} tasks, actions {}, API tools {}, run directory {}",
        tasks.len(),
        if a.allow_actions {
            "allowed"
        } else {
            "off (observe only)"
        },
        if a.tools { "offered" } else { "off" },
        out.display()
    );
    let log = Server::open_log(&out)?;
    let session = Session::open(
        reg.clone(),
        SessionConfig {
            tasks,
            envs: super::run::source(
                a.set.into_iter().collect(),
                a.vm,
                (None, 2),
                1,
                (a.size, a.session),
            )?,
            observation,
            out,
            agent: "mcp".into(),
            assets: pincer::peers::osworld::cache::default_dir(),
            allow_network: false,
        },
    )
    .await?;
    Server::new(session, log, a.allow_actions)
        .serve_stdio()
        .await?;
    Ok(())
}
