//! Reading a run directory for a report. A report is often wanted most when a run went
//! wrong, so everything past `results.jsonl` is optional: a missing `run.json`, `tasks.json`,
//! trajectory or screenshot is noted and the report goes on without it.

use super::ReportError;
use crate::agent::correction::Correction;
use crate::agent::observe::ObservationConfig;
use crate::rundir::RunHeader;
use crate::rundir::record::{self, StepRecord, TaskRecord};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

/// Everything a report shows, read from one run directory.
#[derive(Debug)]
pub(crate) struct RunDir {
    /// The run directory.
    pub(crate) dir: PathBuf,
    /// What `run.json` says about the run.
    pub(crate) meta: Meta,
    /// One entry per task run, in task order then repeat.
    pub(crate) runs: Vec<TaskRun>,
    /// Records replaced by a later attempt at the same task run (aborted, then resumed).
    pub(crate) superseded: usize,
    /// Checkpoint graphs by task id, from `tasks.json`.
    pub(crate) graphs: BTreeMap<String, GraphSpec>,
}

/// The run header (`run.json`), each field absent if the file or the field is.
#[derive(Debug, Default)]
pub(crate) struct Meta {
    pub(crate) agent: Option<String>,
    pub(crate) tasks: Vec<String>,
    pub(crate) repeat: Option<u64>,
    pub(crate) seed: Option<u64>,
    /// Set name and its environment roles.
    pub(crate) sets: Vec<(String, Vec<String>)>,
    /// What agents saw ("marks, screenshot, max 1280x800").
    pub(crate) observation: Option<String>,
    /// What agents were told of the checkpoints and how many attempts they had (`None`:
    /// nothing and one, as in runs before these existed).
    pub(crate) correction: Option<Correction>,
}

/// One task run: its record and its trajectory.
#[derive(Debug)]
pub(crate) struct TaskRun {
    pub(crate) record: TaskRecord,
    /// The steps of the last attempt (earlier attempts share the directory and are dropped).
    pub(crate) steps: Vec<StepRecord>,
    /// The trajectory directory, if the record names a safe relative path.
    pub(crate) traj: Option<PathBuf>,
    /// Why the trajectory is incomplete or missing, for the reader.
    pub(crate) note: Option<String>,
}

/// The parts of a task the report draws: checkpoints and their `after` edges. Read leniently
/// (unknown fields ignored) so reports survive changes to the task format.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct GraphSpec {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) checkpoints: Vec<NodeSpec>,
}

/// One checkpoint of a [`GraphSpec`].
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct NodeSpec {
    pub(crate) id: String,
    #[serde(default)]
    pub(crate) check: String,
    #[serde(default)]
    pub(crate) env: Option<String>,
    #[serde(default)]
    pub(crate) after: Vec<String>,
}

impl RunDir {
    /// Reads a run directory, every shard's results merged; fails only if it is not one
    /// (no results file).
    pub(crate) fn read(dir: &Path) -> Result<Self, ReportError> {
        if crate::rundir::shard::results_files(dir).is_empty() {
            return Err(ReportError::NotARun(dir.to_owned()));
        }
        let all = crate::rundir::shard::read_all(dir).map_err(|source| ReportError::Io {
            what: "reading",
            path: dir.to_owned(),
            source,
        })?;
        let meta = read_meta(dir);
        let graphs = read_graphs(&dir.join("tasks.json"));

        // The last record of a task run wins: `--resume` redoes aborted runs and appends.
        let total = all.len();
        let mut latest: BTreeMap<(String, u32), TaskRecord> = BTreeMap::new();
        for r in all {
            latest.insert((r.task.clone(), r.repeat), r);
        }
        let superseded = total - latest.len();
        let order: BTreeMap<&str, usize> = meta
            .tasks
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_str(), i))
            .collect();
        let mut records: Vec<TaskRecord> = latest.into_values().collect();
        records.sort_by_key(|r| {
            (
                order.get(r.task.as_str()).copied().unwrap_or(usize::MAX),
                r.task.clone(),
                r.repeat,
            )
        });
        let runs = records.into_iter().map(|r| TaskRun::read(dir, r)).collect();
        Ok(Self {
            dir: dir.to_owned(),
            meta,
            runs,
            superseded,
            graphs,
        })
    }
}

impl TaskRun {
    fn read(dir: &Path, record: TaskRecord) -> Self {
        let Some(traj) = safe_join(dir, &record.trajectory) else {
            return Self {
                note: Some(format!("unusable trajectory path {:?}", record.trajectory)),
                record,
                steps: Vec::new(),
                traj: None,
            };
        };
        let (steps, note) = match record::read_steps(&traj) {
            Ok(all) => last_attempt(all),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                (Vec::new(), Some("no steps were recorded".to_owned()))
            }
            Err(e) => (Vec::new(), Some(format!("cannot read steps.jsonl: {e}"))),
        };
        Self {
            record,
            steps,
            traj: Some(traj),
            note,
        }
    }

    /// A screenshot of this run, if its name is a plain file name.
    pub(crate) fn image_path(&self, file: &str) -> Option<PathBuf> {
        let traj = self.traj.as_ref()?;
        let mut parts = Path::new(file).components();
        match (parts.next(), parts.next()) {
            (Some(Component::Normal(_)), None) => Some(traj.join(file)),
            _ => None,
        }
    }
}

