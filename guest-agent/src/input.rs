//! Input injection: turns the action class of the protocol into X11 input events.
//!
//! Pointer actions and `TypeText` go out as XTest `FakeInput` requests on our own x11rb
//! connection, batched and confirmed with one round trip per action. A character that is on
//! the keymap is its keycode (with Shift for the shifted level); one that is not gets bound
//! to a spare keycode first. The named and character keys of `KeyPress`, `KeyDown`, `KeyUp`
//! and `Hotkey` go through enigo (x11rb backend), which binds keys the keymap lacks itself.
//!
//! Why not enigo for everything: enigo 0.6 asks the server for its input-device list and
//! syncs after every key or button event (two round trips each); it looks characters up in
//! the unshifted column only, so every capital letter or shifted symbol costs a keymap
//! change; and after one such change it delays every later key event in the server by
//! 1-12 ms. Typing "The quick brown fox!" takes it ~470 ms, us ~0.25 ms (`tests::bench`).
//! Its rebinding of spare keycodes also loses characters once a text needs more distinct
//! unmapped characters than there are spare keycodes: applications re-read the keymap
//! lazily, and translate events still queued with a keycode's newer binding. We rebind a
//! keycode only after the focused application has caught up (it answered an EWMH ping).
//!
//! The connection is made on first use and checked before every call (a dead X server shows
//! up as end-of-file on the socket, which costs no round trip), so an X server that restarts
//! on the same display is picked up again by the next action (`crate::x11::Lazy`).

use crate::keysym;
use crate::wayland::{Route, Wayland};
use crate::x11::{self, Client, Lazy, lost};
use enigo::{Direction, Keyboard as _};
use pincer_guest_core::platform;
use pincer_shared::WireError;
use pincer_shared::action::{Action, MouseButton, Point};
use pincer_shared::key::{Key, NamedKey};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use x11rb::connection::{Connection as _, RequestConnection as _};
use x11rb::errors::ReplyError;
use x11rb::protocol::Event;
use x11rb::protocol::xproto::{
    self, ChangeWindowAttributesAux, ConnectionExt as _, EventMask, KeyButMask, Keycode, Mapping,
};
use x11rb::protocol::xtest::{self, ConnectionExt as _};
use x11rb::rust_connection::RustConnection;
use x11rb::wrapper::ConnectionExt as _;

/// Injects input into one X display. Calls take `&mut self`: the server serialises them.
#[derive(Debug)]
pub(crate) struct Input {
    session: Lazy<Session>,
    /// The Wayland route, taken when the display is a Wayland session's.
    wayland: Route,
}

impl Input {
    /// An injector for `display` (`None`: `$DISPLAY`). Connects on first use.
    pub(crate) fn new(display: Option<String>, wayland: Wayland) -> Self {
        Self {
            session: Lazy::new(display),
            wayland: Route::new(wayland),
        }
    }
}

impl platform::Input for Input {
    /// Performs one action and returns once the X server has processed all of its events.
    fn perform(&mut self, action: &Action) -> Result<(), WireError> {
        // Refused before connecting: the answer does not depend on the display.
        if action.is_touch() {
            return Err(no_touch_screen());
        }
        if let Some(desktop) = self.wayland.taken() {
            return desktop.perform(action);
        }
        let x11 = self.session.with(|s| s.perform(action));
        self.wayland.or(x11, |desktop| desktop.perform(action))
    }

    /// Where the pointer is, in root-window pixels.
    fn cursor(&mut self) -> Result<Point, WireError> {
        if let Some(desktop) = self.wayland.taken() {
            return desktop.cursor();
        }
        let x11 = self.session.with(|s| {
            let reply = s
                .conn
                .query_pointer(s.root)
                .map_err(lost)?
                .reply()
                .map_err(refused)?;
            Ok(Point::new(reply.root_x.into(), reply.root_y.into()))
        });
        self.wayland.or(x11, |desktop| desktop.cursor())
    }
}

/// One connection to the X server and what we know about it.
struct Session {
    /// Carries the XTest requests and the queries.
    conn: RustConnection,
    /// Display name as given, for enigo's own connection.
    display: Option<String>,
    /// Root window of the default screen.
    root: xproto::Window,
    /// Root size, kept current from `ConfigureNotify`, so that points off the screen are
    /// refused instead of silently clamped to its edge.
    width: u16,
    /// See `width`.
    height: u16,
    /// How to type characters with plain keycodes.
    keymap: Keymap,
    /// enigo, made on first need (it opens its own connection and reads the keymap).
    enigo: Option<enigo::Enigo>,
    /// Whether a keymap change was reported since the map was last read.
    keymap_changed: bool,
    /// Spare keycodes we bind to characters the keymap lacks.
    scratch: Scratch,
    /// `WM_PROTOCOLS` and `_NET_WM_PING`, to ping applications.
    wm_protocols: xproto::Atom,
    /// See `wm_protocols`.
    net_wm_ping: xproto::Atom,
    /// Tells our pings apart.
    pings: u32,
}

impl Drop for Session {
    fn drop(&mut self) {
        // Leave the keymap as we found it. Best effort: on a dead connection there is
        // nothing left to restore.
        for slot in &self.scratch.slots {
            let _ = self.bind(slot.keycode, 0);
        }
        let _ = self.conn.flush();
    }
}

impl Client for Session {
    fn connect(display: Option<&str>) -> Result<Self, WireError> {
        let (conn, screen) = x11::connect_desktop(display, "input")?;
        let (root, width, height) = (screen.root, screen.width_in_pixels, screen.height_in_pixels);
        if conn
            .extension_information(xtest::X11_EXTENSION_NAME)
            .map_err(lost)?
            .is_none()
        {
            return Err(WireError::Unsupported {
                what: "input injection: the X server has no XTEST extension".into(),
            });
        }
        // Screen size changes (RandR) arrive as ConfigureNotify on the root window;
        // applications answer pings with a message to the root window's substructure.
        conn.change_window_attributes(
            root,
            &ChangeWindowAttributesAux::new()
                .event_mask(EventMask::STRUCTURE_NOTIFY | EventMask::SUBSTRUCTURE_NOTIFY),
        )
        .map_err(lost)?;
        let wm_protocols = conn.intern_atom(false, b"WM_PROTOCOLS").map_err(lost)?;
        let net_wm_ping = conn.intern_atom(false, b"_NET_WM_PING").map_err(lost)?;
        let wm_protocols = wm_protocols.reply().map_err(refused)?.atom;
        let net_wm_ping = net_wm_ping.reply().map_err(refused)?.atom;
        let keymap = Keymap::read(&conn, None)?;
        Ok(Self {
            conn,
            display: display.map(str::to_owned),
            root,
            width,
            height,
            keymap,
            enigo: None,
            keymap_changed: false,
            scratch: Scratch::default(),
            wm_protocols,
            net_wm_ping,
            pings: 0,
        })
    }

    /// Also applies the notifications that arrived since the last call.
    fn alive(&mut self) -> bool {
        self.poll_events().is_ok()
    }
}

