//! One task run as a sequence of phases: reset (VMs restored), setup (the task's steps),
//! the initial check, the
//! steps (observe, decide, act, evaluate) until something ends the run, the final check on
//! the state it left, teardown and the record; every step recorded in the trajectory. The
//! decisions between phases (limits, what an action ends, interruption, the ending on the
//! final state) are plain functions, tested on their own.

use super::RunError;
use super::sets::EnvSet;
use crate::agent::actions::{self, AgentAction, Marks};
use crate::agent::correction::{Correction, Feedback};
use crate::agent::observe::ObservationConfig;
use crate::agent::observe::{Still, View};
use crate::agent::{Agent, Decision, Observation, TaskBrief, Usage};
use crate::eval::graph::{Envs, Evaluator, Graph, NodeProgress, StepError};
use crate::eval::{AgentEvent, AgentLog};
use crate::metrics::CompatEnding;
use crate::metrics::Termination;
use crate::observe;
use crate::rundir::{Attempt, ImageRef, JsonlWriter, StepRecord, TaskRecord, Timing};
use crate::task::compat::Compat;
use crate::task::{EndRule, Task, steps};
use crate::video::{Recent, Recorder};
use pincer_shared::setup::ExitStatus;
use pincer_shared::tool::{ToolCall, ToolSpec, ToolValue};
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
    /// What agents are told of the checkpoints, and their attempts.
    pub correction: Correction,
    /// The run directory.
    pub out: &'a Path,
    /// Set on Ctrl-C.
    pub cancel: &'a AtomicBool,
    /// Status reports.
    pub progress: &'a dyn Progress,
    /// Record each role's screen while the agent acts, at up to this many frames a second,
    /// into `video-ROLE.mp4` in the trajectory.
    pub video: Option<u32>,
    /// What ends the run, for every task (`--end`); `None`: each task's own rule.
    pub end: Option<EndRule>,
    /// The asset cache that `put_asset` steps read (`--assets`).
    pub assets: Option<&'a Path>,
    /// Score as a peer benchmark does (`--compat crab`): its harness rules here, its
    /// predicates in the task (`Task::scored_as`).
    pub compat: Option<Compat>,
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

/// Runs one task to its end and returns its record. Infrastructure failures end the task
/// with the matching termination; they never panic the worker.
///
/// An attempt's phases, in order: reset (VMs back to their golden state), setup (the
/// task's steps on every role), the initial check, the steps (observe, decide, act,
/// evaluate) until something ends the run, the final check on the state the run left,
/// teardown, and the record. An attempt the agent failed is made again, from reset, while
/// `--attempts` allow, the agent told how it failed ([`told_after`]); the record is the
/// last attempt's, the earlier ones summed up in it.
pub async fn run(
    task: &Task,
    graph: Arc<Graph>,
    agent: &mut dyn Agent,
    repeat: u32,
    seed: u64,
    ctx: &Context<'_>,
) -> Result<TaskRecord, RunError> {
    let mut retried = Vec::new();
    let mut told = Vec::new();
    loop {
        let attempt = retried.len() as u32 + 1;
        let r = TaskRun::new(task, graph.clone(), repeat, attempt, ctx);
        let mut rec = run_attempt(r, agent, seed, told).await?;
        if attempt >= ctx.correction.attempts
            || !worth_retrying(rec.termination)
            || ctx.cancel.load(Ordering::SeqCst)
        {
            rec.retried = retried;
            return Ok(rec);
        }
        told = told_after(&rec, attempt, ctx.correction);
        ctx.progress.status(
            &ctx.set.name,
            &task.id,
            &format!("attempt {attempt} ended {}: trying again", rec.termination),
        );
        retried.push(Attempt::of(&rec, told.clone()));
    }
}

/// One attempt of a task run (see [`run`]), the agent first told `told`. A trajectory that
/// could not be written fails the run: the task run is not recorded, so that `--resume`
/// runs it again once the run directory can take it.
async fn run_attempt(
    mut r: TaskRun<'_>,
    agent: &mut dyn Agent,
    seed: u64,
    told: Vec<String>,
) -> Result<TaskRecord, RunError> {
    let cancelled = r.ctx.cancel;
    let mut videos = Vec::new();
    let mut recents = Vec::new();
    let end = async {
        let mut steps_file = r.trajectory()?;
        r.reset().await?;
        r.setup().await?;
        r.initial_check().await?;
        videos = r.start_videos().await;
        recents = r.start_recent().await?;
        r.steps(agent, &mut steps_file, told, &videos, &recents)
            .await
    }
    .await
    .err()
    .unwrap_or_else(|| {
        End::new(
            Termination::Aborted,
            "the step loop ended without a reason".to_owned(),
        )
    });
    let end = interrupted(end, cancelled.load(Ordering::SeqCst));
    r.stop_videos(videos).await;
    drop(recents);
    let end = r.finalize(end).await;
    // CRAB latches what passed and never looks again.
    let end = match r.ctx.compat {
        Some(Compat::Crab) => end,
        None => r.final_check(end).await,
    };
    r.teardown().await;
    match r.unwritten.take() {
        Some((file, source)) => Err(RunError::Io {
            what: format!("writing the trajectory {}", r.traj().join(file).display()),
            source,
        }),
        None => Ok(r.record(&agent.name(), seed, end)),
    }
}

/// Whether an attempt that ended so is made again: the agent failed it (not the
/// environment, the evaluator or an interruption, nor the model's service).
fn worth_retrying(t: Termination) -> bool {
    !(t == Termination::Success || t == Termination::AgentError || t.is_infrastructure())
}

/// What the agent is told at the start of the attempt after a failed one: that it failed
/// and was set up again and, with feedback, how it ended and each checkpoint's state.
fn told_after(rec: &TaskRecord, attempt: u32, c: Correction) -> Vec<String> {
    let mut told = vec![format!(
        "attempt {attempt} of {} failed ({}); the task was set up again from the start: try again",
        c.attempts, rec.termination
    )];
    if c.feedback == Feedback::None {
        return told;
    }
    if let Some(d) = &rec.detail {
        told.push(format!("how it ended: {d}"));
    }
    told.extend(
        rec.progress
            .iter()
            .map(|p| match (p.passed_at, p.held_at_end, &p.feedback) {
                (Some(_), Some(false), Some(f)) => format!("checkpoint '{}': {f}", p.id),
                (Some(_), _, _) => format!("checkpoint '{}' passed", p.id),
                (None, _, Some(f)) => format!("checkpoint '{}' did not pass: {f}", p.id),
                (None, _, None) => format!(
                    "checkpoint '{}' was not checked: it waits for another checkpoint",
                    p.id
                ),
            }),
    );
    told
}

