//! `pincer run`: a benchmark over environment sets with an agent.

use anyhow::{Context, bail};
use pincer::agent::{Agent, ObservationConfig, Oracle, RandomAgent};
use pincer::env::registry::Registry;
use pincer::run::sets::{self, Made, VmPlan};
use pincer::run::{self, AgentFactory, RunConfig};
use pincer::task::{self, Task};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// Task file, directory or bundled suite (e.g. `demo`).
    #[arg(long)]
    tasks: String,
    /// Only these task ids (repeatable).
    #[arg(long = "task")]
    only: Vec<String>,
    /// Only tasks with this tag (repeatable; any matches).
    #[arg(long = "tag")]
    tags: Vec<String>,
    /// The agent: oracle, random, human, or an LLM as PROVIDER:MODEL
    /// (anthropic:claude-sonnet-5-5, gemini:gemini-3.8-flash, openai:gpt-6.1-terra).
    #[arg(long)]
    agent: String,
    /// LLM agent options KEY=VALUE: base_url, api_key_env, structure=single|planner|per-env,
    /// history=N, mode=tools|json, temperature, max_tokens, timeout_s, retries, api_version
    /// (anthropic-version; repeatable).
    #[arg(long = "agent-opt", value_name = "KEY=VALUE")]
    agent_opts: Vec<String>,
    /// An environment set as ROLE=ENV,ROLE=ENV with names from the envs file (repeatable:
    /// one worker per set). Without any, local desktops are started for the run. Roles
    /// played by pincer VMs are reset before every task.
    #[arg(long = "set", value_name = "ROLE=ENV,...", conflicts_with = "vm")]
    sets: Vec<String>,
    /// Run on VMs of this image (`pincer image list`) instead of local desktops, each reset
    /// to the image's golden state before every task.
    #[arg(long, value_name = "IMAGE")]
    vm: Option<String>,
    /// Guest memory of --vm VMs, MiB.
    #[arg(long, default_value_t = 1024, requires = "vm")]
    vm_memory: u32,
    /// Virtual CPUs of --vm VMs.
    #[arg(long, default_value_t = 2, requires = "vm")]
    vm_cpus: u32,
    /// Environment sets to run in parallel when pincer starts local desktops or VMs.
    #[arg(long, default_value_t = 1)]
    parallel: usize,
    /// Run each task this many times (seeds seed, seed+1, ...).
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Base seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Run directory for results, trajectories and the report.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Continue an interrupted run in --out, skipping finished task runs.
    #[arg(long)]
    resume: bool,
    /// What agents see: comma-separated marks, screenshot, tree.
    #[arg(long, default_value = "marks")]
    observe: String,
    /// Downscale observation images to fit WxH.
    #[arg(long, value_parser = super::desktop::parse_size)]
    max_size: Option<(u32, u32)>,
    /// Screen size of local desktops.
    #[arg(long, default_value = "1920x1080", value_parser = super::desktop::parse_size)]
    size: (u32, u32),
    /// Do not write the HTML/Markdown report at the end.
    #[arg(long)]
    no_report: bool,
}

fn observation(spec: &str, max_size: Option<(u32, u32)>) -> anyhow::Result<ObservationConfig> {
    let mut cfg = ObservationConfig {
        screenshot: false,
        marks: false,
        tree_text: false,
        max_size,
    };
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part {
            "marks" | "som" => cfg.marks = true,
            "screenshot" => cfg.screenshot = true,
            "tree" => cfg.tree_text = true,
            other => bail!("--observe: unknown part '{other}' (use marks, screenshot, tree)"),
        }
    }
    Ok(cfg)
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

