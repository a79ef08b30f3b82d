//! Scores: per task (completion ratio, efficiency, termination reason) and aggregated (success
//! rate, completion ratio latched as CRAB counts it and on the final state, execution and
//! cost efficiency, steps, wall time) by platform class
//! and over repeated seeds with mean and spread. Infrastructure failures (environment,
//! evaluator, broken setup, aborted runs) are reported but never counted as agent failures.
//! Cost efficiency has no value for runs that spent no tokens (oracle, random and human
//! agents): such runs are left out of its mean rather than counted as zero.

use crate::task::PlatformClass;
use crate::task::compat::Compat;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Why a task run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Termination {
    /// Every sink checkpoint passed, and every one still held at the end.
    Success,
    /// Every sink passed once, but one no longer held at the end: the task was done and
    /// then undone.
    Undone,
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
    pub const ALL: [Self; 12] = [
        Self::Success,
        Self::Undone,
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
    /// Checkpoints passed (latched: once passed, counted).
    pub passed: usize,
    /// Checkpoints that passed and still held at the end; `None` when the end was not
    /// checked (an environment error), where the latched count stands in.
    pub final_passed: Option<usize>,
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
    /// Completion ratio as CRAB counts it: checkpoints that ever passed / all checkpoints.
    pub fn completion(&self) -> f64 {
        self.passed as f64 / self.total.max(1) as f64
    }

    /// Completion ratio on the final state: checkpoints that passed and still held at the
    /// end / all checkpoints.
    pub fn final_completion(&self) -> f64 {
        self.final_passed.unwrap_or(self.passed) as f64 / self.total.max(1) as f64
    }

    /// Execution efficiency: CR per action.
    pub fn execution_efficiency(&self) -> f64 {
        if self.actions == 0 {
            0.0
        } else {
            self.completion() / f64::from(self.actions)
        }
    }

    /// Cost efficiency: CR per token; `None` when no tokens were spent (non-LLM agents),
    /// where it means nothing.
    pub fn cost_efficiency(&self) -> Option<f64> {
        (self.tokens > 0).then(|| self.completion() / self.tokens as f64)
    }
}

/// The mean of the values, `None` if there are none.
fn mean_of(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
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
    /// Mean completion ratio over scored runs (latched, as CRAB counts it).
    pub completion: f64,
    /// Mean completion ratio on the final state over scored runs.
    pub final_completion: f64,
    /// Mean execution efficiency.
    pub execution_efficiency: f64,
    /// Mean cost efficiency over the scored runs that spent tokens; `None` if none did.
    pub cost_efficiency: Option<f64>,
    /// Mean actions.
    pub steps: f64,
    /// Mean wall time in seconds.
    pub wall_s: f64,
    /// Success rate across seeds (per-seed SR, mean and spread).
    pub success_by_seed: Spread,
    /// Completion ratio across seeds.
    pub completion_by_seed: Spread,
    /// Final-state completion ratio across seeds.
    pub final_completion_by_seed: Spread,
    /// Execution efficiency across seeds.
    pub execution_efficiency_by_seed: Spread,
    /// Cost efficiency across the seeds with runs that spent tokens; `None` if none did.
    pub cost_efficiency_by_seed: Option<Spread>,
    /// Actions across seeds.
    pub steps_by_seed: Spread,
    /// Wall time in seconds across seeds.
    pub wall_s_by_seed: Spread,
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
        let mut by_seed: BTreeMap<u64, Vec<&Outcome>> = BTreeMap::new();
        for o in &scored {
            by_seed.entry(o.seed).or_default().push(o);
        }
        // Each measure: its mean over the scored runs where it has a value, and the spread
        // of its per-seed means over the seeds where it has one.
        let measure = |f: &dyn Fn(&Outcome) -> Option<f64>| {
            let overall = mean_of(scored.iter().filter_map(|o| f(o)));
            let per_seed: Vec<f64> = by_seed
                .values()
                .filter_map(|v| mean_of(v.iter().filter_map(|o| f(o))))
                .collect();
            (
                overall,
                (!per_seed.is_empty()).then(|| Spread::of(&per_seed)),
            )
        };
        let always = |f: &dyn Fn(&Outcome) -> f64| {
            let (m, s) = measure(&|o| Some(f(o)));
            (m.unwrap_or_default(), s.unwrap_or_default())
        };
        let (success_rate, success_by_seed) =
            always(&|o| f64::from(u8::from(o.termination == Termination::Success)));
        let (completion, completion_by_seed) = always(&Outcome::completion);
        let (final_completion, final_completion_by_seed) = always(&Outcome::final_completion);
        let (execution_efficiency, execution_efficiency_by_seed) =
            always(&Outcome::execution_efficiency);
        let (cost_efficiency, cost_efficiency_by_seed) = measure(&Outcome::cost_efficiency);
        let (steps, steps_by_seed) = always(&|o| f64::from(o.actions));
        let (wall_s, wall_s_by_seed) = always(&|o| o.wall_ms as f64 / 1000.0);
        Self {
            runs: all.len(),
            scored: scored.len(),
            success_rate,
            completion,
            final_completion,
            execution_efficiency,
            cost_efficiency,
            steps,
            wall_s,
            success_by_seed,
            completion_by_seed,
            final_completion_by_seed,
            execution_efficiency_by_seed,
            cost_efficiency_by_seed,
            steps_by_seed,
            wall_s_by_seed,
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

/// Success rate by attempt (`--attempts`): entry `k - 1` is the share of scored task
/// runs (infrastructure failures left out) that had succeeded by their `k`-th attempt, for
/// `k` up to `attempts`. `runs` holds each task run's last ending and its attempt number.
pub fn success_by_attempt(runs: &[(Termination, u32)], attempts: u32) -> Vec<f64> {
    let scored: Vec<&(Termination, u32)> = runs
        .iter()
        .filter(|(t, _)| !t.is_infrastructure())
        .collect();
    (1..=attempts)
        .map(|k| {
            let by_then = scored
                .iter()
                .filter(|(t, a)| *t == Termination::Success && *a <= k)
                .count();
            by_then as f64 / scored.len().max(1) as f64
        })
        .collect()
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
    /// The peer's label for a run that ended so under its rules; `unreadable`: on a reply
    /// that held no usable action.
    pub fn new(mode: Compat, t: Termination, unreadable: bool) -> Self {
        let reason = match mode {
            Compat::Crab => crab_reason(t, unreadable),
        };
        Self {
            mode,
            success: reason == "success",
            reason: reason.to_owned(),
        }
    }
}

/// CRAB's `terminate_reason` (crab/core/benchmark.py, crab/core/experiment.py) for a run
/// that ended so under `--compat crab`. An action CRAB's environment could not run is
/// `env_exception`; a reply that held none (`unreadable`) is `agent_exception`, as CRAB's
/// agent code raises on it (no tool call, arguments that are not JSON). pincer's time limit
/// and a start with checkpoints already passed have no CRAB label (CRAB has no time limit
/// and writes no result for the second).
fn crab_reason(t: Termination, unreadable: bool) -> &'static str {
    match t {
        Termination::Success | Termination::Undone => "success",
        Termination::StepLimit => "reach_max_step",
        Termination::FalseCompletion => "agent_complete",
        Termination::InvalidAction if unreadable => "agent_exception",
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
            final_passed: None,
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
        assert_eq!(o.cost_efficiency(), Some(0.0005));
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
        assert_eq!(none.cost_efficiency(), None);
    }

    #[test]
    fn final_completion_counts_what_still_held_and_falls_back_when_unchecked() {
        let mut undone = run(
            "a",
            PlatformClass::SingleDesktop,
            0,
            Termination::Undone,
            4,
            4,
            0,
        );
        undone.final_passed = Some(1);
        assert_eq!(
            (undone.completion(), undone.final_completion()),
            (1.0, 0.25)
        );
        let unchecked = run(
            "b",
            PlatformClass::SingleDesktop,
            0,
            Termination::StepLimit,
            2,
            4,
            0,
        );
        assert_eq!(unchecked.final_completion(), 0.5);
        let s = Summary::of([&undone, &unchecked]);
        assert_eq!(s.success_rate, 0.0, "undone is no success");
        assert_eq!((s.completion, s.final_completion), (0.75, 0.375));
        assert_eq!(s.terminations[&Termination::Undone], 1);
        assert!(!Termination::Undone.is_infrastructure());
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
        assert_eq!(s.steps_by_seed.mean, 4.0);
        assert_eq!(s.steps_by_seed.sd, 0.0);
        assert_eq!(s.wall_s_by_seed.mean, 2.0);
        // Per-seed EE: seed 1 (0.25 + 0.25) / 2, seed 2 (0.25 + 0) / 2.
        assert_eq!(s.execution_efficiency_by_seed.mean, 0.1875);
        assert!(
            (s.execution_efficiency_by_seed.sd - 0.088_388).abs() < 1e-5,
            "{}",
            s.execution_efficiency_by_seed.sd
        );
        assert_eq!(s.cost_efficiency, None, "no run spent tokens");
        assert_eq!(s.cost_efficiency_by_seed, None);
    }

    #[test]
    fn runs_without_tokens_have_no_cost_efficiency_and_stay_out_of_its_mean() {
        use Termination::*;
        let runs = vec![
            // An LLM run: CR 1.0 over 1,000 tokens, and one of CR 0.5 over 1,000 tokens.
            run("a", PlatformClass::SingleDesktop, 1, Success, 4, 4, 1000),
            run("b", PlatformClass::SingleDesktop, 2, StepLimit, 2, 4, 1000),
            // The oracle's runs: no tokens. Counted as zero they would halve the mean.
            run("a", PlatformClass::SingleDesktop, 1, Success, 4, 4, 0),
            run("b", PlatformClass::SingleDesktop, 2, Success, 4, 4, 0),
        ];
        let s = Summary::of(&runs);
        assert_eq!(s.cost_efficiency, Some(0.00075));
        let by_seed = s.cost_efficiency_by_seed.unwrap();
        assert_eq!(by_seed.mean, 0.00075);
        assert!((by_seed.sd - 0.000_353_553).abs() < 1e-9, "{}", by_seed.sd);
        // The other measures count every scored run.
        assert_eq!(s.completion, 0.875);
    }

    #[test]
    fn terminations_print_in_kebab_case() {
        assert_eq!(Termination::FalseCompletion.to_string(), "false-completion");
        assert_eq!(Termination::Undone.to_string(), "undone");
        assert_eq!(Termination::ALL.len(), 12);
    }

    #[test]
    fn success_by_attempt_counts_a_success_from_its_attempt_on_and_leaves_out_infrastructure() {
        use Termination::*;
        let runs = [
            (Success, 1),
            (Success, 2),
            (Success, 3),
            (FalseCompletion, 3),
            (EnvironmentError, 1),
        ];
        assert_eq!(success_by_attempt(&runs, 3), [0.25, 0.5, 0.75]);
        // Never above the last attempt's rate, never below the first's.
        assert_eq!(success_by_attempt(&runs, 1), [0.25]);
        assert_eq!(success_by_attempt(&[], 2), [0.0, 0.0]);
        assert_eq!(success_by_attempt(&[(Aborted, 2)], 2), [0.0, 0.0]);
    }

    #[test]
    fn crabs_labels_tell_an_unreadable_reply_from_a_refused_action() {
        let label = |t, unreadable| CompatEnding::new(Compat::Crab, t, unreadable);
        let refused = label(Termination::InvalidAction, false);
        assert_eq!(
            (refused.reason.as_str(), refused.success),
            ("env_exception", false)
        );
        assert_eq!(
            label(Termination::InvalidAction, true).reason,
            "agent_exception"
        );
        // Only an invalid action is told apart by how it came.
        assert_eq!(label(Termination::StepLimit, true).reason, "reach_max_step");
        assert!(label(Termination::Undone, false).success);
    }
}
