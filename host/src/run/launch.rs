//! Launching a run: the one place that turns "these tasks, this agent, environments from
//! there" into environments started, a run directory checked out, the runner run, and
//! everything the launch started stopped again, whatever happens. `pincer run`, `replay`,
//! `mcp`, `record`, `demo`, `dataset ground`, the Python package and the MCP server all
//! come through here, so a run option exists once and every front-end gets it.
//!
//! [`Environments`] is the guard: it owns the environment sets, what was started for them
//! (local desktops, VMs), the cancel flag and the signal policy, and it stops what it
//! started on [`Environments::stop`] or, failing that, when it is dropped. Under it, the
//! lifeline (`desktop::lifeline`) stops them if the whole process dies. [`Launch`] is a
//! whole benchmark run on top of it.

use super::sets::{self, EnvSet, Made};
use super::{AgentFactory, RunConfig, RunError};
use crate::agent::correction::Correction;
use crate::agent::observe::ObservationConfig;
use crate::env::registry::Registry;
use crate::rundir::shard::{self, Shard};
use crate::rundir::{Identity, TaskRecord};
use crate::task::compat::Compat;
use crate::task::{EndRule, Task};
use pincer_shared::Platform;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

pub use crate::desktop::Session as DesktopSession;
pub use sets::VmPlan;

/// Where a launch's environments come from.
#[derive(Debug, Clone)]
pub enum Source {
    /// Registered environments (the envs file), one set per `ROLE=ENV,...`.
    Named(Vec<String>),
    /// Local desktops started for the launch: `count` sets of the Linux roles the tasks
    /// need, at `size`, in `session`. They end with the launch, and with the process if it
    /// dies.
    Local {
        /// Environment sets.
        count: usize,
        /// Screen size.
        size: (u32, u32),
        /// X11 (Xvfb) or Wayland (headless GNOME Shell).
        session: DesktopSession,
    },
    /// One local desktop of this name for the role `desktop` (one left from before is
    /// stopped first), which outlives the program when `keep` is set: `pincer demo`.
    Desktop {
        /// Its name (`pincer desktop down NAME` stops a kept one).
        name: String,
        /// Screen size.
        size: (u32, u32),
        /// Leave it running when the launch ends.
        keep: bool,
    },
    /// VMs of an image started for the launch, each reset to the image's golden state
    /// before every task.
    Vm {
        /// Their image, size and agent.
        plan: VmPlan,
        /// Environment sets.
        count: usize,
    },
}

impl Source {
    /// Whether this source starts environments of its own (which a shard must, as every
    /// shard runs on its own machine).
    fn starts_environments(&self) -> bool {
        !matches!(self, Self::Named(_))
    }

    /// What is known, before anything starts, of the programs its machines have.
    pub fn machine(&self) -> crate::peers::Machine {
        use crate::peers::Machine;
        match self {
            Self::Named(_) => Machine::Unknown,
            Self::Local { .. } | Self::Desktop { .. } => Machine::Local,
            Self::Vm { plan, .. } => match plan.cache.get(&plan.image) {
                Ok(image) => Machine::Image {
                    name: plan.image.clone(),
                    packages: image.manifest.packages.keys().cloned().collect(),
                },
                // Not built: bringing the VMs up says so.
                Err(_) => Machine::Unknown,
            },
        }
    }
}

/// Who handles Ctrl-C and SIGTERM while environments are up.
#[derive(Debug, Clone)]
pub enum Signals {
    /// The launch does, as a terminal program should: the first Ctrl-C finishes the
    /// current steps and records them as aborted; a second one, or SIGTERM, stops the
    /// environments the launch started and ends the process (130, 143) at once.
    Terminal,
    /// The caller does (Python checks its own signals, a server its own shutdown) and sets
    /// this flag to interrupt: the current steps finish and are recorded as aborted.
    Caller(Arc<AtomicBool>),
}

/// The environments of a launch: sets by role, and the guard over what was started for
/// them, which stops it on [`Self::stop`] or on drop.
#[derive(Debug)]
pub struct Environments {
    /// The sets, one worker each.
    pub sets: Vec<EnvSet>,
    reg: Registry,
    made: Made,
    cancel: Arc<AtomicBool>,
    /// The local desktops started, kept ones included.
    desktops: Vec<String>,
    /// The signal handlers, ended with the guard.
    handlers: Vec<tokio::task::JoinHandle<()>>,
}

