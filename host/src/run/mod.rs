//! The benchmark runner: many tasks over many environment sets in parallel, with repeats
//! and seeds, append-only results (`--resume` skips finished runs), trajectories, Ctrl-C
//! that finishes the current step and records `aborted`, progress bars with live SR/CR, and
//! a summary table at the end.

pub mod episode;
pub mod kube;
pub mod launch;
pub mod replay;
pub mod sets;
pub mod slurm;
pub mod task;

use crate::agent::{Agent, AgentError};
use crate::desktop::DesktopError;
use crate::env::registry::{ConnectError, RegistryError};
use crate::eval::functions::Library;
use crate::eval::graph::Graph;
use crate::metrics::{Summary, Termination};
use crate::rundir::shard;
use crate::rundir::{self, DirError, JsonlWriter, RunHeader, TaskRecord};
use crate::task::Task;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use sets::EnvSet;
use std::collections::{BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// Makes a fresh agent for a worker (each set has its own).
pub type AgentFactory = Arc<dyn Fn(u64) -> Result<Box<dyn Agent>, AgentError> + Send + Sync>;

/// Why a run could not start or carry on. Failures inside one task run are not errors of
/// the run: they are recorded with that task run's termination.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Tasks that do not validate; nothing ran.
    #[error("{} invalid tasks:\n{}", .0.len(), .0.join("\n"))]
    InvalidTasks(Vec<String>),
    /// The run directory cannot be used: another run's, used, held, or unwritable.
    #[error(transparent)]
    Dir(#[from] DirError),
    /// A run option that cannot work.
    #[error("{0}")]
    BadOption(String),
    /// Every task was left out as not runnable here (each said why).
    #[error("none of the tasks can run here ({0} skipped, each with why above)")]
    NothingToRun(usize),
    /// A shard on registered environments.
    #[error(
        "--shard with --set: every shard needs environments of its own, and --set names environments of one machine; let each shard start local desktops or --vm VMs"
    )]
    ShardOnNamed,
    /// No environment set can run a task.
    #[error("no environment set has the roles task '{task}' needs ({})", roles.join(", "))]
    NoSetFits {
        /// The task.
        task: String,
        /// Its roles.
        roles: Vec<String>,
    },
    /// Two tasks give one role different platforms.
    #[error("role '{role}' is {one} in one task and {other} in task '{task}'")]
    RoleConflict {
        /// The role.
        role: String,
        /// Its platform in an earlier task.
        one: pincer_shared::Platform,
        /// Its platform in `task`.
        other: pincer_shared::Platform,
        /// The task.
        task: String,
    },
    /// A role no local desktop can play.
    #[error(
        "the tasks need '{0}', which is not a Linux desktop: give environments with --set {0}=NAME"
    )]
    NotLocal(String),
    /// A `--set` specification that cannot be used.
    #[error("--set '{spec}': {problem}")]
    BadSet {
        /// The specification as given.
        spec: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A VM for the run did not start.
    #[error("starting VM '{name}' for role '{role}': {source}")]
    Vm {
        /// The VM.
        name: String,
        /// Its role.
        role: String,
        /// Why (boxed: VM errors are large, and rare).
        #[source]
        source: Box<crate::vm::VmError>,
    },
    /// A local desktop for the run did not start.
    #[error("starting local desktop '{name}' for role '{role}': {source}")]
    Desktop {
        /// The desktop.
        name: String,
        /// Its role.
        role: String,
        /// Why (boxed: desktop errors are large, and rare).
        #[source]
        source: Box<DesktopError>,
    },
    /// An environment of a set could not be reached.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The envs file.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// An agent could not be made.
    #[error("making the agent: {0}")]
    Agent(#[from] AgentError),
    /// Writing the run directory failed.
    #[error("{what}: {source}{}", if_full(source))]
    Io {
        /// What was being written.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A worker of the run stopped abnormally (a bug).
    #[error("a worker failed: {0}")]
    Worker(String),
}

/// What to do when the run directory's disk is full: the task runs recorded so far are
/// kept, and the run goes on from there.
fn if_full(e: &std::io::Error) -> &'static str {
    if e.kind() == std::io::ErrorKind::StorageFull {
        "; the run directory's disk is full: free space there, then run the same command with --resume to go on (the task runs already recorded are kept, the rest run)"
    } else {
        ""
    }
}

/// Maps an OS error to [`RunError::Io`] saying what was being written.
pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RunError {
    let what = what.into();
    move |source| RunError::Io { what, source }
}

/// What to run.
pub struct RunConfig {
    /// Tasks.
    pub tasks: Vec<Task>,
    /// Makes agents, given a seed.
    pub agent: AgentFactory,
    /// Agent name for the run header.
    pub agent_name: String,
    /// Environment sets (one worker each).
    pub sets: Vec<EnvSet>,
    /// How the run goes: repeats, seed, run directory, resume, shard, what agents see and
    /// are told, video.
    pub options: launch::RunOptions,
    /// Set on Ctrl-C.
    pub cancel: Arc<AtomicBool>,
}

impl std::fmt::Debug for RunConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunConfig")
            .field("tasks", &self.tasks.len())
            .field("agent", &self.agent_name)
            .field("sets", &self.sets.len())
            .finish_non_exhaustive()
    }
}

