//! Task runs driven from outside the runner: the Python package's environments and agents
//! and the MCP server decide each action themselves, while the run itself (setup, the
//! initial check, observing, acting, evaluating, limits, the final check, teardown, the
//! trajectory and the record) is [`super::task::run`], unchanged. The agent of such a run
//! hands each observation out through a channel and waits for the decision to come back.
//!
//! A [`Session`] holds one environment set and a run directory for many episodes, one at a
//! time: what `pincer_bench.PincerEnv` and `pincer mcp` stand on.

use super::launch::{Environments, Signals, Source};
use super::sets::{self, EnvSet};
use super::{RunError, task};
use crate::agent::actions::{Marks, ToolSpec};
use crate::agent::observe::{ObservationConfig, View};
use crate::agent::{Agent, AgentAction, AgentError, Decision, Observation, TaskBrief};
use crate::env::registry::Registry;
use crate::eval::graph::Graph;
use crate::rundir::shard::{self, Hold};
use crate::rundir::{self, JsonlWriter, TaskRecord};
use crate::task::Task;
use futures::future::BoxFuture;
use pincer_shared::Platform;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::{mpsc, oneshot};

/// What the runner sends the outside agent.
enum Msg {
    /// Decide on this observation.
    Act(Observation, oneshot::Sender<Decision>),
    /// The state after the last action, before the final check and teardown.
    Last(Observation),
}

/// The runner's side of an outside agent.
struct Outside {
    name: String,
    to: mpsc::Sender<Msg>,
}

impl Agent for Outside {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn begin(&mut self, _brief: &TaskBrief) -> Result<(), AgentError> {
        Ok(())
    }

    fn act<'a>(&'a mut self, obs: &'a Observation) -> BoxFuture<'a, Result<Decision, AgentError>> {
        Box::pin(async move {
            let gone = || AgentError::Outside("it went away before deciding".into());
            let (reply, decided) = oneshot::channel();
            self.to
                .send(Msg::Act(obs.clone(), reply))
                .await
                .map_err(|_| gone())?;
            decided.await.map_err(|_| gone())
        })
    }

    fn seen_last(&mut self, obs: &Observation) {
        let _ = self.to.try_send(Msg::Last(obs.clone()));
    }
}

/// Where a driven task run is.
#[derive(Debug)]
pub enum Now {
    /// Waiting for the next decision on this observation.
    Act(Box<Observation>),
    /// Over: its record, and what the environments showed after the last action (none if
    /// the run ended before any action was evaluated).
    Ended(Box<TaskRecord>, Option<Box<Observation>>),
}

/// Why a session could not do what it was asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EpisodeError {
    /// The task is the session's but cannot run here (what it needs is missing).
    #[error("task '{id}' cannot run here: {why}")]
    CannotRun {
        /// The task.
        id: String,
        /// Why, as `pincer run` says it when it skips the task.
        why: String,
    },
    /// No task with this id in the session.
    #[error("no task '{id}' here; the tasks are: {known}")]
    NoTask {
        /// The id asked for.
        id: String,
        /// The ids there are.
        known: String,
    },
    /// A step without a task run waiting for one.
    #[error("no task is running: start one first")]
    NotRunning,
    /// The task's roles are not all in the session's environment set.
    #[error("task '{task}' needs roles {needs}; this session's environments play {has}")]
    Roles {
        /// The task.
        task: String,
        /// The roles it needs.
        needs: String,
        /// The roles the set has.
        has: String,
    },
    /// The run could not be set up or written.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The task run's worker stopped abnormally (a bug).
    #[error("the task run stopped abnormally: {0}")]
    Worker(String),
}

/// Progress of a driven run goes nowhere: its caller sees every step.
struct Quiet;

impl task::Progress for Quiet {
    fn status(&self, _set: &str, _task: &str, _text: &str) {}
}

/// One task run driven from outside.
struct Episode {
    from: mpsc::Receiver<Msg>,
    run: tokio::task::JoinHandle<Result<TaskRecord, RunError>>,
    cancel: Arc<AtomicBool>,
    reply: Option<oneshot::Sender<Decision>>,
    last: Option<Observation>,
}

/// A task run's place in a session.
struct Slot {
    task: Arc<Task>,
    graph: Arc<Graph>,
    repeat: u32,
    seed: u64,
}

impl Episode {
    fn start(
        slot: Slot,
        set: EnvSet,
        observation: ObservationConfig,
        out: PathBuf,
        agent: String,
        cancel: Arc<AtomicBool>,
        assets: PathBuf,
    ) -> Self {
        let (to, from) = mpsc::channel(2);
        let stop = cancel.clone();
        let run = tokio::spawn(async move {
            let mut agent = Outside { name: agent, to };
            let ctx = task::Context {
                compat: None,
                end: None,
                assets: Some(&assets),
                set: &set,
                observation,
                correction: Default::default(),
                out: &out,
                cancel: &stop,
                progress: &Quiet,
                video: None,
            };
            task::run(
                &slot.task,
                slot.graph,
                &mut agent,
                slot.repeat,
                slot.seed,
                &ctx,
            )
            .await
        });
        Self {
            from,
            run,
            cancel,
            reply: None,
            last: None,
        }
    }

