//! The Linux desktop as a guest-core platform: input through XTest and enigo, the screen
//! through MIT-SHM (or xcap), windows and the clipboard over X11, UI trees over AT-SPI and
//! settings through `gsettings`. Every X11 subsystem connects to the display the agent was
//! given, on its own connection.

use crate::a11y::A11y;
use crate::clipboard::Clipboard;
use crate::damage::Damage;
use crate::input::Input;
use crate::screen::Screen;
use crate::settings::Gsettings;
use crate::wayland::Wayland;
use crate::window::Windows;
use crate::xinput::InputLog;
use pincer_guest_core::Platform;
use pincer_guest_core::platform::Lacking;
use pincer_shared::message::capability;

/// A Linux desktop on one X display.
#[derive(Debug, Clone)]
pub(crate) struct Linux {
    /// X display to use (`None`: `$DISPLAY`).
    display: Option<String>,
    /// The Wayland routes the screen, input and video share in a Wayland session.
    wayland: Wayland,
}

impl Linux {
    /// The desktop on `display` (`None`: `$DISPLAY`).
    pub(crate) fn new(display: Option<String>) -> Self {
        Self {
            display,
            wayland: Wayland::new(),
        }
    }
}

impl Platform for Linux {
    type Input = Input;
    type Screen = Screen;
    type Damage = Damage;
    type InputLog = InputLog;
    type Windows = Windows;
    type Clipboard = Clipboard;
    type Accessibility = A11y;
    type Settings = Gsettings;
    type Device = Lacking;

