//! Windows on GNOME Wayland, through pincer's GNOME Shell extension
//! (`pincer_shared::gnome_extension`, installed by `pincer-agent install` and by `pincer desktop up --session
//! wayland`): it exports `dev.pincer.Shell.Windows` on the session bus, since GNOME Shell
//! refuses its own window list (`Introspect.GetWindows`) to other programs. `List` gives
//! each window's id, title, process, class, frame and buffer rectangles; `Apply` activates,
//! closes, minimizes, maximizes, restores or places one. Each operation waits, bounded,
//! until the list shows it.

use super::Origin;
use pincer_shared::WireError;
use pincer_shared::observe::Rect;
use pincer_shared::probe::WindowInfo;
use pincer_shared::setup::WindowOp;
use serde::Deserialize;
use std::time::{Duration, Instant};

/// The extension's bus name, object and interface.
const NAME: &str = pincer_shared::gnome_extension::BUS_NAME;
const PATH: &str = "/dev/pincer/Shell";
const INTERFACE: &str = "dev.pincer.Shell.Windows";
/// How long GNOME Shell may take to answer.
const ANSWER: Duration = Duration::from_secs(10);
const SETTLE_LIMIT: Duration = Duration::from_secs(2);
const SETTLE_POLL: Duration = Duration::from_millis(20);
/// Looks in a row with the same frame after which a window counts as settled.
const STEADY_LOOKS: u32 = 3;

/// A window as the extension lists it.
#[derive(Debug, Clone, Deserialize)]
struct Listed {
    id: u64,
    title: String,
    pid: Option<u32>,
    class: Option<String>,
    instance: Option<String>,
    /// The window's frame on the screen (what a person sees as the window).
    frame: Rect,
    /// The surface, shadows included: the origin of the coordinates its toolkit reports.
    buffer: Rect,
    /// A Wayland client (an Xwayland one reports screen positions itself).
    wayland: bool,
    focused: bool,
    minimized: bool,
    maximized: bool,
}

impl Listed {
    fn info(&self) -> WindowInfo {
        WindowInfo {
            id: self.id,
            title: self.title.clone(),
            pid: self.pid,
            process_name: self.pid.and_then(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .ok()
                    .map(|c| c.trim_end().to_owned())
            }),
            class: self.class.clone(),
            instance: self.instance.clone(),
            bounds: Some(self.frame),
        }
    }
}

/// A connection to the extension on the session bus, with a runtime of its own.
#[derive(Debug)]
pub(crate) struct Shell {
    /// Taken only by `drop`.
    rt: Option<tokio::runtime::Runtime>,
    conn: zbus::Connection,
}

impl Drop for Shell {
    /// Without waiting: the agent may drop it on a thread that drives its own runtime.
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn failed(e: impl std::fmt::Display) -> WireError {
    WireError::Display {
        message: format!("pincer's GNOME Shell extension ({NAME}): {e}"),
    }
}

impl Shell {
    /// The extension, if the session bus has it; `Err` says why not.
    pub(crate) fn find() -> Result<Self, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start a runtime: {e}"))?;
        let found = off_runtime(|| {
            rt.block_on(async {
                let conn = zbus::Connection::session()
                    .await
                    .map_err(|e| format!("cannot reach the session's D-Bus: {e}"))?;
                let dbus = zbus::fdo::DBusProxy::new(&conn)
                    .await
                    .map_err(|e| e.to_string())?;
                let name = NAME.try_into().map_err(|e| format!("{e}"))?;
                if dbus.name_has_owner(name).await.map_err(|e| e.to_string())? {
                    Ok(conn)
                } else {
                    Err(format!(
                        "the session bus has no {NAME} (pincer's GNOME Shell extension: \
                     `pincer-agent install` installs and enables it; GNOME Shell loads it \
                     at the next login)"
                    ))
                }
            })
        });
        match found {
            Ok(conn) => Ok(Self { rt: Some(rt), conn }),
            Err(missing) => {
                rt.shutdown_background();
                Err(missing)
            }
        }
    }

