//! `pincer record`: a person's demonstration, recorded as a task run.

use anyhow::bail;
use pincer::env::registry::Registry;
use pincer::record::{self, RecordConfig};
use pincer::run::launch::{Environments, Signals, Source};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// `pincer record --env NAME -o DIR [--tasks SPEC --task ID]`.
#[derive(Debug, clap::Args)]
pub(crate) struct RecordArgs {
    /// The desktop to record (a name from the envs file; `pincer desktop vnc NAME` shows it
    /// to a person).
    #[arg(long, short = 'e', value_name = "NAME")]
    env: String,
    /// The recording's run directory.
    #[arg(long, short = 'o')]
    out: PathBuf,
    /// The task to demonstrate: a task file, directory or bundled suite, with --task. Its
    /// setup runs first, and the recording ends when it is done.
    #[arg(long, requires = "task")]
    tasks: Option<String>,
    /// The task's id in --tasks.
    #[arg(long, requires = "tasks")]
    task: Option<String>,
    /// What the demonstration is, for a recording without a task.
    #[arg(
        long,
        conflicts_with = "task",
        default_value = "a recorded demonstration"
    )]
    instruction: String,
    /// Stop after this many seconds.
    #[arg(long)]
    seconds: Option<u64>,
    /// Video frames a second at most (frames come only when the screen changes).
    #[arg(long, default_value_t = 10)]
    fps: u32,
}

struct Lines;

impl pincer::run::task::Progress for Lines {
    fn status(&self, _set: &str, _task: &str, text: &str) {
        if text.starts_with("setup") {
            eprintln!("  {text}");
        }
    }
}

pub(crate) async fn run(a: RecordArgs, reg: &Registry) -> anyhow::Result<()> {
    if !(1..=pincer_shared::limits::MAX_VIDEO_FPS).contains(&a.fps) {
        bail!(
            "--fps {}: give 1 to {}",
            a.fps,
            pincer_shared::limits::MAX_VIDEO_FPS
        );
    }
    let (task, open) = match (&a.tasks, &a.task) {
        (Some(spec), Some(id)) => {
            let mut tasks = pincer::task::select(spec, std::slice::from_ref(id), &[])?;
            (tasks.remove(0), false)
        }
        _ => (record::open_task(&a.instruction), true),
    };
    let roles: Vec<&String> = task.envs.keys().collect();
    let [role] = roles[..] else {
        bail!(
            "task {} has roles {}: a recording takes a task with one",
            task.id,
            roles
                .iter()
                .map(|r| r.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    };
    let stop = Arc::new(AtomicBool::new(false));
    let roles = [(role.clone(), task.envs[role].platform)].into();
    let envs = Environments::start(
        reg,
        &Source::Named(vec![format!("{role}={}", a.env)]),
        &roles,
        false,
        Signals::Caller(stop.clone()),
        &|m| eprintln!("{m}"),
    )
    .await?;
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\nCtrl-C: ending the recording");
                stop.store(true, Ordering::SeqCst);
            }
        });
    }
    eprintln!(
        "recording {} on {} into {}",
        task.id,
        a.env,
        a.out.display()
    );
    let done = record::record(RecordConfig {
        set: &envs.sets[0],
        task,
        open,
        out: a.out.clone(),
        stop,
        seconds: a.seconds,
        fps: a.fps,
        progress: &Lines,
    })
    .await?;
    for n in &done.notes {
        eprintln!("  note: {n}");
    }
    let r = &done.record;
    println!(
        "recorded {} actions from {} input events, {} video frames: {} ({}/{} checkpoints)",
        r.actions, done.events, done.frames, r.termination, r.passed, r.total
    );
    println!("trajectory: {}", done.trajectory.display());
    println!(
        "replay it:  pincer replay {} --env {}",
        done.trajectory.display(),
        a.env
    );
    Ok(())
}