/// Steps numbers restart at 1 when a resumed run redoes a task in the same directory; only
/// the last attempt matches the screenshots on disk.
fn last_attempt(all: Vec<StepRecord>) -> (Vec<StepRecord>, Option<String>) {
    let mut attempts: Vec<Vec<StepRecord>> = Vec::new();
    for s in all {
        match attempts.last_mut() {
            Some(cur) if cur.last().is_some_and(|p| s.step > p.step) => cur.push(s),
            _ => attempts.push(vec![s]),
        }
    }
    let earlier = attempts.len().saturating_sub(1);
    let note = (earlier > 0)
        .then(|| format!("{earlier} earlier attempt(s) in this directory are not shown"));
    (attempts.pop().unwrap_or_default(), note)
}

/// `dir/rel` if `rel` is relative and stays inside `dir`.
fn safe_join(dir: &Path, rel: &str) -> Option<PathBuf> {
    let p = Path::new(rel);
    let ok = !rel.is_empty() && p.components().all(|c| matches!(c, Component::Normal(_)));
    ok.then(|| dir.join(p))
}

/// The header as the report shows it; a missing or unreadable one leaves every field empty.
fn read_meta(dir: &Path) -> Meta {
    let Ok(Some(h)) = RunHeader::read(dir) else {
        return Meta::default();
    };
    let id = h.identity;
    Meta {
        agent: Some(id.agent),
        tasks: id.tasks,
        repeat: Some(u64::from(id.repeat)),
        seed: Some(id.seed),
        sets: h.sets,
        observation: id.observation.as_ref().map(describe_observation),
        correction: Some(id.correction),
    }
}

fn describe_observation(o: &ObservationConfig) -> String {
    let mut parts: Vec<String> = [
        (o.marks, "marks"),
        (o.screenshot, "screenshot"),
        (o.tree_text, "tree text"),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| name.to_owned())
    .collect();
    if let Some((w, h)) = o.max_size {
        parts.push(format!("max {w}x{h}"));
    }
    if parts.is_empty() {
        "nothing".to_owned()
    } else {
        parts.join(", ")
    }
}

fn read_graphs(path: &Path) -> BTreeMap<String, GraphSpec> {
    let Some(list) = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str::<Vec<serde_json::Value>>(&t).ok())
    else {
        return BTreeMap::new();
    };
    list.into_iter()
        .filter_map(|v| serde_json::from_value::<GraphSpec>(v).ok())
        .map(|g| (g.id.clone(), g))
        .collect()
}

impl GraphSpec {
    /// The graph of a run: the task's checkpoints with their edges, plus any checkpoint the
    /// record knows and the task does not (or all of them, without edges, when the task
    /// definition is missing).
    pub(crate) fn for_run(graphs: &BTreeMap<String, Self>, record: &TaskRecord) -> Self {
        let mut g = graphs.get(&record.task).cloned().unwrap_or_else(|| Self {
            id: record.task.clone(),
            checkpoints: Vec::new(),
        });
        let known: BTreeSet<String> = g.checkpoints.iter().map(|c| c.id.clone()).collect();
        for p in &record.progress {
            if !known.contains(&p.id) {
                g.checkpoints.push(NodeSpec {
                    id: p.id.clone(),
                    ..NodeSpec::default()
                });
            }
        }
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(n: u32) -> StepRecord {
        StepRecord {
            step: n,
            images: vec![],
            elements: vec![],
            thought: None,
            actions: vec![],
            results: vec![],
            invalid: None,
            exchanges: vec![],
            usage: crate::agent::Usage::default(),
            evaluation: vec![],
            passed: vec![],
            timing: record::Timing::default(),
            video_ms: Vec::new(),
        }
    }

    #[test]
    fn only_the_last_attempt_is_kept() {
        let (steps, note) = last_attempt(vec![step(1), step(2), step(3), step(1), step(2)]);
        assert_eq!(steps.iter().map(|s| s.step).collect::<Vec<_>>(), [1, 2]);
        assert!(note.is_some());
        let (steps, note) = last_attempt(vec![step(1), step(2)]);
        assert_eq!(steps.len(), 2);
        assert!(note.is_none());
    }

    #[test]
    fn paths_stay_inside_the_run() {
        let d = Path::new("/run");
        assert_eq!(
            safe_join(d, "tasks/a__r0"),
            Some(PathBuf::from("/run/tasks/a__r0"))
        );
        assert_eq!(safe_join(d, "../etc"), None);
        assert_eq!(safe_join(d, "/etc"), None);
        assert_eq!(safe_join(d, ""), None);
    }
}
