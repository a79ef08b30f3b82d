//! The Wayland platform: the routes by which the screen, input and video reach a Wayland
//! session's desktop when X11 refuses its display (Xwayland sees only X11 apps).
//! - [`gnome`]: Mutter's RemoteDesktop and ScreenCast D-Bus APIs (GNOME, mutter 43+).
//! - [`wlr`]: wlroots' screencopy, virtual pointer and virtual keyboard protocols (sway
//!   and other wlroots compositors).
//!
//! Windows ([`WindowManager`]) go through sway's IPC ([`sway`]) or pincer's GNOME Shell
//! extension ([`shell`]); the UI tree asks them where windows are.
//!
//! Sessions that offer neither (KDE Plasma, ...) get a refusal that names what is
//! missing. [`Wayland`] is the one handle the subsystems share; each subsystem keeps a
//! [`Route`] that decides once, on the first request X11 refused, which route it takes.

mod frames;
mod gnome;
mod shell;
mod sway;
mod wlr;

use crate::fault::Fault;
use crate::keysym;
pub(crate) use gnome::Gnome;
use pincer_guest_core::encode::{self, Frame, FrameEncoder, PixelFormat};
use pincer_shared::WireError;
use pincer_shared::action::{Action, MouseButton, Point};
use pincer_shared::key::Key;
use pincer_shared::observe::{Rect, ScreenInfo, ScreenshotMeta, ScreenshotRequest};
use pincer_shared::probe::WindowInfo;
use pincer_shared::setup::WindowOp;
use std::time::{Duration, Instant};
pub(crate) use wlr::Wlr;

/// The captures of the Wayland routes, as `env info` shows them.
pub(crate) const CAPTURES: [&str; 2] = [gnome::CAPTURE, wlr::CAPTURE];

/// The Wayland routes, shared by the subsystems that use them; each connects on first use.
#[derive(Debug, Clone)]
pub(crate) struct Wayland {
    gnome: Gnome,
    wlr: Wlr,
}

impl Wayland {
    pub(crate) fn new() -> Self {
        Self {
            gnome: Gnome::new(),
            wlr: Wlr::new(),
        }
    }
}

/// One route to the desktop.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Desktop<'a> {
    Gnome(&'a Gnome),
    Wlr(&'a Wlr),
}

impl Desktop<'_> {
    /// The screen as the route captures it.
    pub(crate) fn info(self) -> Result<ScreenInfo, WireError> {
        let ((width, height), capture) = match self {
            Self::Gnome(g) => (g.size()?, gnome::CAPTURE),
            Self::Wlr(w) => (w.size()?, wlr::CAPTURE),
        };
        Ok(ScreenInfo {
            width,
            height,
            monitors: vec![Rect {
                x: 0,
                y: 0,
                width,
                height,
            }],
            capture: capture.to_owned(),
        })
    }

    /// Encodes the screen (or `req.region` of it) as `req` asks.
    pub(crate) fn capture(
        self,
        req: &ScreenshotRequest,
        encoder: &mut FrameEncoder,
    ) -> Result<(ScreenshotMeta, Vec<u8>), WireError> {
        match self {
            Self::Gnome(g) => g.capture(req, encoder),
            Self::Wlr(w) => w.capture(req, encoder),
        }
    }

    /// A number that grows when the screen changes, and the route session it counts in
    /// (a new session starts its count again).
    pub(crate) fn changes(self) -> Result<(u64, u64), WireError> {
        match self {
            Self::Gnome(g) => g.changes(),
            Self::Wlr(w) => w.changes(),
        }
    }

    /// Performs `action` (validated) and returns once the compositor took its events.
    pub(crate) fn perform(self, action: &Action) -> Result<(), WireError> {
        match self {
            Self::Gnome(g) => g.perform(action),
            Self::Wlr(w) => w.perform(action),
        }
    }

    /// Where the agent last put the pointer (neither route says where it is).
    pub(crate) fn cursor(self) -> Result<Point, WireError> {
        match self {
            Self::Gnome(g) => g.cursor(),
            Self::Wlr(w) => w.cursor(),
        }
    }
}

/// Which route a subsystem took.
#[derive(Debug, Clone, Copy)]
enum Taken {
    Gnome,
    Wlr,
}

/// How one subsystem reaches the desktop: through X11 until a request finds the display
/// refused as a Wayland session's, then through the route the session offers, for good.
#[derive(Debug)]
pub(crate) struct Route {
    wayland: Wayland,
    taken: Option<Taken>,
}

