//! The random agent: clicks, types and presses keys at random. A baseline that must score
//! near zero; if it does not, a task's checkpoints are too easy to satisfy by accident.

use super::actions::{AgentAction, Target};
use super::{Agent, AgentError, Decision, Observation, TaskBrief};
use crate::compose::Rng;
use crate::task::Platform;
use futures::future::BoxFuture;

/// Acts at random, reproducibly for a seed.
#[derive(Debug)]
pub struct RandomAgent {
    rng: Rng,
    seed: u64,
}

impl RandomAgent {
    /// A random agent with this seed.
    pub fn new(seed: u64) -> Self {
        Self {
            rng: Rng::new(seed),
            seed,
        }
    }
}

const WORDS: &[&str] = &["hello", "42", "pincer", "x", "test", "0", "yes", "abc"];
const KEYS: &[&str] = &[
    "enter",
    "tab",
    "escape",
    "backspace",
    "down",
    "up",
    "ctrl+a",
    "ctrl+s",
    "space",
];

impl Agent for RandomAgent {
    fn name(&self) -> String {
        format!("random:{}", self.seed)
    }

    fn begin(&mut self, brief: &TaskBrief) -> Result<(), AgentError> {
        // A new stream per task, still reproducible for the run's seed.
        let mut h = self.seed;
        for b in brief.id.bytes() {
            h = h.wrapping_mul(31).wrapping_add(u64::from(b));
        }
        self.rng = Rng::new(h);
        Ok(())
    }

    fn act<'a>(&'a mut self, obs: &'a Observation) -> BoxFuture<'a, Result<Decision, AgentError>> {
        Box::pin(async move {
            let Some(view) = obs.views.get(self.rng.below(obs.views.len().max(1))) else {
                return Ok(Decision {
                    actions: vec![AgentAction::Wait { seconds: 0.1 }],
                    ..Decision::default()
                });
            };
            let env = view.role.clone();
            let (w, h) = view.screen;
            let point = |rng: &mut Rng| -> Target {
                if !view.elements.is_empty() && rng.below(2) == 0 {
                    Target::Element {
                        element: view.elements[rng.below(view.elements.len())].id,
                    }
                } else {
                    Target::Point {
                        x: rng.below(w.max(1) as usize) as i32,
                        y: rng.below(h.max(1) as usize) as i32,
                    }
                }
            };
            let phone = view.platform == Platform::Android;
            let action = match (self.rng.below(10), phone) {
                (0..=4, false) => AgentAction::Click {
                    env,
                    target: point(&mut self.rng),
                },
                (0..=4, true) => AgentAction::Tap {
                    env,
                    target: point(&mut self.rng),
                },
                (5 | 6, false) => AgentAction::Type {
                    env,
                    text: WORDS[self.rng.below(WORDS.len())].into(),
                    target: None,
                },
                (5 | 6, true) => AgentAction::Text {
                    env,
                    text: WORDS[self.rng.below(WORDS.len())].into(),
                },
                (7 | 8, false) => {
                    let k = KEYS[self.rng.below(KEYS.len())];
                    if k.contains('+') {
                        AgentAction::Hotkey {
                            env,
                            keys: k.split('+').map(str::to_owned).collect(),
                        }
                    } else {
                        AgentAction::Key { env, key: k.into() }
                    }
                }
                (7 | 8, true) => AgentAction::Back { env },
                // Now and then it claims to be done, as weak agents do.
                _ => AgentAction::Complete,
            };
            Ok(Decision {
                actions: vec![action],
                ..Decision::default()
            })
        })
    }
}