/// What the launch says while it starts environments ("starting 2 local desktops: ...").
pub type Progress<'a> = &'a (dyn Fn(&str) + Sync);

impl Environments {
    /// Starts (or connects to) the environments of `source` for roles `roles`; local
    /// desktops serve API tools when `tools` is set. What was started is stopped again if
    /// a later one fails, or if the start is interrupted (SIGTERM, with
    /// [`Signals::Terminal`]).
    pub async fn start(
        reg: &Registry,
        source: &Source,
        roles: &BTreeMap<String, Platform>,
        tools: bool,
        signals: Signals,
        progress: Progress<'_>,
    ) -> Result<Self, RunError> {
        let made = Made::default();
        let (cancel, handlers) = match signals {
            Signals::Terminal => {
                let cancel = Arc::new(AtomicBool::new(false));
                let handlers = terminal_handlers(&cancel, &made, reg);
                (cancel, handlers)
            }
            Signals::Caller(flag) => (flag, Vec::new()),
        };
        let mut guard = Self {
            sets: Vec::new(),
            reg: reg.clone(),
            made,
            cancel,
            desktops: Vec::new(),
            handlers,
        };
        let started = match source {
            Source::Named(specs) => sets::named_sets(reg, specs).await,
            Source::Local {
                count,
                size,
                session,
            } => {
                sets::local_sets(
                    reg,
                    roles,
                    (*count).max(1),
                    (*size, *session),
                    tools,
                    &guard.made,
                    progress,
                )
                .await
            }
            Source::Desktop { name, size, keep } => {
                // A kept desktop is not the guard's to stop, nor the signal handlers'.
                let kept = Made::default();
                let made = if *keep { &kept } else { &guard.made };
                sets::one_desktop(reg, name, *size, *keep, tools, made, progress).await
            }
            Source::Vm { plan, count } => {
                sets::vm_sets(reg, roles, (*count).max(1), plan, &guard.made, progress).await
            }
        };
        // On an error the guard goes out of scope here and stops what did start.
        guard.sets = started?;
        guard.desktops = match source {
            Source::Desktop { name, .. } => vec![name.clone()],
            _ => guard.made.desktops(),
        };
        Ok(guard)
    }

    /// The flag that interrupts the run on these environments (the current steps finish
    /// and are recorded as aborted).
    pub fn cancel(&self) -> &Arc<AtomicBool> {
        &self.cancel
    }

    /// The local desktops the launch started, as they run (display, window manager,
    /// agent address).
    pub fn desktops(&self) -> Vec<crate::desktop::DesktopState> {
        self.desktops
            .iter()
            .filter_map(|n| crate::desktop::read_state(n))
            .collect()
    }

    /// Whether the run was interrupted.
    pub fn interrupted(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }

    /// Closes the connections and stops every desktop and VM started for the launch
    /// (a kept desktop stays).
    pub async fn stop(mut self) {
        self.stop_now().await;
    }

    async fn stop_now(&mut self) {
        for h in self.handlers.drain(..) {
            h.abort();
        }
        for set in &self.sets {
            for env in set.envs.values() {
                env.close();
            }
        }
        self.made.stop(&self.reg).await;
    }
}

impl Drop for Environments {
    fn drop(&mut self) {
        for h in self.handlers.drain(..) {
            h.abort();
        }
        if self.made.is_empty() {
            return;
        }
        // Dropped without `stop` (an error, a panic, a caller that forgot): stop them on a
        // runtime of our own, since this may run inside another's.
        let (made, reg) = (self.made.clone(), self.reg.clone());
        let stopper = std::thread::spawn(move || {
            if let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                rt.block_on(made.stop(&reg));
            }
        });
        let _ = stopper.join();
    }
}

