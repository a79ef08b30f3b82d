//! `pincer mcp`: pincer's environments and tasks as a Model Context Protocol server over
//! stdio, so any MCP client becomes an agent pincer can score.
//!
//! Tools: `screenshot` (fitted to what clients take: at most 1 MiB, the long side at most
//! 1568 px), `observe` (the Set-of-Marks image and its elements), `ui_tree`, one tool per
//! agent action (generated from the same schema LLM agents get; listed only with
//! `--allow-actions`), the task tools `list_tasks`, `start_task`, `task_status`,
//! `finish_task`, and with `--tools` the generic `api` (a call of one of the running task's
//! declared API tools by name: the tool list is fixed when the server starts, while each
//! task declares its own tools). With `--observe ...,video=2s@5fps` a running task's
//! `screenshot` and `observe` also carry the screen's last moments, one captioned image
//! per frame. A started task is an ordinary task run of a [`Session`] (setup, initial
//! check, evaluation after every action, final check, trajectory, results, report); actions
//! outside a task go to the desktop through the action class alone. Never setup, exec,
//! file or shell tools. Every call is appended to `<run dir>/mcp.jsonl`.

use crate::agent::actions::{self, AgentAction, Marks};
use crate::agent::observe::View;
use crate::agent::{Observation, som};
use crate::run::episode::{self, Now, Session};
use crate::rundir::record::{JsonlWriter, TaskRecord};
use base64::Engine as _;
use pincer_shared::Platform;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Mutex;

/// The largest image a tool returns, in bytes: its base64 text, what clients take, is then
/// at most 1 MiB.
pub const MAX_IMAGE_BYTES: usize = (1 << 20) / 4 * 3;
/// The longest side of a returned image, in pixels (what vision models are given at most).
pub const MAX_IMAGE_SIDE: u32 = 1568;

/// The agent actions that end a task: `finish_task` says them.
const ENDING: &[&str] = &["complete", "submit", "infeasible"];

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum McpError {
    /// The MCP connection (stdio) failed.
    #[error("the MCP connection: {0}")]
    Transport(String),
    /// The call log could not be opened.
    #[error("opening {path}: {source}")]
    Log {
        /// The log file.
        path: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// What changes as the client works.
struct State {
    session: Session,
    /// The latest observation of the running task (the runner's, recorded in its trajectory).
    last: Option<Observation>,
    /// The record of the task run that ended last.
    ended: Option<TaskRecord>,
    /// Element boxes of the latest views taken outside a task, by role.
    free_marks: BTreeMap<String, Marks>,
    /// Screen pixels per image pixel of each role's latest view: clients give coordinates
    /// on the images they were shown.
    scale: BTreeMap<String, (f64, f64)>,
    log: JsonlWriter,
}

/// The MCP server.
pub struct Server {
    state: Arc<Mutex<State>>,
    allow_actions: bool,
    tools: Vec<Tool>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("allow_actions", &self.allow_actions)
            .finish_non_exhaustive()
    }
}

fn object(v: Value) -> Arc<JsonObject> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::new(JsonObject::new()),
    }
}

fn env_schema(roles: &BTreeMap<String, Platform>) -> Value {
    json!({
        "type": "object",
        "properties": {
            "env": {
                "type": "string",
                "enum": roles.keys().collect::<Vec<_>>(),
                "description": "which environment (optional with one)"
            }
        }
    })
}

