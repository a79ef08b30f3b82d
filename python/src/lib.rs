//! `pincer_bench._pincer`: the Python bindings of pincer's host library. Python drives
//! task runs through [`pincer::run::episode::Session`] (the Gymnasium and OSWorld-style
//! environments are thin Python classes over [`Session`]) and puts a Python callable in
//! pincer's own runner as the agent ([`run`]). Nothing here speaks to a guest: every call
//! goes through the host library, and only the observe and action classes are reachable
//! (and the tool class, a task's declared API tools, with `tools=True`).
//!
//! Values cross the boundary as JSON (Python's `json` module on that side), images as
//! `bytes`.

use futures::future::BoxFuture;
use pincer::agent::actions::{self, AgentAction, InvalidAction};
use pincer::agent::observe::ObservationConfig;
use pincer::agent::{Agent, AgentError, Decision, Observation, TaskBrief};
use pincer::env::registry::Registry;
use pincer::run::episode::{self, Now, SessionConfig};
use pincer::run::launch::{Launch, RunOptions, Signals, Source, VmPlan};
use pincer::run::{self as runner};
use pincer::task::Task;
use pincer_shared::Platform;
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

create_exception!(
    pincer_bench,
    PincerError,
    PyException,
    "pincer could not do what was asked (the message says what and how to fix it)."
);
create_exception!(
    pincer_bench,
    InvalidActionError,
    PyValueError,
    "An action that is not one of pincer's (see action_schema())."
);

fn err(e: impl std::fmt::Display) -> PyErr {
    PincerError::new_err(e.to_string())
}

/// The runtime every call runs on: the host library is async. One per process: a child
/// forked after it was made (Gymnasium's `AsyncVectorEnv`, multiprocessing) inherits it
/// without its worker threads, so it gets a fresh one (the parent's is left alone).
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RT: Mutex<Option<(u32, &'static tokio::runtime::Runtime)>> = Mutex::new(None);
    let mut guard = RT.lock().unwrap_or_else(|e| e.into_inner());
    let pid = std::process::id();
    if let Some((owner, rt)) = *guard
        && owner == pid
    {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("pincer")
        .build()
        .map_err(err)?;
    let rt: &'static tokio::runtime::Runtime = Box::leak(Box::new(rt));
    *guard = Some((pid, rt));
    Ok(rt)
}

/// Waits for `fut` without holding the GIL, so Python threads (and agents called back from
/// the runner) go on. The future runs to its end (it holds the session, or a run that
/// records what it did, or desktops being stopped): Ctrl-C sets `cancel`, and the
/// interrupt is handed back with the result, to be raised once the caller has put things
/// back.
fn wait_all<T: Send>(
    py: Python<'_>,
    cancel: &AtomicBool,
    fut: impl Future<Output = T> + Send,
) -> PyResult<(T, Option<PyErr>)> {
    let rt = runtime()?;
    let mut fut = std::pin::pin!(fut);
    let mut interrupt = None;
    loop {
        let tick = py.detach(|| {
            rt.block_on(async { tokio::time::timeout(Duration::from_millis(100), &mut fut).await })
        });
        if let Ok(v) = tick {
            return Ok((v, interrupt));
        }
        if interrupt.is_none()
            && let Err(e) = py.check_signals()
        {
            cancel.store(true, Ordering::SeqCst);
            interrupt = Some(e);
        }
    }
}

fn json_to_py(py: Python<'_>, v: &serde_json::Value) -> PyResult<Py<PyAny>> {
    let text = serde_json::to_string(v).map_err(err)?;
    Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
}

/// Numbers from numpy and the like (`.item()` gives the Python number) for `json.dumps`.
#[pyfunction]
fn plain<'py>(o: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if o.hasattr("item")? {
        return o.call_method0("item");
    }
    Err(PyTypeError::new_err(format!(
        "{} is not a JSON value (use dicts, lists, strings, numbers, booleans, None)",
        o.get_type().name()?
    )))
}

