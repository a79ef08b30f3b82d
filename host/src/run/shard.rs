//! Sharded runs: one run split over machines that share its run directory. Task runs
//! (task × repeat, in the runner's order) are dealt round-robin: shard `k` of `n` runs the
//! `i`-th task run when `i % n == k`. Each shard appends to `shards/<k>/results.jsonl`,
//! holds `shards/<k>/lock` while it runs, says where and when it started in `started.json`
//! and that its share is complete in `done.json`. `run.json` is written once; a shard that
//! finds one from another run refuses the directory. Readers merge every results file.

use super::record::{self, TaskRecord};
use super::task::Correction;
use super::{RunError, io};
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

/// What identifies a run: a shard or a resumed run must agree with the directory's
/// `run.json` on these, or it would mix two runs' results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Identity {
    /// Agent name.
    pub agent: String,
    /// Base seed.
    pub seed: u64,
    /// Shards (`None`: not sharded).
    #[serde(default)]
    pub shards: Option<u32>,
    /// Task ids, in order (only compared for sharded runs: the deal depends on them).
    pub tasks: Vec<String>,
    /// Repeats (as for `tasks`).
    pub repeat: u32,
    /// What agents see (`ObservationConfig` as JSON; null in runs written before it was
    /// recorded, and then not compared).
    #[serde(default)]
    pub observation: serde_json::Value,
    /// A hash of the tasks as run (only compared for sharded runs: every shard must run
    /// the same task files; empty when not recorded).
    #[serde(default)]
    pub tasks_sha256: String,
    /// How agents may correct themselves (feedback, attempts; runs written before it was
    /// recorded had none and one).
    #[serde(default)]
    pub correction: Correction,
}

impl Identity {
    /// How `self` (the directory's) differs from `other` (this process's), if it does.
    pub fn difference(&self, other: &Self) -> Option<String> {
        let mut diffs = Vec::new();
        if self.agent != other.agent {
            diffs.push(format!("agent '{}' (here: '{}')", self.agent, other.agent));
        }
        if self.seed != other.seed {
            diffs.push(format!("seed {} (here: {})", self.seed, other.seed));
        }
        let shards = |s: Option<u32>| s.map_or("not sharded".into(), |n| format!("{n} shards"));
        if self.shards != other.shards {
            diffs.push(format!(
                "{} (here: {})",
                shards(self.shards),
                shards(other.shards)
            ));
        }
        if self.shards.is_some() && self.tasks != other.tasks {
            diffs.push(format!(
                "tasks {} (here: {})",
                self.tasks.join(","),
                other.tasks.join(",")
            ));
        }
        if self.shards.is_some() && self.repeat != other.repeat {
            diffs.push(format!("repeat {} (here: {})", self.repeat, other.repeat));
        }
        if !self.observation.is_null()
            && !other.observation.is_null()
            && self.observation != other.observation
        {
            diffs.push(format!(
                "observation {} (here: {})",
                self.observation, other.observation
            ));
        }
        if self.correction != other.correction {
            let c = |c: &Correction| format!("--feedback {} --attempts {}", c.feedback, c.attempts);
            diffs.push(format!(
                "{} (here: {})",
                c(&self.correction),
                c(&other.correction)
            ));
        }
        let (ours, theirs) = (&self.tasks_sha256, &other.tasks_sha256);
        if self.shards.is_some() && !ours.is_empty() && !theirs.is_empty() && ours != theirs {
            diffs.push("other task files (here: the files changed since the run began)".into());
        }
        (!diffs.is_empty()).then(|| diffs.join(", "))
    }
}

/// More task runs than any run has: a header that claims more is not a run's.
const MAX_TASK_RUNS: usize = 10_000_000;

/// Reads the identity in a directory's `run.json`, if there is one.
pub fn read_identity(out: &Path) -> Result<Option<Identity>, RunError> {
    let path = out.join("run.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(format!("reading {}", path.display()))(e)),
    };
    let bad = |what: String| {
        io(format!("reading {}", path.display()))(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{what}: this is not a pincer run's header; choose another --out"),
        ))
    };
    let id: Identity = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if id.shards == Some(0) {
        return Err(bad("\"shards\": 0".into()));
    }
    if id.tasks.len().saturating_mul(id.repeat as usize) > MAX_TASK_RUNS {
        return Err(bad(format!(
            "{} tasks x {} repeats is more than {MAX_TASK_RUNS} task runs",
            id.tasks.len(),
            id.repeat
        )));
    }
    Ok(Some(id))
}