/// The tool list: the fixed tools, the action tools when actions are allowed, and `api`
/// when API tools are offered.
fn tools(roles: &BTreeMap<String, Platform>, allow_actions: bool, api: bool) -> Vec<Tool> {
    let env = env_schema(roles);
    let mut list = vec![
        Tool::new(
            "screenshot",
            format!(
                "The screen of an environment, as an image (long side at most {MAX_IMAGE_SIDE} px). Coordinates in actions are pixels of this image."
            ),
            object(env.clone()),
        ),
        Tool::new(
            "observe",
            "The screen with numbered marks on its interactive elements, and the list of them: actions can name an element by its number ({\"element\": 4}).",
            object(env.clone()),
        ),
        Tool::new(
            "ui_tree",
            "The accessibility tree of an environment as indented text (role, name, bounds).",
            object(env),
        ),
        Tool::new(
            "list_tasks",
            "The tasks this server can run, with their instructions.",
            object(json!({"type": "object", "properties": {}})),
        ),
        Tool::new(
            "start_task",
            "Start a task: its setup runs, then your actions are evaluated after each one against the task's checkpoints. A running task is aborted first.",
            object(json!({
                "type": "object",
                "properties": {
                    "task": {"type": "string", "description": "the task id (list_tasks)"},
                    "seed": {"type": "integer", "description": "seed (default 0)"}
                },
                "required": ["task"]
            })),
        ),
        Tool::new(
            "task_status",
            "The running task: its instruction, steps taken and each checkpoint's state and feedback; or how the last task ended.",
            object(json!({"type": "object", "properties": {}})),
        ),
        Tool::new(
            "finish_task",
            "End the running task: outcome \"complete\" (you did it), \"answer\" (give the answer it asks for) or \"infeasible\" (it cannot be done). The task is scored on the state you leave.",
            object(json!({
                "type": "object",
                "properties": {
                    "outcome": {"type": "string", "enum": ["complete", "answer", "infeasible"]},
                    "answer": {"type": "string", "description": "with outcome answer"},
                    "reason": {"type": "string", "description": "with outcome infeasible"}
                },
                "required": ["outcome"]
            })),
        ),
    ];
    if allow_actions {
        list.extend(
            actions::tools(roles)
                .into_iter()
                .filter(|t| !ENDING.contains(&t.name.as_str()))
                .map(|t| Tool::new(t.name, t.description, object(t.parameters))),
        );
    }
    if api {
        list.push(Tool::new(
            API,
            "Call one of the running task's API tools (start_task and task_status list them with their parameters) instead of working the screen: a typed call run sandboxed on the task's machine. Its status and output come back; it counts as an action.",
            object(json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "the API tool's name, e.g. add_event"},
                    "arguments": {"type": "object", "description": "its parameters by name"}
                },
                "required": ["name"]
            })),
        ));
    }
    list
}

/// The tool that calls a running task's API tools.
const API: &str = "api";

/// The API tools a task offers, one line each with its parameters' JSON Schema, for
/// `start_task` and `task_status`; empty when it offers none.
fn api_text(tools: &[actions::ToolSpec]) -> String {
    if tools.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nAPI tools (call them with the `api` tool):");
    for t in tools {
        let name = t.name.strip_prefix(actions::API_PREFIX).unwrap_or(&t.name);
        out.push_str(&format!(
            "\n  {name}: {} arguments: {}",
            t.description, t.parameters
        ));
    }
    out
}

/// A view's last moments (`--observe ...,video=`), oldest first: each frame captioned
/// with its age, then the frame, as LLM agents get them.
fn video_blocks(v: &View) -> Result<Vec<ContentBlock>, String> {
    let mut out = Vec::new();
    for still in &v.video {
        out.push(ContentBlock::text(format!(
            "{} as it was {} ms before this observation:",
            v.role, still.ago_ms
        )));
        out.push(image_block(&still.png)?);
    }
    Ok(out)
}

/// An image as clients take it: PNG if it fits in [`MAX_IMAGE_BYTES`], else JPEG at a
/// quality that fits; its bytes and MIME type.
pub fn fit_image(png: &[u8]) -> Result<(Vec<u8>, &'static str), String> {
    if png.len() <= MAX_IMAGE_BYTES {
        return Ok((png.to_vec(), "image/png"));
    }
    let rgb = crate::picture::decode(png).map_err(|e| e.to_string())?;
    let (w, h) = (
        u16::try_from(rgb.width).map_err(|_| "image too wide".to_owned())?,
        u16::try_from(rgb.height).map_err(|_| "image too tall".to_owned())?,
    );
    for quality in [85, 70, 50, 30] {
        let mut out = Vec::new();
        jpeg_encoder::Encoder::new(&mut out, quality)
            .encode(&rgb.pixels, w, h, jpeg_encoder::ColorType::Rgb)
            .map_err(|e| e.to_string())?;
        if out.len() <= MAX_IMAGE_BYTES {
            return Ok((out, "image/jpeg"));
        }
    }
    Err("the screen does not fit in 768 KiB even as a JPEG of quality 30".into())
}

fn image_block(png: &[u8]) -> Result<ContentBlock, String> {
    let (bytes, mime) = fit_image(png)?;
    Ok(ContentBlock::image(
        base64::engine::general_purpose::STANDARD.encode(bytes),
        mime,
    ))
}

fn scale_note(v: &View) -> String {
    format!(
        "{}: image {}x{} px (the screen is {}x{}); coordinates in actions are image pixels",
        v.role, v.image_size.0, v.image_size.1, v.screen.0, v.screen.1,
    )
}

