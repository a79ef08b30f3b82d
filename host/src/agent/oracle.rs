//! The oracle agent: replays a task's solution, finding each target in the current UI
//! tree by selector, so it is independent of resolution and layout. Used to prove every
//! bundled task solvable (and that the harness's action path works).

use super::actions::{AgentAction, Target};
use super::{Agent, AgentError, Decision, Observation, TaskBrief};
use crate::task::oracle::{self, Locator, OracleStep};
use futures::future::BoxFuture;
use pincer_shared::Platform;
use pincer_shared::tree::UiTree;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Replays oracle steps.
#[derive(Debug, Default)]
pub struct Oracle {
    steps: Vec<OracleStep>,
    next: usize,
    roles: BTreeMap<String, Platform>,
    waiting_since: Option<Instant>,
    /// When a `wait_for` step last pressed its `again` key.
    pressed_again: Option<Instant>,
    /// Values read off the screen by `read` steps, for `{{var}}` in later steps.
    vars: BTreeMap<String, String>,
}

impl Oracle {
    fn role(&self, env: &Option<String>) -> Result<String, AgentError> {
        match env {
            Some(e) if self.roles.contains_key(e) => Ok(e.clone()),
            Some(e) => Err(AgentError::Oracle(format!(
                "a step names environment '{e}', which the task lacks"
            ))),
            None if self.roles.len() == 1 => {
                Ok(self.roles.keys().next().cloned().unwrap_or_default())
            }
            None => Err(AgentError::Oracle(
                "a step needs `env`: the task has several environments".into(),
            )),
        }
    }

    /// The UI tree of `role`'s view.
    fn tree<'o>(obs: &'o Observation, role: &str) -> Result<&'o UiTree, AgentError> {
        obs.view(role)
            .ok_or_else(|| AgentError::NoView(role.to_owned()))?
            .tree
            .as_ref()
            .ok_or_else(|| AgentError::Oracle(format!("the view of '{role}' has no UI tree")))
    }

    /// The screen point of a locator in the current view.
    fn locate(obs: &Observation, role: &str, loc: &Locator) -> Result<Option<Target>, AgentError> {
        match loc {
            Locator::Point { x, y } => Ok(Some(Target::Point { x: *x, y: *y })),
            Locator::Node(sel) => {
                let tree = Self::tree(obs, role)?;
                Ok(sel
                    .find_all(&tree.root)
                    .into_iter()
                    .find_map(|n| n.bounds.filter(|b| b.width > 0 && b.height > 0))
                    .map(|b| {
                        let c = b.center();
                        Target::Point { x: c.x, y: c.y }
                    }))
            }
        }
    }
}

impl Oracle {
    /// The value a `read` step wants, if a matching node shows it now.
    fn read(
        obs: &Observation,
        role: &str,
        target: &crate::task::selector::Selector,
        pattern: &regex::Regex,
    ) -> Result<Option<String>, AgentError> {
        let tree = Self::tree(obs, role)?;
        // A node's text first, then its name: labels often carry an empty text.
        Ok(target.find_all(&tree.root).into_iter().find_map(|n| {
            [n.text.as_deref(), Some(n.name.as_str())]
                .into_iter()
                .flatten()
                .find_map(|text| {
                    let caps = pattern.captures(text)?;
                    caps.get(1)
                        .or_else(|| caps.get(0))
                        .map(|m| m.as_str().to_owned())
                })
        }))
    }

    /// Waits for something to appear, up to `limit` since the step began.
    fn wait_for(&mut self, what: String, limit: Duration) -> Result<Decision, AgentError> {
        let since = *self.waiting_since.get_or_insert_with(Instant::now);
        if since.elapsed() > limit {
            return Err(AgentError::Oracle(format!(
                "step {}: {what} did not appear within {limit:?}",
                self.next + 1
            )));
        }
        // Each look costs the guest a screenshot and a UI tree: after the first seconds,
        // look less often, so that a slow guest (a VM under TCG starting Chrome) is not
        // kept busier by the waiting than by the app it waits for.
        let seconds = if since.elapsed() < PATIENT { 0.25 } else { 1.0 };
        Ok(Decision {
            actions: vec![AgentAction::Wait { seconds }],
            thought: Some(format!("waiting for {what}")),
            ..Decision::default()
        })
    }
}

