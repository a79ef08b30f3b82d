//! The active window: which top-level window the user is working in and what it is (title,
//! owning process, class, bounds), for the `ActiveWindow` probe.
//!
//! A window manager names the active client in `_NET_ACTIVE_WINDOW` on the root window; we
//! trust it when it is there. Without one, the answer is where the keyboard goes: the input
//! focus (or, under `PointerRoot`, the window under the pointer) walked up to its top-level
//! client, the window that carries `WM_STATE` or else the child of the root.
//!
//! Windows are owned by other processes and can vanish between any two of our requests; a
//! vanished window is "no active window" after one more look, never an error. The connection
//! is our own, made on first use, and replaced when the X server goes away.

use pincer_shared::WireError;
use pincer_shared::observe::Rect;
use pincer_shared::probe::WindowInfo;
use std::fmt;
use x11rb::connection::Connection as _;
use x11rb::errors::{ConnectionError, ReplyError};
use x11rb::protocol::ErrorKind;
use x11rb::protocol::xproto::{self, AtomEnum, ConnectionExt as _, GetPropertyReply, InputFocus};
use x11rb::rust_connection::RustConnection;

x11rb::atom_manager! {
    /// Atoms the active-window lookup reads.
    Atoms: AtomsCookie {
        _NET_ACTIVE_WINDOW,
        _NET_WM_NAME,
        _NET_WM_PID,
        UTF8_STRING,
        WM_STATE,
    }
}

/// Longest property value read, in 32-bit units (titles and class names are far shorter).
const MAX_PROPERTY: u32 = 16 * 1024;

/// Answers "which window is active" on one X display.
pub(crate) struct Windows {
    /// Display name to connect to; `None` uses `$DISPLAY`.
    display: Option<String>,
    /// The live connection; `None` before first use and after the display went away.
    session: Option<Session>,
}

impl fmt::Debug for Windows {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Windows")
            .field("display", &self.display)
            .field("connected", &self.session.is_some())
            .finish()
    }
}

impl Windows {
    /// Window queries for `display` (`None`: `$DISPLAY`). Connects on first use.
    pub(crate) fn new(display: Option<String>) -> Self {
        Self {
            display,
            session: None,
        }
    }

    /// The focused top-level window: `_NET_ACTIVE_WINDOW` when a window manager sets it,
    /// else the input focus walked up to its top-level client (the child of root / the
    /// window with `WM_STATE`).
    pub(crate) fn active(&mut self) -> Result<Option<WindowInfo>, WireError> {
        // Our connection reads no events, so anything readable is an error report or the end
        // of the stream; this notices a dead server without a round trip.
        if self
            .session
            .as_ref()
            .is_some_and(|s| s.conn.poll_for_event().is_err())
        {
            self.session = None;
        }
        let session = match &mut self.session {
            Some(session) => session,
            slot @ None => slot.insert(Session::connect(self.display.as_deref())?),
        };
        // The active window can change while we look; a window that vanished mid-query gets
        // one more look at whatever is active now.
        let mut result = session.active();
        if matches!(result, Err(Failure::Vanished)) {
            result = session.active();
        }
        let result = match result {
            Ok(found) => Ok(found),
            Err(Failure::Vanished) => Ok(None),
            Err(Failure::Wire(e)) => Err(e),
        };
        if matches!(result, Err(WireError::Display { .. })) {
            self.session = None;
        }
        result
    }
}

/// Why a lookup stopped.
enum Failure {
    /// A window we asked about no longer exists.
    Vanished,
    /// Anything else.
    Wire(WireError),
}

impl From<ConnectionError> for Failure {
    fn from(e: ConnectionError) -> Self {
        Self::Wire(lost(e))
    }
}

impl From<ReplyError> for Failure {
    fn from(e: ReplyError) -> Self {
        match e {
            ReplyError::ConnectionError(e) => e.into(),
            ReplyError::X11Error(e)
                if matches!(e.error_kind, ErrorKind::Window | ErrorKind::Drawable) =>
            {
                Self::Vanished
            }
            ReplyError::X11Error(e) => Self::Wire(WireError::Internal {
                message: format!("the X server refused a window query: {:?}", e.error_kind),
            }),
        }
    }
}

/// What the window manager says about the active window.
enum Announced {
    /// No `_NET_ACTIVE_WINDOW`: no EWMH window manager.
    Nothing,
    /// The window manager says no window is active.
    NoWindow,
    /// This client window is active.
    Window(xproto::Window),
}

