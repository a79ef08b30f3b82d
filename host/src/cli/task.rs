//! `pincer task ...`: list, show, validate, graph, schema, functions, templates, compose,
//! import-crab and check.

use anyhow::{Context, bail};
use clap::{Subcommand, ValueEnum};
use pincer::compose::{self, Catalogue};
use pincer::env::registry::Registry;
use pincer::env::{Deadlines, Environment};
use pincer::eval::functions::{Library, Reads};
use pincer::eval::graph::{Envs, Graph};
use pincer::eval::text::{self, TextMatch};
use pincer::eval::{AgentEvent, AgentLog};
use pincer::task::{self, Task, TaskSet};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, Subcommand)]
pub(crate) enum TaskCmd {
    /// List tasks.
    List(TasksArg),
    /// Print a task as JSON.
    Show {
        #[command(flatten)]
        tasks: TasksArg,
        /// Task id.
        id: String,
    },
    /// Check task files (syntax, functions, arguments, roles, cycles) without running them.
    Validate {
        /// Task files or directories; without any, the tasks of `--tasks`.
        files: Vec<PathBuf>,
        #[command(flatten)]
        tasks: TasksArg,
    },
    /// Print a task's checkpoint graph.
    Graph {
        #[command(flatten)]
        tasks: TasksArg,
        /// Task id.
        id: String,
        /// Output format.
        #[arg(long, value_enum, default_value_t = GraphFormat::Dot)]
        format: GraphFormat,
    },
    /// Print the JSON Schema of task files.
    Schema,
    /// List the checkpoint functions with their arguments.
    Functions {
        /// Print each function's argument schema too.
        #[arg(long)]
        schemas: bool,
    },
    /// List sub-task templates.
    Templates {
        /// Only templates whose id or name contains this.
        filter: Option<String>,
    },
    /// Compose templates into a task: a chain A -> B -> ..., values drawn by the seed.
    Compose {
        /// Template ids (or unique prefixes, or names), comma-separated, in chain order.
        #[arg(long, value_delimiter = ',', required = true)]
        templates: Vec<String>,
        /// Seed for the attribute values.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// The task's instruction, instead of the filled templates' instructions joined.
        #[arg(long, value_name = "TEXT")]
        instruction: Option<String>,
        /// Write the task here instead of printing it.
        #[arg(long, short = 'o')]
        out: Option<PathBuf>,
    },
    /// Import CRAB Benchmark-v0 composed-task files and report what is evaluable.
    ImportCrab {
        /// Directory with CRAB's task JSON files (searched recursively).
        dir: PathBuf,
        /// Write the converted tasks here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Print one line per file.
        #[arg(long)]
        per_file: bool,
    },
    /// Import OSWorld's tasks from its `evaluation_examples` folder: one pincer task per
    /// OSWorld task (`<domain>/<id>`, scored by OSWorld's own metric code), and a table of
    /// what can run here (offline, with its files present or missing in the cache, needing
    /// the live web or a Google account, not supported and why).
    ImportOsworld {
        /// OSWorld's `evaluation_examples` folder.
        dir: PathBuf,
        /// Write the tasks here (`OUT/<domain>/<id>.json`, the report as
        /// `OUT/.osworld-import.json`).
        #[arg(long)]
        out: Option<PathBuf>,
        /// The index of tasks to import, in `DIR` or a path (`test_small.json`, ...).
        #[arg(long, default_value = "test_all.json")]
        index: PathBuf,
        /// OSWorld's file cache, in OSWorld's own layout (an OSWorld `cache/` folder works
        /// as it is) [default: ~/.cache/pincer/osworld].
        #[arg(long, value_name = "CACHE")]
        assets: Option<PathBuf>,
        /// List every task that is not runnable here with why.
        #[arg(long)]
        per_task: bool,
    },
    /// Set a task up on live environments and print every checkpoint's state now.
    Check {
        #[command(flatten)]
        tasks: TasksArg,
        /// Task id.
        id: String,
        /// Bind a role to an environment: ROLE=ENV (default: the only or default env).
        #[arg(long = "bind", value_name = "ROLE=ENV")]
        bind: Vec<String>,
        /// Do not run the setup steps first.
        #[arg(long)]
        no_setup: bool,
        /// Judge answer checkpoints as if the agent had submitted this answer.
        #[arg(long, value_name = "TEXT")]
        answer: Option<String>,
        /// Judge as if the agent's last word was that the task cannot be done.
        #[arg(long)]
        said_infeasible: bool,
        /// Print the verdicts as JSON: the task's score (the mean grade of its final
        /// checkpoints) and each checkpoint's state.
        #[arg(long, conflicts_with = "repeat")]
        json: bool,
        /// OSWorld's file cache, for the setup files and gold files of imported OSWorld
        /// tasks [default: ~/.cache/pincer/osworld].
        #[arg(long, value_name = "CACHE")]
        assets: Option<PathBuf>,
        /// Set up and check this many times, one line each, and fail if a setup fails or
        /// leaves a checkpoint that is ready at the start passing (a setup that fails now
        /// and then, or races an app, shows here). Prints how long the checks took (the
        /// first apart: it pays for what starts once, such as OSWorld's scorer); with
        /// --no-setup it only times the checks on the state as it is.
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
        repeat: u32,
        /// Judge as a peer benchmark judges: `crab` uses CRAB's own checks where they differ
        /// from pincer's (tasks imported from CRAB only).
        #[arg(long, value_name = "crab")]
        compat: Option<task::compat::Compat>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum GraphFormat {
    Dot,
    Mermaid,
}

#[derive(Debug, clap::Args)]
pub(crate) struct TasksArg {
    /// Task file, directory or bundled suite name.
    #[arg(long, default_value = "examples")]
    tasks: String,
}

impl TasksArg {
    fn load(&self) -> anyhow::Result<TaskSet> {
        Ok(task::load_path(&self.tasks)?)
    }
}

fn find<'a>(set: &'a TaskSet, id: &str) -> anyhow::Result<&'a Task> {
    set.get(id)
        .with_context(|| format!("no task '{id}'; known: {}", set.ids().join(", ")))
}

