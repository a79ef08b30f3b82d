//! A sharded run on Slurm: one job array, one array task per shard, each running
//! `pincer run --shard K/N --resume` into the shared run directory. The job script is kept
//! in the run directory (`slurm/job.sh`) so that a user can read or resubmit it. The
//! submitter follows the array with `squeue`, shows progress from the run directory, and
//! resubmits a shard that ended without finishing its share (a failed node, a `scancel`):
//! the new attempt skips what the shard finished and redoes the rest.

use crate::rundir::shard;
use crate::rundir::status::{self, RunStatus};
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
    /// A run directory whose path cannot go into a job script.
    #[error("{}: a run directory for Slurm must not have '\"' or a line break in its path", .0.display())]
    BadPath(PathBuf),
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
    let out = plan.out.display().to_string();
    if out.contains(['"', '\n', '\r']) {
        return Err(SlurmError::BadPath(plan.out.clone()));
    }
    let mut s = String::from("#!/bin/sh\n");
    s.push_str("# A shard of a pincer run (written by `pincer run --slurm`). Resubmit the whole\n");
    s.push_str("# run with `sbatch THIS`, one shard with `sbatch --array=K THIS`.\n");
    s.push_str(&format!("#SBATCH --job-name={}\n", job_name(plan)));
    s.push_str(&format!("#SBATCH --array=0-{}\n", plan.shards - 1));
    // sbatch reads `%` in file names as a pattern: `%%` is a `%`.
    s.push_str(&format!(
        "#SBATCH --output=\"{}/shards/%a/slurm-%A_%a.log\"\n",
        out.replace('%', "%%")
    ));
    for o in &plan.options {
        if o.contains(['\n', '\r']) || o.trim().is_empty() {
            return Err(SlurmError::BadOption(o.clone()));
        }
        s.push_str(&format!("#SBATCH {}\n", o.trim()));
    }
    // On a node that does not share the run directory, say so instead of running a
    // shard into a directory nobody else sees.
    let q = quote(&out);
    s.push_str(&format!(
        "if [ ! -f {q}/run.json ]; then echo 'pincer: '{q}\" is not here on $(hostname): the run directory must be on a file system every node mounts at the same path\" >&2; exit 3; fi\n"
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
    s.push_str("pid=$!\n");
    s.push_str(
        "trap 'kill -TERM $pid 2>/dev/null; wait $pid; rm -rf \"$state\"; exit 143' TERM INT\n",
    );
    s.push_str("wait $pid\nrc=$?\nrm -rf \"$state\"\nexit $rc\n");
    Ok(s)
}

/// Runs a Slurm command, returning its standard output. `SQUEUE_*` variables of the
/// caller's environment (a default partition, user or format) would change what squeue
/// shows, so they are left out.
async fn slurm(program: &'static str, args: &[String]) -> Result<String, SlurmError> {
    let mut cmd = tokio::process::Command::new(program);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SQUEUE_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd
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

/// A job id as sbatch gives it: the id, and the cluster when it is not the local one.
#[derive(Debug, Clone, PartialEq)]
struct JobId {
    id: String,
    cluster: Option<String>,
}

/// Submits the script (the whole array, or one shard of it).
async fn sbatch(script: &Path, only: Option<u32>) -> Result<JobId, SlurmError> {
    let mut args = vec!["--parsable".to_owned()];
    if let Some(k) = only {
        args.push(format!("--array={k}"));
    }
    args.push(script.display().to_string());
    let out = slurm("sbatch", &args).await?;
    // `--parsable` prints "JOBID" or "JOBID;CLUSTER".
    let mut parts = out.trim().split(';');
    let id = parts.next().unwrap_or_default().to_owned();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SlurmError::Rejected(format!(
            "unexpected answer from sbatch --parsable: {out:?}"
        )));
    }
    let cluster = parts.next().map(str::to_owned).filter(|c| !c.is_empty());
    Ok(JobId { id, cluster })
}

