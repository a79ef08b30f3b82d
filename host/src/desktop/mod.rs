//! Local desktops: `pincer desktop up` starts a supervisor process that owns an Xvfb
//! screen, a private D-Bus session with the AT-SPI bus, a window manager (if one is
//! installed) and `pincer-agent`, all in one session; `pincer desktop down` stops every
//! process of that session, including the helpers D-Bus activated on its own. A Wayland
//! desktop (`--session wayland`, [`gnome`]) has a headless mutter with its Xwayland and
//! PipeWire in place of Xvfb and the window manager.
//!
//! A desktop a program starts for its own use (`pincer run`, `pincer mcp`, the Python
//! package) hangs on the program's [`lifeline`]: when the program is gone, however it ended,
//! the supervisor stops the desktop and unregisters it. `pincer desktop up`'s desktops have
//! none and outlive the command.
//!
//! Each desktop gets its own home directory, so two local desktops behave like two machines
//! (files, app settings, gsettings) and a task's reset cannot leak into another desktop.

mod gnome;
pub(crate) mod lifeline;

pub use gnome::xwayland_of;

use crate::env::registry::{DesktopEntry, EnvEntry, Registry, RegistryError};
use crate::process::{self, Process};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Options of `pincer desktop up`.
#[derive(Debug, Clone)]
pub struct DesktopOptions {
    /// Environment name.
    pub name: String,
    /// Screen width and height.
    pub size: (u32, u32),
    /// Start a window manager if one is installed.
    pub window_manager: bool,
    /// Start the agent with `--read-only`.
    pub read_only: bool,
    /// Start the agent with `--allow-tools` (it serves a task's API tools, sandboxed).
    pub allow_tools: bool,
    /// UDP port of the agent (0: pick a free one).
    pub port: u16,
    /// Use this home directory instead of a private one.
    pub home: Option<PathBuf>,
    /// Make the agent dial a host instead of listening (a cluster node's desktop serving
    /// one central runner).
    pub dial: Option<Dial>,
    /// Tie the desktop to this process ([`lifeline`]): when the process is gone, however it
    /// ended, the desktop stops and leaves the envs file, as `down` would. Off for desktops
    /// meant to outlive their command (`pincer desktop up`).
    pub lifeline: bool,
    /// The graphical session: X11 (Xvfb) or Wayland (a headless GNOME compositor).
    pub session: Session,
}

/// The graphical session of a local desktop.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Session {
    /// Xvfb and a window manager.
    #[default]
    X11,
    /// A headless GNOME Shell (or mutter alone) with Xwayland, PipeWire and WirePlumber.
    Wayland,
}

impl Session {
    /// The name `--session` takes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::X11 => "x11",
            Self::Wayland => "wayland",
        }
    }
}

impl std::str::FromStr for Session {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "x11" => Ok(Self::X11),
            "wayland" => Ok(Self::Wayland),
            other => Err(format!(
                "'{other}' is not a session: use x11 (Xvfb) or wayland (a headless GNOME)"
            )),
        }
    }
}

/// Where a dialling desktop's agent reaches its host (`pincer env listen` there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dial {
    /// The host's HOST:PORT.
    pub host: String,
    /// The host's certificate fingerprint, if pinned.
    pub host_fingerprint: Option<String>,
    /// The host's token file (a copy of it).
    pub token_file: PathBuf,
}

/// What a running desktop's supervisor writes once everything is up.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DesktopState {
    /// Environment name.
    pub name: String,
    /// X display.
    pub display: String,
    /// Screen size.
    pub size: (u32, u32),
    /// Supervisor pid (also the session id of every process of the desktop).
    pub supervisor_pid: u32,
    /// Agent address.
    pub agent_addr: String,
    /// Agent certificate fingerprint.
    pub fingerprint: String,
    /// Token file the agent uses.
    pub token_file: PathBuf,
    /// Window manager started, if any.
    pub window_manager: Option<String>,
    /// Environment variables of the session (DISPLAY, DBUS_SESSION_BUS_ADDRESS, ...).
    pub env: BTreeMap<String, String>,
}

/// Why a local desktop could not be started, stopped or kept running.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DesktopError {
    /// The name cannot name a desktop.
    #[error("desktop name '{0}' is not valid: use 1-64 letters, digits, '-' or '_'")]
    InvalidName(String),
    /// A desktop of that name is running.
    #[error(
        "desktop '{name}' is already up (display {display}, agent at {addr}); stop it first with `pincer desktop down {name}`"
    )]
    AlreadyUp {
        /// The desktop.
        name: String,
        /// Its X display.
        display: String,
        /// Its agent's address.
        addr: String,
    },
    /// A program every desktop needs is not installed.
    #[error("{program} is not installed: apt-get install {packages} (see the README)")]
    Missing {
        /// The program.
        program: &'static str,
        /// The Debian packages that bring it.
        packages: &'static str,
    },
    /// No `pincer-agent` binary to start inside the desktop.
    #[error(
        "pincer-agent not found next to pincer or on PATH: build it with `cargo build --release -p pincer-agent`"
    )]
    NoAgent,
    /// No desktop of that name was ever started here.
    #[error("no desktop named '{name}' (nothing in {})", dir.display())]
    NotFound {
        /// The name asked for.
        name: String,
        /// Where its state would be.
        dir: PathBuf,
    },
    /// The supervisor exited before the desktop came up.
    #[error("desktop '{name}' failed to start ({status}); supervisor log:\n{log}")]
    Failed {
        /// The desktop.
        name: String,
        /// How the supervisor exited.
        status: std::process::ExitStatus,
        /// The end of its log.
        log: String,
    },
    /// A part of the desktop did not come up in time.
    #[error("{what} within {} s; see {}", within.as_secs(), logs.display())]
    TimedOut {
        /// What did not happen ("desktop 'd' did not come up").
        what: String,
        /// How long it was given.
        within: Duration,
        /// The log to read.
        logs: PathBuf,
    },
    /// The supervisor was stopped (a signal, or its owner gone) while the desktop was
    /// starting.
    #[error("stopped while the desktop was starting")]
    Halted,
    /// A process of the desktop exited (or gave no sign of life) when it should run.
    #[error("{what}; see {}", log.display())]
    Process {
        /// What happened ("Xvfb exited (signal 9)").
        what: String,
        /// Its log.
        log: PathBuf,
    },
    /// The X server could not be used.
    #[error("X server {display}: {message}")]
    X11 {
        /// The display.
        display: String,
        /// What failed.
        message: String,
    },
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done ("starting Xvfb").
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The envs file could not be updated.
    #[error(transparent)]
    Registry(#[from] RegistryError),
}

