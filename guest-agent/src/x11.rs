//! The agent's connections to the X server, made and kept the same way by every X11
//! subsystem (input, screen, windows, clipboard): [`connect`] opens one and finds its
//! screen, [`Lazy`] holds a subsystem's client, made on first use and replaced once the
//! server went away (the agent runs for days across X server restarts), and [`lost`] and
//! [`refused`] turn x11rb's errors into the protocol's; [`connect_desktop`] also refuses
//! a Wayland session's Xwayland. Each subsystem keeps a connection
//! of its own: a request that blocks on one (a window operation waiting for its effect, a
//! clipboard owner slow to answer) never holds up another.

use pincer_shared::WireError;
use std::fmt;
use std::os::fd::AsRawFd as _;
use std::time::Duration;
use x11rb::connection::Connection as _;
use x11rb::errors::{ConnectionError, ReplyError};
use x11rb::protocol::xproto;
use x11rb::rust_connection::RustConnection;

/// The display name as a person would write it, for messages.
pub(crate) fn display_label(display: Option<&str>) -> String {
    match display {
        Some(name) => format!("X display {name}"),
        None => match std::env::var("DISPLAY") {
            Ok(name) => format!("X display {name} (from $DISPLAY)"),
            Err(_) => "the X display ($DISPLAY is not set)".to_owned(),
        },
    }
}

/// Connects to `display` (`None`: `$DISPLAY`); returns the connection and its default
/// screen.
pub(crate) fn connect(
    display: Option<&str>,
) -> Result<(RustConnection, xproto::Screen), WireError> {
    let label = || display_label(display);
    // x11rb computes the TCP port as 6000 + display number, which overflows (and panics
    // in builds with overflow checks) above 59535.
    let parsed = x11rb::reexports::x11rb_protocol::parse_display::parse_display(display);
    if parsed.is_ok_and(|p| p.display > u16::MAX - 6000) {
        return Err(WireError::Display {
            message: format!("{}: display numbers above 59535 are not valid", label()),
        });
    }
    let (conn, screen_num) = x11rb::connect(display).map_err(|e| WireError::Display {
        message: format!(
            "cannot connect to {}: {e}; check that the X server runs and the display name is \
             right",
            label()
        ),
    })?;
    let Some(screen) = conn.setup().roots.get(screen_num).cloned() else {
        return Err(WireError::Display {
            message: format!("{} has no screen {screen_num}", label()),
        });
    };
    Ok((conn, screen))
}

/// Connects to `display` as [`connect`] does, for what needs the X server to be the whole
/// desktop (`what`: "screenshots", "input", ...): refused in a Wayland session, where the
/// display is Xwayland or there is none (see [`session`](crate::session)).
pub(crate) fn connect_desktop(
    display: Option<&str>,
    what: &str,
) -> Result<(RustConnection, xproto::Screen), WireError> {
    let no_display = display.is_none() && std::env::var_os("DISPLAY").is_none();
    let (conn, screen) = match connect(display) {
        Err(WireError::Display { .. }) if no_display && crate::session::wayland_session() => {
            return Err(crate::session::refusal(what, None));
        }
        connected => connected?,
    };
    if crate::session::is_xwayland(&conn, screen.root) {
        return Err(crate::session::refusal(what, Some(&display_label(display))));
    }
    Ok((conn, screen))
}

/// A subsystem's own client of the X server, as [`Lazy`] keeps it.
pub(crate) trait Client: Sized {
    /// Connects to `display` (`None`: `$DISPLAY`).
    fn connect(display: Option<&str>) -> Result<Self, WireError>;

    /// Whether the connection still stands, as far as can be told without a round trip
    /// (a dead server shows up as the end of the socket's stream).
    fn alive(&mut self) -> bool;
}

/// A client made on first use and replaced after the server went away: dropped when found
/// dead before a call, or when a call reports the display gone.
pub(crate) struct Lazy<C> {
    /// Display name to connect to; `None` uses `$DISPLAY`.
    display: Option<String>,
    /// The live client; `None` before first use and after the display went away.
    client: Option<C>,
}

impl<C> fmt::Debug for Lazy<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lazy")
            .field("display", &self.display)
            .field("connected", &self.client.is_some())
            .finish()
    }
}

impl<C: Client> Lazy<C> {
    /// A client of `display` (`None`: `$DISPLAY`), not connected yet.
    pub(crate) fn new(display: Option<String>) -> Self {
        Self {
            display,
            client: None,
        }
    }

    /// The display name given.
    pub(crate) fn display(&self) -> Option<&str> {
        self.display.as_deref()
    }

    /// The live client, connecting first if there is none or it died.
    pub(crate) fn get(&mut self) -> Result<&mut C, WireError> {
        if self.client.as_mut().is_some_and(|c| !c.alive()) {
            self.client = None;
        }
        match &mut self.client {
            Some(client) => Ok(client),
            slot @ None => Ok(slot.insert(C::connect(self.display.as_deref())?)),
        }
    }

    /// Forgets the client: the next call connects afresh.
    pub(crate) fn forget(&mut self) {
        self.client = None;
    }

    /// Runs `f` on the live client, and forgets the client when `f` finds the display
    /// gone, so that the next call connects afresh.
    pub(crate) fn with<T>(
        &mut self,
        f: impl FnOnce(&mut C) -> Result<T, WireError>,
    ) -> Result<T, WireError> {
        let result = f(self.get()?);
        if matches!(result, Err(WireError::Display { .. })) {
            self.forget();
        }
        result
    }
}

#[cfg(test)]
impl<C> Lazy<C> {
    /// A lazy client that already holds `client`.
    pub(crate) fn holding(display: Option<String>, client: C) -> Self {
        Self {
            display,
            client: Some(client),
        }
    }
}

/// A request that could not be sent: the connection is gone.
pub(crate) fn lost(e: ConnectionError) -> WireError {
    WireError::Display {
        message: format!("lost the connection to the X server: {e}"),
    }
}

/// A request that failed: either the connection is gone ([`lost`]), or the server refused
/// it, which `kind` words as the subsystem's own error about `what` ("an input request").
pub(crate) fn refused(
    e: ReplyError,
    what: &str,
    kind: impl FnOnce(String) -> WireError,
) -> WireError {
    match e {
        ReplyError::ConnectionError(e) => lost(e),
        ReplyError::X11Error(e) => kind(format!("the X server refused {what}: {:?}", e.error_kind)),
    }
}

/// Waits until `conn`'s socket has data or `timeout` passes. Call after `poll_for_event`
/// returned `None`: that read everything the socket had.
pub(crate) fn wait_readable(conn: &RustConnection, timeout: Duration) {
    let mut fd = libc::pollfd {
        fd: conn.stream().as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let millis = timeout.as_millis().clamp(1, 60_000) as libc::c_int;
    // SAFETY: one valid pollfd that lives across the call. EINTR and errors need no
    // handling: the caller's next poll_for_event reports a broken connection.
    unsafe {
        libc::poll(&mut fd, 1, millis);
    }
}