pub(crate) async fn run(cmd: TaskCmd, reg: &Registry) -> anyhow::Result<()> {
    let lib = pincer::peers::library(&pincer::peers::osworld::cache::default_dir());
    match cmd {
        TaskCmd::List(t) => {
            let set = t.load()?;
            println!(
                "{:<36} {:<18} {:>5}  {:<24} instruction",
                "id", "class", "nodes", "envs"
            );
            for (task, _) in &set.tasks {
                let envs: Vec<String> = task
                    .envs
                    .iter()
                    .map(|(r, n)| format!("{r}:{}", n.platform))
                    .collect();
                let mut text: String = task.instruction.chars().take(70).collect();
                if task.instruction.chars().count() > 70 {
                    text.push('…');
                }
                println!(
                    "{:<36} {:<18} {:>5}  {:<24} {text}",
                    task.id,
                    task.platform_class().to_string(),
                    task.checkpoints.len(),
                    envs.join(",")
                );
            }
            println!("{} tasks", set.tasks.len());
        }
        TaskCmd::Show { tasks, id } => {
            let set = tasks.load()?;
            println!("{}", serde_json::to_string_pretty(find(&set, &id)?)?);
        }
        TaskCmd::Validate { files, tasks } => {
            let specs: Vec<String> = if files.is_empty() {
                vec![tasks.tasks]
            } else {
                files.iter().map(|f| f.display().to_string()).collect()
            };
            let (mut bad, mut total, mut skipped) = (0, 0, 0);
            for spec in &specs {
                // A file that does not load is one invalid task; the others are still checked.
                let set = match task::load_path(spec) {
                    Ok(set) => set,
                    Err(e) => {
                        bad += 1;
                        total += 1;
                        println!("FAIL {e}");
                        continue;
                    }
                };
                total += set.tasks.len();
                for (task, src) in &set.tasks {
                    // What pincer lacks is not the file's fault: a run skips it and says so.
                    if !task.requires.unsupported.is_empty() {
                        skipped += 1;
                        println!(
                            "skip {} (not supported: {}) {src}",
                            task.id,
                            task.requires.unsupported.join("; ")
                        );
                        continue;
                    }
                    match Graph::check_task(task, &lib) {
                        Ok(g) => {
                            println!("ok   {} ({} checkpoints) {src}", task.id, g.len());
                        }
                        Err(e) => {
                            bad += 1;
                            println!("FAIL {src}: {e}");
                        }
                    }
                }
            }
            if bad > 0 {
                bail!("{bad} of {total} tasks are invalid");
            }
            if skipped > 0 {
                println!(
                    "{} tasks are valid; {skipped} use what pincer does not support and were not checked",
                    total - skipped
                );
            } else {
                println!("all {total} tasks are valid");
            }
        }
        TaskCmd::Graph { tasks, id, format } => {
            let set = tasks.load()?;
            let task = find(&set, &id)?;
            match format {
                GraphFormat::Dot => print!("{}", task.to_dot()),
                GraphFormat::Mermaid => print!("{}", task.to_mermaid()),
            }
        }
        TaskCmd::Schema => {
            // Checkpoint arguments are each function's own; the one shape they share for
            // comparing text is given beside the task's.
            let mut schema = Task::schema();
            schema["$defs"]["TextMatch"] = serde_json::to_value(schemars::schema_for!(TextMatch))?;
            println!("{}", serde_json::to_string_pretty(&schema)?);
        }
        TaskCmd::Functions { schemas } => {
            println!("{}\n", text::SHAPES);
            for f in lib.iter() {
                let reads = match f.reads {
                    Reads::Env(p) => p
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("/"),
                    Reads::Agent => "agent log".into(),
                    Reads::Inner => "inner checks".into(),
                };
                println!("{:<24} [{reads}] {}", f.name, f.summary);
                println!("{:<24} e.g. {}", "", f.example);
                if schemas {
                    println!("{}", serde_json::to_string_pretty(&f.schema)?);
                }
            }
        }
        TaskCmd::Templates { filter } => {
            let cat = Catalogue::bundled()?;
            for t in cat.templates.values() {
                if filter
                    .as_ref()
                    .is_some_and(|f| !t.id.contains(f.as_str()) && !t.name.contains(f.as_str()))
                {
                    continue;
                }
                let attrs: Vec<String> = t
                    .attributes
                    .iter()
                    .map(|a| format!("{}:{}", a.name, a.ty))
                    .collect();
                let status = t
                    .unsupported
                    .as_deref()
                    .map_or("ok".to_owned(), |r| format!("unsupported: {r}"));
                println!(
                    "{} {:<8} {:<28} ({}) -> {}  [{status}]",
                    t.id,
                    t.platform.to_string(),
                    t.name,
                    attrs.join(", "),
                    t.output.as_deref().unwrap_or("-")
                );
            }
        }
        TaskCmd::Compose {
            templates,
            seed,
            instruction,
            out,
        } => {
            let cat = Catalogue::bundled()?;
            let ids: Vec<&str> = templates.iter().map(String::as_str).collect();
            let task = compose::generate(&cat, &ids, seed, instruction)?;
            Graph::build(&task, &lib)?;
            let json = serde_json::to_string_pretty(&task)?;
            match out {
                Some(p) => {
                    std::fs::write(&p, json).with_context(|| format!("writing {}", p.display()))?;
                    println!("task '{}' written to {}", task.id, p.display());
                }
                None => println!("{json}"),
            }
        }
        TaskCmd::ImportCrab { dir, out, per_file } => {
            let cat = Catalogue::bundled()?;
            let report = pincer::peers::crab::import_dir(&dir, &cat, &lib)?;
            if per_file {
                for f in &report.files {
                    let untyped = if f.untyped_edges.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " [links against the type rule: {}]",
                            f.untyped_edges.join(", ")
                        )
                    };
                    println!(
                        "{:<8} {:<44} {}{untyped}",
                        f.status.label(),
                        f.file,
                        f.detail
                    );
                }
            }
            print!("{}", report.summary());
            if let Some(out) = out {
                let n = report.write_tasks(&out)?;
                println!("{n} converted tasks written to {}", out.display());
            }
        }
        TaskCmd::ImportOsworld {
            dir,
            out,
            index,
            assets,
            per_task,
        } => {
            use pincer::peers::osworld::{cache, import};
            let assets = assets.unwrap_or_else(cache::default_dir);
            let t = std::time::Instant::now();
            let all = import::import_dir(&dir, &index, &assets)?;
            let took = t.elapsed();
            let summary = import::Summary::of(&all);
            if per_task {
                for line in summary.tasks.iter().filter(|l| l.category != "offline") {
                    let why = match (&line.needs, line.unsupported.first()) {
                        (_, Some(u)) if line.category == "unsupported" => u.clone(),
                        (import::Needs::Web { why } | import::Needs::Account { why }, _) => {
                            why.clone()
                        }
                        (import::Needs::Files { files, missing }, _) => {
                            format!("{} files, {missing} missing", files.len())
                        }
                        _ => String::new(),
                    };
                    println!("{:<14} {:<60} {why}", line.category, line.id);
                }
            }
            print!("{}", summary.table());
            println!(
                "{} tasks read in {:.0} ms; files looked for in {}",
                all.len(),
                took.as_secs_f64() * 1000.0,
                assets.display()
            );
            if let Some(out) = out {
                let n = import::write(&all, &out)?;
                println!(
                    "{n} tasks written to {} (report: {})",
                    out.display(),
                    out.join(import::REPORT).display()
                );
            }
        }
        TaskCmd::Check {
            tasks,
            id,
            bind,
            no_setup,
            answer,
            said_infeasible,
            json,
            assets,
            repeat,
            compat,
        } => {
            let mut events: Vec<AgentEvent> = answer
                .map(|text| AgentEvent::Answer { text })
                .into_iter()
                .collect();
            if said_infeasible {
                events.push(AgentEvent::Infeasible {
                    reason: "--said-infeasible".into(),
                });
            }
            let log = AgentLog { events };
            let set = tasks.load()?;
            let assets = assets.unwrap_or_else(pincer::peers::osworld::cache::default_dir);
            let lib = pincer::peers::library(&assets);
            let checking = Checking::connect(reg, &set, &id, &bind, &lib, assets, compat).await?;
            if json {
                checking.json(!no_setup, &log).await?;
            } else if repeat == 1 {
                checking.once(!no_setup, &log).await?;
            } else {
                checking.repeat(repeat, !no_setup, &log).await?;
            }
        }
    }
    Ok(())
}