/// Screen pixels per image pixel of a view, across and down.
fn scale_of(v: &View) -> (f64, f64) {
    (
        f64::from(v.screen.0) / f64::from(v.image_size.0.max(1)),
        f64::from(v.screen.1) / f64::from(v.image_size.1.max(1)),
    )
}

fn checkpoints_text(obs: &Observation) -> String {
    let passed = obs.checkpoints.iter().filter(|(_, p)| *p).count();
    let mut out = format!("checkpoints passed {passed}/{}", obs.checkpoints.len());
    for (id, p) in &obs.checkpoints {
        out.push_str(&format!(
            "\n  [{}] {id}{}",
            if *p { "x" } else { " " },
            obs.checkpoint_feedback
                .get(id)
                .map(|f| format!(": {f}"))
                .unwrap_or_default()
        ));
    }
    out
}

fn ended_text(rec: &TaskRecord) -> String {
    format!(
        "task {} ended: {}{}; checkpoints passed {}/{}; {} actions",
        rec.task,
        rec.termination,
        rec.detail
            .as_deref()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default(),
        rec.passed,
        rec.total,
        rec.actions
    )
}

/// The part of a view a tool shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Screenshot,
    Marks,
    Tree,
}

/// What a tool call gave: content, or a message saying what was wrong.
type Answer = Result<Vec<ContentBlock>, String>;

impl Server {
    /// Opens the call log of a run directory (before the session, which starts desktops).
    pub fn open_log(out: &std::path::Path) -> Result<JsonlWriter, McpError> {
        let path = out.join("mcp.jsonl");
        std::fs::create_dir_all(out)
            .and_then(|()| JsonlWriter::append(&path))
            .map_err(|source| McpError::Log {
                path: path.display().to_string(),
                source,
            })
    }

    /// A server over a session, logging every call; actions are listed and carried out
    /// only if allowed.
    pub fn new(session: Session, log: JsonlWriter, allow_actions: bool) -> Self {
        let tools = tools(
            session.platforms(),
            allow_actions,
            session.observation().tools,
        );
        Self {
            state: Arc::new(Mutex::new(State {
                session,
                last: None,
                ended: None,
                free_marks: BTreeMap::new(),
                scale: BTreeMap::new(),
                log,
            })),
            allow_actions,
            tools,
        }
    }

