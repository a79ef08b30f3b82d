//! Windows on sway, through its IPC socket (`$SWAYSOCK`, or the socket sway makes in the
//! runtime directory): the tree gives each window's id, title, process, app id and
//! position on the screen; commands addressed by `[con_id=N]` activate, close, fill the
//! screen, move and resize. Each operation waits, bounded, until the tree shows it.
//!
//! sway has no minimized state: minimizing moves a window to the scratchpad (hidden, still
//! listed), and activating it puts it back among the tiled windows.

use super::Origin;
use pincer_shared::WireError;
use pincer_shared::observe::Rect;
use pincer_shared::probe::WindowInfo;
use pincer_shared::setup::WindowOp;
use serde_json::Value;
use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const MAGIC: &[u8; 6] = b"i3-ipc";
/// The workspace that holds sway's scratchpad.
const SCRATCHPAD: &str = "__i3_scratch";
const RUN_COMMAND: u32 = 0;
const GET_TREE: u32 = 4;
/// How long the compositor may take to answer.
const ANSWER: Duration = Duration::from_secs(10);
/// How long an operation waits for its effect to show.
const SETTLE_LIMIT: Duration = Duration::from_secs(2);
const SETTLE_POLL: Duration = Duration::from_millis(20);
/// Looks in a row with the same rectangle after which a window counts as settled: sway
/// lays windows out once their apps answered, after the command's reply.
const STEADY_LOOKS: u32 = 3;
/// Largest reply read (a tree of hundreds of windows is far smaller).
const MAX_REPLY: usize = 64 << 20;

/// sway's IPC socket for this session: `$SWAYSOCK`, else the one sway made for this user
/// in `$XDG_RUNTIME_DIR` (`sway-ipc.<uid>.<pid>.sock`).
pub(crate) fn socket() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SWAYSOCK").filter(|p| !p.is_empty()) {
        return Some(path.into());
    }
    let runtime = PathBuf::from(std::env::var_os("XDG_RUNTIME_DIR")?);
    // SAFETY: getuid has no preconditions.
    let prefix = format!("sway-ipc.{}.", unsafe { libc::getuid() });
    std::fs::read_dir(&runtime).ok()?.find_map(|entry| {
        let name = entry.ok()?.file_name().into_string().ok()?;
        (name.starts_with(&prefix) && name.ends_with(".sock")).then(|| runtime.join(name))
    })
}

/// A connection to sway's IPC, made on first use and again after it broke.
#[derive(Debug)]
pub(crate) struct Sway {
    path: PathBuf,
    stream: Option<UnixStream>,
}

fn lost(e: impl std::fmt::Display) -> WireError {
    WireError::Display {
        message: format!("sway's IPC socket: {e}"),
    }
}

impl Sway {
    pub(crate) fn new(path: PathBuf) -> Self {
        Self { path, stream: None }
    }

    /// Sends one message and reads its reply; a failed exchange drops the connection.
    fn request(&mut self, kind: u32, payload: &str) -> Result<Value, WireError> {
        let result = self.exchange(kind, payload);
        if result.is_err() {
            self.stream = None;
        }
        result
    }

    fn exchange(&mut self, kind: u32, payload: &str) -> Result<Value, WireError> {
        let stream = match &mut self.stream {
            Some(stream) => stream,
            slot @ None => {
                let stream = UnixStream::connect(&self.path)
                    .map_err(|e| lost(format!("{}: {e}", self.path.display())))?;
                stream.set_read_timeout(Some(ANSWER)).map_err(lost)?;
                stream.set_write_timeout(Some(ANSWER)).map_err(lost)?;
                slot.insert(stream)
            }
        };
        let len = u32::try_from(payload.len()).map_err(lost)?;
        let mut message = MAGIC.to_vec();
        message.extend(len.to_ne_bytes());
        message.extend(kind.to_ne_bytes());
        message.extend(payload.as_bytes());
        stream.write_all(&message).map_err(lost)?;
        let mut header = [0u8; 14];
        stream.read_exact(&mut header).map_err(lost)?;
        if &header[..6] != MAGIC {
            return Err(lost("the reply is not sway IPC"));
        }
        let word = |at: usize| {
            u32::from_ne_bytes([header[at], header[at + 1], header[at + 2], header[at + 3]])
        };
        let (len, replied) = (word(6) as usize, word(10));
        if replied != kind || len > MAX_REPLY {
            return Err(lost(format!(
                "an unexpected reply (type {replied}, {len} bytes)"
            )));
        }
        let mut body = vec![0; len];
        stream.read_exact(&mut body).map_err(lost)?;
        serde_json::from_slice(&body).map_err(lost)
    }

