//! `pincer replay`: a recorded task run made again, and where it diverges.

use anyhow::{Context, bail};
use pincer::agent::{Agent, ObservationConfig};
use pincer::env::registry::Registry;
use pincer::run::replay::{self, Recording, Replayer};
use pincer::run::sets::{self, Made};
use pincer::run::{self, AgentFactory, RunConfig};
use pincer::task::Task;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// `pincer replay TRAJECTORY [--env NAME | --set ROLE=ENV,...] [--out DIR]`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReplayArgs {
    /// The trajectory to replay: a task run's directory inside its run directory
    /// (runs/NAME/tasks/TASK__r0).
    trajectory: PathBuf,
    /// The environment for a task with one role (a name from the envs file).
    #[arg(long, short = 'e', value_name = "NAME", conflicts_with = "set")]
    env: Option<String>,
    /// The environments as ROLE=ENV,... (names from the envs file). Without --env or --set,
    /// local desktops are started for the replay and stopped after it.
    #[arg(long, value_name = "ROLE=ENV,...")]
    set: Option<String>,
    /// The replay's run directory [default: RUN/replays/TASK__rN-TIME, beside the
    /// recording].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Screen size of local desktops (the recording's screenshots are compared with the
    /// replay's, so keep the size it was recorded at).
    #[arg(long, default_value = "1920x1080", value_parser = super::desktop::parse_size)]
    size: (u32, u32),
}

pub(crate) async fn run(a: ReplayArgs, reg: &Registry) -> anyhow::Result<()> {
    let recording = Recording::load(&a.trajectory)?;
    let task = recording.task.clone();
    let run_dir = recording
        .dir
        .parent()
        .and_then(|p| p.parent())
        .map(PathBuf::from)
        .unwrap_or_default();
    let out = a.out.clone().unwrap_or_else(|| {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let name = recording
            .dir
            .file_name()
            .map_or("replay".into(), |n| n.to_string_lossy().into_owned());
        run_dir.join("replays").join(format!("{name}-{stamp}"))
    });
    // What the recording's agent saw (element targets need the same marks), and plain
    // screenshots, which compare with the recording's if it kept them too.
    let mut observation = std::fs::read_to_string(run_dir.join("run.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| serde_json::from_value::<ObservationConfig>(v["observation"].clone()).ok())
        .unwrap_or_default();
    observation.screenshot = true;
    let seed = recording.record.as_ref().map_or(0, |r| r.seed);
    // A used directory is refused before any desktop starts.
    let (_, identity) = run::header(
        "replay",
        std::slice::from_ref(&task),
        1,
        seed,
        None,
        &observation,
        Default::default(),
    );
    run::check_out(&out, false, None, &identity)?;

    let made = Made::default();
    let env_sets = match (&a.env, &a.set) {
        (Some(env), _) => {
            let role = only_role(&task)?;
            sets::named_sets(reg, &[format!("{role}={env}")]).await?
        }
        (None, Some(spec)) => sets::named_sets(reg, std::slice::from_ref(spec)).await?,
        (None, None) => {
            let roles = sets::roles_needed(&[&task])?;
            eprintln!(
                "starting local desktops for roles {}",
                roles.keys().cloned().collect::<Vec<_>>().join(", ")
            );
            // A recording whose agent had API tools is replayed with them.
            let tools = observation.tools;
            match sets::local_sets(reg, &roles, 1, a.size, tools, &made, &mut |m| {
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
        }
    };
    let cancel = Arc::new(AtomicBool::new(false));
    {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                eprintln!("\nCtrl-C: finishing the current step, then stopping");
                cancel.store(true, Ordering::SeqCst);
            }
        });
    }
    let notes = Arc::new(Mutex::new(Vec::new()));
    let agent: AgentFactory = {
        let (steps, notes) = (recording.steps.clone(), notes.clone());
        Arc::new(move |_seed| {
            Ok(Box::new(Replayer::new(steps.clone(), notes.clone())) as Box<dyn Agent>)
        })
    };
    eprintln!(
        "replaying {} ({} steps) into {}",
        recording.dir.display(),
        recording.steps.len(),
        out.display()
    );
    let result = run::run(RunConfig {
        tasks: vec![task],
        agent,
        agent_name: "replay".into(),
        sets: env_sets,
        repeat: 1,
        seed,
        out: out.clone(),
        resume: false,
        shard: None,
        observation,
        correction: Default::default(),
        video: None,
        cancel: cancel.clone(),
    })
    .await;
    made.stop(reg).await;
    let Some(replayed) = result?.into_iter().next() else {
        bail!("the replay recorded nothing (interrupted before the task began)");
    };
    let notes = notes.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let cmp = replay::compare(
        &recording,
        &out.join(&replayed.trajectory),
        &replayed,
        &notes,
    )?;
    print!("{}", cmp.render());
    let mut json = serde_json::to_value(&cmp)?;
    json["reproduced"] = cmp.reproduced().into();
    json["first_divergence"] = cmp.first_divergence().into();
    let path = out.join("replay.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&json)?)
        .with_context(|| format!("writing {}", path.display()))?;
    println!("comparison: {}", path.display());
    Ok(())
}

/// The role of a task that has one.
fn only_role(task: &Task) -> anyhow::Result<&str> {
    let roles: Vec<&str> = task.envs.keys().map(String::as_str).collect();
    match roles[..] {
        [one] => Ok(one),
        _ => bail!(
            "task {} has roles {}: give --set ROLE=ENV,... instead of --env",
            task.id,
            roles.join(", ")
        ),
    }
}
