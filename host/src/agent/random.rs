//! The random agent: clicks, types and presses keys at random. A baseline that must score
//! near zero; if it does not, a task's checkpoints are too easy to satisfy by accident.

use super::actions::{AgentAction, Target};
use super::{Agent, AgentError, Decision, Observation, TaskBrief};
use crate::compose::Rng;
use futures::future::BoxFuture;
use pincer_shared::Platform;

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
            // Every step draws the same six numbers whatever it sees, so a screen that
            // changed (a window's tree still filling in) changes this action, not the stream
            // every later action is drawn from.
            let mut draw = [0u64; 6];
            draw.iter_mut().for_each(|d| *d = self.rng.next_u64());
            let [view_no, kind, coin, pick, x, y] = draw;
            let pick_of = |n: usize| (pick % n.max(1) as u64) as usize;
            let Some(view) = obs
                .views
                .get((view_no % obs.views.len().max(1) as u64) as usize)
            else {
                return Ok(Decision {
                    actions: vec![AgentAction::Wait { seconds: 0.1 }],
                    ..Decision::default()
                });
            };
            let env = view.role.clone();
            let (w, h) = view.screen;
            // Element numbers only for an agent that was shown them (marks or the tree).
            let shown = view.marked.is_some() || view.tree_text.is_some();
            let target = if shown && !view.elements.is_empty() && coin % 2 == 0 {
                Target::Element {
                    element: view.elements[pick_of(view.elements.len())].id,
                }
            } else {
                Target::Point {
                    x: (x % u64::from(w.max(1))) as i32,
                    y: (y % u64::from(h.max(1))) as i32,
                }
            };
            let phone = view.platform == Platform::Android;
            let action = match (kind % 10, phone) {
                (0..=4, false) => AgentAction::Click { env, target },
                (0..=4, true) => AgentAction::Tap { env, target },
                (5 | 6, false) => AgentAction::Type {
                    env,
                    text: WORDS[pick_of(WORDS.len())].into(),
                    target: None,
                },
                (5 | 6, true) => AgentAction::Text {
                    env,
                    text: WORDS[pick_of(WORDS.len())].into(),
                },
                (7 | 8, false) => {
                    let k = KEYS[pick_of(KEYS.len())];
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::observe::View;
    use crate::agent::som::Element;
    use pincer_shared::observe::Rect;

    fn observation(elements: usize, marked: bool) -> Observation {
        let view = View {
            role: "desktop".into(),
            platform: Platform::Linux,
            screen: (800, 600),
            image_size: (800, 600),
            screenshot: Some(Vec::new()),
            marked: marked.then(Vec::new),
            elements: (1..=elements as u32)
                .map(|id| Element {
                    id,
                    role: "push button".into(),
                    name: format!("b{id}"),
                    text: None,
                    states: Vec::new(),
                    bounds: Rect::new(10 * id as i32, 10, 5, 5),
                })
                .collect(),
            tree: None,
            tree_text: None,
            video: Vec::new(),
            build_ms: 0.0,
        };
        Observation {
            step: 0,
            views: vec![view],
            feedback: Vec::new(),
            checkpoints: Vec::new(),
            checkpoint_feedback: std::collections::BTreeMap::new(),
        }
    }

    async fn actions(seed: u64, screens: &[Observation]) -> Vec<AgentAction> {
        let mut agent = RandomAgent::new(seed);
        let mut out = Vec::new();
        for obs in screens {
            out.extend(agent.act(obs).await.unwrap().actions);
        }
        out
    }

    /// A window whose tree fills in between two runs must not change every later action.
    #[tokio::test]
    async fn what_the_screen_shows_changes_one_action_not_the_stream() {
        let filling: Vec<Observation> = (0..40)
            .map(|i| observation(if i % 3 == 0 { 0 } else { 5 }, true))
            .collect();
        let empty: Vec<Observation> = (0..40).map(|_| observation(0, true)).collect();
        let (a, b) = (actions(7, &filling).await, actions(7, &empty).await);
        let differing: Vec<usize> = (0..40).filter(|&i| a[i] != b[i]).collect();
        assert!(!differing.is_empty(), "elements are used when shown");
        assert!(
            differing.iter().all(|&i| i % 3 != 0),
            "a step that saw the same screen acted alike: {differing:?}"
        );
    }

    /// Element numbers are used only by an agent that was shown them.
    #[tokio::test]
    async fn screenshot_only_agents_click_points() {
        let unseen: Vec<Observation> = (0..40).map(|_| observation(5, false)).collect();
        let none: Vec<Observation> = (0..40).map(|_| observation(0, false)).collect();
        let a = actions(3, &unseen).await;
        assert_eq!(a, actions(3, &none).await);
        assert!(a.iter().any(|x| matches!(x, AgentAction::Click { .. })));
    }
}
