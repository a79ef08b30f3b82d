//! Inverse-dynamics and success-detection sets from executed trajectories, in AgentStudio's
//! IDMBench and CriticBench layouts. An IDM item is one action that was carried out
//! (its result "ok") between the frames before and after it; its label is the action as
//! executed. A critic item is one task run's frames, actions and instruction; its label is
//! the checkpoint graph's verdict (the record's termination), so a failure is a real graded
//! failure and never a successful run cut short.

use super::{CRITIC_FILE, DatasetError, IDM_FILE, write_jsonl};
use crate::metrics::Termination;
use crate::rundir::record::{ImageRef, StepRecord, TaskRecord, read_steps};
use crate::task::PlatformClass;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// The operations of desktop trajectories (IDMBench's `action_space`).
pub const DESKTOP_ACTIONS: &[&str] = crate::agent::actions::DESKTOP;
/// The operations of phone trajectories.
pub const MOBILE_ACTIONS: &[&str] = &[
    "tap",
    "long_press",
    "swipe",
    "text",
    "key",
    "home",
    "back",
    "scroll",
];

/// What an IDM item's action was and how it reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ActionMeta {
    /// A short rendering ("click {"target":{"x":10,"y":20}}").
    pub repr: String,
    /// The action exactly as executed (pincer's action JSON): the label.
    pub action: serde_json::Value,
}

/// One inverse-dynamics item: AgentStudio's IDMBench fields and where it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdmItem {
    /// Unique in the set; answers name items by it.
    pub action_id: String,
    /// The frame before, relative to `images/`.
    pub obs_before: String,
    /// The frame after.
    pub obs_after: String,
    /// The action's type, one of `action_space`.
    pub operation: String,
    /// Always null: the action's points are in `metadata.action`, in screen pixels.
    pub bbox: Option<serde_json::Value>,
    /// The action.
    pub metadata: ActionMeta,
    /// The task's instruction.
    pub instruction: String,
    /// Always "pincer".
    pub source: String,
    /// "desktop" or "mobile".
    pub platform: String,
    /// The operations an answer chooses from.
    pub action_space: Vec<String>,
    /// The task.
    pub task: String,
    /// The step of the trajectory (1 = first decision).
    pub step: u32,
}

/// One action of a critic item's trajectory (CriticBench's `actions` entries).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrajectoryAction {
    /// Unique in the set.
    pub action_id: String,
    /// The frame the action was chosen on.
    pub obs_before: Option<String>,
    /// The frame after it (the next decision's), if the run went on.
    pub obs_after: Option<String>,
    /// The action's type.
    pub operation: String,
    /// Always null, as in IDM items.
    pub bbox: Option<serde_json::Value>,
    /// The action and its result.
    pub metadata: ActionMeta,
}

/// Where a critic item came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// The task.
    pub task: String,
    /// Its repeat.
    pub repeat: u32,
    /// The agent.
    pub agent: String,
    /// How the run ended.
    pub termination: Termination,
    /// Checkpoints passed, of `total`.
    pub passed: usize,
    /// Checkpoints in the graph.
    pub total: usize,
}

/// One success-detection item: AgentStudio's CriticBench fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CriticItem {
    /// What the agent was told.
    pub instruction: String,
    /// Unique in the set; answers name items by it.
    pub annotation_id: String,
    /// The actions in order, with their frames.
    pub actions: Vec<TrajectoryAction>,
    /// Always "pincer".
    pub source: String,
    /// "desktop" or "mobile".
    pub platform: String,
    /// Where it came from.
    pub metadata: RunMeta,
    /// The operations of the platform.
    pub action_space: Vec<String>,
    /// The label: the checkpoint graph passed (termination `success`).
    pub is_success: bool,
}

/// What was built from the runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Built<T> {
    /// The items.
    pub items: Vec<T>,
    /// Images copied.
    pub images: usize,
    /// Task runs read.
    pub runs: usize,
    /// Task runs or steps left out, and why, counted by reason.
    pub skipped: std::collections::BTreeMap<&'static str, usize>,
}

