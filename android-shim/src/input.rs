//! Touch and keys on a phone. Through `/dev/uinput` when the shell user may open it (a
//! virtual touchscreen and keyboard, events written directly: microseconds), else through
//! `input` commands (each starts a Java process on the phone: tens to hundreds of
//! milliseconds). Mouse actions map onto touch where they mean the same (a click is a tap,
//! a drag a swipe, a scroll a swipe by notches); pointer-only ones are refused with a
//! reason. Text is typed a line at a time with Enter between lines: a line of printable
//! ASCII with `input text`, any other line (accents, CJK, emoji, a literal `%s`, control
//! characters) by putting it on the clipboard and pasting it ([`Clipboard`]), which replaces
//! what the clipboard held.

use crate::clip::Clipboard;
use crate::commands::run_blocking;
use crate::uinput::{self, Sink};
use pincer_shared::WireError;
use pincer_shared::action::{Action, Gesture, Point, SystemKey};
use pincer_shared::key::{Key, NamedKey};
use std::time::Duration;

/// Where input goes.
#[derive(Debug, Clone)]
pub(crate) enum InputRoute {
    /// Virtual devices created through this uinput node, else `input` commands.
    Uinput(std::path::PathBuf),
    /// `input` commands only.
    Commands,
    /// The events a virtual touchscreen would get, appended to this file (to see them).
    Log(std::path::PathBuf),
}

const INPUT_TIME: Duration = Duration::from_secs(20);
/// The longest side a screen is believed to have, in pixels (axes are `i32`s).
const MAX_SIDE: u32 = 1 << 16;

/// Where touches and keys go.
enum Route {
    /// Virtual devices: the touchscreen and the keyboard.
    Devices {
        touch: Box<dyn Sink>,
        keys: Box<dyn Sink>,
    },
    /// `input` commands.
    Commands,
}

/// The phone's input.
pub(crate) struct PhoneInput {
    want: InputRoute,
    route: Route,
    /// The touchscreen's slot as the kernel holds it (what need not be sent again).
    slot: uinput::Slot,
    /// The next touch's tracking id.
    tracking: i32,
    /// For the text `input text` cannot type.
    clipboard: Clipboard,
}

impl std::fmt::Debug for PhoneInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhoneInput")
            .field("want", &self.want)
            .finish_non_exhaustive()
    }
}

fn unsupported(what: &str) -> WireError {
    WireError::Unsupported {
        what: format!("{what} on a phone"),
    }
}

impl PhoneInput {
    /// Input as `want` says, with the clipboard helper kept in `work_dir`. The virtual
    /// devices are made now, as the shim starts, not on the first touch: a reader (Android's
    /// input system) finds a new device some time after it appears and opens it, and events
    /// written before that are lost to it.
    pub(crate) fn new(want: InputRoute, work_dir: std::path::PathBuf) -> Self {
        let route = Self::open(&want);
        Self {
            want,
            route,
            slot: uinput::Slot::default(),
            tracking: 1,
            clipboard: Clipboard::new(work_dir),
        }
    }

    /// Opens the virtual devices, or settles for `input` commands.
    fn open(want: &InputRoute) -> Route {
        match want {
            InputRoute::Commands => Route::Commands,
            InputRoute::Log(path) => match std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
            {
                Ok(f) => match f.try_clone() {
                    Ok(g) => Route::Devices {
                        touch: Box::new(f),
                        keys: Box::new(g),
                    },
                    Err(_) => Route::Commands,
                },
                Err(e) => {
                    tracing::warn!("cannot open the input log {}: {e}", path.display());
                    Route::Commands
                }
            },
            InputRoute::Uinput(node) => match Self::devices(node) {
                Ok(route) => {
                    tracing::info!(
                        "touches and keys through a virtual touchscreen and keyboard ({})",
                        node.display()
                    );
                    route
                }
                Err(e) => {
                    tracing::info!(
                        "no virtual input devices through {} ({e}): using `input` commands",
                        node.display()
                    );
                    Route::Commands
                }
            },
        }
    }

