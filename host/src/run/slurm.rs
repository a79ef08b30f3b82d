//! A sharded run on Slurm: one job array, one array task per shard, each running
//! `pincer run --shard K/N --resume` into the shared run directory. The job script is kept
//! in the run directory (`slurm/job.sh`) so that a user can read or resubmit it. The
//! submitter follows the array with `squeue`, shows progress from the run directory, and
//! resubmits a shard that ended without finishing its share (a failed node, a `scancel`):
//! the new attempt skips what the shard finished and redoes the rest.

use super::shard;
use super::status::{self, RunStatus};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Why a Slurm run could not be submitted or did not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SlurmError {
    /// A Slurm command is not installed here.
    #[error(
        "'{0}' was not found on PATH: run from a machine with Slurm's client commands (Debian and Ubuntu: apt install slurm-client) that can reach the cluster"
    )]
    Missing(&'static str),
    /// An option that cannot go into a job script.
    #[error(
        "--slurm-opt {0:?}: one sbatch option per --slurm-opt, on one line (e.g. --partition=gpu)"
    )]
    BadOption(String),
    /// `sbatch` refused the job.
    #[error("sbatch refused the job: {0}")]
    Rejected(String),
    /// A Slurm command could not run.
    #[error("running {command}: {source}")]
    Command {
        /// The command.
        command: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A shard ran but never wrote into the run directory.
    #[error(
        "shard {shard} ({job}, {state} on {node}) never wrote into {}: the run directory must be on a file system every node mounts at the same path (see its log {})", .dir.display(), .log.display()
    )]
    NotShared {
        /// The shard.
        shard: u32,
        /// The Slurm job.
        job: String,
        /// Its final state.
        state: String,
        /// Its node.
        node: String,
        /// The run directory.
        dir: PathBuf,
        /// Where Slurm wrote its output.
        log: PathBuf,
    },
    /// Shards failed more often than allowed.
    #[error("{0}\nthe finished task runs are kept: continue with the same command and --resume")]
    GaveUp(String),
    /// The run directory.
    #[error(transparent)]
    Run(#[from] super::RunError),
}

/// What to submit.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The run directory (absolute; shared with every node).
    pub out: PathBuf,
    /// Shards (array tasks).
    pub shards: u32,
    /// The `pincer` binary the nodes run (on a shared file system).
    pub pincer: PathBuf,
    /// `pincer run` arguments of every shard, without `--shard`.
    pub args: Vec<String>,
    /// Extra sbatch options, one per line of the script.
    pub options: Vec<String>,
    /// Times a shard is resubmitted before the run gives up.
    pub retries: u32,
}

/// Quotes a word for a POSIX shell.
pub(crate) fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The job script: an array of `shards` tasks, output per shard into its directory, a
/// node-local state directory (desktops and their names are the node's own), and the
/// shard's `pincer run`.
pub fn script(plan: &Plan) -> Result<String, SlurmError> {
    let mut s = String::from("#!/bin/sh\n");
    s.push_str("# A shard of a pincer run (written by `pincer run --slurm`). Resubmit the whole\n");
    s.push_str("# run with `sbatch THIS`, one shard with `sbatch --array=K THIS`.\n");
    s.push_str(&format!("#SBATCH --job-name={}\n", job_name(plan)));
    s.push_str(&format!("#SBATCH --array=0-{}\n", plan.shards - 1));
    s.push_str(&format!(
        "#SBATCH --output={}/shards/%a/slurm-%A_%a.log\n",
        plan.out.display()
    ));
    for o in &plan.options {
        if o.contains(['\n', '\r']) || o.trim().is_empty() {
            return Err(SlurmError::BadOption(o.clone()));
        }
        s.push_str(&format!("#SBATCH {}\n", o.trim()));
    }
    // On a node that does not share the run directory, say so instead of running a
    // shard into a directory nobody else sees.
    let out = quote(&plan.out.display().to_string());
    s.push_str(&format!(
        "if [ ! -f {out}/run.json ]; then echo \"pincer: {out} is not here on $(hostname): the run directory must be on a file system every node mounts at the same path\" >&2; exit 3; fi\n"
    ));
    s.push_str("state=\"${TMPDIR:-/tmp}/pincer-slurm-${SLURM_JOB_ID}\"\n");
    s.push_str("export PINCER_STATE_DIR=\"$state\" PINCER_ENVS=\"$state/envs.toml\"\n");
    let mut line = quote(&plan.pincer.display().to_string());
    for a in &plan.args {
        line.push(' ');
        line.push_str(&quote(a));
    }
    line.push_str(&format!(
        " --shard \"${{SLURM_ARRAY_TASK_ID}}/{}\" &\n",
        plan.shards
    ));
    s.push_str(&line);
    // The node-local state goes with the shard, also when Slurm stops it (scancel, time
    // limit): the shard stops its desktops on SIGTERM, then the directory is removed.
    s.push_str(
        "pid=$!
",
    );
    s.push_str(
        "trap 'kill -TERM $pid 2>/dev/null; wait $pid; rm -rf \"$state\"; exit 143' TERM INT
",
    );
    s.push_str(
        "wait $pid
rc=$?
rm -rf \"$state\"
exit $rc
",
    );
    Ok(s)
}

