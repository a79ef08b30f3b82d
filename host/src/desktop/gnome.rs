//! The Wayland session of a local desktop (`pincer desktop up --session wayland`): PipeWire
//! and WirePlumber for the screen cast, and a headless GNOME Shell (or mutter alone, GNOME's
//! compositor, where GNOME Shell is not installed) with a virtual monitor and its Xwayland,
//! on the desktop's private session bus. pincer-agent then drives it through Mutter's
//! remote-desktop and screen-cast D-Bus APIs, as on a person's GNOME desktop, and manages
//! its windows through pincer's GNOME Shell extension, which the desktop installs and
//! enables in its own home. GNOME Shell also wants a system bus (its login manager): the
//! desktop runs a private one that only its own processes reach.

use super::{DesktopError, spawn_logged, which};
use pincer_shared::gnome_extension;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long mutter may take to offer its Wayland socket, Xwayland and D-Bus APIs.
const START_WITHIN: Duration = Duration::from_secs(60);
/// The programs a Wayland desktop runs, with the Debian packages that bring them.
const NEEDS: [(&str, &str); 3] = [
    ("mutter", "mutter xwayland"),
    ("pipewire", "pipewire"),
    ("wireplumber", "wireplumber"),
];

/// A running GNOME session's compositor and what its clients need to reach it.
pub(super) struct Compositor {
    /// gnome-shell or mutter.
    pub(super) program: &'static str,
    pub(super) process: Child,
    /// Xwayland's display (":N"), for X11 apps.
    pub(super) display: String,
    /// Xwayland's authority file.
    pub(super) xauthority: PathBuf,
    /// The Wayland socket's name in the runtime directory.
    pub(super) wayland_display: String,
}

/// Refuses a Wayland desktop on a machine without its programs.
pub(super) fn check_installed() -> Result<(), DesktopError> {
    for (program, packages) in NEEDS {
        if which(program).is_none() {
            return Err(DesktopError::Missing { program, packages });
        }
    }
    Ok(())
}

