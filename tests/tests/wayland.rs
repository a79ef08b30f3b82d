//! pincer-agent in a Wayland session: a real headless mutter with its Xwayland, and the
//! agent started the way a user's session starts it, `DISPLAY` set to that Xwayland. The
//! agent must refuse the screen, input and windows by name (Xwayland sees only X11 apps:
//! its frames are black where Wayland apps draw, its input misses them), never answer
//! with black frames or clicks that went nowhere, and keep serving what does work.

use pincer_tests::{Sandbox, bin};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A headless mutter (Wayland compositor with Xwayland) on its own session bus, in its own
/// runtime directory; killed with its bus on drop.
struct Mutter {
    bus: Child,
    runtime: tempfile::TempDir,
    /// Xwayland's display (":N") and its authority file.
    display: String,
    xauthority: PathBuf,
}

impl Mutter {
    fn start() -> Self {
        // Xwayland wants the sockets' directory world-writable and sticky, as X servers
        // make it; a machine that never ran one may not have it, and one was seen here as
        // 1755, which mutter refused ("not writable").
        use std::os::unix::fs::PermissionsExt as _;
        let x11_dir = Path::new("/tmp/.X11-unix");
        let _ = std::fs::create_dir(x11_dir);
        let mode = std::fs::metadata(x11_dir).map_or(0, |m| m.permissions().mode() & 0o7777);
        if mode != 0o1777 {
            // Only its owner (or root) can; anyone else finds it as the system made it.
            let _ = std::fs::set_permissions(x11_dir, std::fs::Permissions::from_mode(0o1777));
        }
        let runtime = tempfile::tempdir().unwrap();
        let bus = Command::new("dbus-run-session")
            .args(["--", "mutter", "--headless", "--wayland"])
            .args(["--virtual-monitor", "1280x800"])
            .env("XDG_RUNTIME_DIR", runtime.path())
            .env_remove("DISPLAY")
            .env_remove("WAYLAND_DISPLAY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("dbus-run-session and mutter (./run.sh deps installs them)");
        // Held from here, so that the group is killed however the wait below ends.
        let mut mutter = Self {
            bus,
            runtime,
            display: String::new(),
            xauthority: PathBuf::new(),
        };
        let started = Instant::now();
        loop {
            if let Some((display, xauthority)) = xwayland_of(mutter.runtime.path()) {
                mutter.display = display;
                mutter.xauthority = xauthority;
                return mutter;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "mutter started no Xwayland within 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The Wayland socket's name.
    fn wayland_display(&self) -> String {
        assert!(self.runtime.path().join("wayland-0").exists());
        "wayland-0".to_owned()
    }
}

impl Drop for Mutter {
    fn drop(&mut self) {
        // The whole group: dbus-run-session, mutter, Xwayland and what the bus started.
        // SAFETY: kill(2) with a process group id; no memory is involved.
        unsafe {
            libc::kill(-(self.bus.id() as i32), libc::SIGKILL);
        }
        let _ = self.bus.wait();
    }
}

/// The display and authority file of the Xwayland whose authority file is in `runtime`,
/// once it listens.
fn xwayland_of(runtime: &Path) -> Option<(String, PathBuf)> {
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
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
        let auth = args.iter().skip_while(|a| *a != "-auth").nth(1)?;
        if !Path::new(auth).starts_with(runtime) {
            continue;
        }
        let display = args.iter().find(|a| a.starts_with(':'))?.clone();
        let socket = format!("/tmp/.X11-unix/X{}", &display[1..]);
        if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
            return Some((display, PathBuf::from(auth)));
        }
    }
    None
}

/// A `pincer-agent` listening on loopback, killed on drop.
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn an_agent_on_xwayland_refuses_the_screen_and_input_instead_of_lying() {
    let mutter = Mutter::start();
    let sb = Sandbox::new();
    let state = sb.path().join("agent");
    let ready = sb.path().join("ready.json");
    // As a GNOME Wayland session starts a user's programs.
    let agent = Agent(
        Command::new(bin("pincer-agent"))
            .args(["--listen", "127.0.0.1:0", "--name", "wl", "--state-dir"])
            .arg(&state)
            .arg("--ready-file")
            .arg(&ready)
            .env("DISPLAY", &mutter.display)
            .env("XAUTHORITY", &mutter.xauthority)
            .env("WAYLAND_DISPLAY", mutter.wayland_display())
            .env("XDG_RUNTIME_DIR", mutter.runtime.path())
            .env("XDG_SESSION_TYPE", "wayland")
            .env("XDG_CURRENT_DESKTOP", "GNOME")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    while !ready.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "agent not ready"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let ready: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&ready).unwrap()).unwrap();
    sb.pincer_ok(&[
        "env",
        "add",
        "wl",
        ready["addr"].as_str().unwrap(),
        "--token-file",
        state.join("token").to_str().unwrap(),
        "--fingerprint",
        ready["fingerprint"].as_str().unwrap(),
    ]);

    // The handshake names the reason and leaves out what cannot work.
    let info = sb.pincer_ok(&["env", "info", "--env", "wl"]);
    let why = format!(
        "refused: screenshots: X display {} is the Xwayland server of a \
         Wayland session (GNOME, WAYLAND_DISPLAY=wayland-0)",
        mutter.display
    );
    assert!(info.contains(&why), "{info}");
    let capabilities = info
        .lines()
        .find_map(|l| l.strip_prefix("capabilities"))
        .unwrap_or_default();
    for gone in ["screenshot", "input", "window", "video", "record"] {
        assert!(
            !capabilities.split(", ").any(|c| c.trim() == gone),
            "{gone} advertised: {info}"
        );
    }
    assert!(capabilities.contains("ui-tree"), "{info}");

    // Each request that would lie is refused, saying so; nothing is written.
    let shot = sb.path().join("black.png");
    let refusals: [(&str, Vec<&str>); 4] = [
        (
            "screenshots",
            vec!["screenshot", "--env", "wl", "-o", shot.to_str().unwrap()],
        ),
        ("input", vec!["act", "--env", "wl", "click", "400", "431"]),
        ("input", vec!["act", "--env", "wl", "type", "agent"]),
        ("window management", vec!["probe", "--env", "wl", "window"]),
    ];
    for (what, args) in refusals {
        let out = sb.pincer(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "pincer {args:?} was answered: {err}");
        assert!(
            err.contains(&format!("unsupported: {what}: ")) && err.contains("Xwayland"),
            "pincer {args:?}: {err}"
        );
        assert!(err.contains("GNOME on Xorg"), "says what to do: {err}");
    }
    assert!(!shot.exists(), "a refused screenshot left a file");

    // What works on Wayland still does.
    sb.pincer_ok(&["env", "ping", "--env", "wl"]);
    drop(agent);
}
