//! The Wayland session of a local desktop (`pincer desktop up --session wayland`): PipeWire
//! and WirePlumber for the screen cast, and a headless mutter, GNOME's compositor, with a
//! virtual monitor and its Xwayland, on the desktop's private session bus. pincer-agent
//! then drives it through Mutter's remote-desktop and screen-cast D-Bus APIs, as on a
//! person's GNOME desktop.

use super::{DesktopError, spawn_logged, which};
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
    pub(super) mutter: Child,
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

/// Starts PipeWire, WirePlumber and mutter in `env` (which names the session bus and the
/// runtime directory `runtime`), and waits until mutter serves Wayland, Xwayland and its
/// remote-desktop API.
pub(super) fn start(
    env: &BTreeMap<String, String>,
    runtime: &Path,
    size: (u32, u32),
    logs: &Path,
) -> Result<Compositor, DesktopError> {
    check_installed()?;
    spawn_logged(&["pipewire"], env, &logs.join("pipewire.log"))?;
    spawn_logged(&["wireplumber"], env, &logs.join("wireplumber.log"))?;
    let monitor = format!("{}x{}", size.0, size.1);
    let log = logs.join("mutter.log");
    let mut mutter = spawn_logged(
        &[
            "mutter",
            "--headless",
            "--wayland",
            "--virtual-monitor",
            &monitor,
        ],
        env,
        &log,
    )?;
    let started = Instant::now();
    let timed_out = |what: &str| DesktopError::TimedOut {
        what: format!("mutter did not {what}"),
        within: START_WITHIN,
        logs: log.clone(),
    };
    let bus = env
        .get("DBUS_SESSION_BUS_ADDRESS")
        .cloned()
        .unwrap_or_default();
    loop {
        if let Ok(Some(status)) = mutter.try_wait() {
            return Err(DesktopError::Process {
                what: format!("mutter exited ({status}) while starting"),
                log,
            });
        }
        let socket = runtime.join("wayland-0");
        if socket.exists()
            && let Some((display, xauthority)) = xwayland_of(mutter.id())
            && has_remote_desktop(&bus)
        {
            return Ok(Compositor {
                mutter,
                display,
                xauthority,
                wayland_display: "wayland-0".to_owned(),
            });
        }
        if started.elapsed() > START_WITHIN {
            let _ = mutter.kill();
            return Err(timed_out(
                "offer its Wayland socket, Xwayland and its remote-desktop D-Bus API",
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
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

/// Whether `org.gnome.Mutter.RemoteDesktop` has an owner on the bus at `address`.
fn has_remote_desktop(address: &str) -> bool {
    Command::new("dbus-send")
        .arg(format!("--bus={address}"))
        .args([
            "--print-reply",
            "--dest=org.freedesktop.DBus",
            "/org/freedesktop/DBus",
            "org.freedesktop.DBus.NameHasOwner",
            "string:org.gnome.Mutter.RemoteDesktop",
        ])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("boolean true"))
}
