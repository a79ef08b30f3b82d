//! What a run leaves on disk: `results.jsonl` (one line per finished task run, fsynced, the
//! file `--resume` reads) and one trajectory directory per task run with `steps.jsonl` and
//! the screenshots each step's agent saw.

use crate::agent::{Exchange, Usage};
use crate::eval::graph::{NodeProgress, StepReport};
use crate::metrics::{Outcome, Termination};
use crate::task::PlatformClass;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

/// One finished task run: a line of `results.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// Task id.
    pub task: String,
    /// Repetition (0-based) of this task in the run.
    pub repeat: u32,
    /// Seed given to the agent.
    pub seed: u64,
    /// Agent name.
    pub agent: String,
    /// Platform class.
    pub class: PlatformClass,
    /// The task's instruction.
    pub instruction: String,
    /// Why it ended.
    pub termination: Termination,
    /// Details of the ending (error text, false completion feedback).
    pub detail: Option<String>,
    /// Checkpoints passed (latched).
    pub passed: usize,
    /// Checkpoints that passed and still held at the end (`None`: not checked at the end).
    #[serde(default)]
    pub final_passed: Option<usize>,
    /// Checkpoints in the graph.
    pub total: usize,
    /// Agent actions executed (waits excluded).
    pub actions: u32,
    /// Of `actions`, the calls of the task's API tools (the rest acted on screens): how
    /// an agent chose between the tools and the GUI.
    #[serde(default)]
    pub tool_calls: u32,
    /// Model tokens.
    pub usage: Usage,
    /// Wall time from setup to teardown, milliseconds.
    pub wall_ms: u64,
    /// Median harness time per step (observation, execution, evaluation; no model), ms.
    pub harness_ms_p50: f64,
    /// Environment set that ran it.
    pub env_set: String,
    /// Per-checkpoint progress (step each passed at).
    pub progress: Vec<NodeProgress>,
    /// Trajectory directory, relative to the run directory.
    pub trajectory: String,
    /// Unix time (ms) when it started.
    pub started_ms: u64,
    /// What the environments showed after the last action (the state the run ended in),
    /// as the steps' images are: `final-ROLE-KIND.png` in the trajectory. Empty when the
    /// run ended before an action or without seeing the end (an environment error).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub final_images: Vec<ImageRef>,
    /// The earlier attempts, which failed and were retried (`--attempts`); the rest of the
    /// record is the last attempt's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retried: Vec<Attempt>,
    /// The task's score on its final state, between 0 and 1, for tasks graded on it
    /// (final checkpoints: a peer benchmark's metric); `None` for the others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<f64>,
    /// For a run scored as a peer benchmark scores (`--compat crab`): the peer's label for
    /// how it ended and whether the peer counts it a success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compat: Option<crate::metrics::CompatEnding>,
}

impl TaskRecord {
    /// The scoring view of this record: the last attempt's ending, and the cost (actions,
    /// tokens, time) of every attempt.
    pub fn outcome(&self) -> Outcome {
        Outcome {
            task: self.task.clone(),
            class: self.class,
            seed: u64::from(self.repeat),
            termination: self.termination,
            passed: self.passed,
            final_passed: self.final_passed,
            total: self.total,
            actions: self.actions + self.retried.iter().map(|a| a.actions).sum::<u32>(),
            tokens: self.usage.total() + self.retried.iter().map(|a| a.usage.total()).sum::<u64>(),
            wall_ms: self.wall_ms + self.retried.iter().map(|a| a.wall_ms).sum::<u64>(),
        }
    }

    /// Which attempt this record's ending is (1: the first).
    pub fn attempt(&self) -> u32 {
        self.retried.len() as u32 + 1
    }
}

/// An attempt of a task run that failed and was tried again.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// Why it ended.
    pub termination: Termination,
    /// Details of the ending.
    pub detail: Option<String>,
    /// Checkpoints passed (latched).
    pub passed: usize,
    /// Agent actions executed (waits excluded).
    pub actions: u32,
    /// Model tokens.
    pub usage: Usage,
    /// Wall time from setup to teardown, milliseconds.
    pub wall_ms: u64,
    /// Its trajectory directory, relative to the run directory.
    pub trajectory: String,
    /// What the agent was told of it at the start of the next attempt.
    pub told: Vec<String>,
}

