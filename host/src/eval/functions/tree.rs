//! The UI tree: a node matching a selector exists (or, with `count`, at least that many).

use super::{ANY, Library, Reads, clip};
use crate::eval::{AgentLog, Check, EvalError, ProbeResult, Verdict, reply, unexpected};
use crate::task::selector::Selector;
use pincer_shared::observe::{TreeRequest, TreeScope};
use pincer_shared::probe::{Probe, ProbeReply};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NodeArgs {
    /// Which node.
    selector: Selector,
    /// Only look in applications whose name contains this.
    #[serde(default)]
    app: Option<String>,
    /// Also look at nodes that are not showing.
    #[serde(default)]
    include_hidden: bool,
    /// At least this many nodes must match (default 1).
    #[serde(default = "one")]
    count: usize,
}

fn one() -> usize {
    1
}

/// Nodes matching a selector exist in the UI tree.
#[derive(Debug)]
struct NodeExists {
    a: NodeArgs,
}

impl Check for NodeExists {
    fn probes(&self) -> Vec<Probe> {
        vec![Probe::UiTree(TreeRequest {
            scope: self
                .a
                .app
                .clone()
                .map_or(TreeScope::Desktop, TreeScope::App),
            showing_only: !self.a.include_hidden,
            ..TreeRequest::default()
        })]
    }

    fn judge(&self, r: &[&ProbeResult], _: &AgentLog) -> Result<Verdict, EvalError> {
        let tree = match reply(r[0], "ui tree")? {
            ProbeReply::UiTree(t) => t,
            other => return Err(unexpected("ui tree", other)),
        };
        let found = self.a.selector.find_all(&tree.root);
        let (sel, want) = (&self.a.selector, self.a.count);
        if let Some(n) = found.first().filter(|_| found.len() >= want) {
            let name = Some(n.name.as_str())
                .filter(|t| !t.is_empty())
                .map(|t| format!(" '{}'", clip(t, 60)))
                .unwrap_or_default();
            let text = n
                .text
                .as_deref()
                .filter(|t| !t.is_empty())
                .map(|t| format!(" with text '{}'", clip(t, 60)))
                .unwrap_or_default();
            let at = n
                .bounds
                .map(|b| format!(" at {},{} {}x{}", b.x, b.y, b.width, b.height))
                .unwrap_or_default();
            let matching = match found.len() {
                1 => format!("1 node matches {sel}"),
                k => format!("{k} nodes match {sel}"),
            };
            return Ok(Verdict::pass(format!(
                "found {}{name}{text}{at} ({matching})",
                n.role
            )));
        }
        // A scope that selects no application gives an empty desktop root.
        let nothing = tree.root.role != "application" && tree.root.children.is_empty();
        let scope = match &self.a.app {
            Some(app) if nothing => {
                return Ok(Verdict::fail(format!(
                    "no application '{app}' is in the UI tree, so no node matches {sel}"
                )));
            }
            Some(app) => format!(" in application '{app}'"),
            None => String::new(),
        };
        let total = tree.node_count;
        Ok(Verdict::fail(match found.len() {
            0 if total == 1 => format!("the only node{scope} does not match {sel}"),
            0 => format!("no node of the {total}{scope} matches {sel}"),
            1 => format!("1 of {total} nodes{scope} matches {sel}, fewer than the {want} required"),
            k => format!("{k} of {total} nodes{scope} match {sel}, fewer than the {want} required"),
        }))
    }
}

pub(super) fn register(lib: &mut Library) {
    lib.add(
        "ui_node_exists",
        "A node matching the selector (role, name, text, states, attributes, ancestry) is in the UI tree.",
        Reads::Env(ANY),
        r#"{"selector": {"role": "push button", "name": "OK", "inside": {"role": "dialog"}}, "app": "zenity"}"#,
        |a: NodeArgs, _| {
            if a.selector.is_empty() {
                return Err("`selector` matches every node: give a role, name, text, state or attribute".into());
            }
            if a.count == 0 {
                return Err("`count` of 0 always holds; use `not` to require absence".into());
            }
            Ok(NodeExists { a })
        },
    );
}

#[cfg(test)]
mod tests {
    use crate::eval::functions::replies::judge;
    use pincer_shared::observe::Rect;
    use pincer_shared::probe::ProbeReply;
    use pincer_shared::tree::{UiNode, UiTree};
    use serde_json::json;

    fn node(role: &str, name: &str, children: Vec<UiNode>) -> UiNode {
        UiNode {
            role: role.into(),
            name: name.into(),
            children,
            ..UiNode::default()
        }
    }

    /// A desktop with one application (when given) holding a dialog with two buttons, one
    /// named with quotes that Rust's debug formatting would escape.
    fn desktop(app: Option<&str>) -> crate::eval::ProbeResult {
        let mut save = node("push button", "Don't \"save\"", vec![]);
        save.bounds = Some(Rect {
            x: 10,
            y: 20,
            width: 80,
            height: 30,
        });
        let apps = app
            .map(|a| {
                node(
                    "application",
                    a,
                    vec![node(
                        "dialog",
                        "Save?",
                        vec![save, node("push button", "Cancel", vec![])],
                    )],
                )
            })
            .into_iter()
            .collect();
        let root = node("desktop frame", "main", apps);
        Ok(ProbeReply::UiTree(Box::new(UiTree {
            node_count: root.count() as u32,
            root,
            truncated: false,
            walk_us: 0,
        })))
    }

    fn exists(args: serde_json::Value, app: Option<&str>) -> (bool, String) {
        let v = judge("ui_node_exists", args, &[desktop(app)]);
        (v.passed, v.feedback)
    }

    #[test]
    fn nodes_are_named_in_quotes_and_counted_in_words() {
        let app = Some("zenity");
        assert_eq!(
            exists(json!({"selector": {"role": "push button"}}), app),
            (
                true,
                "found push button 'Don't \"save\"' at 10,20 80x30 (2 nodes match push button)"
                    .into()
            )
        );
        assert_eq!(
            exists(json!({"selector": {"name": "Cancel"}}), app),
            (
                true,
                "found push button 'Cancel' (1 node matches named 'Cancel')".into()
            )
        );
        assert_eq!(
            exists(
                json!({"selector": {"role": "push button"}, "count": 3}),
                app
            ),
            (
                false,
                "2 of 5 nodes match push button, fewer than the 3 required".into()
            )
        );
        assert_eq!(
            exists(
                json!({"selector": {"role": "push button", "name": "OK"}}),
                app
            ),
            (
                false,
                "no node of the 5 matches push button named 'OK'".into()
            )
        );
        assert_eq!(
            exists(
                json!({"selector": {"role": "push button", "name": "OK"}}),
                None
            ),
            (
                false,
                "the only node does not match push button named 'OK'".into()
            )
        );
        assert_eq!(
            exists(
                json!({"selector": {"role": "push button"}, "app": "gedit"}),
                None
            ),
            (
                false,
                "no application 'gedit' is in the UI tree, so no node matches push button".into()
            )
        );
    }
}
