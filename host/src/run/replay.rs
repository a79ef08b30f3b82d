//! Replaying a trajectory: the actions a task run recorded, made again after the task's
//! setup by an agent that decides nothing ([`Replayer`]), through the runner like any
//! other task run; then the two runs side by side ([`compare`]): where the checkpoints
//! passed at another step, where the screen looked different, and how each ended.
//!
//! Marks are numbered afresh on every screen, so an action that targeted element 7 is
//! sent to the element on the new screen with the role and name element 7 had when it was
//! recorded ([`retarget`]); one that is not there is a divergence, named in the report.

use crate::agent::actions::{AgentAction, Target};
use crate::agent::observe::View;
use crate::agent::{Agent, AgentError, Decision, Observation, TaskBrief};
use crate::eval::graph::NodeProgress;
use crate::metrics::Termination;
use crate::rundir::record::{self, ImageRef, StepRecord, TaskRecord};
use crate::task::Task;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A cell of the compared screens (after both are shrunk to [`GRID`] cells across) counts
/// as changed when its channels differ by more than this on average (of 255).
const CELL_TOLERANCE: f64 = 24.0;

/// Cells across the width of the compared screens.
const GRID: u32 = 96;

/// The share of changed cells above which a screen counts as different (a blinking caret
/// or a clock stays below it; another window or dialog does not).
pub const SCREEN_DIVERGES: f64 = 0.05;

/// Why a trajectory cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The directory is not a trajectory of a run.
    #[error(
        "{0}: not a trajectory (no steps.jsonl); give a task run's directory, e.g. runs/NAME/tasks/TASK__r0"
    )]
    NotATrajectory(PathBuf),
    /// Its run directory lacks what a replay needs.
    #[error("{dir}: {what}; replay a trajectory inside the run directory that made it")]
    NoRun {
        /// The run directory.
        dir: PathBuf,
        /// What is missing.
        what: String,
    },
    /// Reading failed.
    #[error("reading {path}: {source}")]
    Io {
        /// What was read.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
}

/// A recorded task run: its task, its record (if the run finished it) and its steps.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The trajectory directory.
    pub dir: PathBuf,
    /// The run directory it is in.
    pub run: PathBuf,
    /// The run's header, if it has a readable one: what the recording's agent saw.
    pub header: Option<crate::rundir::RunHeader>,
    /// The task as it was run.
    pub task: Task,
    /// The record of the task run, if the run wrote one.
    pub record: Option<TaskRecord>,
    /// The steps.
    pub steps: Vec<StepRecord>,
}

impl Recording {
    /// Reads the trajectory `dir` (`RUN/tasks/TASK__rN`) and, from its run directory, the
    /// task and the record.
    pub fn load(dir: &Path) -> Result<Self, ReplayError> {
        if !dir.join("steps.jsonl").is_file() {
            return Err(ReplayError::NotATrajectory(dir.to_owned()));
        }
        let io = |path: &Path| {
            let path = path.to_owned();
            move |source| ReplayError::Io { path, source }
        };
        let steps = record::read_steps(dir).map_err(io(&dir.join("steps.jsonl")))?;
        let dir = std::fs::canonicalize(dir).map_err(io(dir))?;
        let run = dir
            .parent()
            .and_then(Path::parent)
            .ok_or_else(|| ReplayError::NotATrajectory(dir.clone()))?
            .to_owned();
        let rel = dir.strip_prefix(&run).unwrap_or(&dir).to_string_lossy();
        let records = crate::rundir::shard::read_all(&run).map_err(io(&run))?;
        let record = records.into_iter().rev().find(|r| r.trajectory == rel);
        let tasks = crate::rundir::read_tasks(&run).map_err(|e| ReplayError::NoRun {
            dir: run.clone(),
            what: e.to_string(),
        })?;
        let header = crate::rundir::RunHeader::read(&run).ok().flatten();
        let id = match &record {
            Some(r) => r.task.clone(),
            // An unfinished task run: its directory is named after the task.
            None => crate::rundir::trajectory_task(&rel).to_owned(),
        };
        let task = tasks
            .into_iter()
            .find(|t| t.id == id || crate::task::sanitize(&t.id) == id)
            .ok_or_else(|| ReplayError::NoRun {
                dir: run.clone(),
                what: format!("tasks.json has no task '{id}'"),
            })?;
        Ok(Self {
            dir,
            run,
            header,
            task,
            record,
            steps,
        })
    }
}

