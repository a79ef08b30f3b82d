//! Scoring as a peer benchmark scores: a task imported from a peer carries that peer's
//! own checks where they differ from pincer's (`compat`, by mode), and a run with
//! `--compat <mode>` scores with them and with the peer's harness rules. Only CRAB's mode
//! exists: its predicates (`eval::functions::crab`) and its rules (`run::task`).

use super::Task;
use crate::metrics::Termination;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The tag every task imported from CRAB's Benchmark-v0 files carries.
pub const CRAB_TAG: &str = "crab-benchmark-v0";

/// A peer whose scoring a run can reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Compat {
    /// CRAB Benchmark-v0 as CRAB's own code (fa46f8c) scores it.
    Crab,
}

impl Compat {
    /// The mode's name (`crab`), as `--compat` takes it and tasks' `compat` key it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Crab => "crab",
        }
    }
}

impl std::fmt::Display for Compat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Compat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "crab" => Ok(Self::Crab),
            other => Err(format!(
                "no scoring mode '{other}': `--compat crab` scores CRAB's tasks as CRAB does"
            )),
        }
    }
}

/// A peer's own check of one checkpoint: the function and arguments that replace
/// pincer's when the run scores as that peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompatCheck {
    /// The checkpoint's id.
    pub id: String,
    /// The checkpoint function.
    pub check: String,
    /// Its arguments.
    #[schemars(with = "std::collections::BTreeMap<String, serde_json::Value>")]
    pub args: serde_json::Value,
}

/// Why a task cannot be scored as a peer scores it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompatError {
    /// The task did not come from the peer's files.
    #[error(
        "task '{task}' did not come from CRAB's files, so there is no CRAB score to reproduce: `--compat crab` takes tasks written by `pincer task import-crab` (tag {CRAB_TAG}); leave it out or score it without --compat"
    )]
    NotCrabs {
        /// The task.
        task: String,
    },
    /// A replacement names a checkpoint the task lacks.
    #[error("task '{task}': its {mode} check of '{id}' names no checkpoint of the task")]
    NoCheckpoint {
        /// The task.
        task: String,
        /// The mode.
        mode: Compat,
        /// The checkpoint id.
        id: String,
    },
}

impl Task {
    /// The task as `mode` scores it: its checkpoints with the peer's own checks where the
    /// task names them, under the peer's rule for ending a run (CRAB: every sink passing).
    pub fn scored_as(&self, mode: Compat) -> Result<Self, CompatError> {
        match mode {
            Compat::Crab if !self.tags.iter().any(|t| t == CRAB_TAG) => {
                return Err(CompatError::NotCrabs {
                    task: self.id.clone(),
                });
            }
            Compat::Crab => {}
        }
        let mut task = self.clone();
        task.end = super::EndRule::Sinks;
        for c in self.compat.get(mode.name()).into_iter().flatten() {
            let node = task
                .checkpoints
                .iter_mut()
                .find(|n| n.id == c.id)
                .ok_or_else(|| CompatError::NoCheckpoint {
                    task: self.id.clone(),
                    mode,
                    id: c.id.clone(),
                })?;
            node.check = c.check.clone();
            node.args = c.args.clone();
        }
        Ok(task)
    }
}

/// How a run scored as a peer ended, in the peer's own words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompatEnding {
    /// The peer.
    pub mode: Compat,
    /// The peer's label (CRAB's `terminate_reason`).
    pub reason: String,
    /// Whether the peer counts the run a success.
    pub success: bool,
}

impl CompatEnding {
    /// The peer's label for a run that ended so under its rules.
    pub fn new(mode: Compat, t: Termination) -> Self {
        let reason = match mode {
            Compat::Crab => crab_reason(t),
        };
        Self {
            mode,
            success: reason == "success",
            reason: reason.to_owned(),
        }
    }
}

/// CRAB's `terminate_reason` (crab/core/benchmark.py, crab/core/experiment.py) for a run
/// that ended so under `--compat crab`. An action CRAB's environment could not run and a
/// reply that held none are both `env_exception` here (CRAB's agent code raises on the
/// second, `agent_exception`; either way the run fails). pincer's time limit and a start
/// with checkpoints already passed have no CRAB label (CRAB has no time limit and writes no
/// result for the second).
fn crab_reason(t: Termination) -> &'static str {
    match t {
        Termination::Success | Termination::Undone => "success",
        Termination::StepLimit => "reach_max_step",
        Termination::FalseCompletion => "agent_complete",
        Termination::InvalidAction | Termination::Infeasible | Termination::EnvironmentError => {
            "env_exception"
        }
        Termination::EvaluatorError => "evaluator_exception",
        Termination::AgentError => "agent_exception",
        Termination::Aborted => "keyboard_interrupt",
        Termination::TimeLimit => "time_limit",
        Termination::BrokenSetup => "nonzero_start",
    }
}

/// The run as the peer counts it, for runs scored with `--compat` (`None` for others):
/// CRAB's success rate over the task runs CRAB writes a result for (all but a start with
/// checkpoints already passed), its mean completeness (checkpoints passed over the graph's),
/// and its `terminate_reason` counts.
pub fn summary(records: &[crate::rundir::TaskRecord]) -> Option<String> {
    let scored: Vec<(&crate::rundir::TaskRecord, &CompatEnding)> = records
        .iter()
        .filter_map(|r| r.compat.as_ref().map(|c| (r, c)))
        .collect();
    let (_, first) = scored.first()?;
    let rows: Vec<_> = scored
        .iter()
        .filter(|(_, c)| c.reason != "nonzero_start")
        .collect();
    let success = rows.iter().filter(|(_, c)| c.success).count();
    let completeness = rows
        .iter()
        .map(|(r, _)| r.passed as f64 / r.total.max(1) as f64)
        .sum::<f64>()
        / rows.len().max(1) as f64;
    let mut reasons: std::collections::BTreeMap<&str, usize> = Default::default();
    for (_, c) in &scored {
        *reasons.entry(c.reason.as_str()).or_default() += 1;
    }
    let reasons: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
    Some(format!(
        "scored as {} scores it (--compat {}): {} task runs, {} success ({:.1}%), mean completeness {:.3}; terminate_reason: {}",
        first.mode.name().to_uppercase(),
        first.mode,
        rows.len(),
        success,
        100.0 * success as f64 / rows.len().max(1) as f64,
        completeness,
        reasons.join(", ")
    ))
}