impl Attempt {
    /// The summary of a failed attempt's record, and what the next attempt is told.
    pub fn of(rec: &TaskRecord, told: Vec<String>) -> Self {
        Self {
            termination: rec.termination,
            detail: rec.detail.clone(),
            passed: rec.passed,
            actions: rec.actions,
            usage: rec.usage,
            wall_ms: rec.wall_ms,
            trajectory: rec.trajectory.clone(),
            told,
        }
    }
}

/// One step of a trajectory: a line of `steps.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Step number (1 = first decision).
    pub step: u32,
    /// Images the agent saw, per environment role (file names in the trajectory directory).
    pub images: Vec<ImageRef>,
    /// The marked elements per role, as listed to the agent.
    pub elements: Vec<(String, String)>,
    /// The model's reasoning, if any.
    pub thought: Option<String>,
    /// Actions, as JSON.
    pub actions: Vec<serde_json::Value>,
    /// Results of executing each action ("ok" or an error).
    pub results: Vec<String>,
    /// Why the agent's output was unusable, if it was.
    pub invalid: Option<String>,
    /// Model calls (requests and responses; images by reference).
    pub exchanges: Vec<Exchange>,
    /// Tokens of this step.
    pub usage: Usage,
    /// Evaluation after this step's actions.
    pub evaluation: Vec<StepReport>,
    /// Checkpoints that passed in this step.
    pub passed: Vec<String>,
    /// Harness milliseconds: observe, act, evaluate.
    pub timing: Timing,
    /// Where each role's video (`video-ROLE.mp4`, `pincer run --video`) was when this
    /// step's actions were about to be sent, in milliseconds from its first frame: the
    /// guest's clock, which stamps the frames, read just before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub video_ms: Vec<(String, f64)>,
}

/// A screenshot file of a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageRef {
    /// Environment role.
    pub role: String,
    /// "screenshot" or "marks".
    pub kind: String,
    /// File name.
    pub file: String,
}

/// Where a step's harness time went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Timing {
    /// Building observations (capture, marks, encoding) before the decision; near 0 when
    /// they were built while the previous action was evaluated (that time is then in the
    /// previous step's `evaluate_ms`).
    pub observe_ms: f64,
    /// Executing actions.
    pub act_ms: f64,
    /// Evaluating checkpoints (after the decision's last action: together with observing
    /// for the next decision, which runs at the same time).
    pub evaluate_ms: f64,
    /// Waiting for the agent (model latency).
    pub agent_ms: f64,
}

impl Timing {
    /// Harness overhead: what pincer adds to a step besides the model's latency and the
    /// time the environment takes to carry out the input (typing 50 characters takes
    /// what it takes): observing, drawing marks, encoding and evaluating.
    pub fn harness_ms(&self) -> f64 {
        self.observe_ms + self.evaluate_ms
    }
}

/// Appends lines to a JSONL file, fsyncing each.
#[derive(Debug)]
pub struct JsonlWriter {
    file: std::fs::File,
    path: PathBuf,
}

impl JsonlWriter {
    /// Opens (creating) for appending. A torn last line left by a crash mid-write is ended
    /// first, so the next record starts on a line of its own instead of being glued to it.
    pub fn append(path: &Path) -> std::io::Result<Self> {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(path)?;
        if torn(&mut file)? {
            file.write_all(b"\n")?;
        }
        Ok(Self {
            file,
            path: path.to_owned(),
        })
    }