/// A Python value (an action, a list of them) as JSON: NaN and infinities refused, numpy
/// numbers taken as numbers; what cannot be JSON is an invalid action.
fn py_to_json(v: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    let py = v.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item("allow_nan", false)?;
    kwargs.set_item("default", wrap_pyfunction!(plain, py)?)?;
    let text: String = py
        .import("json")?
        .call_method("dumps", (v,), Some(&kwargs))
        .map_err(|e| InvalidActionError::new_err(format!("not a JSON value: {e}")))?
        .extract()?;
    serde_json::from_str(&text).map_err(err)
}

fn observation_config(observe: &str, max_size: Option<(u32, u32)>) -> PyResult<ObservationConfig> {
    ObservationConfig::parse(observe, max_size)
        .map_err(|e| PyValueError::new_err(format!("observe: {e}")))
}

/// Where environments come from: named ones (`sets`, one per `ROLE=ENV,...`), VMs of an
/// image (`vm`, with the agent the package carries), or local desktops; `count` sets of
/// those started for the run.
fn source(
    sets: Vec<String>,
    vm: Option<String>,
    (memory_mib, cpus): (Option<u32>, u32),
    count: usize,
    (size, session): ((u32, u32), &str),
) -> PyResult<Source> {
    let session: pincer::run::launch::DesktopSession =
        session.parse().map_err(PyValueError::new_err)?;
    Ok(match (sets.is_empty(), vm) {
        (false, Some(_)) => {
            return Err(PyValueError::new_err(
                "give sets (registered environments) or vm (an image), not both",
            ));
        }
        (false, None) => Source::Named(sets),
        (true, Some(image)) => Source::Vm {
            plan: VmPlan::new(image, memory_mib, cpus).map_err(err)?,
            count,
        },
        (true, None) => Source::Local {
            count,
            size,
            session,
        },
    })
}

/// Tasks from a file, directory or bundled suite, narrowed to `ids` if given.
fn load_tasks(spec: &str, ids: Option<Vec<String>>) -> PyResult<Vec<Task>> {
    pincer::task::select(spec, &ids.unwrap_or_default(), &[]).map_err(err)
}

/// An observation as a dict: [`episode::observation_json`] with each view's images as
/// `bytes` (`screenshot`, `marked`, PNG), its last moments as `video` (a list of
/// `{"ago_ms", "png"}`, empty unless asked for), the task's id and instruction, and the
/// API tools offered (`tools`: `{"name": "api_NAME", "description", "parameters"}`, empty
/// unless the run offers tools and the task declares some).
fn observation_dict<'py>(
    py: Python<'py>,
    obs: &Observation,
    (id, instruction): (&str, &str),
    tools: &[actions::ToolSpec],
) -> PyResult<Bound<'py, PyAny>> {
    let mut v = episode::observation_json(obs);
    v["task"] = id.into();
    v["instruction"] = instruction.into();
    v["tools"] = tools_json(tools);
    let dict = json_to_py(py, &v)?.into_bound(py);
    let views = dict.get_item("views")?;
    for view in &obs.views {
        let d = views.get_item(&view.role)?;
        for (key, bytes) in [("screenshot", &view.screenshot), ("marked", &view.marked)] {
            match bytes {
                Some(b) => d.set_item(key, PyBytes::new(py, b))?,
                None => d.set_item(key, py.None())?,
            }
        }
        // The screen's last moments (`observe="...,video=2s@5fps"`), oldest first.
        let stills = PyList::empty(py);
        for still in &view.video {
            let s = PyDict::new(py);
            s.set_item("ago_ms", still.ago_ms)?;
            s.set_item("png", PyBytes::new(py, &still.png))?;
            stills.append(s)?;
        }
        d.set_item("video", stills)?;
    }
    Ok(dict)
}

/// API tools as JSON: name, description and the parameters' JSON Schema each.
fn tools_json(tools: &[actions::ToolSpec]) -> serde_json::Value {
    tools
        .iter()
        .map(|t| {
            serde_json::json!({
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            })
        })
        .collect()
}

fn record_dict(py: Python<'_>, rec: &pincer::rundir::record::TaskRecord) -> PyResult<Py<PyAny>> {
    json_to_py(py, &serde_json::to_value(rec).map_err(err)?)
}