    /// Waits until the run asks for a decision or ends.
    async fn next(&mut self) -> Result<Now, EpisodeError> {
        loop {
            match self.from.recv().await {
                Some(Msg::Act(obs, reply)) => {
                    self.reply = Some(reply);
                    return Ok(Now::Act(Box::new(obs)));
                }
                Some(Msg::Last(obs)) => self.last = Some(obs),
                None => {
                    let rec = (&mut self.run)
                        .await
                        .map_err(|e| EpisodeError::Worker(e.to_string()))?
                        .map_err(EpisodeError::Run)?;
                    return Ok(Now::Ended(Box::new(rec), self.last.take().map(Box::new)));
                }
            }
        }
    }

    async fn step(&mut self, decision: Decision) -> Result<Now, EpisodeError> {
        let reply = self.reply.take().ok_or(EpisodeError::NotRunning)?;
        // A run that ended meanwhile (a time limit) says so through `next`.
        let _ = reply.send(decision);
        self.next().await
    }

    /// Ends the run as aborted (the current step finishes, the final check and teardown
    /// run); its record.
    async fn abort(mut self) -> Result<TaskRecord, EpisodeError> {
        self.cancel.store(true, Ordering::SeqCst);
        self.reply = None;
        loop {
            if let Now::Ended(rec, _) = self.next().await? {
                return Ok(*rec);
            }
            self.reply = None;
        }
    }
}

/// What a session runs.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The tasks episodes can be started on.
    pub tasks: Vec<Task>,
    /// Where its environments come from (one set: a count is taken as 1).
    pub envs: Source,
    /// What the agent is shown.
    pub observation: ObservationConfig,
    /// The run directory (results, trajectories, report); a session continues one of the
    /// same agent, tasks and observation.
    pub out: PathBuf,
    /// The agent's name in results ("python", "mcp").
    pub agent: String,
    /// The asset cache imported tasks' files come from (OSWorld's file cache, `--assets`).
    pub assets: PathBuf,
    /// Whether tasks that need the live web may start (`--allow-network`; the run records it).
    pub allow_network: bool,
}

/// One environment set, a run directory, and one driven task run at a time.
pub struct Session {
    set: EnvSet,
    /// What the session started, stopped on close or drop.
    envs: Option<Environments>,
    tasks: Vec<Arc<Task>>,
    graphs: Vec<Arc<Graph>>,
    /// Tasks left out because they cannot run here, each with why.
    skipped: Vec<(String, String)>,
    assets: PathBuf,
    observation: ObservationConfig,
    out: PathBuf,
    agent: String,
    results: JsonlWriter,
    /// Task runs recorded per task, so each episode gets its own trajectory.
    repeats: BTreeMap<String, u32>,
    running: Option<(usize, Episode)>,
    /// Set to interrupt the running task (it finishes its current action and ends
    /// aborted); cleared when a task starts.
    cancel: Arc<AtomicBool>,
    /// The run directory's lock, held while the session is open.
    _hold: Hold,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("set", &self.set.name)
            .field("tasks", &self.tasks.len())
            .field("out", &self.out)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Validates the tasks, lays out (or continues) the run directory and brings up the
    /// environments: local desktops for every Linux role the tasks have, or named ones.
    pub async fn open(reg: Registry, mut cfg: SessionConfig) -> Result<Self, RunError> {
        // Tasks that cannot run here are said and left out, as `pincer run` leaves them.
        let (tasks, skipped) = crate::peers::runnable(
            std::mem::take(&mut cfg.tasks),
            &cfg.assets,
            cfg.allow_network,
            &cfg.envs.machine(),
        );
        cfg.tasks = tasks;
        if !skipped.is_empty() {
            eprintln!(
                "  leaving out {} tasks that cannot run here:",
                skipped.len()
            );
            for (id, why) in &skipped {
                eprintln!("    {id}: {why}");
            }
        }
        if cfg.tasks.is_empty() {
            return Err(RunError::NothingToRun(skipped.len()));
        }
        let graphs = super::prepare(&cfg.tasks, &crate::peers::library(&cfg.assets))?;
        let mut identity = rundir::Identity::new(
            &cfg.agent,
            &cfg.tasks,
            1,
            0,
            None,
            cfg.observation,
            Default::default(),
        );
        identity.network = cfg.allow_network;
        super::found(&cfg.out, true, &identity, &cfg.tasks)?;
        // One process writes a run directory: repeats and trajectories are numbered here.
        let hold = Hold::take(&cfg.out, None)?;
        let previous = shard::read_all(&cfg.out)
            .map_err(super::io(format!("reading {}", cfg.out.display())))?;
        let mut repeats = BTreeMap::new();
        for r in &previous {
            let n = repeats.entry(r.task.clone()).or_insert(0);
            *n = (*n).max(r.repeat + 1);
        }
        let results_path = rundir::results_file(&cfg.out);
        let results = JsonlWriter::append(&results_path)
            .map_err(super::io(format!("opening {}", results_path.display())))?;
        let refs: Vec<&Task> = cfg.tasks.iter().collect();
        let roles = sets::roles_needed(&refs)?;
        let source = match cfg.envs {
            Source::Local { size, session, .. } => Source::Local {
                count: 1,
                size,
                session,
            },
            Source::Vm { plan, .. } => Source::Vm { plan, count: 1 },
            other => other,
        };
        // A session that offers API tools starts its desktops serving them; the caller
        // interrupts a running task through the session's own flag.
        let cancel = Arc::new(AtomicBool::new(false));
        let envs = Environments::start(
            &reg,
            &source,
            &roles,
            cfg.observation.tools,
            Signals::Caller(cancel.clone()),
            &|m| eprintln!("  {m}"),
        )
        .await?;
        let Some(set) = envs.sets.first().cloned() else {
            return Err(RunError::BadSet {
                spec: format!("{source:?}"),
                problem: "it names no environment set".into(),
            });
        };
        Ok(Self {
            set,
            envs: Some(envs),
            tasks: cfg.tasks.into_iter().map(Arc::new).collect(),
            graphs,
            skipped,
            assets: cfg.assets,
            observation: cfg.observation,
            out: cfg.out,
            agent: cfg.agent,
            results,
            repeats,
            running: None,
            cancel,
            _hold: hold,
        })
    }