/// Runs a Slurm command, returning its standard output.
async fn slurm(program: &'static str, args: &[String]) -> Result<String, SlurmError> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|source| SlurmError::Command {
            command: format!("{program} {}", args.join(" ")),
            source,
        })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        return Err(if program == "sbatch" {
            SlurmError::Rejected(err)
        } else {
            SlurmError::Command {
                command: format!("{program} {}", args.join(" ")),
                source: std::io::Error::other(err),
            }
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Checks that Slurm's commands are here (before anything is written or started).
pub fn check_tools() -> Result<(), SlurmError> {
    for t in ["sbatch", "squeue", "scancel"] {
        if crate::desktop::which(t).is_none() {
            return Err(SlurmError::Missing(t));
        }
    }
    Ok(())
}

/// Submits the script (the whole array, or one shard of it); returns the job id.
async fn sbatch(script: &Path, only: Option<u32>) -> Result<String, SlurmError> {
    let mut args = vec!["--parsable".to_owned()];
    if let Some(k) = only {
        args.push(format!("--array={k}"));
    }
    args.push(script.display().to_string());
    let out = slurm("sbatch", &args).await?;
    // `--parsable` prints "JOBID" or "JOBID;CLUSTER".
    let id = out.trim().split(';').next().unwrap_or_default().to_owned();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SlurmError::Rejected(format!(
            "unexpected answer from sbatch --parsable: {out:?}"
        )));
    }
    Ok(id)
}

/// What `squeue` says about an array task: state and node.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    state: String,
    node: String,
}

/// Whether a Slurm job state is final.
fn ended(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "CANCELLED"
            | "TIMEOUT"
            | "NODE_FAIL"
            | "PREEMPTED"
            | "OUT_OF_MEMORY"
            | "BOOT_FAIL"
            | "DEADLINE"
            | "SPECIAL_EXIT"
            | "REVOKED"
    )
}

/// The array tasks of `jobs`, by (job id, index).
async fn squeue(jobs: &[String]) -> Result<BTreeMap<(String, u32), Seen>, SlurmError> {
    let out = slurm(
        "squeue",
        &[
            "--noheader".into(),
            "--array".into(),
            "--states=all".into(),
            format!("--jobs={}", jobs.join(",")),
            "--format=%F|%K|%T|%N".into(),
        ],
    )
    .await?;
    Ok(parse_squeue(&out))
}

fn parse_squeue(out: &str) -> BTreeMap<(String, u32), Seen> {
    out.lines()
        .filter_map(|l| {
            let mut f = l.trim().split('|');
            let (job, index, state, node) = (f.next()?, f.next()?, f.next()?, f.next()?);
            Some((
                (job.to_owned(), index.parse().ok()?),
                Seen {
                    state: state.to_owned(),
                    node: if node.is_empty() {
                        "-".into()
                    } else {
                        node.to_owned()
                    },
                },
            ))
        })
        .collect()
}

/// One shard as the submitter follows it.
#[derive(Debug)]
struct Follow {
    job: String,
    attempts: u32,
    seen: Option<Seen>,
    finished: bool,
    /// Whether it waited for another process that held the shard.
    waited: bool,
}

/// What a followed run did.
#[derive(Debug)]
pub struct Outcome {
    /// The array's job id.
    pub job: String,
    /// Resubmissions, as `(shard, why)`.
    pub resubmitted: Vec<(u32, String)>,
    /// Seconds from submission to the first task run starting, if one started.
    pub first_task_s: Option<f64>,
    /// The final status.
    pub status: RunStatus,
}

/// The jobs' name: the run directory's.
fn job_name(plan: &Plan) -> String {
    let dir = plan
        .out
        .file_name()
        .map_or("run".into(), |n| n.to_string_lossy().into_owned());
    format!("pincer-{}", crate::task::sanitize(&dir))
}

/// Cancels every job of the run, resubmissions included (a Ctrl-C of the submitter).
pub async fn cancel(plan: &Plan) {
    let _ = slurm("scancel", &[format!("--name={}", job_name(plan))]).await;
}

