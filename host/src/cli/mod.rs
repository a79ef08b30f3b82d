//! Command-line parsing and dispatch. Each command group lives in its own module; this one
//! holds the global options and the shared helpers (connecting to `--env`, printing errors).

mod android;
mod dataset;
mod demo;
mod desktop;
mod envs;
mod image;
mod mcp;
mod observe;
mod ops;
mod osworld;
mod record;
mod replay;
mod run;
mod scale;
mod task;
mod vm;

use clap::{Parser, Subcommand};
use pincer::env::registry::Registry;
use pincer::env::{Deadlines, Environment};
use std::path::PathBuf;
use std::process::ExitCode;

/// pincer: a fast, cross-environment benchmark system for GUI agents.
#[derive(Debug, Parser)]
#[command(name = "pincer", version, about, long_about = None)]
struct Cli {
    /// Envs file (default: $PINCER_ENVS or ~/.config/pincer/envs.toml).
    #[arg(long, global = true, value_name = "FILE")]
    envs: Option<PathBuf>,
    /// More logging (repeat for more).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Local X11 desktops (Xvfb + D-Bus + AT-SPI + window manager + agent).
    #[command(subcommand)]
    Desktop(desktop::DesktopCmd),
    /// Registered environments.
    #[command(subcommand)]
    Env(envs::EnvCmd),
    /// VM images: build them from recipes (images/*.toml), list and remove them.
    #[command(subcommand)]
    Image(image::ImageCmd),
    /// QEMU VMs from images, reset from a snapshot.
    #[command(subcommand)]
    Vm(vm::VmCmd),
    /// Android devices through adb: list, connect (push and start the shim), doctor.
    #[command(subcommand)]
    Android(android::AndroidCmd),
    /// OSWorld's scoring code: set up its environment, check what it can run.
    #[command(subcommand)]
    Osworld(osworld::OsworldCmd),
    /// Save a screenshot.
    Screenshot(observe::ScreenshotArgs),
    /// Record the screen into an MP4 file: frames only when it changes, on the guest's clock.
    Video(observe::VideoArgs),
    /// Print the accessibility tree.
    Tree(observe::TreeArgs),
    /// Send one input action.
    Act(ops::ActArgs),
    /// Read state through a probe.
    Probe(ops::ProbeArgs),
    /// Run a program on the guest and print its output.
    Exec(ops::ExecArgs),
    /// Start a program on the guest and return at once.
    Launch(ops::LaunchArgs),
    /// Copy files to and from the guest.
    #[command(subcommand)]
    File(ops::FileCmd),
    /// Tasks, checkpoint functions, templates, composition and the CRAB importer.
    #[command(subcommand)]
    Task(task::TaskCmd),
    /// Run a benchmark: tasks x agent over environment sets.
    Run(Box<run::RunCmd>),
    /// Serve environments and tasks to an MCP client over stdio: screenshots, marks, the
    /// UI tree, tasks that are scored, and (with --allow-actions) the agent actions.
    Mcp(mcp::McpArgs),
    /// Replay a recorded task run (a trajectory) after the task's setup and report where
    /// the checkpoints or the screen diverge from the recording.
    Replay(replay::ReplayArgs),
    /// Record a person's demonstration on a desktop (input and video) as a task run whose
    /// steps are the actions agents take, each labelled with the UI node under the pointer.
    Record(record::RecordArgs),
    /// Datasets from real runs: grounding items from live UI trees, inverse-dynamics and
    /// success-detection items from run directories (AgentStudio's formats).
    #[command(subcommand)]
    Dataset(dataset::DatasetCmd),
    /// Score a model's answers on a dataset: grounding accuracy, inverse-dynamics accuracy,
    /// success-detection precision, recall, F1 and accuracy.
    Eval(dataset::EvalArgs),
    /// Write the Markdown and HTML report of a run directory.
    Report {
        /// The run directory.
        dir: PathBuf,
    },
    /// Latency of every kind of call (min, p50, p95, p99, max).
    Bench(observe::BenchArgs),
    /// Make a new random token file.
    Token(envs::TokenArgs),
    /// The main job: a local desktop, a real app, what pincer sees, and the bench table.
    Demo(demo::DemoArgs),
}

/// `--env NAME`, shared by commands that talk to one environment.
#[derive(Debug, clap::Args)]
struct EnvArg {
    /// Environment name from the envs file (default: the only one, or `default`).
    #[arg(long, short = 'e', value_name = "NAME")]
    env: Option<String>,
}

impl EnvArg {
    async fn connect(&self, reg: &Registry) -> anyhow::Result<Environment> {
        Ok(reg
            .connect(self.env.as_deref(), Deadlines::default())
            .await?)
    }
}

/// Whether a closed pipe may end this command quietly, as `head` expects of Unix tools
/// (`pincer probe processes | head`), instead of a panic in `println!`: commands that print
/// and end. Every other command keeps SIGPIPE ignored: a run, a server or a supervisor that
/// writes to a scorer worker that has died, or to a socket its peer reset, gets an error it
/// handles, where SIGPIPE would end it in the middle of a campaign without a word.
fn quiet_on_closed_pipe(command: &Command) -> bool {
    matches!(
        command,
        Command::Tree(_)
            | Command::Probe(_)
            | Command::Exec(_)
            | Command::Env(_)
            | Command::Task(
                task::TaskCmd::List(_)
                    | task::TaskCmd::Show { .. }
                    | task::TaskCmd::Validate { .. }
                    | task::TaskCmd::Graph { .. }
                    | task::TaskCmd::Schema
                    | task::TaskCmd::Functions { .. }
                    | task::TaskCmd::Templates { .. }
            )
    )
}

