//! Recording a person's demonstration (`pincer record`): the task's setup runs as in any
//! run, then, while the person works on the desktop (at it, or through `pincer desktop
//! vnc`), the guest's input events and a video of its screen stream in and the evaluator
//! checks the task as the human agent's does. When the task is done, the time is up or the
//! person stops, the input is merged into the actions agents take ([`merge`]), each labelled
//! with the UI node under the pointer and given the video frame from just before it, and the
//! task run's trajectory is written with those actions: a run directory that `pincer
//! replay`, `pincer report` and the dataset builders read like any other.

pub mod merge;

use crate::agent::actions::AgentAction;
use crate::agent::actions::Target;
use crate::agent::correction::Correction;
use crate::agent::{Agent, AgentError, Decision, Observation, TaskBrief};
use crate::env::{ClientError, Environment};
use crate::run::sets::EnvSet;
use crate::run::task::{self as task_run, Context, Progress};
use crate::run::{self, RunError};
use crate::rundir::record::{ImageRef, JsonlWriter, StepRecord, TaskRecord};
use crate::task::Task;
use crate::task::oracle::{Locator, OracleStep};
use crate::task::selector::Selector;
use crate::video::{Recording, VideoError};
use futures::future::BoxFuture;
use pincer_shared::action::Point;
use pincer_shared::observe::{ImageFormat, InputEvent, VideoRequest};
use pincer_shared::tree::{UiNode, UiTree};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The answer a recording without a task submits when the person stops: its one
/// checkpoint, which only the end of the recording passes.
pub const ENDED: &str = "pincer-recording-ended";

/// How long a recording may run at most.
const LONGEST: Duration = Duration::from_secs(4 * 3600);

/// How often the evaluator and the UI tree are looked at while the person works.
const LOOK: f64 = 0.3;

/// Why a recording failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The environment refused or failed.
    #[error(transparent)]
    Env(#[from] ClientError),
    /// The video failed.
    #[error(transparent)]
    Video(#[from] VideoError),
    /// The run directory could not be laid out.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The task cannot be recorded.
    #[error("{0}")]
    Task(String),
    /// Writing the recording failed.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RecordError {
    let path = path.to_owned();
    move |source| RecordError::Io { path, source }
}

/// The task of a recording made without one: one checkpoint, passed when the person stops.
pub fn open_task(instruction: &str) -> Task {
    serde_json::from_value(serde_json::json!({
        "id": "recording",
        "instruction": instruction,
        "envs": {"desktop": {"platform": "linux"}},
        "checkpoints": [{"id": "ended", "check": "answer_equals", "args": {"text": ENDED}}],
        "limits": {"max_steps": 100_000, "max_seconds": LONGEST.as_secs()}
    }))
    .unwrap_or_else(|e| unreachable!("the recording task is valid: {e}"))
}

/// What to record.
pub struct RecordConfig<'a> {
    /// The environment set: one role.
    pub set: &'a EnvSet,
    /// The task (setup, checkpoints); [`open_task`] for a recording without one.
    pub task: Task,
    /// Whether `task` is [`open_task`]'s: stopping then ends it as done.
    pub open: bool,
    /// The run directory.
    pub out: PathBuf,
    /// Set to stop (Ctrl-C).
    pub stop: Arc<AtomicBool>,
    /// Stop after this long (from when recording begins).
    pub seconds: Option<u64>,
    /// Video frames a second at most.
    pub fps: u32,
    /// Status lines.
    pub progress: &'a dyn Progress,
}

impl std::fmt::Debug for RecordConfig<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordConfig")
            .field("task", &self.task.id)
            .field("out", &self.out)
            .finish_non_exhaustive()
    }
}

/// What a recording made.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The task run's record (its actions are the merged ones).
    pub record: TaskRecord,
    /// The trajectory directory.
    pub trajectory: PathBuf,
    /// Input events read.
    pub events: usize,
    /// What was left out while merging.
    pub notes: Vec<String>,
    /// Video frames.
    pub frames: usize,
}

/// What the recording agent saw at one look: when (guest clock), the trees, the checkpoints
/// passed.
#[derive(Debug, Clone)]
struct Look {
    guest_us: u64,
    tree: Option<UiTree>,
    passed: Vec<String>,
}