/// The state of one task run, shared by its phases.
struct TaskRun<'a> {
    task: &'a Task,
    ctx: &'a Context<'a>,
    repeat: u32,
    evaluator: Evaluator,
    envs: Envs,
    log: AgentLog,
    usage: Usage,
    /// Agent actions executed (waits excluded): what `max_steps` counts.
    actions_done: u32,
    /// Whether the run ended on a reply that held no usable action (CRAB's agent raises
    /// there: `agent_exception`, where an action the environment refused is
    /// `env_exception`).
    ended_unreadable: bool,
    /// Of those, API tool calls.
    tool_calls: u32,
    /// Harness milliseconds of each step.
    harness: Vec<f64>,
    /// The trajectory directory, relative to the run directory.
    traj_rel: String,
    /// Checkpoints that passed after this many actions were last shown passing to the
    /// agent (`--feedback step`).
    shown_through: u32,
    /// The images of the state the run ended in.
    final_images: Vec<ImageRef>,
    /// The first trajectory file that could not be written, and why.
    unwritten: Option<(String, std::io::Error)>,
    started: Instant,
    started_ms: u64,
}

impl<'a> TaskRun<'a> {
    fn new(
        task: &'a Task,
        graph: Arc<Graph>,
        repeat: u32,
        attempt: u32,
        ctx: &'a Context<'a>,
    ) -> Self {
        let mut evaluator = Evaluator::new(graph);
        if ctx.correction.feedback == Feedback::Step {
            evaluator.explain_every_step();
        }
        let traj_rel = crate::rundir::trajectory(&task.id, repeat, attempt);
        Self {
            task,
            ctx,
            repeat,
            evaluator,
            envs: Envs(ctx.set.envs.clone()),
            log: AgentLog::default(),
            usage: Usage::default(),
            actions_done: 0,
            ended_unreadable: false,
            tool_calls: 0,
            harness: Vec::new(),
            traj_rel,
            shown_through: 0,
            final_images: Vec::new(),
            unwritten: None,
            started: Instant::now(),
            started_ms: crate::clock::unix_ms(),
        }
    }

    fn say(&self, text: &str) {
        self.ctx
            .progress
            .status(&self.ctx.set.name, &self.task.id, text);
    }

    fn traj(&self) -> std::path::PathBuf {
        self.ctx.out.join(&self.traj_rel)
    }

    /// A fresh trajectory directory (a task run redone on resume starts over) and its
    /// steps file.
    fn trajectory(&mut self) -> Result<JsonlWriter, End> {
        let traj = self.traj();
        let _ = std::fs::remove_dir_all(&traj);
        std::fs::create_dir_all(&traj).map_err(|e| self.unwritable("", e))?;
        JsonlWriter::append(&traj.join("steps.jsonl"))
            .map_err(|e| self.unwritable("steps.jsonl", e))
    }

    /// Ends the task run because its trajectory's `file` could not be written; the first
    /// such failure fails the run (see [`run_attempt`]).
    fn unwritable(&mut self, file: &str, e: std::io::Error) -> End {
        let end = End::new(
            Termination::Aborted,
            format!("cannot write the trajectory ({file}): {e}"),
        );
        self.unwritten.get_or_insert((file.to_owned(), e));
        end
    }

    /// Starts recording every role's screen, if the run asked for video. A guest that
    /// cannot record costs the video, never the task run.
    async fn start_videos(&self) -> Vec<(String, Recorder)> {
        let Some(fps) = self.ctx.video else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for role in self.task.envs.keys() {
            let env = self.ctx.set.envs[role].clone();
            let file = self
                .traj()
                .join(format!("video-{}.mp4", crate::task::sanitize(role)));
            match Recorder::start(env, fps, file).await {
                Ok(rec) => out.push((role.clone(), rec)),
                Err(e) => tracing::warn!(task = %self.task.id, %role, "no video: {e}"),
            }
        }
        out
    }

    /// Stops the recordings and writes their files.
    async fn stop_videos(&self, videos: Vec<(String, Recorder)>) {
        for (role, rec) in videos {
            if let Err(e) = rec.stop().await {
                tracing::warn!(task = %self.task.id, %role, "the video was not written: {e}");
            }
        }
    }

    /// Brings every VM of the set back to its golden state, all at once: nothing an
    /// earlier task did survives. The environments then dial the restored guests afresh.
    async fn reset(&self) -> Result<(), End> {
        let vms: Vec<(&String, &String)> = self
            .ctx
            .set
            .vms
            .iter()
            .filter(|(role, _)| self.task.envs.contains_key(*role))
            .collect();
        if vms.is_empty() {
            return Ok(());
        }
        self.say("resetting the VMs");
        let done = futures::future::join_all(vms.iter().map(|(role, vm)| async move {
            crate::vm::reset(vm)
                .await
                .map_err(|e| format!("resetting VM {vm} ({role}): {e}"))
        }))
        .await;
        for ((role, _), result) in vms.iter().zip(done) {
            result.map_err(|e| End::new(Termination::EnvironmentError, e))?;
            if let Some(env) = self.ctx.set.envs.get(*role) {
                env.close();
            }
        }
        Ok(())
    }