/// One connection to the X server.
struct Session {
    conn: RustConnection,
    root: xproto::Window,
    atoms: Atoms,
}

impl Session {
    fn connect(display: Option<&str>) -> Result<Self, WireError> {
        let (conn, screen) = x11rb::connect(display).map_err(|e| WireError::Display {
            message: format!(
                "cannot connect to X display {}: {e}",
                display.unwrap_or("$DISPLAY")
            ),
        })?;
        let Some(root) = conn.setup().roots.get(screen).map(|s| s.root) else {
            return Err(WireError::Display {
                message: format!("X server has no screen {screen}"),
            });
        };
        let atoms =
            Atoms::new(&conn)
                .map_err(lost)?
                .reply()
                .map_err(|e| match Failure::from(e) {
                    Failure::Wire(e) => e,
                    Failure::Vanished => WireError::Internal {
                        message: "interning atoms failed".into(),
                    },
                })?;
        Ok(Self { conn, root, atoms })
    }

    fn active(&self) -> Result<Option<WindowInfo>, Failure> {
        match self.announced()? {
            Announced::NoWindow => return Ok(None),
            Announced::Window(window) => match self.describe(window) {
                // A window manager that died leaves its last answer behind.
                Err(Failure::Vanished) => {}
                found => return found.map(Some),
            },
            Announced::Nothing => {}
        }
        match self.focused_client()? {
            Some(window) => self.describe(window).map(Some),
            None => Ok(None),
        }
    }

    fn announced(&self) -> Result<Announced, Failure> {
        let reply = self
            .conn
            .get_property(
                false,
                self.root,
                self.atoms._NET_ACTIVE_WINDOW,
                AtomEnum::WINDOW,
                0,
                1,
            )?
            .reply()?;
        if reply.type_ == u32::from(AtomEnum::NONE) {
            return Ok(Announced::Nothing);
        }
        Ok(match reply.value32().and_then(|mut v| v.next()) {
            Some(window) if window != x11rb::NONE => Announced::Window(window),
            _ => Announced::NoWindow,
        })
    }

    /// The top-level client that has the keyboard, if any.
    fn focused_client(&self) -> Result<Option<xproto::Window>, Failure> {
        let focus = self.conn.get_input_focus()?.reply()?.focus;
        let focus = if focus == u32::from(InputFocus::POINTER_ROOT) {
            // Keys go to whatever is under the pointer.
            self.conn.query_pointer(self.root)?.reply()?.child
        } else {
            focus
        };
        if focus == x11rb::NONE || focus == self.root {
            return Ok(None);
        }
        self.client_of(focus).map(Some)
    }

    /// Walks up from `window` to its client: the first ancestor-or-self with `WM_STATE`, else
    /// a window with `WM_STATE` below the top-level (a reparenting manager's frame can hold
    /// the focus), else the top-level itself (no window manager sets `WM_STATE`).
    fn client_of(&self, mut window: xproto::Window) -> Result<xproto::Window, Failure> {
        // Window trees are shallow; the bound only guards against a server that loops.
        for _ in 0..64 {
            if self.has_wm_state(window)? {
                return Ok(window);
            }
            let parent = self.conn.query_tree(window)?.reply()?.parent;
            if parent == self.root || parent == x11rb::NONE {
                break;
            }
            window = parent;
        }
        Ok(self.client_below(window)?.unwrap_or(window))
    }

    /// A window with `WM_STATE` up to three levels below `top`, breadth first.
    fn client_below(&self, top: xproto::Window) -> Result<Option<xproto::Window>, Failure> {
        let mut level = vec![top];
        for _ in 0..3 {
            let mut next = Vec::new();
            for window in level {
                next.extend(self.conn.query_tree(window)?.reply()?.children);
            }
            // Ask about all of a level at once: one round trip, not one per window.
            let cookies = next
                .iter()
                .map(|&w| self.wm_state_cookie(w))
                .collect::<Result<Vec<_>, _>>()?;
            for (&window, cookie) in next.iter().zip(cookies) {
                if cookie.reply()?.type_ != u32::from(AtomEnum::NONE) {
                    return Ok(Some(window));
                }
            }
            level = next;
        }
        Ok(None)
    }