impl Route {
    pub(crate) fn new(wayland: Wayland) -> Self {
        Self {
            wayland,
            taken: None,
        }
    }

    /// The route, once a request took it.
    pub(crate) fn taken(&self) -> Option<Desktop<'_>> {
        self.taken.map(|taken| match taken {
            Taken::Gnome => Desktop::Gnome(&self.wayland.gnome),
            Taken::Wlr => Desktop::Wlr(&self.wayland.wlr),
        })
    }

    /// X11's answer `x11`, unless X11 refused a Wayland session's display: then `op` on
    /// the route the session offers, or the refusal saying what is missing.
    pub(crate) fn or<T>(
        &mut self,
        x11: Result<T, WireError>,
        op: impl FnOnce(Desktop<'_>) -> Result<T, WireError>,
    ) -> Result<T, WireError> {
        match x11 {
            Err(WireError::Unsupported { what }) if crate::session::wayland_session() => {
                let gnome = self.wayland.gnome.available();
                let wlr = gnome.is_err().then(wlr::available);
                self.taken = match (&gnome, &wlr) {
                    (Ok(()), _) => Some(Taken::Gnome),
                    (_, Some(Ok(()))) => Some(Taken::Wlr),
                    _ => None,
                };
                match (self.taken(), gnome, wlr) {
                    (Some(desktop), _, _) => op(desktop),
                    (None, Err(no_gnome), Some(Err(no_wlr))) => Err(WireError::Unsupported {
                        what: format!(
                            "{what}. pincer-agent's Wayland routes are GNOME's (Mutter's \
                             RemoteDesktop and ScreenCast D-Bus APIs, mutter 43 or later) and \
                             wlroots' (screencopy, virtual pointer and virtual keyboard: sway \
                             and other wlroots compositors), and this session has neither: \
                             {no_gnome}; {no_wlr}"
                        ),
                    }),
                    (None, _, _) => unreachable!("a route is taken when one is available"),
                }
            }
            other => other,
        }
    }
}

/// Where a window's content is on the screen: the origin of the coordinates its toolkit
/// reports on Wayland.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Origin {
    pub(crate) pid: u32,
    pub(crate) title: String,
    pub(crate) x: i32,
    pub(crate) y: i32,
}

/// Windows in a Wayland session: sway's IPC, or pincer's GNOME Shell extension.
#[derive(Debug)]
pub(crate) enum WindowManager {
    Sway(sway::Sway),
    Shell(shell::Shell),
}

impl WindowManager {
    /// The session's, if it has one; `Err` says what is missing.
    pub(crate) fn find() -> Result<Self, String> {
        if let Some(socket) = sway::socket() {
            return Ok(Self::Sway(sway::Sway::new(socket)));
        }
        shell::Shell::find().map(Self::Shell).map_err(|no_shell| {
            format!("this session has no sway IPC socket ($SWAYSOCK) and {no_shell}")
        })
    }

    pub(crate) fn list(&mut self) -> Result<Vec<WindowInfo>, WireError> {
        match self {
            Self::Sway(s) => s.list(),
            Self::Shell(s) => s.list(),
        }
    }

    pub(crate) fn active(&mut self) -> Result<Option<WindowInfo>, WireError> {
        match self {
            Self::Sway(s) => s.active(),
            Self::Shell(s) => s.active(),
        }
    }

    pub(crate) fn apply(&mut self, id: u64, op: WindowOp) -> Result<(), WireError> {
        match self {
            Self::Sway(s) => s.apply(id, op),
            Self::Shell(s) => s.apply(id, op),
        }
    }

    /// The screen, where the compositor says it, and where each Wayland window's content
    /// is on it.
    pub(crate) fn placement(&mut self) -> Result<(Option<Rect>, Vec<Origin>), WireError> {
        match self {
            Self::Sway(s) => s
                .placement()
                .map(|(screen, origins)| (Some(screen), origins)),
            Self::Shell(s) => Ok((None, s.origins()?)),
        }
    }
}

/// A route's input primitives; [`perform`] builds actions from them.
pub(crate) trait Injector {
    /// Moves the pointer to `to`, which must be on the screen.
    fn motion(&mut self, to: Point) -> Result<(), Fault>;
    fn button(&mut self, button: MouseButton, pressed: bool) -> Result<(), Fault>;
    /// Scrolls `steps` wheel steps (positive: down or right).
    fn scroll(&mut self, axis: ScrollAxis, steps: i32) -> Result<(), Fault>;
    fn keysym(&mut self, sym: u32, pressed: bool) -> Result<(), Fault>;
    /// Types `text`, however the route can.
    fn text(&mut self, text: &str) -> Result<(), Fault>;
    fn pause(&mut self, pause: Duration) -> Result<(), Fault>;
}