/// What happened to one recorded step when it was replayed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayNote {
    /// The step (decision) number.
    pub step: u32,
    /// Targets that had to be found again, or could not be.
    pub notes: Vec<String>,
}

/// An agent that makes a recording's decisions again, one per observation, with element
/// targets found again on the screen it is shown. Once the recording runs out, it waits up
/// to 3 s for checkpoints still waiting, then says it is done (a replay that did not finish
/// the task ends as a false completion).
#[derive(Debug)]
pub struct Replayer {
    steps: VecDeque<StepRecord>,
    all: Vec<StepRecord>,
    notes: Arc<Mutex<Vec<ReplayNote>>>,
    /// Waits made since the recording ran out.
    settled: u32,
}

/// Half-second waits for checkpoints still waiting once the recording ran out.
const SETTLE_WAITS: u32 = 6;

impl Replayer {
    /// A replayer of `steps`; what it notes goes into `notes`.
    pub fn new(steps: Vec<StepRecord>, notes: Arc<Mutex<Vec<ReplayNote>>>) -> Self {
        Self {
            steps: VecDeque::new(),
            all: steps,
            notes,
            settled: 0,
        }
    }
}

impl Agent for Replayer {
    fn name(&self) -> String {
        "replay".into()
    }

    fn begin(&mut self, _brief: &TaskBrief) -> Result<(), AgentError> {
        self.steps = self.all.iter().cloned().collect();
        self.settled = 0;
        Ok(())
    }

    fn act<'a>(&'a mut self, obs: &'a Observation) -> BoxFuture<'a, Result<Decision, AgentError>> {
        Box::pin(async move {
            let Some(step) = self.steps.pop_front() else {
                // Effects that land late (a file an application writes a moment after the
                // key press) get the time the oracle gives them, then the replay is done.
                let waiting = obs.checkpoints.iter().any(|(_, passed)| !passed);
                let action = if waiting && self.settled < SETTLE_WAITS {
                    self.settled += 1;
                    AgentAction::Wait { seconds: 0.5 }
                } else {
                    AgentAction::Complete
                };
                return Ok(Decision {
                    actions: vec![action],
                    thought: Some("the recording ended".into()),
                    ..Decision::default()
                });
            };
            let mut notes = Vec::new();
            let mut actions = Vec::new();
            for v in &step.actions {
                match serde_json::from_value::<AgentAction>(v.clone()) {
                    Ok(mut a) => {
                        notes.extend(retarget(&mut a, &step, obs));
                        actions.push(a);
                    }
                    Err(e) => notes.push(format!("recorded action {v} is not an action: {e}")),
                }
            }
            if !notes.is_empty() {
                self.notes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(ReplayNote {
                        step: step.step,
                        notes,
                    });
            }
            Ok(Decision {
                invalid: actions
                    .is_empty()
                    .then(|| "the recorded step held no action".into()),
                actions,
                thought: step.thought,
                ..Decision::default()
            })
        })
    }
}

/// The `role "name"` of element `id` in a recorded element list (`[7] push button "OK"
/// text=... (focused)`).
fn recorded_element(list: &str, id: u32) -> Option<&str> {
    let prefix = format!("[{id}] ");
    let line = list.lines().find(|l| l.starts_with(&prefix))?;
    let rest = &line[prefix.len()..];
    // The name is the first quoted (Rust-escaped) string; what follows is text and states.
    let open = rest.find('"')?;
    let mut escaped = false;
    for (i, c) in rest[open + 1..].char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '"' if !escaped => return Some(&rest[..open + 1 + i + 1]),
            _ => escaped = false,
        }
    }
    None
}

/// The element of `view` that is what the recording's element was: the same role and
/// name, preferring the same number.
fn find_again(view: &View, wanted: &str, id: u32) -> Option<u32> {
    let matches: Vec<u32> = view
        .elements
        .iter()
        .filter(|e| format!("{} {:?}", e.role, e.name) == wanted)
        .map(|e| e.id)
        .collect();
    matches
        .iter()
        .copied()
        .find(|m| *m == id)
        .or(matches.first().copied())
}