/// A task bound to live environments, for `pincer task check`.
struct Checking {
    /// The task, as the scoring mode judges it.
    task: Task,
    graph: Graph,
    envs: Envs,
    /// The asset cache setups put files from (OSWorld's file cache).
    assets: PathBuf,
}

impl Checking {
    async fn connect(
        reg: &Registry,
        set: &TaskSet,
        id: &str,
        bind: &[String],
        lib: &Library,
        assets: PathBuf,
        compat: Option<task::compat::Compat>,
    ) -> anyhow::Result<Self> {
        let task = match compat {
            Some(mode) => find(set, id)?.scored_as(mode)?,
            None => find(set, id)?.clone(),
        };
        let graph = Graph::build(&task, lib)?;
        let mut binds: BTreeMap<String, String> = BTreeMap::new();
        for b in bind {
            let (role, env) = b
                .split_once('=')
                .with_context(|| format!("--bind '{b}': write ROLE=ENV"))?;
            binds.insert(role.into(), env.into());
        }
        let mut envs = BTreeMap::new();
        for role in task.envs.keys() {
            let name = binds.get(role).cloned();
            if name.is_none() && task.envs.len() > 1 {
                bail!(
                    "task '{id}' needs several environments: bind each role with --bind ROLE=ENV ({})",
                    task.envs.keys().cloned().collect::<Vec<_>>().join(", ")
                );
            }
            let env: Environment = reg.connect(name.as_deref(), Deadlines::default()).await?;
            envs.insert(role.clone(), Arc::new(env));
        }
        Ok(Self {
            task,
            graph,
            envs: Envs(envs),
            assets,
        })
    }