/// Maps an OS error to [`DesktopError::Io`] saying what was being done.
fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DesktopError {
    let what = what.into();
    move |source| DesktopError::Io { what, source }
}

/// Directory of a named desktop.
pub fn dir_of(name: &str) -> PathBuf {
    crate::paths::state_dir().join("desktops").join(name)
}

/// The private runtime directory (`XDG_RUNTIME_DIR`) of the desktop in `dir`: a short one
/// ([`crate::paths::socket_dir`]), for its sockets.
fn runtime_dir(dir: &Path) -> PathBuf {
    crate::paths::socket_dir(&dir.join("runtime"))
}

fn state_file(dir: &Path) -> PathBuf {
    dir.join("desktop.json")
}

/// Reads a desktop's state file, if it is running.
pub fn read_state(name: &str) -> Option<DesktopState> {
    let text = std::fs::read_to_string(state_file(&dir_of(name))).ok()?;
    let st: DesktopState = serde_json::from_str(&text).ok()?;
    supervisor(name, st.supervisor_pid).is_some().then_some(st)
}

/// The supervisor of desktop `name` if it is process `pid`: a recorded pid may have been
/// given to another process since, so it is taken only if its command line says it
/// supervises that desktop (`desktop supervise --name NAME`).
fn supervisor(name: &str, pid: u32) -> Option<Process> {
    Process::of(pid, &["supervise", "--name", name])
}

fn valid_name(name: &str) -> Result<(), DesktopError> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(DesktopError::InvalidName(name.to_owned()));
    }
    Ok(())
}

/// The `pincer` program that supervises desktops: `$PINCER_EXE` when set (the Python
/// package sets it to the binary it carries, since its process is Python), else this one.
pub fn pincer_exe() -> std::io::Result<PathBuf> {
    match std::env::var_os("PINCER_EXE") {
        Some(p) if !p.is_empty() => Ok(PathBuf::from(p)),
        _ => std::env::current_exe(),
    }
}

/// The agent binary: next to the `pincer` program, else on PATH.
pub fn agent_binary() -> Result<PathBuf, DesktopError> {
    if let Ok(exe) = pincer_exe()
        && let Some(dir) = exe.parent()
    {
        let sibling = dir.join("pincer-agent");
        if sibling.is_file() {
            return Ok(sibling);
        }
    }
    which("pincer-agent").ok_or(DesktopError::NoAgent)
}

/// A program on `PATH`, if it is there.
pub(crate) fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file())
}

/// How long a desktop may take to come up.
const UP_WITHIN: Duration = Duration::from_secs(60);

