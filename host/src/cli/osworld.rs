//! `pincer osworld`: the environment OSWorld's own scoring code runs in (setup, doctor).

use anyhow::Context;
use clap::Subcommand;
use pincer::peers::osworld::{metric, scorer};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

#[derive(Debug, Subcommand)]
pub(crate) enum OsworldCmd {
    /// Make the Python environment OSWorld's metrics run in: desktop-env (pinned) and its
    /// light libraries from PyPI, no torch (about 600 MB, once; kept in pincer's cache).
    Setup {
        /// The Python to build it with (3.10 or newer, with venv).
        #[arg(long, default_value = "python3")]
        python: PathBuf,
        /// Where [default: $PINCER_OSWORLD_SCORER, else ~/.cache/pincer/osworld-scorer/...].
        #[arg(long, value_name = "DIR")]
        env: Option<PathBuf>,
    },
    /// Download the files OSWorld's tasks name (setup files, gold files) into the file
    /// cache, in OSWorld's own layout: several at once, resumable (`.part` files continue
    /// where they stopped), each checked against the length the host announces; a cached
    /// file of the wrong size is fetched again.
    Fetch {
        /// OSWorld's `evaluation_examples` folder.
        dir: PathBuf,
        /// The index of tasks, in `DIR` or a path.
        #[arg(long, default_value = "test_all.json")]
        index: PathBuf,
        /// The file cache [default: $PINCER_OSWORLD_CACHE, else ~/.cache/pincer/osworld].
        #[arg(long, value_name = "CACHE")]
        assets: Option<PathBuf>,
        /// Downloads at once.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
        parallel: u32,
    },
    /// Say what the scorer can run: its environment, its sandbox, each library the metrics
    /// need and which metrics (and, with --tasks, which imported tasks) a missing one blocks.
    Doctor {
        /// The scorer's environment [default: as for setup].
        #[arg(long, value_name = "DIR")]
        env: Option<PathBuf>,
        /// A folder of imported OSWorld tasks, to count the tasks each library blocks.
        #[arg(long, value_name = "DIR")]
        tasks: Option<PathBuf>,
    },
}

pub(crate) async fn run(cmd: OsworldCmd) -> anyhow::Result<()> {
    match cmd {
        OsworldCmd::Fetch {
            dir,
            index,
            assets,
            parallel,
        } => {
            use pincer::peers::osworld::{cache, fetch, import};
            let assets = assets.unwrap_or_else(cache::default_dir);
            let all = import::import_dir(&dir, &index, &assets)?;
            let files = import::files(&all);
            eprintln!(
                "{} files for {} tasks into {} ({parallel} at a time)",
                files.len(),
                all.len(),
                assets.display()
            );
            let done = fetch::fetch(&files, &assets, parallel as usize, &|m| eprintln!("{m}"))
                .await
                .map_err(anyhow::Error::msg)?;
            let secs = done.elapsed.as_secs_f64();
            println!(
                "{} fetched ({}, {:.1} s, {}/s), {} already there, {} failed",
                done.fetched,
                fetch::human(done.bytes),
                secs,
                fetch::human((done.bytes as f64 / secs.max(1e-3)) as u64),
                done.present,
                done.failed.len()
            );
            if !done.failed.is_empty() {
                for (path, why) in &done.failed {
                    eprintln!("  {}: {why}", path.display());
                }
                anyhow::bail!(
                    "{} files could not be fetched; run the same command again to resume",
                    done.failed.len()
                );
            }
            Ok(())
        }
        OsworldCmd::Setup { python, env } => {
            let env = env.unwrap_or_else(scorer::default_env);
            let t = std::time::Instant::now();
            let made = scorer::setup(&env, &python, &|m| eprintln!("{m} ..."))?;
            if made {
                println!(
                    "OSWorld's scorer (desktop-env {}) is ready in {} ({:.0} s)",
                    metric::DESKTOP_ENV,
                    env.display(),
                    t.elapsed().as_secs_f64()
                );
            } else {
                println!(
                    "OSWorld's scorer (desktop-env {}) is already set up in {}",
                    metric::DESKTOP_ENV,
                    env.display()
                );
            }
            Ok(())
        }
        OsworldCmd::Doctor { env, tasks } => doctor(env.unwrap_or_else(scorer::default_env), tasks),
    }
}