/// Everything the capture collects, shared by the agent and the capture tasks.
#[derive(Default)]
struct Captured {
    events: Vec<InputEvent>,
    looks: Vec<Look>,
    video: Option<Recording>,
    /// The guest's clock minus the host's `Instant` at the start, for stamping looks.
    clock: Option<(Instant, u64)>,
    failed: Option<String>,
}

impl Captured {
    fn guest_now(&self) -> u64 {
        self.clock
            .map_or(0, |(at, us)| us + at.elapsed().as_micros() as u64)
    }
}

/// The agent of a recording: it decides nothing (the person acts), starts the capture when
/// the task is set up, looks at the screen every [`LOOK`] seconds, and ends the run when
/// told to stop.
struct Recorder {
    env: Arc<Environment>,
    captured: Arc<Mutex<Captured>>,
    stop: Arc<AtomicBool>,
    deadline: Option<Instant>,
    seconds: Option<u64>,
    open: bool,
    fps: u32,
    video_out: PathBuf,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Recorder {
    /// Starts the input and video streams once the setup is done.
    async fn start(&mut self) -> Result<(), AgentError> {
        let fail = |e: String| AgentError::Setup(format!("starting the recording: {e}"));
        let duration_ms = LONGEST.as_millis() as u64;
        let mut input = self
            .env
            .input_events(duration_ms)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let mut video = self
            .env
            .video(VideoRequest {
                max_fps: self.fps,
                format: ImageFormat::Jpeg { quality: 80 },
                max_size: None,
                duration_ms,
            })
            .await
            .map_err(|e| fail(e.to_string()))?;
        let (guest_us, _) = self
            .env
            .guest_clock()
            .await
            .map_err(|e| fail(e.to_string()))?;
        {
            let mut c = self.captured.lock().unwrap_or_else(|e| e.into_inner());
            c.clock = Some((Instant::now(), guest_us));
            c.video = Some(Recording::new(&self.video_out).map_err(|e| fail(e.to_string()))?);
        }
        let captured = self.captured.clone();
        self.tasks.push(tokio::spawn(async move {
            loop {
                let got = input.next().await;
                let mut c = captured.lock().unwrap_or_else(|e| e.into_inner());
                match got {
                    Ok(Some(batch)) => c.events.extend(batch),
                    Ok(None) => return,
                    Err(e) => {
                        c.failed = Some(format!("input: {e}"));
                        return;
                    }
                }
            }
        }));
        let captured = self.captured.clone();
        self.tasks.push(tokio::spawn(async move {
            loop {
                let got = video.next().await;
                let mut c = captured.lock().unwrap_or_else(|e| e.into_inner());
                let pushed = match got {
                    Ok(Some(frame)) => match c.video.as_mut() {
                        Some(v) => v.push(&frame).map_err(|e| e.to_string()),
                        None => return,
                    },
                    Ok(None) => return,
                    Err(e) => Err(e.to_string()),
                };
                if let Err(e) = pushed {
                    c.failed = Some(format!("video: {e}"));
                    return;
                }
            }
        }));
        self.deadline = self
            .seconds
            .map(|s| Instant::now() + Duration::from_secs(s));
        Ok(())
    }

    /// Stops the capture streams.
    fn end(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Agent for Recorder {
    fn name(&self) -> String {
        "recording".into()
    }

    fn begin(&mut self, _brief: &TaskBrief) -> Result<(), AgentError> {
        Ok(())
    }

    fn act<'a>(&'a mut self, obs: &'a Observation) -> BoxFuture<'a, Result<Decision, AgentError>> {
        Box::pin(async move {
            if self.tasks.is_empty() {
                self.start().await?;
                eprintln!("recording: work on the task now (Ctrl-C stops)");
            }
            {
                let mut c = self.captured.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(why) = c.failed.take() {
                    return Err(AgentError::Setup(format!("the recording failed: {why}")));
                }
                let look = Look {
                    guest_us: c.guest_now(),
                    tree: obs.views.first().and_then(|v| v.tree.clone()),
                    passed: obs
                        .checkpoints
                        .iter()
                        .filter(|(_, p)| *p)
                        .map(|(id, _)| id.clone())
                        .collect(),
                };
                c.looks.push(look);
            }
            let time_up = self.deadline.is_some_and(|d| Instant::now() >= d);
            let action = if self.stop.load(Ordering::SeqCst) || time_up {
                if self.open {
                    AgentAction::Submit {
                        answer: ENDED.into(),
                    }
                } else {
                    AgentAction::Complete
                }
            } else {
                AgentAction::Wait { seconds: LOOK }
            };
            Ok(Decision {
                actions: vec![action],
                ..Decision::default()
            })
        })
    }
}

/// The node under the pointer: its role and name, and the named window or dialog it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// Role.
    pub role: String,
    /// Name (may be empty).
    pub name: String,
    /// The nearest named ancestor that is a window or dialog: role and name.
    pub window: Option<(String, String)>,
}

impl std::fmt::Display for Hit {
    /// `push button "OK" in dialog "Save"`; `text in dialog "Save"` for an unnamed node.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.role)?;
        if !self.name.trim().is_empty() {
            write!(f, " {:?}", self.name)?;
        }
        if let Some((role, name)) = &self.window {
            write!(f, " in {role} {name:?}")?;
        }
        Ok(())
    }
}

impl Hit {
    /// A selector for the node: its role and name, inside its window; `None` for an
    /// unnamed node, which only its point finds again.
    pub fn selector(&self) -> Option<Selector> {
        if self.name.trim().is_empty() {
            return None;
        }
        Some(Selector {
            role: Some(self.role.clone()),
            name: Some(self.name.clone()),
            inside: self.window.as_ref().map(|(role, name)| {
                Box::new(Selector {
                    role: Some(role.clone()),
                    name: Some(name.clone()),
                    ..Selector::default()
                })
            }),
            ..Selector::default()
        })
    }
}

/// The deepest node of `tree` under `p`, and the window it is in.
pub fn hit(tree: &UiTree, p: Point) -> Option<Hit> {
    /// Pushes the nodes from `n` down to the deepest one under `p`; nodes without bounds
    /// (applications) are passed through, hidden ones skipped.
    fn under<'t>(n: &'t UiNode, p: Point, path: &mut Vec<&'t UiNode>) -> bool {
        let hidden = !n.states.is_empty() && !n.has_state("showing");
        let inside = match n.bounds {
            Some(b) if hidden || !b.contains(p) => return false,
            Some(_) => true,
            None => false,
        };
        path.push(n);
        // Later children are drawn over earlier ones.
        if n.children.iter().rev().any(|c| under(c, p, path)) {
            return true;
        }
        if !inside {
            path.pop();
        }
        inside
    }
    let mut path: Vec<&UiNode> = Vec::new();
    under(&tree.root, p, &mut path);
    let at = path
        .iter()
        .rposition(|n| n.bounds.is_some() && !n.role.is_empty())?;
    let window = path[..at].iter().rev().find(|n| {
        !n.name.trim().is_empty()
            && matches!(
                n.role.as_str(),
                "frame" | "dialog" | "window" | "file chooser" | "alert"
            )
    });
    Some(Hit {
        role: path[at].role.clone(),
        name: path[at].name.clone(),
        window: window.map(|w| (w.role.clone(), w.name.clone())),
    })
}