/// A submitted job array.
#[derive(Debug)]
pub struct Submitted {
    /// The array's job id.
    pub job: String,
    /// The job script.
    pub script: PathBuf,
    at: Instant,
    at_ms: u64,
}

/// Writes the job script into the run directory and submits the array.
pub async fn submit(plan: &Plan) -> Result<Submitted, SlurmError> {
    let dir = plan.out.join("slurm");
    let io = |what: String| move |e| super::RunError::Io { what, source: e };
    std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
    // Slurm opens each shard's output file in its directory: it must exist.
    for k in 0..plan.shards {
        let d = shard::dir(&plan.out, k);
        std::fs::create_dir_all(&d).map_err(io(format!("creating {}", d.display())))?;
    }
    let script_path = dir.join("job.sh");
    std::fs::write(&script_path, script(plan)?)
        .map_err(io(format!("writing {}", script_path.display())))?;
    let (at, at_ms) = (Instant::now(), shard::now_ms());
    let job = sbatch(&script_path, None).await?;
    Ok(Submitted {
        job,
        script: script_path,
        at,
        at_ms,
    })
}

/// Follows a submitted array to the end, resubmitting shards that end unfinished;
/// `progress` gets a line whenever something changes.
pub async fn follow(
    plan: &Plan,
    sub: &Submitted,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Outcome, SlurmError> {
    let (job, path, submitted, submitted_ms) = (sub.job.clone(), &sub.script, sub.at, sub.at_ms);
    let mut shards: Vec<Follow> = (0..plan.shards)
        .map(|_| Follow {
            job: job.clone(),
            attempts: 1,
            seen: None,
            finished: false,
            waited: false,
        })
        .collect();
    let mut resubmitted = Vec::new();
    let mut last_line = String::new();
    let mut first_task_s = None;
    let mut squeue_failing_since: Option<Instant> = None;
    loop {
        let jobs: Vec<String> = {
            let mut j: Vec<String> = shards.iter().map(|s| s.job.clone()).collect();
            j.sort();
            j.dedup();
            j
        };
        let seen = match squeue(&jobs).await {
            Ok(s) => {
                squeue_failing_since = None;
                s
            }
            Err(e) => {
                let since = *squeue_failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(120) {
                    return Err(e);
                }
                progress(&format!("squeue failed ({e}); trying again"));
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        };
        let now = status::read(&plan.out)?;
        if first_task_s.is_none()
            && now.shards.iter().any(|s| {
                s.started
                    .as_ref()
                    .is_some_and(|st| st.at_ms >= submitted_ms)
            })
        {
            // A shard process started; its first task run starts right after its
            // environments are up, which its records tell once they finish.
            first_task_s = first_started(&plan.out, submitted_ms)
                .map(|ms| ms.saturating_sub(submitted_ms) as f64 / 1000.0);
        }
        for (k, f) in shards.iter_mut().enumerate() {
            let k = k as u32;
            if f.finished {
                continue;
            }
            f.seen = seen.get(&(f.job.clone(), k)).cloned().or(f.seen.take());
            let gone = !seen.contains_key(&(f.job.clone(), k));
            let state = f
                .seen
                .as_ref()
                .map_or("GONE", |s| s.state.as_str())
                .to_owned();
            if !(gone || ended(&state)) {
                continue;
            }
            let st = &now.shards[k as usize];
            if st.done.is_some() && st.finished == st.share {
                f.finished = true;
                continue;
            }
            let node = f.seen.as_ref().map_or("-".to_owned(), |s| s.node.clone());
            // Another process runs the shard (an earlier submission of this run, still
            // going): this attempt was refused; wait for that one, then judge.
            if st.running {
                if !f.waited {
                    progress(&format!(
                        "shard {k}: another process runs it ({}): waiting for it",
                        st.started
                            .as_ref()
                            .map_or("an earlier submission".into(), |s| format!(
                                "pid {} on {}{}",
                                s.pid,
                                s.host,
                                s.job.as_ref().map(|j| format!(", {j}")).unwrap_or_default()
                            ))
                    ));
                    f.waited = true;
                }
                continue;
            }
            // A shard that waited for another process was refused, not unseen.
            let wrote = f.waited || st.started.as_ref().is_some_and(|s| s.at_ms >= submitted_ms);
            if !wrote && state == "FAILED" {
                return Err(SlurmError::NotShared {
                    shard: k,
                    job: format!("job {}_{k}", f.job),
                    state,
                    node,
                    dir: plan.out.clone(),
                    log: shard::dir(&plan.out, k).join(format!("slurm-{}_{k}.log", f.job)),
                });
            }
            let why = format!(
                "shard {k} (job {}_{k} on {node}) ended {state} with {}/{} task runs finished",
                f.job, st.finished, st.share
            );
            if f.attempts > plan.retries {
                return Err(SlurmError::GaveUp(format!(
                    "{why}, after {} attempts (--retries {}); its log: {}",
                    f.attempts,
                    plan.retries,
                    shard::dir(&plan.out, k).display()
                )));
            }
            f.job = sbatch(path, Some(k)).await?;
            f.attempts += 1;
            f.seen = None;
            progress(&format!(
                "{why}: resubmitted as job {}_{k} (attempt {} of {})",
                f.job,
                f.attempts,
                plan.retries + 1
            ));
            resubmitted.push((k, why));
        }
        let line = progress_line(&now, &shards, submitted.elapsed());
        if line != last_line {
            progress(&line);
            last_line = line;
        }
        if shards.iter().all(|f| f.finished) {
            let status = status::read(&plan.out)?;
            let first_task_s = first_task_s.or_else(|| {
                first_started(&plan.out, submitted_ms)
                    .map(|ms| ms.saturating_sub(submitted_ms) as f64 / 1000.0)
            });
            return Ok(Outcome {
                job,
                resubmitted,
                first_task_s,
                status,
            });
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// When the first task run since `since_ms` started (from the records written so far).
fn first_started(out: &Path, since_ms: u64) -> Option<u64> {
    shard::read_all(out)
        .ok()?
        .iter()
        .map(|r| r.started_ms)
        .filter(|ms| *ms >= since_ms)
        .min()
}

fn progress_line(now: &RunStatus, shards: &[Follow], elapsed: Duration) -> String {
    let parts: Vec<String> = shards
        .iter()
        .zip(&now.shards)
        .enumerate()
        .map(|(k, (f, st))| {
            let state = if f.finished {
                "done".to_owned()
            } else {
                f.seen
                    .as_ref()
                    .map_or("submitted".into(), |s| s.state.to_lowercase())
            };
            let node = f
                .seen
                .as_ref()
                .filter(|s| s.node != "-")
                .map(|s| format!(" on {}", s.node))
                .unwrap_or_default();
            format!("shard {k} {state}{node} {}/{}", st.finished, st.share)
        })
        .collect();
    format!(
        "[{:>4.0} s] {}/{} task runs finished: {}",
        elapsed.as_secs_f64(),
        now.finished(),
        now.total,
        parts.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_quotes_arguments_and_keeps_state_on_the_node() {
        let plan = Plan {
            out: "/shared/runs/my run".into(),
            shards: 3,
            pincer: "/shared/bin/pincer".into(),
            args: vec![
                "run".into(),
                "--tasks".into(),
                "demo".into(),
                "--agent-opt".into(),
                "base_url=http://x/it's".into(),
            ],
            options: vec!["--partition=gpu".into(), "--time=01:00:00".into()],
            retries: 2,
        };
        let s = script(&plan).unwrap();
        assert!(s.contains("#SBATCH --array=0-2\n"), "{s}");
        assert!(
            s.contains("#SBATCH --output=/shared/runs/my run/shards/%a/slurm-%A_%a.log\n"),
            "{s}"
        );
        assert!(
            s.contains("#SBATCH --partition=gpu\n#SBATCH --time=01:00:00\n"),
            "{s}"
        );
        assert!(
            s.contains(
                "\n/shared/bin/pincer run --tasks demo --agent-opt 'base_url=http://x/it'\\''s' --shard \"${SLURM_ARRAY_TASK_ID}/3\" &\n"
            ),
            "{s}"
        );
        assert!(s.contains("export PINCER_STATE_DIR=\"$state\""), "{s}");
        assert!(
            s.ends_with("wait $pid\nrc=$?\nrm -rf \"$state\"\nexit $rc\n"),
            "{s}"
        );
        let bad = Plan {
            options: vec!["--x\n#SBATCH --y".into()],
            ..plan
        };
        assert!(matches!(script(&bad), Err(SlurmError::BadOption(_))));
    }

    #[test]
    fn squeue_lines_name_each_array_task() {
        let out = "41|0|COMPLETED|node1\n41|1|RUNNING|node2\n44|1|PENDING|\ngarbage\n";
        let seen = parse_squeue(out);
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[&("41".into(), 1)].node, "node2");
        assert_eq!(seen[&("44".into(), 1)].node, "-");
        assert!(ended("CANCELLED") && ended("NODE_FAIL") && !ended("RUNNING"));
    }
}
