//! AT-SPI's vocabulary, the layer every other part of the walk stands on: the bus names,
//! object paths and interfaces it talks to, and what AT-SPI's numbers mean (role and state
//! numbers and their names as libatspi spells them, and the extents it reports for objects
//! that have none). Nothing here makes a call.

use pincer_shared::observe::Rect;

pub(super) const REGISTRY: &str = "org.a11y.atspi.Registry";
pub(super) const ROOT_PATH: &str = "/org/a11y/atspi/accessible/root";
pub(super) const NULL_PATH: &str = "/org/a11y/atspi/null";
pub(super) const CACHE_PATH: &str = "/org/a11y/atspi/cache";
pub(super) const CACHE: &str = "org.a11y.atspi.Cache";
pub(super) const ACCESSIBLE: &str = "org.a11y.atspi.Accessible";
pub(super) const APPLICATION: &str = "org.a11y.atspi.Application";
pub(super) const ACTION: &str = "org.a11y.atspi.Action";
pub(super) const COMPONENT: &str = "org.a11y.atspi.Component";
pub(super) const TABLE: &str = "org.a11y.atspi.Table";
pub(super) const TEXT: &str = "org.a11y.atspi.Text";
pub(super) const VALUE: &str = "org.a11y.atspi.Value";
pub(super) const PROPERTIES: &str = "org.freedesktop.DBus.Properties";

/// Coordinates relative to the screen, for `GetExtents` and `GetAccessibleAtPoint`.
pub(super) const SCREEN_COORDS: u32 = 0;

// AT-SPI role numbers.
pub(super) const ROLE_DESKTOP_FRAME: u32 = 14;
pub(super) const ROLE_APPLICATION: u32 = 75;

// AT-SPI state numbers (bits of the `au` state set).
pub(super) const STATE_DEFUNCT: u32 = 6;
pub(super) const STATE_MULTI_LINE: u32 = 17;
pub(super) const STATE_SHOWING: u32 = 25;
pub(super) const STATE_VISIBLE: u32 = 30;
pub(super) const STATE_MANAGES_DESCENDANTS: u32 = 31;

/// Role names by AT-SPI role number, as libatspi and ATK spell them.
#[rustfmt::skip]
const ROLE_NAMES: [&str; 130] = [
    "invalid", "accelerator label", "alert", "animation", "arrow", "calendar", "canvas",
    "check box", "check menu item", "color chooser", "column header", "combo box",
    "date editor", "desktop icon", "desktop frame", "dial", "dialog", "directory pane",
    "drawing area", "file chooser", "filler", "focus traversable", "font chooser", "frame",
    "glass pane", "html container", "icon", "image", "internal frame", "label", "layered pane",
    "list", "list item", "menu", "menu bar", "menu item", "option pane", "page tab",
    "page tab list", "panel", "password text", "popup menu", "progress bar", "push button",
    "radio button", "radio menu item", "root pane", "row header", "scroll bar", "scroll pane",
    "separator", "slider", "spin button", "split pane", "status bar", "table", "table cell",
    "table column header", "table row header", "tearoff menu item", "terminal", "text",
    "toggle button", "tool bar", "tool tip", "tree", "tree table", "unknown", "viewport",
    "window", "extended", "header", "footer", "paragraph", "ruler", "application",
    "autocomplete", "editbar", "embedded", "entry", "chart", "caption", "document frame",
    "heading", "page", "section", "redundant object", "form", "link", "input method window",
    "table row", "tree item", "document spreadsheet", "document presentation", "document text",
    "document web", "document email", "comment", "list box", "grouping", "image map",
    "notification", "info bar", "level bar", "title bar", "block quote", "audio", "video",
    "definition", "article", "landmark", "log", "marquee", "math", "rating", "timer", "static",
    "math fraction", "math root", "subscript", "superscript", "description list",
    "description term", "description value", "footnote", "content deletion",
    "content insertion", "mark", "suggestion", "push button menu",
];

