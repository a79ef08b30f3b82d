//! Which graphical session the agent's display belongs to. pincer-agent drives desktops
//! through X11; in a Wayland session the X server it finds is Xwayland, which sees only
//! the X11 apps: a grab of its root is black where Wayland apps draw, and input sent to it
//! never reaches them. So the screen, input, windows and the streams built on them refuse
//! such a display with [`refusal`], naming the session and what to do, rather than answer
//! with black frames or clicks that went nowhere. The UI tree (AT-SPI) and the clipboard
//! (which mutter and wlroots bridge between X11 and Wayland) still work there.

use pincer_shared::WireError;
use x11rb::connection::RequestConnection as _;
use x11rb::protocol::randr::{self, ConnectionExt as _};
use x11rb::protocol::xproto;
use x11rb::rust_connection::RustConnection;

/// Whether the X server behind `conn` is Xwayland. Xwayland names its RandR outputs
/// `XWAYLAND0`, `XWAYLAND1`, ... in every version; its own `XWAYLAND` extension only
/// exists from 23.1 (Debian 12 has 22.1).
pub(crate) fn is_xwayland(conn: &RustConnection, root: xproto::Window) -> bool {
    if conn
        .extension_information("XWAYLAND")
        .is_ok_and(|e| e.is_some())
    {
        return true;
    }
    let Ok(resources) = conn
        .randr_get_screen_resources_current(root)
        .map_err(drop)
        .and_then(|c| c.reply().map_err(drop))
    else {
        return false;
    };
    resources.outputs.iter().any(|&output| {
        conn.randr_get_output_info(output, resources.config_timestamp)
            .map_err(drop)
            .and_then(|c| c.reply().map_err(drop))
            .is_ok_and(|info: randr::GetOutputInfoReply| info.name.starts_with(b"XWAYLAND"))
    })
}

/// Whether the agent's environment says it runs in a Wayland session.
pub(crate) fn wayland_session() -> bool {
    std::env::var_os("WAYLAND_DISPLAY").is_some_and(|d| !d.is_empty())
        || std::env::var("XDG_SESSION_TYPE").is_ok_and(|t| t == "wayland")
}

/// The refusal of `what` ("screenshots", "input") in a Wayland session: `xwayland` is the
/// X display found there (its label), `None` when there is no X display at all.
pub(crate) fn refusal(what: &str, xwayland: Option<&str>) -> WireError {
    let session = describe(
        std::env::var("XDG_CURRENT_DESKTOP").ok().as_deref(),
        std::env::var("WAYLAND_DISPLAY").ok().as_deref(),
    );
    let why = match xwayland {
        Some(label) => format!(
            "{label} is the Xwayland server of {session}, which sees only X11 apps: \
             screenshots would be black where Wayland apps draw and input would not reach them"
        ),
        None => format!("{session} without an X display"),
    };
    WireError::Unsupported {
        what: format!(
            "{what}: {why}. Log in to an X11 session (\"GNOME on Xorg\" on the login \
             screen) or run the agent on a desktop of its own (`pincer desktop up`, \
             `pincer vm up`)"
        ),
    }
}

/// "a Wayland session (GNOME, WAYLAND_DISPLAY=wayland-0)" from what the environment says.
fn describe(desktop: Option<&str>, socket: Option<&str>) -> String {
    let said: Vec<String> = desktop
        .filter(|d| !d.is_empty())
        .map(str::to_owned)
        .into_iter()
        .chain(
            socket
                .filter(|s| !s.is_empty())
                .map(|s| format!("WAYLAND_DISPLAY={s}")),
        )
        .collect();
    if said.is_empty() {
        "a Wayland session".to_owned()
    } else {
        format!("a Wayland session ({})", said.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_is_named_as_the_environment_names_it() {
        assert_eq!(
            describe(Some("GNOME"), Some("wayland-0")),
            "a Wayland session (GNOME, WAYLAND_DISPLAY=wayland-0)"
        );
        assert_eq!(
            describe(None, Some("wayland-1")),
            "a Wayland session (WAYLAND_DISPLAY=wayland-1)"
        );
        assert_eq!(describe(Some(""), None), "a Wayland session");
    }

    #[test]
    fn an_x_server_that_is_not_xwayland_is_not_taken_for_one() {
        let x = crate::testutil::Xvfb::start(320, 240);
        let (conn, screen) = crate::x11::connect(Some(&x.display)).unwrap();
        assert!(!is_xwayland(&conn, screen.root));
    }
}