/// One action, or a list of actions, from Python into a decision.
fn decision(
    v: &serde_json::Value,
    roles: &BTreeMap<String, Platform>,
) -> Result<Decision, InvalidAction> {
    let one = |a: &serde_json::Value| actions::from_json(a, roles);
    let list: Vec<AgentAction> = match v {
        serde_json::Value::Array(items) if items.is_empty() => {
            return Err(InvalidAction("an empty list holds no action".into()));
        }
        serde_json::Value::Array(items) => items.iter().map(one).collect::<Result<_, _>>()?,
        other => vec![one(other)?],
    };
    Ok(Decision {
        actions: list,
        ..Decision::default()
    })
}

/// An environment set and a run directory over which Python starts episodes, one at a
/// time, and decides each action (what `PincerEnv` and `DesktopEnv` use).
#[pyclass(module = "pincer_bench._pincer", weakref, subclass)]
struct Session {
    inner: Mutex<Option<episode::Session>>,
    /// The running task, for its id, instruction and roles.
    task: Mutex<Option<Task>>,
    out: PathBuf,
    /// What the session shows, and whether it offers API tools.
    observation: ObservationConfig,
    closed: AtomicBool,
}

impl Session {
    fn take(&self) -> PyResult<episode::Session> {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .ok_or_else(|| self.gone())
    }

    /// Why the session is not there: closed, or in use by another thread's call.
    fn gone(&self) -> PyErr {
        if self.closed.load(Ordering::SeqCst) {
            err("this session is closed")
        } else {
            err("this session is busy with another thread's call: use one session per thread")
        }
    }

    fn put(&self, s: episode::Session) {
        *self.inner.lock().unwrap_or_else(|e| e.into_inner()) = Some(s);
    }

    /// Runs `f` on the session without the GIL; the session is put back whatever happens
    /// (a Ctrl-C meanwhile interrupts the task run, and is raised after).
    fn with<T: Send, Fut>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(episode::Session) -> Fut,
    ) -> PyResult<T>
    where
        Fut: Future<Output = (episode::Session, T)> + Send,
    {
        let s = self.take()?;
        // Ctrl-C interrupts the running task: it finishes its action and ends aborted.
        let interrupter = s.interrupter();
        let ((s, out), interrupt) = wait_all(py, &interrupter, f(s))?;
        self.put(s);
        interrupt.map_or(Ok(out), Err)
    }

    /// An observation and, beside it, what the evaluator knows of each checkpoint (kept
    /// out of the observation: agents are not shown the grader).
    fn observed(
        &self,
        py: Python<'_>,
        d: &Bound<'_, PyDict>,
        obs: Option<&Observation>,
        task: &Task,
    ) -> PyResult<()> {
        match obs {
            Some(obs) => {
                d.set_item(
                    "observation",
                    observation_dict(
                        py,
                        obs,
                        (&task.id, &task.instruction),
                        &episode::api_tools(&self.observation, task),
                    )?,
                )?;
                d.set_item(
                    "checkpoints",
                    json_to_py(py, &episode::checkpoints_json(obs))?,
                )
            }
            None => {
                d.set_item("observation", py.None())?;
                d.set_item("checkpoints", py.None())
            }
        }
    }

    fn now_dict(&self, py: Python<'_>, now: Now) -> PyResult<Py<PyAny>> {
        let task = self
            .task
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| err("no task is running"))?;
        let d = PyDict::new(py);
        match now {
            Now::Act(obs) => {
                d.set_item("ended", false)?;
                self.observed(py, &d, Some(&obs), &task)?;
                d.set_item("record", py.None())?;
            }
            Now::Ended(rec, last) => {
                d.set_item("ended", true)?;
                self.observed(py, &d, last.as_deref(), &task)?;
                d.set_item("record", record_dict(py, &rec)?)?;
            }
        }
        Ok(d.into_any().unbind())
    }
}

