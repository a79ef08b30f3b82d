//! The oracle agent: replays a task's solution, finding each target in the current UI
//! tree by selector, so it is independent of resolution and layout. Used to prove every
//! bundled task solvable (and that the harness's action path works).

use super::actions::{AgentAction, Target};
use super::{Agent, AgentError, Decision, Observation, TaskBrief};
use crate::task::Platform;
use crate::task::oracle::{Locator, OracleStep};
use futures::future::BoxFuture;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Replays oracle steps.
#[derive(Debug, Default)]
pub struct Oracle {
    steps: Vec<OracleStep>,
    next: usize,
    roles: BTreeMap<String, Platform>,
    waiting_since: Option<Instant>,
}

impl Oracle {
    fn role(&self, env: &Option<String>) -> Result<String, AgentError> {
        match env {
            Some(e) if self.roles.contains_key(e) => Ok(e.clone()),
            Some(e) => Err(AgentError(format!(
                "oracle step names environment '{e}', which the task lacks"
            ))),
            None if self.roles.len() == 1 => {
                Ok(self.roles.keys().next().cloned().unwrap_or_default())
            }
            None => Err(AgentError(
                "oracle step needs `env`: the task has several environments".into(),
            )),
        }
    }

    /// The screen point of a locator in the current view.
    fn locate(obs: &Observation, role: &str, loc: &Locator) -> Result<Option<Target>, AgentError> {
        match loc {
            Locator::Point { x, y } => Ok(Some(Target::Point { x: *x, y: *y })),
            Locator::Node(sel) => {
                let view = obs
                    .view(role)
                    .ok_or_else(|| AgentError(format!("no view of '{role}'")))?;
                let tree = view
                    .tree
                    .as_ref()
                    .ok_or_else(|| AgentError("the observation has no UI tree".into()))?;
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

/// How long a locator may be missing before the oracle gives up.
const FIND_TIMEOUT: Duration = Duration::from_secs(20);

impl Agent for Oracle {
    fn name(&self) -> String {
        "oracle".into()
    }

    fn begin(&mut self, brief: &TaskBrief) -> Result<(), AgentError> {
        self.steps = brief
            .oracle
            .clone()
            .ok_or_else(|| AgentError(format!("task '{}' has no oracle solution", brief.id)))?;
        self.next = 0;
        self.roles = brief.roles.clone();
        self.waiting_since = None;
        Ok(())
    }

    fn act<'a>(&'a mut self, obs: &'a Observation) -> BoxFuture<'a, Result<Decision, AgentError>> {
        Box::pin(async move {
            let Some(step) = self.steps.get(self.next).cloned() else {
                // The solution ran out without the task ending: say so, as an agent would.
                return Ok(Decision {
                    actions: vec![AgentAction::Complete],
                    ..Decision::default()
                });
            };
            // A target not yet on screen: wait for it (the app may still be opening).
            let wait = |this: &mut Self, what: String| -> Result<Decision, AgentError> {
                let since = *this.waiting_since.get_or_insert_with(Instant::now);
                if since.elapsed() > FIND_TIMEOUT {
                    return Err(AgentError(format!(
                        "oracle step {}: {what} not found within {FIND_TIMEOUT:?}",
                        this.next + 1
                    )));
                }
                Ok(Decision {
                    actions: vec![AgentAction::Wait { seconds: 0.25 }],
                    thought: Some(format!("waiting for {what}")),
                    ..Decision::default()
                })
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
                        return wait(self, format!("{target:?}"));
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
                            None => return wait(self, format!("{loc:?}")),
                        },
                        None => None,
                    };
                    AgentAction::Type {
                        env: role,
                        text: text.clone(),
                        target: t,
                    }
                }
                OracleStep::Key { env, key } => {
                    let role = self.role(env)?;
                    if key.contains('+') && key.len() > 1 {
                        AgentAction::Hotkey {
                            env: role,
                            keys: key.split('+').map(str::to_owned).collect(),
                        }
                    } else {
                        AgentAction::Key {
                            env: role,
                            key: key.clone(),
                        }
                    }
                }
                OracleStep::WaitFor {
                    env,
                    target,
                    timeout_ms,
                } => {
                    let role = self.role(env)?;
                    let present =
                        Self::locate(obs, &role, &Locator::Node(target.clone()))?.is_some();
                    if !present {
                        let since = *self.waiting_since.get_or_insert_with(Instant::now);
                        let limit = Duration::from_millis(timeout_ms.unwrap_or(20_000));
                        if since.elapsed() > limit {
                            return Err(AgentError(format!(
                                "oracle step {}: {target} did not appear within {limit:?}",
                                self.next + 1
                            )));
                        }
                        return Ok(Decision {
                            actions: vec![AgentAction::Wait { seconds: 0.25 }],
                            thought: Some(format!("waiting for {target}")),
                            ..Decision::default()
                        });
                    }
                    // Present: this step is done; take the next one at once.
                    self.next += 1;
                    self.waiting_since = None;
                    return self.act(obs).await;
                }
                OracleStep::Sleep { ms } => AgentAction::Wait {
                    seconds: *ms as f64 / 1000.0,
                },
                OracleStep::Submit { answer } => AgentAction::Submit {
                    answer: answer.clone(),
                },
                OracleStep::Complete => AgentAction::Complete,
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
