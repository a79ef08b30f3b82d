//! Top-level windows: which one is active, which ones exist, and the window-manager
//! operations task setup needs (activate, maximize, restore, minimize, close, move/resize),
//! for the `ActiveWindow` and `Windows` probes and the `Window` setup request.
//!
//! A window manager names the active client in `_NET_ACTIVE_WINDOW` and its clients in
//! `_NET_CLIENT_LIST_STACKING` (or `_NET_CLIENT_LIST`) on the root window; we trust it when
//! it is there. Without one, the active window is where the keyboard goes (the input focus
//! or, under `PointerRoot`, the window under the pointer) and the windows are the mapped
//! children of the root; either is walked to its top-level client, the window that carries
//! `WM_STATE` or else the child of the root.
//!
//! Operations go through the window manager when one runs (EWMH client messages), so that
//! its own idea of the window (frame, maximized state, focus history) stays right; without
//! one they are plain X requests. Each waits, bounded, until its effect shows in the window's
//! state or geometry, so that a screenshot taken right after the reply shows it.
//!
//! Windows are owned by other processes and can vanish between any two of our requests; a
//! vanished window is "no active window" after one more look, left out of a listing, and
//! `NotFound` for an operation, never an internal error. The connection is our own, made on
//! first use, and replaced when the X server goes away (`crate::x11::Lazy`).

use crate::wayland::WindowManager;
use crate::x11::{self, Client, Lazy, lost};
use pincer_guest_core::platform;
use pincer_shared::WireError;
use pincer_shared::observe::Rect;
use pincer_shared::probe::WindowInfo;
use pincer_shared::setup::WindowOp;
use std::time::{Duration, Instant};
use x11rb::connection::Connection as _;
use x11rb::errors::{ConnectionError, ReplyError};
use x11rb::protocol::ErrorKind;
use x11rb::protocol::xproto::{
    self, AtomEnum, ClientMessageEvent, ConfigureWindowAux, ConnectionExt as _, EventMask,
    GetPropertyReply, InputFocus, MapState, PropMode, StackMode, WindowClass,
};
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

x11rb::atom_manager! {
    /// Atoms the window queries and operations use.
    Atoms: AtomsCookie {
        UTF8_STRING,
        WM_CHANGE_STATE,
        WM_DELETE_WINDOW,
        WM_PROTOCOLS,
        WM_STATE,
        _NET_ACTIVE_WINDOW,
        _NET_CLIENT_LIST,
        _NET_CLIENT_LIST_STACKING,
        _NET_CLOSE_WINDOW,
        _NET_FRAME_EXTENTS,
        _NET_MOVERESIZE_WINDOW,
        _NET_SUPPORTED,
        _NET_SUPPORTING_WM_CHECK,
        _NET_WM_ACTION_MAXIMIZE_HORZ,
        _NET_WM_ACTION_MAXIMIZE_VERT,
        _NET_WM_ACTION_MINIMIZE,
        _NET_WM_ALLOWED_ACTIONS,
        _NET_WM_NAME,
        _NET_WM_PID,
        _NET_WM_STATE,
        _NET_WM_STATE_MAXIMIZED_HORZ,
        _NET_WM_STATE_MAXIMIZED_VERT,
        _PINCER_RESTORE_GEOMETRY,
    }
}

/// Longest property value read, in 32-bit units (titles and class names are far shorter).
const MAX_PROPERTY: u32 = 16 * 1024;

/// How long an operation waits for its effect to show before it answers `Timeout`.
const SETTLE_LIMIT: Duration = Duration::from_secs(2);
/// How often an operation looks for its effect.
const SETTLE_POLL: Duration = Duration::from_millis(20);
/// Looks in a row with the same geometry after which a window counts as settled: the window
/// manager and the app may answer a change with more configures of their own.
const STEADY_LOOKS: u32 = 3;

/// ICCCM `WM_STATE` of an iconified (minimized) window.
const ICONIC_STATE: u32 = 3;
/// EWMH source indication of a pager, which window managers obey without applying
/// focus-stealing prevention; task setup acts for the user like one.
const SOURCE_PAGER: u32 = 2;
/// `_NET_WM_STATE` actions.
const STATE_REMOVE: u32 = 0;
const STATE_ADD: u32 = 1;
/// `_NET_MOVERESIZE_WINDOW` flags: north-west gravity (x and y place the frame's top-left
/// corner, as [`WindowOp::Geometry`] means them) and all of x, y, width and height given.
const MOVERESIZE_NORTHWEST_XYWH: u32 = 1 | (0xf << 8);
/// Largest coordinate or size accepted for a window (X11 positions are 16-bit signed).
const MAX_COORDINATE: u32 = i16::MAX as u32;

/// Top-level windows on one X display, or on a Wayland session's window manager when X11
/// refuses its display.
#[derive(Debug)]
pub(crate) struct Windows {
    session: Lazy<Session>,
    /// The Wayland session's window manager, taken for good once X11 refused its display.
    wayland: Option<WindowManager>,
}

impl Windows {
    /// Window queries for `display` (`None`: `$DISPLAY`). Connects on first use.
    pub(crate) fn new(display: Option<String>) -> Self {
        Self {
            session: Lazy::new(display),
            wayland: None,
        }
    }

    /// X11's answer, unless X11 refused a Wayland session's display: then the session's
    /// window manager's, or the refusal saying what is missing.
    fn routed<T>(
        &mut self,
        x11: impl FnOnce(&mut Self) -> Result<T, WireError>,
        wayland: impl FnOnce(&mut WindowManager) -> Result<T, WireError>,
    ) -> Result<T, WireError> {
        if let Some(manager) = &mut self.wayland {
            return wayland(manager);
        }
        match x11(self) {
            Err(WireError::Unsupported { what }) if crate::session::wayland_session() => {
                match WindowManager::find() {
                    Ok(manager) => wayland(self.wayland.insert(manager)),
                    Err(missing) => Err(WireError::Unsupported {
                        what: format!(
                            "{what}. On Wayland, pincer-agent manages windows through sway's \
                             IPC or pincer's GNOME Shell extension, and {missing}"
                        ),
                    }),
                }
            }
            other => other,
        }
    }
}

impl platform::Windows for Windows {
    /// The focused top-level window: `_NET_ACTIVE_WINDOW` when a window manager sets it,
    /// else the input focus walked up to its top-level client (the child of root / the
    /// window with `WM_STATE`).
    fn active(&mut self) -> Result<Option<WindowInfo>, WireError> {
        self.routed(Self::x11_active, WindowManager::active)
    }

    /// Every top-level client window, bottom to top: the window manager's clients when one
    /// runs (minimized ones included), else the mapped children of the root.
    fn list(&mut self) -> Result<Vec<WindowInfo>, WireError> {
        self.routed(Self::x11_list, WindowManager::list)
    }

    /// Applies `op` to the top-level window `id` and waits (at most two seconds) until the
    /// change shows. `NotFound` for an id that is not a top-level window (any more),
    /// `InvalidArgument` for a geometry no screen can show, `Unsupported` for what the
    /// window manager does not allow on this window, `Timeout` when the change does not
    /// show in time (an app that asks whether to save keeps its window open).
    fn apply(&mut self, id: u64, op: WindowOp) -> Result<(), WireError> {
        self.routed(|w| w.x11_apply(id, op), |m| m.apply(id, op))
    }
}

impl Windows {
    fn x11_active(&mut self) -> Result<Option<WindowInfo>, WireError> {
        self.session.with(|session| {
            // The active window can change while we look; a window that vanished mid-query
            // gets one more look at whatever is active now.
            let mut result = session.active();
            if matches!(result, Err(Failure::Vanished)) {
                result = session.active();
            }
            match result {
                Ok(found) => Ok(found),
                Err(Failure::Vanished) => Ok(None),
                Err(Failure::Wire(e)) => Err(e),
            }
        })
    }

