//! Scores: per task (completion ratio, efficiency, termination reason) and aggregated (success
//! rate, completion ratio, execution and cost efficiency) by platform class and over repeated
//! seeds with mean and spread. Infrastructure failures (environment, evaluator, broken setup,
//! aborted runs) are reported but never counted as agent failures.

use crate::task::PlatformClass;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Why a task run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Termination {
    /// Every sink checkpoint passed.
    Success,
    /// The agent said it was done, but the graph was not complete.
    FalseCompletion,
    /// The agent declared the task infeasible (and it was not).
    Infeasible,
    /// The step limit was reached.
    StepLimit,
    /// The time limit was reached.
    TimeLimit,
    /// The agent produced an action that could not be parsed or executed.
    InvalidAction,
    /// The agent (model, API) failed.
    AgentError,
    /// An environment failed (unreachable, crashed, display gone).
    EnvironmentError,
    /// A checkpoint could not be evaluated.
    EvaluatorError,
    /// Checkpoints passed before the agent acted: the setup is broken.
    BrokenSetup,
    /// The run was interrupted.
    Aborted,
}

impl Termination {
    /// Whether the harness, not the agent, is to blame; such runs are left out of agent
    /// scores.
    pub fn is_infrastructure(self) -> bool {
        matches!(
            self,
            Self::EnvironmentError | Self::EvaluatorError | Self::BrokenSetup | Self::Aborted
        )
    }

    /// Every reason, in report order.
    pub const ALL: [Self; 11] = [
        Self::Success,
        Self::FalseCompletion,
        Self::Infeasible,
        Self::StepLimit,
        Self::TimeLimit,
        Self::InvalidAction,
        Self::AgentError,
        Self::EnvironmentError,
        Self::EvaluatorError,
        Self::BrokenSetup,
        Self::Aborted,
    ];
}

impl std::fmt::Display for Termination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        f.write_str(&s)
    }
}

/// The measured outcome of one task run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// Task id.
    pub task: String,
    /// Platform class of the task.
    pub class: PlatformClass,
    /// Seed of the instance (parameterized tasks) or repetition index.
    pub seed: u64,
    /// Why it ended.
    pub termination: Termination,
    /// Checkpoints passed.
    pub passed: usize,
    /// Checkpoints in the graph.
    pub total: usize,
    /// Agent actions taken.
    pub actions: u32,
    /// Model tokens used (prompt + completion).
    pub tokens: u64,
    /// Wall time in milliseconds.
    pub wall_ms: u64,
}

impl Outcome {
    /// Completion ratio: passed / total checkpoints.
    pub fn completion(&self) -> f64 {
        self.passed as f64 / self.total.max(1) as f64
    }

    /// Execution efficiency: CR per action.
    pub fn execution_efficiency(&self) -> f64 {
        if self.actions == 0 {
            0.0
        } else {
            self.completion() / f64::from(self.actions)
        }
    }

    /// Cost efficiency: CR per token (0 when no tokens were spent, e.g. non-LLM agents).
    pub fn cost_efficiency(&self) -> f64 {
        if self.tokens == 0 {
            0.0
        } else {
            self.completion() / self.tokens as f64
        }
    }
}

/// Mean and sample standard deviation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Spread {
    /// Mean.
    pub mean: f64,
    /// Sample standard deviation (0 for fewer than two values).
    pub sd: f64,
}

impl Spread {
    fn of(values: &[f64]) -> Self {
        if values.is_empty() {
            return Self::default();
        }
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        let sd = if values.len() < 2 {
            0.0
        } else {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        };
        Self { mean, sd }
    }
}

/// Aggregate scores over a set of runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Runs in the set.
    pub runs: usize,
    /// Runs scored (infrastructure failures excluded).
    pub scored: usize,
    /// Success rate over scored runs.
    pub success_rate: f64,
    /// Mean completion ratio over scored runs.
    pub completion: f64,
    /// Mean execution efficiency.
    pub execution_efficiency: f64,
    /// Mean cost efficiency.
    pub cost_efficiency: f64,
    /// Mean actions.
    pub steps: f64,
    /// Mean wall time in seconds.
    pub wall_s: f64,
    /// Success rate across seeds (per-seed SR, mean and spread).
    pub success_by_seed: Spread,
    /// Completion ratio across seeds.
    pub completion_by_seed: Spread,
    /// Runs per termination reason.
    pub terminations: BTreeMap<Termination, usize>,
}