    /// Every window, tiled ones first, then floating ones, each in the tree's order.
    pub(crate) fn list(&mut self) -> Result<Vec<WindowInfo>, WireError> {
        let tree = self.request(GET_TREE, "")?;
        let mut windows = Vec::new();
        walk(&tree, None, &mut |node, _| {
            if let Some(window) = window(node) {
                windows.push(window);
            }
        });
        Ok(windows)
    }

    /// The focused window, if a window has the focus.
    pub(crate) fn active(&mut self) -> Result<Option<WindowInfo>, WireError> {
        let tree = self.request(GET_TREE, "")?;
        let mut active = None;
        walk(&tree, None, &mut |node, _| {
            if node["focused"] == true
                && let Some(window) = window(node)
            {
                active = Some(window);
            }
        });
        Ok(active)
    }

    /// The screen (all outputs) and where each Wayland window's content is on it: its
    /// process, title and the content's top-left corner (Xwayland's windows are left out:
    /// X11 apps report positions on the screen themselves).
    pub(crate) fn placement(&mut self) -> Result<(Rect, Vec<Origin>), WireError> {
        let tree = self.request(GET_TREE, "")?;
        let screen = rect(&tree["rect"]).ok_or_else(|| lost("the tree has no screen"))?;
        let mut origins = Vec::new();
        walk(&tree, None, &mut |node, _| {
            let (Some(info), Some(frame)) = (window(node), rect(&node["rect"])) else {
                return;
            };
            if node["shell"] == "xwayland" {
                return;
            }
            let content = rect(&node["window_rect"]).unwrap_or_default();
            if let Some(pid) = info.pid {
                origins.push(Origin {
                    pid,
                    title: info.title,
                    x: frame.x + content.x,
                    y: frame.y + content.y,
                });
            }
        });
        Ok((screen, origins))
    }