    fn x11_list(&mut self) -> Result<Vec<WindowInfo>, WireError> {
        self.session.with(|session| {
            session.list().map_err(|e| match e {
                // Windows that vanish are left out one by one; nothing else can vanish.
                Failure::Vanished => WireError::Internal {
                    message: "a window vanished while listing windows".into(),
                },
                Failure::Wire(e) => e,
            })
        })
    }

    fn x11_apply(&mut self, id: u64, op: WindowOp) -> Result<(), WireError> {
        let not_found = || WireError::NotFound {
            path: format!("window {id:#x}"),
        };
        // X window ids are 32 bits; anything bigger names no window.
        let Ok(window) = xproto::Window::try_from(id) else {
            return Err(not_found());
        };
        self.session.with(|session| {
            session.apply(window, op).map_err(|e| match e {
                Failure::Vanished => not_found(),
                Failure::Wire(e) => e,
            })
        })
    }
}

/// Why a lookup or operation stopped.
enum Failure {
    /// A window we asked about no longer exists, or is not a top-level window.
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
            e => Self::Wire(x11::refused(e, "a window request", |message| {
                WireError::Internal { message }
            })),
        }
    }
}

impl From<WireError> for Failure {
    fn from(e: WireError) -> Self {
        Self::Wire(e)
    }
}

