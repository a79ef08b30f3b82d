//! `pincer dataset ground|idm|critic` (datasets from live desktops and from run directories)
//! and `pincer eval FORMAT` (a model's answers on one of them).

use anyhow::bail;
use pincer::dataset::{self, ground, score, trajectory};
use pincer::env::Deadlines;
use pincer::env::registry::Registry;
use pincer::run::launch::{Environments, Signals, Source};
use pincer_shared::Platform;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, clap::Subcommand)]
pub(crate) enum DatasetCmd {
    /// GUI grounding items (screenshot, instruction, box) from the UI tree of live screens:
    /// every visible, named element whose centre hit-tests back to it. With --tasks, each
    /// task's setup makes the screen (on --env, or on a local desktop started for it);
    /// without, the screens of the --env environments as they are.
    Ground(GroundArgs),
    /// Inverse-dynamics items (frames before and after, the action) from the executed
    /// actions of run directories.
    Idm(FromRuns),
    /// Success-detection items (a task run's frames and instruction, the graph's verdict)
    /// from run directories.
    Critic(FromRuns),
}

#[derive(Debug, clap::Args)]
pub(crate) struct GroundArgs {
    /// Environments to capture (repeatable). With --tasks, at most one: the tasks' setups
    /// run on it.
    #[arg(long, short = 'e', value_name = "NAME")]
    env: Vec<String>,
    /// Make each screen with a task's setup: a task file, directory or bundled suite
    /// (`demo`). Tasks that need more than one environment are skipped.
    #[arg(long)]
    tasks: Option<String>,
    /// Only these task ids (repeatable).
    #[arg(long = "task", requires = "tasks")]
    only: Vec<String>,
    /// Only tasks with this tag (repeatable; any matches).
    #[arg(long = "tag", requires = "tasks")]
    tags: Vec<String>,
    /// Screen size of the local desktop started when --tasks is given without --env.
    #[arg(long, default_value = "1920x1080", value_parser = super::desktop::parse_size)]
    size: (u32, u32),
    /// The dataset directory (new, or without a dataset in it).
    #[arg(long, short = 'o')]
    out: PathBuf,
}

#[derive(Debug, clap::Args)]
pub(crate) struct FromRuns {
    /// Run directories (`pincer run --out`).
    #[arg(required = true)]
    runs: Vec<PathBuf>,
    /// The dataset directory (new, or without a dataset of this kind in it).
    #[arg(long, short = 'o')]
    out: PathBuf,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum Format {
    /// Grounding: answers give a point.
    Ground,
    /// Inverse dynamics: answers give an action.
    Idm,
    /// Success detection: answers say success or not.
    Critic,
}

#[derive(Debug, clap::Args)]
pub(crate) struct EvalArgs {
    /// The dataset's kind.
    #[arg(value_enum)]
    format: Format,
    /// The dataset directory.
    #[arg(long)]
    dataset: PathBuf,
    /// The model's answers, one JSON object a line naming an item by "id".
    #[arg(long)]
    answers: PathBuf,
    /// Print the score as JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) async fn run(c: DatasetCmd, reg: &Registry) -> anyhow::Result<()> {
    match c {
        DatasetCmd::Ground(a) => ground_set(a, reg).await,
        DatasetCmd::Idm(a) => {
            let t = Instant::now();
            let built = trajectory::idm(&a.runs, &a.out)?;
            report_built(&built, t, &a.out, dataset::IDM_FILE);
            Ok(())
        }
        DatasetCmd::Critic(a) => {
            let t = Instant::now();
            let built = trajectory::critic(&a.runs, &a.out)?;
            let successes = built.items.iter().filter(|i| i.is_success).count();
            report_built(&built, t, &a.out, dataset::CRITIC_FILE);
            println!(
                "labels: {successes} success, {} failure",
                built.items.len() - successes
            );
            Ok(())
        }
    }
}

fn report_built<T>(built: &trajectory::Built<T>, t: Instant, out: &Path, file: &str) {
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{} items from {} task runs, {} images, in {secs:.2} s ({:.0} items/s): {}",
        built.items.len(),
        built.runs,
        built.images,
        built.items.len() as f64 / secs.max(1e-9),
        out.join(file).display()
    );
    for (why, n) in &built.skipped {
        println!("left out: {n} ({why})");
    }
}