    /// Runs the setup steps of every role, calling `each` before each step.
    async fn setup(
        &self,
        each: &mut (dyn FnMut(&str, &task::steps::Step) + Send),
    ) -> anyhow::Result<()> {
        for (role, steps) in &self.task.setup {
            let assets = Some(self.assets.as_path());
            task::steps::run_all(&self.envs.0[role], steps, assets, &mut |s| each(role, s))
                .await
                .map_err(|(i, e)| anyhow::anyhow!("setup step {i} on '{role}' failed: {e}"))?;
        }
        Ok(())
    }

    /// Sets up (unless `setup` is false) and prints every checkpoint's verdict.
    async fn once(&self, setup: bool, log: &AgentLog) -> anyhow::Result<()> {
        if setup {
            self.setup(&mut |role, s| println!("setup {role}: {}", s.describe()))
                .await?;
        }
        let t = std::time::Instant::now();
        let verdicts = self.graph.check_all(&self.envs, log).await?;
        let took = t.elapsed();
        for (node, v) in &verdicts {
            let deps = self
                .after(node)
                .map(|a| format!(" (after {})", a.join(", ")))
                .unwrap_or_default();
            match v {
                Ok(v) => println!(
                    "{} {node}{deps}: {}",
                    if v.passed { "PASS" } else { "fail" },
                    v.feedback
                ),
                Err(e) => println!("ERR  {node}{deps}: {e}"),
            }
        }
        println!(
            "{} checkpoints read in {:.1} ms",
            verdicts.len(),
            took.as_secs_f64() * 1000.0
        );
        Ok(())
    }