/// The recorded actions as oracle steps, for a task author to check (a replay that
/// reproduces the recording) and keep: clicks on named nodes by selector, others by
/// point; typing, keys and key combinations as they were. Scrolls and drags have no oracle
/// step: they are left out and named in the second list.
pub fn oracle_candidate(
    merged: &[merge::Merged],
    hits: &[Option<Hit>],
) -> (Vec<OracleStep>, Vec<String>) {
    let mut steps = Vec::new();
    let mut left_out = Vec::new();
    for (m, h) in merged.iter().zip(hits) {
        let locate = |t: &Target| match (h.as_ref().and_then(Hit::selector), t) {
            (Some(sel), _) => Some(Locator::Node(sel)),
            (None, Target::Point { x, y }) => Some(Locator::Point { x: *x, y: *y }),
            (None, Target::Element { .. }) => None,
        };
        let click = |target: Option<Locator>, count, right| {
            target.map(|target| OracleStep::Click {
                env: None,
                target,
                count,
                right,
            })
        };
        let step = match &m.action {
            AgentAction::Click { target, .. } => click(locate(target), None, false),
            AgentAction::DoubleClick { target, .. } => click(locate(target), Some(2), false),
            AgentAction::RightClick { target, .. } => click(locate(target), None, true),
            AgentAction::Type { text, .. } => Some(OracleStep::Type {
                env: None,
                text: text.clone(),
                target: None,
            }),
            AgentAction::Key { key, .. } => Some(OracleStep::Key {
                env: None,
                key: key.clone(),
            }),
            AgentAction::Hotkey { keys, .. } => Some(OracleStep::Key {
                env: None,
                key: keys.join("+"),
            }),
            AgentAction::Submit { answer } if answer == ENDED => continue,
            _ => None,
        };
        match step {
            Some(s) => steps.push(s),
            None => left_out.push(format!(
                "{} has no oracle step: solve that part another way",
                m.action.describe()
            )),
        }
    }
    (steps, left_out)
}

