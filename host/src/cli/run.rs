//! `pincer run`: a benchmark over environment sets with an agent.

use anyhow::{Context, bail};
use pincer::agent::correction::Correction;
use pincer::agent::{Agent, ObservationConfig, Oracle, RandomAgent};
use pincer::env::registry::Registry;
use pincer::run::launch::{DesktopSession, Launch, RunOptions, Signals, Source, VmPlan};
use pincer::run::{self, AgentFactory};
use pincer::rundir::{self, shard::Shard};
use pincer::task;
use std::path::PathBuf;
use std::sync::Arc;

/// `pincer run ...` or `pincer run status DIR`.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub(crate) struct RunCmd {
    #[command(subcommand)]
    sub: Option<RunSub>,
    #[command(flatten)]
    args: RunArgs,
}

#[derive(Debug, clap::Subcommand)]
enum RunSub {
    /// Progress of a run from its directory: per shard (host, finished, SR, state) and
    /// overall, whether it runs here, on Slurm or on Kubernetes.
    Status {
        /// The run directory.
        dir: PathBuf,
    },
}

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// Task file, directory or bundled suite (e.g. `demo`).
    #[arg(long, required = true)]
    pub(super) tasks: Option<String>,
    /// Only these task ids (repeatable).
    #[arg(long = "task")]
    pub(super) only: Vec<String>,
    /// Only tasks with this tag (repeatable; any matches).
    #[arg(long = "tag")]
    pub(super) tags: Vec<String>,
    /// The agent: oracle, random, human, or an LLM as PROVIDER:MODEL
    /// (anthropic:claude-sonnet-5-5, gemini:gemini-3.8-flash, openai:gpt-6.1-terra).
    #[arg(long, required = true)]
    pub(super) agent: Option<String>,
    /// LLM agent options KEY=VALUE: base_url, api_key_env, structure=single|planner|per-env,
    /// history=N, mode=tools|json, temperature, max_tokens, timeout_s, retries, api_version
    /// (anthropic-version; repeatable).
    #[arg(long = "agent-opt", value_name = "KEY=VALUE")]
    pub(super) agent_opts: Vec<String>,
    /// An environment set as ROLE=ENV,ROLE=ENV with names from the envs file (repeatable:
    /// one worker per set). Without any, local desktops are started for the run. Roles
    /// played by pincer VMs are reset before every task.
    #[arg(long = "set", value_name = "ROLE=ENV,...", conflicts_with = "vm")]
    pub(super) sets: Vec<String>,
    /// Run on VMs of this image (`pincer image list`) instead of local desktops, each reset
    /// to the image's golden state before every task.
    #[arg(long, value_name = "IMAGE")]
    pub(super) vm: Option<String>,
    /// Guest memory of --vm VMs, MiB (default: the image's, from its recipe's
    /// `vm_memory_mib`, else 1024).
    #[arg(long, value_parser = super::vm::memory_mib, requires = "vm")]
    pub(super) vm_memory: Option<u32>,
    /// Virtual CPUs of --vm VMs.
    #[arg(long, default_value_t = 2, requires = "vm")]
    pub(super) vm_cpus: u32,
    /// Environment sets to run in parallel when pincer starts local desktops or VMs.
    #[arg(long, default_value_t = 1)]
    pub(super) parallel: usize,
    /// Run each task this many times (seeds seed, seed+1, ...).
    #[arg(long, default_value_t = 1)]
    pub(super) repeat: u32,
    /// Base seed.
    #[arg(long, default_value_t = 0)]
    pub(super) seed: u64,
    /// Run directory for results, trajectories and the report.
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    /// Continue an interrupted run in --out, skipping finished task runs.
    #[arg(long)]
    pub(super) resume: bool,
    /// What agents see: comma-separated marks, screenshot, tree.
    #[arg(long, default_value = "marks")]
    pub(super) observe: String,
    /// Offer agents the API tools tasks declare (typed calls run sandboxed on the guest,
    /// which must allow them: local desktops started for the run do); without it agents
    /// act on screens only.
    #[arg(long)]
    pub(super) tools: bool,
    /// Downscale observation images to fit WxH.
    #[arg(long, value_parser = super::desktop::parse_size)]
    pub(super) max_size: Option<(u32, u32)>,
    /// Record each environment's screen while the agent acts into the trajectory
    /// (`video-ROLE.mp4`, frames only when the screen changes), at up to FPS frames a
    /// second. Needs ffmpeg on the host.
    #[arg(long, value_name = "FPS", value_parser = clap::value_parser!(u32).range(1..=i64::from(pincer_shared::limits::MAX_VIDEO_FPS)))]
    pub(super) video: Option<u32>,
    /// Screen size of local desktops.
    #[arg(long, default_value = "1920x1080", value_parser = super::desktop::parse_size)]
    pub(super) size: (u32, u32),
    /// The graphical session of local desktops: x11 (Xvfb) or wayland (a headless GNOME
    /// Shell, as `pincer desktop up --session wayland` starts it).
    #[arg(long, default_value = "x11", value_parser = super::desktop::parse_session)]
    pub(super) session: DesktopSession,
    /// What the agent is told of the checkpoints: none (the benchmark as published), step
    /// (each checkpoint's state and what it saw, in every observation) or end (after a
    /// failed attempt, for the next; needs --attempts 2 or more).
    #[arg(long, default_value = "none", value_name = "none|step|end")]
    pub(super) feedback: String,
    /// Attempts per task run: one the agent failed is set up again and retried, the agent
    /// told it failed (and, with --feedback, how), up to this many times; reports show
    /// success by attempt.
    #[arg(long, default_value_t = 1, value_name = "K")]
    pub(super) attempts: u32,
    /// What ends every task run: `agent` (only the agent does, saying it is done, that the
    /// task is infeasible, or answering; or a limit; then the finalize steps run and the
    /// final state decides, as in OSWorld) or `sinks` (the moment every sink checkpoint has
    /// passed, CRAB's rule). Default: each task's own rule.
    #[arg(long, value_name = "agent|sinks")]
    pub(super) end: Option<task::EndRule>,
    /// The asset cache that tasks' `put_asset` steps read (OSWorld's file cache for
    /// imported OSWorld tasks: default `~/.cache/pincer/osworld`, or
    /// `$PINCER_OSWORLD_CACHE`).
    #[arg(long, value_name = "DIR")]
    pub(super) assets: Option<PathBuf>,
    /// Also run tasks that need the live web (imported OSWorld tasks that open pages);
    /// the run's header then says it was not hermetic. Without it they are skipped, each
    /// with why, as are tasks whose files are missing or that use what pincer lacks.
    #[arg(long)]
    pub(super) allow_network: bool,
    /// Score as a peer benchmark scores: `crab` reproduces CRAB's own scores on tasks
    /// imported from CRAB (its checks where they differ from pincer's; its harness: the
    /// first failed action or evaluator error ends the task, a wait is a step, `complete`
    /// ends it unevaluated, nothing passed is looked at again). Records and the summary say
    /// which scoring made them.
    #[arg(long, value_name = "crab")]
    pub(super) compat: Option<task::compat::Compat>,
    /// Do not write the HTML/Markdown report at the end.
    #[arg(long)]
    pub(super) no_report: bool,
    /// Run only shard K of N (K from 0): the task runs i with i % N == K, into the run
    /// directory --out that the other shards share. --slurm and --kubernetes start these.
    #[arg(long, value_name = "K/N", conflicts_with_all = ["slurm", "kubernetes"])]
    pub(super) shard: Option<Shard>,
    /// Split the run into N shards, each on its own machine (with --slurm or --kubernetes).
    #[arg(long, value_name = "N")]
    pub(super) shards: Option<u32>,
    /// Submit the shards as a Slurm job array (sbatch), follow it, resubmit shards whose
    /// node failed, then merge and report. --out must be on a file system every node
    /// shares, at the same path, and so must this pincer binary.
    #[arg(long, conflicts_with_all = ["kubernetes", "sets"])]
    pub(super) slurm: bool,
    /// An sbatch option for the job script, e.g. --partition=gpu (repeatable).
    #[arg(
        long = "slurm-opt",
        value_name = "OPTION",
        requires = "slurm",
        allow_hyphen_values = true
    )]
    pub(super) slurm_opts: Vec<String>,
    /// Times a failed shard is tried again (Slurm: resubmitted; Kubernetes: its pod
    /// recreated).
    #[arg(long, default_value_t = 2)]
    pub(super) retries: u32,
    /// Run the shards as a Kubernetes Indexed Job (one pod per shard) in --image, writing
    /// to the volume --claim mounted at /runs.
    #[arg(long, requires = "image", conflicts_with = "sets")]
    pub(super) kubernetes: bool,
    /// The pods' container image (`pincer image build RECIPE --container` makes one).
    #[arg(long, value_name = "IMAGE", requires = "kubernetes")]
    pub(super) image: Option<String>,
    /// The Kubernetes namespace.
    #[arg(long, default_value = "default", requires = "kubernetes")]
    pub(super) namespace: String,
    /// The ReadWriteMany PersistentVolumeClaim that holds run directories.
    #[arg(long, default_value = "pincer-runs", requires = "kubernetes")]
    pub(super) claim: String,
    /// Print the Kubernetes manifest instead of creating it.
    #[arg(long, requires = "kubernetes")]
    pub(super) dry_run: bool,
    /// Give the pods the node's /dev/kvm for --vm shards (schedule them on nodes that have
    /// it); without it QEMU in the pods runs with TCG.
    #[arg(long, requires_all = ["kubernetes", "vm"])]
    pub(super) kvm: bool,
}