impl Session {
    /// Applies queued notifications (screen size, keymap changes). An error means the
    /// connection is dead.
    fn poll_events(&mut self) -> Result<(), WireError> {
        while let Some(event) = self.conn.poll_for_event().map_err(lost)? {
            self.note(&event);
        }
        if std::mem::take(&mut self.keymap_changed) {
            // The server also reports a mapping change whenever the device the events come
            // from switches (to the XTest keyboard, say) even though nothing changed; only
            // a real change (setxkbmap) must reset enigo, whose drop releases held keys.
            let now = Keymap::read(&self.conn, Some(self.keymap.spare))?;
            if (&now.strokes, now.shift) != (&self.keymap.strokes, self.keymap.shift) {
                // enigo reads the keymap once, when it connects; dropping it first also
                // unbinds its spare keycodes, which the new map then counts as spare again.
                self.enigo = None;
                // The new layout replaced our bindings too.
                self.scratch = Scratch::default();
                self.keymap = Keymap::read(&self.conn, None)?;
            }
        }
        Ok(())
    }

    /// Takes note of one notification.
    fn note(&mut self, event: &Event) {
        match event {
            Event::ConfigureNotify(e) if e.window == self.root => {
                self.width = e.width;
                self.height = e.height;
            }
            // Our own and enigo's bindings of spare keycodes are not layout changes.
            Event::MappingNotify(e)
                if e.request == Mapping::KEYBOARD
                    && self.keymap.all_spare(e.first_keycode, e.count) => {}
            Event::MappingNotify(e) if e.request != Mapping::POINTER => {
                self.keymap_changed = true;
            }
            _ => {}
        }
    }

    fn perform(&mut self, action: &Action) -> Result<(), WireError> {
        match action {
            Action::MouseMove { to } => {
                self.motion(*to)?;
                self.sync()
            }
            Action::Click { at, button, count } => {
                if let Some(at) = at {
                    self.motion(*at)?;
                }
                for _ in 0..*count {
                    self.button(button_number(*button), true)?;
                    self.button(button_number(*button), false)?;
                }
                self.sync()
            }
            Action::MouseDown { button } => {
                self.button(button_number(*button), true)?;
                self.sync()
            }
            Action::MouseUp { button } => {
                self.button(button_number(*button), false)?;
                self.sync()
            }
            Action::Drag {
                from,
                to,
                button,
                duration_ms,
            } => self.drag(*from, *to, button_number(*button), *duration_ms),
            Action::Scroll { at, dx, dy } => {
                if let Some(at) = at {
                    self.motion(*at)?;
                }
                // X11 wheels are buttons: 4 up, 5 down, 6 left, 7 right, one click a notch.
                let vertical = if *dy > 0 { 5 } else { 4 };
                let horizontal = if *dx > 0 { 7 } else { 6 };
                for (button, notches) in [(vertical, dy), (horizontal, dx)] {
                    for _ in 0..notches.unsigned_abs() {
                        self.button(button, true)?;
                        self.button(button, false)?;
                    }
                }
                self.sync()
            }
            Action::KeyPress { key } => self.key(*key, Direction::Click),
            Action::KeyDown { key } => self.key(*key, Direction::Press),
            Action::KeyUp { key } => self.key(*key, Direction::Release),
            Action::Hotkey { keys } => self.hotkey(keys),
            Action::TypeText { text } => self.type_text(text),
            Action::Touch(_) | Action::SystemKey(_) => Err(no_touch_screen()),
        }
    }

    /// The point in X11 coordinates, if it is on the screen.
    fn on_screen(&self, p: Point) -> Result<(i16, i16), WireError> {
        let inside =
            (0..i32::from(self.width)).contains(&p.x) && (0..i32::from(self.height)).contains(&p.y);
        match (i16::try_from(p.x), i16::try_from(p.y)) {
            (Ok(x), Ok(y)) if inside => Ok((x, y)),
            _ => Err(WireError::InvalidArgument {
                message: format!(
                    "point ({}, {}) is outside the {}x{} screen",
                    p.x, p.y, self.width, self.height
                ),
            }),
        }
    }

    /// Queues a pointer move; refuses points off the screen.
    fn motion(&self, to: Point) -> Result<(), WireError> {
        let (x, y) = self.on_screen(to)?;
        // detail 0: absolute coordinates.
        self.fake(xproto::MOTION_NOTIFY_EVENT, 0, x, y)
    }

    fn button(&self, button: u8, press: bool) -> Result<(), WireError> {
        let kind = if press {
            xproto::BUTTON_PRESS_EVENT
        } else {
            xproto::BUTTON_RELEASE_EVENT
        };
        self.fake(kind, button, 0, 0)
    }

    fn keycode(&self, keycode: Keycode, press: bool) -> Result<(), WireError> {
        let kind = if press {
            xproto::KEY_PRESS_EVENT
        } else {
            xproto::KEY_RELEASE_EVENT
        };
        self.fake(kind, keycode, 0, 0)
    }

    /// Queues one XTest event. Core events go to the client's own core devices, so no device
    /// id; delay 0 makes the server process it as soon as it reads the request.
    fn fake(&self, kind: u8, detail: u8, x: i16, y: i16) -> Result<(), WireError> {
        self.conn
            .xtest_fake_input(kind, detail, 0, self.root, x, y, 0)
            .map_err(lost)?;
        Ok(())
    }

    /// Sends everything queued and waits until the server has processed it: after this the
    /// events are in the applications' queues, ahead of anything a later request causes.
    fn sync(&self) -> Result<(), WireError> {
        self.conn.sync().map_err(refused)
    }

    fn drag(
        &mut self,
        from: Point,
        to: Point,
        button: u8,
        duration_ms: u32,
    ) -> Result<(), WireError> {
        // Refuse a bad end point before anything is pressed.
        self.on_screen(to)?;
        self.motion(from)?;
        self.button(button, true)?;
        self.sync()?;
        // About 60 motion events a second: enough for toolkits to see a drag start and follow
        // it, without flooding them on long drags.
        let steps = (duration_ms / 16).max(5);
        let pause = Duration::from_millis(duration_ms.into()) / steps;
        let moved = (1..=steps).try_for_each(|i| {
            let f = f64::from(i) / f64::from(steps);
            let lerp = |a: i32, b: i32| a + (f64::from(b - a) * f).round() as i32;
            self.motion(Point::new(lerp(from.x, to.x), lerp(from.y, to.y)))?;
            self.sync()?;
            std::thread::sleep(pause);
            Ok(())
        });
        // Release even when a step failed, so that no button stays down.
        let released = self.button(button, false).and_then(|()| self.sync());
        moved.and(released)
    }

    fn key(&mut self, key: Key, direction: Direction) -> Result<(), WireError> {
        self.enigo_key(enigo_key(key)?, direction)
    }