/// Ctrl-C and SIGTERM as [`Signals::Terminal`] says.
fn terminal_handlers(
    cancel: &Arc<AtomicBool>,
    made: &Made,
    reg: &Registry,
) -> Vec<tokio::task::JoinHandle<()>> {
    let interrupt = {
        let (cancel, made, reg) = (cancel.clone(), made.clone(), reg.clone());
        tokio::spawn(async move {
            while tokio::signal::ctrl_c().await.is_ok() {
                if cancel.swap(true, Ordering::SeqCst) {
                    eprintln!(
                        "\nsecond Ctrl-C: stopping the desktops and VMs of this run and quitting"
                    );
                    made.stop(&reg).await;
                    std::process::exit(130);
                }
                eprintln!(
                    "\nCtrl-C: finishing the current steps and recording them as aborted (Ctrl-C again to quit at once)"
                );
            }
        })
    };
    // A SIGTERM (a service manager, `kill`, a cluster's job end) stops at once, but not
    // without the desktops and VMs the launch started: they would outlive it.
    let terminate = {
        let (made, reg) = (made.clone(), reg.clone());
        tokio::spawn(async move {
            if let Ok(mut term) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                && term.recv().await.is_some()
            {
                eprintln!("\nSIGTERM: stopping the desktops and VMs of this run and quitting");
                made.stop(&reg).await;
                std::process::exit(143);
            }
        })
    };
    vec![interrupt, terminate]
}

/// How a run goes, whoever launches it.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Runs per task (seeds `seed`, `seed + 1`, ...).
    pub repeat: u32,
    /// Base seed.
    pub seed: u64,
    /// The run directory.
    pub out: PathBuf,
    /// Continue the run in `out`, skipping finished task runs.
    pub resume: bool,
    /// Run only this shard's share.
    pub shard: Option<Shard>,
    /// What agents see (and whether they are offered API tools: local desktops then serve
    /// them).
    pub observation: ObservationConfig,
    /// What agents are told of the checkpoints, and their attempts.
    pub correction: Correction,
    /// Record each role's screen into the trajectory at up to this many frames a second.
    pub video: Option<u32>,
    /// What ends every task run (`--end`); `None`: each task's own rule.
    pub end: Option<EndRule>,
    /// The asset cache that tasks' `put_asset` steps read (`--assets`; OSWorld's file
    /// cache for imported OSWorld tasks, by default `~/.cache/pincer/osworld`).
    pub assets: PathBuf,
    /// Run tasks that need the live web too (`--allow-network`); the run's header then
    /// says it was not hermetic.
    pub allow_network: bool,
    /// Score as a peer benchmark does (`--compat crab`): its predicates and harness rules;
    /// the run's header and every record say so.
    pub compat: Option<Compat>,
}

impl RunOptions {
    /// One run of each task with seed 0 into `out`, agents seeing `observation`.
    pub fn new(out: PathBuf, observation: ObservationConfig) -> Self {
        Self {
            repeat: 1,
            seed: 0,
            out,
            resume: false,
            shard: None,
            observation,
            correction: Correction::default(),
            video: None,
            end: None,
            assets: crate::peers::osworld::cache::default_dir(),
            allow_network: false,
            compat: None,
        }
    }

    /// Refuses options that cannot work, saying what to give instead.
    pub fn check(&self) -> Result<(), RunError> {
        let most = pincer_shared::limits::MAX_VIDEO_FPS;
        if let Some(fps) = self.video
            && !(1..=most).contains(&fps)
        {
            return Err(RunError::BadOption(format!(
                "video at {fps} frames a second: give 1 to {most}"
            )));
        }
        if let Some(mode) = self.compat
            && (self.correction != Correction::default() || self.end.is_some())
        {
            return Err(RunError::BadOption(format!(
                "--compat {mode} runs each task once under CRAB's own rules: leave out --feedback, --attempts and --end"
            )));
        }
        Ok(())
    }

    /// The identity of a run of `tasks` by `agent` with these options (`run.json`).
    pub fn identity(&self, agent: &str, tasks: &[Task]) -> Identity {
        Identity {
            end: self.end,
            network: self.allow_network,
            compat: self.compat,
            ..Identity::new(
                agent,
                tasks,
                self.repeat,
                self.seed,
                self.shard.map(|s| s.count),
                self.observation,
                self.correction,
            )
        }
    }
}

/// A benchmark run to launch.
pub struct Launch {
    /// The tasks, in order.
    pub tasks: Vec<Task>,
    /// Makes a fresh agent for each worker, given a seed.
    pub agent: AgentFactory,
    /// The agent's name in the run's header and records.
    pub agent_name: String,
    /// Where the environments come from.
    pub source: Source,
    /// How the run goes.
    pub options: RunOptions,
    /// Who handles Ctrl-C and SIGTERM.
    pub signals: Signals,
}