/// `--clusters=X` for the commands about a job on cluster X.
fn clusters(jobs: &[JobId]) -> Vec<String> {
    let mut names: Vec<&str> = jobs.iter().filter_map(|j| j.cluster.as_deref()).collect();
    names.sort_unstable();
    names.dedup();
    if names.is_empty() {
        Vec::new()
    } else {
        vec![format!("--clusters={}", names.join(","))]
    }
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

/// The array tasks of `jobs`, by (job id, index). Jobs Slurm has forgotten (finished
/// longer ago than its `MinJobAge`) are simply not there.
async fn squeue(jobs: &[JobId]) -> Result<BTreeMap<(String, u32), Seen>, SlurmError> {
    let mut ids: Vec<&str> = jobs.iter().map(|j| j.id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut args = vec![
        "--noheader".into(),
        "--array".into(),
        "--states=all".into(),
        format!("--jobs={}", ids.join(",")),
        "--format=%F|%K|%T|%N".into(),
    ];
    args.extend(clusters(jobs));
    match slurm("squeue", &args).await {
        Ok(out) => Ok(parse_squeue(&out)),
        Err(SlurmError::Command { source, .. })
            if source.to_string().contains("Invalid job id") =>
        {
            Ok(BTreeMap::new())
        }
        Err(e) => Err(e),
    }
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
    job: JobId,
    /// When its current job was submitted.
    since: Instant,
    attempts: u32,
    seen: Option<Seen>,
    finished: bool,
    /// Whether it waited for another process that held the shard.
    waited: bool,
}

/// What a followed run did.
#[derive(Debug)]
pub struct Outcome {
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

/// A submitted job array, and every job submitted for it since.
#[derive(Debug)]
pub struct Submitted {
    /// The array's job id.
    pub job: String,
    /// The job script.
    pub script: PathBuf,
    jobs: std::sync::Mutex<Vec<JobId>>,
    at: Instant,
    at_ms: u64,
}

impl Submitted {
    fn record(&self, job: &JobId) {
        self.jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(job.clone());
    }

    /// Cancels every job submitted for the run (a Ctrl-C of the submitter, a run that
    /// cannot finish), and no other.
    pub async fn cancel(&self) {
        let jobs = self
            .jobs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut args: Vec<String> = jobs.iter().map(|j| j.id.clone()).collect();
        args.extend(clusters(&jobs));
        let _ = slurm("scancel", &args).await;
    }
}

/// Writes the job script into the run directory and submits the array.
pub async fn submit(plan: &Plan) -> Result<Submitted, SlurmError> {
    let dir = plan.out.join("slurm");
    std::fs::create_dir_all(&dir).map_err(super::io(format!("creating {}", dir.display())))?;
    // Slurm opens each shard's output file in its directory: it must exist.
    for k in 0..plan.shards {
        let d = shard::dir(&plan.out, k);
        std::fs::create_dir_all(&d).map_err(super::io(format!("creating {}", d.display())))?;
    }
    let script_path = dir.join("job.sh");
    std::fs::write(&script_path, script(plan)?)
        .map_err(super::io(format!("writing {}", script_path.display())))?;
    let (at, at_ms) = (Instant::now(), crate::clock::unix_ms());
    let job = sbatch(&script_path, None).await?;
    Ok(Submitted {
        job: job.id.clone(),
        script: script_path,
        jobs: std::sync::Mutex::new(vec![job]),
        at,
        at_ms,
    })
}

/// How long a submitted job may stay out of squeue's answers before it counts as gone
/// (a busy controller, or a job squeue cannot see).
const UNSEEN_GRACE: Duration = Duration::from_secs(60);

/// How long squeue or the run directory may fail to answer before the run gives up.
const TROUBLE_GRACE: Duration = Duration::from_secs(120);

/// Follows a submitted array to the end, resubmitting shards that end unfinished;
/// `progress` gets a line whenever something changes.
pub async fn follow(
    plan: &Plan,
    sub: &Submitted,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Outcome, SlurmError> {
    let first = sub
        .jobs
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)[0]
        .clone();
    let mut shards: Vec<Follow> = (0..plan.shards)
        .map(|_| Follow {
            job: first.clone(),
            since: sub.at,
            attempts: 1,
            seen: None,
            finished: false,
            waited: false,
        })
        .collect();
    let mut resubmitted = Vec::new();
    let mut last_line = String::new();
    let mut trouble_since: Option<Instant> = None;
    loop {
        let jobs: Vec<JobId> = shards.iter().map(|s| s.job.clone()).collect();
        let looked = match squeue(&jobs).await {
            Ok(seen) => status::read(&plan.out)
                .map(|now| (seen, now))
                .map_err(|e| SlurmError::from(super::RunError::from(e))),
            Err(e) => Err(e),
        };
        let (seen, now) = match looked {
            Ok(l) => {
                trouble_since = None;
                l
            }
            Err(e) => {
                let since = *trouble_since.get_or_insert_with(Instant::now);
                if since.elapsed() > TROUBLE_GRACE {
                    return Err(e);
                }
                progress(&format!("{e}; trying again"));
                tokio::time::sleep(Duration::from_secs(2)).await;
                continue;
            }
        };
        for (k, f) in shards.iter_mut().enumerate() {
            let k = k as u32;
            if f.finished {
                continue;
            }
            let key = (f.job.id.clone(), k);
            if let Some(s) = seen.get(&key) {
                f.seen = Some(s.clone());
            }
            let state = match (seen.get(&key), &f.seen) {
                (Some(s), _) => s.state.clone(),
                // Never seen yet: give Slurm time to show it.
                (None, None) if f.since.elapsed() < UNSEEN_GRACE => continue,
                (None, _) => "GONE".to_owned(),
            };
            if !ended(&state) && state != "GONE" {
                continue;
            }
            let st = &now.shards[k as usize];
            // The script exits 0 only when the shard saw its share done.
            if state == "COMPLETED" || st.done.is_some() && st.finished == st.share {
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
            let log = shard::dir(&plan.out, k).join(format!("slurm-{}_{k}.log", f.job.id));
            // Slurm writes the log into the run directory as the job starts: a failed job
            // whose log is not there ran where the directory is not.
            if state == "FAILED" && !log.exists() && !f.waited {
                return Err(SlurmError::NotShared {
                    shard: k,
                    job: format!("job {}_{k}", f.job.id),
                    state,
                    node,
                    dir: plan.out.clone(),
                    log,
                });
            }
            let why = format!(
                "shard {k} (job {}_{k} on {node}) ended {state} with {}/{} task runs finished (its log: {})",
                f.job.id,
                st.finished,
                st.share,
                log.display()
            );
            if f.attempts > plan.retries {
                return Err(SlurmError::GaveUp(format!(
                    "{why}, after {} attempts (--retries {})",
                    f.attempts, plan.retries
                )));
            }
            f.job = sbatch(&sub.script, Some(k)).await?;
            sub.record(&f.job);
            f.since = Instant::now();
            f.attempts += 1;
            f.seen = None;
            f.waited = false;
            progress(&format!(
                "{why}: resubmitted as job {}_{k} (attempt {} of {})",
                f.job.id,
                f.attempts,
                plan.retries + 1
            ));
            resubmitted.push((k, why));
        }
        let line = progress_line(&now, &shards, sub.at.elapsed());
        if line != last_line {
            progress(&line);
            last_line = line;
        }
        if shards.iter().all(|f| f.finished) {
            return Ok(Outcome {
                resubmitted,
                first_task_s: first_started(&plan.out, sub.at_ms)
                    .map(|ms| ms.saturating_sub(sub.at_ms) as f64 / 1000.0),
                status: status::read(&plan.out).map_err(super::RunError::from)?,
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
            s.contains("#SBATCH --output=\"/shared/runs/my run/shards/%a/slurm-%A_%a.log\"\n"),
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
            ..plan.clone()
        };
        assert!(matches!(script(&bad), Err(SlurmError::BadOption(_))));
        // A path with a pattern character and shell words: a file name to sbatch, a word
        // to the shell.
        let odd = Plan {
            out: "/x/100%/$(reboot)".into(),
            ..plan.clone()
        };
        let s = script(&odd).unwrap();
        assert!(
            s.contains("#SBATCH --output=\"/x/100%%/$(reboot)/shards/%a/"),
            "{s}"
        );
        assert!(
            s.contains("echo 'pincer: ''/x/100%/$(reboot)'\" is not here"),
            "{s}"
        );
        let quoted = Plan {
            out: "/x/a\"b".into(),
            ..plan
        };
        assert!(matches!(script(&quoted), Err(SlurmError::BadPath(_))));
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