/// Records the task on the set's one environment; see the module's documentation.
pub async fn record(cfg: RecordConfig<'_>) -> Result<Recorded, RecordError> {
    let (role, env) = match cfg.set.envs.iter().collect::<Vec<_>>()[..] {
        [(role, env)] => (role.clone(), env.clone()),
        _ => {
            return Err(RecordError::Task(format!(
                "task {} has {} roles; a recording takes a task with one",
                cfg.task.id,
                cfg.task.envs.len()
            )));
        }
    };
    let graphs = run::prepare(
        std::slice::from_ref(&cfg.task),
        &crate::peers::library(&crate::peers::osworld::cache::default_dir()),
    )?;
    let observation = crate::agent::ObservationConfig {
        screenshot: false,
        marks: true,
        tree_text: false,
        max_size: None,
        video: None,
        tools: false,
    };
    let identity = crate::rundir::Identity::new(
        "recording",
        std::slice::from_ref(&cfg.task),
        1,
        0,
        None,
        observation,
        Correction::default(),
    );
    crate::rundir::shard::check_out(&cfg.out, false, None, &identity).map_err(RunError::from)?;
    run::found(&cfg.out, false, &identity, std::slice::from_ref(&cfg.task))?;
    let traj_rel = crate::rundir::trajectory(&cfg.task.id, 0, 1);
    let traj = cfg.out.join(&traj_rel);
    let captured = Arc::new(Mutex::new(Captured::default()));
    let mut agent = Recorder {
        env: env.clone(),
        captured: captured.clone(),
        stop: cfg.stop.clone(),
        deadline: None,
        seconds: cfg.seconds,
        open: cfg.open,
        fps: cfg.fps,
        video_out: cfg.out.join("video.mp4"),
        tasks: Vec::new(),
    };
    let never = AtomicBool::new(false);
    let ctx = Context {
        compat: None,
        end: None,
        assets: None,
        set: cfg.set,
        observation,
        correction: Correction::default(),
        out: &cfg.out,
        cancel: &never,
        progress: cfg.progress,
        video: None,
    };
    let rec = task_run::run(&cfg.task, graphs[0].clone(), &mut agent, 0, 0, &ctx).await;
    agent.end();
    let mut rec = rec?;
    let (end_us, captured) = {
        let mut c = captured.lock().unwrap_or_else(|e| e.into_inner());
        (c.guest_now(), std::mem::take(&mut *c))
    };
    let (mut merged, notes) = merge::merge(&role, &captured.events);
    if cfg.open {
        merged.push(merge::Merged {
            action: AgentAction::Submit {
                answer: ENDED.into(),
            },
            guest_us: end_us,
            at: None,
        });
    }
    // The recorder's looks are not the trajectory: the person's actions are.
    for entry in std::fs::read_dir(&traj).map_err(io(&traj))?.flatten() {
        let _ = std::fs::remove_file(entry.path());
    }
    let (steps, hits) = steps(
        &role,
        &merged,
        &captured.looks,
        &rec,
        captured.video.as_ref(),
        &traj,
    )?;
    let steps_path = traj.join("steps.jsonl");
    let (oracle, left_out) = oracle_candidate(&merged, &hits);
    let oracle_path = traj.join("oracle.json");
    let text = serde_json::to_vec_pretty(&oracle).unwrap_or_default();
    std::fs::write(&oracle_path, text).map_err(io(&oracle_path))?;
    let notes: Vec<String> = notes.into_iter().chain(left_out).collect();
    let mut w = JsonlWriter::append(&steps_path).map_err(io(&steps_path))?;
    for s in &steps {
        w.write(s).map_err(io(&steps_path))?;
    }
    // The state the recording ended in, from the video (the runner's own final images
    // went with the recorder's looks).
    rec.final_images = keep_frame(captured.video.as_ref(), end_us, &traj, &role, "final")?;
    rec.actions = merged.len() as u32;
    rec.agent = "recording".into();
    rec.harness_ms_p50 = 0.0;
    let frames = match captured.video {
        Some(v) => {
            let out = traj.join("video.mp4");
            tokio::task::spawn_blocking(move || v.finish(end_us, &out))
                .await
                .map_err(|e| RecordError::Task(format!("writing the video: {e}")))??
                .map_or(0, |r| r.frames)
        }
        None => 0,
    };
    let results = crate::rundir::results_file(&cfg.out);
    JsonlWriter::append(&results)
        .and_then(|mut w| w.write(&rec))
        .map_err(io(&results))?;
    Ok(Recorded {
        record: rec,
        trajectory: traj,
        events: captured.events.len(),
        notes,
        frames,
    })
}