impl<T> Built<T> {
    fn new(runs: usize) -> Self {
        Self {
            items: Vec::new(),
            images: 0,
            runs,
            skipped: std::collections::BTreeMap::new(),
        }
    }
}

/// A trajectory being read: its run directory, record and steps.
struct Traj {
    run_no: usize,
    dir: PathBuf,
    record: TaskRecord,
    steps: Vec<StepRecord>,
}

impl Traj {
    /// The images of what step `k`'s actions left: the next step's, and after the last
    /// step the state the run ended in.
    fn after(&self, k: usize) -> &[ImageRef] {
        self.steps
            .get(k + 1)
            .map_or(self.record.final_images.as_slice(), |n| n.images.as_slice())
    }
}

/// Every task run of the given run directories with its steps (the latest attempt of each).
fn read_runs(runs: &[PathBuf]) -> Result<Vec<Traj>, DatasetError> {
    let mut out = Vec::new();
    for (run_no, run) in runs.iter().enumerate() {
        let records = crate::rundir::shard::read_all(run).map_err(DatasetError::io(run))?;
        if records.is_empty() {
            return Err(DatasetError::NotARun(run.clone()));
        }
        for record in crate::rundir::latest(records) {
            let dir = run.join(&record.trajectory);
            // A task run that ended before its first step has no steps file.
            let steps = match read_steps(&dir) {
                Ok(s) => s,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(DatasetError::io(&dir)(e)),
            };
            out.push(Traj {
                run_no,
                dir,
                record,
                steps,
            });
        }
    }
    Ok(out)
}

/// Copies trajectory images into a set's `images/`, each once.
struct Images {
    dir: PathBuf,
    copied: BTreeSet<String>,
}

impl Images {
    /// The set's name of the image for `role` among a step's `images` (a plain screenshot
    /// if the agent saw one, else the marked one), copied on first use; `None` if there is
    /// none.
    fn of(
        &mut self,
        t: &Traj,
        images: &[ImageRef],
        role: Option<&str>,
    ) -> Result<Option<String>, DatasetError> {
        let for_role = |kind: &str| {
            images
                .iter()
                .find(|i| i.kind == kind && role.is_none_or(|r| i.role == r))
        };
        let Some(img) = for_role("screenshot").or_else(|| for_role("marks")) else {
            return Ok(None);
        };
        let name = format!(
            "r{}-{}-{}",
            t.run_no,
            crate::task::sanitize(&t.record.trajectory),
            img.file
        );
        if self.copied.insert(name.clone()) {
            let from = t.dir.join(&img.file);
            let to = self.dir.join(&name);
            if std::fs::hard_link(&from, &to).is_err() {
                std::fs::copy(&from, &to).map_err(DatasetError::io(&from))?;
            }
        }
        Ok(Some(name))
    }
}

