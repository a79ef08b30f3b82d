//! The accessibility tree of the guest's desktop, read over AT-SPI: [`A11y::tree`] walks the
//! registry's desktop and its applications into a [`UiTree`], applying the request's scope
//! and filters during the walk so that a skipped subtree costs no D-Bus call at all.
//!
//! AT-SPI costs one D-Bus round trip per property, about 1.6 ms each when taken one after
//! another, so the walk is concurrent: a node's calls are issued together, its children are
//! walked together (and kept in order), and at most a fixed number of calls wait on one
//! application at a time. Calls go straight to each application over the peer-to-peer socket
//! its bridge offers, not through the bus daemon, which would otherwise relay every call and
//! reply. Where an application's bridge serves `org.a11y.atspi.Cache` (GTK's atk-bridge does
//! once an assistive client has registered for an event, which [`A11y`] does when it
//! connects), one `GetItems` call gives role, name, states and structure of every cached
//! object, and only bounds, text, values, actions and attributes are fetched per node. Objects
//! the cache lacks (transient table cells, children added without a signal) are read live; a
//! cached child list that does not add up to the parent's child count is re-read live.
//!
//! Applications are untrusted: they return garbage, vanish mid-walk or hang. Every call has
//! a timeout; an application that misses one is skipped for the rest of the walk and its node
//! says so in a `pincer-error` attribute; the whole walk has a deadline; nodes that manage
//! millions of descendants (a spreadsheet's grid) contribute only the cells on screen.
//!
//! The parts build on each other in one direction, lowest first: `names` (AT-SPI's bus
//! names, paths, interfaces, role and state numbers), `bus` (finding and connecting to the
//! AT-SPI bus, the screen's size), `cache` (object references, what an object is, and the
//! `org.a11y.atspi.Cache` replies), `walk` (one tree request's walk); this module holds the
//! service that keeps the connection between walks.

mod bus;
mod cache;
mod names;
#[cfg(test)]
mod tests;
mod walk;

use crate::wayland::{Origin, WindowManager};
use bus::SessionEnv;
use pincer_guest_core::platform::Accessibility;
use pincer_shared::WireError;
use pincer_shared::observe::Rect;
use pincer_shared::observe::TreeRequest;
use pincer_shared::tree::{UiNode, UiTree};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use walk::Walk;

/// The accessibility tree service: one AT-SPI bus connection, opened on first use and
/// reopened after its session went away.
#[derive(Debug)]
pub(crate) struct A11y {
    /// The X display the platform was given (`None`: `$DISPLAY` at every connect): its
    /// screen bounds `visible_only`, and at-spi-bus-launcher names its socket after it.
    display: Option<String>,
    /// Fixed bus locations; `None` reads the process environment at every connect, so a
    /// restarted desktop session is found once the environment points at it.
    env: Option<SessionEnv>,
    /// The AT-SPI bus; dropped when a walk finds it dead.
    conn: Option<zbus::Connection>,
    /// Direct connections to applications (atk-bridge's peer-to-peer sockets), by bus name.
    /// They take the bus daemon, which otherwise relays every call and reply and costs as
    /// much CPU as the applications themselves, out of the walk.
    peers: HashMap<String, zbus::Connection>,
    /// Whether applications' caches are used. Only turned off to check and time the cache
    /// against the plain walk.
    use_cache: bool,
}

impl A11y {
    /// A service for the desktop on X display `display` (`None`: `$DISPLAY`) that connects
    /// on first use, with the buses named by the process environment
    /// (`DBUS_SESSION_BUS_ADDRESS`, `XDG_RUNTIME_DIR`, `AT_SPI_BUS_ADDRESS`).
    pub(crate) fn new(display: Option<String>) -> Self {
        Self {
            display,
            env: None,
            conn: None,
            peers: HashMap::new(),
            use_cache: true,
        }
    }