/// Starts a desktop and registers it; returns its state once the agent answers.
pub async fn up(reg: &Registry, opts: &DesktopOptions) -> Result<DesktopState, DesktopError> {
    valid_name(&opts.name)?;
    if let Some(st) = read_state(&opts.name) {
        return Err(DesktopError::AlreadyUp {
            name: opts.name.clone(),
            display: st.display,
            addr: st.agent_addr,
        });
    }
    if opts.session == Session::Wayland {
        gnome::check_installed()?;
    }
    for program in ["Xvfb", "dbus-daemon"] {
        if which(program).is_none() {
            return Err(DesktopError::Missing {
                program,
                packages: "xvfb dbus at-spi2-core",
            });
        }
    }
    let agent = agent_binary()?;
    let dir = dir_of(&opts.name);
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(io(format!("creating {}", logs.display())))?;
    let _ = std::fs::remove_file(state_file(&dir));
    let log_path = logs.join("supervisor.log");
    let log =
        std::fs::File::create(&log_path).map_err(io(format!("creating {}", log_path.display())))?;
    let log2 = log.try_clone().map_err(io("duplicating a file handle"))?;
    let exe = pincer_exe().map_err(io("locating the pincer binary"))?;
    let mut cmd = Command::new(exe);
    // The supervisor tells the agent which envs file's tokens to keep to itself.
    cmd.env("PINCER_ENVS", reg.path());
    cmd.args(["desktop", "supervise", "--name", &opts.name])
        .arg("--size")
        .arg(format!("{}x{}", opts.size.0, opts.size.1))
        .arg("--port")
        .arg(opts.port.to_string())
        .arg("--agent")
        .arg(&agent)
        .arg("--session")
        .arg(opts.session.as_str())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2);
    if !opts.window_manager {
        cmd.arg("--no-wm");
    }
    if opts.read_only {
        cmd.arg("--read-only");
    }
    if opts.allow_tools {
        cmd.arg("--allow-tools");
    }
    if let Some(h) = &opts.home {
        cmd.arg("--home").arg(h);
    }
    let lifeline_fd = opts
        .lifeline
        .then(lifeline::read_end)
        .transpose()
        .map_err(io("making the desktop's lifeline"))?;
    if let Some(fd) = lifeline_fd {
        cmd.arg("--lifeline").arg(fd.to_string());
    }
    if let Some(d) = &opts.dial {
        cmd.arg("--connect").arg(&d.host);
        cmd.arg("--host-token-file").arg(&d.token_file);
        if let Some(fp) = &d.host_fingerprint {
            cmd.arg("--host-fingerprint").arg(fp);
        }
    }
    // SAFETY: setsid and fcntl are async-signal-safe. The supervisor leads a new session
    // that every process of the desktop inherits, which is how `down` finds them all; it
    // alone of this process's children keeps the lifeline's read end.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(fd) = lifeline_fd {
                lifeline::inherit(fd)?;
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(io("starting the desktop supervisor"))?;
    let started = Instant::now();
    // A desktop that does not come up leaves nothing behind: its whole session goes.
    let abandon = |pid: u32| {
        kill_all(
            &desktop_processes(pid, &session_marker(&opts.name, pid)),
            libc::SIGKILL,
        );
    };
    let state = loop {
        if let Ok(text) = std::fs::read_to_string(state_file(&dir))
            && let Ok(st) = serde_json::from_str::<DesktopState>(&text)
        {
            break st;
        }
        if let Ok(Some(status)) = child.try_wait() {
            abandon(child.id());
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(DesktopError::Failed {
                name: opts.name.clone(),
                status,
                log: tail(&log, 20),
            });
        }
        if started.elapsed() > UP_WITHIN {
            abandon(child.id());
            let _ = child.kill();
            let _ = child.wait();
            return Err(DesktopError::TimedOut {
                what: format!("desktop '{}' did not come up", opts.name),
                within: UP_WITHIN,
                logs,
            });
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    // The supervisor outlives us; reap it from a thread if it exits while we still run.
    std::thread::spawn(move || {
        let _ = child.wait();
    });
    // A dialling desktop is its host's environment, reached through the host's listener;
    // here there is nothing to register.
    if opts.dial.is_some() {
        return Ok(state);
    }
    reg.update(|f| {
        f.envs.insert(
            opts.name.clone(),
            EnvEntry {
                addr: Some(state.agent_addr.clone()),
                listen: None,
                transport: None,
                fingerprint: Some(state.fingerprint.clone()),
                token_file: state.token_file.clone(),
                platform: pincer_shared::Platform::Linux,
                desktop: Some(DesktopEntry {
                    display: state.display.clone(),
                    state_dir: dir.clone(),
                    supervisor_pid: state.supervisor_pid,
                }),
                vm: None,
            },
        );
    })?;
    if opts.session == Session::Wayland {
        warm_up(reg, &opts.name).await;
    }
    Ok(state)
}

/// Has the agent of Wayland desktop `name` make its remote-desktop session now: a host's
/// handshake waits only a moment for the screen, and a first session under load took
/// longer, so the first `env info` said `0x0`. A failure here is the next request's to
/// report.
async fn warm_up(reg: &Registry, name: &str) {
    let screen = match reg
        .connect(Some(name), crate::env::Deadlines::default())
        .await
    {
        Ok(env) => env.screen_info().await.map(drop).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(why) = screen {
        tracing::warn!(%why, desktop = name, "the Wayland desktop's screen is not served yet");
    }
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Stops a desktop and every process it started; returns how many processes were stopped.
pub async fn down(reg: &Registry, name: &str) -> Result<usize, DesktopError> {
    valid_name(name)?;
    let dir = dir_of(name);
    let recorded: Option<DesktopState> = std::fs::read_to_string(state_file(&dir))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    let entry_pid = reg
        .load()?
        .envs
        .get(name)
        .and_then(|e| e.desktop.as_ref())
        .map(|d| d.supervisor_pid);
    let Some(pid) = recorded.as_ref().map(|s| s.supervisor_pid).or(entry_pid) else {
        return Err(DesktopError::NotFound {
            name: name.to_owned(),
            dir,
        });
    };
    let marker = session_marker(name, pid);
    let before = desktop_processes(pid, &marker).len();
    if let Some(sup) = supervisor(name, pid) {
        sup.signal(libc::SIGTERM);
        sup.exited_within(Duration::from_secs(10)).await;
    }
    // Whatever is left (the supervisor was killed hard, or a helper ignored SIGTERM).
    kill_all(&desktop_processes(pid, &marker), libc::SIGKILL);
    let _ = std::fs::remove_file(state_file(&dir));
    reg.update(|f| {
        f.envs.remove(name);
        if f.default.as_deref() == Some(name) {
            f.default = None;
        }
    })?;
    Ok(before)
}

/// The value of `PINCER_DESKTOP_ID` in every process of a desktop.
fn session_marker(name: &str, supervisor: u32) -> String {
    format!("{name}-{supervisor}")
}

/// Live processes of a desktop: in the supervisor's session, or carrying its marker in
/// their environment (a helper that made its own session). Zombies are dead already and
/// left to whoever reaps them.
pub fn desktop_processes(supervisor: u32, marker: &str) -> Vec<u32> {
    let me = std::process::id();
    let needle = format!("PINCER_DESKTOP_ID={marker}");
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| pid != me && !process::is_zombie(pid))
        .filter(|&pid| {
            // The session's id is the supervisor's pid, which the kernel gives no other
            // process while the session has members, so this finds the desktop's own.
            let in_session = process::stat_fields(pid)
                .and_then(|f| f.get(3).and_then(|s| s.parse::<u32>().ok()))
                == Some(supervisor);
            in_session
                || std::fs::read(format!("/proc/{pid}/environ"))
                    .map(|env| env.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()))
                    .unwrap_or(false)
        })
        .collect()
}

fn kill_all(pids: &[u32], signal: i32) {
    for &pid in pids {
        // SAFETY: plain syscall.
        unsafe {
            libc::kill(pid as i32, signal);
        }
    }
}

// ---------------------------------------------------------------------------------------
// The supervisor (`pincer desktop supervise`, started by `up`; not for people to run).

/// Options of the supervisor process.
#[derive(Debug, Clone)]
pub struct SuperviseOptions {
    /// Desktop options.
    pub desktop: DesktopOptions,
    /// The agent binary.
    pub agent: PathBuf,
    /// The fd of the owner's lifeline, inherited from `up` (`--lifeline FD`): the desktop
    /// stops when it reports the owner gone.
    pub lifeline: Option<std::os::fd::RawFd>,
}

static STOP: AtomicBool = AtomicBool::new(false);

/// Set by the thread that waits on the owner's lifeline when it reports the owner gone.
static OWNER_GONE: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Why the supervisor must stop now, if it must: its owner is gone, or it was asked to.
fn halted() -> Option<Ended> {
    if OWNER_GONE.load(Ordering::SeqCst) {
        Some(Ended::OwnerGone)
    } else if STOP.load(Ordering::SeqCst) {
        Some(Ended::Asked)
    } else {
        None
    }
}

/// [`DesktopError::Halted`] once the supervisor must stop: the start's phases and waits
/// look at it, so that an owner who dies while its desktop starts takes the desktop down
/// at once, not after the start.
fn go_on() -> Result<(), DesktopError> {
    match halted() {
        Some(_) => Err(DesktopError::Halted),
        None => Ok(()),
    }
}

/// Why a supervisor stops a desktop that came up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// SIGTERM, SIGINT or SIGHUP: `down`, or a person.
    Asked,
    /// The process that started the desktop for its own use is gone ([`lifeline`]).
    OwnerGone,
}

