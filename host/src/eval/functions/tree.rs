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
        let sel = &self.a.selector;
        Ok(match found.first() {
            Some(n) if found.len() >= self.a.count => {
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
                Verdict::pass(format!(
                    "found {} {:?}{text}{at} ({} matching {sel})",
                    n.role,
                    n.name,
                    found.len()
                ))
            }
            _ => {
                // A scope that selects no application gives an empty desktop root.
                let nothing = tree.root.role != "application" && tree.root.children.is_empty();
                let scope = match &self.a.app {
                    Some(app) if nothing => {
                        format!(" (no application '{app}' in the UI tree)")
                    }
                    Some(app) => format!(" in application '{app}'"),
                    None => String::new(),
                };
                Verdict::fail(format!(
                    "{} of {} nodes{scope} match {sel}, expected at least {}",
                    found.len(),
                    tree.node_count,
                    self.a.count
                ))
            }
        })
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