    fn wm_state_cookie(
        &self,
        window: xproto::Window,
    ) -> Result<x11rb::cookie::Cookie<'_, RustConnection, GetPropertyReply>, ConnectionError> {
        self.conn
            .get_property(false, window, self.atoms.WM_STATE, AtomEnum::ANY, 0, 0)
    }

    fn has_wm_state(&self, window: xproto::Window) -> Result<bool, Failure> {
        Ok(self.wm_state_cookie(window)?.reply()?.type_ != u32::from(AtomEnum::NONE))
    }

    /// Everything we report about `window`, asked for in one batch of requests.
    fn describe(&self, window: xproto::Window) -> Result<WindowInfo, Failure> {
        let property = |name: u32, kind: u32, len: u32| {
            self.conn.get_property(false, window, name, kind, 0, len)
        };
        let atoms = &self.atoms;
        let net_name = property(atoms._NET_WM_NAME, atoms.UTF8_STRING, MAX_PROPERTY)?;
        let name = property(AtomEnum::WM_NAME.into(), AtomEnum::ANY.into(), MAX_PROPERTY)?;
        let pid = property(atoms._NET_WM_PID, AtomEnum::CARDINAL.into(), 1)?;
        let class = property(
            AtomEnum::WM_CLASS.into(),
            AtomEnum::STRING.into(),
            MAX_PROPERTY,
        )?;
        let geometry = self.conn.get_geometry(window)?;
        let origin = self.conn.translate_coordinates(window, self.root, 0, 0)?;

        let net_name = net_name.reply()?;
        let name = name.reply()?;
        let title = if net_name.format == 8 && !net_name.value.is_empty() {
            String::from_utf8_lossy(&net_name.value).into_owned()
        } else if name.type_ == atoms.UTF8_STRING {
            String::from_utf8_lossy(&name.value).into_owned()
        } else {
            // STRING is Latin-1; COMPOUND_TEXT agrees with it on the common part.
            name.value.iter().map(|&b| char::from(b)).collect()
        };
        let pid = pid.reply()?.value32().and_then(|mut v| v.next());
        let process_name = pid.and_then(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            Some(comm.trim_end_matches('\n').to_owned())
        });
        let class = class.reply()?;
        // WM_CLASS is "instance\0class\0".
        let mut parts = class
            .value
            .split(|&b| b == 0)
            .map(|part| String::from_utf8_lossy(part).into_owned());
        let nonempty = |part: Option<String>| part.filter(|p| !p.is_empty());
        let instance = nonempty(parts.next());
        let class = nonempty(parts.next());
        let geometry = geometry.reply()?;
        let origin = origin.reply()?;
        Ok(WindowInfo {
            id: window.into(),
            title,
            pid,
            process_name,
            class,
            instance,
            bounds: Some(Rect::new(
                origin.dst_x.into(),
                origin.dst_y.into(),
                geometry.width.into(),
                geometry.height.into(),
            )),
        })
    }
}

