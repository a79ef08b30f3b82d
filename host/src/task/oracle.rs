//! Oracle solutions: the steps that solve a task, written against UI-tree selectors rather
//! than coordinates so they work at any resolution and layout. The oracle agent replays
//! them through the same action path as every other agent, proving each task solvable.

use super::selector::Selector;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where an oracle step acts: a UI node (its box's centre) or fixed coordinates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Locator {
    /// Screen pixels.
    Point {
        /// From the left.
        x: i32,
        /// From the top.
        y: i32,
    },
    /// The first node matching a selector.
    Node(Selector),
}

/// One step of an oracle solution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "do", rename_all = "snake_case", deny_unknown_fields)]
pub enum OracleStep {
    /// Click a node or a point.
    Click {
        /// Environment role (may be left out when the task has one environment).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        env: Option<String>,
        /// What to click.
        target: Locator,
        /// 2 for a double click.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count: Option<u8>,
        /// Right button instead of left.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        right: bool,
    },
    /// Type text, optionally clicking a node first.
    Type {
        /// Environment role.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        env: Option<String>,
        /// The text.
        text: String,
        /// Click this first.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<Locator>,
    },
    /// Press a key or combination ("enter", "ctrl+s").
    Key {
        /// Environment role.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        env: Option<String>,
        /// The key or combination.
        key: String,
    },
    /// Wait until a node matching the selector is on screen.
    WaitFor {
        /// Environment role.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        env: Option<String>,
        /// The node.
        target: Selector,
        /// Give up after this long (default 20 s).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// Read a value off the screen: the first node matching `target` whose text (or, when it
    /// does not match, name) matches `pattern`; the pattern's first group (or whole match) becomes
    /// `{{var}}` in later `type` and `submit` steps. Waits, like `wait_for`, until such a
    /// node is on screen. This is how cross-environment solutions carry a value from one
    /// environment to another without writing it into the task.
    Read {
        /// Environment role.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        env: Option<String>,
        /// The node that shows the value.
        target: Selector,
        /// A regular expression over the node's text.
        pattern: String,
        /// The variable's name (letters, digits, `_`).
        var: String,
        /// Give up after this long (default 20 s).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// Wait a fixed time.
    Sleep {
        /// Milliseconds.
        ms: u64,
    },
    /// Submit an answer.
    Submit {
        /// The answer.
        answer: String,
    },
    /// Declare the task done.
    Complete,
}

/// The `{{var}}` placeholders a text uses, in order.
fn placeholders(text: &str) -> impl Iterator<Item = &str> {
    text.split("{{")
        .skip(1)
        .filter_map(|rest| rest.split_once("}}").map(|(name, _)| name))
}

/// Replaces `{{var}}` with the variables' values; other text, including braces that name no
/// variable, stays as written.
/// One pass: a value that itself contains `{{x}}` is not substituted again.
pub fn fill(text: &str, vars: &std::collections::BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after
            .split_once("}}")
            .and_then(|(name, tail)| Some((vars.get(name)?, tail)))
        {
            Some((value, tail)) => {
                out.push_str(value);
                rest = tail;
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

impl OracleStep {
    /// The selector the step finds its node by, if any.
    fn selector(&self) -> Option<&Selector> {
        match self {
            Self::Click {
                target: Locator::Node(s),
                ..
            }
            | Self::Type {
                target: Some(Locator::Node(s)),
                ..
            }
            | Self::WaitFor { target: s, .. }
            | Self::Read { target: s, .. } => Some(s),
            _ => None,
        }
    }
}

/// Checks a solution before it runs: patterns compile, variables are read before they are
/// used, selectors ask only for what an agent's view carries. Returns what is wrong, naming
/// the step (1-based).
pub fn check(steps: &[OracleStep]) -> Result<(), String> {
    let mut known: Vec<&str> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let n = i + 1;
        if step.selector().is_some_and(Selector::uses_attributes) {
            return Err(format!(
                "oracle step {n} selects by `attributes`, which agents' views leave out \
                 (reading them costs a call a node): select by role, name, text or states"
            ));
        }
        match step {
            OracleStep::Read { pattern, var, .. } => {
                regex::Regex::new(pattern)
                    .map_err(|e| format!("oracle step {n}: bad pattern: {e}"))?;
                if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(format!(
                        "oracle step {n}: variable name '{var}' must be letters, digits and '_'"
                    ));
                }
                known.push(var);
            }
            OracleStep::Type { text, .. } | OracleStep::Submit { answer: text } => {
                if let Some(v) = placeholders(text).find(|v| {
                    !known.contains(v) && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                }) {
                    return Err(format!(
                        "oracle step {n} uses {{{{{v}}}}} before a `read` step sets it"
                    ));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(json: &str) -> Vec<OracleStep> {
        serde_json::from_str(json).expect("oracle steps")
    }

    #[test]
    fn variables_must_be_read_before_use() {
        let ok = steps(
            r#"[{"do": "read", "target": {"role": "text"}, "pattern": "code: (\\S+)", "var": "code"},
                {"do": "type", "text": "echo {{code}} ${HOME} {x}\n"}]"#,
        );
        assert_eq!(check(&ok), Ok(()));
        let early = steps(
            r#"[{"do": "submit", "answer": "{{code}}"},
                {"do": "read", "target": {"role": "text"}, "pattern": "(.*)", "var": "code"}]"#,
        );
        let err = check(&early).expect_err("use before read");
        assert!(err.contains("step 1") && err.contains("{{code}}"), "{err}");
        let bad =
            steps(r#"[{"do": "read", "target": {"role": "text"}, "pattern": "(", "var": "v"}]"#);
        assert!(check(&bad).expect_err("bad regex").contains("bad pattern"));
        let attrs = steps(
            r#"[{"do": "click", "target": {"role": "cell", "inside": {"attributes": {"id": "x"}}}}]"#,
        );
        assert!(
            check(&attrs)
                .expect_err("attributes")
                .contains("step 1 selects by `attributes`")
        );
    }

    #[test]
    fn fill_replaces_only_known_variables() {
        let vars = [("code".to_owned(), "7F3K".to_owned())]
            .into_iter()
            .collect();
        assert_eq!(
            fill("echo {{code}} {{other}} ${HOME}", &vars),
            "echo 7F3K {{other}} ${HOME}"
        );
        let tricky = [
            ("a".to_owned(), "{{b}}".to_owned()),
            ("b".to_owned(), "x".to_owned()),
        ]
        .into_iter()
        .collect();
        assert_eq!(fill("{{a}}-{{b}}-{{", &tricky), "{{b}}-x-{{");
    }
}