/// Points the action's element targets at the elements of `obs` that are what they named
/// when `step` was recorded; returns a note for each target that moved or is gone (a gone
/// one keeps its number, so the runner reports what it hits or misses).
pub fn retarget(action: &mut AgentAction, step: &StepRecord, obs: &Observation) -> Vec<String> {
    let role = action.env().unwrap_or_default().to_owned();
    let list = step
        .elements
        .iter()
        .find(|(r, _)| *r == role)
        .map(|(_, l)| l.as_str())
        .unwrap_or_default();
    let view = obs.view(&role);
    let mut notes = Vec::new();
    for t in action.targets_mut() {
        let Target::Element { element } = t else {
            continue;
        };
        let Some(wanted) = recorded_element(list, *element) else {
            notes.push(format!(
                "element {element} on {role} is not in the recorded element list; sent as recorded"
            ));
            continue;
        };
        match view.and_then(|v| find_again(v, wanted, *element)) {
            Some(now) if now == *element => {}
            Some(now) => {
                notes.push(format!("element {element} ({wanted}) is element {now} now"));
                *element = now;
            }
            None => notes.push(format!(
                "element {element} ({wanted}) is not on the {role} screen now"
            )),
        }
    }
    notes
}

/// One step of a recording next to its replay.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepComparison {
    /// The step (decision) number.
    pub step: u32,
    /// The recorded actions, described.
    pub actions: Vec<String>,
    /// Checkpoints that passed in the recorded step.
    pub recorded_passed: Vec<String>,
    /// Checkpoints that passed in the replayed step (`None`: the replay ended before it).
    pub replayed_passed: Option<Vec<String>>,
    /// The share of the screen (per role) that looked different before the step's decision,
    /// where both runs kept a screenshot.
    pub screen_difference: Vec<(String, f64)>,
    /// What the replay had to adjust or could not find, and checkpoints that passed at
    /// another step without changing where the runs went.
    pub notes: Vec<String>,
    /// Whether the runs went apart here: after this step the checkpoints passed so far
    /// differ, and they never agree again.
    pub diverges: bool,
}

impl StepComparison {
    /// Whether a screen looked different before this step.
    pub fn screen_diverges(&self) -> bool {
        self.screen_difference
            .iter()
            .any(|(_, d)| *d > SCREEN_DIVERGES)
    }
}

/// How a task run ended, for the comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ending {
    /// Why it ended.
    pub termination: Termination,
    /// Checkpoints passed.
    pub passed: usize,
    /// Checkpoints.
    pub total: usize,
    /// Actions taken.
    pub actions: u32,
}

impl Ending {
    fn of(r: &TaskRecord) -> Self {
        Self {
            termination: r.termination,
            passed: r.passed,
            total: r.total,
            actions: r.actions,
        }
    }
}

impl std::fmt::Display for Ending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} ({}/{} checkpoints, {} actions)",
            self.termination, self.passed, self.total, self.actions
        )
    }
}

/// A recording and its replay side by side (`replay.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    /// The recorded trajectory.
    pub recording: PathBuf,
    /// The replay's trajectory.
    pub replay: PathBuf,
    /// The task.
    pub task: String,
    /// Step by step.
    pub steps: Vec<StepComparison>,
    /// How the recording ended (`None`: it has no record, an unfinished run).
    pub recorded: Option<Ending>,
    /// How the replay ended.
    pub replayed: Ending,
    /// The share of each role's screen that looked different in the states the two runs
    /// ended in, where both kept them.
    #[serde(default)]
    pub final_difference: Vec<(String, f64)>,
}

impl Comparison {
    /// The first step after which the checkpoints passed so far differ for good.
    pub fn first_divergence(&self) -> Option<u32> {
        self.steps.iter().find(|s| s.diverges).map(|s| s.step)
    }

    /// Whether the replay reproduced the recording: the same ending, and the same
    /// checkpoints passing, a step earlier or later at most where the runs agree again.
    pub fn reproduced(&self) -> bool {
        self.first_divergence().is_none()
            && self.recorded.as_ref().is_some_and(|r| {
                (r.termination, r.passed, r.total)
                    == (
                        self.replayed.termination,
                        self.replayed.passed,
                        self.replayed.total,
                    )
            })
    }