/// Progress display: bars on a terminal, lines otherwise.
struct Display {
    multi: MultiProgress,
    overall: ProgressBar,
    per_set: Vec<(String, ProgressBar)>,
    tty: bool,
}

impl task::Progress for Display {
    fn status(&self, set: &str, task: &str, text: &str) {
        if let Some((_, bar)) = self.per_set.iter().find(|(s, _)| s == set) {
            bar.set_message(format!("{task}: {text}"));
        }
    }
}

impl Display {
    fn new(total: u64, sets: &[EnvSet]) -> Self {
        let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let multi = if tty {
            MultiProgress::new()
        } else {
            MultiProgress::with_draw_target(indicatif::ProgressDrawTarget::hidden())
        };
        let overall = multi.add(ProgressBar::new(total));
        overall.set_style(
            ProgressStyle::with_template(
                "{bar:30.cyan/blue} {pos}/{len} tasks {elapsed_precise} {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let per_set = sets
            .iter()
            .map(|s| {
                let b = multi.add(ProgressBar::new_spinner());
                b.set_style(
                    ProgressStyle::with_template("  {prefix} {spinner} {wide_msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                b.set_prefix(s.name.clone());
                b.enable_steady_tick(std::time::Duration::from_millis(200));
                (s.name.clone(), b)
            })
            .collect();
        Self {
            multi,
            overall,
            per_set,
            tty,
        }
    }

    fn finished(&self, rec: &TaskRecord, all: &[TaskRecord]) {
        let s = Summary::of(all.iter().map(|r| r.outcome()).collect::<Vec<_>>().iter());
        self.overall.set_message(format!(
            "SR {:.0}%  CR {:.0}%",
            s.success_rate * 100.0,
            s.completion * 100.0
        ));
        self.overall.inc(1);
        let line = format!(
            "{:<7} {:<40} {:<17} {}/{} checkpoints, {} actions, {:.1} s{}",
            rec.env_set,
            rec.task,
            rec.termination.to_string(),
            rec.passed,
            rec.total,
            rec.actions,
            rec.wall_ms as f64 / 1000.0,
            rec.detail
                .as_deref()
                .filter(|_| rec.termination != Termination::Success)
                .map(|d| format!(" ({})", d.chars().take(100).collect::<String>()))
                .unwrap_or_default()
        );
        if self.tty {
            let _ = self.multi.println(line);
        } else {
            eprintln!("{line}");
        }
    }

    fn again(&self, rec: &TaskRecord) {
        let line = format!(
            "{:<7} {:<40} environment error ({}); the set answers again: running it once more",
            rec.env_set,
            rec.task,
            rec.detail
                .as_deref()
                .unwrap_or_default()
                .chars()
                .take(100)
                .collect::<String>()
        );
        if self.tty {
            let _ = self.multi.println(line);
        } else {
            eprintln!("{line}");
        }
    }

    fn retired(&self, set: &str) {
        let line = format!(
            "{set}: an environment of this set is gone; its remaining tasks go to the other sets"
        );
        if self.tty {
            let _ = self.multi.println(line);
        } else {
            eprintln!("{line}");
        }
    }

    fn close(&self) {
        for (_, b) in &self.per_set {
            b.finish_and_clear();
        }
        self.overall.finish();
    }
}

/// Whether every environment of a set answers (reconnecting for a few seconds, as a
/// restarted agent needs).
async fn healthy(set: &EnvSet) -> bool {
    for env in set.envs.values() {
        let mut ok = false;
        for _ in 0..3 {
            if env.ping().await.is_ok() {
                ok = true;
                break;
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
        if !ok {
            return false;
        }
    }
    true
}

/// Restarts every VM of a set from its golden state; whether they all answer again.
async fn replaced(set: &EnvSet) -> bool {
    if set.vms.is_empty() {
        return false;
    }
    for vm in set.vms.values() {
        if let Err(e) = crate::vm::reset(vm).await {
            eprintln!("{}: VM {vm} could not be replaced: {e}", set.name);
            return false;
        }
    }
    for env in set.envs.values() {
        env.close();
    }
    healthy(set).await
}

/// Validates every task before anything runs; returns the built graphs.
pub fn prepare(tasks: &[Task], lib: &Library) -> Result<Vec<Arc<Graph>>, RunError> {
    let mut graphs = Vec::new();
    let mut errors = Vec::new();
    for t in tasks {
        match Graph::check_task(t, lib) {
            Ok(g) => graphs.push(Arc::new(g)),
            Err(e) => errors.push(e.to_string()),
        }
    }
    if !errors.is_empty() {
        return Err(RunError::InvalidTasks(errors));
    }
    Ok(graphs)
}

/// Lays out a sharded run for its shards to join: the header and the tasks, written once
/// (checked against the directory's run when resuming), before any shard is submitted.
pub fn found(
    out: &std::path::Path,
    resume: bool,
    identity: &rundir::Identity,
    tasks: &[Task],
) -> Result<(), RunError> {
    shard::check_out(out, resume, None, identity)?;
    std::fs::create_dir_all(out).map_err(io(format!("creating {}", out.display())))?;
    RunHeader::new(identity.clone()).claim(out)?;
    Ok(rundir::write_tasks(out, tasks, false)?)
}

/// Runs everything (or one shard's share); returns every record of this run's (or shard's)
/// results file, earlier ones included when resuming.
pub async fn run(cfg: RunConfig) -> Result<Vec<TaskRecord>, RunError> {
    std::fs::create_dir_all(&cfg.options.out)
        .map_err(io(format!("creating {}", cfg.options.out.display())))?;
    let results_path = shard::results_path(&cfg.options.out, cfg.options.shard);
    let sets: Vec<(String, Vec<String>)> = cfg
        .sets
        .iter()
        .map(|s| (s.name.clone(), s.envs.keys().cloned().collect()))
        .collect();
    let identity = cfg.options.identity(&cfg.agent_name, &cfg.tasks);
    let header = RunHeader { identity, sets };
    shard::check_out(
        &cfg.options.out,
        cfg.options.resume,
        cfg.options.shard,
        &header.identity,
    )?;
    // A shard writes the header only if it is the first; a resumed run must be this run.
    if cfg.options.shard.is_some() || cfg.options.resume {
        header.claim(&cfg.options.out)?;
    }
    let hold = shard::Hold::take(&cfg.options.out, cfg.options.shard)?;
    if cfg.options.shard.is_none() {
        header.write(&cfg.options.out)?;
    }
    rundir::write_tasks(&cfg.options.out, &cfg.tasks, cfg.options.shard.is_none())?;
    let previous = if cfg.options.resume {
        rundir::read_results(&results_path)
            .map_err(io(format!("reading {}", results_path.display())))?
    } else {
        Vec::new()
    };
    // Aborted runs are redone on resume; everything else that finished, by any shard, stays.
    let done = if cfg.options.resume {
        shard::finished(
            &shard::read_all(&cfg.options.out)
                .map_err(io(format!("reading {}", cfg.options.out.display())))?,
        )
    } else {
        BTreeSet::new()
    };
    let graphs = prepare(&cfg.tasks, &crate::peers::library(&cfg.options.assets))?;
    let mut queue: VecDeque<(usize, u32)> = VecDeque::new();
    let mut share = 0;
    let mut nth = 0;
    for r in 0..cfg.options.repeat.max(1) {
        for (i, t) in cfg.tasks.iter().enumerate() {
            let mine = cfg.options.shard.is_none_or(|s| s.owns(nth));
            nth += 1;
            if !mine {
                continue;
            }
            share += 1;
            if !done.contains(&(t.id.clone(), r)) {
                queue.push_back((i, r));
            }
        }
    }
    for (i, _) in &queue {
        let t = &cfg.tasks[*i];
        if !cfg.sets.iter().any(|s| s.fits(t)) {
            return Err(RunError::NoSetFits {
                task: t.id.clone(),
                roles: t.envs.keys().cloned().collect(),
            });
        }
    }
    let skipped = share - queue.len();
    if skipped > 0 {
        eprintln!(
            "resuming: {skipped} task runs already finished, {} to go",
            queue.len()
        );
    }

    let display = Arc::new(Display::new(queue.len() as u64, &cfg.sets));
    let queue = Arc::new(Mutex::new(queue));
    let writer = Arc::new(Mutex::new(
        JsonlWriter::append(&results_path)
            .map_err(io(format!("opening {}", results_path.display())))?,
    ));
    let all = Arc::new(Mutex::new(previous));
    let cfg = Arc::new(cfg);
    let tasks: Arc<Vec<Task>> = Arc::new(cfg.tasks.clone());
    let graphs = Arc::new(graphs);
    let mut workers = Vec::new();
    for set in cfg.sets.iter().cloned() {
        let (queue, writer, all, cfg, tasks, graphs, display) = (
            queue.clone(),
            writer.clone(),
            all.clone(),
            cfg.clone(),
            tasks.clone(),
            graphs.clone(),
            display.clone(),
        );
        workers.push(tokio::spawn(async move {
            loop {
                if cfg.cancel.load(Ordering::SeqCst) {
                    return Ok::<(), RunError>(());
                }
                // Take the next task this set can run.
                let next = {
                    let mut q = queue.lock().unwrap_or_else(|e| e.into_inner());
                    let pos = q.iter().position(|(i, _)| set.fits(&tasks[*i]));
                    pos.and_then(|p| q.remove(p))
                };
                let Some((i, r)) = next else { return Ok(()) };
                // The seed depends on the repeat only, never on which set runs it, so a
                // run is reproducible whatever --parallel is.
                let seed = cfg.options.seed.wrapping_add(u64::from(r));
                // A run that loses its environment is run once more from its setup when
                // the set answers again on its own (an agent its service restarted): both
                // records are kept, and the later one counts. A set that had to be
                // replaced (a VM reset from its golden state) goes on with its next task.
                let mut again = true;
                loop {
                    let mut agent = (cfg.agent)(seed)?;
                    let ctx = task::Context {
                        compat: cfg.options.compat,
                        end: cfg.options.end,
                        assets: Some(&cfg.options.assets),
                        set: &set,
                        observation: cfg.options.observation,
                        correction: cfg.options.correction,
                        out: &cfg.options.out,
                        cancel: &cfg.cancel,
                        progress: display.as_ref(),
                        video: cfg.options.video,
                    };
                    let rec =
                        task::run(&tasks[i], graphs[i].clone(), agent.as_mut(), r, seed, &ctx)
                            .await?;
                    task::blocking(|| writer.lock().unwrap_or_else(|e| e.into_inner()).write(&rec))
                        .map_err(io("appending to results.jsonl"))?;
                    let env_failed = rec.termination == Termination::EnvironmentError;
                    all.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(rec.clone());
                    // A set whose environment died hands its remaining tasks to the others;
                    // a dead VM is replaced first (a reset starts it again from its golden
                    // state).
                    let answers = env_failed && healthy(&set).await;
                    if answers && again && !cfg.cancel.load(Ordering::SeqCst) {
                        again = false;
                        display.again(&rec);
                        continue;
                    }
                    let all = rundir::latest(all.lock().unwrap_or_else(|e| e.into_inner()).clone());
                    display.finished(&rec, &all);
                    if env_failed && !answers && !replaced(&set).await {
                        display.retired(&set.name);
                        return Ok(());
                    }
                    break;
                }
            }
        }));
    }
    let mut first_error = None;
    for w in workers {
        match w.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => first_error = first_error.or(Some(e)),
            Err(e) => first_error = first_error.or(Some(RunError::Worker(e.to_string()))),
        }
    }
    display.close();
    if let Some(e) = first_error {
        return Err(e);
    }
    let left = queue.lock().unwrap_or_else(|e| e.into_inner()).len();
    let cancelled = cfg.cancel.load(Ordering::SeqCst);
    if left > 0 && !cancelled {
        eprintln!(
            "{left} task runs were not run: every environment set that could run them failed; fix the environments and continue with --resume"
        );
    }
    let all = rundir::latest(all.lock().unwrap_or_else(|e| e.into_inner()).clone());
    let finished = shard::finished(&all).len();
    if finished >= share && !cancelled {
        hold.done(finished)?;
    }
    Ok(all)
}

/// The summary table printed at the end of a run.
pub fn summary_table(records: &[TaskRecord]) -> String {
    use std::fmt::Write;
    let outcomes: Vec<_> = records.iter().map(TaskRecord::outcome).collect();
    let by = Summary::by_class(&outcomes);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<18} {:>5} {:>6} {:>7} {:>7} {:>9} {:>7} {:>8} {:>9}",
        "platform", "runs", "scored", "SR", "CR", "EE", "steps", "wall s", "SR sd"
    );
    // Classes first, "all" last.
    let rows = by
        .iter()
        .filter(|(c, _)| *c != "all")
        .chain(by.iter().filter(|(c, _)| *c == "all"));
    for (class, s) in rows {
        let _ = writeln!(
            out,
            "{:<18} {:>5} {:>6} {:>6.1}% {:>6.1}% {:>9.4} {:>7.1} {:>8.1} {:>9.3}",
            class,
            s.runs,
            s.scored,
            s.success_rate * 100.0,
            s.completion * 100.0,
            s.execution_efficiency,
            s.steps,
            s.wall_s,
            s.success_by_seed.sd
        );
    }
    if let Some(all) = by.get("all") {
        let ends: Vec<String> = all
            .terminations
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        let _ = writeln!(out, "terminations: {}", ends.join(", "));
    }
    if let Some(line) = rundir::compat_summary(records) {
        let _ = writeln!(out, "{line}");
    }
    let attempts = records.iter().map(TaskRecord::attempt).max().unwrap_or(1);
    if attempts > 1 {
        let ends: Vec<_> = records
            .iter()
            .map(|r| (r.termination, r.attempt()))
            .collect();
        let rates: Vec<String> = crate::metrics::success_by_attempt(&ends, attempts)
            .iter()
            .enumerate()
            .map(|(k, r)| format!("{}: {:.1}%", k + 1, r * 100.0))
            .collect();
        let _ = writeln!(out, "success by attempt: {}", rates.join(", "));
    }
    let mut harness: Vec<f64> = records
        .iter()
        .map(|r| r.harness_ms_p50)
        .filter(|v| *v > 0.0)
        .collect();
    harness.sort_by(f64::total_cmp);
    if let Some(m) = harness.get(harness.len() / 2) {
        let _ = writeln!(
            out,
            "harness overhead per step (observe + marks + evaluate; median of task medians): {m:.1} ms"
        );
    }
    out
}