pub(crate) fn main() -> ExitCode {
    let cli = Cli::parse();
    if quiet_on_closed_pipe(&cli.command) {
        // SAFETY: setting a signal disposition before any thread is started.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let filter = match cli.verbose {
        0 => "warn",
        1 => "info,quinn=warn",
        _ => "debug,quinn=info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PINCER_LOG")
                .unwrap_or_else(|_| filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let reg = Registry::locate(cli.envs.as_deref());
    // The supervisor is a plain process (no async runtime): it only forks and waits.
    if let Command::Desktop(desktop::DesktopCmd::Supervise(args)) = &cli.command {
        return report(desktop::supervise(args));
    }
    let rt = match runtime_for(&cli.command).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return report(Err(e.into())),
    };
    let result = rt.block_on(async {
        let result = run(cli.command, reg).await;
        // Guests learn at once that this host is gone: those it dialled free its place, and
        // those that dialled in dial the next command's host without waiting for a
        // keep-alive.
        pincer::env::finish_closing().await;
        pincer::env::listener::finish_closing().await;
        result
    });
    // Everything is done; a blocking read that never ends (`pincer mcp`'s stdin, still open
    // when a client stops the server with a signal) must not keep the process alive.
    rt.shutdown_timeout(std::time::Duration::from_millis(250));
    report(result)
}

/// The async runtime a command runs on. Commands that do one thing with a guest or two run
/// on this thread alone: a transfer would otherwise pay for hand-offs between the
/// transport's threads and the command's on every chunk (about a quarter of a one-shot
/// 10 MiB read's CPU time). Runs, benchmarks and demos, which do many things at once, get a
/// thread per core.
fn runtime_for(command: &Command) -> tokio::runtime::Builder {
    match command {
        Command::Run(_)
        | Command::Bench(_)
        | Command::Demo(_)
        | Command::Task(_)
        | Command::Mcp(_)
        | Command::Replay(_)
        | Command::Record(_) => tokio::runtime::Builder::new_multi_thread(),
        Command::Desktop(_)
        | Command::Env(_)
        | Command::Image(_)
        | Command::Vm(_)
        | Command::Android(_)
        | Command::Osworld(_)
        | Command::Screenshot(_)
        | Command::Video(_)
        | Command::Tree(_)
        | Command::Act(_)
        | Command::Probe(_)
        | Command::Exec(_)
        | Command::Launch(_)
        | Command::File(_)
        | Command::Report { .. }
        | Command::Dataset(_)
        | Command::Eval(_)
        | Command::Token(_) => tokio::runtime::Builder::new_current_thread(),
    }
}

async fn run(command: Command, reg: Registry) -> anyhow::Result<()> {
    match command {
        Command::Desktop(c) => desktop::run(c, &reg).await,
        Command::Env(c) => envs::run(c, &reg).await,
        Command::Image(c) => image::run(c).await,
        Command::Vm(c) => vm::run(c, &reg).await,
        Command::Android(c) => android::run(c, &reg).await,
        Command::Osworld(c) => osworld::run(c).await,
        Command::Screenshot(a) => observe::screenshot(a, &reg).await,
        Command::Video(a) => observe::video(a, &reg).await,
        Command::Tree(a) => observe::tree(a, &reg).await,
        Command::Act(a) => ops::act(a, &reg).await,
        Command::Probe(a) => ops::probe(a, &reg).await,
        Command::Exec(a) => ops::exec(a, &reg).await,
        Command::Launch(a) => ops::launch(a, &reg).await,
        Command::File(c) => ops::file(c, &reg).await,
        Command::Bench(a) => observe::bench(a, &reg).await,
        Command::Task(c) => task::run(c, &reg).await,
        Command::Run(a) => run::run(*a, &reg).await,
        Command::Mcp(a) => mcp::run(a, &reg).await,
        Command::Replay(a) => replay::run(a, &reg).await,
        Command::Record(a) => record::run(a, &reg).await,
        Command::Report { dir } => {
            let p = pincer::report::write(&dir)?;
            println!("{}\n{}", p.html.display(), p.markdown.display());
            Ok(())
        }
        Command::Dataset(c) => dataset::run(c, &reg).await,
        Command::Eval(a) => dataset::eval(a),
        Command::Token(a) => envs::token(a),
        Command::Demo(a) => demo::run(a, &reg).await,
    }
}

fn report(r: anyhow::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", describe(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, each message once: errors that name their cause in
/// their own message would otherwise print it twice ("x: denied: denied").
pub(crate) fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = String::new();
    let mut cause = Some(e);
    while let Some(c) = cause {
        let msg = c.to_string();
        if !out.contains(&msg) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&msg);
        }
        cause = c.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::describe;

    #[test]
    fn a_cause_already_named_is_not_repeated() {
        let io = std::io::Error::other("point (99999, 5) is outside the 1920x1080 screen");
        let wrapped = anyhow::Error::new(io).context(
            "env 'desk': invalid argument: point (99999, 5) is outside the 1920x1080 screen",
        );
        assert_eq!(
            describe(wrapped.as_ref()),
            "env 'desk': invalid argument: point (99999, 5) is outside the 1920x1080 screen"
        );
        let io = std::io::Error::other("permission denied");
        let wrapped = anyhow::Error::new(io).context("reading ~/a.txt");
        assert_eq!(
            describe(wrapped.as_ref()),
            "reading ~/a.txt: permission denied"
        );
    }
}
