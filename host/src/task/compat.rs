//! Scoring as a peer benchmark scores: a task imported from a peer carries that peer's
//! own checks where they differ from pincer's (`compat`, by mode), and a run with
//! `--compat <mode>` scores with them and with the peer's harness rules. Only CRAB's mode
//! exists: its predicates (`eval::functions::crab`), its rules (`run::task`) and its labels
//! (`metrics::CompatEnding`).

use super::Task;
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
