//! The action class: input an agent may cause. Desktop input (mouse, keys, text) and the
//! touch gestures and system keys of phones share one enum so every guest speaks one
//! protocol; a guest answers `Unsupported` for actions its platform lacks.

use crate::key::{Key, NamedKey};

fn key_in_range(k: &Key) -> bool {
    !matches!(k, Key::Named(NamedKey::F(n)) if !(1..=24).contains(n))
}
use serde::{Deserialize, Serialize};

/// A point in screen pixels, origin top-left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Point {
    /// Pixels from the left edge.
    pub x: i32,
    /// Pixels from the top edge.
    pub y: i32,
}

impl Point {
    /// A point at `(x, y)`.
    pub fn new(x: i32, y: i32) -> Self {
        Self { x, y }
    }
}

/// A mouse button.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum MouseButton {
    /// The primary button.
    #[default]
    Left,
    /// The middle button (wheel press).
    Middle,
    /// The secondary button.
    Right,
}

/// System keys of a phone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum SystemKey {
    Home,
    Back,
    AppSwitch,
    Enter,
    Delete,
    VolumeUp,
    VolumeDown,
    Power,
    Menu,
    Search,
}

/// A touch gesture on a touch screen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Gesture {
    /// A short touch.
    Tap {
        /// Where.
        at: Point,
    },
    /// A touch held for `duration_ms`.
    LongPress {
        /// Where.
        at: Point,
        /// How long to hold.
        duration_ms: u32,
    },
    /// A straight swipe.
    Swipe {
        /// Start.
        from: Point,
        /// End.
        to: Point,
        /// Duration of the movement.
        duration_ms: u32,
    },
    /// Two fingers moving from `start_distance` to `end_distance` pixels apart around `center`.
    Pinch {
        /// Midpoint between the fingers.
        center: Point,
        /// Finger distance at the start.
        start_distance: u32,
        /// Finger distance at the end.
        end_distance: u32,
        /// Duration of the movement.
        duration_ms: u32,
    },
}

/// One input action. Positions are in the guest's screen pixels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Action {
    /// Move the pointer.
    MouseMove {
        /// Destination.
        to: Point,
    },
    /// Click `count` times (1 = click, 2 = double click), at `at` or where the pointer is.
    Click {
        /// Where to click; `None` clicks where the pointer is.
        at: Option<Point>,
        /// Which button.
        button: MouseButton,
        /// How many clicks (1..=3).
        count: u8,
    },
    /// Press a button and keep it down.
    MouseDown {
        /// Which button.
        button: MouseButton,
    },
    /// Release a button.
    MouseUp {
        /// Which button.
        button: MouseButton,
    },
    /// Press at `from`, move to `to` over `duration_ms`, release.
    Drag {
        /// Start.
        from: Point,
        /// End.
        to: Point,
        /// Which button.
        button: MouseButton,
        /// How long the movement takes; 0 moves in a few quick steps.
        duration_ms: u32,
    },
    /// Scroll by wheel notches: positive `dy` scrolls down, positive `dx` right.
    Scroll {
        /// Where to scroll; `None` scrolls where the pointer is.
        at: Option<Point>,
        /// Horizontal notches.
        dx: i32,
        /// Vertical notches.
        dy: i32,
    },
    /// Press and release a key.
    KeyPress {
        /// The key.
        key: Key,
    },
    /// Press a key and keep it down.
    KeyDown {
        /// The key.
        key: Key,
    },
    /// Release a key.
    KeyUp {
        /// The key.
        key: Key,
    },
    /// Press keys in order, release them in reverse (`ctrl+shift+t`).
    Hotkey {
        /// The keys, modifiers first.
        keys: Vec<Key>,
    },
    /// Type Unicode text as a user would.
    TypeText {
        /// The text.
        text: String,
    },
    /// A touch gesture (phones).
    Touch(Gesture),
    /// A phone system key.
    SystemKey(SystemKey),
}

impl Action {
    /// A single left click at a point.
    pub fn click(x: i32, y: i32) -> Self {
        Self::Click {
            at: Some(Point::new(x, y)),
            button: MouseButton::Left,
            count: 1,
        }
    }

    /// Whether the action needs a touch screen rather than a mouse and keyboard.
    pub fn is_touch(&self) -> bool {
        matches!(self, Self::Touch(_) | Self::SystemKey(_))
    }

    /// Checks values a guest cannot act on, before anything is injected.
    pub fn validate(&self) -> Result<(), String> {
        match self {
            Self::Click { count, .. } if !(1..=3).contains(count) => Err(format!(
                "click count {count} is out of range: use 1, 2 or 3"
            )),
            Self::Hotkey { keys } if keys.is_empty() => {
                Err("hotkey needs at least one key".to_owned())
            }
            Self::Hotkey { keys } if keys.len() > 8 => {
                Err(format!("hotkey has {} keys; at most 8", keys.len()))
            }
            Self::TypeText { text } if text.chars().count() > crate::limits::MAX_TYPE_TEXT => {
                Err(format!(
                    "text of {} characters is longer than the {} allowed in one action",
                    text.chars().count(),
                    crate::limits::MAX_TYPE_TEXT
                ))
            }
            Self::Drag { duration_ms, .. }
            | Self::Touch(Gesture::Swipe { duration_ms, .. })
            | Self::Touch(Gesture::LongPress { duration_ms, .. })
            | Self::Touch(Gesture::Pinch { duration_ms, .. })
                if *duration_ms > 60_000 =>
            {
                Err(format!("duration {duration_ms} ms is longer than 60 s"))
            }
            Self::KeyPress { key } | Self::KeyDown { key } | Self::KeyUp { key }
                if !key_in_range(key) =>
            {
                Err(format!("{key:?} is not a key: function keys are F1 to F24"))
            }
            Self::Hotkey { keys } if keys.iter().any(|k| !key_in_range(k)) => {
                Err("function keys are F1 to F24".to_owned())
            }
            Self::Scroll { dx, dy, .. } if dx.unsigned_abs() > 1000 || dy.unsigned_abs() > 1000 => {
                Err(format!(
                    "scroll of ({dx}, {dy}) notches is out of range (±1000)"
                ))
            }
            _ => Ok(()),
        }
    }
}