    const NAME: pincer_shared::Platform = pincer_shared::Platform::Linux;
    const SANDBOXED_TOOLS: bool = true;
    const CAPABILITIES: &'static [&'static str] = &[
        capability::INPUT,
        capability::SCREENSHOT,
        capability::UI_TREE,
        capability::PROBE,
        capability::WINDOW,
        capability::CLIPBOARD,
        capability::VIDEO,
        capability::RECORD,
    ];
    /// The Wayland routes serve the screen, input and video; windows need sway's IPC or
    /// pincer's GNOME Shell extension, and recording reads X11 input.
    fn withheld(capture: &str) -> &'static [&'static str] {
        if !crate::wayland::CAPTURES.contains(&capture) {
            &[]
        } else if crate::wayland::WindowManager::find().is_ok() {
            &[capability::RECORD]
        } else {
            &[capability::WINDOW, capability::RECORD]
        }
    }
    const SCREEN_CAPABILITIES: &'static [&'static str] = &[
        capability::INPUT,
        capability::SCREENSHOT,
        capability::WINDOW,
        capability::VIDEO,
        capability::RECORD,
    ];

    /// PRETTY_NAME from os-release, or the kernel name.
    fn os(&self) -> String {
        std::fs::read_to_string("/etc/os-release")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                    .map(|v| v.trim_matches('"').to_owned())
            })
            .unwrap_or_else(|| std::env::consts::OS.to_owned())
    }

    fn input(&self) -> Input {
        Input::new(self.display.clone(), self.wayland.clone())
    }

    fn screen(&self) -> Screen {
        Screen::new(self.display.clone(), self.wayland.clone())
    }

    fn damage(&self) -> Damage {
        Damage::new(self.display.clone(), self.wayland.clone())
    }

    fn input_log(&self) -> InputLog {
        InputLog::new(self.display.clone())
    }

    fn windows(&self) -> Windows {
        Windows::new(self.display.clone())
    }

    fn clipboard(&self) -> Clipboard {
        Clipboard::new(self.display.clone())
    }

    fn accessibility(&self) -> A11y {
        A11y::new(self.display.clone())
    }

    fn settings(&self) -> Gsettings {
        Gsettings
    }
    fn device(&self) -> Lacking {
        Lacking
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Xvfb;
    use pincer_guest_core::confine::{Confinement, PincerPlaces, Policy};
    use pincer_guest_core::{Config, Guest, Reply, RequestBody};
    use pincer_shared::handshake::GuestInfo;
    use pincer_shared::identity::Token;
    use pincer_shared::probe::{Probe, ProbeReply};
    use pincer_shared::setup::{Setup, WindowOp};
    use pincer_shared::{Request, Response, WireError};
    use std::path::Path;
    use std::sync::Arc;
    use std::time::{Duration, Instant};
    use x11rb::connection::Connection as _;
    use x11rb::protocol::xproto::{ConnectionExt as _, CreateWindowAux, WindowClass};
    use x11rb::wrapper::ConnectionExt as _;

    /// A guest on `display` that is not read-only and keeps its state elsewhere.
    fn guest(display: &str) -> Guest<Linux> {
        let state = Path::new("/nonexistent");
        let policy = Policy {
            home: state.into(),
            state_dir: state.into(),
            token_file: state.join("token"),
            others: PincerPlaces::default(),
            read_roots: None,
            read_env: Vec::new(),
        };
        let config = Config {
            name: "test".into(),
            token: Token::generate(),
            read_only: false,
            allow_tools: false,
            confinement: Arc::new(Confinement::new(&policy).unwrap()),
            process_session: None,
        };
        Guest::new(config, &Linux::new(Some(display.into())))
    }

    /// The core's handshake under a real X server that stops answering (the core's own
    /// test also checks that the read it started lands for the next host).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn handshakes_answer_at_once_while_the_display_hangs() {
        let x = Xvfb::start(320, 240);
        let seen = Arc::new(guest(&x.display));
        let size = |i: &GuestInfo| (i.screen.width, i.screen.height);
        let info = seen.info().await;
        assert_eq!(size(&info), (320, 240));
        assert_eq!(info.platform, pincer_shared::Platform::Linux);
        assert!(info.capabilities.iter().any(|c| c == "setup"));

        // From here on every X call blocks, and a capture holds the screen subsystem.
        x.signal(libc::SIGSTOP);
        let capture = {
            let g = seen.clone();
            tokio::spawn(async move {
                g.handle(Request::Screenshot(Default::default()), RequestBody::none())
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let started = Instant::now();
        let info = seen.info().await;
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(size(&info), (320, 240), "the last known geometry");
        // A guest that never saw the display answers too, with no geometry.
        let fresh = guest(&x.display);
        let started = Instant::now();
        assert_eq!(size(&fresh.info().await), (0, 0));
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{:?}",
            started.elapsed()
        );

        x.signal(libc::SIGCONT);
        let shot = tokio::time::timeout(Duration::from_secs(10), capture)
            .await
            .expect("the capture finishes once the display is back")
            .unwrap();
        assert!(
            matches!(shot, Reply::Bytes(Response::Screenshot(_), _)),
            "{shot:?}"
        );
        assert_eq!(size(&fresh.info().await), (320, 240));
    }

    #[tokio::test]
    async fn window_requests_reach_the_window_subsystem() {
        let x = Xvfb::start(320, 240);
        let (conn, screen) = x11rb::connect(Some(&x.display)).unwrap();
        let root = conn.setup().roots[screen].root;
        let window = conn.generate_id().unwrap();
        conn.create_window(
            x11rb::COPY_DEPTH_FROM_PARENT,
            window,
            root,
            10,
            10,
            50,
            40,
            0,
            WindowClass::INPUT_OUTPUT,
            0,
            &CreateWindowAux::new(),
        )
        .unwrap();
        conn.map_window(window).unwrap();
        conn.sync().unwrap();
        let guest = guest(&x.display);

        let ask = async |req| match guest.handle(req, RequestBody::none()).await {
            Reply::Msg(r) => r,
            other => panic!("unexpected body with {other:?}"),
        };
        let listed = ask(Request::Probe(Probe::Windows)).await;
        let Response::Probe(ProbeReply::Windows(list)) = listed else {
            panic!("{listed:?}");
        };
        assert_eq!(
            list.iter().map(|w| w.id).collect::<Vec<_>>(),
            [u64::from(window)]
        );

        let maximize = Request::Setup(Setup::Window {
            id: window.into(),
            op: WindowOp::Maximize,
        });
        assert_eq!(ask(maximize).await, Response::Done);
        let geometry = conn.get_geometry(window).unwrap().reply().unwrap();
        assert_eq!((geometry.width, geometry.height), (320, 240));

        let missing = Request::Setup(Setup::Window {
            id: 0x7fff_fff0,
            op: WindowOp::Activate,
        });
        assert_eq!(
            ask(missing).await,
            Response::Error(WireError::NotFound {
                path: "window 0x7ffffff0".into()
            })
        );
    }
}
