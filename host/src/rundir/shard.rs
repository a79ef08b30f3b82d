//! Sharded runs: one run split over machines that share its run directory. Task runs
//! (task × repeat, in the runner's order) are dealt round-robin: shard `k` of `n` runs the
//! `i`-th task run when `i % n == k`. Each shard appends to `shards/<k>/results.jsonl`,
//! holds `shards/<k>/lock` while it runs, says where and when it started in `started.json`
//! and that its share is complete in `done.json`. `run.json` is written once; a shard that
//! finds one from another run refuses the directory. Readers merge every results file.
//! An unsharded run keeps the same files at the top of its directory.

use super::header::{Identity, check_same};
use super::record::{self, TaskRecord};
use super::{DirError, host, io, read_json, write_json};
use crate::clock::unix_ms;
use crate::metrics::Termination;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Shard `index` of `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// 0-based index.
    pub index: u32,
    /// Number of shards.
    pub count: u32,
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("'{s}' is not a shard: write K/N, e.g. 0/3 for the first of three");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let index: u32 = k.trim().parse().map_err(|_| bad())?;
        let count: u32 = n.trim().parse().map_err(|_| bad())?;
        if count == 0 {
            return Err(format!("'{s}': a run has at least one shard"));
        }
        if index >= count {
            return Err(format!(
                "'{s}': shard indexes of {count} shards go from 0 to {}",
                count - 1
            ));
        }
        Ok(Self { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl Shard {
    /// Whether this shard runs the `nth` task run of the run (0-based, in the runner's
    /// order: repeat by repeat, tasks in order).
    pub fn owns(&self, nth: usize) -> bool {
        nth % self.count as usize == self.index as usize
    }
}

/// The directory of shard `index` in a run directory.
pub fn dir(out: &Path, index: u32) -> PathBuf {
    out.join("shards").join(index.to_string())
}

/// Where a run (or one shard of it) appends its records.
pub fn results_path(out: &Path, shard: Option<Shard>) -> PathBuf {
    match shard {
        Some(s) => dir(out, s.index).join("results.jsonl"),
        None => super::results_file(out),
    }
}

/// Every results file of a run directory: the unsharded one and each shard's, in order.
pub fn results_files(out: &Path) -> Vec<PathBuf> {
    let mut files = vec![super::results_file(out)];
    let mut shards: Vec<u32> = std::fs::read_dir(out.join("shards"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name();
            let name = name.to_str()?;
            // Only a shard's own name: "1", not "01" or "+1" (read twice otherwise).
            name.parse::<u32>().ok().filter(|k| k.to_string() == name)
        })
        .collect();
    shards.sort_unstable();
    shards.dedup();
    files.extend(
        shards
            .into_iter()
            .map(|k| dir(out, k).join("results.jsonl")),
    );
    files.retain(|f| f.is_file());
    files
}

/// Every record of a run directory, all shards merged (earlier attempts included: see
/// [`super::latest`]).
pub fn read_all(out: &Path) -> std::io::Result<Vec<TaskRecord>> {
    let mut all = Vec::new();
    for f in results_files(out) {
        all.extend(record::read_results(&f)?);
    }
    Ok(all)
}

/// Whether a directory holds a run: results, or the header of a sharded run.
pub fn is_run(out: &Path) -> bool {
    !results_files(out).is_empty() || out.join("run.json").is_file()
}

/// The task runs that count as finished (an aborted one is redone on resume).
pub fn finished(records: &[TaskRecord]) -> BTreeSet<(String, u32)> {
    records
        .iter()
        .filter(|r| r.termination != Termination::Aborted)
        .map(|r| (r.task.clone(), r.repeat))
        .collect()
}

/// Where and when a shard started (`shards/<k>/started.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Started {
    /// Machine.
    pub host: String,
    /// Process id there.
    pub pid: u32,
    /// Unix time, ms.
    pub at_ms: u64,
    /// The scheduler's name for the job, if one ran it (Slurm job, Kubernetes pod).
    pub job: Option<String>,
}

/// That a shard ran its whole share (`shards/<k>/done.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Done {
    /// Machine.
    pub host: String,
    /// Unix time, ms.
    pub at_ms: u64,
    /// Task runs of the shard finished, in all its attempts.
    pub task_runs: usize,
}

/// The scheduler job this process runs in, if any.
fn job() -> Option<String> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let (Some(j), Some(t)) = (var("SLURM_ARRAY_JOB_ID"), var("SLURM_ARRAY_TASK_ID")) {
        let node = var("SLURMD_NODENAME")
            .map(|n| format!(" on {n}"))
            .unwrap_or_default();
        return Some(format!("slurm job {j}_{t}{node}"));
    }
    if let Some(j) = var("SLURM_JOB_ID") {
        return Some(format!("slurm job {j}"));
    }
    var("JOB_COMPLETION_INDEX").map(|_| format!("kubernetes pod {}", host()))
}

/// A shard (or an unsharded run) holding its run directory: released on drop.
#[derive(Debug)]
pub struct Hold {
    _lock: std::fs::File,
    dir: PathBuf,
    shard: Option<Shard>,
}

/// Refuses a run directory that already holds results unless resuming (a shard: its own
/// results; other shards' are the run it joins), and one that holds another run: call it
/// before starting environments, so a mistake costs nothing.
pub fn check_out(
    out: &Path,
    resume: bool,
    shard: Option<Shard>,
    me: &Identity,
) -> Result<(), DirError> {
    if !resume {
        let used = match shard {
            Some(_) => results_path(out, shard).exists(),
            None => is_run(out),
        };
        if used {
            return Err(DirError::OutExists(out.to_owned()));
        }
    }
    if resume || shard.is_some() {
        check_same(out, me)?;
    }
    Ok(())
}

