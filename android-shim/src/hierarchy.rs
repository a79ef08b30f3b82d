//! `uiautomator dump` XML mapped into the shared UI-tree model, so Set-of-Marks, selectors,
//! oracles and checkpoints work on phones as on desktops. One `<node>` becomes one
//! [`UiNode`]: the role from the widget class, the name from `content-desc` (else the
//! text), the text, the bounds, the states, and `resource-id`, `class`, `package` and
//! `content-desc` kept verbatim as attributes. Dumps are parsed as XML, never as lines:
//! devices write one line, other tools re-indent.

use pincer_shared::limits::MAX_TREE_DEPTH;
use pincer_shared::observe::Rect;
use pincer_shared::tree::{UiNode, UiTree};
use quick_xml::events::{BytesStart, Event};

/// Why a dump is not a hierarchy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum HierarchyError {
    /// `uiautomator` said it could not dump (`ERROR: could not get idle state.`).
    #[error("uiautomator dump: {0}")]
    Refused(String),
    /// Not XML, or not a `<hierarchy>`.
    #[error("uiautomator dump: not a hierarchy: {0}")]
    Malformed(String),
    /// Deeper than the protocol carries.
    #[error("uiautomator dump: the hierarchy is deeper than {MAX_TREE_DEPTH} levels")]
    TooDeep,
}

/// The role a widget class plays, in the words AT-SPI uses on Linux.
pub(crate) fn role_of(class: &str) -> &'static str {
    let simple = class.rsplit('.').next().unwrap_or(class);
    match simple {
        "Button" | "ImageButton" | "MaterialButton" | "FloatingActionButton" => "push button",
        "CheckBox" | "CheckedTextView" => "check box",
        "Switch" | "SwitchCompat" | "SwitchMaterial" | "ToggleButton" => "toggle button",
        "RadioButton" => "radio button",
        "EditText" | "AutoCompleteTextView" | "MultiAutoCompleteTextView" | "TextInputEditText" => {
            "text"
        }
        "TextView" => "label",
        "ImageView" => "image",
        "ProgressBar" => "progress bar",
        "SeekBar" => "slider",
        "Spinner" => "combo box",
        "ListView" | "GridView" | "RecyclerView" | "ExpandableListView" => "list",
        "ScrollView" | "HorizontalScrollView" | "NestedScrollView" => "scroll pane",
        "WebView" => "document web",
        "TabWidget" | "TabLayout" => "page tab list",
        "Toolbar" | "ActionBar" => "tool bar",
        "ViewPager" | "ViewPager2" => "page tab list",
        "FrameLayout" | "LinearLayout" | "RelativeLayout" | "ConstraintLayout"
        | "CoordinatorLayout" | "View" | "ViewGroup" => "panel",
        _ => "unknown",
    }
}

/// `[x1,y1][x2,y2]` as a rectangle; `None` for empty or bogus bounds.
pub(crate) fn bounds(s: &str) -> Option<Rect> {
    let nums: Vec<i32> = s
        .split(|c: char| !(c.is_ascii_digit() || c == '-'))
        .filter(|t| !t.is_empty())
        .filter_map(|t| t.parse().ok())
        .collect();
    let [x1, y1, x2, y2] = nums[..] else {
        return None;
    };
    (x2 > x1 && y2 > y1).then(|| Rect::new(x1, y1, (x2 - x1) as u32, (y2 - y1) as u32))
}

/// The states a node's boolean attributes say it is in.
const STATES: &[(&str, &str)] = &[
    ("checkable", "checkable"),
    ("checked", "checked"),
    ("clickable", "clickable"),
    ("enabled", "enabled"),
    ("focusable", "focusable"),
    ("focused", "focused"),
    ("scrollable", "scrollable"),
    ("long-clickable", "long clickable"),
    ("password", "password"),
    ("selected", "selected"),
];