    #[cfg(target_os = "linux")]
    fn devices(node: &std::path::Path) -> Result<Route, String> {
        let (touch, keys, _) = make(node)?;
        Ok(Route::Devices {
            touch: Box::new(touch),
            keys: Box::new(keys),
        })
    }

    #[cfg(not(target_os = "linux"))]
    fn devices(_: &std::path::Path) -> Result<Route, String> {
        Err("uinput exists on Linux only".into())
    }

    fn next_id(&mut self) -> i32 {
        self.tracking = self.tracking % 65_000 + 1;
        self.tracking
    }

    fn input(args: &[&str]) -> Result<(), WireError> {
        let mut argv = vec!["input"];
        argv.extend_from_slice(args);
        run_blocking(&argv, INPUT_TIME).map(drop)
    }

    fn tap(&mut self, at: Point) -> Result<(), WireError> {
        let id = self.next_id();
        match &mut self.route {
            Route::Devices { touch, .. } => touch
                .send(&self.slot.stroke(&[(at.x, at.y)], id))
                .map_err(io),
            _ => Self::input(&["tap", &at.x.to_string(), &at.y.to_string()]),
        }
    }

    fn swipe(&mut self, from: Point, to: Point, duration_ms: u32) -> Result<(), WireError> {
        let id = self.next_id();
        match &mut self.route {
            Route::Devices { touch, .. } => {
                // One move every 10 ms, as a finger reports.
                let steps = (duration_ms / 10).clamp(1, 200);
                let points = uinput::line((from.x, from.y), (to.x, to.y), steps);
                let pause = Duration::from_millis(u64::from(duration_ms) / u64::from(steps));
                touch.send(&self.slot.down(points[0], id)).map_err(io)?;
                for &p in &points[1..] {
                    std::thread::sleep(pause);
                    let m = self.slot.moved(p);
                    if !m.is_empty() {
                        touch.send(&m).map_err(io)?;
                    }
                }
                touch.send(&self.slot.up()).map_err(io)
            }
            _ => Self::input(&[
                "swipe",
                &from.x.to_string(),
                &from.y.to_string(),
                &to.x.to_string(),
                &to.y.to_string(),
                &duration_ms.max(1).to_string(),
            ]),
        }
    }

    fn long_press(&mut self, at: Point, duration_ms: u32) -> Result<(), WireError> {
        let id = self.next_id();
        match &mut self.route {
            Route::Devices { touch, .. } => {
                touch.send(&self.slot.down((at.x, at.y), id)).map_err(io)?;
                std::thread::sleep(Duration::from_millis(u64::from(duration_ms.max(500))));
                touch.send(&self.slot.up()).map_err(io)
            }
            _ => {
                let (x, y) = (at.x.to_string(), at.y.to_string());
                Self::input(&["swipe", &x, &y, &x, &y, &duration_ms.max(500).to_string()])
            }
        }
    }

    fn key(&mut self, keycode: &str, linux: Option<u16>) -> Result<(), WireError> {
        match (&mut self.route, linux) {
            (Route::Devices { keys, .. }, Some(code)) => keys.send(&uinput::key(code)).map_err(io),
            _ => Self::input(&["keyevent", keycode]),
        }
    }

    fn text(&mut self, text: &str) -> Result<(), WireError> {
        for (i, line) in lines(text).into_iter().enumerate() {
            if i > 0 {
                self.key("KEYCODE_ENTER", Some(uinput::KEY_ENTER))?;
            }
            if line.is_empty() {
                continue;
            }
            if typeable(line) {
                // `input text` reads `%s` as a space, so spaces are written that way.
                Self::input(&["text", &line.replace(' ', "%s")])?;
            } else {
                self.clipboard.set(line)?;
                // Through `input` on every route: the virtual keyboard has no paste key.
                Self::input(&["keyevent", "KEYCODE_PASTE"])?;
            }
        }
        Ok(())
    }
}