    /// The task's setup steps on every role. A guest that fails is the environment's
    /// fault; a step that fails on a working guest is the task's (a broken setup).
    async fn setup(&self) -> Result<(), End> {
        for (role, list) in &self.task.setup {
            let env = &self.ctx.set.envs[role];
            steps::run_all(env, list, self.ctx.assets, &mut |s| {
                self.say(&format!("setup {role}: {}", s.describe()))
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
        Ok(())
    }

    /// The check before the first action: a checkpoint that already passes means the task
    /// would score without the agent, a broken setup.
    async fn initial_check(&self) -> Result<(), End> {
        let already = self
            .evaluator
            .initial_check(&self.envs, &self.log)
            .await
            .map_err(step_error)?;
        if already.is_empty() {
            return Ok(());
        }
        let which: Vec<String> = already
            .iter()
            .map(|(id, v)| format!("{id} ({})", v.feedback))
            .collect();
        Err(End::new(
            Termination::BrokenSetup,
            format!(
                "checkpoints pass before the agent acts: {}",
                which.join("; ")
            ),
        ))
    }

    /// The API tools agents are offered: the task's, when the run offers tools.
    fn offered(&self) -> &'a BTreeMap<String, Vec<ToolSpec>> {
        static NONE: BTreeMap<String, Vec<ToolSpec>> = BTreeMap::new();
        if self.ctx.observation.tools {
            &self.task.tools
        } else {
            &NONE
        }
    }

    fn roles(&self) -> BTreeMap<String, pincer_shared::Platform> {
        self.task
            .envs
            .iter()
            .map(|(r, n)| (r.clone(), n.platform))
            .collect()
    }

    /// The step loop: observe, decide, act and evaluate until the task ends; returns how
    /// it ended (always as `Err`, the loop's way out).
    async fn steps(
        &mut self,
        agent: &mut dyn Agent,
        steps_file: &mut JsonlWriter,
        told: Vec<String>,
        videos: &[(String, Recorder)],
        recents: &[(String, Recent)],
    ) -> Result<(), End> {
        let task = self.task;
        let brief = TaskBrief {
            id: task.id.clone(),
            instruction: task.instruction.clone(),
            tools: actions::tools(&self.roles())
                .into_iter()
                .chain(actions::api_tools(self.offered().values().flatten()))
                .collect(),
            roles: self.roles(),
            env_names: self
                .ctx
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
        let mut turn = Turn::new(told, self.ctx.compat);
        // The views taken while the last action was evaluated (both only read the state
        // the action left), so a step costs the longer of the two, not their sum.
        let mut seen_already = None;
        let mut decision_no = 0u32;
        loop {
            if let Some(end) = limit_reached(
                self.ctx.cancel.load(Ordering::SeqCst),
                self.actions_done,
                self.started.elapsed(),
                &task.limits,
            ) {
                self.show_last(agent, seen_already.take(), &mut turn);
                return Err(end);
            }
            decision_no += 1;
            let mut timing = Timing::default();
            let t = Instant::now();
            let views = match seen_already.take() {
                Some(views) => views,
                None => observe_all(self.ctx, self.task).await,
            };
            let mut obs = self.observation(views, std::mem::take(&mut turn.feedback))?;
            self.add_stills(&mut obs, recents).await;
            timing.observe_ms = t.elapsed().as_secs_f64() * 1000.0;
            let images = self.save_images(&obs, &format!("step-{decision_no:03}"))?;

            let t = Instant::now();
            let decision = agent
                .act(&obs)
                .await
                .map_err(|e| End::new(Termination::AgentError, e.to_string()))?;
            timing.agent_ms = t.elapsed().as_secs_f64() * 1000.0;
            self.usage.add(decision.usage);

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
                invalid: None,
                exchanges: decision.exchanges.clone(),
                usage: decision.usage,
                evaluation: Vec::new(),
                passed: Vec::new(),
                timing,
                video_ms: Vec::new(),
            };
            // Where each video is as the actions go out, for finding them in it.
            for (role, rec) in videos {
                if let Ok((now, _)) = self.ctx.set.envs[role].guest_clock().await {
                    let ms = now.saturating_sub(rec.started_us()) as f64 / 1000.0;
                    record.video_ms.push((role.clone(), ms));
                }
            }
            let ended = self
                .act(&decision, &obs, &mut turn, &mut record, &mut seen_already)
                .await;
            self.harness.push(record.timing.harness_ms());
            if let Err(e) = blocking(|| steps_file.write(&record)) {
                return Err(self.unwritable("steps.jsonl", e));
            }
            if let Some(e) = ended {
                self.show_last(agent, seen_already.take(), &mut turn);
                return Err(e);
            }
        }
    }

    /// Shows the agent the views taken after the last action, if there are any, when the
    /// run ends: the state it ended in, before the final check and teardown; they go into
    /// the trajectory as its final images.
    fn show_last(
        &mut self,
        agent: &mut dyn Agent,
        views: Option<Vec<Result<View, observe::ObserveError>>>,
        turn: &mut Turn,
    ) {
        if let Some(views) = views
            && let Ok(last) = self.observation(views, std::mem::take(&mut turn.feedback))
        {
            // An image that cannot be written fails the run once the task run ends.
            if let Ok(images) = self.save_images(&last, "final") {
                self.final_images = images;
            }
            agent.seen_last(&last);
        }
    }

    /// What the agent is shown: every view (a view that cannot be taken is the
    /// environment's failure, never the agent's), the feedback on its last actions, and
    /// each checkpoint's state.
    fn observation(
        &mut self,
        views: Vec<Result<View, observe::ObserveError>>,
        mut feedback: Vec<String>,
    ) -> Result<Observation, End> {
        let progress = self.evaluator.progress();
        if self.ctx.correction.feedback == Feedback::Step {
            feedback.extend(step_feedback(&progress, self.shown_through));
            self.shown_through = self.actions_done;
        }
        let mut obs = Observation {
            step: self.actions_done,
            views: Vec::new(),
            feedback,
            checkpoints: progress
                .iter()
                .map(|p| (p.id.clone(), p.passed_at.is_some()))
                .collect(),
            checkpoint_feedback: progress
                .into_iter()
                .filter_map(|p| Some((p.id, p.feedback?)))
                .collect(),
        };
        for v in views {
            obs.views
                .push(v.map_err(|e| End::new(Termination::EnvironmentError, e.to_string()))?);
        }
        Ok(obs)
    }

    /// Writes the images the agent sees into the trajectory; one that cannot be written
    /// ends the task run and fails the run ([`Self::unwritable`]).
    fn save_images(&mut self, obs: &Observation, prefix: &str) -> Result<Vec<ImageRef>, End> {
        let traj = self.traj();
        let mut images = Vec::new();
        for v in &obs.views {
            let shots = [("screenshot", &v.screenshot), ("marks", &v.marked)]
                .into_iter()
                .filter_map(|(kind, b)| Some((kind.to_owned(), b.as_ref()?)));
            let stills = v
                .video
                .iter()
                .enumerate()
                .map(|(i, still)| (format!("video-{i:02}"), &still.png));
            for (kind, bytes) in shots.chain(stills) {
                let file = format!("{prefix}-{}-{kind}.png", crate::task::sanitize(&v.role));
                blocking(|| std::fs::write(traj.join(&file), bytes))
                    .map_err(|e| self.unwritable(&file, e))?;
                images.push(ImageRef {
                    role: v.role.clone(),
                    kind,
                    file,
                });
            }
        }
        Ok(images)
    }

    /// Starts keeping each role's last moments, if agents see them
    /// (`--observe video=...`). Agents were promised them: a guest that cannot stream is
    /// the environment's failure.
    async fn start_recent(&self) -> Result<Vec<(String, Recent)>, End> {
        let Some(w) = self.ctx.observation.video else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for role in self.task.envs.keys() {
            let env = &self.ctx.set.envs[role];
            let recent = Recent::start(env, w.ms, w.fps, self.ctx.observation.max_size)
                .await
                .map_err(|e| {
                    End::new(
                        Termination::EnvironmentError,
                        format!("the last moments of {role}'s screen (--observe video=): {e}"),
                    )
                })?;
            out.push((role.clone(), recent));
        }
        Ok(out)
    }

    /// Gives each view the frames of its screen's last moments, sampled now.
    async fn add_stills(&self, obs: &mut Observation, recents: &[(String, Recent)]) {
        let Some(w) = self.ctx.observation.video else {
            return;
        };
        for (role, recent) in recents {
            let Some(view) = obs.views.iter_mut().find(|v| &v.role == role) else {
                continue;
            };
            let Ok((now, _)) = self.ctx.set.envs[role].guest_clock().await else {
                continue;
            };
            let samples = recent.sample(now, w.ms, w.fps);
            view.video = blocking(|| {
                samples
                    .iter()
                    .filter_map(|(ago_ms, frame)| {
                        let png = observe::raw_to_png(&frame.shot).ok()?;
                        Some(Still {
                            ago_ms: *ago_ms,
                            png,
                        })
                    })
                    .collect()
            });
        }
    }

    /// Carries out a decision's actions, evaluating after each; after the last one the
    /// next decision's views are taken meanwhile (into `seen_already`). Returns how the
    /// task ended, if it did.
    async fn act(
        &mut self,
        decision: &Decision,
        obs: &Observation,
        turn: &mut Turn,
        record: &mut StepRecord,
        seen_already: &mut Option<Vec<Result<View, observe::ObserveError>>>,
    ) -> Option<End> {
        let marks: BTreeMap<String, Marks> = obs
            .views
            .iter()
            .map(|v| (v.role.clone(), v.marks()))
            .collect();
        // An answer with no action in it is as unusable as a malformed one.
        let invalid = decision.invalid.clone().or_else(|| {
            decision
                .actions
                .is_empty()
                .then(|| "the reply held no action".to_owned())
        });
        record.invalid = invalid.clone();
        if let Some(why) = invalid {
            self.actions_done += 1;
            if let Some(end) = turn.invalid(
                format!("your last output was not a valid action: {why}"),
                why,
            ) {
                self.ended_unreadable = true;
                return Some(end);
            }
        }
        for (n, action) in decision.actions.iter().enumerate() {
            // A long decision (a list of actions) keeps to the limits and stops on Ctrl-C
            // as a decision of one action does.
            if n > 0
                && let Some(end) = limit_reached(
                    self.ctx.cancel.load(Ordering::SeqCst),
                    self.actions_done,
                    self.started.elapsed(),
                    &self.task.limits,
                )
            {
                record.results.push(format!(
                    "skipped {} actions: {}",
                    decision.actions.len() - n,
                    end.termination
                ));
                return Some(end);
            }
            let last = n + 1 == decision.actions.len();
            self.say(&format!(
                "step {}/{}: {}",
                self.actions_done + 1,
                self.task.limits.max_steps,
                action.describe()
            ));
            let crab = self.ctx.compat == Some(Compat::Crab);
            if crab && matches!(action, AgentAction::Infeasible { .. }) {
                record
                    .results
                    .push("invalid: CRAB has no infeasible action".into());
                return Some(End::new(
                    Termination::InvalidAction,
                    "CRAB's agents have no action to call a task infeasible".to_owned(),
                ));
            }
            let t = Instant::now();
            let outcome =
                execute(action, self.ctx.set, self.offered(), &marks, &mut self.log).await;
            // A wait is the agent's choice to idle, not harness time, nor a step (CRAB
            // counts it as one).
            if !matches!(action, AgentAction::Wait { .. }) {
                record.timing.act_ms += t.elapsed().as_secs_f64() * 1000.0;
                self.actions_done += 1;
            } else if crab {
                self.actions_done += 1;
            }
            if matches!(action, AgentAction::Tool { .. }) {
                self.tool_calls += 1;
            }
            match outcome {
                Ok(None) => {
                    turn.invalid_streak = 0;
                    record.results.push("ok".into());
                }
                Ok(Some(said)) => {
                    turn.invalid_streak = 0;
                    record.results.push(format!("ok: {said}"));
                    turn.feedback.push(said);
                }
                Err(Outcome::Invalid(why)) => {
                    record.results.push(format!("invalid: {why}"));
                    if let Some(end) =
                        turn.invalid(format!("{} failed: {why}", action.describe()), why)
                    {
                        return Some(end);
                    }
                    continue;
                }
                Err(Outcome::End(e)) => {
                    record
                        .results
                        .push(format!("error: {}", e.detail.clone().unwrap_or_default()));
                    return Some(e);
                }
            }
            // CRAB ends the task on `complete` without evaluating it.
            if crab && matches!(action, AgentAction::Complete) {
                let (p, n) = self.evaluator.counts();
                return Some(End::new(
                    Termination::FalseCompletion,
                    format!(
                        "the agent said it was done with {p} of {n} checkpoints passed (CRAB ends the task there, unevaluated)"
                    ),
                ));
            }
            let t = Instant::now();
            let step = self.actions_done.max(1);
            let report = if last {
                let (report, views) = futures::join!(
                    self.evaluator.step(step, &self.envs, &self.log),
                    observe_all(self.ctx, self.task)
                );
                *seen_already = Some(views);
                report
            } else {
                self.evaluator.step(step, &self.envs, &self.log).await
            };
            record.timing.evaluate_ms += t.elapsed().as_secs_f64() * 1000.0;
            match report {
                Ok(r) => {
                    record.passed.extend(r.passed.iter().cloned());
                    record.evaluation.push(r);
                }
                Err(e) => return Some(step_error(e)),
            }
            if let Some(end) = after_action(action, &self.evaluator, self.rule()) {
                // CRAB checks its step limit after success, and its label wins.
                if crab
                    && end.termination == Termination::Success
                    && self.actions_done >= self.task.limits.max_steps
                {
                    return Some(End::new(
                        Termination::StepLimit,
                        format!(
                            "{} actions (the graph completed on the last one)",
                            self.actions_done
                        ),
                    ));
                }
                return Some(end);
            }
        }
        None
    }

    /// What ends this run: the task's rule unless the run sets one, and always the agent
    /// for a task with final checkpoints (they are judged only once the run is over).
    fn rule(&self) -> EndRule {
        if self.task.checkpoints.iter().any(|c| c.final_only) {
            return EndRule::Agent;
        }
        self.ctx.end.unwrap_or(self.task.end)
    }

    /// The finalize steps (a peer's postconfig: save the document the agent left open),
    /// after the agent has ended the run and before the final check, each written to the
    /// trajectory's `finalize.jsonl`. Not after a failure of the environment, the harness
    /// or the model, nor an interruption: only a state the agent left is finalized. A step
    /// that fails is the environment's failure, never the agent's.
    async fn finalize(&mut self, end: End) -> End {
        if self.task.finalize.is_empty()
            || end.termination.is_infrastructure()
            || end.termination == Termination::AgentError
        {
            return end;
        }
        let mut log = match JsonlWriter::append(&self.traj().join("finalize.jsonl")) {
            Ok(log) => log,
            Err(e) => return self.unwritable("finalize.jsonl", e),
        };
        let task = self.task;
        for (role, list) in &task.finalize {
            let env = &self.ctx.set.envs[role];
            let done = steps::run_all(env, list, self.ctx.assets, &mut |s| {
                self.say(&format!("finalize {role}: {}", s.describe()));
            })
            .await;
            let line = |i: usize, result: String| serde_json::json!({"role": role, "step": list[i].describe(), "result": result});
            let failed = done.as_ref().err().map(|(i, _)| *i);
            for i in 0..failed.map_or(list.len(), |f| f + 1) {
                let result = match (&done, failed) {
                    (Err((_, e)), Some(f)) if f == i => e.to_string(),
                    _ => "ok".to_owned(),
                };
                if let Err(e) = blocking(|| log.write(&line(i, result))) {
                    return self.unwritable("finalize.jsonl", e);
                }
            }
            if let Err((i, e)) = done {
                return End::new(
                    Termination::EnvironmentError,
                    format!("finalize step {i} on {role} failed: {e}"),
                );
            }
        }
        end
    }

    /// The final state, before teardown changes it: every checkpoint that passed is
    /// checked once more (success needs every sink to hold now), final checkpoints are
    /// judged, and those still waiting say what they saw. Not after an environment error,
    /// whose environment may be gone.
    async fn final_check(&mut self, end: End) -> End {
        if end.termination == Termination::EnvironmentError {
            return end;
        }
        let checked = self.evaluator.finish(&self.envs, &self.log).await;
        if let Err(e) = &checked
            && end.termination != Termination::Success
        {
            self.say(&format!("the final check failed: {e}"));
        }
        match self.rule() {
            EndRule::Sinks => judge_end(end, checked, &self.evaluator),
            EndRule::Agent => judge_agent_end(end, checked, &self.evaluator),
        }
    }

    /// The task's teardown steps, even after failures; their errors are logged, not scored.
    async fn teardown(&self) {
        for (role, list) in &self.task.teardown {
            if let Some(env) = self.ctx.set.envs.get(role)
                && let Err((i, e)) = steps::run_all(env, list, self.ctx.assets, &mut |_| {}).await
            {
                self.say(&format!("teardown step {i} on {role} failed: {e}"));
            }
        }
    }

    /// The record of the run.
    fn record(mut self, agent: &str, seed: u64, end: End) -> TaskRecord {
        self.harness.sort_by(f64::total_cmp);
        let (passed, total) = self.evaluator.counts();
        let final_passed = self.evaluator.final_counts().map(|(held, _)| held);
        TaskRecord {
            task: self.task.id.clone(),
            repeat: self.repeat,
            seed,
            agent: agent.to_owned(),
            class: self.task.platform_class(),
            instruction: self.task.instruction.clone(),
            termination: end.termination,
            detail: end.detail,
            passed,
            final_passed,
            total,
            actions: self.actions_done,
            tool_calls: self.tool_calls,
            usage: self.usage,
            wall_ms: self.started.elapsed().as_millis() as u64,
            harness_ms_p50: self
                .harness
                .get(self.harness.len() / 2)
                .copied()
                .unwrap_or(0.0),
            env_set: self.ctx.set.name.clone(),
            progress: self.evaluator.progress(),
            trajectory: self.traj_rel,
            started_ms: self.started_ms,
            final_images: std::mem::take(&mut self.final_images),
            retried: Vec::new(),
            score: self.evaluator.score(),
            compat: self
                .ctx
                .compat
                .map(|mode| CompatEnding::new(mode, end.termination, self.ended_unreadable)),
        }
    }
}

/// What `--feedback step` tells the agent before a decision: the checkpoints that passed
/// since it was last told (after `shown_through` actions), and what each checkpoint still
/// waiting to pass saw at the latest step.
fn step_feedback(progress: &[NodeProgress], shown_through: u32) -> Vec<String> {
    let passed = progress.iter().filter(|p| p.passed_at.is_some()).count();
    let mut lines = vec![format!(
        "checkpoints: {passed} of {} passed",
        progress.len()
    )];
    for p in progress {
        match (p.passed_at, &p.feedback) {
            (Some(at), _) if at > shown_through => {
                lines.push(format!("checkpoint '{}' passed", p.id));
            }
            (None, Some(f)) => lines.push(format!("checkpoint '{}' not passed yet: {f}", p.id)),
            _ => {}
        }
    }
    lines
}

/// Every environment of the task seen at once.
async fn observe_all(ctx: &Context<'_>, task: &Task) -> Vec<Result<View, observe::ObserveError>> {
    futures::future::join_all(task.envs.iter().map(|(role, need)| {
        let env = ctx.set.envs[role].clone();
        let cfg = ctx.observation;
        async move { observe::view(&env, role, need.platform, &cfg).await }
    }))
    .await
}

/// What carries over from one decision to the next: feedback on what went wrong, and how
/// many unusable actions came in a row.
#[derive(Debug)]
struct Turn {
    feedback: Vec<String>,
    invalid_streak: u32,
    /// How many unusable actions in a row end the run.
    invalid_limit: u32,
}

impl Turn {
    /// The first turn, the agent first told `told`; CRAB ends a task on its first action
    /// that fails.
    fn new(told: Vec<String>, compat: Option<Compat>) -> Self {
        Self {
            feedback: told,
            invalid_streak: 0,
            invalid_limit: match compat {
                Some(Compat::Crab) => 1,
                None => MAX_INVALID_STREAK,
            },
        }
    }
}

impl Turn {
    /// Counts an unusable action (`feedback` tells the agent); the run ends after
    /// [`MAX_INVALID_STREAK`] in a row.
    fn invalid(&mut self, feedback: String, why: String) -> Option<End> {
        self.feedback.push(feedback);
        self.invalid_streak += 1;
        (self.invalid_streak >= self.invalid_limit)
            .then(|| End::new(Termination::InvalidAction, why))
    }
}

/// Whether the run must end before the next decision: Ctrl-C, or a limit reached.
fn limit_reached(
    cancelled: bool,
    actions_done: u32,
    elapsed: Duration,
    limits: &crate::task::Limits,
) -> Option<End> {
    if cancelled {
        return Some(End::new(Termination::Aborted, "interrupted".to_owned()));
    }
    if actions_done >= limits.max_steps {
        return Some(End::new(
            Termination::StepLimit,
            format!("{} actions", limits.max_steps),
        ));
    }
    if elapsed > Duration::from_secs(u64::from(limits.max_seconds)) {
        return Some(End::new(
            Termination::TimeLimit,
            format!("{} s", limits.max_seconds),
        ));
    }
    None
}

/// How an action that was carried out and evaluated ends the run, if it does. Under
/// CRAB's rule: the graph complete, the agent saying it is done (too early, since the graph
/// is not), or giving up. Under the agent's rule only the agent ends it (done, infeasible,
/// an answer), and the final state decides ([`judge_agent_end`]).
fn after_action(action: &AgentAction, evaluator: &Evaluator, rule: EndRule) -> Option<End> {
    if rule == EndRule::Sinks && evaluator.is_success() {
        return Some(End::new(Termination::Success, None));
    }
    match (action, rule) {
        (AgentAction::Complete, EndRule::Sinks) => {
            let (p, n) = evaluator.counts();
            Some(End::new(
                Termination::FalseCompletion,
                format!("the agent said it was done with {p} of {n} checkpoints passed"),
            ))
        }
        (AgentAction::Complete, EndRule::Agent) => Some(End::new(
            Termination::FalseCompletion,
            "the agent said it was done".to_owned(),
        )),
        (AgentAction::Submit { answer }, EndRule::Agent) => Some(End::new(
            Termination::FalseCompletion,
            format!("the agent answered {answer:?}"),
        )),
        (AgentAction::Infeasible { reason }, _) => Some(End::new(
            Termination::Infeasible,
            format!("the agent called the task infeasible: {reason}"),
        )),
        _ => None,
    }
}

/// The ending of a run only the agent could end, once the final state was judged: however
/// the agent (or a limit) ended it, the run is a success when every sink, final ones
/// included, holds on that state, as OSWorld scores the state a run ends in. Otherwise the
/// ending stays, with what the failing sinks saw. Failures of the environment, the harness
/// or the model, and interruptions, are never judged; a final check that cannot be made
/// is the evaluator's failure.
fn judge_agent_end(end: End, checked: Result<(), StepError>, evaluator: &Evaluator) -> End {
    if end.termination.is_infrastructure() || end.termination == Termination::AgentError {
        return end;
    }
    if let Err(e) = checked {
        let failed = step_error(e);
        return End::new(
            failed.termination,
            format!(
                "the final check failed: {}",
                failed.detail.unwrap_or_default()
            ),
        );
    }
    if evaluator.is_success() && evaluator.undone_sinks().is_empty() {
        return End::new(Termination::Success, end.detail);
    }
    let failing: Vec<String> = evaluator
        .progress()
        .into_iter()
        .filter(|p| p.passed_at.is_none() || p.held_at_end == Some(false))
        .filter(|p| evaluator.is_sink(&p.id))
        .map(|p| format!("{}: {}", p.id, p.feedback.unwrap_or_default()))
        .collect();
    let detail = match end.detail {
        Some(d) => format!("{d}; on the final state {}", failing.join("; ")),
        None => format!("on the final state {}", failing.join("; ")),
    };
    End::new(end.termination, detail)
}

/// Whatever ends a task while the run is being interrupted (a second Ctrl-C stops the
/// desktops under it) is the interruption, to be redone on --resume; a success stays one.
fn interrupted(end: End, cancelled: bool) -> End {
    if !cancelled || end.termination == Termination::Success {
        return end;
    }
    End::new(
        Termination::Aborted,
        format!(
            "interrupted ({}: {})",
            end.termination,
            end.detail.unwrap_or_default()
        ),
    )
}

/// The ending once the final state was checked (`checked`: how [`Evaluator::finish`]
/// went): a success whose sinks no longer all hold is `undone`, naming them; a success
/// that cannot be confirmed is not scored as one; other endings stay.
fn judge_end(end: End, checked: Result<(), StepError>, evaluator: &Evaluator) -> End {
    match checked {
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
        Err(_) => end,
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
}

/// Carries out an action outside any task run (an MCP client using a desktop freely):
/// through the action class only, as in a run; what went wrong, if anything.
pub(crate) async fn execute_free(
    action: &AgentAction,
    set: &EnvSet,
    marks: &BTreeMap<String, Marks>,
) -> Result<(), String> {
    match execute(
        action,
        set,
        &BTreeMap::new(),
        marks,
        &mut AgentLog::default(),
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(Outcome::Invalid(why)) => Err(why),
        Err(Outcome::End(end)) => Err(end.detail.unwrap_or_else(|| end.termination.to_string())),
    }
}

/// Why an action did not take effect.
enum Outcome {
    /// The agent's fault: an element that does not exist, a key that is not one.
    Invalid(String),
    /// The run is over (the environment failed).
    End(End),
}

/// Most characters of a tool's stdout or stderr the agent is told.
const TOOL_TOLD: usize = 4000;

/// Executes one agent action through the action class only, or an API tool the task
/// declares (`tools`, by role) through the tool class. `Some` is what the agent is told
/// (a tool's status and output).
async fn execute(
    action: &AgentAction,
    set: &EnvSet,
    tools: &BTreeMap<String, Vec<ToolSpec>>,
    marks: &BTreeMap<String, Marks>,
    log: &mut AgentLog,
) -> Result<Option<String>, Outcome> {
    if let AgentAction::Tool { name, arguments } = action {
        return call_tool(name, arguments, set, tools).await.map(Some);
    }
    match action {
        AgentAction::Wait { seconds } => {
            tokio::time::sleep(Duration::from_secs_f64(seconds.clamp(0.0, 10.0))).await;
            log.events.push(AgentEvent::Wait);
            return Ok(None);
        }
        AgentAction::Submit { answer } => {
            log.events.push(AgentEvent::Answer {
                text: answer.clone(),
            });
            return Ok(None);
        }
        AgentAction::Complete => {
            log.events.push(AgentEvent::Done);
            return Ok(None);
        }
        AgentAction::Infeasible { reason } => {
            log.events.push(AgentEvent::Infeasible {
                reason: reason.clone(),
            });
            return Ok(None);
        }
        _ => {}
    }
    let role = action.env().unwrap_or_default();
    let env = set
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
    Ok(None)
}

/// Calls the declared tool `name` with the agent's JSON arguments: each converted to its
/// parameter's type and the whole call checked before the guest is asked (the guest
/// checks again), then run in the guest's sandbox. A tool that fails is told to the agent
/// like one that succeeds; a tool that cannot run is an invalid action.
async fn call_tool(
    name: &str,
    arguments: &BTreeMap<String, serde_json::Value>,
    set: &EnvSet,
    tools: &BTreeMap<String, Vec<ToolSpec>>,
) -> Result<String, Outcome> {
    let found = tools
        .iter()
        .flat_map(|(role, list)| list.iter().map(move |t| (role, t)))
        .find(|(_, t)| t.name == name);
    let Some((role, spec)) = found else {
        let names: Vec<&str> = tools.values().flatten().map(|t| t.name.as_str()).collect();
        return Err(Outcome::Invalid(if names.is_empty() {
            "no API tools are offered here (a task declares them, `pincer run --tools` \
             offers them): act on the screen"
                .into()
        } else {
            format!("no API tool `{name}`; this task's are {}", names.join(", "))
        }));
    };
    let mut args = BTreeMap::new();
    for (k, v) in arguments {
        let p = spec.param(k).ok_or_else(|| {
            Outcome::Invalid(format!(
                "tool {name} has no parameter `{k}`; it takes: {}",
                spec.params
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let value = ToolValue::from_json(p, v).ok_or_else(|| {
            Outcome::Invalid(format!(
                "tool {name}: `{k}` must be a {} (got {v})",
                p.kind.json_type()
            ))
        })?;
        args.insert(k.clone(), value);
    }
    let call = ToolCall {
        spec: spec.clone(),
        args,
    };
    call.argv().map_err(Outcome::Invalid)?;
    let env = set
        .envs
        .get(role)
        .ok_or_else(|| Outcome::Invalid(format!("there is no environment '{role}'")))?;
    let out = match env.tool(call).await {
        Ok(out) => out,
        Err(e) if e.is_environment_failure() => {
            return Err(Outcome::End(End::new(
                Termination::EnvironmentError,
                e.to_string(),
            )));
        }
        Err(e) => return Err(Outcome::Invalid(e.to_string())),
    };
    let text = |b: &[u8]| {
        let s = String::from_utf8_lossy(b);
        let s = s.trim_end();
        match s.char_indices().nth(TOOL_TOLD) {
            Some((i, _)) => format!("{}...", &s[..i]),
            None => s.to_owned(),
        }
    };
    let status = match out.status {
        ExitStatus::Exited(0) => "succeeded".to_owned(),
        ExitStatus::Exited(c) => format!("failed (exit status {c})"),
        ExitStatus::Signaled(sig) => format!("was killed by signal {sig}"),
        ExitStatus::TimedOut => format!("ran past its {} ms and was stopped", spec.timeout_ms),
    };
    let mut said = format!("tool {name} {status}");
    for (what, bytes) in [("output", &out.stdout), ("errors", &out.stderr)] {
        if !bytes.is_empty() {
            said.push_str(&format!("; {what}: {}", text(bytes)));
        }
    }
    Ok(said)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env::ClientError;
    use crate::eval::ProbeResult;
    use crate::eval::functions::Library;
    use crate::eval::graph::ProbeSource;
    use pincer_shared::probe::{FileKind, FileStat, Probe, ProbeReply};
    use std::collections::BTreeSet;
    use std::sync::Mutex;

    /// A desktop whose only state is which files exist; `broken` fails every batch.
    #[derive(Default)]
    struct Files {
        present: Mutex<BTreeSet<String>>,
        broken: bool,
    }

    impl ProbeSource for Files {
        async fn batch(
            &self,
            role: &str,
            probes: Arc<[Probe]>,
        ) -> Result<Vec<ProbeResult>, ClientError> {
            if self.broken {
                return Err(ClientError::Local {
                    env: role.into(),
                    message: "the guest is gone".into(),
                });
            }
            let present = self.present.lock().unwrap();
            Ok(probes
                .iter()
                .map(|p| match p {
                    Probe::Stat { path } => Ok(ProbeReply::Stat(FileStat {
                        path: path.clone(),
                        exists: present.contains(path),
                        kind: present.contains(path).then_some(FileKind::File),
                        target: None,
                        size: 1,
                        mode: 0o644,
                        modified_ms: 0,
                    })),
                    other => panic!("unexpected probe {other:?}"),
                })
                .collect())
        }
    }

    /// A task: `a` then `b` exist (file checks), and an answer of 42.
    fn evaluator() -> Evaluator {
        let task: Task = serde_json::from_value(serde_json::json!({
            "id": "t",
            "instruction": "x",
            "envs": {"desktop": {"platform": "linux"}},
            "checkpoints": [
                {"id": "a", "env": "desktop", "check": "file_exists", "args": {"path": "/a"}},
                {"id": "b", "env": "desktop", "check": "file_exists", "args": {"path": "/b"}, "after": ["a"]},
                {"id": "answer", "check": "answer_equals", "args": {"text": "42"}}
            ]
        }))
        .unwrap();
        Evaluator::new(Arc::new(Graph::build(&task, &Library::standard()).unwrap()))
    }

    fn answered() -> AgentLog {
        AgentLog {
            events: vec![AgentEvent::Answer { text: "42".into() }],
        }
    }

    fn ends(end: &Option<End>) -> Option<Termination> {
        end.as_ref().map(|e| e.termination)
    }

    #[test]
    fn limits_end_the_run_before_the_next_decision() {
        let limits = crate::task::Limits {
            max_steps: 3,
            max_seconds: 10,
        };
        let second = Duration::from_secs(1);
        assert_eq!(ends(&limit_reached(false, 2, second, &limits)), None);
        assert_eq!(
            ends(&limit_reached(false, 3, second, &limits)),
            Some(Termination::StepLimit)
        );
        assert_eq!(
            ends(&limit_reached(false, 0, Duration::from_secs(11), &limits)),
            Some(Termination::TimeLimit)
        );
        // Ctrl-C before any limit.
        assert_eq!(
            ends(&limit_reached(true, 3, second, &limits)),
            Some(Termination::Aborted)
        );
    }

    #[tokio::test]
    async fn an_action_ends_the_run_by_completing_the_graph_or_by_what_the_agent_says() {
        let mut ev = evaluator();
        let click = AgentAction::Wait { seconds: 0.0 };
        assert_eq!(ends(&after_action(&click, &ev, EndRule::Sinks)), None);
        let done = after_action(&AgentAction::Complete, &ev, EndRule::Sinks).unwrap();
        assert_eq!(done.termination, Termination::FalseCompletion);
        assert!(done.detail.unwrap().contains("0 of 3"));
        let gave_up = after_action(
            &AgentAction::Infeasible {
                reason: "no app".into(),
            },
            &ev,
            EndRule::Sinks,
        )
        .unwrap();
        assert_eq!(gave_up.termination, Termination::Infeasible);
        assert!(gave_up.detail.unwrap().contains("no app"));

        let files = Files::default();
        files
            .present
            .lock()
            .unwrap()
            .extend(["/a".into(), "/b".into()]);
        ev.step(1, &files, &answered()).await.unwrap();
        // Complete now: a `done` is no false completion.
        assert_eq!(
            ends(&after_action(&AgentAction::Complete, &ev, EndRule::Sinks)),
            Some(Termination::Success)
        );
    }

    #[test]
    fn an_interruption_replaces_every_ending_but_success() {
        let cut = interrupted(
            End::new(Termination::StepLimit, "3 actions".to_owned()),
            true,
        );
        assert_eq!(cut.termination, Termination::Aborted);
        assert_eq!(
            cut.detail.as_deref(),
            Some("interrupted (step-limit: 3 actions)")
        );
        let kept = interrupted(End::new(Termination::Success, None), true);
        assert_eq!(kept.termination, Termination::Success);
        let calm = interrupted(End::new(Termination::StepLimit, None), false);
        assert_eq!(calm.termination, Termination::StepLimit);
    }

    #[tokio::test]
    async fn the_final_state_decides_success() {
        let files = Files::default();
        files
            .present
            .lock()
            .unwrap()
            .extend(["/a".into(), "/b".into()]);
        let success = || End::new(Termination::Success, None);

        // Everything still holds.
        let mut ev = evaluator();
        ev.step(1, &files, &answered()).await.unwrap();
        let checked = ev.finish(&files, &answered()).await;
        assert_eq!(
            judge_end(success(), checked, &ev).termination,
            Termination::Success
        );

        // `b` (a sink) was removed after it passed: undone, and named.
        let mut ev = evaluator();
        ev.step(1, &files, &answered()).await.unwrap();
        files.present.lock().unwrap().remove("/b");
        let checked = ev.finish(&files, &answered()).await;
        let end = judge_end(success(), checked, &ev);
        assert_eq!(end.termination, Termination::Undone);
        assert!(end.detail.unwrap().starts_with("b: "));

        // A success that cannot be confirmed is not one; other endings stay as they were.
        let gone = Files {
            broken: true,
            ..Files::default()
        };
        let mut ev = evaluator();
        ev.step(1, &files, &answered()).await.unwrap();
        let end = judge_end(success(), ev.finish(&gone, &answered()).await, &ev);
        assert_eq!(end.termination, Termination::EnvironmentError);
        assert!(end.detail.unwrap().starts_with("the final check failed"));
        let limit = End::new(Termination::StepLimit, None);
        let end = judge_end(limit, ev.finish(&gone, &answered()).await, &ev);
        assert_eq!(end.termination, Termination::StepLimit);
    }

    /// Under the agent's rule the graph completing ends nothing; the agent saying it is
    /// done, answering or giving up does, and the final state decides: a success whatever
    /// ended the run when every sink holds, else the ending stays with what failed.
    #[tokio::test]
    async fn under_the_agents_rule_the_agent_ends_and_the_final_state_decides() {
        let files = Files::default();
        files
            .present
            .lock()
            .unwrap()
            .extend(["/a".into(), "/b".into()]);
        let mut ev = evaluator();
        ev.step(1, &files, &answered()).await.unwrap();
        assert!(ev.is_success());
        let click = AgentAction::Wait { seconds: 0.0 };
        assert_eq!(ends(&after_action(&click, &ev, EndRule::Agent)), None);
        assert_eq!(
            ends(&after_action(&click, &ev, EndRule::Sinks)),
            Some(Termination::Success)
        );
        let submit = AgentAction::Submit {
            answer: "42".into(),
        };
        for said in [AgentAction::Complete, submit] {
            let end = after_action(&said, &ev, EndRule::Agent).unwrap();
            let checked = ev.finish(&files, &answered()).await;
            let judged = judge_agent_end(end, checked, &ev);
            assert_eq!(judged.termination, Termination::Success, "{said:?}");
        }
        // A limit reached on a state that holds is scored as that state.
        let limit = End::new(Termination::StepLimit, "15 actions".to_owned());
        let judged = judge_agent_end(limit, ev.finish(&files, &answered()).await, &ev);
        assert_eq!(judged.termination, Termination::Success);

        // Done too early: what the failing sinks saw is said.
        let mut ev = evaluator();
        files.present.lock().unwrap().remove("/b");
        ev.step(1, &files, &answered()).await.unwrap();
        let end = after_action(&AgentAction::Complete, &ev, EndRule::Agent).unwrap();
        let judged = judge_agent_end(end, ev.finish(&files, &answered()).await, &ev);
        assert_eq!(judged.termination, Termination::FalseCompletion);
        let detail = judged.detail.unwrap();
        assert!(
            detail.starts_with("the agent said it was done; on the final state b: "),
            "{detail}"
        );
        // Failures that are not the agent's are never judged.
        for t in [
            Termination::AgentError,
            Termination::EnvironmentError,
            Termination::Aborted,
        ] {
            let end = judge_agent_end(End::new(t, None), Ok(()), &ev);
            assert_eq!(end.termination, t);
        }
    }

    #[test]
    fn unusable_actions_end_the_run_after_three_in_a_row_or_under_crab_the_first() {
        let mut crab = Turn::new(Vec::new(), Some(Compat::Crab));
        assert!(crab.invalid("one".into(), "bad".into()).is_some());
        let mut turn = Turn::new(Vec::new(), None);
        assert!(turn.invalid("one".into(), "bad".into()).is_none());
        assert!(turn.invalid("two".into(), "bad".into()).is_none());
        let end = turn.invalid("three".into(), "bad json".into()).unwrap();
        assert_eq!(end.termination, Termination::InvalidAction);
        assert_eq!(end.detail.as_deref(), Some("bad json"));
        assert_eq!(turn.feedback, ["one", "two", "three"]);
    }

    #[test]
    fn only_what_the_agent_failed_is_tried_again() {
        for t in Termination::ALL {
            let expected = matches!(
                t,
                Termination::Undone
                    | Termination::FalseCompletion
                    | Termination::Infeasible
                    | Termination::StepLimit
                    | Termination::TimeLimit
                    | Termination::InvalidAction
            );
            assert_eq!(worth_retrying(t), expected, "{t}");
        }
    }

    #[tokio::test]
    async fn a_retry_is_told_each_checkpoint_only_with_feedback() {
        let files = Files::default();
        files.present.lock().unwrap().insert("/a".into());
        let mut ev = evaluator();
        ev.step(1, &files, &AgentLog::default()).await.unwrap();
        files.present.lock().unwrap().clear();
        ev.finish(&files, &AgentLog::default()).await.unwrap();
        let rec = TaskRecord {
            task: "t".into(),
            repeat: 0,
            seed: 0,
            agent: "a".into(),
            class: crate::task::PlatformClass::SingleDesktop,
            instruction: "x".into(),
            termination: Termination::StepLimit,
            detail: Some("15 actions".into()),
            passed: 1,
            final_passed: Some(0),
            total: 3,
            actions: 15,
            usage: Usage::default(),
            wall_ms: 1,
            harness_ms_p50: 0.0,
            env_set: "s0".into(),
            progress: ev.progress(),
            trajectory: "tasks/t__r0".into(),
            started_ms: 0,
            final_images: Vec::new(),
            retried: vec![],
            tool_calls: 0,
            score: None,
            compat: None,
        };
        let bare = told_after(&rec, 1, Correction::new(Feedback::None, 3).unwrap());
        assert_eq!(
            bare,
            [
                "attempt 1 of 3 failed (step-limit); the task was set up again from the start: try again"
            ]
        );
        let told = told_after(&rec, 1, Correction::new(Feedback::End, 3).unwrap());
        assert_eq!(told[0], bare[0]);
        assert_eq!(told[1], "how it ended: 15 actions");
        assert!(
            told[2].starts_with("checkpoint 'a': passed at step 1 but no longer holds: "),
            "{told:?}"
        );
        assert!(
            told[3].starts_with("checkpoint 'b' did not pass: "),
            "{told:?}"
        );
        assert!(
            told[4].starts_with("checkpoint 'answer' did not pass: "),
            "{told:?}"
        );
    }

    #[tokio::test]
    async fn step_feedback_names_new_passes_once_and_what_waiting_checkpoints_saw() {
        let files = Files::default();
        let mut ev = evaluator();
        ev.explain_every_step();
        ev.step(1, &files, &AgentLog::default()).await.unwrap();
        let lines = step_feedback(&ev.progress(), 0);
        assert_eq!(lines[0], "checkpoints: 0 of 3 passed");
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("checkpoint 'a' not passed yet: ")),
            "{lines:?}"
        );
        // 'b' waits for 'a': never judged, never shown.
        assert!(!lines.iter().any(|l| l.contains("'b'")), "{lines:?}");
        files.present.lock().unwrap().insert("/a".into());
        ev.step(2, &files, &AgentLog::default()).await.unwrap();
        let lines = step_feedback(&ev.progress(), 1);
        assert_eq!(lines[0], "checkpoints: 1 of 3 passed");
        assert!(
            lines.contains(&"checkpoint 'a' passed".to_owned()),
            "{lines:?}"
        );
        // Shown once: the next decision (after 2 actions) is not told again.
        let lines = step_feedback(&ev.progress(), 2);
        assert!(!lines.iter().any(|l| l.contains("'a'")), "{lines:?}");
    }
}