impl Summary {
    /// Scores a set of runs.
    pub fn of<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>) -> Self {
        let all: Vec<&Outcome> = outcomes.into_iter().collect();
        let scored: Vec<&Outcome> = all
            .iter()
            .copied()
            .filter(|o| !o.termination.is_infrastructure())
            .collect();
        let mut terminations = BTreeMap::new();
        for o in &all {
            *terminations.entry(o.termination).or_insert(0) += 1;
        }
        let mean = |f: &dyn Fn(&Outcome) -> f64| {
            if scored.is_empty() {
                0.0
            } else {
                scored.iter().map(|o| f(o)).sum::<f64>() / scored.len() as f64
            }
        };
        let mut by_seed: BTreeMap<u64, Vec<&Outcome>> = BTreeMap::new();
        for o in &scored {
            by_seed.entry(o.seed).or_default().push(o);
        }
        let per_seed = |f: &dyn Fn(&[&Outcome]) -> f64| {
            Spread::of(&by_seed.values().map(|v| f(v)).collect::<Vec<_>>())
        };
        Self {
            runs: all.len(),
            scored: scored.len(),
            success_rate: mean(&|o| f64::from(u8::from(o.termination == Termination::Success))),
            completion: mean(&Outcome::completion),
            execution_efficiency: mean(&Outcome::execution_efficiency),
            cost_efficiency: mean(&Outcome::cost_efficiency),
            steps: mean(&|o| f64::from(o.actions)),
            wall_s: mean(&|o| o.wall_ms as f64 / 1000.0),
            success_by_seed: per_seed(&|v| {
                v.iter()
                    .filter(|o| o.termination == Termination::Success)
                    .count() as f64
                    / v.len() as f64
            }),
            completion_by_seed: per_seed(&|v| {
                v.iter().map(|o| o.completion()).sum::<f64>() / v.len() as f64
            }),
            terminations,
        }
    }

    /// Scores per platform class, plus "all".
    pub fn by_class(outcomes: &[Outcome]) -> BTreeMap<String, Self> {
        let mut out = BTreeMap::new();
        let mut classes: Vec<PlatformClass> = outcomes.iter().map(|o| o.class).collect();
        classes.sort();
        classes.dedup();
        for c in classes {
            out.insert(
                c.to_string(),
                Self::of(outcomes.iter().filter(|o| o.class == c)),
            );
        }
        out.insert("all".into(), Self::of(outcomes));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        task: &str,
        class: PlatformClass,
        seed: u64,
        t: Termination,
        passed: usize,
        actions: u32,
        tokens: u64,
    ) -> Outcome {
        Outcome {
            task: task.into(),
            class,
            seed,
            termination: t,
            passed,
            total: 4,
            actions,
            tokens,
            wall_ms: 2000,
        }
    }

    #[test]
    fn scores_follow_the_definitions() {
        let o = run(
            "a",
            PlatformClass::SingleDesktop,
            0,
            Termination::StepLimit,
            2,
            4,
            1000,
        );
        assert_eq!(o.completion(), 0.5);
        assert_eq!(o.execution_efficiency(), 0.125);
        assert_eq!(o.cost_efficiency(), 0.0005);
        let none = run(
            "a",
            PlatformClass::SingleDesktop,
            0,
            Termination::AgentError,
            0,
            0,
            0,
        );
        assert_eq!(none.execution_efficiency(), 0.0);
        assert_eq!(none.cost_efficiency(), 0.0);
    }

    #[test]
    fn infrastructure_failures_are_not_agent_failures() {
        use Termination::*;
        let runs = vec![
            run("a", PlatformClass::SingleDesktop, 0, Success, 4, 4, 0),
            run(
                "b",
                PlatformClass::SingleDesktop,
                0,
                FalseCompletion,
                1,
                2,
                0,
            ),
            run(
                "c",
                PlatformClass::SingleDesktop,
                0,
                EnvironmentError,
                0,
                1,
                0,
            ),
            run(
                "d",
                PlatformClass::CrossEnvironment,
                0,
                EvaluatorError,
                0,
                1,
                0,
            ),
            run("e", PlatformClass::CrossEnvironment, 0, Success, 4, 8, 0),
        ];
        let s = Summary::of(&runs);
        assert_eq!(s.runs, 5);
        assert_eq!(s.scored, 3);
        assert!((s.success_rate - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(s.terminations[&EnvironmentError], 1);
        let by = Summary::by_class(&runs);
        assert_eq!(by["single-desktop"].scored, 2);
        assert_eq!(by["cross-environment"].success_rate, 1.0);
        assert_eq!(by["all"].runs, 5);
    }

    #[test]
    fn seeds_give_mean_and_spread() {
        use Termination::*;
        let runs = vec![
            run("a", PlatformClass::Android, 1, Success, 4, 4, 0),
            run("b", PlatformClass::Android, 1, Success, 4, 4, 0),
            run("a", PlatformClass::Android, 2, Success, 4, 4, 0),
            run("b", PlatformClass::Android, 2, StepLimit, 0, 4, 0),
        ];
        let s = Summary::of(&runs);
        assert_eq!(s.success_by_seed.mean, 0.75);
        assert!(
            (s.success_by_seed.sd - 0.353_553).abs() < 1e-5,
            "{}",
            s.success_by_seed.sd
        );
        assert_eq!(s.completion_by_seed.mean, 0.75);
    }

    #[test]
    fn terminations_print_in_kebab_case() {
        assert_eq!(Termination::FalseCompletion.to_string(), "false-completion");
        assert_eq!(Termination::ALL.len(), 11);
    }
}
