//! Agents: what chooses the next action. LLM agents (OpenAI-compatible, Anthropic, Gemini;
//! single, planner + tool agent, or one sub-agent per environment) live in [`llm`]; the
//! oracle (replays a task's solution), random (the baseline that should score near zero)
//! and human (a person works while the evaluator prints progress) agents are here.
//!
//! Every agent sees [`Observation`]s and answers with [`Decision`]s made of
//! [`AgentAction`]s; the runner executes them through the action class only.

pub mod actions;
pub mod correction;
mod human;
pub mod llm;
pub mod observe;
mod oracle;
mod random;
pub mod som;

pub use actions::{AgentAction, InvalidAction, Target, ToolSpec};
pub use human::Human;
pub use observe::{ObservationConfig, View};
pub use oracle::Oracle;
pub use random::RandomAgent;

use crate::task::oracle::OracleStep;
use futures::future::BoxFuture;
use pincer_shared::Platform;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What an agent is told when a task starts.
#[derive(Debug, Clone)]
pub struct TaskBrief {
    /// Task id.
    pub id: String,
    /// The instruction.
    pub instruction: String,
    /// Environment roles and their platforms.
    pub roles: BTreeMap<String, Platform>,
    /// The environment bound to each role, by its name in the envs file (for people: the
    /// human agent says which desktop to work on).
    pub env_names: BTreeMap<String, String>,
    /// The tools the agent may call.
    pub tools: Vec<ToolSpec>,
    /// The task's oracle solution (only the oracle agent reads it).
    pub oracle: Option<Vec<OracleStep>>,
    /// Most actions allowed.
    pub max_steps: u32,
}

/// What the agent sees before each decision.
#[derive(Debug, Clone)]
pub struct Observation {
    /// Actions taken so far.
    pub step: u32,
    /// One view per environment.
    pub views: Vec<View>,
    /// What happened to the previous actions (errors, invalid actions), for the agent.
    pub feedback: Vec<String>,
    /// Each checkpoint and whether it has passed (for human agents and language feedback).
    pub checkpoints: Vec<(String, bool)>,
    /// What each checkpoint's latest check said, by id (for agents driven from outside,
    /// which report it to their callers).
    pub checkpoint_feedback: BTreeMap<String, String>,
}

impl Observation {
    /// The view of an environment role.
    pub fn view(&self, role: &str) -> Option<&View> {
        self.views.iter().find(|v| v.role == role)
    }
}

/// Model tokens used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt (input) tokens.
    pub prompt: u64,
    /// Completion (output) tokens.
    pub completion: u64,
}

impl Usage {
    /// Prompt plus completion.
    pub fn total(&self) -> u64 {
        self.prompt + self.completion
    }

    /// Adds another call's usage.
    pub fn add(&mut self, other: Self) {
        self.prompt += other.prompt;
        self.completion += other.completion;
    }
}

/// One request/response with a model, for the trajectory (images replaced by references,
/// no keys).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// Which model role made it ("agent", "planner", "desktop", ...).
    pub who: String,
    /// The request body.
    pub request: serde_json::Value,
    /// The response body.
    pub response: serde_json::Value,
    /// Milliseconds the call took.
    pub ms: u64,
    /// Tokens this call used (a decision's calls add up to its usage).
    #[serde(default)]
    pub usage: Usage,
}

/// What an agent decided.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    /// Actions to execute in order (usually one).
    pub actions: Vec<AgentAction>,
    /// Why the output could not be used, if it could not.
    pub invalid: Option<String>,
    /// The model's reasoning text, if any.
    pub thought: Option<String>,
    /// Tokens used for this decision.
    pub usage: Usage,
    /// Model calls made for this decision.
    pub exchanges: Vec<Exchange>,
}

/// Why an agent could not decide. The runner ends the task run as an agent error with this
/// message; the variants tell apart what a person would fix in different places.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The agent was asked for an action before `begin` gave it a task.
    #[error("the agent was asked to act before a task began")]
    NotStarted,
    /// The observation lacks the view of an environment the agent must act on.
    #[error("the observation has no view of '{0}'")]
    NoView(String),
    /// The agent cannot work on this machine at all (no TLS trust store, no API key, a key
    /// that cannot be sent): every task would fail the same way.
    #[error("{0}")]
    Setup(String),
    /// The model API failed after its retries, or answered what pincer cannot use. The text
    /// names the provider and endpoint and never holds the key.
    #[error("{0}")]
    Model(String),
    /// The oracle's solution does not fit the task or what the environment shows.
    #[error("oracle: {0}")]
    Oracle(String),
    /// The person working on the task could not be read from (the terminal went away).
    #[error("reading the person's input: {0}")]
    Input(String),
    /// The agent outside the runner (Python, an MCP client) went away, or failed.
    #[error("the outside agent: {0}")]
    Outside(String),
}

/// Something that chooses actions.
pub trait Agent: Send {
    /// A short name for results ("oracle", "anthropic:claude-sonnet-5-5").
    fn name(&self) -> String;

    /// Starts a task; agents keep per-task state (history, oracle position) from here.
    fn begin(&mut self, brief: &TaskBrief) -> Result<(), AgentError>;

    /// Chooses the next action(s).
    fn act<'a>(&'a mut self, obs: &'a Observation) -> BoxFuture<'a, Result<Decision, AgentError>>;

    /// What the environments showed once the last action was carried out and evaluated,
    /// before the final check and the teardown: for agents driven from outside, whose
    /// callers want the state an episode ended in. Agents that decide nothing more ignore it.
    fn seen_last(&mut self, _obs: &Observation) {}
}
