//! Keys and key combinations, by name. Names are what people and LLMs write ("ctrl+s",
//! "Return", "alt+F4", "super"), parsed once on the host into typed keys.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A key on a keyboard: a named key or the key that produces a character.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Key {
    /// A key with a name (modifiers, navigation, function keys, ...).
    Named(NamedKey),
    /// The key that types this character (a letter, digit or symbol).
    Char(char),
}

/// Keys that do not produce a character.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[allow(missing_docs)]
pub enum NamedKey {
    Shift,
    Control,
    Alt,
    Super,
    AltGr,
    CapsLock,
    Return,
    Tab,
    Escape,
    Backspace,
    Delete,
    Insert,
    Home,
    End,
    PageUp,
    PageDown,
    Left,
    Right,
    Up,
    Down,
    Space,
    PrintScreen,
    Menu,
    Pause,
    NumLock,
    ScrollLock,
    /// F1..F24.
    F(u8),
}

/// Names accepted for each named key, first one canonical. Lower case; parsing ignores case.
const NAMES: &[(&str, NamedKey)] = &[
    ("shift", NamedKey::Shift),
    ("ctrl", NamedKey::Control),
    ("control", NamedKey::Control),
    ("alt", NamedKey::Alt),
    ("option", NamedKey::Alt),
    ("super", NamedKey::Super),
    ("win", NamedKey::Super),
    ("meta", NamedKey::Super),
    ("cmd", NamedKey::Super),
    ("command", NamedKey::Super),
    ("altgr", NamedKey::AltGr),
    ("capslock", NamedKey::CapsLock),
    ("enter", NamedKey::Return),
    ("return", NamedKey::Return),
    ("tab", NamedKey::Tab),
    ("escape", NamedKey::Escape),
    ("esc", NamedKey::Escape),
    ("backspace", NamedKey::Backspace),
    ("delete", NamedKey::Delete),
    ("del", NamedKey::Delete),
    ("insert", NamedKey::Insert),
    ("home", NamedKey::Home),
    ("end", NamedKey::End),
    ("pageup", NamedKey::PageUp),
    ("pgup", NamedKey::PageUp),
    ("pagedown", NamedKey::PageDown),
    ("pgdn", NamedKey::PageDown),
    ("left", NamedKey::Left),
    ("right", NamedKey::Right),
    ("up", NamedKey::Up),
    ("down", NamedKey::Down),
    ("space", NamedKey::Space),
    ("printscreen", NamedKey::PrintScreen),
    ("print", NamedKey::PrintScreen),
    ("menu", NamedKey::Menu),
    ("pause", NamedKey::Pause),
    ("numlock", NamedKey::NumLock),
    ("scrolllock", NamedKey::ScrollLock),
];

/// Why a key name was not understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyParseError {
    /// The name is not a known key and not a single character.
    #[error(
        "unknown key '{0}': use a single character or a name such as ctrl, shift, alt, super, enter, tab, escape, backspace, delete, home, end, pageup, pagedown, left, right, up, down, space, f1..f24"
    )]
    Unknown(String),
    /// A combination had an empty part ("ctrl++" or a trailing '+').
    #[error("empty key in combination '{0}': write combinations as ctrl+shift+t")]
    EmptyPart(String),
}

impl FromStr for Key {
    type Err = KeyParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut chars = s.chars();
        if let (Some(c), None) = (chars.next(), chars.next()) {
            return Ok(Self::Char(c));
        }
        let lower = s.trim().to_ascii_lowercase().replace(['_', '-', ' '], "");
        if let Some((_, k)) = NAMES.iter().find(|(n, _)| *n == lower) {
            return Ok(Self::Named(*k));
        }
        if let Some(n) = lower.strip_prefix('f').and_then(|d| d.parse::<u8>().ok())
            && (1..=24).contains(&n)
        {
            return Ok(Self::Named(NamedKey::F(n)));
        }
        // xdotool / X keysym spellings that LLMs often produce.
        let alias = match lower.as_str() {
            "controll" | "controlr" | "ctrll" | "ctrlr" => Some(NamedKey::Control),
            "shiftl" | "shiftr" => Some(NamedKey::Shift),
            "altl" | "altr" => Some(NamedKey::Alt),
            "superl" | "superr" | "windows" => Some(NamedKey::Super),
            "kpenter" => Some(NamedKey::Return),
            "arrowleft" => Some(NamedKey::Left),
            "arrowright" => Some(NamedKey::Right),
            "arrowup" => Some(NamedKey::Up),
            "arrowdown" => Some(NamedKey::Down),
            "plus" => return Ok(Self::Char('+')),
            "minus" => return Ok(Self::Char('-')),
            _ => None,
        };
        alias
            .map(Self::Named)
            .ok_or_else(|| KeyParseError::Unknown(s.to_owned()))
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Char(c) => write!(f, "{c}"),
            Self::Named(NamedKey::F(n)) => write!(f, "f{n}"),
            Self::Named(k) => {
                let name = NAMES.iter().find(|(_, v)| v == k).map_or("?", |(n, _)| n);
                f.write_str(name)
            }
        }
    }
}