/// `Ok(None)` for a window that vanished: the caller skips it.
fn unless_vanished<T>(result: Result<T, Failure>) -> Result<Option<T>, Failure> {
    match result {
        Ok(v) => Ok(Some(v)),
        Err(Failure::Vanished) => Ok(None),
        Err(e) => Err(e),
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

/// A running EWMH window manager.
struct Manager {
    /// The hints it implements (`_NET_SUPPORTED`): each operation uses the manager's way
    /// only when it is listed here.
    supported: Vec<xproto::Atom>,
}

impl Manager {
    fn supports(&self, atoms: &[xproto::Atom]) -> bool {
        atoms.iter().all(|a| self.supported.contains(a))
    }
}

/// One look at a window, by which an operation judges whether its effect shows.
#[derive(Debug, Clone, Copy)]
struct Look {
    /// ICCCM `WM_STATE` (1 normal, 3 iconic), set by a window manager.
    wm_state: Option<u32>,
    /// `_NET_WM_STATE` holds `_NET_WM_STATE_MAXIMIZED_HORZ`.
    maximized_horz: bool,
    /// `_NET_WM_STATE` holds `_NET_WM_STATE_MAXIMIZED_VERT`.
    maximized_vert: bool,
    /// Mapped, and whether an ancestor hides it.
    map_state: MapState,
    /// The window's inside on screen, as the probes report it.
    bounds: Rect,
    /// Its X border width, which a window manager's frame replaces but a bare window keeps.
    border: u32,
}

impl Look {
    fn mapped(&self) -> bool {
        self.map_state != MapState::UNMAPPED
    }

    /// Mapped with all its ancestors: what can be seen and take the focus.
    fn viewable(&self) -> bool {
        self.map_state == MapState::VIEWABLE
    }

    fn iconic(&self) -> bool {
        self.wm_state == Some(ICONIC_STATE)
    }

    /// The window's bounds with its own X border.
    fn outer(&self) -> Rect {
        grow(self.bounds, Extents::uniform(self.border))
    }
}

/// What surrounds a window's inside on each side: a window manager's frame
/// (`_NET_FRAME_EXTENTS`) or the window's own X border.
#[derive(Debug, Clone, Copy)]
struct Extents {
    left: u32,
    right: u32,
    top: u32,
    bottom: u32,
}

impl Extents {
    fn uniform(width: u32) -> Self {
        Self {
            left: width,
            right: width,
            top: width,
            bottom: width,
        }
    }
}

/// `inside` with `extents` around it.
fn grow(inside: Rect, e: Extents) -> Rect {
    Rect::new(
        inside.x.saturating_sub_unsigned(e.left),
        inside.y.saturating_sub_unsigned(e.top),
        inside.width.saturating_add(e.left + e.right),
        inside.height.saturating_add(e.top + e.bottom),
    )
}

/// The inside of `outer` once `extents` are taken off; `None` when nothing is left.
fn shrink(outer: Rect, e: Extents) -> Option<Rect> {
    let width = outer.width.checked_sub(e.left + e.right)?;
    let height = outer.height.checked_sub(e.top + e.bottom)?;
    (width > 0 && height > 0).then(|| {
        Rect::new(
            outer.x.saturating_add_unsigned(e.left),
            outer.y.saturating_add_unsigned(e.top),
            width,
            height,
        )
    })
}

/// Counts looks in a row at the same geometry.
#[derive(Default)]
struct Steady {
    last: Option<Rect>,
    same: u32,
}

impl Steady {
    /// Records `bounds`; true once they have not changed for [`STEADY_LOOKS`] looks.
    fn settled(&mut self, bounds: Rect) -> bool {
        if self.last == Some(bounds) {
            self.same += 1;
        } else {
            self.last = Some(bounds);
            self.same = 1;
        }
        self.same >= STEADY_LOOKS
    }
}

/// One connection to the X server.
struct Session {
    conn: RustConnection,
    root: xproto::Window,
    atoms: Atoms,
}

impl Client for Session {
    fn connect(display: Option<&str>) -> Result<Self, WireError> {
        let (conn, screen) = x11::connect_desktop(display, "window management")?;
        let root = screen.root;
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

    /// Our connection reads no events, so anything readable is an error report or the end
    /// of the stream.
    fn alive(&mut self) -> bool {
        self.conn.poll_for_event().is_ok()
    }
}

impl Session {
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

    /// The 32-bit values of a property of type `kind`; `None` when it is not set (or has
    /// another type).
    fn words(
        &self,
        window: xproto::Window,
        property: xproto::Atom,
        kind: impl Into<xproto::Atom>,
    ) -> Result<Option<Vec<u32>>, Failure> {
        let reply = self
            .conn
            .get_property(false, window, property, kind, 0, MAX_PROPERTY)?
            .reply()?;
        Ok(reply.value32().map(Iterator::collect))
    }

    /// The EWMH window manager that runs now, if any. A manager that died leaves its root
    /// window properties behind but takes its check window with it, which is how we tell.
    fn manager(&self) -> Result<Option<Manager>, Failure> {
        let check = self.atoms._NET_SUPPORTING_WM_CHECK;
        let Some(&[child]) = self.words(self.root, check, AtomEnum::WINDOW)?.as_deref() else {
            return Ok(None);
        };
        match unless_vanished(self.words(child, check, AtomEnum::WINDOW))? {
            Some(Some(v)) if v == [child] => {}
            _ => return Ok(None),
        }
        let supported = self
            .words(self.root, self.atoms._NET_SUPPORTED, AtomEnum::ATOM)?
            .unwrap_or_default();
        Ok(Some(Manager { supported }))
    }

    /// The window manager's clients, bottom to top when it publishes the stacking order
    /// (else in the order they were mapped); `None` when it publishes neither list.
    fn managed_clients(&self) -> Result<Option<Vec<xproto::Window>>, Failure> {
        let a = &self.atoms;
        for list in [a._NET_CLIENT_LIST_STACKING, a._NET_CLIENT_LIST] {
            if let Some(clients) = self.words(self.root, list, AtomEnum::WINDOW)? {
                return Ok(Some(clients));
            }
        }
        Ok(None)
    }

    /// Without a window manager: the mapped children of the root, bottom to top (the order
    /// the server keeps them in), each resolved to its client. Override-redirect windows
    /// (menus, tooltips) and input-only ones are not windows a user arranges.
    fn mapped_clients(&self) -> Result<Vec<xproto::Window>, Failure> {
        let children = self.conn.query_tree(self.root)?.reply()?.children;
        let cookies = children
            .iter()
            .map(|&w| self.conn.get_window_attributes(w))
            .collect::<Result<Vec<_>, _>>()?;
        let mut clients = Vec::new();
        for (&window, cookie) in children.iter().zip(cookies) {
            let Some(attributes) = unless_vanished(cookie.reply().map_err(Failure::from))? else {
                continue;
            };
            if attributes.map_state == MapState::UNMAPPED
                || attributes.override_redirect
                || attributes.class != WindowClass::INPUT_OUTPUT
            {
                continue;
            }
            if let Some(client) = unless_vanished(self.client_of(window))? {
                clients.push(client);
            }
        }
        Ok(clients)
    }

    fn list(&self) -> Result<Vec<WindowInfo>, Failure> {
        let managed = match self.manager()? {
            Some(_) => self.managed_clients()?,
            None => None,
        };
        let ids = match managed {
            Some(ids) => ids,
            None => self.mapped_clients()?,
        };
        let mut infos = Vec::with_capacity(ids.len());
        for id in ids {
            infos.extend(unless_vanished(self.describe(id))?);
        }
        Ok(infos)
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

    /// Refuses a window that is not a top-level client as `Vanished`: operating on a frame,
    /// a menu or the root would fight the window manager or hit the wrong thing. With a
    /// window manager that lists its clients, the window must be one of them; otherwise a
    /// child of the root that is not override-redirect, mapped or not (a window minimized
    /// without a window manager is unmapped), or a window carrying `WM_STATE`.
    fn check_client(
        &self,
        window: xproto::Window,
        manager: Option<&Manager>,
    ) -> Result<(), Failure> {
        if manager.is_some()
            && let Some(clients) = self.managed_clients()?
        {
            return if clients.contains(&window) {
                Ok(())
            } else {
                Err(Failure::Vanished)
            };
        }
        let tree = self.conn.query_tree(window)?;
        let attributes = self.conn.get_window_attributes(window)?;
        let top_level = tree.reply()?.parent == self.root;
        let attributes = attributes.reply()?;
        if attributes.override_redirect || attributes.class != WindowClass::INPUT_OUTPUT {
            return Err(Failure::Vanished);
        }
        if top_level || self.has_wm_state(window)? {
            Ok(())
        } else {
            Err(Failure::Vanished)
        }
    }

    fn apply(&self, window: xproto::Window, op: WindowOp) -> Result<(), Failure> {
        // One deadline for the whole operation, however many steps it takes.
        let until = Instant::now() + SETTLE_LIMIT;
        let manager = self.manager()?;
        let manager = manager.as_ref();
        self.check_client(window, manager)?;
        if manager.is_some() {
            // A manager lists a window before it has framed and shown it; until it sets
            // WM_STATE its frame extents and geometry are not final.
            self.wait(window, until, |look| Ok(look.wm_state.is_some()))?;
        }
        match op {
            WindowOp::Activate => self.activate(window, manager, until),
            WindowOp::Maximize => self.maximize(window, manager, until),
            WindowOp::Restore => self.restore(window, manager, until),
            WindowOp::Minimize => self.minimize(window, manager, until),
            WindowOp::Close => self.close(window, manager, until),
            WindowOp::Geometry(rect) => self.move_resize(window, rect, manager, until),
        }
    }

    /// The window's state and geometry, in one round trip.
    fn look(&self, window: xproto::Window) -> Result<Look, Failure> {
        let a = &self.atoms;
        let wm_state = self
            .conn
            .get_property(false, window, a.WM_STATE, a.WM_STATE, 0, 1)?;
        let net_state = self.conn.get_property(
            false,
            window,
            a._NET_WM_STATE,
            AtomEnum::ATOM,
            0,
            MAX_PROPERTY,
        )?;
        let attributes = self.conn.get_window_attributes(window)?;
        let geometry = self.conn.get_geometry(window)?;
        let origin = self.conn.translate_coordinates(window, self.root, 0, 0)?;
        let wm_state = wm_state.reply()?.value32().and_then(|mut v| v.next());
        let net_state: Vec<u32> = net_state
            .reply()?
            .value32()
            .map(Iterator::collect)
            .unwrap_or_default();
        let map_state = attributes.reply()?.map_state;
        let geometry = geometry.reply()?;
        let origin = origin.reply()?;
        Ok(Look {
            wm_state,
            maximized_horz: net_state.contains(&a._NET_WM_STATE_MAXIMIZED_HORZ),
            maximized_vert: net_state.contains(&a._NET_WM_STATE_MAXIMIZED_VERT),
            map_state,
            bounds: Rect::new(
                origin.dst_x.into(),
                origin.dst_y.into(),
                geometry.width.into(),
                geometry.height.into(),
            ),
            border: geometry.border_width.into(),
        })
    }

    /// Looks at `window` until `visible` says the change shows, or answers `Timeout` at
    /// `until`.
    fn wait(
        &self,
        window: xproto::Window,
        until: Instant,
        mut visible: impl FnMut(&Look) -> Result<bool, Failure>,
    ) -> Result<(), Failure> {
        loop {
            if visible(&self.look(window)?)? {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(Failure::Wire(WireError::Timeout {
                    after_ms: SETTLE_LIMIT.as_millis() as u64,
                }));
            }
            std::thread::sleep(SETTLE_POLL);
        }
    }

    /// The root window's rectangle: the screen.
    fn screen(&self) -> Result<Rect, Failure> {
        let g = self.conn.get_geometry(self.root)?.reply()?;
        Ok(Rect::new(0, 0, g.width.into(), g.height.into()))
    }

    /// Sends an EWMH or ICCCM request about `window` to the window manager, which listens
    /// on the root window.
    fn tell_manager(
        &self,
        window: xproto::Window,
        message: xproto::Atom,
        data: [u32; 5],
    ) -> Result<(), Failure> {
        let event = ClientMessageEvent::new(32, window, message, data);
        self.conn
            .send_event(
                false,
                self.root,
                EventMask::SUBSTRUCTURE_REDIRECT | EventMask::SUBSTRUCTURE_NOTIFY,
                event,
            )?
            .check()?;
        Ok(())
    }

    /// Asks the window manager to add or remove both maximized states.
    fn set_maximized(&self, window: xproto::Window, action: u32) -> Result<(), Failure> {
        let a = &self.atoms;
        self.tell_manager(
            window,
            a._NET_WM_STATE,
            [
                action,
                a._NET_WM_STATE_MAXIMIZED_VERT,
                a._NET_WM_STATE_MAXIMIZED_HORZ,
                SOURCE_PAGER,
                0,
            ],
        )
    }

    /// Whether the manager does maximizing through `_NET_WM_STATE`.
    fn manages_maximize(&self, manager: Option<&Manager>) -> bool {
        let a = &self.atoms;
        manager.is_some_and(|m| {
            m.supports(&[
                a._NET_WM_STATE,
                a._NET_WM_STATE_MAXIMIZED_VERT,
                a._NET_WM_STATE_MAXIMIZED_HORZ,
            ])
        })
    }

    /// Refuses an operation the window manager does not offer for this window (a fixed-size
    /// dialog cannot be maximized) instead of waiting for a change that will not come.
    fn check_allowed(
        &self,
        window: xproto::Window,
        actions: &[xproto::Atom],
        what: &str,
    ) -> Result<(), Failure> {
        let allowed = self.words(window, self.atoms._NET_WM_ALLOWED_ACTIONS, AtomEnum::ATOM)?;
        match allowed {
            Some(allowed) if !actions.iter().all(|a| allowed.contains(a)) => {
                Err(Failure::Wire(WireError::Unsupported {
                    what: format!(
                        "{what} window {window:#x}: the window manager does not allow it \
                         (is the window fixed-size?)"
                    ),
                }))
            }
            // A manager that does not say allows everything.
            _ => Ok(()),
        }
    }

    /// Maps an unmapped window: shows it without a window manager, and asks one to
    /// de-iconify it (ICCCM: a client leaves the iconic state by mapping its window).
    fn map_if_hidden(&self, window: xproto::Window, look: &Look) -> Result<(), Failure> {
        if !look.mapped() || look.iconic() {
            self.conn.map_window(window)?.check()?;
        }
        Ok(())
    }

    /// Moves and resizes `window` so that its outer edge (with its X border) is `outer`,
    /// in root coordinates, straight through the X server.
    fn configure_outer(
        &self,
        window: xproto::Window,
        outer: Rect,
        look: &Look,
    ) -> Result<(), Failure> {
        // Positions are relative to the parent, which without a window manager is the root
        // but can be a frame a dead manager left behind.
        let parent = self.conn.query_tree(window)?.reply()?.parent;
        let origin = self
            .conn
            .translate_coordinates(parent, self.root, 0, 0)?
            .reply()?;
        let Some(inside) = shrink(outer, Extents::uniform(look.border)) else {
            return Err(too_small(outer));
        };
        let aux = ConfigureWindowAux::new()
            .x(outer.x - i32::from(origin.dst_x))
            .y(outer.y - i32::from(origin.dst_y))
            .width(inside.width)
            .height(inside.height)
            .stack_mode(StackMode::ABOVE);
        self.conn.configure_window(window, &aux)?.check()?;
        Ok(())
    }

    fn activate(
        &self,
        window: xproto::Window,
        manager: Option<&Manager>,
        until: Instant,
    ) -> Result<(), Failure> {
        let a = &self.atoms;
        if manager.is_some_and(|m| m.supports(&[a._NET_ACTIVE_WINDOW])) {
            // The manager raises, de-iconifies, switches desktops and focuses as it does for
            // a click on a task bar; timestamp 0 is "now".
            self.tell_manager(
                window,
                a._NET_ACTIVE_WINDOW,
                [SOURCE_PAGER, x11rb::CURRENT_TIME, 0, 0, 0],
            )?;
            return self.wait(window, until, |_| {
                Ok(matches!(self.announced()?, Announced::Window(w) if w == window))
            });
        }
        self.map_if_hidden(window, &self.look(window)?)?;
        let raise = ConfigureWindowAux::new().stack_mode(StackMode::ABOVE);
        self.conn.configure_window(window, &raise)?.check()?;
        // Focus can only go to a viewable window; a manager we do not know of may take a
        // moment to map it.
        self.wait(window, until, |look| Ok(look.viewable()))?;
        self.conn
            .set_input_focus(InputFocus::PARENT, window, x11rb::CURRENT_TIME)?
            .check()?;
        self.wait(
            window,
            until,
            |_| Ok(self.focused_client()? == Some(window)),
        )
    }

    fn maximize(
        &self,
        window: xproto::Window,
        manager: Option<&Manager>,
        until: Instant,
    ) -> Result<(), Failure> {
        let a = &self.atoms;
        let look = self.look(window)?;
        if self.manages_maximize(manager) {
            self.check_allowed(
                window,
                &[
                    a._NET_WM_ACTION_MAXIMIZE_HORZ,
                    a._NET_WM_ACTION_MAXIMIZE_VERT,
                ],
                "maximizing",
            )?;
            // A minimized window maximized stays hidden under some managers; the caller
            // wants to see it.
            self.map_if_hidden(window, &look)?;
            self.set_maximized(window, STATE_ADD)?;
            let mut steady = Steady::default();
            return self.wait(window, until, |look| {
                Ok(look.maximized_horz
                    && look.maximized_vert
                    && !look.iconic()
                    && steady.settled(look.bounds))
            });
        }
        // Without a manager nobody remembers the size to restore; the window keeps it.
        let screen = self.screen()?;
        if look.outer() != screen {
            let saved = look.outer();
            self.conn
                .change_property32(
                    PropMode::REPLACE,
                    window,
                    a._PINCER_RESTORE_GEOMETRY,
                    AtomEnum::INTEGER,
                    &[saved.x as u32, saved.y as u32, saved.width, saved.height],
                )?
                .check()?;
        }
        self.map_if_hidden(window, &look)?;
        self.configure_outer(window, screen, &look)?;
        self.wait(window, until, |look| {
            Ok(look.viewable() && look.outer() == screen)
        })
    }

    fn restore(
        &self,
        window: xproto::Window,
        manager: Option<&Manager>,
        until: Instant,
    ) -> Result<(), Failure> {
        let look = self.look(window)?;
        if self.manages_maximize(manager) {
            self.map_if_hidden(window, &look)?;
            if look.maximized_horz || look.maximized_vert {
                self.set_maximized(window, STATE_REMOVE)?;
            }
            let mut steady = Steady::default();
            return self.wait(window, until, |look| {
                Ok(!look.maximized_horz
                    && !look.maximized_vert
                    && !look.iconic()
                    && steady.settled(look.bounds))
            });
        }
        let property = self.atoms._PINCER_RESTORE_GEOMETRY;
        let screen = self.screen()?;
        // Any client can write the property: a size no screen can show is not restored.
        let saved = match self.words(window, property, AtomEnum::INTEGER)?.as_deref() {
            Some(&[x, y, width, height]) => Some(Rect::new(x as i32, y as i32, width, height))
                .filter(|saved| check_geometry(*saved, screen).is_ok()),
            _ => None,
        };
        self.map_if_hidden(window, &look)?;
        if let Some(saved) = saved {
            self.configure_outer(window, saved, &look)?;
            self.conn.delete_property(window, property)?.check()?;
        }
        self.wait(window, until, |look| {
            Ok(look.viewable() && saved.is_none_or(|saved| look.outer() == saved))
        })
    }

    fn minimize(
        &self,
        window: xproto::Window,
        manager: Option<&Manager>,
        until: Instant,
    ) -> Result<(), Failure> {
        if manager.is_some() {
            self.check_allowed(window, &[self.atoms._NET_WM_ACTION_MINIMIZE], "minimizing")?;
            // ICCCM's iconify request; every manager knows it.
            self.tell_manager(
                window,
                self.atoms.WM_CHANGE_STATE,
                [ICONIC_STATE, 0, 0, 0, 0],
            )?;
            return self.wait(window, until, |look| Ok(look.iconic()));
        }
        // Without a manager there are no icons: hidden is as minimized as it gets.
        self.conn.unmap_window(window)?.check()?;
        self.wait(window, until, |look| Ok(!look.mapped()))
    }

    /// Asks the window to close the way a title bar's close button does; the window is
    /// closed once it is destroyed or withdrawn.
    fn close(
        &self,
        window: xproto::Window,
        manager: Option<&Manager>,
        until: Instant,
    ) -> Result<(), Failure> {
        let a = &self.atoms;
        // "Withdrawn" is leaving the manager's client list, or being unmapped without one.
        let clients = |manager: Option<&Manager>| -> Result<Option<Vec<u32>>, Failure> {
            match manager {
                Some(_) => self.managed_clients(),
                None => Ok(None),
            }
        };
        let shown = |look: &Look| -> Result<bool, Failure> {
            Ok(match clients(manager)? {
                Some(clients) => clients.contains(&window),
                None => look.mapped(),
            })
        };
        let shown_before = shown(&self.look(window)?)?;
        if manager.is_some_and(|m| m.supports(&[a._NET_CLOSE_WINDOW])) {
            self.tell_manager(
                window,
                a._NET_CLOSE_WINDOW,
                [x11rb::CURRENT_TIME, SOURCE_PAGER, 0, 0, 0],
            )?;
        } else if self
            .words(window, a.WM_PROTOCOLS, AtomEnum::ATOM)?
            .is_some_and(|p| p.contains(&a.WM_DELETE_WINDOW))
        {
            let event = ClientMessageEvent::new(
                32,
                window,
                a.WM_PROTOCOLS,
                [a.WM_DELETE_WINDOW, x11rb::CURRENT_TIME, 0, 0, 0],
            );
            self.conn
                .send_event(false, window, EventMask::NO_EVENT, event)?
                .check()?;
        } else {
            // A window that cannot be asked is closed the way window managers close it:
            // by disconnecting the client that owns it.
            self.conn.kill_client(window)?.check()?;
        }
        let closed = self.wait(window, until, |look| Ok(shown_before && !shown(look)?));
        match closed {
            // Gone entirely: that is closed too.
            Err(Failure::Vanished) => Ok(()),
            other => other,
        }
    }

    fn move_resize(
        &self,
        window: xproto::Window,
        outer: Rect,
        manager: Option<&Manager>,
        until: Instant,
    ) -> Result<(), Failure> {
        check_geometry(outer, self.screen()?)?;
        let a = &self.atoms;
        let mut look = self.look(window)?;
        let start = look.bounds;
        let Some(manager) = manager else {
            let Some(expected) = shrink(outer, Extents::uniform(look.border)) else {
                return Err(too_small(outer));
            };
            // A window moved by hand is no longer maximized: nothing to restore.
            self.conn
                .delete_property(window, a._PINCER_RESTORE_GEOMETRY)?
                .check()?;
            self.configure_outer(window, outer, &look)?;
            return self.wait_for_bounds(window, expected, start, until);
        };
        if (look.maximized_horz || look.maximized_vert) && self.manages_maximize(Some(manager)) {
            // Managers ignore sizes for maximized windows, and frame them differently: the
            // frame extents are only final once the manager is done un-maximizing, which
            // it does in several steps.
            self.set_maximized(window, STATE_REMOVE)?;
            let mut steady = Steady::default();
            self.wait(window, until, |l| {
                look = *l;
                Ok(!l.maximized_horz && !l.maximized_vert && steady.settled(l.bounds))
            })?;
        }
        let frame = match self
            .words(window, a._NET_FRAME_EXTENTS, AtomEnum::CARDINAL)?
            .as_deref()
        {
            Some(&[left, right, top, bottom]) => Extents {
                left,
                right,
                top,
                bottom,
            },
            _ => Extents::uniform(look.border),
        };
        let Some(expected) = shrink(outer, frame) else {
            return Err(too_small(outer));
        };
        if manager.supports(&[a._NET_MOVERESIZE_WINDOW]) {
            self.tell_manager(
                window,
                a._NET_MOVERESIZE_WINDOW,
                [
                    MOVERESIZE_NORTHWEST_XYWH | (SOURCE_PAGER << 12),
                    outer.x as u32,
                    outer.y as u32,
                    expected.width,
                    expected.height,
                ],
            )?;
        } else {
            // ICCCM: a client's configure request places its frame's top-left corner at
            // x, y (north-west gravity) and sizes its inside; the manager carries it out.
            let aux = ConfigureWindowAux::new()
                .x(outer.x)
                .y(outer.y)
                .width(expected.width)
                .height(expected.height);
            self.conn.configure_window(window, &aux)?.check()?;
        }
        self.wait_for_bounds(window, expected, start, until)
    }

    /// Waits until the window has `expected` bounds, or has moved from `start` and come to
    /// rest elsewhere: managers and apps may round a size (size increments, minimum sizes,
    /// keeping a window on screen), and that is still the change that was asked for.
    fn wait_for_bounds(
        &self,
        window: xproto::Window,
        expected: Rect,
        start: Rect,
        until: Instant,
    ) -> Result<(), Failure> {
        let mut steady = Steady::default();
        self.wait(window, until, |look| {
            Ok(look.bounds == expected || (look.bounds != start && steady.settled(look.bounds)))
        })
    }
}

/// Refuses a rectangle no window can take: empty, beyond X11's 16-bit coordinates, or with
/// no part on the screen (a window there is lost to the user).
fn check_geometry(outer: Rect, screen: Rect) -> Result<(), WireError> {
    let invalid = |why: &str| WireError::InvalidArgument {
        message: format!(
            "window geometry {}x{}{:+}{:+} {why}",
            outer.width, outer.height, outer.x, outer.y
        ),
    };
    if outer.width == 0 || outer.height == 0 {
        return Err(invalid("is empty"));
    }
    if outer.width > MAX_COORDINATE
        || outer.height > MAX_COORDINATE
        || outer.x.unsigned_abs() > MAX_COORDINATE
        || outer.y.unsigned_abs() > MAX_COORDINATE
    {
        return Err(invalid(&format!(
            "is beyond X11's limit of {MAX_COORDINATE} pixels"
        )));
    }
    if outer.intersect(&screen).is_none() {
        return Err(invalid(&format!(
            "lies off the {}x{} screen",
            screen.width, screen.height
        )));
    }
    Ok(())
}

fn too_small(outer: Rect) -> Failure {
    Failure::Wire(WireError::InvalidArgument {
        message: format!(
            "window geometry {}x{} leaves no room inside the window's frame",
            outer.width, outer.height
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{App, DbusSession, FixedXvfb, Openbox, Xvfb, openbox, wait_for};
    use crate::x11::Client as _;
    use pincer_guest_core::platform::Windows as _;
    use x11rb::COPY_DEPTH_FROM_PARENT;
    use x11rb::protocol::Event;
    use x11rb::protocol::xproto::CreateWindowAux;

    /// A plain X client that makes windows the way applications do, and checks what
    /// operations did with its own requests (not through the code under test).
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

        /// An unmapped window.
        fn create(
            &self,
            parent: xproto::Window,
            (x, y, w, h): (i16, i16, u16, u16),
            class: WindowClass,
            aux: &CreateWindowAux,
        ) -> xproto::Window {
            let window = self.conn.generate_id().unwrap();
            let depth = if class == WindowClass::INPUT_ONLY {
                0
            } else {
                COPY_DEPTH_FROM_PARENT
            };
            self.conn
                .create_window(depth, window, parent, x, y, w, h, 0, class, 0, aux)
                .unwrap();
            self.conn.sync().unwrap();
            window
        }

        fn window(&self, parent: xproto::Window, x: i16, y: i16, w: u16, h: u16) -> xproto::Window {
            let window = self.create(
                parent,
                (x, y, w, h),
                WindowClass::INPUT_OUTPUT,
                &CreateWindowAux::new(),
            );
            self.conn.map_window(window).unwrap();
            self.conn.sync().unwrap();
            window
        }

        /// A mapped top-level window with a title, our pid and a class, as apps make them.
        fn app_window(&self, title: &str, x: i16, y: i16, w: u16, h: u16) -> xproto::Window {
            let window = self.create(
                self.root,
                (x, y, w, h),
                WindowClass::INPUT_OUTPUT,
                &CreateWindowAux::new(),
            );
            let a = &self.atoms;
            self.text(window, a._NET_WM_NAME, a.UTF8_STRING, title.as_bytes());
            self.words(
                window,
                a._NET_WM_PID,
                AtomEnum::CARDINAL,
                &[std::process::id()],
            );
            self.text(
                window,
                AtomEnum::WM_CLASS,
                AtomEnum::STRING,
                b"pincer-test\0PincerTest\0",
            );
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

        /// A 32-bit property as it is now (empty when unset).
        fn read(&self, window: xproto::Window, name: u32) -> Vec<u32> {
            let reply = self
                .conn
                .get_property(false, window, name, AtomEnum::ANY, 0, 1024)
                .unwrap()
                .reply()
                .unwrap();
            reply.value32().map(Iterator::collect).unwrap_or_default()
        }

        fn focus(&self, focus: xproto::Window) {
            self.conn
                .set_input_focus(InputFocus::PARENT, focus, x11rb::CURRENT_TIME)
                .unwrap();
            self.conn.sync().unwrap();
        }

        /// The window's inside on screen.
        fn bounds(&self, window: xproto::Window) -> Rect {
            let g = self.conn.get_geometry(window).unwrap().reply().unwrap();
            let o = self
                .conn
                .translate_coordinates(window, self.root, 0, 0)
                .unwrap()
                .reply()
                .unwrap();
            Rect::new(
                o.dst_x.into(),
                o.dst_y.into(),
                g.width.into(),
                g.height.into(),
            )
        }

        /// The window with its window-manager frame around it.
        fn frame(&self, window: xproto::Window) -> Rect {
            let Ok([left, right, top, bottom]) =
                <[u32; 4]>::try_from(self.read(window, self.atoms._NET_FRAME_EXTENTS))
            else {
                panic!("the window manager publishes no frame extents");
            };
            grow(
                self.bounds(window),
                Extents {
                    left,
                    right,
                    top,
                    bottom,
                },
            )
        }

        /// The first desktop's work area, as the window manager publishes it.
        fn work_area(&self) -> Rect {
            let atom = self.conn.intern_atom(false, b"_NET_WORKAREA").unwrap();
            let area = self.read(self.root, atom.reply().unwrap().atom);
            Rect::new(area[0] as i32, area[1] as i32, area[2], area[3])
        }

        fn mapped(&self, window: xproto::Window) -> bool {
            let a = self.conn.get_window_attributes(window).unwrap();
            a.reply().unwrap().map_state != MapState::UNMAPPED
        }

        fn maximized(&self, window: xproto::Window) -> (bool, bool) {
            let state = self.read(window, self.atoms._NET_WM_STATE);
            (
                state.contains(&self.atoms._NET_WM_STATE_MAXIMIZED_HORZ),
                state.contains(&self.atoms._NET_WM_STATE_MAXIMIZED_VERT),
            )
        }

        fn wm_state(&self, window: xproto::Window) -> Option<u32> {
            self.read(window, self.atoms.WM_STATE).first().copied()
        }

        /// The window the X server sends keys to.
        fn focused(&self) -> xproto::Window {
            self.conn.get_input_focus().unwrap().reply().unwrap().focus
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
        assert!(matches!(windows.list(), Err(WireError::Display { .. })));
        assert!(matches!(
            windows.apply(1, WindowOp::Activate),
            Err(WireError::Display { .. })
        ));
        x.restart();
        let c = Client::new(&x.display);
        let w = c.window(c.root, 1, 2, 30, 40);
        c.focus(w);
        assert_eq!(windows.active().unwrap().map(|i| i.id), Some(w.into()));
        assert_eq!(ids(&windows.list().unwrap()), [u64::from(w)]);
    }

    /// Ids as the probe reports them.
    fn ids(list: &[WindowInfo]) -> Vec<u64> {
        list.iter().map(|w| w.id).collect()
    }

    /// The listed window `pick` chooses, once it is there.
    fn listed(windows: &mut Windows, pick: impl Fn(&WindowInfo) -> bool) -> WindowInfo {
        let mut last = Ok(Vec::new());
        wait_for(Duration::from_secs(20), || {
            last = windows.list();
            last.as_ref().ok()?.iter().find(|w| pick(w)).cloned()
        })
        .unwrap_or_else(|| panic!("the window is not listed; the last listing: {last:?}"))
    }

    fn not_found(id: u64) -> Result<(), WireError> {
        Err(WireError::NotFound {
            path: format!("window {id:#x}"),
        })
    }

    #[test]
    fn lists_mapped_top_level_windows_without_a_window_manager() {
        let x = Xvfb::start(640, 480);
        let c = Client::new(&x.display);
        let mut windows = Windows::new(Some(x.display.clone()));
        assert_eq!(windows.list().unwrap(), vec![]);

        let a = c.app_window("A — first", 10, 20, 200, 100);
        let _child = c.window(a, 5, 5, 20, 20);
        // A frame a dead window manager left behind, its client inside.
        let frame = c.window(c.root, 300, 50, 200, 150);
        let framed = c.window(frame, 0, 20, 200, 130);
        c.text(framed, AtomEnum::WM_NAME, AtomEnum::STRING, b"framed");
        c.words(framed, c.atoms.WM_STATE, c.atoms.WM_STATE, &[1, 0]);
        let b = c.app_window("B", 50, 60, 100, 100);
        // Not windows a user arranges: unmapped, a menu, an input-only helper.
        c.create(
            c.root,
            (0, 0, 50, 50),
            WindowClass::INPUT_OUTPUT,
            &CreateWindowAux::new(),
        );
        let menu = c.create(
            c.root,
            (0, 0, 50, 50),
            WindowClass::INPUT_OUTPUT,
            &CreateWindowAux::new().override_redirect(1),
        );
        let helper = c.create(
            c.root,
            (0, 0, 50, 50),
            WindowClass::INPUT_ONLY,
            &CreateWindowAux::new(),
        );
        c.conn.map_window(menu).unwrap();
        c.conn.map_window(helper).unwrap();
        c.conn.sync().unwrap();

        let list = windows.list().unwrap();
        assert_eq!(ids(&list), [a, framed, b].map(u64::from), "bottom to top");
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        assert_eq!(
            list[0],
            WindowInfo {
                id: a.into(),
                title: "A — first".into(),
                pid: Some(std::process::id()),
                process_name: Some(comm.trim_end().into()),
                class: Some("PincerTest".into()),
                instance: Some("pincer-test".into()),
                bounds: Some(Rect::new(10, 20, 200, 100)),
            }
        );
        assert_eq!(list[1].title, "framed");
        assert_eq!(list[1].bounds, Some(Rect::new(300, 70, 200, 130)));

        // Raising A puts it last; a destroyed window is gone.
        c.conn
            .configure_window(a, &ConfigureWindowAux::new().stack_mode(StackMode::ABOVE))
            .unwrap();
        c.conn.destroy_window(b).unwrap();
        c.conn.sync().unwrap();
        assert_eq!(ids(&windows.list().unwrap()), [framed, a].map(u64::from));
    }

    #[test]
    fn trusts_a_window_managers_client_list_only_while_it_runs() {
        let x = Xvfb::start(640, 480);
        let c = Client::new(&x.display);
        let mut windows = Windows::new(Some(x.display.clone()));
        let a = c.app_window("a", 0, 0, 10, 10);
        let b = c.app_window("b", 20, 0, 10, 10);
        let stray = c.app_window("not managed", 40, 0, 10, 10);
        // A minimized client: unmapped, still the manager's.
        let iconic = c.create(
            c.root,
            (60, 0, 10, 10),
            WindowClass::INPUT_OUTPUT,
            &CreateWindowAux::new(),
        );
        // A manager that runs: its check window names itself.
        let check = c.create(
            c.root,
            (0, 0, 1, 1),
            WindowClass::INPUT_OUTPUT,
            &CreateWindowAux::new(),
        );
        let wm_check = c.atoms._NET_SUPPORTING_WM_CHECK;
        c.words(check, wm_check, AtomEnum::WINDOW, &[check]);
        c.words(c.root, wm_check, AtomEnum::WINDOW, &[check]);
        c.words(
            c.root,
            c.atoms._NET_CLIENT_LIST,
            AtomEnum::WINDOW,
            &[a, b, iconic],
        );
        assert_eq!(ids(&windows.list().unwrap()), [a, b, iconic].map(u64::from));
        // The stacking order wins over the mapping order.
        c.words(
            c.root,
            c.atoms._NET_CLIENT_LIST_STACKING,
            AtomEnum::WINDOW,
            &[iconic, b, a],
        );
        assert_eq!(ids(&windows.list().unwrap()), [iconic, b, a].map(u64::from));
        // Operations are only for the manager's clients.
        assert_eq!(
            windows.apply(stray.into(), WindowOp::Close),
            not_found(stray.into())
        );
        assert!(c.mapped(stray), "the refused close did nothing");
        // A client that died before the manager noticed is left out.
        c.conn.destroy_window(b).unwrap();
        c.conn.sync().unwrap();
        assert_eq!(ids(&windows.list().unwrap()), [iconic, a].map(u64::from));

        // The manager died and took its check window along; its lists are stale now.
        c.conn.destroy_window(check).unwrap();
        c.conn.sync().unwrap();
        assert_eq!(ids(&windows.list().unwrap()), [a, stray].map(u64::from));
    }

    #[test]
    fn lists_managed_windows_under_openbox() {
        let x = Xvfb::start(800, 600);
        let bus = DbusSession::start(&x.display);
        let envs = bus.envs(&x.display);
        let c = Client::new(&x.display);
        let _wm = openbox(&x.display, &envs);
        let mut windows = Windows::new(Some(x.display.clone()));

        let own = c.app_window("pincer own window", 10, 10, 300, 200);
        let app = App::start(
            &["zenity", "--info", "--text", "hi", "--title", "Pincer ✓"],
            &envs,
        );
        // openbox maps new windows on top.
        let list = wait_for(Duration::from_secs(20), || {
            let list = windows.list().ok()?;
            (list.len() == 2 && list[1].pid == Some(app.pid())).then_some(list)
        })
        .expect("openbox manages both windows, zenity's on top");
        assert_eq!(list[0].id, u64::from(own));
        assert_eq!(list[0].title, "pincer own window");
        assert_eq!(list[0].pid, Some(std::process::id()));
        let zenity = &list[1];
        assert_eq!(zenity.title, "Pincer ✓");
        assert_eq!(zenity.process_name.as_deref(), Some("zenity"));
        assert_eq!(zenity.class.as_deref(), Some("Zenity"));
        assert_eq!(zenity.instance.as_deref(), Some("zenity"));
        let id = zenity.id as xproto::Window;
        assert_eq!(zenity.bounds, Some(c.bounds(id)));
        // The ids are the clients, not the frames openbox put around them.
        let parent = c.conn.query_tree(id).unwrap().reply().unwrap().parent;
        assert_ne!(parent, c.root, "openbox reparented zenity's window");
        assert!(c.bounds(own).width == 300 && c.bounds(own).height == 200);

        // A minimized window is still one of the manager's.
        windows.apply(zenity.id, WindowOp::Minimize).unwrap();
        assert_eq!(ids(&windows.list().unwrap()), [u64::from(own), zenity.id]);
    }

    /// Openbox, a D-Bus session and a resizable GTK window (`zenity --text-info`).
    struct Desk {
        x: Xvfb,
        _bus: DbusSession,
        envs: Vec<(String, String)>,
        _wm: Openbox,
    }

    impl Desk {
        fn start() -> Self {
            let x = Xvfb::start(800, 600);
            let bus = DbusSession::start(&x.display);
            let envs = bus.envs(&x.display);
            let wm = openbox(&x.display, &envs);
            Self {
                x,
                _bus: bus,
                envs,
                _wm: wm,
            }
        }

        /// Starts zenity with `args` and returns it with its window once it is listed.
        fn zenity(&self, windows: &mut Windows, args: &[&str]) -> (App, xproto::Window) {
            let app = App::start(&[&["zenity"], args].concat(), &self.envs);
            let pid = app.pid();
            let info = listed(windows, |w| w.pid == Some(pid));
            (app, info.id as xproto::Window)
        }
    }

    #[test]
    fn maximize_restore_and_geometry_under_openbox() {
        let desk = Desk::start();
        let c = Client::new(&desk.x.display);
        let mut windows = Windows::new(Some(desk.x.display.clone()));
        let (_app, w) = desk.zenity(&mut windows, &["--text-info", "--title", "resizable"]);
        let id = u64::from(w);
        let initial = c.bounds(w);

        // Each answer comes once the change shows: the checks below do not wait.
        windows.apply(id, WindowOp::Maximize).unwrap();
        assert_eq!(c.maximized(w), (true, true));
        assert_eq!(c.frame(w), c.work_area(), "maximized fills the work area");
        assert_eq!(c.work_area(), Rect::new(0, 0, 800, 600));
        // Maximizing a maximized window is done at once.
        windows.apply(id, WindowOp::Maximize).unwrap();

        windows.apply(id, WindowOp::Restore).unwrap();
        assert_eq!(c.maximized(w), (false, false));
        assert_eq!(c.bounds(w), initial, "restored to its size before");
        // Restore brings a minimized window back too.
        windows.apply(id, WindowOp::Minimize).unwrap();
        assert_eq!(c.wm_state(w), Some(ICONIC_STATE));
        windows.apply(id, WindowOp::Restore).unwrap();
        assert_eq!(c.wm_state(w), Some(1));
        assert!(c.mapped(w));

        let target = Rect::new(40, 30, 500, 400);
        windows.apply(id, WindowOp::Geometry(target)).unwrap();
        assert_eq!(c.frame(w), target, "the frame is where it was asked to be");
        let listed = windows.list().unwrap();
        let info = listed.iter().find(|i| i.id == id).unwrap();
        assert_eq!(info.bounds, Some(c.bounds(w)));

        // A maximized window is un-maximized to take a geometry.
        windows.apply(id, WindowOp::Maximize).unwrap();
        let target = Rect::new(100, 120, 300, 250);
        windows.apply(id, WindowOp::Geometry(target)).unwrap();
        assert_eq!(c.maximized(w), (false, false));
        assert_eq!(c.frame(w), target);
    }

    #[test]
    fn activate_minimize_and_close_under_openbox() {
        let desk = Desk::start();
        let c = Client::new(&desk.x.display);
        let mut windows = Windows::new(Some(desk.x.display.clone()));
        let (_first, a) = desk.zenity(&mut windows, &["--info", "--title", "first"]);
        let (mut second, b) = desk.zenity(&mut windows, &["--info", "--title", "second"]);
        wait_for(Duration::from_secs(10), || {
            (windows.active().ok()??.id == u64::from(b)).then_some(())
        })
        .expect("openbox activates the new window");

        windows.apply(a.into(), WindowOp::Activate).unwrap();
        assert_eq!(windows.active().unwrap().map(|w| w.id), Some(a.into()));
        assert_eq!(c.read(c.root, c.atoms._NET_ACTIVE_WINDOW), [a]);
        assert_eq!(
            ids(&windows.list().unwrap()).last(),
            Some(&u64::from(a)),
            "raised to the top"
        );

        windows.apply(a.into(), WindowOp::Minimize).unwrap();
        assert_eq!(c.wm_state(a), Some(ICONIC_STATE));
        // Activating a minimized window brings it back.
        windows.apply(a.into(), WindowOp::Activate).unwrap();
        assert_eq!(c.wm_state(a), Some(1));
        assert_eq!(windows.active().unwrap().map(|w| w.id), Some(a.into()));

        // `--info` dialogs are fixed-size: refused at once rather than waited for.
        let start = Instant::now();
        let refused = windows.apply(a.into(), WindowOp::Maximize);
        assert!(
            matches!(refused, Err(WireError::Unsupported { .. })),
            "{refused:?}"
        );
        assert!(start.elapsed() < Duration::from_secs(1));

        windows.apply(b.into(), WindowOp::Close).unwrap();
        assert!(
            second.wait_exit(Duration::from_secs(5)).is_some(),
            "zenity exits when its window is closed"
        );
        assert_eq!(ids(&windows.list().unwrap()), [u64::from(a)]);
        assert_eq!(
            windows.apply(b.into(), WindowOp::Activate),
            not_found(b.into())
        );
    }

    #[test]
    fn unknown_ids_and_bad_geometries_are_refused() {
        let desk = Desk::start();
        let c = Client::new(&desk.x.display);
        let mut windows = Windows::new(Some(desk.x.display.clone()));
        let w = c.app_window("target", 10, 10, 300, 200);
        listed(&mut windows, |i| i.id == u64::from(w));
        // Listed comes before framed and placed.
        wait_for(Duration::from_secs(10), || {
            (c.wm_state(w) == Some(1) && c.mapped(w)).then_some(())
        })
        .expect("openbox shows the window");
        let before = c.frame(w);

        let gone = c.app_window("gone", 0, 0, 10, 10);
        c.conn.destroy_window(gone).unwrap();
        c.conn.sync().unwrap();
        let frame = c.conn.query_tree(w).unwrap().reply().unwrap().parent;
        for id in [
            u64::from(gone),
            u64::from(frame),
            u64::from(c.root),
            0,
            0x7fff_fff0,
            u64::MAX,
        ] {
            assert_eq!(windows.apply(id, WindowOp::Activate), not_found(id));
        }

        for bad in [
            Rect::new(10, 10, 0, 100),
            Rect::new(10, 10, 100, 0),
            Rect::new(5000, 5000, 100, 100),
            Rect::new(-500, 10, 400, 100),
            Rect::new(0, 0, 40_000, 100),
            // Smaller than openbox's frame.
            Rect::new(0, 0, 2, 2),
        ] {
            let result = windows.apply(w.into(), WindowOp::Geometry(bad));
            assert!(
                matches!(result, Err(WireError::InvalidArgument { .. })),
                "{bad:?}: {result:?}"
            );
        }
        assert_eq!(c.frame(w), before, "refused requests changed nothing");
    }

    #[test]
    fn maximize_restore_and_geometry_without_a_window_manager() {
        let x = Xvfb::start(640, 480);
        let c = Client::new(&x.display);
        let mut windows = Windows::new(Some(x.display.clone()));
        let a = c.app_window("a", 10, 20, 200, 100);
        let b = c.app_window("b", 300, 200, 100, 80);
        let id = u64::from(a);

        windows.apply(id, WindowOp::Maximize).unwrap();
        assert_eq!(c.bounds(a), Rect::new(0, 0, 640, 480));
        assert_eq!(
            ids(&windows.list().unwrap()),
            [b, a].map(u64::from),
            "raised"
        );
        windows.apply(id, WindowOp::Maximize).unwrap();
        windows.apply(id, WindowOp::Restore).unwrap();
        assert_eq!(c.bounds(a), Rect::new(10, 20, 200, 100));
        // Nothing left to restore: the window stays.
        windows.apply(id, WindowOp::Restore).unwrap();
        assert_eq!(c.bounds(a), Rect::new(10, 20, 200, 100));
        // Nor when another client left a size no screen can show where we keep ours.
        c.words(
            a,
            c.atoms._PINCER_RESTORE_GEOMETRY,
            AtomEnum::INTEGER,
            &[0, 0, 0, 100],
        );
        windows.apply(id, WindowOp::Restore).unwrap();
        assert_eq!(c.bounds(a), Rect::new(10, 20, 200, 100));

        windows
            .apply(id, WindowOp::Geometry(Rect::new(-5, 6, 70, 80)))
            .unwrap();
        assert_eq!(c.bounds(a), Rect::new(-5, 6, 70, 80));
        // A window with an X border: the geometry is its outer edge.
        c.conn
            .configure_window(b, &ConfigureWindowAux::new().border_width(3))
            .unwrap();
        c.conn.sync().unwrap();
        windows
            .apply(b.into(), WindowOp::Geometry(Rect::new(100, 100, 50, 40)))
            .unwrap();
        assert_eq!(c.bounds(b), Rect::new(103, 103, 44, 34));

        // A real GTK window takes it too.
        let bus = DbusSession::start(&x.display);
        let app = App::start(
            &["zenity", "--text-info", "--title", "bare"],
            &bus.envs(&x.display),
        );
        let pid = app.pid();
        let z = listed(&mut windows, |i| i.pid == Some(pid)).id;
        windows.apply(z, WindowOp::Maximize).unwrap();
        let z = z as xproto::Window;
        assert_eq!(c.bounds(z), Rect::new(0, 0, 640, 480));
        // GTK does not fight it back a moment later.
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(c.bounds(z), Rect::new(0, 0, 640, 480));
    }

    #[test]
    fn activate_and_minimize_without_a_window_manager() {
        let x = Xvfb::start(640, 480);
        let c = Client::new(&x.display);
        let mut windows = Windows::new(Some(x.display.clone()));
        let a = c.app_window("a", 10, 20, 200, 100);
        let b = c.app_window("b", 50, 50, 100, 80);
        c.focus(b);
        assert_eq!(windows.active().unwrap().map(|w| w.id), Some(b.into()));

        windows.apply(a.into(), WindowOp::Activate).unwrap();
        assert_eq!(c.focused(), a);
        assert_eq!(windows.active().unwrap().map(|w| w.id), Some(a.into()));
        assert_eq!(
            ids(&windows.list().unwrap()),
            [b, a].map(u64::from),
            "raised"
        );

        windows.apply(a.into(), WindowOp::Minimize).unwrap();
        assert!(!c.mapped(a));
        assert_eq!(ids(&windows.list().unwrap()), [u64::from(b)]);
        // Activating brings it back.
        windows.apply(a.into(), WindowOp::Activate).unwrap();
        assert!(c.mapped(a));
        assert_eq!(c.focused(), a);
        windows.apply(a.into(), WindowOp::Minimize).unwrap();
        windows.apply(a.into(), WindowOp::Restore).unwrap();
        assert!(c.mapped(a));
    }

    #[test]
    fn close_without_a_window_manager() {
        let x = Xvfb::start(640, 480);
        let c = Client::new(&x.display);
        let mut windows = Windows::new(Some(x.display.clone()));

        // A GTK app closes on WM_DELETE_WINDOW.
        let bus = DbusSession::start(&x.display);
        let mut app = App::start(
            &["zenity", "--info", "--title", "bare"],
            &bus.envs(&x.display),
        );
        let pid = app.pid();
        let z = listed(&mut windows, |i| i.pid == Some(pid)).id;
        windows.apply(z, WindowOp::Close).unwrap();
        assert!(app.wait_exit(Duration::from_secs(5)).is_some());

        // A window that does not take WM_DELETE_WINDOW is closed by disconnecting its owner.
        let owner = Client::new(&x.display);
        let plain = owner.app_window("plain", 0, 0, 50, 50);
        windows.apply(plain.into(), WindowOp::Close).unwrap();
        assert!(owner.conn.get_input_focus().unwrap().reply().is_err());
        assert_eq!(windows.list().unwrap(), vec![]);

        // A window that takes WM_DELETE_WINDOW and ignores it: asked once, then a bounded
        // wait.
        let stubborn = c.app_window("stubborn", 0, 0, 50, 50);
        c.words(
            stubborn,
            c.atoms.WM_PROTOCOLS,
            AtomEnum::ATOM,
            &[c.atoms.WM_DELETE_WINDOW],
        );
        let start = Instant::now();
        let result = windows.apply(stubborn.into(), WindowOp::Close);
        assert!(
            matches!(result, Err(WireError::Timeout { after_ms: 2000 })),
            "{result:?}"
        );
        assert!(start.elapsed() < Duration::from_secs(3));
        let asked = std::iter::from_fn(|| c.conn.poll_for_event().unwrap()).any(|e| {
            matches!(e, Event::ClientMessage(m)
                if m.type_ == c.atoms.WM_PROTOCOLS
                    && m.data.as_data32()[0] == c.atoms.WM_DELETE_WINDOW)
        });
        assert!(asked, "the window was sent WM_DELETE_WINDOW");
        assert!(c.mapped(stubborn));
    }
}