/// Makes agents from `--agent` and `--agent-opt`.
pub(crate) fn agent_factory(spec: &str, opts: &[String]) -> anyhow::Result<(AgentFactory, String)> {
    let name = spec.to_owned();
    let factory: AgentFactory = match spec {
        "oracle" => Arc::new(|_seed| Ok(Box::new(Oracle::default()) as Box<dyn Agent>)),
        "random" => Arc::new(|seed| Ok(Box::new(RandomAgent::new(seed)) as Box<dyn Agent>)),
        "human" => {
            Arc::new(|_seed| Ok(Box::new(pincer::agent::Human::default()) as Box<dyn Agent>))
        }
        llm if llm.contains(':') => {
            let settings = pincer::agent::llm::Settings::parse(llm, opts)?;
            // Fail now, not in the middle of a run, if the key or model is missing.
            settings.check()?;
            Arc::new(move |seed| pincer::agent::llm::build(&settings, seed))
        }
        other => bail!(
            "unknown agent '{other}': use oracle, random, human, or PROVIDER:MODEL (openai:..., anthropic:..., gemini:...)"
        ),
    };
    Ok((factory, name))
}

pub(crate) async fn run(c: RunCmd, reg: &Registry) -> anyhow::Result<()> {
    match c.sub {
        Some(RunSub::Status { dir }) => {
            println!("{}", rundir::status::read(&dir)?);
            Ok(())
        }
        None => benchmark(c.args, reg).await,
    }
}