    /// The comparison as lines for people.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut out = format!("task {}\n", self.task);
        let _ = writeln!(
            out,
            "{:>4}  {:<38} {:<34} screen",
            "step", "actions", "checkpoints passed (recorded | replayed)"
        );
        for s in &self.steps {
            let mut actions = s.actions.join("; ");
            if actions.chars().count() > 38 {
                actions = actions.chars().take(37).collect::<String>() + "…";
            }
            let cps = match &s.replayed_passed {
                None => format!("{} | (not reached)", list(&s.recorded_passed)),
                Some(r) => format!("{} | {}", list(&s.recorded_passed), list(r)),
            };
            let screen: Vec<String> = s
                .screen_difference
                .iter()
                .map(|(role, d)| format!("{role} {:.1}% differs", d * 100.0))
                .collect();
            let mark = if s.diverges { "≠" } else { " " };
            let _ = writeln!(
                out,
                "{:>4}{mark} {:<38} {:<34} {}",
                s.step,
                actions,
                cps,
                screen.join(", ")
            );
            for n in &s.notes {
                let _ = writeln!(out, "       note: {n}");
            }
        }
        let recorded = self
            .recorded
            .as_ref()
            .map_or("no record (an unfinished run)".into(), ToString::to_string);
        if !self.final_difference.is_empty() {
            let ends: Vec<String> = self
                .final_difference
                .iter()
                .map(|(role, d)| format!("{role} {:.1}% differs", d * 100.0))
                .collect();
            let _ = writeln!(out, "   end  {}", ends.join(", "));
        }
        let _ = writeln!(out, "recorded: {recorded}");
        let _ = writeln!(out, "replayed: {}", self.replayed);
        let timing = self
            .steps
            .iter()
            .flat_map(|s| &s.notes)
            .filter(|n| n.starts_with("timing: "))
            .count();
        let verdict = if self.reproduced() && timing == 0 {
            "the replay reproduces the recording: the same checkpoints at the same steps and the same ending".to_owned()
        } else if self.reproduced() {
            format!(
                "the replay reproduces the recording: the same checkpoints and the same ending ({timing} passed a step apart: timing)"
            )
        } else {
            match self.first_divergence() {
                Some(step) => format!("the replay diverges at step {step}"),
                None => "the replay ends differently".to_owned(),
            }
        };
        let _ = writeln!(out, "{verdict}");
        out
    }
}

fn list(ids: &[String]) -> String {
    if ids.is_empty() {
        "-".into()
    } else {
        ids.join(", ")
    }
}

/// The share of a screen that looks different in two screenshots (PNG or JPEG): both are
/// shrunk to a grid by area sampling, and a cell counts when its colours differ by more
/// than a tolerance. Screenshots of different sizes differ entirely.
pub(crate) fn screen_difference(a: &[u8], b: &[u8]) -> Result<f64, crate::picture::PictureError> {
    let (a, b) = (crate::picture::decode(a)?, crate::picture::decode(b)?);
    if (a.width, a.height) != (b.width, b.height) {
        return Ok(1.0);
    }
    let w = GRID.min(a.width);
    let h = (u64::from(a.height) * u64::from(w) / u64::from(a.width)).max(1) as u32;
    let (a, b) = (a.shrink(w, h), b.shrink(w, h));
    let changed = a
        .pixels
        .chunks_exact(3)
        .zip(b.pixels.chunks_exact(3))
        .filter(|(p, q)| {
            let sum: f64 = p
                .iter()
                .zip(q.iter())
                .map(|(x, y)| f64::from(x.abs_diff(*y)))
                .sum();
            sum / 3.0 > CELL_TOLERANCE
        })
        .count();
    Ok(changed as f64 / (w as usize * h as usize) as f64)
}

/// The screenshots of each role that a recorded step and its replay both kept, as pairs of
/// file names: the plain ones where both have them (marks drawn on a screen are not the
/// screen), else the marked ones.
fn shot_pairs(recorded: &[ImageRef], replayed: &[ImageRef]) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = Vec::new();
    for kind in ["screenshot", "marks"] {
        for a in recorded.iter().filter(|i| i.kind == kind) {
            let b = replayed.iter().find(|b| b.kind == kind && b.role == a.role);
            if let Some(b) = b
                && !out.iter().any(|(r, _, _)| *r == a.role)
            {
                out.push((a.role.clone(), a.file.clone(), b.file.clone()));
            }
        }
    }
    out
}