    /// Serves over stdin and stdout until the client goes; then aborts a running task,
    /// stops the desktops the session started and writes the report.
    ///
    /// A client that stops the server with SIGINT or SIGTERM (as clients do after closing
    /// stdin) gets the same ending: the desktops never outlive it.
    pub async fn serve_stdio(self) -> Result<(), McpError> {
        let state = self.state.clone();
        let served = async {
            match self.serve(rmcp::transport::stdio()).await {
                Ok(running) => running
                    .waiting()
                    .await
                    .map(|_| ())
                    .map_err(|e| McpError::Transport(e.to_string())),
                Err(e) => Err(McpError::Transport(e.to_string())),
            }
        };
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| McpError::Transport(format!("watching for SIGTERM: {e}")))?;
        let waited = tokio::select! {
            w = served => w,
            _ = tokio::signal::ctrl_c() => Ok(()),
            _ = term.recv() => Ok(()),
        };
        let mut st = state.lock().await;
        if let Err(e) = st.session.close().await {
            eprintln!("pincer mcp: {e}");
        }
        let out = st.session.out().to_owned();
        if crate::rundir::shard::read_all(&out).is_ok_and(|r| !r.is_empty())
            && let Err(e) = crate::report::write(&out)
        {
            eprintln!("pincer mcp: writing the report: {e}");
        }
        waited
    }

    fn role_of(st: &State, args: &JsonObject) -> Result<String, String> {
        let roles: Vec<&String> = st.session.platforms().keys().collect();
        let env = match args.get("env") {
            None | Some(Value::Null) => None,
            Some(Value::String(r)) => Some(r.as_str()),
            Some(other) => return Err(format!("env is a role name (a string), not {other}")),
        };
        let known = || {
            roles
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match env {
            Some(r) if roles.iter().any(|x| *x == r) => Ok(r.to_owned()),
            Some(r) => Err(format!(
                "there is no environment '{r}': the roles are {}",
                known()
            )),
            None if roles.len() == 1 => Ok(roles[0].clone()),
            None => Err(format!("say which environment: env is one of {}", known())),
        }
    }

    /// The view of a role: the running task's latest (what the runner recorded), else a
    /// fresh one with the part a tool shows.
    async fn view(st: &mut State, role: &str, part: Part) -> Result<View, String> {
        if let Some(obs) = &st.last
            && let Some(v) = obs.view(role)
        {
            st.scale.insert(role.to_owned(), scale_of(v));
            return Ok(v.clone());
        }
        let mut cfg = st.session.observation();
        (cfg.screenshot, cfg.marks, cfg.tree_text) = (
            part == Part::Screenshot,
            part == Part::Marks,
            part == Part::Tree,
        );
        let v = st.session.view(role, &cfg).await?;
        if part == Part::Marks {
            st.free_marks.insert(role.to_owned(), v.marks());
        }
        if part != Part::Tree {
            st.scale.insert(role.to_owned(), scale_of(&v));
        }
        Ok(v)
    }

    /// An action with its image coordinates turned into screen pixels, by the scale of the
    /// last image of its environment the client was shown (a view is taken if none was).
    async fn on_screen(st: &mut State, mut action: AgentAction) -> Result<AgentAction, String> {
        let Some(role) = action.env().map(str::to_owned) else {
            return Ok(action);
        };
        let (fx, fy) = match st.scale.get(&role) {
            Some(s) => *s,
            None => scale_of(&Self::view(st, &role, Part::Screenshot).await?),
        };
        action.map_points(|x, y| {
            (
                (f64::from(x) * fx).round() as i32,
                (f64::from(y) * fy).round() as i32,
            )
        });
        Ok(action)
    }

    async fn call(&self, name: &str, args: &JsonObject) -> Answer {
        let mut st = self.state.lock().await;
        let st = &mut *st;
        match name {
            "screenshot" => {
                let role = Self::role_of(st, args)?;
                let v = Self::view(st, &role, Part::Screenshot).await?;
                let png = v
                    .screenshot
                    .as_deref()
                    .ok_or("this server takes no screenshots")?;
                let mut out = vec![ContentBlock::text(scale_note(&v)), image_block(png)?];
                out.extend(video_blocks(&v)?);
                Ok(out)
            }
            "observe" => {
                let role = Self::role_of(st, args)?;
                let v = Self::view(st, &role, Part::Marks).await?;
                let png = v.marked.as_deref().ok_or("this server draws no marks")?;
                let text = format!("{}\n{}", scale_note(&v), som::list(&v.elements));
                let mut out = vec![ContentBlock::text(text), image_block(png)?];
                out.extend(video_blocks(&v)?);
                Ok(out)
            }
            "ui_tree" => {
                let role = Self::role_of(st, args)?;
                let v = Self::view(st, &role, Part::Tree).await?;
                let (fx, fy) = match st.scale.get(&role) {
                    Some(s) => *s,
                    None => scale_of(&Self::view(st, &role, Part::Screenshot).await?),
                };
                Ok(vec![ContentBlock::text(format!(
                    "{role}: bounds are screen pixels; actions take screenshot pixels: divide x by {fx:.4} and y by {fy:.4}\n{}",
                    v.tree_text.unwrap_or_else(|| "(no tree)".into())
                ))])
            }
            "list_tasks" => Ok(vec![ContentBlock::text(
                st.session
                    .tasks()
                    .map(|t| format!("{}: {}", t.id, t.instruction))
                    .collect::<Vec<_>>()
                    .join("\n"),
            )]),
            "start_task" => {
                let id = args
                    .get("task")
                    .and_then(Value::as_str)
                    .ok_or("start_task needs `task`, a task id (list_tasks)")?;
                let seed = match args.get("seed") {
                    None | Some(Value::Null) => 0,
                    Some(v) => v.as_u64().ok_or("seed is a whole number, 0 or more")?,
                };
                st.last = None;
                st.free_marks.clear();
                let now = st
                    .session
                    .start(id, seed)
                    .await
                    .map_err(|e| e.to_string())?;
                let instruction = st
                    .session
                    .tasks()
                    .find(|t| t.id == id)
                    .map(|t| t.instruction.clone())
                    .unwrap_or_default();
                let text = Self::settle(st, now);
                let api = Self::api_of(st, id);
                Ok(vec![ContentBlock::text(format!(
                    "started task {id}: {instruction}\n{text}{api}"
                ))])
            }
            "task_status" => Ok(vec![ContentBlock::text(
                match (st.session.running(), &st.last, &st.ended) {
                    (Some(t), Some(obs), _) => format!(
                        "task {}: {}\nactions taken: {}\n{}{}",
                        t.id,
                        t.instruction,
                        obs.step,
                        checkpoints_text(obs),
                        api_text(&episode::api_tools(&st.session.observation(), t)),
                    ),
                    (_, _, Some(rec)) => ended_text(rec),
                    _ => "no task has run: start one with start_task".into(),
                },
            )]),
            "finish_task" => {
                if st.session.running().is_none() {
                    return Err("no task is running".into());
                }
                let text = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
                let actions = match args.get("outcome").and_then(Value::as_str) {
                    Some("complete") => vec![AgentAction::Complete],
                    // The answer, then done: finishing ends the task whatever the answer.
                    Some("answer") => vec![
                        AgentAction::Submit {
                            answer: text("answer"),
                        },
                        AgentAction::Complete,
                    ],
                    Some("infeasible") => vec![AgentAction::Infeasible {
                        reason: text("reason"),
                    }],
                    _ => return Err("outcome is complete, answer or infeasible".into()),
                };
                let now = st
                    .session
                    .step(crate::agent::Decision {
                        actions,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(vec![ContentBlock::text(Self::settle(st, now))])
            }
            API if self.tools.iter().any(|t| t.name == API) => Self::api(st, args).await,
            action => self.act(st, action, args).await,
        }
    }

    /// The API tools a task offers here, as text (none without `--tools`).
    fn api_of(st: &State, id: &str) -> String {
        st.session
            .tasks()
            .find(|t| t.id == id)
            .map(|t| api_text(&episode::api_tools(&st.session.observation(), t)))
            .unwrap_or_default()
    }

    /// A call of one of the running task's API tools: an action of the task run, run by
    /// the role that declares the tool; its status and output come back as feedback.
    async fn api(st: &mut State, args: &JsonObject) -> Answer {
        if st.session.running().is_none() {
            return Err(
                "API tools belong to a task: start one with start_task (it lists its tools)".into(),
            );
        }
        let name = args
            .get("name")
            .and_then(Value::as_str)
            .ok_or("api needs `name`, the API tool's name (start_task lists them)")?;
        let name = name.strip_prefix(actions::API_PREFIX).unwrap_or(name);
        let arguments = match args.get("arguments") {
            None | Some(Value::Null) => BTreeMap::new(),
            Some(Value::Object(m)) => m.clone().into_iter().collect(),
            Some(other) => {
                return Err(format!(
                    "api: `arguments` is an object of parameters, got {other}"
                ));
            }
        };
        let action = AgentAction::Tool {
            name: name.to_owned(),
            arguments,
        };
        let described = action.describe();
        let now = st.session.act(action).await.map_err(|e| e.to_string())?;
        Ok(vec![ContentBlock::text(format!(
            "{described}: {}",
            Self::settle(st, now)
        ))])
    }

    /// An agent action: into the running task, or straight to the desktop without one.
    async fn act(&self, st: &mut State, name: &str, args: &JsonObject) -> Answer {
        if !self.tools.iter().any(|t| t.name == name) {
            return Err(
                if actions::tools(st.session.platforms())
                    .iter()
                    .any(|t| t.name == name)
                {
                    format!(
                        "{name}: actions are off; this server observes only (start it with --allow-actions)"
                    )
                } else if name == API || name.starts_with(actions::API_PREFIX) {
                    format!(
                        "{name}: API tools are off on this server (start it with --tools to offer the tools tasks declare)"
                    )
                } else {
                    format!("there is no tool '{name}'")
                },
            );
        }
        let value = Value::Object(args.clone());
        if st.session.running().is_some() {
            let action = actions::parse(name, &value, &st.session.roles()).map_err(|e| e.0)?;
            let described = action.describe();
            let action = Self::on_screen(st, action).await?;
            let now = st.session.act(action).await.map_err(|e| e.to_string())?;
            return Ok(vec![ContentBlock::text(format!(
                "{described}: {}",
                Self::settle(st, now)
            ))]);
        }
        let action = actions::parse(name, &value, st.session.platforms()).map_err(|e| e.0)?;
        let action = Self::on_screen(st, action).await?;
        st.session.act_free(&action, &st.free_marks).await?;
        Ok(vec![ContentBlock::text(format!(
            "{}: done (no task is running: nothing is scored)",
            action.describe()
        ))])
    }

    /// Keeps what a task run's step came to; a line about it.
    fn settle(st: &mut State, now: Now) -> String {
        match now {
            Now::Act(obs) => {
                let mut text = format!("actions taken: {}", obs.step);
                if !obs.feedback.is_empty() {
                    text.push_str(&format!("\nfeedback: {}", obs.feedback.join("; ")));
                }
                st.last = Some(*obs);
                text
            }
            Now::Ended(rec, last) => {
                st.last = None;
                // Element numbers from before the task mean nothing now.
                st.free_marks.clear();
                let mut text = ended_text(&rec);
                // What the last actions said (an API tool's output) is in the final view.
                if let Some(obs) = last.filter(|o| !o.feedback.is_empty()) {
                    text.push_str(&format!("\nfeedback: {}", obs.feedback.join("; ")));
                }
                st.ended = Some(*rec);
                text
            }
        }
    }
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("pincer", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "pincer: desktops and benchmark tasks. list_tasks, start_task, then observe and act; finish_task scores the run. Without a task, actions (if allowed) are not scored.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let started = Instant::now();
        let answer = self.call(&request.name, &args).await;
        let summary = match &answer {
            Ok(content) => content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.chars().take(300).collect()))
                .collect::<Vec<String>>()
                .join(" | "),
            Err(e) => e.clone(),
        };
        {
            let mut st = self.state.lock().await;
            let line = json!({
                "at_ms": crate::clock::unix_ms(),
                "task": st.session.running().map(|t| t.id.clone()),
                "step": st.last.as_ref().map(|o| o.step),
                "tool": request.name,
                "arguments": args,
                "ok": answer.is_ok(),
                "summary": summary,
                "ms": started.elapsed().as_secs_f64() * 1000.0,
            });
            if let Err(e) = st.log.write(&line) {
                eprintln!("pincer mcp: writing the call log: {e}");
            }
        }
        Ok(match answer {
            Ok(content) => CallToolResult::success(content),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(e)]),
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A screen-sized picture with fine grain, which PNG cannot squeeze under 1 MiB.
    fn grainy(width: u32, height: u32) -> Vec<u8> {
        crate::picture::png_rgba(width, height, |x, y| {
            let n = (x.wrapping_mul(2_654_435_761) ^ y.wrapping_mul(40_503)).rotate_left(x % 13);
            let g = ((x + y) / 8) as u8;
            [
                g.wrapping_add((n & 0x3f) as u8),
                g,
                g.wrapping_add((n >> 8 & 0x3f) as u8),
                255,
            ]
        })
    }

    #[test]
    fn images_fit_what_clients_take() {
        let small = crate::picture::png_rgba(64, 32, |_, _| [1, 2, 3, 255]);
        assert_eq!(fit_image(&small).unwrap(), (small.clone(), "image/png"));

        let big = grainy(1568, 882);
        assert!(
            big.len() > MAX_IMAGE_BYTES,
            "the test picture is {} bytes",
            big.len()
        );
        let (fitted, mime) = fit_image(&big).unwrap();
        assert_eq!(mime, "image/jpeg");
        assert!(fitted.len() <= MAX_IMAGE_BYTES && fitted.starts_with(&[0xff, 0xd8]));
    }

    #[test]
    fn action_tools_are_listed_only_when_allowed() {
        let roles: BTreeMap<String, Platform> = [("desktop".to_owned(), Platform::Linux)].into();
        let names = |allow| -> Vec<String> {
            tools(&roles, allow, false)
                .into_iter()
                .map(|t| t.name.to_string())
                .collect()
        };
        let observe_only = names(false);
        assert!(observe_only.contains(&"screenshot".to_owned()));
        assert!(!observe_only.contains(&"click".to_owned()));
        let all = names(true);
        for t in [
            "click", "type", "key", "hotkey", "scroll", "drag", "move", "wait",
        ] {
            assert!(all.contains(&t.to_owned()), "{t} missing from {all:?}");
        }
        // Ending a task is finish_task's; nothing reaches setup, exec, files or a shell.
        for t in [
            "complete",
            "submit",
            "infeasible",
            "exec",
            "launch",
            "file",
            "setup",
        ] {
            assert!(!all.contains(&t.to_owned()), "{t} listed");
        }
        assert!(!all.contains(&API.to_owned()), "api listed without --tools");
        let with_api: Vec<String> = tools(&roles, false, true)
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        assert!(with_api.contains(&API.to_owned()), "{with_api:?}");
        assert!(!with_api.contains(&"click".to_owned()), "{with_api:?}");
    }
}