    async fn try_tree(
        &mut self,
        req: &TreeRequest,
        active_pid: Option<u32>,
        started: Instant,
    ) -> Result<UiTree, WireError> {
        let env = self.env.clone().unwrap_or_else(SessionEnv::from_process);
        let display = self
            .display
            .clone()
            .or_else(|| std::env::var("DISPLAY").ok().filter(|d| !d.is_empty()));
        let conn = match &self.conn {
            Some(conn) => conn.clone(),
            None => {
                let conn = bus::connect(&env, display.as_deref())
                    .await
                    .map_err(|why| WireError::Accessibility {
                        message: format!(
                            "AT-SPI bus not reachable ({why}): is at-spi2-core installed, and \
                         DBUS_SESSION_BUS_ADDRESS (or AT_SPI_BUS_ADDRESS) set for the agent to \
                         the desktop session's bus?"
                        ),
                    })?;
                self.conn = Some(conn.clone());
                // Unique names are reused by a new bus.
                self.peers.clear();
                conn
            }
        };
        let placement = wayland_placement();
        let screen = match bus::x_screen(display).await {
            Some(screen) => Some(screen),
            None => match placement.as_ref().and_then(|(screen, _)| *screen) {
                Some(screen) => Some(screen),
                None => bus::desktop_extents(&conn).await,
            },
        };
        let peers = std::mem::take(&mut self.peers);
        let walk = Arc::new(Walk::new(conn, peers, req, screen, self.use_cache, started));
        let result = walk.clone().run(&req.scope, active_pid).await;
        self.peers = walk.take_peers();
        match result {
            Ok(mut root) => {
                if let Some((_, origins)) = &placement {
                    shift_apps(&mut root, origins);
                }
                Ok(UiTree {
                    node_count: u32::try_from(root.count()).unwrap_or(u32::MAX),
                    root,
                    truncated: walk.truncated(),
                    walk_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
                })
            }
            Err(why) => {
                self.conn = None;
                Err(WireError::Accessibility {
                    message: format!(
                        "AT-SPI bus failed ({why}); the desktop session may have ended, the next \
                         request reconnects"
                    ),
                })
            }
        }
    }
}

/// In a Wayland session with a window manager pincer reads (sway, GNOME with pincer's
/// Shell extension), the screen (where it says) and where windows are. On Wayland,
/// toolkits report bounds relative to their own window (a client does not know where it
/// is on the screen): [`shift_apps`] moves them by their window's origin. Elsewhere they
/// stay relative.
fn wayland_placement() -> Option<(Option<Rect>, Vec<Origin>)> {
    if !crate::session::wayland_session() {
        return None;
    }
    match WindowManager::find().ok()?.placement() {
        Ok(placement) => Some(placement),
        Err(e) => {
            tracing::warn!(%e, "UI-tree bounds stay relative to their windows");
            None
        }
    }
}

/// Moves each application's windows under `node` by their origin among `origins`: the
/// one with the window's pid and title, or the application's only one.
fn shift_apps(node: &mut UiNode, origins: &[Origin]) {
    let Some(pid) = node
        .attributes
        .get("pid")
        .and_then(|p| p.parse::<u32>().ok())
    else {
        for child in &mut node.children {
            shift_apps(child, origins);
        }
        return;
    };
    let own: Vec<&Origin> = origins.iter().filter(|o| o.pid == pid).collect();
    for window in &mut node.children {
        let origin = own
            .iter()
            .find(|o| o.title == window.name)
            .or(if own.len() == 1 { own.first() } else { None });
        if let Some(origin) = origin {
            shift(window, origin.x, origin.y);
        }
    }
}

fn shift(node: &mut UiNode, dx: i32, dy: i32) {
    if let Some(bounds) = &mut node.bounds {
        bounds.x += dx;
        bounds.y += dy;
    }
    for child in &mut node.children {
        shift(child, dx, dy);
    }
}

impl Accessibility for A11y {
    /// The UI tree `req` asks for. `active_pid` is the process of the focused window, which
    /// `TreeScope::ActiveApp` selects.
    async fn tree(
        &mut self,
        req: &TreeRequest,
        active_pid: Option<u32>,
    ) -> Result<UiTree, WireError> {
        let started = Instant::now();
        let reused = self.conn.is_some();
        let tree = match self.try_tree(req, active_pid, started).await {
            // The connection worked before, so its session may have been replaced: one more
            // try on a fresh connection.
            Err(_) if reused && self.conn.is_none() => {
                self.try_tree(req, active_pid, started).await
            }
            result => result,
        };
        // A walk allocates and frees thousands of messages and strings (tens of MB for a
        // spreadsheet); what it freed below live data would stay resident.
        crate::memory::give_back();
        tree
    }
}