async fn ground_set(a: GroundArgs, reg: &Registry) -> anyhow::Result<()> {
    let tasks = match &a.tasks {
        Some(spec) => {
            let tasks = pincer::task::select(spec, &a.only, &a.tags)?;
            if a.env.len() > 1 {
                bail!("--tasks runs the setups on one environment: give at most one --env");
            }
            Some(tasks)
        }
        None if a.env.is_empty() => bail!(
            "nothing to capture: give --env NAME (its screen as it is) or --tasks SPEC (each task's setup, on a local desktop or --env)"
        ),
        None => None,
    };
    let mut w = ground::Writer::new(&a.out)?;
    let t = Instant::now();
    match tasks {
        None => {
            for name in &a.env {
                let env = reg.connect(Some(name), Deadlines::default()).await?;
                let n = ground::screen(&env, &mut w).await?;
                println!("{name}: {n} items");
            }
        }
        Some(tasks) => {
            // A desktop of our own unless one was named; stopped however the capture ends.
            let source = match a.env.first() {
                Some(name) => Source::Named(vec![format!("desktop={name}")]),
                None => {
                    println!("starting a local desktop");
                    Source::Local {
                        count: 1,
                        size: a.size,
                        session: pincer::run::launch::DesktopSession::X11,
                    }
                }
            };
            let roles = [("desktop".to_owned(), Platform::Linux)].into();
            let envs = Environments::start(reg, &source, &roles, false, Signals::Terminal, &|m| {
                println!("{m}")
            })
            .await?;
            let work = async {
                let env = envs.sets[0]
                    .envs
                    .get("desktop")
                    .ok_or_else(|| anyhow::anyhow!("no desktop to capture"))?;
                Ok::<_, anyhow::Error>(
                    ground::from_tasks(env, &tasks, &mut w, &mut |task, n| {
                        println!("{task}: {n} items");
                    })
                    .await?,
                )
            };
            // Ctrl-C still stops the desktop started for the command.
            let interrupted = envs.cancel().clone();
            let result = tokio::select! {
                r = work => r,
                () = async {
                    while !interrupted.load(std::sync::atomic::Ordering::SeqCst) {
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    }
                } => Err(anyhow::anyhow!("interrupted before the metadata was written")),
            };
            envs.stop().await;
            for (task, why) in result? {
                println!("skipped {task}: {why}");
            }
        }
    }
    let secs = t.elapsed().as_secs_f64();
    let (screens, missed, ambiguous) = (w.screens, w.missed, w.ambiguous);
    let items = w.finish()?;
    println!(
        "{} items on {screens} screenshots in {secs:.2} s ({:.1} items/s); left out: {missed} not hit back at their centre, {ambiguous} ambiguous",
        items.len(),
        items.len() as f64 / secs.max(1e-9),
    );
    println!(
        "{}\n{}",
        a.out.join(dataset::GROUND_FILE).display(),
        a.out.join(dataset::REVIEW_FILE).display()
    );
    Ok(())
}

pub(crate) fn eval(a: EvalArgs) -> anyhow::Result<()> {
    let format = match a.format {
        Format::Ground => score::Format::Ground,
        Format::Idm => score::Format::Idm,
        Format::Critic => score::Format::Critic,
    };
    let s = score::score(format, &a.dataset, &a.answers)?;
    if a.json {
        println!("{}", serde_json::to_string(&s)?);
        return Ok(());
    }
    match s {
        score::Score::Ground(g) => println!(
            "{} items, {} answered, {} hits: accuracy {:.3}",
            g.items, g.answered, g.hits, g.accuracy
        ),
        score::Score::Idm(i) => println!(
            "{} items, {} answered: action type {} right (accuracy {:.3}), type and arguments {} right (accuracy {:.3})",
            i.items, i.answered, i.type_correct, i.type_accuracy, i.correct, i.accuracy
        ),
        score::Score::Critic(c) => println!(
            "{} items, {} answered: precision {:.3}, recall {:.3}, F1 {:.3}, accuracy {:.3} (tp {}, fp {}, tn {}, fn {})",
            c.items,
            c.answered,
            c.precision,
            c.recall,
            c.f1,
            c.accuracy,
            c.true_positives,
            c.false_positives,
            c.true_negatives,
            c.false_negatives
        ),
    }
    Ok(())
}