async fn benchmark(a: RunArgs, reg: &Registry) -> anyhow::Result<()> {
    // clap requires both unless a subcommand is given.
    let (Some(tasks_spec), Some(agent_spec)) = (a.tasks.clone(), a.agent.clone()) else {
        bail!("--tasks and --agent are required");
    };
    let tasks = task::select(&tasks_spec, &a.only, &a.tags)?;
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| rundir::default_dir(&tasks_spec, &agent_spec));
    let options = options(&a, out.clone())?;
    // Validate before starting anything (what cannot run here is left out, and said, by
    // the launch).
    let (runnable, _) = pincer::peers::runnable(
        tasks.clone(),
        &options.assets,
        options.allow_network,
        &pincer::peers::Machine::Unknown,
    );
    run::prepare(&runnable, &pincer::peers::library(&options.assets))?;
    let (agent, agent_name) = agent_factory(&agent_spec, &a.agent_opts)?;
    if a.slurm || a.kubernetes {
        let Some(n) = a.shards.filter(|n| *n > 0) else {
            bail!("--slurm and --kubernetes need --shards N (N at least 1)");
        };
        return if a.slurm {
            super::scale::on_slurm(&a, &tasks_spec, &tasks, &agent_name, &options, n).await
        } else {
            super::scale::on_kubernetes(&a, &tasks_spec, out, n).await
        };
    }
    if a.shards.is_some() {
        bail!(
            "--shards N goes with --slurm or --kubernetes; to run one shard yourself, give --shard K/N"
        );
    }
    let launch = Launch {
        tasks,
        agent,
        agent_name,
        source: source(
            a.sets.clone(),
            a.vm.clone(),
            (a.vm_memory, a.vm_cpus),
            a.parallel,
            (a.size, a.session),
        )?,
        options,
        signals: Signals::Terminal,
    };
    let done = launch.run(reg, &|m| eprintln!("{m}")).await?;
    println!("\n{}", run::summary_table(&done.records));
    println!(
        "results: {}",
        rundir::shard::results_path(&out, a.shard).display()
    );
    if !a.no_report {
        let paths = pincer::report::write(&out).context("writing the report")?;
        println!("report:  {}", paths.html.display());
        println!("         {}", paths.markdown.display());
    }
    if done.interrupted {
        bail!(
            "interrupted; continue with --resume --out {}",
            out.display()
        );
    }
    if let (Some(s), Some(false)) = (a.shard, done.shard_done) {
        bail!(
            "shard {s} did not finish its share (see above); run it again with --resume to finish it"
        );
    }
    Ok(())
}

