//! The UI-tree model shared by AT-SPI (Linux) and Android accessibility: one node type with
//! role, name, description, text, value, states, bounds, actions, attributes and children,
//! and its JSON and XML renderings.

use crate::limits::MAX_TREE_DEPTH;
use crate::observe::Rect;
use serde::{Deserialize, Deserializer, Serialize};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::fmt::Write as _;

thread_local! {
    /// Levels of `UiNode` being decoded on this thread.
    static DECODING_DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// Decodes a node's children, one level deeper, refusing trees over [`MAX_TREE_DEPTH`].
fn bounded_children<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<UiNode>, D::Error> {
    /// Restores the depth however decoding ends.
    struct Level(u32);
    impl Drop for Level {
        fn drop(&mut self) {
            DECODING_DEPTH.set(self.0);
        }
    }
    let depth = DECODING_DEPTH.get();
    if depth > MAX_TREE_DEPTH {
        return Err(serde::de::Error::custom(format!(
            "UI tree deeper than {MAX_TREE_DEPTH} levels"
        )));
    }
    let _level = Level(depth);
    DECODING_DEPTH.set(depth + 1);
    Vec::deserialize(d)
}

/// One element of a UI.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct UiNode {
    /// Role in lower case with spaces, as AT-SPI names it ("push button", "text", "frame").
    pub role: String,
    /// Accessible name (a button's label, a window's title).
    pub name: String,
    /// Accessible description.
    pub description: String,
    /// Text content, for nodes that expose text (entries, labels, documents).
    pub text: Option<String>,
    /// Current value, for nodes that expose one (sliders, spin buttons, progress bars).
    pub value: Option<f64>,
    /// States in lower case ("focused", "showing", "checked", "editable").
    pub states: Vec<String>,
    /// On-screen bounds; `None` when the node has none or reports bogus ones.
    pub bounds: Option<Rect>,
    /// Names of the actions the node offers ("click", "press", "activate").
    pub actions: Vec<String>,
    /// Toolkit attributes (`toolkit`, `id`, `class`, Android `resource-id`, ...).
    pub attributes: BTreeMap<String, String>,
    /// Children in order.
    #[serde(deserialize_with = "bounded_children")]
    pub children: Vec<Self>,
}

/// A UI tree as a guest returns it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct UiTree {
    /// The root: the desktop, or an application when scoped.
    pub root: UiNode,
    /// Nodes in the tree.
    pub node_count: u32,
    /// Whether a node or depth limit cut the walk short.
    pub truncated: bool,
    /// Microseconds the walk took on the guest.
    pub walk_us: u64,
}

impl UiNode {
    /// Whether the node has this state.
    pub fn has_state(&self, state: &str) -> bool {
        self.states.iter().any(|s| s == state)
    }

    /// This node and all below it, depth first, with each node's depth.
    pub fn walk(&self) -> impl Iterator<Item = (usize, &Self)> {
        let mut stack = vec![(0usize, self)];
        std::iter::from_fn(move || {
            let (depth, node) = stack.pop()?;
            stack.extend(node.children.iter().rev().map(|c| (depth + 1, c)));
            Some((depth, node))
        })
    }

    /// Number of nodes in this subtree.
    pub fn count(&self) -> usize {
        self.walk().count()
    }

    /// The first node (depth first) that satisfies `pred`.
    pub fn find(&self, pred: impl Fn(&Self) -> bool) -> Option<&Self> {
        self.walk().map(|(_, n)| n).find(|n| pred(n))
    }

    /// The node as JSON, leaving out empty fields so trees stay small for prompts.
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        m.insert("role".into(), self.role.clone().into());
        if !self.name.is_empty() {
            m.insert("name".into(), self.name.clone().into());
        }
        if !self.description.is_empty() {
            m.insert("description".into(), self.description.clone().into());
        }
        if let Some(t) = &self.text {
            m.insert("text".into(), t.clone().into());
        }
        if let Some(v) = self.value {
            m.insert("value".into(), v.into());
        }
        if !self.states.is_empty() {
            m.insert("states".into(), self.states.clone().into());
        }
        if let Some(b) = self.bounds {
            m.insert(
                "bounds".into(),
                serde_json::json!([b.x, b.y, b.width, b.height]),
            );
        }
        if !self.actions.is_empty() {
            m.insert("actions".into(), self.actions.clone().into());
        }
        if !self.attributes.is_empty() {
            let attrs: serde_json::Map<_, _> = self
                .attributes
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().into()))
                .collect();
            m.insert("attributes".into(), attrs.into());
        }
        if !self.children.is_empty() {
            m.insert(
                "children".into(),
                self.children.iter().map(Self::to_json).collect(),
            );
        }
        m.into()
    }

    /// The tree as XML: one element per node named after its role, fields as attributes,
    /// text as character data. Close to OSWorld's accessibility-tree XML.
    pub fn to_xml(&self) -> String {
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        self.write_xml(&mut out, 0);
        out
    }

    fn write_xml(&self, out: &mut String, depth: usize) {
        let tag = xml_name(&self.role);
        for _ in 0..depth {
            out.push_str("  ");
        }
        let _ = write!(out, "<{tag}");
        let mut attr = |k: &str, v: &str| {
            let _ = write!(out, " {}=\"{}\"", xml_name(k), xml_escape(v));
        };
        if !self.name.is_empty() {
            attr("name", &self.name);
        }
        if !self.description.is_empty() {
            attr("description", &self.description);
        }
        if let Some(v) = self.value {
            attr("value", &v.to_string());
        }
        if !self.states.is_empty() {
            attr("states", &self.states.join(" "));
        }
        if let Some(b) = self.bounds {
            attr("x", &b.x.to_string());
            attr("y", &b.y.to_string());
            attr("width", &b.width.to_string());
            attr("height", &b.height.to_string());
        }
        if !self.actions.is_empty() {
            attr("actions", &self.actions.join(" "));
        }
        for (k, v) in &self.attributes {
            attr(&format!("attr-{k}"), v);
        }
        let text = self.text.as_deref().filter(|t| !t.is_empty());
        if self.children.is_empty() && text.is_none() {
            out.push_str("/>\n");
            return;
        }
        out.push('>');
        if let Some(t) = text {
            out.push_str(&xml_escape(t));
        }
        if !self.children.is_empty() {
            out.push('\n');
            for c in &self.children {
                c.write_xml(out, depth + 1);
            }
            for _ in 0..depth {
                out.push_str("  ");
            }
        }
        let _ = writeln!(out, "</{tag}>");
    }
}