#[pymethods]
impl Session {
    /// Opens a session: `tasks` is a task file, directory or bundled suite (`demo`);
    /// `task_ids` narrows it; `sets` names registered environments as `ROLE=ENV,...`, `vm`
    /// an image whose VMs are started (each reset before every task; `vm_memory` MiB, default the image's,
    /// `vm_cpus`), and without either local desktops are started, at `size`, in `session`
    /// (`"x11"`, or `"wayland"`: a headless GNOME Shell); `observe` is a comma-separated
    /// choice of marks, screenshot, tree and video=2s@5fps; `tools` offers the API tools
    /// tasks declare (local desktops then serve them; without it a tool action is refused as
    /// invalid); `out` is the run directory (results, trajectories, report); `envs` an envs
    /// file other than the default; `assets` the asset cache (OSWorld's file cache for
    /// imported OSWorld tasks) and `allow_network` lets tasks that need the live web start.
    /// Tasks that cannot run here are left out, said on stderr; starting one says why.
    #[new]
    #[pyo3(signature = (tasks, task_ids=None, sets=None, observe="marks", max_size=None, size=(1920, 1080), session="x11", out=None, agent="python", envs=None, vm=None, vm_memory=None, vm_cpus=2, tools=false, assets=None, allow_network=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        tasks: &str,
        task_ids: Option<Vec<String>>,
        sets: Option<String>,
        observe: &str,
        max_size: Option<(u32, u32)>,
        size: (u32, u32),
        session: &str,
        out: Option<PathBuf>,
        agent: &str,
        envs: Option<PathBuf>,
        vm: Option<String>,
        vm_memory: Option<u32>,
        vm_cpus: u32,
        tools: bool,
        assets: Option<PathBuf>,
        allow_network: bool,
    ) -> PyResult<Self> {
        let observation = ObservationConfig {
            tools,
            ..observation_config(observe, max_size)?
        };
        let cfg = SessionConfig {
            tasks: load_tasks(tasks, task_ids)?,
            envs: source(
                sets.into_iter().collect(),
                vm,
                (vm_memory, vm_cpus),
                1,
                (size, session),
            )?,
            observation,
            out: out.unwrap_or_else(|| pincer::rundir::default_dir(tasks, agent)),
            agent: agent.to_owned(),
            assets: assets.unwrap_or_else(pincer::peers::osworld::cache::default_dir),
            allow_network,
        };
        let out = cfg.out.clone();
        let reg = Registry::locate(envs.as_deref());
        // Desktops start here: a Ctrl-C meanwhile waits for them, then stops them.
        let (opened, interrupt) = wait_all(
            py,
            &AtomicBool::new(false),
            episode::Session::open(reg, cfg),
        )?;
        if let Some(e) = interrupt {
            if let Ok(mut s) = opened {
                let _ = wait_all(py, &AtomicBool::new(false), async move { s.close().await });
            }
            return Err(e);
        }
        Ok(Self {
            inner: Mutex::new(Some(opened.map_err(err)?)),
            task: Mutex::new(None),
            out,
            observation,
            closed: AtomicBool::new(false),
        })
    }

    /// The task ids episodes can start on.
    fn task_ids(&self) -> PyResult<Vec<String>> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let s = guard.as_ref().ok_or_else(|| self.gone())?;
        Ok(s.tasks().map(|t| t.id.clone()).collect())
    }

    /// The tasks left out because they cannot run here: `(id, why)` each.
    fn left_out(&self) -> PyResult<Vec<(String, String)>> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let s = guard.as_ref().ok_or_else(|| self.gone())?;
        Ok(s.left_out().to_vec())
    }

    /// A task's id, instruction, roles (role → platform), limits, tags and the API tools
    /// its episodes offer (`tools`, empty unless the session offers tools).
    fn task(&self, py: Python<'_>, id: &str) -> PyResult<Py<PyAny>> {
        let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let s = guard.as_ref().ok_or_else(|| self.gone())?;
        let t = s
            .tasks()
            .find(|t| t.id == id)
            .ok_or_else(|| err(format!("no task '{id}' in this session")))?;
        let roles: BTreeMap<&String, Platform> =
            t.envs.iter().map(|(r, n)| (r, n.platform)).collect();
        json_to_py(
            py,
            &serde_json::json!({
                "id": t.id,
                "instruction": t.instruction,
                "roles": roles,
                "max_steps": t.limits.max_steps,
                "tags": t.tags,
                "tools": tools_json(&episode::api_tools(&self.observation, t)),
            }),
        )
    }

    /// The run directory.
    #[getter]
    fn out(&self) -> String {
        self.out.display().to_string()
    }

    /// Starts an episode of task `task_id` (one running is aborted first): its setup and
    /// initial check; the first observation.
    #[pyo3(signature = (task_id, seed=0))]
    fn start(&self, py: Python<'_>, task_id: &str, seed: u64) -> PyResult<Py<PyAny>> {
        let id = task_id.to_owned();
        let (now, task) = self.with(py, async move |mut s: episode::Session| {
            let now = s.start(&id, seed).await;
            let task = s.running().cloned();
            (s, (now, task))
        })?;
        let now = now.map_err(err)?;
        let task = task.or_else(|| {
            // Ended before its first decision (a broken setup): still that task.
            self.inner
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
                .and_then(|s| s.tasks().find(|t| t.id == task_id).cloned())
        });
        *self.task.lock().unwrap_or_else(|e| e.into_inner()) = task;
        self.now_dict(py, now)
    }

    /// Carries out an action (a dict as `action_schema()` describes, or a list of them),
    /// then evaluates; the next observation, or the end of the episode with its record.
    fn step(&self, py: Python<'_>, action: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        let roles = {
            let guard = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            let s = guard.as_ref().ok_or_else(|| self.gone())?;
            if s.running().is_none() {
                return Err(err("no episode is running: call start (reset) first"));
            }
            s.roles()
        };
        let d = decision(&py_to_json(action)?, &roles)
            .map_err(|e| InvalidActionError::new_err(e.to_string()))?;
        let now = self
            .with(py, async move |mut s: episode::Session| {
                let now = s.step(d).await;
                (s, now)
            })?
            .map_err(err)?;
        self.now_dict(py, now)
    }

    /// Ends the running episode as aborted (recorded); its record, or None.
    fn abort(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let rec = self
            .with(py, async move |mut s: episode::Session| {
                let rec = s.abort().await;
                (s, rec)
            })?
            .map_err(err)?;
        match rec {
            Some(r) => record_dict(py, &r),
            None => Ok(py.None()),
        }
    }

    /// Writes the HTML and Markdown report of the run directory; the HTML's path.
    fn report(&self, py: Python<'_>) -> PyResult<String> {
        let out = self.out.clone();
        let paths = py.detach(|| pincer::report::write(&out)).map_err(err)?;
        Ok(paths.html.display().to_string())
    }

    /// Aborts what runs and stops the desktops the session started. Safe to call twice.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let Some(mut s) = self.inner.lock().unwrap_or_else(|e| e.into_inner()).take() else {
            return if self.closed.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err(self.gone())
            };
        };
        self.closed.store(true, Ordering::SeqCst);
        // Runs to its end whatever Ctrl-C says: the desktops must go.
        let (closed, interrupt) =
            wait_all(py, &AtomicBool::new(false), async move { s.close().await })?;
        interrupt.map_or(Ok(()), Err)?;
        closed.map_err(err)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // A session dropped without close() still stops its desktops.
        if let Some(mut s) = self
            .inner
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            && let Ok(rt) = runtime()
        {
            let _ = rt.block_on(s.close());
        }
    }
}