fn lost(e: ConnectionError) -> WireError {
    WireError::Display {
        message: format!("lost the connection to the X server: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::input::tests::{FixedXvfb, openbox};
    use crate::testutil::{App, DbusSession, Xvfb, wait_for};
    use std::time::Duration;
    use x11rb::COPY_DEPTH_FROM_PARENT;
    use x11rb::protocol::xproto::{CreateWindowAux, PropMode, WindowClass};
    use x11rb::wrapper::ConnectionExt as _;

    /// A plain X client that makes windows the way applications do.
    struct Client {
        conn: RustConnection,
        root: xproto::Window,
        atoms: Atoms,
    }

    impl Client {
        fn new(display: &str) -> Self {
            let (conn, screen) = x11rb::connect(Some(display)).unwrap();
            let root = conn.setup().roots[screen].root;
            let atoms = Atoms::new(&conn).unwrap().reply().unwrap();
            Self { conn, root, atoms }
        }

        fn window(&self, parent: xproto::Window, x: i16, y: i16, w: u16, h: u16) -> xproto::Window {
            let window = self.conn.generate_id().unwrap();
            self.conn
                .create_window(
                    COPY_DEPTH_FROM_PARENT,
                    window,
                    parent,
                    x,
                    y,
                    w,
                    h,
                    0,
                    WindowClass::INPUT_OUTPUT,
                    0,
                    &CreateWindowAux::new(),
                )
                .unwrap();
            self.conn.map_window(window).unwrap();
            self.conn.sync().unwrap();
            window
        }

        fn text(
            &self,
            window: xproto::Window,
            name: impl Into<u32>,
            kind: impl Into<u32>,
            value: &[u8],
        ) {
            self.conn
                .change_property8(PropMode::REPLACE, window, name.into(), kind.into(), value)
                .unwrap();
            self.conn.sync().unwrap();
        }

        fn words(&self, window: xproto::Window, name: u32, kind: impl Into<u32>, value: &[u32]) {
            self.conn
                .change_property32(PropMode::REPLACE, window, name, kind.into(), value)
                .unwrap();
            self.conn.sync().unwrap();
        }

        fn focus(&self, focus: xproto::Window) {
            self.conn
                .set_input_focus(InputFocus::PARENT, focus, x11rb::CURRENT_TIME)
                .unwrap();
            self.conn.sync().unwrap();
        }
    }

    #[test]
    fn values_are_send() {
        fn send<T: Send>() {}
        send::<Windows>();
    }

    #[test]
    fn reports_the_focused_window_without_a_window_manager() {
        let x = Xvfb::start(640, 480);
        let c = Client::new(&x.display);
        let mut windows = Windows::new(Some(x.display.clone()));
        assert_eq!(windows.active().unwrap(), None, "nothing is focused yet");

        let w = c.window(c.root, 30, 40, 200, 100);
        let title = "Pincer — ✓ tëst";
        c.text(
            w,
            c.atoms._NET_WM_NAME,
            c.atoms.UTF8_STRING,
            title.as_bytes(),
        );
        c.text(w, AtomEnum::WM_NAME, AtomEnum::STRING, b"fallback");
        c.words(
            w,
            c.atoms._NET_WM_PID,
            AtomEnum::CARDINAL,
            &[std::process::id()],
        );
        c.text(
            w,
            AtomEnum::WM_CLASS,
            AtomEnum::STRING,
            b"pincer-instance\0PincerClass\0",
        );
        c.focus(w);
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        let expected = WindowInfo {
            id: w.into(),
            title: title.into(),
            pid: Some(std::process::id()),
            process_name: Some(comm.trim_end().into()),
            class: Some("PincerClass".into()),
            instance: Some("pincer-instance".into()),
            bounds: Some(Rect::new(30, 40, 200, 100)),
        };
        assert_eq!(windows.active().unwrap(), Some(expected.clone()));

        // Focus inside the window: the top-level is what is active.
        let child = c.window(w, 5, 5, 50, 20);
        c.focus(child);
        assert_eq!(windows.active().unwrap(), Some(expected));

        // Only the old WM_NAME, in Latin-1, and nothing else.
        let plain = c.window(c.root, 300, 200, 100, 50);
        c.text(plain, AtomEnum::WM_NAME, AtomEnum::STRING, b"Fen\xeatre");
        c.focus(plain);
        assert_eq!(
            windows.active().unwrap(),
            Some(WindowInfo {
                id: plain.into(),
                title: "Fenêtre".into(),
                pid: None,
                process_name: None,
                class: None,
                instance: None,
                bounds: Some(Rect::new(300, 200, 100, 50)),
            })
        );

        // PointerRoot focus: keys go to the window under the pointer.
        c.conn
            .set_input_focus(InputFocus::POINTER_ROOT, 1u32, x11rb::CURRENT_TIME)
            .unwrap();
        c.conn
            .warp_pointer(x11rb::NONE, c.root, 0, 0, 0, 0, 60, 60)
            .unwrap();
        c.conn.sync().unwrap();
        assert_eq!(windows.active().unwrap().map(|i| i.id), Some(w.into()));
        c.conn
            .warp_pointer(x11rb::NONE, c.root, 0, 0, 0, 0, 600, 10)
            .unwrap();
        c.conn.sync().unwrap();
        assert_eq!(
            windows.active().unwrap(),
            None,
            "pointer over the bare root"
        );

        c.conn
            .set_input_focus(InputFocus::NONE, x11rb::NONE, x11rb::CURRENT_TIME)
            .unwrap();
        c.conn.sync().unwrap();
        assert_eq!(windows.active().unwrap(), None);
    }

    #[test]
    fn follows_net_active_window_and_wm_state() {
        let x = Xvfb::start(640, 480);
        let c = Client::new(&x.display);
        let mut windows = Windows::new(Some(x.display.clone()));
        // A reparenting manager's frame holds the focus; the client inside carries WM_STATE.
        let frame = c.window(c.root, 10, 10, 300, 200);
        let client = c.window(frame, 0, 20, 300, 180);
        c.text(client, AtomEnum::WM_NAME, AtomEnum::STRING, b"client");
        c.words(client, c.atoms.WM_STATE, c.atoms.WM_STATE, &[1, 0]);
        c.focus(frame);
        let info = windows.active().unwrap().unwrap();
        assert_eq!((info.id, info.title.as_str()), (client.into(), "client"));
        assert_eq!(info.bounds, Some(Rect::new(10, 30, 300, 180)));

        // The manager's word wins over the focus.
        let other = c.window(c.root, 400, 300, 50, 50);
        c.words(
            c.root,
            c.atoms._NET_ACTIVE_WINDOW,
            AtomEnum::WINDOW,
            &[other],
        );
        assert_eq!(windows.active().unwrap().map(|i| i.id), Some(other.into()));
        // It says nothing is active.
        c.words(c.root, c.atoms._NET_ACTIVE_WINDOW, AtomEnum::WINDOW, &[0]);
        assert_eq!(windows.active().unwrap(), None);
        // A manager that died left a destroyed window behind: the focus decides.
        c.conn.destroy_window(other).unwrap();
        c.words(
            c.root,
            c.atoms._NET_ACTIVE_WINDOW,
            AtomEnum::WINDOW,
            &[other],
        );
        assert_eq!(windows.active().unwrap().map(|i| i.id), Some(client.into()));
    }

    #[test]
    fn a_window_that_vanished_is_no_window() {
        let x = Xvfb::start(640, 480);
        let c = Client::new(&x.display);
        let w = c.window(c.root, 0, 0, 10, 10);
        c.conn.destroy_window(w).unwrap();
        c.conn.sync().unwrap();
        let session = Session::connect(Some(&x.display)).unwrap();
        assert!(matches!(session.describe(w), Err(Failure::Vanished)));
        assert!(matches!(session.client_of(w), Err(Failure::Vanished)));
        // Through the public call: the stale manager answer is skipped, nothing has focus.
        c.words(c.root, c.atoms._NET_ACTIVE_WINDOW, AtomEnum::WINDOW, &[w]);
        let mut windows = Windows::new(Some(x.display.clone()));
        assert_eq!(windows.active().unwrap(), None);
    }

    #[test]
    fn reports_a_gtk_window_under_openbox() {
        let x = Xvfb::start(800, 600);
        let bus = DbusSession::start(&x.display);
        let envs = bus.envs(&x.display);
        let c = Client::new(&x.display);
        let _wm = openbox(&x.display, &envs);

        let title = "Pincer Zenity ✓";
        let app = App::start(
            &["zenity", "--info", "--text", "hi", "--title", title],
            &envs,
        );
        let mut windows = Windows::new(Some(x.display.clone()));
        let announced = || {
            let reply = c
                .conn
                .get_property(
                    false,
                    c.root,
                    c.atoms._NET_ACTIVE_WINDOW,
                    AtomEnum::WINDOW,
                    0,
                    1,
                )
                .ok()?
                .reply()
                .ok()?;
            reply.value32()?.next()
        };
        // Once openbox names zenity's window as the active one.
        let info = wait_for(Duration::from_secs(20), || {
            let info = windows.active().ok().flatten()?;
            (info.pid == Some(app.pid()) && announced() == Some(info.id as u32)).then_some(info)
        })
        .expect("openbox made zenity the active window");
        assert_eq!(info.title, title);
        assert_eq!(info.process_name.as_deref(), Some("zenity"));
        assert_eq!(info.class.as_deref(), Some("Zenity"));
        assert_eq!(info.instance.as_deref(), Some("zenity"));
        let bounds = info.bounds.unwrap();
        assert!(bounds.width > 50 && bounds.height > 20, "{bounds:?}");
    }

    #[test]
    fn display_loss_is_reported_and_survived() {
        let mut x = FixedXvfb::start(192);
        let mut windows = Windows::new(Some(x.display.clone()));
        assert_eq!(windows.active().unwrap(), None);
        x.kill();
        assert!(matches!(windows.active(), Err(WireError::Display { .. })));
        assert!(matches!(windows.active(), Err(WireError::Display { .. })));
        x.restart();
        let c = Client::new(&x.display);
        let w = c.window(c.root, 1, 2, 30, 40);
        c.focus(w);
        assert_eq!(windows.active().unwrap().map(|i| i.id), Some(w.into()));
    }
}