/// An XML element or attribute name made from free text: letters, digits, '-', '_' and '.'
/// kept, everything else turned into '-'; never starting with a digit or '-'.
fn xml_name(s: &str) -> String {
    let mut n: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect();
    if n.is_empty() || !n.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        n.insert(0, '_');
    }
    n
}

/// Escapes text for XML character data and attribute values, dropping characters XML 1.0
/// cannot carry.
fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' | '\r' => {
                let _ = write!(out, "&#{};", c as u32);
            }
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Postcard bytes of a chain of `levels` nested nodes (children are the last field).
    fn nested(levels: usize) -> Vec<u8> {
        let mut leaf = postcard::to_stdvec(&UiNode::default()).unwrap();
        assert_eq!(leaf.pop(), Some(0), "an empty children list ends a node");
        let mut out = Vec::with_capacity((leaf.len() + 1) * (levels + 1));
        for _ in 0..levels {
            out.extend_from_slice(&leaf);
            out.push(1);
        }
        out.extend_from_slice(&leaf);
        out.push(0);
        out
    }

    #[test]
    fn absurdly_deep_trees_are_refused_not_recursed_into() {
        let depth = |mut n: &UiNode| {
            let mut d = 0;
            while let Some(c) = n.children.first() {
                n = c;
                d += 1;
            }
            d
        };
        let max = MAX_TREE_DEPTH as usize;
        let deepest = postcard::from_bytes::<UiNode>(&nested(max)).expect("the deepest tree");
        assert_eq!(depth(&deepest), max);
        // One level more, or a million (which would overflow the stack if decoded): refused.
        for levels in [max + 1, 1_000_000] {
            let err = postcard::from_bytes::<UiNode>(&nested(levels)).unwrap_err();
            assert!(matches!(err, postcard::Error::SerdeDeCustom), "{err:?}");
        }
        // The failed decodes left the depth count as it was: trees still decode.
        assert_eq!(
            depth(&postcard::from_bytes::<UiNode>(&nested(max)).unwrap()),
            max
        );
    }

    fn sample() -> UiNode {
        UiNode {
            role: "frame".into(),
            name: "Fish & <Chips>".into(),
            states: vec!["showing".into(), "active".into()],
            bounds: Some(Rect::new(0, 0, 640, 480)),
            children: vec![
                UiNode {
                    role: "push button".into(),
                    name: "OK".into(),
                    actions: vec!["click".into()],
                    bounds: Some(Rect::new(10, 20, 80, 30)),
                    ..Default::default()
                },
                UiNode {
                    role: "text".into(),
                    text: Some("a \"quote\"\nline\u{1}".into()),
                    attributes: [("toolkit".to_owned(), "gtk".to_owned())].into(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        }
    }

    #[test]
    fn walk_is_depth_first_with_depths() {
        let t = sample();
        let seen: Vec<_> = t.walk().map(|(d, n)| (d, n.role.as_str())).collect();
        assert_eq!(seen, vec![(0, "frame"), (1, "push button"), (1, "text")]);
        assert_eq!(t.count(), 3);
        assert_eq!(t.find(|n| n.name == "OK").unwrap().role, "push button");
    }

    #[test]
    fn json_omits_empty_fields() {
        let j = sample().to_json();
        assert_eq!(j["name"], "Fish & <Chips>");
        assert_eq!(
            j["children"][0]["bounds"],
            serde_json::json!([10, 20, 80, 30])
        );
        assert!(j["children"][0].get("text").is_none());
        assert_eq!(j["children"][1]["attributes"]["toolkit"], "gtk");
    }

    #[test]
    fn xml_is_escaped_and_well_formed() {
        let x = sample().to_xml();
        assert!(
            x.contains("<frame name=\"Fish &amp; &lt;Chips&gt;\""),
            "{x}"
        );
        assert!(x.contains("<push-button name=\"OK\""), "{x}");
        assert!(x.contains("a &quot;quote&quot;&#10;line</text>"), "{x}");
        assert!(!x.contains('\u{1}'));
        assert_eq!(x.matches("<frame").count(), x.matches("</frame>").count());
    }

    #[test]
    fn xml_names_are_valid() {
        assert_eq!(xml_name("push button"), "push-button");
        assert_eq!(xml_name("3d"), "_3d");
        assert_eq!(xml_name(""), "_");
    }
}
