//! Throwaway desktops for the guest agent's own tests: a private Xvfb on a free display
//! (`-displayfd`), and optionally a private D-Bus session with the AT-SPI bus, so tests run
//! in parallel without touching each other or the developer's session.

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private X server, killed on drop.
#[derive(Debug)]
pub(crate) struct Xvfb {
    /// The display name, such as ":101".
    pub(crate) display: String,
    child: Child,
}

impl Xvfb {
    /// Starts Xvfb with one screen of `width`x`height` at 24 bits.
    pub(crate) fn start(width: u32, height: u32) -> Self {
        let (reader, writer) = std::io::pipe().expect("pipe");
        let wfd = writer.as_raw_fd();
        let mut cmd = Command::new("Xvfb");
        cmd.args([
            "-displayfd",
            "3",
            "-nolisten",
            "tcp",
            "-noreset",
            "-screen",
            "0",
        ])
        .arg(format!("{width}x{height}x24"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: dup2 is async-signal-safe; it runs in the child between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(wfd, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .expect("Xvfb is installed (apt-get install xvfb)");
        drop(writer);
        let mut line = String::new();
        BufReader::new(reader)
            .read_line(&mut line)
            .expect("Xvfb reports its display");
        let display = format!(":{}", line.trim());
        assert!(display.len() > 1, "Xvfb did not report a display");
        Self { display, child }
    }
}

impl Drop for Xvfb {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A private D-Bus session bus (with AT-SPI activatable on it), killed on drop together
/// with everything it activated.
#[derive(Debug)]
pub(crate) struct DbusSession {
    /// Value for `DBUS_SESSION_BUS_ADDRESS`.
    pub(crate) address: String,
    /// Value for `XDG_RUNTIME_DIR`.
    pub(crate) runtime_dir: tempfile::TempDir,
    child: Child,
}

impl DbusSession {
    /// Starts `dbus-daemon --session` for a desktop on `display`.
    pub(crate) fn start(display: &str) -> Self {
        let runtime_dir = tempfile::tempdir().expect("temp dir");
        let mut cmd = Command::new("dbus-daemon");
        cmd.args(["--session", "--nofork", "--print-address=1"])
            .env("DISPLAY", display)
            .env("XDG_RUNTIME_DIR", runtime_dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            // Own process group, so drop can kill the activated helpers too.
            .process_group(0);
        let mut child = cmd.spawn().expect("dbus-daemon is installed");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("dbus-daemon prints its address");
        Self {
            address: line.trim().to_owned(),
            runtime_dir,
            child,
        }
    }

    /// Environment for a process that should use this bus and display.
    pub(crate) fn envs(&self, display: &str) -> Vec<(String, String)> {
        vec![
            ("DISPLAY".into(), display.into()),
            ("DBUS_SESSION_BUS_ADDRESS".into(), self.address.clone()),
            (
                "XDG_RUNTIME_DIR".into(),
                self.runtime_dir.path().display().to_string(),
            ),
            ("GTK_A11Y".into(), "atspi".into()),
            ("NO_AT_BRIDGE".into(), "0".into()),
        ]
    }
}

impl Drop for DbusSession {
    fn drop(&mut self) {
        // dbus-daemon is the group leader; activated services (at-spi-bus-launcher and its
        // bus) stay in its group unless they detach.
        let pgid = self.child.id() as i32;
        // SAFETY: plain syscall on a process group we created.
        unsafe {
            libc::kill(-pgid, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}

/// A GUI app started with the given environment, killed on drop.
#[derive(Debug)]
pub(crate) struct App(Child);

impl App {
    /// Starts `argv` with `envs`.
    pub(crate) fn start(argv: &[&str], envs: &[(String, String)]) -> Self {
        let child = Command::new(argv[0])
            .args(&argv[1..])
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", argv[0]));
        Self(child)
    }

    /// The app's process id.
    pub(crate) fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for App {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Polls `f` every 50 ms until it returns `Some` or `timeout` passes.
pub(crate) fn wait_for<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if start.elapsed() > timeout {
            return None;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
