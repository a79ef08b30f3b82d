//! Throwaway desktops for the guest agent's own tests: a private Xvfb on a free display
//! (`-displayfd`), and optionally a private D-Bus session with the AT-SPI bus and openbox, so
//! tests run in parallel without touching each other or the developer's session. Tests that
//! kill and restart their X server use [`FixedXvfb`], whose display name survives a restart.

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use x11rb::COPY_DEPTH_FROM_PARENT;
use x11rb::connection::Connection as _;
use x11rb::protocol::xproto::{AtomEnum, ConnectionExt as _, CreateWindowAux, WindowClass};
use x11rb::wrapper::ConnectionExt as _;

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

    /// Stops (`SIGSTOP`) or resumes (`SIGCONT`) the server: a hung X server, on demand.
    pub(crate) fn signal(&self, signal: i32) {
        // SAFETY: a plain syscall on our own child.
        unsafe {
            libc::kill(self.child.id() as i32, signal);
        }
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
            // As pincer's desktops set it: GTK4's GL renderer on Xvfb's software GL keeps
            // an app too busy to register with AT-SPI.
            ("GSK_RENDERER".into(), "cairo".into()),
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

    /// Waits up to `timeout` for the app to exit on its own; `None` if it still runs.
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        wait_for(timeout, || self.0.try_wait().ok().flatten())
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

/// An Xvfb on a fixed display number, so that a test can kill it and start another one
/// under the same name. Tests use :190-:199, one number each.
#[derive(Debug)]
pub(crate) struct FixedXvfb {
    /// ":190" and so on.
    pub(crate) display: String,
    child: Option<Child>,
}

impl FixedXvfb {
    pub(crate) fn start(number: u32) -> Self {
        let mut xvfb = Self {
            display: format!(":{number}"),
            child: None,
        };
        xvfb.restart();
        xvfb
    }

    /// Starts the server (again) and waits until it accepts connections.
    pub(crate) fn restart(&mut self) {
        self.kill();
        let mut child = Command::new("Xvfb")
            .args([
                &self.display,
                "-nolisten",
                "tcp",
                "-noreset",
                "-screen",
                "0",
            ])
            .arg("640x480x24")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("Xvfb is installed");
        let up = wait_for(Duration::from_secs(10), || {
            x11rb::connect(Some(&self.display)).ok().map(drop)
        });
        // A server left over from another run would answer too: it must be ours.
        assert!(
            up.is_some() && matches!(child.try_wait(), Ok(None)),
            "Xvfb did not come up on {} (is another server using it?)",
            self.display
        );
        self.child = Some(child);
    }

    /// Stops the server (SIGTERM, so it removes its lock file and socket).
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: plain syscall on our own child's pid.
            unsafe {
                libc::kill(child.id() as i32, libc::SIGTERM);
            }
            let _ = child.wait();
        }
    }
}

impl Drop for FixedXvfb {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running openbox, killed on drop.
#[derive(Debug)]
pub(crate) struct Openbox {
    _app: App,
    /// The connection the probe windows were made on. The X server hands a closed
    /// connection's ids to the next client; kept open, the ids openbox may still have events
    /// queued about are never a test's windows.
    _probes: x11rb::rust_connection::RustConnection,
}

/// Starts openbox and waits until it manages windows, so that the windows mapped next get
/// managed and focused. Openbox announces itself (`_NET_SUPPORTING_WM_CHECK`) before it
/// handles map requests, and a window mapped in between stays unmapped for good; so we wait
/// until it has managed a probe window of our own, mapping a fresh one each second.
pub(crate) fn openbox(display: &str, envs: &[(String, String)]) -> Openbox {
    let app = App::start(&["openbox", "--sm-disable"], envs);
    let (conn, screen) = x11rb::connect(Some(display)).unwrap();
    let root = conn.setup().roots[screen].root;
    let wm_state = conn.intern_atom(false, b"WM_STATE").unwrap();
    let wm_state = wm_state.reply().unwrap().atom;
    let managing = wait_for(Duration::from_secs(20), || {
        let probe = conn.generate_id().unwrap();
        conn.create_window(
            COPY_DEPTH_FROM_PARENT,
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
        )
        .unwrap();
        conn.map_window(probe).unwrap();
        conn.flush().unwrap();
        let managed = wait_for(Duration::from_secs(1), || {
            let reply = conn
                .get_property(false, probe, wm_state, AtomEnum::ANY, 0, 1)
                .ok()?
                .reply()
                .ok()?;
            (reply.type_ != u32::from(AtomEnum::NONE)).then_some(())
        });
        conn.destroy_window(probe).unwrap();
        conn.sync().unwrap();
        managed
    });
    assert!(managing.is_some(), "openbox did not start managing windows");
    Openbox {
        _app: app,
        _probes: conn,
    }
}