    fn call<R>(
        &self,
        method: &str,
        args: &(impl serde::Serialize + zbus::zvariant::DynamicType + Sync),
    ) -> Result<R, WireError>
    where
        R: for<'d> zbus::zvariant::DynamicDeserialize<'d> + Send,
    {
        let Some(rt) = &self.rt else {
            return Err(failed("the connection is closed"));
        };
        off_runtime(|| {
            rt.block_on(async {
                let call = self
                    .conn
                    .call_method(Some(NAME), PATH, Some(INTERFACE), method, args);
                let reply = tokio::time::timeout(ANSWER, call)
                    .await
                    .map_err(|_| {
                        failed(format!(
                            "no answer to {method} within {} s",
                            ANSWER.as_secs()
                        ))
                    })?
                    .map_err(failed)?;
                reply.body().deserialize::<R>().map_err(failed)
            })
        })
    }

    fn listed(&self) -> Result<Vec<Listed>, WireError> {
        let json: String = self.call("List", &())?;
        serde_json::from_str(&json).map_err(failed)
    }

    /// Every top-level window, bottom to top.
    pub(crate) fn list(&mut self) -> Result<Vec<WindowInfo>, WireError> {
        Ok(self.listed()?.iter().map(Listed::info).collect())
    }

    /// The focused window, if a window has the focus.
    pub(crate) fn active(&mut self) -> Result<Option<WindowInfo>, WireError> {
        Ok(self.listed()?.iter().find(|w| w.focused).map(Listed::info))
    }

    /// Where each Wayland window's surface is on the screen.
    pub(crate) fn origins(&mut self) -> Result<Vec<Origin>, WireError> {
        Ok(self
            .listed()?
            .into_iter()
            .filter(|w| w.wayland)
            .filter_map(|w| {
                Some(Origin {
                    pid: w.pid?,
                    title: w.title,
                    x: w.buffer.x,
                    y: w.buffer.y,
                })
            })
            .collect())
    }

    /// Applies `op` to window `id` and waits until the list shows it.
    pub(crate) fn apply(&mut self, id: u64, op: WindowOp) -> Result<(), WireError> {
        let (name, r) = match op {
            WindowOp::Activate => ("activate", Rect::default()),
            WindowOp::Maximize => ("maximize", Rect::default()),
            WindowOp::Restore => ("restore", Rect::default()),
            WindowOp::Minimize => ("minimize", Rect::default()),
            WindowOp::Close => ("close", Rect::default()),
            WindowOp::Geometry(r) => ("geometry", r),
        };
        let int = |v: u32| i32::try_from(v).unwrap_or(i32::MAX);
        let found: bool = self.call("Apply", &(id, name, r.x, r.y, int(r.width), int(r.height)))?;
        if !found {
            return Err(not_found(id));
        }
        let until = Instant::now() + SETTLE_LIMIT;
        let (mut last, mut steady) = (None, 0);
        loop {
            let window = self.listed()?.into_iter().find(|w| w.id == id);
            let frame = window.as_ref().map(|w| w.frame);
            steady = if frame == last { steady + 1 } else { 1 };
            last = frame;
            let shows = match (op, &window) {
                (WindowOp::Close, window) => window.is_none(),
                (_, None) => return Err(not_found(id)),
                (WindowOp::Activate, Some(w)) => w.focused && !w.minimized,
                (WindowOp::Maximize, Some(w)) => w.maximized,
                (WindowOp::Restore, Some(w)) => !w.maximized && !w.minimized,
                (WindowOp::Minimize, Some(w)) => w.minimized,
                (WindowOp::Geometry(r), Some(w)) => w.frame == r,
            };
            if shows && (window.is_none() || steady >= STEADY_LOOKS) {
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
}

/// Runs `f` on a thread of its own: the agent asks for windows from its async handshake
/// and from its blocking pool, where another runtime cannot block.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(f)
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

fn not_found(id: u64) -> WireError {
    WireError::NotFound {
        path: format!("window {id}"),
    }
}