/// How much each role's screen differs between two sets of kept images (the recording's
/// in `rec_dir`, the replay's in `rep_dir`), where both kept one.
fn differences(
    recorded: &[ImageRef],
    replayed: &[ImageRef],
    rec_dir: &Path,
    rep_dir: &Path,
) -> Vec<(String, f64)> {
    let read = |dir: &Path, f: &str| std::fs::read(dir.join(f)).ok();
    shot_pairs(recorded, replayed)
        .into_iter()
        .filter_map(|(role, file, other)| {
            let (x, y) = (read(rec_dir, &file)?, read(rep_dir, &other)?);
            Some((role, screen_difference(&x, &y).ok()?))
        })
        .collect()
}

/// Marks where the runs went apart: the checkpoints passed so far after each step are
/// compared (the replay's after its last step are all it passed, `replayed_final`); a step
/// diverges when they differ there, at every later step and in what each run passed in
/// all (`recorded_final`: the recording's record, if it has one). A checkpoint that passed a
/// step earlier or later and the runs then agree again is timing (an application that
/// wrote its file a little later), noted on the step.
fn mark_divergence(
    steps: &mut [StepComparison],
    recorded_final: Option<&[NodeProgress]>,
    replayed_final: &[NodeProgress],
) {
    let passed = |p: &[NodeProgress]| -> BTreeSet<String> {
        p.iter()
            .filter(|p| p.passed_at.is_some())
            .map(|p| p.id.clone())
            .collect()
    };
    let all_replayed = passed(replayed_final);
    let (mut rec, mut rep) = (BTreeSet::new(), BTreeSet::new());
    let mut differs = Vec::with_capacity(steps.len());
    for s in steps.iter() {
        rec.extend(s.recorded_passed.iter().cloned());
        match &s.replayed_passed {
            Some(p) => rep.extend(p.iter().cloned()),
            None => rep.clone_from(&all_replayed),
        }
        differs.push(rec != rep);
    }
    // Diverged for good: differs here, at every later step and at the end (what each run
    // passed in all, the replay's waits after the recording ran out included).
    let recorded_all = recorded_final.map_or(rec, passed);
    let mut for_good = vec![false; steps.len()];
    let mut later = recorded_all != all_replayed;
    for i in (0..steps.len()).rev() {
        later &= differs[i];
        for_good[i] = later;
    }
    for (i, s) in steps.iter_mut().enumerate() {
        s.diverges = for_good[i];
        if differs[i] && !for_good[i] {
            let replayed = s.replayed_passed.clone().unwrap_or_default();
            let (only_rec, only_rep): (Vec<&String>, Vec<&String>) = (
                s.recorded_passed
                    .iter()
                    .filter(|c| !replayed.contains(c))
                    .collect(),
                replayed
                    .iter()
                    .filter(|c| !s.recorded_passed.contains(c))
                    .collect(),
            );
            for c in only_rec {
                s.notes
                    .push(format!("timing: '{c}' passed here in the recording only"));
            }
            for c in only_rep {
                s.notes
                    .push(format!("timing: '{c}' passed here in the replay only"));
            }
        }
    }
}

