//! One task run: reset (setup steps), the initial check, the step loop with evaluation after
//! every action, termination, teardown; every step recorded in the trajectory.

use super::record::{ImageRef, JsonlWriter, StepRecord, TaskRecord, Timing};
use super::sets::EnvSet;
use crate::agent::actions::{self, AgentAction, Marks};
use crate::agent::observe::ObservationConfig;
use crate::agent::{Agent, Observation, TaskBrief, Usage};
use crate::eval::graph::{Envs, Evaluator, Graph, StepError};
use crate::eval::{AgentEvent, AgentLog};
use crate::metrics::Termination;
use crate::observe;
use crate::task::{Task, steps};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Consecutive unusable agent outputs before the run ends as `invalid-action`.
const MAX_INVALID_STREAK: u32 = 3;

/// What the worker reports while a task runs.
pub trait Progress: Send + Sync {
    /// A line of status ("step 4/15: click element 7").
    fn status(&self, set: &str, task: &str, text: &str);
}

/// Everything a task run needs besides the task.
pub struct Context<'a> {
    /// The environments.
    pub set: &'a EnvSet,
    /// What agents see.
    pub observation: ObservationConfig,
    /// The run directory.
    pub out: &'a Path,
    /// Set on Ctrl-C.
    pub cancel: &'a AtomicBool,
    /// Status reports.
    pub progress: &'a dyn Progress,
}

impl std::fmt::Debug for Context<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("set", &self.set.name)
            .finish_non_exhaustive()
    }
}

/// How a run ended, before the record is assembled.
struct End {
    termination: Termination,
    detail: Option<String>,
}

impl End {
    fn new(termination: Termination, detail: impl Into<Option<String>>) -> Self {
        Self {
            termination,
            detail: detail.into(),
        }
    }
}

/// Disk writes (trajectory images, fsynced lines) from inside the step loop, without
/// stalling the other environment sets' tasks on this worker thread.
pub(super) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

