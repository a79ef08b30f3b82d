//! Screen changes for video streams: a DAMAGE object on the root window, on a connection of
//! its own, reporting at the `NonEmpty` level. The X server then sends one `DamageNotify`
//! when the damaged region stops being empty and none after until it is emptied, so a
//! desktop that draws a thousand times between two frames costs one event and one
//! `DamageSubtract`, and a still desktop costs nothing but a non-blocking read per tick.

use crate::wayland::{Route, Wayland};
use crate::x11::{self, Client, Lazy};
use pincer_guest_core::platform;
use pincer_shared::WireError;
use x11rb::connection::{Connection as _, RequestConnection as _};
use x11rb::protocol::Event;
use x11rb::protocol::damage::{self, ConnectionExt as _, ReportLevel};
use x11rb::rust_connection::RustConnection;

/// Counts the screen's changes; connects on first use and again after the display went
/// away.
#[derive(Debug)]
pub(crate) struct Damage {
    watcher: Lazy<Watcher>,
    /// Changes seen so far, across connections.
    count: u64,
    /// The Wayland route, taken when the display is a Wayland session's: every frame of
    /// its screen cast is a change.
    wayland: Route,
    /// The route's session and frame count at the last call.
    cast: Option<(u64, u64)>,
}

impl Damage {
    /// A tracker of `display` (`None`: `$DISPLAY`), not connected yet.
    pub(crate) fn new(display: Option<String>, wayland: Wayland) -> Self {
        Self {
            watcher: Lazy::new(display),
            count: 0,
            wayland: Route::new(wayland),
            cast: None,
        }
    }

    /// Adds the frames the screen cast received since the last call (all of a new
    /// session's, and at least one for it).
    fn count_frames(&mut self, (session, frames): (u64, u64)) -> u64 {
        self.count += match self.cast {
            Some((last, seen)) if last == session => frames.saturating_sub(seen),
            _ => frames.max(1),
        };
        self.cast = Some((session, frames));
        self.count
    }
}

impl platform::Damage for Damage {
    fn changes(&mut self) -> Result<u64, WireError> {
        if let Some(desktop) = self.wayland.taken() {
            let cast = desktop.changes()?;
            return Ok(self.count_frames(cast));
        }
        let drained = self.watcher.with(Watcher::drain);
        match self
            .wayland
            .or(drained.map(Err), |desktop| desktop.changes().map(Ok))?
        {
            Err(drained) => {
                self.count += drained;
                Ok(self.count)
            }
            Ok(cast) => Ok(self.count_frames(cast)),
        }
    }
}

/// A connection with a DAMAGE object on its root window.
struct Watcher {
    conn: RustConnection,
    damage: damage::Damage,
    /// A change not counted yet: the connection is new (what happened before it is
    /// unknown), or `alive` read a report.
    unseen: bool,
}

impl Client for Watcher {
    fn connect(display: Option<&str>) -> Result<Self, WireError> {
        let (conn, screen) = x11::connect_desktop(display, "video")?;
        let label = || x11::display_label(display);
        if conn
            .extension_information(damage::X11_EXTENSION_NAME)
            .map_err(x11::lost)?
            .is_none()
        {
            return Err(WireError::Unsupported {
                what: format!(
                    "video: {} has no DAMAGE extension, so screen changes cannot be watched",
                    label()
                ),
            });
        }
        // The extension must be told the client's version before any other request.
        conn.damage_query_version(1, 1)
            .map_err(x11::lost)?
            .reply()
            .map_err(|e| x11::refused(e, "DAMAGE's version query", display_error))?;
        let id = conn.generate_id().map_err(|e| WireError::Display {
            message: format!("no X resource id left on {}: {e}", label()),
        })?;
        conn.damage_create(id, screen.root, ReportLevel::NON_EMPTY)
            .map_err(x11::lost)?
            .check()
            .map_err(|e| x11::refused(e, "a DAMAGE object on the root window", display_error))?;
        Ok(Self {
            conn,
            damage: id,
            unseen: true,
        })
    }

    fn alive(&mut self) -> bool {
        // A dead server shows up as the end of the stream. A report read here is kept: the
        // server sends no other until the region is emptied.
        match self.conn.poll_for_event() {
            Ok(Some(Event::DamageNotify(_))) => {
                self.unseen = true;
                true
            }
            Ok(_) => true,
            Err(_) => false,
        }
    }
}

impl Watcher {
    /// How many times the screen became damaged since the last call (at most one a
    /// call, with `NonEmpty` reports), and the region emptied again for the next report.
    fn drain(&mut self) -> Result<u64, WireError> {
        let mut changed = std::mem::take(&mut self.unseen);
        while let Some(event) = self.conn.poll_for_event().map_err(x11::lost)? {
            changed |= matches!(event, Event::DamageNotify(_));
        }
        if changed {
            self.conn
                .damage_subtract(self.damage, x11rb::NONE, x11rb::NONE)
                .map_err(x11::lost)?;
            self.conn.flush().map_err(x11::lost)?;
        }
        Ok(u64::from(changed))
    }
}

/// A DAMAGE request the server refused, as the protocol's error.
fn display_error(message: String) -> WireError {
    WireError::Display { message }
}