/// The video frame on screen at `guest_us`, copied into `traj` as `PREFIX-ROLE-screenshot`
/// (with the frame's file type): the image a step keeps.
fn keep_frame(
    video: Option<&Recording>,
    guest_us: u64,
    traj: &Path,
    role: &str,
    prefix: &str,
) -> Result<Vec<ImageRef>, RecordError> {
    let Some(frame) = video.and_then(|v| v.frame_at(guest_us)) else {
        return Ok(Vec::new());
    };
    let ext = frame.extension().and_then(|e| e.to_str()).unwrap_or("jpg");
    let file = format!("{prefix}-{}-screenshot.{ext}", crate::task::sanitize(role));
    std::fs::copy(&frame, traj.join(&file)).map_err(io(&frame))?;
    Ok(vec![ImageRef {
        role: role.to_owned(),
        kind: "screenshot".into(),
        file,
    }])
}

/// The trajectory's steps: one per merged action, with the video frame from just before it
/// (copied into `traj`), its label, and the checkpoints it is credited with; and the node
/// under each pointer action.
fn steps(
    role: &str,
    merged: &[merge::Merged],
    looks: &[Look],
    rec: &TaskRecord,
    video: Option<&Recording>,
    traj: &Path,
) -> Result<(Vec<StepRecord>, Vec<Option<Hit>>), RecordError> {
    // Each checkpoint goes to the last action before it was first seen passed (the last
    // action, for those passed after the last look).
    let first_seen = |id: &str| {
        looks
            .iter()
            .find(|l| l.passed.iter().any(|p| p == id))
            .map_or(u64::MAX, |l| l.guest_us)
    };
    let mut passed_at: Vec<Vec<String>> = vec![Vec::new(); merged.len()];
    for p in rec.progress.iter().filter(|p| p.passed_at.is_some()) {
        let t = first_seen(&p.id);
        let i = merged.iter().rposition(|m| m.guest_us <= t).unwrap_or(0);
        if let Some(list) = passed_at.get_mut(i) {
            list.push(p.id.clone());
        }
    }
    let mut out = Vec::new();
    let mut hits = Vec::new();
    for (i, m) in merged.iter().enumerate() {
        let n = i as u32 + 1;
        let passed = std::mem::take(&mut passed_at[i]);
        let images = keep_frame(video, m.guest_us, traj, role, &format!("step-{n:03}"))?;
        let tree = looks
            .iter()
            .rev()
            .find(|l| l.guest_us <= m.guest_us)
            .or(looks.first())
            .and_then(|l| l.tree.as_ref());
        let hit = match (m.at, tree) {
            (Some((x, y)), Some(t)) => hit(t, Point { x, y }),
            _ => None,
        };
        let thought = hit.as_ref().map(|h| format!("on {h}"));
        hits.push(hit);
        out.push(StepRecord {
            step: n,
            images,
            elements: Vec::new(),
            thought,
            actions: vec![serde_json::to_value(&m.action).unwrap_or_default()],
            results: vec!["ok".into()],
            invalid: None,
            exchanges: Vec::new(),
            usage: Default::default(),
            evaluation: Vec::new(),
            passed,
            timing: Default::default(),
            video_ms: Vec::new(),
        });
    }
    Ok((out, hits))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pincer_shared::observe::Rect;

    fn node(role: &str, name: &str, b: (i32, i32, u32, u32), children: Vec<UiNode>) -> UiNode {
        UiNode {
            role: role.into(),
            name: name.into(),
            bounds: Some(Rect {
                x: b.0,
                y: b.1,
                width: b.2,
                height: b.3,
            }),
            children,
            ..UiNode::default()
        }
    }

    #[test]
    fn the_label_is_the_deepest_node_under_the_pointer_and_its_window() {
        let tree = UiTree {
            root: node(
                "desktop frame",
                "",
                (0, 0, 800, 600),
                vec![UiNode {
                    role: "application".into(),
                    name: "zenity".into(),
                    children: vec![node(
                        "dialog",
                        "Save",
                        (100, 100, 400, 300),
                        vec![
                            node("push button", "Cancel", (120, 350, 80, 30), vec![]),
                            node(
                                "push button",
                                "OK",
                                (300, 350, 80, 30),
                                vec![node("label", "OK", (310, 355, 60, 20), vec![])],
                            ),
                            node("text", "", (120, 150, 200, 30), vec![]),
                        ],
                    )],
                    ..UiNode::default()
                }],
            ),
            ..UiTree::default()
        };
        assert_eq!(
            hit(&tree, Point { x: 320, y: 360 })
                .map(|h| h.to_string())
                .as_deref(),
            Some(r#"label "OK" in dialog "Save""#)
        );
        assert_eq!(
            hit(&tree, Point { x: 130, y: 160 })
                .map(|h| h.to_string())
                .as_deref(),
            Some(r#"text in dialog "Save""#)
        );
        assert_eq!(
            hit(&tree, Point { x: 110, y: 110 })
                .map(|h| h.to_string())
                .as_deref(),
            Some(r#"dialog "Save""#)
        );
        assert_eq!(
            hit(&tree, Point { x: 700, y: 50 })
                .map(|h| h.to_string())
                .as_deref(),
            Some("desktop frame")
        );
    }

    #[test]
    fn a_recording_without_a_task_ends_when_the_person_stops() {
        let t = open_task("file a report");
        assert_eq!(t.checkpoints.len(), 1);
        assert!(
            run::prepare(
                std::slice::from_ref(&t),
                &crate::eval::functions::Library::standard()
            )
            .is_ok(),
            "the open task is valid"
        );
    }

    #[test]
    fn the_oracle_candidate_finds_named_nodes_by_selector_and_leaves_out_what_it_cannot_do() {
        let at = |action: AgentAction| merge::Merged {
            action,
            guest_us: 0,
            at: None,
        };
        let env = || "desktop".to_owned();
        let point = Target::Point { x: 5, y: 6 };
        let merged = vec![
            at(AgentAction::Click {
                env: env(),
                target: point,
            }),
            at(AgentAction::DoubleClick {
                env: env(),
                target: point,
            }),
            at(AgentAction::Hotkey {
                env: env(),
                keys: vec!["ctrl".into(), "s".into()],
            }),
            at(AgentAction::Scroll {
                env: env(),
                dx: 0,
                dy: 2,
                target: Some(point),
            }),
            at(AgentAction::Submit {
                answer: ENDED.into(),
            }),
        ];
        let ok = Hit {
            role: "push button".into(),
            name: "OK".into(),
            window: Some(("dialog".into(), "Save".into())),
        };
        let unnamed = Hit {
            name: String::new(),
            ..ok.clone()
        };
        let hits = vec![Some(ok), Some(unnamed), None, None, None];
        let (steps, left_out) = oracle_candidate(&merged, &hits);
        let json = serde_json::to_value(&steps).unwrap();
        assert_eq!(
            json,
            serde_json::json!([
                {"do": "click", "target": {"role": "push button", "name": "OK", "inside": {"role": "dialog", "name": "Save"}}},
                {"do": "click", "target": {"x": 5, "y": 6}, "count": 2},
                {"do": "key", "key": "ctrl+s"}
            ])
        );
        assert_eq!(left_out.len(), 1);
        assert!(left_out[0].contains("scroll"), "{left_out:?}");
    }
}
