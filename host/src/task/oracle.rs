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
    /// Press a key or combination ("enter", "ctrl+s"); on a phone "home" and "back" are
    /// its system buttons.
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
        /// While the node is missing, press this key or combination again every `again_ms`,
        /// as a person would: an app that is starting can swallow a shortcut (GIMP grabs the
        /// keyboard while it starts, so a Ctrl+Alt+T pressed then opens no terminal).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        again: Option<String>,
        /// How long to wait before pressing `again` (default 90 s: long enough that a slow first press is not doubled, whose second window would take the typing).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        again_ms: Option<u64>,
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
    /// Wait until one of the task's checkpoints has passed, as a person waits to see an
    /// app come up before going on: the evaluator must see a state (a window active, a
    /// program running) that the next steps change.
    WaitPassed {
        /// The checkpoint's id.
        checkpoint: String,
        /// Give up after this long (default 20 s).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// Wait a fixed time.
    Sleep {
        /// Milliseconds.
        ms: u64,
    },
    /// Call one of the task's API tools (the run must offer them: `pincer run --tools`).
    Tool {
        /// The tool's name.
        name: String,
        /// Its arguments by parameter name; strings may use `{{var}}`.
        #[serde(default)]
        arguments: std::collections::BTreeMap<String, serde_json::Value>,
    },
    /// Submit an answer.
    Submit {
        /// The answer.
        answer: String,
    },
    /// Declare the task done.
    Complete,
    /// Declare the task impossible (the right answer to OSWorld's infeasible tasks).
    Infeasible {
        /// Why, as the agent says it.
        reason: String,
    },
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
    /// The environment role the step acts in, for steps that act in one.
    pub fn env_mut(&mut self) -> Option<&mut Option<String>> {
        match self {
            Self::Click { env, .. }
            | Self::Type { env, .. }
            | Self::Key { env, .. }
            | Self::WaitFor { env, .. }
            | Self::Read { env, .. } => Some(env),
            Self::Sleep { .. }
            | Self::WaitPassed { .. }
            | Self::Tool { .. }
            | Self::Submit { .. }
            | Self::Complete
            | Self::Infeasible { .. } => None,
        }
    }

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

/// What is wrong with an oracle solution, naming the step (1-based).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OracleError {
    /// A `wait_passed` step names a checkpoint the task does not have.
    #[error("oracle step {step} waits for checkpoint '{id}', which the task does not have")]
    NoCheckpoint {
        /// The step.
        step: usize,
        /// The checkpoint it names.
        id: String,
    },
    /// A selector asks for node attributes, which agents' views leave out.
    #[error(
        "oracle step {0} selects by `attributes`, which agents' views leave out (reading them costs a call a node): select by role, name, text or states"
    )]
    Attributes(usize),
    /// A `read` step's pattern is not a regular expression.
    #[error("oracle step {step}: bad pattern: {message}")]
    Pattern {
        /// The step.
        step: usize,
        /// What the regex parser said.
        message: String,
    },
    /// A `read` step's variable name has other characters than letters, digits and `_`.
    #[error("oracle step {step}: variable name '{var}' must be letters, digits and '_'")]
    VariableName {
        /// The step.
        step: usize,
        /// The name.
        var: String,
    },
    /// A step uses a variable no earlier `read` step set.
    #[error("oracle step {step} uses {{{{{var}}}}} before a `read` step sets it")]
    Unset {
        /// The step.
        step: usize,
        /// The variable.
        var: String,
    },
}

/// Checks a solution before it runs: patterns compile, variables are read before they are
/// used, selectors ask only for what an agent's view carries.
pub fn check(steps: &[OracleStep]) -> Result<(), OracleError> {
    let mut known: Vec<&str> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let n = i + 1;
        if step.selector().is_some_and(Selector::uses_attributes) {
            return Err(OracleError::Attributes(n));
        }
        match step {
            OracleStep::Read { pattern, var, .. } => {
                regex::Regex::new(pattern).map_err(|e| OracleError::Pattern {
                    step: n,
                    message: e.to_string(),
                })?;
                if var.is_empty() || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(OracleError::VariableName {
                        step: n,
                        var: var.clone(),
                    });
                }
                known.push(var);
            }
            OracleStep::Type { text, .. } | OracleStep::Submit { answer: text } => {
                if let Some(v) = placeholders(text).find(|v| {
                    !known.contains(v) && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                }) {
                    return Err(OracleError::Unset {
                        step: n,
                        var: v.to_owned(),
                    });
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Checks that the checkpoints a solution waits for (`wait_passed`) are the task's.
pub fn check_checkpoints(steps: &[OracleStep], ids: &[&str]) -> Result<(), OracleError> {
    match steps.iter().enumerate().find_map(|(i, s)| match s {
        OracleStep::WaitPassed { checkpoint, .. } if !ids.contains(&checkpoint.as_str()) => {
            Some((i + 1, checkpoint))
        }
        _ => None,
    }) {
        Some((step, id)) => Err(OracleError::NoCheckpoint {
            step,
            id: id.clone(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_passed_must_name_a_checkpoint_of_the_task() {
        let s = steps(r#"[{"do": "wait_passed", "checkpoint": "saved"}]"#);
        assert_eq!(check_checkpoints(&s, &["opened", "saved"]), Ok(()));
        let e = check_checkpoints(&s, &["opened"]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "oracle step 1 waits for checkpoint 'saved', which the task does not have"
        );
    }

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
        assert_eq!(
            check(&early),
            Err(OracleError::Unset {
                step: 1,
                var: "code".into()
            })
        );
        assert_eq!(
            check(&early).unwrap_err().to_string(),
            "oracle step 1 uses {{code}} before a `read` step sets it"
        );
        let bad =
            steps(r#"[{"do": "read", "target": {"role": "text"}, "pattern": "(", "var": "v"}]"#);
        assert!(matches!(
            check(&bad),
            Err(OracleError::Pattern { step: 1, .. })
        ));
        let attrs = steps(
            r#"[{"do": "click", "target": {"role": "cell", "inside": {"attributes": {"id": "x"}}}}]"#,
        );
        assert_eq!(check(&attrs), Err(OracleError::Attributes(1)));
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