    fn hotkey(&mut self, keys: &[Key]) -> Result<(), WireError> {
        let mut pressed = Vec::with_capacity(keys.len());
        let mut failure = None;
        for &key in keys {
            match self.key(key, Direction::Press) {
                Ok(()) => pressed.push(key),
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        for &key in pressed.iter().rev() {
            if let Err(e) = self.key(key, Direction::Release) {
                failure.get_or_insert(e);
            }
        }
        failure.map_or(Ok(()), Err)
    }

    /// Types `text` exactly, whatever the agent holds down or has locked: keys held by
    /// `KeyDown` and Caps Lock are lifted for the duration and restored afterwards.
    fn type_text(&mut self, text: &str) -> Result<(), WireError> {
        let held = self
            .enigo
            .as_mut()
            .map(|enigo| enigo.held().0)
            .unwrap_or_default();
        let state = self
            .conn
            .query_pointer(self.root)
            .map_err(lost)?
            .reply()
            .map_err(refused)?
            .mask;
        let caps = self
            .keymap
            .caps_lock
            .filter(|_| state.contains(KeyButMask::LOCK));
        for &key in held.iter().rev() {
            self.enigo_key(key, Direction::Release)?;
        }
        if let Some(caps) = caps {
            self.keycode(caps, true)?;
            self.keycode(caps, false)?;
        }
        let typed = self.type_plain(text);
        // Restore even when typing failed, so that the agent's view of the keyboard holds.
        let mut restored = Ok(());
        if let Some(caps) = caps {
            restored = self
                .keycode(caps, true)
                .and_then(|()| self.keycode(caps, false))
                .and_then(|()| self.sync());
        }
        for &key in &held {
            let pressed = self.enigo_key(key, Direction::Press);
            restored = restored.and(pressed);
        }
        typed.and(restored)
    }

    /// Types `text` with no modifier in effect: characters on the keymap as plain XTest key
    /// events (with Shift where the character is on the shifted level), the rest on spare
    /// keycodes bound to them.
    fn type_plain(&mut self, text: &str) -> Result<(), WireError> {
        let mut shift_down = false;
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            // "\r\n" is one line break, not two.
            if c == '\r' && chars.peek() == Some(&'\n') {
                continue;
            }
            match self.keymap.stroke(c) {
                Some(stroke) => {
                    if stroke.shift != shift_down
                        && let Some(shift) = self.keymap.shift
                    {
                        self.keycode(shift, stroke.shift)?;
                        shift_down = stroke.shift;
                    }
                    self.keycode(stroke.keycode, true)?;
                    self.keycode(stroke.keycode, false)?;
                }
                None => {
                    if let (true, Some(shift)) = (shift_down, self.keymap.shift) {
                        self.keycode(shift, false)?;
                        shift_down = false;
                    }
                    match self.scratch_keycode(keysym::of_char(c))? {
                        Some(keycode) => {
                            self.keycode(keycode, true)?;
                            self.keycode(keycode, false)?;
                        }
                        // No spare keycode of our own: enigo may still find one.
                        None => self.enigo_key(char_key(c), Direction::Click)?,
                    }
                }
            }
        }
        if let (true, Some(shift)) = (shift_down, self.keymap.shift) {
            self.keycode(shift, false)?;
        }
        self.sync()
    }

    /// A key event through enigo, in order with the events queued on our connection.
    fn enigo_key(&mut self, key: enigo::Key, direction: Direction) -> Result<(), WireError> {
        // enigo's events travel on its own connection: ours must be processed first or
        // they arrive out of order.
        self.sync()?;
        let result = self.enigo()?.key(key, direction);
        result.map_err(|e| self.enigo_failure(&e))
    }

    /// Binds `keysym` to one of our spare keycodes, unless one already has it.
    /// `None` when there are no spare keycodes to bind.
    fn scratch_keycode(&mut self, keysym: u32) -> Result<Option<Keycode>, WireError> {
        self.reserve_scratch()?;
        let scratch = &mut self.scratch;
        scratch.clock += 1;
        let now = scratch.clock;
        if let Some(slot) = scratch.slots.iter_mut().find(|s| s.keysym == keysym) {
            slot.last_use = now;
            slot.pending = true;
            return Ok(Some(slot.keycode));
        }
        let Some(i) = (0..scratch.slots.len()).min_by_key(|&i| scratch.slots[i].last_use) else {
            return Ok(None);
        };
        // Applications re-read the keymap when they see a change, and translate the key
        // events still queued with what they read then: rebinding a keycode they have not
        // yet translated would turn its last character into the new one.
        if scratch.slots[i].pending {
            self.wait_for_application()?;
            for slot in &mut self.scratch.slots {
                slot.pending = false;
            }
        }
        let keycode = self.scratch.slots[i].keycode;
        self.bind(keycode, keysym)?;
        self.scratch.slots[i] = Slot {
            keycode,
            keysym,
            last_use: now,
            pending: true,
        };
        Ok(Some(keycode))
    }

    /// Waits until the focused application has read every event sent so far: it answers an
    /// EWMH ping only after the events queued before it. Applications that do not take pings
    /// (plain Xlib ones, which read fast) get a fixed while instead.
    fn wait_for_application(&mut self) -> Result<(), WireError> {
        self.sync()?;
        let Some(window) = self.ping_target()? else {
            std::thread::sleep(UNPINGABLE_SETTLE);
            return Ok(());
        };
        self.pings = self.pings.wrapping_add(1);
        let serial = self.pings;
        let ping = xproto::ClientMessageEvent::new(
            32,
            window,
            self.wm_protocols,
            [self.net_wm_ping, serial, window, 0, 0],
        );
        self.conn
            .send_event(false, window, EventMask::NO_EVENT, ping)
            .map_err(lost)?;
        self.conn.flush().map_err(lost)?;
        let deadline = Instant::now() + PING_TIMEOUT;
        loop {
            while let Some(event) = self.conn.poll_for_event().map_err(lost)? {
                if let Event::ClientMessage(pong) = &event {
                    let data = pong.data.as_data32();
                    if pong.type_ == self.wm_protocols && data[..2] == [self.net_wm_ping, serial] {
                        return Ok(());
                    }
                }
                self.note(&event);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                // A busy or hung application: go on rather than fail the action.
                return Ok(());
            }
            x11::wait_readable(&self.conn, left);
        }
    }

    /// The focused window that takes `_NET_WM_PING`, walking up from the input focus.
    fn ping_target(&self) -> Result<Option<xproto::Window>, WireError> {
        let mut window = self
            .conn
            .get_input_focus()
            .map_err(lost)?
            .reply()
            .map_err(refused)?
            .focus;
        if window == u32::from(xproto::InputFocus::POINTER_ROOT) {
            // Keys go to the window under the pointer.
            window = self
                .conn
                .query_pointer(self.root)
                .map_err(lost)?
                .reply()
                .map_err(refused)?
                .child;
        }
        // Window trees are shallow; the bound only guards against a server that loops.
        for _ in 0..32 {
            if window == x11rb::NONE || window == self.root {
                break;
            }
            let protocols = self
                .conn
                .get_property(
                    false,
                    window,
                    self.wm_protocols,
                    xproto::AtomEnum::ATOM,
                    0,
                    64,
                )
                .map_err(lost)?;
            let tree = self.conn.query_tree(window).map_err(lost)?;
            let (protocols, tree) = match (protocols.reply(), tree.reply()) {
                (Ok(protocols), Ok(tree)) => (protocols, tree),
                (Err(ReplyError::ConnectionError(e)), _)
                | (_, Err(ReplyError::ConnectionError(e))) => return Err(lost(e)),
                // A window that vanished meanwhile is no target.
                _ => return Ok(None),
            };
            if protocols
                .value32()
                .is_some_and(|mut atoms| atoms.any(|a| a == self.net_wm_ping))
            {
                return Ok(Some(window));
            }
            window = tree.parent;
        }
        Ok(None)
    }

    /// Takes the spare keycodes for our own bindings, leaving enigo a few, by binding them
    /// to a placeholder: enigo takes every keycode it sees unbound when it connects, and two
    /// binders on one keycode would type each other's characters.
    fn reserve_scratch(&mut self) -> Result<(), WireError> {
        if self.scratch.reserved {
            return Ok(());
        }
        self.scratch.reserved = true;
        // Keycode 8 types nothing on evdev-based servers (it is evdev code 0).
        let spare: Vec<Keycode> = (9..=255)
            .filter(|&k| self.keymap.spare[usize::from(k)])
            .collect();
        let kept = spare.len().div_ceil(2).min(ENIGO_SPARES);
        for &keycode in &spare[kept..] {
            self.bind(keycode, VOID_SYMBOL)?;
            self.scratch.slots.push(Slot {
                keycode,
                keysym: VOID_SYMBOL,
                last_use: 0,
                pending: false,
            });
        }
        self.sync()
    }

    /// Binds `keycode` to `keysym` on both levels (a single keysym would be read as a lower
    /// and upper case pair); keysym 0 unbinds it.
    fn bind(&self, keycode: Keycode, keysym: u32) -> Result<(), WireError> {
        self.conn
            .change_keyboard_mapping(1, keycode, 2, &[keysym, keysym])
            .map_err(lost)?;
        Ok(())
    }

    fn enigo(&mut self) -> Result<&mut enigo::Enigo, WireError> {
        if let Some(ref mut enigo) = self.enigo {
            return Ok(enigo);
        }
        self.reserve_scratch()?;
        let settings = enigo::Settings {
            linux_delay: 0,
            x11_display: self.display.clone(),
            release_keys_when_dropped: true,
            ..enigo::Settings::default()
        };
        match enigo::Enigo::new(&settings) {
            Ok(enigo) => Ok(self.enigo.insert(enigo)),
            Err(e) => {
                // Tell "the display is gone" apart from enigo's own limits (no spare keycode).
                self.sync()?;
                Err(WireError::Input {
                    message: format!("cannot set up key injection: {e}"),
                })
            }
        }
    }

    /// enigo's errors are static strings: ask our own connection whether the display is
    /// still there to tell display loss from a key enigo could not produce.
    fn enigo_failure(&self, e: &enigo::InputError) -> WireError {
        match self.sync() {
            Err(lost) => lost,
            Ok(()) => WireError::Input {
                message: format!("key injection failed: {e}"),
            },
        }
    }
}

fn no_touch_screen() -> WireError {
    WireError::Unsupported {
        what: "touch gestures and phone system keys: this guest is an X11 desktop with a \
               mouse and keyboard and no touch screen"
            .into(),
    }
}

/// X11 button number of a mouse button.
fn button_number(button: MouseButton) -> u8 {
    match button {
        MouseButton::Left => 1,
        MouseButton::Middle => 2,
        MouseButton::Right => 3,
    }
}

/// The enigo key for a protocol key.
fn enigo_key(key: Key) -> Result<enigo::Key, WireError> {
    use enigo::Key as E;
    let named = match key {
        Key::Char(c) => return Ok(char_key(c)),
        Key::Named(named) => named,
    };
    Ok(match named {
        NamedKey::Shift => E::Shift,
        NamedKey::Control => E::Control,
        NamedKey::Alt => E::Alt,
        NamedKey::Super => E::Meta,
        // enigo has no AltGr on X11; its keysym is ISO_Level3_Shift.
        NamedKey::AltGr => E::Other(0xfe03),
        NamedKey::CapsLock => E::CapsLock,
        NamedKey::Return => E::Return,
        NamedKey::Tab => E::Tab,
        NamedKey::Escape => E::Escape,
        NamedKey::Backspace => E::Backspace,
        NamedKey::Delete => E::Delete,
        NamedKey::Insert => E::Insert,
        NamedKey::Home => E::Home,
        NamedKey::End => E::End,
        NamedKey::PageUp => E::PageUp,
        NamedKey::PageDown => E::PageDown,
        NamedKey::Left => E::LeftArrow,
        NamedKey::Right => E::RightArrow,
        NamedKey::Up => E::UpArrow,
        NamedKey::Down => E::DownArrow,
        NamedKey::Space => E::Space,
        NamedKey::PrintScreen => E::PrintScr,
        // enigo's LMenu is the X11 Menu keysym.
        NamedKey::Menu => E::LMenu,
        NamedKey::Pause => E::Pause,
        NamedKey::NumLock => E::Numlock,
        NamedKey::ScrollLock => E::ScrollLock,
        NamedKey::F(n) => match n {
            1 => E::F1,
            2 => E::F2,
            3 => E::F3,
            4 => E::F4,
            5 => E::F5,
            6 => E::F6,
            7 => E::F7,
            8 => E::F8,
            9 => E::F9,
            10 => E::F10,
            11 => E::F11,
            12 => E::F12,
            13 => E::F13,
            14 => E::F14,
            15 => E::F15,
            16 => E::F16,
            17 => E::F17,
            18 => E::F18,
            19 => E::F19,
            20 => E::F20,
            21 => E::F21,
            22 => E::F22,
            23 => E::F23,
            24 => E::F24,
            _ => {
                return Err(WireError::InvalidArgument {
                    message: format!("there is no key F{n}: function keys are F1 to F24"),
                });
            }
        },
    })
}

/// The enigo key that types `c`. Control characters are the keys people mean by them:
/// enigo would turn '\n' into the Linefeed keysym, which no toolkit treats as Enter.
fn char_key(c: char) -> enigo::Key {
    match c {
        '\n' | '\r' => enigo::Key::Return,
        '\t' => enigo::Key::Tab,
        '\u{8}' => enigo::Key::Backspace,
        '\u{1b}' => enigo::Key::Escape,
        '\u{7f}' => enigo::Key::Delete,
        c => enigo::Key::Unicode(c),
    }
}

/// Spare keycodes enigo keeps for the keys it binds itself (`KeyPress` of F13-F24 on many
/// layouts, or of a character off the keymap); the rest are ours for typing text.
const ENIGO_SPARES: usize = 4;
/// How long we give an application that does not answer pings to read its events before
/// we rebind a keycode it may not have translated yet.
const UNPINGABLE_SETTLE: Duration = Duration::from_millis(50);
/// How long we wait for an application to answer a ping.
const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// The keysym that types nothing, for keycodes we hold but have not bound yet.
const VOID_SYMBOL: u32 = 0x00ff_ffff;

/// Our spare keycodes.
#[derive(Debug, Default)]
struct Scratch {
    /// Whether the keycodes were taken (on first need).
    reserved: bool,
    slots: Vec<Slot>,
    /// Counts uses, to find the least recently used slot.
    clock: u64,
}

/// One spare keycode and what it types now.
#[derive(Debug, Clone, Copy)]
struct Slot {
    keycode: Keycode,
    keysym: u32,
    /// `Scratch::clock` at its last use.
    last_use: u64,
    /// Whether it typed since the application last caught up with our events.
    pending: bool,
}

/// The key events that type one character.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stroke {
    keycode: Keycode,
    /// Whether the character is on the shifted level.
    shift: bool,
}

