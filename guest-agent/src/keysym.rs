//! X keysyms, the names both input routes give keys: XTest binds keycodes to them on
//! X11, and GNOME's remote desktop takes them as they are (`NotifyKeyboardKeysym`).

use pincer_shared::WireError;
use pincer_shared::key::{Key, NamedKey};

pub(crate) const SHIFT: u32 = 0xffe1;
pub(crate) const CONTROL: u32 = 0xffe3;

/// Characters that every Latin keyboard layout types: printable ASCII, newline, tab.
pub(crate) fn typeable(c: char) -> bool {
    matches!(c, ' '..='~' | '\n' | '\t')
}

/// The keysym of `key`; F25 and above are refused.
pub(crate) fn of(key: Key) -> Result<u32, WireError> {
    let named = match key {
        Key::Char(c) => return Ok(of_char(c)),
        Key::Named(named) => named,
    };
    Ok(match named {
        NamedKey::Shift => SHIFT,
        NamedKey::Control => CONTROL,
        NamedKey::Alt => 0xffe9,
        NamedKey::Super => 0xffeb,
        NamedKey::AltGr => 0xfe03,
        NamedKey::CapsLock => 0xffe5,
        NamedKey::Return => 0xff0d,
        NamedKey::Tab => 0xff09,
        NamedKey::Escape => 0xff1b,
        NamedKey::Backspace => 0xff08,
        NamedKey::Delete => 0xffff,
        NamedKey::Insert => 0xff63,
        NamedKey::Home => 0xff50,
        NamedKey::End => 0xff57,
        NamedKey::PageUp => 0xff55,
        NamedKey::PageDown => 0xff56,
        NamedKey::Left => 0xff51,
        NamedKey::Up => 0xff52,
        NamedKey::Right => 0xff53,
        NamedKey::Down => 0xff54,
        NamedKey::Space => 0x20,
        NamedKey::PrintScreen => 0xff61,
        NamedKey::Menu => 0xff67,
        NamedKey::Pause => 0xff13,
        NamedKey::NumLock => 0xff7f,
        NamedKey::ScrollLock => 0xff14,
        NamedKey::F(n @ 1..=24) => 0xffbe + u32::from(n) - 1,
        NamedKey::F(n) => {
            return Err(WireError::InvalidArgument {
                message: format!("there is no key F{n}: function keys are F1 to F24"),
            });
        }
    })
}

/// The keysym a keymap lists for `c`: Latin-1 keysyms are the code point, the rest of
/// Unicode is 0x0100_0000 + code point. Keymaps that use a legacy keysym for a character
/// (EuroSign, Cyrillic, ...) do not match here, and such characters go through enigo.
pub(crate) fn of_char(c: char) -> u32 {
    match c {
        '\n' | '\r' => 0xff0d,
        '\t' => 0xff09,
        '\u{8}' => 0xff08,
        '\u{1b}' => 0xff1b,
        '\u{7f}' => 0xffff,
        ' '..='~' | '\u{a0}'..='\u{ff}' => c.into(),
        c => 0x0100_0000 | u32::from(c),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_the_keysyms_mutter_types_and_f25_is_refused() {
        let sym = |key| match of(key) {
            Ok(sym) => sym,
            Err(e) => panic!("{key:?}: {e:?}"),
        };
        assert_eq!(sym(Key::Named(NamedKey::Return)), 0xff0d);
        assert_eq!(sym(Key::Named(NamedKey::F(1))), 0xffbe);
        assert_eq!(sym(Key::Named(NamedKey::F(24))), 0xffd5);
        assert_eq!(sym(Key::Char('a')), 0x61);
        assert_eq!(sym(Key::Char('é')), 0xe9);
        assert_eq!(sym(Key::Char('Ω')), 0x0100_03a9);
        assert!(matches!(
            of(Key::Named(NamedKey::F(25))),
            Err(WireError::InvalidArgument { .. })
        ));
    }

    #[test]
    fn only_what_every_latin_layout_types_goes_as_keys() {
        assert!("Hello, world! (1+1)=2\t~\n".chars().all(typeable));
        for pasted in ['é', '€', 'Ω', 'ß', '\u{7f}'] {
            assert!(!typeable(pasted), "{pasted:?}");
        }
    }
}