/// A Python callable as a pincer agent: called with each observation (a dict), it returns
/// an action dict or a list of them.
struct PyAgent {
    callable: Arc<Py<PyAny>>,
    name: String,
    /// The task's id and instruction, from `begin`.
    task: Option<(String, String)>,
    roles: BTreeMap<String, Platform>,
    /// The API tools the run offers on this task, from `begin`.
    tools: Vec<actions::ToolSpec>,
}

impl PyAgent {
    fn decide(&self, obs: &Observation) -> Result<Decision, AgentError> {
        let (id, instruction) = self.task.as_ref().ok_or(AgentError::NotStarted)?;
        let answer = Python::attach(|py| -> PyResult<serde_json::Value> {
            let dict = observation_dict(py, obs, (id, instruction), &self.tools)?;
            let out = self.callable.bind(py).call1((dict,))?;
            py_to_json(&out)
        });
        match answer {
            Ok(v) => Ok(decision(&v, &self.roles).unwrap_or_else(|e| Decision {
                invalid: Some(e.0),
                ..Decision::default()
            })),
            Err(e) => Err(AgentError::Outside(format!("the Python agent raised {e}"))),
        }
    }
}

impl Agent for PyAgent {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn begin(&mut self, brief: &TaskBrief) -> Result<(), AgentError> {
        self.roles = brief.roles.clone();
        self.task = Some((brief.id.clone(), brief.instruction.clone()));
        self.tools = brief
            .tools
            .iter()
            .filter(|t| t.name.starts_with(actions::API_PREFIX))
            .cloned()
            .collect();
        Ok(())
    }