/// Runs the supervisor until SIGTERM/SIGINT, until the X server dies or until the owner's
/// lifeline (if any) reports it gone, then stops every process of the session.
pub fn supervise(opts: &SuperviseOptions) -> Result<(), DesktopError> {
    // Taken before any child starts, so that none inherits it.
    let owner = match opts.lifeline {
        // SAFETY: `up` handed this fd to us alone (`--lifeline`).
        Some(fd) => Some(
            unsafe { lifeline::Owner::adopt(fd) }
                .map_err(io(format!("taking the lifeline (fd {fd})")))?,
        ),
        None => None,
    };
    // SAFETY: installing an async-signal-safe handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGHUP, on_signal as *const () as libc::sighandler_t);
    }
    // The lifeline is watched from its own thread, from the start on: a start can take
    // seconds (GNOME Shell, an agent that is slow to get ready).
    if let Some(owner) = owner {
        std::thread::spawn(move || {
            while !owner.gone_within(Duration::from_secs(3600)) {}
            OWNER_GONE.store(true, Ordering::SeqCst);
        });
    }
    let result = match run_session(opts) {
        Err(DesktopError::Halted) => Ok(halted().unwrap_or(Ended::Asked)),
        r => r,
    };
    match &result {
        Err(e) => eprintln!("supervisor: {e}"),
        Ok(Ended::OwnerGone) => eprintln!(
            "supervisor: the process that started desktop '{}' is gone; stopping it",
            opts.desktop.name
        ),
        Ok(Ended::Asked) => {}
    }
    let me = std::process::id();
    let marker = session_marker(&opts.desktop.name, me);
    let procs = desktop_processes(me, &marker);
    kill_all(&procs, libc::SIGTERM);
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until && !desktop_processes(me, &marker).is_empty() {
        reap();
        std::thread::sleep(Duration::from_millis(20));
    }
    kill_all(&desktop_processes(me, &marker), libc::SIGKILL);
    reap();
    let dir = dir_of(&opts.desktop.name);
    let _ = std::fs::remove_file(state_file(&dir));
    let _ = std::fs::remove_dir_all(runtime_dir(&dir));
    eprintln!("supervisor: stopped {} processes", procs.len());
    // No one is left to run `down`: its last part, the envs file, falls to us.
    if let Ok(Ended::OwnerGone) = result {
        unregister(&opts.desktop.name, me)?;
    }
    result.map(|_| ())
}

/// Removes the desktop `name` of `supervisor` from the envs file, and from being the
/// default; an entry of another desktop of that name (started since) stays.
fn unregister(name: &str, supervisor: u32) -> Result<(), DesktopError> {
    Registry::locate(None).update(|f| {
        let ours = f
            .envs
            .get(name)
            .and_then(|e| e.desktop.as_ref())
            .is_some_and(|d| d.supervisor_pid == supervisor);
        if ours {
            f.envs.remove(name);
            if f.default.as_deref() == Some(name) {
                f.default = None;
            }
        }
    })?;
    Ok(())
}

fn reap() {
    // SAFETY: non-blocking wait on any child.
    unsafe { while libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) > 0 {} }
}

/// A random hex string from the OS.
fn random_hex(bytes: usize) -> Result<String, DesktopError> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut buf))
        .map_err(io("reading /dev/urandom"))?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes an Xauthority file with a MIT-MAGIC-COOKIE-1 entry for any display
/// (FamilyWild), usable by the server (`-auth`) and by clients (`XAUTHORITY`), and the same
/// cookie for this host's local connections (FamilyLocal, the host name, any display):
/// python-xlib, and so pyautogui and OSWorld's X11 getters, match only the latter.
fn write_xauthority(path: &Path, cookie: &[u8]) -> Result<(), DesktopError> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_err(io("reading /proc/sys/kernel/hostname"))?;
    let mut out = Vec::new();
    // Family is written raw (not length-prefixed): 0xffff = FamilyWild, 0x0100 = FamilyLocal.
    for (family, address) in [([0xff, 0xff], ""), ([0x01, 0x00], host.trim())] {
        out.extend_from_slice(&family);
        for field in [address.as_bytes(), b"", b"MIT-MAGIC-COOKIE-1", cookie] {
            out.extend_from_slice(&(field.len() as u16).to_be_bytes());
            out.extend_from_slice(field);
        }
    }
    write_private(path, &out)
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), DesktopError> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(io(format!("writing {}", path.display())))
}

fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .filter_map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok())
        .collect()
}

/// A new file for a process's output.
fn log_file(path: &Path) -> Result<std::fs::File, DesktopError> {
    std::fs::File::create(path).map_err(io(format!("creating {}", path.display())))
}

/// Starts Xvfb on a free display and returns it with the display name.
fn start_xvfb(size: (u32, u32), auth: &Path, log: &Path) -> Result<(Child, String), DesktopError> {
    let (reader, writer) = std::io::pipe().map_err(io("making a pipe for Xvfb"))?;
    let wfd = writer.as_raw_fd();
    let mut cmd = Command::new("Xvfb");
    cmd.args([
        "-displayfd",
        "3",
        "-nolisten",
        "tcp",
        "-noreset",
        "-dpi",
        "96",
        "-auth",
    ])
    .arg(auth)
    .args(["-screen", "0"])
    .arg(format!("{}x{}x24", size.0, size.1))
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(log_file(log)?);
    // SAFETY: dup2 is async-signal-safe and runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(wfd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(io("starting Xvfb"))?;
    drop(writer);
    let mut line = String::new();
    BufReader::new(reader)
        .read_line(&mut line)
        .map_err(io("reading Xvfb's display number"))?;
    let n = line.trim();
    if n.is_empty() {
        return Err(DesktopError::Process {
            what: "Xvfb exited before reporting a display".into(),
            log: log.to_owned(),
        });
    }
    Ok((child, format!(":{n}")))
}

fn start_dbus(
    env: &BTreeMap<String, String>,
    runtime: &Path,
    log: &Path,
) -> Result<(Child, String), DesktopError> {
    let mut child = Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--print-address=1", "--nopidfile"])
        .arg(format!(
            "--address=unix:path={}",
            dbus_escaped(&runtime.join("bus"))
        ))
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file(log)?)
        .spawn()
        .map_err(io("starting dbus-daemon"))?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        BufReader::new(out)
            .read_line(&mut line)
            .map_err(io("reading dbus-daemon's address"))?;
    }
    let addr = line.trim().to_owned();
    if addr.is_empty() {
        return Err(DesktopError::Process {
            what: "dbus-daemon exited before printing its address".into(),
            log: log.to_owned(),
        });
    }
    Ok((child, addr))
}

/// `path` as a D-Bus address value: bytes other than `-0-9A-Za-z_/.\\*` as `%xx` (a
/// home with a space in it made dbus-daemon refuse the address).
fn dbus_escaped(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    path.as_os_str()
        .as_bytes()
        .iter()
        .map(|&b| match b {
            b'-' | b'0'..=b'9' | b'A'..=b'Z' | b'a'..=b'z' | b'_' | b'/' | b'.' | b'\\' | b'*' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02x}"),
        })
        .collect()
}

