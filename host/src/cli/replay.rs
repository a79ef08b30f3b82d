//! `pincer replay`: a recorded task run made again, and where it diverges.

use anyhow::{Context, bail};
use pincer::agent::Agent;
use pincer::env::registry::Registry;
use pincer::run::AgentFactory;
use pincer::run::launch::{Launch, RunOptions, Signals, Source};
use pincer::run::replay::{self, Recording, Replayer};
use pincer::task::Task;
use std::path::PathBuf;
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
    /// The environments as ROLE=ENV,... (names from the envs file). Without --env, --set
    /// or --vm, local desktops are started for the replay and stopped after it.
    #[arg(long, value_name = "ROLE=ENV,...", conflicts_with = "vm")]
    set: Option<String>,
    /// Replay on VMs of this image (`pincer image list`), started for the replay and
    /// stopped after it.
    #[arg(long, value_name = "IMAGE", conflicts_with = "env")]
    vm: Option<String>,
    /// Guest memory of --vm VMs, MiB (default: the image's, from its recipe's
    /// `vm_memory_mib`, else 1024).
    #[arg(long, value_parser = super::vm::memory_mib, requires = "vm")]
    vm_memory: Option<u32>,
    /// Virtual CPUs of --vm VMs.
    #[arg(long, default_value_t = 2, requires = "vm")]
    vm_cpus: u32,
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
    let out = a.out.clone().unwrap_or_else(|| {
        let name = recording
            .dir
            .file_name()
            .map_or("replay".into(), |n| n.to_string_lossy().into_owned());
        recording
            .run
            .join("replays")
            .join(format!("{name}-{}", pincer::clock::unix_ms()))
    });
    // What the recording's agent saw (element targets need the same marks), and plain
    // screenshots, which compare with the recording's if it kept them too.
    let mut observation = recording
        .header
        .as_ref()
        .and_then(|h| h.identity.observation)
        .unwrap_or_default();
    observation.screenshot = true;
    let mut options = RunOptions::new(out.clone(), observation);
    options.seed = recording.record.as_ref().map_or(0, |r| r.seed);
    let source = match (&a.env, &a.set) {
        (Some(env), _) => Source::Named(vec![format!("{}={env}", only_role(&task)?)]),
        (None, Some(spec)) => Source::Named(vec![spec.clone()]),
        // A recording whose agent had API tools is replayed with them (`observation`).
        (None, None) => super::run::source(
            Vec::new(),
            a.vm.clone(),
            (a.vm_memory, a.vm_cpus),
            1,
            (a.size, pincer::run::launch::DesktopSession::X11),
        )?,
    };
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
    let launch = Launch {
        tasks: vec![task],
        agent,
        agent_name: "replay".into(),
        source,
        options,
        signals: Signals::Terminal,
    };
    let done = launch.run(reg, &|m| eprintln!("{m}")).await?;
    let Some(replayed) = done.records.into_iter().next() else {
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