fn select(mut tasks: Vec<Task>, only: &[String], tags: &[String]) -> anyhow::Result<Vec<Task>> {
    if !only.is_empty() {
        for id in only {
            if !tasks.iter().any(|t| &t.id == id) {
                bail!("--task {id}: no such task");
            }
        }
        tasks.retain(|t| only.contains(&t.id));
    }
    if !tags.is_empty() {
        tasks.retain(|t| t.tags.iter().any(|g| tags.contains(g)));
    }
    if tasks.is_empty() {
        bail!("no tasks selected");
    }
    Ok(tasks)
}

pub(crate) async fn run(a: RunArgs, reg: &Registry) -> anyhow::Result<()> {
    let set = task::load_path(&a.tasks)?;
    let tasks = select(
        set.tasks.into_iter().map(|(t, _)| t).collect(),
        &a.only,
        &a.tags,
    )?;
    // Validate before starting anything.
    run::prepare(&tasks, &pincer::eval::functions::Library::standard())?;
    let (agent, agent_name) = agent_factory(&a.agent, &a.agent_opts)?;
    let observation = observation(&a.observe, a.max_size)?;
    let out = a.out.clone().unwrap_or_else(|| {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        PathBuf::from("runs").join(format!(
            "{}-{}-{stamp}",
            task::sanitize(&a.tasks),
            task::sanitize(&a.agent)
        ))
    });

    // Refuse a used run directory before starting anything.
    run::check_out(&out, a.resume)?;

    let cancel = Arc::new(AtomicBool::new(false));
    let made = Made::default();
    {
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
        });
    }
    // A SIGTERM (a service manager, `kill`, a cluster's job end) stops at once, but not
    // without the desktops and VMs the run started: they would outlive it.
    {
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
        });
    }

    let env_sets = if let Some(image) = &a.vm {
        let refs: Vec<&Task> = tasks.iter().collect();
        let roles = sets::roles_needed(&refs)?;
        let plan = VmPlan {
            cache: pincer::image::Cache::at(pincer::paths::image_cache_dir()),
            image: image.clone(),
            memory_mib: a.vm_memory,
            cpus: a.vm_cpus,
            agent: super::image::default_agent(),
        };
        match sets::vm_sets(reg, &roles, a.parallel.max(1), &plan, &made, &|m| {
            eprintln!("  {m}")
        })
        .await
        {
            Ok(s) => s,
            Err(e) => {
                made.stop(reg).await;
                return Err(e.into());
            }
        }
    } else if a.sets.is_empty() {
        let refs: Vec<&Task> = tasks.iter().collect();
        let roles = sets::roles_needed(&refs)?;
        let n = a.parallel.max(1);
        eprintln!(
            "starting {n} set(s) of local desktops for roles {}",
            roles.keys().cloned().collect::<Vec<_>>().join(", ")
        );
        match sets::local_sets(reg, &roles, n, a.size, &made, &mut |m| eprintln!("  {m}")).await {
            Ok(s) => s,
            Err(e) => {
                made.stop(reg).await;
                return Err(e.into());
            }
        }
    } else {
        sets::named_sets(reg, &a.sets).await?
    };
    eprintln!(
        "running {} tasks x {} with agent {} on {} set(s); results in {}",
        tasks.len(),
        a.repeat,
        agent_name,
        env_sets.len(),
        out.display()
    );
    let result = run::run(RunConfig {
        tasks,
        agent,
        agent_name,
        sets: env_sets,
        repeat: a.repeat,
        seed: a.seed,
        out: out.clone(),
        resume: a.resume,
        observation,
        cancel: cancel.clone(),
    })
    .await;
    made.stop(reg).await;
    let records = result?;
    println!("\n{}", run::summary_table(&records));
    println!("results: {}", run::results_file(&out).display());
    if !a.no_report {
        let paths = pincer::report::write(&out).context("writing the report")?;
        println!("report:  {}", paths.html.display());
        println!("         {}", paths.markdown.display());
    }
    if cancel.load(Ordering::SeqCst) {
        bail!(
            "interrupted; continue with --resume --out {}",
            out.display()
        );
    }
    Ok(())
}
