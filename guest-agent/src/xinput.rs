//! The desktop's input, for recording: XInput2 raw button and key events from every master
//! device, selected on the root window of a connection of its own. Raw events reach this
//! client whatever window has the focus or a grab, and XTest's input is reported like a
//! person's. They carry no pointer position, so a button event is stamped with where the
//! pointer is when it is read (within the guest's polling interval of the press); keys are
//! named through the keyboard mapping, at the level Shift selects, read again when the
//! mapping changes.

use crate::x11::{self, Client, Lazy};
use pincer_guest_core::platform;
use pincer_shared::WireError;
use pincer_shared::key::{self, Key, NamedKey};
use pincer_shared::observe::InputKind;
use x11rb::connection::{Connection as _, RequestConnection as _};
use x11rb::protocol::Event;
use x11rb::protocol::xinput::{self, ConnectionExt as _, EventMask, XIEventMask};
use x11rb::protocol::xproto::{ConnectionExt as _, Window};
use x11rb::rust_connection::RustConnection;

/// The input log of a display; connects on first use and again after the display went
/// away (what happened in between is lost).
#[derive(Debug)]
pub(crate) struct InputLog {
    listener: Lazy<Listener>,
}

impl InputLog {
    /// A log of `display` (`None`: `$DISPLAY`), not connected yet.
    pub(crate) fn new(display: Option<String>) -> Self {
        Self {
            listener: Lazy::new(display),
        }
    }
}

impl platform::InputLog for InputLog {
    fn drain(&mut self) -> Result<Vec<InputKind>, WireError> {
        self.listener.with(Listener::drain)
    }
}

/// A connection with raw input events selected on its root window.
struct Listener {
    conn: RustConnection,
    root: Window,
    /// The keyboard mapping: keysyms per keycode, from `min_keycode`.
    min_keycode: u8,
    per_keycode: usize,
    keysyms: Vec<u32>,
    /// Shift keys held down.
    shift: u32,
    /// An event `alive` read, kept for the next drain.
    pending: Vec<Event>,
}

impl Client for Listener {
    fn connect(display: Option<&str>) -> Result<Self, WireError> {
        let (conn, screen) = x11::connect_desktop(display, "input recording")?;
        let label = || x11::display_label(display);
        if conn
            .extension_information(xinput::X11_EXTENSION_NAME)
            .map_err(x11::lost)?
            .is_none()
        {
            return Err(WireError::Unsupported {
                what: format!(
                    "input recording: {} has no XInputExtension, so its input cannot be read",
                    label()
                ),
            });
        }
        // Raw events on the root window need XI 2.1.
        let v = conn
            .xinput_xi_query_version(2, 2)
            .map_err(x11::lost)?
            .reply()
            .map_err(|e| x11::refused(e, "XInput2's version query", display_error))?;
        if (v.major_version, v.minor_version) < (2, 1) {
            return Err(WireError::Unsupported {
                what: format!(
                    "input recording: {} speaks XInput {}.{}, and raw events need 2.1",
                    label(),
                    v.major_version,
                    v.minor_version
                ),
            });
        }
        let mask = XIEventMask::RAW_KEY_PRESS
            | XIEventMask::RAW_KEY_RELEASE
            | XIEventMask::RAW_BUTTON_PRESS
            | XIEventMask::RAW_BUTTON_RELEASE;
        conn.xinput_xi_select_events(
            screen.root,
            &[EventMask {
                deviceid: xinput::Device::ALL_MASTER.into(),
                mask: vec![mask],
            }],
        )
        .map_err(x11::lost)?
        .check()
        .map_err(|e| x11::refused(e, "raw input events on the root window", display_error))?;
        let mut me = Self {
            conn,
            root: screen.root,
            min_keycode: 0,
            per_keycode: 0,
            keysyms: Vec::new(),
            shift: 0,
            pending: Vec::new(),
        };
        me.read_mapping()?;
        Ok(me)
    }

    fn alive(&mut self) -> bool {
        match self.conn.poll_for_event() {
            Ok(Some(e)) => {
                self.pending.push(e);
                true
            }
            Ok(None) => true,
            Err(_) => false,
        }
    }
}

impl Listener {
    /// Reads the keyboard mapping (again).
    fn read_mapping(&mut self) -> Result<(), WireError> {
        let setup = self.conn.setup();
        let (min, max) = (setup.min_keycode, setup.max_keycode);
        let map = self
            .conn
            .get_keyboard_mapping(min, max - min + 1)
            .map_err(x11::lost)?
            .reply()
            .map_err(|e| x11::refused(e, "the keyboard mapping", display_error))?;
        self.min_keycode = min;
        self.per_keycode = usize::from(map.keysyms_per_keycode);
        self.keysyms = map.keysyms;
        Ok(())
    }

    /// The keysym of `keycode` at the level Shift selects (level 1's, where it has one).
    fn keysym(&self, keycode: u32) -> u32 {
        let Some(i) = keycode.checked_sub(u32::from(self.min_keycode)) else {
            return 0;
        };
        let base = i as usize * self.per_keycode;
        let at = |level: usize| {
            (level < self.per_keycode)
                .then(|| self.keysyms.get(base + level).copied())
                .flatten()
                .unwrap_or(0)
        };
        match (self.shift > 0, at(1)) {
            (true, k) if k != 0 => k,
            _ => at(0),
        }
    }

    /// Where the pointer is now.
    fn pointer(&self) -> Result<(i32, i32), WireError> {
        let p = self
            .conn
            .query_pointer(self.root)
            .map_err(x11::lost)?
            .reply()
            .map_err(|e| x11::refused(e, "the pointer's position", display_error))?;
        Ok((i32::from(p.root_x), i32::from(p.root_y)))
    }

    /// The events since the last call.
    fn drain(&mut self) -> Result<Vec<InputKind>, WireError> {
        let mut events = std::mem::take(&mut self.pending);
        while let Some(e) = self.conn.poll_for_event().map_err(x11::lost)? {
            events.push(e);
        }
        let mut out = Vec::new();
        for e in events {
            match e {
                Event::XinputRawButtonPress(b) => {
                    let (x, y) = self.pointer()?;
                    out.push(InputKind::Press {
                        button: b.detail.min(255) as u8,
                        x,
                        y,
                    });
                }
                Event::XinputRawButtonRelease(b) => {
                    let (x, y) = self.pointer()?;
                    out.push(InputKind::Release {
                        button: b.detail.min(255) as u8,
                        x,
                        y,
                    });
                }
                Event::XinputRawKeyPress(k) => {
                    let keysym = self.keysym(k.detail);
                    let key = key::from_keysym(keysym);
                    if key == Some(Key::Named(NamedKey::Shift)) {
                        self.shift += 1;
                    }
                    out.push(InputKind::KeyDown { key, keysym });
                }
                Event::XinputRawKeyRelease(k) => {
                    let keysym = self.keysym(k.detail);
                    let key = key::from_keysym(keysym);
                    if key == Some(Key::Named(NamedKey::Shift)) {
                        self.shift = self.shift.saturating_sub(1);
                    }
                    out.push(InputKind::KeyUp { key, keysym });
                }
                Event::MappingNotify(_) => self.read_mapping()?,
                _ => {}
            }
        }
        Ok(out)
    }
}

/// An XInput request the server refused, as the protocol's error.
fn display_error(message: String) -> WireError {
    WireError::Display { message }
}