    /// Writes one value as a line and makes it durable.
    pub fn write<T: Serialize>(&mut self, v: &T) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(v).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.sync_data()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Whether the file is non-empty and does not end with a newline.
fn torn(file: &mut std::fs::File) -> std::io::Result<bool> {
    use std::io::{Read, Seek, SeekFrom};
    if file.metadata()?.len() == 0 {
        return Ok(false);
    }
    file.seek(SeekFrom::End(-1))?;
    let mut last = [0u8];
    file.read_exact(&mut last)?;
    Ok(last[0] != b'\n')
}

/// Reads the records of a results file; a torn last line (a crash mid-write) is skipped.
pub fn read_results(path: &Path) -> std::io::Result<Vec<TaskRecord>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(parse_jsonl(&bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Reads a trajectory's steps.
pub fn read_steps(dir: &Path) -> std::io::Result<Vec<StepRecord>> {
    Ok(parse_jsonl(&std::fs::read(dir.join("steps.jsonl"))?))
}

/// The whole records of a JSONL file, read as bytes so that a line torn inside a multi-byte
/// character (a crash mid-write) costs that line only.
fn parse_jsonl<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Vec<T> {
    bytes
        .split(|&b| b == b'\n')
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect()
}

/// The run as the peer counts it, for runs scored with `--compat` (`None` for others):
/// CRAB's success rate over the task runs CRAB writes a result for (all but a start with
/// checkpoints already passed), its mean completeness (checkpoints passed over the graph's),
/// and its `terminate_reason` counts.
pub fn compat_summary(records: &[TaskRecord]) -> Option<String> {
    let scored: Vec<(&TaskRecord, &crate::metrics::CompatEnding)> = records
        .iter()
        .filter_map(|r| r.compat.as_ref().map(|c| (r, c)))
        .collect();
    let (_, first) = scored.first()?;
    let rows: Vec<_> = scored
        .iter()
        .filter(|(_, c)| c.reason != "nonzero_start")
        .collect();
    let success = rows.iter().filter(|(_, c)| c.success).count();
    let completeness = rows
        .iter()
        .map(|(r, _)| r.passed as f64 / r.total.max(1) as f64)
        .sum::<f64>()
        / rows.len().max(1) as f64;
    let mut reasons: std::collections::BTreeMap<&str, usize> = Default::default();
    for (_, c) in &scored {
        *reasons.entry(c.reason.as_str()).or_default() += 1;
    }
    let reasons: Vec<String> = reasons.iter().map(|(r, n)| format!("{r} {n}")).collect();
    Some(format!(
        "scored as {} scores it (--compat {}): {} task runs, {} success ({:.1}%), mean completeness {:.3}; terminate_reason: {}",
        first.mode.name().to_uppercase(),
        first.mode,
        rows.len(),
        success,
        100.0 * success as f64 / rows.len().max(1) as f64,
        completeness,
        reasons.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_survive_a_torn_last_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("results.jsonl");
        let mut w = JsonlWriter::append(&p).unwrap();
        let rec = TaskRecord {
            task: "t".into(),
            repeat: 0,
            seed: 1,
            agent: "oracle".into(),
            class: PlatformClass::SingleDesktop,
            instruction: "x".into(),
            termination: Termination::Success,
            detail: None,
            passed: 2,
            final_passed: Some(2),
            total: 2,
            actions: 3,
            usage: Usage::default(),
            wall_ms: 10,
            harness_ms_p50: 5.0,
            env_set: "s0".into(),
            progress: vec![],
            trajectory: "tasks/t-0".into(),
            started_ms: 0,
            final_images: Vec::new(),
            retried: vec![],
            tool_calls: 0,
            score: None,
            compat: None,
        };
        w.write(&rec).unwrap();
        drop(w);
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            // Torn inside the two bytes of 'é'.
            .write_all(b"{\"task\": \"caf\xc3")
            .unwrap();
        let back = read_results(&p).unwrap();
        assert_eq!(back, vec![rec.clone()]);
        // The run resumes: the next record is not glued to the torn line.
        let mut w = JsonlWriter::append(&p).unwrap();
        let next = TaskRecord {
            task: "u".into(),
            ..rec.clone()
        };
        w.write(&next).unwrap();
        assert_eq!(read_results(&p).unwrap(), vec![rec, next]);
        assert!(
            read_results(&dir.path().join("none.jsonl"))
                .unwrap()
                .is_empty()
        );
    }
}