/// Refuses a shard (or run) another process is running now: before starting environments.
pub fn check_free(out: &Path, shard: Option<Shard>) -> Result<(), DirError> {
    let d = shard.map_or_else(|| out.to_owned(), |s| dir(out, s.index));
    let start = std::time::Instant::now();
    while held(&d) {
        if start.elapsed() >= BRIEF {
            return Err(busy(out, &d, shard));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Ok(())
}

fn busy(out: &Path, d: &Path, shard: Option<Shard>) -> DirError {
    let by = read_json::<Started>(&d.join("started.json"))
        .map(|s| format!(" (pid {} on {})", s.pid, s.host))
        .unwrap_or_default();
    DirError::Busy {
        what: shard.map_or_else(
            || format!("{}", out.display()),
            |s| format!("shard {s} of {}", out.display()),
        ),
        by,
    }
}

impl Hold {
    /// Takes the lock of a shard (or of the whole run) so that two processes never write
    /// one results file, and says where this one started.
    pub fn take(out: &Path, shard: Option<Shard>) -> Result<Self, DirError> {
        let d = match shard {
            Some(s) => dir(out, s.index),
            None => out.to_owned(),
        };
        std::fs::create_dir_all(&d).map_err(io(format!("creating {}", d.display())))?;
        let path = d.join("lock");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io(format!("opening {}", path.display())))?;
        match lock_within(&lock, BRIEF) {
            Ok(true) => {}
            Ok(false) => return Err(busy(out, &d, shard)),
            Err(e) => return Err(io(format!("locking {}", path.display()))(e)),
        }
        if shard.is_some() {
            let _ = std::fs::remove_file(d.join("done.json"));
            write_json(
                &d.join("started.json"),
                &Started {
                    host: host(),
                    pid: std::process::id(),
                    at_ms: unix_ms(),
                    job: job(),
                },
            )?;
        }
        Ok(Self {
            _lock: lock,
            dir: d,
            shard,
        })
    }

    /// Records that the shard's share is complete.
    pub fn done(&self, task_runs: usize) -> Result<(), DirError> {
        if self.shard.is_none() {
            return Ok(());
        }
        write_json(
            &self.dir.join("done.json"),
            &Done {
                host: host(),
                at_ms: unix_ms(),
                task_runs,
            },
        )
    }
}

/// How long a lock may be held by someone only looking ([`held`] takes it for an instant):
/// a shard starting meanwhile waits this long before it calls its shard busy.
const BRIEF: std::time::Duration = std::time::Duration::from_secs(2);

/// Takes `file`'s exclusive lock, trying for up to `within`; whether it got it.
fn lock_within(file: &std::fs::File, within: std::time::Duration) -> std::io::Result<bool> {
    let start = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(true),
            Err(std::fs::TryLockError::WouldBlock) if start.elapsed() < within => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(std::fs::TryLockError::WouldBlock) => return Ok(false),
            Err(std::fs::TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// Whether some process holds the lock of `dir` (a shard running now, on a file system
/// whose locks reach this machine). Asking takes the lock for an instant when it is free,
/// so a shard that starts in that instant waits ([`BRIEF`]) instead of failing.
pub fn held(dir: &Path) -> bool {
    let Ok(f) = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("lock"))
    else {
        return false;
    };
    matches!(f.try_lock(), Err(std::fs::TryLockError::WouldBlock))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_deal_round_robin() {
        let s: Shard = "1/3".parse().unwrap();
        assert_eq!(s, Shard { index: 1, count: 3 });
        let mine: Vec<usize> = (0..8).filter(|i| s.owns(*i)).collect();
        assert_eq!(mine, vec![1, 4, 7]);
        // Every task run belongs to exactly one shard.
        for i in 0..20 {
            let owners = (0..3)
                .filter(|k| {
                    Shard {
                        index: *k,
                        count: 3,
                    }
                    .owns(i)
                })
                .count();
            assert_eq!(owners, 1);
        }
        for (bad, says) in [
            ("3/3", "from 0 to 2"),
            ("0/0", "at least one"),
            ("a/3", "write K/N"),
            ("2", "write K/N"),
            ("-1/3", "write K/N"),
        ] {
            let e = bad.parse::<Shard>().unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn one_shard_is_held_by_one_process() {
        let dir = tempfile::tempdir().unwrap();
        let s = Shard { index: 1, count: 2 };
        let hold = Hold::take(dir.path(), Some(s)).unwrap();
        assert!(held(&super::dir(dir.path(), 1)));
        assert!(check_free(dir.path(), Some(s)).is_err());
        check_free(dir.path(), Some(Shard { index: 0, count: 2 })).unwrap();
        let e = Hold::take(dir.path(), Some(s)).unwrap_err().to_string();
        assert!(e.contains("shard 1/2") && e.contains("is being run"), "{e}");
        assert!(e.contains(&format!("pid {}", std::process::id())), "{e}");
        hold.done(3).unwrap();
        let done: Done = read_json(&super::dir(dir.path(), 1).join("done.json")).unwrap();
        assert_eq!(done.task_runs, 3);
        drop(hold);
        assert!(!held(&super::dir(dir.path(), 1)));
        // Taking it again (a resubmitted shard) forgets that it was done.
        let _again = Hold::take(dir.path(), Some(s)).unwrap();
        assert!(!super::dir(dir.path(), 1).join("done.json").exists());
    }
}
