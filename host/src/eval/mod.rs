//! Evaluation: the library of checkpoint functions ([`functions`]), the UI-tree selectors
//! they use ([`selector`]) and the graph evaluator with CRAB's semantics ([`graph`]).
//!
//! A checkpoint function is built once from its JSON arguments into a [`Check`]: a fixed
//! list of read-only probes it needs from its environment, and a judgement over their
//! replies (and the agent's own log) that returns a [`Verdict`] with one line of feedback
//! saying what was observed. Because probes are known up front, the graph evaluator can
//! read every check that is due in one `Batch` round trip per environment.

pub mod functions;
pub mod graph;
pub mod selector;

use pincer_shared::probe::{Probe, ProbeReply};
use pincer_shared::{Action, WireError};
use serde::{Deserialize, Serialize};

/// A probe's outcome as the batch returned it.
pub type ProbeResult = Result<ProbeReply, WireError>;

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Whether the checkpoint holds.
    pub passed: bool,
    /// What was observed, in one line ("file /tmp/a.txt contains 'helo', expected 'hello'").
    pub feedback: String,
}

impl Verdict {
    /// A passing verdict.
    pub fn pass(feedback: impl Into<String>) -> Self {
        Self {
            passed: true,
            feedback: feedback.into(),
        }
    }

    /// A failing verdict.
    pub fn fail(feedback: impl Into<String>) -> Self {
        Self {
            passed: false,
            feedback: feedback.into(),
        }
    }

    /// Passing iff `cond`, with the feedback for each case.
    pub fn when(cond: bool, pass: impl Into<String>, fail: impl Into<String>) -> Self {
        if cond {
            Self::pass(pass)
        } else {
            Self::fail(fail)
        }
    }
}

/// Why a check could not be judged: the environment failed to answer, not the agent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// A probe failed in a way the check cannot interpret (display gone, permission denied
    /// on the harness's own files, ...).
    #[error("probe {probe} failed: {error}")]
    Probe {
        /// The probe, briefly.
        probe: String,
        /// The guest's error.
        error: WireError,
    },
    /// The reply had the wrong shape (a bug or a protocol mismatch).
    #[error("unexpected reply to {probe}: {got}")]
    Unexpected {
        /// The probe, briefly.
        probe: String,
        /// What came back.
        got: String,
    },
}

/// Unwraps a probe result, turning an error into [`EvalError::Probe`].
pub fn reply<'a>(r: &'a ProbeResult, probe: &str) -> Result<&'a ProbeReply, EvalError> {
    r.as_ref().map_err(|e| EvalError::Probe {
        probe: probe.to_owned(),
        error: e.clone(),
    })
}

/// An [`EvalError::Unexpected`] for a reply of the wrong kind.
pub fn unexpected(probe: &str, got: &ProbeReply) -> EvalError {
    let mut text = format!("{got:?}");
    text.truncate(120);
    EvalError::Unexpected {
        probe: probe.to_owned(),
        got: text,
    }
}

/// What the agent did and said, for checks that read the trajectory instead of a machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AgentLog {
    /// Events in order.
    pub events: Vec<AgentEvent>,
}

/// One thing the agent did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum AgentEvent {
    /// An input action on an environment (by role).
    Action {
        /// Environment role.
        env: String,
        /// The action.
        action: Action,
    },
    /// The agent submitted an answer.
    Answer {
        /// The answer text.
        text: String,
    },
}

impl AgentLog {
    /// Texts the agent typed, in order, optionally only on one environment.
    pub fn typed<'a>(&'a self, env: Option<&'a str>) -> impl Iterator<Item = &'a str> + 'a {
        self.events.iter().filter_map(move |e| match e {
            AgentEvent::Action {
                env: role,
                action: Action::TypeText { text },
            } if env.is_none_or(|want| want == role) => Some(text.as_str()),
            _ => None,
        })
    }

    /// The last answer the agent submitted.
    pub fn answer(&self) -> Option<&str> {
        self.events.iter().rev().find_map(|e| match e {
            AgentEvent::Answer { text } => Some(text.as_str()),
            AgentEvent::Action { .. } => None,
        })
    }
}

/// A built checkpoint function.
pub trait Check: Send + Sync + std::fmt::Debug {
    /// The probes this check needs, always the same list in the same order; empty for
    /// checks that read only the agent's log.
    fn probes(&self) -> Vec<Probe>;

    /// Judges from the replies to [`Check::probes`] (same order) and the agent's log.
    fn judge(&self, replies: &[&ProbeResult], log: &AgentLog) -> Result<Verdict, EvalError>;
}

/// A plan of probes for one environment, with duplicates merged: two checks asking for
/// the process list share one probe.
#[derive(Debug, Default, Clone)]
pub struct Plan {
    probes: Vec<Probe>,
}

impl Plan {
    /// Adds probes and returns the slot of each.
    pub fn add(&mut self, probes: Vec<Probe>) -> Vec<usize> {
        probes
            .into_iter()
            .map(|p| match self.probes.iter().position(|q| *q == p) {
                Some(i) => i,
                None => {
                    self.probes.push(p);
                    self.probes.len() - 1
                }
            })
            .collect()
    }

    /// The merged probes, in slot order.
    pub fn probes(&self) -> &[Probe] {
        &self.probes
    }

    /// Whether nothing was planned.
    pub fn is_empty(&self) -> bool {
        self.probes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_merge_duplicate_probes() {
        let mut plan = Plan::default();
        let a = plan.add(vec![Probe::Processes, Probe::Stat { path: "/a".into() }]);
        let b = plan.add(vec![Probe::Stat { path: "/a".into() }, Probe::Clipboard]);
        assert_eq!(a, vec![0, 1]);
        assert_eq!(b, vec![1, 2]);
        assert_eq!(plan.probes().len(), 3);
    }

    #[test]
    fn the_log_answers_typed_text_and_answers() {
        let log = AgentLog {
            events: vec![
                AgentEvent::Action {
                    env: "desktop".into(),
                    action: Action::TypeText { text: "one".into() },
                },
                AgentEvent::Answer {
                    text: "first".into(),
                },
                AgentEvent::Action {
                    env: "phone".into(),
                    action: Action::TypeText { text: "two".into() },
                },
                AgentEvent::Answer {
                    text: "second".into(),
                },
            ],
        };
        assert_eq!(log.typed(None).collect::<Vec<_>>(), vec!["one", "two"]);
        assert_eq!(log.typed(Some("phone")).collect::<Vec<_>>(), vec!["two"]);
        assert_eq!(log.answer(), Some("second"));
        assert_eq!(AgentLog::default().answer(), None);
    }
}
