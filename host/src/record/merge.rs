//! Input events merged into the actions agents take: a press and release of the left button
//! in one place is a click (two within [`DOUBLE_CLICK`] a double click), apart a drag; the
//! right button a right click; wheel notches in a row one scroll; characters typed in a row
//! one `type`; a key with Control, Alt or Super held a hotkey; any other named key a `key`.
//! Modifiers alone are no action. What has no action (the middle button, a key without a
//! name) is left out and said.

use crate::agent::actions::{AgentAction, Target};
use pincer_shared::key::{Key, NamedKey};
use pincer_shared::observe::{InputEvent, InputKind};

/// Most time between two clicks of a double click, in microseconds.
pub const DOUBLE_CLICK: u64 = 400_000;

/// Farthest the pointer may move between press and release (or between a double click's
/// clicks), in pixels, for them to count as one place.
const SLOP: i32 = 6;

/// One action made from input events.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged {
    /// The action.
    pub action: AgentAction,
    /// When its first event happened, on the guest's clock (microseconds).
    pub guest_us: u64,
    /// Where the pointer was for a pointer action.
    pub at: Option<(i32, i32)>,
}

/// Turns `events` (in order) on the environment of `role` into actions; the second list
/// says what was left out.
pub fn merge(role: &str, events: &[InputEvent]) -> (Vec<Merged>, Vec<String>) {
    let mut m = Merger {
        role: role.to_owned(),
        out: Vec::new(),
        notes: Vec::new(),
        held: Vec::new(),
        typed: None,
        pressed: None,
    };
    for e in events {
        m.event(e);
    }
    m.flush_text();
    (m.out, m.notes)
}

struct Merger {
    role: String,
    out: Vec<Merged>,
    notes: Vec<String>,
    /// Modifiers held down, in the order they went down.
    held: Vec<NamedKey>,
    /// Text typed so far, and when it began.
    typed: Option<(String, u64)>,
    /// A button down: which, where, when.
    pressed: Option<(u8, i32, i32, u64)>,
}

fn is_modifier(k: NamedKey) -> bool {
    matches!(
        k,
        NamedKey::Shift | NamedKey::Control | NamedKey::Alt | NamedKey::Super | NamedKey::AltGr
    )
}

fn near(a: (i32, i32), b: (i32, i32)) -> bool {
    (a.0 - b.0).abs() <= SLOP && (a.1 - b.1).abs() <= SLOP
}

impl Merger {
    fn push(&mut self, action: AgentAction, guest_us: u64, at: Option<(i32, i32)>) {
        self.out.push(Merged {
            action,
            guest_us,
            at,
        });
    }

    fn flush_text(&mut self) {
        if let Some((text, t)) = self.typed.take() {
            let env = self.role.clone();
            self.push(
                AgentAction::Type {
                    env,
                    text,
                    target: None,
                },
                t,
                None,
            );
        }
    }

    fn event(&mut self, e: &InputEvent) {
        let t = e.guest_us;
        match &e.kind {
            InputKind::KeyDown { key, keysym } => self.key_down(*key, *keysym, t),
            InputKind::KeyUp {
                key: Some(Key::Named(k)),
                ..
            } if is_modifier(*k) => self.held.retain(|h| h != k),
            InputKind::KeyUp { .. } => {}
            InputKind::Press { button, x, y } => {
                self.flush_text();
                self.pressed = Some((*button, *x, *y, t));
            }
            InputKind::Release { button, x, y } => match self.pressed.take() {
                Some((b, px, py, pt)) if b == *button => {
                    self.button(b, (px, py), (*x, *y), pt);
                }
                _ => self.notes.push(format!(
                    "a release of button {button} at ({x}, {y}) without its press was left out"
                )),
            },
        }
    }

