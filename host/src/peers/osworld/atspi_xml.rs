//! A UI tree as OSWorld's server writes it for its `accessibility_tree` getter on Linux
//! (`_create_atspi_node` under a `desktop-frame` root, the server of the 2024 task files):
//! one element per node named by its role (spaces as `-`, `unknown` when empty), the
//! accessible name as `name`, each state as `st:NAME="true"` (libatspi's name with `_`),
//! each toolkit attribute as `attr:KEY`, the screen position and size as
//! `cp:screencoord="(x, y)"` and `cp:size="(w, h)"` on nodes both visible and showing, the
//! value as `val:value`, and the text (without U+FFFC and U+FFFD) as the element's text.
//! OSWorld's metrics (`check_accessibility_tree`, `check_left_panel`) select in it with CSS
//! or XPath over these namespaces.
//!
//! What pincer's tree does not carry is left out: the `image` and `selection` flags, the
//! value's `min`, `max` and `step`, and the actions' descriptions and key bindings
//! (`act:NAME_desc`, `act:NAME_kb`). Names that are not XML names (an attribute key with a
//! space) are skipped, where lxml would have raised and OSWorld dropped the node's later
//! siblings.

use pincer_shared::tree::UiNode;
use std::fmt::Write as _;

/// OSWorld's namespaces for Ubuntu (`_accessibility_ns_map["ubuntu"]`), in its order.
const NAMESPACES: [(&str, &str); 8] = [
    ("st", "https://accessibility.ubuntu.example.org/ns/state"),
    (
        "attr",
        "https://accessibility.ubuntu.example.org/ns/attributes",
    ),
    (
        "cp",
        "https://accessibility.ubuntu.example.org/ns/component",
    ),
    (
        "doc",
        "https://accessibility.ubuntu.example.org/ns/document",
    ),
    (
        "docattr",
        "https://accessibility.ubuntu.example.org/ns/document/attributes",
    ),
    ("txt", "https://accessibility.ubuntu.example.org/ns/text"),
    ("val", "https://accessibility.ubuntu.example.org/ns/value"),
    ("act", "https://accessibility.ubuntu.example.org/ns/action"),
];

/// The deepest level OSWorld's server writes, counting the applications as level 2
/// (`MAX_DEPTH`): a node there is written without its children.
const MAX_DEPTH: usize = 50;

/// The most children OSWorld's server writes under one node (`MAX_WIDTH`).
const MAX_WIDTH: usize = 1024;

/// The levels below the desktop a tree probe must walk for [`xml`]: the applications are
/// level 1 in pincer's tree and level 2 in OSWorld's.
pub(super) const PROBE_DEPTH: u32 = (MAX_DEPTH - 1) as u32;

/// The XML OSWorld's server returns for the desktop whose tree is `desktop` (its
/// children are the applications).
pub(super) fn xml(desktop: &UiNode) -> String {
    let mut out = String::from("<desktop-frame");
    for (prefix, uri) in NAMESPACES {
        let _ = write!(out, " xmlns:{prefix}=\"{uri}\"");
    }
    out.push('>');
    for app in desktop.children.iter().take(MAX_WIDTH) {
        node(app, 2, &mut out);
    }
    out.push_str("</desktop-frame>");
    out
}

/// Writes `n`, at OSWorld's `depth`, and what lies below it.
fn node(n: &UiNode, depth: usize, out: &mut String) {
    let role = n.role.trim();
    let tag = if role.is_empty() {
        "unknown".to_owned()
    } else {
        role.replace(' ', "-")
    };
    // A role that is no XML name cannot be an element; OSWorld's lxml would have raised.
    if !is_name(&tag) {
        return;
    }
    let _ = write!(out, "<{tag}");
    attribute(out, "name", &n.name);
    for state in &n.states {
        let state = state.replace('-', "_");
        if is_name(&state) {
            attribute(out, &format!("st:{state}"), "true");
        }
    }
    for (key, value) in &n.attributes {
        if !key.is_empty() && is_name(key) {
            attribute(out, &format!("attr:{key}"), value);
        }
    }
    if let Some(b) = n.bounds
        && n.has_state("visible")
        && n.has_state("showing")
    {
        attribute(out, "cp:screencoord", &format!("({}, {})", b.x, b.y));
        attribute(out, "cp:size", &format!("({}, {})", b.width, b.height));
    }
    if let Some(v) = n.value {
        attribute(out, "val:value", &python_float(v));
    }
    out.push('>');
    if let Some(text) = &n.text {
        escape(out, &text.replace(['\u{fffc}', '\u{fffd}'], ""), false);
    }
    if depth < MAX_DEPTH {
        for child in n.children.iter().take(MAX_WIDTH) {
            node(child, depth + 1, out);
        }
    }
    let _ = write!(out, "</{tag}>");
}