    /// Sets up (unless `setup` is false) and prints the verdicts as one JSON object:
    /// `task`, `score` (the mean grade of the final checkpoints; `null` without any, or when
    /// one could not be judged) and `checkpoints` (`id`, `final`, `passed`, `score`,
    /// `feedback` or `error`).
    async fn json(&self, setup: bool, log: &AgentLog) -> anyhow::Result<()> {
        if setup {
            self.setup(&mut |_, _| {}).await?;
        }
        let verdicts = self.graph.check_all(&self.envs, log).await?;
        let is_final = |node: &str| {
            self.task
                .checkpoints
                .iter()
                .any(|c| c.id == node && c.final_only)
        };
        let mut grades = Vec::new();
        let mut judged = true;
        let checkpoints: Vec<serde_json::Value> = verdicts
            .iter()
            .map(|(node, v)| {
                let fin = is_final(node);
                match v {
                    Ok(v) => {
                        if fin {
                            grades.push(v.grade());
                        }
                        serde_json::json!({"id": node, "final": fin, "passed": v.passed,
                            "score": v.score, "feedback": v.feedback})
                    }
                    Err(e) => {
                        judged &= !fin;
                        serde_json::json!({"id": node, "final": fin, "error": e.to_string()})
                    }
                }
            })
            .collect();
        let score = (judged && !grades.is_empty())
            .then(|| grades.iter().sum::<f64>() / grades.len() as f64);
        println!(
            "{}",
            serde_json::json!({"task": self.task.id, "score": score, "checkpoints": checkpoints})
        );
        Ok(())
    }