    fn act<'a>(&'a mut self, obs: &'a Observation) -> BoxFuture<'a, Result<Decision, AgentError>> {
        // The callable runs on this worker thread, holding the GIL while it decides.
        Box::pin(async move { tokio::task::block_in_place(|| self.decide(obs)) })
    }
}

/// Runs `tasks` with `agent` (a callable: observation dict → action dict or list) in
/// pincer's runner: environment sets in parallel, repeats and seeds, resume, results,
/// trajectories and the report. Environments: `sets` (registered, one worker per
/// `ROLE=ENV,...`), else `parallel` sets of VMs of image `vm` or of local desktops (at
/// `size`, in `session`: `"x11"`, or `"wayland"` for a headless GNOME Shell).
/// `feedback` ("none", "step", "end") and `attempts` are `pincer run`'s `--feedback` and
/// `--attempts`: what the agent is told of the checkpoints (in the observation's
/// "feedback"), and how often a task run it failed is set up again and retried. `tools`
/// offers the API tools tasks declare (`pincer run --tools`: local desktops serve them, the
/// agent may return `{"action": "api_NAME", ...}`); without it a tool action is invalid.
/// `video` records each environment's screen into the trajectories at up to that many
/// frames a second (`pincer run --video`; needs ffmpeg). `end` is `pincer run --end`:
/// "agent" (only the agent ends a task run, then the final state decides) or "sinks"
/// (default: each task's own rule). `assets` is `--assets` (the asset cache, OSWorld's
/// file cache for imported OSWorld tasks), `compat` is `--compat` ("crab": CRAB's tasks
/// scored as CRAB's own code scores them) and `allow_network` `--allow-network` (tasks that
/// need the live web run too). Tasks that cannot run here are left out, each said on
/// stderr and listed in the run's `skipped.json`. Returns {"out", "records", "report"}.
#[pyfunction]
#[pyo3(signature = (tasks, agent, task_ids=None, sets=None, parallel=1, repeat=1, seed=0, observe="marks", max_size=None, size=(1920, 1080), session="x11", out=None, resume=false, report=true, name="callable", envs=None, vm=None, vm_memory=None, vm_cpus=2, feedback="none", attempts=1, tools=false, video=None, end=None, assets=None, allow_network=false, compat=None))]
#[allow(clippy::too_many_arguments)]
fn run(
    py: Python<'_>,
    tasks: &str,
    agent: Py<PyAny>,
    task_ids: Option<Vec<String>>,
    sets: Option<Vec<String>>,
    parallel: usize,
    repeat: u32,
    seed: u64,
    observe: &str,
    max_size: Option<(u32, u32)>,
    size: (u32, u32),
    session: &str,
    out: Option<PathBuf>,
    resume: bool,
    report: bool,
    name: &str,
    envs: Option<PathBuf>,
    vm: Option<String>,
    vm_memory: Option<u32>,
    vm_cpus: u32,
    feedback: &str,
    attempts: u32,
    tools: bool,
    video: Option<u32>,
    end: Option<&str>,
    assets: Option<PathBuf>,
    allow_network: bool,
    compat: Option<&str>,
) -> PyResult<Py<PyAny>> {
    if !agent.bind(py).is_callable() {
        return Err(PyValueError::new_err(
            "agent must be a callable: observation dict -> action dict (or a list of them)",
        ));
    }
    let spec = tasks;
    let tasks = load_tasks(spec, task_ids)?;
    let observation = ObservationConfig {
        tools,
        ..observation_config(observe, max_size)?
    };
    let correction = feedback
        .parse()
        .and_then(|f| pincer::agent::correction::Correction::new(f, attempts))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let out = out.unwrap_or_else(|| pincer::rundir::default_dir(spec, name));
    let agent_name = format!("python:{name}");
    let reg = Registry::locate(envs.as_deref());
    let callable = Arc::new(agent);
    let factory_name = agent_name.clone();
    let factory: runner::AgentFactory = Arc::new(move |_seed| {
        Ok(Box::new(PyAgent {
            callable: callable.clone(),
            name: factory_name.clone(),
            task: None,
            roles: BTreeMap::new(),
            tools: Vec::new(),
        }) as Box<dyn Agent>)
    });
    let cancel = Arc::new(AtomicBool::new(false));
    let mut options = RunOptions::new(out.clone(), observation);
    if let Some(dir) = assets {
        options.assets = dir;
    }
    let launch = Launch {
        tasks,
        agent: factory,
        agent_name,
        source: source(
            sets.unwrap_or_default(),
            vm,
            (vm_memory, vm_cpus),
            parallel,
            (size, session),
        )?,
        options: RunOptions {
            repeat,
            seed,
            resume,
            correction,
            video,
            end: end
                .map(str::parse)
                .transpose()
                .map_err(PyValueError::new_err)?,
            allow_network,
            compat: compat
                .map(str::parse)
                .transpose()
                .map_err(PyValueError::new_err)?,
            ..options
        },
        signals: Signals::Caller(cancel.clone()),
    };
    // Ctrl-C interrupts the run (what runs finishes and is recorded as aborted); the
    // launch stops its desktops whatever happened, Ctrl-C included.
    let (records, interrupt) = wait_all(py, &cancel, async {
        launch
            .run(&reg, &|m| eprintln!("{m}"))
            .await
            .map(|done| done.records)
    })?;
    let records = records.map_err(err)?;
    let html = if report {
        let paths = py.detach(|| pincer::report::write(&out)).map_err(err)?;
        Some(paths.html.display().to_string())
    } else {
        None
    };
    let d = PyDict::new(py);
    d.set_item("out", out.display().to_string())?;
    d.set_item(
        "records",
        json_to_py(py, &serde_json::to_value(&records).map_err(err)?)?,
    )?;
    d.set_item("report", html)?;
    // Ctrl-C: what ran is recorded (as aborted) and reported; then the interrupt.
    interrupt.map_or(Ok(d.into_any().unbind()), Err)
}