    /// Applies `op` to window `id` and waits until the tree shows it.
    pub(crate) fn apply(&mut self, id: u64, op: WindowOp) -> Result<(), WireError> {
        let target = format!("[con_id={id}]");
        let Some((_, workspace)) = self.find(id)? else {
            return Err(not_found(id));
        };
        let commands = match op {
            WindowOp::Activate if workspace == SCRATCHPAD => {
                format!("{target} focus; {target} floating disable")
            }
            WindowOp::Activate => format!("{target} focus"),
            WindowOp::Maximize => format!("{target} fullscreen enable"),
            WindowOp::Restore => format!("{target} fullscreen disable"),
            WindowOp::Minimize => format!("{target} move scratchpad"),
            WindowOp::Close => format!("{target} kill"),
            WindowOp::Geometry(r) => format!(
                "{target} floating enable; {target} resize set {} {}; \
                 {target} move absolute position {} {}",
                r.width, r.height, r.x, r.y
            ),
        };
        let replies = self.request(RUN_COMMAND, &commands)?;
        for reply in replies.as_array().into_iter().flatten() {
            if reply["success"] != true {
                let error = reply["error"].as_str().unwrap_or("no reason given");
                if error.contains("No matching node") {
                    return Err(not_found(id));
                }
                return Err(WireError::Unsupported {
                    what: format!("window management: sway refused `{commands}`: {error}"),
                });
            }
        }
        let until = Instant::now() + SETTLE_LIMIT;
        let (mut last, mut steady) = (None, 0);
        loop {
            let found = self.find(id)?;
            let now = found.as_ref().and_then(|(n, _)| rect(&n["rect"]));
            steady = if now == last { steady + 1 } else { 1 };
            last = now;
            let shows = match (op, &found) {
                (WindowOp::Close, found) => found.is_none(),
                (_, None) => return Err(not_found(id)),
                (WindowOp::Activate, Some((n, w))) => n["focused"] == true && w != SCRATCHPAD,
                (WindowOp::Maximize, Some((n, _))) => n["fullscreen_mode"] == 1,
                (WindowOp::Restore, Some((n, _))) => n["fullscreen_mode"] == 0,
                (WindowOp::Minimize, Some((_, w))) => w == SCRATCHPAD,
                (WindowOp::Geometry(r), Some((n, _))) => rect(&n["rect"]) == Some(r),
            };
            if shows && (found.is_none() || steady >= STEADY_LOOKS) {
                return Ok(());
            }
            if Instant::now() >= until {
                return Err(WireError::Timeout {
                    after_ms: SETTLE_LIMIT.as_millis() as u64,
                });
            }
            std::thread::sleep(SETTLE_POLL);
        }
    }

    /// Window `id`'s node in the tree and its workspace's name, if it is a window.
    fn find(&mut self, id: u64) -> Result<Option<(Value, String)>, WireError> {
        let tree = self.request(GET_TREE, "")?;
        let mut found = None;
        walk(&tree, None, &mut |node, workspace| {
            if node["id"] == id && window(node).is_some() {
                found = Some((node.clone(), workspace.unwrap_or_default().to_owned()));
            }
        });
        Ok(found)
    }
}

fn not_found(id: u64) -> WireError {
    WireError::NotFound {
        path: format!("window {id}"),
    }
}

/// Calls `visit` on `node` and every node under it (tiled before floating), with the
/// name of the workspace it is on.
fn walk<'a>(
    node: &'a Value,
    workspace: Option<&'a str>,
    visit: &mut impl FnMut(&Value, Option<&str>),
) {
    let workspace = if node["type"] == "workspace" {
        node["name"].as_str()
    } else {
        workspace
    };
    visit(node, workspace);
    for key in ["nodes", "floating_nodes"] {
        for child in node[key].as_array().into_iter().flatten() {
            walk(child, workspace, visit);
        }
    }
}

/// `node` as a window, if it is one (a container with a client: a Wayland app id or X11
/// window properties).
fn window(node: &Value) -> Option<WindowInfo> {
    let pid = node["pid"].as_u64().and_then(|p| u32::try_from(p).ok());
    let x11 = &node["window_properties"];
    let app_id = node["app_id"].as_str();
    if pid.is_none() || (app_id.is_none() && x11.is_null()) {
        return None;
    }
    let text = |v: &Value| v.as_str().map(str::to_owned);
    Some(WindowInfo {
        id: node["id"].as_u64()?,
        title: node["name"].as_str().unwrap_or_default().to_owned(),
        pid,
        process_name: pid.and_then(|p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .ok()
                .map(|c| c.trim_end().to_owned())
        }),
        class: text(&x11["class"]).or_else(|| app_id.map(str::to_owned)),
        instance: text(&x11["instance"]).or_else(|| app_id.map(str::to_owned)),
        bounds: rect(&node["rect"]),
    })
}

fn rect(v: &Value) -> Option<Rect> {
    let int = |k: &str| v[k].as_i64();
    let size = |k: &str| v[k].as_u64().and_then(|n| u32::try_from(n).ok());
    Some(Rect {
        x: i32::try_from(int("x")?).ok()?,
        y: i32::try_from(int("y")?).ok()?,
        width: size("width")?,
        height: size("height")?,
    })
}
