//! The run directory: what a run leaves on disk and how it is read back. The runner writes
//! it; the report, datasets, `run status`, replays, resume and the MCP server only read it,
//! through this module, so none of them needs the runner to read a file.
//!
//! ```text
//! <run>/run.json          the header (`RunHeader`): who ran what, and the identity a shard
//!                         or a resumed run must share; written once
//!       tasks.json        the tasks as run (the report draws their graphs, replays load them)
//!       results.jsonl     one fsynced `TaskRecord` per finished task run (unsharded runs)
//!       lock              held by the one process appending to results.jsonl
//!       shards/<k>/       a shard's results.jsonl, lock, started.json and done.json
//!       tasks/<id>__r<n>/ a task run's trajectory (`__a<k>` after it for attempt k > 1):
//!                         steps.jsonl, the images each step's agent saw, its final images,
//!                         video-ROLE.mp4
//!       replays/          trajectories made again (`pincer replay`)
//! ```
//!
//! Records are append-only: a line is never rewritten, and readers take the last record of
//! a task run (an aborted one redone on resume replaces it).

mod header;
pub mod record;
pub mod shard;
pub mod status;

pub use header::{Identity, RunHeader};
pub use record::{
    Attempt, ImageRef, JsonlWriter, StepRecord, TaskRecord, Timing, compat_summary, read_results,
    read_steps,
};

use serde::Serialize;
use std::path::{Path, PathBuf};

/// Why a run directory cannot be used or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DirError {
    /// The run directory has results and `--resume` was not given.
    #[error("{} already holds results: pass --resume to continue that run, or choose another --out", .0.display())]
    OutExists(PathBuf),
    /// The run directory belongs to another run.
    #[error("{} holds another run ({diff}): choose another --out", .dir.display())]
    OtherRun {
        /// The run directory.
        dir: PathBuf,
        /// How that run differs from this one.
        diff: String,
    },
    /// Another process writes the same results.
    #[error("{what} is being run by another process{by}: wait for it, or stop it first")]
    Busy {
        /// The run or shard.
        what: String,
        /// Who holds it, if known.
        by: String,
    },
    /// The directory holds no run header.
    #[error(
        "{}: no run.json, so this is not a run directory (or its run has not started)",
        .0.display()
    )]
    NotARun(PathBuf),
    /// Reading or writing the run directory failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being read or written.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Maps an OS error to [`DirError::Io`] saying what was being read or written.
pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DirError {
    let what = what.into();
    move |source| DirError::Io { what, source }
}

/// The results file of an unsharded run.
pub fn results_file(dir: &Path) -> PathBuf {
    dir.join("results.jsonl")
}

/// Where a run goes when its caller names no directory: `runs/<tasks>-<agent>-<unix ms>`
/// under the working directory (milliseconds, so two runs started in one second differ).
pub fn default_dir(tasks: &str, agent: &str) -> PathBuf {
    PathBuf::from("runs").join(format!(
        "{}-{}-{}",
        crate::task::sanitize(tasks),
        crate::task::sanitize(agent),
        crate::clock::unix_ms()
    ))
}

/// A task run's trajectory directory, relative to the run directory: repeat `repeat` of
/// task `task`, attempt `attempt` (1: the first).
pub fn trajectory(task: &str, repeat: u32, attempt: u32) -> String {
    let mut rel = format!("tasks/{}__r{repeat}", crate::task::sanitize(task));
    if attempt > 1 {
        rel.push_str(&format!("__a{attempt}"));
    }
    rel
}

/// The task whose trajectory `rel` is (`tasks/<id>__r<n>...`), as its directory names it
/// (sanitized): for a task run that wrote no record.
pub fn trajectory_task(rel: &str) -> &str {
    let name = rel.trim_start_matches("tasks/");
    name.split("__r").next().unwrap_or(name)
}

/// One record per task run: when a run was aborted and redone on resume, the redo.
pub fn latest(records: Vec<TaskRecord>) -> Vec<TaskRecord> {
    let mut out: Vec<TaskRecord> = Vec::new();
    for r in records {
        match out
            .iter_mut()
            .find(|o| o.task == r.task && o.repeat == r.repeat)
        {
            Some(o) => *o = r,
            None => out.push(r),
        }
    }
    out
}

/// Writes `tasks.json`, the tasks as run, from which the report draws each task's
/// checkpoint graph and a replay loads its task; `overwrite: false` leaves one that is
/// there (a shard joining a run whose identity says the tasks are the same).
pub fn write_tasks(
    dir: &Path,
    tasks: &[crate::task::Task],
    overwrite: bool,
) -> Result<(), DirError> {
    let path = dir.join("tasks.json");
    if overwrite || !path.exists() {
        write_json(&path, &tasks)?;
    }
    Ok(())
}

/// Writes `skipped.json` (into the shard's folder for a shard): the tasks a run left out
/// because they cannot run here, each with why (`[{"task", "why"}]`).
pub fn write_skipped(
    out: &Path,
    shard: Option<u32>,
    skipped: &[(String, String)],
) -> Result<(), DirError> {
    let dir = shard.map_or_else(|| out.to_owned(), |i| shard::dir(out, i));
    let list: Vec<serde_json::Value> = skipped
        .iter()
        .map(|(task, why)| serde_json::json!({"task": task, "why": why}))
        .collect();
    write_json(&dir.join("skipped.json"), &list)
}

/// This machine's name (for `started.json` and messages).
pub fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// Reads `tasks.json`, the tasks as run.
pub fn read_tasks(dir: &Path) -> Result<Vec<crate::task::Task>, DirError> {
    let path = dir.join("tasks.json");
    let text = std::fs::read_to_string(&path).map_err(io(format!("reading {}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        io(format!("reading {}", path.display()))(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not a list of tasks: {e}"),
        ))
    })
}

/// Reads a JSON file of a run directory, if it is there and whole.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Writes `value` as JSON into `path` atomically (aside, then renamed into place), so a
/// reader never sees half of it.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), DirError> {
    let text = serde_json::to_vec_pretty(value).map_err(std::io::Error::other);
    let aside = path.with_extension("tmp");
    text.and_then(|t| std::fs::write(&aside, t))
        .and_then(|()| std::fs::rename(&aside, path))
        .map_err(io(format!("writing {}", path.display())))
}