/// Writes `run.json` unless the directory has one; then checks that the one it has is this
/// run's. Atomic across machines: the header is written aside and linked into place, which
/// fails if another shard got there first.
pub fn claim(out: &Path, meta: &serde_json::Value, me: &Identity) -> Result<(), RunError> {
    let path = out.join("run.json");
    if !path.exists() {
        let aside = out.join(format!(".run.json.{}.{}", host(), std::process::id()));
        let text = serde_json::to_string_pretty(meta).map_err(std::io::Error::other);
        text.and_then(|t| std::fs::write(&aside, t))
            .map_err(io(format!("writing {}", aside.display())))?;
        let linked = std::fs::hard_link(&aside, &path);
        let _ = std::fs::remove_file(&aside);
        match linked {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(format!("writing {}", path.display()))(e)),
        }
    }
    match read_identity(out)? {
        Some(theirs) => match theirs.difference(me) {
            Some(diff) => Err(RunError::OtherRun {
                dir: out.to_owned(),
                diff,
            }),
            None => Ok(()),
        },
        None => Ok(()),
    }
}

/// This machine's name (for `started.json` and messages).
pub fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
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

/// Unix time in ms.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
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

/// Reads a JSON file of a shard, if it is there and whole.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Writes `value` as JSON into `path` atomically (aside, then renamed into place), so a
/// reader never sees half of it.
pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), RunError> {
    let text = serde_json::to_vec_pretty(value).map_err(std::io::Error::other);
    let aside = path.with_extension("tmp");
    text.and_then(|t| std::fs::write(&aside, t))
        .and_then(|()| std::fs::rename(&aside, path))
        .map_err(io(format!("writing {}", path.display())))
}

/// A shard (or an unsharded run) holding its run directory: released on drop.
#[derive(Debug)]
pub struct Hold {
    _lock: std::fs::File,
    dir: PathBuf,
    shard: Option<Shard>,
}

/// Refuses a shard (or run) another process is running now: before starting environments.
pub fn check_free(out: &Path, shard: Option<Shard>) -> Result<(), RunError> {
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

fn busy(out: &Path, d: &Path, shard: Option<Shard>) -> RunError {
    let by = read_json::<Started>(&d.join("started.json"))
        .map(|s| format!(" (pid {} on {})", s.pid, s.host))
        .unwrap_or_default();
    RunError::Busy {
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
    pub fn take(out: &Path, shard: Option<Shard>) -> Result<Self, RunError> {
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
                    at_ms: now_ms(),
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
    pub fn done(&self, task_runs: usize) -> Result<(), RunError> {
        if self.shard.is_none() {
            return Ok(());
        }
        write_json(
            &self.dir.join("done.json"),
            &Done {
                host: host(),
                at_ms: now_ms(),
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
    fn identities_name_what_differs() {
        let a = Identity {
            agent: "oracle".into(),
            seed: 0,
            shards: Some(3),
            tasks: vec!["t".into()],
            repeat: 1,
            observation: serde_json::json!({"marks": true}),
            tasks_sha256: "aa".into(),
            correction: Correction::default(),
        };
        assert_eq!(a.difference(&a.clone()), None);
        let retried = Identity {
            correction: Correction::new(super::super::task::Feedback::End, 3).unwrap(),
            ..a.clone()
        };
        assert_eq!(
            a.difference(&retried).unwrap(),
            "--feedback none --attempts 1 (here: --feedback end --attempts 3)"
        );
        let b = Identity {
            agent: "random".into(),
            shards: Some(2),
            ..a.clone()
        };
        let d = a.difference(&b).unwrap();
        assert!(d.contains("agent 'oracle' (here: 'random')"), "{d}");
        assert!(d.contains("3 shards (here: 2 shards)"), "{d}");
        let e = Identity {
            observation: serde_json::json!({"marks": false}),
            tasks_sha256: "bb".into(),
            ..a.clone()
        };
        let d = a.difference(&e).unwrap();
        assert!(
            d.contains(r#"observation {"marks":true} (here: {"marks":false})"#),
            "{d}"
        );
        assert!(d.contains("other task files"), "{d}");
        // Not recorded (an older run.json): not compared.
        let old = Identity {
            observation: serde_json::Value::Null,
            tasks_sha256: String::new(),
            ..a.clone()
        };
        assert_eq!(old.difference(&e), None);
        // Unsharded runs may resume with another selection of tasks.
        let c = Identity {
            shards: None,
            ..a.clone()
        };
        let d2 = Identity {
            tasks: vec!["u".into()],
            repeat: 3,
            ..c.clone()
        };
        assert_eq!(c.difference(&d2), None);
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