fn spawn_logged(
    argv: &[&str],
    env: &BTreeMap<String, String>,
    log: &Path,
) -> Result<Child, DesktopError> {
    let out = log_file(log)?;
    let err = out.try_clone().map_err(io("duplicating a file handle"))?;
    Command::new(argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(io(format!("starting {}", argv[0])))
}

/// Waits until the window manager actually manages new windows. Window managers announce
/// themselves (`_NET_SUPPORTING_WM_CHECK`) before they handle map requests, and a window
/// mapped in that gap can stay unmapped for good; so map 1x1 probe windows until one gets
/// `WM_STATE`.
fn wait_for_window_manager(display: &str, xauth: &Path, log: &Path) -> Result<(), DesktopError> {
    // SAFETY: nothing reads the environment concurrently (the supervisor's one other
    // thread only waits on the lifeline). x11rb reads XAUTHORITY to authenticate.
    unsafe {
        std::env::set_var("XAUTHORITY", xauth);
    }
    const WITHIN: Duration = Duration::from_secs(20);
    match window_manager_manages(display, WITHIN) {
        Ok(true) => Ok(()),
        Ok(false) => Err(DesktopError::TimedOut {
            what: "the window manager did not start managing windows".into(),
            within: WITHIN,
            logs: log.to_owned(),
        }),
        Err(e) => {
            // A probe loop cut short because the supervisor must stop is not X's failure.
            go_on()?;
            Err(DesktopError::X11 {
                display: display.to_owned(),
                message: e.to_string(),
            })
        }
    }
}

/// Maps probe windows until one is managed (true) or `within` passes (false).
fn window_manager_manages(
    display: &str,
    within: Duration,
) -> Result<bool, Box<dyn std::error::Error>> {
    use x11rb::connection::Connection;
    use x11rb::protocol::xproto::{AtomEnum, ConnectionExt, CreateWindowAux, WindowClass};
    use x11rb::wrapper::ConnectionExt as _;
    let (conn, screen) = x11rb::connect(Some(display))?;
    let root = conn.setup().roots[screen].root;
    let wm_state = conn.intern_atom(false, b"WM_STATE")?.reply()?.atom;
    let until = Instant::now() + within;
    while Instant::now() < until {
        go_on()?;
        let probe = conn.generate_id()?;
        conn.create_window(
            0,
            probe,
            root,
            0,
            0,
            1,
            1,
            0,
            WindowClass::INPUT_OUTPUT,
            0,
            &CreateWindowAux::new(),
        )?;
        conn.map_window(probe)?;
        conn.flush()?;
        let tried = Instant::now();
        let mut managed = false;
        while !managed && tried.elapsed() < Duration::from_millis(500) {
            let r = conn
                .get_property(false, probe, wm_state, AtomEnum::ANY, 0, 1)?
                .reply()?;
            managed = r.type_ != u32::from(AtomEnum::NONE);
            if !managed {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        conn.destroy_window(probe)?;
        conn.sync()?;
        if managed {
            return Ok(true);
        }
    }
    Ok(false)
}

#[derive(Deserialize)]
struct AgentReady {
    addr: String,
    fingerprint: String,
}

fn start_agent(
    opts: &SuperviseOptions,
    dir: &Path,
    env: &BTreeMap<String, String>,
    port: u16,
) -> Result<(Child, AgentReady), DesktopError> {
    let ready = dir.join("agent.ready");
    let _ = std::fs::remove_file(&ready);
    let (how, token) = match &opts.desktop.dial {
        Some(d) => {
            let mut how = vec!["--connect".to_owned(), d.host.clone()];
            if let Some(fp) = &d.host_fingerprint {
                how.extend(["--host-fingerprint".to_owned(), fp.clone()]);
            }
            (how, d.token_file.clone())
        }
        None => (
            vec!["--listen".to_owned(), format!("127.0.0.1:{port}")],
            dir.join("token"),
        ),
    };
    let mut args: Vec<String> = how;
    args.extend([
        "--name".into(),
        opts.desktop.name.clone(),
        "--state-dir".into(),
        dir.join("agent").display().to_string(),
        "--token-file".into(),
        token.display().to_string(),
        "--ready-file".into(),
        ready.display().to_string(),
        "--own-session-processes".into(),
    ]);
    if opts.desktop.read_only {
        args.push("--read-only".into());
    }
    if opts.desktop.allow_tools {
        args.push("--allow-tools".into());
    }
    let log_path = dir.join("logs/agent.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(io(format!("opening {}", log_path.display())))?;
    let err = log.try_clone().map_err(io("duplicating a file handle"))?;
    let mut child = Command::new(&opts.agent)
        .args(&args)
        .env_clear()
        .envs(env)
        // Where this host keeps its identity and the desktops' tokens, so that the agent
        // never serves them; the desktop's other processes are not told.
        .env("PINCER_STATE_DIR", crate::paths::state_dir())
        .env("PINCER_ENVS", Registry::locate(None).path())
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(io(format!("starting {}", opts.agent.display())))?;
    let started = Instant::now();
    const WITHIN: Duration = Duration::from_secs(20);
    loop {
        if let Ok(t) = std::fs::read_to_string(&ready)
            && let Ok(r) = serde_json::from_str::<AgentReady>(&t)
        {
            return Ok((child, r));
        }
        if let Ok(Some(st)) = child.try_wait() {
            return Err(DesktopError::Process {
                what: format!("pincer-agent exited at start ({st})"),
                log: log_path,
            });
        }
        if let Err(halted) = go_on() {
            let _ = child.kill();
            return Err(halted);
        }
        if started.elapsed() > WITHIN {
            let _ = child.kill();
            return Err(DesktopError::TimedOut {
                what: "pincer-agent did not get ready".into(),
                within: WITHIN,
                logs: log_path,
            });
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Variables of the caller's environment that a desktop's processes keep: where programs
/// are, the language and time zone, who the user is, and the agent's log settings. Nothing
/// else passes: the caller's per-user locations (`XDG_CONFIG_HOME`, `XDG_DATA_HOME`, ...)
/// would make two desktops share one dconf database and one set of app settings, and the
/// caller's own session (`WAYLAND_DISPLAY`, `DBUS_SESSION_BUS_ADDRESS`, `SSH_AUTH_SOCK`,
/// ...) would send the desktop's apps to another screen, bus or keyring.
const INHERITED: &[&str] = &[
    "PATH",
    "LANG",
    "LANGUAGE",
    "TZ",
    "USER",
    "LOGNAME",
    "SHELL",
    "TMPDIR",
    "RUST_LOG",
    "RUST_BACKTRACE",
];

/// Whether a desktop's processes keep the caller's variable `name` ([`INHERITED`] and the
/// locale's `LC_*`).
fn inherited(name: &str) -> bool {
    INHERITED.contains(&name) || name.starts_with("LC_")
}

/// The environment every process of a desktop starts from: the [`INHERITED`] part of
/// `caller`, a home of its own and, beside it, every XDG base directory pointing inside that
/// home (whatever `caller` holds), so desktops on one machine share no per-user state.
fn session_env(
    caller: impl IntoIterator<Item = (std::ffi::OsString, std::ffi::OsString)>,
    home: &Path,
    runtime: &Path,
) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = caller
        .into_iter()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| inherited(k))
        .collect();
    let under_home = |rel: &str| home.join(rel).display().to_string();
    for (k, v) in [
        ("HOME", home.display().to_string()),
        ("XDG_CONFIG_HOME", under_home(".config")),
        ("XDG_DATA_HOME", under_home(".local/share")),
        ("XDG_STATE_HOME", under_home(".local/state")),
        ("XDG_CACHE_HOME", under_home(".cache")),
        ("XDG_RUNTIME_DIR", runtime.display().to_string()),
        // The system-wide search paths at their specified defaults: the caller's may name
        // directories of its own user.
        ("XDG_CONFIG_DIRS", "/etc/xdg".to_owned()),
        ("XDG_DATA_DIRS", "/usr/local/share:/usr/share".to_owned()),
        ("XDG_SESSION_TYPE", "x11".to_owned()),
    ] {
        env.insert(k.to_owned(), v);
    }
    env
}

/// Whether `eval "$(pincer desktop env NAME)"` in a person's shell should unset the
/// shell's variable `name` because the desktop's processes do not have it and having it
/// would reach outside the desktop (another session's screen, bus, keyring or per-user
/// directories). Other variables of the shell (its editor, prompt, terminal) stay.
pub fn leaks_outside(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "XDG_", "DBUS_", "WAYLAND_", "GNOME_", "KDE_", "GDK_", "GTK_",
    ];
    const NAMES: &[&str] = &[
        "SESSION_MANAGER",
        "SSH_AUTH_SOCK",
        "GPG_AGENT_INFO",
        "DESKTOP_SESSION",
        "QT_QPA_PLATFORM",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p)) || NAMES.contains(&name)
}

fn run_session(opts: &SuperviseOptions) -> Result<Ended, DesktopError> {
    let d = &opts.desktop;
    let dir = dir_of(&d.name);
    let logs = dir.join("logs");
    let home = d.home.clone().unwrap_or_else(|| dir.join("home"));
    for made in [&logs, &home] {
        std::fs::create_dir_all(made).map_err(io(format!("creating {}", made.display())))?;
    }
    // The session's sockets (the bus, Wayland, PipeWire, AT-SPI) live in its runtime
    // directory, whose paths must fit in 108 bytes however long the home is.
    let _ = std::fs::remove_dir_all(runtime_dir(&dir));
    let runtime = crate::paths::make_socket_dir(&dir.join("runtime"))
        .map_err(io("making the desktop's runtime directory"))?;

    let me = std::process::id();
    let mut env = session_env(std::env::vars_os(), &home, &runtime);
    // The X server comes first on X11; on Wayland mutter needs the session bus first.
    let xvfb = match d.session {
        Session::X11 => {
            let xauth = runtime.join("Xauthority");
            write_xauthority(&xauth, &hex_bytes(&random_hex(16)?))?;
            let (xvfb, display) = start_xvfb(d.size, &xauth, &logs.join("xvfb.log"))?;
            env.insert("DISPLAY".into(), display);
            env.insert("XAUTHORITY".into(), xauth.display().to_string());
            Some(xvfb)
        }
        Session::Wayland => {
            env.insert("XDG_SESSION_TYPE".into(), "wayland".into());
            env.insert("XDG_CURRENT_DESKTOP".into(), "GNOME".into());
            None
        }
    };
    for (k, v) in [
        // Accessibility on for every toolkit: GTK2/3 bridge, Qt, LibreOffice's GTK3 VCL.
        ("GTK_MODULES", "gail:atk-bridge"),
        ("NO_AT_BRIDGE", "0"),
        ("GNOME_ACCESSIBILITY", "1"),
        ("QT_ACCESSIBILITY", "1"),
        ("QT_LINUX_ACCESSIBILITY_ALWAYS_ON", "1"),
        ("SAL_USE_VCLPLUGIN", "gtk3"),
        // GTK4's GL renderer on Xvfb's software GL keeps an app too busy to register with
        // AT-SPI: gtk4-widget-factory used 1.6 cores and never showed up in the tree.
        ("GSK_RENDERER", "cairo"),
        ("PINCER_DESKTOP", &d.name),
        ("PINCER_DESKTOP_ID", &session_marker(&d.name, me)),
    ] {
        env.insert(k.into(), v.to_owned());
    }
    go_on()?;
    let (_dbus, bus) = start_dbus(&env, &runtime, &logs.join("dbus.log"))?;
    env.insert("DBUS_SESSION_BUS_ADDRESS".into(), bus);

    // Start the accessibility bus now rather than on first use, so the first tree is fast.
    if Path::new("/usr/libexec/at-spi-bus-launcher").exists() {
        spawn_logged(
            &["/usr/libexec/at-spi-bus-launcher", "--launch-immediately"],
            &env,
            &logs.join("at-spi.log"),
        )?;
    }
    // Let toolkits that consult the desktop setting (LibreOffice among them) expose their UI.
    if which("gsettings").is_some() {
        let _ = Command::new("gsettings")
            .args([
                "set",
                "org.gnome.desktop.interface",
                "toolkit-accessibility",
                "true",
            ])
            .env_clear()
            .envs(&env)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
    go_on()?;
    // The screen's server: Xvfb, or GNOME Shell (or mutter) with its Xwayland.
    let (mut server, server_log, server_name, wm) = match xvfb {
        Some(xvfb) => (xvfb, logs.join("xvfb.log"), "Xvfb", None),
        None => {
            let gnome = gnome::start(&env, &runtime, d.size, &logs)?;
            env.insert("DISPLAY".into(), gnome.display);
            env.insert("XAUTHORITY".into(), gnome.xauthority.display().to_string());
            env.insert("WAYLAND_DISPLAY".into(), gnome.wayland_display);
            let log = logs.join(format!("{}.log", gnome.program));
            (gnome.process, log, gnome.program, Some(gnome.program))
        }
    };
    let display = env.get("DISPLAY").cloned().unwrap_or_default();
    let xauth = PathBuf::from(env.get("XAUTHORITY").cloned().unwrap_or_default());
    let wm = if d.window_manager && d.session == Session::X11 {
        ["openbox", "xfwm4", "metacity"]
            .into_iter()
            .find(|w| which(w).is_some())
    } else {
        wm
    };
    if let Some(w) = wm.filter(|_| d.session == Session::X11) {
        let argv: &[&str] = if w == "openbox" {
            &["openbox", "--sm-disable"]
        } else {
            &[w]
        };
        spawn_logged(argv, &env, &logs.join("wm.log"))?;
        wait_for_window_manager(&display, &xauth, &logs.join("wm.log"))?;
    }

    go_on()?;
    let (mut agent, ready) = start_agent(opts, &dir, &env, d.port)?;
    let port = ready
        .addr
        .parse::<std::net::SocketAddr>()
        .map_err(|e| DesktopError::Process {
            what: format!("pincer-agent reported the address '{}' ({e})", ready.addr),
            log: logs.join("agent.log"),
        })?
        .port();
    let state = DesktopState {
        name: d.name.clone(),
        display: display.clone(),
        size: d.size,
        supervisor_pid: me,
        agent_addr: ready.addr.clone(),
        fingerprint: ready.fingerprint.clone(),
        token_file: dir.join("token"),
        window_manager: wm.map(str::to_owned),
        env: env.clone(),
    };
    let tmp = dir.join("desktop.json.tmp");
    let json =
        serde_json::to_string_pretty(&state).map_err(|e| io("writing desktop.json")(e.into()))?;
    std::fs::write(&tmp, json)
        .and_then(|()| std::fs::rename(&tmp, state_file(&dir)))
        .map_err(io(format!("writing {}", state_file(&dir).display())))?;
    eprintln!(
        "supervisor: desktop '{}' up on {display}, agent at {}",
        d.name, ready.addr
    );

    let mut restarts: Vec<Instant> = Vec::new();
    loop {
        if let Some(why) = halted() {
            return Ok(why);
        }
        std::thread::sleep(Duration::from_millis(100));
        if let Ok(Some(st)) = server.try_wait() {
            return Err(DesktopError::Process {
                what: format!("{server_name} exited ({st}); the desktop is gone"),
                log: server_log,
            });
        }
        if let Ok(Some(st)) = agent.try_wait() {
            if let Some(why) = halted() {
                return Ok(why);
            }
            restarts.retain(|t| t.elapsed() < Duration::from_secs(60));
            if restarts.len() >= 5 {
                return Err(DesktopError::Process {
                    what: format!(
                        "pincer-agent exited 5 times within a minute (last: {st}); giving up"
                    ),
                    log: logs.join("agent.log"),
                });
            }
            restarts.push(Instant::now());
            eprintln!("supervisor: pincer-agent exited ({st}); restarting on port {port}");
            agent = start_agent(opts, &dir, &env, port)?.0;
        }
        reap();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bus_addresses_escape_what_dbus_would_refuse() {
        assert_eq!(
            dbus_escaped(Path::new("/home/ann.lee/with space/é/bus")),
            "/home/ann.lee/with%20space/%c3%a9/bus"
        );
        assert_eq!(
            dbus_escaped(Path::new("/run/user/1000/bus")),
            "/run/user/1000/bus"
        );
    }

    #[test]
    fn xauthority_entries_are_family_wild_and_family_local() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("xa");
        write_xauthority(&p, &[1, 2, 3]).unwrap();
        let b = std::fs::read(&p).unwrap();
        let mut wild = vec![0xff, 0xff, 0, 0, 0, 0, 0, 18];
        wild.extend_from_slice(b"MIT-MAGIC-COOKIE-1");
        wild.extend_from_slice(&[0, 3, 1, 2, 3]);
        // address "", number "", name, data
        assert_eq!(&b[..wild.len()], &wild[..]);
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let host = host.trim().as_bytes();
        let mut local = vec![0x01, 0x00, 0, host.len() as u8];
        local.extend_from_slice(host);
        local.extend_from_slice(&wild[4..]);
        assert_eq!(&b[wild.len()..], &local[..]);
    }

    #[test]
    fn a_session_keeps_nothing_per_user_from_its_caller() {
        let caller = [
            ("PATH", "/usr/bin:/bin"),
            ("LANG", "de_DE.UTF-8"),
            ("LC_TIME", "C"),
            ("HOME", "/home/me"),
            ("XDG_CONFIG_HOME", "/home/me/cfg"),
            ("XDG_DATA_HOME", "/home/me/data"),
            ("XDG_CACHE_HOME", "/home/me/cache"),
            ("XDG_STATE_HOME", "/home/me/state"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
            ("XDG_DATA_DIRS", "/home/me/.local/flatpak:/usr/share"),
            ("XDG_CURRENT_DESKTOP", "GNOME"),
            ("WAYLAND_DISPLAY", "wayland-0"),
            ("DBUS_SESSION_BUS_ADDRESS", "unix:path=/run/user/1000/bus"),
            ("SSH_AUTH_SOCK", "/run/user/1000/ssh"),
            ("GTK_THEME", "Adwaita:dark"),
        ]
        .map(|(k, v)| (k.into(), v.into()));
        let env = session_env(caller, Path::new("/d/home"), Path::new("/d/runtime"));
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(get("PATH"), Some("/usr/bin:/bin"));
        assert_eq!(get("LANG"), Some("de_DE.UTF-8"));
        assert_eq!(get("LC_TIME"), Some("C"));
        assert_eq!(get("HOME"), Some("/d/home"));
        assert_eq!(get("XDG_CONFIG_HOME"), Some("/d/home/.config"));
        assert_eq!(get("XDG_DATA_HOME"), Some("/d/home/.local/share"));
        assert_eq!(get("XDG_CACHE_HOME"), Some("/d/home/.cache"));
        assert_eq!(get("XDG_STATE_HOME"), Some("/d/home/.local/state"));
        assert_eq!(get("XDG_RUNTIME_DIR"), Some("/d/runtime"));
        assert_eq!(get("XDG_DATA_DIRS"), Some("/usr/local/share:/usr/share"));
        for gone in [
            "XDG_CURRENT_DESKTOP",
            "WAYLAND_DISPLAY",
            "DBUS_SESSION_BUS_ADDRESS",
            "SSH_AUTH_SOCK",
            "GTK_THEME",
        ] {
            assert_eq!(get(gone), None, "{gone} passed into the desktop");
        }
        // What a person's shell drops to match: the leaks, not its editor or prompt.
        assert!(leaks_outside("XDG_CONFIG_HOME") && leaks_outside("WAYLAND_DISPLAY"));
        assert!(!leaks_outside("EDITOR") && !leaks_outside("TERM"));
    }

    #[test]
    fn names_are_checked() {
        assert!(valid_name("desk-1_a").is_ok());
        assert!(valid_name("").is_err());
        assert!(valid_name("../etc").is_err());
        assert!(valid_name("a b").is_err());
    }
}