impl std::fmt::Debug for Launch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launch")
            .field("tasks", &self.tasks.len())
            .field("agent", &self.agent_name)
            .field("source", &self.source)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// A run that ended: its records and how it ended.
#[derive(Debug)]
pub struct Finished {
    /// Every record of the run's (or shard's) results file, earlier ones included when
    /// resuming: one per task run.
    pub records: Vec<TaskRecord>,
    /// Whether it was interrupted (Ctrl-C, or the caller's flag).
    pub interrupted: bool,
    /// For a shard: whether its whole share is done (`done.json` written).
    pub shard_done: Option<bool>,
}

impl Launch {
    /// Checks everything that can be checked before an environment starts (the tasks, the
    /// run directory, a shard's place), starts the environments, runs, and stops what it
    /// started, however the run ended. `progress` hears about environments starting.
    pub async fn run(
        mut self,
        reg: &Registry,
        progress: Progress<'_>,
    ) -> Result<Finished, RunError> {
        self.options.check()?;
        if self.options.allow_network && matches!(self.source, Source::Vm { .. }) {
            return Err(RunError::BadOption(
                "--allow-network with --vm: pincer's VMs reach no network but their agent's port; \
                 run tasks that need the web on local desktops or registered environments"
                    .into(),
            ));
        }
        // Scored as a peer scores: every task must be the peer's, with its checks in.
        if let Some(mode) = self.options.compat {
            self.tasks = self
                .tasks
                .iter()
                .map(|t| t.scored_as(mode))
                .collect::<Result<_, _>>()
                .map_err(|e| RunError::BadOption(e.to_string()))?;
        }
        // Tasks that cannot run here are said and left out before anything starts.
        let (tasks, skipped) = crate::peers::runnable(
            std::mem::take(&mut self.tasks),
            &self.options.assets,
            self.options.allow_network,
            &self.source.machine(),
        );
        self.tasks = tasks;
        if !skipped.is_empty() {
            progress(&format!(
                "skipping {} tasks that cannot run here:",
                skipped.len()
            ));
            for (id, why) in &skipped {
                progress(&format!("  {id}: {why}"));
            }
        }
        if self.tasks.is_empty() {
            return Err(RunError::NothingToRun(skipped.len()));
        }
        super::prepare(&self.tasks, &crate::peers::library(&self.options.assets))?;
        let opts = &self.options;
        if opts.shard.is_some() && !self.source.starts_environments() {
            return Err(RunError::ShardOnNamed);
        }
        // A used run directory, or another run's, is refused before anything starts.
        let identity = opts.identity(&self.agent_name, &self.tasks);
        shard::check_out(&opts.out, opts.resume, opts.shard, &identity)?;
        shard::check_free(&opts.out, opts.shard)?;

        let refs: Vec<&Task> = self.tasks.iter().collect();
        let roles = sets::roles_needed(&refs)?;
        if let Source::Local { count, .. } = &self.source {
            progress(&format!(
                "starting {} set(s) of local desktops for roles {}",
                (*count).max(1),
                roles.keys().cloned().collect::<Vec<_>>().join(", ")
            ));
        }
        let envs = Environments::start(
            reg,
            &self.source,
            &roles,
            opts.observation.tools,
            self.signals.clone(),
            &|m| progress(&format!("  {m}")),
        )
        .await?;
        progress(&format!(
            "running {} tasks x {} with agent {} on {} set(s); results in {}",
            self.tasks.len(),
            opts.repeat,
            self.agent_name,
            envs.sets.len(),
            opts.out.display()
        ));
        let out = opts.out.clone();
        let shard = opts.shard;
        let result = super::run(RunConfig {
            tasks: self.tasks,
            agent: self.agent,
            agent_name: self.agent_name,
            sets: envs.sets.clone(),
            options: self.options,
            cancel: envs.cancel().clone(),
        })
        .await;
        let interrupted = envs.interrupted();
        envs.stop().await;
        if !skipped.is_empty() {
            crate::rundir::write_skipped(&out, shard.map(|s| s.index), &skipped)?;
        }
        Ok(Finished {
            records: result?,
            interrupted,
            shard_done: shard.map(|s| shard::dir(&out, s.index).join("done.json").is_file()),
        })
    }
}