/// The server's keymap, as a lookup from keysym to the keycode that types it.
#[derive(Debug)]
struct Keymap {
    strokes: HashMap<u32, Stroke>,
    /// A keycode bound to Shift, if there is one.
    shift: Option<Keycode>,
    /// The Caps Lock key, if there is one.
    caps_lock: Option<Keycode>,
    /// Keycodes that had no keysym when the map was read: the ones enigo binds.
    spare: [bool; 256],
}

impl Keymap {
    /// Reads the server's map. `spare` keeps the spare keycodes of an earlier read, so that
    /// characters enigo has bound since are not mistaken for part of the layout.
    fn read(conn: &RustConnection, spare: Option<[bool; 256]>) -> Result<Self, WireError> {
        let setup = conn.setup();
        let (min, max) = (setup.min_keycode, setup.max_keycode);
        let mapping = conn
            .get_keyboard_mapping(min, max - min + 1)
            .map_err(lost)?;
        let modifiers = conn.get_modifier_mapping().map_err(lost)?;
        let mapping = mapping.reply().map_err(refused)?;
        let modifiers = modifiers.reply().map_err(refused)?;
        // Row 0 of the modifier map is Shift.
        let per_modifier = usize::from(modifiers.keycodes_per_modifier());
        let shift = modifiers.keycodes[..per_modifier.min(modifiers.keycodes.len())]
            .iter()
            .copied()
            .find(|&k| k != 0);
        let per_keycode = usize::from(mapping.keysyms_per_keycode).max(1);
        let rows: Vec<(Keycode, &[u32])> = (min..=max)
            .zip(mapping.keysyms.chunks(per_keycode))
            .collect();
        let spare = spare.unwrap_or_else(|| {
            let mut spare = [false; 256];
            for &(keycode, syms) in &rows {
                spare[usize::from(keycode)] = syms.iter().all(|&s| s == 0);
            }
            spare
        });
        let rows: Vec<_> = rows
            .into_iter()
            .filter(|&(keycode, _)| !spare[usize::from(keycode)])
            .collect();
        let mut strokes = HashMap::new();
        // Unshifted levels first, so that a character on both is typed without Shift.
        for &(keycode, syms) in &rows {
            if let Some(&sym) = syms.first().filter(|&&s| s != 0) {
                strokes.entry(sym).or_insert(Stroke {
                    keycode,
                    shift: false,
                });
            }
        }
        if shift.is_some() {
            for &(keycode, syms) in &rows {
                if let Some(&sym) = syms.get(1).filter(|&&s| s != 0) {
                    strokes.entry(sym).or_insert(Stroke {
                        keycode,
                        shift: true,
                    });
                }
            }
        }
        let caps_lock = strokes.get(&0xffe5).filter(|s| !s.shift).map(|s| s.keycode);
        Ok(Self {
            strokes,
            shift,
            caps_lock,
            spare,
        })
    }