/// The action that presses a key ("enter") or a combination ("ctrl+alt+t"); on a phone
/// "home" and "back" are its system buttons.
fn key_action(env: String, platform: Option<&Platform>, key: &str) -> AgentAction {
    if platform == Some(&Platform::Android) {
        match key {
            "home" => return AgentAction::Home { env },
            "back" => return AgentAction::Back { env },
            _ => {}
        }
    }
    if key.contains('+') && key.len() > 1 {
        AgentAction::Hotkey {
            env,
            keys: key.split('+').map(str::to_owned).collect(),
        }
    } else {
        AgentAction::Key {
            env,
            key: key.to_owned(),
        }
    }
}

/// How long the oracle looks four times a second while it waits; then once a second.
const PATIENT: Duration = Duration::from_secs(5);

/// How long a locator may be missing before the oracle gives up.
const FIND_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the oracle waits, after its last step, for the checkpoints to pass before it
/// says it is done.
const SETTLE: Duration = Duration::from_secs(15);

impl Agent for Oracle {
    fn name(&self) -> String {
        "oracle".into()
    }

    fn begin(&mut self, brief: &TaskBrief) -> Result<(), AgentError> {
        self.steps = brief.oracle.clone().ok_or_else(|| {
            AgentError::Oracle(format!("task '{}' has no oracle solution", brief.id))
        })?;
        oracle::check(&self.steps)
            .map_err(|e| AgentError::Oracle(format!("task '{}': {e}", brief.id)))?;
        self.next = 0;
        self.vars.clear();
        self.roles = brief.roles.clone();
        self.waiting_since = None;
        Ok(())
    }