    /// The tasks episodes can start on.
    pub fn tasks(&self) -> impl Iterator<Item = &Task> {
        self.tasks.iter().map(AsRef::as_ref)
    }

    /// The tasks left out because they cannot run here, each with why.
    pub fn left_out(&self) -> &[(String, String)] {
        &self.skipped
    }

    /// The run directory.
    pub fn out(&self) -> &Path {
        &self.out
    }

    /// Every role of the environment set, with its platform.
    pub fn platforms(&self) -> &BTreeMap<String, Platform> {
        &self.set.platforms
    }

    /// The session's observation settings.
    pub fn observation(&self) -> ObservationConfig {
        self.observation
    }

    /// A view of one environment outside any task run (what `pincer mcp` shows before a
    /// task starts), with only the parts `cfg` asks for.
    pub async fn view(&self, role: &str, cfg: &ObservationConfig) -> Result<View, String> {
        let (Some(env), Some(platform)) = (self.set.envs.get(role), self.set.platforms.get(role))
        else {
            return Err(format!(
                "there is no environment '{role}'; the roles are {}",
                self.set.envs.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        };
        crate::observe::view(env, role, *platform, cfg)
            .await
            .map_err(|e| e.to_string())
    }

    /// Carries out an action outside any task run, through the action class only; element
    /// numbers refer to `marks` (the last view's).
    pub async fn act_free(
        &self,
        action: &AgentAction,
        marks: &BTreeMap<String, Marks>,
    ) -> Result<(), String> {
        task::execute_free(action, &self.set, marks).await
    }

    /// The flag that interrupts the running task, for a caller waiting on [`Self::start`]
    /// or [`Self::step`] from elsewhere (Ctrl-C in Python): the task run finishes its
    /// current action and ends aborted.
    pub fn interrupter(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// The running task, if one is.
    pub fn running(&self) -> Option<&Task> {
        self.running.as_ref().map(|(i, _)| self.tasks[*i].as_ref())
    }

    /// The roles (and platforms) of the running task: what actions may name.
    pub fn roles(&self) -> BTreeMap<String, Platform> {
        self.running()
            .map(|t| {
                t.envs
                    .iter()
                    .map(|(r, n)| (r.clone(), n.platform))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Starts a task run (a running one is aborted first): setup, the initial check, the
    /// first observation.
    pub async fn start(&mut self, id: &str, seed: u64) -> Result<Now, EpisodeError> {
        let Some(i) = self.tasks.iter().position(|t| t.id == id) else {
            if let Some((_, why)) = self.skipped.iter().find(|(t, _)| t == id) {
                return Err(EpisodeError::CannotRun {
                    id: id.to_owned(),
                    why: why.clone(),
                });
            }
            return Err(EpisodeError::NoTask {
                id: id.to_owned(),
                known: self
                    .tasks
                    .iter()
                    .map(|t| t.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        if !self.set.fits(&self.tasks[i]) {
            return Err(EpisodeError::Roles {
                task: id.to_owned(),
                needs: self.tasks[i]
                    .envs
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
                has: self.set.envs.keys().cloned().collect::<Vec<_>>().join(", "),
            });
        }
        // Only a start that can happen ends the running task.
        self.abort().await?;
        self.cancel.store(false, Ordering::SeqCst);
        let repeat = self.repeats.get(id).copied().unwrap_or(0);
        self.repeats.insert(id.to_owned(), repeat + 1);
        let slot = Slot {
            task: self.tasks[i].clone(),
            graph: self.graphs[i].clone(),
            repeat,
            seed,
        };
        let episode = Episode::start(
            slot,
            self.set.clone(),
            self.observation,
            self.out.clone(),
            self.agent.clone(),
            self.cancel.clone(),
            self.assets.clone(),
        );
        self.running = Some((i, episode));
        self.next().await
    }

    /// Hands the running task its next decision; what follows.
    pub async fn step(&mut self, decision: Decision) -> Result<Now, EpisodeError> {
        let (_, episode) = self.running.as_mut().ok_or(EpisodeError::NotRunning)?;
        let now = episode.step(decision).await;
        self.settle(now)
    }

    /// One action as the decision.
    pub async fn act(&mut self, action: AgentAction) -> Result<Now, EpisodeError> {
        self.step(Decision {
            actions: vec![action],
            ..Decision::default()
        })
        .await
    }

    async fn next(&mut self) -> Result<Now, EpisodeError> {
        let (_, episode) = self.running.as_mut().ok_or(EpisodeError::NotRunning)?;
        let now = episode.next().await;
        self.settle(now)
    }

    /// Records a run that ended.
    fn settle(&mut self, now: Result<Now, EpisodeError>) -> Result<Now, EpisodeError> {
        if !matches!(now, Ok(Now::Act(_))) {
            self.running = None;
        }
        if let Ok(Now::Ended(rec, _)) = &now {
            self.record(rec)?;
        }
        now
    }

    fn record(&mut self, rec: &TaskRecord) -> Result<(), EpisodeError> {
        let path = self.results.path().to_owned();
        task::blocking(|| self.results.write(rec))
            .map_err(|e| RunError::Io {
                what: format!("appending to {}", path.display()),
                source: e,
            })
            .map_err(EpisodeError::Run)
    }

    /// Ends the running task, if any, as aborted, and records it.
    pub async fn abort(&mut self) -> Result<Option<TaskRecord>, EpisodeError> {
        let Some((_, episode)) = self.running.take() else {
            return Ok(None);
        };
        let rec = episode.abort().await?;
        self.record(&rec)?;
        Ok(Some(rec))
    }

    /// Aborts what runs and stops the environments the session started (once: closing
    /// again does nothing more).
    pub async fn close(&mut self) -> Result<(), EpisodeError> {
        let aborted = self.abort().await;
        if let Some(envs) = self.envs.take() {
            envs.stop().await;
        }
        aborted.map(|_| ())
    }
}

/// The API tools a task run offers its agent, as agents see them (`api_NAME`, its
/// parameters as JSON Schema): the task's declared tools when `observation` offers tools
/// (`tools=True`, `pincer mcp --tools`), else none, as in `pincer run`.
pub fn api_tools(observation: &ObservationConfig, task: &Task) -> Vec<ToolSpec> {
    if observation.tools {
        crate::agent::actions::api_tools(task.tools.values().flatten())
    } else {
        Vec::new()
    }
}

/// An observation as JSON, for callers outside the runner, without the images (which they
/// take as bytes): the step, feedback on the last actions, and per role its platform,
/// sizes, marked elements and tree text.
pub fn observation_json(obs: &Observation) -> serde_json::Value {
    let views: serde_json::Map<String, serde_json::Value> = obs
        .views
        .iter()
        .map(|v| {
            (
                v.role.clone(),
                serde_json::json!({
                    "platform": v.platform,
                    "screen": [v.screen.0, v.screen.1],
                    "image_size": [v.image_size.0, v.image_size.1],
                    "elements": v.elements,
                    "tree": v.tree_text,
                }),
            )
        })
        .collect();
    serde_json::json!({
        "step": obs.step,
        "feedback": obs.feedback,
        "views": views,
    })
}

/// Each checkpoint's state and its latest feedback, in the task's order: what the
/// evaluator knows, kept out of the observation (pincer's agents are not shown the grader)
/// and given to callers beside it (Gymnasium's `info`, `task_status`).
pub fn checkpoints_json(obs: &Observation) -> serde_json::Value {
    obs.checkpoints
        .iter()
        .map(|(id, passed)| {
            serde_json::json!({
                "id": id,
                "passed": passed,
                "feedback": obs.checkpoint_feedback.get(id),
            })
        })
        .collect()
}