/// The metrics each imported task of `dir` scores with.
fn task_metrics(dir: &std::path::Path) -> anyhow::Result<Vec<(String, Vec<String>)>> {
    let set = pincer::task::load_path(&dir.display().to_string())
        .with_context(|| format!("loading tasks from {}", dir.display()))?;
    Ok(set
        .tasks
        .iter()
        .map(|(t, _)| {
            let funcs = t
                .checkpoints
                .iter()
                .filter(|c| c.check == "osworld")
                .filter_map(|c| c.args.pointer("/evaluator/func"))
                .flat_map(|f| match f {
                    serde_json::Value::String(s) => vec![s.clone()],
                    serde_json::Value::Array(a) => a
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_owned))
                        .collect(),
                    _ => Vec::new(),
                })
                .collect();
            (t.id.clone(), funcs)
        })
        .collect())
}

fn doctor(env: PathBuf, tasks: Option<PathBuf>) -> anyhow::Result<()> {
    println!("scorer environment: {}", env.display());
    if let Err(e) = scorer::check_env(&env) {
        println!("  not ready: {e}");
        return Ok(());
    }
    println!("  desktop-env {} (pinned)", metric::DESKTOP_ENV);
    let libs: BTreeSet<&str> = metric::METRICS
        .iter()
        .flat_map(|(_, _, l)| l.iter().copied())
        .collect();
    let libs: Vec<&str> = libs.into_iter().collect();
    let have: BTreeMap<String, bool> = scorer::installed(&env, &libs)?.into_iter().collect();
    let per_task = tasks.as_deref().map(task_metrics).transpose()?;
    println!(
        "\n{:<12} {:<10} metrics that need it",
        "library", "installed"
    );
    for lib in &libs {
        let users: Vec<&str> = metric::METRICS
            .iter()
            .filter(|(_, _, l)| l.contains(lib))
            .map(|(n, _, _)| *n)
            .collect();
        let ok = have.get(*lib).copied().unwrap_or(false);
        let blocked = per_task.as_ref().filter(|_| !ok).map(|tasks| {
            tasks
                .iter()
                .filter(|(_, f)| f.iter().any(|f| users.contains(&f.as_str())))
                .count()
        });
        println!(
            "{lib:<12} {:<10} {}{}",
            if ok { "yes" } else { "NO" },
            users.join(", "),
            blocked
                .map(|n| format!("  (blocks {n} tasks)"))
                .unwrap_or_default()
        );
    }
    let missing: Vec<&str> = metric::NOT_INSTALLED.to_vec();
    println!(
        "\npincer's scorer leaves out {} on purpose (too heavy or unusable offline); \
         a task whose metric needs one is reported as not supported.",
        missing.join(", ")
    );
    // Start the sandboxed worker and score one thing, as a run would.
    let s = scorer::Scorer::new(env);
    let t = std::time::Instant::now();
    let req = scorer::Request {
        metrics: vec![("general".into(), "exact_match".into())],
        single: true,
        conj: "and".into(),
        calls: vec![scorer::Call {
            result: "a\n".into(),
            expected: serde_json::json!({"expected": "a\n"}),
            has_expected: true,
            options: serde_json::Map::new(),
            result_getter: None,
            expected_getter: None,
        }],
    };
    match s.score(&req) {
        Ok(r) if r.score == 1.0 => println!(
            "\nsandboxed worker: started and scored in {:.0} ms",
            t.elapsed().as_secs_f64() * 1000.0
        ),
        Ok(r) => anyhow::bail!(
            "sandboxed worker: exact_match scored {} instead of 1",
            r.score
        ),
        Err(e) => anyhow::bail!("sandboxed worker: {e}"),
    }
    Ok(())
}