fn step_error(e: StepError) -> End {
    match e {
        StepError::Environment { .. } => End::new(Termination::EnvironmentError, e.to_string()),
        StepError::Evaluator { .. } => End::new(Termination::EvaluatorError, e.to_string()),
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs one task to its end and returns its record. Infrastructure failures end the task
/// with the matching termination; they never panic the worker.
pub async fn run(
    task: &Task,
    graph: Arc<Graph>,
    agent: &mut dyn Agent,
    repeat: u32,
    seed: u64,
    ctx: &Context<'_>,
) -> TaskRecord {
    let started = Instant::now();
    let started_ms = now_ms();
    let traj_rel = format!("tasks/{}__r{repeat}", crate::task::sanitize(&task.id));
    let traj = ctx.out.join(&traj_rel);
    let mut evaluator = Evaluator::new(graph);
    let mut usage = Usage::default();
    let mut actions_done = 0u32;
    let mut harness: Vec<f64> = Vec::new();
    let envs = Envs(ctx.set.envs.clone());
    let mut log = AgentLog::default();
    let say = |text: &str| ctx.progress.status(&ctx.set.name, &task.id, text);

    let result: Result<(), End> = async {
        // A task run redone on resume starts a fresh trajectory.
        let _ = std::fs::remove_dir_all(&traj);
        std::fs::create_dir_all(&traj).map_err(|e| {
            End::new(
                Termination::Aborted,
                format!("cannot write the trajectory: {e}"),
            )
        })?;
        let mut steps_file = JsonlWriter::append(&traj.join("steps.jsonl"))
            .map_err(|e| End::new(Termination::Aborted, e.to_string()))?;

        // Reset.
        for (role, list) in &task.setup {
            let env = &ctx.set.envs[role];
            steps::run_all(env, list, &mut |s| {
                say(&format!("setup {role}: {}", s.describe()))
            })
            .await
            .map_err(|(i, e)| match e {
                steps::StepError::Client(c) if c.is_environment_failure() => End::new(
                    Termination::EnvironmentError,
                    format!("setup step {i} on {role}: {c}"),
                ),
                other => End::new(
                    Termination::BrokenSetup,
                    format!("setup step {i} on {role}: {other}"),
                ),
            })?;
        }
        let already = evaluator
            .initial_check(&envs, &log)
            .await
            .map_err(step_error)?;
        if !already.is_empty() {
            let which: Vec<String> = already
                .iter()
                .map(|(id, v)| format!("{id} ({})", v.feedback))
                .collect();
            return Err(End::new(
                Termination::BrokenSetup,
                format!(
                    "checkpoints pass before the agent acts: {}",
                    which.join("; ")
                ),
            ));
        }

        let roles: BTreeMap<String, crate::task::Platform> = task
            .envs
            .iter()
            .map(|(r, n)| (r.clone(), n.platform))
            .collect();
        let brief = TaskBrief {
            id: task.id.clone(),
            instruction: task.instruction.clone(),
            tools: actions::tools(&roles),
            roles: roles.clone(),
            env_names: ctx
                .set
                .envs
                .iter()
                .map(|(role, env)| (role.clone(), env.name().to_owned()))
                .collect(),
            oracle: task.oracle.clone(),
            max_steps: task.limits.max_steps,
        };
        agent
            .begin(&brief)
            .map_err(|e| End::new(Termination::AgentError, e.to_string()))?;

        let limit = Duration::from_secs(u64::from(task.limits.max_seconds));
        let mut invalid_streak = 0;
        let mut feedback: Vec<String> = Vec::new();
        let mut decision_no = 0u32;
        // Every environment seen at once.
        let observe_all = || {
            futures::future::join_all(roles.iter().map(|(role, p)| {
                let env = ctx.set.envs[role].clone();
                let cfg = ctx.observation;
                let role = role.clone();
                let p = *p;
                async move { observe::view(&env, &role, p, &cfg).await }
            }))
        };
        // The views taken while the last action was evaluated (both only read the state
        // the action left), so a step costs the longer of the two, not their sum.
        let mut seen_already = None;
        loop {
            if ctx.cancel.load(Ordering::SeqCst) {
                return Err(End::new(Termination::Aborted, "interrupted".to_owned()));
            }
            if actions_done >= task.limits.max_steps {
                return Err(End::new(
                    Termination::StepLimit,
                    format!("{} actions", task.limits.max_steps),
                ));
            }
            if started.elapsed() > limit {
                return Err(End::new(
                    Termination::TimeLimit,
                    format!("{} s", task.limits.max_seconds),
                ));
            }
            decision_no += 1;
            let mut timing = Timing::default();

            let t = Instant::now();
            let views = match seen_already.take() {
                Some(views) => views,
                None => observe_all().await,
            };
            let mut obs = Observation {
                step: actions_done,
                views: Vec::new(),
                feedback: std::mem::take(&mut feedback),
                checkpoints: evaluator
                    .progress()
                    .into_iter()
                    .map(|p| (p.id, p.passed_at.is_some()))
                    .collect(),
            };
            for v in views {
                match v {
                    Ok(v) => obs.views.push(v),
                    // Seeing the screen is the harness's job: whatever fails here is not the
                    // agent's fault.
                    Err(e) => return Err(End::new(Termination::EnvironmentError, e.to_string())),
                }
            }
            timing.observe_ms = t.elapsed().as_secs_f64() * 1000.0;
            let mut images = Vec::new();
            for v in &obs.views {
                for (kind, bytes) in [("screenshot", &v.screenshot), ("marks", &v.marked)] {
                    if let Some(b) = bytes {
                        let file = format!(
                            "step-{decision_no:03}-{}-{kind}.png",
                            crate::task::sanitize(&v.role)
                        );
                        // A trajectory image that cannot be written is not worth failing the task.
                        let written = blocking(|| std::fs::write(traj.join(&file), b));
                        if written.is_ok() {
                            images.push(ImageRef {
                                role: v.role.clone(),
                                kind: kind.into(),
                                file,
                            });
                        }
                    }
                }
            }
            let marks: BTreeMap<String, Marks> = obs
                .views
                .iter()
                .map(|v| (v.role.clone(), v.marks()))
                .collect();

            // Decide.
            let t = Instant::now();
            let decision = agent
                .act(&obs)
                .await
                .map_err(|e| End::new(Termination::AgentError, e.to_string()))?;
            timing.agent_ms = t.elapsed().as_secs_f64() * 1000.0;
            usage.add(decision.usage);

            let mut record = StepRecord {
                step: decision_no,
                images,
                elements: obs
                    .views
                    .iter()
                    .map(|v| (v.role.clone(), crate::agent::som::list(&v.elements)))
                    .collect(),
                thought: decision.thought.clone(),
                actions: decision
                    .actions
                    .iter()
                    .map(|a| serde_json::to_value(a).unwrap_or_default())
                    .collect(),
                results: Vec::new(),
                invalid: decision.invalid.clone(),
                exchanges: decision.exchanges.clone(),
                usage: decision.usage,
                evaluation: Vec::new(),
                passed: Vec::new(),
                timing,
            };
            let mut ended: Option<End> = None;
            // An answer with no action in it is as unusable as a malformed one.
            let invalid = decision.invalid.clone().or_else(|| {
                decision
                    .actions
                    .is_empty()
                    .then(|| "the reply held no action".to_owned())
            });
            record.invalid = invalid.clone();
            if let Some(why) = &invalid {
                invalid_streak += 1;
                actions_done += 1;
                feedback.push(format!("your last output was not a valid action: {why}"));
                if invalid_streak >= MAX_INVALID_STREAK {
                    ended = Some(End::new(Termination::InvalidAction, why.clone()));
                }
            }
            for (n, action) in decision.actions.iter().enumerate() {
                if ended.is_some() {
                    break;
                }
                let last = n + 1 == decision.actions.len();
                say(&format!(
                    "step {}/{}: {}",
                    actions_done + 1,
                    task.limits.max_steps,
                    action.describe()
                ));
                let t = Instant::now();
                let outcome = execute(action, ctx, &marks, &mut log).await;
                // A wait is the agent's choice to idle, not harness time.
                if !matches!(action, AgentAction::Wait { .. }) {
                    record.timing.act_ms += t.elapsed().as_secs_f64() * 1000.0;
                }
                if !matches!(action, AgentAction::Wait { .. }) {
                    actions_done += 1;
                }
                match outcome {
                    Ok(()) => {
                        invalid_streak = 0;
                        record.results.push("ok".into());
                    }
                    Err(Outcome::Invalid(why)) => {
                        record.results.push(format!("invalid: {why}"));
                        feedback.push(format!("{} failed: {why}", action.describe()));
                        invalid_streak += 1;
                        if invalid_streak >= MAX_INVALID_STREAK {
                            ended = Some(End::new(Termination::InvalidAction, why));
                        }
                        continue;
                    }
                    Err(Outcome::End(e)) => {
                        record
                            .results
                            .push(format!("error: {}", e.detail.clone().unwrap_or_default()));
                        ended = Some(e);
                        break;
                    }
                }
                // Evaluate after every action; after the decision's last one, look at the
                // environments for the next decision meanwhile.
                let t = Instant::now();
                let report = if last {
                    let (report, views) = futures::join!(
                        evaluator.step(actions_done.max(1), &envs, &log),
                        observe_all()
                    );
                    seen_already = Some(views);
                    report
                } else {
                    evaluator.step(actions_done.max(1), &envs, &log).await
                };
                record.timing.evaluate_ms += t.elapsed().as_secs_f64() * 1000.0;
                match report {
                    Ok(r) => {
                        record.passed.extend(r.passed.iter().cloned());
                        record.evaluation.push(r);
                    }
                    Err(e) => {
                        ended = Some(step_error(e));
                        break;
                    }
                }
                if evaluator.is_success() {
                    ended = Some(End::new(Termination::Success, None));
                    break;
                }
                match action {
                    AgentAction::Complete => {
                        let (p, n) = evaluator.counts();
                        ended = Some(End::new(
                            Termination::FalseCompletion,
                            format!(
                                "the agent said it was done with {p} of {n} checkpoints passed"
                            ),
                        ));
                    }
                    AgentAction::Infeasible { reason } => {
                        ended = Some(End::new(
                            Termination::Infeasible,
                            format!("the agent called the task infeasible: {reason}"),
                        ));
                    }
                    _ => {}
                }
                if ended.is_some() {
                    break;
                }
            }
            harness.push(record.timing.harness_ms());
            let _ = blocking(|| steps_file.write(&record));
            if let Some(e) = ended {
                return Err(e);
            }
        }
    }
    .await;
    let end = result.err().unwrap_or_else(|| {
        End::new(
            Termination::Aborted,
            "the step loop ended without a reason".to_owned(),
        )
    });
    // Whatever ends a task while the run is being interrupted (a second Ctrl-C stops the
    // desktops under it) is the interruption, to be redone on --resume.
    let end = if ctx.cancel.load(Ordering::SeqCst) && end.termination != Termination::Success {
        End::new(
            Termination::Aborted,
            format!(
                "interrupted ({}: {})",
                end.termination,
                end.detail.unwrap_or_default()
            ),
        )
    } else {
        end
    };

    // The final state, before teardown changes it: every checkpoint that passed is checked
    // once more (success needs every sink to hold now), and those still waiting say what
    // they saw. Not after an environment error, whose environment may be gone.
    let end = if end.termination == Termination::EnvironmentError {
        end
    } else {
        match evaluator.finish(&envs, &log).await {
            // A success that cannot be confirmed on the final state is not scored as one.
            Err(e) if end.termination == Termination::Success => {
                let failed = step_error(e);
                End::new(
                    failed.termination,
                    format!(
                        "the final check failed: {}",
                        failed.detail.unwrap_or_default()
                    ),
                )
            }
            Err(e) => {
                say(&format!("the final check failed: {e}"));
                end
            }
            Ok(()) => match evaluator.undone_sinks() {
                undone if end.termination == Termination::Success && !undone.is_empty() => {
                    let why: Vec<String> = evaluator
                        .progress()
                        .into_iter()
                        .filter(|p| undone.contains(&p.id.as_str()))
                        .map(|p| format!("{}: {}", p.id, p.feedback.unwrap_or_default()))
                        .collect();
                    End::new(Termination::Undone, why.join("; "))
                }
                _ => end,
            },
        }
    };

    // Teardown, even after failures; its errors are logged, not scored.
    for (role, list) in &task.teardown {
        if let Some(env) = ctx.set.envs.get(role)
            && let Err((i, e)) = steps::run_all(env, list, &mut |_| {}).await
        {
            say(&format!("teardown step {i} on {role} failed: {e}"));
        }
    }
    harness.sort_by(f64::total_cmp);
    let (passed, total) = evaluator.counts();
    let final_passed = evaluator.final_counts().map(|(held, _)| held);
    TaskRecord {
        task: task.id.clone(),
        repeat,
        seed,
        agent: agent.name(),
        class: task.platform_class(),
        instruction: task.instruction.clone(),
        termination: end.termination,
        detail: end.detail,
        passed,
        final_passed,
        total,
        actions: actions_done,
        usage,
        wall_ms: started.elapsed().as_millis() as u64,
        harness_ms_p50: harness.get(harness.len() / 2).copied().unwrap_or(0.0),
        env_set: ctx.set.name.clone(),
        progress: evaluator.progress(),
        trajectory: traj_rel,
        started_ms,
    }
}

/// Why an action did not take effect.
enum Outcome {
    /// The agent's fault: an element that does not exist, a key that is not one.
    Invalid(String),
    /// The run is over (the environment failed).
    End(End),
}

/// Executes one agent action through the action class only.
async fn execute(
    action: &AgentAction,
    ctx: &Context<'_>,
    marks: &BTreeMap<String, Marks>,
    log: &mut AgentLog,
) -> Result<(), Outcome> {
    match action {
        AgentAction::Wait { seconds } => {
            tokio::time::sleep(Duration::from_secs_f64(seconds.clamp(0.0, 10.0))).await;
            return Ok(());
        }
        AgentAction::Submit { answer } => {
            log.events.push(AgentEvent::Answer {
                text: answer.clone(),
            });
            return Ok(());
        }
        AgentAction::Complete | AgentAction::Infeasible { .. } => return Ok(()),
        _ => {}
    }
    let role = action.env().unwrap_or_default();
    let env = ctx
        .set
        .envs
        .get(role)
        .ok_or_else(|| Outcome::Invalid(format!("there is no environment '{role}'")))?;
    let empty = Marks::new();
    let inputs = actions::resolve(action, marks.get(role).unwrap_or(&empty))
        .map_err(|e| Outcome::Invalid(e.0))?;
    for input in inputs {
        match env.act(input.clone()).await {
            Ok(()) => log.events.push(AgentEvent::Action {
                env: role.to_owned(),
                action: input,
            }),
            Err(e) if e.is_environment_failure() => {
                return Err(Outcome::End(End::new(
                    Termination::EnvironmentError,
                    e.to_string(),
                )));
            }
            Err(e) => return Err(Outcome::Invalid(e.to_string())),
        }
    }
    Ok(())
}