fn platform(class: PlatformClass) -> (&'static str, &'static [&'static str]) {
    match class {
        PlatformClass::Android => ("mobile", MOBILE_ACTIONS),
        _ => ("desktop", DESKTOP_ACTIONS),
    }
}

/// An action's type and its short rendering.
fn describe(action: &serde_json::Value) -> (String, String) {
    let op = action
        .get("action")
        .and_then(|a| a.as_str())
        .unwrap_or("unknown")
        .to_owned();
    let mut args = action.as_object().cloned().unwrap_or_default();
    args.remove("action");
    args.remove("env");
    let repr = if args.is_empty() {
        op.clone()
    } else {
        format!("{op} {}", serde_json::Value::Object(args))
    };
    (op, repr)
}

/// Whether an action names a marked element (whose box only the marks it was chosen on
/// say) rather than screen pixels.
fn names_element(v: &serde_json::Value) -> bool {
    match v {
        serde_json::Value::Object(m) => m.contains_key("element") || m.values().any(names_element),
        _ => false,
    }
}

/// Builds an inverse-dynamics set in `out` from the trajectories of `runs`.
pub fn idm(runs: &[PathBuf], out: &Path) -> Result<Built<IdmItem>, DatasetError> {
    // Read first: nothing is made for runs that cannot be read.
    let trajs = read_runs(runs)?;
    let mut images = Images {
        dir: super::prepare(out, IDM_FILE)?,
        copied: BTreeSet::new(),
    };
    let mut built = Built::new(trajs.len());
    for t in &trajs {
        let (plat, space) = platform(t.record.class);
        for (k, step) in t.steps.iter().enumerate() {
            let next = t.after(k);
            let skip = match (step.actions.as_slice(), step.results.as_slice()) {
                ([_], [r]) if r != "ok" => Some("the action failed"),
                ([a], [_]) if !space.contains(&describe(a).0.as_str()) => {
                    Some("not a GUI action (done, submit, wait)")
                }
                ([a], [_]) if names_element(a) => Some("the action names a marked element"),
                ([_], [_]) => None,
                _ => Some("not one action in the step"),
            };
            if let Some(why) = skip {
                *built.skipped.entry(why).or_default() += 1;
                continue;
            }
            let action = &step.actions[0];
            let role = action.get("env").and_then(|e| e.as_str());
            let (Some(before), Some(after)) =
                (images.of(t, &step.images, role)?, images.of(t, next, role)?)
            else {
                *built.skipped.entry("no frame before or after").or_default() += 1;
                continue;
            };
            let (operation, repr) = describe(action);
            built.items.push(IdmItem {
                action_id: format!("i{:05}", built.items.len()),
                obs_before: before,
                obs_after: after,
                operation,
                bbox: None,
                metadata: ActionMeta {
                    repr,
                    action: action.clone(),
                },
                instruction: t.record.instruction.clone(),
                source: "pincer".into(),
                platform: plat.into(),
                action_space: space.iter().map(|s| (*s).to_owned()).collect(),
                task: t.record.task.clone(),
                step: step.step,
            });
        }
    }
    built.images = images.copied.len();
    write_jsonl(&out.join(IDM_FILE), &built.items)?;
    Ok(built)
}

/// Builds a success-detection set in `out` from the task runs of `runs`: every run the
/// graph graded (infrastructure failures left out) that has at least one frame.
pub fn critic(runs: &[PathBuf], out: &Path) -> Result<Built<CriticItem>, DatasetError> {
    // Read first: nothing is made for runs that cannot be read.
    let trajs = read_runs(runs)?;
    let mut images = Images {
        dir: super::prepare(out, CRITIC_FILE)?,
        copied: BTreeSet::new(),
    };
    let mut built = Built::new(trajs.len());
    let mut action_no = 0usize;
    for t in &trajs {
        if t.record.termination.is_infrastructure() {
            *built
                .skipped
                .entry("not graded (an infrastructure failure)")
                .or_default() += 1;
            continue;
        }
        let (plat, space) = platform(t.record.class);
        let mut actions = Vec::new();
        for (k, step) in t.steps.iter().enumerate() {
            for (j, action) in step.actions.iter().enumerate() {
                let role = action.get("env").and_then(|e| e.as_str());
                let before = images.of(t, &step.images, role)?;
                let after = images.of(t, t.after(k), role)?;
                let (operation, mut repr) = describe(action);
                if let Some(r) = step.results.get(j).filter(|r| *r != "ok") {
                    repr.push_str(&format!(" -> {r}"));
                }
                actions.push(TrajectoryAction {
                    action_id: format!("a{action_no:06}"),
                    obs_before: before,
                    obs_after: after,
                    operation,
                    bbox: None,
                    metadata: ActionMeta {
                        repr,
                        action: action.clone(),
                    },
                });
                action_no += 1;
            }
        }
        if actions.iter().all(|a| a.obs_before.is_none()) {
            *built.skipped.entry("no frames").or_default() += 1;
            continue;
        }
        built.items.push(CriticItem {
            instruction: t.record.instruction.clone(),
            annotation_id: format!("c{:05}", built.items.len()),
            actions,
            source: "pincer".into(),
            platform: plat.into(),
            metadata: RunMeta {
                task: t.record.task.clone(),
                repeat: t.record.repeat,
                agent: t.record.agent.clone(),
                termination: t.record.termination,
                passed: t.record.passed,
                total: t.record.total,
            },
            action_space: space.iter().map(|s| (*s).to_owned()).collect(),
            is_success: t.record.termination == Termination::Success,
        });
    }
    built.images = images.copied.len();
    write_jsonl(&out.join(CRITIC_FILE), &built.items)?;
    Ok(built)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::IMAGES_DIR;
    use crate::rundir::record::{ImageRef, JsonlWriter, Timing};
    use serde_json::json;

    fn record(task: &str, termination: Termination) -> TaskRecord {
        TaskRecord {
            task: task.into(),
            repeat: 0,
            seed: 0,
            agent: "oracle".into(),
            class: PlatformClass::SingleDesktop,
            instruction: format!("do {task}"),
            termination,
            detail: None,
            passed: 1,
            final_passed: Some(1),
            total: 1,
            actions: 1,
            usage: Default::default(),
            wall_ms: 1,
            harness_ms_p50: 1.0,
            env_set: "s0".into(),
            progress: vec![],
            trajectory: format!("tasks/{task}"),
            started_ms: 0,
            final_images: Vec::new(),
            retried: vec![],
            score: None,
            compat: None,
            tool_calls: 0,
        }
    }

    fn step(n: u32, actions: Vec<serde_json::Value>, results: &[&str]) -> StepRecord {
        StepRecord {
            step: n,
            images: ["screenshot", "marks"]
                .iter()
                .map(|kind| ImageRef {
                    role: "desktop".into(),
                    kind: (*kind).into(),
                    file: format!("step-{n:03}-desktop-{kind}.png"),
                })
                .collect(),
            elements: vec![],
            thought: None,
            actions,
            results: results.iter().map(|r| (*r).to_owned()).collect(),
            invalid: None,
            exchanges: vec![],
            usage: Default::default(),
            evaluation: vec![],
            passed: vec![],
            timing: Timing::default(),
            video_ms: vec![],
        }
    }

    /// A run directory with the given task runs and their steps (image files included).
    fn run_dir(dir: &Path, runs: &[(TaskRecord, Vec<StepRecord>)]) {
        std::fs::create_dir_all(dir).unwrap();
        let mut results = JsonlWriter::append(&dir.join("results.jsonl")).unwrap();
        for (rec, steps) in runs {
            let traj = dir.join(&rec.trajectory);
            std::fs::create_dir_all(&traj).unwrap();
            let mut w = JsonlWriter::append(&traj.join("steps.jsonl")).unwrap();
            for s in steps {
                w.write(s).unwrap();
                for i in &s.images {
                    std::fs::write(traj.join(&i.file), b"png").unwrap();
                }
            }
            for i in &rec.final_images {
                std::fs::write(traj.join(&i.file), b"png").unwrap();
            }
            results.write(rec).unwrap();
        }
    }

    /// `rec` with the frame of the state it ended in.
    fn ended_in(mut rec: TaskRecord) -> TaskRecord {
        rec.final_images = vec![ImageRef {
            role: "desktop".into(),
            kind: "screenshot".into(),
            file: "final-desktop-screenshot.png".into(),
        }];
        rec
    }

    fn click(x: i32) -> serde_json::Value {
        json!({"action": "click", "env": "desktop", "target": {"x": x, "y": 5}})
    }

    #[test]
    fn only_single_executed_gui_actions_with_frames_around_them_make_idm_items() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let steps = vec![
            step(1, vec![click(1)], &["ok"]),
            step(2, vec![click(2)], &["invalid argument: off screen"]),
            step(
                3,
                vec![json!({"action": "click", "env": "desktop", "target": {"element": 4}})],
                &["ok"],
            ),
            step(4, vec![click(3), click(4)], &["ok", "ok"]),
            step(5, vec![json!({"action": "wait", "seconds": 1.0})], &["ok"]),
            step(6, vec![click(5)], &["ok"]),
            step(7, vec![json!({"action": "complete"})], &["ok"]),
            // The last step's frame after it is the state the run ended in.
            step(8, vec![click(8)], &["ok"]),
        ];
        run_dir(
            &run,
            &[(ended_in(record("t", Termination::Success)), steps)],
        );
        let out = dir.path().join("idm");
        let built = idm(std::slice::from_ref(&run), &out).unwrap();
        let points: Vec<i64> = built
            .items
            .iter()
            .map(|i| i.metadata.action["target"]["x"].as_i64().unwrap())
            .collect();
        assert_eq!(points, vec![1, 5, 8]);
        assert_eq!(
            built.items[0].obs_before,
            "r0-tasks_t-step-001-desktop-screenshot.png"
        );
        assert_eq!(
            built.items[0].obs_after,
            "r0-tasks_t-step-002-desktop-screenshot.png"
        );
        assert_eq!(built.items[1].step, 6);
        assert_eq!(
            built.items[2].obs_after,
            "r0-tasks_t-final-desktop-screenshot.png"
        );
        assert_eq!(
            built.skipped.values().sum::<usize>(),
            5,
            "{:?}",
            built.skipped
        );
        assert_eq!(built.images, 6);
        let images = out.join(IMAGES_DIR);
        assert!(
            !images
                .join("r0-tasks_t-step-003-desktop-screenshot.png")
                .exists()
        );
        assert!(
            images
                .join("r0-tasks_t-step-007-desktop-screenshot.png")
                .is_file()
        );
        // The set is not written twice into one directory.
        assert!(matches!(
            idm(&[run], &out).unwrap_err(),
            DatasetError::NotEmpty(_)
        ));
    }

    #[test]
    fn critic_labels_are_the_graphs_and_infrastructure_failures_are_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        let two = || {
            vec![
                step(1, vec![click(1)], &["ok"]),
                step(2, vec![json!({"action": "complete"})], &["ok"]),
            ]
        };
        run_dir(
            &run,
            &[
                (ended_in(record("won", Termination::Success)), two()),
                (record("undone", Termination::Undone), two()),
                (record("crashed", Termination::EnvironmentError), two()),
                (record("broken", Termination::BrokenSetup), vec![]),
            ],
        );
        let built = critic(&[run], &dir.path().join("critic")).unwrap();
        let labels: Vec<(&str, bool)> = built
            .items
            .iter()
            .map(|i| (i.metadata.task.as_str(), i.is_success))
            .collect();
        assert_eq!(labels, vec![("won", true), ("undone", false)]);
        assert_eq!(built.skipped.values().sum::<usize>(), 2);
        let won = &built.items[0];
        assert_eq!(won.actions.len(), 2);
        assert_eq!(won.actions[0].obs_after, won.actions[1].obs_before);
        assert_eq!(
            won.actions[1].obs_after.as_deref(),
            Some("r0-tasks_won-final-desktop-screenshot.png"),
            "the state the run ended in"
        );
        assert_eq!(
            built.items[1].actions[1].obs_after, None,
            "no final frame was kept"
        );
        assert_eq!(won.actions[1].metadata.repr, "complete");
        assert!(matches!(
            critic(&[dir.path().join("nothing")], &dir.path().join("c2")).unwrap_err(),
            DatasetError::NotARun(_)
        ));
    }
}