/// The lines of `text`, as a desktop's guest types them: `"\r\n"`, `"\n"` and `"\r"` each
/// end one (and are typed as one Enter).
fn lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find(['\r', '\n']) {
        out.push(&rest[..i]);
        let end = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
        rest = &rest[i + end..];
    }
    out.push(rest);
    out
}

/// Whether `input text` types `line` as it is: printable ASCII (its key map has nothing
/// else), and no `%s`, which it reads as a space.
fn typeable(line: &str) -> bool {
    line.bytes().all(|b| (b' '..=b'~').contains(&b)) && !line.contains("%s")
}

/// The touchscreen (as large as `wm size` says) and the keyboard, made through `node`.
#[cfg(target_os = "linux")]
fn make(node: &std::path::Path) -> Result<(std::fs::File, std::fs::File, (u32, u32)), String> {
    let size = run_blocking(&["wm", "size"], INPUT_TIME).map_err(|e| e.to_string())?;
    let (w, h) = crate::device::wm_size(&size.text()).map_err(|e| e.to_string())?;
    // A kernel takes an axis of 0..0 (and Android would put every touch off it): a display
    // without pixels is a misreading, not a screen.
    if w == 0 || h == 0 || w > MAX_SIDE || h > MAX_SIDE {
        return Err(format!("`wm size` says {w}x{h}, which is no screen"));
    }
    let path = node.display().to_string();
    let touch = uinput::device::touchscreen(&path, w, h).map_err(|e| format!("{path}: {e}"))?;
    let keys = uinput::device::keyboard(&path).map_err(|e| format!("{path}: {e}"))?;
    Ok((touch, keys, (w, h)))
}

/// `--check-input`: makes the devices as the shim would, says what the kernel named them,
/// and removes them (closing a uinput descriptor destroys its device).
#[cfg(target_os = "linux")]
pub(crate) fn check(node: &std::path::Path) -> Result<String, String> {
    let (touch, keys, (w, h)) = make(node)?;
    let name =
        |f: &std::fs::File| uinput::device::sysname(f).unwrap_or_else(|e| format!("? ({e})"));
    Ok(format!(
        "a {w}x{h} touchscreen ({}) and a keyboard ({}) made through {}, then removed",
        name(&touch),
        name(&keys),
        node.display()
    ))
}

/// `--check-input` where there is no uinput.
#[cfg(not(target_os = "linux"))]
pub(crate) fn check(_: &std::path::Path) -> Result<String, String> {
    Err("uinput exists on Linux only".into())
}

fn io(e: std::io::Error) -> WireError {
    WireError::Io {
        message: format!("writing touch events: {e}"),
    }
}

/// An Android key code and the Linux key of the virtual keyboard, for a system key.
fn system_key(k: SystemKey) -> (&'static str, Option<u16>) {
    match k {
        SystemKey::Home => ("KEYCODE_HOME", Some(uinput::KEY_HOMEPAGE)),
        SystemKey::Back => ("KEYCODE_BACK", Some(uinput::KEY_BACK)),
        SystemKey::AppSwitch => ("KEYCODE_APP_SWITCH", Some(uinput::KEY_APPSELECT)),
        SystemKey::Enter => ("KEYCODE_ENTER", Some(uinput::KEY_ENTER)),
        SystemKey::Delete => ("KEYCODE_DEL", Some(uinput::KEY_BACKSPACE)),
        SystemKey::VolumeUp => ("KEYCODE_VOLUME_UP", None),
        SystemKey::VolumeDown => ("KEYCODE_VOLUME_DOWN", None),
        SystemKey::Power => ("KEYCODE_POWER", None),
        SystemKey::Menu => ("KEYCODE_MENU", None),
        SystemKey::Search => ("KEYCODE_SEARCH", None),
    }
}