#[derive(Debug, Clone, Copy)]
pub(crate) enum ScrollAxis {
    Vertical,
    Horizontal,
}

/// Performs `action` (validated) with `inj`'s primitives.
pub(crate) fn perform(inj: &mut impl Injector, action: &Action) -> Result<(), Fault> {
    let key = |inj: &mut _, key: Key, press: bool, release: bool| -> Result<(), Fault> {
        let sym = keysym::of(key)?;
        if press {
            Injector::keysym(inj, sym, true)?;
        }
        if release {
            Injector::keysym(inj, sym, false)?;
        }
        Ok(())
    };
    match action {
        Action::MouseMove { to } => inj.motion(*to),
        Action::Click { at, button, count } => {
            if let Some(at) = at {
                inj.motion(*at)?;
            }
            for _ in 0..*count {
                inj.button(*button, true)?;
                inj.button(*button, false)?;
            }
            Ok(())
        }
        Action::MouseDown { button } => inj.button(*button, true),
        Action::MouseUp { button } => inj.button(*button, false),
        Action::Drag {
            from,
            to,
            button,
            duration_ms,
        } => {
            inj.motion(*from)?;
            inj.button(*button, true)?;
            let steps = 10;
            let pause = Duration::from_millis(u64::from(*duration_ms) / steps);
            for i in 1..=steps as i32 {
                let along = |a: i32, b: i32| a + (b - a) * i / steps as i32;
                inj.pause(pause)?;
                inj.motion(Point::new(along(from.x, to.x), along(from.y, to.y)))?;
            }
            inj.button(*button, false)
        }
        Action::Scroll { at, dx, dy } => {
            if let Some(at) = at {
                inj.motion(*at)?;
            }
            for (axis, steps) in [(ScrollAxis::Vertical, *dy), (ScrollAxis::Horizontal, *dx)] {
                if steps != 0 {
                    inj.scroll(axis, steps)?;
                }
            }
            Ok(())
        }
        Action::KeyPress { key: k } => key(inj, *k, true, true),
        Action::KeyDown { key: k } => key(inj, *k, true, false),
        Action::KeyUp { key: k } => key(inj, *k, false, true),
        Action::Hotkey { keys } => {
            for k in keys {
                key(inj, *k, true, false)?;
            }
            for k in keys.iter().rev() {
                key(inj, *k, false, true)?;
            }
            Ok(())
        }
        Action::TypeText { text } => inj.text(text),
        Action::Touch(_) | Action::SystemKey(_) => Err(Fault::Refused(WireError::Unsupported {
            what: "touch input: a desktop has a mouse and keyboard, not a touch screen".to_owned(),
        })),
    }
}

/// Refuses a point off a `width`x`height` screen.
fn on_screen(to: Point, width: u32, height: u32) -> Result<(), Fault> {
    let on = |v: i32, n: u32| v >= 0 && (v as u32) < n;
    if on(to.x, width) && on(to.y, height) {
        return Ok(());
    }
    Err(Fault::Refused(WireError::InvalidArgument {
        message: format!(
            "point ({}, {}) is off the {width}x{height} screen",
            to.x, to.y
        ),
    }))
}

/// The Linux input event code of `button` (BTN_LEFT, BTN_RIGHT, BTN_MIDDLE).
fn evdev_button(button: MouseButton) -> u32 {
    match button {
        MouseButton::Left => 0x110,
        MouseButton::Right => 0x111,
        MouseButton::Middle => 0x112,
    }
}

/// Encodes `req.region` (or all) of a `width`x`height` screen held in `pixels`.
fn encode_screen(
    pixels: &[u8],
    (width, height, stride): (u32, u32, usize),
    format: PixelFormat,
    started: Instant,
    req: &ScreenshotRequest,
    encoder: &mut FrameEncoder,
) -> Result<(ScreenshotMeta, Vec<u8>), WireError> {
    let source = encode::source_rect(req.region, width, height)?;
    encode::check_output(source, req.max_size)?;
    let offset = source.y as usize * stride + source.x as usize * 4;
    let pixels = pixels.get(offset..).unwrap_or_default();
    let frame = Frame::new(pixels, source.width, source.height, stride, format)?;
    encoder.screenshot(frame, source, started.elapsed(), req)
}