/// The recording and its replay (the task run `replayed` wrote into `replay_dir`), step by
/// step.
pub fn compare(
    recording: &Recording,
    replay_dir: &Path,
    replayed: &TaskRecord,
    notes: &[ReplayNote],
) -> Result<Comparison, ReplayError> {
    let steps = record::read_steps(replay_dir).map_err(|source| ReplayError::Io {
        path: replay_dir.join("steps.jsonl"),
        source,
    })?;
    let compared = recording
        .steps
        .iter()
        .map(|rec| {
            let again = steps.iter().find(|s| s.step == rec.step);
            let mut screens = Vec::new();
            if let Some(again) = again {
                screens = differences(&rec.images, &again.images, &recording.dir, replay_dir);
            }
            StepComparison {
                step: rec.step,
                actions: rec
                    .actions
                    .iter()
                    .map(|a| {
                        serde_json::from_value::<AgentAction>(a.clone())
                            .map_or_else(|_| a.to_string(), |a| a.describe())
                    })
                    .collect(),
                recorded_passed: rec.passed.clone(),
                replayed_passed: again.map(|s| s.passed.clone()),
                screen_difference: screens,
                notes: notes
                    .iter()
                    .filter(|n| n.step == rec.step)
                    .flat_map(|n| n.notes.clone())
                    .collect(),
                diverges: false,
            }
        })
        .collect();
    let mut compared: Vec<StepComparison> = compared;
    mark_divergence(
        &mut compared,
        recording.record.as_ref().map(|r| r.progress.as_slice()),
        &replayed.progress,
    );
    let final_difference = recording.record.as_ref().map_or_else(Vec::new, |r| {
        differences(
            &r.final_images,
            &replayed.final_images,
            &recording.dir,
            replay_dir,
        )
    });
    Ok(Comparison {
        final_difference,
        recording: recording.dir.clone(),
        replay: replay_dir.to_owned(),
        task: recording.task.id.clone(),
        steps: compared,
        recorded: recording.record.as_ref().map(Ending::of),
        replayed: Ending::of(replayed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::som::Element;
    use pincer_shared::Platform;
    use pincer_shared::observe::Rect;

    fn element(id: u32, role: &str, name: &str) -> Element {
        Element {
            id,
            role: role.into(),
            name: name.into(),
            text: None,
            states: vec![],
            bounds: Rect {
                x: 10 * id as i32,
                y: 0,
                width: 8,
                height: 8,
            },
        }
    }

    fn seen(elements: Vec<Element>) -> Observation {
        Observation {
            step: 0,
            views: vec![View {
                role: "desktop".into(),
                platform: Platform::Linux,
                screen: (800, 600),
                image_size: (800, 600),
                screenshot: None,
                marked: None,
                elements,
                tree: None,
                tree_text: None,
                video: vec![],
                build_ms: 0.0,
            }],
            feedback: vec![],
            checkpoints: vec![],
            checkpoint_feedback: Default::default(),
        }
    }

    fn recorded(elements: &[Element]) -> StepRecord {
        StepRecord {
            step: 3,
            images: vec![],
            elements: vec![("desktop".into(), crate::agent::som::list(elements))],
            thought: None,
            actions: vec![],
            results: vec![],
            invalid: None,
            exchanges: vec![],
            usage: Default::default(),
            evaluation: vec![],
            passed: vec![],
            timing: Default::default(),
            video_ms: vec![],
        }
    }

    fn click(element: u32) -> AgentAction {
        AgentAction::Click {
            env: "desktop".into(),
            target: Target::Element { element },
        }
    }

    #[test]
    fn recorded_elements_are_read_back_with_quotes_text_and_states() {
        let mut odd = element(4, "push button", "Say \"hi\" [5] now");
        odd.text = Some("typed \"x\"".into());
        odd.states = vec!["focused".into()];
        let list = crate::agent::som::list(&[element(1, "label", "A"), odd]);
        assert_eq!(recorded_element(&list, 1), Some("label \"A\""));
        assert_eq!(
            recorded_element(&list, 4),
            Some(r#"push button "Say \"hi\" [5] now""#)
        );
        assert_eq!(recorded_element(&list, 5), None);
        assert_eq!(recorded_element("garbage [1] x", 1), None);
    }

    #[test]
    fn element_targets_follow_what_they_named() {
        let then = [
            element(1, "push button", "OK"),
            element(2, "push button", "Cancel"),
        ];
        let step = recorded(&then);
        // The same screen: nothing to say.
        let mut a = click(2);
        assert!(retarget(&mut a, &step, &seen(then.to_vec())).is_empty());
        assert_eq!(a, click(2));
        // A new element before it: "Cancel" is number 3 now.
        let now = vec![
            element(1, "label", "Warning"),
            element(2, "push button", "OK"),
            element(3, "push button", "Cancel"),
        ];
        let mut a = click(2);
        let notes = retarget(&mut a, &step, &seen(now));
        assert_eq!(a, click(3));
        assert_eq!(
            notes,
            [r#"element 2 (push button "Cancel") is element 3 now"#]
        );
        // Gone: kept as recorded, and said.
        let mut a = click(2);
        let notes = retarget(&mut a, &step, &seen(vec![element(1, "push button", "OK")]));
        assert_eq!(a, click(2));
        assert!(
            notes[0].contains("is not on the desktop screen now"),
            "{notes:?}"
        );
        // Points are points.
        let mut p = AgentAction::Click {
            env: "desktop".into(),
            target: Target::Point { x: 5, y: 5 },
        };
        assert!(retarget(&mut p, &step, &seen(vec![])).is_empty());
    }

    #[test]
    fn screens_differ_by_the_share_that_changed() {
        use crate::picture::png_rgba;
        let plain = png_rgba(400, 300, |_, _| [200, 200, 200, 255]);
        assert_eq!(screen_difference(&plain, &plain).unwrap(), 0.0);
        // A dialog over a quarter of the screen.
        let dialog = png_rgba(400, 300, |x, y| {
            if x < 200 && y < 150 {
                [20, 20, 90, 255]
            } else {
                [200, 200, 200, 255]
            }
        });
        let d = screen_difference(&plain, &dialog).unwrap();
        assert!((d - 0.25).abs() < 0.02, "{d}");
        // A faint change (a few levels) is no change.
        let faint = png_rgba(400, 300, |_, _| [205, 195, 200, 255]);
        assert_eq!(screen_difference(&plain, &faint).unwrap(), 0.0);
        let small = png_rgba(200, 150, |_, _| [200, 200, 200, 255]);
        assert_eq!(screen_difference(&plain, &small).unwrap(), 1.0);
        assert!(screen_difference(b"not a picture", &plain).is_err());
    }

    fn compared(step: u32, recorded: &[&str], replayed: Option<&[&str]>) -> StepComparison {
        let ids = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        StepComparison {
            step,
            actions: vec![],
            recorded_passed: ids(recorded),
            replayed_passed: replayed.map(ids),
            screen_difference: vec![],
            notes: vec![],
            diverges: false,
        }
    }

    fn passed(ids: &[&str]) -> Vec<NodeProgress> {
        ids.iter()
            .map(|id| NodeProgress {
                id: (*id).into(),
                passed_at: Some(1),
                ..NodeProgress::default()
            })
            .collect()
    }

    #[test]
    fn a_checkpoint_passing_a_step_apart_is_timing_and_one_never_passing_diverges() {
        // The replay's application wrote its file a step sooner: timing.
        let mut steps = vec![
            compared(1, &[], Some(&["file"])),
            compared(2, &["file"], None),
        ];
        mark_divergence(&mut steps, None, &passed(&["file"]));
        assert!(steps.iter().all(|s| !s.diverges), "{steps:?}");
        assert_eq!(
            steps[0].notes,
            ["timing: 'file' passed here in the replay only"]
        );
        // A step later, the replay not ending before it.
        let mut steps = vec![
            compared(1, &["a"], Some(&[])),
            compared(2, &[], Some(&["a"])),
            compared(3, &["b"], Some(&["b"])),
        ];
        mark_divergence(&mut steps, None, &passed(&["a", "b"]));
        // The recording's last step passed what the replay passed only while it waited
        // after the recording ran out: timing too.
        let mut steps = vec![
            compared(1, &[], Some(&[])),
            compared(2, &["saved"], Some(&[])),
        ];
        mark_divergence(&mut steps, Some(&passed(&["saved"])), &passed(&["saved"]));
        assert!(steps.iter().all(|s| !s.diverges), "{steps:?}");
        assert_eq!(
            steps[1].notes,
            ["timing: 'saved' passed here in the recording only"]
        );
        assert!(steps.iter().all(|s| !s.diverges), "{steps:?}");
        // Never passing in the replay: diverged where it should have passed, and after.
        let mut steps = vec![
            compared(1, &[], Some(&[])),
            compared(2, &["shown"], Some(&[])),
            compared(3, &["answer"], Some(&["answer"])),
        ];
        mark_divergence(
            &mut steps,
            Some(&passed(&["shown", "answer"])),
            &passed(&["answer"]),
        );
        let at: Vec<bool> = steps.iter().map(|s| s.diverges).collect();
        assert_eq!(at, [false, true, true]);
    }
}
