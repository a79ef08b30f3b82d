//! Finding the AT-SPI bus and connecting to it, below the cache and the walk: where the
//! buses are ([`SessionEnv`]), the AT-SPI bus's address (from `AT_SPI_BUS_ADDRESS`, the
//! session bus's `org.a11y.Bus`, or the socket at-spi-bus-launcher leaves in the runtime
//! directory for the agent's display), the connection that activates every application's
//! bridge, and the size of the display's screen, which the tree is on.

use super::names::{COMPONENT, REGISTRY, ROOT_PATH, SCREEN_COORDS, bounds};
use pincer_shared::observe::Rect;
use std::time::Duration;
use tokio::time::timeout;

/// How long one call may take before its application counts as hung for the rest of the walk.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// How long finding and connecting to the AT-SPI bus may take.
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// An event nobody emits: registering for it makes every atk-bridge activate (and build its
/// cache) without making applications send signals.
const ACTIVATION_EVENT: &str = "window:desktop-create";

/// Where the buses are.
#[derive(Debug, Clone, Default)]
pub(super) struct SessionEnv {
    /// `AT_SPI_BUS_ADDRESS`: the AT-SPI bus itself, which libatspi honours before asking the
    /// session bus.
    pub(super) a11y_bus: Option<String>,
    /// `DBUS_SESSION_BUS_ADDRESS`.
    pub(super) session_bus: Option<String>,
    /// `XDG_RUNTIME_DIR`, where the session bus and the AT-SPI bus have their default sockets.
    pub(super) runtime_dir: Option<String>,
}

impl SessionEnv {
    pub(super) fn from_process() -> Self {
        let var = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        Self {
            a11y_bus: var("AT_SPI_BUS_ADDRESS"),
            session_bus: var("DBUS_SESSION_BUS_ADDRESS"),
            runtime_dir: var("XDG_RUNTIME_DIR"),
        }
    }
}

/// Opens the AT-SPI bus of the session on X display `display` and registers for an event,
/// which activates every application's bridge (and its cache).
pub(super) async fn connect(
    env: &SessionEnv,
    display: Option<&str>,
) -> Result<zbus::Connection, String> {
    let address = match &env.a11y_bus {
        Some(address) => address.clone(),
        None => a11y_bus_address(env, display).await?,
    };
    let open = async {
        zbus::connection::Builder::address(address.as_str())?
            .build()
            .await
    };
    let conn = timeout(CONNECT_TIMEOUT, open)
        .await
        .map_err(|_| format!("connecting to {address} timed out"))?
        .map_err(|e| format!("cannot connect to {address}: {e}"))?;
    let event = (ACTIVATION_EVENT, Vec::<String>::new(), "");
    let register = conn.call_method(
        Some(REGISTRY),
        "/org/a11y/atspi/registry",
        Some("org.a11y.atspi.Registry"),
        "RegisterEvent",
        &event,
    );
    // Without it the walk still works, only without caches.
    match timeout(CALL_TIMEOUT, register).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => tracing::debug!("AT-SPI event registration failed: {e}"),
        Err(_) => tracing::debug!("AT-SPI event registration timed out"),
    }
    Ok(conn)
}

/// The AT-SPI bus address, from the session bus's `org.a11y.Bus`, or the socket
/// at-spi-bus-launcher leaves in the runtime directory for `display`.
async fn a11y_bus_address(env: &SessionEnv, display: Option<&str>) -> Result<String, String> {
    let session = env.session_bus.clone().or_else(|| {
        env.runtime_dir
            .as_ref()
            .map(|dir| format!("unix:path={dir}/bus"))
    });
    let mut why = "no session bus: DBUS_SESSION_BUS_ADDRESS and XDG_RUNTIME_DIR are unset".into();
    if let Some(session) = session {
        let ask = async {
            let conn = zbus::connection::Builder::address(session.as_str())?
                .build()
                .await?;
            let reply = conn
                .call_method(
                    Some("org.a11y.Bus"),
                    "/org/a11y/bus",
                    Some("org.a11y.Bus"),
                    "GetAddress",
                    &(),
                )
                .await?;
            reply.body().deserialize::<String>()
        };
        match timeout(CONNECT_TIMEOUT, ask).await {
            Ok(Ok(address)) if !address.is_empty() => return Ok(address),
            Ok(Ok(_)) => why = format!("session bus {session} has no AT-SPI bus"),
            Ok(Err(e)) => why = format!("session bus {session}: {e}"),
            Err(_) => why = format!("session bus {session} did not answer"),
        }
    }
    if let Some(dir) = &env.runtime_dir {
        // at-spi-bus-launcher names its socket after the display it was started for.
        let names = display
            .and_then(display_number)
            .map(|n| format!("bus_{n}"))
            .into_iter();
        for name in names.chain(["bus".to_owned()]) {
            let socket = format!("{dir}/at-spi/{name}");
            if std::path::Path::new(&socket).exists() {
                return Ok(format!("unix:path={socket}"));
            }
        }
    }
    Err(why)
}

/// The display number in an X display name (`:1`, `:1.0`, `host:1`).
fn display_number(display: &str) -> Option<u32> {
    let (_, screen) = display.rsplit_once(':')?;
    screen.split('.').next()?.parse().ok()
}

/// The size of `display`'s screen, which AT-SPI's desktop may not know (at-spi2-registryd
/// 2.46 reports 1024x768 whatever the screen).
pub(super) async fn x_screen(display: Option<String>) -> Option<Rect> {
    let display = display?;
    let query = tokio::task::spawn_blocking(move || {
        let (_conn, root) = crate::x11::connect(Some(&display)).ok()?;
        Some(Rect::new(
            0,
            0,
            u32::from(root.width_in_pixels),
            u32::from(root.height_in_pixels),
        ))
    });
    timeout(CALL_TIMEOUT, query).await.ok()?.ok()?
}

/// The desktop's extents: the screen where X cannot be asked (no display), though
/// at-spi2-registryd may not know it either.
pub(super) async fn desktop_extents(conn: &zbus::Connection) -> Option<Rect> {
    let call = conn.call_method(
        Some(REGISTRY),
        ROOT_PATH,
        Some(COMPONENT),
        "GetExtents",
        &(SCREEN_COORDS,),
    );
    let reply = timeout(CALL_TIMEOUT, call).await.ok()?.ok()?;
    bounds(reply.body().deserialize().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_numbers_are_parsed() {
        assert_eq!(display_number(":0"), Some(0));
        assert_eq!(display_number(":12.0"), Some(12));
        assert_eq!(display_number("host:3"), Some(3));
        assert_eq!(display_number("wayland-0"), None);
    }
}