/// Starts PipeWire, WirePlumber and the compositor in `env` (which names the session bus
/// and the runtime directory `runtime`), and waits until it serves Wayland, Xwayland, its
/// remote-desktop API and (GNOME Shell) pincer's extension.
pub(super) fn start(
    env: &BTreeMap<String, String>,
    runtime: &Path,
    size: (u32, u32),
    logs: &Path,
) -> Result<Compositor, DesktopError> {
    check_installed()?;
    spawn_logged(&["pipewire"], env, &logs.join("pipewire.log"))?;
    spawn_logged(&["wireplumber"], env, &logs.join("wireplumber.log"))?;
    let shell = which("gnome-shell").is_some();
    let (program, env) = if shell {
        let mut env = env.clone();
        let system_bus = start_system_bus(&env, runtime, logs)?;
        env.insert("DBUS_SYSTEM_BUS_ADDRESS".into(), system_bus);
        install_extension(&env)?;
        ("gnome-shell", env)
    } else {
        ("mutter", env.clone())
    };
    let monitor = format!("{}x{}", size.0, size.1);
    let log = logs.join(format!("{program}.log"));
    let argv = [
        program,
        "--headless",
        "--wayland",
        "--virtual-monitor",
        &monitor,
    ];
    let mut process = spawn_logged(&argv, &env, &log)?;
    let started = Instant::now();
    let bus = env
        .get("DBUS_SESSION_BUS_ADDRESS")
        .cloned()
        .unwrap_or_default();
    loop {
        if let Ok(Some(status)) = process.try_wait() {
            return Err(DesktopError::Process {
                what: format!("{program} exited ({status}) while starting"),
                log,
            });
        }
        let socket = runtime.join("wayland-0");
        if socket.exists()
            && let Some((display, xauthority)) = xwayland_of(process.id())
            && has_name(&bus, "org.gnome.Mutter.RemoteDesktop")
            && (!shell || has_name(&bus, gnome_extension::BUS_NAME))
        {
            return Ok(Compositor {
                program,
                process,
                display,
                xauthority,
                wayland_display: "wayland-0".to_owned(),
            });
        }
        if let Err(halted) = super::go_on() {
            let _ = process.kill();
            return Err(halted);
        }
        if started.elapsed() > START_WITHIN {
            let _ = process.kill();
            let wanted = if shell {
                "offer its Wayland socket, Xwayland, its remote-desktop D-Bus API and \
                 pincer's extension"
            } else {
                "offer its Wayland socket, Xwayland and its remote-desktop D-Bus API"
            };
            return Err(DesktopError::TimedOut {
                what: format!("{program} did not {wanted}"),
                within: START_WITHIN,
                logs: log,
            });
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts a system bus for the desktop alone (GNOME Shell's login manager asks it; nothing
/// answers there) and returns its address.
fn start_system_bus(
    env: &BTreeMap<String, String>,
    runtime: &Path,
    logs: &Path,
) -> Result<String, DesktopError> {
    let socket = runtime.join("system_bus");
    let config = runtime.join("system-bus.conf");
    let address = format!("unix:path={}", super::dbus_escaped(&socket));
    let text = format!(
        "<!DOCTYPE busconfig PUBLIC \"-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN\" \
         \"http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd\">\n\
         <busconfig><type>system</type><listen>{address}</listen><auth>EXTERNAL</auth>\
         <policy context=\"default\"><allow user=\"*\"/><allow own=\"*\"/>\
         <allow send_destination=\"*\"/><allow receive_sender=\"*\"/></policy></busconfig>\n"
    );
    std::fs::write(&config, text).map_err(super::io("writing the system bus's configuration"))?;
    let config_arg = format!("--config-file={}", config.display());
    let argv = [
        "dbus-daemon",
        config_arg.as_str(),
        "--nofork",
        "--nopidfile",
    ];
    spawn_logged(&argv, env, &logs.join("system-bus.log"))?;
    let started = Instant::now();
    while !socket.exists() {
        super::go_on()?;
        if started.elapsed() > START_WITHIN {
            return Err(DesktopError::TimedOut {
                what: "the desktop's system bus did not start".into(),
                within: START_WITHIN,
                logs: logs.join("system-bus.log"),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(address)
}

/// Puts pincer's GNOME Shell extension into the desktop's data directory and enables it in
/// the desktop's settings, where GNOME Shell loads it as it starts.
fn install_extension(env: &BTreeMap<String, String>) -> Result<(), DesktopError> {
    let data = env
        .get("XDG_DATA_HOME")
        .map(PathBuf::from)
        .unwrap_or_default();
    let dir = data
        .join("gnome-shell/extensions")
        .join(gnome_extension::UUID);
    std::fs::create_dir_all(&dir).map_err(super::io(format!("creating {}", dir.display())))?;
    for (file, text) in gnome_extension::FILES {
        std::fs::write(dir.join(file), text)
            .map_err(super::io(format!("writing {}", dir.join(file).display())))?;
    }
    let enabled = gnome_extension::enabled_with("[]", gnome_extension::UUID, true);
    let status = Command::new("gsettings")
        .args(["set", "org.gnome.shell", "enabled-extensions", &enabled])
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(super::io("running gsettings"))?;
    if status.success() {
        Ok(())
    } else {
        Err(DesktopError::Process {
            what: format!("gsettings could not enable pincer's GNOME Shell extension ({status})"),
            log: dir,
        })
    }
}

/// The display (":N") and authority file of the Xwayland that process `parent` (a
/// compositor) started, once it accepts connections.
pub fn xwayland_of(parent: u32) -> Option<(String, PathBuf)> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so read after its ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid != Some(parent) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|&b| b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if !args.first().is_some_and(|a| a.ends_with("Xwayland")) {
            continue;
        }
        let display = args.iter().find(|a| a.starts_with(':'))?.clone();
        let auth = args.iter().skip_while(|a| *a != "-auth").nth(1)?;
        let socket = format!("/tmp/.X11-unix/X{}", &display[1..]);
        if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
            return Some((display, PathBuf::from(auth)));
        }
    }
    None
}

/// Whether `name` has an owner on the bus at `address`.
fn has_name(address: &str, name: &str) -> bool {
    Command::new("dbus-send")
        .arg(format!("--bus={address}"))
        .args([
            "--print-reply",
            "--dest=org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.NameHasOwner",
        ])
        .arg(format!("string:{name}"))
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("boolean true"))
}