    fn key_down(&mut self, key: Option<Key>, keysym: u32, t: u64) {
        let Some(key) = key else {
            self.notes.push(format!(
                "a key with keysym {keysym:#x}, which has no name here, was left out"
            ));
            return;
        };
        if let Key::Named(k) = key
            && is_modifier(k)
        {
            if !self.held.contains(&k) {
                self.held.push(k);
            }
            return;
        }
        let chord: Vec<NamedKey> = self
            .held
            .iter()
            .copied()
            .filter(|k| matches!(k, NamedKey::Control | NamedKey::Alt | NamedKey::Super))
            .collect();
        let env = self.role.clone();
        if !chord.is_empty() {
            self.flush_text();
            let mut keys: Vec<String> = Vec::new();
            // Shift counts in a chord (ctrl+shift+t), named as the unshifted key would be.
            for k in &self.held {
                if matches!(
                    k,
                    NamedKey::Control | NamedKey::Alt | NamedKey::Super | NamedKey::Shift
                ) {
                    keys.push(Key::Named(*k).to_string());
                }
            }
            keys.push(match key {
                Key::Char(c) => c.to_lowercase().to_string(),
                k => k.to_string(),
            });
            self.push(AgentAction::Hotkey { env, keys }, t, None);
            return;
        }
        match key {
            Key::Char(c) => self.typed(c, t),
            Key::Named(NamedKey::Space) => self.typed(' ', t),
            Key::Named(NamedKey::Backspace)
                if self.typed.as_ref().is_some_and(|(s, _)| !s.is_empty()) =>
            {
                if let Some((s, _)) = self.typed.as_mut() {
                    s.pop();
                }
            }
            k => {
                self.flush_text();
                self.push(
                    AgentAction::Key {
                        env,
                        key: k.to_string(),
                    },
                    t,
                    None,
                );
            }
        }
    }

    fn typed(&mut self, c: char, t: u64) {
        self.typed
            .get_or_insert_with(|| (String::new(), t))
            .0
            .push(c);
    }