/// ` key="value"`, escaped.
fn attribute(out: &mut String, key: &str, value: &str) {
    let _ = write!(out, " {key}=\"");
    escape(out, value, true);
    out.push('"');
}

/// Appends `text` escaped for XML, without the characters XML 1.0 cannot hold (lxml
/// refuses them).
fn escape(out: &mut String, text: &str, quoted: bool) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if quoted => out.push_str("&quot;"),
            '\n' if quoted => out.push_str("&#10;"),
            '\t' if quoted => out.push_str("&#9;"),
            '\r' => out.push_str("&#13;"),
            '\t' | '\n' => out.push(c),
            c if xml_char(c) => out.push(c),
            _ => {}
        }
    }
}

/// Whether XML 1.0 can hold `c`.
fn xml_char(c: char) -> bool {
    matches!(c, '\u{20}'..='\u{d7ff}' | '\u{e000}'..='\u{fffd}' | '\u{10000}'..)
}

/// Whether `s` is an XML name without a colon (an NCName), as element and attribute
/// names must be.
fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars.next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && chars.all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// A float as Python's `str()` writes it: `50.0`, `0.5`, `1e-05`, `inf`.
fn python_float(v: f64) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    let exponent = if v == 0.0 {
        0
    } else {
        v.abs().log10().floor() as i32
    };
    if (-4..16).contains(&exponent) {
        let s = format!("{v:?}");
        if s.contains(['.', 'e']) {
            s
        } else {
            format!("{s}.0")
        }
    } else {
        // Rust writes `1e-5`, Python `1e-05`: the exponent has at least two digits.
        let s = format!("{v:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = exp.strip_prefix('-').map_or(("+", exp), |d| ("-", d));
        format!("{mantissa}e{sign}{digits:0>2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pincer_shared::observe::Rect;

    fn node(role: &str, name: &str, states: &[&str], children: Vec<UiNode>) -> UiNode {
        UiNode {
            role: role.into(),
            name: name.into(),
            states: states.iter().map(|s| (*s).to_owned()).collect(),
            children,
            ..UiNode::default()
        }
    }

    #[test]
    fn the_tree_is_written_as_osworlds_server_writes_it() {
        let mut button = node(
            "push button",
            "Save \"all\" & <quit>",
            &["visible", "showing", "multi-line"],
            vec![],
        );
        button.bounds = Some(Rect::new(10, -4, 80, 24));
        button
            .attributes
            .insert("id".into(), "MsgHeadersToolbar".into());
        button.attributes.insert("bad key".into(), "x".into());
        let mut label = node("label", "", &["visible"], vec![]);
        label.text = Some("a\u{fffc}b\u{1}c".into());
        label.bounds = Some(Rect::new(1, 2, 3, 4));
        let mut slider = node("", "", &[], vec![]);
        slider.value = Some(50.0);
        let app = node("application", "app", &[], vec![button, label, slider]);
        let xml = xml(&node("desktop frame", "main", &[], vec![app]));
        let ns = NAMESPACES
            .iter()
            .map(|(p, u)| format!(" xmlns:{p}=\"{u}\""))
            .collect::<String>();
        assert_eq!(
            xml,
            format!(
                "<desktop-frame{ns}><application name=\"app\">\
                 <push-button name=\"Save &quot;all&quot; &amp; &lt;quit&gt;\" \
                 st:visible=\"true\" st:showing=\"true\" st:multi_line=\"true\" \
                 attr:id=\"MsgHeadersToolbar\" cp:screencoord=\"(10, -4)\" cp:size=\"(80, 24)\">\
                 </push-button>\
                 <label name=\"\" st:visible=\"true\">abc</label>\
                 <unknown name=\"\" val:value=\"50.0\"></unknown>\
                 </application></desktop-frame>"
            )
        );
    }

    #[test]
    fn nodes_below_osworlds_depth_are_left_out() {
        let mut deep = node("filler", "leaf", &[], vec![]);
        for _ in 0..MAX_DEPTH {
            deep = node("filler", "", &[], vec![deep]);
        }
        let xml = xml(&node("desktop frame", "", &[], vec![deep]));
        // Levels 2 to 50 are written, the rest not.
        assert_eq!(xml.matches("<filler").count(), MAX_DEPTH - 1);
        assert!(!xml.contains("leaf"));
    }

    #[test]
    fn floats_read_as_python_prints_them() {
        for (v, python) in [
            (50.0, "50.0"),
            (0.5, "0.5"),
            (-3.25, "-3.25"),
            (0.0, "0.0"),
            (1e-5, "1e-05"),
            (1e16, "1e+16"),
            (123_456.0, "123456.0"),
            (f64::INFINITY, "inf"),
        ] {
            assert_eq!(python_float(v), python, "{v}");
        }
    }
}