/// State names by AT-SPI state number, as libatspi spells them.
#[rustfmt::skip]
const STATE_NAMES: [&str; 44] = [
    "invalid", "active", "armed", "busy", "checked", "collapsed", "defunct", "editable",
    "enabled", "expandable", "expanded", "focusable", "focused", "has-tooltip", "horizontal",
    "iconified", "modal", "multi-line", "multiselectable", "opaque", "pressed", "resizable",
    "selectable", "selected", "sensitive", "showing", "single-line", "stale", "transient",
    "vertical", "visible", "manages-descendants", "indeterminate", "required", "truncated",
    "animated", "invalid-entry", "supports-autocompletion", "selectable-text", "is-default",
    "visited", "checkable", "has-popup", "read-only",
];

/// State bits from AT-SPI's `au` (32 states per word).
pub(super) fn state_bits(words: &[u32]) -> u64 {
    words
        .iter()
        .take(2)
        .enumerate()
        .fold(0, |bits, (i, w)| bits | u64::from(*w) << (32 * i))
}

/// The names of the states set in `bits`.
pub(super) fn state_names(bits: u64) -> Vec<String> {
    STATE_NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| *i > 0 && bits & (1 << i) != 0)
        .map(|(_, name)| (*name).to_owned())
        .collect()
}

/// The name of AT-SPI role `role` ("unknown" for numbers past the table).
pub(super) fn role_name(role: u32) -> String {
    let name = usize::try_from(role)
        .ok()
        .and_then(|i| ROLE_NAMES.get(i))
        .unwrap_or(&"unknown");
    (*name).to_owned()
}

/// Bounds from `GetExtents`, or `None` for the ones AT-SPI reports for unmapped objects
/// (`i32::MIN` corners, empty or negative sizes).
pub(super) fn bounds((x, y, width, height): (i32, i32, i32, i32)) -> Option<Rect> {
    let width = u32::try_from(width).ok().filter(|w| *w > 0)?;
    let height = u32::try_from(height).ok().filter(|h| *h > 0)?;
    (x != i32::MIN && y != i32::MIN).then(|| Rect::new(x, y, width, height))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bogus_extents_have_no_bounds() {
        assert_eq!(bounds((10, 20, 30, 40)), Some(Rect::new(10, 20, 30, 40)));
        assert_eq!(bounds((i32::MIN, i32::MIN, 100, 100)), None);
        assert_eq!(bounds((5, i32::MIN, 100, 100)), None);
        assert_eq!(bounds((0, 0, 0, 0)), None);
        assert_eq!(bounds((0, 0, -1, 20)), None);
        assert_eq!(bounds((-1, -1, -1, -1)), None);
        // Partly off screen is still real.
        assert_eq!(bounds((-5, -5, 10, 10)), Some(Rect::new(-5, -5, 10, 10)));
    }

    #[test]
    fn names_come_from_atspi_numbers() {
        assert_eq!(role_name(43), "push button");
        assert_eq!(role_name(61), "text");
        assert_eq!(role_name(75), "application");
        assert_eq!(role_name(92), "document spreadsheet");
        assert_eq!(role_name(129), "push button menu");
        assert_eq!(role_name(130), "unknown");
        assert_eq!(role_name(u32::MAX), "unknown");
        let bits = state_bits(&[1 << STATE_SHOWING, 1 << 3]);
        assert_eq!(bits, 1 << STATE_SHOWING | 1 << 35);
        let names = state_names(state_bits(&[1 << 7 | 1 << 25, 1 << 11]));
        assert_eq!(names, ["editable", "showing", "read-only"]);
        // Unknown bits and extra words are ignored, bit 0 ("invalid") is not a state.
        assert_eq!(
            state_names(state_bits(&[1, 1 << 31, 7])),
            Vec::<String>::new()
        );
    }
}