    fn act<'a>(&'a mut self, obs: &'a Observation) -> BoxFuture<'a, Result<Decision, AgentError>> {
        Box::pin(async move {
            let Some(step) = self.steps.get(self.next).cloned() else {
                // The solution ran out without the task ending. A slow guest (a VM under
                // TCG, a loaded machine) may not show the last step's effect yet: wait for
                // it a while, as a careful agent would, then say it is done.
                let since = *self.waiting_since.get_or_insert_with(Instant::now);
                if since.elapsed() < SETTLE && obs.checkpoints.iter().any(|(_, passed)| !passed) {
                    return Ok(Decision {
                        actions: vec![AgentAction::Wait { seconds: 0.25 }],
                        thought: Some("waiting for the last step to take effect".into()),
                        ..Decision::default()
                    });
                }
                return Ok(Decision {
                    actions: vec![AgentAction::Complete],
                    ..Decision::default()
                });
            };
            let action = match &step {
                OracleStep::Click {
                    env,
                    target,
                    count,
                    right,
                } => {
                    let role = self.role(env)?;
                    let Some(t) = Self::locate(obs, &role, target)? else {
                        return self.wait_for(format!("{target:?}"), FIND_TIMEOUT);
                    };
                    match (count.unwrap_or(1), right) {
                        (_, true) => AgentAction::RightClick {
                            env: role,
                            target: t,
                        },
                        (2, _) => AgentAction::DoubleClick {
                            env: role,
                            target: t,
                        },
                        _ => AgentAction::Click {
                            env: role,
                            target: t,
                        },
                    }
                }
                OracleStep::Type { env, text, target } => {
                    let role = self.role(env)?;
                    let t = match target {
                        Some(loc) => match Self::locate(obs, &role, loc)? {
                            Some(t) => Some(t),
                            None => return self.wait_for(format!("{loc:?}"), FIND_TIMEOUT),
                        },
                        None => None,
                    };
                    AgentAction::Type {
                        env: role,
                        text: oracle::fill(text, &self.vars),
                        target: t,
                    }
                }
                OracleStep::Key { env, key } => {
                    let role = self.role(env)?;
                    key_action(role.clone(), self.roles.get(&role), key)
                }
                OracleStep::WaitFor {
                    env,
                    target,
                    timeout_ms,
                    again,
                    again_ms,
                } => {
                    let role = self.role(env)?;
                    let present =
                        Self::locate(obs, &role, &Locator::Node(target.clone()))?.is_some();
                    if !present {
                        let since = *self.waiting_since.get_or_insert_with(Instant::now);
                        let last = self.pressed_again.unwrap_or(since);
                        let every = Duration::from_millis(again_ms.unwrap_or(90_000));
                        if let Some(key) = again.as_ref().filter(|_| last.elapsed() >= every) {
                            self.pressed_again = Some(Instant::now());
                            return Ok(Decision {
                                actions: vec![key_action(role.clone(), self.roles.get(&role), key)],
                                thought: Some(format!(
                                    "pressing {key} again: {target} has not appeared"
                                )),
                                ..Decision::default()
                            });
                        }
                        let limit = Duration::from_millis(timeout_ms.unwrap_or(20_000));
                        return self.wait_for(target.to_string(), limit);
                    }
                    // Present: this step is done; take the next one at once.
                    self.next += 1;
                    self.waiting_since = None;
                    self.pressed_again = None;
                    return self.act(obs).await;
                }
                OracleStep::WaitPassed {
                    checkpoint,
                    timeout_ms,
                } => match obs.checkpoints.iter().find(|(id, _)| id == checkpoint) {
                    None => {
                        return Err(AgentError::Oracle(format!(
                            "step {}: the task has no checkpoint '{checkpoint}'",
                            self.next + 1
                        )));
                    }
                    Some((_, false)) => {
                        let limit = Duration::from_millis(timeout_ms.unwrap_or(20_000));
                        return self.wait_for(format!("checkpoint {checkpoint} to pass"), limit);
                    }
                    Some((_, true)) => {
                        self.next += 1;
                        self.waiting_since = None;
                        return self.act(obs).await;
                    }
                },
                OracleStep::Read {
                    env,
                    target,
                    pattern,
                    var,
                    timeout_ms,
                } => {
                    let role = self.role(env)?;
                    let re = regex::Regex::new(pattern)
                        .map_err(|e| AgentError::Oracle(format!("read pattern: {e}")))?;
                    let Some(value) = Self::read(obs, &role, target, &re)? else {
                        let limit = Duration::from_millis(timeout_ms.unwrap_or(20_000));
                        return self.wait_for(format!("{target} showing /{pattern}/"), limit);
                    };
                    self.vars.insert(var.clone(), value);
                    self.next += 1;
                    self.waiting_since = None;
                    return self.act(obs).await;
                }
                OracleStep::Sleep { ms } => AgentAction::Wait {
                    seconds: *ms as f64 / 1000.0,
                },
                OracleStep::Submit { answer } => AgentAction::Submit {
                    answer: oracle::fill(answer, &self.vars),
                },
                OracleStep::Tool { name, arguments } => AgentAction::Tool {
                    name: name.clone(),
                    arguments: arguments
                        .iter()
                        .map(|(k, v)| {
                            let v = match v {
                                serde_json::Value::String(s) => oracle::fill(s, &self.vars).into(),
                                other => other.clone(),
                            };
                            (k.clone(), v)
                        })
                        .collect(),
                },
                OracleStep::Complete => AgentAction::Complete,
                OracleStep::Infeasible { reason } => AgentAction::Infeasible {
                    reason: oracle::fill(reason, &self.vars),
                },
            };
            self.next += 1;
            self.waiting_since = None;
            Ok(Decision {
                thought: Some(format!("oracle step {} of {}", self.next, self.steps.len())),
                actions: vec![action],
                ..Decision::default()
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::observe::View;
    use pincer_shared::tree::UiNode;

    #[test]
    fn home_and_back_are_a_phones_system_buttons() {
        let phone = Some(&Platform::Android);
        assert!(
            matches!(key_action("p".into(), phone, "home"), AgentAction::Home { env } if env == "p")
        );
        assert!(matches!(
            key_action("p".into(), phone, "back"),
            AgentAction::Back { .. }
        ));
        assert!(matches!(
            key_action("p".into(), phone, "enter"),
            AgentAction::Key { .. }
        ));
        // On a desktop "home" is the keyboard's Home key.
        let desk = Some(&Platform::Linux);
        assert!(
            matches!(key_action("d".into(), desk, "home"), AgentAction::Key { key, .. } if key == "home")
        );
        assert!(matches!(
            key_action("d".into(), desk, "ctrl+s"),
            AgentAction::Hotkey { .. }
        ));
    }

    fn observation(root: UiNode) -> Observation {
        Observation {
            step: 0,
            views: vec![View {
                role: "desktop".into(),
                platform: Platform::Linux,
                screen: (800, 600),
                image_size: (800, 600),
                screenshot: None,
                marked: None,
                elements: vec![],
                tree: Some(UiTree {
                    root,
                    ..UiTree::default()
                }),
                tree_text: None,
                video: Vec::new(),
                build_ms: 0.0,
            }],
            feedback: vec![],
            checkpoints: vec![],
            checkpoint_feedback: BTreeMap::new(),
        }
    }

    #[test]
    fn read_takes_the_name_when_the_text_does_not_match() {
        let label = |text: Option<&str>, name: &str| UiNode {
            role: "label".into(),
            name: name.into(),
            text: text.map(str::to_owned),
            ..UiNode::default()
        };
        let obs = observation(UiNode {
            role: "frame".into(),
            children: vec![label(Some(""), "Code: 7F3K"), label(None, "other")],
            ..UiNode::default()
        });
        let target = crate::task::selector::Selector {
            role: Some("label".into()),
            ..Default::default()
        };
        let re = regex::Regex::new(r"Code: (\S+)").unwrap();
        let read = Oracle::read(&obs, "desktop", &target, &re).unwrap();
        assert_eq!(read.as_deref(), Some("7F3K"));
        let absent = regex::Regex::new(r"Serial: (\S+)").unwrap();
        assert_eq!(
            Oracle::read(&obs, "desktop", &target, &absent).unwrap(),
            None
        );
    }

    /// An oracle that began a one-desktop task with these steps.
    fn begun(steps: Vec<OracleStep>) -> Oracle {
        let mut o = Oracle::default();
        let brief = TaskBrief {
            id: "t".into(),
            instruction: "x".into(),
            tools: Vec::new(),
            roles: [("desktop".to_owned(), Platform::Linux)].into(),
            env_names: Default::default(),
            oracle: Some(steps),
            max_steps: 10,
        };
        o.begin(&brief).unwrap();
        o
    }

    #[tokio::test]
    async fn after_its_last_step_the_oracle_waits_for_the_checkpoints_before_saying_done() {
        let mut o = begun(vec![OracleStep::Sleep { ms: 1 }]);
        let mut obs = observation(UiNode::default());
        obs.checkpoints = vec![("a".into(), true), ("b".into(), false)];
        let first = o.act(&obs).await.unwrap();
        assert!(matches!(first.actions[..], [AgentAction::Wait { .. }]));
        // Out of steps with a checkpoint still waiting: it waits for it...
        let next = o.act(&obs).await.unwrap();
        assert!(
            matches!(next.actions[..], [AgentAction::Wait { .. }]),
            "{next:?}"
        );
        // ...and says it is done once the wait is over.
        o.waiting_since = Some(Instant::now() - SETTLE);
        let done = o.act(&obs).await.unwrap();
        assert_eq!(done.actions, [AgentAction::Complete]);
    }

    #[tokio::test]
    async fn wait_passed_waits_for_its_checkpoint_then_goes_on() {
        let mut o = begun(vec![
            OracleStep::WaitPassed {
                checkpoint: "app-up".into(),
                timeout_ms: None,
            },
            OracleStep::Key {
                env: None,
                key: "escape".into(),
            },
            OracleStep::WaitPassed {
                checkpoint: "typo".into(),
                timeout_ms: None,
            },
        ]);
        let mut obs = observation(UiNode::default());
        obs.checkpoints = vec![("app-up".into(), false)];
        let waiting = o.act(&obs).await.unwrap();
        assert!(
            matches!(waiting.actions[..], [AgentAction::Wait { .. }]),
            "{waiting:?}"
        );
        obs.checkpoints = vec![("app-up".into(), true)];
        let next = o.act(&obs).await.unwrap();
        assert!(
            matches!(&next.actions[..], [AgentAction::Key { key, .. }] if key == "escape"),
            "{next:?}"
        );
        let e = o.act(&obs).await.unwrap_err();
        assert!(e.to_string().contains("no checkpoint 'typo'"), "{e}");
    }
}