fn node_of(e: &BytesStart<'_>) -> Result<UiNode, HierarchyError> {
    let mut n = UiNode::default();
    let mut desc = String::new();
    let mut text = String::new();
    for a in e.attributes() {
        let a = a.map_err(|err| HierarchyError::Malformed(err.to_string()))?;
        let key = String::from_utf8_lossy(a.key.as_ref()).into_owned();
        let value = a
            .normalized_value(quick_xml::XmlVersion::Implicit1_0)
            .map_err(|err| HierarchyError::Malformed(err.to_string()))?
            .into_owned();
        match key.as_str() {
            "text" => text = value,
            "content-desc" => {
                desc = value.clone();
                if !value.is_empty() {
                    n.attributes.insert(key, value);
                }
            }
            "resource-id" | "class" | "package" => {
                if key == "class" {
                    n.role = role_of(&value).to_owned();
                }
                n.attributes.insert(key, value);
            }
            "bounds" => n.bounds = bounds(&value),
            k => {
                if let Some((_, state)) = STATES.iter().find(|(attr, _)| *attr == k)
                    && value == "true"
                {
                    n.states.push((*state).to_owned());
                }
            }
        }
    }
    if n.role.is_empty() {
        n.role = "unknown".into();
    }
    if n.bounds.is_some() {
        n.states.push("showing".into());
        n.states.push("visible".into());
    }
    if n.has_state("clickable") {
        n.actions.push("click".into());
    }
    if n.has_state("long clickable") {
        n.actions.push("long click".into());
    }
    if n.has_state("scrollable") {
        n.actions.push("scroll".into());
    }
    n.name = if desc.is_empty() { text.clone() } else { desc };
    n.text = (!text.is_empty()).then_some(text);
    Ok(n)
}

