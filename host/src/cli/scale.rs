//! `pincer run ... --slurm | --kubernetes --shards N`: one run over many machines, on the
//! engine the user already has. The shards are `pincer run --shard K/N` processes writing
//! into one shared run directory; this side lays the run out, submits, follows, and merges.

use super::run::{RunArgs, shard_args};
use anyhow::{Context, bail};
use pincer::run::launch::RunOptions;
use pincer::run::{self, kube, slurm};
use pincer::rundir::{self, Identity};
use pincer::task::Task;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// `--tasks` as the shards read it: a path made absolute (nodes start elsewhere), a
/// bundled suite's name as it is.
fn tasks_for_shards(spec: &str) -> String {
    std::fs::canonicalize(spec).map_or_else(|_| spec.to_owned(), |p| p.display().to_string())
}

/// A run as a Slurm job array of `n` shards: lay out, submit, follow, merge.
pub(super) async fn on_slurm(
    a: &RunArgs,
    tasks_spec: &str,
    tasks: &[Task],
    agent_name: &str,
    options: &RunOptions,
    n: u32,
) -> anyhow::Result<()> {
    // Nothing is written or submitted without Slurm's commands.
    slurm::check_tools()?;
    let out = &options.out;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let out = std::fs::canonicalize(out)?;
    let identity = Identity {
        shards: Some(n),
        ..options.identity(agent_name, tasks)
    };
    run::found(&out, a.resume, &identity, tasks)?;
    let pincer = std::env::current_exe().context("finding this pincer binary")?;
    let plan = slurm::Plan {
        args: shard_args(a, &tasks_for_shards(tasks_spec), &out),
        out: out.clone(),
        shards: n,
        pincer,
        options: a.slurm_opts.clone(),
        retries: a.retries,
    };
    eprintln!(
        "running {} tasks x {} with agent {agent_name} as {n} Slurm shards; results in {}",
        tasks.len(),
        a.repeat,
        out.display()
    );
    let submitted = match slurm::submit(&plan).await {
        Ok(s) => s,
        Err(e) => {
            // Nothing ran: leave the directory as it was, so the same command can be
            // given again once the submission is fixed.
            if !a.resume {
                for f in ["run.json", "tasks.json"] {
                    let _ = std::fs::remove_file(out.join(f));
                }
                for d in ["slurm", "shards"] {
                    let _ = std::fs::remove_dir_all(out.join(d));
                }
                let _ = std::fs::remove_dir(&out);
            }
            return Err(e.into());
        }
    };
    eprintln!(
        "  submitted job array {} ({n} shards); its script: {}",
        submitted.job,
        submitted.script.display()
    );
    let mut progress = |m: &str| eprintln!("  {m}");
    let outcome = tokio::select! {
        r = slurm::follow(&plan, &submitted, &mut progress) => match r {
            Ok(o) => o,
            Err(e) => {
                // A run that cannot finish is not left running in pieces.
                submitted.cancel().await;
                return Err(e.into());
            }
        },
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\nCtrl-C: cancelling the run's Slurm jobs; continue later with --resume");
            submitted.cancel().await;
            bail!("interrupted; continue with --resume --out {}", out.display());
        }
    };
    let merge = merge(&out, a.no_report)?;
    println!("\n{}", outcome.status);
    for (k, why) in &outcome.resubmitted {
        println!("shard {k} resubmitted: {why}");
    }
    println!(
        "sharding overhead: submit to first task run started {}; merging the shards' results{} {:.1} ms",
        outcome
            .first_task_s
            .map_or("-".into(), |s| format!("{s:.1} s")),
        if a.no_report {
            ""
        } else {
            " and writing the report"
        },
        merge.as_secs_f64() * 1000.0
    );
    Ok(())
}

/// Merges every shard's results into the summary table and (unless `no_report`) the
/// report; returns how long that took.
fn merge(out: &Path, no_report: bool) -> anyhow::Result<std::time::Duration> {
    let started = Instant::now();
    let records = rundir::latest(
        rundir::shard::read_all(out).with_context(|| format!("reading {}", out.display()))?,
    );
    println!("\n{}", run::summary_table(&records));
    if !no_report {
        let paths = pincer::report::write(out).context("writing the report")?;
        println!("report:  {}", paths.html.display());
        println!("         {}", paths.markdown.display());
    }
    Ok(started.elapsed())
}

/// The Job's name: the run directory's name as a DNS label (it also names the run
/// directory on the volume).
fn dns_label(out: &Path) -> String {
    let raw = out
        .file_name()
        .map_or_else(|| "run".into(), |n| n.to_string_lossy().to_lowercase());
    let mut name: String = raw
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        name.insert_str(0, "pincer-");
    }
    name.truncate(50);
    name.trim_end_matches('-').to_owned()
}

/// A run as a Kubernetes Indexed Job of `n` pods (or its manifest, with `--dry-run`).
pub(super) async fn on_kubernetes(
    a: &RunArgs,
    tasks_spec: &str,
    out: PathBuf,
    n: u32,
) -> anyhow::Result<()> {
    let name = dns_label(&out);
    kube::check_name(&name)?;
    let in_pod = Path::new(kube::MOUNT).join(&name);
    if Path::new(tasks_spec).exists() && !tasks_spec.starts_with(kube::MOUNT) {
        eprintln!(
            "note: the pods read --tasks {tasks_spec} inside their image or under {}: a bundled suite, or a path on the volume",
            kube::MOUNT
        );
    }
    let plan = kube::Plan {
        name: name.clone(),
        namespace: a.namespace.clone(),
        image: a.image.clone().unwrap_or_default(),
        shards: n,
        claim: a.claim.clone(),
        args: shard_args(a, tasks_spec, &in_pod),
        retries: a.retries,
        vms: a.vm.is_some(),
        kvm: a.kvm,
    };
    if a.dry_run {
        println!("{}", serde_json::to_string_pretty(&kube::manifest(&plan))?);
        return Ok(());
    }
    let mut progress = |m: &str| eprintln!("  {m}");
    kube::create(&plan, a.resume, &mut progress).await?;
    tokio::select! {
        r = kube::follow(&plan, &mut progress) => r?,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\nCtrl-C: deleting the Job and its pods; continue later with --resume");
            kube::delete(&plan).await?;
            bail!("interrupted; continue with --resume --out {}", out.display());
        }
    }
    // Where the volume is mounted here too (--out in it), the run merges and reports as
    // on Slurm; the pods wrote under the Job's name.
    let here = out.with_file_name(&name);
    if here.join("run.json").is_file() {
        println!("\n{}", rundir::status::read(&here)?);
        merge(&here, a.no_report)?;
    } else {
        println!(
            "done: the run directory is {name}/ on the volume {}; mount it here and run `pincer run status` and `pincer report` on it",
            a.claim
        );
    }
    Ok(())
}