/// Where a run's environments come from: `--set` specifications, else `--vm IMAGE`
/// (memory MiB or the image's default, CPUs), else local desktops; `parallel` sets of those started for the run.
pub(super) fn source(
    sets: Vec<String>,
    vm: Option<String>,
    (memory_mib, cpus): (Option<u32>, u32),
    parallel: usize,
    (size, session): ((u32, u32), DesktopSession),
) -> anyhow::Result<Source> {
    Ok(match vm {
        _ if !sets.is_empty() => Source::Named(sets),
        Some(image) => Source::Vm {
            plan: VmPlan::new(image, memory_mib, cpus)?,
            count: parallel,
        },
        None => Source::Local {
            count: parallel,
            size,
            session,
        },
    })
}

/// How the run goes: every option of `pincer run` that the runner takes, checked.
pub(super) fn options(a: &RunArgs, out: PathBuf) -> anyhow::Result<RunOptions> {
    let observation = ObservationConfig {
        tools: a.tools,
        ..ObservationConfig::parse(&a.observe, a.max_size)
            .map_err(|e| anyhow::anyhow!("--observe: {e}"))?
    };
    Ok(RunOptions {
        repeat: a.repeat,
        seed: a.seed,
        out,
        resume: a.resume,
        shard: a.shard,
        observation,
        correction: correction(a)?,
        video: a.video,
        end: a.end,
        assets: a
            .assets
            .clone()
            .unwrap_or_else(pincer::peers::osworld::cache::default_dir),
        allow_network: a.allow_network,
        compat: a.compat,
    })
}

/// `--feedback` and `--attempts`, checked.
fn correction(a: &RunArgs) -> anyhow::Result<Correction> {
    let feedback = a.feedback.parse().context("--feedback")?;
    Ok(Correction::new(feedback, a.attempts)?)
}

/// The `pincer run` arguments that make one shard of this run (without `--shard`): the
/// same tasks, agent, observation and seeds, into `out`, resuming what the shard finished.
pub(crate) fn shard_args(a: &RunArgs, tasks: &str, out: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = vec!["run".into(), "--tasks".into(), tasks.into()];
    let mut push = |k: &str, val: String| {
        v.push(k.into());
        v.push(val);
    };
    push("--agent", a.agent.clone().unwrap_or_default());
    for t in &a.only {
        push("--task", t.clone());
    }
    for t in &a.tags {
        push("--tag", t.clone());
    }
    for o in &a.agent_opts {
        push("--agent-opt", o.clone());
    }
    if let Some(image) = &a.vm {
        push("--vm", image.clone());
        if let Some(memory) = a.vm_memory {
            push("--vm-memory", memory.to_string());
        }
        push("--vm-cpus", a.vm_cpus.to_string());
    }
    push("--parallel", a.parallel.to_string());
    push("--repeat", a.repeat.to_string());
    push("--seed", a.seed.to_string());
    push("--observe", a.observe.clone());
    push("--feedback", a.feedback.clone());
    push("--attempts", a.attempts.to_string());
    if let Some(end) = a.end {
        push("--end", end.to_string());
    }
    if let Some(dir) = &a.assets {
        push("--assets", dir.display().to_string());
    }
    if let Some(fps) = a.video {
        push("--video", fps.to_string());
    }
    if let Some((w, h)) = a.max_size {
        push("--max-size", format!("{w}x{h}"));
    }
    if let Some(mode) = a.compat {
        push("--compat", mode.to_string());
    }
    push("--size", format!("{}x{}", a.size.0, a.size.1));
    push("--out", out.display().to_string());
    if a.tools {
        v.push("--tools".into());
    }
    if a.allow_network {
        v.push("--allow-network".into());
    }
    v.push("--resume".into());
    v.push("--no-report".into());
    v
}