    fn stroke(&self, c: char) -> Option<Stroke> {
        self.strokes.get(&keysym::of_char(c)).copied()
    }

    fn all_spare(&self, first: Keycode, count: u8) -> bool {
        (usize::from(first)..usize::from(first) + usize::from(count))
            .all(|k| self.spare.get(k).copied().unwrap_or(false))
    }
}

/// A request that failed: the connection is gone, or the server refused it.
fn refused(e: ReplyError) -> WireError {
    x11::refused(e, "an input request", |message| WireError::Input {
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{FixedXvfb, Xvfb, openbox, wait_for};
    use crate::wayland::Wayland;
    use pincer_guest_core::platform::{Clipboard as _, Input as _, Windows as _};
    use pincer_shared::action::Gesture;
    use std::process::{Child, Command, Stdio};
    use x11rb::COPY_DEPTH_FROM_PARENT;
    use x11rb::protocol::xproto::{CreateWindowAux, InputFocus, WindowClass};

    /// A plain X client with a focused 400x300 window at the origin that records the input
    /// it receives.
    struct Target {
        conn: RustConnection,
        window: xproto::Window,
    }

    impl Target {
        fn new(display: &str) -> Self {
            let (conn, screen) = x11rb::connect(Some(display)).unwrap();
            let root = conn.setup().roots[screen].root;
            let window = conn.generate_id().unwrap();
            let mask = EventMask::KEY_PRESS
                | EventMask::KEY_RELEASE
                | EventMask::BUTTON_PRESS
                | EventMask::BUTTON_RELEASE
                | EventMask::BUTTON_MOTION
                | EventMask::STRUCTURE_NOTIFY;
            conn.create_window(
                COPY_DEPTH_FROM_PARENT,
                window,
                root,
                0,
                0,
                400,
                300,
                0,
                WindowClass::INPUT_OUTPUT,
                0,
                &CreateWindowAux::new().event_mask(mask),
            )
            .unwrap();
            conn.map_window(window).unwrap();
            conn.flush().unwrap();
            loop {
                if let Event::MapNotify(_) = conn.wait_for_event().unwrap() {
                    break;
                }
            }
            conn.set_input_focus(InputFocus::PARENT, window, x11rb::CURRENT_TIME)
                .unwrap();
            conn.sync().unwrap();
            Self { conn, window }
        }

        /// Events until `done` says enough (or 5 s pass).
        fn events(&self, done: impl Fn(&[Event]) -> bool) -> Vec<Event> {
            let mut events = Vec::new();
            let start = Instant::now();
            while !done(&events) && start.elapsed() < Duration::from_secs(5) {
                match self.conn.poll_for_event().unwrap() {
                    Some(e) => events.push(e),
                    None => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            events
        }

        /// Events until none has come for 300 ms.
        fn settle(&self) -> Vec<Event> {
            let mut events = Vec::new();
            let mut quiet_since = Instant::now();
            while quiet_since.elapsed() < Duration::from_millis(300) {
                match self.conn.poll_for_event().unwrap() {
                    Some(e) => {
                        events.push(e);
                        quiet_since = Instant::now();
                    }
                    None => std::thread::sleep(Duration::from_millis(5)),
                }
            }
            events
        }

        fn count(events: &[Event], f: impl Fn(&Event) -> bool) -> usize {
            events.iter().filter(|e| f(e)).count()
        }

        /// The keysym a key event produced: the shifted column when Shift was down.
        fn keysyms(&self, events: &[Event]) -> Vec<(bool, u32)> {
            let setup = self.conn.setup();
            let (min, max) = (setup.min_keycode, setup.max_keycode);
            let map = self
                .conn
                .get_keyboard_mapping(min, max - min + 1)
                .unwrap()
                .reply()
                .unwrap();
            let per = usize::from(map.keysyms_per_keycode);
            let sym = |keycode: u8, state: KeyButMask| {
                let row = &map.keysyms[usize::from(keycode - min) * per..][..per];
                if state.contains(KeyButMask::SHIFT) && row[1] != 0 {
                    row[1]
                } else {
                    row[0]
                }
            };
            events
                .iter()
                .filter_map(|e| match e {
                    Event::KeyPress(k) => Some((true, sym(k.detail, k.state))),
                    Event::KeyRelease(k) => Some((false, sym(k.detail, k.state))),
                    _ => None,
                })
                .collect()
        }
    }

    /// The character a keysym types, for reading typed text back; modifiers type nothing.
    fn keysym_char(sym: u32) -> Option<char> {
        match sym {
            0xffe1..=0xffee | 0xfe03 => None,
            0xff0d => Some('\n'),
            0xff09 => Some('\t'),
            0x20ac => Some('€'),
            0x20..=0x7e | 0xa0..=0xff => char::from_u32(sym),
            0x0100_0000.. => char::from_u32(sym - 0x0100_0000),
            _ => Some('\u{fffd}'),
        }
    }

    #[test]
    fn values_are_send() {
        fn send<T: Send>() {}
        send::<Input>();
    }

    /// Touch gestures and phone keys (invalid actions never get this far: the guest core
    /// refuses them).
    #[test]
    fn touch_actions_are_refused_before_connecting() {
        // No X server behind this name: refusals must not need one.
        let mut input = Input::new(Some(":4321".into()), Wayland::new());
        let touch = Action::Touch(Gesture::Tap {
            at: Point::new(1, 1),
        });
        let home = Action::SystemKey(pincer_shared::action::SystemKey::Home);
        for action in [touch, home] {
            match input.perform(&action) {
                Err(WireError::Unsupported { what }) => assert!(what.contains("no touch screen")),
                other => panic!("{action:?}: {other:?}"),
            }
        }
        // Anything that needs the display reports it missing.
        assert!(matches!(
            input.perform(&Action::click(1, 1)),
            Err(WireError::Display { .. })
        ));
    }

    #[test]
    fn every_named_key_maps_and_f25_is_refused() {
        let named = [
            NamedKey::Shift,
            NamedKey::Control,
            NamedKey::Alt,
            NamedKey::Super,
            NamedKey::AltGr,
            NamedKey::CapsLock,
            NamedKey::Return,
            NamedKey::Tab,
            NamedKey::Escape,
            NamedKey::Backspace,
            NamedKey::Delete,
            NamedKey::Insert,
            NamedKey::Home,
            NamedKey::End,
            NamedKey::PageUp,
            NamedKey::PageDown,
            NamedKey::Left,
            NamedKey::Right,
            NamedKey::Up,
            NamedKey::Down,
            NamedKey::Space,
            NamedKey::PrintScreen,
            NamedKey::Menu,
            NamedKey::Pause,
            NamedKey::NumLock,
            NamedKey::ScrollLock,
        ];
        let fkeys = (1..=24).map(NamedKey::F);
        let mut seen = Vec::new();
        for key in named.into_iter().chain(fkeys) {
            let mapped = enigo_key(Key::Named(key)).unwrap();
            assert!(
                !seen.contains(&mapped),
                "{key:?} maps to a key already used"
            );
            seen.push(mapped);
        }
        for n in [0, 25] {
            assert!(matches!(
                enigo_key(Key::Named(NamedKey::F(n))),
                Err(WireError::InvalidArgument { .. })
            ));
        }
        assert_eq!(enigo_key(Key::Char('é')).unwrap(), enigo::Key::Unicode('é'));
        assert_eq!(enigo_key(Key::Char('\n')).unwrap(), enigo::Key::Return);
    }

    #[test]
    fn move_reads_back_through_cursor() {
        let x = Xvfb::start(640, 480);
        let mut input = Input::new(Some(x.display.clone()), Wayland::new());
        for p in [Point::new(123, 45), Point::new(0, 0), Point::new(639, 479)] {
            input.perform(&Action::MouseMove { to: p }).unwrap();
            assert_eq!(input.cursor().unwrap(), p);
        }
        for p in [
            Point::new(640, 10),
            Point::new(-1, 10),
            Point::new(10, 70_000),
        ] {
            assert!(matches!(
                input.perform(&Action::MouseMove { to: p }),
                Err(WireError::InvalidArgument { .. })
            ));
        }
        assert_eq!(input.cursor().unwrap(), Point::new(639, 479));
    }

    #[test]
    fn clicks_scrolls_and_drags_arrive_at_an_x_client() {
        let x = Xvfb::start(640, 480);
        let target = Target::new(&x.display);
        let mut input = Input::new(Some(x.display.clone()), Wayland::new());
        let press = |e: &Event| matches!(e, Event::ButtonPress(_));
        let release = |e: &Event| matches!(e, Event::ButtonRelease(_));
        let buttons = |events: &[Event]| -> Vec<(bool, u8, i16, i16)> {
            events
                .iter()
                .filter_map(|e| match e {
                    Event::ButtonPress(b) if b.event == target.window => {
                        Some((true, b.detail, b.event_x, b.event_y))
                    }
                    Event::ButtonRelease(b) if b.event == target.window => {
                        Some((false, b.detail, b.event_x, b.event_y))
                    }
                    _ => None,
                })
                .collect()
        };

        input.perform(&Action::click(50, 60)).unwrap();
        let events = target.events(|e| Target::count(e, release) >= 1);
        assert_eq!(buttons(&events), [(true, 1, 50, 60), (false, 1, 50, 60)]);

        input
            .perform(&Action::Click {
                at: Some(Point::new(70, 80)),
                button: MouseButton::Right,
                count: 2,
            })
            .unwrap();
        let events = target.events(|e| Target::count(e, release) >= 2);
        assert_eq!(
            buttons(&events),
            [
                (true, 3, 70, 80),
                (false, 3, 70, 80),
                (true, 3, 70, 80),
                (false, 3, 70, 80)
            ]
        );

        // In place, where the last click left the pointer.
        input
            .perform(&Action::Click {
                at: None,
                button: MouseButton::Middle,
                count: 3,
            })
            .unwrap();
        let events = target.events(|e| Target::count(e, release) >= 3);
        assert_eq!(Target::count(&events, press), 3);
        assert!(
            buttons(&events)
                .iter()
                .all(|&b| b.1 == 2 && (b.2, b.3) == (70, 80))
        );

        input
            .perform(&Action::MouseDown {
                button: MouseButton::Left,
            })
            .unwrap();
        input
            .perform(&Action::MouseUp {
                button: MouseButton::Left,
            })
            .unwrap();
        let events = target.events(|e| Target::count(e, release) >= 1);
        assert_eq!(buttons(&events), [(true, 1, 70, 80), (false, 1, 70, 80)]);

        input
            .perform(&Action::Scroll {
                at: Some(Point::new(10, 20)),
                dx: -1,
                dy: 2,
            })
            .unwrap();
        let events = target.events(|e| Target::count(e, release) >= 3);
        let pressed: Vec<_> = buttons(&events).into_iter().filter(|b| b.0).collect();
        assert_eq!(
            pressed,
            [(true, 5, 10, 20), (true, 5, 10, 20), (true, 6, 10, 20)]
        );

        let start = Instant::now();
        input
            .perform(&Action::Drag {
                from: Point::new(20, 30),
                to: Point::new(220, 130),
                button: MouseButton::Left,
                duration_ms: 200,
            })
            .unwrap();
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(200), "{took:?}");
        let events = target.events(|e| Target::count(e, release) >= 1);
        assert_eq!(buttons(&events), [(true, 1, 20, 30), (false, 1, 220, 130)]);
        let motions: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                Event::MotionNotify(m) => Some((m.event_x, m.event_y)),
                _ => None,
            })
            .collect();
        // One event per step, spread over the path.
        assert!(motions.len() >= 10, "{motions:?}");
        assert_eq!(motions.last(), Some(&(220, 130)));
        assert!(
            motions
                .windows(2)
                .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1)
        );
        assert_eq!(input.cursor().unwrap(), Point::new(220, 130));
    }

    #[test]
    fn keys_and_hotkeys_arrive_in_order() {
        let x = Xvfb::start(640, 480);
        let target = Target::new(&x.display);
        let mut input = Input::new(Some(x.display.clone()), Wayland::new());
        let keys = |events: &[Event]| Target::count(events, |e| matches!(e, Event::KeyRelease(_)));

        let ctrl_shift_t = vec![
            Key::Named(NamedKey::Control),
            Key::Named(NamedKey::Shift),
            Key::Char('t'),
        ];
        input
            .perform(&Action::Hotkey { keys: ctrl_shift_t })
            .unwrap();
        let events = target.events(|e| keys(e) >= 3);
        let (ctrl, shift, t) = (0xffe3, 0xffe1, u32::from('t'));
        let syms: Vec<_> = target
            .keysyms(&events)
            .into_iter()
            // 't' with Shift held reads as 'T' from the shifted column.
            .map(|(down, sym)| (down, if sym == u32::from('T') { t } else { sym }))
            .collect();
        assert_eq!(
            syms,
            [
                (true, ctrl),
                (true, shift),
                (true, t),
                (false, t),
                (false, shift),
                (false, ctrl)
            ]
        );
        // The letter went out with both modifiers down.
        // The letter went out with both modifiers down.
        let presses: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                Event::KeyPress(k) => Some(k.state),
                _ => None,
            })
            .collect();
        assert!(presses[2].contains(KeyButMask::CONTROL | KeyButMask::SHIFT));

        input
            .perform(&Action::KeyPress {
                key: Key::Named(NamedKey::F(5)),
            })
            .unwrap();
        input
            .perform(&Action::KeyDown {
                key: Key::Named(NamedKey::AltGr),
            })
            .unwrap();
        input
            .perform(&Action::KeyUp {
                key: Key::Named(NamedKey::AltGr),
            })
            .unwrap();
        // F20 is not on Xvfb's keymap: enigo binds it to a spare keycode.
        input
            .perform(&Action::KeyPress {
                key: Key::Named(NamedKey::F(20)),
            })
            .unwrap();
        let events = target.events(|e| keys(e) >= 3);
        assert_eq!(
            target.keysyms(&events),
            [
                (true, 0xffc2),
                (false, 0xffc2),
                (true, 0xfe03),
                (false, 0xfe03),
                (true, 0xffd1),
                (false, 0xffd1)
            ]
        );
    }

    #[test]
    fn typed_text_arrives_exactly_and_in_order() {
        let x = Xvfb::start(640, 480);
        let target = Target::new(&x.display);
        let mut input = Input::new(Some(x.display.clone()), Wayland::new());
        // Plain, shifted, off-keymap (é, €, ñ: enigo remaps), and repeated characters.
        let text = "Hello, World! ~`{}|<>?:\"+_ 123 é€ mañana ééAA\tend\n";
        input
            .perform(&Action::TypeText { text: text.into() })
            .unwrap();
        let typed: String = target
            .keysyms(&target.settle())
            .into_iter()
            .filter(|&(down, _)| down)
            .filter_map(|(_, sym)| keysym_char(sym))
            .collect();
        assert_eq!(typed, text);
        // "\r\n" is one Return.
        input
            .perform(&Action::TypeText {
                text: "a\r\nb".into(),
            })
            .unwrap();
        let typed: String = target
            .keysyms(&target.settle())
            .into_iter()
            .filter(|&(down, _)| down)
            .filter_map(|(_, sym)| keysym_char(sym))
            .collect();
        assert_eq!(typed, "a\nb");
    }

    #[test]
    fn typing_ignores_held_and_locked_modifiers() {
        let x = Xvfb::start(640, 480);
        let target = Target::new(&x.display);
        let mut input = Input::new(Some(x.display.clone()), Wayland::new());
        let caps = Action::KeyPress {
            key: Key::Named(NamedKey::CapsLock),
        };
        let ctrl = Key::Named(NamedKey::Control);
        input.perform(&caps).unwrap();
        input.perform(&Action::KeyDown { key: ctrl }).unwrap();
        target.settle();
        input
            .perform(&Action::TypeText {
                text: "aB1é".into(),
            })
            .unwrap();
        let events = target.settle();
        let presses = events.iter().filter_map(|e| match e {
            Event::KeyPress(k) => Some(k.state),
            _ => None,
        });
        let syms = target
            .keysyms(&events)
            .into_iter()
            .filter(|&(down, _)| down);
        let mut typed = String::new();
        for (state, (_, sym)) in presses.zip(syms) {
            if let Some(c) = keysym_char(sym) {
                typed.push(c);
                // No character went out with Control or Caps Lock in effect.
                assert!(
                    !state.intersects(KeyButMask::CONTROL | KeyButMask::LOCK),
                    "{c}: {state:?}"
                );
            }
        }
        assert_eq!(typed, "aB1é");
        // Both are back as the agent left them.
        let state = |input: &mut Input| {
            input
                .session
                .with(|s| Ok(s.conn.query_pointer(s.root).unwrap().reply().unwrap().mask))
        };
        let mask = state(&mut input).unwrap();
        assert!(
            mask.contains(KeyButMask::CONTROL | KeyButMask::LOCK),
            "{mask:?}"
        );
        input.perform(&Action::KeyUp { key: ctrl }).unwrap();
        input.perform(&caps).unwrap();
        let mask = state(&mut input).unwrap();
        assert!(
            !mask.intersects(KeyButMask::CONTROL | KeyButMask::LOCK),
            "{mask:?}"
        );
    }

    #[test]
    fn a_layout_change_is_followed() {
        let x = Xvfb::start(640, 480);
        let target = Target::new(&x.display);
        let mut input = Input::new(Some(x.display.clone()), Wayland::new());
        let typed = |target: &Target| -> String {
            target
                .keysyms(&target.settle())
                .into_iter()
                .filter(|&(down, _)| down)
                .filter_map(|(_, sym)| keysym_char(sym))
                .collect()
        };
        let y = Action::KeyPress {
            key: Key::Char('y'),
        };
        input
            .perform(&Action::TypeText { text: "yz".into() })
            .unwrap();
        input.perform(&y).unwrap();
        assert_eq!(typed(&target), "yzy");
        // German swaps Y and Z and has ß where US has '-'.
        let status = Command::new("setxkbmap")
            .args(["-display", &x.display, "de"])
            .status()
            .unwrap();
        assert!(status.success());
        input
            .perform(&Action::TypeText {
                text: "yzß-".into(),
            })
            .unwrap();
        input.perform(&y).unwrap();
        assert_eq!(typed(&target), "yzß-y");
    }

    /// A child process killed on drop, so a failing test leaves nothing behind.
    struct Reap(Child);

    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    #[test]
    fn typed_text_reaches_a_gtk_entry_exactly() {
        use crate::testutil::DbusSession;
        use std::io::Read as _;
        let x = Xvfb::start(800, 600);
        let bus = DbusSession::start(&x.display);
        let envs = bus.envs(&x.display);
        let _wm = openbox(&x.display, &envs);
        let zenity = Command::new("zenity")
            .args(["--entry", "--title", "pincer entry"])
            .envs(envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("zenity is installed");
        let mut zenity = Reap(zenity);
        let pid = zenity.0.id();
        let mut windows = crate::window::Windows::new(Some(x.display.clone()));
        wait_for(Duration::from_secs(20), || {
            windows
                .active()
                .ok()
                .flatten()
                .filter(|w| w.pid == Some(pid))
        })
        .expect("the zenity dialog became active");

        let mut input = Input::new(Some(x.display.clone()), Wayland::new());
        // The entry has the focus. Shifted symbols, repeats, and characters off the keymap:
        // far more distinct ones than there are spare keycodes, so keycodes get rebound
        // while GTK is still behind.
        let text = concat!(
            "Hello, World! ~`{}|<>?:\"+_ 123 é€ mañana ééÆß ",
            "日本語のテキストを入力します。漢字とひらがなとカタカナ、",
            "それにΑλφάβητο και Кириллица! ",
            "中文输入法测试：我们今天去公园散步，天气很好。"
        );
        input
            .perform(&Action::TypeText { text: text.into() })
            .unwrap();
        let ctrl = |c| Action::Hotkey {
            keys: vec![Key::Named(NamedKey::Control), Key::Char(c)],
        };
        input.perform(&ctrl('a')).unwrap();
        input.perform(&ctrl('c')).unwrap();
        let mut clipboard = crate::clipboard::Clipboard::new(Some(x.display.clone()));
        let copied = wait_for(Duration::from_secs(5), || {
            clipboard.get_text().ok().flatten()
        });
        assert_eq!(copied.as_deref(), Some(text));

        // Enter confirms the dialog, which prints the entry.
        input
            .perform(&Action::TypeText { text: "\n".into() })
            .unwrap();
        let exited = wait_for(Duration::from_secs(10), || {
            zenity.0.try_wait().ok().flatten()
        });
        assert!(exited.is_some_and(|status| status.success()), "{exited:?}");
        let mut printed = String::new();
        zenity
            .0
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut printed)
            .unwrap();
        assert_eq!(printed, format!("{text}\n"));
    }

    /// Median and 99th percentile of `runs` calls of `f`, in microseconds.
    fn time(runs: usize, mut f: impl FnMut(usize)) -> (f64, f64) {
        for i in 0..runs / 10 {
            f(i);
        }
        let mut took: Vec<Duration> = (0..runs)
            .map(|i| {
                let start = Instant::now();
                f(i);
                start.elapsed()
            })
            .collect();
        took.sort();
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        (us(took[runs / 2]), us(took[runs * 99 / 100]))
    }

    /// In-process latency of the fast paths against enigo alone. Run with
    /// `cargo test --release -p pincer-agent input::tests::bench -- --ignored --nocapture`.
    #[test]
    #[ignore = "measurement, not a check"]
    fn bench() {
        use enigo::{Button, Coordinate, Mouse as _};
        let x = Xvfb::start(1920, 1080);
        // A real client receiving (and reading) the events, as on a desktop.
        let target = Target::new(&x.display);
        std::thread::spawn(move || while target.conn.wait_for_event().is_ok() {});
        let mut input = Input::new(Some(x.display.clone()), Wayland::new());
        let report = |what: &str, (median, p99): (f64, f64)| {
            println!("{what:<44} median {median:>8.1} us   p99 {p99:>8.1} us");
        };
        let point = |i: usize| Point::new(10 + (i % 300) as i32, 10 + (i % 200) as i32);
        report(
            "pincer click (move + press + release)",
            time(2000, |i| {
                let p = point(i);
                input.perform(&Action::click(p.x, p.y)).unwrap();
            }),
        );
        for text in ["abcdefghijklmnopqrst", "The quick brown fox!"] {
            report(
                &format!("pincer type {text:?}"),
                time(500, |_| {
                    input
                        .perform(&Action::TypeText { text: text.into() })
                        .unwrap();
                }),
            );
        }
        report(
            "pincer type 20 x 'é' (spare keycode)",
            time(200, |_| {
                input
                    .perform(&Action::TypeText {
                        text: "é".repeat(20),
                    })
                    .unwrap();
            }),
        );
        // 20 new characters each time on 14 spare keycodes: every call rebinds keycodes
        // still pending, so it waits for the client (which takes no pings: a fixed 50 ms).
        let cjk: Vec<char> = ('\u{4e00}'..='\u{9fff}').collect();
        report(
            "pincer type 20 new CJK characters",
            time(40, |i| {
                let text: String = cjk[i * 20..][..20].iter().collect();
                input.perform(&Action::TypeText { text }).unwrap();
            }),
        );
        report(
            "pincer hotkey ctrl+shift+t (enigo)",
            time(300, |_| {
                let keys = vec![
                    Key::Named(NamedKey::Control),
                    Key::Named(NamedKey::Shift),
                    Key::Char('t'),
                ];
                input.perform(&Action::Hotkey { keys }).unwrap();
            }),
        );
        report(
            "pincer cursor()",
            time(2000, |_| {
                input.cursor().unwrap();
            }),
        );

        let settings = enigo::Settings {
            linux_delay: 0,
            x11_display: Some(x.display.clone()),
            ..enigo::Settings::default()
        };
        let mut enigo = enigo::Enigo::new(&settings).unwrap();
        report(
            "enigo click (move_mouse + Click)",
            time(2000, |i| {
                let p = point(i);
                enigo.move_mouse(p.x, p.y, Coordinate::Abs).unwrap();
                enigo.button(Button::Left, Direction::Click).unwrap();
            }),
        );
        // The last line shows what enigo's remapping of 'T' and '!' left behind.
        for text in [
            "abcdefghijklmnopqrst",
            "The quick brown fox!",
            "abcdefghijklmnopqrst",
        ] {
            report(
                &format!("enigo text {text:?}"),
                time(20, |_| enigo.text(text).unwrap()),
            );
        }
        drop(enigo);

        let mut windows = crate::window::Windows::new(Some(x.display.clone()));
        report(
            "active window",
            time(1000, |_| drop(windows.active().unwrap())),
        );
        let mut clipboard = crate::clipboard::Clipboard::new(Some(x.display.clone()));
        report(
            "clipboard set_text",
            time(500, |i| clipboard.set_text(&format!("text {i}")).unwrap()),
        );
        report(
            "clipboard get_text (served by our own owner)",
            time(500, |_| drop(clipboard.get_text().unwrap())),
        );
    }

    #[test]
    fn display_loss_is_reported_and_survived() {
        let mut x = FixedXvfb::start(191);
        let mut input = Input::new(Some(x.display.clone()), Wayland::new());
        let to = |x, y| Action::MouseMove {
            to: Point::new(x, y),
        };
        input.perform(&to(10, 10)).unwrap();
        input
            .perform(&Action::TypeText { text: "é".into() })
            .unwrap();
        x.kill();
        assert!(matches!(
            input.perform(&to(20, 20)),
            Err(WireError::Display { .. })
        ));
        assert!(matches!(input.cursor(), Err(WireError::Display { .. })));
        x.restart();
        input.perform(&to(30, 40)).unwrap();
        assert_eq!(input.cursor().unwrap(), Point::new(30, 40));
        input
            .perform(&Action::TypeText { text: "aé".into() })
            .unwrap();
        // A server that restarts between two calls is picked up by the second.
        x.restart();
        input.perform(&to(50, 60)).unwrap();
        assert_eq!(input.cursor().unwrap(), Point::new(50, 60));
    }
}