/// Parses a combination such as `ctrl+shift+t` or `alt+F4` into its keys, in press order.
/// A lone `+` is the plus key.
pub fn parse_combo(s: &str) -> Result<Vec<Key>, KeyParseError> {
    let s = s.trim();
    if s == "+" {
        return Ok(vec![Key::Char('+')]);
    }
    let mut keys = Vec::new();
    let parts: Vec<&str> = s.split('+').collect();
    let mut i = 0;
    while i < parts.len() {
        let part = parts[i].trim();
        if part.is_empty() {
            // "ctrl++" means ctrl and the plus key.
            if i + 1 == parts.len() - 1 && parts[i + 1].is_empty() {
                keys.push(Key::Char('+'));
                break;
            }
            return Err(KeyParseError::EmptyPart(s.to_owned()));
        }
        keys.push(part.parse()?);
        i += 1;
    }
    Ok(keys)
}

/// The key an X keysym names: the named keys by their keysyms (both sides of a modifier
/// alike, the keypad's Enter as Return), characters by Latin-1 (the code point) or Unicode
/// (0x0100_0000 + the code point) keysyms, space as the Space key; `None` for the rest.
pub fn from_keysym(keysym: u32) -> Option<Key> {
    use NamedKey as N;
    let named = match keysym {
        0xffe1 | 0xffe2 => N::Shift,
        0xffe3 | 0xffe4 => N::Control,
        0xffe7..=0xffea => N::Alt,
        0xffeb | 0xffec => N::Super,
        0xfe03 => N::AltGr,
        0xffe5 => N::CapsLock,
        0xff0d | 0xff8d => N::Return,
        0xff09 | 0xfe20 => N::Tab,
        0xff1b => N::Escape,
        0xff08 => N::Backspace,
        0xffff | 0xff9f => N::Delete,
        0xff63 => N::Insert,
        0xff50 => N::Home,
        0xff57 => N::End,
        0xff55 => N::PageUp,
        0xff56 => N::PageDown,
        0xff51 => N::Left,
        0xff53 => N::Right,
        0xff52 => N::Up,
        0xff54 => N::Down,
        0x20 => N::Space,
        0xff61 => N::PrintScreen,
        0xff67 => N::Menu,
        0xff13 => N::Pause,
        0xff7f => N::NumLock,
        0xff14 => N::ScrollLock,
        // F1..F24 are consecutive keysyms.
        k @ 0xffbe..=0xffd5 => N::F((k - 0xffbe + 1) as u8),
        k @ (0x21..=0x7e | 0xa0..=0xff) => return char::from_u32(k).map(Key::Char),
        k @ 0x0100_0000..=0x0110_ffff => return char::from_u32(k - 0x0100_0000).map(Key::Char),
        _ => return None,
    };
    Some(Key::Named(named))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_chars_and_function_keys() {
        assert_eq!("Return".parse(), Ok(Key::Named(NamedKey::Return)));
        assert_eq!("CTRL".parse(), Ok(Key::Named(NamedKey::Control)));
        assert_eq!("Control_L".parse(), Ok(Key::Named(NamedKey::Control)));
        assert_eq!("a".parse(), Ok(Key::Char('a')));
        assert_eq!("é".parse(), Ok(Key::Char('é')));
        assert_eq!("F12".parse(), Ok(Key::Named(NamedKey::F(12))));
        assert!("f25".parse::<Key>().is_err());
        assert!(matches!(
            "hyperdrive".parse::<Key>(),
            Err(KeyParseError::Unknown(_))
        ));
    }

    #[test]
    fn parses_combinations() {
        assert_eq!(
            parse_combo("ctrl+shift+t").unwrap(),
            vec![
                Key::Named(NamedKey::Control),
                Key::Named(NamedKey::Shift),
                Key::Char('t')
            ]
        );
        assert_eq!(
            parse_combo("ctrl++").unwrap(),
            vec![Key::Named(NamedKey::Control), Key::Char('+')]
        );
        assert_eq!(parse_combo("+").unwrap(), vec![Key::Char('+')]);
        assert!(matches!(
            parse_combo("ctrl+"),
            Err(KeyParseError::EmptyPart(_))
        ));
        assert!(matches!(
            parse_combo("ctrl+++a"),
            Err(KeyParseError::EmptyPart(_))
        ));
    }

    #[test]
    fn display_round_trips() {
        for s in ["ctrl", "f5", "enter", "x", "pageup"] {
            let k: Key = s.parse().unwrap();
            assert_eq!(k.to_string().parse::<Key>().unwrap(), k);
        }
    }

    #[test]
    fn keysyms_name_keys_and_characters() {
        assert_eq!(from_keysym(0xff0d), Some(Key::Named(NamedKey::Return)));
        assert_eq!(from_keysym(0xffe4), Some(Key::Named(NamedKey::Control)));
        assert_eq!(from_keysym(0xffc9), Some(Key::Named(NamedKey::F(12))));
        assert_eq!(from_keysym(0x41), Some(Key::Char('A')));
        assert_eq!(from_keysym(0xe9), Some(Key::Char('é')));
        assert_eq!(from_keysym(0x0100_20ac), Some(Key::Char('€')));
        assert_eq!(from_keysym(0x20), Some(Key::Named(NamedKey::Space)));
        assert_eq!(from_keysym(0x1008_ff11), None);
        assert_eq!(from_keysym(0), None);
        // What a key is called round-trips through its name.
        for k in [0xff0d, 0xffe1, 0xffbe, 0x61, 0x2f] {
            let key = from_keysym(k).unwrap();
            assert_eq!(key.to_string().parse::<Key>(), Ok(key), "{key}");
        }
    }
}