    /// The checkpoints a node waits for, if any.
    fn after(&self, node: &str) -> Option<&Vec<String>> {
        self.task
            .checkpoints
            .iter()
            .find(|c| c.id == node)
            .map(|c| &c.after)
            .filter(|a| !a.is_empty())
    }

    /// Sets up and checks `times` times, a line each; fails if any setup failed or left a
    /// checkpoint that is ready at the start passing (what a run calls a broken setup).
    async fn repeat(&self, times: u32, setup: bool, log: &AgentLog) -> anyhow::Result<()> {
        let mut took = Vec::new();
        let mut checks = Vec::new();
        let mut bad = Vec::new();
        for round in 1..=times {
            let t = std::time::Instant::now();
            let outcome = if setup {
                self.setup(&mut |_, _| {}).await
            } else {
                Ok(())
            };
            let secs = t.elapsed().as_secs_f64();
            let line = match outcome {
                Err(e) => Err(format!("{e:#}")),
                Ok(()) => {
                    let t = std::time::Instant::now();
                    let verdicts = self.graph.check_all(&self.envs, log).await?;
                    checks.push(t.elapsed().as_secs_f64() * 1000.0);
                    // Without a setup nothing was set up to be broken: the rounds only
                    // read the state as it is (to time the checks).
                    let early: Vec<&str> = verdicts
                        .iter()
                        .filter(|(node, v)| {
                            setup
                                && self.after(node).is_none()
                                && v.as_ref().is_ok_and(|v| v.passed)
                        })
                        .map(|(node, _)| node.as_str())
                        .collect();
                    let errors: Vec<String> = verdicts
                        .iter()
                        .filter_map(|(node, v)| v.as_ref().err().map(|e| format!("{node}: {e}")))
                        .collect();
                    if !early.is_empty() {
                        Err(format!("already passing: {}", early.join(", ")))
                    } else if !errors.is_empty() {
                        Err(format!("not judged: {}", errors.join("; ")))
                    } else {
                        let passing = verdicts
                            .iter()
                            .filter(|(_, v)| v.as_ref().is_ok_and(|v| v.passed))
                            .count();
                        Ok(format!("{passing}/{} checkpoints pass", verdicts.len()))
                    }
                }
            };
            match line {
                Ok(l) => println!("{round:>3}/{times}  ok    {secs:6.2} s  {l}"),
                Err(l) => {
                    println!("{round:>3}/{times}  FAIL  {secs:6.2} s  {l}");
                    bad.push(round);
                }
            }
            took.push(secs);
        }
        took.sort_by(f64::total_cmp);
        println!(
            "{} of {times} set-ups good; setup p50 {:.2} s, max {:.2} s",
            times as usize - bad.len(),
            took[took.len() / 2],
            took[took.len() - 1]
        );
        // The first check pays for what starts once (a scorer's worker); the rest are what
        // each task run's check costs.
        if let Some((first, rest)) = checks.split_first() {
            let mut rest = rest.to_vec();
            rest.sort_by(f64::total_cmp);
            let at = |q: f64| rest[((rest.len() as f64 * q) as usize).min(rest.len() - 1)];
            if rest.is_empty() {
                println!("checkpoints read in {first:.1} ms");
            } else {
                println!(
                    "checkpoints read: first {first:.1} ms, then p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms",
                    at(0.5),
                    at(0.95),
                    rest[rest.len() - 1]
                );
            }
        }
        if !bad.is_empty() {
            bail!(
                "task '{}': {} of {times} set-ups failed (rounds {})",
                self.task.id,
                bad.len(),
                bad.iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        Ok(())
    }
}