/// An Android key code for a keyboard key.
fn keyboard_key(k: &Key) -> Option<&'static str> {
    Some(match k {
        Key::Named(n) => match n {
            NamedKey::Return => "KEYCODE_ENTER",
            NamedKey::Backspace => "KEYCODE_DEL",
            NamedKey::Delete => "KEYCODE_FORWARD_DEL",
            NamedKey::Tab => "KEYCODE_TAB",
            NamedKey::Escape => "KEYCODE_ESCAPE",
            NamedKey::Space => "KEYCODE_SPACE",
            NamedKey::Left => "KEYCODE_DPAD_LEFT",
            NamedKey::Right => "KEYCODE_DPAD_RIGHT",
            NamedKey::Up => "KEYCODE_DPAD_UP",
            NamedKey::Down => "KEYCODE_DPAD_DOWN",
            NamedKey::Home => "KEYCODE_MOVE_HOME",
            NamedKey::End => "KEYCODE_MOVE_END",
            NamedKey::PageUp => "KEYCODE_PAGE_UP",
            NamedKey::PageDown => "KEYCODE_PAGE_DOWN",
            NamedKey::Menu => "KEYCODE_MENU",
            _ => return None,
        },
        Key::Char(_) => return None,
    })
}

impl pincer_guest_core::platform::Input for PhoneInput {
    fn perform(&mut self, action: &Action) -> Result<(), WireError> {
        match action {
            Action::Touch(Gesture::Tap { at }) => self.tap(*at),
            Action::Touch(Gesture::LongPress { at, duration_ms }) => {
                self.long_press(*at, *duration_ms)
            }
            Action::Touch(Gesture::Swipe {
                from,
                to,
                duration_ms,
            })
            | Action::Drag {
                from,
                to,
                duration_ms,
                ..
            } => self.swipe(*from, *to, (*duration_ms).max(100)),
            Action::Touch(Gesture::Pinch { .. }) => Err(unsupported("a pinch (two fingers)")),
            Action::SystemKey(k) => {
                let (code, linux) = system_key(*k);
                self.key(code, linux)
            }
            Action::Click {
                at: Some(at),
                count,
                ..
            } => {
                for _ in 0..*count {
                    self.tap(*at)?;
                }
                Ok(())
            }
            Action::Click { at: None, .. } => Err(unsupported(
                "a click without a position (there is no pointer)",
            )),
            Action::Scroll { at, dx, dy } => {
                // A notch is a tenth of the screen; scrolling down swipes up.
                let at = at.unwrap_or(Point::new(540, 1200));
                let to = Point::new(at.x - dx * 100, at.y - dy * 150);
                self.swipe(at, to, 300)
            }
            Action::TypeText { text } => self.text(text),
            Action::KeyPress { key } => match (key, keyboard_key(key)) {
                (_, Some(code)) => self.key(code, None),
                (Key::Char(c), None) => self.text(&c.to_string()),
                (k, None) => Err(unsupported(&format!("the key {k:?}"))),
            },
            Action::MouseMove { .. } | Action::MouseDown { .. } | Action::MouseUp { .. } => {
                Err(unsupported("a pointer action (there is no pointer)"))
            }
            Action::KeyDown { .. } | Action::KeyUp { .. } | Action::Hotkey { .. } => {
                Err(unsupported("holding keys down"))
            }
        }
    }

    fn cursor(&mut self) -> Result<Point, WireError> {
        Err(unsupported("a pointer position"))
    }
}

#[cfg(test)]
mod tests {
    use super::{lines, typeable};

    #[test]
    fn line_ends_are_typed_as_a_desktop_types_them() {
        assert_eq!(lines("a\r\nb\nc\rd"), ["a", "b", "c", "d"]);
        assert_eq!(lines("\r\n\r\n"), ["", "", ""]);
        assert_eq!(lines("\n\r"), ["", "", ""]);
        assert_eq!(lines("x"), ["x"]);
        assert_eq!(lines(""), [""]);
    }

    #[test]
    fn input_text_types_printable_ascii_without_percent_s() {
        assert!(typeable("see you at 6, ok? ~{}"));
        for line in [
            "Bogotá",
            "世界",
            "👋",
            "100%s",
            "tab\there",
            "nul\0",
            "cr\r",
            "del\x7f",
        ] {
            assert!(!typeable(line), "{line:?}");
        }
    }
}
