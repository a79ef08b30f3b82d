//! Selectors over UI trees: which node a checkpoint (or an oracle step) means, by role,
//! name, text, states, attributes and ancestry. Independent of screen resolution and
//! layout, so the same selector works on every desktop and phone.

use pincer_shared::tree::UiNode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A description of a UI node; every given field must match.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    /// Role, exactly ("push button", "text", "menu item").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Name, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Part of the name (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_contains: Option<String>,
    /// Text content, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Part of the text content (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text_contains: Option<String>,
    /// States the node must have ("focused", "checked", "selected", ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<String>,
    /// States the node must not have.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_states: Vec<String>,
    /// Attributes with exact values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
    /// Some ancestor must match this selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inside: Option<Box<Self>>,
}

fn contains_ci(hay: &str, needle: &str) -> bool {
    hay.to_lowercase().contains(&needle.to_lowercase())
}

impl Selector {
    /// Whether this selector, or one of its ancestors', matches on attributes.
    pub fn uses_attributes(&self) -> bool {
        !self.attributes.is_empty() || self.inside.as_deref().is_some_and(Self::uses_attributes)
    }

    /// Whether the node itself matches (ignoring `inside`).
    fn matches_node(&self, n: &UiNode) -> bool {
        self.role.as_ref().is_none_or(|r| &n.role == r)
            && self.name.as_ref().is_none_or(|v| &n.name == v)
            && self
                .name_contains
                .as_ref()
                .is_none_or(|v| contains_ci(&n.name, v))
            && self
                .text
                .as_ref()
                .is_none_or(|v| n.text.as_deref() == Some(v.as_str()))
            && self
                .text_contains
                .as_ref()
                .is_none_or(|v| n.text.as_deref().is_some_and(|t| contains_ci(t, v)))
            && self.states.iter().all(|s| n.has_state(s))
            && self.not_states.iter().all(|s| !n.has_state(s))
            && self
                .attributes
                .iter()
                .all(|(k, v)| n.attributes.get(k) == Some(v))
    }

    /// Every matching node under (and including) `root`, depth first.
    pub fn find_all<'a>(&self, root: &'a UiNode) -> Vec<&'a UiNode> {
        let mut out = Vec::new();
        let mut path = Vec::new();
        self.visit(root, &mut path, &mut out);
        out
    }

    /// The first matching node.
    pub fn find<'a>(&self, root: &'a UiNode) -> Option<&'a UiNode> {
        self.find_all(root).into_iter().next()
    }

    fn visit<'a>(&self, n: &'a UiNode, path: &mut Vec<&'a UiNode>, out: &mut Vec<&'a UiNode>) {
        if self.matches_node(n)
            && self
                .inside
                .as_ref()
                .is_none_or(|anc| path.iter().any(|a| anc.matches_with_path(a, path)))
        {
            out.push(n);
        }
        path.push(n);
        for c in &n.children {
            self.visit(c, path, out);
        }
        path.pop();
    }

    /// Whether `node` (an element of `path`) matches, with its own ancestors being the
    /// part of `path` before it.
    fn matches_with_path(&self, node: &UiNode, path: &[&UiNode]) -> bool {
        let Some(pos) = path.iter().position(|p| std::ptr::eq(*p, node)) else {
            return false;
        };
        let ancestors = &path[..pos];
        self.matches_node(node)
            && self.inside.as_ref().is_none_or(|anc| {
                ancestors
                    .iter()
                    .any(|a| anc.matches_with_path(a, ancestors))
            })
    }

    /// Whether the selector constrains anything at all.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl std::fmt::Display for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut parts = Vec::new();
        if let Some(r) = &self.role {
            parts.push(r.clone());
        }
        if let Some(n) = &self.name {
            parts.push(format!("named '{n}'"));
        }
        if let Some(n) = &self.name_contains {
            parts.push(format!("with name containing '{n}'"));
        }
        if let Some(t) = &self.text {
            parts.push(format!("with text '{t}'"));
        }
        if let Some(t) = &self.text_contains {
            parts.push(format!("with text containing '{t}'"));
        }
        if !self.states.is_empty() {
            parts.push(format!("[{}]", self.states.join(", ")));
        }
        if !self.not_states.is_empty() {
            parts.push(format!("[not {}]", self.not_states.join(", not ")));
        }
        for (k, v) in &self.attributes {
            parts.push(format!("{k}={v}"));
        }
        if let Some(a) = &self.inside {
            parts.push(format!("inside ({a})"));
        }
        if parts.is_empty() {
            f.write_str("any node")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(role: &str, name: &str, children: Vec<UiNode>) -> UiNode {
        UiNode {
            role: role.into(),
            name: name.into(),
            children,
            ..Default::default()
        }
    }

    fn tree() -> UiNode {
        let mut entry = node("text", "", vec![]);
        entry.text = Some("Hello World".into());
        entry.states = vec!["editable".into(), "focused".into()];
        node(
            "application",
            "gedit",
            vec![
                node(
                    "dialog",
                    "Save As",
                    vec![node("push button", "Save", vec![]), entry],
                ),
                node("frame", "Main", vec![node("push button", "Save", vec![])]),
            ],
        )
    }

    #[test]
    fn fields_must_all_match() {
        let t = tree();
        let s = Selector {
            role: Some("push button".into()),
            name: Some("Save".into()),
            ..Default::default()
        };
        assert_eq!(s.find_all(&t).len(), 2);
        let s = Selector {
            role: Some("text".into()),
            text_contains: Some("hello".into()),
            states: vec!["editable".into()],
            not_states: vec!["checked".into()],
            ..Default::default()
        };
        assert_eq!(s.find_all(&t).len(), 1);
        let s = Selector {
            text: Some("hello world".into()),
            ..Default::default()
        };
        assert!(s.find(&t).is_none(), "exact text is case-sensitive");
    }

    #[test]
    fn ancestry_narrows_matches() {
        let t = tree();
        let in_dialog = Selector {
            name: Some("Save".into()),
            role: Some("push button".into()),
            inside: Some(Box::new(Selector {
                role: Some("dialog".into()),
                ..Default::default()
            })),
            ..Default::default()
        };
        let found = in_dialog.find_all(&t);
        assert_eq!(found.len(), 1);
        // Nested ancestry: a dialog inside an application named gedit.
        let deep = Selector {
            inside: Some(Box::new(Selector {
                role: Some("dialog".into()),
                inside: Some(Box::new(Selector {
                    name: Some("gedit".into()),
                    ..Default::default()
                })),
                ..Default::default()
            })),
            ..in_dialog.clone()
        };
        assert_eq!(deep.find_all(&t).len(), 1);
        let wrong = Selector {
            inside: Some(Box::new(Selector {
                role: Some("dialog".into()),
                inside: Some(Box::new(Selector {
                    name: Some("firefox".into()),
                    ..Default::default()
                })),
                ..Default::default()
            })),
            ..in_dialog
        };
        assert!(wrong.find(&t).is_none());
        assert!(
            wrong
                .to_string()
                .contains("inside (dialog inside (named 'firefox'))"),
            "{wrong}"
        );
    }
}