/// Parses a dump. The root is the `<hierarchy>` (role `desktop frame`, the display's
/// rotation as the attribute `rotation`); its children are the windows' nodes.
pub(crate) fn parse(xml: &str) -> Result<UiTree, HierarchyError> {
    let trimmed = xml.trim_start();
    if trimmed.starts_with("ERROR") || trimmed.starts_with("Killed") {
        return Err(HierarchyError::Refused(
            trimmed.lines().next().unwrap_or_default().trim().to_owned(),
        ));
    }
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut stack: Vec<UiNode> = Vec::new();
    let mut root: Option<UiNode> = None;
    let mut count = 0u32;
    loop {
        let ev = reader
            .read_event()
            .map_err(|e| HierarchyError::Malformed(e.to_string()))?;
        match ev {
            Event::Start(e) | Event::Empty(e) if e.name().as_ref() == b"hierarchy" => {
                let mut h = UiNode {
                    role: "desktop frame".into(),
                    name: "android".into(),
                    ..UiNode::default()
                };
                for a in e.attributes().flatten() {
                    if a.key.as_ref() == b"rotation" {
                        h.attributes.insert(
                            "rotation".into(),
                            String::from_utf8_lossy(&a.value).into_owned(),
                        );
                    }
                }
                count += 1;
                stack.push(h);
            }
            Event::Start(e) if e.name().as_ref() == b"node" => {
                if stack.len() > MAX_TREE_DEPTH as usize {
                    return Err(HierarchyError::TooDeep);
                }
                count += 1;
                stack.push(node_of(&e)?);
            }
            Event::Empty(e) if e.name().as_ref() == b"node" => {
                let n = node_of(&e)?;
                count += 1;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(n),
                    None => {
                        return Err(HierarchyError::Malformed(
                            "a node outside <hierarchy>".into(),
                        ));
                    }
                }
            }
            Event::End(e) if e.name().as_ref() == b"node" || e.name().as_ref() == b"hierarchy" => {
                let done = stack.pop().ok_or_else(|| {
                    HierarchyError::Malformed("an end tag without a start".into())
                })?;
                match stack.last_mut() {
                    Some(parent) => parent.children.push(done),
                    None => root = Some(done),
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    if !stack.is_empty() {
        return Err(HierarchyError::Malformed(
            "the dump ends inside a node (truncated?)".into(),
        ));
    }
    let root = root.ok_or_else(|| HierarchyError::Malformed("no <hierarchy> element".into()))?;
    Ok(UiTree {
        root,
        node_count: count,
        truncated: false,
        walk_us: 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GMAIL: &str =
        include_str!("../../fixtures/android/mobile-env/uiautomator-gmail-welcome-raw.xml");
    const LAUNCHER16: &str =
        include_str!("../../fixtures/android/avc/uiautomator-launcher2-api16-17-pretty.xml");
    const KEYGUARD_ZH: &str =
        include_str!("../../fixtures/android/avc/uiautomator-keyguard-zh-api17-pretty.xml");

    #[test]
    fn a_raw_device_dump_maps_every_node() {
        let t = parse(GMAIL).unwrap();
        assert_eq!(t.node_count as usize, t.root.count());
        assert_eq!(t.root.role, "desktop frame");
        assert_eq!(
            t.root.attributes.get("rotation").map(String::as_str),
            Some("0")
        );
        assert_eq!(GMAIL.matches("<node").count() + 1, t.root.count());
        // Every node with a resource id keeps it verbatim, with its class and package.
        let with_id = t
            .root
            .walk()
            .filter(|(_, n)| n.attributes.contains_key("resource-id"))
            .count();
        assert!(with_id > 0);
        // Gmail's "GOT IT" is a clickable TextView: a label one can click.
        let got_it = t
            .root
            .find(|n| {
                n.attributes.get("resource-id").map(String::as_str)
                    == Some("com.google.android.gm:id/welcome_tour_got_it")
            })
            .expect("the GOT IT label");
        assert_eq!(
            (got_it.role.as_str(), got_it.name.as_str()),
            ("label", "GOT IT")
        );
        assert_eq!(got_it.text.as_deref(), Some("GOT IT"));
        assert!(got_it.has_state("clickable") && got_it.actions.contains(&"click".to_owned()));
        assert!(got_it.bounds.is_some_and(|b| b.width > 0));
        assert_eq!(
            got_it.attributes.get("package").map(String::as_str),
            Some("com.google.android.gm")
        );
    }

    #[test]
    fn old_dumps_without_resource_ids_and_non_latin_text_parse() {
        let t = parse(LAUNCHER16).unwrap();
        assert!(
            t.root
                .walk()
                .all(|(_, n)| !n.attributes.contains_key("resource-id"))
        );
        assert!(t.root.count() > 5);
        let zh = parse(KEYGUARD_ZH).unwrap();
        assert!(
            zh.root
                .find(|n| n.text.as_deref().is_some_and(|t| t.contains("充电")))
                .is_some(),
            "the Chinese text survives"
        );
    }

    #[test]
    fn names_come_from_the_description_else_the_text() {
        let t = parse(r#"<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation="1"><node index="0" text="OK" resource-id="a:id/ok" class="android.widget.Button" package="a" content-desc="" checkable="false" checked="false" clickable="true" enabled="true" focusable="true" focused="false" scrollable="false" long-clickable="false" password="false" selected="false" bounds="[0,0][100,50]" /><node index="1" text="" resource-id="" class="android.widget.ImageView" package="a" content-desc="Back &amp; up" checkable="false" checked="false" clickable="false" enabled="true" focusable="false" focused="false" scrollable="false" long-clickable="false" password="false" selected="false" bounds="[0,0][0,0]" /></hierarchy>"#).unwrap();
        let [ok, back] = &t.root.children[..] else {
            panic!("{t:?}")
        };
        assert_eq!(
            (ok.role.as_str(), ok.name.as_str(), ok.text.as_deref()),
            ("push button", "OK", Some("OK"))
        );
        assert_eq!(
            (back.role.as_str(), back.name.as_str(), back.text.as_deref()),
            ("image", "Back & up", None)
        );
        assert_eq!(
            back.attributes.get("content-desc").map(String::as_str),
            Some("Back & up")
        );
        assert_eq!(back.bounds, None, "[0,0][0,0] is no box");
        assert!(!back.has_state("showing"));
    }

    #[test]
    fn refusals_and_garbage_are_errors_never_panics() {
        let idle = include_str!(
            "../../fixtures/android/issue-threads/uiautomator-dump-error-idle-state.txt"
        );
        assert!(
            matches!(parse(idle), Err(HierarchyError::Refused(_))),
            "{:?}",
            parse(idle)
        );
        for bad in [
            "",
            "<hierarchy>",
            "<hierarchy><node></hierarchy>",
            "not xml at all <",
            "<a/>",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} parsed");
        }
        let cut = &GMAIL[..GMAIL.len() / 2];
        assert!(parse(cut).is_err());
        assert_eq!(bounds("[10,20][30,60]"), Some(Rect::new(10, 20, 20, 40)));
        assert_eq!(bounds("[1,2]"), None);
    }
}