/// Roles and their platforms from Python ({role: "linux" | "android"}); one Linux
/// desktop when not given.
fn roles_of(roles: Option<BTreeMap<String, String>>) -> PyResult<BTreeMap<String, Platform>> {
    let Some(roles) = roles else {
        return Ok([("desktop".to_owned(), Platform::Linux)].into());
    };
    roles
        .into_iter()
        .map(|(role, p)| {
            p.parse::<Platform>()
                .map(|p| (role.clone(), p))
                .map_err(|e| PyValueError::new_err(format!("role '{role}': {e}")))
        })
        .collect()
}

/// The JSON Schema of the actions for environments of these roles ({role: "linux" |
/// "android"}; default one Linux desktop), as `step` and agents' answers take them.
#[pyfunction]
#[pyo3(signature = (roles=None))]
fn action_schema(py: Python<'_>, roles: Option<BTreeMap<String, String>>) -> PyResult<Py<PyAny>> {
    json_to_py(py, &actions::json_schema(&roles_of(roles)?))
}

/// Checks an action dict (or a list) against the actions of these roles without running
/// anything; raises InvalidActionError saying what is wrong.
#[pyfunction]
#[pyo3(signature = (action, roles=None))]
fn check_action(
    action: &Bound<'_, PyAny>,
    roles: Option<BTreeMap<String, String>>,
) -> PyResult<()> {
    decision(&py_to_json(action)?, &roles_of(roles)?)
        .map(|_| ())
        .map_err(|e| InvalidActionError::new_err(e.to_string()))
}

#[pymodule]
fn _pincer(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("PincerError", py.get_type::<PincerError>())?;
    m.add("InvalidActionError", py.get_type::<InvalidActionError>())?;
    m.add_class::<Session>()?;
    m.add_function(wrap_pyfunction!(run, m)?)?;
    m.add_function(wrap_pyfunction!(action_schema, m)?)?;
    m.add_function(wrap_pyfunction!(check_action, m)?)?;
    Ok(())
}