    fn button(&mut self, b: u8, from: (i32, i32), to: (i32, i32), t: u64) {
        let env = self.role.clone();
        let point = |(x, y): (i32, i32)| Target::Point { x, y };
        match b {
            1 if !near(from, to) => self.push(
                AgentAction::Drag {
                    env,
                    from: point(from),
                    to: point(to),
                },
                t,
                Some(from),
            ),
            1 => {
                // The second click of a double click replaces the first.
                if let Some(last) = self.out.last_mut()
                    && let AgentAction::Click { target, .. } = &last.action
                    && t.saturating_sub(last.guest_us) <= DOUBLE_CLICK
                    && last.at.is_some_and(|a| near(a, from))
                {
                    last.action = AgentAction::DoubleClick {
                        env,
                        target: *target,
                    };
                    return;
                }
                self.push(
                    AgentAction::Click {
                        env,
                        target: point(from),
                    },
                    t,
                    Some(from),
                );
            }
            3 => self.push(
                AgentAction::RightClick {
                    env,
                    target: point(from),
                },
                t,
                Some(from),
            ),
            4..=7 => {
                let (dx, dy) = match b {
                    4 => (0, -1),
                    5 => (0, 1),
                    6 => (-1, 0),
                    _ => (1, 0),
                };
                // Notches in a row in one place are one scroll.
                if let Some(last) = self.out.last_mut()
                    && let AgentAction::Scroll { dx: sx, dy: sy, .. } = &mut last.action
                    && last.at.is_some_and(|a| near(a, from))
                    && (sx.signum(), sy.signum()) == (dx, dy)
                {
                    *sx += dx;
                    *sy += dy;
                    return;
                }
                self.push(
                    AgentAction::Scroll {
                        env,
                        dx,
                        dy,
                        target: Some(point(from)),
                    },
                    t,
                    Some(from),
                );
            }
            other => self.notes.push(format!(
                "button {other} at ({}, {}) was left out: agents have no action for it",
                from.0, from.1
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(guest_us: u64, kind: InputKind) -> InputEvent {
        InputEvent { guest_us, kind }
    }

    fn down(t: u64, key: Key) -> InputEvent {
        at(
            t,
            InputKind::KeyDown {
                key: Some(key),
                keysym: 1,
            },
        )
    }

    fn up(t: u64, key: Key) -> InputEvent {
        at(
            t,
            InputKind::KeyUp {
                key: Some(key),
                keysym: 1,
            },
        )
    }

    fn click(t: u64, button: u8, x: i32, y: i32) -> [InputEvent; 2] {
        [
            at(t, InputKind::Press { button, x, y }),
            at(t + 50_000, InputKind::Release { button, x, y }),
        ]
    }

    fn actions(events: &[InputEvent]) -> Vec<serde_json::Value> {
        merge("desktop", events)
            .0
            .into_iter()
            .map(|m| serde_json::to_value(m.action).unwrap())
            .collect()
    }

    #[test]
    fn clicks_double_clicks_drags_and_scrolls() {
        let mut ev = Vec::new();
        ev.extend(click(0, 1, 10, 10));
        // A second click 300 ms later, 2 px away: a double click.
        ev.extend(click(300_000, 1, 12, 10));
        // A click a second later: a click.
        ev.extend(click(1_300_000, 1, 12, 10));
        ev.push(at(
            2_000_000,
            InputKind::Press {
                button: 1,
                x: 0,
                y: 0,
            },
        ));
        ev.push(at(
            2_200_000,
            InputKind::Release {
                button: 1,
                x: 100,
                y: 50,
            },
        ));
        ev.extend(click(3_000_000, 3, 5, 5));
        ev.extend(click(3_100_000, 5, 40, 40));
        ev.extend(click(3_150_000, 5, 40, 41));
        ev.extend(click(3_200_000, 4, 40, 41));
        ev.extend(click(3_300_000, 2, 7, 7));
        let (got, notes) = merge("desktop", &ev);
        let names: Vec<&str> = got.iter().map(|m| m.action.name()).collect();
        assert_eq!(
            names,
            [
                "double_click",
                "click",
                "drag",
                "right_click",
                "scroll",
                "scroll"
            ]
        );
        let json = actions(&ev);
        assert_eq!(json[0]["target"], serde_json::json!({"x": 10, "y": 10}));
        assert_eq!(json[2]["to"], serde_json::json!({"x": 100, "y": 50}));
        assert_eq!(
            (json[4]["dy"].as_i64(), json[5]["dy"].as_i64()),
            (Some(2), Some(-1))
        );
        assert_eq!(got[1].guest_us, 1_300_000);
        assert!(notes[0].contains("button 2"), "{notes:?}");
    }

    #[test]
    fn typing_hotkeys_and_named_keys() {
        let k = |c| Key::Char(c);
        let n = Key::Named;
        let ev = vec![
            down(0, k('h')),
            up(1, k('h')),
            down(2, n(NamedKey::Shift)),
            down(3, k('I')),
            up(4, n(NamedKey::Shift)),
            down(5, n(NamedKey::Space)),
            down(6, k('x')),
            down(7, n(NamedKey::Backspace)),
            down(8, k('!')),
            down(9, n(NamedKey::Return)),
            down(10, n(NamedKey::Control)),
            down(11, n(NamedKey::Shift)),
            down(12, k('T')),
            up(13, n(NamedKey::Shift)),
            up(14, n(NamedKey::Control)),
            down(15, k('z')),
            at(
                16,
                InputKind::KeyDown {
                    key: None,
                    keysym: 0x1008_ff11,
                },
            ),
        ];
        let (got, notes) = merge("desktop", &ev);
        let json: Vec<_> = got
            .iter()
            .map(|m| serde_json::to_value(&m.action).unwrap())
            .collect();
        assert_eq!(json[0]["action"], "type");
        assert_eq!(json[0]["text"], "hI !");
        assert_eq!(got[0].guest_us, 0);
        assert_eq!(
            json[1],
            serde_json::json!({"action": "key", "env": "desktop", "key": "enter"})
        );
        assert_eq!(json[2]["keys"], serde_json::json!(["ctrl", "shift", "t"]));
        assert_eq!(json[3]["text"], "z");
        assert_eq!(json.len(), 4);
        assert!(notes[0].contains("0x1008ff11"), "{notes:?}");
    }

    #[test]
    fn a_release_without_its_press_is_said_not_guessed() {
        let ev = [at(
            0,
            InputKind::Release {
                button: 1,
                x: 1,
                y: 1,
            },
        )];
        let (got, notes) = merge("desktop", &ev);
        assert!(got.is_empty());
        assert!(notes[0].contains("without its press"), "{notes:?}");
    }
}
